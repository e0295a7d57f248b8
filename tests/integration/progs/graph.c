/*
 * Graph memory: allocations captured into CUDA graphs and allocation nodes
 * added directly, launched, freed, trimmed (graph_test.py).
 *
 *   graph   on one created stream:
 *           1. cudaStreamBeginCapture; cudaMallocAsync 3 MiB (A) and 1 MiB
 *              (T), cudaFreeAsync T; cudaStreamEndCapture -> g1
 *           2. through cuGetProcAddress: cuStreamBeginCapture (10010),
 *              cuMemAllocAsync (11020) 2 MiB (B), the per-thread variant of
 *              cuMemAllocFromPoolAsync 1 MiB (E) from a pool made for it,
 *              cuStreamEndCapture -> g2
 *           3. cuGraphCreate g3; cuGraphAddMemAllocNode 4 MiB (C) and 1 MiB
 *              (D); cuGraphAddMemFreeNode C; then cuStreamBeginCaptureToGraph
 *              (12030) into g3, cuMemAllocAsync 512 KiB (F)
 *           4. instantiate and launch g1 (runtime), g2 (cuGetProcAddress
 *              "cuGraphInstantiate" at 12000) and g3 (driver export); g2
 *              once more, refused: B is still allocated
 *           5. cudaFreeAsync A outside any capture
 *           6. a capture during which cudaMalloc is called: refused, the
 *              capture invalidated
 *           7. cudaDeviceGraphMemTrim, then the highs reset
 *           8. cuMemAllocAsync 512 KiB outside capture, never freed
 *           B, E, D and F stay allocated at exit: graph memory, not leaks.
 *
 * Prints every driver answer and the graph memory figures (in KiB) after
 * steps 4, 5, 7, so the test sees the program's behaviour is unchanged under
 * the preload.
 */
#include "cuda_compat.h"
#include "driver_entry.h"
#include "cudart_compat.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MiB (1ull << 20)
#define KiB (1ull << 10)

static procaddr_fn get_proc;

static void *driver_fn(const char *name, int version)
{
    return driver_entry(get_proc, "graph", name, version);
}

static void answer(const char *what, int rc)
{
    printf("%s %d\n", what, rc);
}

static void figures(const char *when)
{
    unsigned long long v[4] = {0};
    for (int a = 0; a < 4; a++)
        if (cudaDeviceGetGraphMemAttribute(0, (enum cudaGraphMemAttributeType)a, &v[a]) != cudaSuccess)
            printf("graph memory attribute %d refused\n", a);
    printf("%s: used %llu high %llu reserved %llu high %llu\n", when, v[0] / KiB, v[1] / KiB, v[2] / KiB, v[3] / KiB);
}

