#!/usr/bin/env python3
"""PyTorch's own snapshot next to tensorleak's, for the real-GPU kit (tests/gpu/run.sh).

    torch_snapshot.py --out DIR

Under `tensorleak run` (the bridge on): holds PyTorch tensors, frees some of them (their
blocks stay in PyTorch's cache), and makes plain cudaMalloc allocations of its own
outside that cache (libcudart through ctypes, the one PyTorch loaded; else NVIDIA's
cuda.bindings cuMemAlloc), one of them freed again.  Then, with nothing allocated in
between, at one moment:

    DIR/torch.pickle      torch.cuda.memory._snapshot(), pickled by the program
    DIR/tensorleak.json   tensorleak.snapshot_to(), labelled "torch_snapshot"

run.sh converts DIR/tensorleak.json with `tensorleak report --format torch-snapshot`
into DIR/tensorleak.pickle and compare.py holds that pickle against torch.pickle, the
plain allocations this program printed and torch.cuda.memory_stats().  Last line:

    TL_GROUND_TRUTH {"sample": "torch_snapshot", "plain": [{"address", "bytes", "lines"}],
                     "reserved", "allocated", "torch_pickle", "tensorleak_report", ...}

Runs on the stand-in torch of tests/bridge/fake too (the dry run, on the simulated GPU).
A torch that does not import prints `TL_SKIP {"why": ...}` and exits 0.
"""
import argparse
import ctypes
import json
import os
import pickle
import sys

PLAIN_TAG = "# TL_PLAIN_LINE"
MiB = 1 << 20


def plain_lines():
    """Lines of this file tagged PLAIN_TAG: where the plain allocations are made (the
    allocator's call and the program's line that asks for it; a stack cut short by
    TENSORLEAK_DEPTH keeps the innermost)."""
    with open(os.path.abspath(__file__)) as f:
        return [i for i, line in enumerate(f, 1) if line.rstrip().endswith(PLAIN_TAG)]


class Cudart:
    """cudaMalloc/cudaFree of the libcudart this process already loaded (PyTorch's, or
    the one the stand-in torch opened), so the allocations share PyTorch's context."""

    def __init__(self):
        with open("/proc/self/maps") as f:
            mapped = [fields[5] for fields in (line.split() for line in f) if len(fields) >= 6]
        self.path = next((p for p in mapped if "/libcudart.so" in p), None)
        if self.path is None:
            raise OSError("no libcudart.so in this process")
        self.lib = ctypes.CDLL(self.path)
        self.lib.cudaMalloc.argtypes = (ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t)
        self.lib.cudaMalloc.restype = ctypes.c_int
        self.lib.cudaFree.argtypes = (ctypes.c_void_p,)
        self.lib.cudaFree.restype = ctypes.c_int

    def malloc(self, nbytes):
        p = ctypes.c_void_p()
        rc = self.lib.cudaMalloc(ctypes.byref(p), nbytes)  # TL_PLAIN_LINE
        if rc != 0:
            raise RuntimeError("cudaMalloc(%d) returned %d" % (nbytes, rc))
        return p.value

    def free(self, address):
        rc = self.lib.cudaFree(ctypes.c_void_p(address))
        if rc != 0:
            raise RuntimeError("cudaFree returned %d" % rc)


class DriverBindings:
    """cuMemAlloc/cuMemFree of cuda.bindings, on the context PyTorch made current."""

    def __init__(self):
        from cuda.bindings import driver

        self.driver, self.path = driver, "cuda.bindings"

    def malloc(self, nbytes):
        err, ptr = self.driver.cuMemAlloc(nbytes)  # TL_PLAIN_LINE
        if int(err) != 0:
            raise RuntimeError("cuMemAlloc(%d) returned %s" % (nbytes, err))
        return int(ptr)

    def free(self, address):
        err, = self.driver.cuMemFree(address)
        if int(err) != 0:
            raise RuntimeError("cuMemFree returned %s" % err)


def plain_allocator():
    try:
        return Cudart()
    except OSError:
        return DriverBindings()


def tensor(torch, nbytes):
    """nbytes of device memory from PyTorch's cache (the stand-in's empty() takes bytes)."""
    u8 = getattr(torch, "uint8", None)
    if u8 is None:
        return torch.empty(nbytes, device="cuda")
    return torch.empty(nbytes, dtype=u8, device="cuda")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="folder for torch.pickle and tensorleak.json")
    args = ap.parse_args()
    try:
        import torch
    except Exception as e:  # absent or broken: the row is skipped, not failed
        print("TL_SKIP " + json.dumps({"why": "torch does not import: %s: %s" % (type(e).__name__, e)}), flush=True)
        return 0
    avail = getattr(torch.cuda, "is_available", None)
    if avail is not None and not avail():
        raise RuntimeError("torch.cuda is not available")
    try:
        import tensorleak
        snapshot_to = tensorleak.snapshot_to if tensorleak.loaded() else None
    except Exception:
        snapshot_to = None
    os.makedirs(args.out, exist_ok=True)

    # PyTorch's cache: small blocks (2 MiB segments) and large ones, some freed again
    # (their blocks stay cached, inactive, inside segments that stay reserved).
    kept = [tensor(torch, n) for n in (256 << 10, 512 << 10, 3 * MiB, 5 * MiB, 12 * MiB)]
    freed = [tensor(torch, n) for n in (1 * MiB, 7 * MiB, 24 * MiB)]
    kept.append(tensor(torch, 2 * MiB))
    del freed

    # Plain allocations outside PyTorch's cache, as NCCL or a C++ extension makes them.
    rt = plain_allocator()
    plain = []
    for nbytes in (3 * MiB, 5 * MiB):
        plain.append({"address": rt.malloc(nbytes), "bytes": nbytes})  # TL_PLAIN_LINE
    gone = rt.malloc(1 * MiB)
    rt.free(gone)

    sync = getattr(torch.cuda, "synchronize", None)
    if sync is not None:
        sync()
    # The moment: PyTorch's snapshot, its figures and tensorleak's report, nothing
    # allocated on the GPU in between.
    torch_pickle = os.path.join(args.out, "torch.pickle")
    with open(torch_pickle, "wb") as f:
        pickle.dump(torch.cuda.memory._snapshot(), f)
    stats = torch.cuda.memory_stats()
    report = os.path.join(args.out, "tensorleak.json")
    rc = snapshot_to(report, "torch_snapshot") if snapshot_to is not None else None

    lines = plain_lines()
    truth = {
        "sample": "torch_snapshot", "pid": os.getpid(), "torch_pickle": torch_pickle,
        "tensorleak_report": report, "snapshot_rc": rc,
        "reserved": int(stats.get("reserved_bytes.all.current", 0)),
        "allocated": int(stats.get("allocated_bytes.all.current", 0)),
        "plain": [dict(p, lines=lines) for p in plain], "plain_freed": [{"address": gone, "bytes": 1 * MiB}],
        "plain_api": rt.path, "kept_tensors": len(kept), "user_file": os.path.basename(__file__),
        "info": {"torch": torch.__version__, "backend": torch.cuda.get_allocator_backend(),
                 "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
                 "stand_in": "tensorleak.fake" in torch.__version__},
    }
    print("TL_GROUND_TRUTH " + json.dumps(truth, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
