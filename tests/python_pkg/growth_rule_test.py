#!/usr/bin/env python3
"""The pytest plugin's growth rules (tensorleak/_growth_rule.py) held to the
cases of tests/unit/test_growth_series.c, which drive the library's own
(src/families/growth.c), and the package's sizes (tensorleak.parse_size) to what
src/base/options.c tl_parse_size accepts.  Exit 0 pass, 1 fail."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

import tensorleak  # noqa: E402
from tensorleak import _growth_rule as rule  # noqa: E402

MiB = 1 << 20
K = 3
failures = []


def check(condition, what):
    print("%s: %s" % ("ok" if condition else "FAIL", what))
    if not condition:
        failures.append(what)


def feed(values):
    """Values as observations 1..n: (first observation growing or 0, the
    verdict at the last)."""
    s = rule.RecordSeries()
    first, verdict = 0, None
    for i, v in enumerate(values, 1):
        s.observe(i, v)
        verdict = s.growing(i, K)
        if verdict and not first:
            first = i
    return first, verdict


def one_segment_per_request_is_flagged_at_the_third_step():
    first, v = feed([200 * MiB + 20 * MiB * i for i in range(10)])
    check(first == 4 and v and (v.bytes_per_mark, v.marks, v.from_bytes, v.to_bytes)
          == (20 * MiB, 9, 200 * MiB, 380 * MiB), "one segment per request: flagged at 4, %s" % v)


def a_segment_every_few_requests_with_flat_steps_stays_flagged():
    steps, x, values = [0, 1, 0, 1, 1, 0, 0, 1, 0, 1, 0, 0, 1], 100 * MiB, []
    for step in steps:
        x += step * 20 * MiB
        values.append(x)
    s, first, unflagged = rule.RecordSeries(), 0, False
    for i, v in enumerate(values, 1):
        s.observe(i, v)
        g = s.growing(i, K)
        first = first or (i if g else 0)
        unflagged |= bool(first) and g is None
    v = s.growing(13, K)
    check(first == 5 and not unflagged and v and (v.bytes_per_mark, v.marks) == (120 * MiB // 12, 12),
          "a segment every few requests: flagged from 5 on, %s" % v)


def one_segment_every_third_request_is_flagged():
    first, v = feed([64 * MiB + 20 * MiB * (i // 3) for i in range(16)])
    check(first == 10 and v is not None, "a segment every third request: flagged at 10 (%d)" % first)


def warm_up_then_plateau_is_not_growth_once_the_plateau_outlasts_a_step():
    s, flagged = rule.RecordSeries(), []
    for i in range(50):
        s.observe(i + 1, 100 * MiB + 30 * MiB * i if i < 4 else 190 * MiB)
        if i + 1 >= 6 and s.growing(i + 1, K):
            flagged.append(i + 1)
    check(not flagged, "warm-up then plateau: never flagged on the plateau (%s)" % flagged)


def a_warm_up_of_two_steps_never_fires_and_small_steps_are_noise():
    check(feed([100 * MiB + 30 * MiB * i if i < 3 else 160 * MiB for i in range(50)])[0] == 0,
          "a warm-up of two steps never fires")
    check(feed([100 * MiB + 4096 * i for i in range(50)])[0] == 0, "steps under a mebibyte are noise")


def figures_repeated_within_one_mark_are_one_observation():
    s = rule.RecordSeries()
    for i in range(4):
        s.observe(1, 100 * MiB + 20 * MiB * i)
    check(s.growing(1, K) is None, "four rising figures at one mark are no growth")
    s, first, v = rule.RecordSeries(), 0, None
    for i in range(10):
        s.observe(i + 1, 200 * MiB + 20 * MiB * i - 10 * MiB)
        s.observe(i + 1, 200 * MiB + 20 * MiB * i)
        v = s.growing(i + 1, K)
        first = first or (i + 1 if v else 0)
    check(first == 4 and v and (v.bytes_per_mark, v.marks, v.from_bytes) == (20 * MiB, 9, 200 * MiB),
          "steady growth seen twice per mark is flagged as if seen once: %d, %s" % (first, v))


def a_call_site_grows_when_it_rose_at_each_of_the_last_k_observations():
    site = rule.CallSiteStreak(4 * MiB)  # what it held before the first run is no rise
    verdicts = []
    for v in (6, 8, 10, 10, 11, 12, 13):
        site.observe(v * MiB)
        g = site.growing(K)
        verdicts.append(g and (g.bytes_per_mark, g.marks))
    check(verdicts == [None, None, (2 * MiB, 3), None, None, None, (MiB, 3)],
          "a call site: growing at its third rise in a row, reset by a flat run (%s)" % verdicts)


def growth_marks_are_read_as_the_library_reads_them():
    cases = {"": 3, "5": 5, "2": 2, "1": 3, "1000001": 3, "+4": 3, " 4": 3, "4x": 3, "1000000": 1000000}
    got = {v: rule.growth_marks({"TENSORLEAK_GROWTH_MARKS": v}) for v in cases}
    check(got == cases, "TENSORLEAK_GROWTH_MARKS as apply_growth_marks reads it: %s" % got)


def sizes_parse_as_the_library_reads_them():
    good = {"1048576": 1 << 20, "1M": 1 << 20, "1m": 1 << 20, "1Mi": 1 << 20, "1MiB": 1 << 20, "1MB": 1 << 20,
            "4GB": 4 << 30, "2T": 2 << 40, "1 MiB": 1 << 20, "0": 0, 7: 7}
    bad = ["1.5 GB", "512B", "", " 1M", "1M ", "1 XB", "-1", "1Bi", "1KiBB", "18446744073709551616", "16777216T",
           True, -1, "0x10"]
    got = {v: tensorleak.parse_size(v) for v in good}
    check(got == good, "sizes the library accepts: %s" % got)
    accepted = []
    for v in bad:
        try:
            accepted.append((v, tensorleak.parse_size(v)))
        except ValueError:
            pass
    check(not accepted, "sizes the library refuses are refused: %s" % accepted)
    check([tensorleak.format_size(n) for n in (512, 1536, 3 << 19, 5 << 40)] == ["512 B", "1.5 KiB", "1.5 MiB",
                                                                              "5.0 TiB"], "sizes as reports print them")


for case in (one_segment_per_request_is_flagged_at_the_third_step,
             a_segment_every_few_requests_with_flat_steps_stays_flagged,
             one_segment_every_third_request_is_flagged,
             warm_up_then_plateau_is_not_growth_once_the_plateau_outlasts_a_step,
             a_warm_up_of_two_steps_never_fires_and_small_steps_are_noise,
             figures_repeated_within_one_mark_are_one_observation,
             a_call_site_grows_when_it_rose_at_each_of_the_last_k_observations,
             growth_marks_are_read_as_the_library_reads_them,
             sizes_parse_as_the_library_reads_them):
    case()
print("%d check(s) failed" % len(failures) if failures else "all checks passed")
sys.exit(1 if failures else 0)
