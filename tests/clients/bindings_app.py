"""NVIDIA's cuda-bindings (cuda.bindings.driver) on the simulated driver, one
scenario per run: stream-ordered pools, VMM, context teardown, module
loading, error names.

Usage: bindings_app.py SCENARIO [SNAPSHOT_PATH]

Prints one JSON line: what the program knows it holds at exit (`kept_count`,
`kept_bytes`, as it asked for them) and what it checked.  The same output and
exit status are expected with and without tensorleak.
"""
import json
import sys

import numpy as np
from cuda.bindings import driver as drv

OUT = {"kept_count": 0, "kept_bytes": 0}


def ok(result):
    """The values of a cuda-bindings call, raising on an error code."""
    err, *values = result if isinstance(result, tuple) else (result,)
    if err != drv.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"{drv.cuGetErrorName(err)[1]}")
    return values[0] if len(values) == 1 else values


def name(err):
    return drv.cuGetErrorName(err)[1].decode()


def keep(nbytes):
    OUT["kept_count"] += 1
    OUT["kept_bytes"] += nbytes


def setup():
    ok(drv.cuInit(0))
    dev = ok(drv.cuDeviceGet(0))
    ctx = ok(drv.cuDevicePrimaryCtxRetain(dev))
    ok(drv.cuCtxSetCurrent(ctx))
    return dev, ctx


def roundtrip(dptr, nbytes, seed, stream=None):
    host = (np.arange(nbytes, dtype=np.int64) * seed % 253).astype(np.uint8)
    back = np.zeros(nbytes, dtype=np.uint8)
    if stream is None:
        ok(drv.cuMemcpyHtoD(dptr, host.ctypes.data, nbytes))
        ok(drv.cuMemcpyDtoH(back.ctypes.data, dptr, nbytes))
    else:
        ok(drv.cuMemcpyHtoDAsync(dptr, host.ctypes.data, nbytes, stream))
        ok(drv.cuMemcpyDtoHAsync(back.ctypes.data, dptr, nbytes, stream))
        ok(drv.cuStreamSynchronize(stream))
    return bool(np.array_equal(host, back))


def pools():
    """Blocks from the device's default pool and from a created pool, on a
    created stream; every third kept."""
    dev, _ = setup()
    stream = ok(drv.cuStreamCreate(0))
    props = drv.CUmemPoolProps()
    props.allocType = drv.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    props.location.type = drv.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    props.location.id = 0
    pool = ok(drv.cuMemPoolCreate(props))
    good = True
    for i in range(12):
        nbytes = 5000 + 777 * i
        if i % 2:
            p = ok(drv.cuMemAllocFromPoolAsync(nbytes, pool, stream))
        else:
            p = ok(drv.cuMemAllocAsync(nbytes, stream))
        good = good and roundtrip(p, nbytes, i + 1, stream)
        ok(drv.cuMemsetD8Async(p, 0x5A, nbytes, stream))
        probe = np.zeros(1, dtype=np.uint8)
        ok(drv.cuMemcpyDtoH(probe.ctypes.data, int(p) + nbytes - 1, 1))
        good = good and int(probe[0]) == 0x5A
        if i % 3 == 0:
            keep(nbytes)
        else:
            ok(drv.cuMemFreeAsync(p, stream))
    ok(drv.cuStreamSynchronize(stream))
    OUT["roundtrip"] = good


def vmm():
    """One reservation, two 2 MiB handles mapped side by side: a copy across
    the seam lands in both.  The second handle is unmapped and released; the
    first stays mapped and unreleased to exit."""
    dev, _ = setup()
    prop = drv.CUmemAllocationProp()
    prop.type = drv.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    prop.location.type = drv.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    prop.location.id = 0
    gran = ok(drv.cuMemGetAllocationGranularity(
        prop, drv.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_MINIMUM))
    va = ok(drv.cuMemAddressReserve(2 * gran, 0, 0, 0))
    handles = [ok(drv.cuMemCreate(gran, prop, 0)) for _ in range(2)]
    for k, h in enumerate(handles):
        ok(drv.cuMemMap(int(va) + k * gran, gran, 0, h, 0))
    access = drv.CUmemAccessDesc()
    access.location.type = drv.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    access.location.id = 0
    access.flags = drv.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
    ok(drv.cuMemSetAccess(va, 2 * gran, [access], 1))
    seam = int(va) + gran - 4096
    good = roundtrip(seam, 8192, 7)
    ok(drv.cuMemUnmap(int(va) + gran, gran))
    ok(drv.cuMemRelease(handles[1]))
    # The unmapped half is address space only now: copies into it fail.
    err, = drv.cuMemsetD8(int(va) + gran, 1, 16)
    OUT["into_unmapped"] = name(err)
    good = good and roundtrip(int(va), 4096, 3)
    # Kept to exit: the first handle (device memory), its mapping, and the
    # reservation (address space only).
    OUT["kept_handle_bytes"] = OUT["kept_mapping_bytes"] = gran
    OUT["kept_reservation_bytes"] = 2 * gran
    OUT["roundtrip"] = good


def teardown():
    """A created context's allocations go with cuCtxDestroy; the primary
    context's kept allocation stays."""
    dev, primary = setup()
    ctx = ok(drv.cuCtxCreate(None, 0, dev))
    ptrs = [ok(drv.cuMemAlloc(4096 * (i + 1))) for i in range(3)]
    host_buf = ok(drv.cuMemAllocHost(10000))
    ok(drv.cuCtxDestroy(ctx))
    OUT["torn_down_count"] = len(ptrs) + 1
    ok(drv.cuCtxSetCurrent(primary))
    data = np.ones(16, dtype=np.uint8)
    err, = drv.cuMemcpyHtoD(ptrs[0], data.ctypes.data, 16)
    OUT["after_destroy"] = name(err)
    p = ok(drv.cuMemAlloc(12345))
    keep(12345)
    OUT["roundtrip"] = roundtrip(p, 12345, 5)
    del host_buf


def launch():
    """Device code cannot be loaded on the simulator: the driver's own code."""
    setup()
    err, _ = drv.cuModuleLoadData(b"\x7fELF not a cubin")
    OUT["module_load"] = name(err)


def errors():
    """cuGetErrorName and cuGetErrorString for every CUresult."""
    setup()
    codes = [int(c) for c in drv.CUresult]
    named, unnamed = [], []
    for c in codes:
        err, text = drv.cuGetErrorName(drv.CUresult(c))
        err2, desc = drv.cuGetErrorString(drv.CUresult(c))
        good = err == drv.CUresult.CUDA_SUCCESS and err2 == drv.CUresult.CUDA_SUCCESS and text and desc
        (named if good else unnamed).append(c)
    OUT.update(codes=codes, named=named, unnamed=unnamed)


SCENARIOS = {"pools": pools, "vmm": vmm, "teardown": teardown, "launch": launch, "errors": errors}

if __name__ == "__main__":
    SCENARIOS[sys.argv[1]]()
    print(json.dumps(OUT, sort_keys=True))
