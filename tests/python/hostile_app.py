"""Allocations from the places where a thread's Python frame chain is unusual:
generators, coroutines, a thread created by C, a forked child, daemon threads
while the interpreter finalizes, and a fork while another thread is inside
the frame bookkeeping.  Run under libtensorleak.so by test_pyframes.py.
Usage: hostile_app.py MODE (generator, coroutine, c_thread, fork,
finalizing, fork_while_resolving)."""
import asyncio
import ctypes
import os
import sys
import threading
import time
import types

CUDART = os.environ.get("TL_CUDART", "libcudart.so.13")
rt = ctypes.CDLL(CUDART)


def alloc(size):
    ptr = ctypes.c_void_p()
    rt.cudaMalloc(ctypes.byref(ptr), ctypes.c_size_t(size))  # H-ALLOC
    return ptr


def gen_blocks():
    while True:
        yield alloc(1 << 20)  # H-GEN


async def coro_block():
    await asyncio.sleep(0)
    return alloc(2 << 20)  # H-CORO


def on_c_thread():
    alloc(3 << 20)  # H-CTHREAD


def blocked_in(pid):
    """The file whose data holds the lock a hung process waits on (the
    futex word in /proc/PID/syscall; a .bss is the anonymous mapping right
    after its file's), or '?'."""
    try:
        with open(f"/proc/{pid}/syscall") as f:
            fields = f.read().split()
        if fields[0] != "202":  # futex
            return "?"
        addr = int(fields[1], 16)
        prev = None
        with open(f"/proc/{pid}/maps") as f:
            for line in f:
                parts = line.split()
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                path = parts[5] if len(parts) > 5 else ""
                if lo <= addr < hi:
                    if not path and prev and prev[0] == lo:
                        path = prev[1]
                    return os.path.basename(path) or "?"
                prev = (hi, path)
    except (OSError, IndexError, ValueError):
        pass
    return "?"


def wait_child(pid, seconds=20):
    """The child's exit code, or 'hung in FILE' (then killed)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode") else status
        time.sleep(0.01)
    where = "hung in " + blocked_in(pid)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return where


def fresh_function(tag, lines):
    """A new code object with `lines` allocation lines (each its own location)."""
    src = "def f(free):\n" + "".join("    free(alloc(256))\n" for _ in range(lines))
    ns = {"alloc": alloc}
    exec(compile(src, f"<{tag}>", "exec"), ns)
    return ns["f"]


def free(ptr):
    rt.cudaFree(ptr)


def main():
    mode = sys.argv[1]
    if mode == "generator":
        g = gen_blocks()
        keep = [next(g), next(g)]
        g.close()
    elif mode == "coroutine":
        keep = asyncio.run(coro_block())
    elif mode == "c_thread":
        cb = ctypes.CFUNCTYPE(None)(on_c_thread)
        helper = ctypes.CDLL(os.environ["TL_PYCB"])
        fn = ctypes.cast(rt.cudaMalloc, ctypes.c_void_p)
        if helper.pyframes_in_c_thread(cb, fn) != 0:
            sys.exit("pthread_create failed")
    elif mode == "fork":
        keep = alloc(6 << 20)
        for _ in range(3):
            pid = os.fork()
            if pid == 0:
                alloc(1 << 20)  # H-CHILD
                os._exit(0)
            rc = wait_child(pid)
            if rc != 0 and not str(rc).startswith("hung in libcuda"):
                sys.exit(f"child: {rc}")
    elif mode == "finalizing":
        # Daemon threads inside an allocation loop (GIL released in each
        # call) while the main thread returns and the interpreter finalizes.
        def churn():
            f = fresh_function(threading.current_thread().name, 50)
            while True:
                f(free)
        for i in range(4):
            threading.Thread(target=churn, daemon=True, name=f"d{i}").start()
        time.sleep(0.05)
    elif mode == "fork_while_resolving":
        # A thread keeps meeting new Python locations while the main thread
        # forks; each child meets a new location too.  Each first sight is
        # resolved under the bookkeeping's lock, the line decoded by a scan
        # of the code's line table: 50000 lines skipped at run time before
        # the allocations make that scan (the lock held) most of the
        # thread's time, so the forks land in it, not in the simulator's or
        # the loader's own locks (which a fork with threads may catch too).
        src = ("def f(skip):\n    if skip:\n" + "        x = 1\n" * 50000 +
               "    alloc(256)\n" * 10)
        ns = {"alloc": alloc, "free": free}
        exec(compile(src, "<long>", "exec"), ns)
        base = ns["f"]
        stop = threading.Event()

        def resolver():
            kept = []  # alive, so no copy reuses a freed one's address
            while not stop.is_set():
                # A copy of the code object: new to the location cache (its
                # lines the same, so one call site for all).
                kept.append(types.FunctionType(base.__code__.replace(co_name="f"), ns))
                kept[-1](False)
        # This thread's context bound before the forks: a child binds none
        # (the simulator's lock is not fork-safe; this library's are).
        rt.cudaFree(None)
        t = threading.Thread(target=resolver)
        t.start()
        time.sleep(0.2)
        # A child forked while this thread is inside the simulator (whose
        # lock is not fork-safe, as CUDA itself is not) may hang there: only
        # a child that hangs in this library's own locks fails the test.
        hung = []
        for i in range(20):
            pid = os.fork()
            if pid == 0:
                types.FunctionType(base.__code__.replace(co_name="f"), ns)(False)
                os._exit(0)
            # A child finishes in ~50 ms; 5 s tells a hang.  (30 s each made
            # two hangs in the simulator's lock overrun the test's 60 s.)
            rc = wait_child(pid, 5)
            if rc != 0:
                hung.append(rc)
        stop.set()
        t.join()
        print("children not finished:", hung)
        ours = [h for h in hung if "libtensorleak" in str(h) or h == "hung in ?"]
        if ours:
            sys.exit(f"{len(ours)} of 20 children hung: {ours}")
    print("done", mode)


if __name__ == "__main__":
    main()
