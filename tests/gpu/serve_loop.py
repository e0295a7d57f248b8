#!/usr/bin/env python3
"""Request loops on the frameworks' own allocators, for the real-GPU kit (tests/gpu/run.sh).

    serve_loop.py gpt2 --leak|--clean   transformers GPT-2 (random weights, 6 layers,
                                        n_embd 768, fp16, no download) on PyTorch; a
                                        request is batch 4 x 256 prompt tokens, then
                                        --decode steps on the KV cache; --leak keeps every
                                        request's past_key_values
    serve_loop.py jax --leak|--clean    a 2048x2048 f32 matmul per request; --leak keeps
                                        every result (16 MiB)
    serve_loop.py cupy --leak|--clean   an 8 MiB CuPy array per request; --leak keeps it
    serve_loop.py driver --leak|--clean NVIDIA's cuda.bindings: cuMemAlloc 4 MiB per
                                        request (no GIL around the call); --leak never frees
    serve_loop.py numba --leak|--clean  numba-cuda: a 4 MiB device array per request
    serve_loop.py kv --leak|--clean     PyTorch alone: temporaries and a KV block per
                                        request; --leak keeps the blocks (the dry run's
                                        end-to-end check, on tests/bridge's stand-in torch)
    serve_loop.py lines                 the workload lines the kit expects in leak stacks

Each request ends with tensorleak.mark("request").  After request --check-at and after
the last one the loop reads its framework's own allocator figures (torch.cuda.memory_stats
and _snapshot, jax Device.memory_stats, the CuPy pool) and, with nothing allocated in
between, asks tensorleak for a report labelled "req<N>" / "end": compare.py holds the
report's pool row against those figures, and wants growth flagged in the "req<N>" report
of a leaking loop and nowhere in a clean one.  The allocator mode is the environment's
(PYTORCH_CUDA_ALLOC_CONF, XLA_PYTHON_CLIENT_PREALLOCATE).  Last line:

    TL_GROUND_TRUTH {"sample": "gpt2"|"jax"|"cupy", "moments": {"req6": {...}, "end": {...}}, ...}

With TL_EXPORTER=1 and TL_EXPORTER_URL (a `tensorleak exporter` serving this process's
live directory), each moment also holds what /metrics said once a live update read after
the moment was published (`exporter`: the pytorch pool's reserved and allocated bytes,
device 0's free and total) and nvidia-smi's free and total of the GPU (`smi`, null where
nvidia-smi is absent).

A framework that does not import prints `TL_SKIP {"why": ...}` and exits 0: the kit
reports the row as skipped, not failed.
"""
import argparse
import ctypes
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
import urllib.request

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # random weights: nothing to download, ever
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
USER_TAG = "# TL_USER_LINE"


def tagged_lines(path):
    """Lines of a workload tagged USER_TAG: where its kept memory is allocated, the
    lines a leak's stack should name."""
    with open(os.path.abspath(path)) as f:
        return [i for i, line in enumerate(f, 1) if line.rstrip().endswith(USER_TAG)]


def user_lines():
    return tagged_lines(__file__)


class Tensorleak:
    """tensorleak.mark/snapshot: the package when it imports (its mark also hands the
    bridge this moment's framework state), else the preloaded C API through ctypes."""

    def __init__(self):
        self.how, self.mark_fn, self.snap_fn = None, None, None
        try:
            import tensorleak

            if tensorleak.loaded():
                self.how, self.mark_fn, self.snap_fn = "package", tensorleak.mark, tensorleak.snapshot
                return
        except Exception as e:  # no package on the path, or an error in it: ctypes below
            self.package_error = "%s: %s" % (type(e).__name__, e)
        lib = ctypes.CDLL(None)
        mark, snap = getattr(lib, "tensorleak_mark", None), getattr(lib, "tensorleak_snapshot", None)
        if mark is not None and snap is not None:
            mark.argtypes, mark.restype = [ctypes.c_char_p], None
            snap.argtypes, snap.restype = [ctypes.c_char_p], ctypes.c_int
            self.how = "ctypes"
            self.mark_fn = lambda label: mark(label.encode())
            self.snap_fn = lambda label: snap(label.encode())

    def mark(self, label):
        if self.mark_fn is not None:
            self.mark_fn(label)
            return 1
        return 0

    def snapshot(self, label):
        return self.snap_fn(label) if self.snap_fn is not None else None


