"""The first CUDA call schedules the bridge's start; the loop after it is
where the pending call runs.  Prints what reached the program."""
import ctypes
import sys

rt = ctypes.CDLL("libcudart.so.13")
rt.cudaMalloc.argtypes = (ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t)
p = ctypes.c_void_p()
try:
    try:
        rt.cudaMalloc(ctypes.byref(p), 1 << 20)
        total = 0
        for i in range(200000):
            total += i
    finally:
        print("finally ran", flush=True)
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit(130)
print("continued", flush=True)
