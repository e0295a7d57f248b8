/*
 * async_pool.cu: stream-ordered allocation the way PyTorch's backend:cudaMallocAsync
 * uses it: the device's default pool with its release threshold at UINT64_MAX, so
 * freed blocks stay reserved by the pool.  Every fourth request forgets to free its
 * KV buffer (a leak at kv_alloc_async); everything else is freed.  At exit the
 * pool's reserve is memory held by a pool (reported under pools), not a leak.
 * A leak every fourth mark is not growth over K consecutive marks, so no growth
 * verdict is asked of this sample.
 */
#include <cuda_runtime.h>
#include <stdint.h>
#include "kit_common.h"
#include "kit_touch.cuh"

static size_t kv_bytes_for(int request) { return (size_t)(1 + request % 2) * 2 * KIT_MIB; }

__attribute__((noinline)) void *kv_alloc_async(int request, cudaStream_t s)
{
    void *p = NULL;
    KIT_CHECK_RT(cudaMallocAsync(&p, kv_bytes_for(request), s));
    touch(p, kv_bytes_for(request), s);
    return p;
}

__attribute__((noinline)) static void *act_alloc_async(size_t bytes, cudaStream_t s)
{
    void *p = NULL;
    KIT_CHECK_RT(cudaMallocAsync(&p, bytes, s));
    return p;
}

int main(int argc, char **argv)
{
    int requests = (int)kit_int_arg(argc, argv, "--requests", 16);
    int reset = kit_has_flag(argc, argv, "--reset");
    size_t free0 = 0, free1 = 0, total = 0;
    cudaMemPool_t pool;
    cudaStream_t s;

    KIT_CHECK_RT(cudaSetDevice(0));
    KIT_CHECK_RT(cudaFree(0));
    KIT_CHECK_RT(cudaDeviceGetDefaultMemPool(&pool, 0));
    uint64_t threshold = UINT64_MAX;
    KIT_CHECK_RT(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
    KIT_CHECK_RT(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

    /* Warm-up, then give the pool's reserve back so the window starts empty. */
    void *w = act_alloc_async(2 * KIT_MIB, s);
    touch(w, 2 * KIT_MIB, s);
    KIT_CHECK_RT(cudaFreeAsync(w, s));
    KIT_CHECK_RT(cudaStreamSynchronize(s));
    KIT_CHECK_RT(cudaMemPoolTrimTo(pool, 0));
    KIT_CHECK_RT(cudaMemGetInfo(&free0, &total));

    int marks = 0, leaked = 0;
    unsigned long long leaked_bytes = 0;
    for (int r = 0; r < requests; r++) {
        void *act = act_alloc_async(8 * KIT_MIB, s);
        touch(act, 8 * KIT_MIB, s);
        void *kv = kv_alloc_async(r, s);
        KIT_CHECK_RT(cudaFreeAsync(act, s));
        if (r % 4 == 3) { /* forgot to free it: leaked */
            leaked++;
            leaked_bytes += kv_bytes_for(r);
        } else {
            KIT_CHECK_RT(cudaFreeAsync(kv, s));
        }
        KIT_CHECK_RT(cudaStreamSynchronize(s));
        marks += kit_mark("request");
    }
    KIT_CHECK_RT(cudaStreamSynchronize(s));

    uint64_t reserved = 0, used = 0, reserved_high = 0, used_high = 0;
    KIT_CHECK_RT(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved));
    KIT_CHECK_RT(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used));
    KIT_CHECK_RT(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &reserved_high));
    KIT_CHECK_RT(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &used_high));
    KIT_CHECK_RT(cudaMemGetInfo(&free1, &total));

    printf("TL_GROUND_TRUTH {\"sample\":\"async_pool\",\"api\":\"runtime\",\"pid\":%d,"
           "\"requests\":%d,\"marks\":%d,\"expect_growth\":null,"
           "\"leaks\":{\"count\":%d,\"bytes\":%llu},"
           "\"kinds\":{\"device|pool_block\":[%d,%llu]},"
           "\"sites\":[{\"function\":\"kv_alloc_async\",\"count\":%d,\"bytes\":%llu}],"
           "\"pool\":{\"kind\":\"stream_ordered\",\"reserved\":%llu,\"used\":%llu,"
           "\"reserved_high\":%llu,\"used_high\":%llu},"
           "\"expected_held\":%llu,\"free_start\":%zu,\"free_end\":%zu,\"total\":%zu}\n",
           (int)getpid(), requests, marks, leaked, leaked_bytes, leaked, leaked_bytes, leaked,
           leaked_bytes, (unsigned long long)reserved, (unsigned long long)used,
           (unsigned long long)reserved_high, (unsigned long long)used_high,
           (unsigned long long)reserved, free0, free1, total);
    fflush(stdout);
    kit_snapshot("end");
    KIT_CHECK_RT(cudaStreamDestroy(s));
    if (reset)
        KIT_CHECK_RT(cudaDeviceReset());
    return 0;
}
