"""The live state file end to end: servers on the simulated GPU under
`tensorleak run --sim`, read back as files and through `tensorleak top`.

Each case is one meson test: python3 live_test.py CASE.
"""
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time

CLI = os.environ["TL_CLI"]
# The environment the cases start programs in: the test's own, less any
# TENSORLEAK_* setting of the caller (CI sets TENSORLEAK_FUZZ_SECONDS, which
# the library would warn about on stderr that the cases compare).
BASE_ENV = {k: v for k, v in os.environ.items() if not k.startswith("TENSORLEAK_")}
SERVER = os.environ["TL_LIVE_SERVER"]
MIB = 1 << 20


def wait_for(what, pred, timeout=30.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


class Server:
    """live_server MODE N (or `program` N) under tensorleak run --sim."""

    def __init__(self, tmp, mode, n, name="s", env=None, program=None, wrapper=()):
        self.snapshot = os.path.join(tmp, f"{name}.snapshot.json")
        self.ready = os.path.join(tmp, f"{name}.ready")
        e = dict(BASE_ENV)
        e.update({"TENSORLEAK_OUTPUT": os.path.join(tmp, f"{name}.%p.json"), "TENSORLEAK_QUIET": "1"})
        e.update(env or {})
        argv = (program or [SERVER, mode]) + [str(n), self.snapshot, self.ready]
        self.proc = subprocess.Popen(list(wrapper) + [CLI, "run", "--sim", "--"] + argv,
                                     stdin=subprocess.PIPE, stderr=subprocess.PIPE, env=e, cwd=tmp)
        self.pid = self.proc.pid

    def wait_ready(self):
        wait_for("the server's mark", lambda: os.path.exists(self.ready) or self.proc.poll() is not None)
        assert self.proc.poll() is None, self.proc.stderr.read().decode()
        with open(self.snapshot) as f:
            return json.load(f)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=60)
        return self.proc.stderr.read().decode()


def live_env(live_dir, interval="0.2"):
    return {"TENSORLEAK_LIVE_DIR": live_dir, "TENSORLEAK_LIVE_INTERVAL": interval}


def own_pid_namespace():
    """The inode number of this test's pid namespace: a process it starts
    names its live file PID-NS.json with it."""
    return os.stat("/proc/self/ns/pid").st_ino


def entry_path(live_dir, pid, ns=None):
    return os.path.join(live_dir, f"{pid}-{ns or own_pid_namespace()}.json")


def entry(live_dir, pid, ns=None):
    try:
        with open(entry_path(live_dir, pid, ns)) as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def fresh_entry(live_dir, pid, after):
    """The entry once it was written after time `after`."""
    def get():
        e = entry(live_dir, pid)
        return e if e and e["live"]["update_time"] > after else None
    return wait_for(f"an entry of {pid} newer than the mark", get)


def top_json(live_dir):
    r = subprocess.run([CLI, "top", "--json", "--dir", live_dir], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout), r.stderr


def the_live_file_is_private_current_and_gone_at_exit(tmp):
    live = os.path.join(tmp, "live")
    s = Server(tmp, "leaky", 6, env=live_env(live))
    snap = s.wait_ready()
    marked = time.time()
    e = fresh_entry(live, s.pid, marked)
    assert stat.S_IMODE(os.stat(live).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(entry_path(live, s.pid)).st_mode) == 0o600
    assert e["kind"] == "live" and e["pid"] == s.pid and e["live"]["process"] == "live_server"
    assert "command" not in e and "leaks" not in e
    assert e["live"]["interval"] == 0.2
    # The figures are the snapshot's at the same mark.
    assert e["summary"]["live_bytes"] == snap["summary"]["live_bytes"] == 6 * MIB
    assert e["devices"][0]["reserved_bytes"] == snap["devices"][0]["reserved_bytes"] == 6 * MIB
    assert e["summary"]["peak_live_bytes"] == snap["summary"]["peak_live_bytes"] == 9 * MIB
    assert e["marks"]["count"] == 6 and e["marks"]["last_label"] == "request"
    rows = [g for g in e["growth"] if g["scope"] == "call_site"]
    assert len(rows) == 1, e["growth"]
    assert rows[0]["bytes_per_mark"] == MIB
    assert rows[0]["site"].startswith("serve_leaky ") and "live_server.c:" in rows[0]["site"], rows[0]
    assert e["devices"][0]["total"] == snap["devices"][0]["total"]
    procs, _ = top_json(live)
    assert [p["pid"] for p in procs] == [s.pid]
    assert procs[0]["summary"]["reserved_bytes"] == 6 * MIB and procs[0]["growth"][0]["bytes_per_mark"] == MIB
    # top --json is the live file as the model writes it, and whether it is stale.
    assert procs[0]["growth"][0]["site"] == e["growth"][0]["site"] and procs[0]["stale"] is False
    assert {k for k in procs[0]} == set(e) | {"stale"}, sorted(procs[0])
    s.stop()
    assert entry(live, s.pid) is None
    assert os.listdir(live) == []


