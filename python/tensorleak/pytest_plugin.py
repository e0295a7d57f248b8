"""pytest plugin (entry point pytest11): `pytest --tensorleak` makes each test an
epoch and fails a test that leaves device memory allocated.

A test's leak is what its body allocated and still holds once its teardown ran:
the call sites (stacks) whose live bytes rose between the test body's start
(after fixture setup) and the end of its teardown (after a garbage
collection), and that a report then shows as leaked, not held.  The library's
per-site counters (tensorleak_site_bytes) are read at both moments; a report
(tensorleak_snapshot_to, which symbolizes every live stack) is written only
when something rose.  Memory that a cache or library owner holds (the
report's "held": PyTorch's caching allocator, cuBLAS workspaces, annotated
pools, see data/owners.rules) is not a leak; neither is what fixtures set up,
so a module- or session-scoped fixture's buffers are not charged to the first
test that uses them.  A framework's caching allocator (PyTorch, JAX, CuPy,
read by the bridge: bridge.py) keeps its segments as the cache's, so a tensor
the test keeps alive is the rise of that pool's allocated bytes, reported with
the blocks' sites when the framework records them (TENSORLEAK_TORCH_HISTORY=1).

A test run several times (parametrized, or @pytest.mark.repeat) whose held
memory or pool reserve rises at one site in each of its last
GROWTH_REPETITIONS runs is reported as growth and fails.

Allowances: `--tensorleak-limit SIZE` (default 0) for every test,
`@pytest.mark.limit_gpu_leaks("1 MiB")` for one; a leak or growth per run up to
the allowance passes.  Sizes: a number of bytes with an optional unit, K/KB/KiB,
M/MB/MiB, G/GB/GiB (all powers of 1024, as tensorleak's own sizes).

When the library is not loaded (pytest was not started under `tensorleak run`
or LD_PRELOAD), the plugin re-runs pytest with the library preloaded and says
so; `--tensorleak-sim` also puts the simulated CUDA driver and runtime first on
the library path (tests without a GPU).
"""

import ctypes
import gc
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import pytest

import tensorleak

# Runs of one test whose held bytes rise each time before it counts as growth
# (the library's TENSORLEAK_GROWTH_MARKS default).
GROWTH_REPETITIONS = 3

# Set in the environment of the re-run (not TENSORLEAK_*: the library warns
# about names it does not know), so that a library that still does not
# load is an error rather than a loop.
_RERUN_GUARD = "PYTEST_TENSORLEAK_RERUN"

_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
               "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30, "t": 1 << 40, "tb": 1 << 40,
               "tib": 1 << 40}


def parse_size(value):
    """Bytes from 1048576, "1M", "1 MiB", "1.5 GB" (units are powers of 1024);
    ValueError for anything else."""
    if isinstance(value, bool):
        raise ValueError("not a size: %r" % (value,))
    if isinstance(value, int):
        if value < 0:
            raise ValueError("negative size: %r" % (value,))
        return value
    match = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*([A-Za-z]*)\s*", str(value))
    if not match or match.group(2).lower() not in _SIZE_UNITS:
        raise ValueError("not a size: %r (expected bytes with an optional K, M, G or T unit)" % (value,))
    return int(float(match.group(1)) * _SIZE_UNITS[match.group(2).lower()])


def format_size(nbytes):
    """Bytes as tensorleak's reports write them: "512 B", "1.0 MiB"."""
    if nbytes < 1024:
        return "%d B" % nbytes
    value = nbytes / 1024.0
    for unit in ("KiB", "MiB", "GiB"):
        if value < 1024.0:
            return "%.1f %s" % (value, unit)
        value /= 1024.0
    return "%.1f TiB" % value


def pytest_addoption(parser):
    group = parser.getgroup("tensorleak", "GPU memory leaks (tensorleak)")
    group.addoption("--tensorleak", action="store_true", default=False,
                    help="fail tests that leave device memory allocated (re-runs pytest under the "
                         "tensorleak preload when it is not loaded)")
    group.addoption("--tensorleak-limit", metavar="SIZE", default="0",
                    help="device memory a test may leave allocated (default 0); per test: "
                         "@pytest.mark.limit_gpu_leaks(SIZE)")
    group.addoption("--tensorleak-report", metavar="DIR", default=None,
                    help="keep the report (JSON and text) of each leaking test in DIR")
    group.addoption("--tensorleak-sim", action="store_true", default=False,
                    help="run on tensorleak's simulated CUDA driver and runtime (no GPU needed)")


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "limit_gpu_leaks(size): device memory this test may leave allocated under --tensorleak "
        "(e.g. \"1 MiB\")")
    if not config.getoption("tensorleak"):
        return
    try:
        limit = parse_size(config.getoption("tensorleak_limit"))
    except ValueError as err:
        raise pytest.UsageError("--tensorleak-limit: %s" % err)
    sim = config.getoption("tensorleak_sim")
    if not tensorleak.loaded() or (sim and not _sim_on_library_path()):
        _rerun_under_preload(config, sim)
    config.pluginmanager.register(LeakGate(config, limit), "tensorleak-gate")


