#!/usr/bin/env python3
"""The host program is the same with and without libtensorleak.so.

Each case runs a program twice, once plainly and once with the library
preloaded, and compares what the program can see: its exit status or the
signal it died of, its descriptors and the files behind them, its signal
dispositions, its threads, Python's signal handling.

    host_test.py --library LIB --sim-dir DIR --program EXE --cli TENSORLEAK CASE

Exit 0 pass, 1 fail, 77 skip.
"""
import argparse
import glob
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
RUN_TIMEOUT_S = 60  # each run takes well under a second


class Failure(Exception):
    pass


class Skip(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failure(what)


def check_eq(got, want, what):
    if got != want:
        raise Failure(f"{what}: got {got!r}, want {want!r}")


class Ctx:
    def __init__(self, args, tmp):
        self.args = args
        self.tmp = tmp

    def env(self, preload, **extra):
        env = {k: v for k, v in os.environ.items() if not k.startswith("TENSORLEAK_")}
        ld = env.get("LD_LIBRARY_PATH")
        env["LD_LIBRARY_PATH"] = self.args.sim_dir + (":" + ld if ld else "")
        env.pop("LD_PRELOAD", None)
        if preload:
            env["LD_PRELOAD"] = self.args.library
            env["TENSORLEAK_OUTPUT"] = os.path.join(self.tmp, "r.%p.json")
            env["TENSORLEAK_QUIET"] = "1"
        env.update(extra)
        return {k: v for k, v in env.items() if v is not None}  # None: unset

    def run(self, argv, preload, preexec=None, cwd=None, **extra):
        return subprocess.run(argv, env=self.env(preload, **extra), cwd=cwd or self.tmp, capture_output=True,
                              text=True, timeout=RUN_TIMEOUT_S, preexec_fn=preexec, close_fds=True)

    def both(self, argv, preexec=None, **extra):
        """(without, with) the preload, each in a directory of its own."""
        out = []
        for preload in (False, True):
            d = os.path.join(self.tmp, "with" if preload else "without")
            os.makedirs(d, exist_ok=True)
            out.append(self.run(argv, preload, preexec=preexec, cwd=d, **extra))
        return out


def pythons():
    """Every CPython 3.9-3.13 the suites use: pyenv's and the system's."""
    found = {}
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv")) + "/versions"
    for exe in sorted(glob.glob(root + "/3.*/bin/python3")) + sorted(glob.glob("/usr/bin/python3.*")):
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


def a_process_that_never_reaches_cuda_has_the_same_descriptors_signals_and_threads(c):
    without, with_ = c.both([c.args.program, "idle"])
    check_eq(with_.returncode, 0, "status under the preload: " + with_.stderr)
    check_eq(with_.stdout, without.stdout, "descriptors, SigIgn/SigCgt/SigBlk and threads")
    check_eq(with_.stderr, "", "stderr")
    check_eq(sorted(os.listdir(os.path.join(c.tmp, "with"))), [], "files written")


def a_shell_that_never_reaches_cuda_dies_of_sigusr1_and_its_descriptor_6_stays_empty(c):
    script = "exec 6>f6.txt; kill -USR1 $$"
    without, with_ = c.both(["bash", "-c", script])
    check_eq(without.returncode, -signal.SIGUSR1, "status without the preload")
    check_eq(with_.returncode, without.returncode, "status under the preload")
    check_eq(os.path.getsize(os.path.join(c.tmp, "with", "f6.txt")), 0, "bytes in f6.txt")


def leak_stacks(d):
    """The exit report's leak stacks in `d`, as lists of function names."""
    exits = [f for f in os.listdir(d) if f.startswith("r.") and f.count(".") == 2]
    check_eq(len(exits), 1, f"exit reports in {d}")
    with open(os.path.join(d, exits[0])) as f:
        r = json.load(f)
    return sorted([fr.get("function") for fr in l["stack"]] for l in r["leaks"])


def a_daemon_that_closes_every_descriptor_keeps_its_own_files_untouched(c):
    # The live state update opens its directory for a moment on the
    # watcher thread, which would take a number the daemon expects: off.
    without, with_ = c.both([c.args.program, "daemon"], TENSORLEAK_LIVE="0")
    check_eq((without.returncode, without.stdout), (0, "ok\n"), "without the preload: " + without.stderr)
    check_eq((with_.returncode, with_.stdout), (0, "ok\n"), "under the preload: " + with_.stderr)
    # It was tracked: the snapshot and exit reports are there.
    reports = sorted(f for f in os.listdir(c.tmp) if f.startswith("r."))
    check_eq(len(reports), 2, f"reports written ({reports})")
    # Where a sandbox refuses process_vm_readv, libunwind's memory checks
    # read memory another way: no descriptor either, and the same stacks.
    os.makedirs(os.path.join(c.tmp, "seccomp"))
    env_dir = os.path.join(c.tmp, "seccomp")
    p = c.run([c.args.program, "daemon-seccomp"], preload=True, cwd=env_dir,
              TENSORLEAK_OUTPUT=os.path.join(env_dir, "r.%p.json"), TENSORLEAK_LIVE="0")
    check_eq((p.returncode, p.stdout), (0, "ok\n"), "under the preload and the seccomp filter: " + p.stderr)
    want = leak_stacks(c.tmp)
    # The first allocation, and deep(n) for n = 1..32 (n + 1 frames of
    # deep): from n = 30 on, the 32-frame limit makes their stacks one.
    check_eq(sorted(s.count("deep") for s in want), [0] + list(range(2, 32)), "frames of deep per leak stack")
    check_eq(leak_stacks(env_dir), want, "leak stacks under the seccomp filter")


def a_write_past_rlimit_fsize_after_a_report_still_dies_of_sigxfsz(c):
    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
    # The snapshot report is larger than 4096 bytes: it goes to stderr.
    without, with_ = c.both([c.args.program, "fsize"], preexec=limit)
    check_eq(without.returncode, -signal.SIGXFSZ, "status without the preload: " + without.stderr)
    check_eq(with_.returncode, -signal.SIGXFSZ, "status under the preload: " + with_.stderr[-2000:])


def limit_nofile(n):
    return lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))


