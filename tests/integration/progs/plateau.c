/* A cache that warms up and then stays: one 2 MiB block per request for the
 * first three requests, reused afterwards.  Growth detection must not flag
 * it: the footprint rises, then plateaus.  Everything is freed at the end. */
#include "cudart_compat.h"
#include "tensorleak.h"
#include <stdio.h>

#define CAPACITY 3

int main(void)
{
    void *cache[CAPACITY];
    int filled = 0;
    for (int request = 0; request < 12; request++) {
        if (filled < CAPACITY && cudaMalloc(&cache[filled++], 2u << 20) != cudaSuccess)
            return 1;
        void *scratch;
        if (cudaMalloc(&scratch, 1u << 20) != cudaSuccess || cudaFree(scratch) != cudaSuccess)
            return 1;
        tensorleak_mark("request");
    }
    for (int i = 0; i < filled; i++)
        cudaFree(cache[i]);
    printf("plateau: cache of %d blocks\n", filled);
    return 0;
}
