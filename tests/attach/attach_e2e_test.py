"""tensorleak attach against libtensorleak.so itself (suite 'attach'): a C
server on the driver API and a Python server on cuda.bindings and a PyTorch loop on the simulator, started
without tensorleak and attached to while they serve.  The Python case needs
NVIDIA's cuda.bindings: without it, it says "skipped" in one line, and fails
under CI=true (scripts/install-deps.sh installs it); the torch case the
same without torch."""
import glob
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

CLI = os.environ["TL_CLI"]
LIBRARY = os.environ["TL_LIBRARY"]
SERVER = os.environ["TL_SERVER"]
PY_SERVER = os.environ["TL_PY_SERVER"]
TORCH_SERVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "attach_torch_server.py")
SIM_DIR = os.environ["TL_SIM_DIR"]


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TENSORLEAK_") and k != "LD_PRELOAD"}
    env["LD_LIBRARY_PATH"] = SIM_DIR
    env.update(extra)
    return env


class Server:
    def __init__(self, argv):
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=clean_env())
        self.lines = [self.proc.stdout.readline().rstrip("\n")]
        assert self.lines == ["ready"], self.lines

    def ask(self, command):
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        self.lines.append(self.proc.stdout.readline().rstrip("\n"))
        return self.lines[-1]

    def quit(self):
        self.proc.stdin.write("q\n")
        self.proc.stdin.flush()
        rest, err = self.proc.communicate(timeout=120)
        return self.lines + rest.splitlines(), err, self.proc.returncode

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()


def tl(*args, check=0):
    r = subprocess.run([CLI, *args], capture_output=True, text=True, timeout=120,
                       env=clean_env(TENSORLEAK_LIBRARY=LIBRARY))
    assert r.returncode == check, f"{args}: exit {r.returncode}\n{r.stderr}"
    return r


def run_script(argv, script, attach_at=(), detach_at=(), options=()):
    """Runs SCRIPT's commands; attaches before the commands at ATTACH_AT and
    detaches before those at DETACH_AT.  The output, stderr, status."""
    s = Server(argv)
    try:
        for i, command in enumerate(script):
            if i in detach_at:
                tl("detach", str(s.proc.pid))
            if i in attach_at:
                tl("attach", *options, str(s.proc.pid))
            s.ask(command)
        return s.quit()
    finally:
        s.kill()


def reports(tmp, reason):
    found = []
    for path in sorted(glob.glob(os.path.join(tmp, "r.*.json"))):
        r = json.loads(pathlib.Path(path).read_text())
        if r["reason"] == reason:
            found.append(r)
    return found


def same_as_untracked(argv, script, tracked):
    untracked = run_script(argv, script)
    assert tracked[0] == untracked[0] and tracked[2] == untracked[2], (tracked, untracked)


def a_c_server_attached_while_serving_counts_leaks_from_the_attach_exactly(tmp):
    script = ["pre 3", "req", "req", "req", "req", "req", "req", "req", "freepre"]
    out = run_script([SERVER], script, attach_at={3}, options=("-o", f"{tmp}/r.%p.%n.json"))
    same_as_untracked([SERVER], script, out)
    (r,) = reports(tmp, "exit")
    # 5 requests after the attach leak 1 MiB each; the 2 before it and the
    # 3 pre blocks (freed after it) are before-attach memory, no invalid free.
    assert r["summary"]["leaked_allocations"] == 5 and r["summary"]["leaked_bytes"] == 5 << 20, r["summary"]
    assert r["summary"]["invalid_frees"] == 0, r["invalid_frees"]


def leak_line_of(path):
    return next(i + 1 for i, l in enumerate(pathlib.Path(path).read_text().splitlines()) if "# LEAK" in l)


