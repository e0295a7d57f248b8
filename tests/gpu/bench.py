#!/usr/bin/env python3
"""PyTorch loops for measuring tensorleak's overhead on a GPU (tests/gpu/run.sh).

Two workloads:

  infer  a decoder-style step: a matmul, an activation and a freshly allocated
         per-step buffer.  Under the native caching allocator almost no step reaches
         the driver (tensorleak should cost nothing measurable); under
         backend:cudaMallocAsync every tensor is a cuMemAllocAsync that tensorleak hooks.
  alloc  allocation-bound: torch.empty + del in a loop.  Run it with
         PYTORCH_NO_CUDA_MEMORY_CACHING=1, where each iteration is exactly one real
         cudaMalloc + cudaFree pair (checked: a live tensor leaves memory_reserved() at
         0, since the uncached path bypasses the cache), so the per-iteration time is the driver's cost of a pair plus tensorleak's.

Method (one process per tool, "without" always first, would read
process-to-process noise as a 25 % speed-up): the loop runs
for --warmup-s seconds first (kernels, cuBLAS, the allocator, and the GPU's clocks
ramping up from idle), then --passes timed passes of --steps steps each; every pass
time is printed, run.sh alternates processes with and without tensorleak in ABBA
order and compare.py reports medians with their spread.  Prints one line:

    TL_BENCH {"workload": ..., "times": [seconds per pass], "steps": ..., ...}
"""
import argparse
import json
import os
import statistics
import sys
import time


def sm_clock():
    """The SM clock in MHz now (NVML), or None: shows whether clocks were ramped up."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            h = pynvml.nvmlDeviceGetHandleByIndex(0)
            return int(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM))
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no NVML binding or no permission: the figure is optional
        return None


def make_infer(torch, dim, batch):
    dev = "cuda"
    gen = torch.Generator(device=dev).manual_seed(0)
    w = torch.randn(dim, dim, device=dev, dtype=torch.float16, generator=gen) / dim ** 0.5
    x0 = torch.randn(batch, dim, device=dev, dtype=torch.float16, generator=gen)

    def run(steps):
        x = x0
        for i in range(steps):
            y = torch.relu(x @ w)  # matmul + activation: two new tensors
            t = torch.empty((i % 8 + 1) * 4096, device=dev, dtype=torch.uint8)  # a per-step buffer
            x = y + t[:1].float().half() * 0  # keeps t alive into the next op
        torch.cuda.synchronize()
        return float(x.float().sum().item())

    return run


def make_alloc(torch, nbytes):
    def run(steps):
        for _ in range(steps):
            t = torch.empty(nbytes, device="cuda", dtype=torch.uint8)
            del t
        torch.cuda.synchronize()
        return 0.0

    return run


def uncached(torch, nbytes):
    """True when PyTorch's caching is off: a live tensor leaves the cache empty, because
    the uncached path cudaMallocs it directly (and cudaFrees it on release)."""
    t = torch.empty(nbytes, device="cuda", dtype=torch.uint8)
    off = torch.cuda.memory_reserved() == 0
    del t
    return off


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", choices=("infer", "alloc"), default="infer")
    ap.add_argument("--steps", type=int, default=None,
                    help="steps per timed pass (infer 1500, about 0.15 s on the H200; alloc 5000, about 55 ms)")
    ap.add_argument("--passes", type=int, default=7, help="timed passes")
    ap.add_argument("--warmup-s", type=float, default=1.5, help="seconds of untimed steps first")
    ap.add_argument("--dim", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--alloc-bytes", type=int, default=1 << 20)
    args = ap.parse_args()
    if args.steps is None:
        args.steps = 1500 if args.workload == "infer" else 5000

    try:
        import torch
    except ImportError as e:
        print("TL_SKIP " + json.dumps({"why": "PyTorch does not import: %s" % e}), flush=True)
        return 0
    if not torch.cuda.is_available():
        print("bench: CUDA is not available", file=sys.stderr)
        return 3
    if args.workload == "infer":
        run = make_infer(torch, args.dim, args.batch)
    else:
        run = make_alloc(torch, args.alloc_bytes)

    t_end = time.perf_counter() + args.warmup_s
    warm = 0
    while True:  # at least two chunks, then until the warm-up time is spent
        run(max(1, args.steps // 4))
        warm += 1
        if warm >= 2 and time.perf_counter() >= t_end:
            break
    clock_start = sm_clock()
    times, check = [], None
    for _ in range(args.passes):
        t0 = time.perf_counter()
        check = run(args.steps)
        times.append(time.perf_counter() - t0)
    print("TL_BENCH " + json.dumps({
        "workload": args.workload, "times": times, "seconds": statistics.median(times),
        "steps": args.steps, "passes": args.passes, "warmup_chunks": warm,
        "uncached": uncached(torch, args.alloc_bytes),
        "sm_clock_mhz": [clock_start, sm_clock()],
        "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
        "no_caching": os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING", "") not in ("", "0"),
        "checksum": check, "pid": os.getpid(),
    }), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
