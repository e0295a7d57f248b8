"""tensorleak attach / detach against running programs (suite 'attach').

The injector's mechanics: attach_target runs untracked; attach_testlib (the
ABI of include/tensorleak_attach.h) patches its answer() from 42 to 43 and
records every call in the file -o names.  Each case is one function; the
argument names it.  Nothing here reads the caller's TENSORLEAK_* variables.
"""
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time

CLI = os.environ["TL_CLI"]
TARGET = os.environ["TL_TARGET"]
TESTLIB = os.environ["TL_TESTLIB"]
SIM_DIR = os.environ["TL_SIM_DIR"]


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TENSORLEAK_") and k != "LD_PRELOAD"}
    env.update(extra)
    return env


class Target:
    """attach_target with its stdin and stdout on pipes."""

    def __init__(self, *args, env=None):
        self.proc = subprocess.Popen(
            [TARGET, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=env or clean_env(LD_LIBRARY_PATH=SIM_DIR))
        self.lines = []
        assert self.readline() == "ready"

    @property
    def pid(self):
        return self.proc.pid

    def readline(self):
        line = self.proc.stdout.readline().rstrip("\n")
        self.lines.append(line)
        return line

    def ask(self, command):
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self.readline()

    def quit(self):
        self.proc.stdin.write("q\n")
        self.proc.stdin.flush()
        rest, err = self.proc.communicate(timeout=60)
        return rest, err, self.proc.returncode

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()


def cli(*args, library=TESTLIB, check=None, timeout=60):
    env = clean_env()
    if library:
        env["TENSORLEAK_LIBRARY"] = library
    r = subprocess.run([CLI, *args], capture_output=True, text=True, env=env, timeout=timeout)
    if check is not None:
        assert r.returncode == check, f"{args}: exit {r.returncode}, want {check}\n{r.stderr}"
    return r


def log_of(path):
    return pathlib.Path(path).read_text() if os.path.exists(path) else ""


def steps(path):
    return [l for l in log_of(path).splitlines() if l in ("prepare", "commit", "detach_prepare", "detach_finish")]


def status_state(pid):
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("State:", "TracerPid:")):
            yield line.split()[1]


def assert_untraced_and_running(pid):
    state, tracer = list(status_state(pid))
    assert tracer == "0", f"still traced by {tracer}"
    assert state in ("S", "R"), f"state {state}"


def attach_to_a_thread_blocked_in_read_changes_the_code_and_detach_puts_it_back(tmp):
    t = Target("read")
    try:
        assert t.ask("a") == "answer 42"
        log = os.path.join(tmp, "log")
        r = cli("attach", "-o", log, str(t.pid), check=0)
        assert "tracking" in r.stderr, r.stderr
        assert_untraced_and_running(t.pid)
        # The read the attach interrupted was restarted: commands still arrive.
        assert t.ask("a") == "answer 43"
        cli("detach", str(t.pid), check=0)
        assert_untraced_and_running(t.pid)
        assert t.ask("a") == "answer 42"
        assert steps(log) == ["prepare", "commit", "detach_prepare", "detach_finish"]
        rest, err, rc = t.quit()
        assert (rest, err, rc) == ("", "", 7), (rest, err, rc)
        assert t.lines == ["ready", "answer 42", "answer 43", "answer 42"]
    finally:
        t.kill()


def registers_and_extended_state_of_the_hijacked_thread_come_back(tmp):
    t = Target("read")
    try:
        for command in (("attach", "-o", os.path.join(tmp, "log")), ("detach",)):
            # stdin is line-buffered by the program's stdio: the raw read
            # sees only what comes after "waiting".
            assert t.ask("regs") == "waiting"
            time.sleep(0.3)
            cli(*command, str(t.pid), check=0)
            t.proc.stdin.write("x")
            t.proc.stdin.flush()
            assert t.readline() == "registers kept"
        assert t.quit() == ("", "", 7)
    finally:
        t.kill()


def a_sleep_interrupted_by_the_attach_is_restarted_and_sleeps_whole(tmp):
    t = Target("sleep", "3000")
    try:
        time.sleep(0.5)
        cli("attach", "-o", os.path.join(tmp, "log"), str(t.pid), check=0)
        rest, err = t.proc.communicate(timeout=60)
        assert (rest, err, t.proc.returncode) == ("slept: whole\nanswer 43\n", "", 7), (rest, err)
    finally:
        t.kill()


