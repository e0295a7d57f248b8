#!/usr/bin/env python3
"""Python frames in allocation stacks, and C++ demangling.

Each test runs leaky_app.py (or a C program) under libtensorleak.so on the
simulated runtime and checks the report exactly: the Python functions, this
directory's file and the marked lines, innermost first, merged with the
native frames where the interpreter runs them.  meson runs one test per
process: `test_pyframes.py NAME`.  Exit 77 = skipped (meson shows SKIP).
"""
import glob
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import scratch  # noqa: E402

scratch.use()

HERE = os.path.dirname(os.path.abspath(__file__))
APP = os.path.join(HERE, "leaky_app.py")
LIB = os.environ["TL_LIB"]
SIM = os.environ["TL_SIM"]
PYCB = os.environ.get("TL_PYCB", "")
DEMANGLE_PROG = os.environ.get("TL_DEMANGLE_PROG", "")
SAMPLES = os.environ.get("TL_SAMPLES", "")
CLI = os.environ.get("TL_CLI", "")
MiB = 1 << 20
RUN_TIMEOUT_S = 200


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def eq(actual, expected, what):
    if actual != expected:
        fail(f"{what}: expected {expected!r}, got {actual!r}")


def line_of(marker, path=APP):
    with open(path) as f:
        for n, text in enumerate(f, 1):
            if "# " + marker in text or "/* " + marker in text:
                return n
    raise AssertionError(marker)


