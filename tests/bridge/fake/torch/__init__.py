"""A stand-in for torch, for tests without a GPU: a caching allocator in the
shape of PyTorch's native one (segments cudaMalloc'ed from the simulated
runtime through ctypes, split into blocks, kept when freed) that answers
torch.cuda.memory_stats(), memory._snapshot() and _record_memory_history()
with the key names and shapes recorded on the H200
(tests/fixtures/h200-2026-11-30/torch_native_leak_snapshot.json).
Only what the bridge and the test programs use."""
import ctypes
import os
import sys

__version__ = "0.0.0+tensorleak.fake"

_rt = ctypes.CDLL(os.environ.get("FAKE_CUDART", "libcudart.so.13"))
_rt.cudaMalloc.argtypes = (ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t)
_rt.cudaMalloc.restype = ctypes.c_int
_rt.cudaFree.argtypes = (ctypes.c_void_p,)
_rt.cudaFree.restype = ctypes.c_int
_rt.cudaMemGetInfo.argtypes = (ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t))
_rt.cudaMemGetInfo.restype = ctypes.c_int

# FAKE_TORCH_C10: the path of tests/bridge/fake_c10_cuda.c built as
# libc10_cuda.so, through which segments are cudaMalloc'ed as PyTorch's
# allocator does (the library knows PyTorch's failures by that frame).
_c10 = None
if os.environ.get("FAKE_TORCH_C10"):
    _c10 = ctypes.CDLL(os.environ["FAKE_TORCH_C10"])
    _c10.fake_c10_set_malloc(ctypes.cast(_rt.cudaMalloc, ctypes.c_void_p))
    _c10.fake_c10_cuda_malloc.argtypes = (ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t)
    _c10.fake_c10_cuda_malloc.restype = ctypes.c_int
_oom_observers = []


def _cuda_malloc(nbytes):
    """The segment's address, or None when the runtime refuses."""
    p = ctypes.c_void_p()
    rc = (_c10.fake_c10_cuda_malloc if _c10 else _rt.cudaMalloc)(ctypes.byref(p), nbytes)
    return p.value if rc == 0 else None

SEGMENT = 20 << 20  # PyTorch's large-pool segment for requests under 10 MiB: 20 MiB
ROUND = 512


