/*
 * interposer.c — an LD_PRELOAD library exporting cuMemAlloc_v2, like a naive
 * tracker.  test_interpose checks that the simulated driver, like NVIDIA's,
 * still hands out its own cuMemAlloc_v2 through cuGetProcAddress.
 */
#include "cuda_compat.h"

__attribute__((visibility("default"))) CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    (void)dptr;
    (void)bytesize;
    return CUDA_ERROR_UNKNOWN;
}
