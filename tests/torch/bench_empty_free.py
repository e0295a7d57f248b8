#!/usr/bin/env python3
"""Cost of a torch.empty + free pair on the simulated GPU, with and without
tensorleak (the BENCHMARKS.md row "Real PyTorch: torch.empty + free").

usage: bench_empty_free.py run PAIRS   -- the loop, in the program measured:
           prints the median ns per pair of 9 timed slices of PAIRS/9
       bench_empty_free.py compare PAIRS RUNS  -- RUNS rounds of every
           configuration (untracked `tensorleak sim`; `tensorleak run --sim`
           without and with TENSORLEAK_TORCH_HISTORY=1) in both allocator
           modes (cached, PYTORCH_NO_CUDA_MEMORY_CACHING=1), interleaved in
           one run of this script; prints the medians over the rounds.
$TL_CLI names the CLI (default build/tools/tensorleak).
"""
import ctypes
import os
import statistics
import subprocess
import sys
import time


def run(pairs):
    import torch

    torch.empty(1 << 20, dtype=torch.uint8, device="cuda")  # context and allocator up
    mark = getattr(ctypes.CDLL(None), "tensorleak_mark", None)
    if mark is not None:  # the bridge's first state read: history on where asked
        mark(b"warm")
    for _ in range(1000):
        torch.empty(1 << 20, dtype=torch.uint8, device="cuda")
    per = max(1, pairs // 9)
    slices = []
    for _ in range(9):
        t0 = time.perf_counter_ns()
        for _ in range(per):
            torch.empty(1 << 20, dtype=torch.uint8, device="cuda")
        slices.append((time.perf_counter_ns() - t0) / per)
    print("%.1f" % statistics.median(slices))


def compare(pairs, rounds):
    cli = os.environ.get("TL_CLI", "build/tools/tensorleak")
    base = {k: v for k, v in os.environ.items() if not k.startswith(("TENSORLEAK_", "SIMCUDA_", "PYTORCH_"))
            and k != "LD_PRELOAD"}
    tools = [("untracked", [cli, "sim", "--"], {}),
             ("tensorleak", [cli, "run", "--sim", "--quiet", "-o", "/dev/null", "--"], {}),
             ("tensorleak, history", [cli, "run", "--sim", "--quiet", "-o", "/dev/null", "--"],
              {"TENSORLEAK_TORCH_HISTORY": "1"})]
    modes = [("cached", {}), ("uncached", {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"})]
    got = {}
    for _ in range(rounds):
        for mode, menv in modes:
            for tool, argv, tenv in tools:
                p = subprocess.run(argv + [sys.executable, os.path.abspath(__file__), "run", str(pairs)],
                                   env=dict(base, **menv, **tenv), capture_output=True, text=True, check=True)
                got.setdefault((mode, tool), []).append(float(p.stdout.split()[-1]))
    for mode, _ in modes:
        plain = statistics.median(got[(mode, "untracked")])
        for tool, _, _ in tools:
            v = got[(mode, tool)]
            m = statistics.median(v)
            print("%-8s %-20s median %8.0f ns/pair (runs %s)%s" % (
                mode, tool, m, " ".join("%.0f" % x for x in v),
                "" if tool == "untracked" else "  overhead %+.0f ns" % (m - plain)))


if __name__ == "__main__":
    if sys.argv[1] == "run":
        run(int(sys.argv[2]))
    else:
        compare(int(sys.argv[2]), int(sys.argv[3]))
