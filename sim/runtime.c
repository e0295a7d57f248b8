/*
 * runtime.c — the simulated CUDA runtime API.
 *
 * Each cuda* function loads the driver on first use (runtime_driver.c), makes
 * the current device's primary context current in the calling thread the
 * first time that thread needs it (cuDevicePrimaryCtxRetain once per device
 * and process, cuCtxSetCurrent once per thread and device, as cudart does),
 * and forwards to the driver through the fetched pointers only — never a
 * direct call — so every runtime call is visible to whatever intercepts the
 * driver, and the runtime's own exports stay interposable.
 *
 * Every exported call returns through simrt_status, so a failure is also the
 * thread's last error (cudaGetLastError, runtime_errors.c).
 *
 * Simplification: the runtime does not notice a context the program made
 * current itself through the driver API (the real one adopts it).
 */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "runtime.h"

#define SIMRT_MAX_DEVICES 64

static pthread_mutex_t primary_lock = PTHREAD_MUTEX_INITIALIZER;
static CUcontext primary[SIMRT_MAX_DEVICES];

static __thread int tls_device;          /* cudaSetDevice; 0 by default */
static __thread int tls_bound = -1;      /* device whose primary context is current here */

cudaError_t simrt_primary(int dev, CUcontext *out)
{
    if (dev < 0 || dev >= SIMRT_MAX_DEVICES)
        return cudaErrorInvalidDevice;
    cudaError_t e = cudaSuccess;
    pthread_mutex_lock(&primary_lock);
    if (!primary[dev]) {
        CUdevice cudev;
        e = DRV(cuDeviceGet, &cudev, dev);
        if (e == cudaSuccess)
            e = DRV(cuDevicePrimaryCtxRetain, &primary[dev], cudev);
    }
    *out = primary[dev];
    pthread_mutex_unlock(&primary_lock);
    return e;
}

static cudaError_t bind_context(void)
{
    int dev = tls_device;
    if (tls_bound == dev)
        return cudaSuccess;
    CUcontext ctx = NULL;
    cudaError_t e = simrt_primary(dev, &ctx);
    if (e == cudaSuccess)
        e = DRV(cuCtxSetCurrent, ctx);
    if (e == cudaSuccess)
        tls_bound = dev;
    return e;
}

cudaError_t simrt_enter(void)
{
    cudaError_t e = simrt_load();
    return e != cudaSuccess ? e : bind_context();
}

int simrt_current_device(void) { return tls_device; }

#define enter simrt_enter

/* ---- device management ---- */

SIMRT_EXPORT cudaError_t cudaGetDeviceCount(int *count)
{
    if (!count)
        return simrt_status(cudaErrorInvalidValue);
    *count = 0;
    cudaError_t e = simrt_load();
    return simrt_status(e != cudaSuccess ? e : DRV(cuDeviceGetCount, count));
}

/* Makes the device's primary context current at once, as cudart has since
 * CUDA 12. */
SIMRT_EXPORT cudaError_t cudaSetDevice(int device)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess)
        return simrt_status(e);
    if (device < 0 || device >= count || device >= SIMRT_MAX_DEVICES)
        return simrt_status(cudaErrorInvalidDevice);
    tls_device = device;
    return simrt_status(bind_context());
}

SIMRT_EXPORT cudaError_t cudaGetDevice(int *device)
{
    cudaError_t e = simrt_load();
    if (e != cudaSuccess)
        return simrt_status(e);
    if (!device)
        return simrt_status(cudaErrorInvalidValue);
    *device = tls_device;
    return simrt_status(cudaSuccess);
}

/* Frees everything on the current device: the primary context's memory goes
 * with cuDevicePrimaryCtxReset_v2. */
SIMRT_EXPORT cudaError_t cudaDeviceReset(void)
{
    cudaError_t e = simrt_load();
    return simrt_status(e != cudaSuccess ? e : DRV(cuDevicePrimaryCtxReset_v2, tls_device));
}

