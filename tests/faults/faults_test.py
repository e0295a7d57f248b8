#!/usr/bin/env python3
"""Fault cases for libtensorleak.so: exit paths, children, dlclose, start-up
order, output errors.  Runs fault_prog (fault_prog.c) under the preload.

    faults_test.py --library LIB --sim-dir DIR --program EXE --plugin SO CASE

What holds on every path: the program's exit status or signal is its own, a
report file is never half-written (it parses as JSON or does not exist) and
no temp file is left.  Exit 0 pass, 1 fail, 77 skip.
"""
import argparse
import json
import os
import re
import resource
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time

MiB = 1 << 20
MAIN_LEAKS = [("device", 3 * MiB, 3)]  # leak_blocks(LEAKS=3, 1 MiB)


class Failure(Exception):
    pass


class Skip(Exception):
    pass


def check_eq(got, want, what):
    if got != want:
        raise Failure(f"{what}: got {got!r}, want {want!r}")


class Ctx:
    def __init__(self, args, tmp):
        self.args = args
        self.tmp = tmp

    def env(self, output, **extra):
        env = {k: v for k, v in os.environ.items() if not k.startswith("TENSORLEAK_") and k != "FAULT_EARLY"}
        ld = env.get("LD_LIBRARY_PATH")
        env["LD_LIBRARY_PATH"] = self.args.sim_dir + (":" + ld if ld else "")
        env["LD_PRELOAD"] = self.args.library
        env["TENSORLEAK_OUTPUT"] = output
        env["TENSORLEAK_QUIET"] = "1"
        env.update(extra)
        return env

    def run(self, argv, output=None, preexec=None, cwd=None, **extra):
        output = output or os.path.join(self.tmp, "r.%p.json")
        return subprocess.run([self.args.program] + argv, env=self.env(output, **extra), cwd=cwd or self.tmp,
                              capture_output=True, text=True, timeout=50, preexec_fn=preexec)

    def files(self, d=None):
        return sorted(os.listdir(d or self.tmp))

    def report(self, pid, d=None, pattern="r.{}.json"):
        path = os.path.join(d or self.tmp, pattern.format(pid))
        with open(path) as f:
            return json.load(f)


def leaks_of(r):
    return sorted((l["kind"], l["bytes"], l["count"]) for l in r["leaks"])


def children(stdout):
    return [int(m) for m in re.findall(r"^child (\d+)$", stdout, re.M)]


def no_temp_files(c, d=None):
    left = [f for f in c.files(d) if ".tmp." in f]
    check_eq(left, [], "temp files left behind")


# --- exit paths -----------------------------------------------------------

def return_from_main_writes_the_exit_report(c):
    p = c.run(["return"])
    check_eq((p.returncode, p.stdout, p.stderr), (0, "returning\n", ""), "status, stdout, stderr")
    check_eq(c.files(), [f"r.{pid_of(c)}.json"], "files")
    r = c.report(pid_of(c))
    check_eq((r["reason"], leaks_of(r)), ("exit", MAIN_LEAKS), "exit report")


def pid_of(c):
    names = [f for f in c.files() if re.fullmatch(r"r\.\d+\.json", f)]
    if len(names) != 1:
        raise Failure(f"expected one report, found {c.files()}")
    return int(names[0].split(".")[1])


def exit_writes_the_exit_report_and_keeps_the_status(c):
    p = c.run(["exit"])
    check_eq((p.returncode, p.stdout, p.stderr), (7, "exiting\n", ""), "status, stdout, stderr")
    r = c.report(pid_of(c))
    check_eq((r["reason"], leaks_of(r)), ("exit", MAIN_LEAKS), "exit report")


def underscore_exit_writes_no_report_and_keeps_the_status(c):
    p = c.run(["_exit"])
    check_eq((p.returncode, p.stdout, p.stderr), (9, "", ""), "status, stdout, stderr")
    check_eq(c.files(), [], "files after _exit")


