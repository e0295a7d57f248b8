/* A native library deep enough to fill a stack on its own, as PyTorch is
 * (allocator, dispatcher and bindings: 15-25 frames between the CUDA call
 * and the evaluation loop in tests/gpu/torch_loop.py on an H200).  Built
 * with frame pointers and without sibling calls, so each level is a frame. */
#include <stddef.h>

typedef int (*malloc_fn)(void **, size_t);

__attribute__((noinline)) static int level(int depth, malloc_fn cuda_malloc, size_t size)
{
    void *p = NULL;
    int rc = depth > 0 ? level(depth - 1, cuda_malloc, size) : cuda_malloc(&p, size);
    __asm__ volatile("" ::: "memory"); /* keeps the call a call, not a tail jump */
    return rc;
}

__attribute__((visibility("default"))) int deep_native_alloc(int depth, malloc_fn cuda_malloc, size_t size)
{
    return level(depth, cuda_malloc, size);
}
