"""Functions made at run time and freed one after another: each new code
object (and its name) tends to land where the last one was freed, as
exec'd, FX or torch.compile code does.  Each g<k> keeps one 1 MiB block."""
import ctypes
import gc

rt = ctypes.CDLL("libcudart.so.13")
rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
kept = []

SOURCE = """
def g{k}():
    p = ctypes.c_void_p()
    rt.cudaMalloc(ctypes.byref(p), {size})
    kept.append(p)
"""

for k in range(40):
    scope = {"ctypes": ctypes, "rt": rt, "kept": kept}
    exec(compile(SOURCE.format(k=k, size=1 << 20), "<generated>", "exec"), scope)
    scope["g%d" % k]()
    del scope
    gc.collect()
print("kept", len(kept))