class _Allocator:
    def __init__(self):
        self.segments = []  # {"address", "total_size", "blocks": [[addr, size, state, frames]]}
        self.peak_reserved = self.peak_allocated = 0
        self.history = False
        self.initialized = False

    def reserved(self):
        return sum(s["total_size"] for s in self.segments)

    def allocated(self):
        return sum(b[1] for s in self.segments for b in s["blocks"] if b[2] == "active_allocated")

    def malloc(self, nbytes, frames):
        self.initialized = True
        size = max(ROUND, (nbytes + ROUND - 1) // ROUND * ROUND)
        best = None  # best fit, as PyTorch's allocator picks
        for s in self.segments:
            for i, b in enumerate(s["blocks"]):
                if b[2] == "inactive" and b[1] >= size and (best is None or b[1] < best[0][best[1]][1]):
                    best = (s["blocks"], i)
        if best is None:
            total = SEGMENT if size <= SEGMENT else (size + (2 << 20) - 1) // (2 << 20) * (2 << 20)
            addr = _cuda_malloc(total)
            if addr is None:  # as PyTorch: free the segments without a live block, retry
                self.release_cached()
                addr = _cuda_malloc(total)
            if addr is None:  # then tell the observers, after the (here absent) lock, and raise
                free, whole = ctypes.c_size_t(), ctypes.c_size_t()
                _rt.cudaMemGetInfo(ctypes.byref(free), ctypes.byref(whole))
                for observer in list(_oom_observers):
                    observer(0, total, whole.value, free.value)
                raise cuda.OutOfMemoryError("CUDA out of memory (fake torch). Tried to allocate %d bytes" % total)
            seg = {"address": addr, "total_size": total, "blocks": [[addr, total, "inactive", []]]}
            self.segments.append(seg)
            best = (seg["blocks"], 0)
        blocks, i = best
        b = blocks[i]
        if b[1] > size:  # split: the rest stays a free block
            blocks.insert(i + 1, [b[0] + size, b[1] - size, "inactive", []])
            b[1] = size
        b[2] = "active_allocated"
        b[3] = frames if self.history else []
        self.peak_reserved = max(self.peak_reserved, self.reserved())
        self.peak_allocated = max(self.peak_allocated, self.allocated())
        return b[0]

    def release_cached(self):
        """torch.cuda.empty_cache(): the segments without a live block go back."""
        for s in [s for s in self.segments if all(b[2] == "inactive" for b in s["blocks"])]:
            _rt.cudaFree(s["address"])
            self.segments.remove(s)

    def free(self, addr):
        for s in self.segments:
            blocks = s["blocks"]
            for i, b in enumerate(blocks):
                if b[0] == addr:
                    b[2], b[3] = "inactive", []
                    if i + 1 < len(blocks) and blocks[i + 1][2] == "inactive":
                        b[1] += blocks.pop(i + 1)[1]
                    if i > 0 and blocks[i - 1][2] == "inactive":
                        blocks[i - 1][1] += blocks.pop(i)[1]
                    return


_alloc = _Allocator()


def _frames():
    # From the caller of torch.empty, as PyTorch records the Python stack of
    # the operator that allocated (innermost first).
    out, f = [], sys._getframe(3)
    while f is not None:
        out.append({"name": f.f_code.co_name, "filename": f.f_code.co_filename, "line": f.f_lineno})
        f = f.f_back
    return out


class Tensor:
    def __init__(self, nbytes):
        self.nbytes = nbytes
        self.ptr = _alloc.malloc(nbytes, _frames() if _alloc.history else [])

    def __del__(self):
        try:
            _alloc.free(self.ptr)
        except Exception:
            pass


def empty(nbytes, device="cuda"):
    """A tensor of `nbytes` bytes on the (fake) GPU."""
    return Tensor(nbytes)


class _Memory:
    @staticmethod
    def _snapshot():
        if any(b[3] for s in _alloc.segments for b in s["blocks"]):
            # PyTorch 2.15 imports torch._inductor at the first snapshot
            # whose blocks carry Python frames (to symbolize them).
            from . import _inductor  # noqa: F401
        segs = []
        for s in _alloc.segments:
            active = sum(b[1] for b in s["blocks"] if b[2] == "active_allocated")
            segs.append({
                "device": 0, "address": s["address"], "total_size": s["total_size"], "allocated_size": active,
                "active_size": active, "requested_size": active, "stream": 0, "segment_type": "large",
                "segment_pool_id": [0, 0], "is_expandable": False, "frames": [],
                "blocks": [{"address": b[0], "size": b[1], "requested_size": b[1], "state": b[2], "frames": list(b[3])}
                           for b in s["blocks"]]})
        return {"segments": segs, "device_traces": [[]], "external_annotations": [],
                "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "expandable_segments": False}}

    @staticmethod
    def _record_memory_history(enabled="all", context="all", stacks="all", max_entries=None):
        _alloc.history = enabled in ("all", "state", True)

    @staticmethod
    def memory_snapshot(include_traces=True):
        return _Memory._snapshot()["segments"]


class _C:
    @staticmethod
    def _cuda_attach_out_of_memory_observer(observer):
        _oom_observers.append(observer)


class cuda:
    memory = _Memory

    class OutOfMemoryError(RuntimeError):
        pass

    @staticmethod
    def empty_cache():
        _alloc.release_cached()

    @staticmethod
    def is_initialized():
        return _alloc.initialized

    @staticmethod
    def get_allocator_backend():
        return "native"

    @staticmethod
    def device_count():
        return 1

    @staticmethod
    def memory_stats(device=None):
        if os.environ.get("FAKE_TORCH_BROKEN"):
            raise RuntimeError("memory_stats is broken in this stand-in")
        if device not in (None, 0):
            return {}
        return {
            "reserved_bytes.all.current": _alloc.reserved(),
            "reserved_bytes.all.peak": _alloc.peak_reserved,
            "allocated_bytes.all.current": _alloc.allocated(),
            "allocated_bytes.all.peak": _alloc.peak_allocated,
            "active_bytes.all.current": _alloc.allocated(),
            "inactive_split_bytes.all.current": 0,
            "segment.all.current": len(_alloc.segments),
            "num_alloc_retries": 0,
        }

    @staticmethod
    def memory_reserved(device=None):
        return _alloc.reserved()

    @staticmethod
    def memory_allocated(device=None):
        return _alloc.allocated()
