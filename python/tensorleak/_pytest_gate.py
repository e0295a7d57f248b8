"""The per-test leak check of a `pytest --tensorleak` session: what a test
left behind (leaks, framework pool blocks, growth across its runs) and the
verdict on its reports, through pytest's public runtest hooks:

- pytest_runtest_call (tryfirst): the reading at the test body's start,
  after fixture setup;
- pytest_runtest_teardown (hookwrapper): the reading after every fixture's
  teardown, and the finding;
- pytest_runtest_makereport (hookwrapper): the verdict, on the teardown's
  report, onto the call report while that one is still unlogged (a test
  failure), else onto the teardown report (an error at teardown).

A protocol that holds the reports until teardown is over (log=False) leaves
the call report unlogged: pytest-rerunfailures' does, so a leak there is a
failure that it reruns like any other; pytest's default protocol logs each
report as its phase ends, so this plugin runs the protocol itself for the
items no other plugin takes (pytest_runtest_protocol, below).
"""

import gc
import os
import shutil
import tempfile

import pytest

import tensorleak
from tensorleak import _growth_rule, _pytest_readings, _pytest_render
from tensorleak._pytest_readings import pool_site_key


class Finding:
    """What one test left behind: leaked sites, framework pool blocks still
    handed out, and growing sites or pool reserves."""

    def __init__(self, item, allowance):
        self.item = item
        self.allowance = allowance
        self.leaks = []       # (bytes, count, site) not freed by the test
        self.pool_leaks = []  # (bytes, pool row, [(bytes, count, site)]) a framework's pool still hands out
        self.growth = []      # (bytes per run, runs, held site or None, pool name or None)
        self.snapshot = None  # the report written at the end of the test, when one was

    @property
    def leaked_bytes(self):
        return sum(b for b, _, _ in self.leaks) + sum(b for b, _, _ in self.pool_leaks)

    def leak_failed(self):
        return self.leaked_bytes > self.allowance

    def growth_failed(self):
        return any(per_run > self.allowance for per_run, _, _, _ in self.growth)

    def failed(self):
        return self.leak_failed() or self.growth_failed()


class _RunSeries:
    """Held bytes per call site and reserve per framework pool after each run
    of one test (its parametrized variants and repetitions), each under the
    library's rule for it: a call site's streak, a pool reserve's records
    (tensorleak/_growth_rule.py).  Observation 0 is the first run's start."""

    def __init__(self, start):
        self.runs = 0
        self.sites = {site_id: _growth_rule.CallSiteStreak(nbytes) for site_id, (nbytes, _) in start.sites.items()}
        self.pools = {}
        self._observe_pools(start)

    def _observe_pools(self, state):
        for key, reserved in state.pool_reserves().items():
            self.pools.setdefault(key, _growth_rule.RecordSeries()).observe(self.runs, reserved)

    def add_run(self, end):
        self.runs += 1
        for site_id in set(self.sites) | set(end.sites):
            streak = self.sites.setdefault(site_id, _growth_rule.CallSiteStreak())
            streak.observe(end.sites.get(site_id, (0, 0))[0])
        self._observe_pools(end)

    def growing(self, k):
        """[(Verdict, site id or None, pool key or None)] of what grows now."""
        found = [(v, site_id, None) for site_id, streak in self.sites.items()
                 for v in [streak.growing(k)] if v is not None]
        found += [(v, None, key) for key, series in self.pools.items()
                  for v in [series.growing(self.runs, k)] if v is not None]
        return found


def _rerun_plugin_runs(item):
    """Whether pytest-rerunfailures runs this item's protocol (it does for
    the items it may rerun); its protocol holds the reports, as this
    plugin's does."""
    plugin = item.config.pluginmanager.get_plugin("rerunfailures")
    try:
        return plugin is not None and plugin.get_reruns_count(item) is not None
    except Exception:
        return False


