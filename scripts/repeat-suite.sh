#!/bin/bash
# repeat-suite.sh [-b BUILD_DIR] [-j JOBS] [-t SECONDS] N SUITE...
#
# Runs the tests of the given meson suites N times over (one `meson test`
# per iteration, JOBS at a time, default 2) and prints, as it goes, each
# iteration that had a failure, the tests that failed in it and the end of
# their output; at the end,
# how many runs of each test passed, were skipped and failed.  A test that
# fails one run in fifty shows here before it shows in CI: run it before
# you stop for the day on the suites your change touches.
#
# -t SECONDS: a budget.  An iteration starts only when, taking as long as
# the longest one so far, it would end within SECONDS of the first one's
# start (the first always runs); the summary says how many ran.  CI uses it
# to bound the time repetition adds (.ci/run).
#
# Exit status: 0 when every run passed (or was skipped), 1 when any failed,
# 2 on a usage error or when meson wrote no log.  BUILD_DIR defaults to
# ./build; meson builds what the tests need (a target not built by default,
# such as the ThreadSanitizer one, is built on the first iteration).
set -u
usage() {
    echo "usage: $0 [-b BUILD_DIR] [-j JOBS] [-t SECONDS] N SUITE..." >&2
    exit 2
}
build=build jobs=2 budget=
while getopts "b:j:t:" opt; do
    case "$opt" in
        b) build=$OPTARG ;;
        j) jobs=$OPTARG ;;
        t) budget=$OPTARG ;;
        *) usage ;;
    esac
done
shift $((OPTIND - 1))
n=${1:-}
[ $# -ge 2 ] || usage
shift
case "$n$jobs${budget:-0}" in *[!0-9]*) usage ;; esac
[ "$n" -ge 1 ] && [ "$jobs" -ge 1 ] || usage
if [ ! -f "$build/build.ninja" ]; then
    echo "$0: $build is not a meson build directory" >&2
    exit 2
fi
suites=()
for s in "$@"; do suites+=(--suite "$s"); done
count=$(meson test -C "$build" "${suites[@]}" --list 2>/dev/null | grep -c ' / ')
if [ "$count" -eq 0 ]; then
    echo "$0: no test in suite(s) $*" >&2
    exit 2
fi
logs="$build/meson-logs"
tag="repeat-$(echo "$*" | tr ' ' '-')"
rm -f "$logs/testlog-$tag"-*.json
echo "$count tests of suite(s) $*, up to $n times each, $jobs at a time${budget:+, within a budget of ${budget} s}"
start=$SECONDS ran=0 failed_iterations=0 longest=0
for i in $(seq "$n"); do
    if [ -n "$budget" ] && [ "$i" -gt 1 ] && [ $((SECONDS - start + longest)) -gt "$budget" ]; then
        echo "budget of ${budget} s: $ran of $n iterations ran (the longest took ${longest} s)"
        break
    fi
    log="$logs/testlog-$tag-$i.json"
    began=$SECONDS
    meson test -C "$build" "${suites[@]}" --num-processes "$jobs" --logbase "testlog-$tag-$i" >/dev/null 2>&1
    [ $((SECONDS - began)) -gt "$longest" ] && longest=$((SECONDS - began))
    if [ ! -s "$log" ]; then
        echo "$0: meson test wrote no log ($log)" >&2
        exit 2
    fi
    ran=$i
    bad=$(python3 - "$log" <<'PY'
import json, sys
with open(sys.argv[1]) as f:
    for line in f:
        t = json.loads(line)
        if t["result"] not in ("OK", "SKIP", "EXPECTEDFAIL"):
            print(f"  {t['result']}: {t['name'].split(' / ', 1)[-1]}")
            # Its output's end, so that a CI log says why.
            for line in (t.get("stdout") or "").splitlines()[-30:]:
                print("    | " + line)
PY
)
    if [ -n "$bad" ]; then
        failed_iterations=$((failed_iterations + 1))
        echo "iteration $i of $n failed ($((SECONDS - start)) s in; log $log):"
        echo "$bad"
    fi
done
echo "$ran iterations in $((SECONDS - start)) s, $failed_iterations with a failure"
python3 - "$logs/testlog-$tag"-*.json <<'PY'
import collections, json, sys
runs = collections.defaultdict(collections.Counter)
for path in sys.argv[1:]:
    with open(path) as f:
        for line in f:
            t = json.loads(line)
            runs[t["name"].split(" / ", 1)[-1]][t["result"].lower()] += 1
passing = ("ok", "skip", "expectedfail")
total = collections.Counter()
for name in sorted(runs):
    c = runs[name]
    total.update(c)
    bad = ", ".join(f"{k} {v}" for k, v in sorted(c.items()) if k not in passing)
    nbad = sum(v for k, v in c.items() if k not in passing)
    print(f"{c['ok'] + c['expectedfail']:5d} pass {c['skip']:3d} skip {nbad:4d} fail  {name}"
          + (f"  ({bad})" if bad else ""))
failed = sum(v for k, v in total.items() if k not in passing)
print(f"{len(runs)} tests, {sum(total.values())} runs: {total['ok'] + total['expectedfail']} passed, "
      f"{total['skip']} skipped, {failed} failed")
sys.exit(1 if failed else 0)
PY
