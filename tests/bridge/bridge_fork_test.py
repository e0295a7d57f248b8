#!/usr/bin/env python3
"""The bridge in forked children (os.fork in the program): each process of a
chain of forks runs exactly one bridge thread of its own, and a child forked
while the bridge's lock was held does not hang.  Run one test per process:
`bridge_fork_test.py NAME` (meson, suite bridge)."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bridge_test import HERE, SOURCE, eq, run  # noqa: E402

FORK_CHAIN = os.path.join(HERE, "progs", "fork_chain.py")
FORK_DURING_REPORTS = os.path.join(HERE, "progs", "fork_during_reports.py")
GENERATIONS = 4
# The source tree's package (the program imports tensorleak before its first
# CUDA call, when the library has not put it on sys.path yet).
PACKAGE = {"PYTHONPATH": os.path.join(SOURCE, "python")}


def lines(r):
    return sorted((json.loads(x) for x in r.out.splitlines()), key=lambda x: x["generation"])


def each_forked_generation_runs_one_bridge_thread():
    # Before the fix each generation re-registered its fork handler, so the
    # threads doubled: 1, 2, 4, 8, 16.
    r = run([FORK_CHAIN, str(GENERATIONS)], env=PACKAGE)
    eq((r.rc, r.err.count("Traceback")), (0, 0), "exit status of the chain and no traceback")
    eq([(x["generation"], x["bridge_threads"], x["active"]) for x in lines(r)],
       [(g, 1, True) for g in range(GENERATIONS + 1)], "bridge threads per generation")
    eq(len(r.by_reason("api")), GENERATIONS + 1, "one snapshot per process")
    eq(sorted(rep["bridge"]["state"] for rep in r.by_reason("api")), ["fresh"] * (GENERATIONS + 1),
       "each snapshot served by its own process's bridge")


def a_child_forked_while_the_bridge_lock_is_held_does_not_hang():
    r = run([FORK_CHAIN, "2", "locked"], env=PACKAGE, timeout=30)
    eq((r.rc, r.err.count("Traceback")), (0, 0), "exit status of the chain and no traceback")
    eq([(x["generation"], x["bridge_threads"]) for x in lines(r)], [(0, 1), (1, 1), (2, 1)],
       "bridge threads per generation")


def forks_during_reports_never_wait_for_the_bridge_and_every_child_exits():
    # A fork waits for the watcher's report or live update in progress (so
    # the child inherits no lock of it), and os.fork() holds the GIL the
    # bridge needs to answer that report: the report must stop waiting for
    # the bridge, or the fork waits out the bridge's 2 s bound (2.4 s and
    # 2.6 s, the two runs before it stopped; about 0.15 s now, the first
    # report's symbolization).  Every child gets out of os.fork(), whose
    # after-in-child handler starts its own bridge, and exits.  (Python's
    # before-fork wait for the bridge's state read is not exercised: the
    # program imports no framework, and its children read no state.)
    forks = 60
    r = run([FORK_DURING_REPORTS, str(forks)], env=dict(PACKAGE, TENSORLEAK_INTERVAL="0.05",
                                                         TENSORLEAK_FOLLOW_FORK="0"), timeout=100)
    eq((r.rc, r.err.count("Traceback")), (0, 0), "exit status and no traceback")
    got = json.loads(r.out.splitlines()[-1])
    eq((got["forks"], got["hung"], got["failed"]), (forks, 0, 0), "forks, hung and failed children")
    if got["longest_fork_s"] >= 2.0:
        raise AssertionError(f"a fork took {got['longest_fork_s']} s: it waited out the bridge's bound")
    eq(len(r.by_reason("exit")), 1, "the parent's exit report")


if __name__ == "__main__":
    globals()[sys.argv[1]]()
    print("ok")
