/*
 * fake_c10_cuda.c — built as libc10_cuda.so for the stand-in torch
 * (fake/torch, FAKE_TORCH_C10): its segments are cudaMalloc'ed from inside
 * a library of the name PyTorch's caching allocator has, so a failed
 * allocation carries the frame by which tensorleak knows that PyTorch's
 * out-of-memory observer will report it.
 */
#include <stddef.h>

typedef int (*malloc_fn)(void **, size_t);
static malloc_fn runtime_malloc;

/* The runtime's cudaMalloc as the stand-in resolved it (through ctypes). */
void fake_c10_set_malloc(void *fn);
void fake_c10_set_malloc(void *fn)
{
    runtime_malloc = (malloc_fn)fn;
}

int fake_c10_cuda_malloc(void **ptr, size_t bytes);
int fake_c10_cuda_malloc(void **ptr, size_t bytes)
{
    int rc = runtime_malloc ? runtime_malloc(ptr, bytes) : 2;
    /* Not a tail call: this frame must be on the stack of the failure. */
    __asm__ volatile("" ::: "memory");
    return rc;
}