def serve_with_interval(tmp, argv, interval, count):
    """Starts ARGV, attaches with --interval INTERVAL and sends COUNT
    requests, each right after an interval report appears, so that every
    interval holds one (a call site grows when it rose at each of the last
    marks; a request-free interval would be a flat step).  Checks that all
    were served and the exit status 0; the exit report."""
    s = Server(argv)
    try:
        tl("attach", "--interval", str(interval), "-o", f"{tmp}/r.%p.%n.json", str(s.proc.pid))
        written = 0
        for _ in range(count):
            deadline = time.monotonic() + 120
            while len(glob.glob(os.path.join(tmp, "r.*.json"))) == written:
                assert time.monotonic() < deadline, "no interval report"
                time.sleep(0.01)
            written = len(glob.glob(os.path.join(tmp, "r.*.json")))
            s.ask("req")
        lines, err, rc = s.quit()
    finally:
        s.kill()
    assert rc == 0 and lines[-1] == f"served {count}", (lines, err)
    (r,) = reports(tmp, "exit")
    return r, err


def a_python_server_grows_at_its_python_line_with_interval_marks(tmp):
    leak_line = leak_line_of(PY_SERVER)
    r, err = serve_with_interval(tmp, [sys.executable, PY_SERVER], 0.5, 8)
    assert r["summary"]["leaked_allocations"] == 8, r["summary"]
    rows = [g for g in r["growth"] if any(f.get("python") and f.get("line") == leak_line for f in g["stack"])]
    assert rows and rows[0]["bytes_per_mark"] == 1 << 20, (r["growth"], r["marks"], err)
    # The bridge started in the attached process (at the main thread's first
    # bytecode after the attach: the first request) and answered every mark
    # from then on.
    bridge = [x["bridge"] for x in sorted(reports(tmp, "interval"), key=lambda x: x["seq"])][1:]
    assert len(bridge) >= 7 and all(b["state"] == "fresh" for b in bridge), bridge


def a_torch_loop_on_the_simulator_grows_in_its_pool_at_its_python_line(tmp):
    leak_line = leak_line_of(TORCH_SERVER)
    # `tensorleak sim` execs the program on the simulated driver, untracked.
    r, _ = serve_with_interval(tmp, [CLI, "sim", "--", sys.executable, TORCH_SERVER], 1, 8)
    # torch's pool, as the bridge started in the attached process reads it:
    # two 20 MiB segments for the 4 MiB from before the attach and the 8
    # requests' 3 MiB (read at exit, after main() dropped them).
    (pool,) = [p for p in r["pools"] if p["name"] == "torch cuda:0"]
    assert pool["reserved_bytes"] == 40 << 20 and pool["peak_allocated_bytes"] >= (4 << 20) + 8 * (3 << 20), pool
    # Growth in the pool, named at the Python line that keeps the tensors.
    rows = [g for g in r["growth"] if g["scope"] == "pool" and g["pool"] == "torch cuda:0"
            and any(f.get("python") and f.get("line") == leak_line for f in g["stack"])]
    assert rows, r["growth"]
    # torch's first 20 MiB segment was taken before the attach: no leak, and
    # the pool's reserve at the bridge's first read after the attach (the
    # first 5 requests fit in that segment).
    assert r["attach"]["before"][0]["process_bytes"] == 20 << 20, r["attach"]
    assert r["attach"]["before"][0]["framework_reserved_bytes"] == 20 << 20, r["attach"]
    assert r["summary"]["leaked_allocations"] == 0 and r["summary"]["invalid_frees"] == 0, r["summary"]


def eight_threads_allocating_during_the_attach_leave_exact_counts(tmp):
    script = ["spin", "stop"]
    out = run_script([SERVER], script, attach_at={1}, options=("-o", f"{tmp}/r.%p.%n.json"))
    same_as_untracked([SERVER], script, out)
    (r,) = reports(tmp, "exit")
    assert r["summary"]["leaked_allocations"] == 8 and r["summary"]["leaked_bytes"] == 8 * 64 << 10, r["summary"]
    assert r["summary"]["invalid_frees"] == 0, r["invalid_frees"]


