/* Stands in for PyTorch's libc10_cuda.so: the module name is what the
 * default owner rule matches.  Segments come from cudaMalloc (the caching
 * allocator's reserve), tensors from cudaMallocAsync (as under
 * backend:cudaMallocAsync, where each tensor is the program's own). */
#include "cudart_compat.h"
void *c10_segment_alloc(size_t bytes);
void *c10_async_tensor(size_t bytes);
__attribute__((noinline)) void *c10_segment_alloc(size_t bytes)
{
    void *p = NULL;
    return cudaMalloc(&p, bytes) == cudaSuccess ? p : NULL;
}
__attribute__((noinline)) void *c10_async_tensor(size_t bytes)
{
    void *p = NULL;
    return cudaMallocAsync(&p, bytes, NULL) == cudaSuccess ? p : NULL;
}
