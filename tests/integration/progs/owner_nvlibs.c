/* Memory that NVIDIA's libraries hold for the program's life -- cuRAND
 * generator state, cuFFT plans, cuSPARSE and cuSOLVER handles, a cuDNN 9
 * engine library, cuDNN's header-only frontend -- and one leak of the
 * program's own.  cuSOLVER is also linked "statically" here (its C entry
 * point in the program) and the frontend's cuda_malloc lives in the
 * program, as it does in whoever includes the header. */
#include "cudart_compat.h"
#include <stdio.h>

void *curandCreateGenerator(size_t bytes);
void *cufftMakePlan1d(size_t bytes);
void *cusparseCreate(size_t bytes);
void *cusolverDnCreate(size_t bytes);
void *cudnnBackendFinalize(size_t bytes);

/* As libcusolver_static.a would put it into the program. */
void *cusolverSpCreate(size_t bytes);
__attribute__((noinline)) void *cusolverSpCreate(size_t bytes)
{
    void *p = NULL;
    return cudaMalloc(&p, bytes) == cudaSuccess ? p : NULL;
}

/* cudnn_frontend::detail::cuda_malloc(void**, unsigned long), header-only. */
__attribute__((noinline)) int fe_cuda_malloc(void **p, size_t bytes) __asm__("_ZN14cudnn_frontend6detail11cuda_mallocEPPvm");
__attribute__((noinline)) int fe_cuda_malloc(void **p, size_t bytes)
{
    int rc = cudaMalloc(p, bytes);
    __asm__ volatile("" ::: "memory"); /* no tail call: keep this frame on the stack */
    return rc;
}

int main(void)
{
    void *fe = NULL, *mine = NULL;
    void *held[] = {
        curandCreateGenerator(256u << 10), cufftMakePlan1d(8u << 20), cusparseCreate(1u << 20),
        cusolverDnCreate(2u << 20),        cusolverSpCreate(512u << 10), cudnnBackendFinalize(4u << 20),
    };
    for (unsigned i = 0; i < sizeof held / sizeof held[0]; i++)
        if (!held[i])
            return 1;
    if (fe_cuda_malloc(&fe, 3u << 20) != cudaSuccess)
        return 2;
    if (cudaMalloc(&mine, 5u << 20) != cudaSuccess) /* USER-LEAK-SITE */
        return 3;
    printf("owner_nvlibs: done\n");
    return 0;
}
