/*
 * test_runtime.c — the simulated libcudart.so, reached by the program through
 * normal dynamic linking; it reaches the simulated driver only through
 * dlopen("libcuda.so.1") and cuGetProcAddress_v2.  SIMCUDA_MEMORY=64M.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cudart_compat.h"
#include "sim_test.h"

#define CAPACITY (64 * MiB)
#define rt_ok(call) cr_assert_eq((call), cudaSuccess, "%s failed", #call)
#define rt_err(call, code) cr_assert_eq((int)(call), (int)(code), "%s: expected %s", #call, #code)

static size_t rt_free(void)
{
    size_t free = 0, total = 0;
    rt_ok(cudaMemGetInfo(&free, &total));
    cr_assert_eq(total, CAPACITY);
    return free;
}

Test(runtime, malloc_and_free_account_exactly)
{
    void *a, *b;
    cr_assert_eq(rt_free(), CAPACITY);
    rt_ok(cudaMalloc(&a, 10 * MiB));
    rt_ok(cudaMalloc(&b, 1000));
    cr_assert_eq((uintptr_t)a % 512, 0);
    cr_assert_eq(rt_free(), CAPACITY - 10 * MiB - 1024);
    rt_ok(cudaFree(a));
    rt_ok(cudaFree(b));
    cr_assert_eq(rt_free(), CAPACITY);
}

Test(runtime, errors_are_mapped_to_runtime_codes)
{
    void *p;
    rt_err(cudaMalloc(&p, CAPACITY + 1), cudaErrorMemoryAllocation);
    rt_err(cudaFree((void *)0x1234000), cudaErrorInvalidValue);
    rt_ok(cudaFree(NULL));
    rt_ok(cudaMalloc(&p, 0));
    cr_assert_null(p);
    rt_err(cudaSetDevice(1), cudaErrorInvalidDevice);
    cr_assert_str_eq(cudaGetErrorString(cudaErrorMemoryAllocation), "out of memory");
    cr_assert_str_eq(cudaGetErrorName(cudaErrorMemoryAllocation), "cudaErrorMemoryAllocation");
}

Test(runtime, versions_and_devices)
{
    int v = 0, n = 0, d = -1;
    rt_ok(cudaRuntimeGetVersion(&v));
    cr_assert_eq(v, 13000);
    rt_ok(cudaDriverGetVersion(&v));
    cr_assert_eq(v, 13000);
    rt_ok(cudaGetDeviceCount(&n));
    cr_assert_eq(n, 1);
    rt_ok(cudaSetDevice(0));
    rt_ok(cudaGetDevice(&d));
    cr_assert_eq(d, 0);
}

Test(runtime, host_pinned_managed_and_pitched_memory)
{
    void *h, *h2, *m, *pitched;
    size_t pitch;
    rt_ok(cudaMallocHost(&h, 8192));
    rt_ok(cudaHostAlloc(&h2, 100, cudaHostAllocPortable));
    memset(h, 1, 8192);
    memset(h2, 2, 100);
    rt_ok(cudaMallocManaged(&m, 1 * MiB, cudaMemAttachGlobal));
    rt_ok(cudaMallocPitch(&pitched, &pitch, 1000, 4));
    cr_assert_eq(pitch, 1024);
    cr_assert_eq(rt_free(), CAPACITY - 1 * MiB - 4096);
    rt_ok(cudaFreeHost(h));
    rt_ok(cudaFreeHost(h2));
    rt_ok(cudaFree(m));
    rt_ok(cudaFree(pitched));
    cr_assert_eq(rt_free(), CAPACITY);
}

Test(runtime, device_reset_frees_everything_the_context_owns)
{
    void *a, *h;
    rt_ok(cudaMalloc(&a, 5 * MiB));
    rt_ok(cudaMallocHost(&h, 4096));
    rt_ok(cudaDeviceReset());
    cr_assert_eq(rt_free(), CAPACITY);
    rt_err(cudaFree(a), cudaErrorInvalidValue);
    rt_ok(cudaMalloc(&a, 512)); /* usable again afterwards */
    rt_ok(cudaDeviceSynchronize());
}

static void *thread_alloc(void *out)
{
    return cudaMalloc((void **)out, 3 * MiB) == cudaSuccess ? out : NULL;
}

Test(runtime, every_thread_gets_the_primary_context)
{
    void *p = NULL, *a;
    rt_ok(cudaMalloc(&a, 1 * MiB));
    pthread_t t;
    void *ok = NULL;
    pthread_create(&t, NULL, thread_alloc, &p);
    pthread_join(t, &ok);
    cr_assert_not_null(ok);
    cr_assert_eq(rt_free(), CAPACITY - 4 * MiB);
    rt_ok(cudaFree(p)); /* freed from another thread, same context */
}