def the_lowest_descriptor_limit_that_works_without_the_preload_works_with_it(c):
    """The lowest RLIMIT_NOFILE at which cudaMalloc succeeds plainly: it
    succeeds under the preload too."""
    lowest = None
    for n in range(3, 64):
        p = c.run([c.args.program, "nofile"], preload=False, preexec=limit_nofile(n), cwd=c.tmp)
        if p.stdout.startswith("cudaMalloc 0\n"):
            lowest = n
            break
    if lowest is None:
        raise Failure("cudaMalloc never succeeded without the preload")
    p = c.run([c.args.program, "nofile"], preload=True, preexec=limit_nofile(lowest), cwd=c.tmp)
    check_eq((p.returncode, p.stdout.splitlines()[0]), (0, "cudaMalloc 0"),
             f"under the preload at RLIMIT_NOFILE={lowest}: {p.stderr[-2000:]}")
    # Tracked still: the exit report is written, or (too few descriptors
    # left for the symbolizer and the file together) follows on stderr.
    written = [f for f in os.listdir(c.tmp) if f.startswith("r.")]
    check(written or '"reason": "exit"' in p.stderr, f"no exit report at RLIMIT_NOFILE={lowest}: {p.stderr[-2000:]}")


def after_the_first_cuda_call_tensorleak_holds_no_descriptor(c):
    # The live state update opens its directory for a moment, on the
    # watcher thread, at any time: off here, so the count is exact.
    without, with_ = c.both([c.args.program, "nofile"], preexec=limit_nofile(32), TENSORLEAK_LIVE="0")
    # 0, 1, 2 and the simulated device's memory file (a memfd) are open.
    check_eq(without.stdout, "cudaMalloc 0\nfree 28\n", "without the preload")
    check_eq(with_.stdout, without.stdout, "under the preload: " + with_.stderr)