def _sim_on_library_path():
    sim = tensorleak.sim_dir()
    return sim is not None and sim in os.environ.get("LD_LIBRARY_PATH", "").split(":")


def _prepend(variable, item, sep):
    old = os.environ.get(variable, "")
    parts = [p for p in re.split("[%s]" % re.escape(sep), old) if p]
    return sep[0].join([item] + [p for p in parts if p != item])


def _rerun_under_preload(config, sim):
    """Re-runs this pytest command with the library preloaded (and the
    simulated CUDA stack first on the library path for --tensorleak-sim): in
    place (execve) when pytest runs from the command line, as a child whose
    status becomes this session's otherwise.  Does not return."""
    library = tensorleak.library_path()
    if os.environ.get(_RERUN_GUARD) and not tensorleak.loaded():
        raise pytest.UsageError(
            "--tensorleak: libtensorleak.so is still not loaded after re-running pytest with "
            "LD_PRELOAD=%s (is it the library of this platform?)" % os.environ.get("LD_PRELOAD", ""))
    if os.environ.get(_RERUN_GUARD):
        raise pytest.UsageError("--tensorleak-sim: the simulated CUDA stack is still not first on "
                                "LD_LIBRARY_PATH after re-running pytest")
    if not library:
        raise pytest.UsageError(
            "--tensorleak: libtensorleak.so is not loaded and this tensorleak package has no copy of it "
            "(install tensorleak with pip, run pytest under `tensorleak run`, or set TENSORLEAK_LIBRARY)")
    env = dict(os.environ)
    if not tensorleak.loaded():
        if re.search(r"[:\s]", library):
            raise pytest.UsageError("--tensorleak: the library path %r holds ':' or a blank, which "
                                    "LD_PRELOAD cannot hold; run pytest under `tensorleak run`" % library)
        env["LD_PRELOAD"] = _prepend("LD_PRELOAD", library, ": ")
    what = "libtensorleak.so preloaded (LD_PRELOAD=%s)" % library
    if sim:
        sim_dir = tensorleak.sim_dir()
        if not sim_dir:
            raise pytest.UsageError("--tensorleak-sim: the simulated CUDA stack is not installed with this "
                                    "tensorleak package")
        env["LD_LIBRARY_PATH"] = _prepend("LD_LIBRARY_PATH", sim_dir, ":")
        what += " on the simulated CUDA stack (%s)" % sim_dir
    # The re-run's own reports: per test, not the library's stderr summary of
    # everything still alive when pytest exits (unless asked for).
    env.setdefault("TENSORLEAK_QUIET", "1")
    # As under `tensorleak run`: the framework bridge reports PyTorch's, JAX's
    # and CuPy's pools.
    env.setdefault("TENSORLEAK_PYTHON", "1")
    report_dir = config.getoption("tensorleak_report")
    if report_dir and "TENSORLEAK_OUTPUT" not in env:
        env["TENSORLEAK_OUTPUT"] = os.path.join(os.path.abspath(report_dir), "tensorleak.%p.json")
    env[_RERUN_GUARD] = "1"

    args = [sys.executable, "-m", "pytest"] + list(config.invocation_params.args)
    # Output captured by pytest so far goes to temporary files: the re-run
    # writes to the real stdout and stderr.
    capture = config.pluginmanager.getplugin("capturemanager")
    if capture is not None:
        capture.stop_global_capturing()
    sys.stderr.write("tensorleak: re-running pytest with %s\n" % what)
    sys.stdout.flush()
    sys.stderr.flush()
    if list(config.invocation_params.args) == sys.argv[1:]:
        # The command as typed (`pytest ...` or `python -m pytest ...`, with
        # the interpreter's own options), so that sys.path is the same.
        orig = getattr(sys, "orig_argv", None)
        os.chdir(str(config.invocation_params.dir))
        os.execve(sys.executable, [sys.executable] + list(orig[1:]) if orig else args, env)
    # pytest.main() from a program: do not replace that program.
    status = subprocess.call(args, env=env, cwd=str(config.invocation_params.dir))
    pytest.exit("tensorleak: the re-run under the preload exited with %d" % status, returncode=status)


