"""A thread hands the library framework states over and over (each submit
frees the previous state) while the main thread forks; each child writes a
snapshot at once and exits.  Prints the number of children that did not
exit cleanly."""
import ctypes
import json
import os
import sys
import threading

lib = ctypes.CDLL(None)
lib.tensorleak_bridge_submit.argtypes = (ctypes.c_char_p,)
lib.tensorleak_snapshot.argtypes = (ctypes.c_char_p,)
# A state large enough that freeing it takes a while (3000 sites of 8 frames).
frames = [[{"function": "f%d_%d" % (i, k), "file": "app.py", "line": k, "python": True} for k in range(8)]
          for i in range(3000)]
pool = {"name": "torch cuda:0", "kind": "pytorch", "device": 0, "reserved_bytes": 1 << 30,
        "allocated_bytes": 1 << 29, "sites": [{"bytes": 4096, "count": 1, "frames": f} for f in frames]}
text = json.dumps({"time": 0, "pools": [pool], "errors": []}).encode()
lib.tensorleak_bridge_submit(text)
stop = False


def submitter():
    while not stop:
        lib.tensorleak_bridge_submit(text)  # ctypes.CDLL: without the GIL


threading.Thread(target=submitter, daemon=True).start()
bad = 0
for i in range(int(sys.argv[1])):
    pid = os.fork()
    if pid == 0:
        lib.tensorleak_snapshot(b"child")
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    bad += not (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0)
stop = True
print(bad)