class SkipLoop(Exception):
    """The loop cannot run here at all (not a failure of the row)."""


def skip(why):
    print("TL_SKIP " + json.dumps({"why": why}), flush=True)
    return 0


# ----------------------------------------------------------------------- GPT-2
def gpt2_setup(args):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    dev = args.device
    if dev == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("torch.cuda is not available")
    config = GPT2Config(n_layer=6, n_embd=768, n_head=12, n_positions=1024, vocab_size=50257)
    with torch.device(dev):
        model = GPT2LMHeadModel(config)
    model = (model.half() if dev == "cuda" else model).eval()
    gen = torch.Generator(device=dev).manual_seed(0)
    return {"torch": torch, "model": model, "gen": gen, "vocab": config.vocab_size, "device": dev}


def gpt2_request(st, args, kept):
    torch, model = st["torch"], st["model"]
    with torch.inference_mode():
        ids = torch.randint(0, st["vocab"], (4, args.prompt), device=st["device"], generator=st["gen"])
        out = model(input_ids=ids, use_cache=True)  # TL_USER_LINE
        past = out.past_key_values
        tok = out.logits[:, -1:].argmax(-1)
        for _ in range(args.decode):
            out = model(input_ids=tok, past_key_values=past, use_cache=True)  # TL_USER_LINE
            past = out.past_key_values
            tok = out.logits[:, -1:].argmax(-1)
        del out
    if args.leak:
        kept.append(past)  # the leak: every request's KV cache stays referenced
    return int(tok.sum().item())


def gpt2_moment(st):
    """PyTorch's own figures now; largest free block from the snapshot's inactive
    blocks (adjacent free blocks are merged by the allocator, so each is maximal),
    None where the backend has no segments to show (cudaMallocAsync)."""
    torch = st["torch"]
    if st["device"] != "cuda":
        return {"reserved": None, "allocated": None, "largest_free_block": None}
    kv_settle(st)
    s = torch.cuda.memory_stats()
    m = {"reserved": int(s.get("reserved_bytes.all.current", 0)),
         "allocated": int(s.get("allocated_bytes.all.current", 0)),
         "segments": int(s.get("segment.all.current", 0)),
         "largest_free_block": None}
    if torch.cuda.get_allocator_backend() == "native":
        snap = torch.cuda.memory._snapshot()
        m["largest_free_block"] = max([b["size"] for seg in snap.get("segments", [])
                                       for b in seg.get("blocks", []) if b.get("state") == "inactive"] or [0])
    return m


def gpt2_info(st):
    torch = st["torch"]
    import transformers

    return {"torch": torch.__version__, "transformers": transformers.__version__,
            "backend": torch.cuda.get_allocator_backend() if st["device"] == "cuda" else None,
            "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
            "history": os.environ.get("TENSORLEAK_TORCH_HISTORY", "") == "1"}


def gpt2_settle(st):
    if st["device"] == "cuda":
        st["torch"].cuda.synchronize()
        st["torch"].cuda.empty_cache()


# ------------------------------------------------------------- plain PyTorch KV
def kv_setup(args):
    """PyTorch without transformers: the dry run drives this loop with the stand-in
    torch of tests/bridge/fake on the simulated GPU (only torch.empty and the
    allocator's statistics), so the kit's chain runs end to end in CI."""
    import torch

    avail = getattr(torch.cuda, "is_available", None)
    if avail is not None and not avail():
        raise RuntimeError("torch.cuda is not available")
    return {"torch": torch, "device": "cuda"}


def kv_request(st, args, kept):
    torch = st["torch"]
    scratch = [torch.empty(3 << 20, device="cuda") for _ in range(3)]
    kv = torch.empty(21 << 20, device="cuda")  # TL_USER_LINE
    del scratch
    if args.leak:
        kept.append(kv)  # the leak: every request's KV block stays referenced
    return 0


