"""A Python program whose allocation goes through a native library 40
frames deep before reaching the CUDA runtime (PyTorch's shape), run by
test_pyframes.py under libtensorleak.so on the simulated runtime.

    deep_native_app.py PATH_TO_LIBDEEP_NATIVE
"""
import ctypes
import os
import sys


def make_tensor(lib, rt):
    lib.deep_native_alloc(40, ctypes.cast(rt.cudaMalloc, ctypes.c_void_p), ctypes.c_size_t(6 << 20))  # DEEP-LINE


def serve(lib, rt):
    make_tensor(lib, rt)  # SERVE-LINE


def main():
    rt = ctypes.CDLL(os.environ.get("TL_CUDART", "libcudart.so.13"))
    lib = ctypes.CDLL(sys.argv[1])
    lib.deep_native_alloc.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t]
    serve(lib, rt)  # MAIN-LINE


if __name__ == "__main__":
    main()  # MODULE-LINE
