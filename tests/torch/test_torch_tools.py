#!/usr/bin/env python3
"""Real PyTorch under tensorleak's other tools (suite 'torch'): the pytest
plugin on a small torch test file, the owner rules on real libc10_cuda
stacks, `tensorleak top --json` and `tensorleak exporter` on a running
torch program, each against torch's own figures, and the growth rows of a
leaking loop with torch's history off and on.

Same interpreter rules as test_torch.py ($TL_TORCH_PYTHON, else python3;
skipped with one line without torch, a failure under CI=true).  meson runs
one test per process: `test_torch_tools.py NAME`.
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
import xml.etree.ElementTree as ET

from test_torch import CLI, PYTHON, app_env, eq, fail, need_torch
from test_torch_oom import APP as APP_OOM, line_of as oom_line_of, run as run_oom_app

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import scratch  # noqa: E402

scratch.use()

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(os.path.dirname(HERE))
SUITE = os.path.join(HERE, "pytest_suite")
TOOLS_APP = os.path.join(HERE, "tools_app.py")
OWNER = "PyTorch caching allocator"  # data/owners.rules


def line_of(path, text):
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if text in line:
                return n
    fail(f"no {text!r} in {path}")


def need_pytest():
    if subprocess.run([PYTHON, "-c", "import pytest"], capture_output=True, timeout=300).returncode == 0:
        return
    if os.environ.get("CI") == "true":
        fail(f"pytest cannot be imported by {PYTHON} under CI=true (scripts/install-deps.sh installs it)")
    print(f"SKIP: pytest is not installed for {PYTHON}")
    sys.exit(77)


def pytest_plugin_names_the_leaking_torch_test_at_its_line():
    need_torch()
    need_pytest()
    tmp = tempfile.mkdtemp(prefix="tl-torch-pytest-")
    junit = os.path.join(tmp, "junit.xml")
    e = app_env({"TENSORLEAK_TORCH_HISTORY": "1"})
    e["PYTHONPATH"] = os.path.join(SOURCE, "python")
    # The failure text comes from the CLI on PATH.
    e["PATH"] = os.path.dirname(os.path.abspath(CLI)) + os.pathsep + e.get("PATH", "")
    e.pop("PYTEST_ADDOPTS", None)
    p = subprocess.run([CLI, "run", "--sim", "--quiet", "-o", os.path.join(tmp, "tl.%p.json"), "--", PYTHON, "-m",
                        "pytest", "-p", "tensorleak.pytest_plugin", "--tensorleak", "-p", "no:cacheprovider",
                        "--junitxml", junit, "-q", SUITE], env=e, capture_output=True, text=True, cwd=tmp, timeout=600)
    eq(p.returncode, 1, f"pytest's exit status (a test failed); output: {p.stdout[-3000:]} {p.stderr[-2000:]}")
    outcomes, messages = {}, {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        failure = case.find("failure")
        outcomes[case.get("name")] = "failed" if failure is not None else (
            "skipped" if case.find("skipped") is not None else "passed")
        messages[case.get("name")] = (failure.text or "") if failure is not None else ""
    eq(outcomes, {"test_initializes_cuda_and_drops_its_tensors": "passed", "test_keeps_a_tensor": "failed",
                  "test_copies_through_the_device_and_frees": "passed",
                  "test_frees_a_tensor_larger_than_a_segment": "passed"}, "outcomes")
    test_file = os.path.join(SUITE, "test_tensors.py")
    at = "%s:%d" % (test_file, line_of(test_file, "kept.append(torch.empty((1 << 20,)"))
    msg = messages["test_keeps_a_tensor"]
    headline = f"tensorleak: left 1.0 MiB allocated in pool 'torch cuda:0' at {at} (allowance 0 B)"
    eq(msg.splitlines()[:1], [headline], "the leaking test's failure headline")
    want = f"\n  1.0 MiB in 1 block(s) at {at} in test_keeps_a_tensor\n"
    if want not in msg:
        fail(f"the failure names the test's block {want!r}: {msg[:2000]}")
    if not re.search(r"test_tensors\.py::test_keeps_a_tensor: left 1\.0 MiB allocated in pool 'torch cuda:0' at "
                     + re.escape(at), p.stdout):
        fail("the session summary names the leaking test: " + p.stdout[-3000:])
    if "tensorleak: 1 test(s) left device memory allocated" not in p.stdout:
        fail("the session summary counts 1 test: " + p.stdout[-3000:])


def start_held_pool(env, tmp):
    """Starts tools_app.py under run --sim; returns (the process, torch's
    figures once written, the go file that lets it exit)."""
    figures_file, go = os.path.join(tmp, "figures.json"), os.path.join(tmp, "go")
    proc = subprocess.Popen([CLI, "run", "--sim", "--quiet", "-o", os.path.join(tmp, "tl.%p.json"), "--", PYTHON,
                             TOOLS_APP, figures_file, go], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 600
    while not os.path.exists(figures_file):
        if proc.poll() is not None or time.monotonic() > deadline:
            out, err = proc.communicate()
            fail(f"tools_app.py ended before writing its figures ({proc.returncode}): {err[-3000:]}")
        time.sleep(0.1)
    with open(figures_file) as f:
        return proc, json.load(f), go


def finish(proc, go):
    with open(go, "w"):
        pass
    out, err = proc.communicate(timeout=600)
    eq(proc.returncode, 0, f"tools_app.py's exit status; stderr: {err[-3000:]}")
    return out


def exit_report(tmp):
    reports = []
    for name in sorted(os.listdir(tmp)):
        if name.startswith("tl."):
            with open(os.path.join(tmp, name)) as f:
                reports.append(json.load(f))
    exits = [r for r in reports if r["reason"] == "exit"]
    eq(len(exits), 1, "exit reports")
    return exits[0]


def owner_rules_give_torchs_segments_to_its_cache():
    need_torch()
    tmp = tempfile.mkdtemp(prefix="tl-torch-owners-")
    proc, figures, go = start_held_pool(app_env({}), tmp)
    finish(proc, go)
    r = exit_report(tmp)
    # The shipped rules (data/owners.rules) on real libc10_cuda frames: every
    # live byte is a segment of torch's cache, held, none leaked.
    eq([(o["name"], o["class"], o["live_bytes"], o["live_allocations"]) for o in r["owners"] if o["live_bytes"]],
       [(OWNER, "cache", figures["reserved"], figures["segments"])], "owners with live memory vs torch's reserved")
    eq([(o["device"], o["name"], o["class"], o["live_bytes"]) for o in r["owners_by_device"]],
       [(0, OWNER, "cache", figures["reserved"])], "owners per device")
    eq(r["leaks"], [], "leaks")
    eq({(s["owner"], s["owner_class"]) for s in r["held"]}, {(OWNER, "cache")}, "owners of the held sites")
    eq(sum(s["bytes"] for s in r["held"]), figures["reserved"], "held bytes vs torch's reserved")
    for s in r["held"]:
        if "libc10_cuda.so" not in (s["stack"][0].get("module") or ""):
            fail(f"a held site's innermost frame is not in libc10_cuda.so: {s['stack'][:2]}")
        # The library's JSON keeps the report contract on C++ frames:
        # `function` demangled, `symbol` the raw name.
        top = s["stack"][0]
        if top["function"].startswith("_Z") or not (top.get("symbol") or "").startswith("_ZN3c104cuda"):
            fail(f"a libc10_cuda frame's function/symbol are not demangled/raw: {top}")
    pools = [p for p in r["pools"] if p["name"] == "torch cuda:0"]
    eq([(p["reserved_bytes"], p["allocated_bytes"], p["largest_free_block"]) for p in pools],
       [(figures["reserved"], figures["allocated"], figures["largest_free"])], "the exit report's pool vs torch")


def live_row(live_dir, pid_of):
    """top --json's row of the traced program, read once its live file is
    newer than `pid_of`'s figures file (written after the last allocation)."""
    since = os.path.getmtime(pid_of)
    deadline = time.monotonic() + 600
    while True:
        p = subprocess.run([CLI, "top", "--json", "--dir", live_dir], capture_output=True, text=True, timeout=600)
        eq(p.returncode, 0, f"top --json's exit status: {p.stderr}")
        rows = json.loads(p.stdout)
        if len(rows) == 1 and rows[0]["live"]["update_time"] > since + 0.5:
            return rows[0]
        if time.monotonic() > deadline:
            fail(f"no live file newer than the figures: {rows}")
        time.sleep(0.2)