static __attribute__((noinline)) cudaGraph_t capture_through_runtime(cudaStream_t s, void **a)
{
    cudaGraph_t g = NULL;
    void *t = NULL;
    enum cudaStreamCaptureStatus st;
    answer("cudaStreamBeginCapture", cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    cudaStreamIsCapturing(s, &st);
    printf("capturing %d\n", (int)st);
    answer("cudaMallocAsync A", cudaMallocAsync(a, 3 * MiB, s)); /* GRAPH-SITE runtime */
    answer("cudaMallocAsync T", cudaMallocAsync(&t, 1 * MiB, s));
    answer("cudaFreeAsync T", cudaFreeAsync(t, s));
    answer("cudaStreamEndCapture", cudaStreamEndCapture(s, &g));
    cudaStreamIsCapturing(s, &st);
    printf("capturing %d\n", (int)st);
    return g;
}

static __attribute__((noinline)) CUgraph capture_through_procaddr(CUstream s)
{
    CUresult (*begin)(CUstream, CUstreamCaptureMode) = driver_fn("cuStreamBeginCapture", 10010);
    CUresult (*end)(CUstream, CUgraph *) = driver_fn("cuStreamEndCapture", 10000);
    CUresult (*alloc)(CUdeviceptr *, size_t, CUstream) = driver_fn("cuMemAllocAsync", 11020);
    /* The per-thread-default-stream variants, as a runtime built for them
     * asks for them (flags 2); given a created stream they act on it. */
    CUresult (*from_pool)(CUdeviceptr *, size_t, CUmemoryPool, CUstream) = NULL;
    CUdriverProcAddressQueryResult st;
    if (get_proc("cuMemAllocFromPoolAsync", (void **)&from_pool, 11020, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
                 &st) != CUDA_SUCCESS || !from_pool)
        exit(2);
    CUmemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    CUmemoryPool pool;
    answer("cuMemPoolCreate", cuMemPoolCreate(&pool, &props));
    CUgraph g = NULL;
    CUdeviceptr b = 0, e = 0;
    answer("cuStreamBeginCapture", begin(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    answer("cuMemAllocAsync B", alloc(&b, 2 * MiB, s)); /* GRAPH-SITE procaddr */
    answer("cuMemAllocFromPoolAsync_ptsz E", from_pool(&e, 1 * MiB, pool, s)); /* GRAPH-SITE pool */
    answer("cuStreamEndCapture", end(s, &g));
    return g;
}

static __attribute__((noinline)) CUgraph add_nodes_directly(void)
{
    CUgraph g = NULL;
    CUgraphNode c_node, d_node, free_node;
    CUDA_MEM_ALLOC_NODE_PARAMS c, d;
    memset(&c, 0, sizeof c);
    c.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    c.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    c.poolProps.location.id = 0;
    d = c;
    c.bytesize = 4 * MiB;
    d.bytesize = 1 * MiB;
    answer("cuGraphCreate", cuGraphCreate(&g, 0));
    answer("cuGraphAddMemAllocNode C", cuGraphAddMemAllocNode(&c_node, g, NULL, 0, &c));
    answer("cuGraphAddMemAllocNode D", cuGraphAddMemAllocNode(&d_node, g, &c_node, 1, &d)); /* GRAPH-SITE node */
    answer("cuGraphAddMemFreeNode C", cuGraphAddMemFreeNode(&free_node, g, &d_node, 1, c.dptr));
    return g;
}

static __attribute__((noinline)) void capture_into_graph(CUstream s, CUgraph g)
{
    CUresult (*begin)(CUstream, CUgraph, const CUgraphNode *, const CUgraphEdgeData *, size_t, CUstreamCaptureMode) =
        driver_fn("cuStreamBeginCaptureToGraph", 12030);
    CUresult (*end)(CUstream, CUgraph *) = driver_fn("cuStreamEndCapture", 10000);
    CUresult (*alloc)(CUdeviceptr *, size_t, CUstream) = driver_fn("cuMemAllocAsync", 11020);
    CUgraph same = NULL;
    CUdeviceptr f = 0;
    answer("cuStreamBeginCaptureToGraph", begin(s, g, NULL, NULL, 0, CU_STREAM_CAPTURE_MODE_GLOBAL));
    answer("cuMemAllocAsync F", alloc(&f, 512 * KiB, s)); /* GRAPH-SITE to-graph */
    answer("cuStreamEndCapture", end(s, &same));
    printf("same graph %d\n", same == g);
}

static __attribute__((noinline)) void leak_uncaptured(CUstream s)
{
    CUresult (*alloc)(CUdeviceptr *, size_t, CUstream) = driver_fn("cuMemAllocAsync", 11020);
    CUdeviceptr p = 0;
    answer("cuMemAllocAsync uncaptured", alloc(&p, 512 * KiB, s)); /* LEAK-SITE uncaptured */
}

int main(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "graph") != 0) {
        fprintf(stderr, "usage: graph graph\n");
        return 2;
    }
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    get_proc = h ? (procaddr_fn)dlsym(h, "cuGetProcAddress_v2") : NULL;
    if (!get_proc)
        return 2;
    cudaStream_t s;
    answer("cudaStreamCreate", cudaStreamCreate(&s));

    void *a = NULL;
    cudaGraph_t g1 = capture_through_runtime(s, &a);
    CUgraph g2 = capture_through_procaddr(s);
    CUgraph g3 = add_nodes_directly();
    capture_into_graph(s, g3);

    cudaGraphExec_t e1, e2, e3;
    CUresult (*instantiate)(CUgraphExec *, CUgraph, unsigned long long) = driver_fn("cuGraphInstantiate", 12000);
    answer("cudaGraphInstantiate g1", cudaGraphInstantiate(&e1, g1, 0));
    answer("cudaGraphLaunch g1", cudaGraphLaunch(e1, s));
    answer("cuGraphInstantiate(12000) g2", instantiate(&e2, g2, 0));
    answer("cudaGraphLaunch g2", cudaGraphLaunch(e2, s));
    answer("cuGraphInstantiateWithFlags g3", cuGraphInstantiateWithFlags(&e3, g3, 0));
    answer("cuGraphLaunch g3", cuGraphLaunch(e3, s));
    answer("cudaGraphLaunch g2 again", cudaGraphLaunch(e2, s));
    figures("launched");

    answer("cudaFreeAsync A", cudaFreeAsync(a, s));
    answer("cudaStreamSynchronize", cudaStreamSynchronize(s));
    figures("A freed");

    cudaGraph_t bad = NULL;
    void *sync = NULL;
    answer("cudaStreamBeginCapture", cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    answer("cudaMalloc during capture", cudaMalloc(&sync, 1 * MiB));
    answer("cudaStreamEndCapture", cudaStreamEndCapture(s, &bad));
    printf("graph %s\n", bad ? "made" : "none");

    answer("cudaDeviceGraphMemTrim", cudaDeviceGraphMemTrim(0));
    unsigned long long zero = 0;
    answer("reset used high", cudaDeviceSetGraphMemAttribute(0, cudaGraphMemAttrUsedMemHigh, &zero));
    answer("reset reserved high", cudaDeviceSetGraphMemAttribute(0, cudaGraphMemAttrReservedMemHigh, &zero));
    figures("trimmed");

    leak_uncaptured(s);
    answer("cudaGraphExecDestroy", cudaGraphExecDestroy(e1) | cudaGraphExecDestroy(e2) | cudaGraphExecDestroy(e3));
    answer("cudaGraphDestroy", cudaGraphDestroy(g1) | cudaGraphDestroy(g2) | cudaGraphDestroy(g3));
    return 0;
}