def two_device_env(tmp, live):
    """live_server twodev's environment: two simulated devices, and the owner
    rule that makes cache_reserve's memory a cache's."""
    rules = os.path.join(tmp, "owners.rules")
    with open(rules, "w") as f:
        f.write("owner:server cache:cache:*:cache_reserve\n")
    return dict(live_env(live), SIMCUDA_DEVICES="2", TENSORLEAK_OWNERS=rules)


# live_server twodev's owners: (device, owner, class) -> (bytes, allocations).
TWO_DEVICE_OWNERS = {
    (0, "user", "user"): (3 * MIB, 1),
    (1, "user", "user"): (2 * MIB, 1),
    (1, "server cache", "cache"): (5 * MIB, 1),
    (None, "user", "user"): (1 * MIB, 1),  # pinned host memory: no device's
}


def owners_are_per_device_in_the_snapshot_the_live_file_and_top(tmp):
    live = os.path.join(tmp, "live")
    s = Server(tmp, "twodev", 3, env=two_device_env(tmp, live))
    snap = s.wait_ready()
    e = fresh_entry(live, s.pid, time.time())
    for doc in (snap, e):
        rows = doc["owners_by_device"]
        assert [(r["device"], r["name"], r["class"]) for r in rows] == list(TWO_DEVICE_OWNERS), rows
        assert {(r["device"], r["name"], r["class"]): (r["live_bytes"], r["live_allocations"]) for r in rows} \
            == TWO_DEVICE_OWNERS, rows
        # The process-wide rows stay as they were: the sums over the devices.
        assert {(o["name"], o["class"]): (o["live_bytes"], o["live_allocations"]) for o in doc["owners"]} == {
            ("user", "user"): (6 * MIB, 3), ("server cache", "cache"): (5 * MIB, 1)}, doc["owners"]
    assert [d["device"] for d in e["devices"]] == [0, 1]
    procs, _ = top_json(live)
    assert [p["pid"] for p in procs] == [s.pid]
    assert {(r["device"], r["name"], r["class"]): r["live_bytes"] for r in procs[0]["owners_by_device"]} == {
        k: v[0] for k, v in TWO_DEVICE_OWNERS.items()}, procs[0]["owners_by_device"]
    s.stop()


