#!/usr/bin/env python3
"""Third-party CUDA clients from PyPI (numba-cuda, cuda-bindings) on the
simulated driver, with and without tensorleak.

Each test runs one scenario of numba_app.py or bindings_app.py twice: under
`tensorleak run --sim`, and on the simulated driver alone (its directory first
on LD_LIBRARY_PATH, as `run --sim` sets it, no preload).  Both runs must print
the same line and exit with the same status; the line is what the program
itself knows it holds, and the report (`tensorleak.<pid>.json`) must count
exactly that.  meson runs one test per process: `test_clients.py NAME`.
Exit 77 = skipped (the package cannot be imported).
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
SIM = os.environ["TL_SIM"]


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def eq(actual, expected, what):
    if actual != expected:
        fail(f"{what}: expected {expected!r}, got {actual!r}")


def need(module, package):
    p = subprocess.run([sys.executable, "-c", "import " + module], capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        print(f"SKIP: {package} cannot be imported by {sys.executable} "
              f"(scripts/install-deps.sh installs it from PyPI): {p.stderr.strip().splitlines()[-1:]}")
        sys.exit(77)


def client_env():
    e = {k: v for k, v in os.environ.items() if not k.startswith("TENSORLEAK_") and k != "LD_PRELOAD"}
    # numba-cuda and cuda-bindings find libcuda.so.1 by the library path; numba
    # is also told the file, so no system driver can be picked instead.
    e["NUMBA_CUDA_DRIVER"] = os.path.join(SIM, "libcuda.so.1")
    e["SIMCUDA_MEMORY"] = "4G"
    return e


def run_both(app, scenario):
    """(output line as JSON, exit report, snapshot report or None)."""
    tmp = tempfile.mkdtemp(prefix="tl-clients-")
    snap = os.path.join(tmp, "snapshot.json")
    argv = [sys.executable, os.path.join(HERE, app), scenario, snap]
    e = client_env()
    traced = subprocess.run([CLI, "run", "--sim", "--quiet", "-o", os.path.join(tmp, "tl.%p.json"), "--"] + argv,
                            env=e, capture_output=True, text=True, timeout=600)
    plain_env = dict(e)
    plain_env["LD_LIBRARY_PATH"] = SIM + (":" + e["LD_LIBRARY_PATH"] if e.get("LD_LIBRARY_PATH") else "")
    plain = subprocess.run(argv, env=plain_env, capture_output=True, text=True, timeout=600)
    eq(plain.returncode, 0, f"exit status without tensorleak; stderr: {plain.stderr[-3000:]}")
    eq(traced.returncode, plain.returncode, f"exit status under tensorleak; stderr: {traced.stderr[-3000:]}")
    eq(traced.stdout, plain.stdout, "output under tensorleak vs without")
    reports = [n for n in os.listdir(tmp) if n.startswith("tl.")]
    eq(len(reports), 1, f"exit reports in {tmp}")
    with open(os.path.join(tmp, reports[0])) as f:
        rep = json.load(f)
    eq(rep["reason"], "exit", "report reason")
    shot = None
    if os.path.exists(snap):
        with open(snap) as f:
            shot = json.load(f)
    return json.loads(plain.stdout.strip().splitlines()[-1]), rep, shot


def leaked(rep):
    s = rep["summary"]
    return s["leaked_allocations"], s["leaked_bytes"]


def numba_case(scenario):
    need("numba.cuda", "numba-cuda")
    return run_both("numba_app.py", scenario)


def numba_device_arrays_kept_to_exit_are_the_leaks():
    out, rep, _ = numba_case("arrays")
    eq(out["roundtrip"], True, "bytes copied to the device and back")
    eq(out["kept_count"], 5, "arrays the program kept")
    eq(leaked(rep), (out["kept_count"], out["kept_bytes"]), "leaked (count, bytes)")
    eq(sorted({l["kind"] for l in rep["leaks"]}), ["device"], "kinds of the leaks")


def numba_deferred_frees_still_queued_at_exit_are_leaked_too():
    out, rep, _ = numba_case("deferred")
    eq(out["pending_count"], 4, "numba's queued frees at exit")
    eq(leaked(rep), (out["kept_count"] + out["pending_count"], out["kept_bytes"] + out["pending_bytes"]),
       "leaked (count, bytes): kept + queued")


def numba_defer_cleanup_keeps_every_dropped_array_live_until_it_ends():
    out, rep, shot = numba_case("defer_cleanup")
    if shot is None:
        fail("no snapshot written inside defer_cleanup")
    eq(out["pending_count"], 20, "arrays dropped inside defer_cleanup")
    eq((shot["summary"]["live_allocations"], shot["summary"]["live_bytes"]),
       (out["pending_count"], out["pending_bytes"]), "live (count, bytes) inside defer_cleanup")
    eq(leaked(rep), (0, 0), "leaked at exit, after the block")


def numba_pinned_and_mapped_host_arrays_carry_bytes_and_are_freed():
    out, rep, _ = numba_case("pinned_mapped")
    eq(out["roundtrip"], True, "bytes through pinned, mapped and registered host memory")
    eq(leaked(rep), (out["kept_count"], out["kept_bytes"]), "leaked (count, bytes)")
    eq(rep["summary"]["invalid_frees"], 0, "invalid frees")


def numba_emm_plugin_allocations_are_counted_as_the_plugin_counts_them():
    out, rep, shot = numba_case("emm")
    eq(out["roundtrip"], True, "bytes through the plugin's memory")
    eq((out["plugin_live_count"], out["plugin_live_bytes"]), (out["kept_count"], out["kept_bytes"]),
       "what the plugin holds = what the program kept")
    if shot is None:
        fail("no snapshot written after the plugin's arrays were made")
    eq((shot["summary"]["live_allocations"], shot["summary"]["live_bytes"]),
       (out["plugin_live_count"], out["plugin_live_bytes"]), "live (count, bytes) = what the plugin holds")
    # The plugin frees in its MemoryPointer finalizers, which weakref.finalize
    # runs at interpreter exit: nothing is left then.
    eq(leaked(rep), (0, 0), "leaked at exit")


def bindings_case(scenario):
    need("cuda.bindings.driver", "cuda-bindings")
    return run_both("bindings_app.py", scenario)


def bindings_stream_ordered_pool_blocks_kept_are_leaked():
    out, rep, _ = bindings_case("pools")
    eq(out["roundtrip"], True, "bytes through pool blocks")
    eq(leaked(rep), (out["kept_count"], out["kept_bytes"]), "leaked (count, bytes)")


def bindings_vmm_mapping_carries_bytes_and_a_kept_handle_is_reported():
    out, rep, _ = bindings_case("vmm")
    eq(out["roundtrip"], True, "bytes through a VMM mapping of two handles")
    eq(out["into_unmapped"], "CUDA_ERROR_INVALID_VALUE", "memset of an unmapped VMM range")
    eq(sorted((l["kind"], l["count"], l["bytes"]) for l in rep["leaks"]),
       [("vmm_handle", 1, out["kept_handle_bytes"]), ("vmm_mapping", 1, out["kept_mapping_bytes"]),
        ("vmm_reservation", 1, out["kept_reservation_bytes"])], "leaks (kind, count, bytes)")
    # Memory is counted once: the handle's bytes; the reservation is address space.
    eq(rep["summary"]["leaked_bytes"], out["kept_handle_bytes"], "leaked device bytes")
    eq(rep["summary"]["leaked_address_space_bytes"], out["kept_reservation_bytes"], "leaked address space")


def bindings_context_teardown_frees_what_the_context_held():
    out, rep, _ = bindings_case("teardown")
    eq(out["after_destroy"], "CUDA_ERROR_INVALID_VALUE", "copy into memory of a destroyed context")
    eq(leaked(rep), (out["kept_count"], out["kept_bytes"]), "leaked (count, bytes)")
    eq(rep["summary"]["released_by_teardown_allocations"], out["torn_down_count"], "released by teardown")


def bindings_kernel_launches_fail_with_the_drivers_own_code():
    out, rep, _ = bindings_case("launch")
    eq(out["module_load"], "CUDA_ERROR_NOT_SUPPORTED", "cuModuleLoadData on the simulator")
    eq(leaked(rep), (0, 0), "leaked")


def bindings_every_cuda_result_has_a_name():
    out, _, _ = bindings_case("errors")
    eq(out["unnamed"], [], "CUresult codes cuGetErrorName cannot name")
    eq(out["named"], out["codes"], "named codes")


if __name__ == "__main__":
    globals()[sys.argv[1]]()
    print("PASS")
