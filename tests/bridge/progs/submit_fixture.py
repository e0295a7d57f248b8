"""Hands the H200 recording of PyTorch's native allocator, translated by the
bridge's torch reader, straight to the library (tensorleak_bridge_submit from
this thread), then asks for a report: the library's side of the bridge on
real-shaped state (16 segments, 72 live blocks with Python frames)."""
import ctypes
import json
import os
import sys

sys.path.insert(0, os.path.join(os.environ["TL_SOURCE"], "python"))
from tensorleak.frameworks import torch as tl_torch  # noqa: E402

rt = ctypes.CDLL("libcudart.so.13")
rt.cudaMalloc.argtypes = (ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t)
p = ctypes.c_void_p()
rt.cudaMalloc(ctypes.byref(p), 1 << 20)  # the process uses CUDA: it reports

with open(sys.argv[1]) as f:
    d = json.load(f)
rows = tl_torch.pools_from({0: d["memory_stats"]}, d["snapshot"], "native", d["torch"])
lib = ctypes.CDLL(None)
lib.tensorleak_bridge_submit.argtypes = (ctypes.c_char_p,)
state = {"time": 0, "full": True, "pools": rows, "errors": []}
print(lib.tensorleak_bridge_submit(json.dumps(state).encode()))
print(lib.tensorleak_snapshot(b"fixture"))
