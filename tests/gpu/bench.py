#!/usr/bin/env python3
"""Inference-style PyTorch loop for measuring tensorleak's overhead (tests/gpu/run.sh).

Each step is a matmul, an activation and a freshly allocated output, the pattern of
a decoder serving tokens.  Under the native caching allocator almost no step reaches
the driver; under backend:cudaMallocAsync every tensor is a cuMemAllocAsync that
tensorleak hooks, so that mode shows the hook's cost.  Prints one line:

    TL_BENCH {"seconds": median of --reps timed passes, "steps": ..., ...}
"""
import argparse
import json
import os
import statistics
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--dim", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()

    import torch

    if not torch.cuda.is_available():
        print("bench: CUDA is not available", file=sys.stderr)
        return 3
    dev = "cuda"
    gen = torch.Generator(device=dev).manual_seed(0)
    w = torch.randn(args.dim, args.dim, device=dev, dtype=torch.float16, generator=gen) / args.dim ** 0.5
    x0 = torch.randn(args.batch, args.dim, device=dev, dtype=torch.float16, generator=gen)

    def run(steps):
        x = x0
        for i in range(steps):
            y = torch.relu(x @ w)            # matmul + activation: two new tensors
            t = torch.empty((i % 8 + 1) * 4096, device=dev, dtype=torch.uint8)  # a per-step buffer
            x = y + t[:1].float().half() * 0  # keeps t alive into the next op
        torch.cuda.synchronize()
        return float(x.float().sum().item())

    run(100)  # warm-up: cuBLAS handles, kernels, allocator
    times = []
    check = None
    for _ in range(args.reps):
        t0 = time.perf_counter()
        check = run(args.steps)
        times.append(time.perf_counter() - t0)
    print("TL_BENCH " + json.dumps({
        "seconds": statistics.median(times), "times": times, "steps": args.steps,
        "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""), "checksum": check,
    }), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
