"""Holds the started backends, as jax._src.xla_bridge does (empty until the
program first touches a device)."""
_backends = {}
