/* Stands in for one NVIDIA library (built once per library under its real
 * soname, see meson.build): the library allocates device memory inside
 * itself, from an internal function, so the module rule is what names the
 * owner. */
#include "cudart_compat.h"

#if defined(FAKE_CURAND)
#define ENTRY curandCreateGenerator
#elif defined(FAKE_CUFFT)
#define ENTRY cufftMakePlan1d
#elif defined(FAKE_CUSPARSE)
#define ENTRY cusparseCreate
#elif defined(FAKE_CUSOLVER)
#define ENTRY cusolverDnCreate
#elif defined(FAKE_CUDNN_ENGINES)
#define ENTRY cudnnBackendFinalize
#else
#error "which library?"
#endif

static __attribute__((noinline)) void *internal_alloc(size_t bytes)
{
    void *p = NULL;
    return cudaMalloc(&p, bytes) == cudaSuccess ? p : NULL;
}

void *ENTRY(size_t bytes);
void *ENTRY(size_t bytes)
{
    return internal_alloc(bytes);
}
