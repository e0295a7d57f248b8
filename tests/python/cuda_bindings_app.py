"""NVIDIA's cuda-bindings (PyPI) driving the simulated driver: the bindings
reach libcuda.so.1 through cuGetProcAddress and call cuMemAlloc without the
GIL; the leak must be named at this file's line."""
from cuda.bindings import driver


def check(result):
    err, *rest = result if isinstance(result, tuple) else (result,)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise SystemExit(f"driver error {err}")
    return rest[0] if len(rest) == 1 else rest


def leak_through_the_driver():
    return check(driver.cuMemAlloc(5 << 20))  # CUMEMALLOC-LINE


def main():
    check(driver.cuInit(0))
    dev = check(driver.cuDeviceGet(0))
    ctx = check(driver.cuDevicePrimaryCtxRetain(dev))
    check(driver.cuCtxSetCurrent(ctx))
    leak_through_the_driver()


if __name__ == "__main__":
    main()
