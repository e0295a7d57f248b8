#!/usr/bin/env python3
"""Link-level fidelity of the simulated CUDA stack.

usage: check_symbols.py NM OBJDUMP libcuda.so.1 libcudart.so libcudart_static.a

- The runtime, shared and static, references no driver symbol (cu + capital
  letter): it must reach the driver only through dlopen + cuGetProcAddress_v2,
  as NVIDIA's does, or interposers that watch that path would miss it.
- The shared runtime does not link libcuda.
- The driver's SONAME is libcuda.so.1 and it exports only CUDA API names
  (cu[A-Z]...) and the test-only simcuda_* introspection.
"""
import re
import subprocess
import sys

DRIVER_SYMBOL = re.compile(r"^cu[A-Z]")


def run(*cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def symbol_names(nm_output):
    for line in nm_output.splitlines():
        parts = line.split()
        if parts and not line.endswith(":"):
            yield parts[-1].split("@")[0]


def main():
    nm, objdump, libcuda, cudart, cudart_static = sys.argv[1:6]
    failures = []

    for lib, args in ((cudart, ["-D", "--undefined-only"]), (cudart_static, ["--undefined-only"])):
        bad = sorted({s for s in symbol_names(run(nm, *args, lib)) if DRIVER_SYMBOL.match(s)})
        if bad:
            failures.append(f"{lib} references driver symbols: {', '.join(bad)}")

    needed = re.findall(r"NEEDED\s+(\S+)", run(objdump, "-p", cudart))
    if any(n.startswith("libcuda.so") for n in needed):
        failures.append(f"{cudart} links the driver: NEEDED {needed}")

    soname = re.findall(r"SONAME\s+(\S+)", run(objdump, "-p", libcuda))
    if soname != ["libcuda.so.1"]:
        failures.append(f"{libcuda} SONAME is {soname}, not libcuda.so.1")

    exported = set(symbol_names(run(nm, "-D", "--defined-only", libcuda)))
    stray = sorted(s for s in exported if not (DRIVER_SYMBOL.match(s) or s.startswith("simcuda_")))
    if stray:
        failures.append(f"{libcuda} exports non-CUDA symbols: {', '.join(stray)}")
    for required in ("cuGetProcAddress_v2", "cuGetProcAddress", "cuMemAlloc_v2", "cuMemAllocAsync_ptsz"):
        if required not in exported:
            failures.append(f"{libcuda} does not export {required}")

    for f in failures:
        print("FAIL:", f)
    if not failures:
        print(f"ok: {len(exported)} driver exports; runtime has no driver references")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
