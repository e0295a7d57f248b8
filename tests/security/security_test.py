#!/usr/bin/env python3
"""Security cases: hostile TENSORLEAK_* values, setuid execution, hostile
CLI input.

    security_test.py --library LIB --sim-dir DIR --sample EXE --secure-prog EXE
                     --tensorleak CLI --leaky-json FILE CASE

Exit 0 pass, 1 fail, 77 skip.
"""
import argparse
import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile

HUGE = "9" * 40
LONG = "x" * 100000
BAD_VALUES = ["", "garbage", "-1", HUGE, LONG]
# Values that are in fact valid for a variable (a file name may be anything).
VALID = {"TENSORLEAK_OUTPUT": {"garbage", "-1", HUGE}}
VARIABLES = ["TENSORLEAK_OUTPUT", "TENSORLEAK_DEPTH", "TENSORLEAK_FAIL_ON", "TENSORLEAK_EXITCODE",
             "TENSORLEAK_SUPPRESSIONS", "TENSORLEAK_SIGNAL", "TENSORLEAK_MARK_SIGNAL", "TENSORLEAK_QUIET",
             "TENSORLEAK_INTERVAL", "TENSORLEAK_GROWTH_MARKS", "TENSORLEAK_FOLLOW_FORK"]
EXTRA_BAD = {"TENSORLEAK_OUTPUT": ["%z", "trailing%", "%" * 3],
             "TENSORLEAK_DEPTH": ["129", "1e3", "12abc"],
             "TENSORLEAK_FAIL_ON": ["leak,,bogus", "leak;growth", "," * 300],
             "TENSORLEAK_EXITCODE": ["0", "256", "0x17"],
             "TENSORLEAK_SIGNAL": ["SIGKILL", "9", "SIGSEGV", "65", "RTMIN+99"],
             "TENSORLEAK_INTERVAL": ["nan", "inf", "-0.5", "1e400"],
             "TENSORLEAK_GROWTH_MARKS": ["1", "1000001"]}


class Failure(Exception):
    pass


class Skip(Exception):
    pass


def check_eq(got, want, what):
    if got != want:
        raise Failure(f"{what}: got {got!r}, want {want!r}")


def base_env(args):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TENSORLEAK_")}
    ld = env.get("LD_LIBRARY_PATH")
    env["LD_LIBRARY_PATH"] = args.sim_dir + (":" + ld if ld else "")
    return env


def run_sample(args, tmp, var=None, value=None):
    env = base_env(args)
    env["LD_PRELOAD"] = args.library
    env["TENSORLEAK_OUTPUT"] = os.path.join(tmp, "r.%p.json")
    env["TENSORLEAK_QUIET"] = "1"
    if var:
        env[var] = value
    return subprocess.run([args.sample, "2"], env=env, cwd=tmp, capture_output=True, text=True, timeout=30)


def every_variable_with_a_bad_value_warns_once_and_changes_nothing(args, tmp):
    with tempfile.TemporaryDirectory(dir=tmp) as d:
        base = run_sample(args, d)
    check_eq((base.returncode, base.stderr), (0, ""), "baseline status, stderr")
    failures = []
    for var in VARIABLES:
        for value in BAD_VALUES + EXTRA_BAD.get(var, []):
            if value in VALID.get(var, ()):
                continue
            with tempfile.TemporaryDirectory(dir=tmp) as d:
                p = run_sample(args, d, var, value)
                lines = [l for l in p.stderr.splitlines() if l.startswith("tensorleak:")]
                shown = value if len(value) < 50 else value[:20] + "..."
                if p.returncode != 0 or p.stdout != base.stdout:
                    failures.append(f"{var}={shown!r}: status {p.returncode}, stdout {p.stdout!r}")
                    continue
                if var == "TENSORLEAK_SUPPRESSIONS" and value == "":
                    want = 0  # empty = no suppressions file, as when unset
                else:
                    want = 1
                if len(lines) != want:
                    failures.append(f"{var}={shown!r}: {len(lines)} warning line(s), want {want}: {lines[:3]}")
                    continue
                # SUPPRESSIONS names the file it cannot read; the others the variable.
                if want and var not in lines[0] and not (var == "TENSORLEAK_SUPPRESSIONS" and value[:50] in lines[0]):
                    failures.append(f"{var}={shown!r}: warning does not name the variable: {lines[0][:200]!r}")
                if want and len(lines[0]) > 1100:
                    failures.append(f"{var}={shown!r}: warning line is {len(lines[0])} bytes long")
                # The default stayed in force: a report where it belongs.
                where = d if var == "TENSORLEAK_OUTPUT" else d
                reports = [f for f in os.listdir(where) if f.endswith(".json")]
                if len(reports) != 1:
                    failures.append(f"{var}={shown!r}: reports {sorted(os.listdir(where))}")
                elif var == "TENSORLEAK_OUTPUT" and not reports[0].startswith("tensorleak."):
                    failures.append(f"{var}={shown!r}: not the default report name: {reports}")
    if failures:
        raise Failure("\n  " + "\n  ".join(failures))


