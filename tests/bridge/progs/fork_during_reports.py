"""Forks FORKS children in turn while the watcher thread writes interval
reports and live updates, each of which asks the bridge for the frameworks'
state, and prints one JSON line: the forks, how many children hung (killed
after 10 s), and the longest any fork() took in the parent, in seconds.

os.fork() holds the GIL, so the bridge cannot answer while a fork waits for
the watcher: the fork must not wait for that answer.  The first forks follow
the first CUDA call at once, while the bridge thread reads its first state
(and imports the frameworks' readers); later ones follow about 20 ms of
computing in Python, which lets go of the GIL only at the interpreter's
switch interval, as a busy server does.  Each child exits at once: what is
tested is that it gets there."""
import ctypes
import json
import os
import sys
import time

import tensorleak  # noqa: F401  (starts the bridge before the first fork)

forks = int(sys.argv[1])
rt = ctypes.CDLL("libcudart.so.13")
rt.cudaMalloc.argtypes = (ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t)
p = ctypes.c_void_p()
rt.cudaMalloc(ctypes.byref(p), 1 << 20)


def wait_bounded(pid, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.001)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return None


longest, hung, failed = 0.0, 0, 0
for i in range(forks):
    if i >= 10:
        until = time.monotonic() + 0.02
        while time.monotonic() < until:
            sum(range(1000))
    t0 = time.monotonic()
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    longest = max(longest, time.monotonic() - t0)
    code = wait_bounded(pid, 10)
    hung += code is None
    failed += code not in (None, 0)
print(json.dumps({"forks": forks, "hung": hung, "failed": failed, "longest_fork_s": round(longest, 3)}), flush=True)
