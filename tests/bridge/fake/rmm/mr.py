"""rmm.mr of the stand-in: PoolMemoryResource, StatisticsResourceAdaptor."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import _fakecuda  # noqa: E402

INITIAL_POOL = 32 << 20


class PoolMemoryResource:
    def __init__(self):
        self.arena = _fakecuda.Arena(round_to=256)

    def pool_size(self):
        return self.arena.reserved()

    def allocate(self, nbytes):
        if not self.arena.segments:
            self.arena.add_segment(INITIAL_POOL)
        return self.arena.alloc(nbytes, lambda size: size)

    def deallocate(self, ptr, nbytes):
        self.arena.free(ptr)


class StatisticsResourceAdaptor:
    def __init__(self, upstream):
        self.upstream_mr = upstream
        self._current = self._peak = self._total = 0
        self._count = self._peak_count = self._total_count = 0

    def allocate(self, nbytes):
        ptr = self.upstream_mr.allocate(nbytes)
        self._current += nbytes
        self._total += nbytes
        self._count += 1
        self._total_count += 1
        self._peak = max(self._peak, self._current)
        self._peak_count = max(self._peak_count, self._count)
        return ptr

    def deallocate(self, ptr, nbytes):
        self.upstream_mr.deallocate(ptr, nbytes)
        self._current -= nbytes
        self._count -= 1

    def get_allocation_counts(self):
        return {"current_bytes": self._current, "current_count": self._count, "peak_bytes": self._peak,
                "peak_count": self._peak_count, "total_bytes": self._total, "total_count": self._total_count}


_current = StatisticsResourceAdaptor(PoolMemoryResource())


def get_current_device_resource():
    return _current
