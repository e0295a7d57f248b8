"""What a failing test says, and the report it leaves: the failure's first
line (what pytest's short summary shows: the test's bytes and its own line),
a line per leak, growth and framework pool block the test keeps, then the
test's report as the CLI's text renderer prints it (`tensorleak report FILE
--format text`).

The test's report is the report written at the end of the test with only
what the test left behind: its leaks (bytes and counts of the test, not of
the session), its growth as growth rows (a mark is one run of the test), and
the stacks of both cut at the test's own frame (what lies beyond is pytest
running the test).  When the CLI cannot be found or fails, the failure says
so in one line instead of the report's text: a failure text is never what
breaks a test run.
"""

import json
import os
import re
import shutil
import subprocess

import tensorleak
from tensorleak import format_size


def _same_file(a, b):
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


def own_frame_index(stack, test_path, test_function):
    """Index in `stack` of the test's own frame: the Python frame of the test
    function in the test's file, else the innermost frame in that file (a
    function defined there), else None (no Python frames in stacks, or the
    allocation was made elsewhere)."""
    in_file = [i for i, f in enumerate(stack or ())
               if f.get("python") and f.get("file") and _same_file(f["file"], test_path)]
    for i in in_file:
        if stack[i].get("function") == test_function:
            return i
    return in_file[0] if in_file else None


def _own_frame(finding, stack):
    return own_frame_index(stack, str(finding.item.path),
                           getattr(finding.item, "originalname", None) or finding.item.name)


def _stacks(finding):
    stacks = [site.get("stack") for _, _, site in finding.leaks]
    stacks += [site.get("stack") for _, _, sites in finding.pool_leaks for _, _, site in sites]
    stacks += [site.get("stack") for _, _, site, _ in finding.growth if site]
    return stacks


def where(finding):
    """(function, file, line) of the test's own frame in the first leak or
    growth whose stack has one, or None."""
    for stack in _stacks(finding):
        i = _own_frame(finding, stack)
        if i is not None:
            return stack[i].get("function"), stack[i]["file"], stack[i].get("line") or 0
    return None


def headline(finding):
    """"leaked 1.0 MiB in 1 allocation(s) at FILE:LINE": what failed, with
    the test's own line."""
    parts = []
    if finding.leak_failed() and finding.leaks:
        count = sum(c for _, c, _ in finding.leaks)
        parts.append("leaked %s in %d allocation(s)" % (format_size(sum(b for b, _, _ in finding.leaks)), count))
    if finding.leak_failed():
        for nbytes, pool, _ in finding.pool_leaks:
            parts.append("left %s allocated in pool '%s'" % (format_size(nbytes), pool.get("name")))
    if finding.growth_failed():
        parts.append("grew %s per run" % format_size(max(g for g, _, _, _ in finding.growth)))
    at = where(finding)
    return "%s%s" % (", ".join(parts), " at %s:%d" % at[1:] if at else "")


def _location(finding, stack):
    """" at FILE:LINE in FUNCTION" of the test's own frame in `stack`, else
    of its innermost Python frame, else ""."""
    i = _own_frame(finding, stack)
    if i is None:
        i = next((j for j, f in enumerate(stack or ()) if f.get("python")), None)
    if i is None:
        return ""
    f = stack[i]
    return " at %s:%d in %s" % (f.get("file") or "??", f.get("line") or 0, f.get("function") or "??")


def _pool_lines(finding):
    """The framework pool blocks the test keeps: their sites are the
    framework's (PyTorch's allocation history), not the report's, so the
    renderer has no rows for them."""
    lines = []
    for nbytes, pool, sites in finding.pool_leaks:
        lines.append("Leak of %s in pool '%s' [%s]: allocated by the framework during the test and still in use "
                     "(what the test keeps alive; the pool's segments are the cache's)" % (
                         format_size(nbytes), pool.get("name"), pool.get("kind")))
        for site_bytes, count, site in sites:
            lines.append("  %s in %d block(s)%s" % (format_size(site_bytes), count,
                                                    _location(finding, site.get("stack"))))
    return lines


def _plain_lines(finding):
    """The leaks and growth in one line each."""
    lines = []
    for nbytes, count, site in finding.leaks:
        lines.append("Leak of %s in %d allocation(s) [%s]%s" % (format_size(nbytes), count, site.get("kind"),
                                                               _location(finding, site.get("stack"))))
    for per_run, runs, site, pool in finding.growth:
        what = "pool '%s' reserved" % pool if pool is not None else "[%s] held by %s%s" % (
            site.get("kind"), site.get("owner") or "?", _location(finding, site.get("stack")))
        lines.append("Growth of %s per run over %d runs: %s" % (format_size(per_run), runs, what))
    return lines


