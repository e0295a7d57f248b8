"""The library's growth rules (src/families/growth.c), for observations the pytest
plugin makes itself: one per run of a test instead of one per mark.

A call site grows when its live bytes rose at each of the last K
observations (growth.c: mark_site, collect_site).  A series (a pool's
reserve, an owner class's reserve in the library) grows when it set a new
high, by at least SERIES_MIN_STEP over the previous high, K times, and has
been flat since its last high for no longer than the longest gap between
those K highs (tl_series_observe, tl_series_growing): a cache grows in
steps, so the test is on records, and a warm-up that plateaus stops setting
them.  K is TENSORLEAK_GROWTH_MARKS, read as the library reads it.

These are ports, line for line, of those functions; tests/python_pkg's
growth_rule_test.py holds them to the cases of tests/unit/test_growth_series.c.
"""

import os
import re

# src/base/options.c: the default of tl_opt.growth_marks and the range that
# apply_growth_marks accepts.
DEFAULT_GROWTH_MARKS = 3
_GROWTH_MARKS_RANGE = (2, 1000000)

# src/model/model.h: TL_SERIES_MIN_STEP (a new high counts from 1 MiB up) and
# TL_SERIES_KEEP (the highs a series remembers).
SERIES_MIN_STEP = 1 << 20
SERIES_KEEP = 64


def growth_marks(environ=None):
    """K: TENSORLEAK_GROWTH_MARKS when the library would accept it
    (tl_parse_int: optional '-', digits only, within 2..1000000), else the
    default, as the library falls back to it (it warns about the value
    itself)."""
    value = (os.environ if environ is None else environ).get("TENSORLEAK_GROWTH_MARKS", "")
    if re.fullmatch(r"-?[0-9]+", value):
        n = int(value)
        if _GROWTH_MARKS_RANGE[0] <= n <= _GROWTH_MARKS_RANGE[1]:
            return n
    return DEFAULT_GROWTH_MARKS


def _c_quotient(a, b):
    """a / b as C divides integers: truncated toward zero."""
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


class Verdict:
    """Growth found: bytes added per observation over `marks` observations."""

    def __init__(self, bytes_per_mark, marks, from_bytes, to_bytes):
        self.bytes_per_mark = bytes_per_mark
        self.marks = marks
        self.from_bytes = from_bytes
        self.to_bytes = to_bytes

    def __repr__(self):
        return "Verdict(%d per mark over %d, %d -> %d)" % (self.bytes_per_mark, self.marks, self.from_bytes,
                                                           self.to_bytes)


class CallSiteStreak:
    """A call site's live bytes, observation by observation (growth.c:
    mark_site, collect_site), from `start_bytes` at the observation before
    the first (a site new since then starts at 0, as a call site's
    mark_bytes does)."""

    def __init__(self, start_bytes=0):
        self.last = start_bytes
        self.streak = 0
        self.streak_from = 0

    def observe(self, value):
        if value > self.last:
            if self.streak == 0:
                self.streak_from = self.last
            self.streak += 1
        else:
            self.streak = 0
        self.last = value

    def growing(self, k):
        """A Verdict when the bytes rose at each of the last `k` or more
        observations, else None."""
        if self.streak < k:
            return None
        return Verdict(_c_quotient(self.last - self.streak_from, self.streak), self.streak, self.streak_from, self.last)


class RecordSeries:
    """A series of figures, one per observation numbered `seq` (growth.c:
    tl_series_observe, tl_series_growing).  It starts at its first
    observation, which is no high."""

    def __init__(self, min_step=SERIES_MIN_STEP):
        self.min_step = min_step
        self.observed = 0
        self.first_mark = self.first_value = self.max = self.last = self.last_mark = 0
        self.rec_mark = []    # the observation of each new high
        self.rec_before = []  # the high it beat

    def observe(self, seq, value):
        if self.observed == 0:
            self.first_mark = seq
            self.first_value = self.max = value
        elif value >= self.max + self.min_step:
            # A second figure at the same observation is the same
            # observation: no second high at one mark.
            if seq == self.first_mark:
                self.first_value = self.max = self.last = value
                return
            if self.rec_mark and self.rec_mark[-1] == seq:
                self.max = self.last = value
                return
            self.rec_mark.append(seq)
            self.rec_before.append(self.max)
            self.max = value
        self.last = value
        self.last_mark = seq
        self.observed += 1

    def growing(self, now, k):
        """A Verdict when the series is growing at observation `now`, else
        None."""
        nrec = len(self.rec_mark)
        if k < 1 or k >= SERIES_KEEP or nrec < k:
            return None
        first, last = nrec - k, nrec - 1
        start = self.rec_mark[first - 1] if first > 0 else self.first_mark
        prev, maxgap = start, 0
        for i in range(first, last + 1):
            maxgap = max(maxgap, self.rec_mark[i] - prev)
            prev = self.rec_mark[i]
        last_high = self.rec_mark[last]
        # Quiet for as long as its longest step took: still growing; longer:
        # a plateau.
        if now < last_high or now - last_high > maxgap:
            return None
        # The run reaches back over every earlier high at the same pace (the
        # library remembers SERIES_KEEP highs).
        while first > 0 and nrec - first < SERIES_KEEP - 1:
            before = self.rec_mark[first - 2] if first > 1 else self.first_mark
            if self.rec_mark[first - 1] - before > maxgap:
                break
            first -= 1
            start = before
        if last_high == start:
            return None
        before = self.rec_before[first]
        return Verdict(_c_quotient(self.max - before, last_high - start), now - start, before, self.max)