def fatal_signals_keep_their_disposition_and_leave_no_partial_file(c):
    """abort, SIGTERM, SIGINT (default action) and a real SIGSEGV: the
    process still dies of its own signal, after the preload wrote exactly one
    whole report naming the signal."""
    for mode, sig in (("abort", signal.SIGABRT), ("sigterm", signal.SIGTERM),
                      ("sigint", signal.SIGINT), ("segv", signal.SIGSEGV)):
        d = os.path.join(c.tmp, mode)
        os.mkdir(d)
        p = c.run([mode], output=os.path.join(d, "r.%p.json"))
        check_eq(p.returncode, -sig, f"{mode}: killed by its own signal")
        if p.stdout:
            raise Failure(f"{mode}: unexpected stdout {p.stdout!r}")
        no_temp_files(c, d)
        check_eq(len(c.files(d)), 1, f"{mode}: one report written at the signal")
        for f in c.files(d):
            with open(os.path.join(d, f)) as fh:
                try:
                    r = json.load(fh)
                except json.JSONDecodeError as e:
                    raise Failure(f"{mode}: half-written report {f}: {e}")
            check_eq(leaks_of(r), MAIN_LEAKS, f"{mode}: leaks in the report written at the signal")
            check_eq((r["reason"], r["label"]), ("exit", f"fatal signal {int(sig)} ({sig.name[3:]})"), f"{mode}: label")
        print(f"{mode}: {'report written' if c.files(d) else 'no report'}")


# --- children -------------------------------------------------------------

def forked_child_reports_its_own_leaks_to_its_own_file(c):
    p = c.run(["fork"])
    check_eq((p.returncode, p.stderr), (0, ""), "status, stderr")
    (child,) = children(p.stdout)
    parent = p_pid = None
    names = c.files()
    check_eq(len(names), 2, f"two reports ({names})")
    parent = [int(n.split(".")[1]) for n in names if int(n.split(".")[1]) != child]
    check_eq(len(parent), 1, f"a parent report besides the child's ({names})")
    check_eq(leaks_of(c.report(parent[0])), MAIN_LEAKS, "parent leaks (not the child's)")
    rc = c.report(child)
    check_eq((rc["pid"], leaks_of(rc)), (child, [("device", 2 * MiB, 2)]), "child report: only its own leaks")
    del p_pid


def forked_child_with_follow_fork_off_writes_nothing(c):
    p = c.run(["fork"], TENSORLEAK_FOLLOW_FORK="0")
    check_eq((p.returncode, p.stderr), (0, ""), "status, stderr")
    (child,) = children(p.stdout)
    names = c.files()
    check_eq(len(names), 1, f"only the parent's report ({names})")
    if names[0] == f"r.{child}.json":
        raise Failure("the child wrote a report")
    check_eq(leaks_of(c.report(pid_of(c))), MAIN_LEAKS, "parent leaks")


