"""A Python program that allocates device memory through ctypes and imports no
framework: the bridge must not import one."""
import ctypes
import json
import sys

rt = ctypes.CDLL("libcudart.so.13")
rt.cudaMalloc.argtypes = (ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t)
p = ctypes.c_void_p()
rt.cudaMalloc(ctypes.byref(p), 1 << 20)
for i in range(3):
    ctypes.CDLL(None).tensorleak_mark(b"step")
print(json.dumps(sorted(m for m in ("torch", "jax", "jaxlib", "cupy", "rmm") if m in sys.modules)))