SIMRT_EXPORT cudaError_t cudaDeviceSynchronize(void)
{
    cudaError_t e = enter();
    return simrt_status(e != cudaSuccess ? e : DRV(cuCtxSynchronize));
}

SIMRT_EXPORT cudaError_t cudaDriverGetVersion(int *driverVersion)
{
    if (!driverVersion)
        return simrt_status(cudaErrorInvalidValue);
    *driverVersion = 0; /* no driver: 0, and success, as documented */
    if (simrt_load() == cudaErrorInsufficientDriver || !simrt_drv.cuDriverGetVersion)
        return simrt_status(cudaSuccess);
    return simrt_status(DRV(cuDriverGetVersion, driverVersion));
}

SIMRT_EXPORT cudaError_t cudaRuntimeGetVersion(int *runtimeVersion)
{
    if (!runtimeVersion)
        return simrt_status(cudaErrorInvalidValue);
    *runtimeVersion = CUDART_VERSION;
    return simrt_status(cudaSuccess);
}

SIMRT_EXPORT cudaError_t cudaMemGetInfo(size_t *free, size_t *total)
{
    cudaError_t e = enter();
    return simrt_status(e != cudaSuccess ? e : DRV(cuMemGetInfo_v2, free, total));
}

/* ---- memory ---- */

/* cudaMalloc of 0 bytes succeeds with a NULL pointer (the driver would refuse
 * it; the real runtime never asks). */
SIMRT_EXPORT cudaError_t cudaMalloc(void **devPtr, size_t size)
{
    cudaError_t e = enter();
    if (e != cudaSuccess)
        return simrt_status(e);
    if (!devPtr)
        return simrt_status(cudaErrorInvalidValue);
    *devPtr = NULL;
    if (size == 0)
        return simrt_status(cudaSuccess);
    CUdeviceptr p = 0;
    e = DRV(cuMemAlloc_v2, &p, size);
    if (e == cudaSuccess)
        *devPtr = (void *)(uintptr_t)p;
    return simrt_status(e);
}

/* cudaFree(NULL) succeeds — after initialising the context, which is why
 * programs call it to warm up. */
SIMRT_EXPORT cudaError_t cudaFree(void *devPtr)
{
    cudaError_t e = enter();
    if (e != cudaSuccess || !devPtr)
        return simrt_status(e);
    return simrt_status(DRV(cuMemFree_v2, (CUdeviceptr)(uintptr_t)devPtr));
}

SIMRT_EXPORT cudaError_t cudaMallocPitch(void **devPtr, size_t *pitch, size_t width, size_t height)
{
    cudaError_t e = enter();
    if (e != cudaSuccess)
        return simrt_status(e);
    if (!devPtr)
        return simrt_status(cudaErrorInvalidValue);
    CUdeviceptr p = 0;
    e = DRV(cuMemAllocPitch_v2, &p, pitch, width, height, 4);
    if (e == cudaSuccess)
        *devPtr = (void *)(uintptr_t)p;
    return simrt_status(e);
}

/* Rows of extent.width bytes, extent.height x extent.depth of them, each
 * padded to the driver's pitch: cudaMallocPitch's layout, as NVIDIA's
 * runtime makes it. */
SIMRT_EXPORT cudaError_t cudaMalloc3D(struct cudaPitchedPtr *pitchedDevPtr, struct cudaExtent extent)
{
    cudaError_t e = enter();
    if (e != cudaSuccess)
        return simrt_status(e);
    if (!pitchedDevPtr || (extent.depth && extent.height > SIZE_MAX / extent.depth))
        return simrt_status(cudaErrorInvalidValue);
    CUdeviceptr p = 0;
    size_t pitch = 0;
    e = DRV(cuMemAllocPitch_v2, &p, &pitch, extent.width, extent.height * extent.depth, 4);
    if (e == cudaSuccess)
        *pitchedDevPtr = (struct cudaPitchedPtr){(void *)(uintptr_t)p, pitch, extent.width, extent.height};
    return simrt_status(e);
}

