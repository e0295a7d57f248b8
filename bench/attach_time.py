"""Time to attach and to detach (the whole `tensorleak attach` / `detach`
command, its start included), with the injector's test library
(tests/attach/attach_testlib.c: a one-patch plan) on the test program
tests/attach/attach_target, blocked in read (one thread) and with eight
threads spinning.

    python3 bench/attach_time.py BUILD_DIR [PAIRS]

With libtensorleak.so's attach support, TENSORLEAK_LIBRARY=... points the
same commands at it (its plan patches libcuda.so.1's entry points)."""
import os
import statistics
import subprocess
import sys
import time

build = os.path.abspath(sys.argv[1])
pairs = int(sys.argv[2]) if len(sys.argv) > 2 else 30
cli = os.path.join(build, "tools", "tensorleak")
target = os.path.join(build, "tests", "attach", "attach_target")
env = {k: v for k, v in os.environ.items() if not k.startswith("TENSORLEAK_")}
env["TENSORLEAK_LIBRARY"] = os.environ.get("TENSORLEAK_LIBRARY") or os.path.join(
    build, "tests", "attach", "libattach_testlib.so")
log = "/tmp/tl-attach-bench.log"


def timed(*args):
    start = time.perf_counter()
    subprocess.run([cli, *args], env=env, check=True, capture_output=True)
    return (time.perf_counter() - start) * 1e3


for mode in ("read", "threads"):
    t = subprocess.Popen([target, mode], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                         env=dict(env, LD_LIBRARY_PATH=os.path.join(build, "sim")))
    t.stdout.readline()
    attach, detach = [], []
    for _ in range(pairs):
        attach.append(timed("attach", "-o", log, str(t.pid)))
        detach.append(timed("detach", str(t.pid)))
    t.kill()
    t.wait()
    for name, ms in (("attach", attach), ("detach", detach)):
        print(f"{mode:8} {name}: median {statistics.median(ms):.1f} ms, min {min(ms):.1f}, max {max(ms):.1f}")
