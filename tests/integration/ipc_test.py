#!/usr/bin/env python3
"""CUDA IPC between two processes under the preload (progs/ipc.c): the
exporter's allocation is its memory, the importer's mapping of it is a leak
of kind ipc_mapping when never closed, counted apart from the importer's
memory; both reports name the allocation by the digest of its handle, and
`tensorleak merge` pairs them and counts the memory once.

Run one test per process (`ipc_test.py NAME`), as preload_test.py, whose
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

SRC = "tests/integration/progs/ipc.c"
CLI = os.path.join(BUILD, "tools", "tensorleak")


def expected_output(api):
    """What the two processes print, the driver's answers included:
    201 (CUDA_ERROR_INVALID_CONTEXT) opening a handle in its own process, 1
    (INVALID_VALUE) closing a closed mapping, opening a handle of freed
    memory and one that is no handle."""
    start = ["cudaFree(0) 0"] if api == "runtime" else []
    return (start + ["allocate 1048576 0", "allocate 262144 0", "allocate 65536 0", "write 0", "write 0"]
            + ["export 0"] * 4 + ["same handle 1", "free 0", "open 201"]
            + start + ["open 0", "open 0", "same address 1", "open 0",
                       "read 0, 1048576 of 1048576 bytes as written", "read 0, 262144 of 262144 bytes as written",
                       "address range 0, base the mapping's, 1048576 bytes", "close 0", "close 0",
                       "read 0, 1048576 of 1048576 bytes as written", "close 1", "open 1", "open 1",
                       "importer exit 0", "free 0"])


def two_reports(r):
    """(exporter's, importer's) exit reports of one run."""
    exits = [rep for rep in r.reports if rep["reason"] == "exit"]
    eq(len(exits), 2, "exit reports (one per process)")
    importer = [rep for rep in exits if rep["command"][1].startswith("import")]
    exporter = [rep for rep in exits if not rep["command"][1].startswith("import")]
    eq((len(exporter), len(importer)), (1, 1), "one exporter and one importer report")
    return exporter[0], importer[0]


def leak_rows(rep):
    """(kind, bytes, count, innermost function, its line) of every leak."""
    return [(l["kind"], l["bytes"], l["count"], frames(l)[0][0].split(".")[0], frames(l)[0][2]) for l in rep["leaks"]]


def mapping_stays_a_leak_of_the_importer(api):
    site = "procaddr" if api == "dlsym" else api  # dlsym calls the pointers where procaddr does
    plain = run(prog("ipc"), api, preload=False)
    r = run(prog("ipc"), api)
    eq(r.rc, 0, "exit status: " + r.err)
    eq(plain.out.splitlines(), expected_output(api), "driver answers without the preload")
    eq(r.out, plain.out, "program output under the preload")
    exporter, importer = two_reports(r)

    # The exporter: A (1 MiB) never freed is its leak and its memory; B was
    # freed after the importer was done, C before.  Only A is still exported.
    eq(leak_rows(exporter), [("device", MiB, 1, "allocate", marker_line(SRC, "IPC-SITE export " + site))],
       "exporter's leaks")
    s = exporter["summary"]
    eq((s["leaked_bytes"], s["live_bytes"], s["live_allocations"], s["total_allocations"]), (MiB, MiB, 1, 3),
       "exporter's figures")
    eq((s["ipc_mapped_bytes"], s["ipc_mappings"], s["leaked_ipc_mapped_bytes"]), (0, 0, 0), "exporter maps nothing")
    eq([(d["device"], d["reserved_bytes"], d["allocated_bytes"]) for d in exporter["devices"]], [(0, MiB, MiB)],
       "exporter's device")
    exported = exporter["ipc"]["exported"]
    eq([(e["bytes"], e["site"]) for e in exported], [(MiB, exporter["leaks"][0]["site"])], "exported")
    eq(exporter["ipc"]["mapped"], [], "exporter's mappings")
    handle = exported[0]["handle"]
    check(len(handle) == 16 and int(handle, 16) != 0, "handle digest: " + handle)

    # The importer: A opened twice and closed once stays mapped (one
    # reference), at the open's call site; its bytes are the exporter's, in
    # none of the importer's memory figures.  B's second close is an
    # invalid free; the refused opens are nothing.
    eq(leak_rows(importer), [("ipc_mapping", MiB, 1, "open_handle", marker_line(SRC, "IPC-SITE open " + site))],
       "importer's leaks")
    s = importer["summary"]
    eq((s["leaked_bytes"], s["leaked_allocations"], s["live_bytes"], s["live_allocations"], s["peak_live_bytes"]),
       (0, 1, 0, 0, 0), "importer's memory figures")
    eq((s["ipc_mapped_bytes"], s["ipc_mappings"], s["leaked_ipc_mapped_bytes"]), (MiB, 1, MiB), "importer's mapped bytes")
    eq((s["total_allocations"], s["failed_allocations"], s["invalid_frees"]), (2, 0, 1), "importer's counts")
    eq([(d["device"], d["reserved_bytes"], d["allocated_bytes"]) for d in importer["devices"]], [(0, 0, 0)],
       "importer's device holds none of it")
    eq([(f["kind"], frames(f)[0][0]) for f in importer["invalid_frees"]], [("ipc_mapping", "close_mapping")],
       "closing B twice")
    mapped = importer["ipc"]["mapped"]
    eq([(m["handle"], m["bytes"], m["references"], m["site"]) for m in mapped],
       [(handle, MiB, 1, importer["leaks"][0]["site"])], "the mapping names the exporter's handle")
    eq(importer["ipc"]["exported"], [], "importer's exports")
    check("1 leaked CUDA IPC mapping from 1 call sites; 1.0 MiB of other processes' memory left mapped\n" in r.err,
          "importer's headline: " + r.err)
    check("mapped from other processes (CUDA IPC, their memory): 1.0 MiB in 1 mapping(s)\n" in r.err, r.err)
    check("exported to other processes (CUDA IPC, this process's memory): 1.0 MiB in 1 allocation(s)\n" in r.err,
          "exporter's line: " + r.err)
    return exporter, importer


def an_ipc_mapping_never_closed_is_a_leak_of_the_importer_apart_from_its_memory_runtime():
    mapping_stays_a_leak_of_the_importer("runtime")


def an_ipc_mapping_never_closed_is_a_leak_of_the_importer_apart_from_its_memory_driver():
    mapping_stays_a_leak_of_the_importer("driver")


def an_ipc_mapping_never_closed_is_a_leak_of_the_importer_apart_from_its_memory_procaddr():
    mapping_stays_a_leak_of_the_importer("procaddr")


def a_handle_whose_exporter_is_gone_is_refused_and_tracks_nothing():
    plain = run(prog("ipc"), "gone", "runtime", preload=False)
    r = run(prog("ipc"), "gone", "runtime")
    eq(r.rc, 0, "exit status: " + r.err)
    # 205: CUDA_ERROR_MAP_FAILED, as cudaErrorMapBufferObjectFailed.
    eq(plain.out.splitlines(), ["cudaFree(0) 0", "allocate 1048576 0", "export 0", "cudaFree(0) 0", "open 205"],
       "driver answers without the preload")
    eq(r.out, plain.out, "program output under the preload")
    exporter, importer = two_reports(r)
    eq([(e["bytes"]) for e in exporter["ipc"]["exported"]], [MiB], "exported at exit")
    eq((importer["leaks"], importer["ipc"]["mapped"], importer["summary"]["ipc_mappings"],
        importer["summary"]["total_allocations"]), ([], [], 0, 0), "the refused open is nothing")


def an_ipc_mapping_never_closed_is_a_leak_of_the_importer_apart_from_its_memory_dlsym():
    mapping_stays_a_leak_of_the_importer("dlsym")


def merge_pairs_the_mapping_with_the_exported_allocation_and_counts_it_once():
    exporter, importer = mapping_stays_a_leak_of_the_importer("driver")
    tmp = tempfile.mkdtemp(prefix="tl-it-ipc-")
    paths = []
    for name, rep in (("exporter.json", exporter), ("importer.json", importer)):
        paths.append(os.path.join(tmp, name))
        with open(paths[-1], "w") as f:
            json.dump(rep, f)
    out = os.path.join(tmp, "merged.json")
    m = subprocess.run([CLI, "merge", *paths, "-o", out], capture_output=True, text=True)
    eq(m.returncode, 0, "merge: " + m.stderr)
    merged = json.load(open(out))
    s = merged["summary"]
    # 1 MiB of physical memory, once: the exporter's; the mapping is apart.
    eq((s["leaked_bytes"], s["live_bytes"], s["reserved_bytes"]), (MiB, MiB, MiB), "memory counted once")
    eq((s["ipc_mapped_bytes"], s["leaked_ipc_mapped_bytes"], s["ipc_paired_bytes"], s["ipc_unpaired_mapped_bytes"]),
       (MiB, MiB, MiB, 0), "the mapping paired with its export")
    ipc = merged["ipc"]
    eq([(e["rank"], e["pid"], e["bytes"]) for e in ipc["exported"]], [(0, exporter["pid"], MiB)], "merged exports")
    eq([(e["rank"], e["pid"], e["references"], e["exported_by"]) for e in ipc["mapped"]],
       [(1, importer["pid"], 1, {"rank": 0, "pid": exporter["pid"]})], "merged mappings: exported by rank 0")
    eq([(l["kind"], l["rank"]) for l in merged["leaks"]], [("device", 0), ("ipc_mapping", 1)],
       "leaks: memory first, the mapping after it")

    # The importer's report alone: the exporter is not among the inputs.
    alone = os.path.join(tmp, "alone.json")
    m = subprocess.run([CLI, "merge", paths[1], "-o", alone], capture_output=True, text=True)
    eq(m.returncode, 0, "merge alone: " + m.stderr)
    a = json.load(open(alone))
    eq((a["summary"]["ipc_paired_bytes"], a["summary"]["ipc_unpaired_mapped_bytes"]), (0, MiB), "unpaired")
    eq([e["exported_by"] for e in a["ipc"]["mapped"]], [None], "no exporter")

    # The CLI renders the kind and the figures as the library does.
    t = subprocess.run([CLI, "report", out], capture_output=True, text=True)
    eq(t.returncode, 0, "report: " + t.stderr)
    check("1 leaked device allocation (1.0 MiB) and 1 leaked CUDA IPC mapping from 2 call sites; "
          "1.0 MiB of other processes' memory left mapped\n" in t.stdout, t.stdout)
    check("Leak of 1.0 MiB of another process's memory (CUDA IPC, counted there) in 1 allocation(s) "
          "[ipc_mapping, rank 1]" in t.stdout, t.stdout)
    check("mapped from other processes (CUDA IPC, their memory): 1.0 MiB in 1 mapping(s)\n" in t.stdout, t.stdout)
    check("exported to other processes (CUDA IPC, this process's memory): 1.0 MiB in 1 allocation(s)\n" in t.stdout,
          t.stdout)
    sarif = subprocess.run([CLI, "report", "--format", "sarif", paths[1]], capture_output=True, text=True).stdout
    check("Leak of 1.0 MiB of another process's memory (CUDA IPC, counted there) (1048576 bytes)" in sarif, sarif[:2000])
    html = subprocess.run([CLI, "report", "--format", "html", paths[1]], capture_output=True, text=True).stdout
    check("Mapped from other processes: 1.0 MiB in 1 CUDA IPC mapping(s)" in html, "html verdict")
    # The gate counts memory: the importer leaked none of its own.
    c = subprocess.run([CLI, "check", paths[1], "--max-leaked-bytes", "0"], capture_output=True, text=True)
    eq((c.returncode, c.stdout.split(":")[1].strip()), (0, "PASS"), "check: " + c.stdout)


if __name__ == "__main__":
    name = sys.argv[1]
    fn = globals().get(name)
    if not fn:
        print("FAIL: no test", name)
        sys.exit(1)
    fn()
    print("ok", name)
