"""Hands the library a framework state whose fields a report cannot hold as
they are (a negative block count, a version that is a number, blocks out of
order, a negative site size, an error that is not a line), then asks for a
report: what the report's tables refuse is left out, the rest of the pool
and of the bridge's state is kept."""
import ctypes
import json

rt = ctypes.CDLL("libcudart.so.13")
rt.cudaMalloc.argtypes = (ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t)
p = ctypes.c_void_p()
rt.cudaMalloc(ctypes.byref(p), 1 << 20)  # the process uses CUDA: it reports

pool = {"name": "cupy pinned", "kind": "cupy_pinned", "device": -1, "reserved_bytes": None,
        "allocated_bytes": None, "free_bytes": None, "largest_free_block": None, "segments": 0,
        "free_blocks": -3, "framework": {"name": "cupy", "version": 13, "mode": None},
        "layout": [{"base": 4096, "bytes": 1024, "blocks": [{"offset": 512, "bytes": 64}, {"offset": 0, "bytes": 64}]}],
        "sites": [{"bytes": -1, "count": 1, "frames": [{"function": "f", "file": "a.py", "line": 3}]}]}
state = {"time": 0, "full": True, "pools": [pool], "errors": ["cupy: one line", 7]}
lib = ctypes.CDLL(None)
lib.tensorleak_bridge_submit.argtypes = (ctypes.c_char_p,)
print(lib.tensorleak_bridge_submit(json.dumps(state).encode()))
print(lib.tensorleak_snapshot(b"odd"))