def a_fork_while_the_watcher_works_leaves_the_childs_libc_usable(c):
    # The watcher thread's first live update converts a time, and glibc
    # loads the time zone then, under its tzset lock, which it never resets
    # in a child.  TZ names a FIFO: once a reader has it open (the watcher,
    # holding that lock) the program is told to fork 20 children, each of
    # which converts a time too, and the FIFO answers 300 ms later.  Before
    # forks waited for the watcher, every run hung its children; now each
    # fork waits for the update.  Unfollowed children (no report, no watcher
    # of their own) isolate what a child inherits.
    fifo, go = os.path.join(c.tmp, "tz"), os.path.join(c.tmp, "go")
    os.mkfifo(fifo)
    stop = threading.Event()
    answer = b"not a TZif file: glibc falls back to UTC\n"
    opened = []

    def answer_time_zone_reads():
        deadline = time.monotonic() + 20
        while not stop.is_set() and time.monotonic() < deadline:
            try:  # succeeds only once a reader has the FIFO open
                fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
                opened.append(True)
                break
            except OSError:
                time.sleep(0.001)
        else:
            open(go, "w").close()  # nobody read the time zone: the program goes on, the test fails
            return
        open(go, "w").close()
        time.sleep(0.3)
        os.write(fd, answer)
        os.close(fd)
        while not stop.is_set():  # later readers, if any
            fd = os.open(fifo, os.O_WRONLY)
            try:
                os.write(fd, answer)
            except OSError:
                pass
            os.close(fd)
            time.sleep(0.001)

    writer = threading.Thread(target=answer_time_zone_reads)
    writer.start()
    try:
        n = 20
        p = c.run(["fork-storm", str(n), go], TZ=":" + fifo, TENSORLEAK_LIVE_INTERVAL="0.01",
                  TENSORLEAK_FOLLOW_FORK="0", TENSORLEAK_LIVE_DIR=os.path.join(c.tmp, "live"))
    finally:
        stop.set()
        unblock = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a writer waiting in open() for a reader
        writer.join()
        os.close(unblock)
    check_eq(opened, [True], "the time zone read from the FIFO while the program waited to fork")
    check_eq((p.returncode, p.stdout, p.stderr), (0, f"{n} children, 0 hung, 0 failed\n", ""), "status, stdout, stderr")
    check_eq(leaks_of(c.report(pid_of(c))), MAIN_LEAKS, "parent leaks")


def a_fork_waits_for_the_watchers_work_before_it_takes_the_python_location_lock(c):
    """A fork while the watcher's work is under way, that work taking a
    Python location's lock only after the fork began to wait for it
    (tensorleak_test_hold 6): the fork's prepare handlers wait for the work
    first, then take that lock; the other way round the fork holds the lock
    the work waits for, and waits out its 10 s bound."""
    p = c.run(["fork-held-work"])
    check_eq((p.returncode, p.stdout, p.stderr), (0, "the fork waited less than 5 s; the child exited 0\n", ""),
             "status, stdout, stderr")
    check_eq(leaks_of(c.report(pid_of(c))), MAIN_LEAKS, "parent leaks")


def a_fork_while_our_thread_holds_the_contexts_table_leaves_the_child_its_report(c):
    """A fork while a thread of the library holds the tracker's table of
    contexts (tensorleak_test_hold 7), let go once the fork waits: the fork
    waits for it, and the child, whose device reset reads that table, exits.
    A child that inherited the lock held would wait for it forever."""
    p = c.run(["fork-held-contexts"])
    check_eq((p.returncode, p.stdout, p.stderr), (0, "the fork waited less than 5 s; the child exited 0\n", ""),
             "status, stdout, stderr")
    check_eq(leaks_of(c.report(pid_of(c))), MAIN_LEAKS, "parent leaks")


def fork_without_pid_in_the_pattern_appends_the_child_pid(c):
    out = os.path.join(c.tmp, "fixed.json")
    p = c.run(["fork"], output=out)
    check_eq((p.returncode, p.stderr), (0, ""), "status, stderr")
    (child,) = children(p.stdout)
    check_eq(c.files(), sorted(["fixed.json", f"fixed.json.{child}"]), "files")
    check_eq(leaks_of(c.report(None, pattern="fixed.json")), MAIN_LEAKS, "parent report keeps its name")
    check_eq(leaks_of(c.report(child, pattern="fixed.json.{}")), [("device", 2 * MiB, 2)], "child report")


def exec_children_are_tracked_as_programs_of_their_own(c):
    for mode in ("fork-exec", "vfork-exec", "posix-spawn"):
        d = os.path.join(c.tmp, mode)
        os.mkdir(d)
        p = c.run([mode], output=os.path.join(d, "r.%p.json"))
        check_eq((p.returncode, p.stderr), (0, ""), f"{mode}: status, stderr")
        (child,) = children(p.stdout)
        names = c.files(d)
        check_eq(len(names), 2, f"{mode}: parent and child reports ({names})")
        rc = c.report(child, d)
        check_eq((rc["pid"], leaks_of(rc)), (child, [("device", 2 * MiB, 2)]), f"{mode}: child report")
        if rc.get("command") and rc["command"][-1] != "leak2":
            raise Failure(f"{mode}: child command {rc['command']}")
        parent = [n for n in names if n != f"r.{child}.json"][0]
        with open(os.path.join(d, parent)) as f:
            check_eq(leaks_of(json.load(f)), MAIN_LEAKS, f"{mode}: parent report")