/* ---- CUDA arrays: a cudaArray_t is the driver's CUarray ---- */

/* The driver's format and channel count for a channel description: every
 * channel present has the first one's width (8, 16 or 32 bits); 16-bit
 * floats are CU_AD_FORMAT_HALF.  0 when it has none. */
static unsigned channels_of(const struct cudaChannelFormatDesc *d, CUarray_format *format)
{
    int bits = d->x;
    unsigned n = (d->x > 0) + (d->y > 0) + (d->z > 0) + (d->w > 0);
    if ((n != 1 && n != 2 && n != 4) || (d->y && d->y != bits) || (d->z && d->z != bits) || (d->w && d->w != bits))
        return 0;
    static const CUarray_format table[3][3] = {
        [cudaChannelFormatKindSigned] = {CU_AD_FORMAT_SIGNED_INT8, CU_AD_FORMAT_SIGNED_INT16, CU_AD_FORMAT_SIGNED_INT32},
        [cudaChannelFormatKindUnsigned] = {CU_AD_FORMAT_UNSIGNED_INT8, CU_AD_FORMAT_UNSIGNED_INT16,
                                           CU_AD_FORMAT_UNSIGNED_INT32},
        [cudaChannelFormatKindFloat] = {0, CU_AD_FORMAT_HALF, CU_AD_FORMAT_FLOAT},
    };
    int w = bits == 8 ? 0 : bits == 16 ? 1 : bits == 32 ? 2 : -1;
    if (w < 0 || (unsigned)d->f > cudaChannelFormatKindFloat || !table[d->f][w])
        return 0;
    *format = table[d->f][w];
    return n;
}

static cudaError_t array_desc(const struct cudaChannelFormatDesc *desc, struct cudaExtent extent, unsigned flags,
                              CUDA_ARRAY3D_DESCRIPTOR *out)
{
    CUarray_format format;
    unsigned n = desc ? channels_of(desc, &format) : 0;
    if (!n)
        return cudaErrorInvalidValue;
    *out = (CUDA_ARRAY3D_DESCRIPTOR){extent.width, extent.height, extent.depth, format, n, flags};
    return cudaSuccess;
}

SIMRT_EXPORT cudaError_t cudaMalloc3DArray(cudaArray_t *array, const struct cudaChannelFormatDesc *desc,
                                           struct cudaExtent extent, unsigned int flags)
{
    cudaError_t e = enter();
    CUDA_ARRAY3D_DESCRIPTOR d;
    if (e == cudaSuccess && !array)
        e = cudaErrorInvalidValue;
    if (e == cudaSuccess)
        e = array_desc(desc, extent, flags, &d);
    return simrt_status(e != cudaSuccess ? e : DRV(cuArray3DCreate_v2, (CUarray *)array, &d));
}

SIMRT_EXPORT cudaError_t cudaMallocArray(cudaArray_t *array, const struct cudaChannelFormatDesc *desc, size_t width,
                                         size_t height, unsigned int flags)
{
    return simrt_status(cudaMalloc3DArray(array, desc, (struct cudaExtent){width, height, 0}, flags));
}

SIMRT_EXPORT cudaError_t cudaMallocMipmappedArray(cudaMipmappedArray_t *mipmappedArray,
                                                  const struct cudaChannelFormatDesc *desc, struct cudaExtent extent,
                                                  unsigned int numLevels, unsigned int flags)
{
    cudaError_t e = enter();
    CUDA_ARRAY3D_DESCRIPTOR d;
    if (e == cudaSuccess && !mipmappedArray)
        e = cudaErrorInvalidValue;
    if (e == cudaSuccess)
        e = array_desc(desc, extent, flags, &d);
    return simrt_status(e != cudaSuccess ? e : DRV(cuMipmappedArrayCreate, (CUmipmappedArray *)mipmappedArray, &d, numLevels));
}

