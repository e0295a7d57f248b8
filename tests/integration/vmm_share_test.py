#!/usr/bin/env python3
"""Shareable VMM handles (cuMemExportToShareableHandle,
cuMemImportFromShareableHandle with POSIX descriptors), in one process and in
two that pass the descriptor over a unix socket, each under tensorleak.

Run one test per process (`vmm_share_test.py NAME`), as preload_test.py.
Assertions are exact: the program is deterministic on the simulated driver.
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from preload_test import BUILD, MiB, check, eq, fail, frames, marker_line, prog, run  # noqa: E402

CLI = os.path.join(BUILD, "tools", "tensorleak")

SRC = "tests/integration/progs/vmm_share.c"


def placed(site):
    f = frames(site)[0]
    return (f[0], f[2])


def an_export_imported_back_in_one_process_counts_its_bytes_once():
    plain = run(prog("vmm_share"), "same", preload=False)
    r = run(prog("vmm_share"), "same")
    eq(r.rc, 0, "exit status")
    eq(r.out, plain.out, "program output under the preload")
    lines = r.out.splitlines()
    check("same handle 1" in lines, "the import of an allocation held here is its handle: " + r.out)
    check('read "written through the import"' in lines, "bytes through the imported mapping: " + r.out)
    check("retained the import 1" in lines, "retain on the imported mapping: " + r.out)
    rep = r.report
    # The created reference is released, the imported one kept: the handle
    # lives on, 4 MiB once, at its creation.
    eq([(l["kind"], l["bytes"], l["count"], l["imported"]) + placed(l) for l in rep["leaks"]],
       [("vmm_handle", 4 * MiB, 1, False, "same", marker_line(SRC, "VMM-SITE same create"))], "leaks")
    shared = rep["leaks"][0]["shared"]
    eq([(s["bytes"], s["imported"]) for s in shared], [(4 * MiB, False)], "shared handles")
    check(shared[0]["identity"] is not None and ":" in shared[0]["identity"], "identity: %r" % shared)
    s = rep["summary"]
    eq((s["live_bytes"], s["live_allocations"]), (4 * MiB, 1), "live")
    eq((s["imported_bytes"], s["imported_allocations"]), (0, 0), "imported")
    eq([(d["device"], d["reserved_bytes"]) for d in rep["devices"]], [(0, 4 * MiB)], "devices")


def an_import_given_as_a_new_handle_counts_its_bytes_once():
    # A driver that answers an import of the process's own export with a new
    # handle (SIMCUDA_IMPORT_OWN=new): the import is an alias of 0 bytes while
    # the created handle lives, and takes the 4 MiB when it is released.
    env = {"SIMCUDA_IMPORT_OWN": "new"}
    import_line = marker_line(SRC, "VMM-SITE same import")
    for args, leaks, live, imported in (
        (("same", "keep"), [("vmm_handle", 0, 1, True, "same", import_line),
                            ("vmm_handle", 4 * MiB, 1, False, "same", marker_line(SRC, "VMM-SITE same create"))],
         (4 * MiB, 2), (0, 1)),
        (("same",), [("vmm_handle", 4 * MiB, 1, True, "same", import_line)], (4 * MiB, 1), (4 * MiB, 1)),
    ):
        plain = run(prog("vmm_share"), *args, env=env, preload=False)
        r = run(prog("vmm_share"), *args, env=env)
        eq(r.rc, 0, "exit status")
        eq(r.out, plain.out, "program output under the preload")
        check("same handle 0" in r.out.splitlines(), "a new handle: " + r.out)
        check("retained the import 1" in r.out.splitlines(), "retain on the imported mapping: " + r.out)
        rep = r.report
        eq(sorted((l["kind"], l["bytes"], l["count"], l["imported"]) + placed(l) for l in rep["leaks"]), sorted(leaks),
           "leaks %s" % (args,))
        s = rep["summary"]
        eq((s["live_bytes"], s["live_allocations"]), live, "live %s" % (args,))
        eq((s["imported_bytes"], s["imported_allocations"]), imported, "imported %s" % (args,))
        # The driver keeps the allocation's memory while either handle lives.
        eq([(d["total"] - d["free"], d["reserved_bytes"]) for d in rep["devices"]], [(4 * MiB, 4 * MiB)],
           "device memory used and reserved %s" % (args,))
        ids = {e["identity"] for l in rep["leaks"] for e in l["shared"]}
        eq(len(ids), 1, "one allocation, one identity: %r" % ids)
        eq(s["invalid_frees"], 0, "no invalid frees")


def the_driver_refuses_what_a_handle_was_not_created_to_share():
    r = run(prog("vmm_share"), "same")
    plain = run(prog("vmm_share"), "same", preload=False)
    eq(r.out, plain.out, "program output under the preload")
    lines = r.out.splitlines()
    # 1 CUDA_ERROR_INVALID_VALUE, 801 CUDA_ERROR_NOT_SUPPORTED.
    eq([l for l in lines if l.split()[0] in ("export", "import", "create")],
       ["export plain 1", "export win32 1", "import closed fd 1", "import /dev/null 1",
        "import fabric 801", "create win32 801"], "refusals")
    s = r.report["summary"]
    eq(s["failed_allocations"], 1, "the refused create")
    eq(s["invalid_frees"], 0, "no invalid frees")


def an_imported_handle_in_another_process_is_an_imported_row_with_the_exporters_identity():
    plain = run(prog("vmm_share"), "pair", preload=False)
    r = run(prog("vmm_share"), "pair")
    eq(r.rc, 0, "exit status")
    eq(sorted(r.out.splitlines()), sorted(plain.out.splitlines()), "program output under the preload")
    lines = r.out.splitlines()
    check('read "the exporter\'s bytes"' in lines, "the importer sees the exporter's bytes: " + r.out)
    check('read "the importer was here"' in lines, "the exporter sees the importer's bytes: " + r.out)
    eq(len(r.reports), 2, "one exit report per process")
    by_import = {any(l.get("imported") for l in rep["leaks"]): rep for rep in r.reports}
    exporter, importer = by_import[False], by_import[True]
    check(exporter["pid"] != importer["pid"], "two processes")
    eq([(l["kind"], l["bytes"], l["count"], l["imported"]) + placed(l) for l in exporter["leaks"]],
       [("vmm_handle", 6 * MiB, 1, False, "pair", marker_line(SRC, "VMM-SITE pair create"))], "exporter's leaks")
    eq([(l["kind"], l["bytes"], l["count"], l["imported"]) + placed(l) for l in importer["leaks"]],
       [("vmm_handle", 6 * MiB, 1, True, "importer", marker_line(SRC, "VMM-SITE pair import"))], "importer's leaks")
    ex_id = [s["identity"] for s in exporter["leaks"][0]["shared"]]
    im_id = [s["identity"] for s in importer["leaks"][0]["shared"]]
    check(ex_id[0] is not None, "exporter's identity")
    eq(im_id, ex_id, "the importer's identity is the exporter's (the descriptor's file)")
    eq([s["imported"] for s in importer["leaks"][0]["shared"]], [True], "imported entry")
    es, ims = exporter["summary"], importer["summary"]
    eq((es["live_bytes"], es["imported_bytes"]), (6 * MiB, 0), "exporter's figures")
    eq((ims["live_bytes"], ims["imported_bytes"], ims["imported_allocations"]), (6 * MiB, 6 * MiB, 1),
       "importer's figures")
    # The mapping of the imported handle is on the device the driver says.
    eq([d["device"] for d in importer["devices"]], [0], "importer's devices")
    eq(ims["invalid_frees"], 0, "retain and release through the imported mapping are no invalid frees")


def pair_reports():
    """The exporter's and the importer's exit reports, written to files."""
    r = run(prog("vmm_share"), "pair")
    eq(r.rc, 0, "exit status")
    eq(len(r.reports), 2, "one exit report per process")
    tmp = tempfile.mkdtemp(prefix="tl-vmm-share-")
    paths = []
    for i, rep in enumerate(r.reports):
        path = os.path.join(tmp, "rank%d.json" % i)
        with open(path, "w") as f:
            json.dump(rep, f)
        paths.append(path)
    return r.reports, paths


def cli(*args):
    p = subprocess.run([CLI, *args], capture_output=True, text=True, timeout=30)
    return p.returncode, p.stdout, p.stderr


def merging_the_exporters_and_importers_reports_counts_the_allocation_once():
    reports, paths = pair_reports()
    rc, out, err = cli("merge", *paths)
    eq(rc, 0, "merge exit status: " + err)
    m = json.loads(out)
    s = m["summary"]
    # Each process holds the 6 MiB allocation (two handles); the job holds it once.
    eq(sum(r["summary"]["live_bytes"] for r in reports), 12 * MiB, "the inputs' sum")
    eq((s["live_bytes"], s["leaked_bytes"], s["shared_bytes_counted_once"]), (6 * MiB, 6 * MiB, 6 * MiB),
       "merged figures")
    eq((s["imported_bytes"], s["imported_allocations"]), (6 * MiB, 1), "imported, summed")
    eq(sorted((l["bytes"], l["imported"]) for l in m["leaks"]), [(6 * MiB, False), (6 * MiB, True)],
       "both handles stay listed, per process")
    eq(sorted((e["imported"], e.get("counted_elsewhere", False)) for l in m["leaks"] for e in l["shared"]),
       [(False, False), (True, True)], "the imported entry is marked counted elsewhere")
    merged = os.path.join(os.path.dirname(paths[0]), "merged.json")
    with open(merged, "w") as f:
        f.write(out)
    rc, out, err = cli("check", merged)
    eq((rc, out.strip()), (1, "tensorleak check: FAIL: %d byte(s) leaked (limit 0), 0 byte(s) growth (limit 0)" % (6 * MiB)),
       "check counts the shared allocation once")
    rc, out, err = cli("check", merged, "--max-leaked-bytes", str(6 * MiB))
    eq(rc, 0, "check passes at the allocation's size: " + out)
    # Only the importer's report: its creator is not among the inputs, so
    # the imported handle is what counts the allocation.
    importer = [p for p, r in zip(paths, reports) if r["summary"]["imported_bytes"]]
    rc, out, err = cli("merge", *importer)
    eq(rc, 0, "merge exit status: " + err)
    s = json.loads(out)["summary"]
    eq((s["live_bytes"], s["shared_bytes_counted_once"]), (6 * MiB, 0), "the importer alone")


def the_cli_shows_imported_handles():
    reports, paths = pair_reports()
    importer = [p for p, r in zip(paths, reports) if r["summary"]["imported_bytes"]][0]
    exporter = [p for p in paths if p != importer][0]
    rc, out, err = cli("report", importer)
    eq(rc, 0, "report exit status: " + err)
    check("Leak of 6.0 MiB in 1 allocation(s) [vmm_handle, imported] allocated from:" in out,
          "text report names the imported handle: " + out)
    rc, out, err = cli("report", exporter)
    check("[vmm_handle] allocated from:" in out and "imported" not in out, "the exporter's is created: " + out)
    rc, out, err = cli("report", "--format", "html", importer)
    eq(rc, 0, "html exit status: " + err)
    check("vmm_handle, imported" in out, "html names the imported handle")
    rc, out, err = cli("report", "--format", "sarif", importer)
    eq(rc, 0, "sarif exit status: " + err)
    results = json.loads(out)["runs"][0]["results"]
    eq([r["properties"].get("imported") for r in results], [True], "sarif result properties")
    check("[vmm_handle, imported]" in results[0]["message"]["text"], "sarif message: %r" % results[0]["message"])
    rc, out, err = cli("report", "--format", "folded", importer)
    eq(rc, 0, "folded exit status: " + err)
    eq([l.split(" ")[-1] for l in out.splitlines()], [str(6 * MiB)], "folded bytes")
    check(out.splitlines()[0].rsplit(" ", 1)[0].endswith(";importer;[imported vmm_handle]"), "folded: " + out)
    # diff: the importer's site is not the exporter's, whatever their stacks.
    rc, out, err = cli("diff", exporter, importer)
    check(rc in (0, 1), "diff exit status: " + err)
    check("imported" in out, "diff names the imported site: " + out)
    # The library's own text report at exit says it too.
    r = run(prog("vmm_share"), "pair")
    check("[vmm_handle, imported] allocated from:" in r.err, "the library's text report: " + r.err[-2000:])


if __name__ == "__main__":
    name = sys.argv[1]
    fn = globals().get(name)
    if not fn:
        fail("no test " + name)
    fn()
    print("ok", name)