def an_unknown_variable_warns_once(args, tmp):
    env_var = "TENSORLEAK_DEPHT"
    p = run_sample(args, tmp, env_var, "4")
    lines = [l for l in p.stderr.splitlines() if l.startswith("tensorleak:")]
    check_eq(p.returncode, 0, "status")
    if len(lines) != 1 or env_var not in lines[0]:
        raise Failure(f"want one warning naming {env_var}, got {lines}")


def setuid_execution_ignores_every_tensorleak_variable(args, tmp):
    if os.geteuid() != 0:
        raise Skip("needs root to make a setuid copy owned by another user")
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        raise Skip("no user 'nobody'")
    os.chmod(tmp, 0o777)
    prog = os.path.join(tmp, "secure_prog")
    shutil.copy(args.secure_prog, prog)
    os.chown(prog, nobody.pw_uid, nobody.pw_gid)
    os.chmod(prog, 0o4755)
    evil = os.path.join(tmp, "evil")
    os.mkdir(evil)
    os.chmod(evil, 0o777)  # writable by the effective user: only the policy stops it
    env = base_env(args)
    env.update({"TENSORLEAK_OUTPUT": os.path.join(evil, "owned.json"), "TENSORLEAK_DEPTH": "7",
                "TENSORLEAK_QUIET": "1", "TENSORLEAK_SUPPRESSIONS": "/etc/shadow",
                "TENSORLEAK_EXITCODE": "99", "TENSORLEAK_FAIL_ON": "leak,growth,invalid-free,oom"})
    run = os.path.join(tmp, "cwd")
    os.mkdir(run)
    os.chmod(run, 0o777)
    p = subprocess.run([prog], env=env, cwd=run, capture_output=True, text=True, timeout=30)
    if p.stdout != f"uid 0 euid {nobody.pw_uid}\n":
        if "euid 0" in p.stdout:
            raise Skip(f"setuid bit not honoured here (nosuid mount?): {p.stdout!r}")
        raise Failure(f"stdout {p.stdout!r}, stderr {p.stderr!r}")
    check_eq(p.returncode, 0, "status")
    lines = [l for l in p.stderr.splitlines() if l.startswith("tensorleak:")]
    check_eq(os.listdir(evil), [], "files in the directory TENSORLEAK_OUTPUT named")
    reports = os.listdir(run)
    if len(reports) != 1 or not reports[0].startswith("tensorleak.") or not reports[0].endswith(".json"):
        raise Failure(f"want the default report name in the working directory, got {reports}")
    # TENSORLEAK_QUIET was ignored too: the snapshot names its file.
    check_eq(lines, ["tensorleak: secure execution: ignoring all TENSORLEAK_* variables",
                     f'tensorleak: snapshot "secure": 0 live allocation(s), 0 B; report: {reports[0]}'], "warnings")
    path = os.path.join(run, reports[0])
    check_eq(os.stat(path).st_uid, nobody.pw_uid, "report owner (the effective user)")
    check_eq(stat.S_IMODE(os.stat(path).st_mode), 0o600, "report mode")
    with open(path) as f:
        r = json.load(f)
    check_eq(r["reason"], "api", "reason")
    if r.get("depth", 32) != 32:
        raise Failure(f"TENSORLEAK_DEPTH was applied: depth {r.get('depth')}")


# --- CLI ------------------------------------------------------------------
# tests/cli covers truncated, empty, non-UTF-8, foreign, schema 2, arrays,
# deep nesting, NUL, big integers, wrong shapes and a huge valid report.
# These are the shapes it does not.

def cli(args, argv, cwd):
    return subprocess.run([args.tensorleak] + argv, cwd=cwd, capture_output=True, timeout=60)


def expect_exit_2(args, argv, cwd, what, failures, clean_text=False, max_lines=3):
    p = cli(args, argv, cwd)
    err = p.stderr.decode("utf-8", "replace")
    if p.returncode != 2 or p.stdout or not err.startswith("tensorleak: ") or err.count("\n") > max_lines:
        failures.append(f"{what} ({' '.join(argv[:1])}): exit {p.returncode}, stdout {p.stdout[:80]!r}, "
                        f"stderr {err[:200]!r}")
    elif clean_text and any(ch not in "\n\t" and (ord(ch) < 0x20 or ord(ch) == 0x7f) for ch in err):
        failures.append(f"{what}: control characters on stderr: {err[:200]!r}")


