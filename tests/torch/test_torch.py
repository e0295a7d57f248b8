#!/usr/bin/env python3
"""Real PyTorch from PyPI on the simulated CUDA stack (suite 'torch').

Each test runs one scenario of torch_app.py twice: under `tensorleak sim`
(untracked) and under `tensorleak run --sim`.  Both runs must print the same
lines and exit with the same status; the last line is torch's own account of
its pool on device 0, and the exit report's pool 'torch cuda:0' must hold
exactly those figures.  meson runs one test per process:
`test_torch.py NAME`.

The interpreter is $TL_TORCH_PYTHON when set (a virtual environment holding
torch), else the python3 running this file.  Without torch the test is
skipped with one line (exit 77) — except under CI=true, where a missing
torch is a failure: CI installs it (scripts/install-deps.sh).
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import scratch  # noqa: E402

scratch.use()

HERE = os.path.dirname(os.path.abspath(__file__))
CLI = os.environ["TL_CLI"]
PYTHON = os.environ.get("TL_TORCH_PYTHON") or sys.executable
APP = os.path.join(HERE, "torch_app.py")
MIB = 1 << 20


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def eq(actual, expected, what):
    if actual != expected:
        fail(f"{what}: expected {expected!r}, got {actual!r}")


def need_torch():
    p = subprocess.run([PYTHON, "-c", "import torch; print(torch.__version__)"],
                       capture_output=True, text=True, timeout=300)
    if p.returncode == 0:
        return p.stdout.strip()
    why = (p.stderr.strip().splitlines() or ["no output"])[-1]
    if os.environ.get("CI") == "true":
        fail(f"torch cannot be imported by {PYTHON} under CI=true "
             f"(scripts/install-deps.sh installs it): {why}")
    print(f"SKIP: torch is not installed for {PYTHON} (pip install torch==2.15.0, "
          f"or set TL_TORCH_PYTHON): {why}")
    sys.exit(77)


def app_env(mode):
    """The caller's environment without tensorleak's or torch's allocator
    settings, plus the allocator mode under test."""
    drop = ("LD_PRELOAD", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_NO_CUDA_MEMORY_CACHING")
    e = {k: v for k, v in os.environ.items() if not k.startswith(("TENSORLEAK_", "SIMCUDA_")) and k not in drop}
    e.update(mode)
    return e


def run_both(scenario, mode):
    """(torch's printed lines as JSON, the exit report, the out-of-memory
    reports) after checking that both runs print the same and exit 0."""
    tmp = tempfile.mkdtemp(prefix="tl-torch-")
    argv = [PYTHON, APP, scenario]
    env = app_env(mode)
    plain = subprocess.run([CLI, "sim", "--"] + argv, env=env, capture_output=True, text=True, timeout=600)
    traced = subprocess.run([CLI, "run", "--sim", "--quiet", "-o", os.path.join(tmp, "tl.%p.json"), "--"] + argv,
                            env=env, capture_output=True, text=True, timeout=600)
    eq(plain.returncode, 0, f"exit status under tensorleak sim; stderr: {plain.stderr[-3000:]}")
    eq(traced.returncode, plain.returncode, f"exit status under tensorleak run --sim; stderr: {traced.stderr[-3000:]}")
    eq(traced.stdout, plain.stdout, "output under run --sim vs sim")
    reports = []
    for name in sorted(os.listdir(tmp)):
        with open(os.path.join(tmp, name)) as f:
            reports.append(json.load(f))
    # The program's own (a spawned child writes one too).
    exits = [r for r in reports if r["reason"] == "exit" and APP in str(r.get("command"))]
    eq(len(exits), 1, f"exit reports of {APP} in {tmp}")
    run_both.children = [r for r in reports if r["reason"] == "exit" and r is not exits[0]]
    return [json.loads(line) for line in plain.stdout.splitlines()], exits[0], [r for r in reports if r["reason"] == "oom"]


def torch_pool(report):
    pools = [p for p in report.get("pools") or [] if p.get("name") == "torch cuda:0"]
    return pools[0] if pools else None


def check_pool_equals_torch(report, figures, backend):
    """The exit report's 'torch cuda:0' holds torch's own figures."""
    pool = torch_pool(report)
    if pool is None:
        fail(f"no pool 'torch cuda:0' in the exit report: {[p.get('name') for p in report.get('pools') or []]}")
    eq(pool["framework"]["mode"], backend, "torch allocator mode in the report")
    eq(pool["reserved_bytes"], figures["reserved"], "pool reserved vs torch memory_stats()")
    eq(pool["allocated_bytes"], figures["allocated"], "pool allocated vs torch memory_stats()")
    # null where torch keeps no blocks (cudaMallocAsync): unknown, never 0.
    eq(pool["largest_free_block"], figures["largest_free"], "pool largest free block vs torch _snapshot()")
    if figures["segments"] is not None:
        eq(pool["segments"], figures["segments"], "pool segments vs torch _snapshot()")
    # What tensorleak saw taken from the device at the CUDA API is what
    # torch says it reserved (segments, VMM handles or pool chunks).
    eq(report["devices"][0]["reserved_bytes"], figures["reserved"], "device 0 reserved vs torch's reserved")


# The pool scenario keeps 1, 5, 3, 1, 5, 3 MiB and two 4 KiB tensors.
KEPT = 18 * MIB + 2 * 4096


def pool_case(mode, backend):
    need_torch()
    lines, report, ooms = run_both("pool", mode)
    eq(ooms, [], "out-of-memory reports")
    eq(lines[0], {"bytes_ok": True, "available": True}, "bytes through copies and memsets, cuda available")
    figures = lines[-1]
    eq(figures["allocated"], KEPT, "torch's allocated bytes")
    if figures["reserved"] < KEPT:
        fail(f"torch reserved {figures['reserved']} < allocated {KEPT}")
    check_pool_equals_torch(report, figures, backend)


def native_pool_equals_torch_and_runs_alike_with_and_without_tensorleak():
    pool_case({}, "native")


def expandable_segments_pool_equals_torch_and_runs_alike_with_and_without_tensorleak():
    pool_case({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}, "expandable_segments")


def cuda_malloc_async_pool_equals_torch_and_runs_alike_with_and_without_tensorleak():
    pool_case({"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"}, "cudaMallocAsync")


def uncached_allocations_run_alike_with_and_without_tensorleak_and_no_pool_is_invented():
    """PYTORCH_NO_CUDA_MEMORY_CACHING=1: torch keeps no pool and counts
    nothing (its memory_stats stay 0); the report shows no torch pool."""
    need_torch()
    lines, report, ooms = run_both("pool", {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"})
    eq(ooms, [], "out-of-memory reports")
    eq(lines[0], {"bytes_ok": True, "available": True}, "bytes through copies and memsets, cuda available")
    eq(lines[-1], {"reserved": 0, "allocated": 0, "largest_free": 0, "segments": 0}, "torch's own figures")
    eq(torch_pool(report), None, "pool 'torch cuda:0' of an uncached torch")
    # Every tensor went back with cudaFree as Python tore down (what stays
    # live is torch's pinned host cache, not device memory).
    eq(report["devices"][0]["reserved_bytes"], 0, "device 0 reserved at exit")


def oom_shape_and_kernel_errors_are_raised_and_caught_under_the_preload():
    need_torch()
    lines, report, ooms = run_both("errors", {})
    # torch asks once, frees its cached blocks and asks again: two refusals,
    # one report (written from torch's out-of-memory observer).
    eq([(r["oom"]["bytes"], r["oom"]["verdict"], r["oom"]["remedy"]) for r in ooms],
       [(1 << 40, "not_enough_memory", "smaller_request")], "out-of-memory reports of the 1 TiB request")
    eq(lines[0]["caught"], [["oom", True], ["shape", True], ["kernel", True]],
       "OutOfMemoryError, the C++ shape error and the refused launch, each caught with torch's message")
    eq(lines[0]["num_ooms"], 1, "torch's num_ooms")
    figures = lines[-1]
    # 8 MiB kept, and the two small float tensors (24 and 80 bytes) of the
    # shape error, 512 bytes each: torch's smallest block.
    eq(figures["allocated"], 8 * MIB + 2 * 512, "torch's allocated bytes")
    check_pool_equals_torch(report, figures, "native")


def nvml_reports_the_simulated_drivers_memory_and_this_process():
    need_torch()
    lines, _, _ = run_both("nvml", {})
    nvml = lines[0]
    eq(nvml["rcs"], [0, 0, 0, 0, 0], "NVML return codes")
    eq(nvml["used"], 20 * MIB, "NVML used: the 20 MiB segment holding the kept 8 MiB")
    eq(nvml["used"], nvml["driver_used"], "NVML used vs cudaMemGetInfo's total - free")
    eq(nvml["total"], nvml["driver_total"], "NVML total vs cudaMemGetInfo's total")
    eq(nvml["processes"], [[True, nvml["used"]]], "NVML running processes: this one, with what it uses")
    eq(nvml["oom_names_this_process"], True, "torch's out-of-memory message quotes NVML's figure for this process")


def empty_cache_gives_the_whole_device_back_in_every_allocator_mode():
    need_torch()
    # torch's reserve for 80 MiB of tensors of 1 to 7 MiB, by mode.
    for mode, held in (({}, 88080384), ({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}, 88080384),
                       ({"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"}, 100663296),
                       ({"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}, 0)):
        lines, report, _ = run_both("empty_cache", mode)
        eq(lines[0], {"used_before": 0, "held": held, "used_after": 0}, f"device use around empty_cache(), {mode}")
        eq(report["devices"][0]["reserved_bytes"], 0, f"device 0 reserved at exit, {mode}")
        # An empty pool may be left out of the report; one listed holds nothing.
        eq((torch_pool(report) or {}).get("reserved_bytes", 0), 0, f"pool 'torch cuda:0' reserved at exit, {mode}")


def a_cuda_tensor_sent_to_a_spawned_process_arrives_with_its_bytes():
    need_torch()
    lines, report, _ = run_both("ipc", {})
    eq(lines[0], {"child_got": ["cuda:0", [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]], "child_exit": 0},
       "what the child read from the shared tensor")
    # The export is the 2 MiB segment holding the tensor (CUDA IPC shares
    # whole allocations).
    eq([e["bytes"] for e in report["ipc"]["exported"]], [2 * MIB], "memory exported over CUDA IPC")
    eq(len(run_both.children), 1, "exit reports of the spawned child")
    check_pool_equals_torch(report, lines[-1], "native")


CASES = {f.__name__: f for f in (
    native_pool_equals_torch_and_runs_alike_with_and_without_tensorleak,
    expandable_segments_pool_equals_torch_and_runs_alike_with_and_without_tensorleak,
    cuda_malloc_async_pool_equals_torch_and_runs_alike_with_and_without_tensorleak,
    uncached_allocations_run_alike_with_and_without_tensorleak_and_no_pool_is_invented,
    oom_shape_and_kernel_errors_are_raised_and_caught_under_the_preload,
    nvml_reports_the_simulated_drivers_memory_and_this_process,
    a_cuda_tensor_sent_to_a_spawned_process_arrives_with_its_bytes,
    empty_cache_gives_the_whole_device_back_in_every_allocator_mode,
)}

if __name__ == "__main__":
    CASES[sys.argv[1]]()
    print("ok:", sys.argv[1])
