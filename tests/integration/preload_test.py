#!/usr/bin/env python3
"""Integration tests: programs under libtensorleak.so on the simulated stack.

Each test is a function named like the behaviour it checks; meson runs one
per process (`preload_test.py NAME`).  Assertions are exact: the samples are
deterministic, so counts, bytes and source lines are known in advance.
"""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import scratch  # noqa: E402

scratch.use()

BUILD = os.environ["TL_BUILD"]
SOURCE = os.environ["TL_SOURCE"]
LIB = os.environ["TL_LIB"]
SIM = os.environ["TL_SIM"]
SAMPLES = os.environ["TL_SAMPLES"]
PROGS = os.environ["TL_PROGS"]
MiB = 1 << 20


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def eq(actual, expected, what):
    if actual != expected:
        fail(f"{what}: expected {expected!r}, got {actual!r}")


def marker_line(relpath, marker):
    with open(os.path.join(SOURCE, relpath)) as f:
        for n, line in enumerate(f, 1):
            if marker in line:
                return n
    raise AssertionError(f"marker {marker} not in {relpath}")


class Run:
    def __init__(self, rc, out, err, reports):
        self.rc, self.out, self.err, self.reports = rc, out, err, reports

    @property
    def report(self):
        exits = [r for r in self.reports if r["reason"] == "exit"]
        eq(len(exits), 1, "number of exit reports")
        return exits[0]


def run(prog, *args, env=None, preload=True, stdin=None):
    tmp = tempfile.mkdtemp(prefix="tl-it-")
    e = dict(os.environ)
    for k in list(e):
        if k.startswith("TENSORLEAK_") or k.startswith("SIMCUDA_"):
            del e[k]
    e["LD_LIBRARY_PATH"] = SIM
    e["TENSORLEAK_OUTPUT"] = os.path.join(tmp, "tl.%p.%n.json")
    if preload:
        e["LD_PRELOAD"] = LIB
    e.update(env or {})
    p = subprocess.run([prog, *args], env=e, capture_output=True, text=True, timeout=50, input=stdin)
    reports = []
    for name in sorted(os.listdir(tmp)):
        check(name.endswith(".json"), f"stray file left behind: {name}")
        with open(os.path.join(tmp, name)) as f:
            reports.append(json.load(f))
    return Run(p.returncode, p.stdout, p.stderr, reports)


def sample(name):
    return os.path.join(SAMPLES, name)


def prog(name):
    return os.path.join(PROGS, "it_" + name)


def frames(site):
    return [(f["function"], os.path.basename(f["file"] or ""), f["line"]) for f in site["stack"]]


# ---------------------------------------------------------------------------

def leaky_inference_reports_each_kv_block_at_its_line():
    r = run(sample("leaky_inference"), "8")
    eq(r.rc, 0, "exit status")
    rep = r.report
    s = rep["summary"]
    eq(s["leaked_allocations"], 8, "leaked allocations")
    eq(s["leaked_bytes"], 8 * MiB, "leaked bytes")
    eq(len(rep["leaks"]), 1, "leak sites")
    leak = rep["leaks"][0]
    eq((leak["kind"], leak["bytes"], leak["count"]), ("device", 8 * MiB, 8), "leak site")
    line = marker_line("samples/leaky_inference.c", "LEAK-SITE")
    eq(frames(leak)[0], ("kv_cache_append", "leaky_inference.c", line), "innermost frame")
    check(frames(leak)[1][0].startswith("serve_request"), f"second frame is serve_request: {frames(leak)[1]}")
    check(leak["stack"][0]["module"].endswith("/leaky_inference"), "module of the leaking frame")
    # peak: weights 64 MiB + activations 4 MiB + staging 64 KiB + 8 KV blocks
    eq(s["peak_live_bytes"], 64 * MiB + 4 * MiB + 64 * 1024 + 8 * MiB, "peak live bytes")
    eq(s["live_bytes"], 8 * MiB, "live bytes at exit")
    eq(s["invalid_frees"], 0, "invalid frees")
    eq(rep["devices"][0]["reserved_bytes"], 8 * MiB, "device reserved")
    check(f"SUMMARY: tensorleak: {8 * MiB} byte(s) leaked in 8 allocation(s)." in r.err, "SUMMARY line on stderr")
    check(f"in kv_cache_append " in r.err and f"leaky_inference.c:{line}" in r.err, "text report names the line")


def a_name_that_is_not_utf8_leaves_out_its_field_not_the_report():
    # A mark label cut inside a character (63 bytes of label kept) is not
    # UTF-8: the report leaves that label out and keeps everything else.
    code = (
        "import ctypes\n"
        "rt = ctypes.CDLL('libcudart.so.13')\n"
        "p = ctypes.c_void_p()\n"
        "assert rt.cudaMalloc(ctypes.byref(p), 1 << 20) == 0\n"
        "ctypes.CDLL(None).tensorleak_mark(b'a' * 62 + 'étape'.encode())\n"
    )
    r = run(sys.executable, "-c", code, env={"TENSORLEAK_PYTHON": "0"})
    eq(r.rc, 0, "exit status: " + r.err)
    rep = r.report
    eq(len(rep["marks"]), 1, "the mark is in the report")
    check("label" not in rep["marks"][0], f"the cut label is left out: {rep['marks'][0]}")
    eq(rep["marks"][0]["live_bytes"], MiB, "the mark's figures are kept")
    eq((rep["summary"]["leaked_bytes"], rep["summary"]["leaked_allocations"]), (MiB, 1), "the leak is reported")
    check("SUMMARY: tensorleak: 1048576 byte(s) leaked in 1 allocation(s). Report: /" in r.err, r.err)


