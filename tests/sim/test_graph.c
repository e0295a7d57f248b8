/*
 * test_graph.c — stream capture, graphs and graph memory: what captured
 * stream-ordered calls become, what a launch reserves, trim, and the
 * driver's error codes (sim/README.md, stream capture and graphs).  Runs
 * with SIMCUDA_MEMORY=64M.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>

#include "sim_test.h"

static cuuint64_t graph_attr(CUgraphMem_attribute a)
{
    cuuint64_t v = 0xdead;
    cu_ok(cuDeviceGetGraphMemAttribute(0, a, &v));
    return v;
}

#define used() graph_attr(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT)
#define reserved() graph_attr(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT)

static CUstream new_stream(void)
{
    CUstream s;
    cu_ok(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    return s;
}

Test(graph, a_captured_allocation_is_an_address_without_memory_until_launch)
{
    sim_start(0);
    CUstream s = new_stream();
    size_t used0 = simcuda_device_used_bytes(0);
    cu_ok(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CUstreamCaptureStatus st;
    cu_ok(cuStreamIsCapturing(s, &st));
    cr_assert_eq(st, CU_STREAM_CAPTURE_STATUS_ACTIVE);
    CUdeviceptr p = 0;
    cu_ok(cuMemAllocAsync(&p, 3 * MiB + 1, s));
    cr_assert(p >= 0x380000000000ull, "a graph node's address: %llx", (unsigned long long)p);
    cr_assert_eq(simcuda_device_used_bytes(0), used0, "nothing taken while capturing");
    CUgraph g;
    cu_ok(cuStreamEndCapture(s, &g));
    cu_ok(cuStreamIsCapturing(s, &st));
    cr_assert_eq(st, CU_STREAM_CAPTURE_STATUS_NONE);
    CUgraphExec e;
    cu_ok(cuGraphInstantiateWithFlags(&e, g, 0));
    cr_assert_eq(reserved(), 0);
    cu_ok(cuGraphLaunch(e, s));
    /* 3 MiB + 512 in use; reserved in 2 MiB steps. */
    cr_assert_eq(used(), 3 * MiB + 512);
    cr_assert_eq(reserved(), 4 * MiB);
    cr_assert_eq(simcuda_device_used_bytes(0), used0 + 4 * MiB, "cuMemGetInfo sees graph memory");
    cr_assert_eq(cuGraphLaunch(e, s), CUDA_ERROR_INVALID_VALUE, "relaunch with its allocation still live");
    cu_ok(cuMemFree_v2(p)); /* a graph allocation freed outside any graph */
    cr_assert_eq(used(), 0);
    cr_assert_eq(reserved(), 4 * MiB, "kept until trimmed");
    cu_ok(cuDeviceGraphMemTrim(0));
    cr_assert_eq(reserved(), 0);
    cr_assert_eq(graph_attr(CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH), 4 * MiB);
    cuuint64_t zero = 0, one = 1;
    cu_ok(cuDeviceSetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH, &zero));
    cr_assert_eq(graph_attr(CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH), 0);
    cr_assert_eq(cuDeviceSetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, &one), CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cuDeviceSetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &zero), CUDA_ERROR_INVALID_VALUE);
    cu_ok(cuGraphExecDestroy(e));
    cu_ok(cuGraphDestroy(g));
}

Test(graph, auto_free_on_launch_frees_the_last_launchs_allocations)
{
    sim_start(0);
    CUgraph g;
    cu_ok(cuGraphCreate(&g, 0));
    CUDA_MEM_ALLOC_NODE_PARAMS a;
    memset(&a, 0, sizeof a);
    a.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    a.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    a.bytesize = MiB;
    CUgraphNode n;
    cu_ok(cuGraphAddMemAllocNode(&n, g, NULL, 0, &a));
    CUgraphExec e, e2;
    cu_ok(cuGraphInstantiateWithFlags(&e, g, 1 /* AUTO_FREE_ON_LAUNCH */));
    cr_assert_eq(cuGraphInstantiateWithFlags(&e2, g, 0), CUDA_ERROR_INVALID_VALUE,
                 "one executable graph at a time for a graph with memory nodes");
    cu_ok(cuGraphLaunch(e, NULL));
    cu_ok(cuGraphLaunch(e, NULL));
    cr_assert_eq(used(), MiB);
    cr_assert_eq(graph_attr(CU_GRAPH_MEM_ATTR_USED_MEM_HIGH), MiB);
    CUgraphNode f;
    cr_assert_eq(cuGraphAddMemFreeNode(&f, g, NULL, 0, 0x1234), CUDA_ERROR_INVALID_VALUE, "no graph allocation");
    cu_ok(cuGraphAddMemFreeNode(&f, g, &n, 1, a.dptr));
    a.poolProps.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    cr_assert_eq(cuGraphAddMemAllocNode(&n, g, NULL, 0, &a), CUDA_ERROR_INVALID_VALUE, "no IPC for graph memory");
}

