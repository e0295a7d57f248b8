"""Python workload for bench/run.py: cudaMalloc+cudaFree pairs on the
simulated runtime through ctypes, from a Python call chain `depth` frames
deep (this module's frame, main, and recursion).  Prints one JSON line like
churn.c: CPU ns per pair of the calling thread.

    python3 py_churn.py pairs N depth D
"""
import ctypes
import json
import sys
import time


def churn(rt, n):
    malloc, free = rt.cudaMalloc, rt.cudaFree
    p = ctypes.c_void_p()
    ref = ctypes.byref(p)
    size = ctypes.c_size_t(4096)
    for _ in range(n // 10):  # warm-up: first sight of each stack
        malloc(ref, size)
        free(p)
    t0 = time.thread_time_ns()
    for _ in range(n):
        malloc(ref, size)
        free(p)
    return time.thread_time_ns() - t0


def nest(rt, depth, n):
    if depth > 0:
        return nest(rt, depth - 1, n)
    return churn(rt, n)


def main():
    args = dict(zip(sys.argv[1::2], sys.argv[2::2]))
    n, depth = int(args.get("pairs", 100000)), int(args.get("depth", 30))
    rt = ctypes.CDLL("libcudart.so.13")
    rt.cudaFree.argtypes = [ctypes.c_void_p]
    # main, churn and the module's frame are three of the `depth` frames.
    cpu = nest(rt, depth - 3, n)
    print(json.dumps({"api": "python", "mode": "pairs", "pairs": n, "depth": depth, "cpu_ns": cpu,
                      "cpu_ns_per_pair": cpu / n}))


if __name__ == "__main__":
    main()