def every_descriptor_tensorleak_opens_is_close_on_exec(c):
    """A thread of the program that forks and execs while a report is being
    written must not hand tensorleak's descriptors (the modules libdw reads)
    to the new program: every open from the first CUDA call on, the
    program's own three files aside, has O_CLOEXEC."""
    strace = shutil.which("strace")
    if not strace:
        raise Skip("strace is not installed")
    log = os.path.join(c.tmp, "strace.txt")
    p = c.run([strace, "-f", "-o", log, "-e", "trace=open,openat,dup,pipe,pipe2,socket",
               c.args.program, "daemon"], preload=True, TENSORLEAK_LIVE="0")
    if "PTRACE" in p.stderr or "Operation not permitted" in p.stderr:
        raise Skip("strace cannot trace here: " + p.stderr[:200])
    check_eq((p.returncode, p.stdout), (0, "ok\n"), "status, stdout: " + p.stderr)
    with open(log) as f:
        calls = f.read().splitlines()
    # From the program's first own file (after its first cudaMalloc).
    first = next(i for i, l in enumerate(calls) if '"a.txt"' in l)
    own = ('"a.txt"', '"b.txt"', '"c.txt"', '"/proc/self/fd"')
    leaky = [l for l in calls[first:] if "= -1" not in l and "O_CLOEXEC" not in l and not any(o in l for o in own)
             and any(k in l for k in ("open(", "openat(", "dup(", "pipe", "socket("))]
    check_eq(leaky, [], "descriptors opened without O_CLOEXEC")
    check(sum("openat(" in l for l in calls[first:]) > 10, "the report's opens were traced")


PY_SIGNALS = r"""
import ctypes, os, signal, sys

def interrupted():
    try:
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):  # the handler runs between bytecodes
            pass
        return "nothing"
    except KeyboardInterrupt:
        return "KeyboardInterrupt"

def restored():
    old = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, lambda *a: None)
    signal.signal(signal.SIGTERM, old)
    return signal.getsignal(signal.SIGTERM) == old

def state():
    return (interrupted(), signal.getsignal(signal.SIGINT) is signal.default_int_handler,
            signal.getsignal(signal.SIGTERM), restored())

print("before", state())
rt = ctypes.CDLL("libcudart.so.13")
p = ctypes.c_void_p()
print("cudaMalloc", rt.cudaMalloc(ctypes.byref(p), 1 << 20))
print("after", state())
"""


def descriptors_run_out_during_live_updates_and_nothing_is_left_in_tmp(c):
    """The program holds every descriptor its limit allows while the live
    state updates (every 50 ms for a second) in the default directory,
    /tmp/tensorleak-UID: an update cannot open it, and that is this
    process's shortage, not a directory squatted by another user, so no
    directory of its own is made beside it (each such run left one,
    /tmp/tensorleak-UID.XXXXXX, empty).  One warning, and the live state is
    off.  Which step of an update meets the shortage is the watcher's
    timing: an update that began before it opens the directory and fails at
    its file (write), and one whose document cannot be built then says
    nothing and tries again at the next (a run of the program then and
    there had no warning); so the program runs until an update failed at the
    directory itself (open), the case that made the directory, almost
    always the first run."""
    fallbacks = f"/tmp/tensorleak-{os.geteuid()}.??????"
    before = set(glob.glob(fallbacks))
    env = {"TENSORLEAK_LIVE_INTERVAL": "0.05", "XDG_RUNTIME_DIR": None}
    want = f"tensorleak: cannot publish the live state in /tmp/tensorleak-{os.geteuid()} (STEP: Too many open files); live state is off"
    seen = []
    for _ in range(10):
        p = c.run([c.args.program, "nofile", "1000"], preload=True, preexec=limit_nofile(32), **env)
        check_eq((p.returncode, p.stdout.splitlines()[0]), (0, "cudaMalloc 0"), "status, first line: " + p.stderr[-2000:])
        check_eq(sorted(set(glob.glob(fallbacks)) - before), [], "directories made beside /tmp/tensorleak-UID")
        warned = [l for l in p.stderr.splitlines() if "live state" in l]
        check(len(warned) <= 1 and all(re.sub(r"\((open|write): ", "(STEP: ", l) == want for l in warned),
              f"one warning at most, {want}: {warned}")
        seen += warned
        if any("(open: " in l for l in warned):
            return
    raise Failure(f"no update met the shortage at the directory in 10 runs: {seen}")