def run(argv, env=None):
    tmp = tempfile.mkdtemp(prefix="tl-py-")
    e = {k: v for k, v in os.environ.items() if not k.startswith("TENSORLEAK_")}
    e.update({"LD_LIBRARY_PATH": SIM, "LD_PRELOAD": LIB, "TL_PYCB": PYCB,
              "TENSORLEAK_OUTPUT": os.path.join(tmp, "tl.%p.json")})
    e.update(env or {})
    # A hang is told by this bound alone.  The longest case here (a fork
    # case, its programs run under every CPython found) takes about 13 s in
    # all on a loaded 2-core machine: the bound on each of its programs is
    # more than ten times that, and meson's 300 s bounds the whole case.
    p = subprocess.run(argv, env=e, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    exits = []
    for name in sorted(os.listdir(tmp)):
        with open(os.path.join(tmp, name)) as f:
            r = json.load(f)
        if r.get("reason") == "exit":
            exits.append(r)
            p.report_path = os.path.join(tmp, name)
    check(len(exits) == 1, f"one exit report expected, got {len(exits)}; rc {p.returncode}: {p.stderr}")
    return p, exits[0]


def python_frames(stack):
    """(function, basename, line) of the Python frames, innermost first;
    comprehension frames (their own frame before 3.12 only) left out."""
    out = []
    for f in stack:
        if f.get("python"):
            check("address" not in f and "offset" not in f, f"a Python frame has an address: {f}")
            if "<listcomp>" in f["function"]:
                continue
            out.append((f["function"], os.path.basename(f["file"]), f["line"]))
    return out


def app_frames(stack):
    return [f for f in python_frames(stack) if f[1] == "leaky_app.py"]


def expect_batch_stack(stack, outer, what):
    eq(app_frames(stack)[:3 + len(outer)],
       [("allocate_block", "leaky_app.py", line_of("ALLOC-LINE")),
        ("serve_request", "leaky_app.py", line_of("SERVE-LINE")),
        ("handle_batch", "leaky_app.py", line_of("BATCH-LINE"))] + outer, what)


def core_case(python):
    p, rep = run([python, APP, "cdll"])
    eq(p.returncode, 0, "exit status: " + p.stderr)
    leaks = [l for l in rep["leaks"] if not l["suppressed"]]
    eq([(l["bytes"], l["count"]) for l in leaks], [(4 * MiB, 4)], f"{python}: leaks")
    stack = leaks[0]["stack"]
    expect_batch_stack(stack, [("main", "leaky_app.py", line_of("MAIN-LINE")),
                               ("<module>", "leaky_app.py", line_of("MODULE-LINE"))], f"{python}: Python frames")
    # Native frames first (the runtime call through libffi), then Python.
    first_py = next(i for i, f in enumerate(stack) if f.get("python"))
    check(first_py > 0 and all("address" in f for f in stack[:first_py]), f"{python}: native frames before Python")
    eq(rep["tracker"].get("python_stacks_unreadable"), 0, "unreadable chains")
    eq(rep["tracker"].get("python_stacks"), 1, "distinct stacks with Python frames")
    return p, rep


def ctypes_cdll_leak_is_named_at_the_python_line_with_its_callers():
    p, rep = core_case(sys.executable)
    line = line_of("ALLOC-LINE")
    check(f"in allocate_block {APP}:{line} [python]" in p.stderr, "text report frame line:\n" + p.stderr)
    check(f"in main {APP}:{line_of('MAIN-LINE')} [python]" in p.stderr, p.stderr)


def ctypes_pydll_with_the_gil_held_names_the_same_lines():
    p, rep = run([sys.executable, APP, "pydll"])
    leaks = rep["leaks"]
    eq([(l["bytes"], l["count"]) for l in leaks], [(4 * MiB, 4)], "leaks")
    expect_batch_stack(leaks[0]["stack"], [("main", "leaky_app.py", line_of("MAIN-LINE"))], "Python frames")


def an_allocation_from_a_python_thread_names_the_thread_function():
    p, rep = run([sys.executable, APP, "thread"])
    leaks = rep["leaks"]
    eq([(l["bytes"], l["count"]) for l in leaks], [(4 * MiB, 2)], "leaks")
    stack = leaks[0]["stack"]
    expect_batch_stack(stack, [("in_thread", "leaky_app.py", line_of("THREAD-LINE"))], "Python frames")
    names = [f[0] for f in python_frames(stack)]
    check("Thread.run" in names or "run" in names, f"threading's frames below: {names}")


def python_c_python_callback_frames_interleave_in_order():
    if not PYCB:
        sys.exit(77)
    p, rep = run([sys.executable, APP, "callback"])
    leaks = rep["leaks"]
    eq([(l["bytes"], l["count"]) for l in leaks], [(3 * MiB, 1)], "leaks")
    stack = leaks[0]["stack"]
    def where(pred, what):
        for i, f in enumerate(stack):
            if pred(f):
                return i
        fail(f"{what} not on the stack: {json.dumps(stack, indent=1)}")
    i_alloc = where(lambda f: f.get("function") == "allocate_block", "allocate_block")
    i_cb = where(lambda f: f.get("function") == "on_callback", "on_callback")
    i_lambda = where(lambda f: f.get("python") and "<lambda>" in f["function"], "the lambda")
    i_c = where(lambda f: f.get("function") == "pyframes_call_back", "the C library's frame")
    i_outer = where(lambda f: f.get("function") == "via_c_library", "via_c_library")
    i_main = where(lambda f: f.get("function") == "main" and f.get("python"), "main")
    check(i_alloc < i_cb < i_lambda < i_c < i_outer < i_main, f"order {[i_alloc, i_cb, i_lambda, i_c, i_outer, i_main]}")
    eq([stack[i]["line"] for i in (i_alloc, i_cb, i_lambda, i_outer, i_main)],
       [line_of("ALLOC-LINE"), line_of("CALLBACK-LINE"), line_of("LAMBDA-LINE"), line_of("HELPER-LINE"),
        line_of("MAIN-CB-LINE")], "lines")
    # Between the two runs of Python frames only native frames.
    check(all(not f.get("python") for f in stack[i_lambda + 1:i_outer]), "native frames between the runs")


def a_suppression_by_python_file_suppresses_the_leak():
    with tempfile.NamedTemporaryFile("w", suffix=".supp", delete=False) as f:
        f.write("leak:*leaky_app.py\n")
    p, rep = run([sys.executable, APP, "suppressed"], env={"TENSORLEAK_SUPPRESSIONS": f.name})
    eq([(l["bytes"], l["suppressed"]) for l in rep["leaks"]], [(4 * MiB, True)], "suppressed leaks")
    eq(rep["summary"]["leaked_bytes"], 0, "leaked bytes")
    with tempfile.NamedTemporaryFile("w", suffix=".supp", delete=False) as f:
        f.write("leak:serve_request\n")
    p, rep = run([sys.executable, APP, "suppressed"], env={"TENSORLEAK_SUPPRESSIONS": f.name})
    eq(rep["summary"]["leaked_bytes"], 0, "suppressed by a Python function name")
    with tempfile.NamedTemporaryFile("w", suffix=".supp", delete=False) as f:
        f.write("leak:*other_app.py\n")
    p, rep = run([sys.executable, APP, "suppressed"], env={"TENSORLEAK_SUPPRESSIONS": f.name})
    eq(rep["summary"]["leaked_bytes"], 4 * MiB, "another file's rule suppresses nothing")


def unwound_once(rep, allocations, python_stacks):
    """The tracker of a loop of `allocations` from one stack: libunwind ran
    once, the run that refused the frame-pointer walk and confirmed the
    call-frame-table walk.  A failure names the counter that says why."""
    t = rep["tracker"]
    why = {
        "cfi_walks_contradicted": "the call-frame-table walk was wrong, so libunwind gives every stack",
        "walk_verdicts_evicted": "a walk's verdict was pushed out of the thread's cache, so its stack was unwound again",
        "python_stacks_unreadable": "a Python frame chain failed its checks",
    }
    for name, meaning in why.items():
        check(t[name] == 0, f"tracker {name} {t[name]}: {meaning} (stacks_unwound {t['stacks_unwound']} "
              f"for {allocations} allocations; tracker {t})")
    eq(t["python_stacks"], python_stacks, "tracker python_stacks")
    check(t["stacks_unwound"] == 1,
          f"tracker stacks_unwound {t['stacks_unwound']} for {allocations} allocations, expected 1: a walk was "
          f"seen without a verdict although none was evicted (a walk that differs from capture to capture?); "
          f"tracker {t}")


def a_python_loop_is_unwound_by_libunwind_once_not_per_allocation():
    # libpython, libffi and _ctypes have no frame pointers: the stack is
    # walked from the call-frame tables.  The one libunwind run refuses the
    # frame-pointer walk and confirms the call-frame-table walk.
    p, rep = run([sys.executable, APP, "loop"])
    unwound_once(rep, 200, 1)
    eq(rep["summary"]["leaked_bytes"], 0, "every block freed")


def a_subinterpreter_allocation_is_reported_never_a_crash():
    # From 3.12 the thread's current thread state is the sub-interpreter's:
    # its frames are named (the calling interpreter's are not joined).
    # Before, the thread's bound state is the main interpreter's: its
    # frames are named.  Either way the leak is reported and nothing fails.
    prog = os.path.join(HERE, "subinterp_app.py")
    for exe, v in pythons().items():
        p, rep = run([exe, prog])
        eq(p.returncode, 0, f"{exe}: exit status: {p.stderr}")
        leaks = rep["leaks"]
        eq([(l["bytes"], l["count"]) for l in leaks], [(2 << 20, 1)], f"{exe}: leaks")
        names = [f[0] for f in python_frames(leaks[0]["stack"])]
        want = "sub_alloc" if tuple(map(int, v.split("."))) >= (3, 12) else "run_in_subinterpreter"
        check(want in names, f"{exe}: {want} in {names}")
        eq(rep["tracker"]["python_stacks_unreadable"], 0, f"{exe}: unreadable chains")


def native_code_without_frame_pointers_is_unwound_once_per_stack():
    p, rep = run([os.environ["TL_NOFP_PROG"]])
    unwound_once(rep, 200, 0)
    eq(rep["summary"]["leaked_bytes"], 0, "every block freed")


def a_frame_keeping_data_in_rbp_is_unwound_once_not_per_allocation():
    # The frame-pointer walk differs at every allocation (rbp_data_prog.c):
    # judged only on its own, it would be a first sight every time.
    p, rep = run([os.environ["TL_RBP_DATA_PROG"]])
    eq(p.returncode, 0, f"exit status ({p.stderr})")
    unwound_once(rep, 200, 0)
    eq([(l["count"], l["bytes"]) for l in rep["leaks"]], [(1, 4096)], "the last block, left allocated")
    eq([f.get("function") for f in rep["leaks"][0]["stack"][:3]], ["allocate", "call_with_rbp", "main"],
       "the leak's stack (libunwind's frames, not the record's)")


def growth_and_owner_rules_see_python_frames():
    p, rep = run([sys.executable, APP, "growth"])
    growth = rep["growth"]
    eq(len(growth), 1, "growth rows")
    eq(growth[0]["bytes_per_mark"], 1 << 20, "growth per mark")
    eq(app_frames(growth[0]["stack"])[:2],
       [("allocate_block", "leaky_app.py", line_of("ALLOC-LINE")), ("serve_request", "leaky_app.py", line_of("SERVE-LINE"))],
       "growth stack")
    check(f"in serve_request {APP}:{line_of('SERVE-LINE')} [python]" in p.stderr, p.stderr)
    # An owner rule on the Python file: the blocks are that owner's cache.
    with tempfile.NamedTemporaryFile("w", suffix=".rules", delete=False) as f:
        f.write("owner:app cache:cache:device:*/leaky_app.py\n")
    p, rep = run([sys.executable, APP, "cdll"], env={"TENSORLEAK_OWNERS": f.name})
    eq(rep["summary"]["leaked_bytes"], 0, "held, not leaked")
    eq([(h["owner"], h["bytes"]) for h in rep["held"]], [("app cache", 4 * MiB)], "held by the rule's owner")


def functions_made_and_freed_at_run_time_keep_their_own_names():
    # Code objects and their names are freed and made again at the same
    # addresses; a location cache keyed on pointers alone named 40 such
    # functions with 5 names.
    p, r = run([sys.executable, os.path.join(HERE, "recreated_code_app.py")])
    eq(p.returncode, 0, f"exit status ({p.stderr})")
    names = {}
    for site in r["leaks"]:
        fr = [f for f in site["stack"] if f.get("python") and f["file"] == "<generated>"]
        check(len(fr) == 1, f"one generated frame per site: {site['stack']}")
        names[fr[0]["function"]] = names.get(fr[0]["function"], 0) + site["count"]
    eq(names, {"g%d" % k: 1 for k in range(40)}, "allocations per generated function")


def pythons():
    """Every CPython 3.9-3.13 on this machine: pyenv's, and the system's
    (Debian's links libpython into the executable)."""
    found = {}
    roots = [os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv")) + "/versions"]
    for exe in sorted(glob.glob(roots[0] + "/3.*/bin/python3")) + sorted(glob.glob("/usr/bin/python3.*")):
        if not os.access(exe, os.X_OK) or exe.endswith("-config"):
            continue
        try:
            v = subprocess.run([exe, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                               capture_output=True, text=True, timeout=20).stdout.strip()
        except OSError:
            continue
        if v in ("3.9", "3.10", "3.11", "3.12", "3.13"):
            found[exe] = v
    return found


def every_installed_python_3_9_to_3_13_names_the_line():
    found = pythons()
    check(found, "no CPython 3.9-3.13 found")
    for exe, v in found.items():
        core_case(exe)
        print(f"ok: {exe} ({v})")


def no_python_in_the_process_leaves_the_stack_native():
    p, rep = run([os.path.join(SAMPLES, "leaky_inference")])
    for l in rep["leaks"]:
        check(all("address" in f and not f.get("python") for f in l["stack"]), "native frames only")
    eq(rep["leaks"][0]["stack"][0]["function"], "kv_cache_append", "innermost frame")
    eq(rep["tracker"].get("python_stacks"), 0, "no Python stacks")
    check("[python]" not in p.stderr, p.stderr)


def cxx_names_are_demangled_in_text_and_json_with_the_raw_symbol_kept():
    p, rep = run([DEMANGLE_PROG])
    # The default owner rules know this name (demangled) as PyTorch's cache.
    sites = rep["leaks"] + rep.get("held", [])
    eq(len(sites), 1, "call sites")
    eq(sites[0].get("owner"), "PyTorch caching allocator", "owner by the demangled name")
    stack = sites[0]["stack"]
    want = ("c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::alloc_block("
            "c10::cuda::CUDACachingAllocator::Native::(anonymous namespace)::AllocParams&, bool, "
            "std::shared_ptr<c10::GatheredContext> const&, std::unique_lock<std::recursive_mutex>&)")
    eq(stack[0]["function"], want, "demangled function")
    eq(stack[0]["symbol"], MANGLED, "raw symbol")
    check("symbol" not in stack[1], "a C name has no symbol field: %r" % stack[1])
    # The text report prints leaks only: the CLI's text format shows held
    # sites, from the JSON.
    if CLI:
        out = subprocess.run([CLI, "report", "--format", "text", p.report_path], capture_output=True, text=True).stdout
        check(MANGLED not in out, "mangled name printed by the CLI:\n" + out)


MANGLED = ("_ZN3c104cuda20CUDACachingAllocator6Native22DeviceCachingAllocator11alloc_blockERNS2_12_GLOBAL__N_1"
           "11AllocParamsEbRKSt10shared_ptrINS_15GatheredContextEERSt11unique_lockISt15recursive_mutexE")


def cuda_bindings_from_pypi_names_the_test_line():
    try:
        subprocess.run([sys.executable, "-c", "import cuda.bindings.driver"], check=True, capture_output=True,
                       timeout=60)
    except subprocess.CalledProcessError:
        print("SKIP: cuda-bindings is not installed (pip install cuda-bindings)")
        sys.exit(77)
    prog = os.path.join(HERE, "cuda_bindings_app.py")
    p, rep = run([sys.executable, prog])
    eq(p.returncode, 0, "exit status: " + p.stdout + p.stderr)
    leaks = rep["leaks"]
    eq([(l["bytes"], l["count"]) for l in leaks], [(5 * MiB, 1)], "leaks")
    frames = [f for f in python_frames(leaks[0]["stack"]) if f[1] == "cuda_bindings_app.py"]
    eq(frames[0], ("leak_through_the_driver", "cuda_bindings_app.py", line_of("CUMEMALLOC-LINE", prog)),
       "innermost frame of the test's own file")


def cli_prints_python_frames_and_demangles_names_of_older_reports():
    p, rep = run([sys.executable, APP, "cdll"])
    out = subprocess.run([CLI, "report", "--format", "text", p.report_path], capture_output=True, text=True)
    eq(out.returncode, 0, "report --format text: " + out.stderr)
    check(f"in allocate_block {APP}:{line_of('ALLOC-LINE')} [python]" in out.stdout, out.stdout)
    for fmt in ("json", "folded", "html", "sarif"):
        r = subprocess.run([CLI, "report", "--format", fmt, p.report_path], capture_output=True, text=True)
        eq(r.returncode, 0, f"report --format {fmt}: {r.stderr}")
        if fmt in ("folded", "html", "sarif"):
            check("allocate_block" in r.stdout, f"{fmt} names the Python function")
    # SARIF points at the program's Python line, not at ctypes' C source.
    r = subprocess.run([CLI, "report", "--format", "sarif", p.report_path], capture_output=True, text=True)
    loc = json.loads(r.stdout)["runs"][0]["results"][0]["locations"][0]["physicalLocation"]
    eq((loc["artifactLocation"]["uri"].endswith("/leaky_app.py"), loc["region"]["startLine"]),
       (True, line_of("ALLOC-LINE")), "SARIF location")
    # A report written before demangling: "function" holds the raw symbol.
    for leak in rep["leaks"]:
        leak["stack"][0]["function"] = MANGLED
    old = p.report_path + ".old.json"
    with open(old, "w") as f:
        json.dump(rep, f)
    out = subprocess.run([CLI, "report", "--format", "text", "--frames", "all", old], capture_output=True, text=True)
    eq(out.returncode, 0, "report of the older file: " + out.stderr)
    check("DeviceCachingAllocator::alloc_block(" in out.stdout and MANGLED not in out.stdout, out.stdout)


HOSTILE = os.path.join(HERE, "hostile_app.py")


def hostile(python, mode):
    p, rep = run([python, HOSTILE, mode])
    eq(p.returncode, 0, f"{python} {mode}: exit status: {p.stdout} {p.stderr}")
    return p, rep


def hostile_frames(stack):
    return [f for f in python_frames(stack) if f[1] == "hostile_app.py"]


def generator_coroutine_and_c_thread_allocations_name_their_lines():
    alloc = ("alloc", "hostile_app.py", line_of("H-ALLOC", HOSTILE))
    _, rep = hostile(sys.executable, "generator")
    eq([(l["bytes"], l["count"]) for l in rep["leaks"]], [(2 * MiB, 2)], "generator leaks")
    eq(hostile_frames(rep["leaks"][0]["stack"])[:2],
       [alloc, ("gen_blocks", "hostile_app.py", line_of("H-GEN", HOSTILE))], "generator frames")
    _, rep = hostile(sys.executable, "coroutine")
    eq([(l["bytes"], l["count"]) for l in rep["leaks"]], [(2 * MiB, 1)], "coroutine leaks")
    eq(hostile_frames(rep["leaks"][0]["stack"])[:2],
       [alloc, ("coro_block", "hostile_app.py", line_of("H-CORO", HOSTILE))], "coroutine frames")
    # A thread pthread_create'd by C: no Python frames before and after its
    # callback (no thread state), the callback's own frames during it.
    _, rep = hostile(sys.executable, "c_thread")
    leaks = sorted(((l["bytes"], l["count"], tuple(hostile_frames(l["stack"]))) for l in rep["leaks"]))
    eq(leaks, [(3 * MiB, 1, (alloc, ("on_c_thread", "hostile_app.py", line_of("H-CTHREAD", HOSTILE)))),
               (5 * MiB, 1, ()), (5 * MiB, 1, ())], "C thread leaks")
    eq(rep["tracker"].get("python_stacks_unreadable"), 0, "unreadable chains")


def a_fork_while_another_thread_resolves_python_frames_does_not_hang_the_child():
    # Without the fork handlers of pyframes.c about 1 child in 5 hung.
    for exe in [sys.executable] + [e for e in pythons() if e != sys.executable]:
        hostile(exe, "fork_while_resolving")
        p, rep = hostile(exe, "fork")
        eq([(l["bytes"], l["count"]) for l in rep["leaks"]], [(6 * MiB, 1)], f"{exe}: parent's leaks")
        print(f"ok: {exe}")


def daemon_threads_allocating_while_the_interpreter_finalizes_never_crash():
    for exe in [sys.executable] + [e for e in pythons() if e != sys.executable]:
        for _ in range(5):
            hostile(exe, "finalizing")
        print(f"ok: {exe}")


# ---- stacks found the same as the thread's last one (the capture memo) ----
# A capture that finds the thread's last native walk and Python chain again
# reuses that capture's frames and call site (stack.c, cfi_walk.c,
# pyframes.c).  memo_app.py makes stacks that differ from the one before in
# one place only; each case runs under every CPython 3.9-3.13 found, whose
# frames are read on different paths (frame objects, 3.11's entry frames,
# 3.12+'s shim frames and owner bytes).
MEMO_APP = os.path.join(HERE, "memo_app.py")
MEMO_FILES = ("memo_app.py", "gen_a.py", "gen_b.py", "<generated>")


def every_python():
    return [sys.executable] + [e for e in pythons() if e != sys.executable]


def ml(marker):
    return line_of(marker, MEMO_APP)


def at(function, marker):
    return (function, "memo_app.py", ml(marker))


def memo_tail():
    return [at("main", "M-MAIN"), at("<module>", "M-MODULE")]


def memo_sites(python, mode, native_key=None):
    """{(kind, Python frames of this test's files, innermost first[,
    native_key(stack)]): [bytes, count]} summed over the report's sites: the
    interpreter specializes an instruction after a few runs and then reaches
    the driver through other native frames, so one Python stack can be a
    few sites; the Python frames and the counts are what must be right."""
    p, rep = run([python, MEMO_APP, mode])
    eq(p.returncode, 0, f"{python} {mode}: exit status: {p.stdout} {p.stderr}")
    eq(rep["tracker"].get("python_stacks_unreadable"), 0, f"{python} {mode}: unreadable chains")
    out = {}
    for l in rep["leaks"]:
        frames = tuple(f for f in python_frames(l["stack"]) if f[1] in MEMO_FILES)
        key = (l["kind"], frames) + ((native_key(l["stack"]),) if native_key else ())
        got = out.setdefault(key, [0, 0])
        got[0] += l["bytes"]
        got[1] += l["count"]
    return out


def expect_sites(python, mode, want):
    got = memo_sites(python, mode)
    want = {(k[0], tuple(k[1])): list(v) for k, v in want.items()}
    if got != want:
        lines = [f"{python} {mode}: leaks per Python stack differ"]
        for k in sorted(set(got) | set(want), key=repr):
            lines.append(f"  want {want.get(k)} got {got.get(k)}: {k}")
        fail("\n".join(lines))
    print(f"ok: {python} {mode}")


def dev(*frames):
    return ("device", tuple(frames))


def a_loop_allocating_from_two_lines_in_turn_counts_each_line():
    # One function, lines A and B in the order AABABBBAABABA: a capture at
    # B right after one at A (and back) finds every frame where it was but
    # the innermost one's instruction.
    for exe in every_python():
        outer = [at("lines", "M-LINES")] + memo_tail()
        expect_sites(exe, "lines", {
            dev(at("two_lines", "M-LINE-A"), *outer): (7 * MiB, 7),
            dev(at("two_lines", "M-LINE-B"), *outer): (12 * MiB, 6)})


def a_caller_line_that_changes_one_two_or_three_frames_out_gives_its_own_stack():
    # g() allocates at one line from a frame at the same address each
    # time; only the line of a caller 1, 2 or 3 frames out changes.
    g = at("g", "M-G")
    for exe in every_python():
        outer = [at("caller_line", "M-CALLER")] + memo_tail()
        expect_sites(exe, "caller_line", {
            dev(g, at("f", "M-F-X"), *outer): (21 * MiB, 7),
            dev(g, at("f", "M-F-Y"), *outer): (18 * MiB, 6)})
        two = [at("caller_far", "M-FAR-TWO")] + memo_tail()
        three = [at("caller_far", "M-FAR-THREE")] + memo_tail()
        mid1, mid2 = at("mid1", "M-MID1"), at("mid2", "M-MID2")
        expect_sites(exe, "caller_far", {
            dev(g, mid1, at("two_out", "M-TWO-X"), *two): (21 * MiB, 7),
            dev(g, mid1, at("two_out", "M-TWO-Y"), *two): (18 * MiB, 6),
            dev(g, mid1, mid2, at("three_out", "M-THREE-X"), *three): (21 * MiB, 7),
            dev(g, mid1, mid2, at("three_out", "M-THREE-Y"), *three): (18 * MiB, 6)})


def a_generator_resumed_from_two_callers_names_each_resuming_caller():
    # The generator's frame lives in the generator: the same address, code
    # and instruction at every allocation; the frame it returns to is
    # resume_a's or resume_b's (at one address, from one instruction of
    # generator()), then one function's at two lines.
    gen = at("blocks", "M-GEN")
    for exe in every_python():
        call = [at("generator", "M-GEN-CALL")] + memo_tail()
        lines = [at("generator", "M-GEN-AT")] + memo_tail()
        direct = [at("resume_directly_or_through_a_helper", "M-GEN-DIRECT"), at("generator", "M-GEN-RESUMERS")] + \
            memo_tail()
        expect_sites(exe, "generator", {
            dev(gen, at("resume_a", "M-RESUME-A"), *call): (28 * MiB, 7),
            dev(gen, at("resume_b", "M-RESUME-B"), *call): (24 * MiB, 6),
            dev(gen, at("resume_at", "M-RESUME-X"), *lines): (28 * MiB, 7),
            dev(gen, at("resume_at", "M-RESUME-Y"), *lines): (24 * MiB, 6),
            # Resumed by one instruction directly, or through a helper
            # (inline, no native frame of its own): the generator's frame,
            # its resumer's and the native stack are the same, its back link
            # is not.
            dev(gen, *direct): (28 * MiB, 7),
            dev(gen, at("through_helper", "M-HELPER-NEXT"), *direct): (24 * MiB, 6)})


def one_python_line_reaching_the_driver_by_two_native_paths_keeps_both():
    # map(alloc_one, ...) drained by ten C functions of the interpreter in
    # turn from one instruction: the same Python frames, other native frames
    # between; consumer k allocates (k + 1) MiB, so a site that took another
    # consumer's allocation holds blocks of two sizes.  (One consumer's
    # blocks may be a few sites: the interpreter specializes the calls after
    # some runs.)  Then cudaMalloc, cuMemAlloc_v2 and cudaMallocHost from
    # one instruction: libffi calls each from the same place, so the first
    # two are one device stack; the pinned host blocks are another kind.
    frames = (at("alloc_one", "M-NATIVE-ALLOC"), at("native_paths", "M-NATIVE-CALL"), *memo_tail())
    for exe in every_python():
        p, rep = run([exe, MEMO_APP, "native_paths"])
        eq(p.returncode, 0, f"{exe}: exit status: {p.stderr}")
        eq(rep["tracker"].get("python_stacks_unreadable"), 0, f"{exe}: unreadable chains")
        per_size = {}
        for l in rep["leaks"]:
            eq(tuple(python_frames(l["stack"])), frames, f"{exe}: Python frames")
            size = l["bytes"] // l["count"]
            check(l["bytes"] == size * l["count"] and size % MiB == 0,
                  f"{exe}: a site of blocks of more than one consumer: {l['bytes']} bytes in {l['count']}")
            per_size[size // MiB] = per_size.get(size // MiB, 0) + l["count"]
        eq(per_size, {k + 1: 6 for k in range(10)}, f"{exe}: allocations per consumer (by MiB)")
        print(f"ok: {exe} native_paths")
        frames_api = [at("api_paths", "M-API-CALL")] + memo_tail()
        expect_sites(exe, "api_paths", {
            dev(*frames_api): (60 * MiB, 10),
            ("host_pinned", tuple(frames_api)): (18 * MiB, 3)})


def native_frames_between_the_first_two_python_frames(stack):
    py = [i for i, f in enumerate(stack) if f.get("python")]
    return py[1] - py[0] - 1


def a_frame_pushed_inline_or_by_c_code_in_turn_is_merged_where_it_runs():
    # leaf() at one frame address and instruction, called by one instruction
    # directly (3.11+: inline, no native frame between it and its caller)
    # or through functools.partial (C code and an evaluation loop of its
    # own between): only the frame's entry byte (3.11) or a shim frame
    # (3.12+) tells them apart, and the merge must put the native frames
    # between the two Python frames for the second only.
    frames = (at("leaf", "M-ENTRY-ALLOC"), at("entry_frames", "M-ENTRY-CALL"), *memo_tail())
    for exe in every_python():
        got = memo_sites(exe, "entry_frames", native_frames_between_the_first_two_python_frames)
        check(all(k[:2] == ("device", frames) for k in got), f"{exe}: Python frames: {sorted(got)}")
        fewest = min(k[2] for k in got)
        direct = [sum(v[i] for k, v in got.items() if k[2] == fewest) for i in (0, 1)]
        through_c = [sum(v[i] for k, v in got.items() if k[2] != fewest) for i in (0, 1)]
        eq((direct, through_c), ([70 * MiB, 7], [60 * MiB, 6]),
           f"{exe}: (bytes, count) called directly and through C, by native frames between: {got}")
        print(f"ok: {exe} entry_frames")


def recursion_depth_5_and_6_in_turn_gives_two_stacks():
    for exe in every_python():
        outer = [at("recursion", "M-REC-CALL")] + memo_tail()
        alloc, rec = at("rec", "M-REC-ALLOC"), at("rec", "M-REC")
        expect_sites(exe, "recursion", {
            dev(alloc, *[rec] * 4, *outer): (49 * MiB, 7),
            dev(alloc, *[rec] * 5, *outer): (42 * MiB, 6)})


# The next two failed under every CPython here, with the memo and without
# it, while a code location was known by the code object's address and its
# name's pointer, length and first eight bytes; the key now also holds the
# name's last eight bytes, the file's text and the first line (code_tag).
def functions_of_one_name_made_from_two_files_are_reported_at_their_files():
    # def g() compiled as gen_a.py and as gen_b.py in turn, each freed before
    # the next is made: the same name (an interned string), the code object
    # most likely at the last one's address, the same line.
    for exe in every_python():
        outer = [at("exec_files", "M-EXEC-CALL")] + memo_tail()
        expect_sites(exe, "exec_files", {
            dev(("g", "gen_a.py", 4), *outer): (56 * MiB, 7),
            dev(("g", "gen_b.py", 4), *outer): (48 * MiB, 6)})


def functions_made_at_run_time_whose_names_share_eight_bytes_keep_them():
    # handler_000 .. handler_011: one length, one first eight bytes, each
    # code object and name freed before the next is made.
    for exe in every_python():
        outer = [at("exec_names", "M-EXEC-NAME")] + memo_tail()
        expect_sites(exe, "exec_names", {
            dev(("handler_%03d" % k, "<generated>", 4), *outer): (9 * MiB, 1) for k in range(12)})


def two_threads_running_the_same_loop_each_get_their_own_callers():
    # The memos are per thread: the main thread and a worker run two_lines
    # at once, switching at every allocation (ctypes drops the GIL).
    for exe in every_python():
        main = [at("threads", "M-THREADS")] + memo_tail()
        worker = [at("worker", "M-WORKER")]
        expect_sites(exe, "threads", {
            dev(at("two_lines", "M-LINE-A"), *main): (70 * MiB, 70),
            dev(at("two_lines", "M-LINE-B"), *main): (120 * MiB, 60),
            dev(at("two_lines", "M-LINE-A"), *worker): (70 * MiB, 70),
            dev(at("two_lines", "M-LINE-B"), *worker): (120 * MiB, 60)})


def python_frames_have_a_budget_of_their_own_beside_a_deep_native_stack():
    # 40 native frames between the Python call and the CUDA runtime fill
    # the native budget (TENSORLEAK_DEPTH, 32) on their own, as PyTorch's
    # allocator, dispatcher and bindings nearly do: the Python lines still
    # follow, up to TENSORLEAK_PYTHON_DEPTH of them.
    app = os.path.join(HERE, "deep_native_app.py")
    lib = os.environ["TL_DEEP_NATIVE"]
    want = [("make_tensor", "deep_native_app.py", line_of("DEEP-LINE", app)),
            ("serve", "deep_native_app.py", line_of("SERVE-LINE", app)),
            ("main", "deep_native_app.py", line_of("MAIN-LINE", app)),
            ("<module>", "deep_native_app.py", line_of("MODULE-LINE", app))]
    for env, depth, py in [({}, 32, want), ({"TENSORLEAK_PYTHON_DEPTH": "2"}, 2, want[:2]),
                           ({"TENSORLEAK_PYTHON_DEPTH": "0"}, 0, [])]:
        p, rep = run([sys.executable, app, lib], env=env)
        eq(p.returncode, 0, f"{env}: exit status: {p.stderr}")
        eq(rep["python_depth"], depth, f"{env}: python_depth in the report")
        leaks = rep["leaks"]
        eq([(l["bytes"], l["count"]) for l in leaks], [(6 << 20, 1)], f"{env}: leaks")
        stack = leaks[0]["stack"]
        native = [f for f in stack if not f.get("python")]
        eq(len(native), 32, f"{env}: native frames")
        check(all("deep_native" in f.get("module", "") for f in native[:30]), f"{env}: the library's frames first: {native[:3]}")
        eq(python_frames(stack), py, f"{env}: Python frames")
        eq(stack[:32], native, f"{env}: the Python frames come after the native ones")
    p, rep = run([sys.executable, app, lib], env={"TENSORLEAK_PYTHON_DEPTH": "many"})
    check("ignoring TENSORLEAK_PYTHON_DEPTH='many' (expected 0 to 128 frames); using the default" in p.stderr, p.stderr)
    eq(rep["python_depth"], 32, "a bad value keeps the default")


EMBED_APP = os.path.join(HERE, "embed_late_app.py")


def shared_libpython(exe):
    """(libpython path, prefix) of a CPython built with a shared library."""
    out = subprocess.run([exe, "-c", "import os, sys, sysconfig as c; print(c.get_config_var('Py_ENABLE_SHARED') "
                          "and os.path.join(c.get_config_var('LIBDIR'), c.get_config_var('INSTSONAME'))); "
                          "print(sys.base_prefix)"], capture_output=True, text=True, timeout=20).stdout.split("\n")
    return (out[0], out[1]) if out[0] not in ("", "0", "None") and os.path.exists(out[0]) else (None, None)


def a_libpython_dlopened_after_the_first_stack_names_the_line():
    # embed_late allocates from C first (no interpreter in the process: the
    # stack is native), then dlopen()s libpython, RTLD_GLOBAL or RTLD_LOCAL
    # (its symbols then only in its own handle), and runs a script that
    # allocates through the program's own C function.  Without looking for
    # the interpreter again after a dlopen the script's leak was native only.
    tried = 0
    for exe, v in pythons().items():
        libpython, home = shared_libpython(exe)
        if not libpython:
            continue
        for mode in ("global", "local"):
            p, rep = run([os.environ["TL_EMBED_LATE"], libpython, EMBED_APP, mode], env={"PYTHONHOME": home})
            what = f"{libpython} {mode}"
            eq(p.returncode, 0, f"{what}: exit status: {p.stderr}")
            leaks = sorted(rep["leaks"], key=lambda l: l["bytes"])
            eq([(l["bytes"], l["count"]) for l in leaks], [(1 * MiB, 1), (3 * MiB, 1)], f"{what}: leaks")
            eq(leaks[0]["stack"][0]["function"], "allocate_before_python", f"{what}: the C leak's innermost frame")
            eq(python_frames(leaks[0]["stack"]), [], f"{what}: the C leak has no Python frames")
            eq([f for f in python_frames(leaks[1]["stack"]) if f[1] == "embed_late_app.py"],
               [("load_weights", "embed_late_app.py", line_of("EMBED-ALLOC-LINE", EMBED_APP)),
                ("start_plugin", "embed_late_app.py", line_of("EMBED-PLUGIN-LINE", EMBED_APP)),
                ("<module>", "embed_late_app.py", line_of("EMBED-MODULE-LINE", EMBED_APP))], f"{what}: Python frames")
            eq(leaks[1]["stack"][0]["function"], "gpu_malloc", f"{what}: the script's leak's innermost frame")
            eq((rep["tracker"]["python_stacks"], rep["tracker"]["python_stacks_unreadable"]), (1, 0),
               f"{what}: stacks with Python frames, unreadable chains")
            check("tensorleak: Python" not in p.stderr and "free-threaded" not in p.stderr, f"{what}: {p.stderr}")
            tried += 1
        print(f"ok: {exe} ({v})")
    check(tried >= 2, "no CPython 3.9-3.13 with a shared libpython found")


def a_dlopen_by_bare_name_or_origin_is_resolved_from_the_callers_runpath():
    # dlopen is interposed (to look for a libpython loaded late); glibc
    # resolves a bare name along the RUNPATH of the object that calls dlopen
    # and $ORIGIN from it, so a wrapper that called the real dlopen itself
    # made this program's own library unloadable.  A program without Python
    # that dlopen()s keeps native stacks and says nothing about Python.
    prog = os.environ["TL_DLOPEN_ORIGIN"]
    name = os.path.basename(PYCB)
    check(not os.path.exists(os.path.join(SIM, name)), "the library is only along the program's RUNPATH")
    p, rep = run([prog, name])
    eq((p.returncode, p.stdout), (0, "dlopen_origin: ok\n"), "under tensorleak: " + p.stderr)
    eq([(l["bytes"], l["stack"][0]["function"]) for l in rep["leaks"]], [(2 * MiB, "main")], "leaks")
    eq(python_frames(rep["leaks"][0]["stack"]), [], "no Python frames")
    eq(rep["tracker"]["python_stacks"], 0, "no Python stacks")
    check("Python" not in p.stderr, p.stderr)


def a_library_constructor_allocating_inside_dlopen_while_threads_allocate_never_hangs():
    # Each dlopen makes the next stack look for an interpreter again, and
    # the look calls dlsym, which waits for the loader's lock: a thread
    # inside dlopen holds it while a constructor allocates.  Holding a lock
    # of tensorleak's across the look hung this program every time.  The
    # program loads the runtime before its threads start, so the runtime's
    # own lazy load (which can deadlock the same way, real or simulated:
    # sim/runtime_driver.c) is not part of the race: a hang is tensorleak's.
    p, rep = run([os.environ["TL_DLOPEN_RACE"], os.environ["TL_CTOR_ALLOC"]])
    eq((p.returncode, p.stdout), (0, "dlopen_race: ok\n"), "exit status and output: " + p.stderr)
    eq((rep["summary"]["leaked_bytes"], rep["tracker"]["python_stacks"]), (0, 0), "leaked bytes, Python stacks")


def python_3_13_debug_offsets_not_laid_out_as_3_13_0_are_refused_with_one_note():
    # pyframes.c reads 3.13's _Py_DebugOffsets at 3.13.0's word indices.
    # Each change below is one a build with another layout would show: the
    # PyObject section's size word (44), the thread state's size below its
    # offsets (19), a misaligned frame pointer offset (31).  Unchanged, the
    # line is named.
    found = [exe for exe, v in pythons().items() if v == "3.13"]
    if not found:
        print("SKIP: no CPython 3.13 found")
        sys.exit(77)
    prog = os.path.join(HERE, "debug_offsets_app.py")
    note = ("tensorleak: Python 3.13 whose debug offsets (_PyRuntime) are not laid out as 3.13.0's: "
            "stacks show native frames only")
    for exe in found:
        p, rep = run([exe, prog, "-1", "0"])
        eq(python_frames(rep["leaks"][0]["stack"])[:1],
           [("leak", "debug_offsets_app.py", line_of("OFFSETS-ALLOC-LINE", prog))], f"{exe}: unchanged offsets")
        check(note not in p.stderr, p.stderr)
        for word, value in ((44, 24), (19, 16), (31, 57)):
            p, rep = run([exe, prog, str(word), str(value)])
            what = f"{exe}: word {word} = {value}"
            eq(p.returncode, 0, f"{what}: exit status: {p.stderr}")
            eq([(l["bytes"], l["count"]) for l in rep["leaks"]], [(1 * MiB, 1)], f"{what}: leaks")
            eq(python_frames(rep["leaks"][0]["stack"]), [], f"{what}: no Python frames")
            eq(p.stderr.count(note), 1, f"{what}: the note once in:\n{p.stderr}")
        print(f"ok: {exe}")


def code_made_again_from_another_file_or_first_line_keeps_its_own():
    # Each version of `forward` is freed before the next is compiled, so the
    # next may take its address, its name's address and its name: the file
    # (differing only at its end) or the first line must still tell them apart.
    app = os.path.join(HERE, "recreated_where_app.py")
    for exe in pythons():
        p, rep = run([exe, app, "files"])
        eq(p.returncode, 0, f"{exe}: exit status: {p.stderr}")
        got = sorted((l["bytes"], l["count"], python_frames(l["stack"])[0]) for l in rep["leaks"])
        eq(got, [(20 * MiB, 20, ("forward", "generated_module_a.py", 3)),
                 (40 * MiB, 20, ("forward", "generated_module_b.py", 3))], f"{exe}: leaks by file")
        p, rep = run([exe, app, "lines"])
        eq(p.returncode, 0, f"{exe}: exit status: {p.stderr}")
        got = sorted((l["bytes"], l["count"], python_frames(l["stack"])[0]) for l in rep["leaks"])
        eq(got, [(20 * MiB, 20, ("forward", "<generated>", 3)),
                 (40 * MiB, 20, ("forward", "<generated>", 5))], f"{exe}: leaks by line")
        freed = rep["tracker"]["python_code_objects_freed"]
        check(isinstance(freed, int) and freed >= 40, f"{exe}: code objects freed counted: {freed}")


def a_trace_refs_code_type_is_left_unchanged_and_a_default_one_gets_the_counting_wrapper():
    # fake_trace_refs.c exports the C API with PyTypeObject laid out as a
    # --with-trace-refs build's (two refchain links first: byte offset 48 is
    # tp_basicsize) or as a default build's (48 is tp_dealloc).  Only the
    # second may get pyframes.c's counting deallocator; before d110485 the
    # first had a function pointer written over its tp_basicsize.
    prog = os.environ["TL_FAKE_TRACE_REFS"]
    for layout in ("trace-refs", "default"):
        p, rep = run([prog, layout])
        what = f"{layout} layout"
        eq(p.returncode, 0, f"{what}: exit status: {p.stderr}")
        eq([(l["bytes"], l["count"]) for l in rep["leaks"]], [(1 * MiB, 1)], f"{what}: leaks")
        check("tensorleak: Python" not in p.stderr, f"{what}: the fake interpreter is read:\n{p.stderr}")
        out = p.stdout.splitlines()
        # The interpreter's own deallocator runs for every free either way.
        check("original deallocs: 3" in out, f"{what}: {p.stdout}")
        if layout == "trace-refs":
            eq(out[0], "words changed: 0", f"{what}: PyCode_Type's words: {p.stdout}")
            check("tp_dealloc: original" in out, f"{what}: {p.stdout}")
            eq(rep["tracker"]["python_code_objects_freed"], None, f"{what}: python_code_objects_freed")
        else:
            # Word 6 only, now a function of libtensorleak.so's, which counted
            # the three frees and called on.
            eq([l.split(":")[0] for l in out if l.startswith("word ")], ["word 6"], f"{what}: {p.stdout}")
            check("words changed: 1" in out, f"{what}: {p.stdout}")
            wrapper = [l for l in out if l.startswith("tp_dealloc: ")]
            eq(len(wrapper), 1, f"{what}: {p.stdout}")
            eq(os.path.basename(wrapper[0].split(" in ")[-1]), os.path.basename(LIB), f"{what}: {p.stdout}")
            eq(rep["tracker"]["python_code_objects_freed"], 3, f"{what}: python_code_objects_freed")
        print(f"ok: {what}: {p.stdout.strip()}")


def captures_begun_in_a_signal_handler_during_a_python_loop_keep_every_stack_apart():
    # sigcapture.c's SIGALRM handler (every 30 us), each time it interrupts
    # tensorleak's capture code, records an invalid pool free and a pool
    # block: a capture begun while the thread's own is in flight, which must
    # take a native stack and leave the interrupted one's memos alone
    # (stack.c's `capturing`).  Every one of the loop's allocations keeps
    # its own line's stack; every handler capture names the handler.
    app = os.path.join(HERE, "signal_capture_app.py")
    iterations = 60000
    p, rep = run([sys.executable, app, str(iterations), "30"], env={"TL_SIGCAPTURE": os.environ["TL_SIGCAPTURE"]})
    eq(p.returncode, 0, f"exit status: {p.stderr}")
    words = p.stdout.split()
    eq(words[:2] + [words[7]], ["iterations", str(iterations), str(2 * iterations)], f"program: {p.stdout}")
    acted = int(words[5])
    # ~40 per 1000 iterations here: enough that each memo was interrupted.
    check(acted >= iterations // 200, f"the handler acted {acted} times only: {p.stdout}")
    main_at = {512: line_of("SIG-A-LINE", app), 1536: line_of("SIG-B-LINE", app)}
    device = [l for l in rep["leaks"] if l["kind"] == "device"]
    eq(sorted((l["bytes"], l["count"]) for l in device), [(512 * iterations, iterations), (1536 * iterations, iterations)],
       "the loop's allocations, one site per line")
    for l in device:
        size = l["bytes"] // l["count"]
        eq(python_frames(l["stack"]),
           [("allocate", "signal_capture_app.py", line_of("SIG-ALLOC-LINE", app)),
            ("main", "signal_capture_app.py", main_at[size]),
            ("<module>", "signal_capture_app.py", line_of("SIG-MAIN-LINE", app))], f"{size}-byte allocations' stack")
        check(not any(f.get("function") == "sigcapture_on_tick" for f in l["stack"]), f"handler frames: {l['stack']}")
    blocks = [l for l in rep["leaks"] if l["kind"] == "pool_block"]
    eq(len(blocks) + len(device), len(rep["leaks"]), "leak kinds")
    eq((sum(l["bytes"] for l in blocks), sum(l["count"] for l in blocks)), (64 * acted, acted), "pool blocks")
    eq(rep["summary"]["invalid_frees"], acted, "invalid frees")
    eq(len(rep["invalid_frees"]), min(acted, 1024), "invalid frees kept")
    for what, stacks in (("pool block", [l["stack"] for l in blocks]),
                         ("invalid free", [i["stack"] for i in rep["invalid_frees"]])):
        for stack in stacks:
            names = [f.get("function") for f in stack]
            check("sigcapture_on_tick" in names[:3], f"{what} stack without the handler: {names}")
            # Taken while a capture was in flight: libunwind's native stack.
            eq(python_frames(stack), [], f"{what} stack's Python frames (interrupted in {names[3:6]})")
    print(f"ok: {p.stdout.strip()}")


def threads_that_capture_and_exit_leave_no_walker_state_behind():
    # ~55 KiB of walker state a thread that captures (thread_block.c): 2000
    # threads would keep ~110 MiB if it outlived them.
    app = os.path.join(HERE, "thread_churn_app.py")
    p, rep = run([sys.executable, app, "2000"])
    eq(p.returncode, 0, f"exit status: {p.stderr}")
    words = p.stdout.split()
    eq(words[0], "rss_growth_kib", p.stdout)
    check(int(words[1]) < 16 * 1024, f"resident set grew {words[1]} KiB over 2000 threads")
    eq(rep["summary"]["leaked_bytes"], 0, "every block freed")


if __name__ == "__main__":
    globals()[sys.argv[1]]()
