#!/bin/bash
# repeat_races.sh N [BUILD_DIR]: runs every test of suite 'race' (threads,
# signals, forks, dlopen and clock races: see the meson.build files under
# tests/) N times, two at a time, and prints how many runs of each test
# passed, were skipped and failed, then the totals.  A race that fails one run in a few
# hundred shows here before it shows in CI.  Exit status 0 when every run
# passed, 1 otherwise, 2 on a usage error.  BUILD_DIR defaults to ./build.
set -u
n=${1:-}
build=${2:-build}
case "$n" in
    '' | *[!0-9]* | 0) echo "usage: $0 N [BUILD_DIR]   (N >= 1 repetitions)" >&2; exit 2 ;;
esac
if [ ! -f "$build/build.ninja" ]; then
    echo "$0: $build is not a meson build directory" >&2
    exit 2
fi
ninja -C "$build" >/dev/null || { echo "$0: the build failed" >&2; exit 2; }
log="$build/meson-logs/testlog-races.json"
rm -f "$log"
echo "$(meson test -C "$build" --suite race --list 2>/dev/null | grep -c ' / ') race tests, $n times each, two at a time"
# meson builds what the tests need (the TSan target is not built by
# default); --logbase writes this run's log apart from the last ordinary
# `meson test`.
meson test -C "$build" --suite race --repeat "$n" --num-processes 2 \
    --logbase testlog-races >/dev/null 2>&1
if [ ! -s "$log" ]; then
    echo "$0: meson test wrote no log ($log)" >&2
    exit 2
fi
python3 - "$log" <<'PY'
import collections, json, sys
runs = collections.defaultdict(collections.Counter)
with open(sys.argv[1]) as f:
    for line in f:
        t = json.loads(line)
        runs[t["name"].split(" / ", 1)[-1]][t["result"].lower()] += 1
total = collections.Counter()
for name in sorted(runs):
    c = runs[name]
    total.update(c)
    bad = ", ".join(f"{k} {v}" for k, v in sorted(c.items()) if k not in ("ok", "skip"))
    print(f"{c['ok']:5d} pass {c['skip']:3d} skip {sum(c.values()) - c['ok'] - c['skip']:4d} fail  {name}"
          + (f"  ({bad})" if bad else ""))
failed = sum(total.values()) - total["ok"] - total["skip"]
print(f"{len(runs)} tests, {sum(total.values())} runs: {total['ok']} passed, {total['skip']} skipped, {failed} failed")
sys.exit(1 if failed else 0)
PY
