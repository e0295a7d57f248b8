"""numba-cuda device memory on the simulated driver, one scenario per run.

Usage: numba_app.py SCENARIO [SNAPSHOT_PATH]

Prints one JSON line of what the program itself knows it holds at exit
(`kept_count`, `kept_bytes`: device allocations of numba's it never freed)
and of what it checked (`roundtrip`: bytes came back as sent).  Under
tensorleak, a report taken at a point the scenario chooses is written to
SNAPSHOT_PATH (tensorleak_snapshot_to; absent without tensorleak, which
changes nothing the program prints).  The same output and exit status are
expected with and without tensorleak.
"""
import ctypes
import json
import sys

import numpy as np
from numba import cuda
from numba.cuda.cudadrv import driver as nbdriver

KEEP = []          # arrays (or buffers) deliberately held to exit: the leak
OUT = {}


def snapshot(label):
    """tensorleak_snapshot_to when preloaded; nothing otherwise."""
    if len(sys.argv) < 3:
        return
    try:
        fn = ctypes.CDLL(None).tensorleak_snapshot_to
    except AttributeError:
        return
    fn.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    fn(label.encode(), sys.argv[2].encode())


def pending():
    """numba's deferred-free queue of the current context: (count, bytes)."""
    cons = list(cuda.current_context().memory_manager.deallocations._cons)
    return len(cons), sum(int(size) for _, _, size in cons)


def flush():
    cuda.current_context().memory_manager.deallocations.clear()


def arrays():
    """20 device arrays made three ways, 5 kept; every round trip exact."""
    ok = True
    for i in range(20):
        n = 700 + 37 * i
        host = (np.arange(n, dtype=np.int64) * (i + 3)) % 251
        host = host.astype(np.uint8)
        if i % 3 == 0:
            d = cuda.device_array(n, dtype=np.uint8)
            d.copy_to_device(host)
        elif i % 3 == 1:
            d = cuda.to_device(host)
        else:
            d = cuda.device_array_like(host)
            d.copy_to_device(cuda.to_device(host))   # device-to-device
        back = d.copy_to_host()
        ok = ok and bool(np.array_equal(back, host))
        if i % 4 == 0:
            KEEP.append(d)
        del d
    flush()
    OUT["roundtrip"] = ok


def deferred():
    """As arrays(), but numba's deferred frees stay queued at exit: the queue
    holds what the program dropped since numba last flushed it."""
    arrays()
    for i in range(4):
        d = cuda.device_array(1000 + 100 * i, dtype=np.uint8)
        del d
    OUT["pending_count"], OUT["pending_bytes"] = pending()


def defer_cleanup():
    """Inside cuda.defer_cleanup() nothing is freed: 20 dropped arrays are all
    live at the snapshot, and freed once the block ends."""
    with cuda.defer_cleanup():
        for i in range(20):
            d = cuda.device_array(512 * (i + 1), dtype=np.uint8)
            d.copy_to_device(np.full(512 * (i + 1), i, dtype=np.uint8))
            del d
        OUT["pending_count"], OUT["pending_bytes"] = pending()
        snapshot("inside defer_cleanup")
    flush()


def pinned_mapped():
    """Pinned (cuMemHostAlloc) and mapped (DEVICEMAP) host arrays, and a numpy
    array pinned in place (cuMemHostRegister), carry bytes to and from a
    device array; a mapped array's device view is its host memory."""
    ok = True
    host = np.arange(4096, dtype=np.uint8)
    pinned = cuda.pinned_array(4096, dtype=np.uint8)
    pinned[:] = host
    d = cuda.to_device(pinned)
    ok = ok and bool(np.array_equal(d.copy_to_host(), host))
    mapped = cuda.mapped_array(4096, dtype=np.uint8)
    mapped[:] = host[::-1]
    back = cuda.device_array(4096, dtype=np.uint8)
    # numba's copy_to_device refuses a MappedNDArray source (it lacks the
    # device array's layout helper), so its device pointer is copied from
    # directly: a device-to-device copy whose source is host memory.
    nbdriver.device_to_device(back, mapped, mapped.nbytes)
    ok = ok and bool(np.array_equal(back.copy_to_host(), host[::-1]))
    own = np.zeros(8192, dtype=np.uint8)
    with cuda.pinned(own):
        cuda.to_device(np.full(8192, 7, dtype=np.uint8)).copy_to_host(own)
    ok = ok and bool((own == 7).all())
    KEEP.append(d)
    del pinned, mapped, back
    flush()
    OUT["roundtrip"] = ok


class CountingMemoryManager(cuda.HostOnlyCUDAMemoryManager):
    """An EMM plugin allocating with the driver's stream-ordered cuMemAllocAsync
    on the default stream; it counts what it holds itself."""

    live = {}

    def initialize(self):
        pass

    def memalloc(self, size):
        from cuda.bindings import driver as drv
        err, ptr = drv.cuMemAllocAsync(size, drv.CUstream(0))
        if err != drv.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"cuMemAllocAsync: {err}")
        addr = int(ptr)
        CountingMemoryManager.live[addr] = size

        def finalizer():
            drv.cuMemFreeAsync(addr, drv.CUstream(0))
            CountingMemoryManager.live.pop(addr)

        ctx = cuda.current_context()
        return cuda.MemoryPointer(ctx, ptr, size, finalizer=finalizer)

    def get_memory_info(self):
        from cuda.bindings import driver as drv
        _, free, total = drv.cuMemGetInfo()
        return cuda.MemoryInfo(free=free, total=total)

    def get_ipc_handle(self, memory):
        raise NotImplementedError

    @property
    def interface_version(self):
        return 1


def emm():
    """Ten arrays through the plugin, three kept; bytes round trip."""
    ok = True
    for i in range(10):
        host = np.full(3000 + i, i, dtype=np.uint8)
        d = cuda.to_device(host)
        ok = ok and bool(np.array_equal(d.copy_to_host(), host))
        if i % 4 == 1:
            KEEP.append(d)
        del d
    flush()
    OUT["roundtrip"] = ok
    OUT["plugin_live_count"] = len(CountingMemoryManager.live)
    OUT["plugin_live_bytes"] = sum(CountingMemoryManager.live.values())
    snapshot("plugin arrays made")


SCENARIOS = {"arrays": arrays, "deferred": deferred, "defer_cleanup": defer_cleanup,
             "pinned_mapped": pinned_mapped, "emm": emm}


def main():
    scenario = sys.argv[1]
    if scenario == "emm":
        cuda.set_memory_manager(CountingMemoryManager)
    SCENARIOS[scenario]()
    OUT["kept_count"] = len(KEEP)
    OUT["kept_bytes"] = sum(a.nbytes for a in KEEP)
    print(json.dumps(OUT, sort_keys=True))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
