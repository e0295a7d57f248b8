"""Run by CPython 3.13 under libtensorleak.so: changes one word of the
debug offsets at the start of _PyRuntime (as a build whose _Py_DebugOffsets
is laid out otherwise than 3.13.0's would show them), then leaks 1 MiB from
a named function.  test_pyframes.py checks that the offsets are refused
with one note rather than read.  Usage: debug_offsets_app.py WORD VALUE
(WORD -1: nothing changed)."""
import ctypes
import os
import sys

CUDART = os.environ.get("TL_CUDART", "libcudart.so.13")


def leak(rt):
    ptr = ctypes.c_void_p()
    rt.cudaMalloc(ctypes.byref(ptr), ctypes.c_size_t(1 << 20))  # OFFSETS-ALLOC-LINE


word, value = int(sys.argv[1]), int(sys.argv[2])
if word >= 0:
    # Before the first allocation: the interpreter is looked for then.
    (ctypes.c_uint64 * 80).in_dll(ctypes.pythonapi, "_PyRuntime")[word] = value
leak(ctypes.CDLL(CUDART))
