"""Two lines of one loop allocate through ctypes in turn, at a high rate,
while a SIGALRM handler in sigcapture.c, each time it interrupts one of
tensorleak's captures, frees a bogus pool pointer and hands out a pool
block: captures begun inside a capture in flight on the same thread.  Every
allocation is kept, so the report shows each under the stack it was given.
Run by test_pyframes.py under libtensorleak.so on the simulated runtime;
prints the counts.

    signal_capture_app.py ITERATIONS USEC
"""
import ctypes
import os
import subprocess
import sys

rt = ctypes.CDLL(os.environ.get("TL_CUDART", "libcudart.so.13"))
ticker = ctypes.CDLL(os.environ["TL_SIGCAPTURE"])
ticker.sigcapture_stop.restype = ctypes.c_long
ticker.sigcapture_acted.restype = ctypes.c_long
kept = []
# tensorleak's capture code: where a tick makes the handler act.  Only
# functions run wholly inside a capture: not tl_stack_site or
# tl_stack_capture, whose first and last instructions are outside it (a tick
# on the first instruction is even symbolized as the byte before it).
CAPTURE = {"capture_native", "capture_unwind", "walk_cfi", "walk_fp",
           "walk_fp_records", "walk_fp_to_entry", "tl_cfi_walk", "run_cfa", "encoded", "sleb",
           "tl_py_read", "tl_py_merge", "tl_py_last", "tl_py_first_eval", "code_tag"}


def capture_functions(lib):
    out = subprocess.run(["nm", "--defined-only", "-S", lib], capture_output=True, text=True, check=True).stdout
    found = {}
    for line in out.splitlines():
        f = line.split()
        if len(f) == 4 and f[2] in "tT" and f[3].split(".")[0] in CAPTURE:
            found[f[3]] = (int(f[0], 16), int(f[1], 16))
    return found


def allocate(size):
    p = ctypes.c_void_p()
    rt.cudaMalloc(ctypes.byref(p), size)  # SIG-ALLOC-LINE
    kept.append(p.value)


def main():
    iterations, usec = int(sys.argv[1]), int(sys.argv[2])
    found = capture_functions(os.environ["LD_PRELOAD"])
    n = len(found)
    offsets = (ctypes.c_ulong * n)(*[v[0] for v in found.values()])
    sizes = (ctypes.c_ulong * n)(*[v[1] for v in found.values()])
    if ticker.sigcapture_start(usec, n, offsets, sizes) != 0:
        sys.exit("no timer")
    for _ in range(iterations):
        allocate(512)  # SIG-A-LINE
        allocate(1536)  # SIG-B-LINE
    ticks = ticker.sigcapture_stop()
    print(f"iterations {iterations} ticks {ticks} acted {ticker.sigcapture_acted()} "
          f"distinct {len(set(kept))} functions {n}")


if __name__ == "__main__":
    main()  # SIG-MAIN-LINE