/* Freeing 0 does nothing (cuda_runtime_api.h). */
SIMRT_EXPORT cudaError_t cudaFreeArray(cudaArray_t array)
{
    cudaError_t e = enter();
    return simrt_status(e != cudaSuccess || !array ? e : DRV(cuArrayDestroy, (CUarray)array));
}

SIMRT_EXPORT cudaError_t cudaFreeMipmappedArray(cudaMipmappedArray_t mipmappedArray)
{
    cudaError_t e = enter();
    return simrt_status(e != cudaSuccess || !mipmappedArray ? e : DRV(cuMipmappedArrayDestroy, (CUmipmappedArray)mipmappedArray));
}

SIMRT_EXPORT cudaError_t cudaArrayGetMemoryRequirements(struct cudaArrayMemoryRequirements *memoryRequirements,
                                                        cudaArray_t array, int device)
{
    cudaError_t e = enter();
    return simrt_status(e != cudaSuccess ? e
                                         : DRV(cuArrayGetMemoryRequirements,
                                               (CUDA_ARRAY_MEMORY_REQUIREMENTS *)memoryRequirements, (CUarray)array,
                                               device));
}

SIMRT_EXPORT cudaError_t cudaMipmappedArrayGetMemoryRequirements(struct cudaArrayMemoryRequirements *memoryRequirements,
                                                                 cudaMipmappedArray_t mipmap, int device)
{
    cudaError_t e = enter();
    return simrt_status(e != cudaSuccess ? e
                                         : DRV(cuMipmappedArrayGetMemoryRequirements,
                                               (CUDA_ARRAY_MEMORY_REQUIREMENTS *)memoryRequirements,
                                               (CUmipmappedArray)mipmap, device));
}

SIMRT_EXPORT cudaError_t cudaMallocManaged(void **devPtr, size_t size, unsigned int flags)
{
    cudaError_t e = enter();
    if (e != cudaSuccess)
        return simrt_status(e);
    if (!devPtr)
        return simrt_status(cudaErrorInvalidValue);
    CUdeviceptr p = 0;
    e = DRV(cuMemAllocManaged, &p, size, flags);
    if (e == cudaSuccess)
        *devPtr = (void *)(uintptr_t)p;
    return simrt_status(e);
}

SIMRT_EXPORT cudaError_t cudaMallocHost(void **ptr, size_t size)
{
    cudaError_t e = enter();
    return simrt_status(e != cudaSuccess ? e : DRV(cuMemAllocHost_v2, ptr, size));
}

/* cudaHostAlloc flags have the driver's values (Portable 1, Mapped 2,
 * WriteCombined 4). */
SIMRT_EXPORT cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags)
{
    cudaError_t e = enter();
    return simrt_status(e != cudaSuccess ? e : DRV(cuMemHostAlloc, pHost, size, flags));
}

SIMRT_EXPORT cudaError_t cudaFreeHost(void *ptr)
{
    cudaError_t e = enter();
    return simrt_status(e != cudaSuccess ? e : DRV(cuMemFreeHost, ptr));
}

/* cudaHostRegister flags have the driver's values (Portable 1, Mapped 2,
 * IoMemory 4, ReadOnly 8). */
SIMRT_EXPORT cudaError_t cudaHostRegister(void *ptr, size_t size, unsigned int flags)
{
    cudaError_t e = enter();
    return simrt_status(e != cudaSuccess ? e : DRV(cuMemHostRegister_v2, ptr, size, flags));
}

SIMRT_EXPORT cudaError_t cudaHostUnregister(void *ptr)
{
    cudaError_t e = enter();
    return simrt_status(e != cudaSuccess ? e : DRV(cuMemHostUnregister, ptr));
}

/* ---- CUDA IPC ---- */
/* cudaIpcMemHandle_t is the driver's CUipcMemHandle, and
 * cudaIpcMemLazyEnablePeerAccess its CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS (1). */

