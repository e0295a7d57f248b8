#!/usr/bin/env python3
"""Runs one libFuzzer target for a bounded time on a scratch copy of its seed
corpus (the checked-in seeds are never written to).

    run_fuzzer.py FUZZER SEED_DIR      or      run_fuzzer.py --skip REASON

Seconds: TENSORLEAK_FUZZ_SECONDS (default 10; CI sets 30).  A crash leaves
its reproducer in TENSORLEAK_FUZZ_ARTIFACTS (default: the working directory).
Exit 0 pass, 1 a finding, 77 skip.
"""
import os
import shutil
import subprocess
import sys
import tempfile


def main():
    if sys.argv[1] == "--skip":
        print("skip:", " ".join(sys.argv[2:]))
        return 77
    fuzzer, seeds = sys.argv[1], sys.argv[2]
    seconds = os.environ.get("TENSORLEAK_FUZZ_SECONDS", "10")
    if not seconds.isdigit() or int(seconds) < 1:
        print(f"bad TENSORLEAK_FUZZ_SECONDS={seconds!r}")
        return 1
    artifacts = os.environ.get("TENSORLEAK_FUZZ_ARTIFACTS", os.getcwd())
    with tempfile.TemporaryDirectory(prefix="tl-fuzz-") as corpus:
        for name in os.listdir(seeds):
            shutil.copy(os.path.join(seeds, name), corpus)
        cmd = [fuzzer, f"-max_total_time={seconds}", "-timeout=10", "-rss_limit_mb=2048",
               "-print_final_stats=1", f"-artifact_prefix={artifacts.rstrip('/')}/", corpus]
        # The targets' own warnings (tensorleak: ...) would flood the log.
        env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=0",
                   UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1")
        p = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                           errors="replace", timeout=int(seconds) + 120)
        lines = [l for l in p.stderr.splitlines() if not l.startswith("tensorleak:")]
        print("\n".join(lines[-60:]))
        return 0 if p.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