def raw_clone_child_writes_nothing(c):
    p = c.run(["clone"])
    check_eq((p.returncode, p.stderr), (0, ""), "status, stderr")
    (child,) = children(p.stdout)
    names = c.files()
    check_eq(len(names), 1, f"only the parent's report ({names})")
    if names[0] == f"r.{child}.json":
        raise Failure("the raw clone child wrote a report")
    check_eq(leaks_of(c.report(pid_of(c))), MAIN_LEAKS, "parent leaks")


RAW_CLONES = 500
# tensorleak_test_hold's locks: the loader's (a dlopen whose constructor
# blocks), its list lock (a dl_iterate_phdr callback that blocks), every
# live-table shard, the report lock, stderr's FILE lock.
HELD_LOCKS = {1: "loader", 2: "loader list", 3: "live table", 4: "report", 5: "stderr"}


def raw_clone_children_never_wait_on_a_lock_our_thread_held(c):
    """A thread of the library holds each lock while the program makes 500
    raw clone(SIGCHLD) children that allocate and free with the runtime at a
    call site the parent never used: every child finishes (10 s each before
    it counts as hung) and none writes a report."""
    for which, name in HELD_LOCKS.items():
        p = c.run(["clone-held", str(which), str(RAW_CLONES), c.args.blocker])
        check_eq((p.returncode, p.stdout, p.stderr), (0, f"{RAW_CLONES} children, 0 hung, 0 failed\n", ""),
                 f"{name} lock held: status, stdout, stderr")
        names = c.files()
        check_eq(len(names), 1, f"{name} lock held: only the parent's report ({names})")
        os.unlink(os.path.join(c.tmp, names[0]))


def reports_on_the_watcher_never_wait_for_the_loaders_lock(c):
    """After a dlopen and dlclose of a plugin, while a thread of the library
    holds the loader's lock (a dlopen whose constructor blocks,
    tensorleak_test_hold 1), the watcher takes a mark, writes two signal
    reports and a live update between them: each report comes within 20 s,
    symbolized, owned and with the devices' figures exactly as the exit
    report (the program's thread) has them.  A watcher that took that lock
    (dladdr, dlsym, dlopen) would wait for it here; at a raw clone it would
    leave it held in the child, whose exit() then hangs."""
    live = os.path.join(c.tmp, "live")
    p = c.run(["report-under-loader-lock", c.args.blocker, c.tmp, c.args.plugin], TENSORLEAK_MARK_SIGNAL="SIGUSR2",
              TENSORLEAK_LIVE_INTERVAL="0.01", TENSORLEAK_LIVE_DIR=live)
    check_eq((p.returncode, p.stdout, p.stderr), (0, "2 of 2 reports written while the loader's lock was held\n", ""),
             "status, stdout, stderr")
    reports = [f for f in c.files() if f != "live"]
    pid = int(reports[0].split(".")[1])
    check_eq(reports, [f"r.{pid}.1.json", f"r.{pid}.2.json", f"r.{pid}.json"], "files")
    final = c.report(pid)
    check_eq(final["reason"], "exit", "exit report")
    for n in (1, 2):
        r = c.report(pid, pattern="r.{}." + str(n) + ".json")
        check_eq((r["reason"], [m["label"] for m in r["marks"]]), ("signal", ["signal"]), f"report {n}")
        for key in ("leaks", "owners", "owners_by_device", "devices"):
            check_eq(r[key], final[key], f"report {n}'s {key} against the exit report's")
    frames = [(f["function"], os.path.basename(f["file"] or "")) for f in final["leaks"][0]["stack"][:2]]
    check_eq(frames, [("leak_blocks", "fault_prog.c"), ("main", "fault_prog.c")], "the leak's innermost frames")