SIMRT_EXPORT cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *handle, void *devPtr)
{
    cudaError_t e = enter();
    return simrt_status(e != cudaSuccess ? e : DRV(cuIpcGetMemHandle, (CUipcMemHandle *)handle, (CUdeviceptr)(uintptr_t)devPtr));
}

SIMRT_EXPORT cudaError_t cudaIpcOpenMemHandle(void **devPtr, cudaIpcMemHandle_t handle, unsigned int flags)
{
    cudaError_t e = enter();
    if (e != cudaSuccess)
        return simrt_status(e);
    CUipcMemHandle h;
    memcpy(&h, &handle, sizeof h);
    CUdeviceptr p = 0;
    e = DRV(cuIpcOpenMemHandle_v2, devPtr ? &p : NULL, h, flags);
    if (e == cudaSuccess)
        *devPtr = (void *)(uintptr_t)p;
    return simrt_status(e);
}

SIMRT_EXPORT cudaError_t cudaIpcCloseMemHandle(void *devPtr)
{
    cudaError_t e = enter();
    return simrt_status(e != cudaSuccess ? e : DRV(cuIpcCloseMemHandle, (CUdeviceptr)(uintptr_t)devPtr));
}

/* ---- streams ---- */

SIMRT_EXPORT cudaError_t cudaStreamCreate(cudaStream_t *pStream)
{
    cudaError_t e = enter();
    return simrt_status(e != cudaSuccess ? e : DRV(cuStreamCreate, pStream, CU_STREAM_DEFAULT));
}

SIMRT_EXPORT cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
    cudaError_t e = enter();
    return simrt_status(e != cudaSuccess ? e : DRV(cuStreamDestroy_v2, stream));
}

SIMRT_EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
    cudaError_t e = enter();
    return simrt_status(e != cudaSuccess ? e : DRV(cuStreamSynchronize, stream));
}

/* ---- stream-ordered allocation ---- */

static cudaError_t malloc_async(__typeof__(simrt_drv.cuMemAllocAsync) fn, void **devPtr, size_t size,
                                cudaStream_t stream)
{
    cudaError_t e = enter();
    if (e != cudaSuccess)
        return e;
    if (!devPtr)
        return cudaErrorInvalidValue;
    if (!fn)
        return SIMRT_ERROR_CALL_REQUIRES_NEWER_DRIVER;
    CUdeviceptr p = 0;
    e = simrt_result(fn(&p, size, stream));
    if (e == cudaSuccess)
        *devPtr = (void *)(uintptr_t)p;
    return e;
}

static cudaError_t malloc_from_pool(__typeof__(simrt_drv.cuMemAllocFromPoolAsync) fn, void **ptr, size_t size,
                                    cudaMemPool_t pool, cudaStream_t stream)
{
    cudaError_t e = enter();
    if (e != cudaSuccess)
        return e;
    if (!ptr)
        return cudaErrorInvalidValue;
    if (!fn)
        return SIMRT_ERROR_CALL_REQUIRES_NEWER_DRIVER;
    CUdeviceptr p = 0;
    e = simrt_result(fn(&p, size, pool, stream));
    if (e == cudaSuccess)
        *ptr = (void *)(uintptr_t)p;
    return e;
}

static cudaError_t free_async(__typeof__(simrt_drv.cuMemFreeAsync) fn, void *devPtr, cudaStream_t stream)
{
    cudaError_t e = enter();
    if (e != cudaSuccess)
        return e;
    if (!fn)
        return SIMRT_ERROR_CALL_REQUIRES_NEWER_DRIVER;
    return simrt_result(fn((CUdeviceptr)(uintptr_t)devPtr, stream));
}

SIMRT_EXPORT cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t hStream)
{
    return simrt_status(malloc_async(simrt_drv.cuMemAllocAsync, devPtr, size, hStream));
}

SIMRT_EXPORT cudaError_t cudaMallocAsync_ptsz(void **devPtr, size_t size, cudaStream_t hStream)
{
    return simrt_status(malloc_async(simrt_drv.cuMemAllocAsync_ptsz, devPtr, size, hStream));
}

