#!/usr/bin/env python3
"""A model server's sleep, wake and unload (samples/sleep_wake.c), as vLLM's
sleep mode does them: what each state's snapshot says is released, kept,
held by a cache and leaked.

Run one test per process (`sleep_test.py NAME`), as preload_test.py, whose
helpers these tests share.  Assertions are exact: the sample is
deterministic on the simulated driver.
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from preload_test import BUILD, MiB, by_kind, check, eq, frames, marker_line, run, sample  # noqa: E402

SRC = "samples/sleep_wake.c"
WEIGHTS = 32 * MiB            # 4 chunks of 8 MiB
KV = 64 * MiB                 # 4 blocks of 16 MiB
CACHE = 32 * MiB              # the stream-ordered pool's one chunk of activations
GiB16 = 16 << 30              # the simulated device's memory
OUTPUT = [
    "sleep_wake: awake    device memory used 128 MiB",
    "sleep_wake: asleep   device memory used 0 MiB",
    "sleep_wake: woken    device memory used 128 MiB",
    "sleep_wake: asleep   device memory used 0 MiB",
    "sleep_wake: woken    device memory used 128 MiB",
    "sleep_wake: weights intact after 2 sleeps",
    "sleep_wake: unloaded device memory used 32 MiB",
    "sleep_wake: trimmed  device memory used 0 MiB",
]
STATES = ["awake", "asleep", "woken", "asleep", "woken", "unloaded", "trimmed"]


def snapshots(r):
    snaps = [x for x in r.reports if x["reason"] == "api"]
    eq([x["label"] for x in snaps], STATES, "one snapshot per state, in order")
    return snaps


def figures(rep):
    """What a state is: device memory (tensorleak's and the driver's), the
    VMM address space, live memory by kind, and the pools."""
    s = rep["summary"]
    return {
        "devices": [(d["reserved_bytes"], d["allocated_bytes"], d["total"] - d["free"]) for d in rep["devices"]],
        "address_space": (s["address_space_bytes"], s["address_space_reservations"]),
        "live": (s["live_bytes"], s["live_allocations"]),
        "kinds": by_kind(rep["leaks"]),
        "pools": [(p["kind"], p["reserved_bytes"], p["allocated_bytes"]) for p in rep["pools"]],
    }


AWAKE = {
    # Weights and KV handles (96 MiB) and the activation cache's chunk.
    "devices": [(WEIGHTS + KV + CACHE, WEIGHTS + KV, WEIGHTS + KV + CACHE)],
    "address_space": (WEIGHTS + KV, 2),
    "live": (WEIGHTS + KV, 8),
    "kinds": {"vmm_handle": (WEIGHTS + KV, 8), "vmm_mapping": (WEIGHTS + KV, 8),
              "vmm_reservation": (WEIGHTS + KV, 2)},
    "pools": [("stream_ordered", CACHE, 0)],
}


def sleep_releases_device_memory_keeps_the_address_space_and_wake_restores_it():
    plain = run(sample("sleep_wake"), preload=False)
    r = run(sample("sleep_wake"))
    eq(r.rc, 0, "exit status")
    eq(r.out, plain.out, "program output under the preload")
    eq(r.out.splitlines(), OUTPUT, "the program's own figures")
    snaps = snapshots(r)
    eq(figures(snaps[0]), AWAKE, "awake")
    asleep = {
        # No device memory at all: handles released, the cache trimmed; the
        # two ranges stay reserved and the weights wait in pinned host memory.
        "devices": [(0, 0, 0)],
        "address_space": (WEIGHTS + KV, 2),
        "live": (WEIGHTS, 1),
        "kinds": {"host_pinned": (WEIGHTS, 1), "vmm_reservation": (WEIGHTS + KV, 2)},
        "pools": [],
    }
    for i in (1, 3):
        eq(figures(snaps[i]), asleep, f"asleep (snapshot {i + 1})")
        backup = [x for x in snaps[i]["leaks"] if x["kind"] == "host_pinned"][0]
        eq(frames(backup)[0][::2], ("sleep_level1", marker_line(SRC, "BACKUP-SITE")), "the backup's call site")
    for i in (2, 4):
        eq(figures(snaps[i]), AWAKE, f"woken (snapshot {i + 1}): the figures before sleep")
    # The ranges are the same ones: the handles come back at their addresses.
    ranges = [sorted(x["stack"][0]["address"] for x in s["leaks"] if x["kind"] == "vmm_reservation") for s in snaps[:5]]
    eq(ranges, [ranges[0]] * 5, "reservations kept across both sleeps")
    rep = r.report
    eq(rep["growth"], [], "no growth across sleep/wake cycles")
    marks = [(m["label"], m["live_bytes"], m["reserved_bytes"], GiB16 - m["device_free"]) for m in rep["marks"]]
    up = (WEIGHTS + KV, WEIGHTS + KV + CACHE, WEIGHTS + KV + CACHE)
    eq(marks, [("request",) + up] * 3 + [("awake",) + up] +
       ([("asleep", WEIGHTS, 0, 0)] + [("request",) + up] * 3 + [("woken",) + up]) * 2 +
       [("unloaded", 0, CACHE, CACHE), ("trimmed", 0, 0, 0)], "marks")
    # A growth streak of two marks would still find none: each wake comes
    # back to the figures of the mark before the sleep.
    r2 = run(sample("sleep_wake"), env={"TENSORLEAK_GROWTH_MARKS": "2"})
    eq(r2.report["growth"], [], "no growth at 2 marks either")


def diff_of_two_wakes_shows_no_change_and_sleep_shows_what_was_released():
    tmp = tempfile.mkdtemp(prefix="tl-sleep-")
    r = run(sample("sleep_wake"))
    snaps = snapshots(r)
    paths = []
    for i, s in enumerate(snaps):
        paths.append(os.path.join(tmp, f"{i + 1}-{s['label']}.json"))
        with open(paths[-1], "w") as f:
            json.dump(s, f)
    cli = os.path.join(BUILD, "tools", "tensorleak")

    def diff(a, b):
        p = subprocess.run([cli, "diff", paths[a], paths[b]], capture_output=True, text=True)
        eq(p.returncode, 0, "diff status: " + p.stderr)
        return p.stdout.splitlines()

    out = diff(2, 4)
    eq(out, ["tensorleak diff: %s -> %s (leaks): +0 byte(s) (+0 B), +0 allocation(s) in 0 changed call site(s)"
             % (paths[2], paths[4])], "woken -> woken")
    # Sleep: the 96 MiB of handles (and their mappings, which add no bytes)
    # went, 32 MiB of pinned host memory came; the reservations did not
    # change.
    out = diff(0, 1)
    eq(out[0], "tensorleak diff: %s -> %s (leaks): -%d byte(s) (-64.0 MiB), -15 allocation(s) in 5 changed call site(s)"
       % (paths[0], paths[1], KV), "awake -> asleep")
    heads = sorted(l for l in out if l.startswith(("+", "-")))
    eq(heads, sorted([
        "+%d byte(s) (+32.0 MiB), +1 allocation(s) [host_pinned]: 0 -> %d byte(s), 0 -> 1 allocation(s), from:" % (WEIGHTS, WEIGHTS),
        "-%d byte(s) (-32.0 MiB), -4 allocation(s) [vmm_handle]: %d -> 0 byte(s), 4 -> 0 allocation(s), from:" % (WEIGHTS, WEIGHTS),
        "-%d byte(s) (-32.0 MiB), -4 allocation(s) [vmm_mapping]: %d -> 0 byte(s), 4 -> 0 allocation(s), from:" % (WEIGHTS, WEIGHTS),
        "-%d byte(s) (-64.0 MiB), -4 allocation(s) [vmm_handle]: %d -> 0 byte(s), 4 -> 0 allocation(s), from:" % (KV, KV),
        "-%d byte(s) (-64.0 MiB), -4 allocation(s) [vmm_mapping]: %d -> 0 byte(s), 4 -> 0 allocation(s), from:" % (KV, KV),
    ]), "what sleep released")


def unload_leaves_the_activation_cache_holding_memory_until_it_is_trimmed():
    r = run(sample("sleep_wake"))
    snaps = snapshots(r)
    unloaded = {
        # Weights, KV cache and their ranges are gone; the stream-ordered
        # pool still caches its chunk: reserved, not allocated, not live.
        "devices": [(CACHE, 0, CACHE)],
        "address_space": (0, 0),
        "live": (0, 0),
        "kinds": {},
        "pools": [("stream_ordered", CACHE, 0)],
    }
    eq(figures(snaps[5]), unloaded, "unloaded")
    eq([p["name"] for p in snaps[5]["pools"]], ["default mempool (device 0)"], "the pool holding it")
    s = snaps[5]["summary"]
    eq((s["reserved_bytes"], s["allocated_bytes"], s["gap_bytes"], s["leaked_bytes"]), (CACHE, 0, CACHE, 0),
       "held by a cache, not leaked")
    eq(figures(snaps[6]), {"devices": [(0, 0, 0)], "address_space": (0, 0), "live": (0, 0), "kinds": {}, "pools": []},
       "trimmed")
    cli = os.path.join(BUILD, "tools", "tensorleak")
    tmp = tempfile.mkdtemp(prefix="tl-sleep-")
    path = os.path.join(tmp, "unloaded.json")
    with open(path, "w") as f:
        json.dump(snaps[5], f)
    p = subprocess.run([cli, "report", path], capture_output=True, text=True)
    eq(p.returncode, 0, "report status: " + p.stderr)
    check("pool 'default mempool (device 0)' (stream_ordered, device 0): reserved 32.0 MiB, allocated 0 B;" in p.stdout,
          p.stdout)
    check("device 0: reserved 32.0 MiB, allocated 0 B, gap 32.0 MiB;" in p.stdout, p.stdout)
    s = r.report["summary"]
    eq((s["leaked_bytes"], s["leaked_allocations"], s["reserved_bytes"]), (0, 0, 0), "exit: nothing left")


def an_unload_that_misses_a_weight_chunk_leaks_it_at_its_call_site():
    plain = run(sample("sleep_wake"), "--forget", preload=False)
    r = run(sample("sleep_wake"), "--forget")
    eq(r.rc, 0, "exit status")
    eq(r.out, plain.out, "program output under the preload")
    eq(r.out.splitlines()[-2:], ["sleep_wake: unloaded device memory used 40 MiB",
                                 "sleep_wake: trimmed  device memory used 8 MiB"], "the driver's figures")
    snaps = snapshots(r)
    chunk = WEIGHTS // 4
    eq(figures(snaps[5])["devices"], [(CACHE + chunk, chunk, CACHE + chunk)], "unloaded: the cache and one chunk")
    rep = r.report
    got = sorted((l["kind"], l["bytes"], l["count"], frames(l)[0][2]) for l in rep["leaks"])
    eq(got, sorted([("vmm_handle", chunk, 1, marker_line(SRC, "HANDLE-SITE")),
                    ("vmm_mapping", chunk, 1, marker_line(SRC, "MAP-SITE")),
                    ("vmm_reservation", WEIGHTS, 1, marker_line(SRC, "RESERVE-SITE"))]), "leaks")
    s = rep["summary"]
    eq((s["leaked_bytes"], s["reserved_bytes"], s["leaked_address_space_bytes"]), (chunk, chunk, WEIGHTS),
       "memory leaked apart from address space")
    check("SUMMARY: tensorleak: %d byte(s) leaked in" % chunk in r.err, r.err)


if __name__ == "__main__":
    globals()[sys.argv[1]]()  # an unknown name fails with KeyError
    print("ok", sys.argv[1])
