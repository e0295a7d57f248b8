#!/usr/bin/env python3
"""What the framework bridge costs per report (BENCHMARKS.md, "Framework
bridge").  Three figures, medians of N repetitions:

1. translation: the H200 recording of PyTorch's native allocator (16 segments,
   72 live blocks with Python frames) turned into a pool row and its JSON
   text, in Python (frameworks/torch.py + json.dumps): the bridge thread's
   own work per report, before PyTorch's _snapshot() itself (which the
   recording cannot time here);
2. a mark with the bridge off (TENSORLEAK_PYTHON=0) and on, in a program on
   the stand-in torch under `tensorleak run --sim` (the round trip: the
   library wakes the bridge thread, it reads the allocator, the library
   parses the state);
3. a snapshot report (tensorleak_snapshot) off and on.

usage: bridge_cost.py BUILD_DIR [N]
"""
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(HERE)
FIXTURE = os.path.join(SOURCE, "tests", "fixtures", "h200-2026-11-30",
                       "torch_native_leak_snapshot.json")

PROG = r'''
import ctypes, json, sys, time
import torch
MiB = 1 << 20
kept = [torch.empty(21 * MiB) for _ in range(6)]          # a few segments, like a real cache
scratch = [torch.empty(3 * MiB) for _ in range(30)]
del scratch[::2]
lib = ctypes.CDLL(None)
n = int(sys.argv[1])
def timed(fn, arg):
    out = []
    for i in range(n):
        t0 = time.perf_counter(); fn(arg); out.append(time.perf_counter() - t0)
    return out
lib.tensorleak_mark(b"warm")
marks = timed(lib.tensorleak_mark, b"m")
snaps = timed(lib.tensorleak_snapshot, b"s")
print(json.dumps({"mark": marks, "snapshot": snaps}))
'''


def translation(n):
    sys.path.insert(0, os.path.join(SOURCE, "python"))
    from tensorleak.frameworks import torch as tl_torch
    with open(FIXTURE) as f:
        d = json.load(f)
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        rows = tl_torch.pools_from({0: d["memory_stats"]}, d["snapshot"], "native")
        text = json.dumps({"time": 0, "pools": rows, "errors": []}, separators=(",", ":"))
        out.append(time.perf_counter() - t0)
    return out, len(text)


def jax_profiles(n):
    """Decoding jax.profiler.device_memory_profile()'s pprof into sites
    (frameworks/jax.py profile_sites, gunzip included), per full report:
    the two H200 recordings, and a made-up profile of 1,000 distinct stacks
    30 frames deep (XLA writes one sample per stack, size and device), encoded
    by the stand-in jax's writer."""
    import importlib.util
    sys.path.insert(0, os.path.join(SOURCE, "python"))
    from tensorleak.frameworks import jax as tl_jax
    spec = importlib.util.spec_from_file_location(
        "fake_jax_profiler", os.path.join(SOURCE, "tests", "bridge", "fake", "jax", "profiler.py"))
    w = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(w)
    strings = ["", "allocations", "count", "space", "bytes", "kind", "buffer", "device", "cuda:0", "f", "/app/model.py"]
    body = [w._field(1, w._field(1, 1) + w._field(2, 2)), w._field(1, w._field(1, 3) + w._field(2, 4))]
    body.append(w._field(5, w._field(1, 1) + w._field(2, 9) + w._field(4, 10)))
    for loc in range(1, 30 * 1000 + 1):
        body.append(w._field(4, w._field(1, loc) + w._field(4, w._field(1, 1) + w._field(2, loc))))
    labels = w._field(3, w._field(1, 5) + w._field(2, 6)) + w._field(3, w._field(1, 7) + w._field(2, 8))
    for k in range(1000):
        body.append(w._field(2, w._packed(1, range(30 * k + 1, 30 * k + 31)) + w._packed(2, [3, 3 << 20]) + labels))
    body.extend(w._field(6, t.encode()) for t in strings)
    made_up = gzip.compress(b"".join(body))
    fixtures = os.path.dirname(FIXTURE)
    rows = []
    for name, data in (("jax_prealloc_profile.pb.gz", None), ("jax_grow_profile.pb.gz", None),
                       ("1,000 stacks x 30 frames", made_up)):
        if data is None:
            with open(os.path.join(fixtures, name), "rb") as f:
                data = f.read()
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            sites = tl_jax.profile_sites(data)
            out.append(time.perf_counter() - t0)
        rows.append((name, len(data), sum(len(v) for v in sites.values()), out))
    return rows


def run_prog(build, n, bridge):
    tmp = tempfile.mkdtemp(prefix="tl-bridge-bench-")
    prog = os.path.join(tmp, "prog.py")
    with open(prog, "w") as f:
        f.write(PROG)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TENSORLEAK_")}
    env.update({"PYTHONPATH": os.path.join(SOURCE, "tests", "bridge", "fake"), "TENSORLEAK_QUIET": "1",
                "TENSORLEAK_PYTHON": "1" if bridge else "0"})
    out = subprocess.run([os.path.join(build, "tools", "tensorleak"), "run", "--sim", "-o",
                          os.path.join(tmp, "tl.%p.%n.json"), "--", sys.executable, prog, str(n)],
                         env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def ms(values):
    return "%.3f ms" % (statistics.median(values) * 1e3)


def main():
    build = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 50
    tr, size = translation(n)
    off = run_prog(build, n, False)
    on = run_prog(build, n, True)
    print("| what (median of %d) | bridge off | bridge on |" % n)
    print("| --- | --- | --- |")
    print("| translation of the H200 native snapshot (16 segments, 72 blocks with frames; %d bytes of JSON) | | %s |"
          % (size, ms(tr)))
    for name, size, nsites, times in jax_profiles(n):
        print("| decoding a JAX device_memory_profile(): %s (%d bytes gzip'd, %d sites kept) | | %s |"
              % (name, size, nsites, ms(times)))
    print("| tensorleak_mark from Python (stand-in torch, 11 segments) | %s | %s |" % (ms(off["mark"]), ms(on["mark"])))
    print("| tensorleak_snapshot: one report | %s | %s |" % (ms(off["snapshot"]), ms(on["snapshot"])))


if __name__ == "__main__":
    main()
