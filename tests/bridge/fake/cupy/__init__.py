"""A stand-in for cupy, for tests without a GPU: the default memory pool and
pinned memory pool with the public API recorded on the H200
(tests/fixtures/h200-2026-11-30/cupy_pool_stats.json: used_bytes,
total_bytes, free_bytes, n_free_blocks; the pinned pool: n_free_blocks)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import _fakecuda  # noqa: E402

from . import cuda  # noqa: E402

__version__ = "0.0.0+tensorleak.fake"


class MemoryPool:
    def __init__(self):
        self.arena = _fakecuda.Arena(round_to=512)

    def used_bytes(self):
        return self.arena.used()

    def total_bytes(self):
        return self.arena.reserved()

    def free_bytes(self):
        return self.arena.reserved() - self.arena.used()

    def n_free_blocks(self):
        return len(self.arena.free_blocks())


class PinnedMemoryPool:
    def n_free_blocks(self):
        return 0


_pool = MemoryPool()
_pinned = PinnedMemoryPool()


def get_default_memory_pool():
    return _pool


def get_default_pinned_memory_pool():
    return _pinned


class ndarray:
    def __init__(self, nbytes):
        # CuPy rounds to 512 and takes exactly what it needs from the driver.
        self.addr = _pool.arena.alloc(nbytes, lambda size: size)

    def __del__(self):
        try:
            _pool.arena.free(self.addr)
        except Exception:
            pass


def empty_bytes(nbytes):
    return ndarray(nbytes)
