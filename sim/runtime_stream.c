/*
 * runtime_stream.c — streams beyond cudaStreamCreate, events, host callbacks,
 * and the stream-capture and graph calls PyTorch links against.
 *
 * Streams and events are the driver's (cuStreamCreateWithPriority,
 * cuEventCreate, ...): the runtime's handles are the driver's handles and
 * the runtime's flag values are the driver's.  The simulated driver
 * completes stream work at once, so queries answer cudaSuccess.
 *
 * Host functions (cudaLaunchHostFunc, cudaStreamAddCallback) run on a
 * thread of their own as soon as they are enqueued — the stream has
 * reached them, and NVIDIA's runtime runs them on an internal thread too,
 * so a caller holding a lock the function takes does not deadlock;
 * synchronising the stream does not wait for them (a deviation).
 *
 * Graph calls that would need nodes other than memory nodes and user
 * objects answer the runtime's own codes (cudaErrorNotSupported) rather
 * than pretending.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "runtime.h"

/* ---- streams ---- */

SIMRT_EXPORT cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags)
{
    cudaError_t e = simrt_enter();
    return simrt_status(e != cudaSuccess ? e : DRV(cuStreamCreate, pStream, flags));
}

SIMRT_EXPORT cudaError_t cudaStreamCreateWithPriority(cudaStream_t *pStream, unsigned int flags, int priority)
{
    cudaError_t e = simrt_enter();
    return simrt_status(e != cudaSuccess ? e : DRV(cuStreamCreateWithPriority, pStream, flags, priority));
}

SIMRT_EXPORT cudaError_t cudaStreamGetPriority(cudaStream_t hStream, int *priority)
{
    cudaError_t e = simrt_enter();
    return simrt_status(e != cudaSuccess ? e : DRV(cuStreamGetPriority, hStream, priority));
}

SIMRT_EXPORT cudaError_t cudaStreamQuery(cudaStream_t stream)
{
    cudaError_t e = simrt_enter();
    return simrt_status(e != cudaSuccess ? e : DRV(cuStreamQuery, stream));
}

SIMRT_EXPORT cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags)
{
    cudaError_t e = simrt_enter();
    return simrt_status(e != cudaSuccess ? e : DRV(cuStreamWaitEvent, stream, event, flags));
}

/* ---- events (cudaEvent* flags are the driver's CU_EVENT_* values) ---- */

SIMRT_EXPORT cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
    cudaError_t e = simrt_enter();
    return simrt_status(e != cudaSuccess ? e : DRV(cuEventCreate, event, flags));
}

SIMRT_EXPORT cudaError_t cudaEventCreate(cudaEvent_t *event) { return cudaEventCreateWithFlags(event, 0); }

SIMRT_EXPORT cudaError_t cudaEventDestroy(cudaEvent_t event)
{
    cudaError_t e = simrt_enter();
    return simrt_status(e != cudaSuccess ? e : DRV(cuEventDestroy_v2, event));
}

SIMRT_EXPORT cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
    cudaError_t e = simrt_enter();
    return simrt_status(e != cudaSuccess ? e : DRV(cuEventRecord, event, stream));
}

SIMRT_EXPORT cudaError_t cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream, unsigned int flags)
{
    cudaError_t e = simrt_enter();
    return simrt_status(e != cudaSuccess ? e : DRV(cuEventRecordWithFlags, event, stream, flags));
}

SIMRT_EXPORT cudaError_t cudaEventQuery(cudaEvent_t event)
{
    cudaError_t e = simrt_enter();
    return simrt_status(e != cudaSuccess ? e : DRV(cuEventQuery, event));
}

SIMRT_EXPORT cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
    cudaError_t e = simrt_enter();
    return simrt_status(e != cudaSuccess ? e : DRV(cuEventSynchronize, event));
}

SIMRT_EXPORT cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
    cudaError_t e = simrt_enter();
    return simrt_status(e != cudaSuccess ? e : DRV(cuEventElapsedTime_v2, ms, start, end));
}

/* cudaIpcEventHandle_t is the driver's CUipcEventHandle. */
SIMRT_EXPORT cudaError_t cudaIpcGetEventHandle(cudaIpcEventHandle_t *handle, cudaEvent_t event)
{
    cudaError_t e = simrt_enter();
    return simrt_status(e != cudaSuccess ? e : DRV(cuIpcGetEventHandle, (CUipcEventHandle *)handle, event));
}

