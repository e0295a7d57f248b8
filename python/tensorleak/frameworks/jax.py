"""JAX/XLA's device allocator (BFC), as device.memory_stats() sees it.

reserved = pool_bytes (what the allocator holds: 75 % of the GPU when it
preallocates), allocated = bytes_in_use, largest free block =
largest_free_block_bytes.  Read only when the program's JAX already has its
backends up (reading jax.devices() first would start them).

For full reports, the live arrays' Python sites come from
jax.profiler.device_memory_profile(): XLA records the Python stack of every
device buffer it allocates, and the profile counts live buffers per stack,
size and device in pprof's protobuf, gzip'd."""

import importlib
import sys
import zlib


MAX_SITES = 64   # Python sites kept per pool, by bytes (as the torch reader)
MAX_FRAMES = 32  # frames kept per site, innermost first (pprof's order)
# The decoding runs in Python at about 0.26-0.46 ms per KiB of profile for
# stacks that share no frame (BENCHMARKS.md, bridge section), so a report
# reads at most this much of it: about 2,000 distinct 30-frame stacks.
MAX_PROFILE_BYTES = 1 << 20


# ---- pprof (github.com/google/pprof, proto/profile.proto) -----------------
# Neither jax nor the standard library parses the profile (jax returns
# gzip.compress(client.heap_profile()) as bytes), the `protobuf` package is
# not a dependency of jax so may be missing where the program runs, and the
# .proto is not shipped compiled.  The fields read here are few and fixed
# since pprof's first format, so they are read from the wire format
# directly: varints, length-delimited submessages/strings, packed repeated
# integers.  Field numbers, from profile.proto:
#   Profile   1 sample_type (ValueType) 2 sample 4 location 5 function 6 string_table
#   ValueType 1 type (string index)     2 unit (string index)
#   Sample    1 location_id (packed)    2 value (packed int64) 3 label
#   Label     1 key                     2 str (string indices)  3 num
#   Location  1 id                      4 line
#   Line      1 function_id             2 line
#   Function  1 id                      2 name                  4 filename

def _varint(buf, i):
    """(value, index after it) of the varint at buf[i]."""
    byte = buf[i]
    if byte < 0x80:  # nearly every key, id, index and small line number
        return byte, i + 1
    value, shift = byte & 0x7F, 7
    while True:
        i += 1
        byte = buf[i]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, i + 1
        shift += 7
        if shift > 63:
            raise ValueError("pprof: varint longer than 10 bytes")


def _fields(buf):
    """[(field number, value)] of one message: an int for varints, bytes
    for length-delimited fields; fixed-width fields skipped."""
    out, i, n = [], 0, len(buf)
    while i < n:
        key, i = _varint(buf, i)
        kind = key & 7
        if kind == 0:
            value, i = _varint(buf, i)
        elif kind == 2:
            size, i = _varint(buf, i)
            if i + size > n:
                raise ValueError("pprof: field runs past its message")
            value = buf[i:i + size]
            i += size
        elif kind == 1 or kind == 5:
            i += 8 if kind == 1 else 4
            continue
        else:
            raise ValueError("pprof: wire type %d" % kind)
        out.append((key >> 3, value))
    if i != n:
        raise ValueError("pprof: field runs past its message")
    return out


def _ints(value, signed=False):
    """A repeated integer field's occurrence: packed (bytes) or one varint."""
    if isinstance(value, int):
        out = [value]
    else:
        out, i, n = [], 0, len(value)
        while i < n:
            v, i = _varint(value, i)
            out.append(v)
    if signed:  # int64 is two's complement on the wire
        out = [v - (1 << 64) if v >= 1 << 63 else v for v in out]
    return out


