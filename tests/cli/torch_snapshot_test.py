#!/usr/bin/env python3
"""`tensorleak report FILE --format torch-snapshot`: a pickle in the layout of
torch.cuda.memory._snapshot() that memory_viz opens.

Each case runs a program on the simulated CUDA stack under `tensorleak run
--sim`, converts its exit report and checks the pickle: plain opcodes only,
plain types only, blocks that tile every segment, segments whose total is the
report's reserved bytes, and the exact segments the program's allocations
make.  Usage: torch_snapshot_test.py CASE (TL_BUILD, TL_SOURCE in the
environment).
"""
import json
import os
import pickle
import pickletools
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import scratch  # noqa: E402

scratch.use()

BUILD = os.environ["TL_BUILD"]
SOURCE = os.environ["TL_SOURCE"]
CLI = os.path.join(BUILD, "tools", "tensorleak")
SAMPLES = os.path.join(BUILD, "samples")
FAKE = os.path.join(SOURCE, "tests", "bridge", "fake")
MiB = 1 << 20

PLAIN_OPCODES = {"PROTO", "EMPTY_DICT", "EMPTY_LIST", "MARK", "SETITEMS", "APPENDS", "BINUNICODE",
                 "BININT1", "BININT", "LONG1", "BINFLOAT", "NEWTRUE", "NEWFALSE", "NONE", "STOP"}
PLAIN_TYPES = (dict, list, str, int, float, bool, type(None))
STATES = {"active_allocated", "active_awaiting_free", "inactive"}

# A program that mixes the stand-in torch's cache with plain cudaMalloc of
# its own (as NCCL or a C++ runtime would): 2 MiB, then 3 MiB twice.
MIXED = """
import ctypes, os, torch
rt = ctypes.CDLL("libcudart.so.13")
rt.cudaMalloc.argtypes = (ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t)
kept = [torch.empty(21 << 20)]
def plain(n):
    p = ctypes.c_void_p()
    assert rt.cudaMalloc(ctypes.byref(p), n) == 0
plain(2 << 20)
for _ in range(2):
    plain(3 << 20)
torch.cuda.synchronize()
"""


class Failure(Exception):
    pass


def eq(got, want, what):
    if got != want:
        raise Failure(f"{what}: got {got!r}, want {want!r}")


def run_under(args, env=None):
    tmp = tempfile.mkdtemp(prefix="tl-snap-")
    e = {k: v for k, v in os.environ.items()
         if not k.startswith(("TENSORLEAK_", "SIMCUDA_")) and k not in ("LD_PRELOAD", "PYTHONPATH")}
    e.update(env or {})
    report = os.path.join(tmp, "report.json")
    p = subprocess.run([CLI, "run", "--sim", "--quiet", "-o", report, "--", *args], env=e,
                       capture_output=True, text=True, timeout=60)
    if not os.path.exists(report):
        raise Failure(f"no report from {args} (status {p.returncode}): {p.stderr[-2000:]}")
    return report


def convert(report):
    out = report[:-len(".json")] + ".pickle"
    p = subprocess.run([CLI, "report", report, "--format", "torch-snapshot", "-o", out],
                       capture_output=True, text=True, timeout=60)
    eq((p.returncode, p.stdout, p.stderr), (0, "", ""), "report --format torch-snapshot")
    with open(out, "rb") as f:
        data = f.read()
    with open(report) as f:
        return data, json.load(f)


