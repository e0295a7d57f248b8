"""torch_server.py N SNAPSHOT READY -- a server on the stand-in torch
(tests/bridge/fake): each request keeps a 1 MiB tensor and frees 3 MiB of
scratch, then marks; after N, a snapshot to SNAPSHOT, READY is created, and
it waits (at most 120 s) until stdin closes."""
import ctypes
import select
import sys
import time

import torch

MiB = 1 << 20
n, snapshot, ready = int(sys.argv[1]), sys.argv[2], sys.argv[3]
lib = ctypes.CDLL(None)
kept = []
for i in range(n):
    scratch = torch.empty(3 * MiB)
    kept.append(torch.empty(MiB))
    del scratch
    lib.tensorleak_mark(b"request")
if lib.tensorleak_snapshot_to(b"ready", snapshot.encode()) != 0:
    sys.exit(3)
open(ready, "w").close()
end = time.monotonic() + 120
while time.monotonic() < end:
    r, _, _ = select.select([sys.stdin], [], [], 1.0)
    if r and not sys.stdin.buffer.read1(64):
        break
