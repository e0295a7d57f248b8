"""An uninstrumented Python server on NVIDIA's cuda.bindings, for the
end-to-end attach tests: it never imports tensorleak.  Commands on stdin:
`req` keeps 1 MiB (the leak, at the line marked below) and answers
"served K"; `q` exits 0.  It prints "ready" once its context is current."""
import sys

from cuda.bindings import driver as drv


def ok(result):
    err, *values = result if isinstance(result, tuple) else (result,)
    if err != drv.CUresult.CUDA_SUCCESS:
        raise RuntimeError(drv.cuGetErrorName(err)[1])
    return values[0] if len(values) == 1 else values


def main():
    ok(drv.cuInit(0))
    ctx = ok(drv.cuDevicePrimaryCtxRetain(ok(drv.cuDeviceGet(0))))
    ok(drv.cuCtxSetCurrent(ctx))
    kept = []
    print("ready", flush=True)
    for line in sys.stdin:
        if line == "req\n":
            kept.append(ok(drv.cuMemAlloc(1 << 20)))  # LEAK
            print(f"served {len(kept)}", flush=True)
        elif line == "q\n":
            break


main()
