#!/usr/bin/env python3
"""`tensorleak report FILE` of a report with framework pools prints what the
library printed on stderr when it wrote that report: the pool's framework
note, a host pool without byte counts, and growth of a pool, of an owner's
reserve and of a Python site (rows without a call site).  One test per
process: `bridge_cli_test.py NAME` (meson, suite bridge)."""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import scratch  # noqa: E402

scratch.use()

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bridge_test import CLI, HERE, KV, check, eq, run  # noqa: E402

MiB = 1 << 20

JC = os.path.join(HERE, "progs", "jax_cupy_loop.py")


def exit_text(r):
    """The library's text of the exit report: the stderr lines from its
    first 'tensorleak:' header on (the program's own output comes before)."""
    lines = r.err.splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if " tensorleak: " in line and line.startswith("=="))
    return "".join(lines[start:])


def cli_output(r, fmt):
    """`tensorleak report --format FMT` of the run's exit report."""
    path = [f for f, rep in zip(r.files, r.reports) if rep["reason"] == "exit"][0]
    p = subprocess.run([CLI, "report", "--format", fmt, path], capture_output=True, text=True, timeout=30)
    eq((p.returncode, p.stderr), (0, ""), "tensorleak report --format %s's status and stderr" % fmt)
    return p.stdout


def cli_text(r):
    return cli_output(r, "text")


def rotate_with_an_owner_rule():
    """The stand-in's rotating KV cache, its allocations owned by "fake-torch"
    (cache): growth rows for the owner's reserve and for the pool."""
    rules = os.path.join(tempfile.mkdtemp(prefix="tl-bridge-"), "owners.rules")
    with open(rules, "w") as f:
        f.write("owner:fake-torch:cache:device:libffi.so*\n")
    return run([KV, "rotate", "9", "ctypes"], env={"TENSORLEAK_OWNERS": rules})


def report_text_of_pool_and_owner_growth_equals_the_preload_text():
    r = rotate_with_an_owner_rule()
    eq([g["scope"] for g in r.exit["growth"]], ["owner", "pool"], "growth rows of the run")
    eq(cli_text(r), exit_text(r), "tensorleak report vs the library's stderr")


def check_counts_a_leak_seen_by_its_owner_and_its_pool_once():
    # One leak, two growth rows: the owner's reserve (22 MiB a mark) and the
    # pool's allocated bytes (21 MiB a mark), 8 marks.  The gate takes the
    # larger view, not the sum (43 MiB x 8 before).
    r = rotate_with_an_owner_rule()
    eq([(g["scope"], g["bytes_per_mark"], g["marks"]) for g in r.exit["growth"]],
       [("owner", 22 * MiB, 8), ("pool", 21 * MiB, 8)], "growth rows of the run")
    path = [f for f, rep in zip(r.files, r.reports) if rep["reason"] == "exit"][0]
    for limit, status, verdict in [("176M", 0, "PASS"), ("175M", 1, "FAIL")]:
        p = subprocess.run([CLI, "check", path, "--max-leaked-bytes", "1G", "--max-growth-bytes", limit],
                           capture_output=True, text=True, timeout=30)
        eq((p.returncode, p.stderr), (status, ""), f"check --max-growth-bytes {limit}")
        check(p.stdout.startswith(f"tensorleak check: {verdict}: ") and
              f" 184549376 byte(s) growth (limit {int(limit[:-1]) * MiB})" in p.stdout, p.stdout)


def report_text_of_python_site_growth_equals_the_preload_text():
    r = run([KV, "kv2", "6", "ctypes"], env={"TENSORLEAK_TORCH_HISTORY": "1"})
    eq(sorted({g["scope"] for g in r.exit["growth"]}), ["call_site", "pool", "python_site"], "growth rows of the run")
    eq(cli_text(r), exit_text(r), "tensorleak report vs the library's stderr")


def report_text_of_a_host_pool_without_byte_counts_equals_the_preload_text():
    r = run([JC, "cupy", "leak", "6"])
    eq([p["reserved_bytes"] for p in r.exit["pools"] if p["kind"] == "cupy_pinned"], [None], "pinned pool figures")
    eq(cli_text(r), exit_text(r), "tensorleak report vs the library's stderr")


def html_and_sarif_name_pool_and_owner_growth_and_say_unknown_for_a_host_pool():
    r = rotate_with_an_owner_rule()
    sarif = json.loads(cli_output(r, "sarif"))
    growth = [(x["message"]["text"], x["properties"].get("scope"))
              for x in sarif["runs"][0]["results"] if x["ruleId"] == "tensorleak/growth"]
    eq(growth, [("Growth of 22.0 MiB (23068672 bytes) per mark over 8 marks in the reserve of owner fake-torch (cache)",
                 "owner"),
                ("Growth of 21.0 MiB (22020096 bytes) per mark over 8 marks in pool 'torch cuda:0' "
                 "(pytorch, allocated bytes)", "pool")], "SARIF growth results")
    html = cli_output(r, "html")
    check("in the reserve of owner fake-torch (cache)" in html, "HTML names the owner's reserve")
    check("in pool &#39;torch cuda:0&#39; (allocated bytes)" in html or "in pool 'torch cuda:0' (allocated bytes)" in html,
          "HTML names the pool")

    r = run([JC, "cupy", "leak", "6"])
    sarif = json.loads(cli_output(r, "sarif"))
    pinned = [m for m in sarif["runs"][0]["properties"]["memory"] if m.get("pool") == "cupy pinned"]
    eq([(m["reserved_bytes"], m["allocated_bytes"], m["free_bytes"], m["text"]) for m in pinned],
       [(None, None, None, "pool 'cupy pinned' (cupy_pinned, host): 0 free block(s); no byte counts published")],
       "SARIF: the pinned pool's figures are unknown, not 0")
    html = cli_output(r, "html")
    i = html.index("cupy pinned")
    check("0 free block(s); no byte counts published" in html[i:i + 400] and "reserved 0 B" not in html[i:i + 400],
          "HTML: the pinned pool's figures are unknown, not 0")


if __name__ == "__main__":
    globals()[sys.argv[1]]()
    print("ok")
