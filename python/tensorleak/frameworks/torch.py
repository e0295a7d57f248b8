"""PyTorch's CUDA caching allocator, as torch.cuda.memory_stats() and
torch.cuda.memory._snapshot() see it.

Backends: native (segments cudaMalloc'ed and split into blocks), native with
expandable_segments (one VMM range per stream that grows), cudaMallocAsync
(each tensor a stream-ordered allocation: memory_stats() answers, _snapshot()
raises "not meaningful", so no layout).  The figures are the framework's:
reserved = reserved_bytes.all.current, allocated = allocated_bytes.all.current,
and from the snapshot the largest inactive block and the live blocks.
"""


MAX_SITES = 64   # Python sites kept per pool, by bytes
MAX_FRAMES = 32  # frames kept per site (innermost first, as PyTorch records them)
MAX_BLOCKS = 8192
MAX_PINNING = 5  # sites of live blocks in segments with free space, for the out-of-memory report
# The module of PyTorch's CUDA caching allocator, whose cudaMalloc failures
# its out-of-memory observers report (the library waits for ours).
ALLOCATOR_MODULE = "libc10_cuda.so*"


def _frame(f):
    filename = f.get("filename") or ""
    return {"function": f.get("name"), "file": filename, "line": int(f.get("line") or 0),
            "python": filename.endswith(".py")}


def mode_of(snapshot_or_error, backend):
    """native | expandable_segments | cudaMallocAsync."""
    if backend == "cudaMallocAsync":
        return "cudaMallocAsync"
    snap = snapshot_or_error if isinstance(snapshot_or_error, dict) else {}
    if snap.get("allocator_settings", {}).get("expandable_segments") or any(
            s.get("is_expandable") for s in snap.get("segments", ())):
        return "expandable_segments"
    return "native"


def pool(device, stats, segments=None, mode="native", version=None):
    """One pool row from memory_stats(device) and that device's snapshot
    segments (None: no snapshot, e.g. cudaMallocAsync)."""
    reserved = int(stats.get("reserved_bytes.all.current", 0))
    allocated = int(stats.get("allocated_bytes.all.current", 0))
    free = reserved - allocated if reserved > allocated else 0
    row = {
        "name": "torch cuda:%d" % device,
        "kind": "pytorch",
        "device": device,
        "reserved_bytes": reserved,
        "allocated_bytes": allocated,
        "free_bytes": free,
        "peak_reserved_bytes": int(stats.get("reserved_bytes.all.peak", 0)),
        "peak_allocated_bytes": int(stats.get("allocated_bytes.all.peak", 0)),
        "inactive_split_bytes": int(stats.get("inactive_split_bytes.all.current", 0)),
        "segments": int(stats.get("segment.all.current", 0)),
        "largest_free_block": None,
        "framework": {"name": "torch", "version": version, "mode": mode},
    }
    if segments is not None:
        largest = 0
        layout = []
        sites = {}
        pinning = {}  # live blocks of segments that also hold free space, by stack
        framed = False
        empty_cache = 0  # segments without a live block: what empty_cache() gives back
        kept = 0
        truncated = False
        for seg in sorted(segments, key=lambda s: s["address"]):
            base = int(seg["address"])
            blocks = []
            live = []
            has_free = False
            for b in seg.get("blocks", ()):
                state = b.get("state", "")
                size = int(b["size"])
                if state == "inactive":
                    largest = max(largest, size)
                    has_free = True
                    continue
                if not state.startswith("active"):
                    continue
                live.append(b)
                if kept < MAX_BLOCKS:
                    blocks.append({"offset": int(b["address"]) - base, "bytes": size})
                    kept += 1
                else:
                    truncated = True
                frames = b.get("frames") or ()
                if frames and state == "active_allocated":
                    _add_site(sites, frames, size)
            if not live:
                empty_cache += int(seg["total_size"])
            elif has_free:
                for b in live:
                    frames = b.get("frames") or ()
                    if frames and b.get("state") == "active_allocated":
                        framed = True
                        _add_site(pinning, frames, int(b["size"]))
            layout.append({"base": base, "bytes": int(seg["total_size"]), "blocks": blocks})
        row["segments"] = len(layout)
        row["largest_free_block"] = largest
        row["layout"] = layout
        row["layout_truncated"] = truncated
        ranked = sorted(sites.values(), key=lambda s: (-s["bytes"], -s["count"]))
        row["sites"] = ranked[:MAX_SITES]
        if mode == "native":  # an expandable segment gives back pages, not segments
            row["empty_cache_bytes"] = empty_cache
        if framed:  # without history the live blocks have no lines
            row["pinning"] = sorted(pinning.values(), key=lambda s: (-s["bytes"], -s["count"]))[:MAX_PINNING]
    return row


