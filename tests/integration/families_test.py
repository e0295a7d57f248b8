#!/usr/bin/env python3
"""The allocation families of serving stacks beyond cuMemAlloc (host
registration, ...), each reached through at least two load paths.

Run one test per process (`families_test.py NAME`), as preload_test.py, whose
helpers these tests share.  Assertions are exact: the program is
deterministic on the simulated driver.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from preload_test import MiB, check, eq, frames, marker_line, prog, run  # noqa: E402

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


if __name__ == "__main__":
    globals()[sys.argv[1]]()  # an unknown name fails with KeyError
    print("ok", sys.argv[1])