def scrape(live_dir, tmp):
    """GET /metrics of `tensorleak exporter` on a free loopback port."""
    err_path = os.path.join(tmp, "exporter.err")
    with open(err_path, "w") as err:
        server = subprocess.Popen([CLI, "exporter", "--listen", "127.0.0.1:0", "--dir", live_dir],
                                  stdout=subprocess.DEVNULL, stderr=err)
    try:
        deadline = time.monotonic() + 600
        while True:
            with open(err_path) as f:
                m = re.search(r"on port (\d+)", f.read())
            if m:
                break
            if server.poll() is not None or time.monotonic() > deadline:
                fail(f"the exporter did not say its port ({server.returncode})")
            time.sleep(0.1)
        with urllib.request.urlopen(f"http://127.0.0.1:{m.group(1)}/metrics", timeout=600) as r:
            return r.read().decode()
    finally:
        server.terminate()
        server.wait(600)


def prom_value(text, metric, **labels):
    rows = []
    for line in text.splitlines():
        m = re.match(r"(\w+)\{(.*)\} (\S+)$", line)
        if m and m.group(1) == metric:
            got = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
            if all(got.get(k) == v for k, v in labels.items()):
                rows.append(float(m.group(3)))
    return rows


def top_and_exporter_show_torchs_figures_of_a_running_program():
    need_torch()
    for history in (False, True):
        live_case(history)


