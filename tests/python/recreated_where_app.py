"""Code objects made and freed one after another, so each new one may land
at the last one's address with the last one's name: from two files whose
names differ only at their ends, and from one source shifted down by two
lines.  Run by test_pyframes.py under libtensorleak.so on the simulated
runtime; each version keeps (leaks) its allocations.

    recreated_where_app.py files|lines
"""
import ctypes
import gc
import os
import sys

rt = ctypes.CDLL(os.environ.get("TL_CUDART", "libcudart.so.13"))
kept = []
SRC = "def forward(size):\n    p = ctypes.c_void_p()\n    rt.cudaMalloc(ctypes.byref(p), size)\n    kept.append(p)\n"


def main():
    mode = sys.argv[1]
    for i in range(40):
        if mode == "files":
            # Same length, same first eight bytes: only the ends differ.
            code = compile(SRC, "/tmp/generated_module_%s.py" % "ab"[i % 2], "exec")
        else:
            code = compile(SRC if i % 2 == 0 else "\n\n" + SRC, "<generated>", "exec")
        scope = {"ctypes": ctypes, "rt": rt, "kept": kept}
        exec(code, scope)
        scope["forward"]((1 + i % 2) << 20)
        del scope, code
        gc.collect()


if __name__ == "__main__":
    main()
