#!/usr/bin/env python3
"""A child forked while the bridge's previous state was being freed (a
submit in another thread) reports from a whole state: before, the child
kept a pointer to the object half freed, and about one child in four died
of SIGSEGV writing its snapshot.  `bridge_submit_fork_test.py NAME`."""
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bridge_test import HERE, eq, run  # noqa: E402

PROG = os.path.join(HERE, "progs", "fork_while_submitting.py")
CHILDREN = 60


def a_child_forked_while_a_state_is_freed_reports_a_whole_state():
    warnings.simplefilter("ignore")
    r = run(["-W", "ignore", PROG, str(CHILDREN)], env={"TENSORLEAK_PYTHON": "0"}, timeout=240)
    eq((r.rc, r.out.strip()), (0, "0"), "exit status and children that did not exit cleanly")
    snaps = [x for x in r.by_reason("api") if x.get("label") == "child"]
    eq(len(snaps), CHILDREN, "one snapshot per child")
    eq(sorted({tuple((p["name"], p["allocated_bytes"]) for p in s["pools"] if p.get("kind") == "pytorch")
               for s in snaps}), [(("torch cuda:0", 1 << 29),)], "the framework pool of every child's snapshot")


if __name__ == "__main__":
    globals()[sys.argv[1]]()
    print("ok")
