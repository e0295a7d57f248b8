#!/usr/bin/env python3
"""Real PyTorch on the simulated stack: the out-of-memory report's figures
and verdict, and growth with torch's history on (suite 'torch').

Same interpreter rules as test_torch.py ($TL_TORCH_PYTHON, else python3;
skipped with one line without torch, a failure under CI=true).  meson runs
one test per process: `test_torch_oom.py NAME`.
"""
import json
import os
import subprocess
import sys
import tempfile

from test_torch import CLI, MIB, PYTHON, app_env, eq, fail, need_torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import scratch  # noqa: E402

scratch.use()

HERE = os.path.dirname(os.path.abspath(__file__))
APP = os.path.join(HERE, "oom_growth_app.py")
SOURCE = os.path.dirname(os.path.dirname(HERE))


def line_of(marker):
    with open(APP) as f:
        for n, text in enumerate(f, 1):
            if "# " + marker in text:
                return n
    fail(f"no {marker} in {APP}")


def run(args, env):
    """(torch's figures, the reports, stderr) of APP under run --sim."""
    tmp = tempfile.mkdtemp(prefix="tl-torch-oom-")
    e = app_env(env)
    e["PYTHONPATH"] = os.path.join(SOURCE, "python")  # tensorleak.mark()
    p = subprocess.run([CLI, "run", "--sim", "-o", os.path.join(tmp, "tl.%n.json"), "--", PYTHON, APP] + args,
                       env=e, capture_output=True, text=True, timeout=600)
    eq(p.returncode, 0, f"exit status; stderr: {p.stderr[-3000:]}")
    reports = []
    run.paths = [os.path.join(tmp, name) for name in sorted(os.listdir(tmp))]
    for path in run.paths:
        with open(path) as f:
            reports.append(json.load(f))
    return json.loads(p.stdout.strip().splitlines()[-1]), reports, p.stderr


def oom_case(request_mib, history):
    need_torch()
    figures, reports, err = run(["frag", str(request_mib)], {"SIMCUDA_MEMORY": "820M",
                                                             "TENSORLEAK_TORCH_HISTORY": "1" if history else "0"})
    eq((figures["caught"], figures["reserved"], figures["allocated"]), (True, 800 * MIB, 200 * MIB),
       "torch's own figures after the caught OutOfMemoryError")
    ooms = [r for r in reports if r["reason"] == "oom"]
    eq(len(ooms), 1, "out-of-memory reports (torch refuses twice for one request)")
    rep = ooms[0]
    eq(rep["bridge"]["state"], "fresh", "framework state read at the failure")
    o = rep["oom"]
    eq([(f["function"], f["line"]) for f in o["stack"] if f.get("python") and f["file"] == APP],
       [("<module>", line_of("OOM_REQUEST"))], "the Python line of the failing request")
    eq((o["bytes"], o["device_free"], o["empty_cache_bytes"], o["note"]), (request_mib * MIB, 20 * MIB, 0, None),
       "request, device free, what empty_cache() returns")
    eq(len(o["pools"]), 1, "pools of device 0")
    p = o["pools"][0]
    eq((p["name"], p["state"], p["reserved_bytes"], p["allocated_bytes"], p["free_bytes"], p["largest_free_block"]),
       ("torch cuda:0", "fresh", 800 * MIB, 200 * MIB, 600 * MIB, 15 * MIB), "torch's pool at the failure")
    oom_case.path = run.paths[reports.index(rep)]
    return o, p, err


def check_formats(path, request_mib, why, verdict, remedy, pinning):
    """The out-of-memory report explains itself in every format: stderr's
    line (checked by the caller), the CLI's text, HTML and SARIF."""
    sentence = f"out of memory allocating {request_mib}.0 MiB on device 0: " + why
    text = subprocess.run([CLI, "report", path], capture_output=True, text=True, timeout=600).stdout
    if "Why: " + why + "\n" not in text:
        fail("text: " + text)
    pool = ("    pool 'torch cuda:0' (pytorch, read at the failure): reserved 800.0 MiB, allocated 200.0 MiB, "
            "free 600.0 MiB, largest free block 15.0 MiB, empty_cache() returns 0 B: " + verdict.replace("_", " "))
    if verdict == "fragmentation" and not pinning:
        pool += " (TENSORLEAK_TORCH_HISTORY=1 names the live blocks that pin its segments)"
    if pool + "\n" not in text:
        fail("text's pool line: " + text)
    if pinning and ("Live blocks pinning the fragmented segments of pool 'torch cuda:0', largest first:\n"
                    "  200.0 MiB in 40 block(s) allocated at:\n") not in text:
        fail("text's pinning blocks: " + text)
    html = subprocess.run([CLI, "report", path, "--format", "html"], capture_output=True, text=True, timeout=600).stdout
    if "Why: " + why + "." not in html:
        fail("html: no " + sentence)
    sarif = json.loads(subprocess.run([CLI, "report", path, "--format", "sarif"], capture_output=True, text=True,
                                      timeout=600).stdout)
    res = [x for x in sarif["runs"][0]["results"] if x["ruleId"] == "tensorleak/oom"]
    eq(len(res), 1, "sarif out-of-memory results")
    if not res[0]["message"]["text"].endswith(". Why: " + why):
        fail("sarif message: " + res[0]["message"]["text"])
    eq((res[0]["properties"]["bytes"], res[0]["properties"]["verdict"], res[0]["properties"]["remedy"]),
       (request_mib * MIB, verdict, remedy), "sarif properties")


