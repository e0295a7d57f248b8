/*
 * kit_touch.cuh: a kernel that writes one byte per 4 KiB page of a device buffer
 * on a stream, so stream-ordered and graph allocations are really backed and used
 * (async_pool.cu, graph.cu; captured into the graph when the stream is capturing).
 */
#include <cuda_runtime.h>
#include "kit_common.h"

__global__ void kit_touch(unsigned char *p, size_t n)
{
    size_t i = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) * 4096;
    if (i < n)
        p[i] = 1;
}

static void touch(void *p, size_t bytes, cudaStream_t s)
{
    size_t pages = (bytes + 4095) / 4096;
    kit_touch<<<(unsigned)((pages + 255) / 256), 256, 0, s>>>((unsigned char *)p, bytes);
    KIT_CHECK_RT(cudaGetLastError());
}