class LeakGate:
    """The leak check of one session (registered by pytest_configure when
    --tensorleak is given and the library is loaded).

    A test costs two readings of the call sites' counters (microseconds); a
    report is written only when a site or a framework pool rose during the
    test."""

    def __init__(self, config, limit):
        self.config = config
        self.limit = limit
        self.growth_marks = _growth_rule.growth_marks()
        self.report_dir = config.getoption("tensorleak_report")
        self.scratch = tempfile.mkdtemp(prefix="tensorleak-pytest-")
        self.counters = _pytest_readings.SiteCounters(tensorleak._lib())
        if self.counters.fn is None or not hasattr(tensorleak._lib(), "tensorleak_snapshot_to"):
            raise pytest.UsageError("--tensorleak: the loaded libtensorleak.so is older than this plugin "
                                    "(no tensorleak_site_bytes / tensorleak_snapshot_to)")
        self.checked = 0
        self.snapshots = 0
        self.snapshot_failed = False
        self.started = {}       # nodeid: State at the test body's start
        self.findings_of = {}   # nodeid: Finding (or an error text) of the test whose teardown just ran
        self.call_reports = {}  # nodeid: its call report, until its teardown's report is made
        self.logged = set()     # id() of the call reports logged so far
        self.failing = {}       # id() of a report this gate failed: its Finding, counted once logged as failed
        self.series = {}
        self.findings = []

    def _state(self):
        sites = self.counters.read()
        return None if sites is None else _pytest_readings.State(sites, _pytest_readings.framework_pools())

    def _snapshot(self, label):
        self.snapshots += 1
        report = _pytest_readings.snapshot(os.path.join(self.scratch, "%d.json" % self.snapshots), label)
        if report is None:
            self.snapshot_failed = True
        return report

    def _allowance(self, item):
        marker = item.get_closest_marker("limit_gpu_leaks")
        if marker is None:
            return self.limit
        value = marker.args[0] if marker.args else marker.kwargs.get("size")
        return tensorleak.parse_size(value)  # ValueError: the test fails, saying so

    # ---- the hooks ------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item, nextitem):
        if _rerun_plugin_runs(item):
            return None
        # pytest's own protocol with the reports held back (log=False) until
        # the memory left after teardown is known, so that a leak fails the
        # call report: a test failure, not an error in teardown.  pytest has
        # no public way to run its protocol without logging each report as
        # its phase ends; runtestprotocol is the function its own runner and
        # pytest-rerunfailures use for that.
        from _pytest.runner import runtestprotocol
        item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        reports = runtestprotocol(item, nextitem=nextitem, log=False)
        for report in reports:
            item.ihook.pytest_runtest_logreport(report=report)
        item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
        return True

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_call(self, item):
        state = self._state()
        if state is not None:
            self.started[item.nodeid] = state

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_teardown(self, item, nextitem):
        yield
        start = self.started.pop(item.nodeid, None)
        if start is not None:
            self.findings_of[item.nodeid] = self._check(item, start)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        report = outcome.get_result()
        if report.when == "call":
            self.call_reports[item.nodeid] = report
        elif report.when == "teardown":
            self._judge(item, self.call_reports.pop(item.nodeid, None), report)

    def pytest_runtest_logreport(self, report):
        if report.when == "call":
            self.logged.add(id(report))
        # Counted when logged as failed, not as a pytest-rerunfailures "rerun".
        finding = self.failing.pop(id(report), None)
        if finding is not None and report.failed:
            self.findings.append(finding)

    def pytest_runtest_logfinish(self, nodeid, location):
        self.logged.clear()
        self.failing.clear()

    # ---- the check ------------------------------------------------------

    def _judge(self, item, call, teardown):
        """Puts the finding of the test whose teardown report this is on its
        call report (still unlogged) or its teardown report.  A test that
        failed, was skipped or is expected to fail keeps its own outcome."""
        finding = self.findings_of.pop(item.nodeid, None)
        if finding is None or call is None or not call.passed or hasattr(call, "wasxfail"):
            return
        if isinstance(finding, str):
            text = finding
        else:
            if not finding.failed():
                return
            text = self._failure_text(finding)
        target = teardown if id(call) in self.logged else call
        if target.passed:
            target.outcome, target.longrepr = "failed", text
            if not isinstance(finding, str):
                self.failing[id(target)] = finding

    def _failure_text(self, finding):
        end = finding.snapshot if finding.snapshot is not None else self._snapshot("end " + finding.item.nodeid)
        report = _pytest_render.test_report(finding, end or {})
        if self.report_dir:
            return _pytest_render.keep(finding, report, self.report_dir)
        path = os.path.join(self.scratch, "failure.json")
        try:
            _pytest_render.write_report(report, path)
            return _pytest_render.failure_text(finding, path)
        finally:
            try:
                os.unlink(path)
            except OSError:
                pass

    def _check(self, item, start):
        """The Finding of `item`, whose teardown just ran, from its reading
        at the body's start; None when nothing could be read, a text when
        its limit_gpu_leaks marker does not parse."""
        end = self._state()
        if end is not None and end.rose_since(start):
            # Garbage only lowers the counters, so a full collection (tens
            # of milliseconds in a large pytest process) is worth it only
            # when something rose: then it must not count as kept.
            gc.collect()
            end = self._state()
        if end is None:
            return None
        self.checked += 1
        try:
            allowance = self._allowance(item)
        except ValueError as err:
            return "tensorleak: limit_gpu_leaks: %s" % err
        finding = Finding(item, allowance)

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
            old_sites = {pool_site_key(x): x for x in old.get("sites") or ()}
            sites = []
            for site in pool.get("sites") or ():
                before = old_sites.get(pool_site_key(site), {})
                more = site.get("bytes", 0) - before.get("bytes", 0)
                if more > 0:
                    sites.append((more, max(site.get("count", 0) - before.get("count", 0), 0),
                                  {"stack": site.get("frames") or []}))
            finding.pool_leaks.append((grown, pool, sorted(sites, key=lambda x: -x[0])))

        group = item.nodeid.split("[", 1)[0]
        series = self.series.get(group)
        if series is None:
            series = self.series[group] = _RunSeries(start)
        series.add_run(end)
        growing = series.growing(self.growth_marks)

        if not rose and not growing:
            return finding
        # Leaked or held, and the stacks: from one report.
        report = finding.snapshot = self._snapshot("end " + item.nodeid)
        if report is None:
            return None
        leaks = {s.get("site"): s for s in report.get("leaks") or ()}
        held = {s.get("site"): s for s in report.get("held") or ()}
        for site_id, (nbytes, count) in rose.items():
            site = leaks.get(site_id)
            if site is None or site.get("suppressed"):
                continue  # held by an owner or pool, or suppressed
            # bytes null: some of the site's allocations have a size the
            # driver did not report; the live count that rose is what is known.
            known = site.get("bytes", 0)
            finding.leaks.append((nbytes if known is None else min(nbytes, known), min(count, site.get("count", 0)),
                                  site))
        finding.leaks.sort(key=lambda leak: -leak[0])
        for verdict, site_id, pool in growing:
            if pool is not None:
                finding.growth.append((verdict.bytes_per_mark, verdict.marks, None, pool[0]))
            elif site_id in held:  # a site that leaks is reported as a leak already
                finding.growth.append((verdict.bytes_per_mark, verdict.marks, held[site_id], None))
        return finding

    def pytest_terminal_summary(self, terminalreporter):
        tr = terminalreporter
        if self.findings:
            tr.section("tensorleak: %d test(s) left device memory allocated" % len(self.findings), red=True)
            for finding in self.findings:
                tr.write_line("%s: %s" % (finding.item.nodeid, _pytest_render.headline(finding)))
            if self.report_dir:
                tr.write_line("reports: %s" % os.path.abspath(self.report_dir))
        tr.write_line("tensorleak: %d test(s) checked, %d report(s) written to tell leaked from held" % (
            self.checked, self.snapshots))
        if self.snapshot_failed:
            tr.write_line("tensorleak: a report could not be written or read; the tests around it were not checked",
                          yellow=True)

    def pytest_unconfigure(self, config):
        shutil.rmtree(self.scratch, ignore_errors=True)
