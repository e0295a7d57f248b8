"""read_begun_then_gil_held.py -- a state read begun before the program takes
the GIL.  A thread of the program announces a read as the bridge thread does
just before it reads (tensorleak_bridge_reading) and never submits; then the
main thread asks for a report from a C call that keeps the GIL
(ctypes.PyDLL).  No Python runs until that call returns, so the read cannot
go on: the report waits its 2 s bound for an answer, not the 30 s a read at
work gets.  Prints "done"."""
import ctypes
import threading

import torch

torch.empty(1 << 20)  # the first CUDA call schedules the bridge's start
began = threading.Event()


def announce_a_read():
    ctypes.CDLL(None).tensorleak_bridge_reading()
    began.set()


t = threading.Thread(target=announce_a_read)
t.start()
began.wait()
t.join()
ctypes.PyDLL(None).tensorleak_snapshot(b"gil held")
print("done")
