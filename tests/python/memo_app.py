"""Allocations whose stack differs from the thread's previous one in a single
place: the memo that reuses the last capture's frames and call site when the
native walk and the Python chain are found the same again (stack.c,
cfi_walk.c, pyframes.c) must see each difference.  Every block is kept, so
each one is a leak in the report; test_pyframes.py checks the counts per
call site.  The sequence SEQ mixes repeats (the memo is used) with switches
(it must not be): A 7 times, B 6 times.
Usage: memo_app.py MODE (lines, caller_line, caller_far, generator,
native_paths, entry_frames, api_paths, recursion, exec_files, exec_names, threads)."""
import collections
import ctypes
import functools
import gc
import os
import sys
import threading

MiB = 1 << 20
SEQ = "AABABBBAABABA"
rt = ctypes.CDLL(os.environ.get("TL_CUDART", "libcudart.so.13"))
kept = []


def two_lines(seq):
    for c in seq:
        p = ctypes.c_void_p()
        if c == "A":
            rt.cudaMalloc(ctypes.byref(p), 1 * MiB)  # M-LINE-A
        else:
            rt.cudaMalloc(ctypes.byref(p), 2 * MiB)  # M-LINE-B
        kept.append(p)


def lines():
    two_lines(SEQ)  # M-LINES


# ---- the innermost frame the same, a caller's line not --------------------
def g():
    p = ctypes.c_void_p()
    rt.cudaMalloc(ctypes.byref(p), 3 * MiB)  # M-G
    kept.append(p)


def f(c):
    if c == "A":
        g()  # M-F-X
    else:
        g()  # M-F-Y


def caller_line():
    for c in SEQ:
        f(c)  # M-CALLER


def mid1():
    g()  # M-MID1


def mid2():
    mid1()  # M-MID2


def two_out(c):
    if c == "A":
        mid1()  # M-TWO-X
    else:
        mid1()  # M-TWO-Y


def three_out(c):
    if c == "A":
        mid2()  # M-THREE-X
    else:
        mid2()  # M-THREE-Y


def caller_far():
    for c in SEQ:
        two_out(c)  # M-FAR-TWO
    for c in SEQ:
        three_out(c)  # M-FAR-THREE


# ---- a generator resumed from different callers ---------------------------
def blocks():
    while True:
        p = ctypes.c_void_p()
        rt.cudaMalloc(ctypes.byref(p), 4 * MiB)  # M-GEN
        kept.append(p)
        yield


def resume_a(gen):
    next(gen)  # M-RESUME-A


def resume_b(gen):
    next(gen)  # M-RESUME-B


def resume_at(gen, c):
    if c == "A":
        next(gen)  # M-RESUME-X
    else:
        next(gen)  # M-RESUME-Y


def generator():
    gen = blocks()
    for c in SEQ:
        # One instruction calls either function: the caller's frame sits at
        # the same address running another code object.
        (resume_a if c == "A" else resume_b)(gen)  # M-GEN-CALL
    gen = blocks()
    for c in SEQ:
        resume_at(gen, c)  # M-GEN-AT
    resume_directly_or_through_a_helper(blocks().__next__)  # M-GEN-RESUMERS


resume_blocks = None


def through_helper():
    resume_blocks()  # M-HELPER-NEXT


def resume_directly_or_through_a_helper(resume):
    # One instruction resumes the generator (a method-wrapper: the generic
    # call path either way) or calls a Python function that does: the same
    # native stack, the same generator frame and the same frame at the
    # bottom, one frame more or less between them.
    global resume_blocks
    resume_blocks = resume
    for c in SEQ:
        (resume if c == "A" else through_helper)()  # M-GEN-DIRECT


# ---- one Python line, two native paths ------------------------------------
def alloc_one(size):
    p = ctypes.c_void_p()
    rt.cudaMalloc(ctypes.byref(p), size)  # M-NATIVE-ALLOC
    kept.append(p)
    return 0


# Ten C functions of the interpreter that drain an iterator (of 0s): the
# same Python frames, other native frames between (and on some the same
# stack pointer where the hook is entered).  Not both min and max, nor set
# and frozenset: one function runs either.  Consumer k allocates (k + 1) MiB.
CONSUMERS = (list, tuple, set, sorted, any, all, min, sum, bytes, collections.deque)


