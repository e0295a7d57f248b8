"""Time to attach and to detach with the real library (the whole
`tensorleak attach` / `detach` command, its start included): libtensorleak.so
on the end-to-end tests' C server (tests/attach/attach_server, its one thread
blocked in read) and on a PyTorch loop under `tensorleak sim`
(tests/attach/attach_torch_server.py, blocked in read between requests).
Each attach is followed by one request, so that the next pair attaches to a
process whose hooks have run.

    python3 bench/attach_real_time.py BUILD_DIR [PAIRS]"""
import os
import statistics
import subprocess
import sys
import time

build = os.path.abspath(sys.argv[1])
pairs = int(sys.argv[2]) if len(sys.argv) > 2 else 20
here = os.path.dirname(os.path.abspath(__file__))
cli = os.path.join(build, "tools", "tensorleak")
env = {k: v for k, v in os.environ.items() if not k.startswith("TENSORLEAK_")}
env["TENSORLEAK_LIBRARY"] = os.path.join(build, "src", "libtensorleak.so")
env["LD_LIBRARY_PATH"] = os.path.join(build, "sim")
log = "/tmp/tl-attach-real-bench.%p.json"
targets = {
    "C server (driver API)": [os.path.join(build, "tests", "attach", "attach_server")],
    "PyTorch loop (tensorleak sim)": [cli, "sim", "--", sys.executable,
                                      os.path.join(here, "..", "tests", "attach", "attach_torch_server.py")],
}


def timed(*args):
    start = time.perf_counter()
    subprocess.run([cli, *args], env=env, check=True, capture_output=True)
    return (time.perf_counter() - start) * 1e3


def row(times):
    return f"median {statistics.median(times):.1f} ms (min {min(times):.1f}, max {max(times):.1f})"


for name, argv in targets.items():
    t = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         text=True, env=env)
    assert t.stdout.readline() == "ready\n"
    attach, detach = [], []
    for _ in range(pairs):
        attach.append(timed("attach", "--quiet", "-o", log, str(t.pid)))
        t.stdin.write("req\n")
        t.stdin.flush()
        t.stdout.readline()
        detach.append(timed("detach", str(t.pid)))
    t.stdin.write("q\n")
    t.stdin.flush()
    t.communicate(timeout=120)
    print(f"| {name} | {row(attach)} | {row(detach)} |")
