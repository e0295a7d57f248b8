#!/usr/bin/env python3
"""Stress cases for libtensorleak.so under the simulated CUDA stack.

    stress_test.py --library LIB --sim-dir DIR --program EXE CASE

Each case runs stress_mixed (8 threads x 200k alloc/free pairs of four kinds,
half of the frees on another thread) under the preload and checks the exit
report against the survivors the program says it left, exactly.
Exit 0 pass, 1 fail, 77 skip.
"""
import argparse
import glob
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

THREADS, OPS = 8, 200000
MiB = 1 << 20
# (kind in the report, bytes per survivor) per kind, as stress_mixed.c leaves them:
# cudaMalloc 3 MiB, cudaMallocHost 1 MiB, cudaMallocManaged 5 MiB, cudaMallocAsync 7 MiB.
SURVIVORS = [("device", 3 * MiB), ("host_pinned", 1 * MiB), ("managed", 5 * MiB), ("device", 7 * MiB)]
PER_KIND = 3


class Failure(Exception):
    pass


def check_eq(got, want, what):
    if got != want:
        raise Failure(f"{what}: got {got!r}, want {want!r}")


def env_for(args, out, **extra):
    env = dict(os.environ)
    for k in list(env):
        if k.startswith("TENSORLEAK_"):
            del env[k]
    env["LD_LIBRARY_PATH"] = args.sim_dir + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    env["LD_PRELOAD"] = args.library
    env["TENSORLEAK_OUTPUT"] = out
    env["TENSORLEAK_QUIET"] = "1"
    env.update(extra)
    return env


def expected_leaks():
    n = THREADS * PER_KIND
    return sorted((kind, n * size, n) for kind, size in SURVIVORS)


def check_exit_report(path, stdout):
    n = THREADS * PER_KIND
    want_line = "survivors " + " ".join(f"{n}:{size}" for _, size in SURVIVORS)
    want_line += f" total {n * len(SURVIVORS)} {sum(n * s for _, s in SURVIVORS)}\n"
    check_eq(stdout, want_line, "program output")
    with open(path) as f:
        r = json.load(f)
    s = r["summary"]
    check_eq(r["reason"], "exit", "reason")
    check_eq(s["leaked_allocations"], n * len(SURVIVORS), "leaked_allocations")
    check_eq(s["leaked_bytes"], sum(n * size for _, size in SURVIVORS), "leaked_bytes")
    check_eq(s["live_allocations"], n * len(SURVIVORS), "live_allocations")
    check_eq(s["live_bytes"], s["leaked_bytes"], "live_bytes")
    check_eq(s["invalid_frees"], 0, "invalid_frees")
    check_eq(s.get("dropped_events", 0), 0, "dropped_events")
    if "total_allocations" in s:
        check_eq(s["total_allocations"], THREADS * OPS + n * len(SURVIVORS), "total_allocations")
    got = sorted((l["kind"], l["bytes"], l["count"]) for l in r["leaks"])
    check_eq(got, expected_leaks(), "leaks by kind, bytes, count")


def mixed_kinds_from_eight_threads_leave_exactly_the_known_survivors(args, tmp):
    out = os.path.join(tmp, "stress.%p.json")
    p = subprocess.run([args.program, str(THREADS), str(OPS)], env=env_for(args, out),
                       capture_output=True, text=True, timeout=120)
    check_eq((p.returncode, p.stderr), (0, ""), "exit status and stderr")
    files = glob.glob(os.path.join(tmp, "stress.*.json"))
    check_eq([os.path.basename(f) for f in files], [f"stress.{pidof(files)}.json"], "one report")
    check_exit_report(files[0], p.stdout)
    check_eq(os.listdir(tmp), [os.path.basename(files[0])], "no temp files left")


def pidof(files):
    return os.path.basename(files[0]).split(".")[1] if files else "?"


def snapshots_taken_while_threads_race_are_whole_and_the_exit_report_is_exact(args, tmp):
    """SIGUSR1 snapshots during the run: every one is complete JSON, never
    counts more than the program ever had, and the exit report stays exact."""
    out = os.path.join(tmp, "snap.%p.%n.json")
    p = subprocess.Popen([args.program, str(THREADS), str(OPS)], env=env_for(args, out),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sent = 0
    time.sleep(0.3)
    while p.poll() is None and sent < 20:
        try:
            os.kill(p.pid, signal.SIGUSR1)
            sent += 1
        except ProcessLookupError:
            break
        time.sleep(0.05)
    stdout, stderr = p.communicate(timeout=120)
    check_eq((p.returncode, stderr), (0, ""), "exit status and stderr")
    if sent == 0:
        raise Failure("the program finished before any snapshot signal was sent")
    reports = {}
    for f in sorted(glob.glob(os.path.join(tmp, "snap.*.json"))):
        with open(f) as fh:
            reports[f] = json.load(fh)  # a half-written file fails here
    leftovers = [f for f in os.listdir(tmp) if ".tmp." in f]
    check_eq(leftovers, [], "temp files left")
    exits = [f for f, r in reports.items() if r["reason"] == "exit"]
    if len(exits) != 1:
        raise Failure(f"expected one exit report, got {exits}")
    snaps = [r for r in reports.values() if r["reason"] == "signal"]
    if not snaps:
        raise Failure(f"no signal snapshot written ({sent} signals sent)")
    # At most 64 hand-off slots + 8 in flight + all survivors can be live.
    bound = 64 + THREADS + THREADS * PER_KIND * len(SURVIVORS)
    for r in snaps:
        if not 0 <= r["summary"]["live_allocations"] <= bound:
            raise Failure(f"snapshot live_allocations {r['summary']['live_allocations']} outside 0..{bound}")
        if r["summary"].get("invalid_frees", 0) != 0:
            raise Failure("snapshot shows invalid frees")
    check_exit_report(exits[0], stdout)


CASES = {f.__name__: f for f in (
    mixed_kinds_from_eight_threads_leave_exactly_the_known_survivors,
    snapshots_taken_while_threads_race_are_whole_and_the_exit_report_is_exact,
)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--library", required=True)
    ap.add_argument("--sim-dir", required=True)
    ap.add_argument("--program", required=True)
    ap.add_argument("case", choices=sorted(CASES))
    args = ap.parse_args()
    if not os.path.exists(args.library):
        print(f"skip: {args.library} not built")
        return 77
    with tempfile.TemporaryDirectory(prefix="tl-stress-") as tmp:
        try:
            CASES[args.case](args, tmp)
        except (Failure, subprocess.TimeoutExpired, json.JSONDecodeError, KeyError) as e:
            print(f"FAIL {args.case}: {e}")
            return 1
    print(f"ok {args.case}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
