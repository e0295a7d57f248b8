#!/usr/bin/env python3
"""`tensorleak report FILE` of a report with framework pools prints what the
library printed on stderr when it wrote that report: the pool's framework
note, a host pool without byte counts, and growth of a pool, of an owner's
reserve and of a Python site (rows without a call site).  One test per
process: `bridge_cli_test.py NAME` (meson, suite bridge)."""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bridge_test import CLI, HERE, KV, eq, run  # noqa: E402

JC = os.path.join(HERE, "progs", "jax_cupy_loop.py")


def exit_text(r):
    """The library's text of the exit report: the stderr lines from its
    first 'tensorleak:' header on (the program's own output comes before)."""
    lines = r.err.splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if " tensorleak: " in line and line.startswith("=="))
    return "".join(lines[start:])


def cli_text(r):
    path = [f for f, rep in zip(r.files, r.reports) if rep["reason"] == "exit"][0]
    p = subprocess.run([CLI, "report", path], capture_output=True, text=True, timeout=30)
    eq((p.returncode, p.stderr), (0, ""), "tensorleak report's status and stderr")
    return p.stdout


def report_text_of_pool_and_owner_growth_equals_the_preload_text():
    rules = os.path.join(tempfile.mkdtemp(prefix="tl-bridge-"), "owners.rules")
    with open(rules, "w") as f:
        f.write("owner:fake-torch:cache:device:libffi.so*\n")
    r = run([KV, "rotate", "9", "ctypes"], env={"TENSORLEAK_OWNERS": rules})
    eq([g["scope"] for g in r.exit["growth"]], ["owner", "pool"], "growth rows of the run")
    eq(cli_text(r), exit_text(r), "tensorleak report vs the library's stderr")


def report_text_of_python_site_growth_equals_the_preload_text():
    r = run([KV, "kv2", "6", "ctypes"], env={"TENSORLEAK_TORCH_HISTORY": "1"})
    eq(sorted({g["scope"] for g in r.exit["growth"]}), ["call_site", "pool", "python_site"], "growth rows of the run")
    eq(cli_text(r), exit_text(r), "tensorleak report vs the library's stderr")


def report_text_of_a_host_pool_without_byte_counts_equals_the_preload_text():
    r = run([JC, "cupy", "leak", "6"])
    eq([p["reserved_bytes"] for p in r.exit["pools"] if p["kind"] == "cupy_pinned"], [None], "pinned pool figures")
    eq(cli_text(r), exit_text(r), "tensorleak report vs the library's stderr")


if __name__ == "__main__":
    globals()[sys.argv[1]]()
    print("ok")