def kv_info(st):
    torch = st["torch"]
    return {"torch": torch.__version__, "backend": torch.cuda.get_allocator_backend(),
            "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
            "history": os.environ.get("TENSORLEAK_TORCH_HISTORY", "") == "1"}


def kv_settle(st):
    sync = getattr(st["torch"].cuda, "synchronize", None)
    if sync is not None:
        sync()


# ------------------------------------------------------------------------- JAX
def jax_setup(args):
    import jax
    import jax.numpy as jnp

    dev = jax.devices()[0]
    if dev.platform != ("gpu" if args.device == "cuda" else args.device):
        raise RuntimeError("jax's first device is %s, not %s" % (dev.platform, args.device))
    f = jax.jit(lambda x: jnp.tanh(x @ x.T / 2048.0))
    return {"jax": jax, "jnp": jnp, "dev": dev, "f": f}


def jax_request(st, args, kept):
    st["r"] = st.get("r", 0) + 1
    x = st["jnp"].full((2048, 2048), float(st["r"] % 7), st["jnp"].float32)
    y = st["f"](x)  # TL_USER_LINE
    y.block_until_ready()
    del x
    if args.leak:
        kept.append(y)  # the leak: every result stays referenced
    return 0


def jax_moment(st):
    # A deleted array's buffer may be released a moment later (when its last use on the
    # stream is seen done): read until two readings agree, so that tensorleak's read that
    # follows sees the same state.
    barrier = getattr(st["jax"], "effects_barrier", None)
    if barrier is not None:
        barrier()
    s = st["dev"].memory_stats()
    for _ in range(20):
        time.sleep(0.01)
        again = st["dev"].memory_stats()
        if again == s:
            break
        s = again
    if not s:  # a CPU device keeps no statistics
        return {"reserved": None, "allocated": None, "largest_free_block": None}
    return {"reserved": int(s.get("pool_bytes", s.get("bytes_reserved", 0))),
            "allocated": int(s.get("bytes_in_use", 0)),
            "largest_free_block": s.get("largest_free_block_bytes"),
            "bytes_limit": s.get("bytes_limit"), "raw": s}


