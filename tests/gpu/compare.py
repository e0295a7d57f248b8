#!/usr/bin/env python3
"""Hold tensorleak's reports against the ground truth of the real-GPU kit.

run.sh runs every sample and writes one tab-separated record per run:

    kind  name  build  tool  rc  seconds  stdout  stderr  reports_dir  extra

kind is build | sample | torch | fw | tsnap | bench | skip; tool is none | preload | cli |
cli-default | sanitizer; extra is the setting of a torch, fw or bench run (a
PYTORCH_CUDA_ALLOC_CONF, or VAR=VALUE settings), or for a skip whether the skipped
step was required.  The programs print their ground truth themselves
("TL_GROUND_TRUTH {json}" on stdout, "TL_BENCH {json}" for the benchmark, "TL_SKIP
{json}" for a framework loop whose framework is not installed); tensorleak's JSON
reports lie in reports_dir.

    compare.py evaluate --records FILE --env ENV.json --md OUT.md --json OUT.json
    compare.py selftest

evaluate prints the details of every mismatch, then the tables (last), writes the same
as Markdown and a JSON of all checks, and exits 1 on any mismatch, 0 otherwise.
Standard library only, but for torch.cuda._memory_viz, imported where it exists to run
its views on the torch_snapshot row's pickle.
"""
import argparse
import glob
import json
import os
import pickle
import pickletools
import re
import shutil
import statistics
import sys
import tempfile

MiB = 1 << 20
OK, BAD, NA, INFO, SKIPPED = "ok", "MISMATCH", "n/a", "info", "skipped"
SAMPLE_TOL = (4 * MiB, 0.02)   # reserved vs cuMemGetInfo delta, C samples
TORCH_TOL = (16 * MiB, 0.02)   # same, PyTorch (module loads, allocator metadata)
TORCH_STAT_TOL = 2 * MiB       # tensorleak vs torch.cuda.memory_stats()


def tol(value, spec):
    return max(spec[0], abs(value) * spec[1])