# --- modules and start-up ---------------------------------------------------

def dlopen_run(c):
    p = c.run(["dlopen", c.args.plugin])
    check_eq((p.returncode, p.stdout, p.stderr), (0, "unloaded\n", ""), "status, stdout, stderr")
    r = c.report(pid_of(c))
    check_eq(leaks_of(r), sorted(MAIN_LEAKS + [("device", 4 * MiB, 2)]), "leaks incl. the plugin's")
    return [l for l in r["leaks"] if l["bytes"] == 4 * MiB][0]


def leaks_of_a_dlclosed_module_are_reported_without_crashing(c):
    site = dlopen_run(c)
    functions = [f.get("function") for f in site["stack"]]
    if "main" not in functions:
        raise Failure(f"the caller in the program is not named: {functions}")


def frames_of_a_dlclosed_module_are_named_or_marked_unloaded(c):
    site = dlopen_run(c)
    inner = site["stack"][0]
    # Symbolized before the unload and marked as such.
    check_eq(inner.get("function"), "plugin_alloc_block", "function of the unloaded plugin's frame")
    if not (inner.get("module") or "").endswith("libfault_plugin.so (unloaded)"):
        raise Failure(f"module not marked unloaded: {inner}")


def allocations_before_main_and_before_init_are_tracked(c):
    p = c.run(["return"], FAULT_EARLY="1")
    check_eq((p.returncode, p.stdout, p.stderr), (0, "returning\n", ""), "status, stdout, stderr")
    r = c.report(pid_of(c))
    # 5 MiB from the linked library's constructor (before libtensorleak's own
    # constructor and before cuInit), 3 MiB from the program's constructor.
    want = sorted(MAIN_LEAKS + [("device", 5 * MiB, 1), ("device", 3 * MiB, 1)])
    check_eq(leaks_of(r), want, "leaks")
    fns = {l["bytes"]: [f.get("function") for f in l["stack"]] for l in r["leaks"]}
    if "early_alloc" not in fns[5 * MiB]:
        raise Failure(f"the constructor's allocation site is not named: {fns[5 * MiB]}")


def threads_racing_to_the_first_cuda_call_are_all_tracked(c):
    for i in range(5):
        d = os.path.join(c.tmp, str(i))
        os.mkdir(d)
        p = c.run(["threads"], output=os.path.join(d, "r.%p.json"))
        check_eq((p.returncode, p.stdout, p.stderr), (0, "threads done\n", ""), "status, stdout, stderr")
        (name,) = c.files(d)
        with open(os.path.join(d, name)) as f:
            check_eq(leaks_of(json.load(f)), [("device", 4 * MiB, 8)], f"run {i}: leaks")


# --- output errors ----------------------------------------------------------

def stderr_report(err, path_hint):
    """The JSON that follows the error line on stderr."""
    lines = err.splitlines()
    idx = [i for i, l in enumerate(lines) if l.startswith("tensorleak: cannot write report")]
    if len(idx) != 1:
        raise Failure(f"expected one 'cannot write report' line, stderr: {err[:400]!r}")
    if path_hint not in lines[idx[0]]:
        raise Failure(f"the error line does not name {path_hint}: {lines[idx[0]]!r}")
    start = err.index("{", err.index("tensorleak: cannot write report"))
    obj, _ = json.JSONDecoder().raw_decode(err[start:])
    return lines[idx[0]], obj


def expect_stderr_fallback(c, p, path, why):
    check_eq((p.returncode, p.stdout), (0, "returning\n"), "status, stdout")
    line, r = stderr_report(p.stderr, path)
    if why not in line:
        raise Failure(f"error line does not say {why!r}: {line!r}")
    check_eq(leaks_of(r), MAIN_LEAKS, "the report on stderr")


