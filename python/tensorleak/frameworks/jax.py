"""JAX/XLA's device allocator (BFC), as device.memory_stats() sees it.

reserved = pool_bytes (what the allocator holds: 75 % of the GPU when it
preallocates), allocated = bytes_in_use, largest free block =
largest_free_block_bytes.  Read only when the program's JAX already has its
backends up (reading jax.devices() first would start them)."""

import sys

from . import fragmentation


def pool(device, stats, version=None, platform="cuda"):
    allocated = int(stats.get("bytes_in_use", 0))
    reserved = int(stats.get("pool_bytes", stats.get("bytes_reserved", 0)) or 0)
    if reserved < allocated:
        reserved = allocated
    free = reserved - allocated
    largest = stats.get("largest_free_block_bytes")
    largest = int(largest) if largest is not None else None
    preallocate = reserved >= int(stats.get("bytes_limit", reserved + 1))
    return {
        "name": "jax %s:%d" % (platform, device),
        "kind": "jax",
        "device": device,
        "reserved_bytes": reserved,
        "allocated_bytes": allocated,
        "free_bytes": free,
        "largest_free_block": largest,
        "fragmentation": fragmentation(free, largest),
        "peak_allocated_bytes": int(stats.get("peak_bytes_in_use", 0)),
        "peak_reserved_bytes": int(stats.get("peak_pool_bytes", reserved)),
        "segments": None,
        "allocations": int(stats.get("num_allocs", 0)),
        "bytes_limit": int(stats.get("bytes_limit", 0)),
        "framework": {"name": "jax", "version": version,
                      "mode": "preallocated" if preallocate else "growing"},
    }


def _backends_up():
    xb = sys.modules.get("jax._src.xla_bridge")
    return bool(xb is not None and getattr(xb, "_backends", None))


def read(jax):
    if not _backends_up():
        return []
    rows = []
    for d in jax.local_devices():
        if getattr(d, "platform", "") not in ("gpu", "cuda", "rocm"):
            continue
        stats = d.memory_stats()
        if not stats:
            continue
        index = getattr(d, "local_hardware_id", None)
        rows.append(pool(d.id if index is None else index, stats, getattr(jax, "__version__", None)))
    return rows