SIMRT_EXPORT cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t hStream)
{
    return simrt_status(free_async(simrt_drv.cuMemFreeAsync, devPtr, hStream));
}

SIMRT_EXPORT cudaError_t cudaFreeAsync_ptsz(void *devPtr, cudaStream_t hStream)
{
    return simrt_status(free_async(simrt_drv.cuMemFreeAsync_ptsz, devPtr, hStream));
}

SIMRT_EXPORT cudaError_t cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t memPool, cudaStream_t stream)
{
    return simrt_status(malloc_from_pool(simrt_drv.cuMemAllocFromPoolAsync, ptr, size, memPool, stream));
}

SIMRT_EXPORT cudaError_t cudaMallocFromPoolAsync_ptsz(void **ptr, size_t size, cudaMemPool_t memPool,
                                                      cudaStream_t stream)
{
    return simrt_status(malloc_from_pool(simrt_drv.cuMemAllocFromPoolAsync_ptsz, ptr, size, memPool, stream));
}

/* ---- stream capture and graphs ---- */
/* The runtime's enums and handles are the driver's (same values, same
 * structs), so each call forwards as it is; cudaGraphInstantiate is the
 * driver's cuGraphInstantiateWithFlags, as CUDA 12's runtime calls it. */

#define GRAPH_CALL(fn, ...)                                      \
    do {                                                         \
        cudaError_t e_ = enter();                                \
        return simrt_status(e_ != cudaSuccess ? e_ : DRV(fn, __VA_ARGS__)); \
    } while (0)

SIMRT_EXPORT cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode)
{
    GRAPH_CALL(cuStreamBeginCapture_v2, stream, (CUstreamCaptureMode)mode);
}

SIMRT_EXPORT cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t stream, enum cudaStreamCaptureMode mode)
{
    GRAPH_CALL(cuStreamBeginCapture_v2_ptsz, stream, (CUstreamCaptureMode)mode);
}

SIMRT_EXPORT cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *pGraph)
{
    GRAPH_CALL(cuStreamEndCapture, stream, pGraph);
}

SIMRT_EXPORT cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t stream, cudaGraph_t *pGraph)
{
    GRAPH_CALL(cuStreamEndCapture_ptsz, stream, pGraph);
}

SIMRT_EXPORT cudaError_t cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus *pCaptureStatus)
{
    GRAPH_CALL(cuStreamIsCapturing, stream, (CUstreamCaptureStatus *)pCaptureStatus);
}

SIMRT_EXPORT cudaError_t cudaStreamIsCapturing_ptsz(cudaStream_t stream, enum cudaStreamCaptureStatus *pCaptureStatus)
{
    GRAPH_CALL(cuStreamIsCapturing_ptsz, stream, (CUstreamCaptureStatus *)pCaptureStatus);
}

SIMRT_EXPORT cudaError_t cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph, unsigned long long flags)
{
    GRAPH_CALL(cuGraphInstantiateWithFlags, pGraphExec, graph, flags);
}

SIMRT_EXPORT cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream)
{
    GRAPH_CALL(cuGraphLaunch, graphExec, stream);
}

SIMRT_EXPORT cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t graphExec, cudaStream_t stream)
{
    GRAPH_CALL(cuGraphLaunch_ptsz, graphExec, stream);
}

SIMRT_EXPORT cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec) { GRAPH_CALL(cuGraphExecDestroy, graphExec); }
SIMRT_EXPORT cudaError_t cudaGraphDestroy(cudaGraph_t graph) { GRAPH_CALL(cuGraphDestroy, graph); }
SIMRT_EXPORT cudaError_t cudaDeviceGraphMemTrim(int device) { GRAPH_CALL(cuDeviceGraphMemTrim, device); }

SIMRT_EXPORT cudaError_t cudaDeviceGetGraphMemAttribute(int device, enum cudaGraphMemAttributeType attr, void *value)
{
    GRAPH_CALL(cuDeviceGetGraphMemAttribute, device, (CUgraphMem_attribute)attr, value);
}

