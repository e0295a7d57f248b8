"""slow_teardown.py REQUESTS -- a serving loop on the fake torch whose
teardown is slow: after Python's atexit handlers have run (the bridge has
closed), the interpreter's finalization clears the module's globals and an
object's __del__ takes two seconds.  Each request keeps 21 MiB and waits 0.3 s.
Exits 0."""
import sys
import time

import torch

MiB = 1 << 20
kept = []


class SlowTeardown:
    # Runs when finalization clears this module's globals, after atexit.
    def __del__(self, sleep=time.sleep):
        sleep(2.0)


keeper = SlowTeardown()
for _ in range(int(sys.argv[1])):
    kept.append(torch.empty(21 * MiB))
    time.sleep(0.3)
