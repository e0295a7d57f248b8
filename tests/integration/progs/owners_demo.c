/* Memory held at exit by several owners: PyTorch's caching allocator
 * (2 x 20 MiB segments), NCCL (8 MiB), a cuBLASLt workspace (4 MiB) — and
 * the program's own leaks: a 1 MiB async tensor made inside libc10_cuda and
 * a 2 MiB buffer of its own. */
#include "cudart_compat.h"
#include <stdio.h>

void *c10_segment_alloc(size_t bytes);
void *c10_async_tensor(size_t bytes);
void *nccl_comm_buffers(size_t bytes);
void *lt_workspace(size_t bytes);

int main(void)
{
    void *p[6] = {
        c10_segment_alloc(20u << 20), c10_segment_alloc(20u << 20), c10_async_tensor(1u << 20),
        nccl_comm_buffers(8u << 20), lt_workspace(4u << 20), NULL,
    };
    if (cudaMalloc(&p[5], 2u << 20) != cudaSuccess) /* USER-LEAK-SITE */
        return 1;
    for (int i = 0; i < 6; i++)
        if (!p[i])
            return 2;
    printf("owners_demo: done\n");
    return 0;
}