SIMRT_EXPORT cudaError_t cudaIpcOpenEventHandle(cudaEvent_t *event, cudaIpcEventHandle_t handle)
{
    cudaError_t e = simrt_enter();
    if (e != cudaSuccess)
        return simrt_status(e);
    CUipcEventHandle h;
    memcpy(&h, &handle, sizeof h);
    return simrt_status(DRV(cuIpcOpenEventHandle, event, h));
}

/* ---- host functions ---- */

struct host_call {
    cudaHostFn_t fn;                /* cudaLaunchHostFunc */
    cudaStreamCallback_t callback;  /* cudaStreamAddCallback */
    cudaStream_t stream;
    void *data;
};

static void *host_call_thread(void *arg)
{
    struct host_call c = *(struct host_call *)arg;
    free(arg);
    if (c.fn)
        c.fn(c.data);
    else
        c.callback(c.stream, cudaSuccess, c.data);
    return NULL;
}

/* Checks the stream with the driver, then runs the call on a detached
 * thread. */
static cudaError_t enqueue_host_call(struct host_call c)
{
    cudaError_t e = simrt_enter();
    if (e == cudaSuccess)
        e = DRV(cuStreamQuery, c.stream);
    if (e != cudaSuccess)
        return e;
    struct host_call *copy = malloc(sizeof *copy);
    if (!copy)
        return cudaErrorMemoryAllocation;
    *copy = c;
    pthread_attr_t attr;
    pthread_t thread;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&thread, &attr, host_call_thread, copy);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        free(copy);
        return cudaErrorMemoryAllocation;
    }
    return cudaSuccess;
}

SIMRT_EXPORT cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *userData)
{
    if (!fn)
        return simrt_status(cudaErrorInvalidValue);
    return simrt_status(enqueue_host_call((struct host_call){ fn, NULL, stream, userData }));
}

/* flags must be 0 (cuda_runtime_api.h: "reserved for future use"). */
SIMRT_EXPORT cudaError_t cudaStreamAddCallback(cudaStream_t stream, cudaStreamCallback_t callback, void *userData,
                                               unsigned int flags)
{
    if (!callback || flags != 0)
        return simrt_status(cudaErrorInvalidValue);
    return simrt_status(enqueue_host_call((struct host_call){ NULL, callback, stream, userData }));
}

/* ---- stream capture ---- */

/* CUDA 13's form (7 arguments, with edge data) is the driver's _v3. */
SIMRT_EXPORT cudaError_t cudaStreamGetCaptureInfo(cudaStream_t stream, enum cudaStreamCaptureStatus *captureStatus_out,
                                                  unsigned long long *id_out, cudaGraph_t *graph_out,
                                                  const cudaGraphNode_t **dependencies_out,
                                                  const cudaGraphEdgeData **edgeData_out,
                                                  size_t *numDependencies_out)
{
    cudaError_t e = simrt_enter();
    return simrt_status(e != cudaSuccess ? e
                                         : DRV(cuStreamGetCaptureInfo_v3, stream,
                                               (CUstreamCaptureStatus *)captureStatus_out, (cuuint64_t *)id_out,
                                               graph_out, (const CUgraphNode **)dependencies_out,
                                               (const CUgraphEdgeData **)edgeData_out, numDependencies_out));
}

SIMRT_EXPORT cudaError_t cudaStreamBeginCaptureToGraph(cudaStream_t stream, cudaGraph_t graph,
                                                       const cudaGraphNode_t *dependencies,
                                                       const cudaGraphEdgeData *dependencyData,
                                                       size_t numDependencies, enum cudaStreamCaptureMode mode)
{
    cudaError_t e = simrt_enter();
    return simrt_status(e != cudaSuccess ? e
                                         : DRV(cuStreamBeginCaptureToGraph, stream, graph,
                                               (const CUgraphNode *)dependencies,
                                               (const CUgraphEdgeData *)dependencyData, numDependencies,
                                               (CUstreamCaptureMode)mode));
}

/* The simulated driver ignores dependencies between nodes, so setting a
 * capturing stream's is accepted and changes nothing; a stream that is not
 * capturing is cudaErrorIllegalState (cuda_runtime_api.h). */
