#!/usr/bin/env python3
"""The library side of `tensorleak attach`, without the injector.

attach_self (attach_self.c) starts without tensorleak, allocates on the
simulated driver, loads libtensorleak.so itself and plays the injector's part
(prepare, write the plan's bytes into its own code, commit; detach the same
way).  Each case checks the reports it leaves.

    library_test.py --library LIB --sim-dir DIR --program attach_self CASE
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

SCHEMA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "report.schema.json")

# Every driver row of src/preload/hooks.h the simulated driver exports, but the
# context rows, which attach leaves unpatched (TL_HOOK_IS_CONTEXT_ROW).
SIM_DRIVER_ROWS = 51


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


class Case:
    def __init__(self, args, tmp):
        self.args = args
        self.tmp = tmp
        self.report = os.path.join(tmp, "r.json")

    def run(self, mode, settings=None, expect_rc=0, **extra):
        env = {k: v for k, v in os.environ.items() if not k.startswith("TENSORLEAK_") and k != "LD_PRELOAD"}
        env["LD_LIBRARY_PATH"] = self.args.sim_dir
        env.update(extra)
        if settings is None:
            settings = "TENSORLEAK_OUTPUT=" + self.report
        p = subprocess.run([self.args.program, self.args.library, settings, mode], env=env,
                           capture_output=True, text=True, timeout=120)
        check(p.returncode == expect_rc,
              f"{mode}: exit {p.returncode}, expected {expect_rc}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}")
        return p

    def reports(self):
        return sorted(glob.glob(os.path.join(self.tmp, "r*.json")))

    def load(self, path):
        """A report, held to docs/report.schema.json."""
        import jsonschema
        with open(path) as f:
            r = json.load(f)
        with open(SCHEMA) as f:
            errors = [e.message for e in jsonschema.Draft202012Validator(json.load(f)).iter_errors(r)]
        check(not errors, f"{path}: schema violations: {errors[:5]}")
        return r


def leaks_are_counted_from_the_attach_on(c):
    p = c.run("basic")
    check(p.stdout == f"plan {SIM_DRIVER_ROWS}\nok\n", f"stdout: {p.stdout!r}")
    check("attach:" not in p.stderr, f"a refusal on the simulated driver: {p.stderr}")
    files = c.reports()
    # Only the detach's final report: after the detach nothing is tracked, so
    # the exit writes none.
    check(files == [c.report], f"reports: {files}")
    r = c.load(c.report)
    s = r["summary"]
    check(r["reason"] == "detach", f"reason {r['reason']}")
    check(s["live_allocations"] == 3 and s["live_bytes"] == 3000, f"live {s['live_allocations']} {s['live_bytes']}")
    check(s["total_allocations"] == 4, f"total_allocations {s['total_allocations']}")
    # The 4096-byte block from before the attach, freed after it.
    check(s["invalid_frees"] == 0 and r["invalid_frees"] == [], f"invalid frees {r['invalid_frees']}")
    a = r["attach"]
    check(a["interval"] is None, f"interval {a['interval']}")
    check(a["before"] == [{"device": 0, "process_bytes": 4608, "freed_bytes": 4096, "freed_allocations": 1,
                           "framework_reserved_bytes": None}],
          f"before {a['before']}")


def an_unmovable_prologue_is_refused_by_name_and_the_rest_go_on(c):
    p = c.run("refuse")
    check(p.stdout == f"plan {SIM_DRIVER_ROWS - 1}\nok\n", f"stdout: {p.stdout!r}")
    refusals = [line for line in p.stderr.splitlines() if line.startswith("tensorleak: attach:")]
    check(len(refusals) == 1 and "cuMemAllocManaged" in refusals[0] and "a branch at +0" in refusals[0],
          f"refusals: {refusals}")
    # The exit report: the 1000-byte cuMemAlloc_v2 leak; the managed one went
    # through the unpatched entry.
    r = c.load(c.report)
    s = r["summary"]
    check(r["reason"] == "exit", f"reason {r['reason']}")
    check(s["leaked_allocations"] == 1 and s["leaked_bytes"] == 1000, f"leaked {s['leaked_allocations']} {s['leaked_bytes']}")
    check(r["attach"]["before"][0]["process_bytes"] == 4608, f"before {r['attach']['before']}")
    # The exit report's text on stderr says what was there before.
    check("device 0 before attach: 4.5 KiB held, 0 B of it freed since in 0 allocation(s)" in p.stderr,
          f"stderr: {p.stderr}")


def attaching_again_after_a_detach_tracks_again(c):
    p = c.run("twice")
    check(p.stdout == f"plan {SIM_DRIVER_ROWS}\nplan {SIM_DRIVER_ROWS}\nok\n", f"stdout: {p.stdout!r}")
    files = c.reports()
    check(len(files) == 2, f"reports: {files}")
    first, last = (c.load(f) for f in files)
    if first["reason"] != "detach":
        first, last = last, first
    check(first["reason"] == "detach" and first["summary"]["live_bytes"] == 1000, f"first {first['summary']}")
    s = last["summary"]
    check(last["reason"] == "exit", f"reason {last['reason']}")
    # Only the second attach's two leaks: the first attach's row ended with
    # its detach and is part of the second's before-attach figure, as the
    # driver counts it (1000 B take 1024: the simulated driver's granularity).
    check(s["leaked_allocations"] == 2 and s["leaked_bytes"] == 4000, f"leaked {s['leaked_allocations']} {s['leaked_bytes']}")
    check(last["attach"]["before"][0]["process_bytes"] == 4608 + 1024, f"before {last['attach']['before']}")


def a_second_attach_takes_its_own_settings_and_counts_from_itself(c):
    supp = os.path.join(c.tmp, "s.supp")
    owners = os.path.join(c.tmp, "owners.txt")
    live = os.path.join(c.tmp, "live")
    with open(supp, "w") as f:
        f.write("leak:suppressed_for_good\n")
    with open(owners, "w") as f:
        f.write("owner:kept cache:cache:*:held_for_good\n")
    second = ";".join([f"TENSORLEAK_OUTPUT={c.tmp}/r2.json", f"TENSORLEAK_SUPPRESSIONS={supp}",
                       f"TENSORLEAK_OWNERS={owners}", "TENSORLEAK_BUDGET=5000", "TENSORLEAK_SIGNAL=SIGUSR2",
                       "TENSORLEAK_LIVE=1", "TENSORLEAK_LIVE_INTERVAL=0.05", f"TENSORLEAK_LIVE_DIR={live}"])
    p = c.run("again", settings=f"TENSORLEAK_OUTPUT={c.tmp}/r1.json|{second}")
    check(p.stdout == f"plan {SIM_DRIVER_ROWS}\nplan {SIM_DRIVER_ROWS}\nlive yes\nok\n", f"stdout: {p.stdout!r}\n{p.stderr}")
    reports = [c.load(f) for f in c.reports()]
    (first,) = [r for r in reports if r["reason"] == "detach"]
    check(first["summary"]["total_allocations"] == 2 and first["summary"]["peak_live_bytes"] == 9000,
          f"first {first['summary']}")
    (last,) = [r for r in reports if r["reason"] == "exit"]
    s = last["summary"]
    # The second attach's three allocations of 2000 B: one held by its owner
    # rule, one suppressed, one leaked; its budget of 5000 B crossed at the
    # third.  Its total and peak start at its commit.
    check(s["total_allocations"] == 3 and s["peak_live_bytes"] == 6000, f"total/peak {s}")
    check(s["leaked_allocations"] == 1 and s["leaked_bytes"] == 2000, f"leaked {s}")
    check(s["suppressed_allocations"] == 1 and s["held_bytes"] == 2000, f"suppressed/held {s}")
    check(s["budget_crossings"] == 1, f"budget {s}")


def a_second_attach_at_another_depth_walks_the_stacks_again(c):
    # The first attach at depth 0 makes the empty stack every device row's
    # call site (the tracker's depth-0 shortcut, tl_hot_device_site); the
    # second, at depth 8, must walk each allocation's stack again ("again"
    # mode wants the second attach's snapshot signal).
    c.run("again", settings=f"TENSORLEAK_OUTPUT={c.tmp}/r1.json;TENSORLEAK_DEPTH=0|"
                            f"TENSORLEAK_OUTPUT={c.tmp}/r2.json;TENSORLEAK_DEPTH=8;TENSORLEAK_SIGNAL=SIGUSR2")
    reports = [c.load(f) for f in c.reports()]
    (first,) = [r for r in reports if r["reason"] == "detach"]
    check(first["depth"] == 0 and [len(l["stack"]) for l in first["leaks"]] == [0],
          f"first: depth {first['depth']}, stacks {[l['stack'] for l in first['leaks']]}")
    (last,) = [r for r in reports if r["reason"] == "exit"]
    check(last["depth"] == 8, f"depth {last['depth']}")
    functions = sorted({f.get("function") for l in last["leaks"] for f in l["stack"]} & {"held_for_good", "suppressed_for_good", "alloc"})
    check(len(last["leaks"]) == 3 and functions == ["alloc", "held_for_good", "suppressed_for_good"],
          f"second: {len(last['leaks'])} leaks, functions {functions}: {[l['stack'] for l in last['leaks']]}")


def options_come_from_the_settings_not_the_environment(c):
    elsewhere = os.path.join(c.tmp, "env.json")
    p = c.run("basic", settings=f"TENSORLEAK_OUTPUT={c.report}\nTENSORLEAK_DEPTH=3",
              TENSORLEAK_OUTPUT=elsewhere, TENSORLEAK_DEPTH="many", TENSORLEAK_BOGUS="1")
    check(not os.path.exists(elsewhere), "the environment's TENSORLEAK_OUTPUT was used")
    # The target's variables are not even read: no warning about them.
    check("TENSORLEAK_BOGUS" not in p.stderr and "TENSORLEAK_DEPTH" not in p.stderr, f"stderr: {p.stderr}")
    r = c.load(c.report)
    check(r["depth"] == 3, f"depth {r['depth']}")


def the_watcher_writes_nothing_after_a_detach(c):
    c.run("basic", settings=f"TENSORLEAK_OUTPUT={c.report}\nTENSORLEAK_INTERVAL=0.02")
    reports = [c.load(f) for f in c.reports()]
    detach = [r for r in reports if r["reason"] == "detach"]
    check(len(detach) == 1, f"reasons {[r['reason'] for r in reports]}")
    check(detach[0]["attach"]["interval"] == 0.02, f"interval {detach[0]['attach']['interval']}")
    # 300 ms of life after the detach: 15 intervals, none reported.
    later = [r["seq"] for r in reports if r["seq"] > detach[0]["seq"]]
    check(later == [], f"reports after the detach: seq {later}")


def a_python_program_gets_its_python_frames(c):
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "attach_self.py")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TENSORLEAK_") and k != "LD_PRELOAD"}
    env["LD_LIBRARY_PATH"] = c.args.sim_dir
    p = subprocess.run([sys.executable, script, c.args.library, "TENSORLEAK_OUTPUT=" + c.report], env=env,
                       capture_output=True, text=True, timeout=120)
    check(p.returncode == 0 and p.stdout == "ok\n", f"exit {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}")
    r = c.load(c.report)
    s = r["summary"]
    check(s["leaked_allocations"] == 3 and s["leaked_bytes"] == 3000, f"leaked {s['leaked_allocations']} {s['leaked_bytes']}")
    python = [(f.get("function"), f.get("line")) for f in r["leaks"][0]["stack"] if (f.get("file") or "").endswith("attach_self.py")]
    check(("leak_here", 68) in python, f"python frames {python}")
    check(r["attach"]["before"][0]["process_bytes"] == 2048, f"before {r['attach']['before']}")


def a_bad_setting_is_refused_and_nothing_is_tracked(c):
    p = c.run("basic", settings=f"TENSORLEAK_OUTPUT={c.report}\nTENSORLEAK_DEPTH=many", expect_rc=1)
    check("prepare: settings rejected" in p.stderr and "TENSORLEAK_DEPTH" in p.stderr, f"stderr: {p.stderr}")
    check(c.reports() == [], f"reports: {c.reports()}")


def a_preloaded_process_is_refused(c):
    p = c.run("basic", expect_rc=1, LD_PRELOAD=c.args.library,
              TENSORLEAK_OUTPUT=os.path.join(c.tmp, "preload.json"), TENSORLEAK_QUIET="1")
    check("prepare: the process is already tracked: tensorleak is preloaded" in p.stderr, f"stderr: {p.stderr}")


CASES = {f.__name__: f for f in (
    leaks_are_counted_from_the_attach_on,
    an_unmovable_prologue_is_refused_by_name_and_the_rest_go_on,
    attaching_again_after_a_detach_tracks_again,
    a_second_attach_takes_its_own_settings_and_counts_from_itself,
    a_second_attach_at_another_depth_walks_the_stacks_again,
    options_come_from_the_settings_not_the_environment,
    the_watcher_writes_nothing_after_a_detach,
    a_python_program_gets_its_python_frames,
    a_bad_setting_is_refused_and_nothing_is_tracked,
    a_preloaded_process_is_refused,
)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--library", required=True)
    ap.add_argument("--sim-dir", required=True)
    ap.add_argument("--program", required=True)
    ap.add_argument("case", choices=sorted(CASES))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="tl-attach-") as tmp:
        CASES[args.case](Case(args, tmp))
    print("ok")


if __name__ == "__main__":
    main()