SIMRT_EXPORT cudaError_t cudaDeviceSetGraphMemAttribute(int device, enum cudaGraphMemAttributeType attr, void *value)
{
    GRAPH_CALL(cuDeviceSetGraphMemAttribute, device, (CUgraphMem_attribute)attr, value);
}

/* cudaMemPoolProps and CUmemPoolProps share one layout (asserted in the
 * compat headers), as do the attribute enums. */
SIMRT_EXPORT cudaError_t cudaMemPoolCreate(cudaMemPool_t *memPool, const struct cudaMemPoolProps *poolProps)
{
    cudaError_t e = enter();
    return simrt_status(e != cudaSuccess ? e : DRV(cuMemPoolCreate, memPool, (const CUmemPoolProps *)(const void *)poolProps));
}

SIMRT_EXPORT cudaError_t cudaMemPoolDestroy(cudaMemPool_t memPool)
{
    cudaError_t e = enter();
    return simrt_status(e != cudaSuccess ? e : DRV(cuMemPoolDestroy, memPool));
}

SIMRT_EXPORT cudaError_t cudaMemPoolTrimTo(cudaMemPool_t memPool, size_t minBytesToKeep)
{
    cudaError_t e = enter();
    return simrt_status(e != cudaSuccess ? e : DRV(cuMemPoolTrimTo, memPool, minBytesToKeep));
}

SIMRT_EXPORT cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void *value)
{
    cudaError_t e = enter();
    return simrt_status(e != cudaSuccess ? e : DRV(cuMemPoolSetAttribute, memPool, (CUmemPool_attribute)attr, value));
}

SIMRT_EXPORT cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void *value)
{
    cudaError_t e = enter();
    return simrt_status(e != cudaSuccess ? e : DRV(cuMemPoolGetAttribute, memPool, (CUmemPool_attribute)attr, value));
}

SIMRT_EXPORT cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *memPool, int device)
{
    cudaError_t e = enter();
    return simrt_status(e != cudaSuccess ? e : DRV(cuDeviceGetDefaultMemPool, memPool, device));
}

SIMRT_EXPORT cudaError_t cudaDeviceGetMemPool(cudaMemPool_t *memPool, int device)
{
    cudaError_t e = enter();
    return simrt_status(e != cudaSuccess ? e : DRV(cuDeviceGetMemPool, memPool, device));
}

SIMRT_EXPORT cudaError_t cudaDeviceSetMemPool(int device, cudaMemPool_t memPool)
{
    cudaError_t e = enter();
    return simrt_status(e != cudaSuccess ? e : DRV(cuDeviceSetMemPool, device, memPool));
}

/* ---- driver entry points (how PyTorch fetches the VMM functions) ---- */

/* Both forward to the driver's cuGetProcAddress_v2; the status enums share
 * their values. */
static cudaError_t entry_point(const char *symbol, void **funcPtr, int version, unsigned long long flags,
                               enum cudaDriverEntryPointQueryResult *driverStatus)
{
    cudaError_t e = simrt_load();
    if (e != cudaSuccess)
        return e;
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    e = simrt_result(simrt_drv.cuGetProcAddress_v2(symbol, funcPtr, version, flags, &status));
    if (e == cudaSuccess && driverStatus)
        *driverStatus = (enum cudaDriverEntryPointQueryResult)status;
    return e;
}

SIMRT_EXPORT cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **funcPtr, unsigned long long flags,
                                                 enum cudaDriverEntryPointQueryResult *driverStatus)
{
    return simrt_status(entry_point(symbol, funcPtr, CUDART_VERSION, flags, driverStatus));
}

SIMRT_EXPORT cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **funcPtr,
                                                          unsigned int cudaVersion, unsigned long long flags,
                                                          enum cudaDriverEntryPointQueryResult *driverStatus)
{
    return simrt_status(entry_point(symbol, funcPtr, (int)cudaVersion, flags, driverStatus));
}
