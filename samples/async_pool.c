/*
 * async_pool.c — the stream-ordered allocator as PyTorch's
 * backend:cudaMallocAsync uses it: the default pool's release threshold is
 * UINT64_MAX, so freed memory stays reserved for reuse.  Each request
 * allocates 1, 2 and 4 MiB and frees them on the stream; the last request
 * forgets its 1 MiB buffer.  At exit the pool holds one 32 MiB chunk
 * (reserved) of which 1 MiB is allocated: the leak.
 *
 *   async_pool [REQUESTS]     (default 10)
 */
#include "cudart_compat.h"
#include "tensorleak.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static void check(cudaError_t rc, const char *what)
{
    if (rc != cudaSuccess) {
        fprintf(stderr, "async_pool: %s failed: %s\n", what, cudaGetErrorString(rc));
        exit(1);
    }
}

static __attribute__((noinline)) void *scratch(size_t bytes, cudaStream_t s)
{
    void *p = NULL;
    check(cudaMallocAsync(&p, bytes, s), "cudaMallocAsync"); /* LEAK-SITE */
    return p;
}

int main(int argc, char **argv)
{
    int requests = argc > 1 ? atoi(argv[1]) : 10;
    cudaStream_t stream;
    check(cudaStreamCreate(&stream), "cudaStreamCreate");
    cudaMemPool_t mempool;
    check(cudaDeviceGetDefaultMemPool(&mempool, 0), "cudaDeviceGetDefaultMemPool");
    uint64_t threshold = UINT64_MAX;
    check(cudaMemPoolSetAttribute(mempool, cudaMemPoolAttrReleaseThreshold, &threshold), "set release threshold");
    for (int i = 0; i < requests; i++) {
        void *a = scratch(1u << 20, stream), *b = scratch(2u << 20, stream), *c = scratch(4u << 20, stream);
        check(cudaFreeAsync(c, stream), "cudaFreeAsync");
        check(cudaFreeAsync(b, stream), "cudaFreeAsync");
        if (i != requests - 1)
            check(cudaFreeAsync(a, stream), "cudaFreeAsync");
        check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
        tensorleak_mark("request");
    }
    uint64_t reserved = 0, used = 0;
    cudaMemPoolGetAttribute(mempool, cudaMemPoolAttrReservedMemCurrent, &reserved);
    cudaMemPoolGetAttribute(mempool, cudaMemPoolAttrUsedMemCurrent, &used);
    printf("async_pool: reserved %llu used %llu\n", (unsigned long long)reserved, (unsigned long long)used);
    return 0;
}
