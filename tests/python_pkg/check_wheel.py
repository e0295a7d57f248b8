#!/usr/bin/env python3
"""The pip route end to end (meson test suite `python`, test `wheel_pytest_gate`):

1. builds the wheel with python/build_wheel.sh (pip wheel + auditwheel repair),
   or takes the one given with --wheel;
2. installs it in a fresh virtual environment, with pytest;
3. checks that the bundled library and CLI resolve libunwind, libdw and
   jansson to the wheel's own copies, and that `import tensorleak` is a no-op
   without the preload;
4. runs tests/python_pkg/app.py under the wheel's `tensorleak run --sim` and
   under the meson build's, and compares the two reports;
5. runs the suite tests/python_pkg/suite/ with `pytest --tensorleak
   --tensorleak-sim` (the plugin re-runs pytest under the preload) and checks
   which tests pass and fail and what the failures say.

Exit 0 pass, 1 fail, 77 skip (PyPI, needed for the build tools and pytest,
cannot be reached).
"""

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
SUITE = os.path.join(HERE, "suite")
failures = []


def check(condition, what):
    print("%s: %s" % ("ok" if condition else "FAIL", what))
    if not condition:
        failures.append(what)
    return condition


def run(cmd, **kw):
    print("+ " + " ".join(cmd), flush=True)
    return subprocess.run(cmd, **kw)


def normalized_stack(stack):
    # Addresses differ from run to run (ASLR); modules are compared by name
    # (the wheel's copies live elsewhere than the build tree's).
    return [(os.path.basename(f.get("module") or ""), f.get("offset"), f.get("function"), f.get("file"),
             f.get("line"), bool(f.get("python"))) for f in stack]


def normalized_report(path):
    with open(path) as f:
        report = json.load(f)
    return {
        "summary": report["summary"],
        "leaks": [(s["kind"], s["bytes"], s["count"], s.get("owner"), normalized_stack(s["stack"]))
                  for s in report["leaks"]],
        "held": [(s["kind"], s["bytes"], s["count"], s.get("owner"), normalized_stack(s["stack"]))
                 for s in report.get("held", [])],
        "growth": [(g["bytes_per_mark"], g["marks"], normalized_stack(g.get("stack") or []))
                   for g in report.get("growth", [])],
    }


def line_of(path, text):
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if text in line:
                return number
    raise AssertionError("%r not in %s" % (text, path))


SITE_BYTES_PROGRAM = r"""
import ctypes
rt = ctypes.CDLL("libcudart.so.13")
rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
rt.cudaFree.argtypes = [ctypes.c_void_p]
lib = ctypes.CDLL(None)
fn = lib.tensorleak_site_bytes
fn.restype, fn.argtypes = ctypes.c_long, [ctypes.POINTER(ctypes.c_uint64), ctypes.c_long]
def malloc(n):
    p = ctypes.c_void_p(); assert rt.cudaMalloc(ctypes.byref(p), n) == 0; return p.value
def a(): return malloc(1 << 20)
def b(): return malloc(3 << 20)
def c(): return malloc(5 << 20)
keep = [a(), a(), b(), c()]
rt.cudaFree(keep.pop())                       # c's site holds nothing any more
print(fn(None, 0))                            # 2 sites hold memory
buf = (ctypes.c_uint64 * 6)()
print(fn(buf, 1), (buf[1], buf[2]) in ((2 << 20, 2), (3 << 20, 1)))  # one row filled, both counted
n = fn(buf, 2)
print(n, sorted((buf[3 * i + 1], buf[3 * i + 2]) for i in range(n)))
"""