def a_report_loads_no_debuginfod_client_into_the_program():
    # elfutils' standard debuginfo search ends in a debuginfod query, which
    # loads libdebuginfod and libcurl (and its TLS library) into the host
    # program even with DEBUGINFOD_URLS unset; a report racing exit()
    # crashed in their cleanup.  Only a system with libdebuginfod can show it.
    if not any(os.path.exists(d + "/libdebuginfod.so.1") for d in ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib")):
        print("note: libdebuginfod.so.1 is not installed; this case cannot fail here")
    r = run(prog("loaded_libs"), env={"DEBUGINFOD_URLS": ""})
    eq(r.rc, 0, "exit status")
    eq(r.out.splitlines()[-2:], ["libdebuginfod absent", "libcurl absent"], "libraries mapped after a report")
    check(any(rep["reason"] == "api" for rep in r.reports), "the snapshot was written")


def a_python_program_that_forks_before_cuda_sees_no_extra_thread():
    # The snapshot watcher thread starts at the first CUDA call: before it, a
    # fork under CPython 3.12+ printed "This process ... is multi-threaded".
    import glob
    import shutil
    pythons = sorted(glob.glob("/root/.pyenv/versions/3.1[2-9]*/bin/python3"))
    for name in ("python3.13", "python3.12"):
        if shutil.which(name):
            pythons.append(shutil.which(name))
    if not pythons:
        print("SKIP: no CPython 3.12 or newer here")
        sys.exit(77)
    script = os.path.join(SOURCE, "tests", "integration", "progs", "fork_before_cuda.py")
    for py in pythons[:2]:
        r = run(py, script)
        eq(r.rc, 0, f"{py}: exit status")
        eq(r.out, "forked\n", f"{py}: output")
        eq(r.err, "", f"{py}: stderr")
    # Reports still work once CUDA is used.
    r = run(prog("snap_exit"))
    eq(sorted(rep["reason"] for rep in r.reports), ["api", "exit"], "reports after CUDA use")


def leaky_inference_counts_each_runtime_call_once():
    # cudaMalloc reaches the driver's cuMemAlloc_v2 hook too: 1 weights +
    # 8 x (activations, staging, kv) = 25 allocations, not 50.
    r = run(sample("leaky_inference"), "8")
    eq(r.report["summary"]["total_allocations"], 25, "total allocations")


def leaky_inference_flags_growth_of_the_kv_call_site():
    r = run(sample("leaky_inference"), "8")
    g = r.report["growth"]
    eq(len(g), 1, "growing call sites")
    eq((g[0]["bytes_per_mark"], g[0]["marks"], g[0]["count_per_mark"]), (MiB, 8, 1), "growth rate")
    eq(frames(g[0])[0][0], "kv_cache_append", "growing function")
    eq(len(r.report["marks"]), 8, "marks in the timeline")
    lives = [m["live_bytes"] for m in r.report["marks"]]
    eq(lives, [64 * MiB + (i + 1) * MiB for i in range(8)], "live bytes per mark")


def clean_inference_reports_no_leak_and_no_growth():
    r = run(sample("clean_inference"), "50")
    eq(r.rc, 0, "exit status")
    rep = r.report
    eq(rep["summary"]["leaked_allocations"], 0, "leaked allocations")
    eq(rep["summary"]["leaked_bytes"], 0, "leaked bytes")
    eq(rep["leaks"], [], "leaks")
    eq(rep["growth"], [], "growth")
    eq(len(rep["marks"]), 50, "marks")
    eq(rep["summary"]["total_allocations"], 1 + 50 * 3, "total allocations")
    check("tensorleak: no leaked device allocations" in r.err, "text says no leaks")


def static_runtime_is_caught_through_cuGetProcAddress():
    r = run(sample("static_runtime"))
    eq(r.rc, 0, "exit status")
    s = r.report["summary"]
    eq((s["leaked_allocations"], s["leaked_bytes"]), (2, 6 * MiB), "leaks")
    line = marker_line("samples/static_runtime.c", "LEAK-SITE")
    for leak in r.report["leaks"]:
        names = [f[0] for f in frames(leak)]
        check("make_buffer" in names, f"make_buffer in stack: {names}")
        eq(frames(leak)[names.index("make_buffer")][1:], ("static_runtime.c", line), "leak line")


def driver_api_is_caught_on_all_three_driver_paths():
    r = run(sample("driver_api"))
    eq(r.rc, 0, "exit status")
    check("resolved to cuMemAllocAsync_ptsz" in r.out, "per-thread variant: " + r.out)
    got = sorted((l["bytes"], frames(l)[0][0].split(".")[0], frames(l)[0][2]) for l in r.report["leaks"])
    src = "samples/driver_api.c"
    want = sorted([
        (2 * MiB, "path_direct", marker_line(src, "LEAK-SITE direct")),
        (1 * MiB, "path_dlsym", marker_line(src, "LEAK-SITE dlsym")),
        (3 * MiB, "path_procaddr", marker_line(src, "LEAK-SITE procaddr")),
        (512 * 1024, "path_ptsz", marker_line(src, "LEAK-SITE ptsz")),
    ])
    eq(got, want, "leaks by path")
    eq(r.report["summary"]["invalid_frees"], 0, "invalid frees")
    eq(r.report["summary"]["total_allocations"], 8, "total allocations")


def cuGetProcAddress_hands_back_exactly_the_resolved_variant():
    plain = run(prog("variants"), preload=False)
    hooked = run(prog("variants"))
    eq(plain.rc, 0, "exit status without preload")
    eq(hooked.rc, 0, "exit status with preload")
    p_lines, h_lines = plain.out.splitlines(), hooked.out.splitlines()
    eq(len(p_lines), len(h_lines), "lookups")
    for p, h in zip(p_lines, h_lines):
        # Same return code, status and variant name; only where it lives differs.
        eq(re.sub(r" \((hook|driver|-)\)$", "", h), re.sub(r" \((hook|driver|-)\)$", "", p), "lookup")
    expect_hooked = {"cuMemAlloc 3020 0", "cuMemAlloc 12000 0", "cuMemFree 12000 0", "cuMemAllocAsync 11020 0",
                     "cuMemAllocAsync 12000 1", "cuMemAllocAsync 12000 2", "cuMemFreeAsync 12000 2",
                     "cuMemAllocFromPoolAsync 12000 2", "cuCtxDestroy 4000 0", "cuDevicePrimaryCtxReset 11000 0",
                     "cuGetProcAddress 11030 0", "cuGetProcAddress 12000 0", "cuMemCreate 12000 0"}
    for h in h_lines:
        key = " ".join(h.split()[:3])
        eq(h.endswith("(hook)"), key in expect_hooked, f"hooked? {h}")
    check(any(l.startswith("cuMemAllocAsync 12000 2 -> rc=0 status=0 cuMemAllocAsync_ptsz") for l in h_lines), "ptsz line")
    check(any(l.startswith("cuMemAlloc 12000 0 -> rc=0 status=0 cuMemAlloc_v2") for l in h_lines), "v2 line")


def depth_zero_keeps_counts_without_stacks():
    r = run(sample("leaky_inference"), "8", env={"TENSORLEAK_DEPTH": "0"})
    leaks = r.report["leaks"]
    eq(len(leaks), 1, "one site without stacks")
    eq((leaks[0]["count"], leaks[0]["bytes"], leaks[0]["stack"]), (8, 8 * MiB, []), "the site")


def gate_fails_with_exitcode_on_leak():
    r = run(sample("leaky_inference"), "3", env={"TENSORLEAK_FAIL_ON": "leak"})
    eq(r.rc, 23, "gate exit status")
    eq(r.report["gate"], {"fail_on": ["leak"], "failed": True, "failed_kinds": ["leak"]}, "gate in report")
    check("leaky_inference: served 3 requests" in r.out, "program output flushed before the gate exit")
    r = run(sample("leaky_inference"), "3", env={"TENSORLEAK_FAIL_ON": "growth,invalid-free", "TENSORLEAK_EXITCODE": "42"})
    eq(r.rc, 42, "growth gate with custom exit code")
    eq(r.report["gate"]["failed_kinds"], ["growth"], "failed kinds")


def gate_passes_clean_program_with_its_own_status():
    r = run(sample("clean_inference"), "5", env={"TENSORLEAK_FAIL_ON": "leak,growth,invalid-free,oom"})
    eq(r.rc, 0, "exit status")
    eq(r.report["gate"]["failed"], False, "gate")
    r = run(prog("wait_signal"), env={"TENSORLEAK_FAIL_ON": "none"}, stdin="")
    eq(r.rc, 7, "program's own status kept")


def suppressed_leak_does_not_fail_the_gate():
    with tempfile.NamedTemporaryFile("w", suffix=".supp", delete=False) as f:
        f.write("# known leak\nleak:kv_cache_*\n")
    r = run(sample("leaky_inference"), "4", env={"TENSORLEAK_FAIL_ON": "leak", "TENSORLEAK_SUPPRESSIONS": f.name})
    eq(r.rc, 0, "exit status")
    s = r.report["summary"]
    eq((s["leaked_bytes"], s["suppressed_bytes"], s["suppressed_allocations"]), (0, 4 * MiB, 4), "suppressed totals")
    eq((r.report["leaks"][0]["suppressed"], r.report["leaks"][0]["suppression"]), (True, "leak:kv_cache_*"), "rule")
    with open(f.name, "w") as g:
        g.write("leak:kv_cache_*\nbogus line\n")
    r = run(sample("leaky_inference"), "4", env={"TENSORLEAK_SUPPRESSIONS": f.name})
    check(f"tensorleak: {f.name}:2:" in r.err, "malformed line named with file:line: " + r.err)
    eq(r.report["summary"]["suppressed_allocations"], 4, "good rule still applies")


def a_leak_rule_leaves_its_sites_growth_and_invalid_frees_in_the_report():
    # A `leak:` rule covers leaks only: the same site's growth row and its
    # invalid frees are reported as without the rule, unsuppressed.
    with tempfile.NamedTemporaryFile("w", suffix=".supp", delete=False) as f:
        f.write("leak:kv_cache_*\n")
    src = "tests/integration/progs/suppressed_site.c"
    for supp in (None, f.name):
        what = "with the rule" if supp else "without it"
        r = run(prog("suppressed_site"), "6", env={"TENSORLEAK_SUPPRESSIONS": supp} if supp else None)
        eq((r.rc, r.out.strip()), (0, "suppressed_site: 6 requests, 5 blocks kept"), f"{what}: program ran")
        s = r.report["summary"]
        eq((s["leaked_bytes"], s["leaked_allocations"], s["suppressed_bytes"], s["suppressed_allocations"]),
           (0, 0, 5 * MiB, 5) if supp else (5 * MiB, 5, 0, 0), f"{what}: leak totals")
        eq([(l["count"], l["bytes"], l["suppressed"], l.get("suppression"), frames(l)[0][0]) for l in r.report["leaks"]],
           [(5, 5 * MiB, bool(supp), "leak:kv_cache_*" if supp else None, "kv_cache_append")], f"{what}: the leak")
        eq([(g["scope"], g["bytes_per_mark"], g["count_per_mark"], g["marks"], g["suppressed"], frames(g)[0][:3:2])
            for g in r.report["growth"]],
           [("call_site", MiB, 1, 6, False, ("kv_cache_append", marker_line(src, "GROW-SITE")))],
           f"{what}: the site's growth row")
        eq(s["invalid_frees"], 2, f"{what}: invalid frees counted")
        eq(sorted((frames(i)[0][0], frames(i)[0][2], i["suppressed"]) for i in r.report["invalid_frees"]),
           [("kv_cache_drop", marker_line(src, "INVALID-TWICE"), False),
            ("kv_cache_drop", marker_line(src, "INVALID-BOGUS"), False)], f"{what}: the site's invalid frees")


def context_reset_releases_instead_of_leaking():
    r = run(prog("teardown"))
    eq(r.rc, 0, "exit status")
    s = r.report["summary"]
    eq((s["released_by_teardown_allocations"], s["released_by_teardown_bytes"]), (3, 3 * MiB), "released by teardown")
    eq((s["leaked_allocations"], s["leaked_bytes"]), (1, 2 * MiB), "leak after the reset")
    eq(frames(r.report["leaks"][0])[0][2], marker_line("tests/integration/progs/teardown.c", "LEAK-SITE"), "line")


def double_free_is_an_invalid_free_and_driver_answer_is_kept():
    plain = run(prog("double_free"), preload=False)
    r = run(prog("double_free"))
    eq(r.out, plain.out, "program output unchanged")
    eq(r.out.strip(), "double_free: 0 1 1", "driver's answers")
    eq(r.report["summary"]["invalid_frees"], 2, "invalid frees")
    inv = r.report["invalid_frees"]
    eq(frames(inv[0])[0][0], "main", "invalid free stack")
    eq(frames(inv[0])[0][2], marker_line("tests/integration/progs/double_free.c", "INVALID-SITE"), "invalid free line")
    eq(inv[1]["address"], "0x1234", "bogus pointer")


def out_of_memory_writes_a_post_mortem_report():
    r = run(prog("oom"), env={"SIMCUDA_MEMORY": "64M"})
    plain = run(prog("oom"), env={"SIMCUDA_MEMORY": "64M"}, preload=False)
    eq(r.out, plain.out, "program output unchanged")
    check("big-alloc rc 2" in r.out, "the program sees cudaErrorMemoryAllocation: " + r.out)
    ooms = [x for x in r.reports if x["reason"] == "oom"]
    eq(len(ooms), 1, "oom reports")
    o = ooms[0]
    eq((o["oom"]["bytes"], o["oom"]["kind"], o["oom"]["device"]), (8 * MiB, "device", 0), "failed request")
    eq(frames(o["oom"])[0][2], marker_line("tests/integration/progs/oom.c", "OOM-SITE"), "oom line")
    eq(o["devices"][0]["free"], 32 * MiB, "driver free at the failure")
    eq(o["devices"][0]["total"], 64 * MiB, "driver total")
    eq(o["summary"]["live_bytes"], 32 * MiB, "live at the failure")
    # No pool: the device's own free memory (32 MiB, in 4 MiB holes) would
    # hold the request, and the driver does not say its largest piece.
    eq((o["oom"]["device_free"], o["oom"]["verdict"], o["oom"]["remedy"], o["oom"]["pools"]),
       (32 * MiB, "unknown", None, []), "verdict")
    check(o["oom"]["note"].startswith("the driver had that much free memory yet refused it"), o["oom"]["note"])
    eq(r.report["summary"]["oom_failures"], 1, "oom failures counted")
    check("out of memory allocating 8.0 MiB on device 0" in r.err, "stderr line: " + r.err)


def rtld_next_chains_still_work_under_the_preload():
    r = run(os.path.join(PROGS, "it_chain"), env={"LD_LIBRARY_PATH": PROGS + ":" + SIM})
    eq((r.rc, r.out.strip()), (0, "chain_value=43"), "chain result")


def cudnn_and_cublas_names_pass_through_dlsym():
    r = run(prog("passthrough"), os.environ["TL_FAKE_CUDNN"])
    eq(r.rc, 0, "exit status: " + r.err)
    check("cudnnCreate -> libfake_cudnn.so" in r.out and "cuMemAlloc_v2 in fake library -> NULL" in r.out, r.out)


def process_without_cuda_writes_no_report():
    r = run("/bin/true")
    eq((r.rc, r.reports, r.err), (0, [], ""), "nothing written, nothing said")


def sigusr1_writes_a_snapshot_and_program_continues():
    tmp = tempfile.mkdtemp(prefix="tl-sig-")
    e = dict(os.environ, LD_LIBRARY_PATH=SIM, LD_PRELOAD=LIB, TENSORLEAK_OUTPUT=os.path.join(tmp, "r.%n.json"))
    p = subprocess.Popen([prog("wait_signal")], env=e, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    eq(p.stdout.readline().strip(), "ready", "program started")
    for i in range(3):
        p.send_signal(signal.SIGUSR1)
        deadline = time.time() + 10
        while len([n for n in os.listdir(tmp) if n.endswith(".json")]) < i + 1 and time.time() < deadline:
            time.sleep(0.02)
    p.stdin.close()
    out = p.stdout.read()
    eq((p.wait(timeout=20), out.strip()), (7, "done"), "program continued and kept its status")
    names = sorted(n for n in os.listdir(tmp))
    eq(names, ["r.1.json", "r.2.json", "r.3.json", "r.4.json"], "three snapshots then the exit report")
    snaps = [json.load(open(os.path.join(tmp, n))) for n in names]
    eq([s["reason"] for s in snaps], ["signal", "signal", "signal", "exit"], "reasons")
    eq(snaps[0]["summary"]["live_bytes"], 2 * MiB, "live in the snapshot")
    eq(snaps[0]["summary"]["leaked_bytes"], 0, "a snapshot is not a leak verdict")
    eq(snaps[3]["summary"]["leaked_bytes"], MiB, "exit report")


def caching_allocator_separates_held_segments_leaked_blocks_and_fragmentation():
    r = run(sample("caching_allocator"), env={"SIMCUDA_MEMORY": "48M"})
    eq(r.rc, 0, "exit status")
    check("12 MiB request failed (fragmentation)" in r.out, r.out)
    # The post-mortem at the failed segment request: 20 MiB free in the pool,
    # in 4 MiB holes, so fragmentation = 1 - 4/20.
    oom = [x for x in r.reports if x["reason"] == "oom"]
    eq(len(oom), 1, "oom reports")
    s = oom[0]["summary"]
    eq((s["reserved_bytes"], s["allocated_bytes"], s["gap_bytes"], s["largest_free_block"]),
       (40 * MiB, 20 * MiB, 20 * MiB, 4 * MiB), "reserved/allocated/gap/largest at the OOM")
    eq(round(s["fragmentation"], 6), 0.8, "fragmentation at the OOM")
    eq((oom[0]["oom"]["bytes"], oom[0]["devices"][0]["free"]), (20 * MiB, 8 * MiB), "failed request and driver free")
    # At exit: the two segments are the pool's reserve (held, not leaked);
    # the one block never returned is the leak, at its allocation stack.
    rep = r.report
    s = rep["summary"]
    eq((s["leaked_allocations"], s["leaked_bytes"], s["held_bytes"]), (1, 4 * MiB, 40 * MiB), "exit classification")
    eq([(l["kind"], l["bytes"], l["count"]) for l in rep["leaks"]], [("pool_block", 4 * MiB, 1)], "leaks")
    eq([(h["kind"], h["bytes"], h["count"]) for h in rep["held"]], [("device", 40 * MiB, 2)], "held")
    # The inlined annotation call first (marked inlined), then the allocator
    # at the line that calls it.
    eq(frames(rep["leaks"][0])[:2], [("tensorleak_pool_alloc", "tensorleak.h", frames(rep["leaks"][0])[0][2]),
                                     ("block_alloc", "caching_allocator.c",
                                      marker_line("samples/caching_allocator.c", "BLOCK-SITE"))], "leak stack")
    eq([f.get("inlined", False) for f in rep["leaks"][0]["stack"][:2]], [True, False], "inline marks")
    check(any(f[0] == "main" for f in frames(rep["leaks"][0])), "and reaches main")
    p = rep["pools"][0]
    eq((p["name"], p["kind"], p["reserved_bytes"], p["allocated_bytes"], p["free_bytes"], p["largest_free_block"], p["segments"]),
       ("caching_allocator", "annotated", 40 * MiB, 4 * MiB, 36 * MiB, 20 * MiB, 2), "pool at exit")
    eq(round(p["fragmentation"], 6), round(1 - 20 / 36, 6), "pool fragmentation at exit")
    eq(p["utilization"], 1.0, "peak allocated / peak reserved")
    # The layout behind the memory map: t[7] is block 2 of the second segment.
    eq([(seg["bytes"], [(b["offset"], b["bytes"]) for b in seg["blocks"]]) for seg in p["layout"]],
       [(20 * MiB, []), (20 * MiB, [(8 * MiB, 4 * MiB)])], "pool layout at exit")
    eq(int(p["layout"][1]["base"], 16) - int(p["layout"][0]["base"], 16), 20 * MiB, "segments are adjacent")


def buffer_pool_used_correctly_holds_its_reserve_and_leaks_nothing():
    r = run(sample("buffer_pool"), "20")
    eq(r.rc, 0, "exit status")
    rep = r.report
    s = rep["summary"]
    eq((s["leaked_allocations"], s["leaked_bytes"], s["held_bytes"]), (0, 0, 16 * MiB), "exit classification")
    eq(rep["growth"], [], "no growth")
    p = rep["pools"][0]
    eq((p["name"], p["reserved_bytes"], p["allocated_bytes"], p["free_bytes"], p["largest_free_block"], p["fragmentation"]),
       ("TensorBufferPool", 16 * MiB, 0, 16 * MiB, 16 * MiB, 0.0), "pool")
    # A stable footprint: every mark sees the same live and reserved bytes.
    eq({(m["live_bytes"], m["reserved_bytes"]) for m in rep["marks"]}, {(16 * MiB, 16 * MiB)}, "flat timeline")
    eq(len(rep["marks"]), 20, "marks")


def buffer_pool_misuse_points_at_the_acquire_site():
    r = run(sample("buffer_pool"), "--misuse", "5")
    eq(r.rc, 0, "exit status")
    rep = r.report
    eq([(l["kind"], l["bytes"], l["count"]) for l in rep["leaks"]], [("pool_block", 10 * MiB, 5)], "leaks")
    names = [f[0] for f in frames(rep["leaks"][0])]
    eq(names[:3], ["tensorleak_pool_alloc", "acquire", "serve_request_misused"], "leak stack")
    eq(frames(rep["leaks"][0])[1][2], marker_line("samples/buffer_pool.c", "ACQUIRE-SITE"), "acquire line")
    g = rep["growth"]
    eq([(x["kind"], x["bytes_per_mark"], x["marks"]) for x in g], [("pool_block", 2 * MiB, 5)], "growth")
    eq(rep["summary"]["held_bytes"], 16 * MiB, "the reserve is still held, not leaked")
    p = rep["pools"][0]
    eq((p["allocated_bytes"], p["free_bytes"], p["largest_free_block"]), (10 * MiB, 6 * MiB, 6 * MiB), "pool at exit")


def async_pool_reports_the_driver_reserve_and_the_one_leaked_tensor():
    r = run(sample("async_pool"), "10")
    eq(r.rc, 0, "exit status")
    check(f"reserved {32 * MiB} used {MiB}" in r.out, r.out)
    rep = r.report
    eq([(l["kind"], l["bytes"], l["count"]) for l in rep["leaks"]], [("device", MiB, 1)], "leak")
    eq(frames(rep["leaks"][0])[0][:1], ("scratch",), "leak function")
    p = rep["pools"][0]
    eq((p["kind"], p["name"], p["reserved_bytes"], p["allocated_bytes"], p["driver_used_bytes"], p["driver_mismatch"]),
       ("stream_ordered", "default mempool (device 0)", 32 * MiB, MiB, MiB, False), "pool from the driver's attributes")
    eq((p["reserved_high_bytes"], p["used_high_bytes"]), (32 * MiB, 7 * MiB), "high-water marks")
    s = rep["summary"]
    eq((s["reserved_bytes"], s["allocated_bytes"], s["gap_bytes"]), (32 * MiB, MiB, 31 * MiB), "reserved vs allocated")
    eq(rep["devices"][0]["free"], 16 * 1024 * MiB - 32 * MiB, "driver free")
    eq(rep["growth"], [], "one leak at the end is not growth")


def vmm_expandable_reports_handles_mappings_and_the_range():
    r = run(sample("vmm_expandable"))
    eq(r.rc, 0, "exit status")
    rep = r.report
    got = sorted((l["kind"], l["bytes"], l["count"], frames(l)[0][2]) for l in rep["leaks"])
    src = "samples/vmm_expandable.c"
    eq(got, sorted([("vmm_handle", 6 * MiB, 3, marker_line(src, "HANDLE-SITE")),
                    ("vmm_mapping", 6 * MiB, 3, marker_line(src, "MAP-SITE")),
                    ("vmm_reservation", 1 << 30, 1, marker_line(src, "RESERVE-SITE"))]), "leaks")
    s = rep["summary"]
    # Memory is the handles only: a mapping or an address range is not.
    eq((s["leaked_allocations"], s["leaked_bytes"], s["reserved_bytes"]), (7, 6 * MiB, 6 * MiB), "summary")
    clean = run(sample("vmm_expandable"), "--clean")
    eq((clean.report["summary"]["leaked_allocations"], clean.report["leaks"]), (0, []), "clean run")
    eq(clean.report["summary"]["total_allocations"], 11, "1 range + 5 handles + 5 mappings")


def a_footprint_that_plateaus_is_not_growth():
    r = run(prog("plateau"))
    eq(r.rc, 0, "exit status")
    rep = r.report
    eq(rep["growth"], [], "no growth")
    eq(rep["summary"]["leaked_allocations"], 0, "no leaks")
    lives = [m["live_bytes"] for m in rep["marks"]]
    eq(lives, [2 * MiB, 4 * MiB] + [6 * MiB] * 10, "rise then plateau")


def spawn(progname, env):
    tmp = tempfile.mkdtemp(prefix="tl-live-")
    e = {k: v for k, v in os.environ.items() if not k.startswith(("TENSORLEAK_", "SIMCUDA_"))}
    e.update(LD_LIBRARY_PATH=SIM, LD_PRELOAD=LIB, TENSORLEAK_OUTPUT=os.path.join(tmp, "r.%n.json"), **env)
    p = subprocess.Popen([prog(progname)], env=e, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    eq(p.stdout.readline().strip(), "ready", "program started")
    return p, tmp


def wait_for_files(tmp, n, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline:
        names = [x for x in os.listdir(tmp) if x.endswith(".json")]
        if len(names) >= n:
            return names
        time.sleep(0.005)
    fail(f"only {len(os.listdir(tmp))} of {n} reports after {timeout}s")


def hundred_sigusr1_during_churn_give_hundred_valid_snapshots():
    p, tmp = spawn("churn_threads", {"TENSORLEAK_QUIET": "1"})
    for i in range(100):
        p.send_signal(signal.SIGUSR1)
        wait_for_files(tmp, i + 1)
    p.stdin.close()
    out = p.stdout.read()
    # 12 s normally; ten times that on a loaded machine.
    eq((p.wait(timeout=130), out.strip()), (5, "churned ok"), "program output and status unchanged")
    names = sorted(os.listdir(tmp), key=lambda n: int(n.split(".")[1]))
    eq(names, [f"r.{i}.json" for i in range(1, 102)], "100 snapshots then the exit report, nothing else")
    for n in names[:100]:
        with open(os.path.join(tmp, n)) as f:
            snap = json.load(f)
        eq(snap["reason"], "signal", n)
        s = snap["summary"]
        # Consistent state: the three kept buffers plus at most one churn
        # allocation per thread in flight, and the sites agree with the total.
        check(3 * MiB <= s["live_bytes"] <= 3 * MiB + 4 * 32768, f"{n}: live bytes {s['live_bytes']}")
        eq(sum(l["bytes"] for l in snap["leaks"]), s["live_bytes"], f"{n}: sites add up to the total")
    with open(os.path.join(tmp, names[100])) as f:
        eq(json.load(f)["summary"]["leaked_bytes"], 0, "exit report")


def interval_marks_and_snapshots_on_a_timer():
    p, tmp = spawn("wait_signal", {"TENSORLEAK_INTERVAL": "0.05", "TENSORLEAK_QUIET": "1", "SIMCUDA_MEMORY": "1G"})
    wait_for_files(tmp, 3)
    p.stdin.close()
    eq(p.wait(timeout=20), 7, "exit status")
    reps = [json.load(open(os.path.join(tmp, n))) for n in os.listdir(tmp)]
    ticks = [r for r in reps if r["reason"] == "interval"]
    check(len(ticks) >= 3, f"interval reports: {len(ticks)}")
    exit_rep = [r for r in reps if r["reason"] == "exit"][0]
    marks = exit_rep["marks"]
    check(len(marks) >= 3 and all(m["label"] == "interval" for m in marks), "interval marks")
    # The watcher's marks read the device's free memory: 1 GiB less the two
    # buffers held while the program waits (the first mark), less one once
    # it freed the other on its way out.
    frees = [m["device_free"] for m in marks]
    check(frees[0] == GiB - 2 * MiB and all(f in (GiB - 2 * MiB, GiB - MiB) for f in frees), f"device_free {frees}")


def mark_signal_adds_marks_to_the_timeline():
    p, tmp = spawn("wait_signal", {"TENSORLEAK_MARK_SIGNAL": "SIGUSR2", "TENSORLEAK_QUIET": "1"})
    for i in range(3):
        p.send_signal(signal.SIGUSR2)
        time.sleep(0.05)
        p.send_signal(signal.SIGUSR1)  # a snapshot after the mark: proof it was handled
        wait_for_files(tmp, i + 1)
    p.stdin.close()
    eq(p.wait(timeout=20), 7, "exit status")
    exit_rep = [json.load(open(os.path.join(tmp, n))) for n in os.listdir(tmp)]
    exit_rep = [r for r in exit_rep if r["reason"] == "exit"][0]
    eq([(m["seq"], m["label"], m["live_bytes"]) for m in exit_rep["marks"]],
       [(i, "signal", 2 * MiB) for i in (1, 2, 3)], "three marks from the signal")


def marks_read_the_driver_free_memory_on_the_watcher_and_null_when_it_cannot_answer():
    # SIGUSR2 marks are taken on the watcher thread, which has no current
    # context: the figure is the device's all the same (the simulator's
    # cuMemGetInfo is exact: capacity less the 3 MiB held).  The last mark
    # comes after the driver's exit handler, when cuMemGetInfo answers no
    # more: unknown (null), not 0.
    p, tmp = spawn("mark_free", {"TENSORLEAK_MARK_SIGNAL": "SIGUSR2", "TENSORLEAK_QUIET": "1",
                                 "TENSORLEAK_INTERVAL": "0", "SIMCUDA_MEMORY": "1G",
                                 "SIMCUDA_POOL_QUERY": "fail-at-exit"})
    for i in range(2):
        p.send_signal(signal.SIGUSR2)
        # A snapshot that lists the mark: proof it was taken before the
        # program goes on (one signal may be handled before the other).
        deadline = time.time() + 20
        while True:
            n = len(os.listdir(tmp))
            p.send_signal(signal.SIGUSR1)
            names = wait_for_files(tmp, n + 1)
            last = max(names, key=lambda x: int(x.split(".")[1]))
            with open(os.path.join(tmp, last)) as f:
                if len(json.load(f)["marks"]) == i + 2:
                    break
            check(time.time() < deadline, f"mark {i + 2} not taken")
    p.stdin.close()
    eq(p.wait(timeout=20), 0, "exit status")
    reps = [json.load(open(os.path.join(tmp, n))) for n in os.listdir(tmp)]
    exit_rep = [r for r in reps if r["reason"] == "exit"][0]
    held = GiB - 3 * MiB
    eq([(m["label"], m["live_bytes"], m["device_free"]) for m in exit_rep["marks"]],
       [("main thread", 3 * MiB, held), ("signal", 3 * MiB, held), ("signal", 3 * MiB, held),
        ("after the driver's exit handler", 3 * MiB, None)], "each mark's free memory")


def owner_table(rep):
    return sorted((o["name"], o["class"], o["live_bytes"], o["live_allocations"]) for o in rep["owners"])


def owners_hold_cache_library_and_workspace_memory_and_user_memory_leaks():
    r = run(prog("owners_demo"), env={"LD_LIBRARY_PATH": PROGS + ":" + SIM})
    eq(r.rc, 0, "exit status: " + r.err)
    rep = r.report
    eq(owner_table(rep), sorted([("PyTorch caching allocator", "cache", 40 * MiB, 2), ("NCCL", "library", 8 * MiB, 1),
                                 ("cuBLASLt workspace", "workspace", 4 * MiB, 1), ("user", "user", 3 * MiB, 2)]),
       "owners")
    s = rep["summary"]
    eq((s["leaked_allocations"], s["leaked_bytes"], s["held_bytes"]), (2, 3 * MiB, 52 * MiB), "exit classification")
    # The async tensor came from libc10_cuda, but under cudaMallocAsync a
    # tensor is the program's own: a leak, not cache.
    eq(sorted((l["bytes"], frames(l)[0][0], l["owner"]) for l in rep["leaks"]),
       [(MiB, "c10_async_tensor", "user"), (2 * MiB, "main", "user")], "user leaks")
    held = {}
    for h in rep["held"]:  # two call sites in main for the two segments
        held[(h["owner"], h["owner_class"])] = held.get((h["owner"], h["owner_class"]), 0) + h["bytes"]
    eq(held, {("NCCL", "library"): 8 * MiB, ("PyTorch caching allocator", "cache"): 40 * MiB,
              ("cuBLASLt workspace", "workspace"): 4 * MiB}, "held")
    check("==" in r.err and "owners: " in r.err and "PyTorch caching allocator 40.0 MiB (cache)" in r.err, r.err)


def a_user_owner_rule_overrides_a_default():
    with tempfile.NamedTemporaryFile("w", suffix=".rules", delete=False) as f:
        f.write("# NCCL buffers we forgot to free are ours\nowner:our comm buffers:user:device:libnccl.so*\n")
    r = run(prog("owners_demo"), env={"LD_LIBRARY_PATH": PROGS + ":" + SIM, "TENSORLEAK_OWNERS": f.name})
    rep = r.report
    eq(owner_table(rep), sorted([("PyTorch caching allocator", "cache", 40 * MiB, 2), ("our comm buffers", "user", 8 * MiB, 1),
                                 ("cuBLASLt workspace", "workspace", 4 * MiB, 1), ("user", "user", 3 * MiB, 2)]),
       "owners with the override")
    eq((rep["summary"]["leaked_bytes"], rep["summary"]["held_bytes"]), (11 * MiB, 44 * MiB), "classification")
    r = run(prog("owners_demo"), env={"LD_LIBRARY_PATH": PROGS + ":" + SIM, "TENSORLEAK_DEFAULT_OWNERS": "0"})
    eq(owner_table(r.report), [("user", "user", 55 * MiB, 6)], "no default rules: everything is the user's")


def budget_crossing_warns_once_per_crossing_and_writes_a_report():
    plain = run(prog("budget_demo"), preload=False)
    r = run(prog("budget_demo"), env={"TENSORLEAK_BUDGET": "4M"})
    eq((r.rc, r.out), (plain.rc, plain.out), "program unaffected")
    eq(r.out.strip(), "budget_demo: held 10 then 6 MiB", "output")
    warnings = [l for l in r.err.splitlines() if "budget of 4.0 MiB on device 0 crossed" in l]
    eq(len(warnings), 2, "one warning per crossing: " + r.err)
    check("at fill " in warnings[0] and "(5.0 MiB held)" in warnings[0], warnings[0])
    budget = [x for x in r.reports if x["reason"] == "budget"]
    eq(len(budget), 2, "budget reports")
    eq([x["summary"]["live_bytes"] for x in budget], [5 * MiB, 5 * MiB], "live bytes when crossed")
    eq((r.report["summary"]["budget_crossings"], r.report["summary"]["budget_refusals"]), (2, 0), "counters")


def enforced_budget_refuses_the_crossing_allocation_and_retry_succeeds():
    r = run(prog("budget_demo"), "enforce", env={"TENSORLEAK_BUDGET": "4M", "TENSORLEAK_BUDGET_ENFORCE": "1"})
    eq((r.rc, r.out.strip()), (0, "budget_demo: refused at 5, retry ok"), "refused exactly at the crossing")
    s = r.report["summary"]
    eq((s["budget_refusals"], s["leaked_bytes"], s["failed_allocations"]), (1, 0, 0), "counted as a refusal")
    eq(len([x for x in r.reports if x["reason"] == "budget"]), 1, "one budget report")
    check("would be crossed: allocation refused" in r.err, r.err)
    plain = run(prog("budget_demo"), "enforce", preload=False)
    eq(plain.out.strip(), "budget_demo: nothing refused", "without tensorleak nothing is refused")


def owner_class_budget_names_the_class_that_crossed():
    r = run(prog("owners_demo"), env={"LD_LIBRARY_PATH": PROGS + ":" + SIM, "TENSORLEAK_BUDGET": "cache:32M,user:2M"})
    eq(r.rc, 0, "exit status")
    lines = [l for l in r.err.splitlines() if "budget of" in l]
    eq(len(lines), 2, "two crossings: " + r.err)
    check(lines[0].startswith("tensorleak: cache budget of 32.0 MiB on device 0 crossed at c10_segment_alloc"), lines[0])
    check("(40.0 MiB held)" in lines[0], lines[0])
    check(lines[1].startswith("tensorleak: user budget of 2.0 MiB on device 0 crossed") and "(3.0 MiB held)" in lines[1],
          lines[1])
    eq([x["label"] for x in r.reports if x["reason"] == "budget"], ["cache", "user"], "budget reports")


def shallow_stacks_end_as_libunwind_ends_them_without_unwinding_each_time():
    # Stacks shorter than the depth limit end in glibc's entry code, which the
    # frame-pointer walk cannot cross: the thread's bottom frames are learned
    # from libunwind once and reused, and every stack still equals libunwind's
    # (the first capture of each call site is libunwind's own, so any
    # difference would split a call site in two).
    n = 100
    r = run(prog("shallow_stacks"), str(n))
    eq((r.rc, r.out.strip()), (0, f"shallow_stacks: {n} leaks from each thread"), "program ran")
    leaks = sorted(r.report["leaks"], key=lambda s: frames(s)[0][0])
    eq([(frames(s)[0][0], s["count"]) for s in leaks], [("leak_from_main", n), ("leak_from_worker", n)],
       "one call site per thread")
    main_stack = [f[0] for f in frames(leaks[0])]
    worker_stack = [f[0] for f in frames(leaks[1])]
    eq(main_stack[:2], ["leak_from_main", "main"], "main thread's top frames")
    eq(frames(leaks[0])[0][1:], ("shallow_stacks.c", marker_line("tests/integration/progs/shallow_stacks.c",
                                                                   "LEAK_MAIN")), "main leak line")
    check(main_stack[-1] == "_start" and any("libc_start_main" in f for f in main_stack[2:]),
          f"main thread's stack ends in glibc's start code: {main_stack}")
    eq(worker_stack[:2], ["leak_from_worker", "worker"], "worker's top frames")
    check("start_thread" in worker_stack[2:] and "clone" in worker_stack[-1],
          f"worker's stack ends in start_thread and clone: {worker_stack}")
    t = r.report["tracker"]
    eq(t["thread_entries_learned"], 2, "bottom frames learned once per thread")
    # Per thread: the first capture, whose libunwind run both learns the
    # entry and confirms the walk ending in it; the rest are walks.
    eq(t["stacks_unwound"], 2, f"stacks unwound for {2 * n} allocations")


def one_call_reaching_two_allocation_kinds_keeps_a_call_site_per_kind():
    # The same stack (one call instruction) allocates device and pinned host
    # memory in turn: a walk found again must not hand back the call site it
    # was last interned as when the kind differs.
    n = 100
    r = run(prog("two_kinds_one_call"), str(n))
    eq((r.rc, r.out.strip()), (0, f"two_kinds_one_call: {n} leaks of each kind"), "program ran")
    line = marker_line("tests/integration/progs/two_kinds_one_call.c", "LEAK_BOTH")
    leaks = sorted(r.report["leaks"], key=lambda s: s["kind"])
    eq([(s["kind"], s["count"], s["bytes"], frames(s)[0][1:]) for s in leaks],
       [("device", n, n * 4096, ("two_kinds_one_call.c", line)),
        ("host_pinned", n, n * 4096, ("two_kinds_one_call.c", line))], "one call site per kind")
    eq(frames(leaks[0]), frames(leaks[1]), "the two call sites' stacks")


def stacks_alike_at_the_top_and_apart_below_keep_a_call_site_each():
    # Two paths in turn whose stacks hold the same frames at the same
    # addresses for ten frames and differ below: a stack found again (the
    # thread's kept walks) must be found by every frame, and each path is
    # unwound by libunwind once, not per allocation.
    n = 100
    r = run(prog("stacks_apart_deep_down"), str(n))
    eq((r.rc, r.out.strip()), (0, f"stacks_apart_deep_down: {n} leaks from each path"), "program ran")
    line = marker_line("tests/integration/progs/stacks_apart_deep_down.c", "LEAK")
    top = ["leak"] + [f"down{i}" for i in range(1, 9)]
    leaks = sorted(r.report["leaks"], key=lambda s: [f[0] for f in frames(s)])
    eq([(s["count"], s["bytes"], [f[0] for f in frames(s)][:11]) for s in leaks],
       [(n, n * 4096, top + ["from_a", "main"]), (n, n * 4096, top + ["from_b", "main"])],
       "one call site per path")
    eq(frames(leaks[0])[0][1:], ("stacks_apart_deep_down.c", line), "the leak's line")
    eq(r.report["tracker"]["stacks_unwound"], 2, f"stacks unwound for {2 * n} allocations")


def pool_destroyed_during_snapshots_never_deadlocks():
    # tensorleak_pool_destroy used to take shard locks under the pools' lock
    # while a report holds every shard lock and then takes the pools' lock.
    r = run(prog("pool_race"), "20", "20000")
    eq((r.rc, r.out.strip()), (0, "pool_race: all pools, 50+ snapshots"), "both threads finished")
    snaps = [x for x in r.reports if x["reason"] == "api"]
    check(len(snaps) >= 50, f"{len(snaps)} snapshots written")
    eq(r.report["summary"]["leaked_allocations"], 0, "nothing leaked")



# ---- no report replaces another ---------------

def run_cli_sim(progname, *args, cwd, output=None):
    """`tensorleak run --sim` with the default pattern, in `cwd`."""
    e = {k: v for k, v in os.environ.items() if not k.startswith(("TENSORLEAK_", "SIMCUDA_", "LD_PRELOAD"))}
    cmd = [os.path.join(BUILD, "tools", "tensorleak"), "run", "--sim"]
    if output:
        cmd += ["-o", output]
    p = subprocess.run(cmd + ["--", prog(progname), *args], env=e, cwd=cwd, capture_output=True, text=True, timeout=50)
    pid = int(re.search(r"^pid (\d+)$", p.stdout, re.M).group(1))
    return p, pid


def load(path):
    with open(path) as f:
        return json.load(f)


def a_snapshot_then_exit_leaves_two_reports_under_the_default_pattern():
    tmp = tempfile.mkdtemp(prefix="tl-files-")
    p, pid = run_cli_sim("snap_exit", cwd=tmp)
    eq(p.returncode, 0, "exit status: " + p.stderr)
    eq(sorted(os.listdir(tmp)), sorted([f"tensorleak.{pid}.1.json", f"tensorleak.{pid}.json"]), "one file per report")
    snap, ex = load(os.path.join(tmp, f"tensorleak.{pid}.1.json")), load(os.path.join(tmp, f"tensorleak.{pid}.json"))
    eq((snap["reason"], snap["label"], snap["seq"], snap["summary"]["live_bytes"]), ("api", "before-exit", 1, MiB), "snapshot")
    eq((ex["reason"], ex["seq"], ex["summary"]["leaked_bytes"]), ("exit", 2, MiB), "exit report")
    check(f'tensorleak: snapshot "before-exit": 1 live allocation(s), 1.0 MiB; report: tensorleak.{pid}.1.json\n' in p.stderr,
          "the snapshot's stderr line names its file: " + p.stderr)
    check(p.stderr.rstrip().endswith(f"Report: tensorleak.{pid}.json"), "the exit report names its file: " + p.stderr)


def a_taken_name_is_never_replaced_the_report_takes_the_next_number():
    tmp = tempfile.mkdtemp(prefix="tl-files-")
    # Files of someone else under the names this run would use: the plain
    # name and the first numbered one.
    for name in ("out.json", "out.1.json"):
        with open(os.path.join(tmp, name), "w") as f:
            f.write("not ours\n")
    p, pid = run_cli_sim("snap_exit", cwd=tmp, output="out.json")
    eq(p.returncode, 0, "exit status: " + p.stderr)
    eq(sorted(os.listdir(tmp)), ["out.1.json", "out.2.json", "out.3.json", "out.json"], "files")
    for name in ("out.json", "out.1.json"):
        eq(open(os.path.join(tmp, name)).read(), "not ours\n", name + " left alone")
    eq((load(os.path.join(tmp, "out.2.json"))["reason"], load(os.path.join(tmp, "out.3.json"))["reason"]),
       ("api", "exit"), "the snapshot took the next free number, the exit report the one after it")
    check("report: out.2.json\n" in p.stderr and p.stderr.rstrip().endswith("Report: out.3.json"), p.stderr)


def snapshot_to_writes_exactly_the_given_path():
    tmp = tempfile.mkdtemp(prefix="tl-files-")
    target = os.path.join(tmp, "sub-dir-less.json")
    with open(target, "w") as f:
        f.write("old\n")  # the caller named this path: it is replaced
    p, pid = run_cli_sim("snap_exit", target, cwd=tmp)
    check("snapshot_to 0\n" in p.stdout, p.stdout)
    eq(sorted(os.listdir(tmp)), sorted(["sub-dir-less.json", f"tensorleak.{pid}.2.json", f"tensorleak.{pid}.json"]), "files")
    r = load(target)
    eq((r["reason"], r["label"], r["seq"], r["summary"]["live_bytes"]), ("api", "to-path", 1, MiB), "report at the path")
    check(f"report: {target}\n" in p.stderr, p.stderr)
    # Without tensorleak the call is a no-op that says so.
    e = dict(os.environ, LD_LIBRARY_PATH=SIM)
    e.pop("LD_PRELOAD", None)
    plain = subprocess.run([prog("snap_exit"), os.path.join(tmp, "never.json")], env=e, capture_output=True, text=True)
    check("snapshot_to -1\n" in plain.stdout and not os.path.exists(os.path.join(tmp, "never.json")), plain.stdout)


# ---- memory counted once; owners by what holds memory ----

GiB = 1 << 30


def by_kind(sites):
    out = {}
    for x in sites:
        b, c = out.get(x["kind"], (0, 0))
        out[x["kind"]] = (b + x["bytes"], c + x["count"])
    return out


def expandable_segments_count_memory_once_and_address_space_apart():
    # PyTorch with expandable_segments:True (the fake libc10_cuda): two
    # 18 GiB ranges reserved, five handles (4 x 4 MiB tensors, one 2 MiB raw
    # block) mapped into them.  Memory is the handles: 18 MiB, once.
    env = {"LD_LIBRARY_PATH": PROGS + ":" + SIM, "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    r = run(prog("owner_torch"), env=env)
    eq((r.rc, r.out.strip()), (0, "owner_torch: 3 tensors kept"), "program ran: " + r.err)
    rep = r.report
    s = rep["summary"]
    eq((s["held_bytes"], s["live_bytes"], s["reserved_bytes"], s["leaked_bytes"], s["leaked_allocations"]),
       (18 * MiB, 18 * MiB, 18 * MiB, 0, 0), "held, live, reserved, leaked")
    eq((s["address_space_bytes"], s["address_space_reservations"], s["leaked_address_space_bytes"]),
       (36 * GiB, 2, 0), "address space, apart")
    eq(by_kind(rep["held"]), {"vmm_reservation": (36 * GiB, 2), "vmm_handle": (18 * MiB, 5),
                              "vmm_mapping": (18 * MiB, 5)}, "held entries keep their kind and range")
    eq({h["owner"] for h in rep["held"]}, {"PyTorch caching allocator"}, "one owner")
    eq(owner_table(rep), sorted([("PyTorch caching allocator", "cache", 18 * MiB, 12), ("user", "user", 0, 0)]),
       "owner's bytes are its handles")
    eq([o["peak_bytes"] for o in rep["owners"] if o["name"] == "PyTorch caching allocator"], [18 * MiB], "owner peak")
    check("held by pools at exit (not leaks): 18.0 MiB\n" in r.err, r.err)
    check("address space reserved (VMM ranges, not memory): 36.0 GiB in 2 range(s)\n" in r.err, r.err)

    # Budgets count memory only: 16 MiB of cache is crossed by the fifth
    # handle (18 MiB), not by the first 18 GiB reservation.
    r = run(prog("owner_torch"), env=dict(env, TENSORLEAK_BUDGET="cache:16M"))
    lines = [l for l in r.err.splitlines() if "budget of" in l]
    eq(len(lines), 1, "one crossing: " + r.err)
    check(lines[0].startswith("tensorleak: cache budget of 16.0 MiB on device 0 crossed at ") and
          "ExpandableSegment" in lines[0] and lines[0].endswith("(18.0 MiB held)"), lines[0])

    # Growth: a mark after each tensor.  The handles' call site grows 4 MiB a
    # mark; the mappings' (same ranges) and the reservation's are no bytes.
    r = run(prog("owner_torch"), "marks", env=env)
    grown = [(g["kind"], g["bytes_per_mark"], g["marks"]) for g in r.report["growth"] if g.get("scope", "call_site") == "call_site"]
    eq(grown, [("vmm_handle", 4 * MiB, 4)], "only memory grows")


def leaked_vmm_range_and_mapping_are_reported_as_address_space():
    r = run(sample("vmm_expandable"))
    s = r.report["summary"]
    eq((s["leaked_bytes"], s["leaked_allocations"], s["held_bytes"]), (6 * MiB, 7, 0), "memory leaked: the handles")
    eq((s["address_space_bytes"], s["address_space_reservations"], s["leaked_address_space_bytes"]),
       (GiB, 1, GiB), "address space")
    eq([l["kind"] for l in r.report["leaks"]], ["vmm_handle", "vmm_reservation", "vmm_mapping"],
       "memory first, then address space")
    check("tensorleak: 3 leaked device allocations (6.0 MiB), 1 leaked VMM address range and 3 leaked VMM mappings "
          "from 3 call sites; 1.0 GiB of address space left reserved\n" in r.err, r.err)
    check("Leak of 1.0 GiB of address space (not memory) in 1 allocation(s) [vmm_reservation]" in r.err, r.err)
    check("Leak of 6.0 MiB mapped range (memory counted at its handle) in 3 allocation(s) [vmm_mapping]" in r.err, r.err)
    check("Leak of 6.0 MiB in 3 allocation(s) [vmm_handle]" in r.err, r.err)
    # A budget below the reservation but above the memory is never crossed.
    r = run(sample("vmm_expandable"), env={"TENSORLEAK_BUDGET": "512M", "TENSORLEAK_BUDGET_ENFORCE": "1"})
    eq((r.rc, r.report["summary"]["budget_crossings"], r.report["summary"]["budget_refusals"]), (0, 0, 0),
       "1 GiB of address space is not 1 GiB against a budget")


def uncached_pytorch_tensors_are_leaks_and_cached_segments_are_held():
    env = {"LD_LIBRARY_PATH": PROGS + ":" + SIM}
    # Caching: each tensor got a segment (cudaMalloc in alloc_block), kept
    # as cache after the tensor died: held, nothing leaked.
    r = run(prog("owner_torch"), env=env)
    s = r.report["summary"]
    eq((s["held_bytes"], s["leaked_bytes"], s["leaked_allocations"]), (13 * MiB, 0, 0), "caching: held")
    eq(owner_table(r.report), sorted([("PyTorch caching allocator", "cache", 13 * MiB, 5), ("user", "user", 0, 0)]),
       "caching: owners")
    # PYTORCH_NO_CUDA_MEMORY_CACHING=1: one cudaMalloc per tensor from
    # uncached_allocate (and from raw_alloc, where it is inlined); the dead
    # tensor was freed, the three kept ones and the raw block are leaks.
    r = run(prog("owner_torch"), env=dict(env, PYTORCH_NO_CUDA_MEMORY_CACHING="1"))
    rep = r.report
    s = rep["summary"]
    eq((s["held_bytes"], s["leaked_bytes"], s["leaked_allocations"]), (0, 10 * MiB, 4), "uncached: leaks")
    eq(owner_table(rep), sorted([("PyTorch tensors (uncached)", "user", 10 * MiB, 4), ("user", "user", 0, 0)]),
       "uncached: the program's tensors")
    src = "tests/integration/progs/owner_c10.c"
    got = sorted((l["bytes"], l["count"], l["owner"], frames(l)[0][2]) for l in rep["leaks"])
    eq(got, [(MiB, 1, "PyTorch tensors (uncached)", marker_line(src, "RAW-UNCACHED-SITE")),
             (9 * MiB, 3, "PyTorch tensors (uncached)", marker_line(src, "UNCACHED-SITE"))], "leak sites")
    names = sorted(frames(l)[0][0] for l in rep["leaks"])
    check("uncached_allocate" in names[1] and "raw_alloc" in names[0], names)
    # Budgets attribute as reports do, although uncached_allocate is a static
    # function that dladdr cannot name: its tensors count against the user's
    # budget, the caching path's segments against the cache's.
    for extra, want in [({"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}, ["user"]), ({}, ["cache"])]:
        r = run(prog("owner_torch"), env=dict(env, TENSORLEAK_BUDGET="user:8M,cache:8M", **extra))
        eq([x["label"] for x in r.reports if x["reason"] == "budget"], want, f"budget crossed with {extra}")


def nvidia_library_memory_is_held_by_its_owner():
    r = run(prog("owner_nvlibs"), env={"LD_LIBRARY_PATH": PROGS + ":" + SIM})
    eq((r.rc, r.out.strip()), (0, "owner_nvlibs: done"), "program ran: " + r.err)
    rep = r.report
    eq(owner_table(rep), sorted([
        ("cuRAND generator state", "library", 256 << 10, 1), ("cuFFT plans", "workspace", 8 * MiB, 1),
        ("cuSPARSE", "library", MiB, 1), ("cuSOLVER", "library", 2 * MiB + (512 << 10), 2),
        ("cuDNN", "library", 4 * MiB, 1), ("cuDNN frontend", "library", 3 * MiB, 1),
        ("user", "user", 5 * MiB, 1)]), "owners")
    s = rep["summary"]
    eq((s["leaked_bytes"], s["leaked_allocations"], s["held_bytes"]), (5 * MiB, 1, 18 * MiB + (768 << 10)),
       "only the program's own buffer leaks")
    eq([(l["owner"], frames(l)[0][2]) for l in rep["leaks"]],
       [("user", marker_line("tests/integration/progs/owner_nvlibs.c", "USER-LEAK-SITE"))], "the leak")
    mods = sorted(os.path.basename(frames_mod) for h in rep["held"] for frames_mod in [h["stack"][0]["module"] or ""])
    eq(mods, sorted(["libcurand.so.10", "libcufft.so.11", "libcusparse.so.12", "libcusolver.so.11",
                     "libcudnn_engines_precompiled.so.9", "it_owner_nvlibs", "it_owner_nvlibs"]),
       "held through each library's module (cuSOLVER static and the frontend in the program)")


def owner_rule_globs_match_mangled_and_demangled_names():
    # Reports match a frame's mangled symbol and, where __cxa_demangle is
    # loaded, its demangled name: every C++ owner is given both ways.  The
    # names are those of the real libraries (a torch 2.11 run, g++ for the
    # same declarations); c++filt demangles as libstdc++ does.
    import fnmatch
    rules = []
    with open(os.path.join(SOURCE, "data", "owners.rules")) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                _, name, cls, kinds, pattern = line.split(":", 4)
                rules.append((name, kinds, pattern))

    def owner(sym, kind):
        for name, kinds, pattern in rules:
            if (kinds == "*" or kind in kinds.split(",")) and fnmatch.fnmatchcase(sym, pattern):
                return name
        return None

    native = "_ZN3c104cuda20CUDACachingAllocator6Native"
    cases = [
        (native + "22DeviceCachingAllocator11alloc_blockERNS2_12_GLOBAL__N_111AllocParamsEbRKSt10shared_ptrINS_15"
         "GatheredContextEERSt11unique_lockISt15recursive_mutexE", "device", "PyTorch caching allocator"),
        (native + "12_GLOBAL__N_117ExpandableSegment3mapENS3_12SegmentRangeE", "vmm_handle", "PyTorch caching allocator"),
        (native + "12_GLOBAL__N_117ExpandableSegment15mapAndSetAccessEmm", "vmm_mapping", "PyTorch caching allocator"),
        (native + "L17uncached_allocateEm", "device", "PyTorch tensors (uncached)"),
        (native + "22NativeCachingAllocator8allocateEm", "device", "PyTorch tensors (uncached)"),
        (native + "22NativeCachingAllocator9raw_allocEm", "device", "PyTorch tensors (uncached)"),
        (native + "22NativeCachingAllocator21raw_alloc_with_streamEmP11CUstream_st", "device", "PyTorch tensors (uncached)"),
        ("_ZN14cudnn_frontend6detail11cuda_mallocEPPvm", "device", "cuDNN frontend"),
        ("_ZN14cudnn_frontend5graph5Graph8autotuneEv", "device", "cuDNN frontend"),
    ]
    demangled = subprocess.run(["c++filt"], input="\n".join(c[0] for c in cases) + "\n", capture_output=True,
                               text=True, check=True).stdout.splitlines()
    eq(len(demangled), len(cases), "c++filt answered each name")
    for (sym, kind, want), dem in zip(cases, demangled):
        check(dem != sym, f"c++filt demangled {sym}")
        eq(owner(sym, kind), want, f"mangled {sym}")
        eq(owner(dem, kind), want, f"demangled {dem}")
    # C entry points of statically linked libraries, and the modules.
    for sym, want in [("curandCreateGenerator", "cuRAND generator state"), ("cufftPlanMany", "cuFFT plans"),
                      ("cusparseCreate", "cuSPARSE"), ("cusolverDnCreate", "cuSOLVER"),
                      ("libcurand.so.10.3.10.19", "cuRAND generator state"), ("libcufft.so.12", "cuFFT plans"),
                      ("libcufftw.so.11", "cuFFT plans"), ("libcusparse.so.12", "cuSPARSE"),
                      ("libcusolverMg.so.11", "cuSOLVER"), ("libcudnn_engines_runtime_compiled.so.9", "cuDNN")]:
        eq(owner(sym, "device"), want, sym)


def cli_counts_address_space_apart_in_check_text_merge_and_html():
    cli = os.path.join(BUILD, "tools", "tensorleak")
    tmp = tempfile.mkdtemp(prefix="tl-it-cli-")

    def saved(r, name):
        path = os.path.join(tmp, name)
        with open(path, "w") as f:
            json.dump(r.report, f)
        return path

    vmm = saved(run(sample("vmm_expandable")), "vmm.json")
    # The gate counts memory: 6 MiB of handles, not the 1 GiB range and the
    # 6 MiB of mappings of the same handles.
    c = subprocess.run([cli, "check", vmm, "--max-leaked-bytes", "6M"], capture_output=True, text=True)
    eq((c.returncode, c.stdout.split(":")[1].strip()), (0, "PASS"), "check within 6 MiB: " + c.stdout)
    c = subprocess.run([cli, "check", vmm], capture_output=True, text=True)
    check(c.returncode == 1 and "6291456 byte(s) leaked" in c.stdout, c.stdout)
    t = subprocess.run([cli, "report", vmm], capture_output=True, text=True).stdout
    check("3 leaked device allocations (6.0 MiB), 1 leaked VMM address range and 3 leaked VMM mappings from 3 call sites; "
          "1.0 GiB of address space left reserved\n" in t, t)
    check("Leak of 1.0 GiB of address space (not memory) in 1 allocation(s) [vmm_reservation]" in t, t)
    check("address space reserved (VMM ranges, not memory): 1.0 GiB in 1 range(s)\n" in t, t)
    sarif = subprocess.run([cli, "report", "--format", "sarif", vmm], capture_output=True, text=True).stdout
    check("Leak of 1.0 GiB of address space (not memory) (1073741824 bytes)" in sarif, sarif[:2000])
    clean = saved(run(sample("vmm_expandable"), "--clean"), "clean.json")
    d = subprocess.run([cli, "diff", clean, vmm], capture_output=True, text=True).stdout
    check(d.splitlines()[0].endswith("): +6291456 byte(s) (+6.0 MiB), +7 allocation(s) in 3 changed call site(s)"), d)

    # Two ranks of the PyTorch expandable-segments program, merged.
    env = {"LD_LIBRARY_PATH": PROGS + ":" + SIM, "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    ranks = [saved(run(prog("owner_torch"), env=dict(env, RANK=str(i))), f"rank{i}.json") for i in (0, 1)]
    out = os.path.join(tmp, "merged.json")
    m = subprocess.run([cli, "merge", *ranks, "-o", out], capture_output=True, text=True)
    eq(m.returncode, 0, "merge: " + m.stderr)
    merged = json.load(open(out))
    s = merged["summary"]
    eq((s["held_bytes"], s["address_space_bytes"], s["address_space_reservations"]), (36 * MiB, 72 * GiB, 4),
       "merged: memory once, address space apart")
    eq([h["kind"] for h in merged["held"]][:4], ["vmm_handle"] * 4, "merged held: memory first")

    # The first H200 run's PyTorch expandable-segments report (unedited, tree
    # 482c62f): its summary says held 314.7 GiB; the HTML owner table must
    # count the caching allocator's handles only, 62 MiB.
    real = os.path.join(SOURCE, "tests", "integration", "data", "h200-torch-expandable.json")
    h = subprocess.run([cli, "report", "--format", "html", real], capture_output=True, text=True)
    eq(h.returncode, 0, "html: " + h.stderr)
    rows = dict(re.findall(r'<tr class="owner" data-owner="([^"]+)" data-held="(\d+)"', h.stdout))
    eq(rows.get("PyTorch caching allocator"), str(65011712), "real report: held by the caching allocator")



# ---- no impossible figures; unknown is not zero

ISO_MS = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"


def async_pool_at_exit_shows_the_last_good_driver_reading():
    # The driver stops answering pool queries at exit, as NVIDIA's did on the
    # H200 (reserved 0 B, allocated 16.0 MiB, gap 16777216.0 TiB).
    r = run(sample("async_pool"), "10", env={"SIMCUDA_POOL_QUERY": "fail-at-exit"})
    eq(r.rc, 0, "exit status: " + r.err)
    rep = r.report
    p = rep["pools"][0]
    eq((p["reserved_bytes"], p["allocated_bytes"], p["free_bytes"], p["driver_used_bytes"], p["reading"]),
       (32 * MiB, MiB, 31 * MiB, MiB, "last_good"), "the pool's last good reading")
    check(re.fullmatch(ISO_MS, p["reading_time"]), "reading time: " + repr(p["reading_time"]))
    s = rep["summary"]
    eq((s["reserved_bytes"], s["allocated_bytes"], s["gap_bytes"], s["invariants_repaired"], rep["repairs"]),
       (32 * MiB, MiB, 31 * MiB, 0, []), "summary: nothing to repair")
    d = rep["devices"][0]
    eq((d["reserved_bytes"], d["gap_bytes"], d["free"], d["total"], d["reading"]),
       (32 * MiB, 31 * MiB, None, 16 * 1024 * MiB, "last_good"), "device: its size from the driver's last answer")
    check(re.fullmatch(ISO_MS, d["reading_time"]), "device reading time: " + repr(d["reading_time"]))
    pid = rep["pid"]
    lines = [l for l in r.err.splitlines() if l.startswith(f"=={pid}== pool") or l.startswith(f"=={pid}== device")]
    eq(len(lines), 2, "pool and device lines: " + r.err)
    check(re.fullmatch(re.escape(f"=={pid}== pool 'default mempool (device 0)' (stream_ordered, device 0): reserved 32.0 MiB, "
                                 "allocated 1.0 MiB; largest free block unknown (fragmentation unknown) [driver reading of ")
                       + ISO_MS + r"\]", lines[0]), lines[0])
    eq(lines[1], f"=={pid}== device 0: reserved 32.0 MiB, allocated 1.0 MiB, gap 31.0 MiB; "
                 "largest free block unknown (fragmentation unknown)", "device line")
    check("TiB" not in r.err and not [l for l in r.err.splitlines() if l.startswith("tensorleak: ")],
          "no warning, no wrapped size: " + r.err)
    # While the driver answers, the reading is current.
    r = run(sample("async_pool"), "10")
    eq(r.report["pools"][0]["reading"], "current", "reading while the driver answers")


def a_pool_the_driver_never_answered_for_is_repaired_and_said_so():
    r = run(sample("async_pool"), "10", env={"SIMCUDA_POOL_QUERY": "fail"})
    eq(r.rc, 0, "exit status: " + r.err)
    rep = r.report
    p = rep["pools"][0]
    eq((p["reserved_bytes"], p["allocated_bytes"], p["reading"], p["reading_time"], p["largest_free_block"],
        p["fragmentation"]), (MiB, MiB, "none", None, None, None), "reserve raised to what is allocated; layout unknown")
    eq(rep["repairs"], [
        {"invariant": "allocated <= reserved", "where": "pool 'default mempool (device 0)'", "figure": "reserved_bytes",
         "was": 0, "now": MiB},
        {"invariant": "allocated <= reserved", "where": "device 0", "figure": "reserved_bytes", "was": 0, "now": MiB},
        {"invariant": "allocated <= reserved", "where": "summary", "figure": "reserved_bytes", "was": 0, "now": MiB},
    ], "repairs")
    s = rep["summary"]
    eq((s["gap_bytes"], s["invariants_repaired"]), (0, 3), "gap and count")
    warnings = [l for l in r.err.splitlines() if l.startswith("tensorleak: ")]
    eq(warnings, ["tensorleak: 3 impossible figure(s) in this report repaired (first: allocated <= reserved at pool "
                  "'default mempool (device 0)', reserved_bytes 0 -> 1048576); listed under \"repairs\" in the report"],
       "one warning")
    check("[the driver never answered]" in r.err, r.err)


def unknown_free_space_is_null_in_json_and_unknown_on_stderr():
    # A driver pool: no layout.
    rep = run(sample("async_pool"), "10").report
    nulls = (None, None)
    eq((rep["pools"][0]["largest_free_block"], rep["pools"][0]["fragmentation"]), nulls, "driver pool")
    eq((rep["devices"][0]["largest_free_block"], rep["devices"][0]["fragmentation"]), nulls, "its device")
    eq((rep["summary"]["largest_free_block"], rep["summary"]["fragmentation"]), nulls, "summary")
    # A cache nobody annotated (PyTorch's, recognised by the owner rules).
    r = run(prog("owners_demo"), env={"LD_LIBRARY_PATH": PROGS + ":" + SIM})
    rep = r.report
    eq((rep["devices"][0]["largest_free_block"], rep["devices"][0]["fragmentation"]), nulls, "cache device")
    eq((rep["summary"]["largest_free_block"], rep["summary"]["fragmentation"]), nulls, "cache summary")
    check(re.search(r"==\d+== device 0: reserved [^;]+; largest free block unknown \(fragmentation unknown\)\n", r.err),
          r.err)
    # An annotated pool: its layout is known, numbers stay numbers.
    rep = run(sample("caching_allocator"), env={"SIMCUDA_MEMORY": "48M"}).report
    p = rep["pools"][0]
    check(isinstance(p["largest_free_block"], int) and isinstance(p["fragmentation"], float), repr(p))
    check(isinstance(rep["summary"]["largest_free_block"], int), repr(rep["summary"]))


if __name__ == "__main__":
    name = sys.argv[1]
    fn = globals().get(name)
    if not fn:
        fail(f"no test {name}")
    fn()
    print("ok", name)