Test(runtime, streams_and_stream_ordered_pools)
{
    cudaStream_t s;
    cudaMemPool_t pool;
    void *p, *q;
    rt_ok(cudaStreamCreate(&s));
    rt_ok(cudaDeviceGetDefaultMemPool(&pool, 0));
    cuuint64_t keep = UINT64_MAX, reserved = 0, used = 1;
    rt_ok(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
    rt_ok(cudaMallocAsync(&p, 1 * MiB, s));
    rt_ok(cudaMallocAsync_ptsz(&q, 1 * MiB, s));
    rt_ok(cudaFreeAsync(p, s));
    rt_ok(cudaFreeAsync_ptsz(q, s));
    rt_ok(cudaStreamSynchronize(s));
    rt_ok(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved));
    rt_ok(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used));
    cr_assert_eq(reserved, 32 * MiB);
    cr_assert_eq(used, 0);
    rt_ok(cudaMemPoolTrimTo(pool, 0));
    cr_assert_eq(rt_free(), CAPACITY);
    rt_ok(cudaStreamDestroy(s));
}

Test(runtime, explicit_pools)
{
    struct cudaMemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = 0;
    cudaMemPool_t pool, current;
    void *p, *q;
    rt_ok(cudaMemPoolCreate(&pool, &props));
    rt_ok(cudaMallocFromPoolAsync(&p, 1 * MiB, pool, NULL));
    rt_ok(cudaMallocFromPoolAsync_ptsz(&q, 1 * MiB, pool, NULL));
    rt_ok(cudaDeviceSetMemPool(0, pool));
    rt_ok(cudaDeviceGetMemPool(&current, 0));
    cr_assert_eq(current, pool);
    rt_ok(cudaFree(p)); /* cudaFree accepts stream-ordered memory too */
    rt_ok(cudaFreeAsync(q, NULL));
    rt_ok(cudaMemPoolDestroy(pool));
    cr_assert_eq(rt_free(), CAPACITY);
}

Test(runtime, driver_entry_points_are_the_drivers_exported_variants)
{
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
    /* CUDA 13 deprecates cudaGetDriverEntryPoint; PyTorch still falls back to it. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    rt_ok(cudaGetDriverEntryPoint("cuMemAlloc", &fn, cudaEnableDefault, &status));
#pragma GCC diagnostic pop
    void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    cr_assert_not_null(drv, "the runtime loaded the driver");
    cr_assert_eq(status, cudaDriverEntryPointSuccess);
    cr_assert_eq(fn, dlsym(drv, "cuMemAlloc_v2"));
    rt_ok(cudaGetDriverEntryPointByVersion("cuMemCreate", &fn, 12000, cudaEnableDefault, &status));
    cr_assert_eq(fn, dlsym(drv, "cuMemCreate"));
    rt_ok(cudaGetDriverEntryPointByVersion("cuMemAllocAsync", &fn, 12000, cudaEnablePerThreadDefaultStream, &status));
    cr_assert_eq(fn, dlsym(drv, "cuMemAllocAsync_ptsz"));
    rt_ok(cudaGetDriverEntryPointByVersion("cuMemAllocAsync", &fn, 11000, cudaEnableDefault, &status));
    cr_assert_null(fn);
    cr_assert_eq(status, cudaDriverEntryPointVersionNotSufficent);
    rt_ok(cudaGetDriverEntryPointByVersion("cuBogus", &fn, 12000, cudaEnableDefault, &status));
    cr_assert_null(fn);
    cr_assert_eq(status, cudaDriverEntryPointSymbolNotFound);
}

/* The first runtime call produces the real runtime's lookup sequence. */
Test(runtime, the_driver_is_reached_only_through_cuGetProcAddress, .init = cr_redirect_stderr)
{
    setenv("SIMCUDA_TRACE", "1", 1);
    void *p;
    rt_ok(cudaMalloc(&p, 512));
    const char *log = sim_captured_stderr();
    const char *start =
        "simcuda: cuGetProcAddress(cuGetProcAddress, 11030, 0) -> cuGetProcAddress\n"
        "simcuda: cuGetProcAddress(cuGetProcAddress, 12000, 0) -> cuGetProcAddress_v2\n"
        "simcuda: cuGetProcAddress(cuInit, 2000, 0) -> cuInit\n";
    cr_assert_eq(strncmp(log, start, strlen(start)), 0, "trace starts:\n%.400s", log);
    static const char *expected[] = {
        "(cuDevicePrimaryCtxRetain, 7000, 0) -> cuDevicePrimaryCtxRetain\n",
        "(cuDevicePrimaryCtxReset, 11000, 0) -> cuDevicePrimaryCtxReset_v2\n",
        "(cuMemAlloc, 3020, 0) -> cuMemAlloc_v2\n",
        "(cuMemFree, 3020, 0) -> cuMemFree_v2\n",
        "(cuMemAllocAsync, 11020, 0) -> cuMemAllocAsync\n",
        "(cuMemAllocAsync, 11020, 2) -> cuMemAllocAsync_ptsz\n",
        "(cuMemFreeAsync, 11020, 2) -> cuMemFreeAsync_ptsz\n",
        "(cuMemAllocFromPoolAsync, 11020, 2) -> cuMemAllocFromPoolAsync_ptsz\n",
    };
    for (size_t i = 0; i < sizeof expected / sizeof expected[0]; i++)
        cr_assert_not_null(strstr(log, expected[i]), "missing %s", expected[i]);
    cr_assert_null(strstr(log, "NULL"), "every lookup succeeds:\n%s", log);
    /* looked up once per process, not per call */
    const char *again = strstr(log + 1, "simcuda: cuGetProcAddress(cuGetProcAddress, 11030");
    cr_assert_null(again);
}