def unwritable_directory_sends_the_report_to_stderr(c):
    missing = os.path.join(c.tmp, "no", "such", "dir", "r.json")
    p = c.run(["return"], output=missing)
    expect_stderr_fallback(c, p, missing, "No such file or directory")
    check_eq(c.files(), [], "files")
    notdir = os.path.join(c.tmp, "plainfile")
    open(notdir, "w").close()
    p = c.run(["return"], output=os.path.join(notdir, "r.json"))
    expect_stderr_fallback(c, p, notdir, "Not a directory")
    # A read-only directory: root ignores modes, so run as nobody when root.
    ro = os.path.join(c.tmp, "ro")
    os.mkdir(ro, 0o555)
    os.chmod(c.tmp, 0o755)
    drop = None
    if os.geteuid() == 0:
        def drop():
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
    p = c.run(["return"], output=os.path.join(ro, "r.json"), preexec=drop, cwd="/")
    expect_stderr_fallback(c, p, ro, "Permission denied")
    check_eq(c.files(ro), [], "files in the read-only directory")


def full_disk_sends_the_report_to_stderr_and_leaves_no_file(c):
    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (256, 256))
    p = c.run(["return"], preexec=limit)
    check_eq(p.returncode, 0, "status (not killed by SIGXFSZ)")
    expect_stderr_fallback(c, p, c.tmp, "File too large")
    check_eq(c.files(), [], "files left behind")


def planted_symlink_is_never_followed(c):
    target = os.path.join(c.tmp, "victim.txt")
    with open(target, "w") as f:
        f.write("precious\n")
    os.chmod(target, 0o644)
    link = os.path.join(c.tmp, "r.json")
    os.symlink(target, link)
    p = c.run(["return"], output=link)
    check_eq((p.returncode, p.stdout), (0, "returning\n"), "status, stdout")
    with open(target) as f:
        check_eq(f.read(), "precious\n", "symlink target content")
    check_eq(stat.S_IMODE(os.stat(target).st_mode), 0o644, "symlink target mode")
    # The name is taken (by the link): no report replaces it, the report
    # takes the next number (SPEC: "Report files: nothing is ever replaced").
    check_eq(os.path.islink(link), True, "the planted link is left alone")
    numbered = os.path.join(c.tmp, "r.1.json")
    check_eq(stat.S_IMODE(os.lstat(numbered).st_mode), 0o600, "report mode")
    with open(numbered) as f:
        check_eq(leaks_of(json.load(f)), MAIN_LEAKS, "report under the next name")
    no_temp_files(c)


def report_path_that_is_a_directory_is_left_alone_the_report_takes_the_next_number(c):
    d = os.path.join(c.tmp, "r.json")
    os.mkdir(d)
    p = c.run(["return"], output=d)
    # The directory has the name: the report takes the next number.
    check_eq((p.returncode, p.stdout), (0, "returning\n"), "status, stdout")
    check_eq(c.files(), ["r.1.json", "r.json"], "files")
    check_eq(c.files(d), [], "files inside the directory")
    with open(os.path.join(c.tmp, "r.1.json")) as f:
        check_eq(leaks_of(json.load(f)), MAIN_LEAKS, "report under the next name")


def report_files_are_created_0600(c):
    def permissive():
        os.umask(0)
    p = c.run(["return"], preexec=permissive)
    check_eq((p.returncode, p.stderr), (0, ""), "status, stderr")
    path = os.path.join(c.tmp, f"r.{pid_of(c)}.json")
    check_eq(stat.S_IMODE(os.stat(path).st_mode), 0o600, "mode with umask 0")