def python_keeps_ctrl_c_and_handler_restore_before_and_after_a_cuda_call(c):
    found = pythons()
    if not found:
        raise Skip("no CPython 3.9-3.13 found")
    want = ("before ('KeyboardInterrupt', True, <Handlers.SIG_DFL: 0>, True)\n"
            "cudaMalloc 0\n"
            "after ('KeyboardInterrupt', True, <Handlers.SIG_DFL: 0>, True)\n")
    for exe, v in found.items():
        without, with_ = c.both([exe, "-c", PY_SIGNALS])
        check_eq((without.returncode, without.stdout), (0, want), f"{exe} without the preload: {without.stderr}")
        check_eq((with_.returncode, with_.stdout), (0, want), f"{exe} under the preload: {with_.stderr}")
        # `tensorleak run` also starts the Python bridge (TENSORLEAK_PYTHON=1).
        run = c.run([c.args.cli, "run", "--", exe, "-c", PY_SIGNALS], preload=False,
                    TENSORLEAK_LIBRARY=c.args.library, TENSORLEAK_OUTPUT=os.path.join(c.tmp, "run.%p.json"),
                    TENSORLEAK_QUIET="1")
        check_eq((run.returncode, run.stdout), (0, want), f"{exe} under tensorleak run: {run.stderr}")
        print(f"ok: {exe} ({v})")


def a_fifo_named_by_a_file_variable_is_refused_without_blocking(c):
    fifo = os.path.join(c.tmp, "rules.fifo")
    os.mkfifo(fifo)
    for var in ("TENSORLEAK_OWNERS", "TENSORLEAK_SUPPRESSIONS"):
        # Never reaches CUDA: the file is not even opened.
        p = c.run(["true"], preload=True, **{var: fifo})
        check_eq((p.returncode, p.stderr), (0, ""), f"/bin/true with {var} a FIFO")
        p = c.run([c.args.program, "nofile"], preload=True, **{var: fifo})
        check_eq((p.returncode, p.stdout.splitlines()[0]), (0, "cudaMalloc 0"), f"a CUDA program with {var} a FIFO: {p.stderr}")
        check_eq(p.stderr.count(f"tensorleak: {var}: {fifo} is not a regular file;"), 1, "the warning: " + p.stderr)


CASES = {f.__name__: f for f in [
    a_process_that_never_reaches_cuda_has_the_same_descriptors_signals_and_threads,
    a_shell_that_never_reaches_cuda_dies_of_sigusr1_and_its_descriptor_6_stays_empty,
    a_daemon_that_closes_every_descriptor_keeps_its_own_files_untouched,
    a_write_past_rlimit_fsize_after_a_report_still_dies_of_sigxfsz,
    the_lowest_descriptor_limit_that_works_without_the_preload_works_with_it,
    after_the_first_cuda_call_tensorleak_holds_no_descriptor,
    descriptors_run_out_during_live_updates_and_nothing_is_left_in_tmp,
    python_keeps_ctrl_c_and_handler_restore_before_and_after_a_cuda_call,
    a_fifo_named_by_a_file_variable_is_refused_without_blocking,
    every_descriptor_tensorleak_opens_is_close_on_exec,
]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--library", required=True)
    ap.add_argument("--sim-dir", required=True)
    ap.add_argument("--program", required=True)
    ap.add_argument("--cli", required=True)
    ap.add_argument("case", choices=sorted(CASES))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="tl-host-") as tmp:
        try:
            CASES[args.case](Ctx(args, tmp))
        except Skip as e:
            print("SKIP:", e)
            return 77
        except Failure as e:
            print("FAIL:", e)
            return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
