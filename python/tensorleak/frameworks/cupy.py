"""CuPy's default device memory pool and pinned (host) memory pool.

Device pool: reserved = total_bytes(), allocated = used_bytes(), free =
free_bytes(); CuPy does not publish its largest free block, so it is unknown
(None).  The pinned pool publishes only n_free_blocks() (byte counts when a
CuPy version has them)."""



def device_pool(device, used, total, free_blocks=None, version=None):
    used, total = int(used), int(total)
    return {
        "name": "cupy device %d" % device,
        "kind": "cupy",
        "device": device,
        "reserved_bytes": total,
        "allocated_bytes": used,
        "free_bytes": total - used,
        "largest_free_block": None,
        "segments": None,
        "free_blocks": free_blocks,
        "framework": {"name": "cupy", "version": version, "mode": "default_pool"},
    }


def pinned_pool(free_blocks, used=None, total=None, version=None):
    return {
        "name": "cupy pinned",
        "kind": "cupy_pinned",
        "device": -1,
        "device_memory": False,
        "reserved_bytes": int(total) if total is not None else None,
        "allocated_bytes": int(used) if used is not None else None,
        "free_bytes": int(total) - int(used) if total is not None and used is not None else None,
        "largest_free_block": None,
        "segments": None,
        "free_blocks": free_blocks,
        "framework": {"name": "cupy", "version": version, "mode": "pinned_pool"},
    }


def read(cupy):
    rows = []
    version = getattr(cupy, "__version__", None)
    pool = cupy.get_default_memory_pool()
    device = int(cupy.cuda.runtime.getDevice())
    rows.append(device_pool(device, pool.used_bytes(), pool.total_bytes(), pool.n_free_blocks(), version))
    pinned = cupy.get_default_pinned_memory_pool()
    used = getattr(pinned, "used_bytes", None)
    total = getattr(pinned, "total_bytes", None)
    rows.append(pinned_pool(pinned.n_free_blocks(), used() if used else None, total() if total else None, version))
    return rows
