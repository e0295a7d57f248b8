"""A stand-in for jax, for tests without a GPU: XLA's device allocator as
device.memory_stats() reports it (the keys recorded on the H200,
tests/fixtures/h200-2026-11-30/jax_*_stats.json).  Preallocates 75 % of the
simulated GPU unless XLA_PYTHON_CLIENT_PREALLOCATE=false, as XLA does."""
import os
import sys
import weakref

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import _fakecuda  # noqa: E402

from ._src import xla_bridge  # noqa: E402
from . import profiler  # noqa: E402,F401  (real jax imports it too)

__version__ = "0.0.0+tensorleak.fake"
_PREALLOCATE = os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE", "true").lower() not in ("false", "0")


class Device:
    id = 0
    local_hardware_id = 0
    platform = "gpu"

    def __str__(self):  # what XLA's profile labels its buffers with
        return "cuda:%d" % self.id

    def __init__(self):
        self.live = weakref.WeakSet()  # live arrays, for profiler.device_memory_profile()
        self.arena = _fakecuda.Arena()
        self.limit = int(_fakecuda.total_memory() * 0.75)
        self.peak_in_use = self.peak_pool = 0
        self.num_allocs = 0
        if _PREALLOCATE:
            self.arena.add_segment(self.limit)

    def memory_stats(self):
        free = self.arena.free_blocks()
        return {
            "num_allocs": self.num_allocs, "bytes_in_use": self.arena.used(), "peak_bytes_in_use": self.peak_in_use,
            "largest_alloc_size": 0, "bytes_limit": self.limit, "bytes_reserved": 0, "peak_bytes_reserved": 0,
            "largest_free_block_bytes": max(free) if free else 0, "pool_bytes": self.arena.reserved(),
            "peak_pool_bytes": self.peak_pool,
        }


_device = None


def _clean_up():
    # jax._src.xla_bridge registers its clean-up with atexit at import, so it
    # runs after the tensorleak bridge's (registered later) has read the
    # final state: the BFC allocator's memory goes back to the driver.
    if _device is not None:
        _device.arena.release_all()


import atexit  # noqa: E402
atexit.register(_clean_up)


def _dev():
    global _device
    if _device is None:
        _device = Device()
        xla_bridge._backends["cuda"] = _device
    return _device


def local_devices(backend=None):
    return [_dev()]


def devices(backend=None):
    return [_dev()]


class Array:
    def __init__(self, nbytes):
        d = _dev()
        self.addr = d.arena.alloc(nbytes, lambda size: max(64 << 20, size))
        self.nbytes = nbytes
        # The Python stack of the allocation, innermost first from the caller
        # (XLA records each buffer's the same way, its own frames included).
        self.stack, f = [], sys._getframe(1)
        while f is not None:
            self.stack.append((f.f_code.co_name, f.f_code.co_filename, f.f_lineno))
            f = f.f_back
        d.live.add(self)
        d.num_allocs += 1
        d.peak_in_use = max(d.peak_in_use, d.arena.used())
        d.peak_pool = max(d.peak_pool, d.arena.reserved())

    def __del__(self):
        try:
            _dev().arena.free(self.addr)
        except Exception:
            pass


def zeros_bytes(nbytes):
    """An array of `nbytes` bytes on the (fake) GPU."""
    return Array(nbytes)