def fragmented_cache_at_out_of_memory_is_explained_on_real_torch():
    for history in (False, True):
        o, p, err = oom_case(50, history)
        eq((o["verdict"], o["remedy"], p["verdict"]), ("fragmentation", "expandable_segments", "fragmentation"),
           "verdict and remedy")
        eq((p["kind"], p["empty_cache_bytes"], p["note"]),
           ("pytorch", 0, None if history else "TENSORLEAK_TORCH_HISTORY=1 names the live blocks that pin its segments"),
           "the pool's kind, what empty_cache() returns, its note")
        if history:  # each of the 40 segments pinned by one kept tensor
            eq([(s["bytes"], s["count"], s["stack"][0]["line"]) for s in p["pinning"]],
               [(200 * MIB, 40, line_of("PINNING_ALLOC"))], "live blocks pinning the segments")
        else:
            eq(p["pinning"], None, "pinning unknown without history")
        why = ("fragmentation: 620.0 MiB free (20.0 MiB on the device, 600.0 MiB in caches), no free block of "
               "50.0 MiB (largest 15.0 MiB); would serve it: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")
        if "out of memory allocating 50.0 MiB on device 0: " + why not in err:
            fail("stderr line: " + err[-2000:])
        check_formats(oom_case.path, 50, why, "fragmentation", "expandable_segments", history)


def a_request_beyond_everything_free_is_not_enough_memory_on_real_torch():
    o, p, err = oom_case(700, False)
    eq((o["verdict"], o["remedy"], p["verdict"], p["note"]), ("not_enough_memory", "smaller_request", "not_enough_memory", None),
       "verdict and remedy")
    why = ("not enough memory: 620.0 MiB free (20.0 MiB on the device, 600.0 MiB in caches) for 700.0 MiB; "
           "would serve it: nothing short of a smaller request")
    if "out of memory allocating 700.0 MiB on device 0: " + why not in err:
        fail("stderr line: " + err[-2000:])
    check_formats(oom_case.path, 700, why, "not_enough_memory", "smaller_request", False)


def growth_keeps_its_rows_and_line_with_history_off_and_on_on_real_torch():
    # Three runs of each kind of mark with torch's history on and unset
    # (auto): with it on, the first snapshot with Python frames imports
    # torch._inductor inside a mark's state read; unset, the history is
    # turned on when the pool's growth is suspected (after its second high),
    # so the blocks kept from the next request on name the loop's line.
    need_torch()
    line = line_of("KEPT_ALLOC")
    for history in ("auto", "1"):
        for how in ("ctypes", "ctypes", "ctypes", "tensorleak", "tensorleak", "tensorleak"):
            what = f"history {history}, {how} marks"
            env = {"TENSORLEAK_TORCH_HISTORY": history} if history != "auto" else {}
            figures, reports, err = run(["loop", "8", how], env)
            eq(figures["allocated"], 8 * 2 * MIB, "torch's allocated bytes")
            exits = [r for r in reports if r["reason"] == "exit"]
            eq(len(exits), 1, "exit reports")
            rows = [g for g in exits[0]["growth"] if g["scope"] == "pool"]
            eq([(g["pool"], g["bytes_per_mark"], g["marks"], g["from_bytes"], g["to_bytes"]) for g in rows],
               [("torch cuda:0", 2 * MIB, 7, 2 * MIB, 16 * MIB)], what + ": pool growth")
            eq(len(exits[0]["marks"]), 8, what + ": marks")
            top = rows[0]["stack"][0] if rows[0]["stack"] else {}
            eq((top.get("file"), top.get("line")), (APP, line), what + ": the growth row's Python line")
    # TENSORLEAK_TORCH_HISTORY=0: never turned on; the pool's growth is kept
    # (its allocated bytes per mark), though torch's blocks name no line.
    figures, reports, err = run(["loop", "8", "ctypes"], {"TENSORLEAK_TORCH_HISTORY": "0"})
    exits = [r for r in reports if r["reason"] == "exit"]
    eq([(g["scope"], g["pool"], g["bytes_per_mark"], g["marks"], g["stack"]) for g in exits[0]["growth"]],
       [("pool", "torch cuda:0", 2 * MIB, 7, [])], "history 0: the pool's growth row, without a line")


if __name__ == "__main__":
    globals()[sys.argv[1]]()
    print("ok")
