/*
 * hooks_runtime.c — the CUDA runtime's allocation family, for programs that
 * link libcudart dynamically (a statically linked runtime is caught one level
 * down, at the driver entry points it fetches through cuGetProcAddress).
 *
 * The runtime hook is the outer one: it records with the program's own call
 * stack, and the driver hook the runtime then reaches sees tl_hook_depth > 0
 * and only forwards, so one cudaMalloc is counted once.
 */
#include "hooks.h"
#include "track_hot.h"


/* The shared hook plumbing (hooks.h), with this API's error codes. */
#define MEM_KINDS TL_MEM_KINDS
#define ENTER() TL_ENTER()
#define LEAVE() TL_LEAVE()
#define BUDGET_GUARD(kind, bytes) TL_BUDGET_GUARD(kind, bytes, cudaErrorMemoryAllocation)
#define CALL_REAL(fn, ...) TL_CALL_REAL(fn, cudaErrorInsufficientDriver, __VA_ARGS__)


/* Inline, so that a device row's constants pick tl_track_device_alloc. */
static inline __attribute__((always_inline)) void after_alloc(bool outer, cudaError_t rc, enum tl_kind kind,
                                                              uint64_t addr, uint64_t size, uint32_t aux)
{
    if (!outer)
        return;
    if (rc == cudaSuccess && kind == TL_KIND_DEVICE && aux == 0)
        tl_track_device_alloc(addr, size);
    else if (rc == cudaSuccess)
        tl_track_alloc(kind, TL_SPACE_MEM, addr, size, -1, aux);
    else
        tl_track_failure(rc == cudaErrorMemoryAllocation, kind, size, -1);
}

#define TRACKED_FREE(outer, addr, mask, call)                                            \
    ({                                                                                   \
        struct tl_live rec_;                                                             \
        bool had_ = (outer) && (addr) &&                                                 \
                    ((((mask) & TL_MASK(TL_KIND_DEVICE)) && tl_track_mem_free_hot((addr), &rec_)) || \
                     tl_track_mem_free((addr), (mask), &rec_));                                  \
        cudaError_t rc_ = (call);                                                        \
        if (had_ && rc_ != cudaSuccess)                                                  \
            tl_track_restore(&rec_);                                                     \
        rc_;                                                                             \
    })

TL_EXPORT cudaError_t cudaMalloc(void **devPtr, size_t size)
{
    ENTER();
    BUDGET_GUARD(TL_KIND_DEVICE, size);
    cudaError_t rc = CALL_REAL(cudaMalloc, devPtr, size);
    if (TL_LIKELY(outer && rc == cudaSuccess)) {
        if (!tl_track_device_alloc_hot((uintptr_t)*devPtr, size))
            tl_track_device_alloc((uintptr_t)*devPtr, size);
        LEAVE();
        return cudaSuccess;
    }
    after_alloc(outer, rc, TL_KIND_DEVICE, rc == cudaSuccess ? (uintptr_t)*devPtr : 0, size, 0);
    LEAVE();
    return rc;
}

TL_EXPORT cudaError_t cudaFree(void *devPtr)
{
    ENTER();
    cudaError_t rc = TRACKED_FREE(outer, (uintptr_t)devPtr, MEM_KINDS, CALL_REAL(cudaFree, devPtr));
    LEAVE();
    return rc;
}

TL_EXPORT cudaError_t cudaMallocHost(void **ptr, size_t size)
{
    ENTER();
    cudaError_t rc = CALL_REAL(cudaMallocHost, ptr, size);
    after_alloc(outer, rc, TL_KIND_HOST_PINNED, rc == cudaSuccess ? (uintptr_t)*ptr : 0, size, 0);
    LEAVE();
    return rc;
}

TL_EXPORT cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags)
{
    ENTER();
    cudaError_t rc = CALL_REAL(cudaHostAlloc, pHost, size, flags);
    after_alloc(outer, rc, TL_KIND_HOST_PINNED, rc == cudaSuccess ? (uintptr_t)*pHost : 0, size, 0);
    LEAVE();
    return rc;
}

/* A release of host memory by its pointer: pinned (cudaFreeHost) or
 * registered (cudaHostUnregister), each only of its own kind. */
#define HOST_RELEASE(fn, kind)                                                                             \
    TL_EXPORT cudaError_t fn(void *ptr)                                                                    \
    {                                                                                                      \
        ENTER();                                                                                           \
        cudaError_t rc = TRACKED_FREE(outer, (uintptr_t)ptr, TL_MASK(kind), CALL_REAL(fn, ptr));          \
        LEAVE();                                                                                           \
        return rc;                                                                                         \
    }

HOST_RELEASE(cudaFreeHost, TL_KIND_HOST_PINNED)
HOST_RELEASE(cudaHostUnregister, TL_KIND_HOST_REGISTERED)