def dev_null_output_writes_no_report_anywhere(c):
    """TENSORLEAK_OUTPUT=/dev/null asks for no reports: none as a file (as
    root, not beside /dev/null either), none on stderr (as a user who may not
    write in /dev), a forked child's neither; the --fail-on gate still
    decides the status."""
    def as_nobody():
        os.setgroups([])
        os.setgid(65534)
        os.setuid(65534)
    users = [("root", None), ("nobody", as_nobody)] if os.geteuid() == 0 else [("this user", None)]
    os.chmod(c.tmp, 0o755)
    before = sorted(os.listdir("/dev"))
    try:
        for who, drop in users:
            p = c.run(["return"], output="/dev/null", preexec=drop, cwd="/", TENSORLEAK_QUIET="0")
            check_eq((p.returncode, p.stdout), (0, "returning\n"), f"{who}: status, stdout")
            check_eq("{" in p.stderr or "cannot write" in p.stderr, False, f"{who}: a report on stderr: {p.stderr[:300]!r}")
            check_eq(p.stderr.rstrip().endswith("Report: /dev/null"), True, f"{who}: the summary line: {p.stderr[-300:]!r}")
            p = c.run(["fork"], output="/dev/null", preexec=drop, cwd="/")
            check_eq((p.returncode, p.stderr), (0, ""), f"{who}: fork: status, stderr")
            p = c.run(["return"], output="/dev/null", preexec=drop, cwd="/", TENSORLEAK_FAIL_ON="leak")
            check_eq((p.returncode, p.stderr), (23, ""), f"{who}: the gate's status, stderr")
        check_eq(sorted(os.listdir("/dev")), before, "files in /dev")
        check_eq(c.files(), [], "files")
    finally:
        for name in set(os.listdir("/dev")) - set(before):
            if name.startswith("null"):
                os.unlink(os.path.join("/dev", name))


CASES = {f.__name__: f for f in (
    return_from_main_writes_the_exit_report,
    exit_writes_the_exit_report_and_keeps_the_status,
    underscore_exit_writes_no_report_and_keeps_the_status,
    fatal_signals_keep_their_disposition_and_leave_no_partial_file,
    forked_child_reports_its_own_leaks_to_its_own_file,
    forked_child_with_follow_fork_off_writes_nothing,
    fork_without_pid_in_the_pattern_appends_the_child_pid,
    a_fork_while_the_watcher_works_leaves_the_childs_libc_usable,
    a_fork_waits_for_the_watchers_work_before_it_takes_the_python_location_lock,
    a_fork_while_our_thread_holds_the_contexts_table_leaves_the_child_its_report,
    exec_children_are_tracked_as_programs_of_their_own,
    raw_clone_child_writes_nothing,
    raw_clone_children_never_wait_on_a_lock_our_thread_held,
    reports_on_the_watcher_never_wait_for_the_loaders_lock,
    leaks_of_a_dlclosed_module_are_reported_without_crashing,
    frames_of_a_dlclosed_module_are_named_or_marked_unloaded,
    allocations_before_main_and_before_init_are_tracked,
    threads_racing_to_the_first_cuda_call_are_all_tracked,
    unwritable_directory_sends_the_report_to_stderr,
    full_disk_sends_the_report_to_stderr_and_leaves_no_file,
    planted_symlink_is_never_followed,
    report_path_that_is_a_directory_is_left_alone_the_report_takes_the_next_number,
    report_files_are_created_0600,
    dev_null_output_writes_no_report_anywhere,
)}


def main():
    ap = argparse.ArgumentParser()
    for opt in ("--library", "--sim-dir", "--program", "--plugin", "--blocker"):
        ap.add_argument(opt, required=True)
    ap.add_argument("case", choices=sorted(CASES))
    args = ap.parse_args()
    if not os.path.exists(args.library):
        print(f"skip: {args.library} not built")
        return 77
    with tempfile.TemporaryDirectory(prefix="tl-faults-") as tmp:
        try:
            CASES[args.case](Ctx(args, tmp))
        except Skip as e:
            print(f"skip: {e}")
            return 77
        except (Failure, subprocess.TimeoutExpired, json.JSONDecodeError, KeyError, ValueError) as e:
            print(f"FAIL {args.case}: {e}")
            return 1
    print(f"ok {args.case}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
