"""Readers of the runtimes' caching allocators, one module per framework.

Each module has `read(module) -> [pool, ...]`, given the framework module the
program itself imported (the bridge looks in sys.modules and never imports
one), and pure translation functions that turn the framework's own answers
(the shapes recorded on an H200 in tests/fixtures/h200-2026-11-30) into pool
rows: dicts with name, kind, device, reserved_bytes, allocated_bytes,
free_bytes, largest_free_block (None when the framework does not say),
segments, peak_*_bytes, framework, and for PyTorch a layout and the Python
sites of live blocks.  Fragmentation is the library's to compute, from the
largest free block and free_bytes, as for every pool (src/families/pools.c).
"""

# (sys.modules name, reader module) in the order their pools are listed.
READERS = ("torch", "jax", "cupy", "rmm")
