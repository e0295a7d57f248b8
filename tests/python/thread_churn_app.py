"""Short-lived Python threads, one after another, each allocating and
freeing once: the stack walkers' per-thread state (thread_block.c, ~55 KiB a
thread that captures) must go with each thread.  Prints the growth of the
resident set over the threads, in KiB.

    thread_churn_app.py THREADS
"""
import ctypes
import os
import sys
import threading

rt = ctypes.CDLL(os.environ.get("TL_CUDART", "libcudart.so.13"))
rt.cudaFree.argtypes = [ctypes.c_void_p]


def rss_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def once():
    p = ctypes.c_void_p()
    rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(4096))
    rt.cudaFree(p)


def main():
    n = int(sys.argv[1])
    for _ in range(50):  # warm-up: the allocator's and the interpreter's own caches
        t = threading.Thread(target=once)
        t.start()
        t.join()
    before = rss_kib()
    for _ in range(n):
        t = threading.Thread(target=once)
        t.start()
        t.join()
    print("rss_growth_kib", rss_kib() - before)


if __name__ == "__main__":
    main()
