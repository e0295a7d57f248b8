/*
 * driver_api.c: driver-API allocations reached the three ways real programs reach
 * them (CUDA-FACTS.md): direct calls linked against libcuda.so.1, function pointers
 * from cuGetProcAddress (as cudart and PyTorch get them, including a second
 * cuGetProcAddress fetched through itself), and the per-thread-default-stream
 * variant cuMemAllocAsync_ptsz asked for with CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM.
 * It also frees a cuMemAllocAsync pointer with cuMemFree (a cross-family free).
 *
 * Leaks on purpose, one call site each (the ground truth names the functions):
 *   alloc_direct_leak   cuMemAlloc (direct)                 1 x 4 MiB   device
 *   alloc_gpa_leak      cuMemAlloc via cuGetProcAddress     1 x 6 MiB   device
 *   alloc_async_leak    cuMemAllocAsync_ptsz via GPA        2 x 2 MiB   device (stream-ordered)
 *   alloc_host_leak     cuMemAllocHost (direct)             1 x 1 MiB   host_pinned
 */
#include <cuda.h>
#include <stdint.h>
#include "kit_common.h"

typedef CUresult (*gpa_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*free_fn)(CUdeviceptr);
typedef CUresult (*alloc_async_fn)(CUdeviceptr *, size_t, CUstream);
typedef CUresult (*free_async_fn)(CUdeviceptr, CUstream);

static alloc_fn p_alloc;
static free_fn p_free;
static alloc_async_fn p_alloc_async_ptsz;
static free_async_fn p_free_async_ptsz;

#define CK(call) KIT_CHECK_RT(call)

static void *lookup(gpa_fn gpa, const char *name, int version, cuuint64_t flags)
{
    void *fn = NULL;
    CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    CUresult r = gpa(name, &fn, version, flags, &st);
    if (r != CUDA_SUCCESS || st != CU_GET_PROC_ADDRESS_SUCCESS || !fn) {
        fprintf(stderr, "cuGetProcAddress(%s, %d, %llu) failed: %d status %d\n", name, version,
                (unsigned long long)flags, (int)r, (int)st);
        exit(3);
    }
    return fn;
}

__attribute__((noinline)) static CUdeviceptr alloc_direct_leak(size_t bytes)
{
    CUdeviceptr d = 0;
    CK(cuMemAlloc(&d, bytes));
    return d;
}

__attribute__((noinline)) static CUdeviceptr alloc_gpa_leak(size_t bytes)
{
    CUdeviceptr d = 0;
    CK(p_alloc(&d, bytes));
    return d;
}

__attribute__((noinline)) static CUdeviceptr alloc_async_leak(size_t bytes)
{
    CUdeviceptr d = 0;
    CK(p_alloc_async_ptsz(&d, bytes, CU_STREAM_PER_THREAD));
    return d;
}

__attribute__((noinline)) static void *alloc_host_leak(size_t bytes)
{
    void *h = NULL;
    CK(cuMemAllocHost(&h, bytes));
    return h;
}

