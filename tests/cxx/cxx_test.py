#!/usr/bin/env python3
"""C++ unwinding under the preload, and what libtensorleak.so brings into a
process.

A preloaded library and its dependencies come first in the global scope; if
any of them defined the C++ unwinding ABI (libunwind does), libstdc++ loaded
later would unwind with it: an exception out of std::call_once aborted, a
thread ending in pthread_exit skipped its destructors.  Each program here
runs once on the simulated stack alone and once under libtensorleak.so, and
must print the same and exit the same; under the preload it must also be
tracked (one kept 1 MiB allocation in the exit report).

    cxx_test.py NAME       (meson runs one test per process)
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import scratch  # noqa: E402

scratch.use()

LIB = os.environ["TL_LIB"]
SIM = os.environ["TL_SIM"]
PROGS = os.environ["TL_PROGS"]
SOURCE = os.environ["TL_SOURCE"]
PYTHON = os.environ.get("TL_PYTHON", sys.executable)
MiB = 1 << 20

CASES = ["cxx_plain_throw", "cxx_call_once_throw", "cxx_rethrow_across_libraries",
         "cxx_pthread_exit_runs_destructors", "cxx_pthread_cancel_runs_destructors"]


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def run(argv, preload):
    tmp = tempfile.mkdtemp(prefix="tl-cxx-")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TENSORLEAK_", "LD_PRELOAD"))}
    env["LD_LIBRARY_PATH"] = SIM + ":" + PROGS
    env["TENSORLEAK_OUTPUT"] = os.path.join(tmp, "tl.%p.json")
    if preload:
        env["LD_PRELOAD"] = LIB
    p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    reports = []
    for name in sorted(os.listdir(tmp)):
        with open(os.path.join(tmp, name)) as f:
            reports.append(json.load(f))
    return p, reports


def same_with_and_without(argv, expect_lines):
    """Runs argv bare and preloaded; both must exit 0 with the same output,
    which holds every line of expect_lines; the preloaded run's report holds
    the one kept allocation."""
    bare, bare_reports = run(argv, preload=False)
    check(bare.returncode == 0, f"without tensorleak: exit {bare.returncode}\n{bare.stdout}{bare.stderr}")
    check(not bare_reports, "a report without the preload")
    for line in expect_lines:
        check(line in bare.stdout.splitlines(), f"without tensorleak: no line {line!r} in\n{bare.stdout}")
    pre, reports = run(argv, preload=True)
    check(pre.returncode == bare.returncode,
          f"exit {pre.returncode} under the preload, {bare.returncode} without\n{pre.stdout}{pre.stderr}")
    check(pre.stdout == bare.stdout, f"output differs under the preload:\n--- without\n{bare.stdout}--- with\n{pre.stdout}")
    check(len(reports) == 1 and reports[0]["reason"] == "exit", f"expected one exit report, got {len(reports)}")
    s = reports[0]["summary"]
    check((s["leaked_allocations"], s["leaked_bytes"]) == (1, MiB),
          f"expected 1 leak of {MiB} B, got {s['leaked_allocations']} of {s['leaked_bytes']} B")
    warnings = [l for l in pre.stderr.splitlines() if l.startswith("tensorleak:")]
    check(not warnings, f"tensorleak warned under the preload: {warnings}")


CASE_LINES = [f"{c}: ok" for c in CASES] + [
    "pthread_exit: guard destroyed", "pthread_cancel: guard destroyed", "call_once threw: once",
    "call_once ran 2 times", "rethrow across libraries caught: inner", "plain throw caught: plain"]
# Without the preload none of these is in the global scope of a C program
# that dlopen()s C++ locally; under it, none may appear.
NOT_GLOBAL = ["_Unwind_RaiseException", "_Unwind_Resume", "_Unwind_ForcedUnwind", "unw_backtrace",
              "dwfl_begin", "elf_begin", "json_object", "lzma_code", "BZ2_bzDecompress"]


def a_c_host_dlopening_a_cxx_plugin_locally_behaves_the_same_under_the_preload():
    same_with_and_without([os.path.join(PROGS, "cxx_host"), os.path.join(PROGS, "libcxx_plugin.so"), "RTLD_LOCAL"],
                          CASE_LINES + [f"{n}: not in the global scope" for n in NOT_GLOBAL])


def a_c_host_dlopening_a_cxx_plugin_globally_behaves_the_same_under_the_preload():
    # RTLD_GLOBAL puts libstdc++ and libgcc_s in the global scope: the
    # unwinding ABI then resolves to libgcc_s, with or without us.
    argv = [os.path.join(PROGS, "cxx_host"), os.path.join(PROGS, "libcxx_plugin.so"), "RTLD_GLOBAL"]
    same_with_and_without(argv, CASE_LINES + ["_Unwind_RaiseException: libgcc_s.so.1", "json_object: not in the global scope"])


def cpython_loading_a_cxx_library_through_ctypes_behaves_the_same_under_the_preload():
    same_with_and_without([PYTHON, os.path.join(SOURCE, "tests", "cxx", "app.py"),
                           os.path.join(PROGS, "libcxx_plugin.so"), "libcudart.so.13"], CASE_LINES)


def a_cxx_program_linked_normally_behaves_the_same_under_the_preload():
    same_with_and_without([os.path.join(PROGS, "cxx_prog")],
                          ["main caught: from main", "6 of 6 cases ok", "pthread_exit: guard destroyed"])


def the_librarys_json_names_a_locally_loaded_cxx_frame_demangled_with_its_raw_symbol():
    """A C host dlopen()s the C++ plugin RTLD_LOCAL (as CPython loads torch):
    libstdc++ is loaded but not in the global scope.  The report's frame of
    the plugin's allocating function is demangled in `function`, raw in
    `symbol` (docs/report-format.md), as the CLI writes it."""
    p, reports = run([os.path.join(PROGS, "cxx_host"), os.path.join(PROGS, "libcxx_plugin.so"), "RTLD_LOCAL",
                      "keep-in-plugin"], preload=True)
    check(p.returncode == 0, f"exit {p.returncode}\n{p.stdout}{p.stderr}")
    check(len(reports) == 1 and len(reports[0]["leaks"]) == 1, f"expected one leak in one report, got {reports}")
    top = reports[0]["leaks"][0]["stack"][:2]
    got = [(f.get("function"), f.get("symbol")) for f in top]
    check(got == [("cxx_plugin::keep_device(unsigned int)", "_ZN10cxx_plugin11keep_deviceEj"), ("cxx_keep_device", None)],
          f"first two frames (function, symbol): {got}")


def exported_symbols(lib):
    out = subprocess.run(["readelf", "--dyn-syms", "-W", lib], capture_output=True, text=True, check=True).stdout
    names = set()
    for line in out.splitlines():
        f = line.split()
        # Num: Value Size Type Bind Vis Ndx Name
        if len(f) >= 8 and f[0][:-1].isdigit() and f[4] != "LOCAL" and f[6] != "UND":
            names.add(f[7].split("@")[0])
    return names


def needed(lib):
    out = subprocess.run(["readelf", "-d", "-W", lib], capture_output=True, text=True, check=True).stdout
    return [line.split("[", 1)[1].rstrip("]") for line in out.splitlines() if "(NEEDED)" in line]


def check_library(lib, expected_needed):
    with open(os.path.join(SOURCE, "src", "preload", "exported_symbols.txt")) as f:
        kept = {l.strip() for l in f if l.strip() and not l.startswith("#")}
    got = exported_symbols(lib)
    check(got - kept == set(), f"{lib} exports names outside src/preload/exported_symbols.txt: {sorted(got - kept)}")
    check(kept - got == set(), f"src/preload/exported_symbols.txt lists names {lib} does not export: {sorted(kept - got)}")
    deps = needed(lib)
    check(set(deps) <= expected_needed, f"{lib} links {deps}; only {sorted(expected_needed)} may be linked")
    print(f"{lib}: {len(got)} exported names, all listed; links {deps}")


def the_library_exports_only_the_hooks_and_the_client_api_and_links_only_libc():
    check_library(LIB, {"libc.so.6", "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1"})
    deps_lib = os.path.join(os.path.dirname(LIB), "libtensorleak-deps.so")
    exported = exported_symbols(deps_lib)
    check(exported == {"tl_private_deps_version"},
          f"libtensorleak-deps.so exports {sorted(exported)}, not only its version")
    check(any(n.startswith("libunwind") for n in needed(deps_lib)), "libtensorleak-deps.so does not link libunwind")


def a_missing_deps_library_leaves_the_program_untracked_with_one_warning():
    # A copy of libtensorleak.so alone, without libtensorleak-deps.so beside it.
    tmp = tempfile.mkdtemp(prefix="tl-cxx-alone-")
    alone = os.path.join(tmp, "libtensorleak.so")
    with open(LIB, "rb") as src, open(alone, "wb") as dst:
        dst.write(src.read())
    out = os.path.join(tmp, "tl.%p.json")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TENSORLEAK_")}
    env.update(LD_LIBRARY_PATH=SIM + ":" + PROGS, LD_PRELOAD=alone, TENSORLEAK_OUTPUT=out)
    p = subprocess.run([os.path.join(PROGS, "cxx_prog")], env=env, capture_output=True, text=True, timeout=120)
    check(p.returncode == 0, f"exit {p.returncode}: {p.stdout}{p.stderr}")
    check("6 of 6 cases ok" in p.stdout, p.stdout)
    warnings = [l for l in p.stderr.splitlines() if l.startswith("tensorleak:")]
    check(len(warnings) == 1 and "libtensorleak-deps.so" in warnings[0] and "not tracking" in warnings[0],
          f"expected one warning naming libtensorleak-deps.so, got {warnings}")
    check(sorted(os.listdir(tmp)) == ["libtensorleak.so"], f"files written untracked: {os.listdir(tmp)}")
    # A program that never reaches CUDA (a shell in front of the real one)
    # is not told.
    quiet = subprocess.run(["sh", "-c", "exit 7"], env=env, capture_output=True, text=True, timeout=120)
    check(quiet.returncode == 7 and quiet.stderr == "", f"a program without CUDA: exit {quiet.returncode}, {quiet.stderr!r}")


if __name__ == "__main__":
    globals()[sys.argv[1]]()
    print("ok")