def check_plain(obj, where="snapshot"):
    if not isinstance(obj, PLAIN_TYPES):
        raise Failure(f"{where}: {type(obj).__name__} is not a plain type")
    if isinstance(obj, dict):
        for k, v in obj.items():
            if not isinstance(k, str):
                raise Failure(f"{where}: key {k!r} is not a string")
            check_plain(v, f"{where}.{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            check_plain(v, f"{where}[{i}]")


def check_snapshot(data, report):
    """The checks every snapshot passes; returns the unpickled snapshot."""
    ops = {op.name for op, _, _ in pickletools.genops(data)}
    if not ops <= PLAIN_OPCODES:
        raise Failure(f"opcodes beyond the plain ones: {sorted(ops - PLAIN_OPCODES)}")
    eq(data[:2], b"\x80\x02", "protocol")
    snap = pickle.loads(data)
    check_plain(snap)
    ndev = max([d["device"] for d in report["devices"]] + [0]) + 1
    eq(len(snap["device_traces"]), ndev, "one trace per device")
    for trace in snap["device_traces"]:
        eq([t["tensorleak_mark"] for t in trace], [m["label"] for m in report["marks"]], "marks in the trace")
        for t in trace:
            eq((t["action"], t["addr"], t["size"], t["stream"], t["frames"]), ("snapshot", 0, 0, 0, []), "mark entry")
            eq(type(t["time_us"]), int, "time_us type")
    for i, seg in enumerate(snap["segments"]):
        for key, typ in (("device", int), ("address", int), ("total_size", int), ("stream", int),
                         ("segment_type", str), ("segment_pool_id", list), ("allocated_size", int),
                         ("active_size", int), ("requested_size", int), ("blocks", list)):
            eq(type(seg[key]), typ, f"segment {i} {key}")
        if seg["segment_type"] not in ("small", "large"):
            raise Failure(f"segment {i}: segment_type {seg['segment_type']!r}")
        at = seg["address"]
        for b in seg["blocks"]:
            eq(b["address"], at, f"segment {i}: blocks tile it (next address)")
            if b["state"] not in STATES or b["size"] <= 0:
                raise Failure(f"segment {i}: block {b}")
            for fr in b["frames"]:
                eq(sorted(fr), ["filename", "line", "name"], "frame keys")
            at += b["size"]
        eq(at - seg["address"], seg["total_size"], f"segment {i}: blocks end at its end")
        # A segment of unknown layout is one block; its allocated_size is the
        # pool's figure, which that block cannot show when only part is used.
        partly = seg["tensorleak_layout"] == "unknown" and 0 < seg["allocated_size"] < seg["total_size"]
        if not partly:
            eq(seg["allocated_size"], sum(b["size"] for b in seg["blocks"] if b["state"] != "inactive"),
               f"segment {i}: allocated_size")
    eq(sum(s["total_size"] for s in snap["segments"]), report["summary"]["reserved_bytes"],
       "segments' total = the report's reserved bytes")
    # memory_viz keys blocks by address and finds a block's segment by
    # address: segments whose address is known never overlap on a device.
    placed = sorted((s["device"], s["address"], s["total_size"]) for s in snap["segments"]
                    if "address" not in s["tensorleak_unknown"])
    for (d0, a0, n0), (d1, a1, _) in zip(placed, placed[1:]):
        if d0 == d1 and a0 + n0 > a1:
            raise Failure(f"segments overlap on device {d0}: {a0:#x}+{n0} and {a1:#x}")
    try:
        import torch.cuda._memory_viz as viz  # the real torch, when installed
    except ImportError:
        if os.environ.get("CI") == "true":  # CI installs torch (scripts/install-deps.sh)
            raise Failure(f"torch cannot be imported by {sys.executable} under CI=true")
        print("note: torch is not installed: torch.cuda._memory_viz not tried")
    else:
        # Every view torch.cuda._memory_viz makes of a snapshot (the
        # flame-graph ones without fetching flamegraph.pl).
        same = lambda text: text  # noqa: E731
        viz.segsum(snap)
        viz.trace(snap)
        viz.segments(snap, format_flamegraph=same)
        viz.memory(snap, format_flamegraph=same)
        viz.trace_plot(snap)
        viz.segment_plot(snap)
    return snap


def plain_segments(snap):
    return [s for s in snap["segments"] if "tensorleak_pool" not in s]


def pool_segments(snap, name):
    return [s for s in snap["segments"] if s.get("tensorleak_pool") == name]


def layout_of(seg):
    return [(b["address"] - seg["address"], b["size"], b["state"]) for b in seg["blocks"]]


# --- cases ------------------------------------------------------------------

def a_c_programs_driver_allocations_are_segments_with_their_stack():
    report = run_under([os.path.join(SAMPLES, "leaky_inference"), "3"])
    data, rep = convert(report)
    snap = check_snapshot(data, rep)
    eq(len(snap["segments"]), 3, "segments: one per KV block")
    listed = rep["leaks"][0]["allocations"]
    eq((len(listed), rep["leaks"][0]["allocations_unlisted"]), (3, 0), "the report lists each KV block")
    eq([(hex(s["address"]), s["device"]) for s in snap["segments"]], [(a["address"], a["device"]) for a in listed],
       "each segment at its allocation's address, lowest first")
    for seg in snap["segments"]:
        eq((seg["device"], seg["total_size"], seg["allocated_size"], seg["tensorleak_layout"],
            seg["tensorleak_allocations"], seg["tensorleak_unknown"]),
           (0, MiB, MiB, "allocation", 1, ["stream", "requested_size"]), "a KV block's segment")
        eq(layout_of(seg), [(0, MiB, "active_allocated")], "one active block")
    eq(len({s["address"] for s in snap["segments"]}), 3, "three addresses")
    seg = snap["segments"][0]
    frames = seg["blocks"][0]["frames"]
    # The file as the compiler named it: relative to the build directory
    # (where meson runs it), wherever that is, or absolute.
    source = os.path.realpath(os.path.join(SOURCE, "samples", "leaky_inference.c"))
    eq([(f["name"], os.path.realpath(os.path.join(BUILD, f["filename"]))) for f in frames[:3]],
       [("kv_cache_append", source), ("serve_request.constprop.0", source), ("main", source)],
       "native frames, innermost first")
    with open(source) as f:
        src = f.read().splitlines()
    if "cudaMalloc" not in src[frames[0]["line"] - 1]:
        raise Failure(f"frame 0's line {frames[0]['line']} is not the cudaMalloc: {src[frames[0]['line'] - 1]!r}")
    eq(len(snap["device_traces"][0]), 3, "one snapshot entry per request mark")


def a_site_with_more_allocations_than_listed_keeps_the_rest_as_one_segment():
    report = run_under([os.path.join(SAMPLES, "leaky_inference"), "3"], env={"TENSORLEAK_ADDRESSES": "1"})
    data, rep = convert(report)
    snap = check_snapshot(data, rep)
    site = rep["leaks"][0]
    eq((site["count"], len(site["allocations"]), site["allocations_unlisted"]), (3, 1, 2), "one listed, two not")
    eq([(s["total_size"], s["tensorleak_layout"], s["tensorleak_allocations"], hex(s["address"]) if
         "address" not in s["tensorleak_unknown"] else None) for s in snap["segments"]],
       [(MiB, "allocation", 1, site["allocations"][0]["address"]), (2 * MiB, "call_site", 2, None)],
       "the listed allocation at its address, the other two as their site's total")


def an_annotated_pool_becomes_its_segments_with_holes_inactive():
    report = run_under([os.path.join(SAMPLES, "caching_allocator")])
    data, rep = convert(report)
    snap = check_snapshot(data, rep)
    pool = next(p for p in rep["pools"] if p["kind"] == "annotated")
    segs = pool_segments(snap, pool["name"])
    eq(len(snap["segments"]), len(segs), "no plain segments: the pool's cudaMallocs are its segments")
    eq([(hex(s["address"]), s["total_size"]) for s in segs], [(l["base"], l["bytes"]) for l in pool["layout"]],
       "segments of the layout")
    want = []
    for l in pool["layout"]:
        blocks, at = [], 0
        for b in l["blocks"]:
            if b["offset"] > at:
                blocks.append((at, b["offset"] - at, "inactive"))
            blocks.append((b["offset"], b["bytes"], "active_allocated"))
            at = b["offset"] + b["bytes"]
        if at < l["bytes"]:
            blocks.append((at, l["bytes"] - at, "inactive"))
        want.append(blocks)
    eq([layout_of(s) for s in segs], want, "blocks and holes")
    eq(want, [[(0, 20 * MiB, "inactive")],
              [(0, 8 * MiB, "inactive"), (8 * MiB, 4 * MiB, "active_allocated"), (12 * MiB, 8 * MiB, "inactive")],
              [(0, 12 * MiB, "active_allocated"), (12 * MiB, 8 * MiB, "inactive")]], "the sample's layout")
    eq(sum(s["allocated_size"] for s in segs), pool["allocated_bytes"], "allocated")


def a_mixed_run_shows_the_cache_and_the_plain_allocations_beside_it():
    tmp = tempfile.mkdtemp(prefix="tl-snap-prog-")
    prog = os.path.join(tmp, "mixed.py")
    with open(prog, "w") as f:
        f.write(MIXED)
    report = run_under([sys.executable, prog], env={"PYTHONPATH": FAKE})
    data, rep = convert(report)
    snap = check_snapshot(data, rep)
    torch_pool = next(p for p in rep["pools"] if p["kind"] == "pytorch")
    eq(sum(s["total_size"] for s in pool_segments(snap, torch_pool["name"])), torch_pool["reserved_bytes"],
       "the cache's segments")
    plain = sorted((s["total_size"], s["tensorleak_layout"], s.get("tensorleak_allocations")) for s in plain_segments(snap))
    eq(plain, [(2 * MiB, "allocation", 1), (3 * MiB, "allocation", 1), (3 * MiB, "allocation", 1)],
       "the plain allocations, one segment each")
    for s in plain_segments(snap):
        names = [(f["name"], os.path.basename(f["filename"]), f["line"]) for f in s["blocks"][0]["frames"]]
        eq(names[0][:2], ("plain", "mixed.py"), "Python frames first")
        if not any(n[0] == "ffi_call" for n in names):
            raise Failure(f"native frames after the Python ones: {names}")


def a_pool_without_layout_is_one_segment_that_says_so():
    # A stream-ordered pool of 32 MiB, 1 MiB of it allocated by cudaMallocAsync.
    data, rep = convert_fixture("async_exit.json")
    snap = check_snapshot(data, rep)
    eq(len(snap["segments"]), 1, "the allocation inside the pool is not shown twice")
    seg = snap["segments"][0]
    eq((seg["total_size"], seg["allocated_size"], seg["tensorleak_layout"], seg["tensorleak_pool_kind"],
        seg["tensorleak_unknown"]),
       (32 * MiB, MiB, "unknown", "stream_ordered", ["address", "stream", "requested_size", "frames"]),
       "the pool's segment")
    eq(layout_of(seg), [(0, 32 * MiB, "inactive")], "one block, no invented layout")


def convert_fixture(name):
    tmp = tempfile.mkdtemp(prefix="tl-snap-")
    report = os.path.join(tmp, name)
    with open(os.path.join(SOURCE, "tests", "cli", name)) as f, open(report, "w") as g:
        g.write(f.read())
    return convert(report)


CASES = {f.__name__: f for f in (
    a_pool_without_layout_is_one_segment_that_says_so,
    a_c_programs_driver_allocations_are_segments_with_their_stack,
    a_site_with_more_allocations_than_listed_keeps_the_rest_as_one_segment,
    an_annotated_pool_becomes_its_segments_with_holes_inactive,
    a_mixed_run_shows_the_cache_and_the_plain_allocations_beside_it,
)}

if __name__ == "__main__":
    try:
        CASES[sys.argv[1]]()
    except Failure as e:
        print(f"FAIL {sys.argv[1]}: {e}")
        sys.exit(1)
    print(f"ok {sys.argv[1]}")
