#!/usr/bin/env python3
"""TENSORLEAK_PYTHON=0 turns the bridge off also for a program that imports
tensorleak (itself, or through the pytest plugin that pytest loads for
every run): an explicit off is the user's answer to a bridge they do not
want.  `bridge_switch_test.py NAME` (meson, suite bridge)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bridge_test import FAKE, KV, SOURCE, eq, run, torch_pool  # noqa: E402

PACKAGE = {"PYTHONPATH": FAKE + os.pathsep + os.path.join(SOURCE, "python")}


def an_explicit_python_off_keeps_import_tensorleak_from_starting_the_bridge():
    for off in ("0", "off", "False", "maybe"):  # maybe: the library warns and keeps it off
        r = run([KV, "leak", "3", "tensorleak"], env=dict(PACKAGE, TENSORLEAK_PYTHON=off))
        eq(r.rc, 3, "exit status (the program's own)")
        eq((r.exit["bridge"], [p for p in r.exit["pools"] if p["kind"] == "pytorch"]), (None, []),
           "TENSORLEAK_PYTHON=%s: no bridge and no framework pool" % off)
    # Unset under a bare preload, or on: import tensorleak starts it.
    r = run([KV, "leak", "3", "tensorleak"], env=dict(PACKAGE, TENSORLEAK_PYTHON="1"))
    eq((r.exit["bridge"]["state"], torch_pool(r.exit)["allocated_bytes"]), ("final", 3 * 21 << 20),
       "TENSORLEAK_PYTHON=1: the bridge's pool")


if __name__ == "__main__":
    globals()[sys.argv[1]]()
    print("ok")