def profile_sites(data):
    """{device label (e.g. "cuda:0"): [site, ...]} from the bytes
    device_memory_profile() returned (gzip'd or not).  A site is the live
    buffers allocated from one Python stack: {"bytes", "count", "frames":
    [{"function", "file", "line", "python"}], innermost first}, ranked by
    bytes, MAX_SITES kept.  Executables (compiled programs, which the
    profile counts with 0 bytes) are not arrays and are left out."""
    if data[:2] == b"\x1f\x8b":
        unzip = zlib.decompressobj(16 + zlib.MAX_WBITS)
        data = unzip.decompress(data, MAX_PROFILE_BYTES + 1)
        if not unzip.eof and len(data) <= MAX_PROFILE_BYTES:
            raise ValueError("pprof: gzip stream cut short")
    if len(data) > MAX_PROFILE_BYTES:
        raise ValueError("profile over %d MiB; its sites are left out" % (MAX_PROFILE_BYTES >> 20))
    strings, types, samples, functions = [], [], [], {}
    raw_locations = {}  # id -> the Location message, decoded when a buffer's stack needs it
    for field, value in _fields(data):
        if field == 6:
            strings.append(value.decode("utf-8", "replace"))
        elif field == 2:
            samples.append(value)
        elif field == 4:
            # Its id is field 1, written first by every pprof writer.
            if value[:1] == b"\x08":
                loc_id = _varint(value, 1)[0]
            else:
                loc_id = dict(_fields(value)).get(1, 0)
            raw_locations[loc_id] = value
        elif field == 1:
            vt = dict(_fields(value))
            types.append((vt.get(1, 0), vt.get(2, 0)))
        elif field == 5:
            fn = dict(_fields(value))
            functions[fn.get(1, 0)] = (fn.get(2, 0), fn.get(4, 0))

    def text(index):
        return strings[index] if 0 <= index < len(strings) else ""

    locations = {}

    def frames_at(loc_id):
        lines = locations.get(loc_id)
        if lines is None:
            lines = []
            for f, v in _fields(raw_locations.get(loc_id, b"")):
                if f == 4:  # inlined callees first, as pprof orders them
                    ln = dict(_fields(v))
                    name, filename = functions.get(ln.get(1, 0), (0, 0))
                    lines.append((text(name), text(filename), ln.get(2, 0)))
            locations[loc_id] = lines
        return lines

    units = [text(u) for t, u in types]
    space = units.index("bytes") if "bytes" in units else None
    count = units.index("count") if "count" in units else None
    by_device, stacks = {}, {}
    for raw in samples:
        loc_ids, values, labels = [], [], {}
        for f, v in _fields(raw):
            if f == 1:
                loc_ids.extend(_ints(v))
            elif f == 2:
                values.extend(_ints(v, signed=True))
            elif f == 3:
                lab = dict(_fields(v))
                labels[text(lab.get(1, 0))] = text(lab.get(2, 0))
        if labels.get("kind", "buffer") != "buffer":
            continue
        loc_ids = tuple(loc_ids)
        frames = stacks.get(loc_ids)
        if frames is None:
            frames = []
            for loc in loc_ids:
                frames.extend(frames_at(loc))
                if len(frames) >= MAX_FRAMES:
                    break
            frames = stacks[loc_ids] = tuple(frames[:MAX_FRAMES])
        sites = by_device.setdefault(labels.get("device", ""), {})
        site = sites.get(frames)
        if site is None:
            site = sites[frames] = {"bytes": 0, "count": 0, "frames": frames}
        site["bytes"] += values[space] if space is not None and space < len(values) else 0
        site["count"] += values[count] if count is not None and count < len(values) else 1
    out = {}
    for dev, sites in by_device.items():
        ranked = sorted(sites.values(), key=lambda s: (-s["bytes"], -s["count"]))[:MAX_SITES]
        for site in ranked:
            site["frames"] = [{"function": f, "file": path, "line": line, "python": path.endswith(".py")}
                              for f, path, line in site["frames"]]
        out[dev] = ranked
    return out


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


def _profiler(jax):
    prof = getattr(jax, "profiler", None) or sys.modules.get("jax.profiler")
    # jax.profiler is part of the jax the program imported (no new framework).
    return prof if prof is not None else importlib.import_module("jax.profiler")


def read(jax, sites=False, errors=None):
    """Pool rows of the program's GPUs; with `sites` (full reports only: the
    profile costs a walk of every live buffer in XLA plus a gzip round trip)
    each row also has the live arrays' Python sites from
    device_memory_profile().  A profile that fails leaves the rows without
    sites and one line in `errors`."""
    if not _backends_up():
        return []
    rows, by_label, platforms = [], {}, []
    for d in jax.local_devices():
        platform = getattr(d, "platform", "")
        if platform not in ("gpu", "cuda", "rocm"):
            continue
        stats = d.memory_stats()
        if not stats:
            continue
        index = getattr(d, "local_hardware_id", None)
        rows.append(pool(d.id if index is None else index, stats, getattr(jax, "__version__", None)))
        by_label[str(d)] = rows[-1]
        if platform not in platforms:
            platforms.append(platform)
    if sites and rows:
        try:
            for platform in platforms:
                for label, found in profile_sites(_profiler(jax).device_memory_profile(platform)).items():
                    row = by_label.get(label)
                    if row is None and label.rpartition(":")[2].isdigit():  # another spelling of the device
                        row = next((r for r in rows if r["device"] == int(label.rpartition(":")[2])), None)
                    if row is not None:
                        row["sites"] = found
            for row in rows:
                row.setdefault("sites", [])
        except Exception as e:  # the pool figures stand without the sites
            if errors is not None:
                errors.append("jax: device_memory_profile: %s: %s" % (type(e).__name__, e))
    return rows