def attach_and_detach_while_one_or_eight_threads_spin_keep_them_running_and_exact(tmp):
    for mode in ("busy", "threads"):
        t = Target(mode)
        try:
            for round in range(3):
                cli("attach", "-o", os.path.join(tmp, f"{mode}{round}"), str(t.pid), check=0)
                assert t.ask("a") == "answer 43"
                assert t.ask("calls") == "spinning yes, wrong 0"
                cli("detach", str(t.pid), check=0)
                assert t.ask("a") == "answer 42"
                assert t.ask("calls") == "spinning yes, wrong 0"
            assert len(os.listdir(f"/proc/{t.pid}/task")) == (2 if mode == "busy" else 9)
            rest, err, rc = t.quit()
            assert (rest, err, rc) == ("", "", 7), (mode, rest, err, rc)
        finally:
            t.kill()


def a_thread_blocked_inside_the_code_to_change_makes_attach_refuse_and_change_nothing(tmp):
    t = Target("busy")
    try:
        assert t.ask("park") == "parked"
        r = cli("attach", "-o", os.path.join(tmp, "log"), str(t.pid), check=1)
        assert r.stderr.strip() == (f"tensorleak: attach: {t.pid}: a thread was inside the code to change at each "
                                    "of 200 tries; nothing was changed"), r.stderr
        assert_untraced_and_running(t.pid)
        assert t.ask("a") == "answer 42"
        assert t.ask("calls") == "spinning yes, wrong 0"
        assert t.quit() == ("", "", 7)
    finally:
        t.kill()


def attach_again_after_detach_works_and_the_library_sees_each_step(tmp):
    t = Target("read")
    try:
        log = os.path.join(tmp, "log")
        for _ in range(3):
            cli("attach", "-o", log, str(t.pid), check=0)
            assert t.ask("a") == "answer 43"
            # Attached twice: the library refuses, the program is unchanged.
            r = cli("attach", "-o", log, str(t.pid), check=1)
            assert r.stderr.strip() == f"tensorleak: attach: {t.pid}: already attached", r.stderr
            assert t.ask("a") == "answer 43"
            cli("detach", str(t.pid), check=0)
            assert t.ask("a") == "answer 42"
        assert steps(log) == ["prepare", "commit", "detach_prepare", "detach_finish"] * 3
        # The library is loaded once, however often it was attached.
        maps = pathlib.Path(f"/proc/{t.pid}/maps").read_text()
        assert len({l.split()[4] for l in maps.splitlines() if l.endswith("attach_testlib.so")}) == 1
        r = cli("detach", str(t.pid), check=1)
        assert r.stderr.strip() == f"tensorleak: detach: {t.pid}: not attached", r.stderr
        assert t.quit() == ("", "", 7)
    finally:
        t.kill()


def options_reach_the_library_as_settings_lines(tmp):
    t = Target("read")
    supp = os.path.join(tmp, "supp.txt")
    pathlib.Path(supp).write_text("")
    try:
        os.chdir(tmp)
        cli("attach", "-o", "rel.%p.json", "--depth", "7", "--python-depth", "3", "--interval", "0.5",
            "--suppressions", "supp.txt", "--budget", "1G", "--quiet", str(t.pid), check=0)
        log = os.path.join(tmp, "rel.%p.json")
        assert log_of(log).splitlines()[:9] == [
            "prepare",
            f"TENSORLEAK_OUTPUT={tmp}/rel.%p.json",
            "TENSORLEAK_DEPTH=7",
            "TENSORLEAK_PYTHON_DEPTH=3",
            "TENSORLEAK_INTERVAL=0.5",
            f"TENSORLEAK_SUPPRESSIONS={os.path.realpath(supp)}",
            "TENSORLEAK_BUDGET=1G",
            "TENSORLEAK_QUIET=1",
            "TENSORLEAK_PYTHON=1",
        ], log_of(log)
        cli("detach", str(t.pid), check=0)
        # Bad values are refused before the process is touched.
        for args, msg in ((["--depth", "x"], "attach: --depth: invalid value 'x'"),
                          (["--sim"], "attach: --sim does not apply"),
                          (["--budget-enforce"], "attach: --budget-enforce needs --budget")):
            r = cli("attach", *args, str(t.pid), check=2)
            assert msg in r.stderr, r.stderr
        assert t.ask("a") == "answer 42"
        assert t.quit() == ("", "", 7)
    finally:
        t.kill()


def a_failing_prepare_or_commit_leaves_the_program_as_it_was(tmp):
    t = Target("busy")
    try:
        r = cli("attach", "-o", os.path.join(tmp, "fail-prepare"), str(t.pid), check=1)
        assert r.stderr.strip() == f"tensorleak: attach: {t.pid}: test library: prepare refused", r.stderr
        assert_untraced_and_running(t.pid)
        assert t.ask("a") == "answer 42"
        r = cli("attach", "-o", os.path.join(tmp, "fail-commit"), str(t.pid), check=1)
        assert r.stderr.strip() == (f"tensorleak: attach: {t.pid}: tracking did not start: test library: commit "
                                    "refused; the code was put back"), r.stderr
        assert_untraced_and_running(t.pid)
        assert t.ask("a") == "answer 42"
        assert t.ask("calls") == "spinning yes, wrong 0"
        assert t.quit() == ("", "", 7)
    finally:
        t.kill()


