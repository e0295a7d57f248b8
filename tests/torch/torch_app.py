#!/usr/bin/env python3
"""Real PyTorch on the simulated GPU, driven by tests/torch/test_torch.py.

usage: torch_app.py SCENARIO

Each scenario prints JSON lines of what torch itself knows, last the line
the test compares with tensorleak's exit report: torch's own figures for
the pool it keeps on device 0 (memory_stats(), and the largest inactive
block of _snapshot()).  Nothing allocates after that line is printed.
"""
import json
import sys

import torch

MIB = 1 << 20


def pool_figures():
    """torch's figures; the largest free block and the segments are None
    where torch keeps no blocks (backend:cudaMallocAsync refuses _snapshot)."""
    stats = torch.cuda.memory_stats()
    largest = segments = None
    if torch.cuda.get_allocator_backend() == "native":
        largest = 0
        snapshot = torch.cuda.memory._snapshot()["segments"]
        for seg in snapshot:
            for block in seg["blocks"]:
                if block["state"] == "inactive":
                    largest = max(largest, block["size"])
        segments = len(snapshot)
    return {
        "reserved": stats.get("reserved_bytes.all.current", 0),
        "allocated": stats.get("allocated_bytes.all.current", 0),
        "largest_free": largest,
        "segments": segments,
    }


def fragmented_pool():
    """Blocks of 1, 3 and 5 MiB (the large pool's 20 MiB segments and a 2 MiB
    small one), every other one freed: a pool with holes."""
    keep, drop = [], []
    for i in range(12):
        t = torch.empty(((1 + 2 * (i % 3)) * MIB,), dtype=torch.uint8, device="cuda")
        (keep if i % 2 == 0 else drop).append(t)
    small = [torch.empty((4096,), dtype=torch.uint8, device="cuda") for _ in range(3)]
    del drop, small[1]
    return keep, small


def bytes_round_trip():
    """Real bytes: host -> device -> host, pinned and non_blocking, a memset."""
    host = torch.arange(256, dtype=torch.int32)
    dev = host.to("cuda")
    pinned = torch.empty_like(host).pin_memory()
    pinned.copy_(dev, non_blocking=True)
    torch.cuda.synchronize()
    zeros = torch.zeros((64,), dtype=torch.int32, device="cuda").cpu()
    return bool(torch.equal(pinned, host)) and int(zeros.abs().sum()) == 0


def scenario_pool():
    kept = fragmented_pool()
    print(json.dumps({"bytes_ok": bytes_round_trip(), "available": torch.cuda.is_available()}))
    print(json.dumps(pool_figures()), flush=True)
    return kept


def scenario_errors():
    """torch.cuda.OutOfMemoryError and a C++ shape error, raised and caught."""
    kept = torch.empty((8 * MIB,), dtype=torch.uint8, device="cuda")
    caught = []
    try:
        torch.empty((1 << 40,), dtype=torch.uint8, device="cuda")
    except torch.cuda.OutOfMemoryError as e:
        caught.append(["oom", "Tried to allocate 1024.00 GiB" in str(e)])
    a = torch.empty((2, 3), device="cuda")
    b = torch.empty((4, 5), device="cuda")
    try:
        torch.mm(a, b)
    except RuntimeError as e:
        caught.append(["shape", "cannot be multiplied" in str(e)])
    try:
        torch.add(a, a)
    except RuntimeError as e:
        caught.append(["kernel", "operation not supported" in str(e)])
    print(json.dumps({"caught": caught, "num_ooms": torch.cuda.memory_stats().get("num_ooms", 0)}))
    print(json.dumps(pool_figures()), flush=True)
    return kept, a, b


def scenario_nvml():
    """NVML (libnvidia-ml.so.1, the simulated one beside the driver) against
    the driver's cudaMemGetInfo, and torch's out-of-memory message, which
    quotes NVML's figure for this process."""
    import ctypes
    import os

    class Memory(ctypes.Structure):
        _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]

    class Process(ctypes.Structure):
        _fields_ = [("pid", ctypes.c_uint), ("used", ctypes.c_ulonglong),
                    ("gi", ctypes.c_uint), ("ci", ctypes.c_uint)]

    kept = torch.empty((8 * MIB,), dtype=torch.uint8, device="cuda")
    try:
        torch.empty((1 << 40,), dtype=torch.uint8, device="cuda")
        message = ""
    except torch.cuda.OutOfMemoryError as e:
        message = str(e)
    nvml = ctypes.CDLL("libnvidia-ml.so.1")
    handle = ctypes.c_void_p()
    mem = Memory()
    procs = (Process * 4)()
    count = ctypes.c_uint(4)
    rcs = [nvml.nvmlInit_v2(), nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(handle)),
           nvml.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(mem)),
           nvml.nvmlDeviceGetComputeRunningProcesses_v3(handle, ctypes.byref(count), procs), nvml.nvmlShutdown()]
    free, total = torch.cuda.mem_get_info()
    print(json.dumps({
        "rcs": rcs, "total": mem.total, "used": mem.used, "driver_total": total, "driver_used": total - free,
        # The pid differs from run to run: printed as whether it is ours.
        "processes": [[procs[i].pid == os.getpid(), procs[i].used] for i in range(count.value)],
        "oom_names_this_process": f"this process has {mem.used / MIB:.2f} MiB memory in use" in message,
    }))
    print(json.dumps(pool_figures()), flush=True)
    return kept


def scenario_empty_cache():
    """Twenty tensors of 1 to 7 MiB, all dropped, then empty_cache(): the
    device is all free again (cudaFree, VMM unmap and release, or a pool
    trimmed to 0, by allocator mode)."""
    free0, total = torch.cuda.mem_get_info()
    kept = [torch.empty(((1 + i % 7) * MIB,), dtype=torch.uint8, device="cuda") for i in range(20)]
    held = torch.cuda.memory_reserved()
    del kept
    torch.cuda.empty_cache()
    free1, _ = torch.cuda.mem_get_info()
    print(json.dumps({"used_before": total - free0, "held": held, "used_after": total - free1}))
    print(json.dumps(pool_figures()), flush=True)


def ipc_child(tensors, results):
    t = tensors.get()
    results.put([str(t.device), t.cpu().tolist()])
    del t


def scenario_ipc():
    """A CUDA tensor sent to a spawned process (torch.multiprocessing: CUDA
    IPC for the memory, an interprocess event for the producer's stream)."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    tensors, results = ctx.Queue(), ctx.Queue()
    child = ctx.Process(target=ipc_child, args=(tensors, results))
    child.start()
    shared = torch.arange(6, dtype=torch.float32).cuda()
    tensors.put(shared)
    got = results.get(timeout=300)
    child.join(300)
    print(json.dumps({"child_got": got, "child_exit": child.exitcode}))
    print(json.dumps(pool_figures()), flush=True)
    return shared


if __name__ == "__main__":
    scenarios = {"pool": scenario_pool, "errors": scenario_errors, "nvml": scenario_nvml, "ipc": scenario_ipc,
                 "empty_cache": scenario_empty_cache}
    held = scenarios[sys.argv[1]]()