def jax_info(st):
    return {"jax": st["jax"].__version__,
            "preallocate": os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE", "true") != "false"}


def jax_settle(st):
    pass


# ------------------------------------------------------------------------ CuPy
def cupy_setup(args):
    import cupy

    if args.device != "cuda":
        raise SkipLoop("CuPy has no CPU device")
    cupy.cuda.runtime.getDeviceCount()
    return {"cupy": cupy, "pool": cupy.get_default_memory_pool()}


def cupy_request(st, args, kept):
    cp = st["cupy"]
    st["r"] = st.get("r", 0) + 1
    a = cp.full((8 << 20) // 4, st["r"] % 7, dtype=cp.float32)  # TL_USER_LINE
    b = (a * 2).sum()
    if args.leak:
        kept.append(a)  # the leak: every request's array stays referenced
    del a
    return int(b.get())


def cupy_moment(st):
    st["cupy"].cuda.Device().synchronize()
    p = st["pool"]
    return {"reserved": int(p.total_bytes()), "allocated": int(p.used_bytes()),
            "largest_free_block": None, "free_blocks": int(p.n_free_blocks())}


def cupy_info(st):
    return {"cupy": st["cupy"].__version__}


def cupy_settle(st):
    st["cupy"].cuda.Device().synchronize()


# ------------------------------------------------- cuda.bindings and numba-cuda
def driver_check(result):
    err, *rest = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        raise RuntimeError("CUDA driver error %s" % err)
    return rest[0] if len(rest) == 1 else rest


def driver_setup(args):
    """NVIDIA's cuda.bindings: Cython bindings that call the driver without the GIL
    (the case of Python frames read from a thread that released it)."""
    from cuda.bindings import driver

    if args.device != "cuda":
        raise SkipLoop("cuda.bindings has no CPU device")
    driver_check(driver.cuInit(0))
    dev = driver_check(driver.cuDeviceGet(0))
    ctx = driver_check(driver.cuDevicePrimaryCtxRetain(dev))
    driver_check(driver.cuCtxSetCurrent(ctx))
    return {"driver": driver}


def driver_request(st, args, kept):
    drv = st["driver"]
    scratch = driver_check(drv.cuMemAlloc(1 << 20))
    buf = driver_check(drv.cuMemAlloc(4 << 20))  # TL_USER_LINE
    driver_check(drv.cuMemFree(scratch))
    if args.leak:
        kept.append(buf)  # the leak: every request's buffer, never freed
    else:
        driver_check(drv.cuMemFree(buf))
    return 0


def driver_info(st):
    import cuda.bindings

    return {"cuda-bindings": getattr(cuda.bindings, "__version__", None)}


def numba_setup(args):
    """numba-cuda: device arrays are driver allocations (no pool by default); its
    frees are deferred and flushed in batches, which the clean loop forces."""
    from numba import cuda

    if args.device != "cuda":
        raise SkipLoop("numba-cuda has no CPU device")
    if not cuda.is_available():
        raise RuntimeError("numba.cuda is not available")
    return {"cuda": cuda, "np": __import__("numpy")}


def numba_request(st, args, kept):
    cuda, np = st["cuda"], st["np"]
    a = cuda.device_array((4 << 20) // 4, dtype=np.float32)  # TL_USER_LINE
    if args.leak:
        kept.append(a)  # the leak: every request's array stays referenced
    del a
    if not args.leak:
        numba_settle(st)
    return 0


def numba_settle(st):
    st["cuda"].synchronize()
    pending = getattr(st["cuda"].current_context(), "deallocations", None)
    if pending is not None:
        pending.clear()  # the deferred frees, now


def numba_info(st):
    import numba

    return {"numba": numba.__version__}


def no_moment(st):
    """These loops have no framework pool: tensorleak's figures are checked against
    nothing but growth and the user's line."""
    return {"reserved": None, "allocated": None, "largest_free_block": None}


# ---------------------------------------------------- the exporter at a moment
SAMPLE = re.compile(r'^([a-z_]+)\{(.*)\} (\S+)$')
LABEL = re.compile(r'([a-z_]+)="((?:[^"\\]|\\.)*)"')


def scrape(url, pid):
    """{(metric, frozenset(labels without pid/process)): value} of this process's series."""
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        m = SAMPLE.match(line)
        if not m:
            continue
        labels = dict(LABEL.findall(m.group(2)))
        if labels.pop("pid", None) != str(pid):
            continue
        labels.pop("process", None)
        out[(m.group(1), frozenset(labels.items()))] = float(m.group(3))
    return out


def series(s, name, **want):
    """The value of the one series `name` whose labels include `want`, else None."""
    vals = [v for (n, labels), v in s.items() if n == name and all((k, str(x)) in labels for k, x in want.items())]
    return int(vals[0]) if len(vals) == 1 else None


def exporter_moment(url, since, timeout=20.0):
    """/metrics once a live update whose bridge read began after `since` is published:
    the second update newer than `since` (an update asks the bridge before it is
    written, and the next starts after the previous was written).  Nothing of the
    program runs meanwhile: the figures are the moment's."""
    pid, first, end, err = os.getpid(), None, time.monotonic() + timeout, None
    while time.monotonic() < end:
        try:
            s = scrape(url, pid)
        except OSError as e:
            s, err = {}, "%s: %s" % (type(e).__name__, e)
        u = s.get(("tensorleak_live_update_timestamp_seconds", frozenset()))
        if u is not None and u > since:
            if first is None:
                first = u
            elif u > first:
                return {"update_time": u,
                        "pool_reserved": series(s, "tensorleak_pool_reserved_bytes", kind="pytorch", device=0),
                        "pool_allocated": series(s, "tensorleak_pool_allocated_bytes", kind="pytorch", device=0),
                        "device_free": series(s, "tensorleak_device_free_bytes", device=0),
                        "device_total": series(s, "tensorleak_device_total_bytes", device=0)}
        time.sleep(0.05)
    return {"error": "no live update after the moment within %.0f s%s" % (timeout, " (%s)" % err if err else "")}


def smi_memory():
    """nvidia-smi's free and total bytes of the first GPU (it counts MiB), or None."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run([smi, "--query-gpu=memory.free,memory.total", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30).stdout.splitlines()
        free, total = (int(x) << 20 for x in out[0].split(","))
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return None
    return {"free": free, "total": total}


LOOPS = {
    "gpt2": (gpt2_setup, gpt2_request, gpt2_moment, gpt2_info, gpt2_settle, ("torch", "transformers")),
    "jax": (jax_setup, jax_request, jax_moment, jax_info, jax_settle, ("jax",)),
    "cupy": (cupy_setup, cupy_request, cupy_moment, cupy_info, cupy_settle, ("cupy",)),
    "kv": (kv_setup, kv_request, gpt2_moment, kv_info, kv_settle, ("torch",)),
    "driver": (driver_setup, driver_request, no_moment, driver_info, lambda st: None, ("cuda.bindings.driver",)),
    "numba": (numba_setup, numba_request, no_moment, numba_info, numba_settle, ("numba.cuda",)),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("loop", choices=sorted(LOOPS) + ["lines"])
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--leak", action="store_true")
    g.add_argument("--clean", action="store_true")
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--check-at", type=int, default=6, help="request after which growth must be flagged")
    ap.add_argument("--decode", type=int, default=16, help="GPT-2 decode steps per request")
    ap.add_argument("--prompt", type=int, default=256, help="GPT-2 prompt tokens per sequence")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                    help="cpu: a smoke test of the loop where the framework has no GPU (figures null)")
    args = ap.parse_args()
    if args.loop == "lines":
        print(" ".join(str(n) for n in user_lines()))
        return 0
    if not (args.leak or args.clean):
        ap.error("one of --leak or --clean")
    setup, request, moment, info, settle, modules = LOOPS[args.loop]
    for mod in modules:
        try:
            __import__(mod)
        except Exception as e:  # absent or broken: the row is skipped, not failed
            return skip("%s does not import: %s: %s" % (mod, type(e).__name__, e))
    # The framework imports: from here on an error is a failure of the row (a traceback
    # and a non-zero exit status), not a skip.
    try:
        st = setup(args)
    except SkipLoop as e:
        return skip(str(e))
    tl = Tensorleak()
    exporter = os.environ.get("TL_EXPORTER_URL") if os.environ.get("TL_EXPORTER") == "1" else None
    warm = []
    request(st, argparse.Namespace(**dict(vars(args), leak=False)), warm)  # kernels, handles, the pool
    settle(st)

    kept, moments, snaps, times = [], {}, {}, []
    marks = 0
    check = 0
    for r in range(1, args.requests + 1):
        t0 = time.perf_counter()
        check += request(st, args, kept)
        marks += tl.mark("request")
        times.append(time.perf_counter() - t0)
        if r == args.check_at or r == args.requests:
            label = "end" if r == args.requests else "req%d" % r
            moments[label] = dict(moment(st), request=r)
            since = time.time()
            snaps[label] = tl.snapshot(label)
            if exporter:
                moments[label]["exporter"] = exporter_moment(exporter, since)
                moments[label]["smi"] = smi_memory()
    truth = {
        "sample": args.loop, "mode": "leak" if args.leak else "clean", "pid": os.getpid(),
        "requests": args.requests, "check_at": args.check_at, "marks": marks, "api": tl.how,
        "package_error": getattr(tl, "package_error", None), "expect_growth": bool(args.leak),
        "moments": moments, "snapshot_rc": snaps, "kept": len(kept),
        "request_s": statistics.median(times) if times else None, "checksum": check,
        "user_file": os.path.basename(__file__), "user_lines": user_lines(), "info": info(st),
    }
    print("TL_GROUND_TRUTH " + json.dumps(truth, sort_keys=True), flush=True)
    if args.leak:
        # The leak outlives the interpreter (one reference nobody drops), so the kept
        # memory is still allocated when tensorleak writes its exit report.
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(kept))
    return 0


if __name__ == "__main__":
    sys.exit(main())
