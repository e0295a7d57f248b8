/* A library whose constructor allocates device memory and whose destructor
 * frees it: its stack is captured inside dlopen, while this thread holds
 * the loader's lock (dlopen_race.c loads and unloads it in a loop). */
#include "cudart_compat.h"

static void *block;

__attribute__((constructor)) static void allocate_on_load(void)
{
    cudaMalloc(&block, 1 << 20);
}

__attribute__((destructor)) static void free_on_unload(void)
{
    cudaFree(block);
}