Test(graph, capture_errors_are_the_drivers)
{
    sim_start(0);
    CUstream s = new_stream(), other = new_stream();
    CUgraph g = NULL;
    cr_assert_eq(cuStreamBeginCapture_v2(NULL, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    cr_assert_eq(cuStreamBeginCapture_v2(s, 7), CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cuStreamEndCapture(s, &g), CUDA_ERROR_ILLEGAL_STATE, "no capture under way");
    cu_ok(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED));
    cr_assert_eq(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_ERROR_ILLEGAL_STATE);
    CUdeviceptr p, q;
    cu_ok(cuMemAlloc_v2(&p, MiB)); /* relaxed mode permits it */
    cu_ok(cuMemAllocAsync(&q, MiB, other)); /* another stream: an ordinary pool block */
    cr_assert(q < 0x300000000000ull);
    cr_assert_eq(cuMemFreeAsync(p, s), CUDA_ERROR_INVALID_VALUE, "a free node of no graph allocation");
    cu_ok(cuStreamEndCapture(s, &g));
    cu_ok(cuGraphDestroy(g));
    cu_ok(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    cr_assert_eq(cuMemAlloc_v2(&p, MiB), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    CUstreamCaptureStatus st;
    cuuint64_t id = 0;
    cu_ok(cuStreamGetCaptureInfo_v3(s, &st, &id, NULL, NULL, NULL, NULL));
    cr_assert_eq(st, CU_STREAM_CAPTURE_STATUS_INVALIDATED);
    cr_assert_eq(id, 2, "the second capture begun in the process");
    cr_assert_eq(cuMemAllocAsync(&q, MiB, s), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    g = (CUgraph)0x1;
    cr_assert_eq(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    cr_assert_null(g);
    cu_ok(cuMemAlloc_v2(&p, MiB)); /* no capture under way any more */
}

Test(graph, cuGetProcAddress_serves_the_versioned_variants)
{
    sim_start(0);
    void *fn = NULL;
    CUdriverProcAddressQueryResult st;
    cu_ok(cuGetProcAddress_v2("cuGraphInstantiate", &fn, 12000, 0, &st));
    cr_assert_eq(fn, (void *)cuGraphInstantiateWithFlags);
    cu_ok(cuGetProcAddress_v2("cuGraphInstantiate", &fn, 11040, 0, &st));
    cr_assert_eq(st, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    cu_ok(cuGetProcAddress_v2("cuStreamBeginCapture", &fn, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st));
    cr_assert_eq(fn, dlsym(RTLD_DEFAULT, "cuStreamBeginCapture_v2_ptsz"));
    cu_ok(cuGetProcAddress_v2("cuStreamGetCaptureInfo", &fn, 12000, 0, &st));
    cr_assert_eq(fn, dlsym(RTLD_DEFAULT, "cuStreamGetCaptureInfo_v2"));
    cu_ok(cuGetProcAddress_v2("cuStreamGetCaptureInfo", &fn, 12030, 0, &st));
    cr_assert_eq(fn, dlsym(RTLD_DEFAULT, "cuStreamGetCaptureInfo_v3"));
}

Test(graph, a_capture_into_the_programs_graph_adds_to_it_and_an_invalidated_one_leaves_it)
{
    sim_start(0);
    CUstream s = new_stream();
    CUgraph g, same = NULL;
    cu_ok(cuGraphCreate(&g, 0));
    cr_assert_eq(cuStreamBeginCaptureToGraph(s, (CUgraph)0x1234, NULL, NULL, 0, CU_STREAM_CAPTURE_MODE_GLOBAL),
                 CUDA_ERROR_INVALID_VALUE, "an unknown graph");
    cu_ok(cuStreamBeginCaptureToGraph(s, g, NULL, NULL, 0, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CUdeviceptr p;
    cu_ok(cuMemAllocAsync(&p, MiB, s));
    cu_ok(cuStreamEndCapture(s, &same));
    cr_assert_eq(same, g);
    cu_ok(cuStreamBeginCaptureToGraph(s, g, NULL, NULL, 0, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CUdeviceptr q;
    cr_assert_eq(cuMemAlloc_v2(&q, MiB), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    cr_assert_eq(cuStreamEndCapture(s, &same), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    CUgraphExec e;
    cu_ok(cuGraphInstantiateWithFlags(&e, g, 0)); /* still the program's, with its node */
    cu_ok(cuGraphLaunch(e, s));
    cr_assert_eq(used(), MiB);
    cu_ok(cuGraphExecDestroy(e));
    cu_ok(cuGraphDestroy(g));
}
