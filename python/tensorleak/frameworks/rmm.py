"""RAPIDS RMM's current device resource: a statistics adaptor's live and
peak bytes, a pool resource's size.  Only what the resource itself
publishes (no peak of the pool's size: peak_reserved_bytes is unknown)."""


def pool(device, allocated=None, reserved=None, resource="", version=None, peak_allocated=None):
    allocated = int(allocated) if allocated is not None else None
    if reserved is None:
        reserved = allocated
    return {
        "name": "rmm device %d" % device,
        "kind": "rmm",
        "device": device,
        "reserved_bytes": reserved,
        "allocated_bytes": allocated,
        "free_bytes": reserved - allocated if reserved is not None and allocated is not None else None,
        "largest_free_block": None,
        "peak_allocated_bytes": int(peak_allocated) if peak_allocated is not None else None,
        "peak_reserved_bytes": None,
        "segments": None,
        "framework": {"name": "rmm", "version": version, "mode": resource},
    }


def read(rmm):
    mr = rmm.mr.get_current_device_resource()
    allocated = reserved = peak = None
    r = mr
    while r is not None:  # adaptors wrap the resource that holds the memory
        if allocated is None and hasattr(r, "get_allocation_counts"):
            counts = r.get_allocation_counts()
            allocated, peak = counts["current_bytes"], counts.get("peak_bytes")
        if reserved is None and hasattr(r, "pool_size"):
            reserved = r.pool_size()
        r = getattr(r, "upstream_mr", None)
    if allocated is None:
        return []  # no statistics adaptor: RMM publishes no byte counts
    # The current device's resource; RMM keeps one per device.
    return [pool(0, allocated, reserved, type(mr).__name__, getattr(rmm, "__version__", None), peak)]