def live_case(history):
    tmp = tempfile.mkdtemp(prefix="tl-torch-live-")
    live_dir = os.path.join(tmp, "live")
    prom_dir = os.path.join(tmp, "prom")
    os.mkdir(live_dir, 0o700)
    os.mkdir(prom_dir, 0o700)
    env = app_env({"TENSORLEAK_LIVE_DIR": live_dir, "TENSORLEAK_LIVE_INTERVAL": "0.1",
                   "TENSORLEAK_TORCH_HISTORY": "1" if history else "0"})
    proc, figures, go = start_held_pool(env, tmp)
    try:
        row = live_row(live_dir, os.path.join(tmp, "figures.json"))
        p = subprocess.run([CLI, "exporter", "--textfile", prom_dir, "--once", "--dir", live_dir],
                           capture_output=True, text=True, timeout=600)
        eq(p.returncode, 0, f"exporter's exit status: {p.stderr}")
        with open(os.path.join(prom_dir, "tensorleak.prom")) as f:
            prom = f.read()
        http = scrape(live_dir, tmp)
    finally:
        finish(proc, go)
    reserved, allocated = figures["reserved"], figures["allocated"]
    # Without history the live view reads torch's statistics only (no
    # snapshot): its largest free block is unknown, never 0.  With history
    # it reads the blocks, and the largest free one is torch's.
    largest = figures["largest_free"] if history else None
    eq([(p["name"], p["kind"], p["device"], p["reserved_bytes"], p["allocated_bytes"], p["largest_free_block"])
        for p in row["pools"]], [("torch cuda:0", "pytorch", 0, reserved, allocated, largest)],
       f"top --json's pools (history {history})")
    summary, classes = row["summary"], row["owner_classes"]
    eq((summary["reserved_bytes"], summary["allocated_bytes"], summary["gap_bytes"],
        sum(classes.get(c, 0) for c in ("cache", "workspace", "library")), classes["user"]),
       (reserved, allocated, reserved - allocated, reserved, 0), "top --json's process figures")
    eq([(o["device"], o["name"], o["class"], o["live_bytes"]) for o in row["owners_by_device"]],
       [(0, OWNER, "cache", reserved)], "top --json's owners")
    pid = str(row["pid"])
    pool = dict(pid=pid, device="0", pool="torch cuda:0", kind="pytorch", framework="torch")
    eq(prom_value(prom, "tensorleak_pool_reserved_bytes", **pool), [float(reserved)], "exporter pool reserved")
    eq(prom_value(prom, "tensorleak_pool_allocated_bytes", **pool), [float(allocated)], "exporter pool allocated")
    eq(prom_value(prom, "tensorleak_pool_largest_free_block_bytes", **pool), [float(largest)] if history else [],
       "exporter largest free block (absent: unknown)")
    eq(prom_value(prom, "tensorleak_device_reserved_bytes", pid=pid, device="0"), [float(reserved)],
       "exporter device reserved")
    eq(prom_value(prom, "tensorleak_owner_live_bytes", pid=pid, device="0", owner=OWNER, **{"class": "cache"}),
       [float(reserved)], "exporter owner bytes")
    # The HTTP exporter's /metrics holds the same series as the textfile
    # (the update timestamp aside: read a moment apart).
    series = lambda text: sorted(l for l in text.splitlines() if "live_update_timestamp" not in l)
    eq(series(http), series(prom), "exporter /metrics vs --textfile")