def an_interrupted_attach_abandons_its_call_and_leaves_the_program_as_it_was(tmp):
    t = Target("read")
    try:
        log = os.path.join(tmp, "slow-prepare")
        attach = subprocess.Popen([CLI, "attach", "-o", log, str(t.pid)], stderr=subprocess.PIPE, text=True,
                                  env=clean_env(TENSORLEAK_LIBRARY=TESTLIB))
        deadline = time.monotonic() + 60
        while "prepare" not in log_of(log) and time.monotonic() < deadline:
            time.sleep(0.02)
        attach.send_signal(signal.SIGINT)
        _, err = attach.communicate(timeout=60)
        assert attach.returncode == 1 and err.strip() == (
            f"tensorleak: attach: {t.pid}: interrupted during the call, which was abandoned"), err
        assert_untraced_and_running(t.pid)
        assert t.ask("a") == "answer 42"
        cli("attach", "-o", os.path.join(tmp, "log"), str(t.pid), check=0)
        assert t.ask("a") == "answer 43"
        assert t.quit() == ("", "", 7)
    finally:
        t.kill()


def refusals_no_such_pid_already_tracked_or_traced_no_driver_unsafe_library(tmp):
    # No such process: a pid that was just reaped.
    p = subprocess.Popen(["true"])
    p.wait()
    r = cli("attach", str(p.pid), check=1)
    assert r.stderr.strip() == f"tensorleak: attach: {p.pid}: no such process", r.stderr
    r = cli("attach", "12x", check=2)
    assert "invalid process id '12x'" in r.stderr

    # Preloaded: started with the library in LD_PRELOAD.
    t = Target("read", env=clean_env(LD_LIBRARY_PATH=SIM_DIR, LD_PRELOAD=TESTLIB))
    try:
        r = cli("attach", str(t.pid), check=1)
        assert r.stderr.strip() == (f"tensorleak: attach: {t.pid}: already tracked: it was started with "
                                    f"{os.path.basename(TESTLIB)} in LD_PRELOAD (its report comes at exit; `kill -USR1 "
                                    f"{t.pid}` or `tensorleak top` show it now)"), r.stderr
        assert t.ask("a") == "answer 42"
        assert t.quit() == ("", "", 7)
    finally:
        t.kill()

    # Another libtensorleak.so file already loaded.
    other = os.path.join(tmp, "libtensorleak.so")
    shutil.copy(os.environ["TL_LIBRARY"], other)
    t = Target("read", env=clean_env(LD_LIBRARY_PATH=SIM_DIR, LD_PRELOAD=other, TENSORLEAK_QUIET="1",
                                     TENSORLEAK_OUTPUT=os.path.join(tmp, "r.json")))
    try:
        r = cli("attach", str(t.pid), check=1)
        assert r.stderr.strip() == (f"tensorleak: attach: {t.pid}: already tracked: it has {other} loaded (not "
                                    f"{TESTLIB}); to attach or detach with that one, set TENSORLEAK_LIBRARY={other}"), r.stderr
        t.quit()
    finally:
        t.kill()

    # A library without the attach entry points: refused and unloaded again.
    t = Target("read")
    try:
        noabi = os.environ["TL_NOABI"]
        r = cli("attach", str(t.pid), library=noabi, check=1)
        assert r.stderr.strip() == (f"tensorleak: attach: {t.pid}: {noabi} does not export tensorleak_attach_prepare: "
                                    "it cannot attach (a build without attach support?)"), r.stderr
        assert noabi not in pathlib.Path(f"/proc/{t.pid}/maps").read_text()
        assert t.ask("a") == "answer 42"
        assert t.quit() == ("", "", 7)
    finally:
        t.kill()

    # Traced by another process (a debugger): seized by a helper that waits.
    t = Target("read")
    tracer = subprocess.Popen([sys.executable, "-c", (
        "import ctypes, sys, time\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "assert libc.ptrace(0x4206, int(sys.argv[1]), None, None) == 0, ctypes.get_errno()\n"
        "print('seized', flush=True)\n"
        "sys.stdin.read()\n"), str(t.pid)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert tracer.stdout.readline() == "seized\n"
        r = cli("attach", str(t.pid), check=1)
        assert r.stderr.strip() == (f"tensorleak: attach: {t.pid}: already traced by process {tracer.pid} (a "
                                    "debugger?); detach it first"), r.stderr
        tracer.communicate("")
        assert t.ask("a") == "answer 42"
        assert t.quit() == ("", "", 7)
    finally:
        tracer.kill()
        t.kill()

    # No driver yet, without --wait.
    t = Target("read", "nocuda")
    try:
        r = cli("attach", str(t.pid), check=1)
        assert r.stderr.strip() == (f"tensorleak: attach: {t.pid}: no libcuda.so.1 loaded yet (nothing to track); "
                                    "--wait waits for it"), r.stderr
        assert_untraced_and_running(t.pid)

        # A library others could change, or in a directory they could.
        libdir = os.path.join(tmp, "lib")
        os.mkdir(libdir, 0o755)
        lib = os.path.join(libdir, "attach_testlib.so")
        shutil.copy(TESTLIB, lib)
        os.chmod(lib, 0o775)
        r = cli("attach", str(t.pid), library=lib, check=1)
        assert r.stderr.strip() == (f"tensorleak: attach: library {lib} is writable by its group: refusing to load it "
                                    "into a process (chmod go-w)"), r.stderr
        os.chmod(lib, 0o755)
        os.chmod(libdir, 0o777)
        r = cli("attach", str(t.pid), library=lib, check=1)
        assert r.stderr.strip() == (f"tensorleak: attach: the library's directory {libdir} is writable by everyone: "
                                    "refusing to load it into a process (chmod go-w)"), r.stderr
        os.chmod(libdir, 0o755)
        if os.geteuid() == 0:
            os.chown(lib, 4321, 4321)
            r = cli("attach", str(t.pid), library=lib, check=1)
            assert r.stderr.strip() == (f"tensorleak: attach: library {lib} is owned by uid 4321, neither you nor "
                                        "root: refusing to load it into a process"), r.stderr
        else:
            print("skipped: a library of another owner (needs root to chown)")
        assert t.quit() == ("", "", 7)
    finally:
        t.kill()


def wait_attaches_once_the_program_loads_libcuda(tmp):
    t = Target("read", "nocuda")
    try:
        log = os.path.join(tmp, "log")
        env = clean_env(TENSORLEAK_LIBRARY=TESTLIB)
        waiter = subprocess.Popen([CLI, "attach", "--wait", "-o", log, str(t.pid)], stderr=subprocess.PIPE,
                                  text=True, env=env)
        time.sleep(0.5)
        assert waiter.poll() is None, "--wait returned before libcuda.so.1 was loaded"
        assert t.ask("a") == "answer 42"
        assert t.ask("load") == "loaded"
        _, err = waiter.communicate(timeout=60)
        assert waiter.returncode == 0, err
        assert t.ask("a") == "answer 43"
        cli("detach", str(t.pid), check=0)
        assert t.quit() == ("", "", 7)
    finally:
        t.kill()


def another_users_process_is_refused_naming_the_capability(tmp):
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        print("skipped: ptrace denied to another user (needs root and setpriv to run two other uids)")
        return
    os.chmod(tmp, 0o755)
    drop = ["setpriv", "--reuid", "4321", "--regid", "4321", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all"]
    t = subprocess.Popen([*drop, TARGET, "read"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                         env=clean_env(LD_LIBRARY_PATH=SIM_DIR))
    try:
        assert t.stdout.readline() == "ready\n"
        r = subprocess.run(["setpriv", "--reuid", "4322", "--regid", "4322", "--clear-groups", "--inh-caps=-all",
                            "--bounding-set=-all", CLI, "attach", str(t.pid)], capture_output=True, text=True,
                           env=clean_env(TENSORLEAK_LIBRARY=TESTLIB), cwd=tmp)
        assert r.returncode == 1, r.stderr
        assert r.stderr.startswith(f"tensorleak: attach: {t.pid}: process of uid 4321 (gid 4321), and tracing "
                                   "another user's process needs CAP_SYS_PTRACE, which this process lacks (CapEff 0000000000000000): "
                                   "run tensorleak as the process's user, or give it CAP_SYS_PTRACE"), r.stderr
        t.stdin.write("a\nq\n")
        t.stdin.flush()
        assert t.communicate(timeout=60)[0] == "answer 42\n"
    finally:
        if t.poll() is None:
            t.kill()
            t.communicate()


def attaching_and_detaching_100_times_to_a_busy_program_changes_nothing(tmp):
    t = Target("busy")
    try:
        log = os.path.join(tmp, "log")
        for _ in range(100):
            cli("attach", "-o", log, str(t.pid), check=0)
            cli("detach", str(t.pid), check=0)
        assert t.ask("a") == "answer 42"
        assert t.ask("calls") == "spinning yes, wrong 0"
        assert steps(log) == ["prepare", "commit", "detach_prepare", "detach_finish"] * 100
        assert_untraced_and_running(t.pid)
        assert t.quit() == ("", "", 7)
    finally:
        t.kill()


if __name__ == "__main__":
    case = sys.argv[1]
    with tempfile.TemporaryDirectory(prefix="tl-attach-") as tmp:
        globals()[case](tmp)
    print(f"ok {case}")