def format_stack(stack, indent="    ", end=None):
    """A report stack as the library's text report prints it, up to frame
    index `end` (the test's own frame: what lies beyond is pytest running
    the test), then "..."."""
    lines = []
    stack = stack or ()
    for i, f in enumerate(stack):
        if end is not None and i > end:
            lines.append("%s..." % indent)
            break
        function = f.get("function") or "??"
        if f.get("python"):
            lines.append("%s#%d in %s %s:%d [python]" % (indent, i, function, f.get("file") or "??",
                                                        f.get("line") or 0))
            continue
        text = "%s#%d %s in %s" % (indent, i, f.get("address") or "??", function)
        if f.get("file"):
            text += " %s:%d" % (f["file"], f["line"]) if f.get("line") else " %s" % f["file"]
        if f.get("module"):
            text += " (%s+%s)" % (os.path.basename(f["module"]), f.get("offset") or "0x0")
        lines.append(text)
    if not lines:
        lines.append(indent + "(no stack: TENSORLEAK_DEPTH=0)")
    return lines


def _same_file(a, b):
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


def own_frame_index(stack, test_path, test_function):
    """Index in `stack` of the test's own frame: the Python frame of the test
    function in the test's file, else the innermost frame in that file (a
    helper defined there), else None (no Python frames in stacks, or the
    allocation was made elsewhere)."""
    in_file = [i for i, f in enumerate(stack or ())
               if f.get("python") and f.get("file") and _same_file(f["file"], test_path)]
    for i in in_file:
        if stack[i].get("function") == test_function:
            return i
    return in_file[0] if in_file else None


class _Finding:
    """What one test left behind: leaked sites and growing ones."""

    def __init__(self, item, allowance):
        self.item = item
        self.allowance = allowance
        self.leaks = []       # (bytes, count, site) not freed by the test
        self.pool_leaks = []  # (bytes, pool row, [(bytes, count, site)]) a framework's pool still hands out
        self.growth = []      # (bytes per run, runs, site or None, pool name or None)

    @property
    def leaked_bytes(self):
        return sum(b for b, _, _ in self.leaks) + sum(b for b, _, _ in self.pool_leaks)

    def leak_failed(self):
        return self.leaked_bytes > self.allowance

    def growth_failed(self):
        return any(per_run > self.allowance for per_run, _, _, _ in self.growth)

    def headline(self):
        parts = []
        if self.leak_failed() and self.leaks:
            count = sum(c for _, c, _ in self.leaks)
            parts.append("leaked %s in %d allocation(s)" % (format_size(sum(b for b, _, _ in self.leaks)), count))
        if self.leak_failed():
            for nbytes, pool, _ in self.pool_leaks:
                parts.append("left %s allocated in pool '%s'" % (format_size(nbytes), pool.get("name")))
        if self.growth_failed():
            per_run = max(g for g, _, _, _ in self.growth)
            parts.append("grew %s per run" % format_size(per_run))
        where = self.where()
        return "%s%s" % (", ".join(parts), " at %s:%d" % (where[1], where[2]) if where else "")

    def own_frame(self, stack):
        return own_frame_index(stack, str(self.item.path),
                                getattr(self.item, "originalname", None) or self.item.name)

    def where(self):
        """(function, file, line) of the test's own frame in the first leak or
        growth whose stack has one, or None."""
        stacks = [site.get("stack") for _, _, site in self.leaks]
        stacks += [site.get("stack") for _, _, sites in self.pool_leaks for _, _, site in sites]
        stacks += [site.get("stack") for _, _, site, _ in self.growth if site]
        for stack in stacks:
            i = self.own_frame(stack)
            if i is not None:
                return stack[i].get("function"), stack[i]["file"], stack[i].get("line") or 0
        return None

    def text(self):
        # The first line is what pytest's short summary shows.
        lines = ["tensorleak: %s (allowance %s)" % (self.headline(), format_size(self.allowance))]
        if self.leak_failed():
            for nbytes, count, site in self.leaks:
                lines.append("Leak of %s in %d allocation(s) [%s] allocated from:" % (
                    format_size(nbytes), count, site.get("kind")))
                lines.extend(format_stack(site.get("stack"), end=self.own_frame(site.get("stack"))))
            for nbytes, pool, sites in self.pool_leaks:
                lines.append("Leak of %s in pool '%s' [%s]: allocated by the framework during the test and still "
                             "in use (what the test keeps alive; the pool's segments are the cache's)" % (
                                 format_size(nbytes), pool.get("name"), pool.get("kind")))
                for site_bytes, count, site in sites:
                    lines.append("  %s in %d block(s) allocated from:" % (format_size(site_bytes), count))
                    lines.extend(format_stack(site.get("stack"), indent="      ",
                                              end=self.own_frame(site.get("stack"))))
        if self.growth_failed():
            for per_run, runs, site, pool in self.growth:
                if pool is not None:
                    lines.append("Growth of %s per run over %d runs: pool '%s' reserved" % (
                        format_size(per_run), runs, pool))
                    continue
                lines.append("Growth of %s per run over %d runs [%s] held by %s, allocated from:" % (
                    format_size(per_run), runs, site.get("kind"), site.get("owner") or "?"))
                lines.extend(format_stack(site.get("stack"), end=self.own_frame(site.get("stack"))))
        return "\n".join(lines)


