#!/usr/bin/env python3
"""Stacks with Python frames, as the library's stderr report prints them:
the innermost Python frame first, the native frames between the CUDA call
and it folded into one line naming their libraries, the interpreter's frames
below the outermost Python frame left out; TENSORLEAK_FRAMES=all prints
every frame as recorded.  The JSON keeps every frame either way, and
`tensorleak report` prints what the program printed.

Run one test per process (`python_first_test.py NAME`), as preload_test.py,
whose helpers these tests share.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from preload_test import BUILD, SOURCE, check, eq, run, sample  # noqa: E402

APP = os.path.join(SOURCE, "tests", "python_pkg", "app.py")
CLI = os.path.join(BUILD, "tools", "tensorleak")
LEAK = "Leak of 4.0 MiB in 4 allocation(s) [device] allocated from:"


def app_line(text):
    with open(APP) as f:
        for n, line in enumerate(f, 1):
            if text in line:
                return n
    raise AssertionError(f"{text!r} not in {APP}")


def stack_after(text, header):
    """The stack lines printed under `header`, up to the blank line."""
    lines = text.splitlines()
    at = lines.index(header)
    end = lines.index("", at)
    return lines[at + 1:end]


def report_text(err):
    """The report part of stderr: what `tensorleak report` prints (but the
    name of the report file)."""
    return "".join(re.sub(r"Report: \S+$", "Report: R", l) + "\n" for l in err.splitlines() if not l.startswith("tensorleak:"))


def cli_report(report, *args):
    """`tensorleak report` of a report the program wrote."""
    path = os.path.join(tempfile.mkdtemp(prefix="tl-pyfirst-"), "report.json")
    with open(path, "w") as f:
        json.dump(report, f)
    out = subprocess.run([CLI, "report", *args, path], capture_output=True, text=True, timeout=60).stdout
    return re.sub(r"Report: \S+\n", "Report: R\n", out)


def run_app(env=None):
    r = run(sys.executable, APP, env=env)
    eq(r.rc, 0, "app.py under the preload: " + r.err)
    return r


def the_python_line_comes_first_and_native_runs_fold_into_their_libraries():
    r = run_app()
    stack = stack_after(r.err, LEAK)
    # The JSON has every frame: the Python ones are numbered where they are there.
    frames = next(l for l in r.report["leaks"] if l["bytes"] == 4 << 20)["stack"]
    py = [i for i, f in enumerate(frames) if f.get("python")]
    eq(len(py), 3, "Python frames in the JSON stack")
    check(len(frames) > py[-1] + 1, "the JSON keeps the interpreter's frames below <module>")
    eq(len(stack), 4, "stack lines: " + "\n".join(stack))
    eq(stack[0], f"    #{py[0]} in cuda_malloc {APP}:{app_line('assert cudart.cudaMalloc')} [python]", "innermost Python frame first")
    m = re.fullmatch(r"    \.\.\. (\d+) native frames: (.*)", stack[1])
    check(m, "the native frames below it fold into one line: " + stack[1])
    eq(int(m.group(1)), py[0], "the folded line counts every native frame before the first Python one")
    libs = m.group(2).split(", ")
    check(libs[0] == "libffi" and "_ctypes" in libs and any(l.startswith("libpython") for l in libs),
          "the fold names libffi (the library that made the call), _ctypes and libpython: " + stack[1])
    eq(stack[2], f"    #{py[1]} in serve {APP}:{app_line('kv_cache.append(cuda_malloc')} [python]", "the caller")
    eq(stack[3], f"    #{py[2]} in <module> {APP}:{app_line('    serve(request)')} [python]",
       "the outermost Python frame, and nothing below it")
    # `tensorleak report` of the JSON prints the same report.
    eq(cli_report(r.report), report_text(r.err), "tensorleak report equals the program's stderr report")


def frames_all_prints_every_frame_as_recorded():
    r = run_app({"TENSORLEAK_FRAMES": "all"})
    stack = stack_after(r.err, LEAK)
    frames = next(l for l in r.report["leaks"] if l["bytes"] == 4 << 20)["stack"]
    eq(len(stack), len(frames), "one line per recorded frame")
    check(all(l.startswith(f"    #{i} ") for i, l in enumerate(stack)), "numbered in order: " + "\n".join(stack))
    check(not any(l.startswith("    ...") for l in stack), "nothing folded")
    eq(cli_report(r.report, "--frames", "all"), report_text(r.err),
       "tensorleak report --frames all equals the program's stderr report")
    # A bad value is said once, and the default holds.
    bad = run_app({"TENSORLEAK_FRAMES": "native"})
    warnings = [l for l in bad.err.splitlines() if l.startswith("tensorleak:") and "TENSORLEAK_FRAMES" in l]
    eq(len(warnings), 1, "one warning for TENSORLEAK_FRAMES=native: " + bad.err)
    check(re.search(r"\n    \.\.\. \d+ native frames: ", bad.err), "the default view holds: " + bad.err)


def a_stack_without_python_frames_prints_as_recorded():
    default = run(sample("leaky_inference"))
    every = run(sample("leaky_inference"), env={"TENSORLEAK_FRAMES": "all"})
    eq(default.rc, 0, default.err)
    strip = lambda e: re.sub(r"0x[0-9a-f]+ in", "ADDR in", re.sub(r"==\d+==", "==P==", re.sub(r"Report: \S+", "Report: R", e)))
    eq(strip(default.err), strip(every.err), "a native stack is the same in both views")
    check("    ..." not in default.err, "nothing folded in a native stack")
    check(re.search(r"\n    #0 0x[0-9a-f]+ in kv_cache_append \S*leaky_inference\.c:\d+", default.err),
          "the native stack from its first frame: " + default.err)


if __name__ == "__main__":
    globals()[sys.argv[1]]()
    print("ok")
