/*
 * static_runtime.c — linked with libcudart_static.a, as nvcc links by
 * default.  No cudaMalloc symbol is interposable here: the runtime inside
 * this executable reaches the driver through dlopen + cuGetProcAddress, and
 * tensorleak must catch the allocations there.  Leaks two 3 MiB buffers.
 */
#include "cudart_compat.h"

#include <stdio.h>
#include <stdlib.h>

#define BUFFER_BYTES (3u << 20)

static __attribute__((noinline)) void *make_buffer(void)
{
    void *p = NULL;
    if (cudaMalloc(&p, BUFFER_BYTES) != cudaSuccess) { /* LEAK-SITE */
        fprintf(stderr, "static_runtime: cudaMalloc failed\n");
        exit(1);
    }
    return p;
}

int main(void)
{
    void *keep[2];
    for (int i = 0; i < 2; i++)
        keep[i] = make_buffer();
    void *freed = make_buffer();
    if (cudaFree(freed) != cudaSuccess)
        return 1;
    printf("static_runtime: leaked 2 buffers of %u bytes at %p %p\n", BUFFER_BYTES, keep[0], keep[1]);
    return 0;
}
