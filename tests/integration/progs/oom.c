/* Fragments a 64 MiB device (SIMCUDA_MEMORY=64M): 16 blocks of 4 MiB, every
 * other one freed, leaves 32 MiB free in 4 MiB holes; an 8 MiB request then
 * fails although the free bytes would suffice. */
#include "cudart_compat.h"
#include <stdio.h>

int main(void)
{
    void *blocks[16];
    for (int i = 0; i < 16; i++)
        if (cudaMalloc(&blocks[i], 4u << 20) != cudaSuccess)
            return 1;
    for (int i = 0; i < 16; i += 2)
        cudaFree(blocks[i]);
    size_t free_b = 0, total = 0;
    cudaMemGetInfo(&free_b, &total);
    void *big = NULL;
    cudaError_t rc = cudaMalloc(&big, 8u << 20); /* OOM-SITE */
    printf("oom: free %zu total %zu big-alloc rc %d\n", free_b, total, (int)rc);
    for (int i = 1; i < 16; i += 2)
        cudaFree(blocks[i]);
    return 0;
}