TL_EXPORT cudaError_t cudaHostRegister(void *ptr, size_t size, unsigned int flags)
{
    ENTER();
    cudaError_t rc = CALL_REAL(cudaHostRegister, ptr, size, flags);
    /* No device's memory (TL_NO_DEVICE), as in the driver's hook. */
    if (outer && rc == cudaSuccess)
        tl_track_alloc(TL_KIND_HOST_REGISTERED, TL_SPACE_MEM, (uintptr_t)ptr, size, TL_NO_DEVICE, 0);
    else
        after_alloc(outer, rc, TL_KIND_HOST_REGISTERED, 0, size, 0);
    LEAVE();
    return rc;
}

/* ---- CUDA IPC: as the driver's hooks (hooks_driver.c) -------------------- */

TL_EXPORT cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *handle, void *devPtr)
{
    ENTER();
    cudaError_t rc = CALL_REAL(cudaIpcGetMemHandle, handle, devPtr);
    if (outer && rc == cudaSuccess)
        tl_ipc_note_export(handle, (uintptr_t)devPtr);
    LEAVE();
    return rc;
}

TL_EXPORT cudaError_t cudaIpcOpenMemHandle(void **devPtr, cudaIpcMemHandle_t handle, unsigned int flags)
{
    ENTER();
    cudaError_t rc = CALL_REAL(cudaIpcOpenMemHandle, devPtr, handle, flags);
    if (outer && rc == cudaSuccess)
        tl_ipc_opened(&handle, (uintptr_t)*devPtr);
    LEAVE();
    return rc;
}

TL_EXPORT cudaError_t cudaIpcCloseMemHandle(void *devPtr)
{
    ENTER();
    uint64_t addr = (uintptr_t)devPtr;
    cudaError_t rc;
    if (outer && tl_ipc_is_shared_ref(addr)) {
        rc = CALL_REAL(cudaIpcCloseMemHandle, devPtr);
        if (rc == cudaSuccess)
            tl_ipc_unref(addr);
    } else {
        struct tl_live rec;
        bool had = outer && addr && tl_track_free(TL_SPACE_IPC, addr, TL_MASK(TL_KIND_IPC_MAPPING), &rec);
        rc = CALL_REAL(cudaIpcCloseMemHandle, devPtr);
        if (had && rc != cudaSuccess)
            tl_track_restore(&rec);
        if (outer && rc == cudaSuccess)
            tl_ipc_note_closed(addr);
    }
    LEAVE();
    return rc;
}

TL_EXPORT cudaError_t cudaMallocManaged(void **devPtr, size_t size, unsigned int flags)
{
    ENTER();
    BUDGET_GUARD(TL_KIND_MANAGED, size);
    cudaError_t rc = CALL_REAL(cudaMallocManaged, devPtr, size, flags);
    after_alloc(outer, rc, TL_KIND_MANAGED, rc == cudaSuccess ? (uintptr_t)*devPtr : 0, size, 0);
    LEAVE();
    return rc;
}

TL_EXPORT cudaError_t cudaMallocPitch(void **devPtr, size_t *pitch, size_t width, size_t height)
{
    ENTER();
    BUDGET_GUARD(TL_KIND_DEVICE, (uint64_t)width * height);
    cudaError_t rc = CALL_REAL(cudaMallocPitch, devPtr, pitch, width, height);
    after_alloc(outer, rc, TL_KIND_DEVICE, rc == cudaSuccess ? (uintptr_t)*devPtr : 0,
                rc == cudaSuccess ? (uint64_t)*pitch * height : (uint64_t)width * height, 0);
    LEAVE();
    return rc;
}

/* Pitched linear memory in three dimensions: device memory like
 * cudaMallocPitch's, pitch x height x depth bytes as the runtime laid it out. */
TL_EXPORT cudaError_t cudaMalloc3D(struct cudaPitchedPtr *pitchedDevPtr, struct cudaExtent extent)
{
    ENTER();
    uint64_t asked = (uint64_t)extent.width * extent.height * extent.depth;
    BUDGET_GUARD(TL_KIND_DEVICE, asked);
    cudaError_t rc = CALL_REAL(cudaMalloc3D, pitchedDevPtr, extent);
    after_alloc(outer, rc, TL_KIND_DEVICE, rc == cudaSuccess ? (uintptr_t)pitchedDevPtr->ptr : 0,
                rc == cudaSuccess ? (uint64_t)pitchedDevPtr->pitch * extent.height * extent.depth : asked, 0);
    LEAVE();
    return rc;
}

/* CUDA arrays: a cudaArray_t is the driver's CUarray, so the driver says
 * what one holds (tl_track_array); the driver hook the runtime reaches
 * inside only forwards. */
#define ARRAY_ALLOC(handle, mipmapped, call)                                                           \
    ENTER();                                                                                           \
    cudaError_t rc = (call);                                                                           \
    if (outer && rc == cudaSuccess)                                                                    \
        tl_track_array((void *)*(handle), (mipmapped));                                                \
    else if (outer)                                                                                    \
        tl_track_failure(rc == cudaErrorMemoryAllocation, TL_KIND_ARRAY, 0, -1);                       \
    LEAVE();                                                                                           \
    return rc

