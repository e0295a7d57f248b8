#!/bin/bash
# repeat_races.sh N [BUILD_DIR]: runs every test of suite 'race' (threads,
# signals, forks, dlopen and clock races: see the meson.build files under
# tests/) N times, two at a time, and prints how many runs of each test
# passed, were skipped and failed, then the totals.  A race that fails one
# run in a few hundred shows here before it shows in CI.  Exit status 0 when every run
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
logs="$build/meson-logs"
rm -f "$logs"/testlog-races-*.json
echo "$(meson test -C "$build" --suite race --list 2>/dev/null | grep -c ' / ') race tests, $n times each, two at a time"
# One `meson test` per repetition: with --repeat meson stops at the first
# repetition that fails, and the counts are the point here.  meson builds
# what the tests need (the TSan target is not built by default); --logbase
# keeps each repetition's log apart from the last ordinary `meson test`.
for i in $(seq "$n"); do
    meson test -C "$build" --suite race --num-processes 2 --logbase "testlog-races-$i" >/dev/null 2>&1
    if [ ! -s "$logs/testlog-races-$i.json" ]; then
        echo "$0: meson test wrote no log ($logs/testlog-races-$i.json)" >&2
        exit 2
    fi
done
python3 - "$logs"/testlog-races-*.json <<'PY'
import collections, json, sys
runs = collections.defaultdict(collections.Counter)
for path in sys.argv[1:]:
    with open(path) as f:
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
