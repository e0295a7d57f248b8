/* Stands in for cuBLASLt (libcublasLt.so.13): a handle's workspace. */
#include "cudart_compat.h"
void *lt_workspace(size_t bytes);
__attribute__((noinline)) void *lt_workspace(size_t bytes)
{
    void *p = NULL;
    return cudaMalloc(&p, bytes) == cudaSuccess ? p : NULL;
}
