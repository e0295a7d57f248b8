"""A Python program that attaches tensorleak to itself (attach_test.py's
python case): it allocates on the simulated driver through ctypes, loads
libtensorleak.so, plays the injector's part (prepare, write the plan's bytes
into its own code, commit), then leaks from leak_here() and exits.

    python3 attach_self.py LIBRARY SETTINGS
"""
import ctypes
import sys

PROT_READ, PROT_WRITE, PROT_EXEC = 1, 2, 4


class Patch(ctypes.Structure):
    _fields_ = [("address", ctypes.c_uint64), ("length", ctypes.c_uint32),
                ("original", ctypes.c_uint8 * 32), ("replacement", ctypes.c_uint8 * 32)]


class Plan(ctypes.Structure):
    _fields_ = [("abi", ctypes.c_uint32), ("count", ctypes.c_uint32), ("patches", ctypes.POINTER(Patch))]


libc = ctypes.CDLL(None, use_errno=True)
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
PAGE = 4096


def write_code(address, data):
    lo = address & ~(PAGE - 1)
    hi = (address + len(data) + PAGE - 1) & ~(PAGE - 1)
    if libc.mprotect(lo, hi - lo, PROT_READ | PROT_WRITE | PROT_EXEC) != 0:
        sys.exit("attach_self.py: mprotect failed")
    ctypes.memmove(address, bytes(data), len(data))
    libc.mprotect(lo, hi - lo, PROT_READ | PROT_EXEC)


cuda = ctypes.CDLL("libcuda.so.1")
cuda.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
ctx = ctypes.c_void_p()
if cuda.cuInit(0) != 0 or cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) != 0 or cuda.cuCtxSetCurrent(ctx) != 0:
    sys.exit("attach_self.py: no context")


def alloc(n):
    p = ctypes.c_uint64()
    if cuda.cuMemAlloc_v2(ctypes.byref(p), n) != 0:
        sys.exit("attach_self.py: cuMemAlloc_v2 failed")
    return p.value


alloc(2048)  # before the attach

lib = ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_LOCAL)
lib.tensorleak_attach_prepare.restype = ctypes.POINTER(Plan)
lib.tensorleak_attach_prepare.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
err = ctypes.create_string_buffer(256)
plan = lib.tensorleak_attach_prepare(sys.argv[2].replace(";", "\n").encode(), err, 256)
if not plan:
    sys.exit("attach_self.py: prepare: " + err.value.decode())
for i in range(plan.contents.count):
    p = plan.contents.patches[i]
    write_code(p.address, p.replacement[:p.length])
if lib.tensorleak_attach_commit(err, 256) != 0:
    sys.exit("attach_self.py: commit: " + err.value.decode())


def leak_here():
    return alloc(1000)


kept = [leak_here() for _ in range(3)]
print("ok")