def framework_figures_refresh_within_two_intervals_without_marks(tmp):
    """The live state asks the bridge for the frameworks' figures every
    interval: a server that never marks shows each request's tensors within
    two intervals of allocating them."""
    interval = 0.5
    live = os.path.join(tmp, "live")
    acks = os.path.join(tmp, "acks")
    # The test's own settings only: a TENSORLEAK_* variable of the harness
    # (TENSORLEAK_FUZZ_SECONDS in CI) would draw the library's warning.
    inherited = {k: v for k, v in os.environ.items() if not k.startswith(("TENSORLEAK_", "SIMCUDA_"))}
    env = dict(inherited, **live_env(live, str(interval)), TENSORLEAK_QUIET="1",
               TENSORLEAK_OUTPUT=os.path.join(tmp, "exit.%p.json"),
               PYTHONPATH=os.path.join(os.environ["TL_SOURCE"], "tests", "bridge", "fake"))
    # The stand-in torch (still to move to real torch, which produces this
    # too; tests/torch holds top and the exporter on real torch while it marks).
    program = [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_idle_server.py"), acks]
    proc = subprocess.Popen([CLI, "run", "--sim", "--"] + program, stdin=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env, cwd=tmp, text=True)

    def ack(n):
        def get():
            try:
                with open(acks) as f:
                    lines = f.read().splitlines()
            except FileNotFoundError:
                return None
            return [tuple(map(float, l.split())) for l in lines] if len(lines) >= n else None
        return wait_for(f"acknowledgement {n}", get)[n - 1]

    def pytorch_pool(e):
        pools = [p for p in e["pools"] if p["kind"] == "pytorch"] if e else []
        return pools[0] if pools else None
    try:
        ack(1)
        # MiB per request, and what the pool then hands out (tensors kept).
        for k, (step, held) in enumerate([(3, 3), (5, 8), (-1, 3), (2, 5)], start=2):
            proc.stdin.write(f"{step}\n")
            proc.stdin.flush()
            t, allocated = ack(k)
            assert allocated == held * MIB, (allocated, held)
            e = wait_for(f"the live state to show {held} MiB",
                         lambda: (lambda e: e if (pytorch_pool(e) or {}).get("allocated_bytes") == held * MIB else None)(
                             entry(live, proc.pid)), timeout=10)
            late = e["live"]["update_time"] - t
            assert late <= 2 * interval, f"request {k - 1}: figures {late:.3f} s after the allocation"
            assert e["marks"]["count"] == 0, e["marks"]
            assert pytorch_pool(e)["state"] == "fresh", pytorch_pool(e)
    finally:
        proc.stdin.close()
        err = proc.stderr.read()
        assert proc.wait(timeout=60) == 0, err
    assert err == "", err


def live_validator():
    """docs/live.schema.json as a validator, its references to the report's
    fields resolved in docs/report.schema.json; exit 77 (skipped) without
    jsonschema."""
    try:
        import jsonschema
        import referencing
    except ImportError:
        print("SKIP: python module jsonschema is not installed (scripts/install-deps.sh installs it)")
        sys.exit(77)
    docs = os.path.join(os.environ["TL_SOURCE"], "docs")
    with open(os.path.join(docs, "report.schema.json")) as f:
        report = json.load(f)
    with open(os.path.join(docs, "live.schema.json")) as f:
        live = json.load(f)
    registry = referencing.Registry().with_resource(report["$id"], referencing.Resource.from_contents(report))
    return jsonschema.Draft202012Validator(live, registry=registry)


def without_layout(report_row, live_row):
    """A report's device or pool row as a live file shows it: a framework's
    figures are read without its layout between reports (docs/live.md), so
    the largest free block and fragmentation the report's read had may be
    null there."""
    out = dict(report_row)
    if live_row.get("largest_free_block", 0) is None and live_row.get("fragmentation", 0) is None:
        out.update(largest_free_block=None, fragmentation=None)
    return out


def live_files_match_the_live_schema_and_hold_the_reports_figures(tmp):
    """The files of a leaky server with budgets, a pool server, a framework
    server and a two-device server validate against docs/live.schema.json,
    and what they share with the report (pools, devices, owners) is the
    snapshot's: the server is idle after it, so the figures are the same."""
    validator = live_validator()
    live = os.path.join(tmp, "live")
    fake = os.path.join(os.environ["TL_SOURCE"], "tests", "bridge", "fake")
    here = os.path.dirname(os.path.abspath(__file__))
    servers = [
        Server(tmp, "leaky", 4, "leaky", env=dict(live_env(live), TENSORLEAK_BUDGET="64M,user:2M")),
        Server(tmp, "pool", 3, "pool", env=live_env(live)),
        Server(tmp, None, 3, "torch", env=dict(live_env(live), PYTHONPATH=fake),
               program=[sys.executable, os.path.join(here, "torch_server.py")]),
        Server(tmp, "twodev", 2, "twodev", env=two_device_env(tmp, live)),
    ]
    try:
        seen = set()
        for s in servers:
            snap = s.wait_ready()
            e = fresh_entry(live, s.pid, time.time())
            errors = [f"{list(x.absolute_path)}: {x.message[:200]}" for x in validator.iter_errors(e)]
            assert not errors, errors
            for key in ("tool", "schema", "version", "pid", "rank", "host", "owners", "owners_by_device"):
                assert e[key] == snap[key], (key, e[key], snap[key])
            assert len(e["devices"]) == len(snap["devices"]), (e["devices"], snap["devices"])
            for d, r in zip(e["devices"], snap["devices"]):
                assert d == without_layout(r, d), (d, r)
            pools = {(p["name"], p["kind"], p["device"]): p for p in snap["pools"]}
            assert len(e["pools"]) == len(snap["pools"]), (e["pools"], snap["pools"])
            for p in e["pools"]:
                r = pools[(p["name"], p["kind"], p["device"])]
                assert p == without_layout({k: r[k] for k in p}, p), (p, r)
                seen.add(p["kind"])
            seen.update(k for k in ("growth", "budgets") if e[k])
        assert {"annotated", "pytorch", "growth", "budgets"} <= seen, seen
    finally:
        for s in servers:
            s.stop()


def a_sigkilled_process_is_dropped_and_its_entry_removed(tmp):
    live = os.path.join(tmp, "live")
    s = Server(tmp, "leaky", 3, env=live_env(live))
    s.wait_ready()
    fresh_entry(live, s.pid, time.time())
    os.kill(s.pid, signal.SIGKILL)
    s.proc.wait(timeout=30)
    assert entry(live, s.pid) is not None  # nobody removed it: the process had no chance
    procs, _ = top_json(live)
    assert procs == []
    assert entry(live, s.pid) is None  # the reader removed the dead process's entry


def a_process_killed_by_sigterm_removes_its_own_entry(tmp):
    """SIGTERM at its default action: tensorleak's fatal-signal handler
    writes the report, removes the live file (no exit handler runs), and the
    process still dies of SIGTERM."""
    live = os.path.join(tmp, "live")
    s = Server(tmp, "leaky", 3, env=live_env(live))
    s.wait_ready()
    fresh_entry(live, s.pid, time.time())
    os.kill(s.pid, signal.SIGTERM)
    assert s.proc.wait(timeout=30) == -signal.SIGTERM
    assert entry(live, s.pid) is None
    assert os.listdir(live) == []


def interval_reports_beyond_keep_are_removed_oldest_first(tmp):
    env = {"TENSORLEAK_INTERVAL": "0.05", "TENSORLEAK_KEEP": "3", "TENSORLEAK_LIVE": "0"}
    s = Server(tmp, "leaky", 2, env=env)
    s.wait_ready()

    def reports():
        out = []
        for name in os.listdir(tmp):
            if name.startswith("s.") and name.endswith(".json") and "snapshot" not in name:
                try:
                    with open(os.path.join(tmp, name)) as f:
                        out.append((json.load(f), name))
                except (ValueError, FileNotFoundError):
                    pass  # being removed while listed
        return out

    wait_for("at least 8 interval reports written",
             lambda: max([r["seq"] for r, _ in reports() if r["reason"] == "interval"] or [0]) >= 8)
    s.stop()
    rs = reports()
    intervals = sorted(r["seq"] for r, _ in rs if r["reason"] == "interval")
    assert len(intervals) == 3, intervals
    # The newest three stayed: every later report number is above them.
    newest = max(r["seq"] for r, _ in rs)
    assert intervals[-1] >= newest - 2, (intervals, newest)
    assert [r["reason"] for r, _ in rs].count("exit") == 1


def live_off_writes_no_entry(tmp):
    live = os.path.join(tmp, "live")
    env = live_env(live)
    env["TENSORLEAK_LIVE"] = "0"
    s = Server(tmp, "leaky", 2, env=env)
    s.wait_ready()
    time.sleep(1.0)  # five intervals
    assert not os.path.exists(live)
    err = s.stop()
    # Off is silent: no live-state line (what else the run said is shown).
    assert not [l for l in err.splitlines() if "live" in l], err
    assert not os.path.exists(live)


def a_live_directory_open_to_others_is_one_warning_and_no_entry(tmp):
    live = os.path.join(tmp, "live")
    os.mkdir(live)
    os.chmod(live, 0o755)
    s = Server(tmp, "leaky", 2, env=live_env(live, "0.05"))
    s.wait_ready()
    time.sleep(0.5)  # ten intervals
    err = s.stop()
    lines = [l for l in err.splitlines() if "live state" in l]
    assert lines == [f"tensorleak: cannot publish the live state in {live} (open to group or others); live state is off"], err
    assert os.listdir(live) == []
    assert s.proc.returncode == 0


def pid_namespace_wrapper():
    """The command line that runs a program as pid 1 of a new pid namespace
    with its own /proc, or None where this user may not (no root and no
    unprivileged user namespaces)."""
    for wrapper in (["unshare", "--pid", "--fork", "--mount-proc"],
                    ["unshare", "--user", "--map-root-user", "--pid", "--fork", "--mount-proc"]):
        try:
            if subprocess.run(wrapper + ["true"], capture_output=True, timeout=30).returncode == 0:
                return wrapper
        except FileNotFoundError:
            return None
    return None


def one_pid_in_two_pid_namespaces_has_two_entries_and_exits_alone(tmp):
    """Two containers sharing the live directory each have a process 1: each
    has its own entry, top shows both with their own figures, and the first to
    exit removes its own entry only."""
    wrapper = pid_namespace_wrapper()
    if not wrapper:
        print("SKIP: cannot make pid namespaces here (needs root or unprivileged user namespaces, and unshare)")
        sys.exit(77)
    live = os.path.join(tmp, "live")
    a = Server(tmp, "leaky", 3, "a", env=live_env(live), wrapper=wrapper)
    b = Server(tmp, "leaky", 5, "b", env=live_env(live), wrapper=wrapper)
    try:
        for s in (a, b):
            s.wait_ready()
        marked = time.time()

        def entries():
            """Both entries, once each was written after the servers' marks."""
            names = sorted(n for n in os.listdir(live) if n.endswith(".json")) if os.path.isdir(live) else []
            docs = {}
            for n in names:
                try:
                    with open(os.path.join(live, n)) as f:
                        docs[n] = json.load(f)
                except FileNotFoundError:
                    return None
            return docs if len(docs) == 2 and all(d["live"]["update_time"] > marked for d in docs.values()) else None
        docs = {}
        for n, doc in wait_for("two entries", entries).items():
            assert doc["pid"] == 1 and n == f"1-{doc['live']['pid_namespace'][5:-1]}.json", (n, doc["live"])
            docs[doc["summary"]["live_bytes"]] = n
        assert sorted(docs) == [3 * MIB, 5 * MIB], docs
        # Several updates of each: neither replaces the other's entry.
        for _ in range(5):
            procs, err = top_json(live)
            assert sorted((p["pid"], p["summary"]["reserved_bytes"]) for p in procs) == [(1, 3 * MIB), (1, 5 * MIB)], (
                procs, err)
            time.sleep(0.2)
        a.stop()
        assert a.proc.returncode == 0
        assert not os.path.exists(os.path.join(live, docs[3 * MIB])), "the exited process's entry stayed"
        survivor = os.path.join(live, docs[5 * MIB])
        stopped = time.time()

        def fresh():
            try:
                with open(survivor) as f:
                    doc = json.load(f)
            except FileNotFoundError:
                raise AssertionError("the other namespace's entry was removed")
            return doc if doc["live"]["update_time"] > stopped else None
        assert wait_for("the survivor's next update", fresh)["summary"]["live_bytes"] == 5 * MIB
        procs, _ = top_json(live)
        assert [(p["pid"], p["summary"]["reserved_bytes"]) for p in procs] == [(1, 5 * MIB)], procs
        b.stop()
        assert b.proc.returncode == 0
        assert sorted(os.listdir(live)) == [], os.listdir(live)
    finally:
        a.stop()
        b.stop()


def another_namespaces_silent_entry_is_hidden_then_removed_only_long_after(tmp):
    """An entry of a pid namespace the reader cannot look into is judged by
    its age only: shown while fresh, hidden (and kept: its process may only
    be stalled) once silent for two intervals and a second, removed once
    silent for ten intervals and a minute; a name that is not its content's
    namespace is refused."""
    live = os.path.join(tmp, "live")
    s = Server(tmp, "leaky", 2, env=live_env(live))
    s.wait_ready()
    good = fresh_entry(live, s.pid, time.time())

    def plant(pid, ns, age, named_ns=None):
        doc = json.loads(json.dumps(good))
        doc["pid"] = pid
        doc["live"]["pid_namespace"] = f"pid:[{ns}]"
        doc["live"]["update_time"] = time.time() - age
        path = os.path.join(live, f"{pid}-{named_ns or ns}.json")
        with open(path, "w") as f:
            json.dump(doc, f)
        os.chmod(path, 0o600)
        return path
    fresh = plant(71, 12345, 0.0)
    stalled = plant(72, 12345, 5.0)      # past 2 x 0.2 s + 1 s, within a minute
    gone = plant(73, 12345, 61.0)        # past 10 x 0.2 s and a minute
    mislabelled = plant(74, 12345, 0.0, named_ns=54321)
    procs, err = top_json(live)
    assert sorted(p["pid"] for p in procs) == sorted([s.pid, 71]), (procs, err)
    assert "1 entries refused" in err or "1 entry refused" in err, err
    assert os.path.exists(fresh) and os.path.exists(stalled) and os.path.exists(mislabelled)
    assert not os.path.exists(gone)
    s.stop()


def a_reader_whose_proc_is_another_namespaces_never_removes_a_live_entry(tmp):
    """A reader and a server in one new pid namespace that kept the parent's
    /proc: there the server's pid names another process (or none), so the
    reader must judge it by age, not remove its live file as dead."""
    if not shutil.which("unshare") or subprocess.run(["unshare", "--pid", "--fork", "true"],
                                                     capture_output=True, timeout=30).returncode != 0:
        print("SKIP: cannot make pid namespaces here (needs root and unshare)")
        sys.exit(77)
    live = os.path.join(tmp, "live")
    inner = f"""
import json, os, subprocess, sys, time
sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
import live_test as t
s = t.Server({tmp!r}, "leaky", 2, env=t.live_env({live!r}))
s.wait_ready()
t.wait_for("an entry", lambda: t.entry({live!r}, s.pid))
procs, err = t.top_json({live!r})
kept = os.path.exists(t.entry_path({live!r}, s.pid))
s.stop()
print(json.dumps([os.getpid(), s.pid, [p["pid"] for p in procs], kept, err]))
"""
    r = subprocess.run(["unshare", "--pid", "--fork", sys.executable, "-c", inner], capture_output=True, text=True,
                       timeout=120, env=BASE_ENV)
    assert r.returncode == 0, r.stderr
    me, pid, listed, kept, err = json.loads(r.stdout)
    assert me == 1 and listed == [pid] and kept, (me, pid, listed, kept, err)
    assert os.listdir(live) == [], os.listdir(live)


def an_exit_during_a_live_update_leaves_no_file(tmp):
    """The watcher is inside the rename of an update (held there 1.5 s by
    slow_rename.so) when the program returns from main, and the program's own
    exit handler lets that rename finish before the process is gone: the exit
    leaves neither the file nor its temporary file."""
    live, marks = os.path.join(tmp, "live"), os.path.join(tmp, "marks")
    os.mkdir(marks)
    env = dict(BASE_ENV, **live_env(live, "0.05"), TENSORLEAK_QUIET="1", SLOW_RENAME_DIR=marks,
               TENSORLEAK_OUTPUT=os.path.join(tmp, "r.%p.json"), LD_PRELOAD=os.environ["TL_SLOW_RENAME"])
    r = subprocess.run([CLI, "run", "--sim", "--", os.environ["TL_LIVE_EXIT"], "in-rename", marks],
                       capture_output=True, text=True, timeout=60, env=env, cwd=tmp)
    assert (r.returncode, r.stderr) == (0, ""), r
    assert sorted(os.listdir(marks)) == ["in-rename", "renamed"], os.listdir(marks)
    assert os.listdir(live) == [], os.listdir(live)


def many_processes_exiting_at_once_leave_no_live_file(tmp):
    """Sixty programs updating their live files every 10 ms, all exiting
    within a second on a loaded machine: none leaves its file."""
    live = os.path.join(tmp, "live")
    env = dict(BASE_ENV, **live_env(live, "0.01"), TENSORLEAK_QUIET="1",
               TENSORLEAK_OUTPUT=os.path.join(tmp, "r.%p.json"))
    procs = [subprocess.Popen([CLI, "run", "--sim", "--", os.environ["TL_LIVE_EXIT"], "quick", "500"],
                              stderr=subprocess.PIPE, env=env, cwd=tmp) for _ in range(60)]
    for p in procs:
        err = p.communicate(timeout=120)[1]
        assert (p.returncode, err) == (0, b""), (p.returncode, err)
    assert os.listdir(live) == [], os.listdir(live)


def forked_children_exit_without_waiting_for_anything(tmp):
    """Fifty children forked one after the other, each leaking 1 MiB and
    writing its own report: their exits cost the report and nothing else (no
    wait for a watcher, a live update or the bridge).  The C library's
    compressed separate debug info, where installed, costs each report tens
    of milliseconds of zlib (README): it is hidden here, in a mount
    namespace, to measure tensorleak's own share."""
    debug = "/usr/lib/debug"
    hide = []
    if os.path.isdir(debug):
        if os.geteuid() != 0 or not shutil.which("unshare"):
            print("SKIP: needs root to hide /usr/lib/debug (compressed debug info costs each report its zlib time)")
            sys.exit(77)
        hide = ["unshare", "--mount", "sh", "-c", f"mount -t tmpfs none {debug} && exec \"$@\"", "sh"]
    env = dict(BASE_ENV, **live_env(os.path.join(tmp, "live"), "0.01"), TENSORLEAK_QUIET="1",
               TENSORLEAK_OUTPUT=os.path.join(tmp, "r.%p.json"))
    prog = [os.environ["TL_LIVE_EXIT"], "forks", "50"]
    bare = subprocess.run(prog, capture_output=True, text=True, timeout=120, env=env, cwd=tmp)
    assert (bare.returncode, bare.stderr) == (0, ""), bare
    assert os.listdir(tmp) == [], os.listdir(tmp)
    r = subprocess.run(hide + [CLI, "run", "--sim", "--"] + prog, capture_output=True, text=True, timeout=120, env=env,
                       cwd=tmp)
    assert (r.returncode, r.stderr) == (0, ""), r
    reports = [n for n in os.listdir(tmp) if n.startswith("r.")]
    assert len(reports) == 51, reports
    # About 0.1 s on an idle 2-core machine (1.5 ms a child), 4 s with the
    # debug info visible; a wait at a child's exit of even 50 ms would pass 2.5 s.
    assert float(r.stdout) < 2.0, f"50 forks took {r.stdout.strip()} s, {bare.stdout.strip()} s without tensorleak"


def hostile_entries_are_refused_and_never_mislead_the_reader(tmp):
    live = os.path.join(tmp, "live")
    s = Server(tmp, "leaky", 2, env=live_env(live))
    s.wait_ready()
    good = fresh_entry(live, s.pid, time.time())
    me = os.getpid()  # a live pid of ours for the planted entries

    def plant(name, text, mode=0o600):
        p = os.path.join(live, name)
        with open(p, "w") as f:
            f.write(text)
        os.chmod(p, mode)

    doc = dict(good, pid=me)
    plant(f"{me}.json", json.dumps(doc), 0o644)                       # readable by others
    plant("1.json", json.dumps(good)[:200])                           # truncated
    plant("2.json", json.dumps(dict(good, pid=99)))                    # pid not its name
    plant("3.json", json.dumps({"kind": "live", "pid": 3}))             # no live object
    plant("4.json", "[" * 100000)                                       # deep nesting
    plant("5.json", " " * (5 << 20))                                    # over the size cap
    os.symlink(entry_path(live, s.pid), os.path.join(live, "6.json"))
    hostile = json.loads(json.dumps(good))
    hostile["pid"] = 7
    hostile["live"]["process"] = "\x1b[2J\x1b]0;owned\x07evil"
    hostile["summary"]["reserved_bytes"] = "lots"
    hostile["devices"] = [{"device": 99}, "x", {"device": 0, "reserved_bytes": -5, "free": 1.5}]
    hostile["growth"] = [{"bytes_per_mark": "x"}, 7]
    hostile["live"]["pid_namespace"] = "elsewhere"  # judged by age: fresh enough
    hostile["live"]["update_time"] = time.time() + 3600
    plant("7.json", json.dumps(hostile))
    procs, err = top_json(live)
    pids = sorted(p["pid"] for p in procs)
    assert pids == sorted([s.pid, 7]), (pids, err)
    h = [p for p in procs if p["pid"] == 7][0]
    assert h["live"]["process"] == "?[2J?]0;owned?evil"
    # A figure of the wrong type is unknown (left out), a row without its figures dropped.
    assert "reserved_bytes" not in h["summary"] and h["growth"] == []
    assert h["devices"] == [{"device": 0}], h["devices"]
    assert "7 entries refused" in err, err
    once = subprocess.run([CLI, "top", "--once", "--dir", live], capture_output=True, timeout=60)
    assert once.returncode == 0 and b"\x1b" not in once.stdout
    s.stop()


def top_in_tmux_sorts_selects_follows_resizes_and_quits(tmp):
    import shutil
    if not shutil.which("tmux"):
        print("SKIP: tmux is not installed (Debian: apt-get install tmux)")
        sys.exit(77)
    live = os.path.join(tmp, "live")
    a = Server(tmp, "leaky", 6, "a", env=live_env(live))
    b = Server(tmp, "pool", 6, "b", env=live_env(live))
    a.wait_ready()
    b.wait_ready()
    t = time.time()
    fresh_entry(live, a.pid, t)
    fresh_entry(live, b.pid, t)
    sock = ["tmux", "-S", os.path.join(tmp, "tmux.sock")]
    subprocess.run(sock + ["new-session", "-d", "-x", "80", "-y", "24", f"{CLI} top --dir {live}"], check=True, timeout=30)

    def screen():
        return subprocess.run(sock + ["capture-pane", "-p"], capture_output=True, text=True, timeout=30).stdout

    def rows():
        return [l for l in screen().splitlines() if l.split()[:1] in ([str(a.pid)], [str(b.pid)])]
    try:
        wait_for("both processes on screen", lambda: len(rows()) == 2)
        lines = screen().splitlines()
        assert len(lines) <= 24 and all(len(l) <= 80 for l in lines)
        assert any(l.startswith("GPU 0: total ") for l in lines), lines
        # Sorted by reserved: the pool server (8 MiB) above the leaky one (6 MiB).
        assert [r.split()[0] for r in rows()] == [str(b.pid), str(a.pid)]
        subprocess.run(sock + ["send-keys", "p"], check=True, timeout=30)
        wait_for("sorted by pid", lambda: [r.split()[0] for r in rows()] == sorted([str(a.pid), str(b.pid)], key=int))
        # Select the leaky server and open its details: its growing site.
        keys = ["Up", "Enter"] if a.pid < b.pid else ["Down", "Enter"]
        subprocess.run(sock + ["send-keys"] + keys, check=True, timeout=30)
        wait_for("the leaky server's call site", lambda: "serve_leaky" in screen() and "growing call sites" in screen())
        assert f"{a.pid} live_server: growing" in screen()
        subprocess.run(sock + ["resize-window", "-x", "120", "-y", "30"], check=True, timeout=30)
        wait_for("the wide columns after the resize", lambda: "LARGEST" in screen())
        subprocess.run(sock + ["send-keys", "q"], check=True, timeout=30)
        wait_for("top to quit", lambda: subprocess.run(sock + ["has-session"], capture_output=True).returncode != 0)
    finally:
        subprocess.run(sock + ["kill-server"], capture_output=True, timeout=30)
        a.stop()
        b.stop()


def root_sees_every_users_processes_and_refuses_what_a_user_could_forge(tmp):
    """Root's top (no --dir, no TENSORLEAK_LIVE_DIR) reads every user's
    per-user directory; a directory named for one user but owned by another,
    or a user's entry for a process that is not that user's, is refused."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        print("SKIP: needs root and setpriv (util-linux) to run a server as another user")
        sys.exit(77)
    uid, forged_uid = 65534, 65533
    own, forged = f"/tmp/tensorleak-{uid}", f"/tmp/tensorleak-{forged_uid}"
    for d in (own, forged):
        shutil.rmtree(d, ignore_errors=True)
    os.chmod(tmp, 0o777)  # the other user's report goes here
    env = {k: v for k, v in BASE_ENV.items() if k != "XDG_RUNTIME_DIR"}
    env.update({"TENSORLEAK_LIVE_INTERVAL": "0.2", "TENSORLEAK_OUTPUT": os.path.join(tmp, "o.%p.json"),
                "TENSORLEAK_QUIET": "1", "HOME": tmp})
    ready = os.path.join(tmp, "ready")
    p = subprocess.Popen(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", CLI, "run", "--sim", "--",
                          SERVER, "leaky", "2", os.path.join(tmp, "snap.json"), ready],
                         stdin=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=tmp)
    try:
        wait_for("the other user's server", lambda: os.path.exists(ready) or p.poll() is not None)
        assert p.poll() is None, p.stderr.read().decode()
        wait_for("its live entry", lambda: os.path.exists(entry_path(own, p.pid)))
        st = os.stat(own)
        assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (uid, 0o700), st
        # Forged: a directory named for another user, and, in the user's own
        # directory, an entry for a process of root's (this test's).
        os.mkdir(forged, 0o700)
        shutil.copy(entry_path(own, p.pid), entry_path(forged, p.pid))
        os.chown(forged, uid, uid)
        os.chown(entry_path(forged, p.pid), uid, uid)
        with open(entry_path(own, p.pid)) as f:
            doc = json.load(f)
        doc["pid"] = os.getpid()
        doc["live"]["start_ticks"] = 0
        planted = entry_path(own, os.getpid())
        with open(planted, "w") as f:
            json.dump(doc, f)
        os.chmod(planted, 0o600)
        os.chown(planted, uid, uid)
        root_env = dict(BASE_ENV)
        r = subprocess.run([CLI, "top", "--json"], capture_output=True, text=True, timeout=60, env=root_env)
        assert r.returncode == 0, r.stderr
        rows = json.loads(r.stdout)
        procs = rows["processes"] if isinstance(rows, dict) else rows
        pids = [q["pid"] for q in procs]
        assert pids.count(p.pid) == 1, (p.pid, pids)
        assert os.getpid() not in pids, pids
        # With --dir, only that directory, as for any user.
        r = subprocess.run([CLI, "top", "--json", "--dir", forged], capture_output=True, text=True, timeout=60, env=root_env)
        assert r.returncode == 0, r.stderr
    finally:
        if p.poll() is None:
            p.stdin.close()
            p.wait(timeout=60)
        for d in (own, forged):
            shutil.rmtree(d, ignore_errors=True)


def a_tmp_directory_another_user_made_first_is_bypassed_with_one_warning(tmp):
    """/tmp/tensorleak-UID made first by another user (root here) no longer
    turns the user's live state off: the server publishes in a directory of
    its own beside it (/tmp/tensorleak-UID.XXXXXX), says so once, and the
    user's top and root's find it there."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        print("SKIP: needs root and setpriv (util-linux) to run a server as another user")
        sys.exit(77)
    import glob
    uid = 65532
    squatted = f"/tmp/tensorleak-{uid}"

    def cleanup():
        for d in [squatted] + glob.glob(squatted + ".??????"):
            shutil.rmtree(d, ignore_errors=True)
    cleanup()
    os.mkdir(squatted)
    os.chmod(squatted, 0o755)  # root's, readable: not the user's
    os.chmod(tmp, 0o777)  # the user's report goes here
    env = {k: v for k, v in BASE_ENV.items() if k != "XDG_RUNTIME_DIR"}
    env.update({"TENSORLEAK_LIVE_INTERVAL": "0.2", "TENSORLEAK_OUTPUT": os.path.join(tmp, "o.%p.json"),
                "TENSORLEAK_QUIET": "1", "HOME": tmp})
    as_user = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]
    ready = os.path.join(tmp, "ready")
    p = subprocess.Popen(as_user + [CLI, "run", "--sim", "--", SERVER, "leaky", "2", os.path.join(tmp, "snap.json"),
                                    ready], stdin=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=tmp)
    try:
        wait_for("the user's server", lambda: os.path.exists(ready) or p.poll() is not None)
        assert p.poll() is None, p.stderr.read().decode()
        dirs = wait_for("a directory of the user's own", lambda: glob.glob(squatted + ".??????"))
        assert len(dirs) == 1, dirs
        st = os.stat(dirs[0])
        assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (uid, 0o700), st
        wait_for("its live entry", lambda: os.path.exists(entry_path(dirs[0], p.pid)))
        for who in (as_user, []):
            r = subprocess.run(who + [CLI, "top", "--json"], capture_output=True, text=True, timeout=60, env=env)
            assert r.returncode == 0, (who, r.stderr)
            rows = json.loads(r.stdout)
            procs = rows["processes"] if isinstance(rows, dict) else rows
            assert [q["pid"] for q in procs].count(p.pid) == 1, (who, procs, r.stderr)
        assert os.listdir(squatted) == [] and os.stat(squatted).st_uid == 0
    finally:
        if p.poll() is None:
            p.stdin.close()
            p.wait(timeout=60)
        err = p.stderr.read().decode()
        dirs = glob.glob(squatted + ".??????")
        cleanup()
    assert p.returncode == 0, err
    assert err.splitlines() == [
        f"tensorleak: {squatted} is not this user's to use (owned by another user): the live state goes to {dirs[0]}, "
        f"where tensorleak top and exporter look too; remove {squatted}, or set XDG_RUNTIME_DIR or TENSORLEAK_LIVE_DIR"
    ], err


def run_case(cases):
    """Runs the case named by argv[1] (a function of `cases`) in a fresh directory."""
    case = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        cases[case](tmp)
    print("ok", case)


if __name__ == "__main__":
    run_case(globals())
