/*
 * test_runtime_static.c — the program linked with libcudart_static.a, as nvcc
 * links by default: the runtime lives in the executable and still reaches the
 * driver through dlopen + cuGetProcAddress_v2.
 */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "cudart_compat.h"
#include "sim_test.h"

Test(runtime_static, the_runtime_is_inside_the_executable)
{
    Dl_info self, rt;
    cr_assert(dladdr((void *)&sim_captured_stderr, &self));
    cr_assert(dladdr((void *)&cudaMalloc, &rt));
    cr_assert_str_eq(rt.dli_fname, self.dli_fname);
    cr_assert_null(dlopen("libcudart.so.13", RTLD_NOW | RTLD_NOLOAD));
}

Test(runtime_static, allocations_work_and_are_counted)
{
    void *p;
    size_t free, total;
    cr_assert_eq(cudaMalloc(&p, 3 * MiB), cudaSuccess);
    cr_assert_eq(cudaMemGetInfo(&free, &total), cudaSuccess);
    cr_assert_eq(total - free, 3 * MiB);
    cr_assert_eq(cudaFree(p), cudaSuccess);
    cr_assert_eq(cudaMalloc(&p, 65 * MiB), cudaErrorMemoryAllocation);
    cr_assert_eq(cudaDeviceReset(), cudaSuccess);
}

Test(runtime_static, driver_is_reached_through_cuGetProcAddress, .init = cr_redirect_stderr)
{
    setenv("SIMCUDA_TRACE", "1", 1);
    void *p;
    cr_assert_eq(cudaMalloc(&p, 512), cudaSuccess);
    const char *log = sim_captured_stderr();
    cr_assert_not_null(strstr(log, "simcuda: cuGetProcAddress(cuGetProcAddress, 12000, 0) -> cuGetProcAddress_v2\n"));
    cr_assert_not_null(strstr(log, "simcuda: cuGetProcAddress(cuMemAlloc, 3020, 0) -> cuMemAlloc_v2\n"));
}