def check_site_bytes(py, env, library, sim_dir):
    """tensorleak_site_bytes (src/record/epoch.c): live bytes and allocations per
    call site, and the short buffer protocol."""
    r = subprocess.run([py, "-c", SITE_BYTES_PROGRAM], env=dict(env, LD_PRELOAD=library, LD_LIBRARY_PATH=sim_dir,
                                                               TENSORLEAK_QUIET="1", TENSORLEAK_OUTPUT=os.devnull),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    want = "2\n2 True\n2 [(2097152, 2), (3145728, 1)]\n"
    check(r.stdout == want, "tensorleak_site_bytes: two sites, 2 x 1 MiB and 1 x 3 MiB, short buffer counted (got %r%s)"
          % (r.stdout, (", stderr " + r.stderr[-300:]) if r.returncode else ""))


def check_pytest_gate(py, env, work, tensorleak, extra_args=()):
    """Runs suite/ under `pytest --tensorleak` (python `py`, plus
    `extra_args`) and checks the verdicts, the messages, the summary and the
    kept reports (read back with the CLI `tensorleak`)."""
    r = run([py, "-m", "pytest", "--tensorleak", "--tensorleak-limit", "12 XB", "-p", "no:cacheprovider"]
            + list(extra_args) + [SUITE], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=work)
    check(r.returncode == 4 and "--tensorleak-limit: not a size: '12 XB'" in r.stdout,
          "a bad --tensorleak-limit is a usage error (exit %d)" % r.returncode)

    report_dir = os.path.join(work, "pytest-reports")
    junit = os.path.join(work, "junit.xml")
    # The stand-in torch's segments are the cache's (suite/fake_torch.rules).
    # The wheel's fresh venv has no torch (a 3 GB install per run); the
    # plugin on real torch is tests/torch's
    # pytest_plugin_names_the_leaking_torch_test_at_its_line.
    env = dict(env, TENSORLEAK_OWNERS=os.path.join(SUITE, "fake_torch.rules"), TENSORLEAK_TORCH_HISTORY="1")
    r = run([py, "-m", "pytest", "--tensorleak", "--tensorleak-report", report_dir, "-p", "no:cacheprovider",
             "--junitxml", junit, "-q"] + list(extra_args) + [SUITE],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=work)
    print(r.stdout)
    check(r.returncode == 1, "pytest --tensorleak exits 1 (tests failed), got %d" % r.returncode)
    check("tensorleak: re-running pytest with libtensorleak.so preloaded" in r.stdout,
          "the plugin says it re-runs pytest under the preload")
    outcomes, messages = {}, {}
    if check(os.path.exists(junit), "the junit report exists"):
        for case in ET.parse(junit).getroot().iter("testcase"):
            failure = case.find("failure")
            name = case.get("name")
            outcomes[name] = "failed" if failure is not None else ("skipped" if case.find("skipped") is not None
                                                                    else "passed")
            messages[name] = (failure.text or "") if failure is not None else ""
    expected = {
        "test_leaks_one_mib": "failed",
        "test_frees_what_it_allocates": "passed",
        "test_leak_under_allowance": "passed",
        "test_leak_over_allowance": "failed",
        "test_segment_held_by_annotated_pool": "passed",
        "test_pool_grows_every_run[0]": "passed",
        "test_pool_grows_every_run[1]": "passed",
        "test_pool_grows_every_run[2]": "failed",
        "test_pool_grows_every_run[3]": "failed",
        "test_garbage_in_a_cycle_is_not_a_leak": "passed",
        "test_keeps_a_tensor": "failed",
        "test_drops_its_tensors": "passed",
        "test_cache_grows_on_every_repeat[1-4]": "passed",
        "test_cache_grows_on_every_repeat[2-4]": "passed",
        "test_cache_grows_on_every_repeat[3-4]": "failed",
        "test_cache_grows_on_every_repeat[4-4]": "failed",
    }
    check(outcomes == expected, "outcomes %s" % outcomes)

    test_file = os.path.join(SUITE, "test_gpu.py")
    at = lambda text: " at %s:%d" % (test_file, line_of(test_file, text))
    want = {
        "test_leaks_one_mib": "tensorleak: leaked 1.0 MiB in 1 allocation(s)%s (allowance 0 B)"
                              % at("kept.append(cuda_malloc(1 << 20))"),
        "test_leak_over_allowance": "tensorleak: leaked 1.5 MiB in 1 allocation(s)%s (allowance 1.0 MiB)"
                                    % at("kept.append(cuda_malloc(3 << 19))"),
        "test_pool_grows_every_run[2]": "tensorleak: grew 2.0 MiB per run%s (allowance 0 B)"
                                        % at("segment = cuda_malloc(2 << 20)"),
    }
    framework_file = os.path.join(SUITE, "test_framework.py")
    want["test_keeps_a_tensor"] = "tensorleak: left 1.0 MiB allocated in pool 'torch cuda:0' at %s:%d (allowance 0 B)" % (
        framework_file, line_of(framework_file, "tensors.append(torch.empty(1 << 20))"))
    repeat_file = os.path.join(SUITE, "test_repeat.py")
    want["test_cache_grows_on_every_repeat[3-4]"] = "tensorleak: grew 1.0 MiB per run at %s:%d (allowance 0 B)" % (
        repeat_file, line_of(repeat_file, "segment = cuda_malloc(1 << 20)"))
    for name, headline in want.items():
        check(messages.get(name, "").startswith(headline),
              "%s fails with %r (got %r)" % (name, headline, messages.get(name, "").splitlines()[:1]))
    check("Leak of 1.0 MiB in pool 'torch cuda:0' [pytorch]: allocated by the framework during the test" in
          messages.get("test_keeps_a_tensor", ""), "the framework pool's leak names the pool")
    check("1.0 MiB in 1 block(s) at %s:%d in test_keeps_a_tensor" % (
        framework_file, line_of(framework_file, "tensors.append(torch.empty(1 << 20))")) in
        messages.get("test_keeps_a_tensor", ""), "the framework pool's leak names the test's block")
    leak_line = line_of(test_file, "kept.append(cuda_malloc(1 << 20))")
    check("\nLeak of 1.0 MiB in 1 allocation(s) [device] at %s:%d in test_leaks_one_mib\n" % (test_file, leak_line)
          in messages.get("test_leaks_one_mib", ""), "the leak's line names its size, kind and the test's line")
    grow_line = line_of(test_file, "segment = cuda_malloc(2 << 20)")
    check("\nGrowth of 2.0 MiB per run over 3 runs: [device] held by annotated pools at %s:%d in "
          "test_pool_grows_every_run\n" % (test_file, grow_line) in messages.get("test_pool_grows_every_run[2]", ""),
          "the growth's line names its rate, runs, owner and the test's line")
    check("tensorleak: 7 test(s) left device memory allocated" in r.stdout, "the session summary counts 7 tests")
    for name in ("test_leaks_one_mib", "test_leak_over_allowance"):
        check(re.search(r"test_gpu\.py::%s: leaked" % name, r.stdout) is not None, "the summary lists %s" % name)

    kept = sorted(os.listdir(report_dir)) if os.path.isdir(report_dir) else []
    stems = sorted({os.path.splitext(f)[0] for f in kept if f.endswith((".json", ".txt"))
                    and not f.startswith("tensorleak.")})
    check(len(stems) == 7 and all(os.path.exists(os.path.join(report_dir, s + ".txt")) for s in stems),
          "--tensorleak-report keeps a JSON and a text report per failing test: %s" % kept)
    for name, stem in (("test_leaks_one_mib", "test_gpu.py_test_leaks_one_mib"),
                       ("test_pool_grows_every_run[2]", "test_gpu.py_test_pool_grows_every_run_2"),
                       ("test_keeps_a_tensor", "test_framework.py_test_keeps_a_tensor")):
        if not check(stem in stems, "the report of %s is kept" % name):
            continue
        path = os.path.join(report_dir, stem + ".json")
        r = run([tensorleak, "report", path, "--format", "text"], env=env, stdout=subprocess.PIPE, text=True)
        text = r.stdout.rstrip("\n")
        check(r.returncode == 0 and text and text in messages.get(name, ""),
              "%s's failure holds `tensorleak report --format text` of its kept report" % name)
        with open(path) as f:
            report = json.load(f)
        with open(os.path.join(report_dir, stem + ".txt")) as f:
            check(f.read().rstrip("\n") == messages.get(name, "").rstrip("\n"),
                  "%s's kept text is its failure text" % name)
        if name == "test_leaks_one_mib":
            leaks = report.get("leaks") or []
            own = (leaks[0]["stack"] or [{}])[-1] if leaks else {}
            check([(l["bytes"], l["count"]) for l in leaks] == [(1 << 20, 1)] and own.get("function") == name
                  and own.get("line") == leak_line,
                  "the kept report holds the test's leak, its stack cut at the test's own frame: %s" % own)
            r = run([tensorleak, "check", path, "--max-leaked-bytes", "0"], env=env, stdout=subprocess.PIPE, text=True)
            check(r.returncode == 1, "`tensorleak check` fails the kept report (exit %d)" % r.returncode)
        if name == "test_pool_grows_every_run[2]":
            growth = [(g.get("scope"), g.get("bytes_per_mark"), g.get("marks"), (g.get("stack") or [{}])[-1].get("line"))
                      for g in report.get("growth") or []]
            check(growth == [("call_site", 2 << 20, 3, grow_line)],
                  "the kept report's growth row is the test's: 2 MiB per run over 3 runs (%s)" % growth)


def check_pytest_gate_fallbacks(py, env, work, extra_args, cli_on_path):
    """A renderer that fails leaves a short failure text (when the plugin
    finds the CLI on PATH: `cli_on_path`); under pytest-rerunfailures a
    leaking test is rerun and then fails."""
    if cli_on_path:
        check_failing_renderer(py, env, work, extra_args)
    else:
        print("note: the package's own CLI comes first: the failing renderer was checked in tree")

    if subprocess.run([py, "-c", "import pytest_rerunfailures"], env=env, stderr=subprocess.DEVNULL).returncode != 0:
        print("note: pytest-rerunfailures is not installed for %s: the rerun was not checked" % py)
        return
    junit = os.path.join(work, "junit-rerun.xml")
    r = run([py, "-m", "pytest", "--tensorleak", "-p", "no:cacheprovider", "--reruns", "1", "--junitxml", junit]
            + list(extra_args) + [os.path.join(SUITE, "test_gpu.py"), "-k", "test_leaks_one_mib or test_frees_what_it"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=work)
    print(r.stdout[-1500:])
    failure = ET.parse(junit).getroot().find(".//failure") if os.path.exists(junit) else None
    check(r.returncode == 1 and re.search(r"1 failed, 1 passed, .*1 rerun", r.stdout) is not None and failure is not None
          and (failure.text or "").startswith("tensorleak: leaked 1.0 MiB in 1 allocation(s) at "),
          "under pytest-rerunfailures --reruns 1 the leaking test is rerun once, then fails as a leak (exit %d)"
          % r.returncode)
    check("tensorleak: 1 test(s) left device memory allocated" in r.stdout,
          "the session summary counts the rerun test once")


def check_failing_renderer(py, env, work, extra_args):
    bin_dir = os.path.join(work, "failing-cli")
    os.makedirs(bin_dir, exist_ok=True)
    fake = os.path.join(bin_dir, "tensorleak")
    with open(fake, "w") as f:
        f.write("#!/bin/sh\necho 'cannot read the report' >&2\nexit 3\n")
    os.chmod(fake, 0o755)
    junit = os.path.join(work, "junit-failing-cli.xml")
    r = run([py, "-m", "pytest", "--tensorleak", "-p", "no:cacheprovider", "--junitxml", junit, "-q"]
            + list(extra_args) + [os.path.join(SUITE, "test_gpu.py"), "-k", "test_leaks_one_mib"],
            env=dict(env, PATH=bin_dir + os.pathsep + env.get("PATH", "")), stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, cwd=work)
    failure = ET.parse(junit).getroot().find(".//failure") if os.path.exists(junit) else None
    text = (failure.text or "") if failure is not None else ""
    check(r.returncode == 1 and text.startswith("tensorleak: leaked 1.0 MiB in 1 allocation(s) at ")
          and text.rstrip().endswith("(the report's text is not shown: %s report exited with 3: cannot read the report)"
                                     % fake),
          "a CLI that fails leaves the headline and says why the report's text is missing (exit %d): %r"
          % (r.returncode, text[-300:]))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--source", required=True, help="the source tree (holds pyproject.toml)")
    parser.add_argument("--cli", required=True, help="the meson build's tensorleak CLI, for the comparison")
    parser.add_argument("--work", required=True, help="scratch directory (emptied)")
    parser.add_argument("--wheel", help="a wheel built before (skips the build)")
    parser.add_argument("--in-tree", metavar="LIBRARY",
                        help="only the pytest gate, with the package of the source tree, this library and "
                             "the simulated CUDA stack next to --cli (no wheel, no venv, no network: needs "
                             "pytest importable by this Python)")
    args = parser.parse_args()
    work = os.path.abspath(args.work)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    caller_pythonpath = env.get("PYTHONPATH")
    for var in ("LD_PRELOAD", "LD_LIBRARY_PATH", "TENSORLEAK_LIBRARY", "PYTHONPATH", "PYTEST_ADDOPTS"):
        env.pop(var, None)

    if args.in_tree:
        if subprocess.run([sys.executable, "-c", "import pytest, pytest_repeat"],
                          stderr=subprocess.DEVNULL).returncode != 0:
            print("SKIP: pytest and pytest-repeat are not installed for %s (Debian: python3-pytest, "
                  "python3-pytest-repeat)" % sys.executable)
            return 77
        sim = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(args.cli))), "sim")
        # The failure texts come from the meson build's CLI, found on PATH;
        # the caller's PYTHONPATH may add pytest plugins (pytest-rerunfailures).
        pythonpath = [os.path.join(args.source, "python")] + ([caller_pythonpath] if caller_pythonpath else [])
        env.update(PYTHONPATH=os.pathsep.join(pythonpath), TENSORLEAK_LIBRARY=os.path.abspath(args.in_tree),
                   LD_LIBRARY_PATH=sim, PATH=os.path.dirname(os.path.abspath(args.cli)) + os.pathsep + env["PATH"])
        check_site_bytes(sys.executable, env, os.path.abspath(args.in_tree), sim)
        check_pytest_gate(sys.executable, env, work, args.cli, ["-p", "tensorleak.pytest_plugin"])
        check_pytest_gate_fallbacks(sys.executable, env, work, ["-p", "tensorleak.pytest_plugin"], cli_on_path=True)
        print("%d check(s) failed" % len(failures) if failures else "all checks passed")
        return 1 if failures else 0

    # A fresh venv (Debian: python3-venv); its pip probes PyPI first.
    venv = os.path.join(work, "venv")
    run([sys.executable, "-m", "venv", venv], env=env, check=True)
    py = os.path.join(venv, "bin", "python")
    probe = run([py, "-m", "pip", "download", "-q", "--no-deps", "-d", os.path.join(work, "probe"),
                 "meson-python"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if probe.returncode != 0:
        print("SKIP: PyPI cannot be reached (the wheel build and the venv need meson-python, auditwheel, pytest)")
        return 77

    wheel = args.wheel
    if not wheel:
        started = time.monotonic()
        built = run(["sh", os.path.join(args.source, "python", "build_wheel.sh"), os.path.join(work, "whl")],
                    env=dict(env, PYTHON=sys.executable), stdout=subprocess.PIPE, text=True)
        print(built.stdout, end="")
        if not check(built.returncode == 0, "python/build_wheel.sh builds the wheel"):
            return 1
        wheel = built.stdout.strip().splitlines()[-1]
        print("wheel build: %.1f s" % (time.monotonic() - started))
    check(re.search(r"tensorleak-[\d.]+-py3-none-manylinux_2_\d+_x86_64\.whl$", wheel) is not None,
          "the wheel is tagged py3-none-manylinux_2_N (%s)" % os.path.basename(wheel))

    if run([py, "-m", "pip", "install", "-q", wheel, "pytest", "pytest-repeat", "pytest-rerunfailures"],
           env=env).returncode != 0:
        return check(False, "pip install of the wheel, pytest, pytest-repeat and pytest-rerunfailures") or 1
    site = subprocess.run([py, "-c", "import tensorleak, os; print(os.path.dirname(tensorleak.__file__))"],
                          env=env, stdout=subprocess.PIPE, text=True, check=True).stdout.strip()
    check(site.startswith(venv), "tensorleak is imported from the venv (%s)" % site)

    # Bundled dependencies: each resolves inside the venv (tensorleak.libs/).
    for binary in ("lib/libtensorleak-deps.so", "bin/tensorleak"):
        ldd = subprocess.run(["ldd", os.path.join(site, binary)], stdout=subprocess.PIPE, text=True).stdout
        for dep in ("libunwind", "libdw", "libjansson", "libZydis"):
            lines = [l for l in ldd.splitlines() if dep in l]
            if binary.startswith("bin") and dep != "libjansson":
                continue  # the CLI links jansson only
            if dep == "libZydis" and platform.machine() != "x86_64":
                continue  # the attach decoder: x86-64 only
            check(lines and all(venv in l for l in lines),
                  "%s finds %s in the wheel: %s" % (binary, dep, "; ".join(l.strip() for l in lines)))
    # The wheel's preload library, with auditwheel's bundled copies, keeps to
    # its exported names, links only libc and leaves C++ unwinding alone: the
    # cxx suite's checks, run on it (their programs are the meson build's).
    build = os.path.dirname(os.path.dirname(os.path.abspath(args.cli)))
    cxx_env = dict(env, TL_LIB=os.path.join(site, "lib", "libtensorleak.so"), TL_SIM=os.path.join(build, "sim"),
                   TL_PROGS=os.path.join(build, "tests", "cxx"), TL_SOURCE=args.source, TL_PYTHON=sys.executable)
    if os.path.exists(os.path.join(build, "tests", "cxx", "cxx_host")):
        for case in ("the_library_exports_only_the_hooks_and_the_client_api_and_links_only_libc",
                     "a_c_host_dlopening_a_cxx_plugin_locally_behaves_the_same_under_the_preload",
                     "cpython_loading_a_cxx_library_through_ctypes_behaves_the_same_under_the_preload"):
            r = run([sys.executable, os.path.join(args.source, "tests", "cxx", "cxx_test.py"), case], env=cxx_env,
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            check(r.returncode == 0, "the wheel's library: %s (%s)" % (case, r.stdout.strip().splitlines()[-1:]))
    else:
        print("note: the cxx suite's programs are not built (no C++ compiler): the wheel's library was not run with C++")

    # The proof that nothing of the system's is needed: the system copies
    # hidden (bind-mounted /dev/null in a mount namespace of its own), the
    # wheel's CLI still runs a program under its library.  Root only.
    hide = ("for f in /usr/lib/*/libunwind*.so.* /usr/lib/*/libdw*.so* /usr/lib/*/libelf*.so* "
            "/usr/lib/*/libjansson*.so.* /usr/lib/*/libZydis*.so.*; do [ -f \"$f\" ] && [ ! -L \"$f\" ] || continue; "
            "mount --bind /dev/null \"$f\" || exit 99; done; exec \"$@\"")
    if os.geteuid() == 0 and shutil.which("unshare"):
        out = os.path.join(work, "hidden.json")
        r = run(["unshare", "-m", "sh", "-c", hide, "hide", os.path.join(venv, "bin", "tensorleak"), "run", "--sim",
                 "-o", out, "--", py, os.path.join(HERE, "app.py")], env=env, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, text=True)
        if r.returncode == 99 or "unshare failed" in r.stderr:
            print("note: the run without the system's libunwind/libdw/jansson was not checked (no mount namespace)")
        else:
            check(r.returncode == 0 and "SUMMARY: tensorleak: 4194304 byte(s) leaked" in r.stderr,
                  "with the system's libunwind, libdw, libelf and jansson hidden, the wheel's run still works")

    no_preload = subprocess.run(
        [py, "-c", "import tensorleak as t; t.mark('m'); p = t.Pool('p'); p.segment(4096, 1); p.destroy();"
                   "print(t.loaded(), t.snapshot('s'), t.snapshot_to('x.json'), p.handle)"],
        env=env, stdout=subprocess.PIPE, text=True, cwd=work)
    check(no_preload.stdout.strip() == "False -1 -1 None",
          "without the preload every call is a no-op: %r" % no_preload.stdout.strip())

    # The same report from the wheel's CLI and from the meson build's.
    tensorleak = os.path.join(venv, "bin", "tensorleak")
    app = os.path.join(HERE, "app.py")
    reports = {}
    for name, cli in (("wheel", [tensorleak]), ("python-m", [py, "-m", "tensorleak"]), ("meson", [args.cli])):
        out = os.path.join(work, "%s.json" % name)
        r = run(cli + ["run", "--sim", "-o", out, "--", py, app], env=env, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, text=True)
        check(r.returncode == 0 and "served 4 requests" in r.stdout and os.path.exists(out),
              "%s: tensorleak run --sim -- python3 app.py writes %s" % (name, os.path.basename(out)))
        if os.path.exists(out):
            reports[name] = normalized_report(out)
        if name == "wheel":
            check("SUMMARY: tensorleak: 4194304 byte(s) leaked in 4 allocation(s)" in r.stderr,
                  "the wheel's run prints the leak summary (4 KV blocks)")
    if len(reports) == 3:
        check(reports["wheel"] == reports["meson"], "the wheel's report equals the meson build's")
        check(reports["python-m"] == reports["meson"], "python -m tensorleak's report equals the meson build's")
        leaks = reports["wheel"]["leaks"]
        check([(k, b, c) for k, b, c, _, _ in leaks] == [("device", 4 << 20, 4)],
              "one leak site: 4 x 1 MiB (%s)" % [(k, b, c) for k, b, c, _, _ in leaks])
    r = run([tensorleak, "report", os.path.join(work, "wheel.json"), "--format", "text"], env=env,
            stdout=subprocess.PIPE, text=True)
    check(r.returncode == 0 and "Leak of 4.0 MiB in 4 allocation(s) [device]" in r.stdout,
          "the wheel's `tensorleak report` reads the report")

    # Installed, the plugin is there for every pytest run, inert without --tensorleak.
    r = run([py, "-m", "pytest", "--markers"], env=env, stdout=subprocess.PIPE, text=True, cwd=work)
    check("@pytest.mark.limit_gpu_leaks(size)" in r.stdout, "the pytest11 entry point registers the marker")
    r = run([py, "-m", "pytest", "--help"], env=env, stdout=subprocess.PIPE, text=True, cwd=work)
    check(all(o in r.stdout for o in ("--tensorleak ", "--tensorleak-limit=SIZE", "--tensorleak-report=DIR",
                                      "--tensorleak-sim")), "pytest --help lists the plugin's options")
    check_site_bytes(py, env, os.path.join(site, "lib", "libtensorleak.so"), os.path.join(site, "lib", "tensorleak", "sim"))
    check_pytest_gate(py, env, work, tensorleak, ["--tensorleak-sim"])
    check_pytest_gate_fallbacks(py, env, work, ["--tensorleak-sim"], cli_on_path=False)

    print("%d check(s) failed" % len(failures) if failures else "all checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
