#!/usr/bin/env python3
"""Writes a valid tensorleak report (schema 1) with N leak entries, for
timing the CLI on large inputs (BENCHMARKS.md, "The CLI on a large report").

    python3 bench/big_report.py N OUT [--frames F] [--pid P] [--rank R]

Each leak is its own call site (site i) of 4 KiB in one allocation, with F
native frames (default 4) spread over 64 modules, 5000 functions and 800
source files, so stacks and names repeat as in a real program's report;
N = 200000 writes about 185 MB.  Deterministic: the same arguments give the
same bytes.  --pid and --rank make distinct inputs for `tensorleak merge`.

--shared makes what `merge` pairs across inputs: every site a VMM handle
shared with the other ranks (identity "7:i", created by rank 0, imported by
the others) and as many CUDA IPC handles, exported by rank 0 and mapped by
the others.
"""
import argparse
import json


def frame(i, d):
    fn = (i * 7 + d * 131) % 5000
    mod = (i + d) % 64
    return {"address": "0x%x" % (0x7f0000000000 + mod * 0x1000000 + fn * 64 + d),
            "module": f"/opt/app/lib/libmodule_{mod:02d}.so", "offset": "0x%x" % (fn * 64 + d),
            "function": f"app::component_{fn % 97}::operation_{fn}(long, int)",
            "file": f"/src/app/component_{fn % 97}/part_{fn % 800}.cc", "line": 10 + (i + d * 17) % 900}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("n", type=int)
    ap.add_argument("out")
    ap.add_argument("--frames", type=int, default=4)
    ap.add_argument("--pid", type=int, default=4242)
    ap.add_argument("--rank", type=int, default=None)
    ap.add_argument("--shared", action="store_true")
    a = ap.parse_args()
    bytes_each = 4096
    head = {
        "tool": "tensorleak", "schema": 1, "version": "0.1.0", "reason": "exit", "label": None,
        "pid": a.pid, "rank": a.rank, "host": "node1", "command": ["./big"], "time": "2026-12-03T00:00:00Z",
        "summary": {
            "leaked_bytes": a.n * bytes_each, "leaked_allocations": a.n,
            "live_bytes": a.n * bytes_each, "live_allocations": a.n, "peak_live_bytes": a.n * bytes_each,
            "reserved_bytes": a.n * bytes_each, "allocated_bytes": a.n * bytes_each, "gap_bytes": 0,
            "largest_free_block": 0, "fragmentation": 0.0, "invalid_frees": 0,
            "suppressed_allocations": 0, "suppressed_bytes": 0, "failed_allocations": 0, "oom_failures": 0,
            "released_by_teardown_bytes": 0, "released_by_teardown_allocations": 0, "held_bytes": 0,
            "dropped_events": 0,
        },
    }
    tail = {
        "pools": [],
        "devices": [{"device": 0, "free": 1 << 34, "total": 1 << 35, "reserved_bytes": a.n * bytes_each,
                     "allocated_bytes": a.n * bytes_each, "gap_bytes": 0}],
        "growth": [], "marks": [], "invalid_frees": [], "oom": None,
    }
    creator = not a.rank
    if a.shared:
        entries = [{"handle": "%016x" % (0x7e57000000000000 + i), "address": "0x%x" % (0x7f4000000000 + i * 4096),
                    "bytes": bytes_each, "site": i} for i in range(a.n)]
        if creator:
            tail["ipc"] = {"exported": entries, "mapped": []}
        else:
            tail["ipc"] = {"exported": [], "mapped": [dict(e, references=1) for e in entries]}
    with open(a.out, "w") as f:
        f.write(json.dumps(head)[:-1] + ', "leaks": [\n')
        for i in range(a.n):
            leak = {"kind": "device", "site": i, "bytes": bytes_each, "count": 1, "suppressed": False,
                    "suppression": None, "owner": "user", "owner_class": "user",
                    "stack": [frame(i, d) for d in range(a.frames)]}
            if a.shared:
                leak.update(kind="vmm_handle", imported=not creator,
                            shared=[{"identity": f"7:{i}", "bytes": bytes_each, "imported": not creator}])
            f.write(("" if i == 0 else ",\n") + json.dumps(leak))
        f.write("\n], " + json.dumps(tail)[1:] + "\n")


if __name__ == "__main__":
    main()
