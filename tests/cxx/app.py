"""CPython loading a C++ library through ctypes after the preload (as it
loads a C++ extension), keeping one device allocation.  argv: plugin path,
the simulated runtime's soname."""
import ctypes
import sys

cudart = ctypes.CDLL(sys.argv[2])
dev = ctypes.c_void_p()
if cudart.cudaMalloc(ctypes.byref(dev), ctypes.c_size_t(1 << 20)) != 0:
    sys.exit(3)
plugin = ctypes.CDLL(sys.argv[1])
failed = 0
for name in ("cxx_plain_throw", "cxx_call_once_throw", "cxx_rethrow_across_libraries",
             "cxx_pthread_exit_runs_destructors", "cxx_pthread_cancel_runs_destructors"):
    ok = getattr(plugin, name)() == 1
    print(f"{name}: {'ok' if ok else 'FAILED'}", flush=True)
    failed += not ok
sys.exit(1 if failed else 0)