def growth_rows_of_a_kept_tensor_per_request_with_history_off_and_on():
    # oom_growth_app.py's loop: 8 requests, each keeping a 2 MiB tensor,
    # marked through ctypes.  test_torch_oom.py holds the native allocator
    # (the pool row at the line, history off and on); here the uncached one.
    need_torch()
    line = oom_line_of("KEPT_ALLOC")
    for history in ("0", "1"):
        # Uncached, every tensor is a cudaMalloc with the loop's Python
        # frames on its stack: a call-site row at the line, history or not.
        figures, reports, _ = run_oom_app(["loop", "8", "ctypes"], {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1",
                                                                  "TENSORLEAK_TORCH_HISTORY": history})
        exits = [r for r in reports if r["reason"] == "exit"]
        eq(len(exits), 1, "exit reports")
        eq([(g["scope"], g["kind"], g["bytes_per_mark"], g["marks"],
             [(f["file"], f["line"]) for f in g["stack"] if f.get("python")][:1]) for g in exits[0]["growth"]],
           [("call_site", "device", 2 << 20, 8, [(APP_OOM, line)])], f"uncached, history {history}: growth rows")


# A program's live tensors and a freed one; it prints torch's own segments
# and has tensorleak write a report of that moment (tensorleak.snapshot_to).
SNAPSHOT_APP = """
import json, sys, torch, tensorleak
MIB = 1 << 20
kept = [torch.empty(n * MIB, dtype=torch.uint8, device="cuda") for n in (1, 5, 3, 1, 5, 3)]
del kept[1]
small = torch.empty(4096, dtype=torch.uint8, device="cuda")
segs = torch.cuda.memory._snapshot()["segments"]
print(json.dumps(sorted([s["address"], s["total_size"], s["segment_type"],
                         [[b["size"], b["state"]] for b in s["blocks"]]] for s in segs)))
sys.exit(tensorleak.snapshot_to(sys.argv[1]))
"""

# Every view torch.cuda._memory_viz makes of a snapshot (the flame-graph
# ones without fetching flamegraph.pl), in the interpreter that has torch.
VIZ = """
import json, pickle, sys
import torch.cuda._memory_viz as viz
with open(sys.argv[1], "rb") as f:
    snap = pickle.load(f)
same = lambda text: text
for view in (viz.segsum, viz.trace, viz.trace_plot, viz.segment_plot):
    view(snap)
viz.segments(snap, format_flamegraph=same)
viz.memory(snap, format_flamegraph=same)
print(json.dumps([len([s for s in snap["segments"] if "tensorleak_pool" not in s]),
                  sorted({(s["tensorleak_pool_kind"], s["tensorleak_layout"]) for s in snap["segments"]}),
                  sorted([s["address"], s["total_size"], s["segment_type"],
                          [[b["size"], b["state"]] for b in s["blocks"]]]
                         for s in snap["segments"] if s.get("tensorleak_pool") == "torch cuda:0")]))
"""


def torch_snapshot_of_a_torch_run_is_read_by_memory_viz_with_torchs_segments():
    # `tensorleak report --format torch-snapshot` of a real torch program's
    # report, opened by the installed torch's _memory_viz: the cache's
    # segments and blocks are torch's own (its _snapshot() printed by the
    # program).  The blocks carry no frames: a report's pool layout keeps
    # offsets and sizes, its Python lines are per site (pools[].sites).
    need_torch()
    tmp = tempfile.mkdtemp(prefix="tl-torch-snap-")
    app = os.path.join(tmp, "snap_app.py")
    with open(app, "w") as f:
        f.write(SNAPSHOT_APP)
    report, pickled = os.path.join(tmp, "report.json"), os.path.join(tmp, "report.pickle")
    env = app_env({})
    env["PYTHONPATH"] = os.path.join(SOURCE, "python")
    p = subprocess.run([CLI, "run", "--sim", "--quiet", "-o", os.path.join(tmp, "exit.json"), "--", PYTHON, app, report],
                       env=env, capture_output=True, text=True, timeout=600)
    eq(p.returncode, 0, f"exit status; stderr: {p.stderr[-3000:]}")
    torch_segments = json.loads(p.stdout.strip().splitlines()[-1])
    c = subprocess.run([CLI, "report", report, "--format", "torch-snapshot", "-o", pickled],
                       capture_output=True, text=True, timeout=600)
    eq((c.returncode, c.stdout, c.stderr), (0, "", ""), "report --format torch-snapshot")
    v = subprocess.run([PYTHON, "-c", VIZ, pickled], env=app_env({}), capture_output=True, text=True, timeout=600)
    eq(v.returncode, 0, f"torch.cuda._memory_viz on the snapshot; stderr: {v.stderr[-3000:]}")
    plain, kinds, ours = json.loads(v.stdout.strip().splitlines()[-1])
    eq(kinds, [["pytorch", "known"]], "the segments' pool kind and layout")
    eq(ours, torch_segments, "the cache's segments and blocks vs torch's _snapshot()")
    eq(plain, 0, "segments outside the pool (the cache's cudaMallocs are not shown twice)")


if __name__ == "__main__":
    globals()[sys.argv[1]]()
    print("ok")
