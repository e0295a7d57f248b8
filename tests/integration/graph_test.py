#!/usr/bin/env python3
"""Graph memory: allocations captured into CUDA graphs (cudaMallocAsync, and
cuMemAllocAsync through cuGetProcAddress) and allocation nodes added with
cuGraphAddMemAllocNode belong to the device's graph memory, a pool of kind
`graph` whose figures are the driver's (cuDeviceGetGraphMemAttribute); they
are held there under the call site that made them, never leaks of it.

Run one test per process (`graph_test.py NAME`), as preload_test.py, whose
helpers these tests share.  Figures are exact: the program is deterministic
on the simulated driver (sim/README.md, graph memory).
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from preload_test import BUILD, MiB, check, eq, frames, marker_line, prog, run  # noqa: E402

SRC = "tests/integration/progs/graph.c"
KiB = 1 << 10

# What the program prints: every driver answer, and the graph memory figures
# in KiB (used, used high, reserved, reserved high).  Launching g1 (3 MiB A
# kept, 1 MiB T freed in the graph) takes 4 MiB; g2 (2 MiB B and 1 MiB E, from
# a created pool through a _ptsz variant, kept) 2 MiB more; g3 (4 MiB C freed in
# the graph, 1 MiB D and 512 KiB F, captured into it, kept) peaks at 11 MiB in
# use: 6 MiB more.  Trim keeps the 6 MiB that cover the 4.5 MiB still in use.
PROGRAM_OUTPUT = [
    "cudaStreamCreate 0",
    "cudaStreamBeginCapture 0", "capturing 1",
    "cudaMallocAsync A 0", "cudaMallocAsync T 0", "cudaFreeAsync T 0",
    "cudaStreamEndCapture 0", "capturing 0",
    "cuMemPoolCreate 0", "cuStreamBeginCapture 0", "cuMemAllocAsync B 0",
    "cuMemAllocFromPoolAsync_ptsz E 0", "cuStreamEndCapture 0",
    "cuGraphCreate 0", "cuGraphAddMemAllocNode C 0", "cuGraphAddMemAllocNode D 0", "cuGraphAddMemFreeNode C 0",
    "cuStreamBeginCaptureToGraph 0", "cuMemAllocAsync F 0", "cuStreamEndCapture 0", "same graph 1",
    "cudaGraphInstantiate g1 0", "cudaGraphLaunch g1 0",
    "cuGraphInstantiate(12000) g2 0", "cudaGraphLaunch g2 0",
    "cuGraphInstantiateWithFlags g3 0", "cuGraphLaunch g3 0",
    "cudaGraphLaunch g2 again 1",  # B from the last launch is still allocated
    "launched: used 7680 high 11264 reserved 12288 high 12288",
    "cudaFreeAsync A 0", "cudaStreamSynchronize 0",
    "A freed: used 4608 high 11264 reserved 12288 high 12288",
    "cudaStreamBeginCapture 0",
    "cudaMalloc during capture 900",  # cudaErrorStreamCaptureUnsupported
    "cudaStreamEndCapture 901",       # cudaErrorStreamCaptureInvalidated
    "graph none",
    "cudaDeviceGraphMemTrim 0", "reset used high 0", "reset reserved high 0",
    "trimmed: used 4608 high 4608 reserved 6144 high 6144",
    "cuMemAllocAsync uncaptured 0",
    "cudaGraphExecDestroy 0", "cudaGraphDestroy 0",
]


def site_rows(sites):
    """(kind, bytes, count, innermost function, its line, owner) of each site."""
    return sorted((s["kind"], s["bytes"], s["count"], frames(s)[0][0].split(".")[0], frames(s)[0][2], s["owner"])
                  for s in sites)


def graph_pools(rep):
    return [p for p in rep["pools"] if p["kind"] == "graph"]


def captured_and_added_graph_allocations_are_graph_memory_not_leaks():
    plain = run(prog("graph"), "graph", preload=False)
    r = run(prog("graph"), "graph")
    eq(r.rc, 0, "exit status: " + r.err)
    eq(r.out, plain.out, "program output under the preload")
    eq(r.out.splitlines(), PROGRAM_OUTPUT, "driver answers and graph memory figures")
    rep = r.report
    # The only leak is the allocation made outside any capture.
    eq(site_rows(rep["leaks"]), [
        ("device", 512 * KiB, 1, "leak_uncaptured", marker_line(SRC, "LEAK-SITE uncaptured"), "user"),
    ], "leaks")
    # B and E (captured through cuGetProcAddress), D (an allocation node) and
    # F (captured into D's graph) are still allocated in graph memory: held
    # there at their call sites.  A
    # was freed outside the graph, T and C by free nodes of their graphs.
    eq(site_rows(rep["held"]), sorted([
        ("device", 2 * MiB, 1, "capture_through_procaddr", marker_line(SRC, "GRAPH-SITE procaddr"), "CUDA graph memory"),
        ("device", 1 * MiB, 1, "capture_through_procaddr", marker_line(SRC, "GRAPH-SITE pool"), "CUDA graph memory"),
        ("device", 1 * MiB, 1, "add_nodes_directly", marker_line(SRC, "GRAPH-SITE node"), "CUDA graph memory"),
        ("device", 512 * KiB, 1, "capture_into_graph", marker_line(SRC, "GRAPH-SITE to-graph"), "CUDA graph memory"),
    ]), "held")
    s = rep["summary"]
    eq((s["leaked_bytes"], s["leaked_allocations"]), (512 * KiB, 1), "leaked")
    eq((s["live_bytes"], s["live_allocations"]), (5 * MiB, 5), "live")
    eq(s["held_bytes"], 4 * MiB + 512 * KiB, "held")
    eq(s["total_allocations"], 8, "total allocations: A, T, B, E, C, D, F and the uncaptured one")
    eq(s["failed_allocations"], 1, "the cudaMalloc refused during capture")
    eq(s["invalid_frees"], 0, "frees inside graphs and of graph allocations are valid")
    g = graph_pools(rep)
    eq(len(g), 1, "one graph memory pool")
    g = g[0]
    eq((g["name"], g["device"], g["reading"]), ("graph memory (device 0)", 0, "current"), "graph pool")
    eq((g["reserved_bytes"], g["allocated_bytes"], g["free_bytes"]), (6 * MiB, 4 * MiB + 512 * KiB, 1536 * KiB),
       "graph pool figures")
    eq((g["reserved_high_bytes"], g["used_high_bytes"]), (6 * MiB, 4 * MiB + 512 * KiB),
       "graph pool highs (reset after trim)")
    eq((g["allocation_nodes"], g["allocation_node_bytes"]), (4, 4 * MiB + 512 * KiB), "allocation nodes held")
    eq((g["largest_free_block"], g["fragmentation"]), (None, None), "no layout from the driver")
    owners = {o["name"]: o for o in rep["owners"]}
    eq((owners["CUDA graph memory"]["class"], owners["CUDA graph memory"]["live_bytes"]), ("cache", 4 * MiB + 512 * KiB),
       "graph memory owner")
    # Per device the same owners hold the same memory: the allocation nodes
    # are graph memory's on device 0, not an annotated pool's.
    eq(sorted((o["name"], o["device"], o["live_bytes"], o["live_allocations"]) for o in rep["owners_by_device"]),
       [("CUDA graph memory", 0, 4 * MiB + 512 * KiB, 4), ("user", 0, 512 * KiB, 1)], "owners by device")
    # The device holds the default pool's 32 MiB chunk and 4 MiB of graph memory.
    d = rep["devices"][0]
    eq((d["reserved_bytes"], d["allocated_bytes"]), (38 * MiB, 5 * MiB), "device figures")
    check("pool 'graph memory (device 0)' (graph, device 0): reserved 6.0 MiB, allocated 4.5 MiB" in r.err,
          "text report's graph pool line: " + r.err)
    check("4 allocation node(s), 4.5 MiB" in r.err, "text report's allocation nodes: " + r.err)
    # The pool E came from holds nothing: E is the graph's.
    eq([p for p in rep["pools"] if p["kind"] == "stream_ordered" and p["name"].startswith("mempool")], [],
       "no row for the created pool")


def graph_memory_figures_are_the_drivers_and_unknown_when_it_never_answers():
    # SIMCUDA_POOL_QUERY=fail: the driver never answers the memory queries.
    r = run(prog("graph"), "graph", env={"SIMCUDA_POOL_QUERY": "fail"})
    eq(r.rc, 0, "exit status: " + r.err)
    g = graph_pools(r.report)
    eq(len(g), 1, "one graph memory pool")
    g = g[0]
    eq(g["reading"], "none", "no driver reading")
    eq([g[k] for k in ("reserved_bytes", "allocated_bytes", "free_bytes", "reserved_high_bytes", "used_high_bytes",
                       "peak_reserved_bytes", "peak_allocated_bytes")], [None] * 7, "unknown figures are null")
    eq((g["allocation_nodes"], g["allocation_node_bytes"]), (4, 4 * MiB + 512 * KiB), "allocation nodes still tracked")
    eq(site_rows(r.report["leaks"]),
       [("device", 512 * KiB, 1, "leak_uncaptured", marker_line(SRC, "LEAK-SITE uncaptured"), "user")],
       "the uncaptured leak, and no graph allocation")
    check("pool 'graph memory (device 0)' (graph, device 0): reserved unknown, allocated unknown" in r.err,
          "text report: " + r.err)


def pool_line(text):
    return [l.split("== ", 1)[1] for l in text.splitlines() if "pool 'graph memory" in l]


def graph_memory_reads_the_same_in_every_cli_format():
    cli = os.path.join(BUILD, "tools", "tensorleak")
    tmp = tempfile.mkdtemp(prefix="tl-graph-")
    paths = []
    for rank, env in enumerate(({}, {"SIMCUDA_POOL_QUERY": "fail"})):
        r = run(prog("graph"), "graph", env=env)
        eq(r.rc, 0, "exit status: " + r.err)
        paths.append(os.path.join(tmp, "rank%d.json" % rank))
        with open(paths[-1], "w") as f:
            json.dump(r.report, f)
        # `tensorleak report` prints the graph pool as the library did.
        t = subprocess.run([cli, "report", paths[-1]], capture_output=True, text=True)
        eq(t.returncode, 0, "report: " + t.stderr)
        eq(pool_line(t.stdout), pool_line(r.err), "graph pool line of tensorleak report")
        eq(len(pool_line(t.stdout)), 1, "one graph pool line")
    html = subprocess.run([cli, "report", "--format", "html", paths[0]], capture_output=True, text=True)
    check(html.returncode == 0 and "graph memory (device 0)</b> (graph, device 0): reserved 6.0 MiB, allocated "
          "4.5 MiB, free 1.5 MiB, largest free block unknown, fragmentation unknown" in html.stdout,
          "html shows the graph pool's figures")
    sarif = subprocess.run([cli, "report", "--format", "sarif", paths[0]], capture_output=True, text=True)
    check(sarif.returncode == 0 and "graph memory (device 0)" in sarif.stdout, "sarif names the graph pool")
    # The gate counts the one leak; graph memory is held, not leaked.
    c = subprocess.run([cli, "check", paths[0], "--max-leaked-bytes", "512K"], capture_output=True, text=True)
    eq((c.returncode, c.stdout.split(":")[1].strip()), (0, "PASS"), "check within 512 KiB: " + c.stdout)
    c = subprocess.run([cli, "check", paths[0], "--max-leaked-bytes", "511K"], capture_output=True, text=True)
    eq(c.returncode, 1, "check below 512 KiB: " + c.stdout)
    out = os.path.join(tmp, "merged.json")
    m = subprocess.run([cli, "merge", *paths, "-o", out], capture_output=True, text=True)
    eq(m.returncode, 0, "merge: " + m.stderr)
    merged = json.load(open(out))
    eq([(p["kind"], p["reserved_bytes"], p["allocation_nodes"]) for p in graph_pools(merged)],
       [("graph", 6 * MiB, 4), ("graph", None, 4)], "merged graph pools")
    eq(merged["summary"]["held_bytes"], 9 * MiB, "merged held")
    d = subprocess.run([cli, "diff", paths[0], paths[1]], capture_output=True, text=True)
    eq(d.returncode, 0, "diff: " + d.stderr)
    eq(d.stdout.splitlines(), ["tensorleak diff: %s -> %s (leaks): +0 byte(s) (+0 B), +0 allocation(s) in 0 changed "
                               "call site(s)" % (paths[0], paths[1])], "diff of the two runs")


if __name__ == "__main__":
    globals()[sys.argv[1]]()  # an unknown name fails with KeyError
    print("ok", sys.argv[1])
