#!/usr/bin/env python3
"""A PyTorch request loop for the real-GPU kit (tests/gpu/run.sh).

--leak keeps one tensor per request in a list (the leak), still referenced at exit;
--clean drops it.  Each
request is a tensorleak epoch (tensorleak_mark through ctypes, when the library is
loaded).  At the end the script takes a tensorleak snapshot labelled "end" and
prints its ground truth as one line:

    TL_GROUND_TRUTH {"reserved": torch reserved_bytes.all.current,
                     "allocated": allocated_bytes.all.current, free_start, free_end, ...}

Run it under each allocator mode with PYTORCH_CUDA_ALLOC_CONF unset,
"expandable_segments:True" or "backend:cudaMallocAsync".
"""
import argparse
import ctypes
import json
import os
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the checkout for the import below
from serve_loop import tagged_lines  # noqa: E402 (the kit's folder is sys.path[0])


def tensorleak_api():
    """tensorleak_mark / tensorleak_snapshot when the preload library is loaded."""
    try:
        lib = ctypes.CDLL(None)  # the global scope, where LD_PRELOAD puts tensorleak
    except OSError:
        return None, None
    mark = getattr(lib, "tensorleak_mark", None)
    snap = getattr(lib, "tensorleak_snapshot", None)
    if mark is not None:
        mark.argtypes = [ctypes.c_char_p]
        mark.restype = None
    if snap is not None:
        snap.argtypes = [ctypes.c_char_p]
        snap.restype = ctypes.c_int
    return mark, snap


def serve_request(torch, r, kv_elems, act_shape, kept, leak):
    x = torch.full(act_shape, float(r % 7), device="cuda", dtype=torch.float32)
    h = (x * 2.0 + 1.0).relu()
    kv = torch.empty(kv_elems, device="cuda", dtype=torch.uint8)  # TL_USER_LINE
    kv.fill_(r % 251)
    s = h.sum()
    if leak:
        kept.append(kv)  # the leak: a KV buffer nobody evicts
    del x, h, kv
    return s


def main():
    ap = argparse.ArgumentParser()
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--leak", action="store_true")
    g.add_argument("--clean", action="store_true")
    ap.add_argument("--requests", type=int, default=20)
    ap.add_argument("--kv-mib", type=int, default=32, help="bytes kept per request (MiB)")
    ap.add_argument("--act-mib", type=int, default=8, help="activation bytes per request (MiB)")
    ap.add_argument("--wait-attach", type=float, default=0, metavar="SECONDS",
                    help="after the warm-up, print TL_READY and wait up to SECONDS for "
                         "`tensorleak attach` (libtensorleak.so in /proc/self/maps) before serving")
    ap.add_argument("--pace", type=float, default=0, metavar="SECONDS",
                    help="sleep after each request (a server that lives across --interval marks)")
    args = ap.parse_args()

    import torch

    if not torch.cuda.is_available():
        print("torch_loop: CUDA is not available", file=sys.stderr)
        return 3
    mark, snap = tensorleak_api()
    kv_elems = args.kv_mib << 20
    act_shape = ((args.act_mib << 20) // 4 // 1024, 1024)

    # Warm-up (kernels loaded, allocator initialised), then return what it cached,
    # so the cuMemGetInfo window starts from an empty allocator.
    scratch = []
    serve_request(torch, 0, 1 << 20, (256, 1024), scratch, False).item()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    free_start, total = torch.cuda.mem_get_info()
    attached = None
    if args.wait_attach > 0:
        print("TL_READY %d" % os.getpid(), flush=True)
        deadline = time.monotonic() + args.wait_attach
        attached = False
        while not attached and time.monotonic() < deadline:
            with open("/proc/self/maps") as f:
                attached = "libtensorleak" in f.read()
            if not attached:
                time.sleep(0.05)

    kept = []
    marks = 0
    acc = 0.0
    for r in range(args.requests):
        acc += float(serve_request(torch, r, kv_elems, act_shape, kept, args.leak).item())
        if mark is not None:
            mark(b"request")
            marks += 1
        if args.pace > 0:
            time.sleep(args.pace)
    torch.cuda.synchronize()
    stats = torch.cuda.memory_stats()
    free_end, total = torch.cuda.mem_get_info()
    snapshot_rc = snap(b"end") if snap is not None else None

    truth = {
        "sample": "torch_loop",
        "mode": "leak" if args.leak else "clean",
        "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
        "pid": os.getpid(),
        "requests": args.requests,
        "marks": marks,
        "snapshot_rc": snapshot_rc,
        "attached": attached,
        "expect_growth": bool(args.leak),
        "kept_bytes": len(kept) * kv_elems,
        "reserved": int(stats.get("reserved_bytes.all.current", 0)),
        "allocated": int(stats.get("allocated_bytes.all.current", 0)),
        "reserved_peak": int(stats.get("reserved_bytes.all.peak", 0)),
        "allocated_peak": int(stats.get("allocated_bytes.all.peak", 0)),
        "num_alloc_retries": int(stats.get("num_alloc_retries", 0)),
        "free_start": int(free_start),
        "free_end": int(free_end),
        "total": int(total),
        "checksum": acc,
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "device_name": torch.cuda.get_device_name(0),
        "user_lines": tagged_lines(__file__),
    }
    print("TL_GROUND_TRUTH " + json.dumps(truth, sort_keys=True), flush=True)
    if args.leak:
        # The leak outlives the interpreter: one reference nobody drops, so the kept
        # tensors are still allocated when tensorleak writes its exit report (else
        # main's return and finalization would free them, and under
        # backend:cudaMallocAsync a freed tensor is no leak).  compare.py expects
        # exactly kept_bytes of `user` leaks there.
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(kept))
    return 0


if __name__ == "__main__":
    sys.exit(main())