class _Series:
    """Held bytes per site and pool reserve at the end of each run of one test
    (its parametrized variants and repetitions): the growth check's input."""

    def __init__(self, baseline):
        self.values = [baseline]   # {key: bytes}, the first before the first run

    def add(self, values):
        self.values.append(values)

    def growing(self, runs):
        """(bytes per run, key) of each key that rose in each of the last
        `runs` runs."""
        if len(self.values) < runs + 1:
            return []
        window = self.values[-(runs + 1):]
        found = []
        for key in window[-1]:
            series = [v.get(key, 0) for v in window]
            if all(b > a for a, b in zip(series, series[1:])):
                found.append(((series[-1] - series[0]) // runs, key))
        return found


class _State:
    """What the plugin reads at a test's start and end without writing a
    report: live bytes and allocations per call site (the library's counters,
    tensorleak_site_bytes) and the framework pools as the bridge reads them
    (PyTorch, JAX, CuPy: figures, and the live blocks' sites when the
    framework records them)."""

    def __init__(self, sites, pools):
        self.sites = sites  # {site id: (bytes, count)}
        self.pools = pools  # {(name, device): pool row}

    def growth_values(self):
        """{key: bytes} per call site and framework pool reserve."""
        values = {("site", i): b for i, (b, _) in self.sites.items()}
        for key, pool in self.pools.items():
            values[("pool",) + key] = pool.get("reserved_bytes") or 0
        return values


class _SiteCounters:
    """tensorleak_site_bytes through ctypes, with a buffer that grows."""

    def __init__(self, lib):
        self.fn = getattr(lib, "tensorleak_site_bytes", None) if lib is not None else None
        if self.fn is not None:
            self.fn.restype = ctypes.c_long
            self.fn.argtypes = (ctypes.POINTER(ctypes.c_uint64), ctypes.c_long)
        self.rows = 1024
        self.buf = (ctypes.c_uint64 * (3 * self.rows))()

    def read(self):
        """{site id: (live bytes, live allocations)}, or None when not tracking."""
        while True:
            n = self.fn(self.buf, self.rows)
            if n < 0:
                return None
            if n <= self.rows:
                b = self.buf
                return {b[3 * i]: (b[3 * i + 1], b[3 * i + 2]) for i in range(n)}
            self.rows = n + n // 2
            self.buf = (ctypes.c_uint64 * (3 * self.rows))()


def _framework_pools():
    """{(name, device): pool} from the bridge's reading of the frameworks this
    program imported; {} without any (or without the bridge)."""
    bridge = sys.modules.get("tensorleak.bridge")
    if bridge is None or not any(name in sys.modules for name in ("torch", "jax", "cupy", "rmm")):
        return {}
    try:
        state = bridge.read_state(full=False)
    except Exception:
        return {}
    return {(p.get("name"), p.get("device")): p for p in state.get("pools") or ()}


def _pool_site_key(site):
    return tuple((f.get("function"), f.get("file"), f.get("line")) for f in site.get("frames") or ())


def _silenced_stderr(call):
    """call() with file descriptor 2 on /dev/null: the library prints one line
    per snapshot ("tensorleak: snapshot ...: report: PATH") unless
    TENSORLEAK_QUIET, two per test here; the plugin reads the file and reports
    a failed snapshot itself.  Output of other threads in that moment is lost
    with it; without a /dev/null the line stays."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):
        return call()
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
    except OSError:
        os.close(saved)
        return call()
    try:
        os.dup2(devnull, 2)
        return call()
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def _safe_name(nodeid):
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid).strip("_")[:180] or "test"


class LeakGate:
    """The per-test leak check of one session (registered by pytest_configure
    when --tensorleak is given and the library is loaded).

    A test costs two readings of the call sites' counters (microseconds); a
    report (a snapshot, which symbolizes every live stack) is written only
    when a site or a framework pool rose during the test, to tell leaked from
    held and to give the stacks."""

    def __init__(self, config, limit):
        self.config = config
        self.limit = limit
        self.report_dir = config.getoption("tensorleak_report")
        self.scratch = tempfile.mkdtemp(prefix="tensorleak-pytest-")
        self.counters = _SiteCounters(tensorleak._lib())
        if self.counters.fn is None or not hasattr(tensorleak._lib(), "tensorleak_snapshot_to"):
            raise pytest.UsageError("--tensorleak: the loaded libtensorleak.so is older than this plugin "
                                    "(no tensorleak_site_bytes / tensorleak_snapshot_to)")
        self.checked = 0
        self.snapshots = 0
        self.start = None
        self.series = {}
        self.findings = []
        self.snapshot_failed = False

    def _state(self):
        sites = self.counters.read()
        return None if sites is None else _State(sites, _framework_pools())

    def _snapshot(self, label):
        self.snapshots += 1
        path = os.path.join(self.scratch, "%d.json" % self.snapshots)
        if _silenced_stderr(lambda: tensorleak.snapshot_to(path, label)) != 0:
            self.snapshot_failed = True
            return None
        try:
            with open(path) as f:
                return json.load(f)
        except (OSError, ValueError):
            self.snapshot_failed = True
            return None
        finally:
            try:
                os.unlink(path)
            except OSError:
                pass

    def _allowance(self, item):
        marker = item.get_closest_marker("limit_gpu_leaks")
        if marker is None:
            return self.limit
        value = marker.args[0] if marker.args else marker.kwargs.get("size")
        return parse_size(value)  # ValueError: the test fails, saying so

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_call(self, item):
        # After fixture setup, right before the test body.
        self.start = self._state()

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item, nextitem):
        # pytest's own protocol with the reports held back until the memory
        # left after teardown is known, so that a leak fails the test's call
        # report (a failure, not an error in teardown).
        from _pytest.runner import runtestprotocol
        item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        self.start = None
        reports = runtestprotocol(item, nextitem=nextitem, log=False)
        self._check(item, reports)
        for report in reports:
            item.ihook.pytest_runtest_logreport(report=report)
        item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
        return True

    @staticmethod
    def _rose(start, end):
        """Whether any call site's live bytes or framework pool's allocated
        or reserved bytes are higher at `end` than at `start`."""
        if any(b > start.sites.get(i, (0, 0))[0] for i, (b, _) in end.sites.items()):
            return True
        for key, pool in end.pools.items():
            old = start.pools.get(key, {})
            for figure in ("allocated_bytes", "reserved_bytes"):
                if (pool.get(figure) or 0) > (old.get(figure) or 0):
                    return True
        return False

    def _check(self, item, reports):
        start, self.start = self.start, None
        call = next((r for r in reports if r.when == "call"), None)
        if start is None or call is None:
            return
        end = self._state()
        if end is not None and self._rose(start, end):
            # Garbage only lowers the counters, so a full collection (tens
            # of milliseconds in a large pytest process) is worth it only
            # when something rose: then it must not count as kept.
            gc.collect()
            end = self._state()
        if end is None:
            return
        self.checked += 1
        try:
            allowance = self._allowance(item)
        except ValueError as err:
            if call.passed:
                call.outcome, call.longrepr = "failed", "tensorleak: limit_gpu_leaks: %s" % err
            return
        finding = _Finding(item, allowance)

        # Call sites whose live bytes rose during the test.
        rose = {}
        for site_id, (nbytes, count) in end.sites.items():
            old_bytes, old_count = start.sites.get(site_id, (0, 0))
            if nbytes > old_bytes:
                rose[site_id] = (nbytes - old_bytes, max(count - old_count, 0))

        # Framework pools (the bridge's PyTorch, JAX, CuPy rows): their
        # segments are held by the cache, so a tensor the test keeps shows
        # only as the pool's allocated bytes (and its blocks' sites, when the
        # framework records them).
        for key, pool in end.pools.items():
            old = start.pools.get(key, {})
            grown = (pool.get("allocated_bytes") or 0) - (old.get("allocated_bytes") or 0)
            if grown <= 0:
                continue
            old_sites = {_pool_site_key(x): x for x in old.get("sites") or ()}
            sites = []
            for site in pool.get("sites") or ():
                before = old_sites.get(_pool_site_key(site), {})
                more = site.get("bytes", 0) - before.get("bytes", 0)
                if more > 0:
                    sites.append((more, max(site.get("count", 0) - before.get("count", 0), 0),
                                  {"stack": site.get("frames") or []}))
            finding.pool_leaks.append((grown, pool, sorted(sites, key=lambda x: -x[0])))

        group = item.nodeid.split("[", 1)[0]
        series = self.series.get(group)
        if series is None:
            series = self.series[group] = _Series(start.growth_values())
        series.add(end.growth_values())
        growing = series.growing(GROWTH_REPETITIONS)

        if not rose and not finding.pool_leaks and not growing:
            return
        report = None
        if rose or growing:
            # Leaked or held, and the stacks: from one report.
            report = self._snapshot("end " + item.nodeid)
            if report is None:
                return
        leaks = {s.get("site"): s for s in report.get("leaks") or ()} if report else {}
        held = {s.get("site"): s for s in report.get("held") or ()} if report else {}
        for site_id, (nbytes, count) in rose.items():
            site = leaks.get(site_id)
            if site is None or site.get("suppressed"):
                continue  # held by an owner or pool, or suppressed
            finding.leaks.append((min(nbytes, site.get("bytes", 0)), min(count, site.get("count", 0)), site))
        finding.leaks.sort(key=lambda leak: -leak[0])
        for per_run, key in growing:
            if key[0] == "pool":
                finding.growth.append((per_run, GROWTH_REPETITIONS, None, key[1]))
            elif key[1] in held:  # a site that leaks is reported as a leak already
                finding.growth.append((per_run, GROWTH_REPETITIONS, held[key[1]], None))

        if not (finding.leak_failed() or finding.growth_failed()):
            return
        if not call.passed or hasattr(call, "wasxfail"):
            return  # already failed, skipped or expected to fail: its own outcome stands
        call.outcome = "failed"
        call.longrepr = finding.text()
        self.findings.append(finding)
        if self.report_dir:
            self._keep(finding, report or self._snapshot("end " + item.nodeid) or {})

    def _keep(self, finding, end):
        """Writes the test's report to --tensorleak-report DIR: the end
        snapshot with only this test's leaks (readable by `tensorleak report`),
        and the failure text."""
        os.makedirs(self.report_dir, exist_ok=True)
        base = os.path.join(self.report_dir, _safe_name(finding.item.nodeid))
        report = dict(end)
        report["label"] = finding.item.nodeid
        report["leaks"] = [dict(site, bytes=b, count=c) for b, c, site in finding.leaks]
        summary = dict(report.get("summary") or {})
        summary["leaked_bytes"] = finding.leaked_bytes
        summary["leaked_allocations"] = sum(c for _, c, _ in finding.leaks)
        report["summary"] = summary
        report["pytest"] = {"nodeid": finding.item.nodeid, "allowance": finding.allowance,
                            "growth": [{"bytes_per_run": g, "runs": n, "pool": pool,
                                        "stack": site.get("stack") if site else None}
                                       for g, n, site, pool in finding.growth]}
        with open(base + ".json", "w") as f:
            json.dump(report, f, indent=1)
            f.write("\n")
        with open(base + ".txt", "w") as f:
            f.write(finding.text() + "\n")

    def pytest_terminal_summary(self, terminalreporter):
        tr = terminalreporter
        checked = "tensorleak: %d test(s) checked, %d report(s) written to tell leaked from held" % (
            self.checked, self.snapshots)
        if self.findings:
            tr.section("tensorleak: %d test(s) left device memory allocated" % len(self.findings), red=True)
            for finding in self.findings:
                tr.write_line("%s: %s" % (finding.item.nodeid, finding.headline()))
            if self.report_dir:
                tr.write_line("reports: %s" % os.path.abspath(self.report_dir))
        tr.write_line(checked)
        if self.snapshot_failed:
            tr.write_line("tensorleak: a report could not be written or read; the tests around it were not checked",
                          yellow=True)

    def pytest_unconfigure(self, config):
        shutil.rmtree(self.scratch, ignore_errors=True)
