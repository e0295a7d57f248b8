"""jax_cupy_loop.py FRAMEWORK MODE REQUESTS -- a request loop on the stand-in
jax, cupy or rmm: each request makes a temporary and a result; `leak` keeps
every result (16 MiB for jax, as the H200 recording; 8 MiB for cupy and
rmm).  Marks each request, prints the framework's own final figures as
JSON."""
import ctypes
import json
import sys

fw, mode, requests = sys.argv[1], sys.argv[2], int(sys.argv[3])
MiB = 1 << 20
kept = []
if fw == "jax":
    import jax
    make, size = jax.zeros_bytes, 16 * MiB
elif fw == "cupy":
    import cupy
    make, size = cupy.empty_bytes, 8 * MiB
else:
    import rmm
    make, size = (lambda n: rmm.DeviceBuffer(size=n)), 8 * MiB

for i in range(requests):
    tmp = make(4 * MiB)
    result = make(size)  # RESULT_ALLOC
    if mode == "leak":
        kept.append(result)
    del tmp, result
    fn = getattr(ctypes.CDLL(None), "tensorleak_mark", None)
    if fn is not None:
        fn(b"request")
snap = getattr(ctypes.CDLL(None), "tensorleak_snapshot", None)
if snap is not None:
    snap(b"end")  # a report while the framework still holds its pool
if fw == "jax":
    print(json.dumps(jax.local_devices()[0].memory_stats()))
elif fw == "rmm":
    resource = rmm.mr.get_current_device_resource()
    print(json.dumps(dict(resource.get_allocation_counts(), pool_size=resource.upstream_mr.pool_size())))
else:
    pool = cupy.get_default_memory_pool()
    print(json.dumps({"used": pool.used_bytes(), "total": pool.total_bytes(), "free_blocks": pool.n_free_blocks()}))
