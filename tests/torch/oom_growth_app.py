#!/usr/bin/env python3
"""Real PyTorch on the simulated GPU for tests/torch/test_torch_oom.py.

usage: oom_growth_app.py frag MIB    -- 160 tensors of 5 MiB in 20 MiB
           segments, three of every four freed, then a tensor of MIB MiB
           (on an 820 MiB device: 800 MiB reserved, 200 MiB allocated,
           20 MiB free); OutOfMemoryError caught
       oom_growth_app.py loop N HOW -- N requests, each keeping a 2 MiB
           tensor, marked through ctypes (HOW=ctypes, the README's way) or
           tensorleak.mark() (HOW=tensorleak)
Prints torch's own figures as one JSON line.
"""
import ctypes
import json
import sys

import torch

MIB = 1 << 20


def mark():
    if sys.argv[3] == "tensorleak":
        import tensorleak
        tensorleak.mark("request")
        return
    fn = getattr(ctypes.CDLL(None), "tensorleak_mark", None)  # absent without tensorleak
    if fn is not None:
        fn(b"request")


out = {}
if sys.argv[1] == "frag":
    # The first allocation sets tensorleak's bridge up (history on) after
    # it: a throwaway one, whose 20 MiB segment the tensors below reuse.
    torch.empty(5 * MIB, dtype=torch.uint8, device="cuda")
    tensors = [torch.empty(5 * MIB, dtype=torch.uint8, device="cuda") for _ in range(160)]  # PINNING_ALLOC
    kept = tensors[::4]
    del tensors
    try:
        torch.empty(int(sys.argv[2]) * MIB, dtype=torch.uint8, device="cuda")  # OOM_REQUEST
    except torch.cuda.OutOfMemoryError:
        out["caught"] = True
else:
    kept = []
    for _ in range(int(sys.argv[2])):
        scratch = torch.empty(MIB, dtype=torch.uint8, device="cuda")
        kept.append(torch.empty(2 * MIB, dtype=torch.uint8, device="cuda"))  # KEPT_ALLOC
        del scratch
        mark()
stats = torch.cuda.memory_stats()
out.update(reserved=stats["reserved_bytes.all.current"], allocated=stats["allocated_bytes.all.current"])
print(json.dumps(out))