def fmt_b(n):
    if n is None:
        return "?"
    n = int(n)
    if abs(n) >= MiB or n == 0:
        return "%.1f MiB" % (n / MiB) if n % MiB else "%d MiB" % (n // MiB)
    return "%d B" % n


def fmt_cb(count, nbytes):
    if count is None:
        return "?"
    return "%s / %s" % (count, fmt_b(nbytes))


class Check:
    def __init__(self, what, status, detail=""):
        self.what, self.status, self.detail = what, status, detail

    def as_dict(self):
        return {"check": self.what, "status": self.status, "detail": self.detail}


class Row:
    """One run (or one group of runs) with its checks and the table cells."""

    def __init__(self, table, key):
        self.table, self.key, self.checks, self.cells = table, key, [], {}

    def add(self, what, status, detail=""):
        self.checks.append(Check(what, status, detail))

    def verdict(self):
        if any(c.status == BAD for c in self.checks):
            return "**FAIL**"
        if any(c.status == SKIPPED for c in self.checks):
            return "skipped"
        return "ok" if any(c.status == OK for c in self.checks) else "n/a"


def read_text(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def tagged_json(path, tag):
    """The last 'TAG {json}' line of a file, or None."""
    found = None
    for line in read_text(path).splitlines():
        i = line.find(tag + " ")
        if i >= 0:
            try:
                found = json.loads(line[i + len(tag) + 1:])
            except ValueError:
                pass
    return found


def load_reports(d):
    out, errors = [], []
    if not d or not os.path.isdir(d):
        return out, errors
    for p in sorted(glob.glob(os.path.join(d, "**", "*.json"), recursive=True)):
        try:
            with open(p) as f:
                r = json.load(f)
            if isinstance(r, dict) and r.get("tool") == "tensorleak":
                r["_path"], r["_mtime"] = p, os.path.getmtime(p)
                out.append(r)
        except (OSError, ValueError) as e:
            errors.append("%s: %s" % (os.path.basename(p), e))
    return out, errors


def pick(reports, pid, reason):
    c = [r for r in reports if r.get("reason") == reason and (pid is None or r.get("pid") == pid)]
    if reason == "api":
        labelled = [r for r in c if r.get("label") in ("end", None)]
        c = labelled or c
    c.sort(key=lambda r: (r["_mtime"], r["_path"]))
    return c[-1] if c else None


def summary(r, key):
    v = (r or {}).get("summary", {}).get(key)
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def live_leaks(r):
    return [x for x in (r or {}).get("leaks", []) or [] if not x.get("suppressed")]


def stack_has(entry, function):
    for fr in entry.get("stack", []) or []:
        if function in (fr.get("function") or ""):
            return True
    return False


def gt_delta(gt):
    try:
        return int(gt["free_start"]) - int(gt["free_end"])
    except (KeyError, TypeError, ValueError):
        return None


# --------------------------------------------------------------------- samples
CUDA_MEMORY_TYPE_HOST = 1  # cudaPointerAttributes.type of registered (and pinned) host memory


def families_truth(gt):
    """families.cu prints the driver's figures only; the report they imply is
    derived here, once: each leaked registration's range size, the 3D pitch x
    height x depth, each leaked array's requirements size where the driver
    answered and an allocation of unknown size where it refused (tensorleak
    then counts it in no byte figure).  Host ranges are no device's memory,
    so expected_held (the device bytes tensorleak can know) leaves them out."""
    fam = gt["families"]
    host = [h for h in fam["host"] if h.get("leaked")]
    arrays = [a for a in fam["arrays"] if a.get("leaked")]
    known = [a for a in arrays if a.get("req_rc") == 0]
    pitched = fam["pitched"]
    hb, ab, pb = sum(h["bytes"] for h in host), sum(a["size"] for a in known), pitched["bytes"]
    gt["leaks"] = {"count": len(host) + len(arrays) + 1, "bytes": hb + ab + pb}
    gt["kinds"] = {"host_registered": [len(host), hb], "device": [1, pb]}
    if len(known) == len(arrays):
        gt["kinds"]["array"] = [len(arrays), ab]
    gt["sites"] = ([{"function": h["function"], "count": 1, "bytes": h["bytes"]} for h in host]
                   + [{"function": a["function"], "count": 1, "bytes": a["size"]} for a in known]
                   + [{"function": pitched["function"], "count": 1, "bytes": pb}])
    gt["expected_held"] = ab + pb
    gt["unknown_size"] = len(arrays) - len(known)
    return gt


def sample_truth(path):
    gt = tagged_json(path, "TL_GROUND_TRUTH")
    if isinstance(gt, dict) and isinstance(gt.get("families"), dict):
        gt = families_truth(gt)
    return gt


def check_families(row, gt, exit_r, end_r):
    """Host registration and CUDA arrays (families.cu): every range the
    program registered is one the driver sees as host memory; each leaked
    array is one leak at its function, of the driver's requirements size or,
    where the driver refused them, of unknown size (null, never 0); and
    device 0 holds the device bytes only, none of the registered ranges."""
    fam = gt["families"]
    for h in fam["host"]:
        if h.get("pointer_type") != CUDA_MEMORY_TYPE_HOST:
            row.add("ground truth", BAD, "a registered %s range reads memory type %s from cudaPointerGetAttributes, "
                    "not host (%d)" % (fmt_b(h["bytes"]), h.get("pointer_type"), CUDA_MEMORY_TYPE_HOST))
    row.add("host registrations", INFO, "; ".join(
        "%s %s: memory type %s, cudaHostGetFlags rc %s flags %s%s" % (
            h.get("function") or "undone", fmt_b(h["bytes"]), h.get("pointer_type"), h.get("flags_rc"),
            h.get("flags"), "" if h.get("leaked") else ", after cudaHostUnregister: type %s, rc %s"
            % (h.get("pointer_type_after"), h.get("flags_rc_after"))) for h in fam["host"]))
    row.add("array requirements", INFO, "; ".join(
        "%s%s %s flags %s: %s" % (a["api"], " (deferred mapping)" if a.get("deferred") else "",
                                  "x".join(str(x) for x in a.get("extent") or []), a.get("flags"),
                                  ("size %s, alignment %s" % (fmt_b(a["size"]), a.get("alignment")))
                                  if a.get("req_rc") == 0 else "refused, error %s" % a.get("req_rc"))
        for a in fam["arrays"]))
    if exit_r is None:
        return
    ll = live_leaks(exit_r)
    good = True
    for a in (a for a in fam["arrays"] if a.get("leaked")):
        m = [x for x in ll if stack_has(x, a["function"])]
        got = [(x.get("kind"), x.get("count"), x.get("bytes"), x.get("unknown_size_allocations")) for x in m]
        want = [("array", 1, a["size"], None)] if a.get("req_rc") == 0 else [("array", 1, None, 1)]
        if got != want:
            good = False
            row.add("array %s" % a["function"], BAD, "leaks at %s (kind, count, bytes, unknown size): %s, truth %s%s"
                    % (a["function"], got, want, "" if a.get("req_rc") == 0
                       else " (the driver refused its requirements: error %s)" % a.get("req_rc")))
    un = summary(exit_r, "unknown_size_allocations") or 0
    if un != gt["unknown_size"]:
        good = False
        row.add("unknown size", BAD, "summary.unknown_size_allocations %s, arrays the driver gave no size for %s"
                % (un, gt["unknown_size"]))
    d0 = [d for d in (end_r or exit_r).get("devices") or [] if d.get("device") == 0]
    dev = num(d0[0].get("reserved_bytes")) if d0 else None
    if dev != gt["expected_held"]:
        good = False
        row.add("device bytes", BAD, "devices[0].reserved_bytes %s, truth %s (arrays and pitched memory; the "
                "registered host ranges are no device's)" % (fmt_b(dev), fmt_b(gt["expected_held"])))
    row.cells["kinds"] = row.cells.get("kinds", "") + (" + arrays ok" if good else " + **arrays wrong**")


def check_run_basics(row, rec, gt):
    if rec["timeout"]:
        row.add("ran", BAD, "timed out after %.0f s" % rec["seconds"])
    elif rec["rc"] != 0:
        row.add("ran", BAD, "exit status %d, expected 0 (see %s)" % (rec["rc"], os.path.basename(rec["stderr"])))
    if gt is None:
        row.add("ground truth", BAD, "no TL_GROUND_TRUTH line in %s" % os.path.basename(rec["stdout"]))
        return False
    return True


def check_states(row, gt, reports, exit_r):
    """A sleep/wake sample's states (gt["states"]: label, cuMemGetInfo's free
    memory then, the handle bytes and address space the program held): each
    state's snapshot must hold those handles and that address space, its
    reserved bytes must be the driver's drop in free memory since the start,
    its mark must read the same free memory, and every wake must come back to
    the figures before the first sleep."""
    states = gt.get("states")
    if not states:
        return
    marks = {m.get("label"): m for m in (exit_r or {}).get("marks") or []}
    start = int(gt["free_start"])
    reserved, good = {}, True
    for st in states:
        what = "state %s" % st["label"]
        snap = pick_label(reports, gt.get("pid"), st["label"])
        if snap is None:
            row.add(what, BAD, "no snapshot labelled %s" % st["label"])
            good = False
            continue
        res, va = summary(snap, "reserved_bytes"), summary(snap, "address_space_bytes")
        handles = sum(int(x.get("bytes") or 0) for x in snap.get("leaks") or [] if x.get("kind") == "vmm_handle")
        delta = start - int(st["free"])
        wrong = []
        if handles != st["handles"]:
            wrong.append("vmm_handle bytes %s, the program holds %s" % (fmt_b(handles), fmt_b(st["handles"])))
        if va != st["address_space"]:
            wrong.append("address space %s, the program keeps %s" % (fmt_b(va), fmt_b(st["address_space"])))
        if res is None or abs(res - delta) > tol(delta, SAMPLE_TOL):
            wrong.append("reserved_bytes %s vs cuMemGetInfo's drop %s" % (fmt_b(res), fmt_b(delta)))
        m = marks.get(st["label"])
        mf = m.get("device_free") if m else None
        if not isinstance(mf, int) or abs(mf - int(st["free"])) > SAMPLE_TOL[0]:
            wrong.append("the mark's device_free %s vs cuMemGetInfo %s" % (fmt_b(mf), fmt_b(st["free"])))
        reserved[st["label"]] = res
        good &= not wrong
        row.add(what, BAD if wrong else OK, "; ".join(wrong) or "reserved %s vs Δfree %s, handles %s, address space %s"
                % (fmt_b(res), fmt_b(delta), fmt_b(handles), fmt_b(va)))
    before = states[0]
    for st in states[1:]:
        if st["handles"] == before["handles"] and st["label"] in reserved and \
                reserved[st["label"]] != reserved.get(before["label"]):
            good = False
            row.add("wake %s" % st["label"], BAD, "reserved %s, before the sleep %s"
                    % (fmt_b(reserved[st["label"]]), fmt_b(reserved.get(before["label"]))))
    if gt.get("weights_intact") is False:
        good = False
        row.add("weights", BAD, "the weights copied back at wake differ from the ones put to sleep")
    row.cells["states"] = ("%d ok" % len(states)) if good else "**wrong**"


def eval_sample(rec):
    row = Row("samples", (rec["name"], rec["build"], rec["tool"]))
    gt = sample_truth(rec["stdout"])
    row.cells = {"sample": rec["name"], "build": rec["build"], "tool": rec["tool"]}
    if not check_run_basics(row, rec, gt):
        return row, gt
    row.cells["truth"] = fmt_cb(gt["leaks"]["count"], gt["leaks"]["bytes"])
    reports, errors = load_reports(rec["reports_dir"])
    for e in errors:
        row.add("report parses", BAD, e)
    check_invariants(row, [r for r in reports if r.get("pid") == gt.get("pid")])
    exit_r = pick(reports, gt.get("pid"), "exit")
    end_r = pick(reports, gt.get("pid"), "api")
    if rec["tool"] == "cli-default":
        # Under the default pattern the snapshot and the exit report each
        # keep a file; the exit report has the plain name.
        names = sorted(os.path.basename(r["_path"]) for r in reports)
        plain = "tensorleak.%s.json" % gt.get("pid")
        good = (exit_r is not None and os.path.basename(exit_r["_path"]) == plain and end_r is not None
                and end_r["_path"] != exit_r["_path"])
        row.add("default report names", OK if good else BAD,
                "files %s: want the exit report as %s and the 'end' snapshot in a file of its own"
                % (", ".join(names) or "none", plain))
    if exit_r is None:
        row.add("exit report", BAD, "no exit report for pid %s in %s (%d report(s) there)"
                % (gt.get("pid"), rec["reports_dir"], len(reports)))
    else:
        n, b = summary(exit_r, "leaked_allocations"), summary(exit_r, "leaked_bytes")
        row.cells["tensorleak"] = fmt_cb(n, b)
        trk = exit_r.get("tracker")
        if isinstance(trk, dict):
            # What tracking cost on real hardware: DWARF unwinds (the rest
            # were frame-pointer walks), threads whose entry frames were
            # learned, and lock-free ownerships of the live table.
            row.add("tracker", INFO, "stacks unwound %s, thread entries learned %s, table owner claims %s"
                    % (trk.get("stacks_unwound"), trk.get("thread_entries_learned"), trk.get("table_owner_claims")))
        want = (gt["leaks"]["count"], gt["leaks"]["bytes"])
        row.add("leaks exact", OK if (n, b) == want else BAD,
                "tensorleak %s, truth %s" % (fmt_cb(n, b), fmt_cb(*want)))
        ll = live_leaks(exit_r)
        sn, sb = sum(int(x.get("count", 0)) for x in ll), sum(int(x.get("bytes") or 0) for x in ll)
        if (sn, sb) != (n, b):
            row.add("leaks[] add up to summary", BAD, "leaks[] %s, summary %s" % (fmt_cb(sn, sb), fmt_cb(n, b)))
        site_ok = True
        for site in gt.get("sites", []) if want[0] else []:
            m = [x for x in ll if stack_has(x, site["function"])]
            got = (sum(int(x.get("count", 0)) for x in m), sum(int(x.get("bytes") or 0) for x in m))
            if got != (site["count"], site["bytes"]):
                site_ok = False
                row.add("site %s" % site["function"], BAD, "leaks whose stack names %s: %s, truth %s"
                        % (site["function"], fmt_cb(*got), fmt_cb(site["count"], site["bytes"])))
        if gt.get("sites") and want[0]:
            row.cells["sites"] = "ok" if site_ok else "**wrong**"
            if site_ok:
                row.add("sites", OK)
        kind_ok = True
        for kinds, (kc, kb) in (gt.get("kinds") or {}).items():
            if not kc:
                continue
            names = kinds.split("|")
            m = [x for x in ll if x.get("kind") in names]
            got = (sum(int(x.get("count", 0)) for x in m), sum(int(x.get("bytes") or 0) for x in m))
            if got != (kc, kb):
                kind_ok = False
                row.add("kind %s" % kinds, BAD, "%s, truth %s" % (fmt_cb(*got), fmt_cb(kc, kb)))
        if want[0]:
            row.cells["kinds"] = "ok" if kind_ok else "**wrong**"
        eg = gt.get("expect_growth")
        if eg is not None:
            growth = exit_r.get("growth")
            if growth is None and end_r is not None:
                growth = end_r.get("growth")
            if gt.get("marks", 0) < gt.get("requests", 0):
                row.add("growth", BAD, "tensorleak_mark was not resolvable: %d of %d marks taken"
                        % (gt.get("marks", 0), gt.get("requests", 0)))
                row.cells["growth"] = "**no marks**"
            elif growth is None:
                row.add("growth", BAD, "report has no growth field")
                row.cells["growth"] = "**missing**"
            elif eg:
                fn = (gt.get("sites") or [{}])[0].get("function")
                hit = [g for g in growth if not fn or stack_has(g, fn)]
                row.add("growth", OK if hit else BAD,
                        "%d growth entr(y/ies), %d at %s" % (len(growth), len(hit), fn))
                row.cells["growth"] = ("flagged %s/mark" % fmt_b(hit[0].get("bytes_per_mark"))) if hit else "**not flagged**"
            else:
                row.add("growth", OK if not growth else BAD, "%d growth entr(y/ies), expected none" % len(growth))
                row.cells["growth"] = "none" if not growth else "**flagged**"
    ar = gt.get("array_requirements")
    if isinstance(ar, dict):
        # What the real driver answers decides whether tensorleak's CUDA
        # array rows have a size (rc 0) or an unknown one (cuda.h: 1).
        row.add("array requirements", INFO, "cuArrayGetMemoryRequirements on an array made without "
                "CUDA_ARRAY3D_DEFERRED_MAPPING: rc %s, size %s (rc != 0: such arrays' size is unknown to tensorleak)"
                % (ar.get("rc"), fmt_b(ar.get("size"))))
    check_states(row, gt, reports, exit_r)
    src = end_r or exit_r
    if src is not None:
        delta = gt_delta(gt)
        res = summary(src, "reserved_bytes")
        row.cells["held"] = "%s vs Δfree %s" % (fmt_b(res), fmt_b(delta))
        if res is None or delta is None:
            row.add("reserved vs Δfree", BAD, "reserved_bytes %s, Δfree %s" % (res, delta))
        else:
            t = tol(delta, SAMPLE_TOL)
            # Arrays the driver gave no size for hold device memory that
            # cuMemGetInfo sees and tensorleak cannot count.
            unknown = gt.get("unknown_size")
            row.add("reserved vs Δfree", INFO if unknown else OK if abs(res - delta) <= t else BAD,
                    ("%d CUDA array(s) of unknown size (the driver refused their requirements), in Δfree, not in "
                     "reserved_bytes: " % unknown if unknown else "") +
                    "reserved_bytes %s vs cuMemGetInfo delta %s (tolerance %s; the sample expects %s) in %s report"
                    % (fmt_b(res), fmt_b(delta), fmt_b(t), fmt_b(gt.get("expected_held")), src.get("reason")))
        if gt.get("pool"):
            gp = gt["pool"]
            pools = [p for p in src.get("pools", []) or [] if p.get("kind") == gp["kind"]]
            pr = sum(int(p.get("reserved_bytes") or 0) for p in pools)
            pa = sum(int(p.get("allocated_bytes") or 0) for p in pools)
            good = pools and pr == gp["reserved"] and pa == gp["used"]
            row.add("pool", OK if good else BAD,
                    "%d %s pool(s): reserved %s (driver %s), allocated %s (driver used %s)"
                    % (len(pools), gp["kind"], fmt_b(pr), fmt_b(gp["reserved"]), fmt_b(pa), fmt_b(gp["used"])))
            row.cells["pools"] = ("%s/%s" % (fmt_b(pr), fmt_b(pa))) if good else "**wrong**"
        if gt.get("graph_held"):
            # Allocations captured into a graph are the device's graph memory:
            # held there at their call site (owner "CUDA graph memory"), none a leak.
            gh = gt["graph_held"]
            held = [h for h in ((exit_r or src).get("held") or [])
                    if h.get("owner") == "CUDA graph memory" and stack_has(h, gh["function"])]
            got = (sum(int(h.get("count", 0)) for h in held), sum(int(h.get("bytes", 0)) for h in held))
            leaked = [x for x in live_leaks(exit_r or src) if stack_has(x, gh["function"])]
            good = got == (gh["count"], gh["bytes"]) and not leaked
            row.add("graph held", OK if good else BAD,
                    "held by graph memory at %s: %s, truth %s; leaks there: %d"
                    % (gh["function"], fmt_cb(*got), fmt_cb(gh["count"], gh["bytes"]), len(leaked)))
        devs = src.get("devices") or []
        d0 = [d for d in devs if d.get("device") == 0]
        if not d0:
            row.add("devices[0]", BAD, "no devices[] entry for device 0")
            row.cells["devices"] = "**missing**"
        else:
            fr, tt = int(d0[0].get("free", -1)), int(d0[0].get("total", -1))
            t = tol(gt["free_end"], (SAMPLE_TOL[0], 0))
            good = abs(fr - gt["free_end"]) <= t and tt == gt["total"]
            row.add("devices[0]", OK if good else BAD, "free %s vs %s, total %s vs %s"
                    % (fmt_b(fr), fmt_b(gt["free_end"]), fmt_b(tt), fmt_b(gt["total"])))
            row.cells["devices"] = "ok" if good else "**wrong**"
    if gt.get("ipc"):
        check_ipc(row, rec, gt, reports, exit_r)
    if gt.get("families"):
        check_families(row, gt, exit_r, end_r)
    if gt.get("importer"):
        check_shared(row, gt, reports, exit_r)
    return row, gt


def check_ipc(row, rec, gt, reports, exit_r):
    """CUDA IPC (ipc.c): the importer's exit report lists its never-closed mapping
    as one ipc_mapping leak of the bytes the driver says it maps, at the function
    that opened it, outside its own memory figures, under the handle the exporter's
    report lists as exported."""
    imp = tagged_json(rec["stdout"], "TL_IPC_IMPORT")
    if imp is None:
        row.add("ipc importer", BAD, "no TL_IPC_IMPORT line in %s" % os.path.basename(rec["stdout"]))
        return
    row.add("ipc bytes shared", OK if imp.get("bytes_as_written") else BAD,
            "the importer read back %s bytes; a second close answered %s"
            % ("the exporter's" if imp.get("bytes_as_written") else "other", imp.get("second_close")))
    ir = pick(reports, imp.get("pid"), "exit")
    if ir is None:
        row.add("ipc importer report", BAD, "no exit report for the importer (pid %s)" % imp.get("pid"))
        return
    mapped = int(imp.get("mapped_bytes", -1))
    got = (summary(ir, "leaked_allocations"), summary(ir, "leaked_bytes"), summary(ir, "ipc_mapped_bytes"),
           summary(ir, "leaked_ipc_mapped_bytes"), summary(ir, "live_bytes"))
    want = (1, 0, mapped, mapped, 0)
    row.add("ipc importer figures", OK if got == want else BAD,
            "leaked allocations/bytes, mapped, leaked mapped, live: %s, truth %s" % (got, want))
    maps = [x for x in live_leaks(ir) if x.get("kind") == "ipc_mapping"]
    at = [x for x in maps if stack_has(x, imp.get("open_function", "?"))]
    row.add("ipc mapping leak", OK if len(at) == 1 and int(at[0].get("bytes", -1)) == mapped else BAD,
            "%d ipc_mapping leak(s), %d at %s, truth 1 of %s" % (len(maps), len(at), imp.get("open_function"),
                                                               fmt_b(mapped)))
    exported = [e.get("handle") for e in ((exit_r or {}).get("ipc") or {}).get("exported", [])]
    handles = [m.get("handle") for m in (ir.get("ipc") or {}).get("mapped", [])]
    good = len(exported) == gt["ipc"].get("exported", 1) and len(handles) == 1 and handles[0] in exported
    row.add("ipc handle pairs", OK if good else BAD,
            "exporter lists %s, importer maps %s" % (exported, handles))
    row.cells["kinds"] = row.cells.get("kinds", "") + (" + ipc ok" if good and got == want else " + **ipc wrong**")


def check_shared(row, gt, reports, exporter):
    """vmm_share: the second process's report holds the exporter's allocation
    as an imported vmm_handle with the same identity, and the two reports,
    counted as `tensorleak merge` counts them (docs/report-format.md), hold
    it once: as much as the device's free memory moved while both held it."""
    imp = gt["importer"]
    if not imp.get("saw_bytes"):
        row.add("bytes across", BAD, "the importer did not read the bytes the exporter wrote")
    ir = pick(reports, imp.get("pid"), "exit")
    if ir is None or exporter is None:
        row.add("importer report", BAD, "no exit report for the importer (pid %s) or the exporter" % imp.get("pid"))
        row.cells["shared"] = "**missing**"
        return
    il = [x for x in live_leaks(ir) if x.get("kind") == "vmm_handle" and x.get("imported")]
    at = [x for x in il if stack_has(x, imp["function"])]
    got = (sum(int(x.get("count", 0)) for x in at), sum(int(x.get("bytes", 0)) for x in at))
    row.add("imported handle", OK if got == (1, imp["bytes"]) else BAD,
            "imported vmm_handle leaks at %s: %s, truth %s" % (imp["function"], fmt_cb(*got), fmt_cb(1, imp["bytes"])))
    el = [x for x in live_leaks(exporter) if x.get("kind") == "vmm_handle" and not x.get("imported")]
    created = {e.get("identity") for x in el for e in x.get("shared") or []} - {None}
    imported = [e for x in il for e in x.get("shared") or [] if e.get("imported")]
    same = bool(imported) and all(e.get("identity") in created for e in imported)
    row.add("identity", OK if same else BAD, "exporter %s, importer %s%s"
            % (sorted(created) or "none", [e.get("identity") for e in imported] or "none",
               "" if same else ": merge would count the allocation in both processes"))
    dup = sum(int(e.get("bytes", 0)) for e in imported if e.get("identity") in created)
    job = (summary(exporter, "live_bytes") or 0) + (summary(ir, "live_bytes") or 0) - dup
    delta = gt_delta(gt)
    if delta is None:
        row.add("counted once", BAD, "no cuMemGetInfo figures in the ground truth")
        good = False
    else:
        t = tol(delta, SAMPLE_TOL)
        good = abs(job - delta) <= t
        row.add("counted once", OK if good else BAD,
                "the two reports hold %s once counted (%s counted in both), cuMemGetInfo moved %s (tolerance %s)"
                % (fmt_b(job), fmt_b(dup), fmt_b(delta), fmt_b(t)))
    row.cells["shared"] = "ok" if good and same and got == (1, imp["bytes"]) else "**wrong**"


# ----------------------------------------------------------------------- torch
def eval_torch(rec):
    conf = rec["extra"] or "native"
    row = Row("torch", (rec["name"], conf, rec["tool"]))
    row.cells = {"loop": rec["name"], "conf": conf, "tool": rec["tool"]}
    gt = tagged_json(rec["stdout"], "TL_GROUND_TRUTH")
    if not check_run_basics(row, rec, gt):
        return row
    reports, errors = load_reports(rec["reports_dir"])
    for e in errors:
        row.add("report parses", BAD, e)
    check_invariants(row, [r for r in reports if r.get("pid") == gt.get("pid")])
    end_r = pick(reports, gt.get("pid"), "api")
    exit_r = pick(reports, gt.get("pid"), "exit")
    row.cells["torch_res"], row.cells["torch_alloc"] = fmt_b(gt["reserved"]), fmt_b(gt["allocated"])
    delta = gt_delta(gt)
    row.cells["delta"] = fmt_b(delta)
    if end_r is None:
        row.add("snapshot 'end'", BAD, "no api report for pid %s (tensorleak_snapshot via ctypes: %s)"
                % (gt.get("pid"), "not found" if gt.get("snapshot_rc") is None else "returned %s" % gt["snapshot_rc"]))
    else:
        res, alc = summary(end_r, "reserved_bytes"), summary(end_r, "allocated_bytes")
        row.cells["tl_res"], row.cells["tl_alloc"] = fmt_b(res), fmt_b(alc)
        if res is None:
            row.add("reserved vs torch", BAD, "no summary.reserved_bytes")
        else:
            row.add("reserved vs torch", OK if abs(res - gt["reserved"]) <= TORCH_STAT_TOL else BAD,
                    "tensorleak reserved %s, torch reserved_bytes.all.current %s" % (fmt_b(res), fmt_b(gt["reserved"])))
            if delta is not None:
                t = tol(delta, TORCH_TOL)
                row.add("reserved vs Δfree", OK if abs(res - delta) <= t else BAD,
                        "tensorleak reserved %s, cuMemGetInfo delta %s (tolerance %s)" % (fmt_b(res), fmt_b(delta), fmt_b(t)))
        # Only the stream-ordered backend exposes each tensor to the driver; the native
        # and expandable allocators sub-allocate inside segments tensorleak sees whole.
        if "cudaMallocAsync" in conf:
            good = alc is not None and abs(alc - gt["allocated"]) <= TORCH_STAT_TOL
            row.add("allocated vs torch", OK if good else BAD,
                    "tensorleak allocated %s, torch allocated_bytes.all.current %s" % (fmt_b(alc), fmt_b(gt["allocated"])))
        else:
            row.add("allocated vs torch", INFO, "segments only under %s: tensorleak %s, torch %s"
                    % (conf, fmt_b(alc), fmt_b(gt["allocated"])))
        # Under `tensorleak run` the bridge adds PyTorch's own pool row.
        tp = fw_pool(end_r, "pytorch")
        if tp is not None:
            pa = num(tp.get("allocated_bytes"))
            row.add("bridge pool allocated", OK if pa == gt["allocated"] else BAD,
                    "pool %s allocated %s, torch allocated_bytes.all.current %s"
                    % (tp.get("name"), fmt_b(pa), fmt_b(gt["allocated"])))
            row.cells["tl_alloc"] = "%s (pool %s)" % (fmt_b(alc), fmt_b(pa))
        if gt.get("marks", 0) < gt.get("requests", 0):
            row.add("growth", BAD, "tensorleak_mark not resolvable through ctypes: %d of %d marks"
                    % (gt.get("marks", 0), gt["requests"]))
            row.cells["growth"] = "**no marks**"
        else:
            growth = end_r.get("growth")
            if growth is None and exit_r is not None:
                growth = exit_r.get("growth")
            if growth is None:
                row.add("growth", BAD, "no growth field")
                row.cells["growth"] = "**missing**"
            elif gt["expect_growth"]:
                row.add("growth", OK if growth else BAD, "%d growth entr(y/ies)" % len(growth))
                row.cells["growth"] = ("flagged %s/mark" % fmt_b(growth[0].get("bytes_per_mark"))) if growth else "**not flagged**"
            else:
                row.add("growth", OK if not growth else BAD, "%d growth entr(y/ies), expected none" % len(growth))
                row.cells["growth"] = "none" if not growth else "**flagged**"
    # A leaking loop's stacks name torch_loop.py (a leak there under
    # cudaMallocAsync, where each kept tensor is a driver allocation; elsewhere the
    # caching allocator's segments, held, are what can name it).
    if gt.get("expect_growth") and (end_r is not None or exit_r is not None):
        check_user_line(row, [end_r, exit_r], "torch_loop.py", gt.get("user_lines") or [],
                        "cudaMallocAsync" in conf)
    # Owners at exit.  Native and expandable_segments: >= 99 % of the held
    # plus leaked device memory is held by PyTorch's caching allocator (the kept tensors
    # of the leaking loop lie inside its segments) and nothing is leaked.  Under
    # backend:cudaMallocAsync each tensor is its own allocation, program data: tensors
    # freed by exit are no leaks, so the clean loop leaks nothing of the user's and the
    # leaking loop's user leaks are exactly its kept tensors.
    if exit_r is None:
        row.add("exit report", BAD, "no exit report for pid %s" % gt.get("pid"))
    elif "owners" not in exit_r:
        row.cells["owners"] = "n/a"
        row.add("owners", NA, "exit report has no owners[] (a build without owners)")
    else:
        eval_owners(row, gt, conf, exit_r)
    return row


# `tensorleak: attach: NAME is not hooked: WHY`, the library's warning in the target's
# stderr for each entry point the attach refused (src/preload/attach.c).
NOT_HOOKED = re.compile(r"tensorleak: attach: (\S+) is not hooked: (.*)")
# The entry points PyTorch's native allocator reaches: refusing one loses its events.
ATTACH_NEEDED = ("cuMemAlloc_v2", "cuMemFree_v2")


def eval_attach(rec, base):
    """torch_loop.py --leak started without tensorleak, `tensorleak attach --interval 1`
    while it serves (run.sh attach_row); base: the untracked run's record or None."""
    row = Row("attach", (rec["name"], rec["build"], rec["tool"]))
    row.cells = {"loop": rec["name"], "run": rec["tool"]}
    gt = tagged_json(rec["stdout"], "TL_GROUND_TRUTH")
    if rec["tool"] == "none":
        check_run_basics(row, rec, gt)
        row.cells["rc"] = str(rec["rc"])
        return row
    d = rec["reports_dir"]
    cli_rc = read_text(os.path.join(d, "attach.rc")).strip()
    cli_err = read_text(os.path.join(d, "attach.err")).strip()
    row.add("tensorleak attach", OK if cli_rc == "0" else BAD,
            "exit %s%s" % (cli_rc or "?", (": " + cli_err.splitlines()[-1]) if cli_err and cli_rc != "0" else ""))
    want_rc = base["rc"] if base is not None else 0
    row.cells["rc"] = "%d (untracked %s)" % (rec["rc"], base["rc"] if base is not None else "?")
    row.add("exit status", OK if rec["rc"] == want_rc and not rec["timeout"] else BAD,
            "%d attached, %s untracked" % (rec["rc"], base["rc"] if base is not None else "no untracked run"))
    refused = NOT_HOOKED.findall(read_text(rec["stderr"]))
    row.cells["refused"] = ", ".join("%s (%s)" % r for r in refused) if refused else "none"
    row.add("refused entry points", INFO, row.cells["refused"])
    lost = [n for n, _ in refused if n in ATTACH_NEEDED]
    if lost:
        row.add("torch's entry points hooked", BAD, "refused: %s" % ", ".join(lost))
    if gt is None:
        row.add("ground truth", BAD, "no TL_GROUND_TRUTH line in %s" % os.path.basename(rec["stdout"]))
        return row
    if not gt.get("attached"):
        row.add("attached", BAD, "libtensorleak.so never appeared in the loop's maps")
    reports, errors = load_reports(d)
    for e in errors:
        row.add("report parses", BAD, e)
    exit_r = pick(reports, gt.get("pid"), "exit")
    if exit_r is None:
        row.add("exit report", BAD, "no exit report for pid %s" % gt.get("pid"))
        return row
    if "attach" not in exit_r:
        row.add("attach section", BAD, "the exit report has no attach{}")
    n = summary(exit_r, "total_allocations")
    row.cells["allocs"] = "%s" % n
    row.add("allocations tracked", OK if n else BAD, "%s driver allocations after the attach" % n)
    inv = summary(exit_r, "invalid_frees")
    row.add("invalid frees", OK if inv == 0 else BAD, "%s" % inv)
    tp = fw_pool(exit_r, "pytorch")
    row.cells["pool"] = tp.get("name") if tp is not None else "**none**"
    row.add("torch pool", OK if tp is not None and tp.get("name") == "torch cuda:0" else BAD,
            "pool %s" % (tp.get("name") if tp is not None else "missing"))
    growth = exit_r.get("growth") or []
    row.cells["growth"] = ("flagged %s/interval" % fmt_b(growth[0].get("bytes_per_mark"))) if growth else "**not flagged**"
    row.add("growth", OK if growth else BAD, "%d growth entr(y/ies) with --interval 1" % len(growth))
    check_user_line(row, [exit_r], "torch_loop.py", gt.get("user_lines") or [], False)
    return row


CACHING_ALLOCATOR = "PyTorch caching allocator"
# Kinds that are device memory (src/families/budget.c): not pinned host memory, not VMM
# mappings or address ranges (which are the handles' bytes again, or no bytes).
DEVICE_KINDS = ("device", "async", "managed", "vmm_handle")


# The verdict torch_oom.py's request must get: 50 MiB fits the cache's free
# bytes (600 MiB) but no block (15 MiB); 2000 MiB exceeds everything free.
OOM_VERDICTS = {"fragmentation": "expandable_segments", "not_enough_memory": "smaller_request"}


def eval_torch_oom(rec):
    """torch_oom.py under `tensorleak run`: one out-of-memory report whose
    request, verdict, remedy and 'torch cuda:0' figures are torch's own at
    the failure, and whose device free memory is mem_get_info()'s."""
    want = rec["name"]  # the row's name is the verdict its request must get
    row = Row("torch_oom", (want, rec["tool"]))
    row.cells = {"want": want}
    gt = tagged_json(rec["stdout"], "TL_GROUND_TRUTH")
    if not check_run_basics(row, rec, gt):
        return row
    row.cells["request"] = fmt_b(gt["request"])
    row.add("caught", OK if gt.get("caught") and gt.get("num_ooms") == 1 else BAD,
            "OutOfMemoryError caught %s, num_ooms %s" % (gt.get("caught"), gt.get("num_ooms")))
    row.cells["torch"] = "%s / %s / %s" % (fmt_b(gt["reserved"]), fmt_b(gt["allocated"]), fmt_b(gt["largest_free"]))
    reports, errors = load_reports(rec["reports_dir"])
    for e in errors:
        row.add("report parses", BAD, e)
    ooms = [r for r in reports if r.get("pid") == gt.get("pid") and r.get("reason") == "oom"]
    if len(ooms) != 1:
        row.add("oom report", BAD, "%d out-of-memory reports for pid %s, expected 1" % (len(ooms), gt.get("pid")))
        return row
    o = ooms[0].get("oom") or {}
    row.cells["verdict"] = "%s, %s" % (o.get("verdict"), o.get("remedy"))
    row.add("verdict", OK if (o.get("verdict"), o.get("remedy")) == (want, OOM_VERDICTS.get(want)) else BAD,
            "verdict %s, remedy %s; expected %s, %s" % (o.get("verdict"), o.get("remedy"), want, OOM_VERDICTS.get(want)))
    row.add("request", OK if o.get("bytes") == gt["request"] else BAD,
            "oom.bytes %s, torch asked for %s" % (o.get("bytes"), gt["request"]))
    df = num(o.get("device_free"))
    row.cells["free"] = "%s / %s" % (fmt_b(df), fmt_b(gt["device_free"]))
    row.add("device free", OK if df is not None and abs(df - gt["device_free"]) <= TORCH_STAT_TOL else BAD,
            "oom.device_free %s, torch.cuda.mem_get_info() after the failure %s" % (fmt_b(df), fmt_b(gt["device_free"])))
    pools = [p for p in o.get("pools") or [] if p.get("name") == "torch cuda:0"]
    if len(pools) != 1:
        row.add("pool at the failure", BAD, "no 'torch cuda:0' in oom.pools")
        return row
    p = pools[0]
    got = (p.get("state"), p.get("reserved_bytes"), p.get("allocated_bytes"), p.get("free_bytes"),
           p.get("largest_free_block"), p.get("verdict"))
    exp = ("fresh", gt["reserved"], gt["allocated"], gt["reserved"] - gt["allocated"], gt["largest_free"], want)
    row.cells["tl"] = "%s / %s / %s" % (fmt_b(got[1]), fmt_b(got[2]), fmt_b(got[4]))
    row.add("pool at the failure", OK if got == exp else BAD,
            "state, reserved, allocated, free, largest free, verdict %s; torch's %s" % (got, exp))
    return row


def owner_split(r):
    """(held by the caching allocator, held, leaked, leaked by `user`, per-owner held)
    in bytes of device memory, from an exit report's held[] and leaks[]."""
    ca = held = leaked = user = 0
    by_owner = {}
    for e in (r.get("held") or []):
        if (e.get("kind") or "device") not in DEVICE_KINDS:
            continue
        b = int(e.get("bytes", 0))
        held += b
        name = e.get("owner") or "?"
        by_owner[name] = by_owner.get(name, 0) + b
        if name == CACHING_ALLOCATOR:
            ca += b
    for e in live_leaks(r):
        if (e.get("kind") or "device") not in DEVICE_KINDS:
            continue
        b = int(e.get("bytes", 0))
        leaked += b
        if e.get("owner_class", "user") == "user":
            user += b
    return ca, held, leaked, user, by_owner


def eval_owners(row, gt, conf, exit_r):
    ca, held, leaked, user, by_owner = owner_split(exit_r)
    leaked_sum = summary(exit_r, "leaked_bytes")
    others = ", ".join("%s %s" % (k, fmt_b(v)) for k, v in sorted(by_owner.items(), key=lambda kv: -kv[1])
                       if k != CACHING_ALLOCATOR) or "none"
    if "cudaMallocAsync" in conf:
        want = int(gt.get("kept_bytes", 0)) if gt["mode"] == "leak" else 0
        good = want <= user <= want + TORCH_STAT_TOL and (leaked_sum or 0) == leaked
        row.add("owners: user leaks", OK if good else BAD,
                "user leaks %s at exit, expected the kept tensors: %s (summary.leaked_bytes %s); held %s (%s)"
                % (fmt_b(user), fmt_b(want), fmt_b(leaked_sum), fmt_b(held), others))
        row.cells["owners"] = ("user leaks %s" % fmt_b(user)) if good else "**user leaks %s ≠ %s**" % (fmt_b(user), fmt_b(want))
        return
    total = held + leaked
    share = ca / total if total else 0.0
    good_share = total > 0 and share >= 0.99
    good_leak = leaked == 0 and (leaked_sum or 0) == 0
    row.add("owners: caching allocator share", OK if good_share else BAD,
            "%s holds %.2f %% of %s held + leaked device memory (others: %s)"
            % (CACHING_ALLOCATOR, 100 * share, fmt_b(total), others))
    row.add("owners: no user leak", OK if good_leak else BAD,
            "leaked %s at exit (summary.leaked_bytes %s), %s of it user's"
            % (fmt_b(leaked), fmt_b(leaked_sum), fmt_b(user)))
    if good_share and good_leak:
        row.cells["owners"] = "%.1f %% caching allocator" % (100 * share)
    else:
        row.cells["owners"] = "**%.1f %% caching allocator, leak %s**" % (100 * share, fmt_b(leaked))


# ------------------------------------------------------------------ invariants
def num(v):
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def invariant_problems(r):
    """What a report breaks of SPEC's invariants: gap >= 0, allocated <= reserved per
    pool and device, largest free block <= free, fragmentation in [0, 1] or null, no
    figure negative or above the devices' memory."""
    out = []
    total = sum(int(num(d.get("total")) or 0) for d in r.get("devices") or [])
    s = r.get("summary") or {}
    for k, v in s.items():
        if num(v) is not None and v < 0:
            out.append("summary.%s = %s < 0" % (k, v))
    res, alc = num(s.get("reserved_bytes")), num(s.get("allocated_bytes"))
    if res is not None and alc is not None and alc > res:
        out.append("summary: allocated %s > reserved %s" % (fmt_b(alc), fmt_b(res)))
    if total and res is not None and res > total:
        out.append("summary: reserved %s > the devices' memory %s" % (fmt_b(res), fmt_b(total)))
    for dv in r.get("devices") or []:
        name = "device %s" % dv.get("device")
        dr, da, dg = num(dv.get("reserved_bytes")), num(dv.get("allocated_bytes")), num(dv.get("gap_bytes"))
        if dg is not None and dg < 0:
            out.append("%s: gap %s < 0" % (name, dg))
        if dr is not None and da is not None and da > dr:
            out.append("%s: allocated %s > reserved %s" % (name, fmt_b(da), fmt_b(dr)))
        if dr is not None and num(dv.get("total")) and dr > dv["total"]:
            out.append("%s: reserved %s > its memory %s" % (name, fmt_b(dr), fmt_b(dv["total"])))
    for p in r.get("pools") or []:
        name = "pool %s" % (p.get("name") or p.get("kind"))
        pr, pa, pf = num(p.get("reserved_bytes")), num(p.get("allocated_bytes")), num(p.get("free_bytes"))
        lf, fr = p.get("largest_free_block"), p.get("fragmentation")
        for k in ("reserved_bytes", "allocated_bytes", "free_bytes", "largest_free_block"):
            if num(p.get(k)) is not None and p[k] < 0:
                out.append("%s: %s = %s < 0" % (name, k, p[k]))
        if pr is not None and pa is not None and pa > pr:
            out.append("%s: allocated %s > reserved %s" % (name, fmt_b(pa), fmt_b(pr)))
        if num(lf) is not None and pf is not None and lf > pf:
            out.append("%s: largest free block %s > free %s" % (name, fmt_b(lf), fmt_b(pf)))
        if total and pr is not None and p.get("device", 0) >= 0 and pr > total:
            out.append("%s: reserved %s > the devices' memory %s" % (name, fmt_b(pr), fmt_b(total)))
        if fr is not None and not (num(fr) is not None and 0.0 <= fr <= 1.0):
            out.append("%s: fragmentation %r outside [0, 1]" % (name, fr))
    return out


def check_invariants(row, reports):
    # Figures tensorleak itself found impossible and repaired before writing (assemble.c):
    # the report holds, but something upstream was wrong; shown, listed apart.
    fixed = ["%s: %s %s %s -> %s (%s)" % (os.path.basename(r["_path"]), x.get("where"), x.get("figure"),
                                          x.get("was"), x.get("now"), x.get("invariant"))
             for r in reports for x in r.get("repairs") or []]
    if fixed:
        row.add("report repairs", INFO, "; ".join(fixed[:6]) + (" (+%d more)" % (len(fixed) - 6) if len(fixed) > 6 else ""))
    bad = ["%s: %s" % (os.path.basename(r["_path"]), p) for r in reports for p in invariant_problems(r)]
    if bad:
        row.add("report invariants", BAD, "; ".join(bad[:6]) + (" (+%d more)" % (len(bad) - 6) if len(bad) > 6 else ""))
    elif reports:
        row.add("report invariants", OK, "%d report(s)" % len(reports))


# ----------------------------------------------------------- framework loops
# The framework pool each loop's figures are held against; the cuda.bindings and
# numba-cuda loops allocate from the driver directly and have none.
FW_POOL_KIND = {"gpt2": "pytorch", "kv": "pytorch", "jax": "jax", "cupy": "cupy", "driver": None, "numba": None}
FW_LABEL = {"gpt2": "GPT-2 (PyTorch)", "kv": "KV blocks (PyTorch)", "jax": "JAX", "cupy": "CuPy",
            "driver": "cuda.bindings", "numba": "numba-cuda"}


def pick_label(reports, pid, label):
    c = [r for r in reports if r.get("reason") == "api" and r.get("label") == label
         and (pid is None or r.get("pid") == pid)]
    c.sort(key=lambda r: (r["_mtime"], r["_path"]))
    return c[-1] if c else None


def fw_pool(report, kind):
    for p in report.get("pools") or []:
        if p.get("kind") == kind and p.get("device", 0) == 0:
            return p
    return None


def torch_mode(info):
    if info.get("backend") == "cudaMallocAsync":
        return "cudaMallocAsync"
    if "expandable_segments:true" in (info.get("alloc_conf") or "").lower().replace(" ", ""):
        return "expandable_segments"
    return "native"


def python_frames_in(report, user_file):
    """(where, line) for every stack frame of report naming user_file, in leaks, growth,
    framework pool sites and held memory."""
    found = []

    def scan(where, entries):
        for e in entries or []:
            for fr in e.get("stack") or []:
                f = fr.get("file") or ""
                if os.path.basename(f) == user_file and (fr.get("python") or f.endswith(".py")):
                    found.append((where, fr.get("line")))
    scan("leaks", live_leaks(report))
    scan("growth", report.get("growth"))
    for p in report.get("pools") or []:
        scan("pool sites", p.get("sites"))
    scan("held", report.get("held"))
    return found


def check_user_line(row, reports, user_file, user_lines, strict):
    """Some stack of the reports names user_file in a Python frame.  strict:
    in a leak, growth entry or pool site (held segments do not count)."""
    found = []
    for r in reports:
        if r is not None:
            found += python_frames_in(r, user_file)
    named = [f for f in found if f[0] != "held"] if strict else found
    tagged = [f for f in named if f[1] in user_lines]
    best = (tagged or named or found or [None])[0]
    if best is None:
        row.add("user's line", BAD, "no stack names %s" % user_file)
        row.cells["line"] = "**none**"
        return
    good = bool(named)
    where = ", ".join(sorted({f[0] for f in found if f[1] == best[1]},
                             key=("leaks", "growth", "pool sites", "held").index))
    row.add("user's line", OK if good else BAD, "%s:%s in %s%s" % (
        user_file, best[1], where, "" if good else " only (no leak, growth or pool site names it)"))
    row.cells["line"] = ("%s:%s (%s)" % (user_file, best[1], where)) if good else \
        "**%s:%s in held only**" % (user_file, best[1])


def check_exporter(row, label, m, loop):
    """`tensorleak exporter`'s /metrics at a moment (serve_loop.py with TL_EXPORTER=1):
    the pytorch pool's reserved and allocated bytes equal the framework's own figures,
    device 0's free memory is within 1 % of nvidia-smi's where nvidia-smi is there."""
    e = m.get("exporter") or {}
    if e.get("error"):
        row.add("exporter %s" % label, BAD, e["error"])
        return
    want = (m.get("reserved"), m.get("allocated"))
    got = (e.get("pool_reserved"), e.get("pool_allocated"))
    row.add("exporter %s reserved/allocated" % label, OK if got == want and None not in got else BAD,
            "%s: /metrics %s / %s, %s's own %s / %s" % (label, fmt_b(got[0]) if got[0] is not None else "absent",
                                                       fmt_b(got[1]) if got[1] is not None else "absent", loop,
                                                       fmt_b(want[0]), fmt_b(want[1])))
    smi, free = m.get("smi"), e.get("device_free")
    if not smi:
        row.add("exporter %s device free" % label, INFO, "no nvidia-smi here; /metrics says %s free"
                % (fmt_b(free) if free is not None else "nothing"))
    else:
        good = free is not None and abs(free - smi["free"]) <= 0.01 * smi["free"]
        row.add("exporter %s device free" % label, OK if good else BAD, "/metrics %s, nvidia-smi %s (within 1 %%)"
                % (fmt_b(free) if free is not None else "absent", fmt_b(smi["free"])))
    if label == "end":
        row.cells["exporter"] = "%s / %s%s" % (fmt_b(got[0]) if got[0] is not None else "absent",
                                              fmt_b(got[1]) if got[1] is not None else "absent",
                                              "; free %s (smi %s)" % (fmt_b(free), fmt_b(smi["free"]))
                                              if smi and free is not None else "")


def skip_or_truth(row, rec, cell):
    """The ground truth of a Python program's run, or None when the row is complete
    already: skipped (TL_SKIP: its framework does not import; the reason shown in
    `cell`) or failed (no ground truth, a non-zero exit)."""
    sk = tagged_json(rec["stdout"], "TL_SKIP")
    if sk is not None and rec["rc"] == 0:
        row.add("skipped", SKIPPED, sk.get("why", ""))
        row.cells[cell] = "skipped: %s" % sk.get("why", "")
        return None
    gt = tagged_json(rec["stdout"], "TL_GROUND_TRUTH")
    return gt if check_run_basics(row, rec, gt) else None


def eval_framework(rec):
    setting = rec["extra"] or "defaults"
    row = Row("frameworks", (rec["name"], setting, rec["build"]))
    row.cells = {"loop": FW_LABEL.get(rec["name"], rec["name"]), "setting": setting, "run": rec["build"]}
    gt = skip_or_truth(row, rec, "growth")
    if gt is None:
        return row
    kind = FW_POOL_KIND.get(rec["name"], rec["name"])  # None: no framework pool to check
    if kind is None:
        row.cells["fw"] = row.cells["tl"] = "no pool (driver allocations)"
    row.cells["requests"] = str(gt.get("requests"))
    if gt.get("request_s") is not None:
        row.cells["request_s"] = "%.3f" % gt["request_s"]
    if gt.get("marks", 0) < gt.get("requests", 0):
        row.add("marks", BAD, "tensorleak.mark reached %d of %d requests (API: %s; package: %s)"
                % (gt.get("marks", 0), gt.get("requests", 0), gt.get("api"), gt.get("package_error")))
    reports, errors = load_reports(rec["reports_dir"])
    for e in errors:
        row.add("report parses", BAD, e)
    pid = gt.get("pid")
    exit_r = pick(reports, pid, "exit")
    if exit_r is None:
        row.add("exit report", BAD, "no exit report for pid %s (%d report(s))" % (pid, len(reports)))
    check_invariants(row, [r for r in reports if r.get("pid") == pid])
    trk = (exit_r or {}).get("tracker")
    if isinstance(trk, dict) and "python_stacks" in trk:
        row.add("python stacks", INFO, "stacks with Python frames %s, chains unreadable %s"
                % (trk.get("python_stacks"), trk.get("python_stacks_unreadable")))
    moments = gt.get("moments") or {}
    req_label = "req%d" % gt.get("check_at", 0)
    by_label = {}
    for label in sorted(moments, key=lambda k: moments[k].get("request", 0)):
        m = moments[label]
        r = pick_label(reports, pid, label)
        by_label[label] = r
        if "exporter" in m:
            check_exporter(row, label, m, rec["name"])
        if r is None:
            row.add("report %s" % label, BAD, "no report labelled %s (snapshot returned %s)"
                    % (label, (gt.get("snapshot_rc") or {}).get(label)))
            continue
        if kind is None:
            continue
        br = r.get("bridge") or {}
        p = fw_pool(r, kind)
        if p is None:
            if label == "end":
                row.cells["tl"] = "**no %s pool row**" % kind
            row.add("%s pool %s" % (kind, label), BAD, "no pools[] row of kind %s in the %s report (bridge: %s%s)"
                    % (kind, label, br.get("state", "no bridge field"), ", " + br["note"] if br.get("note") else ""))
            continue
        if p.get("stale") or br.get("state") not in (None, "fresh"):
            row.add("%s fresh" % label, BAD, "pool state read at %s is stale (bridge %s: %s)"
                    % (p.get("read_at"), br.get("state"), br.get("note", "")))
        want = (m.get("reserved"), m.get("allocated"))
        got = (num(p.get("reserved_bytes")), num(p.get("allocated_bytes")))
        row.add("%s reserved/allocated" % label, OK if got == want else BAD,
                "%s: tensorleak %s / %s, %s's own %s / %s" % (label, fmt_b(got[0]), fmt_b(got[1]), rec["name"],
                                                             fmt_b(want[0]), fmt_b(want[1])))
        lw, lg = m.get("largest_free_block"), p.get("largest_free_block")
        if lw is None:
            row.add("%s largest free block unknown" % label, OK if lg is None else BAD,
                    "%s does not say; tensorleak %s (must be null: unknown is not zero)" % (rec["name"], lg))
        else:
            row.add("%s largest free block" % label, OK if lg == lw else BAD,
                    "tensorleak %s, %s's own %s" % (fmt_b(lg) if lg is not None else "null", rec["name"], fmt_b(lw)))
            free = (want[0] or 0) - (want[1] or 0)
            fw = 1.0 - lw / free if free > 0 else 0.0
            fg = p.get("fragmentation")
            row.add("%s fragmentation" % label, OK if num(fg) is not None and abs(fg - fw) <= 1e-6 else BAD,
                    "tensorleak %s, from %s's figures %.4f" % (fg, rec["name"], fw))
        if FW_POOL_KIND.get(rec["name"]) == "pytorch":
            mode = (p.get("framework") or {}).get("mode")
            expect = torch_mode(gt.get("info") or {})
            row.add("torch mode", OK if mode == expect else BAD, "pool says %s, the run is %s" % (mode, expect))
        if label == "end":
            row.cells["fw"] = "%s / %s" % (fmt_b(want[0]), fmt_b(want[1]))
            row.cells["tl"] = "%s / %s" % (fmt_b(got[0]), fmt_b(got[1]))
            row.cells["largest"] = "%s / %s" % ("unknown" if lw is None else fmt_b(lw),
                                                "null" if lg is None else fmt_b(lg))
    # Growth: a leaking loop is flagged by request check_at (any scope: call site, pool,
    # owner, Python site); a clean one never, not even at exit.
    req_r = by_label.get(req_label)
    if gt.get("expect_growth"):
        g = (req_r or {}).get("growth")
        if req_r is None:
            row.cells["growth"] = "**no %s report**" % req_label
        elif g:
            # One figure per scope, the pool's first: growth where the leak lives.
            order = ("pool", "python_site", "owner", "call_site")
            by_scope = {}
            for e in g:
                by_scope.setdefault(e.get("scope", "call_site"), e)
            scopes = sorted(by_scope, key=lambda k: order.index(k) if k in order else len(order))
            shown = ", ".join("%s %s/mark" % (k, fmt_b(by_scope[k].get("bytes_per_mark"))) for k in scopes)
            row.add("growth by %s" % req_label, OK, "%d entr(y/ies): %s" % (len(g), shown))
            row.cells["growth"] = "flagged by request %s: %s" % (gt.get("check_at"), shown)
            # The pool's rate against the framework's own allocated bytes per request
            # between the two moments (within 25 %, at least 1 MiB).
            a, b = moments.get(req_label) or {}, moments.get("end") or {}
            if "pool" in by_scope and num(a.get("allocated")) is not None and num(b.get("allocated")) is not None \
                    and b.get("request", 0) > a.get("request", 0):
                want_rate = (b["allocated"] - a["allocated"]) / float(b["request"] - a["request"])
                got_rate = num(by_scope["pool"].get("bytes_per_mark")) or 0
                good = abs(got_rate - want_rate) <= max(MiB, 0.25 * abs(want_rate))
                row.add("pool growth rate", OK if good else BAD, "%s/mark, the framework's allocated bytes grew %s "
                        "per request from request %s to %s" % (fmt_b(got_rate), fmt_b(want_rate), a["request"],
                                                                 b["request"]))
        else:
            row.add("growth by %s" % req_label, BAD, "no growth entry after %s requests" % gt.get("check_at"))
            row.cells["growth"] = "**not flagged by request %s**" % gt.get("check_at")
    else:
        flagged = ["%s: %d" % (r.get("label") or r.get("reason"), len(r.get("growth") or []))
                   for r in list(by_label.values()) + [exit_r] if r is not None and r.get("growth")]
        row.add("no growth", BAD if flagged else OK, "growth entries in %s" % (", ".join(flagged) or "no report"))
        row.cells["growth"] = "**flagged**" if flagged else "none"
    # The leak is named at the workload's own line.  Where the framework names
    # who allocated each block (PyTorch's allocation history, JAX's device memory
    # profile) or each buffer is a driver allocation (cudaMallocAsync, cuda.bindings,
    # numba-cuda), a leak, growth entry or pool site must name it; inside a cache that
    # attributes nothing (PyTorch without history, CuPy) the segments the cache took,
    # held by its owner, are all there is to name it.
    if gt.get("expect_growth"):
        info = gt.get("info") or {}
        strict = kind is None or kind == "jax" or (kind == "pytorch" and bool(
            info.get("history") or info.get("backend") == "cudaMallocAsync"))
        check_user_line(row, [by_label.get(k) for k in sorted(by_label)] + [exit_r], gt.get("user_file", ""),
                        gt.get("user_lines") or [], strict)
    return row


# --------------------------------------------------------------- sanitizer
def parse_sanitizer(rec):
    text = read_text(rec["stdout"]) + "\n" + read_text(rec["stderr"])
    if rec["timeout"]:
        return None, None, "timed out"
    if re.search(r"Device not supported|not supported on this", text, re.I):
        return None, None, "refused the device"
    m = re.findall(r"LEAK SUMMARY:\s*(\d+)\s+bytes? leaked in\s+(\d+)\s+allocations?", text)
    if m:
        b, n = m[-1]
        return int(n), int(b), ""
    if re.search(r"ERROR SUMMARY:\s*0 errors", text):
        return 0, 0, ""
    if rec["rc"] == 127 or "command not found" in text or "No such file" in text:
        return None, None, "not installed"
    return None, None, "no leak summary (exit %d)" % rec["rc"]


# ------------------------------------------------------------------ overhead
BENCH_LOOPS = {"infer": "inference step", "alloc": "cudaMalloc+cudaFree pair"}


def fmt_us(x, scale=None):
    """µs with 2 decimals under 100, 1 under 1000, else none (by scale, default x)."""
    if x is None:
        return "?"
    m = abs(x if scale is None else scale)
    return "%.2f" % x if m < 100 else "%.1f" % x if m < 1000 else "%.0f" % x


def bench_tool(procs):
    """(median of the runs' medians, min, max) in µs per step, over one tool's runs."""
    meds = [statistics.median(p) for p in procs if p]
    if not meds:
        return None, None, None
    return statistics.median(meds), min(meds), max(meds)


def eval_bench(records):
    """One row per (loop, setting): runs with and without tensorleak, per-step times.

    A run's figure is the median of its timed passes (its warm-up is not timed); a tool's
    figure is the median over its runs, shown with their min-max.  The run-to-run spread
    (the wider of the two tools' max - min) is the noise floor: a difference inside it is
    reported as such, not as an overhead (or a speed-up) of tensorleak."""
    groups = []
    for r in records:
        if r["kind"] == "bench" and (r["name"], r["extra"]) not in groups:
            groups.append((r["name"], r["extra"]))
    rows, table = [], []
    for name, extra in groups:
        setting = extra or "native"
        row = Row("bench", (name, setting))
        procs = {"none": [], "preload": []}
        checks = {"none": set(), "preload": set()}
        clocks, order, shape, cached = [], "", None, 0
        for r in records:
            if r["kind"] != "bench" or (r["name"], r["extra"]) != (name, extra):
                continue
            b = tagged_json(r["stdout"], "TL_BENCH")
            order += "A" if r["tool"] == "none" else "B"
            if r["rc"] != 0 or b is None or not b.get("times"):
                row.add("bench %s run %s" % (r["tool"], r["build"]), BAD if r["tool"] == "preload" else INFO,
                        "exit %d%s" % (r["rc"], "" if b else ", no TL_BENCH line"))
                continue
            steps = int(b.get("steps") or 1)
            shape = (len(b["times"]), steps)
            procs.setdefault(r["tool"], []).append([t / steps * 1e6 for t in b["times"]])
            if b.get("checksum") is not None:
                checks.setdefault(r["tool"], set()).add(round(float(b["checksum"]), 3))
            clocks += [c for c in b.get("sm_clock_mhz") or [] if isinstance(c, (int, float))]
            if name == "alloc" and b.get("uncached") is not True:
                cached += 1
        m0, lo0, hi0 = bench_tool(procs["none"])
        m1, lo1, hi1 = bench_tool(procs["preload"])
        spread = max([h - lo for h, lo in ((hi0, lo0), (hi1, lo1)) if h is not None] or [0.0])
        if m0 and m1:
            delta = m1 - m0
            ov = "%+.1f %%" % (100 * delta / m0)
            if abs(delta) <= spread:
                verdict = "within run-to-run spread"
            elif delta > 0:
                verdict = "tensorleak +%s µs" % fmt_us(delta)
            else:
                verdict = "faster with tensorleak, beyond the spread: unexplained"
            row.add("overhead", INFO, "%s %s: %s -> %s µs per %s (%s, spread %s µs)"
                    % (name, setting, fmt_us(m0), fmt_us(m1), BENCH_LOOPS.get(name, "step"), ov, fmt_us(spread)))
        else:
            delta, ov, verdict = None, "?", "too few runs"
        if cached:
            row.add("caching off", BAD, "%d run(s) of the allocation-bound loop had PyTorch's cache on "
                    "(memory_reserved() > 0 with a tensor live): not one cudaMalloc per tensor" % cached)
            verdict = "**cache was on**"
        same = checks["none"] == checks["preload"]
        if not same:
            row.add("same result", BAD, "checksums without %s, with %s" % (sorted(checks["none"]), sorted(checks["preload"])))
        rows.append(row)
        table.append([
            "%s (%s)" % (name, BENCH_LOOPS.get(name, "step")), setting,
            "%d × %d" % shape if shape else "?", "%d/%d %s" % (len(procs["none"]), len(procs["preload"]), order),
            "%s (%s–%s)" % (fmt_us(m0), fmt_us(lo0, m0), fmt_us(hi0, m0)),
            "%s (%s–%s)" % (fmt_us(m1), fmt_us(lo1, m1), fmt_us(hi1, m1)),
            ("%+.2f" % delta) if delta is not None else "?", ov, fmt_us(spread),
            "%d–%d" % (min(clocks), max(clocks)) if clocks else "?", "same" if same else "**differs**", verdict])
    if not table:
        return rows, ""
    return rows, md_table(["loop (µs per)", "setting", "passes × steps", "runs without/with, order",
                           "without", "with preload", "Δ µs", "overhead", "run-to-run spread µs",
                           "SM clock MHz", "result", "reading"], table)


# ------------------------------------------------------------------- tables
# ------------------------------------------------------------ torch-snapshot
# What `tensorleak report --format torch-snapshot` may write (tools/format_torch_snapshot.c):
# plain containers and scalars, no class or memo opcodes, so pickle.load needs no torch.
PLAIN_OPCODES = {"PROTO", "EMPTY_DICT", "EMPTY_LIST", "MARK", "SETITEMS", "APPENDS", "BINUNICODE",
                 "BININT1", "BININT", "LONG1", "BINFLOAT", "NEWTRUE", "NEWFALSE", "NONE", "STOP"}
TSNAP_POOL = "torch cuda:0"


def load_pickle(path):
    """(raw bytes, unpickled object) or (None, error text)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
        return data, pickle.loads(data)
    except Exception as e:  # absent, truncated or not a pickle: a mismatch, named
        return None, "%s: %s: %s" % (os.path.basename(path), type(e).__name__, e)


def memory_viz_views(snap):
    """Runs every view torch.cuda._memory_viz makes of a snapshot (the flame-graph
    ones with an identity formatter, so nothing is fetched from the network).
    Returns (None, why) where the module does not import, else ([failures], None)."""
    try:
        import torch.cuda._memory_viz as viz
    except Exception as e:
        return None, "%s: %s" % (type(e).__name__, e)
    same = lambda text: text  # noqa: E731
    views = (("segsum", lambda: viz.segsum(snap)), ("trace", lambda: viz.trace(snap)),
             ("segments", lambda: viz.segments(snap, format_flamegraph=same)),
             ("memory", lambda: viz.memory(snap, format_flamegraph=same)),
             ("trace_plot", lambda: viz.trace_plot(snap)), ("segment_plot", lambda: viz.segment_plot(snap)))
    failed = []
    for name, view in views:
        try:
            view()
        except Exception as e:
            failed.append("%s: %s: %s" % (name, type(e).__name__, e))
    return failed, None


def tsnap_blocks(segments, state):
    return sorted((int(b["address"]), int(b["size"])) for s in segments for b in s.get("blocks") or []
                  if b.get("state") == state)


def eval_tsnap(rec):
    """torch_snapshot.py: tensorleak's torch-snapshot pickle against PyTorch's own
    snapshot of the same moment, the plain allocations the program printed and
    torch.cuda.memory_stats()."""
    row = Row("torch_snapshot", (rec["name"], rec["build"]))
    row.cells = {"run": rec["build"]}
    gt = skip_or_truth(row, rec, "pool")
    if gt is None:
        return row
    d = rec["reports_dir"]
    paths = {k: os.path.join(d, os.path.basename(gt.get(k) or "")) for k in ("torch_pickle", "tensorleak_report")}
    tl_pickle = os.path.join(d, "tensorleak.pickle")
    try:
        with open(paths["tensorleak_report"]) as f:
            report = json.load(f)
        report["_path"] = paths["tensorleak_report"]
    except (OSError, ValueError) as e:
        row.add("tensorleak snapshot", BAD, "%s (snapshot_to returned %s)" % (e, gt.get("snapshot_rc")))
        return row
    check_invariants(row, [report])
    data, snap = load_pickle(tl_pickle)
    _, own = load_pickle(paths["torch_pickle"])
    if data is None or not isinstance(snap, dict):
        row.add("torch-snapshot pickle", BAD, "%s (tensorleak report --format torch-snapshot: see %s)"
                % (snap, os.path.join(d, "convert.log")))
        return row
    if not isinstance(own, dict):
        row.add("PyTorch's snapshot", BAD, str(own))
        return row
    ops = {op.name for op, _, _ in pickletools.genops(data)}
    row.add("plain opcodes", OK if ops <= PLAIN_OPCODES else BAD,
            "protocol %d, %d opcode kind(s)%s" % (data[1] if data[:1] == b"\x80" else 0, len(ops),
                                                   "; beyond the plain ones: %s" % sorted(ops - PLAIN_OPCODES)
                                                   if ops - PLAIN_OPCODES else ""))
    # Every memory_viz view reads tensorleak's pickle; PyTorch's own pickle is the control.
    failed, why = memory_viz_views(snap)
    info = gt.get("info") or {}
    if failed is None:
        stand_in = bool(info.get("stand_in"))
        row.add("memory_viz views", INFO if stand_in else BAD, "not run: torch.cuda._memory_viz does not "
                "import (%s)%s" % (why, "; the stand-in torch has none" if stand_in else ""))
        row.cells["viz"] = "skipped (no _memory_viz)" if stand_in else "**no _memory_viz**"
    else:
        own_failed, _ = memory_viz_views(own)
        row.add("memory_viz views", BAD if failed else OK,
                "segsum, trace, segments, memory, trace_plot, segment_plot%s%s" % (
                    ": " + "; ".join(failed) if failed else " all read it",
                    "; on PyTorch's own snapshot: " + ("; ".join(own_failed) or "all read it") if failed else ""))
        row.cells["viz"] = "**%d of 6 fail**" % len(failed) if failed else "6 of 6 read it"
    # The pool row the segments come from: read by the bridge at this snapshot, with
    # PyTorch's figures of the same moment.
    prow = next((p for p in report.get("pools") or [] if p.get("name") == TSNAP_POOL), None)
    br = report.get("bridge") or {}
    if prow is None:
        row.add("pool row", BAD, "no pools[] row '%s' in the snapshot (bridge: %s%s)" % (
            TSNAP_POOL, br.get("state", "no bridge field"), ", " + br["note"] if br.get("note") else ""))
    elif prow.get("stale") or br.get("state") not in (None, "fresh"):
        row.add("pool row", BAD, "read at %s, stale (bridge %s: %s)" % (prow.get("read_at"), br.get("state"),
                                                                      br.get("note", "")))
    else:
        want = (gt.get("reserved"), gt.get("allocated"))
        got = (num(prow.get("reserved_bytes")), num(prow.get("allocated_bytes")))
        row.add("pool row", OK if got == want else BAD, "reserved/allocated %s / %s, memory_stats() %s / %s" % (
            fmt_b(got[0]), fmt_b(got[1]), fmt_b(want[0]), fmt_b(want[1])))
    segs = snap.get("segments") or []
    pool = [s for s in segs if s.get("tensorleak_pool") == TSNAP_POOL]
    plain = [s for s in segs if "tensorleak_pool" not in s]
    theirs = [s for s in own.get("segments") or [] if int(s.get("device", 0)) == 0]
    want = sorted((int(s["address"]), int(s["total_size"])) for s in theirs)
    got = sorted((int(s["address"]), int(s["total_size"])) for s in pool)
    row.add("pool segments", OK if got == want and want else BAD,
            "'%s': %d segment(s), %s; PyTorch's snapshot: %d, %s%s" % (
                TSNAP_POOL, len(got), fmt_b(sum(n for _, n in got)), len(want), fmt_b(sum(n for _, n in want)),
                "" if got == want else "; only tensorleak's: %s, only PyTorch's: %s" % (
                    ["%#x+%d" % x for x in sorted(set(got) - set(want))][:4],
                    ["%#x+%d" % x for x in sorted(set(want) - set(got))][:4])))
    wb, gb = tsnap_blocks(theirs, "active_allocated"), tsnap_blocks(pool, "active_allocated")
    row.add("active blocks", OK if gb == wb else BAD, "%d active_allocated block(s) (%s), PyTorch's %d (%s)%s" % (
        len(gb), fmt_b(sum(n for _, n in gb)), len(wb), fmt_b(sum(n for _, n in wb)),
        "" if gb == wb else "; only tensorleak's: %s, only PyTorch's: %s" % (
            ["%#x+%d" % x for x in sorted(set(gb) - set(wb))][:4], ["%#x+%d" % x for x in sorted(set(wb) - set(gb))][:4])))
    row.cells["pool"] = "%d / %d segments, %d / %d blocks" % (len(got), len(want), len(gb), len(wb))
    # The program's plain allocations: each a segment of its own, at its address and
    # of its size, its stack naming the program's line; the freed one gone.
    at = {int(s["address"]): s for s in plain if "address" not in (s.get("tensorleak_unknown") or [])}
    found = 0
    for p in gt.get("plain") or []:
        s = at.get(int(p["address"]))
        if s is None or int(s["total_size"]) != int(p["bytes"]):
            row.add("plain %#x" % p["address"], BAD, "no segment of %s at %#x (plain segments: %s)" % (
                fmt_b(p["bytes"]), p["address"], ["%#x+%d" % (a, int(x["total_size"])) for a, x in sorted(at.items())][:6]))
            continue
        frames = [f for b in s.get("blocks") or [] for f in b.get("frames") or []]
        lines = p.get("lines") or []
        hit = [f.get("line") for f in frames
               if os.path.basename(f.get("filename") or "") == gt.get("user_file") and f.get("line") in lines]
        named = bool(hit)
        row.add("plain %#x" % p["address"], OK if named else BAD, "a segment of %s, %s %s:%s" % (
            fmt_b(p["bytes"]), "its frames name" if named else "no frame names", gt.get("user_file"),
            ",".join(str(n) for n in (hit or lines))))
        found += named
    for p in gt.get("plain_freed") or []:
        row.add("freed %#x" % p["address"], BAD if int(p["address"]) in at else OK,
                "freed before the snapshot: %s" % ("still a segment" if int(p["address"]) in at else "no segment"))
    others = sorted(set(at) - {int(p["address"]) for p in gt.get("plain") or []})
    if others:
        row.add("other plain segments", INFO, "%d not the program's own (%s): %s" % (
            len(others), fmt_b(sum(int(at[a]["total_size"]) for a in others)),
            ", ".join("%#x+%s" % (a, fmt_b(at[a]["total_size"])) for a in others[:6])))
    row.cells["plain"] = "%d / %d at their address and line" % (found, len(gt.get("plain") or []))
    # The total: the report's reserved bytes exactly, and PyTorch's reserve plus the
    # program's plain bytes within the kit's tolerance (the CUDA libraries' own memory).
    total = sum(int(s["total_size"]) for s in segs)
    reserved = summary(report, "reserved_bytes")
    row.add("total = reserved", OK if total == reserved else BAD,
            "segments %s, the report's reserved_bytes %s" % (fmt_b(total), fmt_b(reserved)))
    expect = int(gt.get("reserved") or 0) + sum(int(p["bytes"]) for p in gt.get("plain") or [])
    row.add("total vs PyTorch + plain", OK if abs(total - expect) <= tol(expect, TORCH_TOL) else BAD,
            "segments %s, PyTorch reserved %s + plain %s = %s (tolerance %s)" % (
                fmt_b(total), fmt_b(gt.get("reserved")), fmt_b(expect - int(gt.get("reserved") or 0)), fmt_b(expect),
                fmt_b(tol(expect, TORCH_TOL))))
    row.cells["total"] = "%s / %s / %s" % (fmt_b(total), fmt_b(reserved), fmt_b(expect))
    return row


def md_table(headers, rows):
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for r in rows:
        out.append("| " + " | ".join(str(c) for c in r) + " |")
    return "\n".join(out)


def read_records(path):
    recs = []
    for line in read_text(path).splitlines():
        if not line.strip():
            continue
        f = line.split("\t")
        f += [""] * (10 - len(f))
        try:
            rc = int(f[4])
        except ValueError:
            rc = -1
        try:
            secs = float(f[5])
        except ValueError:
            secs = 0.0
        recs.append({"kind": f[0], "name": f[1], "build": f[2], "tool": f[3], "rc": rc,
                     "seconds": secs, "timeout": rc in (124, 137), "stdout": f[6],
                     "stderr": f[7], "reports_dir": f[8], "extra": f[9]})
    return recs


def evaluate(records, env):
    rows, sections, problems = [], [], []

    # tensorleak itself and the builds
    top = Row("setup", ("setup",))
    if not env.get("tensorleak_lib"):
        top.add("tensorleak", BAD, "no libtensorleak.so (%s)" % env.get("tensorleak_error", "not built"))
    for lib in env.get("missing_libs", []) or []:
        top.add("shared libraries", BAD, "missing: %s" % lib)
    for r in records:
        if r["kind"] == "build" and r["rc"] != 0:
            top.add("build %s %s" % (r["name"], r["build"]), BAD,
                    "exit %d, see %s" % (r["rc"], os.path.basename(r["stdout"])))
        if r["kind"] == "skip":
            req = r["extra"] == "required"
            top.add("skipped %s %s %s" % (r["name"], r["build"], r["tool"]), BAD if req else INFO, r["stdout"])
    rows.append(top)

    # C samples
    srows, truths = [], {}
    for r in records:
        if r["kind"] != "sample":
            continue
        if r["tool"] in ("preload", "cli", "cli-default"):
            row, _ = eval_sample(r)
            rows.append(row)
            srows.append(row)
        elif r["tool"] == "none":
            gt = sample_truth(r["stdout"])
            truths[(r["name"], r["build"])] = (gt, r)
            base = Row("baseline", (r["name"], r["build"], "none"))
            check_run_basics(base, r, gt)
            rows.append(base)
    hdr = ["sample", "cudart", "run", "truth leaks", "tensorleak leaks", "sites", "kinds", "growth",
           "reserved vs Δfree", "pools", "devices", "sleep/wake states", "shared once", "verdict"]
    sections.append(("Samples: leaks exact, growth, reserved vs cuMemGetInfo", md_table(hdr, [
        [row.cells.get(k, "") for k in ("sample", "build", "tool", "truth", "tensorleak", "sites", "kinds",
                                "growth", "held", "pools", "devices", "states", "shared")] + [row.verdict()] for row in srows])))

    # compute-sanitizer next to tensorleak
    crows = []
    for r in records:
        if r["kind"] != "sample" or r["tool"] != "sanitizer":
            continue
        gt, base = truths.get((r["name"], r["build"]), (None, None))
        n, b, why = parse_sanitizer(r)
        pre = [x for x in records if x["kind"] == "sample" and x["tool"] == "preload"
               and (x["name"], x["build"]) == (r["name"], r["build"])]
        tl = "?"
        if pre:
            pgt = sample_truth(pre[0]["stdout"])
            reps, _ = load_reports(pre[0]["reports_dir"])
            er = pick(reps, (pgt or {}).get("pid"), "exit")
            tl = fmt_cb(summary(er, "leaked_allocations"), summary(er, "leaked_bytes")) if er else "no report"
        bs = base["seconds"] if base and base["rc"] == 0 and base["seconds"] > 0 else None
        ratio = lambda s: ("%.2f×" % (s / bs)) if bs and s else "?"
        cs = fmt_cb(n, b) if n is not None else "— (%s)" % why
        if n is not None and gt is not None and (n, b) != (gt["leaks"]["count"], gt["leaks"]["bytes"]):
            cs += " ≠ truth"
        crows.append([r["name"], r["build"], fmt_cb(gt["leaks"]["count"], gt["leaks"]["bytes"]) if gt else "?",
                      tl, cs, ratio(pre[0]["seconds"]) if pre else "?",
                      ratio(r["seconds"]) if n is not None else "—"])
        info = Row("sanitizer", (r["name"], r["build"], "sanitizer"))
        info.add("compute-sanitizer", INFO, cs)
        rows.append(info)
    if crows:
        sections.append(("compute-sanitizer --leak-check full next to tensorleak (wall time × the uninstrumented run)",
                         md_table(["sample", "cudart", "truth", "tensorleak", "compute-sanitizer",
                                   "time × tensorleak", "time × compute-sanitizer"], crows)))

    # PyTorch
    trows = []
    for r in records:
        if r["kind"] == "torch":
            row = eval_torch(r)
            rows.append(row)
            trows.append(row)
    if trows:
        sections.append(("PyTorch allocator modes: tensorleak vs torch.cuda.memory_stats() and cuMemGetInfo", md_table(
            ["loop", "PYTORCH_CUDA_ALLOC_CONF", "run", "torch reserved", "tensorleak reserved", "torch allocated",
             "tensorleak allocated", "Δfree", "growth", "owners (exit)", "user's line", "verdict"],
            [[row.cells.get(k, "") for k in ("loop", "conf", "tool", "torch_res", "tl_res", "torch_alloc", "tl_alloc",
                                     "delta", "growth", "owners", "line")] + [row.verdict()] for row in trows])))

    # `tensorleak attach` to a torch loop started without tensorleak
    bases = {r["name"]: r for r in records if r["kind"] == "attach" and r["tool"] == "none"}
    arows = [eval_attach(r, bases.get(r["name"]) if r["tool"] != "none" else None)
             for r in records if r["kind"] == "attach"]
    rows.extend(arows)
    if arows:
        sections.append(("tensorleak attach to a PyTorch loop started without it (--interval 1): the torch pool, "
                         "growth at the leaking line, exit status, entry points refused", md_table(
                             ["loop", "run", "exit status", "allocations", "pool", "growth", "user's line",
                              "refused entry points", "verdict"],
                             [[row.cells.get(k, "") for k in ("loop", "run", "rc", "allocs", "pool", "growth",
                                                              "line", "refused")] + [row.verdict()]
                              for row in arows])))

    # PyTorch's out-of-memory of each verdict
    orows = [eval_torch_oom(r) for r in records if r["kind"] == "torch_oom"]
    rows.extend(orows)
    if orows:
        sections.append(("PyTorch out of memory: tensorleak's report at the failure vs torch's own figures", md_table(
            ["request", "expected verdict", "torch reserved / allocated / largest free",
             "tensorleak pool at the failure", "device free: tensorleak / torch", "tensorleak verdict, remedy",
             "verdict"],
            [[row.cells.get(k, "") for k in ("request", "want", "torch", "tl", "free", "verdict")] + [row.verdict()]
             for row in orows])))

    # Framework loops
    frows = [eval_framework(r) for r in records if r["kind"] == "fw"]
    rows.extend(frows)
    if frows:
        sections.append(("Frameworks' own allocators: tensorleak's pool rows vs the framework's figures "
                         "at the same moment, growth, the user's line", md_table(
                             ["loop", "setting", "run", "requests", "framework reserved / allocated (end)",
                              "tensorleak", "largest free: framework / tensorleak", "growth", "user's line",
                              "s/request", "exporter /metrics (end)", "verdict"],
                             [[row.cells.get(k, "") for k in ("loop", "setting", "run", "requests", "fw", "tl",
                                                              "largest", "growth", "line", "request_s", "exporter")]
                              + [row.verdict()] for row in frows])))

    # tensorleak's torch-snapshot pickle against PyTorch's own snapshot
    tsrows = [eval_tsnap(r) for r in records if r["kind"] == "tsnap"]
    rows.extend(tsrows)
    if tsrows:
        sections.append(("tensorleak report --format torch-snapshot vs torch.cuda.memory._snapshot() "
                         "of the same moment", md_table(
                             ["run", "'torch cuda:0' segments / blocks: tensorleak / PyTorch",
                              "plain allocations", "total / reserved_bytes / PyTorch reserved + plain",
                              "memory_viz views", "verdict"],
                             [[row.cells.get(k, "") for k in ("run", "pool", "plain", "total", "viz")]
                              + [row.verdict()] for row in tsrows])))

    # Overhead
    brows, btable = eval_bench(records)
    rows.extend(brows)
    if btable:
        sections.append(("tensorleak overhead on PyTorch loops (µs per step: median of the runs' "
                         "medians, min–max over runs; runs alternate ABBA, warm-up excluded)", btable))

    repaired = []
    for row in rows:
        for c in row.checks:
            if c.status == BAD:
                problems.append("%s %s: %s: %s" % (row.table, " ".join(str(k) for k in row.key if k), c.what, c.detail))
            if c.what == "report repairs":
                repaired.append("- %s %s: %s" % (row.table, " ".join(str(k) for k in row.key if k), c.detail))
    if repaired:
        sections.append(("Figures tensorleak repaired before writing a report (invariants it found broken)",
                         "\n".join(repaired)))
    return rows, sections, problems


def render(env, sections, problems, skipped=0):
    head = ["# tensorleak on a real GPU", ""]
    for k, label in (("date", "date"), ("gpu", "GPU"), ("driver", "driver"), ("cuda", "CUDA (nvcc)"),
                     ("torch", "PyTorch"), ("frameworks", "other frameworks"), ("sanitizer", "compute-sanitizer"),
                     ("tensorleak_source", "tensorleak"), ("commit", "commit"), ("elapsed", "kit wall time")):
        if env.get(k):
            head.append("- %s: %s" % (label, env[k]))
    head += ["", "**Verdict: %s**%s" % ("PASS" if not problems else "FAIL, %d mismatch(es)" % len(problems),
                                         " (%d row(s) skipped: their framework is not installed)" % skipped
                                         if skipped else ""), ""]
    if problems:
        head += ["## Mismatches", ""] + ["- " + p for p in problems] + [""]
    body = []
    for title, table in sections:
        body += ["## " + title, "", table, ""]
    return "\n".join(head + body)


def cmd_evaluate(a):
    env = {}
    if a.env and os.path.exists(a.env):
        with open(a.env) as f:
            env = json.load(f)
    rows, sections, problems = evaluate(read_records(a.records), env)
    md = render(env, sections, problems, sum(1 for r in rows if r.verdict() == "skipped"))
    if a.md:
        with open(a.md, "w") as f:
            f.write(md)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"env": env, "mismatches": problems, "rows": [
                {"table": r.table, "key": list(r.key), "verdict": r.verdict(),
                 "checks": [c.as_dict() for c in r.checks]} for r in rows]}, f, indent=1)
    print(md)
    return 1 if problems else 0


# ------------------------------------------------------------------ selftest
def cmd_selftest(_a):
    """Feed evaluate() synthetic runs whose verdicts are known."""
    d = tempfile.mkdtemp(prefix="tl-compare-selftest.")
    try:
        recs = []

        def put(name, text):
            p = os.path.join(d, name)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "w") as f:
                f.write(text)
            return p

        def report(dirname, pid, reason, **kw):
            r = {"tool": "tensorleak", "schema": 1, "reason": reason, "pid": pid,
                 "summary": {"leaked_bytes": 0, "leaked_allocations": 0, "reserved_bytes": 0,
                             "allocated_bytes": 0, "live_bytes": 0}, "leaks": [], "pools": [], "growth": [],
                 "devices": [{"device": 0, "free": 1000 * MiB, "total": 2000 * MiB}]}
            for k, v in kw.items():
                if k in r["summary"]:
                    r["summary"][k] = v
                else:
                    r[k] = v
            put("%s/tl.%d.%s.json" % (dirname, pid, reason), json.dumps(r))

        def leaky_gt(pid, marks=4):
            return ("hello\nTL_GROUND_TRUTH " + json.dumps({
                "sample": "leaky", "pid": pid, "requests": 4, "marks": marks, "expect_growth": True,
                "leaks": {"count": 4, "bytes": 16 * MiB}, "kinds": {"device": [4, 16 * MiB]},
                "sites": [{"function": "kv_cache_append", "count": 4, "bytes": 16 * MiB}],
                "expected_held": 16 * MiB, "free_start": 1016 * MiB, "free_end": 1000 * MiB,
                "total": 2000 * MiB}) + "\n")

        stack = [{"function": "cudaMalloc"}, {"function": "_Z15kv_cache_appendi"}, {"function": "main"}]
        tl_stack = [{"function": "cudaMallocAsync"},
                    {"function": "serve_request", "file": "/k/tests/gpu/torch_loop.py", "line": 52, "python": True}]
        good_leaks = [{"kind": "device", "bytes": 16 * MiB, "count": 4, "stack": stack}]
        growth = [{"bytes_per_mark": 4 * MiB, "marks": 4, "stack": stack}]
        # 1: a correct run
        out = put("a.out", leaky_gt(11))
        report("a", 11, "exit", leaked_allocations=4, leaked_bytes=16 * MiB, leaks=good_leaks, growth=growth)
        report("a", 11, "api", reserved_bytes=16 * MiB, allocated_bytes=16 * MiB, label="end")
        recs.append({"kind": "sample", "name": "leaky", "build": "static", "tool": "preload", "rc": 0,
                     "seconds": 1.0, "timeout": False, "stdout": out, "stderr": out,
                     "reports_dir": os.path.join(d, "a"), "extra": ""})
        rows, _, problems = evaluate(recs, {"tensorleak_lib": "x"})
        assert not problems, problems
        # 1b: default report names: the exit report plain, the snapshot numbered; the
        # first H200 run's tree left only one file (the snapshot overwritten)
        os.makedirs(os.path.join(d, "a1"))
        shutil.copy(os.path.join(d, "a", "tl.11.exit.json"), os.path.join(d, "a1", "tensorleak.11.json"))
        shutil.copy(os.path.join(d, "a", "tl.11.api.json"), os.path.join(d, "a1", "tensorleak.11.1.json"))
        rec1b = dict(recs[0], tool="cli-default", reports_dir=os.path.join(d, "a1"))
        assert evaluate([rec1b], {"tensorleak_lib": "x"})[2] == []
        os.remove(os.path.join(d, "a1", "tensorleak.11.1.json"))
        p = evaluate([rec1b], {"tensorleak_lib": "x"})[2]
        assert len(p) == 2 and "default report names" in p[0] and "reserved vs Δfree" in p[1], p
        # 1c: vmm_share, two processes: the importer's imported row names the
        # exporter's allocation, counted once against cuMemGetInfo; then an
        # importer whose identity differs (merge would count twice)
        def share_case(tag, exporter_pid, importer_pid, importer_identity):
            gt = {"sample": "vmm_share", "pid": exporter_pid, "requests": 0, "marks": 0, "expect_growth": None,
                  "leaks": {"count": 1, "bytes": 6 * MiB}, "kinds": {"vmm_handle": [1, 6 * MiB]},
                  "sites": [{"function": "create_shared", "count": 1, "bytes": 6 * MiB}],
                  "importer": {"pid": importer_pid, "function": "import_shared", "bytes": 6 * MiB,
                               "saw_bytes": True},
                  "expected_held": 6 * MiB, "free_start": 1006 * MiB, "free_end": 1000 * MiB, "total": 2000 * MiB}
            out = put(tag + ".out", "TL_GROUND_TRUTH " + json.dumps(gt) + "\n")
            ex = [{"kind": "vmm_handle", "bytes": 6 * MiB, "count": 1, "imported": False,
                   "shared": [{"identity": "5:77", "bytes": 6 * MiB, "imported": False}],
                   "stack": [{"function": "cuMemCreate"}, {"function": "create_shared"}]}]
            im = [{"kind": "vmm_handle", "bytes": 6 * MiB, "count": 1, "imported": True,
                   "shared": [{"identity": importer_identity, "bytes": 6 * MiB, "imported": True}],
                   "stack": [{"function": "import_shared"}]}]
            report(tag, exporter_pid, "exit", leaked_allocations=1, leaked_bytes=6 * MiB, live_bytes=6 * MiB,
                   leaks=ex)
            report(tag, exporter_pid, "api", reserved_bytes=6 * MiB, allocated_bytes=6 * MiB, label="end")
            report(tag, importer_pid, "exit", leaked_allocations=1, leaked_bytes=6 * MiB, live_bytes=6 * MiB,
                   leaks=im)
            rec = {"kind": "sample", "name": "vmm_share", "build": "none", "tool": "preload", "rc": 0,
                   "seconds": 1.0, "timeout": False, "stdout": out, "stderr": out,
                   "reports_dir": os.path.join(d, tag), "extra": ""}
            return evaluate([rec], {"tensorleak_lib": "x"})[2]
        p = share_case("s1", 31, 32, "5:77")
        assert p == [], p
        p = share_case("s2", 33, 34, "5:78")
        assert len(p) == 2 and "identity" in p[0] and "counted once" in p[1], p
        # 2: one leak short, no growth, wrong site
        out = put("b.out", leaky_gt(12))
        bad = [{"kind": "device", "bytes": 12 * MiB, "count": 3, "stack": [{"function": "main"}]}]
        report("b", 12, "exit", leaked_allocations=3, leaked_bytes=12 * MiB, leaks=bad)
        report("b", 12, "api", reserved_bytes=40 * MiB)
        recs2 = [dict(recs[0], stdout=out, stderr=out, reports_dir=os.path.join(d, "b"))]
        _, _, problems = evaluate(recs2, {"tensorleak_lib": "x"})
        whats = " ".join(problems)
        for w in ("leaks exact", "site kv_cache_append", "kind device", "growth", "reserved vs Δfree"):
            assert w in whats, (w, problems)
        # 2b: CUDA IPC: the importer's report is checked against its own line; a
        # mapping counted as the importer's memory, or another handle, is a mismatch
        def ipc_case(tag, importer_summary, mapped_handle):
            gt = json.loads(leaky_gt(21).split("TL_GROUND_TRUTH ")[1])
            gt.update(sample="ipc", requests=0, marks=0, expect_growth=None, ipc={"importer": 22, "exported": 1})
            out = put(tag + ".out", "TL_IPC_IMPORT " + json.dumps({
                "pid": 22, "mapped_bytes": 4 * MiB, "open_function": "open_mapping_leak",
                "bytes_as_written": True, "second_close": 1}) + "\nTL_GROUND_TRUTH " + json.dumps(gt) + "\n")
            report(tag, 21, "exit", leaked_allocations=4, leaked_bytes=16 * MiB, leaks=good_leaks,
                   ipc={"exported": [{"handle": "00000000000000aa", "bytes": 16 * MiB}], "mapped": []})
            report(tag, 21, "api", reserved_bytes=16 * MiB, allocated_bytes=16 * MiB, label="end")
            mleak = [{"kind": "ipc_mapping", "bytes": 4 * MiB, "count": 1,
                      "stack": [{"function": "cuIpcOpenMemHandle_v2"}, {"function": "open_mapping_leak"}]}]
            report(tag, 22, "exit", leaks=mleak, ipc={"exported": [], "mapped": [{"handle": mapped_handle}]},
                   summary=dict({"reserved_bytes": 0, "allocated_bytes": 0}, **importer_summary))
            return evaluate([dict(recs[0], name="ipc", build="none", stdout=out, stderr=out,
                                  reports_dir=os.path.join(d, tag))], {"tensorleak_lib": "x"})[2]
        apart = dict(leaked_allocations=1, leaked_bytes=0, ipc_mapped_bytes=4 * MiB, leaked_ipc_mapped_bytes=4 * MiB,
                     live_bytes=0)
        p = ipc_case("ipc1", apart, "00000000000000aa")
        assert p == [], p
        p = ipc_case("ipc2", dict(apart, leaked_bytes=4 * MiB, live_bytes=4 * MiB), "00000000000000bb")
        assert len(p) == 2 and "ipc importer figures" in p[0] and "ipc handle pairs" in p[1], p
        # 2c: host registration and CUDA arrays (families.cu): the driver answered
        # the arrays' requirements, or refused them (cuda.h's documented answer
        # without cudaArrayDeferredMapping): then the arrays are of unknown size,
        # null, never 0, and reserved vs Δfree is information only
        def families_case(tag, req_rc, leaks, device_reserved, unknown):
            pid = 31
            arrays = [{"function": f, "api": api, "leaked": leaked, "deferred": deferred, "info_rc": 0,
                       "extent": ext, "flags": 0x80 if deferred else 0, "format": [32, 0, 0, 0, 2],
                       "req_rc": 0 if deferred else req_rc, "size": 2 * MiB if not req_rc or deferred else 0,
                       "alignment": 65536}
                      for f, api, leaked, deferred, ext in (
                          ("array2d_leak", "cudaMallocArray", True, False, [1024, 512, 0]),
                          ("array3d_leak", "cudaMalloc3DArray", True, False, [256, 256, 8]),
                          ("array2d_leak", "cudaMallocArray", False, False, [512, 512, 0]),
                          ("array3d_leak", "cudaMalloc3DArray", True, True, [256, 256, 8]))]
            arrays[3]["leaked"] = False
            host = [{"function": "register_leak", "bytes": 3 * MiB, "leaked": True, "pointer_type": 1,
                     "flags_rc": 0, "flags": 0, "pointer_type_after": -1, "flags_rc_after": -1},
                    {"function": None, "bytes": 1 * MiB, "leaked": False, "pointer_type": 1, "flags_rc": 0,
                     "flags": 0, "pointer_type_after": 0, "flags_rc_after": 1}]
            gt = {"sample": "families", "api": "runtime", "pid": pid, "requests": 0, "marks": 0,
                  "expect_growth": None, "families": {"host": host, "arrays": arrays, "pitched": {
                      "function": "pitched3d_leak", "pitch": 4096, "xsize": 4096, "ysize": 256, "depth": 2,
                      "bytes": 2 * MiB}},
                  "free_start": 1006 * MiB, "free_end": 1000 * MiB, "total": 2000 * MiB}
            out = put(tag + ".out", "TL_GROUND_TRUTH " + json.dumps(gt) + "\n")
            known = sum(x["bytes"] or 0 for x in leaks)
            n = sum(x["count"] for x in leaks)
            report(tag, pid, "exit", leaks=leaks, summary={
                "leaked_allocations": n, "leaked_bytes": known, "reserved_bytes": known - 3 * MiB,
                "allocated_bytes": known - 3 * MiB, "unknown_size_allocations": unknown})
            report(tag, pid, "api", label="end", reserved_bytes=device_reserved, allocated_bytes=device_reserved,
                   devices=[{"device": 0, "free": 1000 * MiB, "total": 2000 * MiB,
                             "reserved_bytes": device_reserved}])
            rows = evaluate([dict(recs[0], name="families", build="static", stdout=out, stderr=out,
                                  reports_dir=os.path.join(d, tag))], {"tensorleak_lib": "x"})[0]
            row = [r for r in rows if r.table == "samples"][0]
            return row, [c for c in row.checks if c.status == BAD]

        def fam_leak(kind, fn, nbytes, unknown=False):
            x = {"kind": kind, "bytes": None if unknown else nbytes, "count": 1,
                 "stack": [{"function": "cuMemHostRegister_v2"}, {"function": fn}, {"function": "main"}]}
            if unknown:
                x["unknown_size_allocations"] = 1
            return x
        base = [fam_leak("host_registered", "register_leak", 3 * MiB),
                fam_leak("device", "_ZL14pitched3d_leak10cudaExtent", 2 * MiB)]
        sized = base + [fam_leak("array", "_ZL12array2d_leakP9array_rowmm", 2 * MiB),
                        fam_leak("array", "_ZL12array3d_leakP9array_row10cudaExtentj", 2 * MiB)]
        row, p = families_case("fam1", 0, sized, 6 * MiB, 0)
        assert p == [] and row.cells["kinds"] == "ok + arrays ok", ([c.as_dict() for c in p], row.cells)
        unknown = base + [fam_leak("array", "array2d_leak", 0, True), fam_leak("array", "array3d_leak", 0, True)]
        row, p = families_case("fam2", 1, unknown, 2 * MiB, 2)
        held = [c for c in row.checks if c.what == "reserved vs Δfree"]
        assert p == [] and held[0].status == INFO and "2 CUDA array(s) of unknown size" in held[0].detail, \
            ([c.as_dict() for c in p], [c.as_dict() for c in held])
        # unknown sizes written as 0, the registered range counted as device memory
        zero = base + [dict(x, bytes=0) for x in unknown[2:]]
        for x in zero[2:]:
            del x["unknown_size_allocations"]
        row, p = families_case("fam3", 1, zero, 5 * MiB, 0)
        whats = [c.what for c in p]
        assert whats == ["array array2d_leak", "array array3d_leak", "unknown size", "device bytes"], \
            [c.as_dict() for c in p]
        assert row.cells["kinds"].endswith("**arrays wrong**"), row.cells
        # the driver gave sizes, tensorleak lost one array and misses the device bytes
        row, p = families_case("fam4", 0, sized[:3], 4 * MiB, 0)
        whats = " ".join(c.what for c in p)
        for w in ("leaks exact", "site ", "kind array", "array array3d_leak", "device bytes"):
            assert w in whats, (w, [c.as_dict() for c in p])
        # 3: no report at all, program crashed
        out = put("c.out", "")
        recs3 = [dict(recs[0], stdout=out, stderr=out, rc=139, reports_dir=os.path.join(d, "none"))]
        _, _, problems = evaluate(recs3, {"tensorleak_lib": "x"})
        assert any("ran" in p for p in problems) and any("ground truth" in p for p in problems), problems
        # 3b: graph memory: the captured allocations held by the graph pool, not leaked
        def graph_gt(pid):
            return "TL_GROUND_TRUTH " + json.dumps({
                "sample": "graph", "pid": pid, "requests": 2, "marks": 2, "expect_growth": None,
                "leaks": {"count": 1, "bytes": 4 * MiB}, "kinds": {"device": [1, 4 * MiB]},
                "sites": [{"function": "uncaptured_leak", "count": 1, "bytes": 4 * MiB}],
                "pool": {"kind": "graph", "reserved": 8 * MiB, "used": 5 * MiB, "reserved_high": 8 * MiB,
                         "used_high": 7 * MiB},
                "graph_held": {"function": "graph_alloc_captured", "count": 2, "bytes": 5 * MiB},
                "expected_held": 40 * MiB, "free_start": 1040 * MiB, "free_end": 1000 * MiB,
                "total": 2000 * MiB}) + "\n"
        gstack = [{"function": "cudaMallocAsync"}, {"function": "_Z20graph_alloc_capturedmP11CUstream_st"}]
        lstack = [{"function": "cudaMallocAsync"}, {"function": "_Z15uncaptured_leakmP11CUstream_st"}]
        gleak = [{"kind": "device", "bytes": 4 * MiB, "count": 1, "stack": lstack}]
        gpool = [{"name": "graph memory (device 0)", "kind": "graph", "device": 0, "reserved_bytes": 8 * MiB,
                  "allocated_bytes": 5 * MiB}]
        gheld = [{"kind": "device", "bytes": 5 * MiB, "count": 2, "owner": "CUDA graph memory",
                  "owner_class": "cache", "stack": gstack}]
        out = put("g1.out", graph_gt(31))
        report("g1", 31, "exit", leaked_allocations=1, leaked_bytes=4 * MiB, leaks=gleak, held=gheld)
        report("g1", 31, "api", reserved_bytes=40 * MiB, pools=gpool, label="end")
        grec = dict(recs[0], name="graph", stdout=out, stderr=out, reports_dir=os.path.join(d, "g1"))
        assert evaluate([grec], {"tensorleak_lib": "x"})[2] == []
        # ... and a tracker that takes the captured allocations for leaks of their site
        out = put("g2.out", graph_gt(32))
        report("g2", 32, "exit", leaked_allocations=3, leaked_bytes=9 * MiB,
               leaks=gleak + [dict(gheld[0], owner="user", owner_class="user")])
        report("g2", 32, "api", reserved_bytes=40 * MiB, pools=[dict(gpool[0], reserved_bytes=None)], label="end")
        p = evaluate([dict(grec, stdout=out, stderr=out, reports_dir=os.path.join(d, "g2"))], {"tensorleak_lib": "x"})[2]
        whats = " ".join(p)
        for w in ("leaks exact", "graph held", "pool"):
            assert w in whats, (w, p)
        # 4: torch runs: async mode checks allocated; clean with growth flagged is a mismatch
        def torch_gt(pid, mode, conf):
            return "TL_GROUND_TRUTH " + json.dumps({
                "sample": "torch_loop", "mode": mode, "alloc_conf": conf, "pid": pid, "requests": 5,
                "marks": 5, "snapshot_rc": 0, "expect_growth": mode == "leak", "reserved": 200 * MiB,
                "allocated": 160 * MiB, "free_start": 1200 * MiB, "free_end": 1000 * MiB,
                "total": 2000 * MiB}) + "\n"
        out = put("t1.out", torch_gt(21, "leak", "backend:cudaMallocAsync"))
        report("t1", 21, "api", reserved_bytes=200 * MiB, allocated_bytes=160 * MiB, growth=growth,
               leaks=[{"kind": "async", "bytes": 32 * MiB, "count": 5, "stack": tl_stack}])
        report("t1", 21, "exit")
        out2 = put("t2.out", torch_gt(22, "clean", ""))
        report("t2", 22, "api", reserved_bytes=200 * MiB, allocated_bytes=200 * MiB, growth=growth)
        report("t2", 22, "exit", owners=[{"name": "PyTorch caching allocator", "class": "cache",
                                            "live_bytes": 200 * MiB}],
               held=[{"kind": "device", "bytes": 200 * MiB, "count": 2, "owner": "PyTorch caching allocator",
                      "owner_class": "cache"}])
        trecs = [{"kind": "torch", "name": "leak", "build": "-", "tool": "preload", "rc": 0, "seconds": 3.0,
                  "timeout": False, "stdout": out, "stderr": out, "reports_dir": os.path.join(d, "t1"),
                  "extra": "backend:cudaMallocAsync"},
                 {"kind": "torch", "name": "clean", "build": "-", "tool": "preload", "rc": 0, "seconds": 3.0,
                  "timeout": False, "stdout": out2, "stderr": out2, "reports_dir": os.path.join(d, "t2"),
                  "extra": ""}]
        _, _, problems = evaluate(trecs, {"tensorleak_lib": "x"})
        assert len(problems) == 1 and "torch clean native preload: growth" in problems[0], problems
        # 4b: under tensorleak run the bridge's PyTorch pool must hold torch's allocated bytes
        out3 = put("t3.out", torch_gt(23, "leak", ""))
        for n, alloc in ((0, 160 * MiB), (1, 150 * MiB)):
            report("t3%d" % n, 23, "api", reserved_bytes=200 * MiB, allocated_bytes=200 * MiB, growth=growth,
                   pools=[{"name": "torch cuda:0", "kind": "pytorch", "device": 0, "reserved_bytes": 200 * MiB,
                           "allocated_bytes": alloc, "free_bytes": 200 * MiB - alloc}])
            report("t3%d" % n, 23, "exit", held=[{"kind": "device", "bytes": 200 * MiB, "count": 10,
                                                  "owner": "PyTorch caching allocator", "stack": tl_stack}])
            p = evaluate([dict(trecs[0], stdout=out3, stderr=out3, reports_dir=os.path.join(d, "t3%d" % n),
                               extra="", tool="cli")], {"tensorleak_lib": "x"})[2]
            assert p == [] if n == 0 else (len(p) == 1 and "bridge pool allocated" in p[0]), p
        # 4c: attach to a loop started without tensorleak; the refused entry points are reported,
        # and a refused cuMemAlloc_v2, a missing pool, an invalid free or another exit status fail
        def attach_case(n, rc, refused, pool, invalid):
            pid = 60 + n
            gt = dict(json.loads(torch_gt(pid, "leak", "").split(" ", 1)[1]), attached=True,
                      user_lines=[52])
            out = put("a%d.out" % n, "TL_READY %d\nTL_GROUND_TRUTH %s\n" % (pid, json.dumps(gt)))
            err = put("a%d.err" % n, "".join("tensorleak: attach: %s is not hooked: %s\n" % r for r in refused))
            put("a%d/attach.rc" % n, "0\n")
            put("a%d/tl.%d.exit.json" % (n, pid), json.dumps({
                "tool": "tensorleak", "schema": 1, "reason": "exit", "pid": pid,
                "attach": {"interval": 1, "before": []},
                "summary": {"total_allocations": 12, "invalid_frees": invalid, "leaked_bytes": 0},
                "pools": [{"name": pool, "kind": "pytorch", "device": 0}] if pool else [],
                "growth": [{"bytes_per_mark": 32 * MiB, "stack": [
                    {"function": "serve_request", "file": "/k/tests/gpu/torch_loop.py", "line": 52,
                     "python": True}]}]}))
            base = {"kind": "attach", "name": "torch_loop", "build": "native", "tool": "none", "rc": 0,
                    "seconds": 5.0, "timeout": False, "stdout": out, "stderr": err, "reports_dir": "",
                    "extra": ""}
            return evaluate([base, dict(base, tool="attach", rc=rc, reports_dir=os.path.join(d, "a%d" % n))],
                            {"tensorleak_lib": "x"})
        rows, sections, p = attach_case(0, 0, [("cuMemAllocManaged", "a conditional branch in the first 5 bytes")],
                                        "torch cuda:0", 0)
        arow = [r for r in rows if r.table == "attach" and r.key[2] == "attach"][0]
        assert p == [] and arow.cells["refused"].startswith("cuMemAllocManaged (a conditional"), (p, arow.cells)
        assert arow.cells["line"] == "torch_loop.py:52 (growth)" and arow.cells["pool"] == "torch cuda:0", arow.cells
        assert any(t.startswith("tensorleak attach") for t, _ in sections), sections
        p = attach_case(1, 1, [("cuMemAlloc_v2", "a call in the first 5 bytes")], None, 1)[2]
        whats = " ".join(p)
        assert len(p) == 4, p
        for w in ("exit status: 1 attached, 0 untracked", "torch's entry points hooked: refused: cuMemAlloc_v2",
                  "invalid frees: 1", "torch pool: pool missing"):
            assert w in whats, (w, p)
        # 7: owners at exit, per allocator mode
        def site(kind, nbytes, owner, cls):
            return {"kind": kind, "bytes": nbytes, "count": 1, "owner": owner, "owner_class": cls,
                    "stack": tl_stack}
        CA = ("PyTorch caching allocator", "cache")
        WS = ("PyTorch cuBLAS workspace", "workspace")
        USER = ("user", "user")

        def owners_case(n, mode, conf, held, leaks, kept=0, leak_stack=None):
            gt = json.loads(torch_gt(30 + n, mode, conf).split(" ", 1)[1])
            gt["kept_bytes"] = kept
            out = put("o%d.out" % n, "TL_GROUND_TRUTH " + json.dumps(gt) + "\n")
            report("o%d" % n, 30 + n, "api", reserved_bytes=200 * MiB,
                   allocated_bytes=160 * MiB if "Async" in conf else 200 * MiB,
                   growth=growth if mode == "leak" else [])
            lk = [dict(site(k, b, *o), stack=leak_stack or tl_stack) for k, b, o in leaks]
            report("o%d" % n, 30 + n, "exit", owners=[{"name": CA[0], "class": CA[1], "live_bytes": 1}],
                   held=[site(k, b, *o) for k, b, o in held], leaks=lk,
                   leaked_bytes=sum(x["bytes"] for x in lk), leaked_allocations=len(lk))
            rec = {"kind": "torch", "name": mode, "build": "-", "tool": "preload", "rc": 0, "seconds": 3.0,
                   "timeout": False, "stdout": out, "stderr": out, "reports_dir": os.path.join(d, "o%d" % n),
                   "extra": conf}
            return evaluate([rec], {"tensorleak_lib": "x"})[2]
        # native clean: 200 MiB of segments and a 1 MiB workspace (99.5 %); mappings do not count
        assert owners_case(1, "clean", "", [("device", 200 * MiB, CA), ("device", 1 * MiB, WS),
                                            ("vmm_mapping", 500 * MiB, WS)], []) == []
        # expandable leak: the kept tensors lie inside the caching allocator's handles
        assert owners_case(2, "leak", "expandable_segments:True",
                           [("vmm_handle", 300 * MiB, CA), ("vmm_reservation", 1 << 40, CA)], [],
                           kept=160 * MiB) == []
        # native clean, but a user leak and only 95 % held by the caching allocator
        p = owners_case(3, "clean", "", [("device", 190 * MiB, CA)], [("device", 10 * MiB, USER)])
        assert len(p) == 2 and "caching allocator share" in p[0] and "no user leak" in p[1], p
        # native clean without any held memory: nothing attributed is a mismatch
        p = owners_case(4, "clean", "", [], [])
        assert len(p) == 1 and "caching allocator share" in p[0], p
        # async clean: tensors freed by exit are no leaks; the workspace is held
        assert owners_case(5, "clean", "backend:cudaMallocAsync", [("async", 32 * MiB, WS)], []) == []
        # async leak: user leaks are exactly the kept tensors ...
        assert owners_case(6, "leak", "backend:cudaMallocAsync", [("async", 32 * MiB, WS)],
                           [("async", 32 * MiB, USER)] * 5, kept=160 * MiB) == []
        # ... and the kept tensors missing (freed before the report) is a mismatch
        p = owners_case(7, "leak", "backend:cudaMallocAsync", [], [], kept=160 * MiB)
        assert len(p) == 2 and "user's line: no stack names torch_loop.py" in p[0] and "owners: user leaks" in p[1], p
        # the kept tensors leaked, but with native frames only: no line is named
        p = owners_case(9, "leak", "backend:cudaMallocAsync", [], [("async", 32 * MiB, USER)] * 5,
                        kept=160 * MiB, leak_stack=stack)
        assert len(p) == 1 and "user's line" in p[0], p
        # async clean with a user leak is a mismatch
        p = owners_case(8, "clean", "backend:cudaMallocAsync", [], [("async", 8 * MiB, USER)])
        assert len(p) == 1 and "owners: user leaks" in p[0], p
        # 5: sanitizer parsing, bench, skips
        s1 = put("s1.out", "========= LEAK SUMMARY: 16777216 bytes leaked in 4 allocations\n")
        s2 = put("s2.out", "========= Error: Device not supported\n")
        assert parse_sanitizer({"stdout": s1, "stderr": s1, "rc": 0, "timeout": False})[:2] == (4, 16 * MiB)
        assert parse_sanitizer({"stdout": s2, "stderr": s2, "rc": 1, "timeout": False})[2] == "refused the device"
        # Overhead: ABBA runs, per-step µs from each run's median pass.  Inference loop:
        # a 0.6 µs difference inside a 10 µs run-to-run spread is no overhead (the first
        # H200 table called such noise "-23 %"); one slow pass does not move a run's median.
        def bench_out(n, work, times, steps, check=1.5, uncached=True):
            return put("b%s.out" % n, "TL_BENCH " + json.dumps({
                "workload": work, "times": times, "steps": steps, "checksum": check,
                "uncached": uncached, "sm_clock_mhz": [1980, 1965]}) + "\n")

        def brec(n, work, tool, extra, times, steps, **kw):
            return {"kind": "bench", "name": work, "build": str(n), "tool": tool, "rc": 0, "seconds": 5.0,
                    "timeout": False, "stdout": bench_out("%s%s" % (work, n), work, times, steps, **kw),
                    "stderr": "", "reports_dir": "", "extra": extra}
        ms = 1e-3
        brecs = [brec(0, "infer", "none", "", [0.100, 0.100, 0.101], 1000),
                 brec(1, "infer", "preload", "", [0.104, 0.300, 0.104], 1000),
                 brec(2, "infer", "preload", "", [0.103, 0.103, 0.103], 1000),
                 brec(3, "infer", "none", "", [0.110, 0.110, 0.110], 1000),
                 # allocation-bound: 11.0 -> 11.65 µs per pair, runs within 0.1 µs of each other
                 brec(0, "alloc", "none", "PYTORCH_NO_CUDA_MEMORY_CACHING=1", [11.0 * ms] * 3, 1000, check=0.0),
                 brec(1, "alloc", "preload", "PYTORCH_NO_CUDA_MEMORY_CACHING=1", [11.64 * ms] * 3, 1000, check=0.0),
                 brec(2, "alloc", "preload", "PYTORCH_NO_CUDA_MEMORY_CACHING=1", [11.7 * ms] * 3, 1000, check=0.0),
                 brec(3, "alloc", "none", "PYTORCH_NO_CUDA_MEMORY_CACHING=1", [11.1 * ms] * 3, 1000, check=0.0)]
        brecs.append({"kind": "skip", "name": "bench", "build": "-", "tool": "-", "rc": 0, "seconds": 0,
                      "timeout": False, "stdout": "out of time", "stderr": "", "reports_dir": "",
                      "extra": "optional"})
        _, sections, problems = evaluate(brecs, {"tensorleak_lib": "x"})
        table = sections[-1][1].splitlines()
        infer = [ln for ln in table if ln.startswith("| infer")][0].split(" | ")
        alloc = [ln for ln in table if ln.startswith("| alloc")][0].split(" | ")
        assert not problems, problems
        assert infer[3:8] == ["2/2 ABBA", "105.0 (100.0–110.0)", "103.5 (103.0–104.0)", "-1.50", "-1.4 %"], infer
        assert infer[8] == "10.00" and infer[9] == "1965–1980" and infer[-1] == "within run-to-run spread |", infer
        assert alloc[4:8] == ["11.05 (11.00–11.10)", "11.67 (11.64–11.70)", "+0.62", "+5.6 %"], alloc
        assert alloc[8] == "0.10" and alloc[-1] == "tensorleak +0.62 µs |" and alloc[-2] == "same", alloc
        # ... a cache left on (the setting ignored) or a different result is a mismatch
        brecs[5] = brec(1, "alloc", "preload", "PYTORCH_NO_CUDA_MEMORY_CACHING=1", [11.65 * ms] * 3, 1000,
                        check=0.0, uncached=False)
        brecs[3] = brec(3, "infer", "none", "", [0.110, 0.110, 0.110], 1000, check=2.5)
        _, _, problems = evaluate(brecs, {"tensorleak_lib": "x"})
        assert len(problems) == 2 and "caching off" in problems[1] and "same result" in problems[0], problems
        brecs[-1]["extra"] = "required"
        _, _, problems = evaluate(brecs, {})
        setup = [p for p in problems if p.startswith("setup")]
        assert len(setup) == 2, problems  # no library, a required step skipped
        # 8: framework loops.  Pool rows shaped as the bridges emit them
        # (kind, reserved/allocated/free, largest_free_block null when unknown, framework
        # mode, stale, sites with Python frames), growth entries with a scope.
        py_stack = [{"function": "update", "file": "/x/transformers/cache_utils.py", "line": 147, "python": True},
                    {"function": "gpt2_request", "file": "/k/tests/gpu/serve_loop.py", "line": 108, "python": True},
                    {"function": "main", "file": "/k/tests/gpu/serve_loop.py", "line": 300, "python": True}]

        def fw_case(n, loop, mode, moments, pool_for, growth_for, setting="", info=None, skip=None, **rkw):
            pid = 100 + n
            if skip:
                out = put("f%d.out" % n, "TL_SKIP " + json.dumps({"why": skip}) + "\n")
            else:
                gt = {"sample": loop, "mode": mode, "pid": pid, "requests": 8, "check_at": 6, "marks": 8,
                      "api": "package", "expect_growth": mode == "leak", "moments": moments,
                      "snapshot_rc": {k: 0 for k in moments}, "request_s": 0.063,
                      "user_file": "serve_loop.py", "user_lines": [104, 108], "info": info or {}}
                out = put("f%d.out" % n, "TL_GROUND_TRUTH " + json.dumps(gt) + "\n")
                for label in list(moments) + ["exit"]:
                    pools = [q for q in [pool_for(label)] if q]
                    kw = dict(rkw, pools=pools, growth=growth_for(label), bridge={"state": "fresh", "read_at": 1.0})
                    if label == "exit":
                        report("f%d" % n, pid, "exit", **kw)
                    else:
                        report("f%d" % n, pid, "api", label=label, **kw)
                        os.replace(os.path.join(d, "f%d" % n, "tl.%d.api.json" % pid),
                                   os.path.join(d, "f%d" % n, "tl.%d.%s.json" % (pid, label)))
            rec = {"kind": "fw", "name": loop, "build": mode, "tool": "cli", "rc": 0, "seconds": 9.0,
                   "timeout": False, "stdout": out, "stderr": out, "reports_dir": os.path.join(d, "f%d" % n),
                   "extra": setting}
            rows, sections, problems = evaluate([rec], {"tensorleak_lib": "x"})
            return rows[-1], problems

        def tpool(reserved, allocated, largest, mode="native", **kw):
            free = reserved - allocated
            p = {"name": "torch cuda:0", "kind": "pytorch", "device": 0, "reserved_bytes": reserved,
                 "allocated_bytes": allocated, "free_bytes": free, "largest_free_block": largest,
                 "fragmentation": (1 - largest / free) if largest is not None and free else None,
                 "framework": {"name": "torch", "mode": mode}, "source": "bridge", "read_at": 1.0, "stale": False}
            p.update(kw)
            return p
        gm = {"req6": {"reserved": 300 * MiB, "allocated": 250 * MiB, "largest_free_block": 20 * MiB, "request": 6},
              "end": {"reserved": 340 * MiB, "allocated": 290 * MiB, "largest_free_block": 20 * MiB, "request": 8}}
        pool_growth = [{"scope": "pool", "pool": "torch cuda:0", "pool_kind": "pytorch",
                        "bytes_per_mark": 20 * MiB, "marks": 6}]
        # a correct GPT-2 leak under the native allocator, history on: the site names line 108
        row, p = fw_case(1, "gpt2", "leak", gm,
                         lambda lb: tpool(gm.get(lb, gm["end"])["reserved"], gm.get(lb, gm["end"])["allocated"],
                                          20 * MiB, sites=[{"bytes": 160 * MiB, "count": 48, "stack": py_stack}]),
                         lambda lb: pool_growth, info={"backend": "native", "alloc_conf": ""})
        assert p == [] and row.verdict() == "ok", p
        assert row.cells["growth"] == "flagged by request 6: pool 20 MiB/mark", row.cells
        assert row.cells["line"] == "serve_loop.py:108 (pool sites)" and row.cells["tl"] == "340 MiB / 290 MiB", row.cells
        # growth of several scopes, the pool's shown first; native stacks only: no line
        row, p = fw_case(11, "gpt2", "leak", gm, lambda lb: tpool(gm.get(lb, gm["end"])["reserved"],
                                                                   gm.get(lb, gm["end"])["allocated"], 20 * MiB),
                         lambda lb: growth + pool_growth, info={"backend": "native"})
        assert row.cells["growth"] == "flagged by request 6: pool 20 MiB/mark, call_site 4 MiB/mark", row.cells
        assert len(p) == 1 and "user's line: no stack names serve_loop.py" in p[0], p
        # a pool growth rate far from the framework's own per-request growth is wrong
        row, p = fw_case(14, "gpt2", "leak", gm,
                         lambda lb: tpool(gm.get(lb, gm["end"])["reserved"], gm.get(lb, gm["end"])["allocated"],
                                          20 * MiB, sites=[{"bytes": 160 * MiB, "count": 48, "stack": py_stack}]),
                         lambda lb: [dict(pool_growth[0], bytes_per_mark=8 * MiB)], info={"backend": "native"})
        assert len(p) == 1 and "pool growth rate: 8 MiB/mark, the framework's allocated bytes grew 20 MiB" in p[0], p
        # what the first H200 run showed: no pool row, no growth, no Python line
        row, p = fw_case(2, "gpt2", "leak", gm, lambda lb: None, lambda lb: [], info={"backend": "native"})
        whats = " ".join(p)
        for w in ("pytorch pool req6", "pytorch pool end", "growth by req6", "user's line"):
            assert w in whats, (w, p)
        # without history the cache's segments (held) are all that can name the line ...
        held_py = [{"kind": "device", "bytes": 20 * MiB, "count": 1, "owner": "PyTorch caching allocator",
                    "owner_class": "cache", "stack": [{"function": "cudaMalloc"}] + py_stack[1:]}]

        def tpool_end(lb):
            return tpool(gm.get(lb, gm["end"])["reserved"], gm.get(lb, gm["end"])["allocated"], 20 * MiB)
        row, p = fw_case(12, "gpt2", "leak", gm, tpool_end, lambda lb: pool_growth,
                         info={"backend": "native"}, held=held_py)
        assert p == [] and row.cells["line"] == "serve_loop.py:108 (held)", (p, row.cells)
        row, p = fw_case(15, "gpt2", "leak", gm, lambda lb: tpool(
            gm.get(lb, gm["end"])["reserved"], gm.get(lb, gm["end"])["allocated"], 20 * MiB,
            sites=[{"bytes": 160 * MiB, "count": 48, "stack": py_stack}]), lambda lb: pool_growth,
            info={"backend": "native", "history": True}, held=held_py)
        assert p == [] and row.cells["line"] == "serve_loop.py:108 (pool sites, held)", (p, row.cells)
        # ... with history on, a pool site or a leak must
        row, p = fw_case(13, "gpt2", "leak", gm, tpool_end, lambda lb: pool_growth,
                         info={"backend": "native", "history": True}, held=held_py)
        assert len(p) == 1 and "user's line" in p[0] and "only" in p[0], p
        # expandable segments: the pool must say so; a stale state is no reading
        row, p = fw_case(3, "gpt2", "clean", {"end": gm["end"]},
                         lambda lb: tpool(340 * MiB, 290 * MiB, 20 * MiB, stale=lb == "end"), lambda lb: [],
                         setting="expandable_segments:True",
                         info={"backend": "native", "alloc_conf": "expandable_segments:True"})
        assert len(p) == 2 and "end fresh" in p[0] and "torch mode" in p[1], p
        # CuPy clean: the pool has no largest free block to tell (0 is not unknown), and
        # growth at exit is growth
        cm = {"end": {"reserved": 16 * MiB, "allocated": 8 * MiB, "largest_free_block": None, "request": 8}}
        cpool = {"name": "cupy device 0", "kind": "cupy", "device": 0, "reserved_bytes": 16 * MiB,
                 "allocated_bytes": 8 * MiB, "free_bytes": 8 * MiB, "largest_free_block": 0, "fragmentation": 0.0}
        row, p = fw_case(4, "cupy", "clean", cm, lambda lb: cpool, lambda lb: growth if lb == "exit" else [])
        assert len(p) == 2 and "largest free block unknown" in p[0] and "no growth" in p[1], p
        cpool.update(largest_free_block=None, fragmentation=None)
        row, p = fw_case(5, "cupy", "clean", cm, lambda lb: cpool, lambda lb: [])
        assert p == [] and row.cells["largest"] == "unknown / null", (p, row.cells)
        # JAX preallocated, VMM counted three times: over the device's memory
        jm = {"end": {"reserved": 100 * MiB, "allocated": 10 * MiB, "largest_free_block": 90 * MiB, "request": 8}}
        jpool = {"name": "jax cuda:0", "kind": "jax", "device": 0, "reserved_bytes": 100 * MiB,
                 "allocated_bytes": 10 * MiB, "free_bytes": 90 * MiB, "largest_free_block": 90 * MiB,
                 "fragmentation": 0.0}
        row, p = fw_case(6, "jax", "clean", jm, lambda lb: jpool, lambda lb: [], reserved_bytes=3 * 2000 * MiB)
        assert len(p) == 1 and "report invariants" in p[0] and "> the devices' memory" in p[0], p
        # a device whose allocated exceeds its reserve; a repaired figure is listed apart
        row, p = fw_case(16, "cupy", "clean", cm, lambda lb: cpool, lambda lb: [],
                         devices=[{"device": 0, "free": 1000 * MiB, "total": 2000 * MiB, "reserved_bytes": 16 * MiB,
                                   "allocated_bytes": 24 * MiB, "gap_bytes": -8 * MiB}],
                         repairs=[{"invariant": "gap >= 0", "where": "device 0", "figure": "gap_bytes",
                                   "was": -1, "now": 0}])
        assert len(p) == 1 and "device 0: gap -8388608 < 0" in p[0] and "device 0: allocated 24 MiB > reserved 16 MiB" in p[0], p
        assert any(c.what == "report repairs" and "device 0 gap_bytes -1 -> 0" in c.detail for c in row.checks), row.checks
        # JAX names its live arrays (device_memory_profile): a pool site must name the line
        jl = {"req6": dict(jm["end"], request=6), "end": dict(jm["end"], allocated=10 * MiB)}
        jpool_sites = dict(jpool, sites=[{"bytes": 16 * MiB, "count": 1, "stack": py_stack[1:]}])
        row, p = fw_case(17, "jax", "leak", jl, lambda lb: jpool_sites,
                         lambda lb: [dict(pool_growth[0], pool="jax cuda:0", bytes_per_mark=0)])
        assert p == [] and row.cells["line"] == "serve_loop.py:108 (pool sites)", (p, row.cells)
        row, p = fw_case(18, "jax", "leak", jl, lambda lb: jpool,
                         lambda lb: [dict(pool_growth[0], pool="jax cuda:0", bytes_per_mark=0)], held=held_py)
        assert len(p) == 1 and "user's line" in p[0] and "only" in p[0], p
        # GPT-2 with the exporter running: /metrics at each moment equals PyTorch's own
        # figures, device free within 1 % of nvidia-smi's (absent nvidia-smi: noted only)
        def with_exporter(moments, free, alloc_off=0, smi=True, error=None):
            out = {}
            for k, m in moments.items():
                e = {"error": error} if error else {"update_time": 2.0, "pool_reserved": m["reserved"],
                                                     "pool_allocated": m["allocated"] + alloc_off,
                                                     "device_free": free, "device_total": 140000 * MiB}
                out[k] = dict(m, exporter=e, smi={"free": 100000 * MiB, "total": 140000 * MiB} if smi else None)
            return out
        for n, (em, bad) in enumerate([(with_exporter(gm, 100500 * MiB), []),
                                       (with_exporter(gm, 100500 * MiB, smi=False), []),
                                       (with_exporter(gm, 102000 * MiB, alloc_off=MiB),
                                        ["exporter req6 reserved/allocated", "exporter req6 device free",
                                         "exporter end reserved/allocated", "exporter end device free"]),
                                       (with_exporter(gm, 0, error="no live update after the moment within 20 s"),
                                        ["exporter req6: no live update", "exporter end: no live update"])]):
            row, p = fw_case(20 + n, "gpt2", "leak", em, lambda lb: tpool(
                gm.get(lb, gm["end"])["reserved"], gm.get(lb, gm["end"])["allocated"], 20 * MiB,
                sites=[{"bytes": 160 * MiB, "count": 48, "stack": py_stack}]), lambda lb: pool_growth,
                setting="TL_EXPORTER=1", info={"backend": "native"})
            assert len(p) == len(bad) and all(w in q for w, q in zip(bad, p)), (n, p)
            if n == 0:
                assert row.cells["exporter"] == "340 MiB / 290 MiB; free 100500 MiB (smi 100000 MiB)", row.cells
        # a framework that is not installed: skipped, not failed
        row, p = fw_case(7, "jax", "leak", {}, None, None, skip="jax does not import")
        assert p == [] and row.verdict() == "skipped", (p, row.verdict())
        # 8: sleep/wake states: a good run, then one whose sleep kept a handle
        # and released a reservation, and whose wake mapped one piece too many
        def sleep_case(n, asleep_handles, asleep_va, woken_handles):
            pid = 60 + n
            base = 1000 * MiB
            states = [("awake", 48 * MiB), ("asleep1", 0), ("woken1", 48 * MiB)]
            gt = {"sample": "sleep_wake", "pid": pid, "requests": 3, "marks": 6, "expect_growth": False,
                  "leaks": {"count": 0, "bytes": 0}, "kinds": {}, "sites": [], "weights_intact": True,
                  "states": [{"label": lb, "free": base - h, "handles": h, "address_space": 48 * MiB}
                             for lb, h in states],
                  "expected_held": 0, "free_start": base, "free_end": base, "total": 2000 * MiB}
            out = put("s%d.out" % n, "TL_GROUND_TRUTH " + json.dumps(gt) + "\n")
            held = {"awake": (48 * MiB, 48 * MiB), "asleep1": (asleep_handles, asleep_va),
                    "woken1": (woken_handles, 48 * MiB)}
            for lb, (h, va) in held.items():  # what tensorleak saw held at each state
                snap = {"tool": "tensorleak", "schema": 1, "reason": "api", "label": lb, "pid": pid,
                        "summary": {"leaked_bytes": 0, "leaked_allocations": 0, "reserved_bytes": h,
                                    "allocated_bytes": h, "address_space_bytes": va},
                        "leaks": [{"kind": "vmm_handle", "bytes": h, "count": 1, "stack": []}] if h else [],
                        "pools": [], "growth": [], "devices": [{"device": 0, "free": base - h, "total": 2000 * MiB}]}
                put("s%d/tl.%d.%s.json" % (n, pid, lb), json.dumps(snap))
            report("s%d" % n, pid, "api", label="end", reserved_bytes=0)
            # the marks read the driver, which agrees with the ground truth
            report("s%d" % n, pid, "exit", marks=[{"label": lb, "device_free": base - h} for lb, h in states])
            rec = dict(recs[0], name="sleep_wake", build="none", stdout=out, stderr=out,
                       reports_dir=os.path.join(d, "s%d" % n))
            rows, _, probs = evaluate([rec], {"tensorleak_lib": "x"})
            return [r for r in rows if r.table == "samples"][0], probs
        row, p = sleep_case(0, 0, 48 * MiB, 48 * MiB)
        assert p == [] and row.cells["states"] == "3 ok", (p, row.cells)
        row, p = sleep_case(1, 2 * MiB, 32 * MiB, 50 * MiB)
        assert row.cells["states"] == "**wrong**", row.cells
        whats = " ".join(p)
        for w in ("state asleep1", "vmm_handle bytes 2 MiB, the program holds 0 MiB",
                  "address space 32 MiB, the program keeps 48 MiB", "state woken1", "wake woken1"):
            assert w in whats, (w, p)
        def plain_pickle(v):
            """The opcodes tools/format_torch_snapshot.c writes (no memo, no classes)."""
            import struct
            if isinstance(v, dict):
                items = b"".join(plain_pickle(k) + plain_pickle(x) for k, x in v.items())
                return b"}" + (b"(" + items + b"u" if v else b"")
            if isinstance(v, list):
                return b"]" + (b"(" + b"".join(plain_pickle(x) for x in v) + b"e" if v else b"")
            if isinstance(v, str):
                return b"X" + struct.pack("<I", len(v.encode())) + v.encode()
            if v is None:
                return b"N"
            if isinstance(v, bool):
                return b"\x88" if v else b"\x89"
            raw = v.to_bytes(9, "little", signed=True)
            return b"\x8a\x09" + raw
        # 9: torch_snapshot: tensorleak's pickle against PyTorch's own snapshot; the
        # memory_viz views stubbed (absent, passing, failing) so the verdicts are fixed
        def tsnap_case(n, views, stand_in=True, **bad):
            pid, base = 200 + n, 0x7F0000000000
            blocks = [(base, 2 * MiB, "active_allocated"), (base + 2 * MiB, 18 * MiB, "inactive")]
            theirs = {"segments": [{"device": 0, "address": base, "total_size": 20 * MiB, "blocks": [
                {"address": a, "size": s, "state": st, "frames": []} for a, s, st in blocks]}],
                "device_traces": [[]]}
            plain = [{"address": base + 64 * MiB, "bytes": 3 * MiB, "lines": [64, 140]}]
            gt = {"sample": "torch_snapshot", "pid": pid, "torch_pickle": "/gpu/torch.pickle",
                  "tensorleak_report": "/gpu/tensorleak.json", "snapshot_rc": 0, "reserved": 20 * MiB,
                  "allocated": 2 * MiB, "plain": plain, "plain_freed": [{"address": base + 80 * MiB, "bytes": MiB}],
                  "user_file": "torch_snapshot.py", "info": {"torch": "2.9.0", "stand_in": stand_in}}
            pool_seg = {"device": 0, "address": base + bad.get("shift", 0), "total_size": 20 * MiB,
                        "tensorleak_pool": "torch cuda:0", "tensorleak_unknown": [], "blocks": [
                            {"address": a + bad.get("shift", 0), "size": s, "state": st, "frames": []}
                            for a, s, st in blocks[bad.get("drop_block", 0):]]}
            frames = [{"name": f, "filename": "/k/torch_snapshot.py", "line": n}
                      for f, n in zip(("malloc", "main"), bad.get("frame_lines", (64, 140)))]
            plain_segs = [{"device": 0, "address": p["address"] + bad.get("plain_off", 0), "total_size": p["bytes"],
                           "tensorleak_unknown": ["stream"], "blocks": [
                               {"address": p["address"], "size": p["bytes"], "state": "active_allocated",
                                "frames": frames}]} for p in plain]
            if bad.get("other"):  # memory of the CUDA libraries, not the program's
                plain_segs.append({"device": 0, "address": base + 128 * MiB, "total_size": bad["other"],
                                   "tensorleak_unknown": [], "blocks": []})
            if bad.get("freed_shown"):
                plain_segs.append({"device": 0, "address": base + 80 * MiB, "total_size": MiB,
                                   "tensorleak_unknown": [], "blocks": []})
            ours = {"segments": [pool_seg] + plain_segs, "device_traces": [[]]}
            data = b"\x80\x02" + plain_pickle(ours) + b"."
            if bad.get("tuple"):
                data = pickle.dumps(dict(ours, extra=(1, 2)), 2)
            put("t%d/torch.pickle" % n, "")
            with open(os.path.join(d, "t%d" % n, "torch.pickle"), "wb") as f:
                pickle.dump(theirs, f)
            with open(os.path.join(d, "t%d" % n, "tensorleak.pickle"), "wb") as f:
                f.write(data)
            total = sum(s["total_size"] for s in ours["segments"])
            put("t%d/tensorleak.json" % n, json.dumps({
                "tool": "tensorleak", "schema": 1, "reason": "api", "label": "torch_snapshot", "pid": pid,
                "summary": {"reserved_bytes": total + bad.get("reserved_off", 0), "allocated_bytes": 5 * MiB,
                            "leaked_bytes": 0, "leaked_allocations": 0}, "leaks": [], "growth": [],
                "pools": [{"name": "torch cuda:0", "kind": "pytorch", "device": 0, "reserved_bytes": 20 * MiB,
                           "allocated_bytes": bad.get("pool_allocated", 2 * MiB), "free_bytes": 18 * MiB}],
                "bridge": {"state": bad.get("bridge", "fresh")},
                "devices": [{"device": 0, "free": 1000 * MiB, "total": 2000 * MiB}]}))
            out = put("t%d.out" % n, "TL_GROUND_TRUTH " + json.dumps(gt) + "\n")
            rec = dict(recs[0], kind="tsnap", name="torch_snapshot", build="native", tool="cli", stdout=out,
                       stderr=out, reports_dir=os.path.join(d, "t%d" % n))
            global memory_viz_views
            real = memory_viz_views
            memory_viz_views = lambda snap: views  # noqa: E731
            try:
                rows, _, probs = evaluate([rec], {"tensorleak_lib": "x"})
            finally:
                memory_viz_views = real
            return [r for r in rows if r.table == "torch_snapshot"][0], probs
        row, p = tsnap_case(0, (None, "no module"))
        assert p == [] and row.verdict() == "ok" and row.cells["viz"] == "skipped (no _memory_viz)", (p, row.cells)
        row, p = tsnap_case(1, ([], None), stand_in=False)
        assert p == [] and row.cells["viz"] == "6 of 6 read it" and row.cells["plain"] == \
            "1 / 1 at their address and line" and row.cells["total"] == "23 MiB / 23 MiB / 23 MiB", (p, row.cells)
        row, p = tsnap_case(2, (None, "no module"), stand_in=False)
        assert len(p) == 1 and "memory_viz views" in p[0], p
        row, p = tsnap_case(3, (["segsum: KeyError: 'frames'"], None), stand_in=False, shift=2 * MiB, drop_block=1,
                            plain_off=MiB, freed_shown=True, reserved_off=MiB, tuple=True)
        whats = " ".join(p)
        for w in ("plain opcodes", "'TUPLE2'", "memory_viz views", "segsum: KeyError", "pool segments",
                  "active blocks", "plain 0x7f0004000000", "freed 0x7f0005000000", "total = reserved"):
            assert w in whats, (w, p)
        assert len(p) == 7, p
        # 40 MiB more than PyTorch's reserve and the program's plain bytes: over the tolerance
        row, p = tsnap_case(4, ([], None), stand_in=False, other=40 * MiB)
        assert len(p) == 1 and "total vs PyTorch + plain" in p[0], p
        assert any(c.what == "other plain segments" and c.status == INFO for c in row.checks), row.checks
        # the plain allocation's stack names other lines; the pool row is stale or off
        row, p = tsnap_case(5, ([], None), stand_in=False, frame_lines=(99, 98))
        assert len(p) == 1 and "plain 0x7f0004000000" in p[0] and "no frame names torch_snapshot.py:64,140" in p[0], p
        row, p = tsnap_case(6, ([], None), stand_in=False, bridge="stale")
        assert len(p) == 1 and "pool row" in p[0] and "stale" in p[0], p
        row, p = tsnap_case(7, ([], None), stand_in=False, pool_allocated=3 * MiB)
        assert len(p) == 1 and "pool row" in p[0] and "20 MiB / 3 MiB, memory_stats() 20 MiB / 2 MiB" in p[0], p
        # 5b: PyTorch's out-of-memory rows: figures and verdict against torch's own
        def oom_case(n, verdict, **change):
            gt = {"pid": 60 + n, "request": 50 * MiB, "caught": True, "num_ooms": 1, "reserved": 800 * MiB,
                  "allocated": 200 * MiB, "largest_free": 15 * MiB, "device_free": 40 * MiB}
            pool = {"name": "torch cuda:0", "state": "fresh", "reserved_bytes": 800 * MiB,
                    "allocated_bytes": 200 * MiB, "free_bytes": 600 * MiB, "largest_free_block": 15 * MiB,
                    "verdict": "fragmentation"}
            oom = {"bytes": 50 * MiB, "device_free": 40 * MiB, "verdict": "fragmentation",
                   "remedy": "expandable_segments", "pools": [pool]}
            for k, v in change.items():
                (pool if k in pool else oom)[k] = v
            out = put("oom%d.out" % n, "TL_GROUND_TRUTH " + json.dumps(gt) + "\n")
            report("oom%d" % n, gt["pid"], "oom", oom=oom)
            report("oom%d" % n, gt["pid"], "exit")
            rec = dict(recs[0], kind="torch_oom", name=verdict, tool="cli", extra="", stdout=out, stderr=out,
                       reports_dir=os.path.join(d, "oom%d" % n))
            rows, _, p = evaluate([rec], {"tensorleak_lib": "x"})
            return p
        assert oom_case(0, "fragmentation") == []
        p = oom_case(1, "not_enough_memory")
        assert len(p) == 2 and "verdict" in p[0] and "pool at the failure" in p[1], p
        p = oom_case(2, "fragmentation", state="stale", reserved_bytes=20 * MiB, device_free=None)
        assert len(p) == 2 and "device free" in p[0] and "pool at the failure" in p[1], p
        # 6: records file round trip
        rp = put("records.tsv", "\t".join(["sample", "leaky", "static", "preload", "0", "1.5", out, out, d, ""]) + "\n")
        rr = read_records(rp)
        assert rr[0]["rc"] == 0 and rr[0]["seconds"] == 1.5 and rr[0]["tool"] == "preload", rr
        print("compare.py selftest: ok (11 scenarios)")
        return 0
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("evaluate")
    e.add_argument("--records", required=True)
    e.add_argument("--env")
    e.add_argument("--md")
    e.add_argument("--json")
    sub.add_parser("selftest")
    a = ap.parse_args()
    return cmd_evaluate(a) if a.cmd == "evaluate" else cmd_selftest(a)


if __name__ == "__main__":
    sys.exit(main())