def detach_under_load_then_attach_again(tmp):
    script = ["spin", "req", "req", "stop"]
    out = run_script([SERVER], script, attach_at={1, 3}, detach_at={2}, options=("-o", f"{tmp}/r.%p.%n.json"))
    same_as_untracked([SERVER], script, out)
    assert len(reports(tmp, "detach")) == 1
    (r,) = reports(tmp, "exit")
    assert r["summary"]["leaked_allocations"] == 8, r["summary"]
    assert r["summary"]["invalid_frees"] == 0, r["invalid_frees"]


def a_fork_after_the_attach_runs_its_child_unharmed(tmp):
    script = ["fork", "req"]
    out = run_script([SERVER], script, attach_at={0}, options=("-o", f"{tmp}/r.%p.%n.json"))
    same_as_untracked([SERVER], script, out)
    assert out[0][1] == "child 0", out
    parent = [r for r in reports(tmp, "exit") if r["summary"]["leaked_allocations"] == 1]
    assert len(parent) == 1, reports(tmp, "exit")


def snapshot_asks_a_tracked_process_for_a_report_now(tmp):
    s = Server([SERVER])
    pid = s.proc.pid
    try:
        r = tl("snapshot", str(pid), check=1)
        assert r.stderr == (f"tensorleak: snapshot: {pid}: not tracked (no libtensorleak.so with "
                            "tensorleak_snapshot loaded in it)\n"), r.stderr
        tl("attach", "-o", f"{tmp}/r.%p.%n.json", str(pid))
        s.ask("req")
        s.ask("req")
        r = tl("snapshot", str(pid), "now")
        assert r.stderr == f"tensorleak: snapshot: {pid}: report written where its output pattern says\n", r.stderr
        (snap,) = reports(tmp, "api")
        # The two requests since the attach, 1 MiB each, live at that moment.
        assert (snap["label"], snap["summary"]["live_allocations"], snap["summary"]["live_bytes"]) == \
            ("now", 2, 2 << 20), snap["summary"]
        tl("detach", str(pid))
        r = tl("snapshot", str(pid), check=1)
        assert r.stderr == (f"tensorleak: snapshot: {pid}: the library wrote no report (tracking is off: "
                            "detached, or never started)\n"), r.stderr
        assert len(reports(tmp, "api")) == 1
        s.quit()
    finally:
        s.kill()


def attaching_and_detaching_100_times_to_a_busy_server_loses_nothing(tmp):
    s = Server([SERVER])
    try:
        assert s.ask("spin") == "spinning"
        for _ in range(100):
            tl("attach", "--quiet", "-o", f"{tmp}/r.%p.%n.json", str(s.proc.pid))
            tl("detach", str(s.proc.pid))
        tl("attach", "--quiet", "-o", f"{tmp}/r.%p.%n.json", str(s.proc.pid))
        assert s.ask("stop") == "stopped"
        lines, err, rc = s.quit()
    finally:
        s.kill()
    assert (lines, rc) == (["ready", "spinning", "stopped"], 0), (lines, err)
    assert len(reports(tmp, "detach")) == 100
    (r,) = reports(tmp, "exit")
    assert r["summary"]["leaked_allocations"] == 8 and r["summary"]["invalid_frees"] == 0, r["summary"]


if __name__ == "__main__":
    case = sys.argv[1]
    if "torch" in case:
        probe = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True, text=True, timeout=300)
        if probe.returncode != 0:
            why = (probe.stderr.strip().splitlines() or ["no output"])[-1]
            if os.environ.get("CI") == "true":
                sys.exit(f"FAIL {case}: torch cannot be imported under CI=true: {why}")
            print(f"skipped {case}: torch cannot be imported: {why}")
            sys.exit(77)
    if "python" in case:
        try:
            import cuda.bindings  # noqa: F401
        except ImportError as e:
            if os.environ.get("CI") == "true":
                sys.exit(f"FAIL {case}: cuda.bindings cannot be imported under CI=true: {e}")
            print(f"skipped {case}: cuda.bindings cannot be imported")
            sys.exit(77)
    with tempfile.TemporaryDirectory(prefix="tl-attach-e2e-") as tmp:
        globals()[case](tmp)
    print(f"ok {case}")
