"""A Python program that leaks simulated device memory from named functions.

Run under libtensorleak.so with the simulated runtime on LD_LIBRARY_PATH;
test_pyframes.py checks that each leak is reported at this file's lines.
Usage: leaky_app.py MODE where MODE is cdll, pydll, thread, callback,
suppressed, growth or loop.
"""
import ctypes
import os
import sys
import threading

CUDART = os.environ.get("TL_CUDART", "libcudart.so.13")


def allocate_block(rt, size):
    ptr = ctypes.c_void_p()
    rt.cudaMalloc(ctypes.byref(ptr), ctypes.c_size_t(size))  # ALLOC-LINE
    return ptr


def serve_request(rt, size):
    return allocate_block(rt, size)  # SERVE-LINE


def handle_batch(rt, n, size):
    return [serve_request(rt, size) for _ in range(n)]  # BATCH-LINE


def on_callback(rt):
    allocate_block(rt, 3 << 20)  # CALLBACK-LINE


def via_c_library(rt, helper):
    cb_type = ctypes.CFUNCTYPE(None)
    cb = cb_type(lambda: on_callback(rt))  # LAMBDA-LINE
    helper.pyframes_call_back(cb)  # HELPER-LINE


def in_thread(rt):
    handle_batch(rt, 2, 2 << 20)  # THREAD-LINE


def main():
    mode = sys.argv[1]
    if mode == "pydll":
        rt = ctypes.PyDLL(CUDART)
    else:
        rt = ctypes.CDLL(CUDART)
    if mode in ("cdll", "pydll", "suppressed"):
        handle_batch(rt, 4, 1 << 20)  # MAIN-LINE
    elif mode == "thread":
        t = threading.Thread(target=in_thread, args=(rt,), name="worker")
        t.start()
        t.join()
    elif mode == "callback":
        via_c_library(rt, ctypes.CDLL(os.environ["TL_PYCB"]))  # MAIN-CB-LINE
    elif mode == "loop":
        # 200 allocations and frees from one line: one distinct stack.
        for _ in range(200):
            rt.cudaFree(allocate_block(rt, 4096))  # LOOP-LINE
    elif mode == "growth":
        # One block kept per request, a mark after each: growth at this file.
        mark = ctypes.CDLL(None).tensorleak_mark
        for _ in range(6):
            serve_request(rt, 1 << 20)  # GROWTH-LINE
            mark(b"request")


if __name__ == "__main__":
    main()  # MODULE-LINE
