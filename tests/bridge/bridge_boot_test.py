#!/usr/bin/env python3
"""The bridge's start (a pending call the library schedules at the first
CUDA call) never changes what the program sees: its own Ctrl-C or a
SystemExit its signal handler raises while the start runs reaches the
program as it would have without tensorleak; the bridge's own failure is
one stderr line and nothing else.  `bridge_boot_test.py NAME` (suite bridge)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bridge_test import HERE, eq, run  # noqa: E402

PROG = os.path.join(HERE, "progs", "boot_signal.py")


def env(what):
    return {"TL_BOOT_RAISE": what, "TENSORLEAK_PYTHON": "1",
            "PYTHONPATH": os.path.join(HERE, "boot_fake")}


def a_ctrl_c_during_the_bridge_start_reaches_the_program():
    r = run([PROG], env=env("interrupt"))
    eq((r.rc, r.out.split("\n")), (130, ["finally ran", "interrupted", ""]), "status and output")
    eq(r.err.count("did not start"), 0, "no bridge warning for the program's own interrupt")


def a_sys_exit_during_the_bridge_start_ends_the_program():
    r = run([PROG], env=env("exit"))
    eq((r.rc, r.out.split("\n")), (7, ["finally ran", ""]), "status and output")


def the_bridge_failing_to_start_is_one_line_and_the_program_goes_on():
    r = run([PROG], env=env("error"))
    eq((r.rc, r.out.split("\n")), (0, ["finally ran", "continued", ""]), "status and output")
    eq([x for x in r.err.splitlines() if "did not start" in x],
       ["tensorleak: the Python bridge did not start: RuntimeError('stand-in bridge failed')"], "the warning")


if __name__ == "__main__":
    globals()[sys.argv[1]]()
    print("ok")
