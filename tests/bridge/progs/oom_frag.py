"""oom_frag.py MIB [recover|mixed] -- the fragmented cache of issue reports, on the stand-in
torch: 160 tensors of 5 MiB fill 40 segments of 20 MiB, three of every four
are freed (each segment keeps one), then a tensor of MIB MiB is asked for
and PyTorch's OutOfMemoryError caught.  Run on a device of 820 MiB: 800 MiB
reserved, 200 MiB allocated, 20 MiB free on the device.  Prints the
allocator's figures as JSON.  `mixed`: JAX (without preallocation) and
CuPy hold pools beside it first: JAX a 64 MiB segment with one 16 MiB array
kept, CuPy 38 MiB of segments with 30 MiB of them free (run it on 940 MiB:
38 MiB free on the device)."""
import json
import sys

import torch

MiB = 1 << 20
if sys.argv[2:] == ["mixed"]:
    import cupy
    import jax
    other = [jax.zeros_bytes(16 * MiB), cupy.empty_bytes(8 * MiB)]
    freed = cupy.empty_bytes(30 * MiB)
    del freed
torch.empty(5 * MiB)  # CUDA up (and the bridge with it) before the tensors that stay
tensors = [torch.empty(5 * MiB) for _ in range(160)]  # PINNING_ALLOC
kept = tensors[::4] if sys.argv[2:] != ["recover"] else []  # recover: every segment emptied, PyTorch's retry serves it
del tensors
try:
    big = torch.empty(int(sys.argv[1]) * MiB)  # OOM_REQUEST
    caught = None
except torch.cuda.OutOfMemoryError as e:
    caught = str(e)
stats = torch.cuda.memory_stats(0)
print(json.dumps({"caught": caught, "reserved": stats["reserved_bytes.all.current"],
                  "allocated": stats["allocated_bytes.all.current"]}))
