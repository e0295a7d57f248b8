"""A stand-in tensorleak package for bridge_boot_test.py: placed before the
real one on sys.path, so the library's start of the bridge imports it."""