def _cut(finding, stack):
    i = _own_frame(finding, stack)
    return list(stack[:i + 1]) if i is not None else list(stack or ())


def test_report(finding, end):
    """The test's report (a dict, in the report format) from `end`, the
    report written at the end of the test ({} when none could be)."""
    report = dict(end)
    nodeid = finding.item.nodeid
    report["label"] = nodeid
    report["leaks"] = [dict(site, bytes=b, count=c, stack=_cut(finding, site.get("stack")))
                       for b, c, site in finding.leaks]
    report["growth"] = []
    for per_run, runs, site, pool in finding.growth:
        if pool is not None:
            # A framework pool's reserve: the cache's, as the library's
            # owner-class rows are.
            row = {"scope": "owner", "kind": "device", "owner_class": "cache", "owner": pool, "stack": []}
        else:
            row = {"scope": "call_site", "site": site.get("site"), "kind": site.get("kind"),
                   "count_per_mark": None, "stack": _cut(finding, site.get("stack"))}
        row.update(bytes_per_mark=per_run, marks=runs, suppressed=False)
        report["growth"].append(row)
    summary = dict(report.get("summary") or {})
    # The framework pool blocks count as leaked (`tensorleak check` fails
    # the report), though they are no rows of `leaks`.
    summary["leaked_bytes"] = finding.leaked_bytes
    summary["leaked_allocations"] = sum(c for _, c, _ in finding.leaks)
    report["summary"] = summary
    report["pytest"] = {"nodeid": nodeid, "allowance": finding.allowance,
                        "growth": [{"bytes_per_run": g, "runs": n, "pool": pool,
                                    "stack": site.get("stack") if site else None}
                                   for g, n, site, pool in finding.growth]}
    return report


def write_report(report, path):
    with open(path, "w") as f:
        json.dump(report, f, indent=1)
        f.write("\n")


def _cli():
    """The CLI installed in this package, else `tensorleak` on PATH (the
    meson build's or a prefix's), else None."""
    return tensorleak.cli_path() or shutil.which("tensorleak")


def render_text(path):
    """(text, None): the report at `path` as `tensorleak report --format
    text` prints it; (None, why) when the CLI is missing or fails."""
    cli = _cli()
    if cli is None:
        return None, "the tensorleak CLI is not installed with this package nor on PATH"
    # The CLI is no CUDA program: it runs without the preload the tests run under.
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    try:
        r = subprocess.run([cli, "report", path, "--format", "text"], env=env, stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    except (OSError, subprocess.SubprocessError) as err:
        return None, "%s: %s" % (cli, err)
    if r.returncode != 0:
        said = r.stderr.decode(errors="replace").strip().splitlines()
        return None, "%s report exited with %d%s" % (cli, r.returncode, (": " + said[-1]) if said else "")
    return r.stdout.decode(errors="replace").rstrip("\n"), None


def failure_text(finding, path):
    """The failure of a test whose report (test_report) is at `path`: the
    headline, one line per leak, growth and pool block (with what only the
    plugin knows: runs, owners, the test's line), then the report's text."""
    lines = ["tensorleak: %s (allowance %s)" % (headline(finding), format_size(finding.allowance))]
    lines += _plain_lines(finding) + _pool_lines(finding)
    text, why = render_text(path)
    if text is None:
        lines.append("(the report's text is not shown: %s)" % why)
        return "\n".join(lines)
    if finding.growth:
        lines.append("In the report below, a mark is one run of the test.")
    return "\n".join(lines + [text])


def _safe_name(nodeid):
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid).strip("_")[:180] or "test"


def keep(finding, report, report_dir):
    """Writes the test's report to --tensorleak-report DIR (readable by
    `tensorleak report` and `tensorleak check`) with the failure text next
    to it; returns the failure text."""
    os.makedirs(report_dir, exist_ok=True)
    base = os.path.join(report_dir, _safe_name(finding.item.nodeid))
    write_report(report, base + ".json")
    text = failure_text(finding, base + ".json")
    with open(base + ".txt", "w") as f:
        f.write(text + "\n")
    return text
