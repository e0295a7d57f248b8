#!/bin/bash
# repeat_races.sh N [BUILD_DIR]: runs every test of suite 'race' (threads,
# signals, forks, dlopen and clock races: see the meson.build files under
# tests/) N times, two at a time, with per-test counts at the end:
# scripts/repeat-suite.sh N race (which runs any suite).
case "${1:-}" in
    '' | *[!0-9]* | 0) echo "usage: $0 N [BUILD_DIR]   (N >= 1 repetitions)" >&2; exit 2 ;;
esac
exec "$(dirname "$0")/../../scripts/repeat-suite.sh" -b "${2:-build}" "$1" race
