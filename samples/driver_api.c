/*
 * driver_api.c — the driver API reached every way real programs reach it:
 *   (a) a direct call to an exported symbol (linked with -lcuda);
 *   (b) dlsym on a dlopen'ed libcuda.so.1 (as PyTorch, Triton, JAX do);
 *   (c) cuGetProcAddress_v2 with a version (as NVIDIA's runtime does),
 *       including the per-thread-default-stream (_ptsz) variant.
 * Leaks one allocation per path, with distinct sizes so a test can tell
 * them apart: (a) 2 MiB, (b) 1 MiB, (c) 3 MiB, (c, _ptsz async) 512 KiB.
 * Frees one more allocation per path.
 */
#include "cuda_compat.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(call)                                                             \
    do {                                                                        \
        CUresult rc_ = (call);                                                  \
        if (rc_ != CUDA_SUCCESS) {                                              \
            fprintf(stderr, "driver_api: %s failed: %d\n", #call, (int)rc_);    \
            exit(1);                                                            \
        }                                                                       \
    } while (0)

typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*free_fn)(CUdeviceptr);
typedef CUresult (*async_alloc_fn)(CUdeviceptr *, size_t, CUstream);
typedef CUresult (*async_free_fn)(CUdeviceptr, CUstream);
typedef CUresult (*procaddr_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

static __attribute__((noinline)) CUdeviceptr path_direct(size_t bytes)
{
    CUdeviceptr p = 0;
    CHECK(cuMemAlloc_v2(&p, bytes)); /* LEAK-SITE direct */
    return p;
}

static __attribute__((noinline)) CUdeviceptr path_dlsym(alloc_fn fn, size_t bytes)
{
    CUdeviceptr p = 0;
    CHECK(fn(&p, bytes)); /* LEAK-SITE dlsym */
    return p;
}

static __attribute__((noinline)) CUdeviceptr path_procaddr(alloc_fn fn, size_t bytes)
{
    CUdeviceptr p = 0;
    CHECK(fn(&p, bytes)); /* LEAK-SITE procaddr */
    return p;
}

static __attribute__((noinline)) CUdeviceptr path_ptsz(async_alloc_fn fn, size_t bytes)
{
    CUdeviceptr p = 0;
    CHECK(fn(&p, bytes, NULL)); /* LEAK-SITE ptsz */
    return p;
}

int main(void)
{
    CHECK(cuInit(0));
    CUdevice dev;
    CHECK(cuDeviceGet(&dev, 0));
    CUcontext ctx;
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));

    /* (a) */
    path_direct(2u << 20);
    CHECK(cuMemFree_v2(path_direct(2u << 20)));

    /* (b) */
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "driver_api: dlopen: %s\n", dlerror());
        return 1;
    }
    alloc_fn dl_alloc = (alloc_fn)dlsym(lib, "cuMemAlloc_v2");
    free_fn dl_free = (free_fn)dlsym(lib, "cuMemFree_v2");
    procaddr_fn get_proc = (procaddr_fn)dlsym(lib, "cuGetProcAddress_v2");
    if (!dl_alloc || !dl_free || !get_proc) {
        fprintf(stderr, "driver_api: dlsym failed\n");
        return 1;
    }
    path_dlsym(dl_alloc, 1u << 20);
    CHECK(dl_free(path_dlsym(dl_alloc, 1u << 20)));

    /* (c) */
    alloc_fn pa_alloc = NULL;
    free_fn pa_free = NULL;
    async_alloc_fn pa_async = NULL;
    async_free_fn pa_async_free = NULL;
    CUdriverProcAddressQueryResult status;
    CHECK(get_proc("cuMemAlloc", (void **)&pa_alloc, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &status));
    CHECK(get_proc("cuMemFree", (void **)&pa_free, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &status));
    CHECK(get_proc("cuMemAllocAsync", (void **)&pa_async, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &status));
    CHECK(get_proc("cuMemFreeAsync", (void **)&pa_async_free, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &status));
    if (!pa_alloc || !pa_free || !pa_async || !pa_async_free) {
        fprintf(stderr, "driver_api: cuGetProcAddress returned NULL\n");
        return 1;
    }
    path_procaddr(pa_alloc, 3u << 20);
    CHECK(pa_free(path_procaddr(pa_alloc, 3u << 20)));
    path_ptsz(pa_async, 512u << 10);
    CHECK(pa_async_free(path_ptsz(pa_async, 512u << 10), NULL));

    Dl_info info;
    if (dladdr((void *)pa_async, &info) && info.dli_sname)
        printf("driver_api: cuMemAllocAsync with per-thread stream resolved to %s\n", info.dli_sname);
    printf("driver_api: leaked 4 allocations (2 MiB, 1 MiB, 3 MiB, 512 KiB)\n");
    return 0;
}
