#!/usr/bin/env python3
"""CLI tests for `tensorleak`: one meson test per case (see meson.build).

Each case runs the CLI on the fixture reports of this directory (cwd is this
directory, so paths in outputs are the short relative names) and asserts the
exact stdout, stderr and exit status. Long expected outputs live in
expected/; TL_REGEN=1 rewrites them from the current output (review the diff).

Exit status: 0 pass, 1 fail, 77 skip (meson's convention).
"""
import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile

SKIP = 77
CASES = {}


def case(fn):
    CASES[fn.__name__] = fn
    return fn


class Failure(Exception):
    pass


class Ctx:
    def __init__(self, a):
        self.exe = os.path.abspath(a.tensorleak)
        self.src = os.path.abspath(a.srcdir)
        self.version = a.version
        self.library = a.library
        self.fake = [os.path.abspath(p) for p in a.fake_preload]
        self.sim_dir = a.sim_dir
        self.libdir = a.libdir
        self.alloc_three = os.path.abspath(a.alloc_three)
        self.samples = os.path.abspath(a.samples_dir) if a.samples_dir else ""
        self.owners_demo = os.path.abspath(a.owners_demo) if a.owners_demo else ""
        self.static_prog = os.path.abspath(a.static_prog) if a.static_prog else ""
        self.regen = os.environ.get("TL_REGEN") == "1"
        self.tmp = tempfile.mkdtemp(prefix="tensorleak-cli-")

    def run(self, args, env=None, cwd=None, exe=None):
        full_env = dict(os.environ)
        for k in list(full_env):
            if k.startswith("TENSORLEAK_") or k in ("LD_PRELOAD", "LD_LIBRARY_PATH"):
                del full_env[k]
        full_env.update(env or {})
        p = subprocess.run([exe or self.exe] + args, cwd=cwd or self.src, env=full_env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
        return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")

    def expected(self, name):
        with open(os.path.join(self.src, "expected", name), encoding="utf-8") as f:
            return f.read()

    def expect(self, args, rc, stdout=None, stderr=None, stdout_file=None, env=None, cwd=None):
        """Runs and compares; stdout_file names an expected/ file."""
        got_rc, out, err = self.run(args, env=env, cwd=cwd)
        if stdout_file is not None:
            path = os.path.join(self.src, "expected", stdout_file)
            if self.regen:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(out)
            stdout = self.expected(stdout_file)
        problems = []
        if got_rc != rc:
            problems.append(f"exit status {got_rc}, expected {rc}")
        if stdout is not None and out != stdout:
            problems.append(f"stdout differs:\n--- got\n{out}--- expected\n{stdout}---")
        if stderr is not None and err != stderr:
            problems.append(f"stderr differs:\n--- got\n{err}--- expected\n{stderr}---")
        if problems:
            raise Failure(f"tensorleak {' '.join(args)}:\n" + "\n".join(problems)
                          + (f"\nstderr was:\n{err}" if stderr is None else ""))
        return out, err


def check_eq(got, want, what):
    if got != want:
        raise Failure(f"{what}: got {got!r}, expected {want!r}")


# --- basics ---------------------------------------------------------------

@case
def version_prints_the_project_version(c):
    line = f"tensorleak {c.version}\n"
    c.expect(["--version"], 0, stdout=line, stderr="")
    c.expect(["-V"], 0, stdout=line, stderr="")


@case
def help_lists_every_command(c):
    out, _ = c.expect(["--help"], 0, stderr="")
    for word in ("run", "report", "check", "diff", "merge", "--fail-on", "--format"):
        if word not in out:
            raise Failure(f"--help does not mention {word}")


@case
def unknown_command_and_option_are_usage_errors(c):
    c.expect(["frobnicate"], 2, stdout="",
             stderr="tensorleak: unknown command 'frobnicate' (try: tensorleak --help)\n")
    c.expect(["report", "--colour", "leaky.json"], 2, stdout="",
             stderr="tensorleak: report: unknown option '--colour' (try: tensorleak --help)\n")
    c.expect(["check", "leaky.json", "--max-leaked-bytes"], 2, stdout="",
             stderr="tensorleak: check: option '--max-leaked-bytes' needs a value\n")
    c.expect([], 2, stdout="")


# --- report ---------------------------------------------------------------

@case
def report_text_matches_the_leaksanitizer_layout(c):
    c.expect(["report", "leaky.json"], 0, stdout_file="leaky.txt", stderr="")
    c.expect(["report", "--format", "text", "leaky.json"], 0, stdout_file="leaky.txt", stderr="")


@case
def report_text_shows_the_python_line_first_and_folds_native_runs(c):
    # python_stack.json: a ctypes call from app.py, seven native frames
    # (libffi, _ctypes, libpython) below the first Python frame.
    out, _ = c.expect(["report", "python_stack.json"], 0, stdout_file="python_stack.txt", stderr="")
    lines = out.splitlines()
    at = lines.index("Leak of 4.0 MiB in 4 allocation(s) [device] allocated from:")
    check_eq(lines[at + 1:at + 5], [
        "    #7 in cuda_malloc /srv/app/app.py:21 [python]",
        "    ... 7 native frames: libffi, _ctypes, libpython3.11",
        "    #8 in serve /srv/app/app.py:26 [python]",
        "    #9 in <module> /srv/app/app.py:33 [python]"], "the Python-first stack")
    # Every frame as recorded, numbered alike; the interpreter's frames
    # below <module> are the ones the default leaves out.
    out, _ = c.expect(["report", "--frames", "all", "python_stack.json"], 0, stdout_file="python_stack_all.txt", stderr="")
    check_eq(out.count("[python]"), 6, "Python frames with --frames all (3 per stack, leak and growth)")
    check_eq("    #0 0x" in out and "(libffi.so.8.1.2+0x6f7a)" in out and "... 7 native" not in out, True,
             "--frames all prints the native frames one by one")
    c.expect(["report", "--frames", "python", "python_stack.json"], 0, stdout_file="python_stack.txt", stderr="")
    c.expect(["report", "--frames", "some", "python_stack.json"], 2,
             stderr="tensorleak: report: --frames takes python or all, not 'some'\n")


@case
def report_text_of_a_clean_run_says_no_leaks(c):
    c.expect(["report", "clean.json"], 0, stdout_file="clean.txt", stderr="")


@case
def report_text_shows_growth_oom_and_every_device(c):
    c.expect(["report", "server.json"], 0, stdout_file="server.txt", stderr="")


@case
def report_text_of_a_minimal_report_uses_its_summary(c):
    c.expect(["report", "minimal.json"], 0, stderr="", stdout=(
        # No leaks listed: the summary's totals, their kinds unknown.
        "==1== tensorleak: 1 leaked allocation (4.0 KiB) from 0 call sites\n"
        "SUMMARY: tensorleak: 4096 byte(s) leaked in 1 allocation(s). Report: minimal.json\n"))


@case
def report_folded_is_outermost_first_and_weighted_by_bytes(c):
    c.expect(["report", "--format", "folded", "leaky.json"], 0, stderr="",
             stdout_file="leaky.folded")
    c.expect(["report", "--format=folded", "clean.json"], 0, stdout="", stderr="")


@case
def report_json_reemits_the_parsed_file(c):
    out, _ = c.expect(["report", "--format", "json", "leaky.json"], 0, stderr="",
                      stdout_file="leaky.pretty.json")
    with open(os.path.join(c.src, "leaky.json")) as f:
        check_eq(json.loads(out), json.load(f), "re-emitted report")


@case
def report_output_option_writes_the_file(c):
    dest = os.path.join(c.tmp, "out.txt")
    c.expect(["report", "leaky.json", "-o", dest], 0, stdout="", stderr="")
    with open(dest) as f:
        check_eq(f.read(), c.expected("leaky.txt"), "report -o file")
    c.expect(["report", "leaky.json", "-o", "/nonexistent-dir/out.txt"], 2, stdout="",
             stderr="tensorleak: /nonexistent-dir/out.txt: cannot write: No such file or directory\n")


@case
def report_rejects_unknown_formats_and_extra_files(c):
    c.expect(["report", "--format", "xml", "leaky.json"], 2, stdout="",
             stderr="tensorleak: report: unknown format 'xml' "
                    "(expected text, json, folded, html, sarif or torch-snapshot)\n")
    c.expect(["report"], 2, stdout="")
    # Only html and sarif show several reports.
    for fmt in ("text", "json", "folded"):
        _, err = c.expect(["report", "--format", fmt, "leaky.json", "clean.json"], 2, stdout="")
        if "expected one report FILE" not in err:
            raise Failure(f"{fmt} with two files: {err!r}")


# --- check ----------------------------------------------------------------

def verdict(word, leaked, leak_limit, growth, growth_limit):
    return (f"tensorleak check: {word}: {leaked} byte(s) leaked (limit {leak_limit}), "
            f"{growth} byte(s) growth (limit {growth_limit})\n")


@case
def check_fails_on_any_leak_by_default(c):
    c.expect(["check", "leaky.json"], 1, stderr="",
             stdout=verdict("FAIL", 12582912, 0, 0, 0))


@case
def check_passes_within_the_limits(c):
    c.expect(["check", "leaky.json", "--max-leaked-bytes", "12M"], 0, stderr="",
             stdout=verdict("PASS", 12582912, 12582912, 0, 0))
    c.expect(["check", "--max-leaked-bytes=12582911", "leaky.json"], 1, stderr="",
             stdout=verdict("FAIL", 12582912, 12582911, 0, 0))
    c.expect(["check", "clean.json"], 0, stderr="", stdout=verdict("PASS", 0, 0, 0, 0))


@case
def check_applies_a_suppressions_file_on_top_of_the_report(c):
    c.expect(["check", "leaky.json", "--suppressions", "supp_leaks.txt"], 1, stderr="",
             stdout=verdict("FAIL", 4194304, 0, 0, 0))
    c.expect(["check", "leaky.json", "--suppressions", "supp_leaks.txt",
              "--max-leaked-bytes", "4M"], 0, stderr="",
             stdout=verdict("PASS", 4194304, 4194304, 0, 0))


@case
def check_counts_growth_bytes_times_marks(c):
    # 2 MiB x 5 + 4 KiB x 3; the growth site the report marked suppressed is left out
    c.expect(["check", "server.json"], 1, stderr="",
             stdout=verdict("FAIL", 0, 0, 10498048, 0))
    c.expect(["check", "server.json", "--max-growth-bytes", "10M"], 1, stderr="",
             stdout=verdict("FAIL", 0, 0, 10498048, 10485760))
    c.expect(["check", "server.json", "--max-growth-bytes", "10M",
              "--suppressions", "supp_growth.txt"], 0, stderr="",
             stdout=verdict("PASS", 0, 0, 10485760, 10485760))
    c.expect(["check", "server.json", "--max-growth-bytes", "1g"], 0, stderr="",
             stdout=verdict("PASS", 0, 0, 10498048, 1073741824))


@case
def check_without_a_leaks_array_uses_the_summary(c):
    c.expect(["check", "minimal.json"], 1, stderr="", stdout=verdict("FAIL", 4096, 0, 0, 0))


@case
def check_rejects_bad_sizes_and_suppressions(c):
    c.expect(["check", "leaky.json", "--max-leaked-bytes", "12X"], 2, stdout="",
             stderr="tensorleak: check: --max-leaked-bytes: invalid size '12X' "
                    "(expected bytes, optionally with K, M or G)\n")
    c.expect(["check", "leaky.json", "--max-growth-bytes", "-1"], 2, stdout="",
             stderr="tensorleak: check: --max-growth-bytes: invalid size '-1' "
                    "(expected bytes, optionally with K, M or G)\n")
    c.expect(["check", "leaky.json", "--suppressions", "supp_bad.txt"], 2, stdout="",
             stderr="tensorleak: supp_bad.txt:3: unknown suppression kind 'leaks' "
                    "(expected leak, growth or invalid-free)\n")
    c.expect(["check", "leaky.json", "--suppressions", "no-such-file.txt"], 2, stdout="",
             stderr="tensorleak: no-such-file.txt: cannot open suppressions file: "
                    "No such file or directory\n")


# --- diff -----------------------------------------------------------------

@case
def diff_of_snapshots_compares_live_sites_largest_growth_first(c):
    c.expect(["diff", "snap1.json", "snap2.json"], 0, stderr="", stdout_file="snap.diff")


@case
def diff_of_exit_reports_compares_leaks(c):
    c.expect(["diff", "clean.json", "leaky.json"], 0, stderr="", stdout_file="clean-leaky.diff")


@case
def diff_of_a_report_with_itself_lists_nothing(c):
    c.expect(["diff", "leaky.json", "leaky.json"], 0, stderr="", stdout=(
        "tensorleak diff: leaky.json -> leaky.json (leaks): +0 byte(s) (+0 B), "
        "+0 allocation(s) in 0 changed call site(s)\n"))
    c.expect(["diff", "leaky.json"], 2, stdout="")


# --- merge ----------------------------------------------------------------

@case
def merge_sums_ranks_and_tags_every_entry(c):
    out, _ = c.expect(["merge", "rank1.json", "rank0.json"], 0, stderr="",
                      stdout_file="ranks.merged.json")
    merged = json.loads(out)
    check_eq([r["rank"] for r in merged["ranks"]], [0, 1], "ranks order")
    check_eq(merged["summary"]["leaked_bytes"], 3 * 1024 * 1024 + 512 * 1024, "summed bytes")


@case
def merged_report_reads_back_as_a_report(c):
    dest = os.path.join(c.tmp, "merged.json")
    c.expect(["merge", "-o", dest, "rank0.json", "rank1.json"], 0, stdout="", stderr="")
    with open(dest) as f:
        check_eq(f.read(), c.expected("ranks.merged.json"), "merge -o file")
    shutil.copy(dest, os.path.join(c.tmp, "ranks.merged.json"))
    c.expect(["report", "ranks.merged.json"], 0, stderr="", stdout_file="ranks.merged.txt",
             cwd=c.tmp)
    c.expect(["check", dest], 1, stderr="", stdout=verdict("FAIL", 3670016, 0, 0, 0))


@case
def merge_refuses_two_reports_of_one_process(c):
    c.expect(["merge", "rank0.json", "rank0.json"], 2, stdout="",
             stderr="tensorleak: merge: rank0.json and rank0.json are reports of the same "
                    "process (rank 0, pid 100)\n")
    c.expect(["merge"], 2, stdout="")


# --- unusable input -------------------------------------------------------

BROKEN = {
    "truncated.json": "truncated JSON (input ends at line 31, column 9: "
                      "string or '}' expected near end of file)",
    "empty.json": "empty file, not a tensorleak report",
    "nonutf8.json": "not valid UTF-8 at line 1, column 48: unable to decode byte 0xe9 near '\"caf'",
    "foreign.json": "not a tensorleak report (no \"tool\": \"tensorleak\")",
    "schema2.json": "unsupported report schema 2 (this tensorleak reads schema 1)",
    "array.json": "not a tensorleak report (top level is not a JSON object)",
    "badtype.json": "leaks[1].bytes: expected a non-negative integer",
    "no-such-report.json": "cannot open: No such file or directory",
    "expected": "is a directory, not a report",
}


@case
def unusable_reports_are_a_clear_error_and_exit_2_in_every_command(c):
    for name, reason in BROKEN.items():
        err = f"tensorleak: {name}: {reason}\n"
        c.expect(["report", name], 2, stdout="", stderr=err)
        c.expect(["report", "--format", "json", name], 2, stdout="", stderr=err)
        c.expect(["check", name], 2, stdout="", stderr=err)
        c.expect(["diff", "leaky.json", name], 2, stdout="", stderr=err)
        c.expect(["diff", name, "leaky.json"], 2, stdout="", stderr=err)
        c.expect(["merge", "rank0.json", name], 2, stdout="", stderr=err)


@case
def hostile_json_shapes_never_crash(c):
    shapes = {
        "deep.json": "[" * 200000,
        "nul.json": '{"tool":"tensorleak","schema":1,"host":"a\\u0000b","summary":{}}',
        "bigint.json": '{"tool":"tensorleak","schema":1,"summary":{"leaked_bytes":99999999999999999999999}}',
        "negative.json": '{"tool":"tensorleak","schema":1,"summary":{"leaked_bytes":-5}}',
        "frames.json": '{"tool":"tensorleak","schema":1,"summary":{},"leaks":[{"stack":[7]}]}',
        "leaksobj.json": '{"tool":"tensorleak","schema":1,"summary":{},"leaks":{}}',
        "nosummary.json": '{"tool":"tensorleak","schema":1}',
        "trailing.json": '{"tool":"tensorleak","schema":1,"summary":{}} {}',
        "scalar.json": '"tensorleak"',
    }
    for name, text in shapes.items():
        path = os.path.join(c.tmp, name)
        with open(path, "w") as f:
            f.write(text)
        for cmd in (["report"], ["check"], ["merge"]):
            rc, out, err = c.run(cmd + [path])
            if rc != 2 or out or not err.startswith(f"tensorleak: {path}: ") or err.count("\n") != 1:
                raise Failure(f"{cmd[0]} {name}: exit {rc}, stdout {out!r}, stderr {err!r}")


def real_library_built(c):
    """Whether the preload library and the simulated driver are built (says which is not)."""
    for need in (c.library, os.path.join(c.sim_dir, "libcuda.so.1")):
        if not os.path.exists(need):
            print(f"skip: {need} not built yet")
            return False
    return True


# ESC [ (CSI), ESC ] ... BEL (OSC: retitles the window), DEL and U+009B (C1
# CSI, which xterm obeys in UTF-8): each control character shows as '?'.
HOSTILE = "\x1b[31m\x1b]0;t\x07\u009b2J\x7f"
HOSTILE_SHOWN = "?[31m?]0;t??2J?"
# Fields that choose how a report is read, not text a person reads.
STRUCTURAL = ("tool", "version", "reason", "time", "scope", "state", "reading", "mode")


def with_every_text_field(value, suffix):
    """The report `value` with `suffix` after every string a person reads."""
    def walk(o, key):
        if isinstance(o, dict):
            return {k: walk(v, k) for k, v in o.items()}
        if isinstance(o, list):
            return [walk(v, key) for v in o]
        return o + suffix if isinstance(o, str) and key not in STRUCTURAL else o
    return walk(value, None)


def control_characters(text):
    return [ch for ch in text if (ord(ch) < 0x20 and ch != "\n") or 0x7f <= ord(ch) <= 0x9f]


@case
def report_text_and_diff_show_control_characters_of_fields_as_question_marks(c):
    made = {}
    for name in ("leaky.json", "owners0.json", "server.json", "rank0.json", "rank1.json"):
        with open(os.path.join(c.src, name)) as f:
            r = json.load(f)
        for suffix, tag in ((HOSTILE, "hostile"), (HOSTILE_SHOWN, "shown")):
            path = os.path.join(c.tmp, f"{tag}-{name}")
            with open(path, "w") as f:
                json.dump(with_every_text_field(r, suffix), f)
            made[tag, name] = path
    for tag in ("hostile", "shown"):
        merged = os.path.join(c.tmp, f"{tag}-merged.json")
        out, _ = c.expect(["merge", made[tag, "rank0.json"], made[tag, "rank1.json"]], 0, stderr="")
        with open(merged, "w") as f:
            f.write(out)
        made[tag, "merged"] = merged
    runs = [["report", made[tag, name]] for name in ("leaky.json", "owners0.json", "server.json", "merged")
            for tag in ("hostile",)]
    runs += [["diff", "clean.json", made["hostile", name]] for name in ("leaky.json", "owners0.json", "rank0.json")]
    runs += [["diff", made["hostile", "leaky.json"], made["hostile", "server.json"]]]
    for args in runs:
        rc, out, err = c.run(args)
        check_eq((rc, err), (0, ""), " ".join(args))
        check_eq(control_characters(out), [], f"control characters in {' '.join(args)}")
        # Exactly what the same report says with '?' already in its fields.
        shown = [a.replace("hostile-", "shown-") for a in args]
        c.expect(shown, 0, stderr="", stdout=out.replace("hostile-", "shown-"))
        if HOSTILE_SHOWN not in out:
            raise Failure(f"{' '.join(args)} shows no field:\n{out}")
    # Each kind of field is among them: function, file, module, kind, owner, pool, host.
    _, text, _ = c.run(["report", made["hostile", "leaky.json"]])
    for want in (f" in kv_cache_append{HOSTILE_SHOWN} /abs/samples/leaky_inference.c{HOSTILE_SHOWN}:42 "
                 f"(leaky_inference{HOSTILE_SHOWN}+0x13c4{HOSTILE_SHOWN})",
                 f"allocation(s) [device{HOSTILE_SHOWN}] allocated from:",
                 f"pool 'kv_pool{HOSTILE_SHOWN}' (annotated{HOSTILE_SHOWN}, device 0)"):
        if want not in text:
            raise Failure(f"{want!r} not in:\n{text}")
    _, text, _ = c.run(["report", made["hostile", "owners0.json"]])
    if f"{HOSTILE_SHOWN} 3.0 MiB (user{HOSTILE_SHOWN})" not in text:
        raise Failure(f"owner not shown escaped:\n{text}")
    _, text, _ = c.run(["report", made["hostile", "merged"]])
    if f" on node1{HOSTILE_SHOWN}: " not in text:
        raise Failure(f"host not shown escaped:\n{text}")
    # An error that quotes the report's text.
    with open(os.path.join(c.src, "leaky.json")) as f:
        r = json.load(f)
    r["leaks"][0]["allocations"] = [{"address": HOSTILE, "bytes": 1, "device": 0}]
    bad = os.path.join(c.tmp, "hostile-address.json")
    with open(bad, "w") as f:
        json.dump(r, f)
    c.expect(["report", bad], 2, stdout="", stderr=f"tensorleak: {bad}: leaks[0].allocations[0].address: "
             f"'{HOSTILE_SHOWN}' is not a hex address (0x...)\n")


@case
def a_warning_shows_control_characters_of_an_environment_value_as_question_marks(c):
    if not real_library_built(c):
        return SKIP
    work = os.path.join(c.tmp, "warn")
    os.makedirs(work)
    rc, out, err = c.run(["run", "--sim", "--quiet", "-o", os.path.join(work, "r.%p.json"), "--", c.alloc_three],
                         cwd=work, env={"TENSORLEAK_DEPTH": "4" + HOSTILE})
    check_eq((rc, out), (0, ""), f"alloc_three (stderr: {err!r})")
    want = f"tensorleak: ignoring TENSORLEAK_DEPTH='4{HOSTILE_SHOWN}' (expected 0 to 128 frames); using the default\n"
    if want not in err:
        raise Failure(f"{want!r} not in stderr {err!r}")
    check_eq(control_characters(err), [], "control characters in stderr")


@case
def a_huge_report_is_read_whole(c):
    sites = 20000
    path = os.path.join(c.tmp, "huge.json")
    with open(path, "w") as f:
        f.write('{"tool":"tensorleak","schema":1,"pid":1,"summary":{"leaked_bytes":%d,'
                '"leaked_allocations":%d},"leaks":[' % (sites * 4096, sites))
        for i in range(sites):
            frames = ",".join(
                '{"address":"0x%x","module":"/usr/lib/libhuge.so","offset":"0x%x",'
                '"function":"fn_%d_%d","file":"/src/huge/file_%d.c","line":%d}'
                % (0x7f0000000000 + i * 64 + d, i * 64 + d, i, d, d, i + 1) for d in range(24))
            f.write(('' if i == 0 else ',')
                    + '{"kind":"device","bytes":4096,"count":1,"suppressed":false,"stack":[%s]}' % frames)
        f.write("]}")
    if os.path.getsize(path) < 50 * 1024 * 1024:
        raise Failure("huge fixture too small")
    rc, out, err = c.run(["report", path])
    check_eq((rc, err), (0, ""), "report huge")
    check_eq(out.splitlines()[-1],
             f"SUMMARY: tensorleak: {sites * 4096} byte(s) leaked in {sites} allocation(s). Report: {path}",
             "summary line")
    check_eq(out.count("\nLeak of 4.0 KiB in 1 allocation(s) [device] allocated from:\n"), sites, "leak blocks")
    rc, out, err = c.run(["report", "--format", "folded", path])
    check_eq((rc, err, len(out.splitlines())), (0, "", sites), "folded huge")
    c.expect(["check", path, "--max-leaked-bytes", "80M"], 0, stderr="",
             stdout=verdict("PASS", sites * 4096, 80 * 1024 * 1024, 0, 0))


def cpu_seconds(c, args):
    """CPU time (user + system) of one run of the CLI, which must succeed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    rc, _, err = c.run(args)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    check_eq((rc, err), (0, ""), " ".join(args))
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


@case
def merge_and_sarif_cost_grows_linearly_with_the_report(c):
    # Reports of 2,500 and 20,000 leaks, each site a VMM handle shared with
    # the other rank and as many CUDA IPC handles, which merge pairs across
    # the inputs: 8 times the input costs about 8 times the CPU; a pairwise
    # comparison (64 times) measured 26 times at these sizes.  The best of
    # two runs, against noise.
    sys.path.insert(0, os.path.join(c.src, "..", "..", "bench"))
    import big_report
    paths = {}
    for n in (2500, 20000):
        for rank, pid in ((0, 4242), (1, 4343)):
            paths[n, rank] = os.path.join(c.tmp, f"big{n}.{rank}.json")
            sys.argv = ["big_report", str(n), paths[n, rank], "--shared", "--rank", str(rank), "--pid", str(pid)]
            big_report.main()
    for args in (lambda n: ["merge", "-o", os.path.join(c.tmp, f"merged{n}.json"), paths[n, 0], paths[n, 1]],
                 lambda n: ["report", "--format", "sarif", "-o", os.path.join(c.tmp, f"big{n}.sarif"), paths[n, 0]]):
        small, big = (min(cpu_seconds(c, args(n)) for _ in range(2)) for n in (2500, 20000))
        print(f"{' '.join(args(20000)[:3])}: {small:.2f} s of CPU for 2,500 leaks, {big:.2f} s for 20,000")
        if big > 16 * max(small, 0.05):
            raise Failure(f"{' '.join(args(20000))}: {big:.2f} s of CPU, {big / small:.1f} times that of 2,500 leaks")
    with open(os.path.join(c.tmp, "merged20000.json")) as f:
        summary = json.load(f)["summary"]
    check_eq((summary["shared_bytes_counted_once"], summary["ipc_paired_bytes"], summary["ipc_unpaired_mapped_bytes"]),
             (20000 * 4096, 20000 * 4096, 0), "what merge paired")


# --- run ------------------------------------------------------------------

def fake_env(c, **extra):
    env = {"TENSORLEAK_LIBRARY": c.fake[0]}
    env.update(extra)
    return env


@case
def run_exits_with_the_program_status(c):
    c.expect(["run", "--", "/bin/sh", "-c", "exit 7"], 7, stdout="", stderr="", env=fake_env(c))
    c.expect(["run", "/bin/sh", "-c", "exit 0"], 0, stdout="", stderr="", env=fake_env(c))
    c.expect(["run", "/bin/sh", "-c", "kill -TERM $$"], -15, env=fake_env(c))


@case
def run_sets_the_documented_environment(c):
    script = ('printf "%s\\n" "$LD_PRELOAD" "$TENSORLEAK_OUTPUT" "$TENSORLEAK_DEPTH" '
              '"$TENSORLEAK_FAIL_ON" "$TENSORLEAK_EXITCODE" "$TENSORLEAK_SUPPRESSIONS" '
              '"$TENSORLEAK_QUIET" "$TENSORLEAK_PYTHON_DEPTH"')
    supp = os.path.join(c.src, "supp_leaks.txt")
    c.expect(["run", "-o", "out.%p.json", "--depth", "8", "--fail-on", "leak,growth",
              "--exitcode", "42", "--suppressions", "supp_leaks.txt", "--quiet", "--python-depth", "5", "--",
              "/bin/sh", "-c", script], 0, stderr="",
             env=fake_env(c, LD_PRELOAD=c.fake[1]),
             stdout="\n".join([f"{c.fake[1]}:{c.fake[0]}", "out.%p.json", "8", "leak,growth",
                               "42", supp, "1", "5"]) + "\n")
    # Unset options leave the environment alone; the library is not added twice.
    c.expect(["run", "/bin/sh", "-c", script], 0, stderr="",
             env=fake_env(c, LD_PRELOAD=c.fake[0], TENSORLEAK_DEPTH="4"),
             stdout="\n".join([c.fake[0], "", "4", "", "", "", "", ""]) + "\n")
    # Owners, budgets and the interval.
    owners_script = ('printf "%s\\n" "$TENSORLEAK_OWNERS" "$TENSORLEAK_DEFAULT_OWNERS" "$TENSORLEAK_BUDGET" '
                     '"$TENSORLEAK_BUDGET_ENFORCE" "$TENSORLEAK_INTERVAL"')
    c.expect(["run", "--owners", "supp_leaks.txt", "--no-default-owners", "--budget", "8G,user:2G",
              "--budget-enforce", "--interval", "0.5", "--", "/bin/sh", "-c", owners_script], 0, stderr="",
             env=fake_env(c), stdout="\n".join([supp, "0", "8G,user:2G", "1", "0.5"]) + "\n")
    # 0 is the interval's "off", as the library reads it.
    c.expect(["run", "--interval", "0", "--", "/bin/sh", "-c", 'printf "%s\\n" "$TENSORLEAK_INTERVAL"'], 0, stderr="",
             env=fake_env(c), stdout="0\n")


@case
def run_leaves_the_command_options_alone(c):
    c.expect(["run", "/bin/sh", "-c", 'printf "%s\\n" "$@"', "sh", "--depth", "-o", "--"], 0,
             stderr="", stdout="--depth\n-o\n--\n", env=fake_env(c))


@case
def run_rejects_bad_options_before_starting_anything(c):
    def bad(args, msg):
        c.expect(["run"] + args + ["--", "/bin/sh", "-c", "echo started"], 2, stdout="",
                 stderr=f"tensorleak: run: {msg}\n", env=fake_env(c))
    bad(["--depth", "-1"], "--depth: invalid value '-1' (expected 0 to 128 frames)")
    bad(["--budget-enforce"], "--budget-enforce needs --budget (or TENSORLEAK_BUDGET)")
    bad(["--interval", "-1"], "--interval: invalid value '-1' (expected seconds, 0 (off) to 31536000)")
    bad(["--owners", "no-such-file"], "--owners: no-such-file: No such file or directory")
    bad(["--depth", "12abc"], "--depth: invalid value '12abc' (expected 0 to 128 frames)")
    bad(["--python-depth", "129"], "--python-depth: invalid value '129' (expected 0 to 128 frames)")
    bad(["--depth", "99999999999999999999"],
        "--depth: invalid value '99999999999999999999' (expected 0 to 128 frames)")
    bad(["--fail-on", "leak,leaks"], "--fail-on: invalid value 'leak,leaks' (unknown kind 'leaks': "
        "expected a comma list of leak, growth, invalid-free, oom; or none)")
    bad(["--fail-on", ""], "--fail-on: invalid value '' (unknown kind '': "
        "expected a comma list of leak, growth, invalid-free, oom; or none)")
    bad(["--fail-on", "all"], "--fail-on: invalid value 'all' (unknown kind 'all': "
        "expected a comma list of leak, growth, invalid-free, oom; or none)")
    bad(["--fail-on", "none,leak"], "--fail-on: invalid value 'none,leak' ('none' cannot be combined with other kinds)")
    bad(["--exitcode", "256"], "--exitcode: invalid value '256' (expected 1 to 255)")
    bad(["--exitcode", "0"], "--exitcode: invalid value '0' (expected 1 to 255)")
    bad(["--output", ""], "--output: empty pattern")
    c.expect(["run", "--suppressions", "supp_bad.txt", "/bin/true"], 2, stdout="",
             stderr="tensorleak: supp_bad.txt:3: unknown suppression kind 'leaks' "
                    "(expected leak, growth or invalid-free)\n", env=fake_env(c))
    c.expect(["run", "--depth", "8"], 2, stdout="", env=fake_env(c))
    c.expect(["run", "--bogus", "/bin/true"], 2, stdout="",
             stderr="tensorleak: run: unknown option '--bogus' (try: tensorleak --help)\n",
             env=fake_env(c))


@case
def run_reports_a_missing_library_or_command(c):
    c.expect(["run", "/bin/true"], 2, stdout="",
             stderr="tensorleak: run: TENSORLEAK_LIBRARY=/nonexistent/libtensorleak.so: "
                    "No such file or directory\n",
             env={"TENSORLEAK_LIBRARY": "/nonexistent/libtensorleak.so"})
    # A CLI copied where no library sits next to it.
    bindir = os.path.join(c.tmp, "lonely", "bin")
    os.makedirs(bindir)
    exe = shutil.copy(c.exe, bindir)
    rc, out, err = c.run(["run", "/bin/true"], exe=exe)
    want = (f"tensorleak: run: libtensorleak.so not found (looked for {bindir}/../{c.libdir}/"
            f"libtensorleak.so and {bindir}/../src/libtensorleak.so); build it or set "
            "TENSORLEAK_LIBRARY\n")
    check_eq((rc, out, err), (2, "", want), "lonely CLI")
    c.expect(["run", "--", "./no-such-program"], 127, stdout="",
             stderr="tensorleak: run: ./no-such-program: No such file or directory\n",
             env=fake_env(c))


@case
def run_says_a_static_program_is_not_tracked_and_refuses_its_gate(c):
    """A statically linked program never reads LD_PRELOAD: `run` says so and
    runs it untracked, or, asked for a --fail-on gate that could never fail,
    refuses to run it.  A dynamic program, and the dynamic loader run
    directly, draw no word."""
    if not c.static_prog:
        print("SKIP: no static-pie program (the C library has no static archive here)")
        return SKIP
    prog = c.static_prog
    p = subprocess.run([prog], capture_output=True, text=True, timeout=60)
    check_eq((p.returncode, p.stdout, p.stderr), (3, "static\n", ""), "the program without tensorleak")
    untracked = f"tensorleak: run: {prog} is statically linked: LD_PRELOAD cannot load libtensorleak.so into it; " \
                "running it untracked (no report)\n"
    c.expect(["run", "--", prog], 3, stdout="static\n", stderr=untracked, env=fake_env(c))
    c.expect(["run", "--fail-on", "none", "--", prog], 3, stdout="static\n", stderr=untracked, env=fake_env(c))
    refused = (f"tensorleak: run: {prog} is statically linked: LD_PRELOAD cannot load libtensorleak.so into it, so "
               "nothing would be tracked and --fail-on {} could never fail; not running it\n")
    c.expect(["run", "--fail-on", "leak", "--", prog], 2, stdout="", stderr=refused.format("leak"), env=fake_env(c))
    c.expect(["run", "--", prog], 2, stdout="", stderr=refused.format("growth"),
             env=fake_env(c, TENSORLEAK_FAIL_ON="growth"))
    # Found on PATH, and as a script's interpreter.
    c.expect(["run", "--", os.path.basename(prog)], 3, stdout="static\n",
             stderr=untracked, env=fake_env(c, PATH=os.path.dirname(prog) + ":/usr/bin:/bin"))
    script = os.path.join(c.tmp, "static-script")
    with open(script, "w") as f:
        f.write(f"#!{prog} -x\n")
    os.chmod(script, 0o755)
    c.expect(["run", "--fail-on", "leak", "--", script], 2, stdout="", stderr=refused.format("leak"), env=fake_env(c))
    # Dynamic programs: the fake preload is loaded, nothing is said.
    c.expect(["run", "--fail-on", "leak", "--", "/bin/sh", "-c", "exit 5"], 5, stdout="", stderr="", env=fake_env(c))
    # /bin/sh's own dynamic loader, as ldd names it.
    ldd = subprocess.run(["ldd", "/bin/sh"], capture_output=True, text=True, timeout=60).stdout
    loader = re.search(r"^\s*(/\S*/ld-\S+\.so\S*)", ldd, re.M)
    if loader:
        c.expect(["run", "--fail-on", "leak", "--", loader.group(1), "/bin/sh", "-c", "exit 6"], 6, stdout="",
                 stderr="", env=fake_env(c))


@case
def run_finds_the_library_next_to_its_executable(c):
    script = 'printf "%s\\n" "$LD_PRELOAD" "$LD_LIBRARY_PATH"'
    for layout, libpath, simdir in (
            ("build", "src/libtensorleak.so", "sim"),
            ("installed", f"{c.libdir}/libtensorleak.so", f"{c.libdir}/tensorleak/sim")):
        root = os.path.join(c.tmp, layout)
        os.makedirs(os.path.join(root, "bin"))
        os.makedirs(os.path.dirname(os.path.join(root, libpath)), exist_ok=True)
        os.makedirs(os.path.join(root, simdir))
        exe = shutil.copy(c.exe, os.path.join(root, "bin"))
        shutil.copy(c.fake[0], os.path.join(root, libpath))
        shutil.copy(c.fake[1], os.path.join(root, simdir, "libcuda.so.1"))
        shutil.copy(c.fake[1], os.path.join(root, simdir, "libcudart.so.13"))
        sim = os.path.realpath(os.path.join(root, simdir))
        rc, out, err = c.run(["run", "--sim", "/bin/sh", "-c", script], exe=exe,
                             env={"LD_LIBRARY_PATH": "/opt/other/lib"})
        # The library first, then the simulated runtime (its hooks find the
        # runtime as the next definition).
        want = (f"{os.path.realpath(os.path.join(root, libpath))}:{sim}/libcudart.so.13\n"
                f"{sim}:/opt/other/lib\n")
        check_eq((rc, out, err), (0, want, ""), f"{layout} layout")
        # `sim`: the same without the library, the caller's preload kept.
        rc, out, err = c.run(["sim", "/bin/sh", "-c", script], exe=exe,
                             env={"LD_LIBRARY_PATH": "/opt/other/lib", "LD_PRELOAD": c.fake[0]})
        want = f"{c.fake[0]}:{sim}/libcudart.so.13\n{sim}:/opt/other/lib\n"
        check_eq((rc, out, err), (0, want, ""), f"sim, {layout} layout")


@case
def sim_gives_the_run_sim_environment_without_the_library_and_keeps_the_status(c):
    # Named *_run_*: .ci/run leaves it out of the ASan build, whose
    # instrumented libcudart.so.13 cannot be preloaded into /bin/sh.
    if not os.path.exists(os.path.join(c.sim_dir, "libcuda.so.1")):
        print(f"skip: {c.sim_dir}/libcuda.so.1 not built yet")
        return SKIP
    sim = os.path.realpath(c.sim_dir)
    c.expect(["sim", "--", "/bin/sh", "-c", 'printf "%s\\n" "$LD_PRELOAD" "$LD_LIBRARY_PATH" "$TENSORLEAK_PYTHON"; exit 7'],
             7, stderr="", stdout=f"{sim}/libcudart.so.13\n{sim}\n\n", env=fake_env(c))
    c.expect(["sim"], 2, stdout="",
             stderr="tensorleak: sim: expected a command to run\nusage: tensorleak sim [--] CMD ARGS...\n")
    c.expect(["sim", "--", "./no-such-program"], 127, stdout="",
             stderr="tensorleak: sim: ./no-such-program: No such file or directory\n")


@case
def run_sim_prepends_the_simulated_driver_directory(c):
    if not os.path.exists(os.path.join(c.sim_dir, "libcuda.so.1")):
        print(f"skip: {c.sim_dir}/libcuda.so.1 not built yet")
        return SKIP
    c.expect(["run", "--sim", "/bin/sh", "-c", 'printf "%s\\n" "$LD_LIBRARY_PATH"'], 0,
             stderr="", stdout=os.path.realpath(c.sim_dir) + "\n", env=fake_env(c))


@case
def run_with_the_real_library_keeps_the_exit_status(c):
    if not os.path.exists(c.library):
        print(f"skip: {c.library} not built yet")
        return SKIP
    work = os.path.join(c.tmp, "real")
    os.makedirs(work)
    rc, out, err = c.run(["run", "--quiet", "-o", os.path.join(work, "r.%p.json"), "--",
                          "/bin/sh", "-c", 'printf "%s" "$LD_PRELOAD"; exit 7'], cwd=work)
    check_eq(rc, 7, f"exit status (stderr: {err!r})")
    if os.path.realpath(c.library) not in out.split(":"):
        raise Failure(f"LD_PRELOAD {out!r} lacks {c.library}")


@case
def report_text_of_a_real_report_equals_the_preload_text(c):
    if not real_library_built(c):
        return SKIP
    work = os.path.join(c.tmp, "e2e")
    os.makedirs(work)
    pattern = os.path.join(work, "r.%p.json")
    rc, out, preload_text = c.run(["run", "--sim", "-o", pattern, "--", c.alloc_three], cwd=work)
    check_eq((rc, out), (0, ""), f"alloc_three under run (stderr: {preload_text!r})")
    reports = [f for f in os.listdir(work) if f.startswith("r.") and f.endswith(".json")]
    check_eq(len(reports), 1, f"report files in {work}")
    path = os.path.join(work, reports[0])
    c.expect(["report", path], 0, stdout=preload_text, stderr="")
    c.expect(["check", path, "--max-leaked-bytes", "3M"], 0, stderr="",
             stdout=verdict("PASS", 3 << 20, 3 << 20, 0, 0))
    # The gate the preload applies passes through run's exec.
    rc, _, _ = c.run(["run", "--sim", "--quiet", "--fail-on", "leak", "-o", pattern, "--",
                      c.alloc_three], cwd=work)
    check_eq(rc, 23, "gate exit status")


@case
def report_reads_allocation_lists_and_rejects_malformed_ones(c):
    with open(os.path.join(c.src, "leaky.json")) as f:
        r = json.load(f)
    path = os.path.join(c.tmp, "allocations.json")
    site = r["leaks"][0]
    good = [{"address": "0x7f0000000000", "bytes": site["bytes"], "device": 0}][:site["count"]]
    site["allocations"], site["allocations_unlisted"] = good, site["count"] - len(good)
    with open(path, "w") as f:
        json.dump(r, f)
    # The text report does not print addresses: it reads the same as without them.
    plain = os.path.join(c.tmp, "plain.json")
    shutil.copy(os.path.join(c.src, "leaky.json"), plain)
    want, _ = c.expect(["report", plain], 0, stderr="")
    c.expect(["report", path], 0, stdout=want.replace(plain, path), stderr="")
    too_many = [{"address": "0x1000", "bytes": 1, "device": 0}] * (site["count"] + 1)
    for bad, msg in (([{"address": "zz", "bytes": 1, "device": 0}],
                      "leaks[0].allocations[0].address: 'zz' is not a hex address (0x...)"),
                     ([{"address": "0x", "bytes": 1, "device": 0}],
                      "leaks[0].allocations[0].address: '0x' is not a hex address (0x...)"),
                     ([{"address": "0x10000000000000000", "bytes": 1, "device": 0}],
                      "leaks[0].allocations[0].address: '0x10000000000000000' is not a hex address (0x...)"),
                     ([{"address": "0x1000", "device": 0}], "leaks[0].allocations[0].bytes: missing (a non-negative integer expected)"),
                     ([{"address": "0x1000", "bytes": 1, "device": -1}],
                      "leaks[0].allocations[0].device: expected a non-negative integer"),
                     ({"address": "0x1000"}, "leaks[0].allocations: expected an array"),
                     (too_many, f"leaks[0].allocations: {site['count'] + 1} listed, more than its count ({site['count']})")):
        site["allocations"] = bad
        with open(path, "w") as f:
            json.dump(r, f)
        c.expect(["report", path], 2, stdout="", stderr=f"tensorleak: {path}: {msg}\n")


# --- owners and budgets -----------------------------------------------------

@case
def report_text_lists_owners_as_the_preload_does(c):
    c.expect(["report", "owners0.json"], 0, stderr="", stdout_file="owners0.txt")
    # Only "user" (no rule matched anything): no owners line, as the preload.
    with open(os.path.join(c.src, "owners0.json")) as f:
        r = json.load(f)
    r["owners"] = [o for o in r["owners"] if o["name"] == "user"]
    path = os.path.join(c.tmp, "user_only.json")
    with open(path, "w") as f:
        json.dump(r, f)
    out, _ = c.expect(["report", path], 0, stderr="")
    if "owners:" in out:
        raise Failure(f"owners line for a report whose only owner is user:\n{out}")
    # A report without owners, held or budget counters (older writers) still reads.
    out, _ = c.expect(["report", "rank0.json"], 0, stderr="")
    if "owners:" in out:
        raise Failure("owners line for a report without owners")
    # A malformed owners array is a clear error.
    for bad, msg in (([{"class": "cache"}], "owners[0].name: missing (a string expected)"),
                     ({"name": "x"}, "owners: expected an array"),
                     ([{"name": "x", "live_bytes": -1}], "owners[0].live_bytes: expected a non-negative integer")):
        r["owners"] = bad
        with open(path, "w") as f:
            json.dump(r, f)
        c.expect(["report", path], 2, stdout="", stderr=f"tensorleak: {path}: {msg}\n")


@case
def merge_sums_owners_by_name_and_class(c):
    out, _ = c.expect(["merge", "owners1.json", "owners0.json"], 0, stderr="",
                      stdout_file="owners.merged.json")
    merged = json.loads(out)
    MiB = 1 << 20
    check_eq([(o["name"], o["class"], o["live_bytes"], o["live_allocations"], o["peak_bytes"])
              for o in merged["owners"]],
             [("user", "user", 4 * MiB, 3, 4 * MiB),
              ("PyTorch caching allocator", "cache", 60 * MiB, 3, 80 * MiB),
              ("NCCL", "library", 8 * MiB, 1, 8 * MiB),
              ("cuBLASLt workspace", "workspace", 4 * MiB, 1, 4 * MiB)], "summed owners")
    check_eq([(h["rank"], h["owner"], h["bytes"]) for h in merged["held"]],
             [(0, "PyTorch caching allocator", 20 * MiB), (0, "PyTorch caching allocator", 20 * MiB),
              (1, "PyTorch caching allocator", 20 * MiB), (0, "NCCL", 8 * MiB),
              (1, "cuBLASLt workspace", 4 * MiB)], "held, largest first, tagged")
    check_eq([(l["rank"], l["owner"], l["owner_class"]) for l in merged["leaks"]],
             [(0, "user", "user"), (0, "user", "user"), (1, "user", "user")], "leak owners kept")
    s = merged["summary"]
    check_eq((s["held_bytes"], s["budget_crossings"], s["budget_refusals"]), (72 * MiB, 3, 2),
             "summed held bytes and budget counters")
    dest = os.path.join(c.tmp, "owners.merged.json")
    with open(dest, "w") as f:
        f.write(out)
    c.expect(["report", "owners.merged.json"], 0, stderr="", stdout_file="owners.merged.txt",
             cwd=c.tmp)
    # Reports without owners merge without an owners array.
    out, _ = c.expect(["merge", "rank0.json", "rank1.json"], 0, stderr="")
    if "owners" in json.loads(out) or "held" in json.loads(out):
        raise Failure("owners or held invented for reports without them")


@case
def merge_tags_owners_by_device_and_html_lists_them(c):
    MiB = 1 << 20
    paths = []
    for name, rows in (("owners0.json", [(0, "user", "user", 3 * MiB, 2), (1, "NCCL", "library", 8 * MiB, 1),
                                         (None, "user", "user", MiB, 1)]),
                       ("owners1.json", [(0, "PyTorch caching allocator", "cache", 20 * MiB, 1)])):
        with open(os.path.join(c.src, name)) as f:
            r = json.load(f)
        r["owners_by_device"] = [{"device": d, "name": n, "class": k, "live_bytes": b, "live_allocations": a}
                                 for d, n, k, b, a in rows]
        paths.append(os.path.join(c.tmp, "bydev." + name))
        with open(paths[-1], "w") as f:
            json.dump(r, f)
    out, _ = c.expect(["merge"] + paths, 0, stderr="")
    merged = json.loads(out)
    # Device ordinals are each process's own: concatenated and tagged, never summed.
    check_eq([(o["rank"], o["pid"], o["device"], o["name"], o["live_bytes"]) for o in merged["owners_by_device"]],
             [(0, 200, 0, "user", 3 * MiB), (0, 200, 1, "NCCL", 8 * MiB), (0, 200, None, "user", MiB),
              (1, 201, 0, "PyTorch caching allocator", 20 * MiB)], "owners by device, tagged")
    page, _ = c.expect(["report", "--format", "html", paths[0]], 0, stderr="")
    rows = re.findall(r'<tr class="owner-device"><td>([^<]*)</td><td class="legend"><i[^>]*></i>([^<]*)</td>'
                      r'<td>([^<]*)</td><td class="n">([^<]*)</td><td class="n">(\d+)</td></tr>', page)
    check_eq(rows, [("0", "user", "user", "3.0 MiB", "2"), ("1", "NCCL", "library", "8.0 MiB", "1"),
                    ("host", "user", "user", "1.0 MiB", "1")], "html owners by device")
    # Reports without them merge without them; a malformed row is a clear error.
    if "owners_by_device" in json.loads(c.expect(["merge", "owners1.json", "owners0.json"], 0, stderr="")[0]):
        raise Failure("owners_by_device invented for reports without them")
    with open(paths[0]) as f:
        r = json.load(f)
    r["owners_by_device"] = [{"device": 0, "name": "x", "live_bytes": -1}]
    with open(paths[0], "w") as f:
        json.dump(r, f)
    c.expect(["report", paths[0]], 2, stdout="",
             stderr=f"tensorleak: {paths[0]}: owners_by_device[0].live_bytes: expected a non-negative integer\n")


@case
def diff_ignores_owners(c):
    # Owners label sites; they are not part of a site's identity.
    with open(os.path.join(c.src, "owners0.json")) as f:
        r = json.load(f)
    for l in r["leaks"]:
        l["owner"], l["owner_class"] = "Someone else", "library"
    r["owners"] = []
    path = os.path.join(c.tmp, "relabelled.json")
    with open(path, "w") as f:
        json.dump(r, f)
    c.expect(["diff", "owners0.json", path], 0, stderr="",
             stdout=f"tensorleak diff: owners0.json -> {path} (leaks): +0 byte(s) (+0 B), "
                    "+0 allocation(s) in 0 changed call site(s)\n")


@case
def report_text_of_an_owners_run_equals_the_preload_text(c):
    for need in (c.library, os.path.join(c.sim_dir, "libcuda.so.1"), c.owners_demo):
        if not need or not os.path.exists(need):
            print(f"skip: {need} not built yet")
            return SKIP
    work = os.path.join(c.tmp, "owners")
    os.makedirs(work)
    pattern = os.path.join(work, "o.%p.json")
    rc, out, preload_text = c.run(["run", "--sim", "-o", pattern, "--", c.owners_demo], cwd=work)
    check_eq((rc, out), (0, "owners_demo: done\n"), f"owners demo under run (stderr: {preload_text!r})")
    reports = [f for f in os.listdir(work) if f.endswith(".json")]
    check_eq(len(reports), 1, f"report files in {work}")
    path = os.path.join(work, reports[0])
    c.expect(["report", path], 0, stdout=preload_text, stderr="")
    line = [l for l in preload_text.splitlines() if " owners: " in l]
    check_eq(len(line), 1, "one owners line")
    check_eq(line[0].split(" owners: ", 1)[1],
             "user 3.0 MiB (user), PyTorch caching allocator 40.0 MiB (cache), "
             "cuBLASLt workspace 4.0 MiB (workspace), NCCL 8.0 MiB (library)", "owners line")


# The html and sarif formats: their cases live in html_sarif_cases.py.
import html_sarif_cases  # noqa: E402
html_sarif_cases.register(case, Failure, check_eq, SKIP)


# ---- unknown is not zero, no impossible figures
# async_exit.json: a real exit report of samples/async_pool on the simulated
# driver with SIMCUDA_POOL_QUERY=fail-at-exit (the driver pool's figures are
# its last good reading; its layout, hence largest free block and
# fragmentation, unknown).  h200_async_exit.json: the same sample's exit
# report from the first H200 run, written before the fix (gap_bytes negative).

@case
def report_text_says_unknown_for_a_pool_without_layout(c):
    out, _ = c.expect(["report", "async_exit.json"], 0, stderr="", stdout_file="async_exit.txt")
    for line in ("==3114== pool 'default mempool (device 0)' (stream_ordered, device 0): reserved 32.0 MiB, "
                 "allocated 1.0 MiB; largest free block unknown (fragmentation unknown) "
                 "[driver reading of 2026-11-30T21:35:08.246Z]\n",
                 "==3114== device 0: reserved 32.0 MiB, allocated 1.0 MiB, gap 31.0 MiB; "
                 "largest free block unknown (fragmentation unknown)\n"):
        if line not in out:
            raise Failure(f"missing line {line!r} in:\n{out}")


@case
def report_html_and_sarif_say_unknown_not_zero(c):
    out, _ = c.expect(["report", "--format", "html", "async_exit.json"], 0, stderr="")
    for want in ('<th>largest free block</th><td class="n">unknown</td>',
                 '<th>fragmentation</th><td class="n">unknown</td>',
                 "free 31.0 MiB, largest free block unknown, fragmentation unknown",
                 "<b>Fragmentation unknown:</b>"):
        if want not in out:
            raise Failure(f"HTML lacks {want!r}")
    if "fragmentation 0.00" in out or "Little fragmentation" in out:
        raise Failure("HTML calls an unknown fragmentation zero")
    out, _ = c.expect(["report", "--format", "sarif", "async_exit.json"], 0, stderr="")
    memory = json.loads(out)["runs"][0]["properties"]["memory"]
    check_eq([(m.get("pool"), m["reserved_bytes"], m["allocated_bytes"], m["largest_free_block"], m["fragmentation"])
              for m in memory],
             [(None, 32 * 1024 * 1024, 1024 * 1024, "unknown", "unknown"),
              ("default mempool (device 0)", 32 * 1024 * 1024, 1024 * 1024, "unknown", "unknown")],
             "SARIF memory properties")
    check_eq(memory[1]["reading"], "last_good", "the driver reading shown")


@case
def an_old_report_with_a_negative_gap_is_read_and_never_prints_a_wrapped_size(c):
    out, _ = c.expect(["report", "h200_async_exit.json"], 0, stderr="")
    if "==1082== device 0: reserved 0 B, allocated 16.0 MiB, gap 0 B; " not in out or "TiB" in out:
        raise Failure(out)
    # Old numbers (0, not null) still read as numbers.
    if "largest free block 0 B (fragmentation 0.00)" not in out:
        raise Failure(out)
    if ("==1082== warning: this report has more allocated than reserved: its figures were written before "
            "tensorleak checked them and cannot all be right\n") not in out:
        raise Failure("no word on the impossible figures:\n" + out)
    # Merged, the old device's negative gap is not written again.
    out, _ = c.expect(["merge", "h200_async_exit.json", "leaky.json"], 0, stderr="")
    check_eq(sorted(d["gap_bytes"] for d in json.loads(out)["devices"]), [0, 25165824], "merged gaps")
    c.expect(["check", "h200_async_exit.json"], 1, stderr="", stdout=verdict("FAIL", 16777216, 0, 0, 0))


@case
def merge_and_json_keep_unknown_as_null(c):
    out, _ = c.expect(["report", "--format", "json", "async_exit.json"], 0, stderr="")
    r = json.loads(out)
    check_eq((r["summary"]["largest_free_block"], r["summary"]["fragmentation"],
              r["pools"][0]["largest_free_block"], r["devices"][0]["fragmentation"]),
             (None, None, None, None), "re-emitted nulls")
    out, _ = c.expect(["merge", "async_exit.json", "leaky.json"], 0, stderr="")
    merged = json.loads(out)
    check_eq((merged["summary"]["largest_free_block"], merged["summary"]["fragmentation"]), (None, None),
             "one rank unknown: the largest over all ranks is unknown")
    dest = os.path.join(c.tmp, "m.json")
    with open(dest, "w") as f:
        f.write(out)
    out, _ = c.expect(["report", dest], 0, stderr="")
    if "device 0: reserved 32.0 MiB, allocated 1.0 MiB, gap 31.0 MiB; largest free block unknown" not in out:
        raise Failure(out)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tensorleak", required=True)
    p.add_argument("--srcdir", required=True)
    p.add_argument("--version", required=True)
    p.add_argument("--library", required=True)
    p.add_argument("--sim-dir", required=True)
    p.add_argument("--libdir", required=True)
    p.add_argument("--fake-preload", action="append", required=True)
    p.add_argument("--alloc-three", default="")
    p.add_argument("--samples-dir", default="")
    p.add_argument("--owners-demo", default="")
    p.add_argument("--static-prog", default="")
    p.add_argument("case", choices=sorted(CASES) + ["list"])
    a = p.parse_args()
    if a.case == "list":
        print("\n".join(CASES))
        return 0
    c = Ctx(a)
    try:
        rc = CASES[a.case](c) or 0
    except Failure as e:
        print(f"FAIL {a.case}: {e}", file=sys.stderr)
        rc = 1
    finally:
        shutil.rmtree(c.tmp, ignore_errors=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
