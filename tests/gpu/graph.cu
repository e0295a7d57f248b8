/*
 * graph.cu: graph memory, the way PyTorch's backend:cudaMallocAsync and TensorRT
 * meet it under CUDA graphs.  cudaMallocAsync on a capturing stream makes allocation
 * nodes of the captured graph (graph_alloc_captured: 1, 2 and 3 MiB, each touched by a
 * captured kernel, plus a 1 MiB scratch buffer freed inside the graph); the graph is
 * instantiated and launched once.  The 1 MiB node is then freed outside the graph
 * (cudaFreeAsync); the 2 and 3 MiB ones stay allocated in the device's graph memory:
 * held by it, not leaks of graph_alloc_captured.  One cudaMallocAsync outside capture
 * is forgotten (uncaptured_leak, 4 MiB): the only leak.  The truth for the graph
 * memory is the driver's own (cudaDeviceGetGraphMemAttribute) and cuMemGetInfo.
 */
#include <cuda_runtime.h>
#include <stdint.h>
#include "kit_common.h"
#include "kit_touch.cuh"

__attribute__((noinline)) void *graph_alloc_captured(size_t bytes, cudaStream_t s)
{
    void *p = NULL;
    KIT_CHECK_RT(cudaMallocAsync(&p, bytes, s));
    touch(p, bytes, s);
    return p;
}

__attribute__((noinline)) void *uncaptured_leak(size_t bytes, cudaStream_t s)
{
    void *p = NULL;
    KIT_CHECK_RT(cudaMallocAsync(&p, bytes, s));
    touch(p, bytes, s);
    return p;
}

static unsigned long long graph_attr(enum cudaGraphMemAttributeType a)
{
    unsigned long long v = 0;
    KIT_CHECK_RT(cudaDeviceGetGraphMemAttribute(0, a, &v));
    return v;
}

int main(int argc, char **argv)
{
    int reset = kit_has_flag(argc, argv, "--reset");
    size_t free0 = 0, free1 = 0, total = 0;
    cudaStream_t s;
    cudaMemPool_t pool;

    KIT_CHECK_RT(cudaSetDevice(0));
    KIT_CHECK_RT(cudaFree(0));
    KIT_CHECK_RT(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    KIT_CHECK_RT(cudaDeviceGetDefaultMemPool(&pool, 0));
    KIT_CHECK_RT(cudaDeviceGraphMemTrim(0));
    KIT_CHECK_RT(cudaMemPoolTrimTo(pool, 0));
    KIT_CHECK_RT(cudaMemGetInfo(&free0, &total));

    cudaGraph_t graph;
    cudaGraphExec_t exec;
    void *kept[3];
    KIT_CHECK_RT(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    for (int i = 0; i < 3; i++)
        kept[i] = graph_alloc_captured((size_t)(i + 1) * KIT_MIB, s);
    void *scratch = graph_alloc_captured(KIT_MIB, s);
    KIT_CHECK_RT(cudaFreeAsync(scratch, s));
    KIT_CHECK_RT(cudaStreamEndCapture(s, &graph));
    KIT_CHECK_RT(cudaGraphInstantiate(&exec, graph, 0));
    KIT_CHECK_RT(cudaGraphLaunch(exec, s));
    KIT_CHECK_RT(cudaStreamSynchronize(s));
    int marks = kit_mark("launched");

    KIT_CHECK_RT(cudaFreeAsync(kept[0], s)); /* a graph allocation freed outside the graph */
    size_t leak_bytes = 4 * KIT_MIB;
    (void)uncaptured_leak(leak_bytes, s);
    KIT_CHECK_RT(cudaStreamSynchronize(s));
    marks += kit_mark("freed");

    unsigned long long used = graph_attr(cudaGraphMemAttrUsedMemCurrent);
    unsigned long long reserved = graph_attr(cudaGraphMemAttrReservedMemCurrent);
    unsigned long long used_high = graph_attr(cudaGraphMemAttrUsedMemHigh);
    unsigned long long reserved_high = graph_attr(cudaGraphMemAttrReservedMemHigh);
    uint64_t pool_reserved = 0;
    KIT_CHECK_RT(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &pool_reserved));
    KIT_CHECK_RT(cudaMemGetInfo(&free1, &total));

    printf("TL_GROUND_TRUTH {\"sample\":\"graph\",\"api\":\"runtime\",\"pid\":%d,"
           "\"requests\":2,\"marks\":%d,\"expect_growth\":null,"
           "\"leaks\":{\"count\":1,\"bytes\":%zu},"
           "\"kinds\":{\"device\":[1,%zu]},"
           "\"sites\":[{\"function\":\"uncaptured_leak\",\"count\":1,\"bytes\":%zu}],"
           "\"pool\":{\"kind\":\"graph\",\"reserved\":%llu,\"used\":%llu,"
           "\"reserved_high\":%llu,\"used_high\":%llu},"
           "\"graph_held\":{\"function\":\"graph_alloc_captured\",\"count\":2,\"bytes\":%llu},"
           "\"expected_held\":%llu,\"free_start\":%zu,\"free_end\":%zu,\"total\":%zu}\n",
           (int)getpid(), marks, leak_bytes, leak_bytes, leak_bytes, reserved, used, reserved_high, used_high,
           5ull * KIT_MIB, (unsigned long long)(reserved + pool_reserved), free0, free1, total);
    fflush(stdout);
    kit_snapshot("end");
    KIT_CHECK_RT(cudaGraphExecDestroy(exec));
    KIT_CHECK_RT(cudaGraphDestroy(graph));
    KIT_CHECK_RT(cudaStreamDestroy(s));
    if (reset)
        KIT_CHECK_RT(cudaDeviceReset());
    return 0;
}