TL_EXPORT cudaError_t cudaMallocArray(cudaArray_t *array, const struct cudaChannelFormatDesc *desc, size_t width,
                                      size_t height, unsigned int flags)
{
    ARRAY_ALLOC(array, false, CALL_REAL(cudaMallocArray, array, desc, width, height, flags));
}

TL_EXPORT cudaError_t cudaMalloc3DArray(cudaArray_t *array, const struct cudaChannelFormatDesc *desc,
                                        struct cudaExtent extent, unsigned int flags)
{
    ARRAY_ALLOC(array, false, CALL_REAL(cudaMalloc3DArray, array, desc, extent, flags));
}

TL_EXPORT cudaError_t cudaMallocMipmappedArray(cudaMipmappedArray_t *mipmappedArray,
                                               const struct cudaChannelFormatDesc *desc, struct cudaExtent extent,
                                               unsigned int numLevels, unsigned int flags)
{
    ARRAY_ALLOC(mipmappedArray, true,
                CALL_REAL(cudaMallocMipmappedArray, mipmappedArray, desc, extent, numLevels, flags));
}

#define ARRAY_FREE(fn, handle)                                                                         \
    ENTER();                                                                                           \
    struct tl_live rec_;                                                                               \
    bool had_ = outer && handle && tl_track_free(TL_SPACE_ARRAY, (uintptr_t)handle, TL_MASK(TL_KIND_ARRAY), &rec_); \
    cudaError_t rc = CALL_REAL(fn, handle);                                                            \
    if (had_ && rc != cudaSuccess)                                                                     \
        tl_track_restore(&rec_);                                                                       \
    LEAVE();                                                                                           \
    return rc

TL_EXPORT cudaError_t cudaFreeArray(cudaArray_t array)
{
    ARRAY_FREE(cudaFreeArray, array);
}

TL_EXPORT cudaError_t cudaFreeMipmappedArray(cudaMipmappedArray_t mipmappedArray)
{
    ARRAY_FREE(cudaFreeMipmappedArray, mipmappedArray);
}

/* On a capturing stream the allocation is a graph's (hooks_driver.c). */
#define ASYNC_ALLOC(fn, pool, from_device, stream, per_thread, ...)                                         \
    ENTER();                                                                                               \
    BUDGET_GUARD(TL_KIND_ASYNC, size);                                                                      \
    cudaError_t rc = CALL_REAL(fn, __VA_ARGS__);                                                           \
    after_alloc(outer, rc, TL_KIND_ASYNC, rc == cudaSuccess ? (uintptr_t)*devPtr : 0, size,                \
                outer && rc == cudaSuccess                                                                 \
                    ? TL_ASYNC_AUX((CUmemoryPool)(pool), (from_device), (stream), (per_thread))            \
                    : 0);                                                                                  \
    LEAVE();                                                                                               \
    return rc

TL_EXPORT cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t hStream)
{
    ASYNC_ALLOC(cudaMallocAsync, NULL, true, hStream, false, devPtr, size, hStream);
}

TL_EXPORT cudaError_t cudaMallocAsync_ptsz(void **devPtr, size_t size, cudaStream_t hStream)
{
    ASYNC_ALLOC(cudaMallocAsync_ptsz, NULL, true, hStream, true, devPtr, size, hStream);
}

TL_EXPORT cudaError_t cudaMallocFromPoolAsync(void **devPtr, size_t size, cudaMemPool_t memPool, cudaStream_t stream)
{
    ASYNC_ALLOC(cudaMallocFromPoolAsync, memPool, false, stream, false, devPtr, size, memPool, stream);
}

TL_EXPORT cudaError_t cudaMallocFromPoolAsync_ptsz(void **devPtr, size_t size, cudaMemPool_t memPool, cudaStream_t stream)
{
    ASYNC_ALLOC(cudaMallocFromPoolAsync_ptsz, memPool, false, stream, true, devPtr, size, memPool, stream);
}

TL_EXPORT cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t hStream)
{
    ENTER();
    cudaError_t rc = TRACKED_FREE(outer, (uintptr_t)devPtr, MEM_KINDS, CALL_REAL(cudaFreeAsync, devPtr, hStream));
    LEAVE();
    return rc;
}

TL_EXPORT cudaError_t cudaFreeAsync_ptsz(void *devPtr, cudaStream_t hStream)
{
    ENTER();
    cudaError_t rc = TRACKED_FREE(outer, (uintptr_t)devPtr, MEM_KINDS, CALL_REAL(cudaFreeAsync_ptsz, devPtr, hStream));
    LEAVE();
    return rc;
}

/* cudaDeviceReset reaches cuDevicePrimaryCtxReset_v2, whose hook releases
 * the context's allocations; this hook stays out of the nesting count so
 * that the driver hook is the outer one. */
TL_EXPORT cudaError_t cudaDeviceReset(void)
{
    tl_ensure_init();
    __typeof__(&cudaDeviceReset) real = REAL(cudaDeviceReset);
    return real ? real() : cudaErrorInsufficientDriver;
}