def _add_site(sites, frames, size):
    key = tuple((f.get("name"), f.get("filename"), f.get("line")) for f in frames[:MAX_FRAMES])
    s = sites.get(key)
    if s is None:
        s = sites[key] = {"bytes": 0, "count": 0, "frames": [_frame(f) for f in frames[:MAX_FRAMES]]}
    s["bytes"] += size
    s["count"] += 1


def pools_from(stats_by_device, snapshot_or_error, backend="native", version=None):
    """Pool rows for every device from memory_stats() per device and one
    _snapshot() (a dict) or the exception it raised."""
    mode = mode_of(snapshot_or_error, backend)
    segs_by_dev = None
    if isinstance(snapshot_or_error, dict) and mode != "cudaMallocAsync":
        segs_by_dev = {}
        for seg in snapshot_or_error.get("segments", ()):
            segs_by_dev.setdefault(int(seg.get("device", 0)), []).append(seg)
    rows = []
    for device in sorted(stats_by_device):
        stats = stats_by_device[device]
        segs = None if segs_by_dev is None else segs_by_dev.get(device, [])
        if not stats.get("reserved_bytes.all.current") and not segs:
            continue  # a device this program never allocated on
        rows.append(pool(device, stats, segs, mode, version))
    return rows


def _segments_only(cuda):
    """The allocator's segments and blocks without the trace of past events
    (the costly part of a snapshot with history on): memory_snapshot(
    include_traces=False) where PyTorch has it, else _snapshot()."""
    memory = cuda.memory
    fn = getattr(memory, "memory_snapshot", None)
    if fn is not None:
        try:
            return {"segments": fn(include_traces=False)}
        except TypeError:  # an older PyTorch: no include_traces
            pass
    return memory._snapshot()


def read(torch, layout=True):
    """Reads the live allocator of the program's own torch module.  Nothing
    when CUDA was never initialized by the program (reading would do it).
    `layout`: also the segments and blocks (a walk of every block, for
    reports); without it memory_stats() alone (for marks)."""
    cuda = getattr(torch, "cuda", None)
    if cuda is None or not cuda.is_initialized():
        return []
    try:
        backend = cuda.get_allocator_backend()
    except AttributeError:
        backend = "native"
    snapshot = None
    if backend != "cudaMallocAsync" and layout:
        try:
            snapshot = _segments_only(cuda)
        except Exception as e:  # the backend says a snapshot is not meaningful
            snapshot = e
    stats = {d: cuda.memory_stats(d) for d in range(cuda.device_count())}
    return pools_from(stats, snapshot, backend, getattr(torch, "__version__", None))


def attach_oom_observer(torch, observer):
    """Registers `observer(device, alloc, device_total, device_free)` with
    PyTorch's caching allocator, which calls it in the failing thread after
    it let go of its lock and before it raises OutOfMemoryError (so the
    state can be read there).  The allocator's module glob; "" when this
    PyTorch takes no observer (none in its API, or its allocator refuses:
    backend:cudaMallocAsync raises); None while its CUDA is not initialized
    (an observer registered before would be dropped)."""
    cuda = getattr(torch, "cuda", None)
    if cuda is None or not cuda.is_initialized():
        return None
    attach = getattr(getattr(torch, "_C", None), "_cuda_attach_out_of_memory_observer", None)
    if attach is None:
        return ""
    try:
        attach(observer)
    except Exception:  # e.g. "not supported" by the cudaMallocAsync backend
        return ""
    return ALLOCATOR_MODULE


def enable_history(torch):
    """TENSORLEAK_TORCH_HISTORY=1: PyTorch records the Python stack of each
    allocation, so live blocks name their line.  Its cost, measured on the
    H200 GPT-2 loop with the full history (enabled="all", context="alloc"):
    0.063 -> 0.071 s per request; "state" keeps no event history.  Only when
    the program initialized CUDA (turning it on would do it otherwise)."""
    cuda = getattr(torch, "cuda", None)
    if cuda is None or not cuda.is_initialized():
        return False
    record = cuda.memory._record_memory_history
    try:
        # Stacks of the blocks alive now, no history of past events.
        record(enabled="state", context="state", stacks="python")
    except TypeError:  # PyTorch before 2.1: (enabled, record_context, ...)
        record(True)
    return True
