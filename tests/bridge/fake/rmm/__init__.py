"""A stand-in for RAPIDS RMM, for tests without a GPU: the current device
resource is a statistics adaptor over a pool resource, with the API the
bridge reads (rmm.mr.get_current_device_resource(); the adaptor's
get_allocation_counts() dict and upstream_mr; the pool's pool_size()), and
rmm.DeviceBuffer(size=n) to allocate through it.  The pool takes 32 MiB
from the simulated runtime at first use and grows by what a request lacks."""
from . import mr  # noqa: F401

__version__ = "0.0.0+tensorleak.fake"


class DeviceBuffer:
    def __init__(self, size=0):
        self._mr = mr.get_current_device_resource()
        self.size = size
        self.ptr = self._mr.allocate(size)

    def __del__(self):
        try:
            self._mr.deallocate(self.ptr, self.size)
        except Exception:
            pass
