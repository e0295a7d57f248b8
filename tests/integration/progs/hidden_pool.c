/* hidden_pool — stream-ordered calls tensorleak does not see, for
 * first_figures: loaded with RTLD_DEEPBIND, this library's references bind
 * to libcuda.so.1 (its own dependency) before the preloaded library's. */
#include "cuda_compat.h"

CUresult hidden_alloc(CUdeviceptr *p, size_t bytes, CUmemoryPool pool, CUstream stream);
CUresult hidden_alloc(CUdeviceptr *p, size_t bytes, CUmemoryPool pool, CUstream stream)
{
    return cuMemAllocFromPoolAsync(p, bytes, pool, stream);
}

CUresult hidden_free(CUdeviceptr p, CUstream stream);
CUresult hidden_free(CUdeviceptr p, CUstream stream)
{
    return cuMemFreeAsync(p, stream);
}
