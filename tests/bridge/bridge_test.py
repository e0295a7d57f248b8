#!/usr/bin/env python3
"""End-to-end tests of the Python bridge on the simulated CUDA stack.

Programs run under `tensorleak run --sim` with a stand-in torch (fake/torch:
a caching allocator whose segments come from the simulated runtime, answering
memory_stats()/_snapshot() in the shapes recorded on the H200).  Each test is
a function; meson runs one per process (`bridge_test.py NAME`).  Assertions
are exact where the input is deterministic: the fake allocator's own figures
are printed by the program and must be the report's.

Real PyTorch runs on the simulator too (tests/torch, suite 'torch'), and
every figure the report prints about PyTorch is checked there against torch
itself: the pool in its allocator modes, growth per pool with history off,
auto and on and both kinds of marks, the out-of-memory verdicts, the pytest
plugin, owners on libc10_cuda, top and the exporter.  The stand-in stays for
what real torch cannot be made to do on demand, each test's reason:
- exact replay of states recorded on the H200 (the_library_reports_the_h200_
  state_exactly, fields_a_report_cannot_hold_...): real torch on a simulator
  never produces a GPU's addresses and figures;
- failures and timing injected into the framework (growth_is_never_lost_while_
  a_state_read_is_slow, a_framework_that_fails_..., a_program_holding_the_gil_
  ..., report_inside_an_allocation_..., a_failure_pytorch_recovers_from_...):
  a slow, failing or GIL-holding allocator read is a switch of the stand-in;
- JAX, CuPy and RMM, whose CUDA libraries need NVIDIA's runtime
  (cuGetExportTable) and cannot run on the simulator;
- the bridge's own rules on small, fast programs (imports, switches, forks,
  signals, suppressions, clean twins over fifty requests): a real torch
  import costs about 3 s, forty of them would add minutes to CI for no
  figure of torch's that the 'torch' suite does not already check.
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import scratch  # noqa: E402

scratch.use()

BUILD = os.environ["TL_BUILD"]
SOURCE = os.environ["TL_SOURCE"]
SIM = os.environ["TL_SIM"]
CLI = os.path.join(BUILD, "tools", "tensorleak")
HERE = os.path.dirname(os.path.abspath(__file__))
FAKE = os.path.join(HERE, "fake")
KV = os.path.join(HERE, "progs", "kv_loop.py")
READ_BEGUN_THEN_GIL_HELD = os.path.join(HERE, "progs", "read_begun_then_gil_held.py")
FIGURES_READ_AT_EXIT = os.path.join(HERE, "progs", "figures_read_at_exit.py")
SLOW_TEARDOWN = os.path.join(HERE, "progs", "slow_teardown.py")
MiB = 1 << 20


# The integration suite's assertions (preload_test.py reads these paths at
# import; the bridge's programs need none of them).
os.environ.setdefault("TL_SAMPLES", "")
os.environ.setdefault("TL_PROGS", "")
sys.path.insert(0, os.path.join(SOURCE, "tests", "integration"))
from preload_test import check, eq, fail, marker_line  # noqa: E402,F401


def line_of(path, marker):
    return marker_line(os.path.relpath(path, SOURCE), marker)


class Run:
    def __init__(self, rc, out, err, reports, seconds, files=()):
        self.rc, self.out, self.err, self.reports, self.seconds = rc, out, err, reports, seconds
        self.files = list(files)  # report paths, in the order of `reports`

    def by_reason(self, reason):
        return [r for r in self.reports if r["reason"] == reason]

    @property
    def exit(self):
        exits = self.by_reason("exit")
        eq(len(exits), 1, "number of exit reports")
        return exits[0]

    @property
    def printed(self):
        return json.loads(self.out.strip().splitlines()[-1])


def clean_env(extra=None):
    e = dict(os.environ)
    for k in list(e):
        if k.startswith("TENSORLEAK_") or k.startswith("SIMCUDA_") or k in ("LD_PRELOAD", "PYTHONPATH"):
            del e[k]
    e["PYTHONPATH"] = FAKE
    e.update(extra or {})
    return e


def run(args, env=None, under=True, timeout=50):
    tmp = tempfile.mkdtemp(prefix="tl-bridge-")
    e = clean_env(env)
    if under:
        cmd = [CLI, "run", "--sim", "-o", os.path.join(tmp, "tl.%p.%n.json"), "--", sys.executable, *args]
    else:
        e["LD_LIBRARY_PATH"] = SIM
        cmd = [sys.executable, *args]
    t0 = time.monotonic()
    p = subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=timeout)
    seconds = time.monotonic() - t0
    reports, files = [], []
    for name in sorted(os.listdir(tmp)):
        files.append(os.path.join(tmp, name))
        with open(files[-1]) as f:
            reports.append(json.load(f))
    return Run(p.returncode, p.stdout, p.stderr, reports, seconds, files)


def torch_pool(report):
    rows = [p for p in report["pools"] if p["kind"] == "pytorch"]
    eq(len(rows), 1, "pytorch pool rows")
    return rows[0]


def growth(report, scope):
    return [g for g in report["growth"] if g.get("scope") == scope]


def peaks_and_utilization(pool, peak_allocated, peak_reserved):
    """The pool's peaks are the framework's own, and utilization their
    quotient (bit for bit: both are one IEEE division of the same integers).
    The two peaks must differ for the test to tell one from the other."""
    check(peak_allocated != peak_reserved, f"the framework's peaks differ ({peak_allocated})")
    eq((pool["peak_allocated_bytes"], pool["peak_reserved_bytes"]), (peak_allocated, peak_reserved),
       "pool peaks (allocated, reserved) = the framework's")
    eq(pool["utilization"], peak_allocated / peak_reserved, "utilization = peak allocated / peak reserved")


def pool_growth(report, name, per_request, requests):
    """A pool allocating `per_request` more at each of `requests` marks: one
    row, its rate and the bytes it grew from and to exact."""
    eq([(g["pool"], g["bytes_per_mark"], g["count_per_mark"], g["marks"], g["from_bytes"], g["to_bytes"],
         g["suppressed"]) for g in growth(report, "pool")],
       [(name, per_request, None, requests - 1, per_request, requests * per_request, False)], f"{name} growth")


# ---- tests -----------------------------------------------------------------

def leaking_loop_is_flagged_per_pool_within_six_requests():
    r = run([KV, "leak", "6", "ctypes"])
    eq(r.rc, 3, "exit status (the program's own)")
    plain = run([KV, "leak", "6", "ctypes"], under=False)
    eq(r.out, plain.out, "the program's output under tensorleak")
    rep = r.exit
    stats = r.printed["stats"]
    pool = torch_pool(rep)
    eq(pool["reserved_bytes"], stats["reserved_bytes.all.current"], "pool reserved = the allocator's")
    eq(pool["allocated_bytes"], stats["allocated_bytes.all.current"], "pool allocated = the allocator's")
    eq(pool["allocated_bytes"], 6 * 21 * MiB, "six kept KV blocks")
    eq(pool["free_bytes"], stats["reserved_bytes.all.current"] - stats["allocated_bytes.all.current"], "pool free")
    peaks_and_utilization(pool, stats["allocated_bytes.all.peak"], stats["reserved_bytes.all.peak"])
    eq(pool["segments"], stats["segment.all.current"], "pool segments = the allocator's")
    eq(pool["source"], "bridge", "pool source")
    eq(pool["framework"], {"name": "torch", "version": "0.0.0+tensorleak.fake", "mode": "native"}, "framework")
    # Layout: every segment, the live blocks inside them; the largest hole.
    eq(len(pool["layout"]), stats["segment.all.current"], "layout segments")
    eq(sum(b["bytes"] for s in pool["layout"] for b in s["blocks"]), pool["allocated_bytes"], "blocks placed")
    holes = []
    for s in pool["layout"]:
        cursor = 0
        for b in sorted(s["blocks"], key=lambda b: b["offset"]):
            if b["offset"] > cursor:
                holes.append(b["offset"] - cursor)
            cursor = b["offset"] + b["bytes"]
        if s["bytes"] > cursor:
            holes.append(s["bytes"] - cursor)
    eq(pool["largest_free_block"], max(holes), "largest free block = the largest hole of the layout")
    eq(round(pool["fragmentation"], 9), round(1 - max(holes) / pool["free_bytes"], 9), "fragmentation")
    # Device summary: reserved from the driver, allocated what the cache hands out.
    dev = [d for d in rep["devices"] if d["device"] == 0][0]
    eq(dev["reserved_bytes"], stats["reserved_bytes.all.current"], "device reserved (driver)")
    eq(dev["allocated_bytes"], stats["allocated_bytes.all.current"], "device allocated (the cache's blocks)")
    eq(dev["gap_bytes"], pool["free_bytes"], "device gap = the cache's")
    pools = growth(rep, "pool")
    eq(len(pools), 1, "pool growth rows")
    g = pools[0]
    eq((g["pool"], g["kind"], g["pool_kind"], g["bytes_per_mark"], g["marks"], g["from_bytes"], g["to_bytes"]),
       ("torch cuda:0", "pytorch", "pytorch", 21 * MiB, 5, 21 * MiB, 6 * 21 * MiB), "pool growth")
    eq(rep["bridge"]["state"], "final", "exit report's state")
    check(rep["bridge"]["read_at"] <= time.time(), "read_at is a time")
    check("finalized" in rep["bridge"]["note"], "the exit report says when its state was read")
    check("in pool 'torch cuda:0' (pytorch, allocated bytes)" in r.err, "text report names the pool's growth")
    # The HTML memory map draws PyTorch's segments, blocks and largest hole.
    exit_file = r.files[r.reports.index(rep)]
    html = subprocess.run([CLI, "report", exit_file, "--format", "html"], capture_output=True, text=True,
                          check=True).stdout
    eq(html.count('<svg class="map layout"'), 1, "memory maps drawn")
    eq(html.count('<rect class="segment" '), len(pool["layout"]), "segments drawn")
    check("largest hole 20.0 MiB" in html, "largest hole marked")


def growth_appears_by_the_sixth_request_and_not_before_the_fourth():
    # Snapshot reports after each request (SIGUSR1 from the program itself is
    # not needed: tensorleak.snapshot via ctypes after each mark).
    for n, flagged in ((3, False), (4, True), (6, True)):
        r = run([KV, "leak", str(n), "ctypes"])
        if flagged:
            pool_growth(r.exit, "torch cuda:0", 21 * MiB, n)
            eq(growth(r.exit, "pool")[0]["to_bytes"], r.printed["stats"]["allocated_bytes.all.current"],
               "grown to the allocator's own allocated bytes")
        else:
            eq(growth(r.exit, "pool"), [], f"pool growth after {n} requests")


def history_names_the_python_line_that_leaks():
    r = run([KV, "leak", "6", "ctypes"], env={"TENSORLEAK_TORCH_HISTORY": "1"})
    rep = r.exit
    kv_line = line_of(KV, "KV_ALLOC")
    g = growth(rep, "pool")[0]
    top = g["stack"][0]
    eq((top["function"], os.path.basename(top["file"]), top["line"], top["python"]), ("serve", "kv_loop.py", kv_line, True),
       "pool growth named by its Python line")
    # The growing Python site names its pool's growth row; no second row.
    eq(growth(rep, "python_site"), [], "python-site rows repeating the pool's")
    pool = torch_pool(rep)
    eq([(s["stack"][0]["line"], s["bytes"], s["count"]) for s in pool["sites"]], [(kv_line, 6 * 21 * MiB, 6)],
       "live Python sites of the pool")
    check(f"#0 in serve {KV}:{kv_line} [python]" in r.err, "text report shows the Python line")


def a_growth_suppression_on_the_python_line_covers_pool_and_site_rows():
    supp = os.path.join(tempfile.mkdtemp(prefix="tl-bridge-"), "supp.txt")
    with open(supp, "w") as f:
        f.write("growth:serve\n")
    env = {"TENSORLEAK_TORCH_HISTORY": "1"}
    r = run([KV, "kv2", "6", "ctypes"], env=dict(env, TENSORLEAK_FAIL_ON="growth"))
    eq(r.rc, 23, "the growth gate without the suppression")
    r = run([KV, "kv2", "6", "ctypes"], env=dict(env, TENSORLEAK_FAIL_ON="growth", TENSORLEAK_SUPPRESSIONS=supp))
    eq(r.rc, 3, "the program's own status: every growth row is suppressed")
    rows = r.exit["growth"]
    eq(sorted((g["scope"], g["suppressed"]) for g in rows),
       [("call_site", True), ("pool", True), ("python_site", True)], "suppressed rows")


def two_growing_python_lines_name_the_pool_and_a_row_of_their_own():
    r = run([KV, "kv2", "6", "ctypes"], env={"TENSORLEAK_TORCH_HISTORY": "1"})
    rep = r.exit
    keys, values = line_of(KV, "KEYS_ALLOC"), line_of(KV, "VALUES_ALLOC")
    pool = growth(rep, "pool")
    eq([(g["stack"][0]["line"], g["bytes_per_mark"]) for g in pool], [(keys, 21 * MiB)],
       "pool growth named by the faster line")
    eq([(g["stack"][0]["line"], g["bytes_per_mark"], g["pool"], g["pool_kind"]) for g in growth(rep, "python_site")],
       [(values, 10 * MiB, "torch cuda:0", "pytorch")], "the other growing line")


def clean_twin_over_fifty_requests_never_grows():
    r = run([KV, "clean", "50", "ctypes"], timeout=120)
    eq(r.rc, 3, "exit status")
    rep = r.exit
    eq(rep["growth"], [], "growth rows of the clean loop")
    eq(len(rep["marks"]), 50, "marks")
    pool = torch_pool(rep)
    eq(pool["allocated_bytes"], r.printed["stats"]["allocated_bytes.all.current"], "pool allocated")


def marks_through_the_python_api_use_the_callers_state():
    r = run([KV, "leak", "6", "tensorleak"], env={"PYTHONPATH": FAKE + os.pathsep + os.path.join(SOURCE, "python")})
    eq(r.rc, 3, "exit status")
    eq(len(growth(r.exit, "pool")), 1, "pool growth with tensorleak.mark()")


def growth_is_never_lost_while_a_state_read_is_slow():
    # PyTorch 2.15's first snapshot of blocks with Python frames imports
    # torch._inductor inside the mark's state read (about 1 s unloaded, over
    # the bridge's 2 s bound on a loaded machine).  The stand-in's import
    # takes 2.5 s.  A mark waits for a read that has begun; giving up after
    # the bound left that mark and every later one with a stale state, and
    # no growth row.  Repeated (the runs race the watcher's live requests),
    # with both kinds of marks, history on and off.
    line = line_of(KV, "SMALL_ALLOC")
    env = {"FAKE_TORCH_INDUCTOR_IMPORT_S": "2.5", "PYTHONPATH": FAKE + os.pathsep + os.path.join(SOURCE, "python")}
    cases = [("ctypes", True)] * 3 + [("tensorleak", True)] * 2 + [("ctypes", False), ("tensorleak", False)]
    for how, history in cases:
        what = "%s marks, history %s: " % (how, "on" if history else "off")
        r = run([KV, "leak2", "6", how], env=dict(env, TENSORLEAK_TORCH_HISTORY="1" if history else "0"))
        eq(r.rc, 3, what + "exit status")
        rows = growth(r.exit, "pool")
        eq([(g["pool"], g["bytes_per_mark"], g["marks"], g["from_bytes"], g["to_bytes"]) for g in rows],
           [("torch cuda:0", 2 * MiB, 5, 2 * MiB, 12 * MiB)], what + "pool growth")
        top = (rows[0].get("stack") or [{}])[0]
        eq((top.get("function"), top.get("file"), top.get("line")), ("serve", KV, line) if history else (None, None, None),
           what + "the growth row's Python line")


def sigusr1_snapshot_has_fresh_framework_state():
    r = run([KV, "leak", "3", "ctypes"], env={"KV_SIGNAL_SELF": "1"})
    snaps = r.by_reason("signal")
    eq(len(snaps), 1, "signal reports")
    rep = snaps[0]
    eq(rep["bridge"]["state"], "fresh", "state at a signal")
    eq(rep["bridge"]["note"], None, "note of a fresh state")
    pool = torch_pool(rep)
    eq(pool["allocated_bytes"], 3 * 21 * MiB, "pool allocated at the signal")
    eq(pool["stale"], False, "pool row is fresh")


def interval_reports_from_the_watcher_thread_have_fresh_state():
    # The watcher thread (no Python thread state) asks; the bridge answers
    # while the main thread runs Python code (the interpreter switches the
    # GIL every few milliseconds).  Four requests of 0.75 s at a tick every
    # 0.1 s: about 30 ticks while the program runs, ten times the three
    # fresh ones asked for, so that a loaded machine's late ticks still
    # leave three (0.5 s requests at 0.3 s ticks left two under load).
    r = run([KV, "leak", "4", "none"], env={"TENSORLEAK_INTERVAL": "0.1", "KV_SLEEP": "0.75"})
    eq(r.rc, 3, "exit status")
    iv = sorted(r.by_reason("interval"), key=lambda rep: rep["seq"])
    states = [rep["bridge"]["state"] for rep in iv]
    # A tick after the program's atexit closed the bridge (it submitted its
    # final state) gets that state, without asking: only at the end.
    fresh = [rep for rep in iv if rep["bridge"]["state"] == "fresh"]
    check(len(fresh) >= 3, f"fresh interval reports: {states}")
    eq(states, ["fresh"] * len(fresh) + ["final"] * (len(iv) - len(fresh)), "states of the interval reports, in order")
    for rep in fresh:
        pool = torch_pool(rep)
        # Read while the program runs: between requests (n x 21 MiB kept) or
        # inside one (plus 1-3 scratch blocks of 3 MiB) — never anything else.
        check(pool["allocated_bytes"] > 0 and pool["allocated_bytes"] % (21 * MiB) in (0, 3 * MiB, 6 * MiB, 9 * MiB),
              "pool allocated: %d" % pool["allocated_bytes"])


def no_interval_mark_is_taken_once_pythons_atexit_has_run():
    # A teardown of two seconds after the bridge closed, ticks every 0.1 s:
    # up to twenty interval reports during it (a loaded machine writes each
    # more slowly, two are enough to tell).  What the program frees then is
    # no request; marks there would end every growth run with a fall.  The
    # reports are still written (state "final"), without their marks.  One
    # mark more than the reports before the close is allowed: a mark whose
    # state read was under way when the program's atexit ran shows "final".
    r = run([SLOW_TEARDOWN, "4"], env={"TENSORLEAK_INTERVAL": "0.1"})
    eq(r.rc, 0, "exit status")
    iv = r.by_reason("interval")
    final = [rep for rep in iv if rep["bridge"]["state"] == "final"]
    check(len(final) >= 2, f"interval reports after the bridge closed: {len(final)} of {len(iv)}")
    (ex,) = r.by_reason("exit")
    marks = [m for m in ex["marks"] if m["label"] == "interval"]
    check(len(iv) - len(final) <= len(marks) <= len(iv) - len(final) + 1,
          f"interval marks: {len(marks)}, interval reports before the bridge closed: {len(iv) - len(final)}, "
          f"after: {len(final)}")


def a_program_holding_the_gil_gets_its_report_without_waiting_forever():
    r = run([KV, "leak", "2", "held"], timeout=120)
    eq(r.rc, 3, "exit status")
    api = r.by_reason("api")
    eq(len(api), 2, "api reports (one per request)")
    eq(api[0]["bridge"]["note"], "the Python bridge did not answer within 2000 ms (GIL held?): last state used",
       "the first report says why")
    # Usually no state was ever read (the bridge thread never got the GIL
    # before); on a loaded machine it may have got it once before the first
    # request, and that state is the last one, stale.
    check(api[0]["bridge"]["state"] in ("none", "stale"), "first report's state: " + api[0]["bridge"]["state"])
    # The second: either the first request is still unanswered (no wait at
    # all) or it was answered in between and this one waited its 2 s.
    check(api[1]["bridge"]["note"] in ("the Python bridge did not answer (GIL held): last state used",
                                       "the Python bridge did not answer within 2000 ms (GIL held?): last state used"),
          "second report's note: " + str(api[1]["bridge"]["note"]))
    eq(r.exit["bridge"]["state"], "final", "the exit report has the state read at exit")
    # Each wait is bounded: two reports, at most two 2 s waits, and the run
    # takes 3-4.5 s on a loaded 2-core machine.  A wait that never ended
    # would hang the program; only a run ten times as long as that says so.
    check(r.seconds < 45.0, f"run took {r.seconds:.1f}s")


def a_report_keeping_the_gil_waits_its_short_bound_for_a_read_begun_before():
    # A read announced before the program took the GIL cannot go on while
    # the report's own thread keeps it: that read must not stretch the
    # wait to the 30 s bound of a read at work.  No live state and no
    # interval: no request of the watcher's can end that read before.
    r = run([READ_BEGUN_THEN_GIL_HELD], env={"TENSORLEAK_LIVE": "0"}, timeout=120)
    eq((r.rc, r.out, r.err.count("Traceback")), (0, "done\n", 0), "exit status, output, no traceback")
    (api,) = r.by_reason("api")
    eq(api["bridge"]["note"], "the Python bridge did not answer within 2000 ms (GIL held?): last state used",
       "the report's note")
    # 2 s of waiting and about 1.5 s of start-up; 30 s of waiting would be
    # the read's bound.
    check(r.seconds < 25.0, f"run took {r.seconds:.1f}s")


def a_figures_read_waiting_at_exit_never_replaces_the_exit_reads_layout():
    # The bridge's exit read hands over the full state and closes the bridge
    # in one hold of its lock: a figures-only read waiting for that lock
    # finds the bridge closed.  Handed over between the two, it was the
    # last state, and the exit report lost the pool's layout (one 22 MiB
    # segment: the stand-in rounds the 21 MiB tensor up to 2 MiB).
    r = run([FIGURES_READ_AT_EXIT], env={"PYTHONPATH": FAKE + os.pathsep + os.path.join(SOURCE, "python")})
    eq((r.rc, r.out, r.err.count("Traceback")), (0, "done\n", 0), "exit status, output, no traceback")
    eq(r.exit["bridge"]["state"], "final", "the exit report's state")
    pool = torch_pool(r.exit)
    eq(([s["bytes"] for s in pool.get("layout", [])], pool.get("layout_truncated")), ([22 * MiB], False),
       "the exit report's pool layout (segment bytes, truncated)")


def report_inside_an_allocation_never_waits():
    # A budget crossing writes its report from inside cudaMalloc, where
    # PyTorch would hold its allocator lock: last state, no wait.
    r = run([KV, "leak", "6", "ctypes"], env={"TENSORLEAK_BUDGET": "100M"})
    eq(r.rc, 3, "exit status")
    budget = r.by_reason("budget")
    check(len(budget) >= 1, "a budget report")
    b = budget[0]["bridge"]
    eq(b["state"], "stale", "state inside an allocation")
    check("inside an allocation" in b["note"], "note: " + str(b["note"]))


def a_framework_that_fails_is_reported_once_and_changes_nothing():
    r = run([KV, "leak", "3", "ctypes"], env={"FAKE_TORCH_BROKEN": "1"})
    plain = run([KV, "leak", "3", "ctypes"], env={"FAKE_TORCH_BROKEN": "1"}, under=False)
    eq((r.rc, r.out), (plain.rc, plain.out), "the program's status and output")
    eq((r.rc, r.printed["stats"]), (3, {"error": "memory_stats is broken in this stand-in"}), "the program ran to its end")
    eq(r.err.count("the Python bridge could not read a framework"), 1, "one warning on stderr")
    rep = r.exit
    eq(rep["bridge"]["errors"], ["torch: RuntimeError: memory_stats is broken in this stand-in"], "bridge.errors")
    eq([p for p in rep["pools"] if p["kind"] == "pytorch"], [], "no pool row from a failed read")


def no_framework_is_ever_imported_by_the_bridge():
    r = run([os.path.join(HERE, "progs", "no_framework.py")])
    eq(r.rc, 0, "exit status")
    eq(json.loads(r.out), [], "frameworks in sys.modules")
    rep = r.exit
    eq([p for p in rep["pools"] if p.get("source") == "bridge"], [], "framework pools")
    eq(rep["bridge"]["state"], "final", "bridge ran")


def segments_from_a_different_stack_each_request_grow_per_owner_and_pool():
    # The case: no single call stack grows mark after mark, so the
    # call-site test is silent; the cache owner's reserve and the pool's
    # allocated bytes grow.  (libffi stands in for libc10_cuda: the owner
    # rule makes the stand-in's segments a cache's.)
    rules = os.path.join(tempfile.mkdtemp(prefix="tl-bridge-"), "owners.rules")
    with open(rules, "w") as f:
        f.write("owner:fake-torch:cache:device:libffi.so*\n")
    r = run([KV, "rotate", "9", "ctypes"], env={"TENSORLEAK_OWNERS": rules})
    rep = r.exit
    eq(growth(rep, "call_site"), [], "call-site growth")
    owners = growth(rep, "owner")
    eq([(g["owner"], g["owner_class"], g["kind"], g["bytes_per_mark"], g["marks"]) for g in owners],
       [("fake-torch", "cache", "device", 22 * MiB, 8)], "owner growth (one 22 MiB segment per request)")
    eq([(g["pool"], g["bytes_per_mark"]) for g in growth(rep, "pool")], [("torch cuda:0", 21 * MiB)], "pool growth")
    check("in the reserve of owner fake-torch (cache)" in r.err, "text names the owner")
    # Without the bridge the owner's growth is still found.
    r = run([KV, "rotate", "9", "ctypes"], env={"TENSORLEAK_OWNERS": rules, "TENSORLEAK_PYTHON": "0"})
    eq([g["scope"] for g in r.exit["growth"]], ["owner"], "growth rows without the bridge")


def import_tensorleak_starts_the_bridge_under_a_bare_preload():
    tmp = tempfile.mkdtemp(prefix="tl-bridge-")
    e = clean_env({"LD_PRELOAD": os.environ["TL_LIB"], "LD_LIBRARY_PATH": SIM, "TENSORLEAK_QUIET": "1",
                   "TENSORLEAK_OUTPUT": os.path.join(tmp, "tl.json"),
                   "PYTHONPATH": FAKE + os.pathsep + os.path.join(SOURCE, "python")})
    p = subprocess.run([sys.executable, KV, "leak", "6", "tensorleak"], env=e, capture_output=True, text=True,
                       timeout=50)
    eq(p.returncode, 3, "exit status")
    with open(os.path.join(tmp, "tl.json")) as f:
        rep = json.load(f)
    eq(rep["bridge"]["state"], "final", "bridge started by import tensorleak")
    eq(torch_pool(rep)["allocated_bytes"], 6 * 21 * MiB, "pool allocated")
    eq([g["bytes_per_mark"] for g in growth(rep, "pool")], [21 * MiB], "pool growth")


def the_library_reports_the_h200_state_exactly():
    fixture = os.path.join(SOURCE, "tests", "fixtures", "h200-2026-11-30", "torch_native_leak_snapshot.json")
    r = run([os.path.join(HERE, "progs", "submit_fixture.py"), fixture],
            env={"TENSORLEAK_PYTHON": "0", "TL_SOURCE": SOURCE})
    eq(r.out.split(), ["0", "0"], "submit and snapshot answers")
    api = r.by_reason("api")
    eq(len(api), 1, "api reports")
    rep = api[0]
    eq(rep["bridge"]["state"], "fresh", "state submitted by the caller's thread")
    pool = torch_pool(rep)
    eq((pool["reserved_bytes"], pool["allocated_bytes"], pool["free_bytes"], pool["largest_free_block"],
        pool["segments"]), (312475648, 160598016, 312475648 - 160598016, 20 * MiB, 16), "the H200 figures")
    eq(round(pool["fragmentation"], 6), round(1 - 20 * MiB / (312475648 - 160598016), 6), "fragmentation 0.86")
    eq(pool["framework"], {"name": "torch", "version": "2.11.0+cu130", "mode": "native"}, "framework")
    eq(len(pool["layout"]), 16, "layout segments")
    eq(sum(b["bytes"] for s in pool["layout"] for b in s["blocks"]), 160598016, "blocks placed")
    check(all(s["base"].startswith("0x") for s in pool["layout"]), "segment bases in hex, as annotated pools'")
    # The recorded pool holds more than this process took from the driver:
    # its figures stay as read, the device summary keeps what was tracked.
    eq((rep["devices"][0]["reserved_bytes"], rep.get("repairs", [])), (MiB, []), "device summary, no repairs")
    eq([(s["stack"][0]["function"], s["stack"][0]["file"].rsplit("site-packages/", 1)[1], s["stack"][0]["line"],
         s["stack"][0]["python"], s["bytes"], s["count"]) for s in pool["sites"]],
       [("update", "transformers/cache_utils.py", 146, True, 63723520, 36),
        ("update", "transformers/cache_utils.py", 147, True, 62271488, 36)], "live Python sites")


def fields_a_report_cannot_hold_are_left_out_and_the_rest_kept():
    r = run([os.path.join(HERE, "progs", "submit_odd.py")], env={"TENSORLEAK_PYTHON": "0"})
    eq(r.out.split(), ["0", "0"], "submit and snapshot answers")
    rep = r.by_reason("api")[0]
    pool = next(p for p in rep["pools"] if p["name"] == "cupy pinned")
    eq((pool["kind"], pool["device"], pool["reserved_bytes"], pool["host"], pool["state"]),
       ("cupy_pinned", -1, None, True, "fresh"), "the pool, its unknown counts still null")
    check(not {"free_blocks", "framework", "layout", "sites"} & set(pool), f"the refused fields are left out: {pool}")
    eq(pool["layout_truncated"], False, "the layout's other field kept")
    eq(rep["bridge"]["errors"], ["cupy: one line"], "the bridge's error lines, without the one that is not")
    warned = [l for l in r.err.splitlines() if "fields left out" in l]
    eq(len(warned), 1, "one warning: " + r.err)
    check(warned[0].startswith("tensorleak: report: gathered pool fields left out (pool"), warned[0])
    for f in r.files:
        p = subprocess.run([CLI, "report", f], capture_output=True, text=True, timeout=30)
        eq(p.returncode, 0, f"tensorleak report reads {os.path.basename(f)}: " + p.stderr)


OOM = os.path.join(HERE, "progs", "oom_frag.py")


def other_frameworks_pools_get_the_verdict_their_figures_allow():
    # A PyTorch failure beside JAX and CuPy pools: the observer's read has
    # all three at the failure.  940 MiB - 800 (torch) - 64 (jax) - 38
    # (cupy) = 38 MiB free on the device.
    env = {"SIMCUDA_MEMORY": "940M", "FAKE_TORCH_C10": os.environ["TL_FAKE_C10"],
           "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    r = run([OOM, "50", "mixed"], env=env)
    eq(r.rc, 0, "exit status")
    ooms = r.by_reason("oom")
    eq(len(ooms), 1, "out-of-memory reports")
    o = ooms[0]["oom"]
    eq((o["device_free"], o["verdict"], o["remedy"]), (38 * MiB, "fragmentation", "expandable_segments"), "verdict")
    eq([(p["name"], p["state"], p["free_bytes"], p["largest_free_block"], p["verdict"], p["note"]) for p in o["pools"]],
       [("torch cuda:0", "fresh", 600 * MiB, 15 * MiB, "fragmentation",
         "TENSORLEAK_TORCH_HISTORY=1 names the live blocks that pin its segments"),
        ("jax cuda:0", "fresh", 48 * MiB, 48 * MiB, "fragmentation", None),
        ("cupy device 0", "fresh", 30 * MiB, None, "unknown", "the pool does not publish its largest free block")],
       "each pool's verdict, where its figures allow")
    check("fragmentation: 716.0 MiB free (38.0 MiB on the device, 678.0 MiB in caches), no free block of 50.0 MiB "
          "(largest 48.0 MiB)" in r.err, "stderr line: " + r.err)


def a_failure_pytorch_recovers_from_is_reported_after_it_without_a_verdict():
    # Every segment empty: cudaMalloc(50 MiB) fails, PyTorch frees its cache
    # and its retry succeeds, so no observer runs; the failure is reported
    # at the thread's next allocation, saying its figures are of then.
    env = {"SIMCUDA_MEMORY": "820M", "FAKE_TORCH_C10": os.environ["TL_FAKE_C10"]}
    r = run([OOM, "50", "recover"], env=env)
    eq((r.rc, r.printed["caught"], r.printed["reserved"], r.printed["allocated"]), (0, None, 50 * MiB, 50 * MiB),
       "the request was served")
    ooms = r.by_reason("oom")
    eq(len(ooms), 1, "out-of-memory reports")
    o = ooms[0]["oom"]
    eq((o["bytes"], o["verdict"], o["remedy"]), (50 * MiB, "unknown", None), "no verdict")
    check(o["note"].startswith("written after the framework recovered from the failure"), o["note"])
    eq(ooms[0]["summary"]["oom_failures"], 1, "the failure is counted")


JC = os.path.join(HERE, "progs", "jax_cupy_loop.py")


def framework_pool(report, kind):
    rows = [p for p in report["pools"] if p["kind"] == kind]
    eq(len(rows), 1, f"{kind} pool rows")
    return rows[0]


def jax_preallocated_pool_is_reserved_not_allocated():
    r = run([JC, "jax", "leak", "6"])
    eq(r.rc, 0, "exit status")
    stats = json.loads(r.out)
    rep = r.exit
    pool = framework_pool(rep, "jax")
    eq((pool["name"], pool["reserved_bytes"], pool["allocated_bytes"], pool["largest_free_block"]),
       ("jax cuda:0", stats["pool_bytes"], stats["bytes_in_use"], stats["largest_free_block_bytes"]), "jax pool")
    eq(pool["reserved_bytes"], 12 << 30, "75 % of the simulated 16 GiB")
    eq((pool["free_bytes"], pool["segments"]), (stats["pool_bytes"] - stats["bytes_in_use"], None),
       "jax free bytes; segments not published")
    peaks_and_utilization(pool, stats["peak_bytes_in_use"], stats["peak_pool_bytes"])
    eq(pool["framework"]["mode"], "preallocated", "jax mode")
    pool_growth(rep, "jax cuda:0", 16 * MiB, 6)
    # While JAX holds its pool: the device's gap is the cache's.
    end = r.by_reason("api")[0]
    dev = end["devices"][0]
    eq((dev["reserved_bytes"], dev["allocated_bytes"], dev["gap_bytes"]),
       (12 << 30, 6 * 16 * MiB, (12 << 30) - 6 * 16 * MiB), "device: the cache's gap")
    eq(end["bridge"]["state"], "fresh", "state at the snapshot")
    # At exit XLA has given its pool back (its atexit clean-up runs after the
    # bridge read the final state): nothing leaked, the pool row as read,
    # the device summary without it, said so, and no figure to repair.
    eq((rep["summary"]["leaked_bytes"], rep["devices"][0]["reserved_bytes"]), (0, 0), "exit: memory given back")
    eq(rep["bridge"]["errors"], ["device 0: the frameworks' pools as read hold more than the driver now does; "
                                 "left out of its summary"], "exit: the note")
    eq(rep.get("repairs", []), [], "exit: no repaired figure")


def jax_without_preallocation_grows_per_pool():
    r = run([JC, "jax", "leak", "6"], env={"XLA_PYTHON_CLIENT_PREALLOCATE": "false"})
    stats = json.loads(r.out)
    pool = framework_pool(r.exit, "jax")
    eq((pool["reserved_bytes"], pool["allocated_bytes"], pool["free_bytes"], pool["largest_free_block"]),
       (stats["pool_bytes"], stats["bytes_in_use"], stats["pool_bytes"] - stats["bytes_in_use"],
        stats["largest_free_block_bytes"]), "jax pool")
    peaks_and_utilization(pool, stats["peak_bytes_in_use"], stats["peak_pool_bytes"])
    eq(pool["framework"]["mode"], "growing", "jax mode")
    pool_growth(r.exit, "jax cuda:0", 16 * MiB, 6)
    clean = run([JC, "jax", "clean", "50"], env={"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}, timeout=120)
    eq(clean.exit["growth"], [], "clean jax loop")


def jax_live_arrays_are_named_by_their_python_line():
    # The stand-in's device_memory_profile() is pprof as XLA writes it, from
    # the live arrays' stacks: each full report names the loop's result line.
    r = run([JC, "jax", "leak", "6"], env={"XLA_PYTHON_CLIENT_PREALLOCATE": "false"})
    eq(r.rc, 0, "exit status")
    line = line_of(JC, "RESULT_ALLOC")
    fake = os.path.join(FAKE, "jax", "__init__.py")
    for rep, what in ((r.by_reason("api")[0], "snapshot"), (r.exit, "exit")):
        pool = framework_pool(rep, "jax")
        eq([([(f["function"], f["file"], f["python"]) for f in s["stack"][:2]], s["stack"][1]["line"],
             s["bytes"], s["count"]) for s in pool["sites"]],
           [([("zeros_bytes", fake, True), ("<module>", JC, True)], line, 6 * 16 * MiB, 6)], what + ": jax sites")
        eq(len(pool["sites"][0]["stack"]), 2, what + ": the whole stack")
        eq([e for e in rep["bridge"]["errors"] if e.startswith("jax")], [], what + ": no jax error")
    # The same program, clean: nothing alive at the end, no site.
    clean = run([JC, "jax", "clean", "3"], env={"XLA_PYTHON_CLIENT_PREALLOCATE": "false"})
    eq(framework_pool(clean.exit, "jax")["sites"], [], "clean: no live array")


def cupy_pools_with_unknown_largest_block():
    r = run([JC, "cupy", "leak", "6"])
    stats = json.loads(r.out)
    rep = r.exit
    pool = framework_pool(rep, "cupy")
    eq((pool["reserved_bytes"], pool["allocated_bytes"], pool["free_bytes"], pool["free_blocks"]),
       (stats["total"], stats["used"], stats["total"] - stats["used"], stats["free_blocks"]), "cupy pool")
    eq((pool["largest_free_block"], pool["fragmentation"]), (None, None), "unknown, not zero")
    # CuPy publishes no peaks and no segments: unknown, never 0.
    eq((pool["peak_allocated_bytes"], pool["peak_reserved_bytes"], pool["utilization"], pool["segments"]),
       (None, None, None, None), "cupy peaks, utilization and segments unknown")
    pinned = framework_pool(rep, "cupy_pinned")
    eq((pinned["device"], pinned["reserved_bytes"], pinned["allocated_bytes"], pinned["host"]), (-1, None, None, True),
       "pinned pool: no byte counts published")
    eq(r.by_reason("api")[0]["devices"][0]["largest_free_block"], None, "device largest free block unknown")
    pool_growth(rep, "cupy device 0", 8 * MiB, 6)
    check("pool 'cupy pinned' (cupy_pinned, host): 0 free block(s); no byte counts published" in r.err, "pinned text")


def rmm_pool_figures_are_the_resources_own():
    # The stand-in rmm (fake/rmm): a statistics adaptor over a pool resource.
    r = run([JC, "rmm", "leak", "6"])
    eq(r.rc, 0, "exit status")
    own = json.loads(r.out)
    pool = framework_pool(r.exit, "rmm")
    eq((pool["name"], pool["reserved_bytes"], pool["allocated_bytes"], pool["free_bytes"]),
       ("rmm device 0", own["pool_size"], own["current_bytes"], own["pool_size"] - own["current_bytes"]),
       "rmm pool: the pool's size, the adaptor's current bytes")
    eq(pool["allocated_bytes"], 6 * 8 * MiB, "six kept results")
    eq(pool["framework"], {"name": "rmm", "version": "0.0.0+tensorleak.fake", "mode": "StatisticsResourceAdaptor"},
       "framework")
    # The adaptor's peak is published, the pool's is not: utilization unknown.
    eq((pool["peak_allocated_bytes"], pool["peak_reserved_bytes"], pool["utilization"]),
       (own["peak_bytes"], None, None), "rmm peaks")
    eq((pool["largest_free_block"], pool["fragmentation"], pool["segments"]), (None, None, None),
       "layout and segments unknown")
    pool_growth(r.exit, "rmm device 0", 8 * MiB, 6)


def bare_preload_leaves_the_bridge_off():
    tmp = tempfile.mkdtemp(prefix="tl-bridge-")
    e = clean_env({"LD_PRELOAD": os.environ["TL_LIB"], "LD_LIBRARY_PATH": SIM,
                   "TENSORLEAK_OUTPUT": os.path.join(tmp, "tl.json"), "TENSORLEAK_QUIET": "1"})
    p = subprocess.run([sys.executable, KV, "leak", "2", "ctypes"], env=e, capture_output=True, text=True, timeout=50)
    eq(p.returncode, 3, "exit status")
    with open(os.path.join(tmp, "tl.json")) as f:
        rep = json.load(f)
    eq(rep["bridge"], None, "bridge object without TENSORLEAK_PYTHON")
    eq([x for x in rep["pools"] if x["kind"] == "pytorch"], [], "no framework pool")


if __name__ == "__main__":
    globals()[sys.argv[1]]()
    print("ok")