def native_paths():
    n = len(CONSUMERS)
    # Each one twice in a row, twice round, then each one and the next:
    # 6 allocations each.
    order = [k for _ in range(2) for k in range(n) for _ in range(2)] + [j for k in range(n) for j in (k, (k + 1) % n)]
    for k in order:
        CONSUMERS[k](map(alloc_one, [(k + 1) * MiB]))  # M-NATIVE-CALL


def leaf():
    p = ctypes.c_void_p()
    rt.cudaMalloc(ctypes.byref(p), 10 * MiB)  # M-ENTRY-ALLOC
    kept.append(p)


leaf_from_c = functools.partial(leaf)


def entry_frames():
    for c in SEQ:
        # leaf's frame at one address running one instruction, pushed by
        # this frame's call (no native frame between them) or by
        # functools.partial's C code (its own evaluation loop between).
        (leaf if c == "A" else leaf_from_c)()  # M-ENTRY-CALL


def api_paths():
    """The runtime's and the driver's entry points through ctypes from one
    line: the same frames (libffi calls either), one device site; the
    runtime's pinned host allocation from that line is another kind."""
    drv = ctypes.CDLL("libcuda.so.1")
    drv.cuInit(0)
    fns = {"R": rt.cudaMalloc, "D": drv.cuMemAlloc_v2, "H": rt.cudaMallocHost}
    for c in "RRDRDDHDHRRHD":
        p = ctypes.c_void_p()
        fns[c](ctypes.byref(p), 6 * MiB)  # M-API-CALL
        kept.append(p)


# ---- recursion depth 5, 6, 5, 6 -------------------------------------------
def rec(depth, size):
    if depth > 1:
        return rec(depth - 1, size)  # M-REC
    p = ctypes.c_void_p()
    rt.cudaMalloc(ctypes.byref(p), size)  # M-REC-ALLOC
    kept.append(p)


def recursion():
    for c in SEQ:
        rec(5 if c == "A" else 6, 7 * MiB)  # M-REC-CALL


# ---- functions of one name made and freed, from two files -----------------
EXEC_SOURCE = """
def g(size):
    p = ctypes.c_void_p()
    rt.cudaMalloc(ctypes.byref(p), size)
    kept.append(p)
"""


def exec_files():
    for c in SEQ:
        scope = {"ctypes": ctypes, "rt": rt, "kept": kept}
        exec(compile(EXEC_SOURCE, "gen_a.py" if c == "A" else "gen_b.py", "exec"), scope)
        scope["g"](8 * MiB)  # M-EXEC-CALL
        del scope
        gc.collect()


NAMED_SOURCE = """
def {name}(size):
    p = ctypes.c_void_p()
    rt.cudaMalloc(ctypes.byref(p), size)
    kept.append(p)
"""


def exec_names():
    """Twelve names of one length and the same first eight bytes, each freed
    before the next is made: its code object and name string tend to take
    the last one's place."""
    for k in range(12):
        name = "handler_%03d" % k
        scope = {"ctypes": ctypes, "rt": rt, "kept": kept}
        exec(compile(NAMED_SOURCE.format(name=name), "<generated>", "exec"), scope)
        scope[name](9 * MiB)  # M-EXEC-NAME
        del scope
        gc.collect()


# ---- two threads running the same function --------------------------------
ROUNDS = 10


def worker(barrier):
    barrier.wait()
    two_lines(SEQ * ROUNDS)  # M-WORKER


def threads():
    # Switch threads as often as possible (and at every ctypes call, which
    # drops the GIL): the threads' allocations interleave.
    sys.setswitchinterval(1e-6)
    barrier = threading.Barrier(2)
    t = threading.Thread(target=worker, args=(barrier,))
    t.start()
    barrier.wait()
    two_lines(SEQ * ROUNDS)  # M-THREADS
    t.join()


def main():
    globals()[sys.argv[1]]()  # M-MAIN
    print("kept", len(kept))


if __name__ == "__main__":
    main()  # M-MODULE
