"""kv_loop.py MODE REQUESTS HOW -- a serving loop on the fake torch: each request allocates temporaries and a
KV block; `leak` keeps every request's KV block (the classic KV-cache leak),
`clean` drops it, `leak2` keeps a 2 MiB tensor per request instead.  Marks each request the way the README says for Python
(ctypes.CDLL(None).tensorleak_mark), or through tensorleak.mark().  Prints
the allocator's own final figures as JSON, then exits with status 3."""
import ctypes
import json
import os
import sys

import torch

MiB = 1 << 20
mode, requests, how = sys.argv[1], int(sys.argv[2]), sys.argv[3]
kept = []


def kv_from_attention():
    return torch.empty(21 * MiB)


def kv_from_mlp():
    return torch.empty(21 * MiB)


def kv_from_norm():
    return torch.empty(21 * MiB)


def serve(i):
    scratch = [torch.empty(3 * MiB) for _ in range(3)]
    if mode == "kv2":
        # Keys and values cached apart, as transformers' DynamicLayer.update
        # does (cache_utils.py:146 and :147 in the H200 recording).
        kept.append(torch.empty(11 * MiB))  # KEYS_ALLOC
        kept.append(torch.empty(10 * MiB))  # VALUES_ALLOC
        del scratch
        return
    if mode == "leak2":
        kept.append(torch.empty(2 * MiB))  # SMALL_ALLOC
        del scratch
        return
    if mode == "rotate":
        # The cache's next segment is taken by whichever operation runs out
        # first: a different call stack each request, none growing alone.
        kv = (kv_from_attention, kv_from_mlp, kv_from_norm)[i % 3]()
    else:
        kv = torch.empty(21 * MiB)  # KV_ALLOC
    if mode in ("leak", "rotate"):
        kept.append(kv)
    del scratch


def mark(label):
    if how == "ctypes":
        fn = getattr(ctypes.CDLL(None), "tensorleak_mark", None)  # absent without tensorleak
        if fn is not None:
            fn(label.encode())
    elif how == "tensorleak":
        import tensorleak
        tensorleak.mark(label)
    elif how == "held":
        # A C call that keeps the GIL (PyDLL): the report cannot get fresh
        # framework state and must not wait for it forever.
        fn = getattr(ctypes.PyDLL(None), "tensorleak_snapshot", None)
        if fn is not None:
            fn(label.encode())


for i in range(requests):
    serve(i)
    mark("request %d" % i)
    if os.environ.get("KV_SLEEP"):  # busy in Python, as a server between requests
        import time
        end = time.monotonic() + float(os.environ["KV_SLEEP"])
        while time.monotonic() < end:
            pass
if os.environ.get("KV_SIGNAL_SELF"):
    import signal, time
    os.kill(os.getpid(), signal.SIGUSR1)
    time.sleep(1.0)
try:
    stats = torch.cuda.memory_stats(0)
except RuntimeError as e:  # FAKE_TORCH_BROKEN
    stats = {"error": str(e)}
print(json.dumps({"stats": stats, "modules": sorted(m for m in ("jax", "cupy", "rmm") if m in sys.modules)}))
sys.stdout.flush()
sys.exit(3)
