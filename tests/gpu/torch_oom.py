#!/usr/bin/env python3
"""PyTorch's out-of-memory of each verdict on a real GPU, for the kit
(tests/gpu/run.sh; the simulated twin is tests/torch/oom_growth_app.py).

usage: torch_oom.py --request-mib MIB

A ballast cudaMalloc (outside PyTorch's cache) leaves about HEADROOM_MIB of
the device free, then 160 tensors of 5 MiB fill 40 segments of 20 MiB and
three of every four are freed (800 MiB reserved, 200 MiB allocated, 600 MiB
free in the cache, each segment pinned by one live tensor, largest free
block 15 MiB), then one tensor of MIB MiB is asked for and its
OutOfMemoryError caught.  50 MiB: fragmentation (the cache's free bytes
would hold it, no block is large enough); 2000 MiB: not enough memory.
Prints torch's own figures right after the failure as one line:

    TL_GROUND_TRUTH {"pid", "request", "caught", "reserved", "allocated",
                     "largest_free", "device_free", "num_ooms", ...}

tests/gpu/compare.py holds tensorleak's out-of-memory report against it.
"""
import argparse
import ctypes
import json
import os
import sys

MIB = 1 << 20
HEADROOM_MIB = 840  # 800 MiB of segments and 40 MiB left on the device


def largest_inactive(torch):
    largest = 0
    for seg in torch.cuda.memory._snapshot()["segments"]:
        for block in seg["blocks"]:
            if block["state"] == "inactive":
                largest = max(largest, block["size"])
    return largest


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--request-mib", type=int, required=True)
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("torch_oom: CUDA is not available", file=sys.stderr)
        return 3
    torch.empty(MIB, dtype=torch.uint8, device="cuda")  # context and allocator up
    torch.cuda.empty_cache()
    # The runtime torch loaded (same soname): the ballast is not torch's.
    cudart = ctypes.CDLL("libcudart.so." + torch.version.cuda.split(".")[0])
    cudart.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
    cudart.cudaFree.argtypes = [ctypes.c_void_p]
    free, total = torch.cuda.mem_get_info()
    ballast = ctypes.c_void_p()
    size = max(0, free - HEADROOM_MIB * MIB) // (2 * MIB) * (2 * MIB)
    if size and cudart.cudaMalloc(ctypes.byref(ballast), size) != 0:
        print("torch_oom: ballast cudaMalloc of %d bytes failed" % size, file=sys.stderr)
        return 3

    torch.empty(5 * MIB, dtype=torch.uint8, device="cuda")  # the bridge set up; its segment reused below
    tensors = [torch.empty(5 * MIB, dtype=torch.uint8, device="cuda") for _ in range(160)]  # TL_USER_LINE
    kept = tensors[::4]
    del tensors
    caught = False
    try:
        torch.empty(args.request_mib * MIB, dtype=torch.uint8, device="cuda")  # TL_USER_LINE
    except torch.cuda.OutOfMemoryError:
        caught = True
    device_free, total = torch.cuda.mem_get_info()
    stats = torch.cuda.memory_stats()
    truth = {
        "sample": "torch_oom",
        "pid": os.getpid(),
        "request": args.request_mib * MIB,
        "caught": caught,
        "ballast": size,
        "reserved": int(stats["reserved_bytes.all.current"]),
        "allocated": int(stats["allocated_bytes.all.current"]),
        "largest_free": largest_inactive(torch),
        "device_free": int(device_free),
        "total": int(total),
        "num_ooms": int(stats.get("num_ooms", 0)),
        "torch": torch.__version__,
    }
    print("TL_GROUND_TRUTH " + json.dumps(truth, sort_keys=True), flush=True)
    del kept
    if size:
        cudart.cudaFree(ballast)
    return 0


if __name__ == "__main__":
    sys.exit(main())
