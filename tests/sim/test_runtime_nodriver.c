/*
 * test_runtime_nodriver.c — no libcuda.so.1 on the library path: every call
 * fails with cudaErrorInsufficientDriver and the error still has its string,
 * as with NVIDIA's runtime on a machine without the driver.
 */
#include <dlfcn.h>

#include "cudart_compat.h"
#include "sim_test.h"

Test(runtime_nodriver, calls_fail_with_insufficient_driver)
{
    void *p = (void *)1;
    size_t f, t;
    int n = 7, v = 7;
    cudaError_t e = cudaMalloc(&p, 512);
    /* The runtime searches like dlopen from a library without RUNPATH:
     * LD_LIBRARY_PATH (removed) and the system's paths. */
    if (e == cudaSuccess && dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD))
        cr_skip_test("this machine has a libcuda.so.1 on its system library path");
    cr_assert_eq(e, cudaErrorInsufficientDriver);
    cr_assert_eq(cudaFree(NULL), cudaErrorInsufficientDriver);
    cr_assert_eq(cudaMemGetInfo(&f, &t), cudaErrorInsufficientDriver);
    cr_assert_eq(cudaGetDeviceCount(&n), cudaErrorInsufficientDriver);
    cr_assert_eq(n, 0);
    cr_assert_eq(cudaDriverGetVersion(&v), cudaSuccess);
    cr_assert_eq(v, 0);
    cr_assert_eq(cudaRuntimeGetVersion(&v), cudaSuccess);
    cr_assert_eq(v, 13000);
    cr_assert_str_eq(cudaGetErrorString(cudaErrorInsufficientDriver),
                     "CUDA driver version is insufficient for CUDA runtime version");
    cr_assert_str_eq(cudaGetErrorName(cudaErrorInsufficientDriver), "cudaErrorInsufficientDriver");
}