int main(int argc, char **argv)
{
    int reset = kit_has_flag(argc, argv, "--reset");
    CUdevice dev;
    CUcontext ctx;
    size_t free0 = 0, free1 = 0, total = 0;

    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));

    /* cuGetProcAddress fetched through itself, as cudart does (versions 11030, 12000). */
    gpa_fn gpa = (gpa_fn)lookup(cuGetProcAddress, "cuGetProcAddress", 12000, CU_GET_PROC_ADDRESS_DEFAULT);
    p_alloc = (alloc_fn)lookup(gpa, "cuMemAlloc", 3020, CU_GET_PROC_ADDRESS_DEFAULT);
    p_free = (free_fn)lookup(gpa, "cuMemFree", 3020, CU_GET_PROC_ADDRESS_DEFAULT);
    p_alloc_async_ptsz = (alloc_async_fn)lookup(gpa, "cuMemAllocAsync", 11020,
                                                CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
    p_free_async_ptsz = (free_async_fn)lookup(gpa, "cuMemFreeAsync", 11020,
                                              CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);

    /* Warm-up outside the measured window. */
    CUdeviceptr w = 0;
    CK(cuMemAlloc(&w, 2 * KIT_MIB));
    kit_memset(w, 0, 2 * KIT_MIB);
    CK(cuMemFree(w));
    /* Whether the driver gives an ordinary CUDA array's size: cuda.h answers
     * CUDA_ERROR_INVALID_VALUE for an array made without
     * CUDA_ARRAY3D_DEFERRED_MAPPING, and tensorleak then reports the array's
     * size as unknown.  Made and destroyed before the measured window. */
    CUarray arr = NULL;
    CUDA_ARRAY_DESCRIPTOR arr_desc = {.Width = 1000, .Height = 100, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1};
    CUDA_ARRAY_MEMORY_REQUIREMENTS arr_req;
    memset(&arr_req, 0, sizeof arr_req);
    CK(cuArrayCreate(&arr, &arr_desc));
    int arr_rc = (int)cuArrayGetMemoryRequirements(&arr_req, arr, dev);
    CK(cuArrayDestroy(arr));
    CK(cuCtxSynchronize());
    CK(cuMemGetInfo(&free0, &total));

    /* Direct calls. */
    CUdeviceptr a = alloc_direct_leak(4 * KIT_MIB);
    CUdeviceptr b = 0;
    CK(cuMemAlloc(&b, 6 * KIT_MIB));
    kit_memset(a, 1, 4 * KIT_MIB);
    CK(cuMemFree(b));

    /* Through cuGetProcAddress. */
    CUdeviceptr c = alloc_gpa_leak(6 * KIT_MIB);
    CUdeviceptr d = 0;
    CK(p_alloc(&d, 2 * KIT_MIB));
    kit_memset(c, 2, 6 * KIT_MIB);
    CK(p_free(d));

    /* Stream-ordered, _ptsz variant through cuGetProcAddress. */
    CUdeviceptr e1 = alloc_async_leak(2 * KIT_MIB);
    CUdeviceptr e2 = alloc_async_leak(2 * KIT_MIB);
    CUdeviceptr f = 0, g = 0;
    CK(p_alloc_async_ptsz(&f, 4 * KIT_MIB, CU_STREAM_PER_THREAD));
    CK(p_alloc_async_ptsz(&g, 2 * KIT_MIB, CU_STREAM_PER_THREAD));
    CK(p_free_async_ptsz(g, CU_STREAM_PER_THREAD));
    CK(cuCtxSynchronize());
    CK(cuMemFree(f)); /* cuMemFree_v2 on a cuMemAllocAsync pointer: legal, must match */

    void *h = alloc_host_leak(1 * KIT_MIB);
    memset(h, 0, 1 * KIT_MIB);
    CK(cuCtxSynchronize());
    CK(cuMemGetInfo(&free1, &total));
    (void)e1;
    (void)e2;

    const unsigned long long M = KIT_MIB;
    printf("TL_GROUND_TRUTH {\"sample\":\"driver_api\",\"api\":\"driver\",\"pid\":%d,"
           "\"requests\":0,\"marks\":0,\"expect_growth\":null,"
           "\"leaks\":{\"count\":5,\"bytes\":%llu},"
           "\"kinds\":{\"device|pool_block\":[4,%llu],\"host_pinned\":[1,%llu]},"
           "\"sites\":[{\"function\":\"alloc_direct_leak\",\"count\":1,\"bytes\":%llu},"
           "{\"function\":\"alloc_gpa_leak\",\"count\":1,\"bytes\":%llu},"
           "{\"function\":\"alloc_async_leak\",\"count\":2,\"bytes\":%llu},"
           "{\"function\":\"alloc_host_leak\",\"count\":1,\"bytes\":%llu}],"
           "\"array_requirements\":{\"rc\":%d,\"size\":%zu},"
           "\"expected_held\":%llu,\"free_start\":%zu,\"free_end\":%zu,\"total\":%zu}\n",
           (int)getpid(), 15 * M, 14 * M, 1 * M, 4 * M, 6 * M, 4 * M, 1 * M, arr_rc, (size_t)arr_req.size, 14 * M,
           free0, free1, total);
    fflush(stdout);
    kit_snapshot("end");
    if (reset)
        CK(cuDevicePrimaryCtxReset(dev));
    return 0;
}
