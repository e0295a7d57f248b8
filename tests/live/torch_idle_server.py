"""torch_idle_server.py ACKS -- a server on the stand-in torch
(tests/bridge/fake) that never marks: each line on stdin is a number of MiB
it allocates in one tensor (kept) or, negative, frees the most recent
tensor; after each it appends the time and its allocated bytes to ACKS.  It
waits in stdin between requests, the GIL let go, as a server waits for its
next request; EOF ends it."""
import os
import sys
import time

import torch

MiB = 1 << 20
acks = sys.argv[1]
kept = []
torch.empty(MiB)  # the first CUDA call starts the bridge; nothing kept
with open(acks, "a") as f:
    f.write("%r %d\n" % (time.time(), 0))
for line in sys.stdin:
    n = int(line)
    if n > 0:
        kept.append(torch.empty(n * MiB))
    elif kept:
        kept.pop()
    with open(acks, "a") as f:
        f.write("%r %d\n" % (time.time(), sum(t.nbytes for t in kept)))
        f.flush()
        os.fsync(f.fileno())
