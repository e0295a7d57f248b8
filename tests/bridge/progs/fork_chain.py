"""Forks a chain of GENERATIONS processes (each child forks the next) after
the bridge started, and prints one JSON line per process: its generation and
the number of bridge threads it runs.  With LOCKED, each fork happens while
the bridge's activation lock is held, as when another thread is starting the
bridge at that moment.  Every process asks for a snapshot, which waits for its
own bridge's answer."""
import ctypes
import json
import os
import sys
import threading

import tensorleak
from tensorleak import bridge

generations = int(sys.argv[1])
locked = len(sys.argv) > 2 and sys.argv[2] == "locked"

rt = ctypes.CDLL("libcudart.so.13")
rt.cudaMalloc.argtypes = (ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t)
p = ctypes.c_void_p()
rt.cudaMalloc(ctypes.byref(p), 1 << 20)

for generation in range(generations + 1):
    tensorleak.snapshot("generation %d" % generation)
    threads = sum(1 for t in threading.enumerate() if t.name == "tensorleak-bridge" and t.is_alive())
    print(json.dumps({"generation": generation, "bridge_threads": threads, "active": bridge.active()}), flush=True)
    if generation == generations:
        break
    if locked:
        with bridge._lock:
            pid = os.fork()
    else:
        pid = os.fork()
    if pid:
        _, status = os.waitpid(pid, 0)
        sys.exit(os.waitstatus_to_exitcode(status))
