#!/usr/bin/env python3
"""The allocation families of serving stacks beyond cuMemAlloc (host
registration, ...), each reached through at least two load paths.

Run one test per process (`families_test.py NAME`), as preload_test.py, whose
helpers these tests share.  Assertions are exact: the program is
deterministic on the simulated driver.
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from preload_test import BUILD, MiB, check, eq, frames, marker_line, prog, run  # noqa: E402

SRC = "tests/integration/progs/families.c"
KiB = 1 << 10


def leak_rows(rep):
    """(kind, bytes, count, innermost function, its line) of every leak."""
    return sorted((l["kind"], l["bytes"], l["count"], frames(l)[0][0].split(".")[0], frames(l)[0][2])
                  for l in rep["leaks"])


def host_registrations_never_undone_are_leaks_at_their_call_sites():
    plain = run(prog("families"), "host", preload=False)
    r = run(prog("families"), "host")
    eq(r.rc, 0, "exit status")
    # The driver's answers are the program's with and without tensorleak:
    # 712 registering a registered range, 713 unregistering it twice.
    eq(r.out, plain.out, "program output under the preload")
    eq(r.out.splitlines(), ["cuMemHostRegister(6050) 0", "cudaHostRegister 0", "cuMemHostRegister(4000) 0",
                            "cuMemHostUnregister 0", "cuMemHostRegister_v2 0", "cudaHostRegister again 712",
                            "cudaHostUnregister 0", "cudaHostUnregister again 713"], "driver answers")
    rep = r.report
    eq(leak_rows(rep), sorted([
        ("host_registered", 1 * MiB, 1, "register_through_procaddr", marker_line(SRC, "FAMILY-SITE host procaddr")),
        ("host_registered", 256 * KiB, 1, "register_through_runtime", marker_line(SRC, "FAMILY-SITE host runtime")),
    ]), "leaks")
    s = rep["summary"]
    eq((s["leaked_bytes"], s["leaked_allocations"]), (MiB + 256 * KiB, 2), "leaked")
    eq((s["live_bytes"], s["live_allocations"]), (MiB + 256 * KiB, 2), "live")
    # Registered through procaddr (6050 and 4000), the runtime, the export.
    eq(s["total_allocations"], 4, "total allocations (cudaHostRegister counted once, not again at the driver)")
    eq(s["failed_allocations"], 1, "failed registrations")
    eq(s["invalid_frees"], 1, "unregistering twice")
    eq([(f["kind"]) for f in rep["invalid_frees"]], ["host_registered"], "invalid free kind")
    # Pinned host memory is no device's memory.
    eq([(d["device"], d["reserved_bytes"], d["allocated_bytes"]) for d in rep["devices"]], [(0, 0, 0)], "devices")
    check("2 leaked registered host ranges (1.2 MiB)" in r.err, "headline: " + r.err)


def a_context_teardown_undoes_its_host_registrations():
    r = run(prog("families"), "host", "reset")
    eq(r.rc, 0, "exit status")
    eq(r.out.splitlines()[-1], "cudaDeviceReset 0", "reset")
    s = r.report["summary"]
    eq(r.report["leaks"], [], "leaks")
    eq((s["live_bytes"], s["live_allocations"]), (0, 0), "live")
    eq((s["released_by_teardown_bytes"], s["released_by_teardown_allocations"]), (MiB + 256 * KiB, 2), "teardown")


def a_second_context_on_one_device_keeps_its_rows_apart():
    # The tracker stops asking the driver for the current context while the
    # process has shown it one; a second one, made and switched to through
    # cuGetProcAddress, must end that, or its rows would be the first
    # context's and its teardown would free none of them.
    plain = run(prog("families"), "contexts", preload=False)
    r = run(prog("families"), "contexts")
    eq(r.rc, 0, "exit status")
    eq(r.out, plain.out, "program output under the preload")
    eq(r.out.splitlines(), ["cudaMalloc 0", "cuCtxCreate(12050) 0", "cuMemAlloc 0", "cuCtxPopCurrent 0",
                            "cudaMalloc 0", "cuCtxPushCurrent(4000) 0", "cuMemAlloc 0", "cuCtxPopCurrent 0",
                            "cuCtxDestroy 0"], "program output")
    s = r.report["summary"]
    eq((s["released_by_teardown_bytes"], s["released_by_teardown_allocations"]), (320 * KiB, 2), "teardown")
    eq((s["live_bytes"], s["live_allocations"]), (MiB + 512 * KiB, 2), "live")
    eq(sorted(l["bytes"] for l in r.report["leaks"]), [512 * KiB, MiB], "leaks")


def contexts_made_on_one_thread_while_another_allocates_keep_their_rows_apart():
    # One thread allocates in the primary context, through the shortcut,
    # while another makes contexts, allocates in them and destroys them:
    # whatever the interleaving, each teardown frees its own three rows.
    r = run(prog("families"), "contexts", "threads")
    eq((r.rc, r.out), (0, ""), "exit status and failures")
    s = r.report["summary"]
    eq((s["released_by_teardown_bytes"], s["released_by_teardown_allocations"]), (15 * 64 * KiB, 15), "teardown")
    eq((s["live_bytes"], s["live_allocations"]), (MiB + 10 * 4 * KiB, 11), "live")
    eq(s["total_allocations"], 1 + 2000 + 10 + 15, "allocations")


# The driver's sizes (sim/README.md, CUDA arrays): rows padded to 512 bytes,
# levels summed, the whole rounded to 64 KiB.
ARRAY_2D = 7 * 64 * KiB        # 1000 floats x 100 rows: 4096 x 100 = 400 KiB
ARRAY_3D = 15 * 64 * KiB       # 300 uchar4 x 200 x 3: 1536 x 600 = 900 KiB
MIPMAP = 12 * 64 * KiB         # 512 x 512 halves, 10 levels: 767.5 KiB
PITCHED_3D = 1024 * 10 * 5     # cudaMalloc3D 1000 x 10 x 5 bytes at pitch 1024


def cuda_arrays_never_destroyed_are_leaks_at_their_call_sites_with_the_drivers_size():
    plain = run(prog("families"), "array", preload=False)
    r = run(prog("families"), "array")
    eq(r.rc, 0, "exit status")
    eq(r.out, plain.out, "program output under the preload")
    eq(r.out.splitlines(), [
        "cudaMallocArray 0 size %d alignment 65536" % ARRAY_2D,
        "cuArray3DCreate(3020) 0 size %d alignment 65536" % ARRAY_3D,
        "cuMipmappedArrayCreate 0 size %d alignment 65536" % MIPMAP,
        "cudaMalloc3D 0 pitch 1024 xsize 1000 ysize 10",
        "cuArrayCreate(3020) 0 size %d alignment 65536" % (19 * 64 * KiB),
        "cudaFreeArray 0",
        "cudaMalloc3DArray 0 size %d alignment 65536" % (2 * MiB),
        "cuArrayDestroy 0",
        "cudaFreeArray again 400",
        "cudaMallocMipmappedArray 0 size %d alignment 65536" % (6 * 64 * KiB),
        "cuMipmappedArrayDestroy(5000) 0",
        "cuMipmappedArrayCreate(5000) 0 size %d alignment 65536" % (64 * KiB),
        "cudaFreeMipmappedArray 0",
        "cuMipmappedArrayCreate 9 levels 1",
        "cuArrayCreate odd format 1",
        "cuArrayCreate(3020) 1D 0 size %d alignment 65536" % (64 * KiB),
        "cuArrayDestroy(2000) 0",
        "cuArrayDestroy(2000) again 400",
    ], "driver answers")
    rep = r.report
    eq(leak_rows(rep), sorted([
        ("array", ARRAY_2D, 1, "array_through_runtime", marker_line(SRC, "FAMILY-SITE array runtime")),
        ("array", ARRAY_3D, 1, "array3d_through_procaddr", marker_line(SRC, "FAMILY-SITE array procaddr")),
        ("array", MIPMAP, 1, "mipmap_through_driver", marker_line(SRC, "FAMILY-SITE array mipmap")),
        ("device", PITCHED_3D, 1, "pitched_3d_through_runtime", marker_line(SRC, "FAMILY-SITE array malloc3d")),
    ]), "leaks")
    leaked = ARRAY_2D + ARRAY_3D + MIPMAP + PITCHED_3D
    s = rep["summary"]
    eq((s["leaked_bytes"], s["leaked_allocations"]), (leaked, 4), "leaked")
    eq((s["live_bytes"], s["live_allocations"]), (leaked, 4), "live")
    # The 3D array (2 MiB) was live with the four leaks.
    eq(s["peak_live_bytes"], leaked + 2 * MiB, "peak")
    # Runtime creations counted once, not again at the driver they reach.
    eq(s["total_allocations"], 9, "total allocations")
    eq(s["failed_allocations"], 2, "refused shapes")
    eq(s["invalid_frees"], 2, "an array destroyed twice more")
    eq([f["kind"] for f in rep["invalid_frees"]], ["array", "array"], "invalid free kinds")
    # Device memory, once: the driver's own count agrees.
    d = rep["devices"]
    eq([(x["device"], x["reserved_bytes"], x["allocated_bytes"], x["total"] - x["free"]) for x in d],
       [(0, leaked, leaked, leaked)], "devices")
    check("1 leaked device allocation (50.0 KiB) and 3 leaked CUDA arrays (2.1 MiB)" in r.err, "headline: " + r.err)


def a_context_teardown_destroys_its_cuda_arrays():
    r = run(prog("families"), "array", "reset")
    eq(r.rc, 0, "exit status")
    eq(r.out.splitlines()[-1], "cudaDeviceReset 0", "reset")
    s = r.report["summary"]
    eq(r.report["leaks"], [], "leaks")
    eq((s["live_bytes"], s["live_allocations"]), (0, 0), "live")
    eq((s["released_by_teardown_bytes"], s["released_by_teardown_allocations"]),
       (ARRAY_2D + ARRAY_3D + MIPMAP + PITCHED_3D, 4), "teardown")
    eq([(x["reserved_bytes"], x["total"] - x["free"]) for x in r.report["devices"]], [(0, 0)], "devices")


def a_cuda_array_the_driver_gives_no_size_for_is_unknown_not_zero():
    # cuda.h: cuArrayGetMemoryRequirements refuses an array made without
    # CUDA_ARRAY3D_DEFERRED_MAPPING; the simulator does so on request.
    env = {"SIMCUDA_ARRAY_REQUIREMENTS": "deferred-only"}
    plain = run(prog("families"), "array", env=env, preload=False)
    r = run(prog("families"), "array", env=env)
    eq(r.rc, 0, "exit status")
    eq(r.out, plain.out, "program output under the preload")
    eq(r.out.splitlines()[0], "cudaMallocArray 1 size 0 alignment 0", "the program's own query is refused (1)")
    rep = r.report
    rows = sorted((l["kind"], l["bytes"], l["count"], l.get("unknown_size_allocations"),
                   frames(l)[0][0].split(".")[0], frames(l)[0][2]) for l in rep["leaks"])
    eq(rows, sorted([
        ("array", None, 1, 1, "array_through_runtime", marker_line(SRC, "FAMILY-SITE array runtime")),
        ("array", None, 1, 1, "array3d_through_procaddr", marker_line(SRC, "FAMILY-SITE array procaddr")),
        ("array", None, 1, 1, "mipmap_through_driver", marker_line(SRC, "FAMILY-SITE array mipmap")),
        ("device", PITCHED_3D, 1, None, "pitched_3d_through_runtime", marker_line(SRC, "FAMILY-SITE array malloc3d")),
    ]), "leaks: the arrays' bytes unknown, not 0")
    s = rep["summary"]
    # Byte totals hold the known allocations only; counts hold all of them.
    eq((s["leaked_bytes"], s["leaked_allocations"]), (PITCHED_3D, 4), "leaked")
    eq((s["live_bytes"], s["live_allocations"], s["peak_live_bytes"]), (PITCHED_3D, 4, PITCHED_3D), "live")
    eq(s["unknown_size_allocations"], 3, "allocations of unknown size")
    eq((s["total_allocations"], s["failed_allocations"], s["invalid_frees"]), (9, 2, 2), "counts as before")
    # The driver still holds the arrays' memory: its figure is the one to read.
    d = rep["devices"][0]
    eq((d["reserved_bytes"], d["total"] - d["free"]), (PITCHED_3D, ARRAY_2D + ARRAY_3D + MIPMAP + PITCHED_3D),
       "tensorleak's device figure without them, the driver's with them")
    check("1 leaked device allocation (50.0 KiB) and 3 leaked CUDA arrays (size unknown) from 4 call sites" in r.err,
          "headline: " + r.err)
    eq(r.err.count("Leak of unknown size in 1 allocation(s) [array] allocated from:"), 3, "each array: " + r.err)
    unknown_line = "size unknown: 3 live allocation(s) the driver gave no size for, in no byte figure above"
    check(unknown_line in r.err, r.err)

    # The CLI reads and says the same; merge and check keep them unknown.
    tmp = tempfile.mkdtemp(prefix="tl-fam-")
    paths = []
    for i, x in enumerate((rep, run(prog("families"), "array", env=env).report)):
        paths.append(os.path.join(tmp, "r%d.json" % i))
        with open(paths[-1], "w") as f:
            json.dump(x, f)
    cli = os.path.join(BUILD, "tools", "tensorleak")
    text = subprocess.run([cli, "report", paths[0]], capture_output=True, text=True)
    eq(text.returncode, 0, "report: " + text.stderr)
    check("and 3 leaked CUDA arrays (size unknown) from 4 call sites" in text.stdout and unknown_line in text.stdout,
          text.stdout)
    eq(text.stdout.count("Leak of unknown size in 1 allocation(s) [array] allocated from:"), 3, text.stdout)
    merged = os.path.join(tmp, "merged.json")
    m = subprocess.run([cli, "merge", paths[0], paths[1], "-o", merged], capture_output=True, text=True)
    eq(m.returncode, 0, "merge: " + m.stderr)
    with open(merged) as f:
        mr = json.load(f)
    eq((mr["summary"]["unknown_size_allocations"], mr["summary"]["leaked_bytes"]), (6, 2 * PITCHED_3D), "merged summary")
    eq(sorted((l["kind"], l["bytes"], l.get("unknown_size_allocations")) for l in mr["leaks"]),
       sorted([("array", None, 1)] * 6 + [("device", PITCHED_3D, None)] * 2), "merged leaks")
    ok = subprocess.run([cli, "check", paths[0], "--max-leaked-bytes", str(PITCHED_3D)], capture_output=True, text=True)
    bad = subprocess.run([cli, "check", paths[0], "--max-leaked-bytes", str(PITCHED_3D - 1)], capture_output=True,
                         text=True)
    eq((ok.returncode, bad.returncode), (0, 1), "check counts the known bytes: " + ok.stdout + bad.stdout)
    # diff: an array more is an allocation more, of unknown size.
    older = dict(rep, leaks=[l for l in rep["leaks"] if not frames(l)[0][0].startswith("mipmap_through_driver")])
    with open(os.path.join(tmp, "older.json"), "w") as f:
        json.dump(older, f)
    d = subprocess.run([cli, "diff", os.path.join(tmp, "older.json"), paths[0]], capture_output=True, text=True)
    eq(d.returncode, 0, "diff: " + d.stderr)
    eq([l for l in d.stdout.splitlines() if not l.startswith(" ")],
       ["tensorleak diff: %s -> %s (leaks): +0 byte(s) (+0 B), +1 allocation(s) in 1 changed call site(s)"
        % (os.path.join(tmp, "older.json"), paths[0]),
        "+0 byte(s) (+0 B), +1 allocation(s) [array, size unknown]: 0 -> 0 byte(s), 0 -> 1 allocation(s), from:"],
       "diff")


if __name__ == "__main__":
    globals()[sys.argv[1]]()  # an unknown name fails with KeyError
    print("ok", sys.argv[1])