def cli_rejects_more_hostile_reports_with_exit_2(args, tmp):
    valid = open(args.leaky_json, "rb").read()
    shapes = {
        "bom.json": b"\xef\xbb\xbf" + valid,
        "utf16.json": valid.decode().encode("utf-16"),
        "binary.json": bytes(range(256)) * 64,
        "nul-bytes.json": valid[:40] + b"\0" * 100,
        "half.json": valid[: len(valid) // 2],
        "one-brace.json": b"{",
        "whitespace.json": b" \n\t " * 1000,
        "huge-string.json": b'{"tool":"tensorleak","schema":1,"summary":{},"host":"' + b"A" * (8 << 20),
        "deep-object.json": b'{"a":' * 100000,
        "escape-cut.json": b'{"tool":"tensorleak\\u12',
        "surrogate.json": b'{"tool":"tensorleak","schema":1,"host":"\\ud800","summary":{"leaked_bytes":"x"}}',
        "float-schema.json": b'{"tool":"tensorleak","schema":1.0,"summary":{}}',
        "dup-keys.json": b'{"tool":"x","tool":"tensorleak","schema":1,"schema":"1","summary":{}}',
        "control.json": b'{"tool":"\x1b[31mtensorleak","schema":1}',
    }
    for name, data in shapes.items():
        with open(os.path.join(tmp, name), "wb") as f:
            f.write(data)
    failures = []
    for name in sorted(shapes):
        for cmd in (["report"], ["report", "--format", "folded"], ["check"], ["merge", args.leaky_json],
                    ["diff", args.leaky_json]):
            expect_exit_2(args, cmd + [name], tmp, name, failures)
    expect_exit_2(args, ["report", "/dev/null"], tmp, "/dev/null", failures)
    p = subprocess.run([args.tensorleak, "report", "-"], input=b"", capture_output=True, timeout=30)
    if p.returncode != 2 or not p.stderr.startswith(b"tensorleak: "):
        failures.append(f"empty stdin: exit {p.returncode}, stderr {p.stderr[:200]!r}")
    if failures:
        raise Failure("\n  " + "\n  ".join(failures))


def cli_rejects_malformed_suppressions_with_exit_2(args, tmp):
    files = {
        "no-colon.supp": b"leak\n",
        "empty-pattern.supp": b"leak:\n",
        "blank-pattern.supp": b"leak:   \t\n",
        "unknown-kind.supp": b"# ok\nleak:fine\nleek:typo\n",
        "nul.supp": b"leak:a\0b\n",
        "binary.supp": bytes(range(1, 256)),
        "long-line.supp": b"leak:" + b"*" * (1 << 20) + b"\nbogus\n",
        "only-kind.supp": b":pattern\n",
        "nonutf8.supp": b"leak:caf\xe9\nx\xff:y\n",
    }
    for name, data in files.items():
        with open(os.path.join(tmp, name), "wb") as f:
            f.write(data)
    os.mkdir(os.path.join(tmp, "dir.supp"))
    failures = []
    for name in sorted(files) + ["dir.supp"]:
        expect_exit_2(args, ["check", args.leaky_json, "--suppressions", name], tmp, name, failures)
    if failures:
        raise Failure("\n  " + "\n  ".join(failures))


def cli_suppressions_errors_never_echo_control_characters(args, tmp):
    """A suppressions file with terminal escapes must not put them on the
    user's terminal (report_read.c sanitizes jansson's messages; the
    suppressions messages should too)."""
    name = "escapes.supp"
    with open(os.path.join(tmp, name), "wb") as f:
        f.write(b"\x1b]2;pwned\x07:x\nleak\x1b[2J\n" + bytes(range(1, 32)) + b":y\n")
    failures = []
    # Four malformed lines (the control bytes split into two lines): one
    # error each, no more.
    expect_exit_2(args, ["check", args.leaky_json, "--suppressions", name], tmp, name, failures, clean_text=True,
                  max_lines=4)
    if failures:
        raise Failure("\n  " + "\n  ".join(failures))


CASES = {f.__name__: f for f in (
    cli_suppressions_errors_never_echo_control_characters,
    every_variable_with_a_bad_value_warns_once_and_changes_nothing,
    an_unknown_variable_warns_once,
    setuid_execution_ignores_every_tensorleak_variable,
    cli_rejects_more_hostile_reports_with_exit_2,
    cli_rejects_malformed_suppressions_with_exit_2,
)}


def main():
    ap = argparse.ArgumentParser()
    for opt in ("--library", "--sim-dir", "--sample", "--secure-prog", "--tensorleak", "--leaky-json"):
        ap.add_argument(opt, required=True)
    ap.add_argument("case", choices=sorted(CASES))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="tl-security-") as tmp:
        try:
            CASES[args.case](args, tmp)
        except Skip as e:
            print(f"skip: {e}")
            return 77
        except (Failure, subprocess.TimeoutExpired, json.JSONDecodeError, KeyError) as e:
            print(f"FAIL {args.case}: {e}")
            return 1
    print(f"ok {args.case}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