SIMRT_EXPORT cudaError_t cudaStreamUpdateCaptureDependencies(cudaStream_t stream, cudaGraphNode_t *dependencies,
                                                             const cudaGraphEdgeData *dependencyData,
                                                             size_t numDependencies, unsigned int flags)
{
    (void)dependencyData;
    if ((numDependencies && !dependencies) || flags > 1)
        return simrt_status(cudaErrorInvalidValue);
    enum cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    cudaError_t e = cudaStreamIsCapturing(stream, &status);
    if (e == cudaSuccess && status != cudaStreamCaptureStatusActive)
        e = SIMRT_ERROR_ILLEGAL_STATE;
    return simrt_status(e);
}

SIMRT_EXPORT cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *mode)
{
    cudaError_t e = simrt_load();
    return simrt_status(e != cudaSuccess ? e : DRV(cuThreadExchangeStreamCaptureMode, (CUstreamCaptureMode *)mode));
}

/* ---- graphs ---- */

SIMRT_EXPORT cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
                                                       unsigned long long flags)
{
    return cudaGraphInstantiate(pGraphExec, graph, flags);
}

/* Node queries and explicit nodes need the driver's general graph API,
 * which the simulated driver does not have (it records memory nodes only). */
static cudaError_t graph_unsupported(void)
{
    cudaError_t e = simrt_enter();
    return simrt_status(e != cudaSuccess ? e : cudaErrorNotSupported);
}

SIMRT_EXPORT cudaError_t cudaGraphAddNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
                                          const cudaGraphNode_t *pDependencies,
                                          const cudaGraphEdgeData *dependencyData, size_t numDependencies,
                                          struct cudaGraphNodeParams *nodeParams)
{
    (void)pGraphNode;
    (void)graph;
    (void)pDependencies;
    (void)dependencyData;
    (void)numDependencies;
    (void)nodeParams;
    return graph_unsupported();
}

SIMRT_EXPORT cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t *nodes, size_t *numNodes)
{
    cudaError_t e = simrt_enter();
    return simrt_status(e != cudaSuccess ? e : DRV(cuGraphGetNodes, graph, (CUgraphNode *)nodes, numNodes));
}

SIMRT_EXPORT cudaError_t cudaGraphNodeGetDependencies(cudaGraphNode_t node, cudaGraphNode_t *pDependencies,
                                                      cudaGraphEdgeData *edgeData, size_t *pNumDependencies)
{
    (void)node;
    (void)pDependencies;
    (void)edgeData;
    (void)pNumDependencies;
    return graph_unsupported();
}

SIMRT_EXPORT cudaError_t cudaGraphConditionalHandleCreate(cudaGraphConditionalHandle *pHandle_out, cudaGraph_t graph,
                                                          unsigned int defaultLaunchValue, unsigned int flags)
{
    (void)pHandle_out;
    (void)graph;
    (void)defaultLaunchValue;
    (void)flags;
    return graph_unsupported();
}

SIMRT_EXPORT cudaError_t cudaUserObjectCreate(cudaUserObject_t *object_out, void *ptr, cudaHostFn_t destroy,
                                              unsigned int initialRefcount, unsigned int flags)
{
    (void)object_out;
    (void)ptr;
    (void)destroy;
    (void)initialRefcount;
    (void)flags;
    return graph_unsupported();
}

SIMRT_EXPORT cudaError_t cudaUserObjectRelease(cudaUserObject_t object, unsigned int count)
{
    (void)object;
    (void)count;
    return graph_unsupported();
}

SIMRT_EXPORT cudaError_t cudaGraphRetainUserObject(cudaGraph_t graph, cudaUserObject_t object, unsigned int count,
                                                   unsigned int flags)
{
    (void)graph;
    (void)object;
    (void)count;
    (void)flags;
    return graph_unsupported();
}

/* ---- pool access ---- */

/* The devices have no peer access (runtime_device.c): a pool can be made
 * accessible from the current device only; another device is
 * cudaErrorInvalidDevice. */
SIMRT_EXPORT cudaError_t cudaMemPoolSetAccess(cudaMemPool_t memPool, const struct cudaMemAccessDesc *descList,
                                              size_t count)
{
    cudaError_t e = simrt_enter();
    if (e != cudaSuccess)
        return simrt_status(e);
    if (!memPool || (count && !descList))
        return simrt_status(cudaErrorInvalidValue);
    const CUmemAccessDesc *d = (const CUmemAccessDesc *)(const void *)descList;
    for (size_t i = 0; i < count; i++) {
        if (d[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE)
            return simrt_status(cudaErrorInvalidValue);
        if (d[i].location.id != simrt_current_device())
            return simrt_status(cudaErrorInvalidDevice);
    }
    return cudaSuccess;
}
