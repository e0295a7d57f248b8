/*
 * hooks_driver.c — the driver API allocation family: cuMemAlloc and
 * friends, stream-ordered allocations, VMM, context teardown.
 *
 * Each hook returns exactly what the driver returned.  Only the outermost
 * hook on a thread records (cudaMalloc -> cuMemAlloc_v2 is one allocation).
 * A free is recorded *before* the real free: once the driver has the
 * address back, another thread may receive it from a new allocation, and
 * our record of the old one must be gone by then.  If the driver then
 * refuses the free, the record is put back.
 */
#include "hooks.h"
#include "track_hot.h"

#include <string.h>

/* The shared hook plumbing (hooks.h), with this API's error codes. */
#define MEM_KINDS TL_MEM_KINDS
#define ENTER() TL_ENTER()
#define LEAVE() TL_LEAVE()
#define BUDGET_GUARD(kind, bytes) TL_BUDGET_GUARD(kind, bytes, CUDA_ERROR_OUT_OF_MEMORY)
#define CALL_REAL(fn, ...) TL_CALL_REAL(fn, CUDA_ERROR_NOT_INITIALIZED, __VA_ARGS__)

/* Inline, so that a device row's constants pick tl_track_device_alloc. */
static inline __attribute__((always_inline)) void after_alloc(bool outer, CUresult rc, enum tl_kind kind, uint8_t space,
                                                              uint64_t addr, uint64_t size, int device, uint32_t aux)
{
    if (!outer)
        return;
    if (rc == CUDA_SUCCESS && kind == TL_KIND_DEVICE && space == TL_SPACE_MEM && device < 0 && aux == 0)
        tl_track_device_alloc(addr, size);
    else if (rc == CUDA_SUCCESS)
        tl_track_alloc(kind, space, addr, size, device, aux);
    else
        tl_track_failure(rc == CUDA_ERROR_OUT_OF_MEMORY, kind, size, device);
}

/* The two hooks the runtime reaches inside cudaMalloc/cudaFree: the nested
 * case is a bare forward, the outer one a call of its own. */
static __attribute__((noinline)) CUresult mem_alloc_outer(CUdeviceptr *dptr, size_t bytesize);
static __attribute__((noinline)) CUresult mem_free_outer(CUdeviceptr dptr);

/* The nested calls' forward before their real function is resolved. */
static __attribute__((noinline, cold)) CUresult mem_alloc_nested(CUdeviceptr *dptr, size_t bytesize)
{
    return CALL_REAL(cuMemAlloc_v2, dptr, bytesize);
}

static __attribute__((noinline, cold)) CUresult mem_free_nested(CUdeviceptr dptr)
{
    return CALL_REAL(cuMemFree_v2, dptr);
}

TL_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    TL_NESTED_FORWARD(cuMemAlloc_v2, mem_alloc_nested, dptr, bytesize);
    return mem_alloc_outer(dptr, bytesize);
}

/* The end of mem_alloc_outer when the driver refused: out of line, so that
 * the successful path keeps only its two arguments across the driver's call. */
static __attribute__((noinline, cold)) CUresult mem_alloc_failed(CUresult rc, size_t bytesize)
{
    tl_track_failure(rc == CUDA_ERROR_OUT_OF_MEMORY, TL_KIND_DEVICE, bytesize, -1);
    LEAVE();
    return rc;
}

/* Each outer hook forwards at once where it records nothing (`outer` false:
 * a child nobody told us about), so the recording path after the driver's
 * call needs no `outer` kept across it. */
/* mem_alloc_outer's other ends, out of line so that its own path keeps only
 * what the record needs: a hook that only forwards (`outer` false), and the
 * whole path with nothing taken for granted (a budget enforced, the real
 * function not resolved yet). */
static __attribute__((noinline, cold)) CUresult mem_alloc_untracked(CUdeviceptr *dptr, size_t bytesize)
{
    CUresult rc = CALL_REAL(cuMemAlloc_v2, dptr, bytesize);
    LEAVE();
    return rc;
}

static __attribute__((noinline, cold)) CUresult mem_alloc_general(CUdeviceptr *dptr, size_t bytesize)
{
    bool outer = true;
    BUDGET_GUARD(TL_KIND_DEVICE, bytesize);
    CUresult rc = CALL_REAL(cuMemAlloc_v2, dptr, bytesize);
    if (TL_UNLIKELY(rc != CUDA_SUCCESS))
        return mem_alloc_failed(rc, bytesize);
    tl_track_device_alloc(*dptr, bytesize);
    LEAVE();
    return CUDA_SUCCESS;
}

static CUresult mem_alloc_outer(CUdeviceptr *dptr, size_t bytesize)
{
    TL_ENTER_OUTERMOST();
    if (TL_UNLIKELY(!outer))
        return mem_alloc_untracked(dptr, bytesize);
    if (TL_UNLIKELY(atomic_load_explicit(&tl_budget_enforcing, memory_order_relaxed)))
        return mem_alloc_general(dptr, bytesize);
    __typeof__(&cuMemAlloc_v2) real = (__typeof__(&cuMemAlloc_v2))tl_real_fast(TL_HOOK_cuMemAlloc_v2);
    if (TL_UNLIKELY(!real))
        return mem_alloc_general(dptr, bytesize);
    CUresult rc = real(dptr, bytesize);
    if (TL_UNLIKELY(rc != CUDA_SUCCESS))
        return mem_alloc_failed(rc, bytesize);
    if (!tl_track_device_alloc_hot(*dptr, bytesize))
        tl_track_device_alloc(*dptr, bytesize);
    LEAVE();
    return CUDA_SUCCESS;
}

TL_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
                                      unsigned int ElementSizeBytes)
{
    ENTER();
    BUDGET_GUARD(TL_KIND_DEVICE, (uint64_t)WidthInBytes * Height);
    CUresult rc = CALL_REAL(cuMemAllocPitch_v2, dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
    after_alloc(outer, rc, TL_KIND_DEVICE, TL_SPACE_MEM, rc == CUDA_SUCCESS ? *dptr : 0,
                rc == CUDA_SUCCESS ? (uint64_t)*pPitch * Height : (uint64_t)WidthInBytes * Height, -1, 0);
    LEAVE();
    return rc;
}

/* Frees through `real`, keeping the table right whatever the driver says.
 * The call is written twice, tracked and not, so that nothing but the
 * removed row is kept across it. */
#define TRACKED_FREE(outer, space, addr, mask, call)                                           \
    ({                                                                                         \
        struct tl_live rec_;                                                                   \
        CUresult rc_;                                                                          \
        if (TL_LIKELY((outer) && (addr)) &&                                                    \
            ((space) == TL_SPACE_MEM                                                           \
                 ? (((mask) & TL_MASK(TL_KIND_DEVICE)) && tl_track_mem_free_hot((addr), &rec_)) || \
                       tl_track_mem_free((addr), (mask), &rec_)                                \
                 : tl_track_free((space), (addr), (mask), &rec_))) {                           \
            rc_ = (call);                                                                      \
            if (TL_UNLIKELY(rc_ != CUDA_SUCCESS))                                              \
                tl_track_restore(&rec_);                                                       \
        } else {                                                                               \
            rc_ = (call);                                                                      \
        }                                                                                      \
        rc_;                                                                                   \
    })

TL_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    TL_NESTED_FORWARD(cuMemFree_v2, mem_free_nested, dptr);
    return mem_free_outer(dptr);
}

static CUresult mem_free_outer(CUdeviceptr dptr)
{
    TL_ENTER_OUTERMOST();
    CUresult rc;
    if (TL_LIKELY(outer)) /* tested once here: TRACKED_FREE's own test folds */
        rc = TRACKED_FREE(true, TL_SPACE_MEM, dptr, MEM_KINDS, CALL_REAL(cuMemFree_v2, dptr));
    else
        rc = CALL_REAL(cuMemFree_v2, dptr);
    LEAVE();
    return rc;
}

TL_EXPORT CUresult cuMemAllocHost_v2(void **pp, size_t bytesize)
{
    ENTER();
    CUresult rc = CALL_REAL(cuMemAllocHost_v2, pp, bytesize);
    after_alloc(outer, rc, TL_KIND_HOST_PINNED, TL_SPACE_MEM, rc == CUDA_SUCCESS ? (uintptr_t)*pp : 0, bytesize, -1, 0);
    LEAVE();
    return rc;
}

TL_EXPORT CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
    ENTER();
    CUresult rc = CALL_REAL(cuMemHostAlloc, pp, bytesize, Flags);
    after_alloc(outer, rc, TL_KIND_HOST_PINNED, TL_SPACE_MEM, rc == CUDA_SUCCESS ? (uintptr_t)*pp : 0, bytesize, -1, 0);
    LEAVE();
    return rc;
}

TL_EXPORT CUresult cuMemFreeHost(void *p)
{
    ENTER();
    CUresult rc = TRACKED_FREE(outer, TL_SPACE_MEM, (uintptr_t)p, TL_MASK(TL_KIND_HOST_PINNED), CALL_REAL(cuMemFreeHost, p));
    LEAVE();
    return rc;
}

TL_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    ENTER();
    BUDGET_GUARD(TL_KIND_MANAGED, bytesize);
    CUresult rc = CALL_REAL(cuMemAllocManaged, dptr, bytesize, flags);
    after_alloc(outer, rc, TL_KIND_MANAGED, TL_SPACE_MEM, rc == CUDA_SUCCESS ? *dptr : 0, bytesize, -1, 0);
    LEAVE();
    return rc;
}

/* ---- host registration -------------------------------------------------- */
/* The program's own memory pinned in place (offload and swap buffers): the
 * row is the registration, kept until cuMemHostUnregister or the teardown of
 * the context that made it.  Its bytes are the process's, in no device's
 * (TL_NO_DEVICE).  The 4.0 entry point has the same signature. */

#define HOST_REGISTER(fn)                                                                                 \
    TL_EXPORT CUresult fn(void *p, size_t bytesize, unsigned int Flags)                                   \
    {                                                                                                     \
        ENTER();                                                                                          \
        CUresult rc = CALL_REAL(fn, p, bytesize, Flags);                                                  \
        after_alloc(outer, rc, TL_KIND_HOST_REGISTERED, TL_SPACE_MEM, rc == CUDA_SUCCESS ? (uintptr_t)p : 0, \
                    bytesize, TL_NO_DEVICE, 0);                                                           \
        LEAVE();                                                                                          \
        return rc;                                                                                        \
    }

HOST_REGISTER(cuMemHostRegister_v2)
HOST_REGISTER(cuMemHostRegister)

TL_EXPORT CUresult cuMemHostUnregister(void *p)
{
    ENTER();
    CUresult rc = TRACKED_FREE(outer, TL_SPACE_MEM, (uintptr_t)p, TL_MASK(TL_KIND_HOST_REGISTERED),
                               CALL_REAL(cuMemHostUnregister, p));
    LEAVE();
    return rc;
}

/* ---- CUDA arrays --------------------------------------------------------- */
/* Texture memory of image and video pipelines: the row is keyed by the
 * array's handle (TL_SPACE_ARRAY) and holds what the driver says the array
 * takes (cuArrayGetMemoryRequirements: rows padded to its pitch, levels of a
 * mipmap summed, rounded to its alignment), not width x height.  The driver
 * is asked after the creation and outside the nesting count: the query is
 * no hook of ours. */

typedef CUresult (*array_requirements_fn)(CUDA_ARRAY_MEMORY_REQUIREMENTS *, void *, CUdevice);
typedef CUresult (*ctx_device_fn)(CUdevice *);

bool tl_array_bytes(void *handle, bool mipmapped, uint64_t *bytes)
{
    static _Atomic(array_requirements_fn) query[2];
    static _Atomic(ctx_device_fn) ctx_device;
    array_requirements_fn q = atomic_load_explicit(&query[mipmapped], memory_order_acquire);
    if (!q) {
        q = (array_requirements_fn)tl_driver_symbol(mipmapped ? "cuMipmappedArrayGetMemoryRequirements"
                                                              : "cuArrayGetMemoryRequirements");
        atomic_store_explicit(&query[mipmapped], q, memory_order_release);
    }
    ctx_device_fn get_device = atomic_load_explicit(&ctx_device, memory_order_acquire);
    if (!get_device) {
        get_device = (ctx_device_fn)tl_driver_symbol("cuCtxGetDevice");
        atomic_store_explicit(&ctx_device, get_device, memory_order_release);
    }
    CUdevice dev = 0;
    CUDA_ARRAY_MEMORY_REQUIREMENTS req;
    memset(&req, 0, sizeof req);
    if (!q || !get_device || get_device(&dev) != CUDA_SUCCESS || q(&req, handle, dev) != CUDA_SUCCESS)
        return false;
    *bytes = req.size;
    return true;
}

void tl_track_array(void *handle, bool mipmapped)
{
    uint64_t bytes = 0;
    bool known = tl_array_bytes(handle, mipmapped, &bytes);
    tl_track_alloc(TL_KIND_ARRAY, TL_SPACE_ARRAY, (uintptr_t)handle, bytes, -1, known ? 0 : TL_ARRAY_SIZE_UNKNOWN);
}

/* A creation through `call`, which leaves the handle in *pHandle. */
#define ARRAY_CREATE(pHandle, mipmapped, call)                                                         \
    ENTER();                                                                                           \
    CUresult rc = (call);                                                                              \
    if (outer && rc == CUDA_SUCCESS)                                                                   \
        tl_track_array((void *)*(pHandle), (mipmapped));                                               \
    else                                                                                               \
        after_alloc(outer, rc, TL_KIND_ARRAY, TL_SPACE_ARRAY, 0, 0, -1, 0);                            \
    LEAVE();                                                                                           \
    return rc

TL_EXPORT CUresult cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *pAllocateArray)
{
    ARRAY_CREATE(pHandle, false, CALL_REAL(cuArrayCreate_v2, pHandle, pAllocateArray));
}

TL_EXPORT CUresult cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *pAllocateArray)
{
    ARRAY_CREATE(pHandle, false, CALL_REAL(cuArray3DCreate_v2, pHandle, pAllocateArray));
}

TL_EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *pMipmappedArrayDesc,
                                          unsigned int numMipmapLevels)
{
    ARRAY_CREATE(pHandle, true, CALL_REAL(cuMipmappedArrayCreate, pHandle, pMipmappedArrayDesc, numMipmapLevels));
}

#define ARRAY_DESTROY(fn, handle_type)                                                                  \
    TL_EXPORT CUresult fn(handle_type handle)                                                           \
    {                                                                                                   \
        ENTER();                                                                                        \
        CUresult rc = TRACKED_FREE(outer, TL_SPACE_ARRAY, (uintptr_t)handle, TL_MASK(TL_KIND_ARRAY),      \
                                   CALL_REAL(fn, handle));                                              \
        LEAVE();                                                                                        \
        return rc;                                                                                      \
    }

ARRAY_DESTROY(cuArrayDestroy, CUarray)
ARRAY_DESTROY(cuMipmappedArrayDestroy, CUmipmappedArray)

/* ---- CUDA IPC ------------------------------------------------------------ */
/* An exported allocation stays the exporter's ordinary row; the export is
 * only remembered (ipc.c).  An opened handle is a row of kind ipc_mapping
 * keyed by the address the open returned (TL_SPACE_IPC), aux its reference
 * count: the driver returns the same address for a handle opened again and
 * unmaps at the last close (cuda.h).  Its bytes are the exporter's
 * allocation as cuMemGetAddressRange reports it, asked outside the nesting
 * count (the query is no hook of ours). */

typedef CUresult (*address_range_fn)(CUdeviceptr *, size_t *, CUdeviceptr);

void tl_ipc_opened(const void *handle, uint64_t addr)
{
    struct tl_live rec;
    if (tl_live_lookup(TL_SPACE_IPC, addr, &rec)) {
        tl_live_set_aux(TL_SPACE_IPC, addr, rec.aux + 1);
        return;
    }
    static _Atomic(address_range_fn) range;
    address_range_fn q = atomic_load_explicit(&range, memory_order_acquire);
    if (!q) {
        q = (address_range_fn)tl_driver_symbol("cuMemGetAddressRange_v2");
        atomic_store_explicit(&range, q, memory_order_release);
    }
    CUdeviceptr base = 0;
    size_t size = 0;
    if (!q || q(&base, &size, addr) != CUDA_SUCCESS)
        size = 0;
    tl_track_alloc(TL_KIND_IPC_MAPPING, TL_SPACE_IPC, addr, size, -1, 1);
    tl_ipc_note_import(handle, addr);
}

bool tl_ipc_is_shared_ref(uint64_t addr)
{
    struct tl_live rec;
    return tl_live_lookup(TL_SPACE_IPC, addr, &rec) && rec.aux > 1;
}

void tl_ipc_unref(uint64_t addr)
{
    struct tl_live rec;
    if (tl_live_lookup(TL_SPACE_IPC, addr, &rec) && rec.aux > 1)
        tl_live_set_aux(TL_SPACE_IPC, addr, rec.aux - 1);
}

TL_EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
    ENTER();
    CUresult rc = CALL_REAL(cuIpcGetMemHandle, pHandle, dptr);
    if (outer && rc == CUDA_SUCCESS)
        tl_ipc_note_export(pHandle, dptr);
    LEAVE();
    return rc;
}

/* The CUDA 4.1 entry point and its CUDA 11.0 successor: same arguments. */
#define IPC_OPEN(fn)                                                                  \
    TL_EXPORT CUresult fn(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags) \
    {                                                                                 \
        ENTER();                                                                      \
        CUresult rc = CALL_REAL(fn, pdptr, handle, Flags);                            \
        if (outer && rc == CUDA_SUCCESS)                                              \
            tl_ipc_opened(&handle, *pdptr);                                           \
        LEAVE();                                                                      \
        return rc;                                                                    \
    }

IPC_OPEN(cuIpcOpenMemHandle_v2)
IPC_OPEN(cuIpcOpenMemHandle)

TL_EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
    ENTER();
    CUresult rc;
    if (outer && tl_ipc_is_shared_ref(dptr)) {
        rc = CALL_REAL(cuIpcCloseMemHandle, dptr);
        if (rc == CUDA_SUCCESS)
            tl_ipc_unref(dptr);
    } else {
        rc = TRACKED_FREE(outer, TL_SPACE_IPC, dptr, TL_MASK(TL_KIND_IPC_MAPPING), CALL_REAL(cuIpcCloseMemHandle, dptr));
        if (outer && rc == CUDA_SUCCESS)
            tl_ipc_note_closed(dptr);
    }
    LEAVE();
    return rc;
}

/* ---- stream-ordered allocator ------------------------------------------- */
/* The pool an async allocation came from is its row's aux (pools.c, hooks.h).
 * On a capturing stream the allocation is a node of the graph being
 * captured: its row belongs to the device's graph memory (TL_ASYNC_AUX). */

#define ASYNC_ALLOC(fn, pool, from_device, stream, per_thread, ...)                                                   \
    ENTER();                                                                                                          \
    BUDGET_GUARD(TL_KIND_ASYNC, bytesize);                                                                  \
    CUresult rc = CALL_REAL(fn, __VA_ARGS__);                                                                         \
    if (outer && rc == CUDA_SUCCESS)                                                                                  \
        tl_track_alloc(TL_KIND_ASYNC, TL_SPACE_MEM, *dptr, bytesize, -1,                                              \
                       TL_ASYNC_AUX((pool), (from_device), (stream), (per_thread)));                                  \
    else if (outer)                                                                                                   \
        tl_track_failure(rc == CUDA_ERROR_OUT_OF_MEMORY, TL_KIND_ASYNC, bytesize, -1);                                \
    LEAVE();                                                                                                          \
    return rc

TL_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    ASYNC_ALLOC(cuMemAllocAsync, NULL, true, hStream, false, dptr, bytesize, hStream);
}

TL_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    ASYNC_ALLOC(cuMemAllocAsync_ptsz, NULL, true, hStream, true, dptr, bytesize, hStream);
}

TL_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream)
{
    ASYNC_ALLOC(cuMemAllocFromPoolAsync, pool, false, hStream, false, dptr, bytesize, pool, hStream);
}

TL_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream)
{
    ASYNC_ALLOC(cuMemAllocFromPoolAsync_ptsz, pool, false, hStream, true, dptr, bytesize, pool, hStream);
}

TL_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
    ENTER();
    CUresult rc = TRACKED_FREE(outer, TL_SPACE_MEM, dptr, MEM_KINDS, CALL_REAL(cuMemFreeAsync, dptr, hStream));
    LEAVE();
    return rc;
}

TL_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
    ENTER();
    CUresult rc = TRACKED_FREE(outer, TL_SPACE_MEM, dptr, MEM_KINDS, CALL_REAL(cuMemFreeAsync_ptsz, dptr, hStream));
    LEAVE();
    return rc;
}

TL_EXPORT CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps)
{
    ENTER();
    CUresult rc = CALL_REAL(cuMemPoolCreate, pool, poolProps);
    (void)outer;
    if (rc == CUDA_SUCCESS)
        tl_pool_note_created(*pool, poolProps);
    LEAVE();
    return rc;
}

TL_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    ENTER();
    /* Blocks still allocated from a destroyed pool are freed with it. */
    (void)outer;
    tl_pool_note_destroyed(pool);
    CUresult rc = CALL_REAL(cuMemPoolDestroy, pool);
    LEAVE();
    return rc;
}

/* ---- stream capture and graph memory ------------------------------------ */
/* An allocation captured into a graph (or added by cuGraphAddMemAllocNode)
 * is the graph's: the driver backs it from the device's graph memory when
 * the graph runs, so it is no live allocation of the capturing call site.
 * Its row stays under that site, held by the device's graph memory pool
 * (pools.c), until a free (a captured cuMemFreeAsync, a free node, or a
 * free outside any graph) removes it.  Capture is noticed by counting the
 * captures begun and ended: while none is under way, a stream-ordered
 * allocation costs no driver call more than before. */

atomic_int tl_capturing_streams;

typedef CUresult (*is_capturing_fn)(CUstream, CUstreamCaptureStatus *);

bool tl_stream_capturing(CUstream stream, bool per_thread)
{
    static _Atomic(is_capturing_fn) query;
    is_capturing_fn q = atomic_load_explicit(&query, memory_order_acquire);
    if (!q) {
        q = (is_capturing_fn)tl_driver_symbol("cuStreamIsCapturing");
        atomic_store_explicit(&query, q, memory_order_release);
    }
    /* Stream 0 of a _ptsz entry point is the per-thread default stream,
     * which the plain query names by its handle. */
    if (per_thread && stream == NULL)
        stream = (CUstream)0x2;
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    return q && q(stream, &status) == CUDA_SUCCESS && status != CU_STREAM_CAPTURE_STATUS_NONE;
}

#define CAPTURE_BEGIN(fn)                                                        \
    TL_EXPORT CUresult fn(CUstream hStream, CUstreamCaptureMode mode)            \
    {                                                                            \
        ENTER();                                                                 \
        (void)outer; /* counted at any depth: the runtime's begin reaches it */  \
        CUresult rc = CALL_REAL(fn, hStream, mode);                              \
        if (rc == CUDA_SUCCESS)                                                  \
            atomic_fetch_add_explicit(&tl_capturing_streams, 1, memory_order_relaxed); \
        LEAVE();                                                                 \
        return rc;                                                               \
    }

CAPTURE_BEGIN(cuStreamBeginCapture_v2)
CAPTURE_BEGIN(cuStreamBeginCapture_v2_ptsz)

/* A capture into the program's own graph (CUDA 12.3) is a capture all the same. */
#define CAPTURE_BEGIN_TO_GRAPH(fn)                                                                        \
    TL_EXPORT CUresult fn(CUstream hStream, CUgraph hGraph, const CUgraphNode *dependencies,               \
                          const CUgraphEdgeData *dependencyData, size_t numDependencies, CUstreamCaptureMode mode) \
    {                                                                                                     \
        ENTER();                                                                                          \
        (void)outer;                                                                                      \
        CUresult rc = CALL_REAL(fn, hStream, hGraph, dependencies, dependencyData, numDependencies, mode); \
        if (rc == CUDA_SUCCESS)                                                                           \
            atomic_fetch_add_explicit(&tl_capturing_streams, 1, memory_order_relaxed);                    \
        LEAVE();                                                                                          \
        return rc;                                                                                        \
    }

CAPTURE_BEGIN_TO_GRAPH(cuStreamBeginCaptureToGraph)
CAPTURE_BEGIN_TO_GRAPH(cuStreamBeginCaptureToGraph_ptsz)

/* A capture ends with its graph, or invalidated (901: no graph).  Any other
 * answer leaves the count alone: 903 (unmatched: ended on a stream that did
 * not begin it) leaves the capture running on its origin stream, and for the
 * others the driver's documentation does not say.  Counting one capture too
 * many only costs a cuStreamIsCapturing per stream-ordered allocation;
 * counting one too few would take captured allocations for leaks.  Never
 * below 0. */
static void capture_ended(CUresult rc)
{
    if (rc != CUDA_SUCCESS && rc != CUDA_ERROR_STREAM_CAPTURE_INVALIDATED)
        return;
    int n = atomic_load_explicit(&tl_capturing_streams, memory_order_relaxed);
    while (n > 0 && !atomic_compare_exchange_weak_explicit(&tl_capturing_streams, &n, n - 1, memory_order_relaxed,
                                                           memory_order_relaxed))
        ;
}

#define CAPTURE_END(fn)                                       \
    TL_EXPORT CUresult fn(CUstream hStream, CUgraph *phGraph) \
    {                                                         \
        ENTER();                                              \
        (void)outer;                                          \
        CUresult rc = CALL_REAL(fn, hStream, phGraph);        \
        capture_ended(rc);                                    \
        LEAVE();                                              \
        return rc;                                            \
    }

CAPTURE_END(cuStreamEndCapture)
CAPTURE_END(cuStreamEndCapture_ptsz)

TL_EXPORT CUresult cuGraphAddMemAllocNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                          size_t numDependencies, CUDA_MEM_ALLOC_NODE_PARAMS *nodeParams)
{
    ENTER();
    CUresult rc = CALL_REAL(cuGraphAddMemAllocNode, phGraphNode, hGraph, dependencies, numDependencies, nodeParams);
    if (outer && rc == CUDA_SUCCESS) {
        int device = nodeParams->poolProps.location.id;
        tl_track_alloc(TL_KIND_ASYNC, TL_SPACE_MEM, nodeParams->dptr, nodeParams->bytesize, device,
                       tl_pool_index_for_graph(device));
    }
    LEAVE();
    return rc;
}

/* A free node of a graph allocation we track ends its row; any other
 * pointer is the driver's to judge (it refuses what is no graph allocation),
 * not an invalid free of ours. */
TL_EXPORT CUresult cuGraphAddMemFreeNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                         size_t numDependencies, CUdeviceptr dptr)
{
    ENTER();
    struct tl_live rec;
    bool tracked = outer && tl_live_lookup(TL_SPACE_MEM, dptr, &rec) && tl_pools_is_graph(&rec);
    CUresult rc = TRACKED_FREE(tracked, TL_SPACE_MEM, dptr, TL_MASK(TL_KIND_ASYNC),
                               CALL_REAL(cuGraphAddMemFreeNode, phGraphNode, hGraph, dependencies, numDependencies, dptr));
    LEAVE();
    return rc;
}

/* ---- virtual memory management ------------------------------------------ */
/* A VA reservation is not memory (PyTorch reserves ~1.1x the GPU's size);
 * a physical handle is; a mapping ties one to the other.  All three are
 * tracked so that each kind of forgotten cleanup has its own stack. */

TL_EXPORT CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                       unsigned long long flags)
{
    ENTER();
    CUresult rc = CALL_REAL(cuMemAddressReserve, ptr, size, alignment, addr, flags);
    if (outer && rc == CUDA_SUCCESS)
        tl_track_alloc(TL_KIND_VMM_RESERVATION, TL_SPACE_VMM_VA, *ptr, size, -1, 0);
    LEAVE();
    return rc;
}

TL_EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    ENTER();
    CUresult rc = TRACKED_FREE(outer, TL_SPACE_VMM_VA, ptr, TL_MASK(TL_KIND_VMM_RESERVATION), CALL_REAL(cuMemAddressFree, ptr, size));
    LEAVE();
    return rc;
}

TL_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                               unsigned long long flags)
{
    ENTER();
    BUDGET_GUARD(TL_KIND_VMM_HANDLE, size);
    CUresult rc = CALL_REAL(cuMemCreate, handle, size, prop, flags);
    int device = prop && prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE ? prop->location.id : -1;
    /* aux = references: 1 from cuMemCreate, +1 per cuMemRetainAllocationHandle. */
    after_alloc(outer, rc, TL_KIND_VMM_HANDLE, TL_SPACE_VMM_HANDLE, rc == CUDA_SUCCESS ? *handle : 0, size, device, 1);
    LEAVE();
    return rc;
}

TL_EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    ENTER();
    CUresult rc = CALL_REAL(cuMemRetainAllocationHandle, handle, addr);
    if (outer && rc == CUDA_SUCCESS) {
        struct tl_live rec;
        if (tl_live_lookup(TL_SPACE_VMM_HANDLE, *handle, &rec))
            tl_live_set_aux(TL_SPACE_VMM_HANDLE, *handle, rec.aux + 1);
    }
    LEAVE();
    return rc;
}

/* Shareable handles.  An import of an allocation this process holds may
 * give back a handle it already has (the simulated driver does; cuda.h
 * leaves it open): one more reference, as cuMemRetainAllocationHandle, its
 * bytes counted once.  Any other import is a row of its own (kind
 * TL_KIND_VMM_IMPORTED), sized by the descriptor's file (0 when the file has
 * no size: the first mapping then sizes it), on the device the driver says.
 * A new handle for an allocation another live handle of the process holds
 * (same identity, vmm_share.c) is an alias: a row of 0 bytes, which takes
 * the bytes when that handle is released, so they count once. */
TL_EXPORT CUresult cuMemExportToShareableHandle(void *shareableHandle, CUmemGenericAllocationHandle handle,
                                                CUmemAllocationHandleType handleType, unsigned long long flags)
{
    ENTER();
    CUresult rc = CALL_REAL(cuMemExportToShareableHandle, shareableHandle, handle, handleType, flags);
    if (outer && rc == CUDA_SUCCESS)
        tl_vmm_share_note(handle, handleType == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR ? *(int *)shareableHandle : -1,
                          false);
    LEAVE();
    return rc;
}

static int imported_handle_device(CUmemGenericAllocationHandle handle)
{
    typedef CUresult (*props_fn)(CUmemAllocationProp *, CUmemGenericAllocationHandle);
    props_fn props = (props_fn)tl_driver_symbol("cuMemGetAllocationPropertiesFromHandle");
    CUmemAllocationProp prop;
    if (!props || props(&prop, handle) != CUDA_SUCCESS || prop.location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return -1;
    return prop.location.id;
}

TL_EXPORT CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *osHandle,
                                                  CUmemAllocationHandleType shHandleType)
{
    ENTER();
    CUresult rc = CALL_REAL(cuMemImportFromShareableHandle, handle, osHandle, shHandleType);
    if (outer && rc == CUDA_SUCCESS) {
        struct tl_live rec;
        int fd = shHandleType == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR ? (int)(intptr_t)osHandle : -1;
        if (tl_live_lookup(TL_SPACE_VMM_HANDLE, *handle, &rec)) {
            tl_live_set_aux(TL_SPACE_VMM_HANDLE, *handle, rec.aux + 1);
        } else {
            tl_vmm_share_note(*handle, fd, true);
            uint64_t holder, size = tl_vmm_share_file_size(fd);
            if (tl_vmm_share_holder_of(*handle, &holder) && tl_live_lookup(TL_SPACE_VMM_HANDLE, holder, &rec)) {
                size = 0;
                tl_vmm_share_set_aliased(*handle, true);
            }
            tl_track_alloc(TL_KIND_VMM_IMPORTED, TL_SPACE_VMM_HANDLE, *handle, size, imported_handle_device(*handle), 1);
        }
    }
    LEAVE();
    return rc;
}

#define VMM_HANDLE_KINDS (TL_MASK(TL_KIND_VMM_HANDLE) | TL_MASK(TL_KIND_VMM_IMPORTED))

/* The last reference of a shared handle is gone: an alias of its allocation
 * (an import counted at it, 0 bytes) takes its bytes. */
static void vmm_share_released(CUmemGenericAllocationHandle handle, uint64_t bytes)
{
    uint64_t alias;
    struct tl_live a;
    if (bytes && tl_vmm_share_take_alias(handle, &alias) &&
        tl_track_free(TL_SPACE_VMM_HANDLE, alias, TL_MASK(TL_KIND_VMM_IMPORTED), &a)) {
        a.size = bytes;
        tl_track_restore(&a);
    }
    tl_vmm_share_forget(handle);
}

TL_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    ENTER();
    CUresult rc;
    struct tl_live rec;
    bool known = outer && tl_live_lookup(TL_SPACE_VMM_HANDLE, handle, &rec);
    if (known && rec.aux > 1) {
        /* Not the last reference: the handle lives on. */
        rc = CALL_REAL(cuMemRelease, handle);
        if (rc == CUDA_SUCCESS)
            tl_live_set_aux(TL_SPACE_VMM_HANDLE, handle, rec.aux - 1);
    } else {
        rc = TRACKED_FREE(outer, TL_SPACE_VMM_HANDLE, handle, VMM_HANDLE_KINDS, CALL_REAL(cuMemRelease, handle));
        if (outer && rc == CUDA_SUCCESS && tl_vmm_share_count())
            vmm_share_released(handle, known ? rec.size : 0);
    }
    LEAVE();
    return rc;
}

TL_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                            unsigned long long flags)
{
    ENTER();
    CUresult rc = CALL_REAL(cuMemMap, ptr, size, offset, handle, flags);
    if (outer && rc == CUDA_SUCCESS) {
        struct tl_live h;
        bool known = tl_live_lookup(TL_SPACE_VMM_HANDLE, handle, &h);
        int device = known ? h.device : -1;
        struct tl_vmm_share sh;
        if (known && h.kind == TL_KIND_VMM_IMPORTED && h.size == 0 &&
            !(tl_vmm_share_lookup(handle, &sh) && sh.aliased) &&
            tl_track_free(TL_SPACE_VMM_HANDLE, handle, TL_MASK(TL_KIND_VMM_IMPORTED), &h)) {
            /* An imported handle of unknown size: its first mapping's extent
             * is the least it holds. */
            h.size = offset + size;
            tl_track_restore(&h);
        }
        tl_track_alloc(TL_KIND_VMM_MAPPING, TL_SPACE_VMM_MAP, ptr, size, device, 0);
    }
    LEAVE();
    return rc;
}

TL_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    ENTER();
    CUresult rc = TRACKED_FREE(outer, TL_SPACE_VMM_MAP, ptr, TL_MASK(TL_KIND_VMM_MAPPING), CALL_REAL(cuMemUnmap, ptr, size));
    LEAVE();
    return rc;
}

/* ---- contexts ----------------------------------------------------------- */

TL_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    ENTER();
    CUresult rc = CALL_REAL(cuDevicePrimaryCtxRetain, pctx, dev);
    (void)outer;
    if (rc == CUDA_SUCCESS) {
        tl_note_context(*pctx, dev, true);
        tl_context_seen(*pctx);
    }
    LEAVE();
    return rc;
}

/* Context creation and switches.  The tracker asks the driver for the
 * current context at every allocation only once the process has shown it a
 * second context (tl_context_seen, tracker.c): every public way a thread
 * comes to have a context current passes here (cuDevicePrimaryCtxRetain
 * above makes none current but names the device's one). */
#define CONTEXT_HOOK(fn, params, args, ctx)          \
    TL_EXPORT CUresult fn params                    \
    {                                               \
        ENTER();                                    \
        (void)outer;                                \
        CUresult rc = CALL_REAL(fn, args);          \
        if (rc == CUDA_SUCCESS && atomic_load_explicit(&tl_active, memory_order_relaxed)) \
            tl_context_seen(ctx);                   \
        LEAVE();                                    \
        return rc;                                  \
    }
#define COMMA ,
CONTEXT_HOOK(cuCtxCreate, (CUcontext *pctx, unsigned int flags, CUdevice dev), pctx COMMA flags COMMA dev, *pctx)
CONTEXT_HOOK(cuCtxCreate_v2, (CUcontext *pctx, unsigned int flags, CUdevice dev), pctx COMMA flags COMMA dev, *pctx)
CONTEXT_HOOK(cuCtxCreate_v3,
             (CUcontext *pctx, struct CUexecAffinityParam_st *params, int nparams, unsigned int flags, CUdevice dev),
             pctx COMMA params COMMA nparams COMMA flags COMMA dev, *pctx)
CONTEXT_HOOK(cuCtxCreate_v4, (CUcontext *pctx, CUctxCreateParams *params, unsigned int flags, CUdevice dev),
             pctx COMMA params COMMA flags COMMA dev, *pctx)
CONTEXT_HOOK(cuCtxSetCurrent, (CUcontext ctx), ctx, ctx)
CONTEXT_HOOK(cuCtxPushCurrent, (CUcontext ctx), ctx, ctx)
CONTEXT_HOOK(cuCtxPushCurrent_v2, (CUcontext ctx), ctx, ctx)
#undef COMMA
#undef CONTEXT_HOOK

/* A pop makes current the context pushed before, seen when it was pushed,
 * unless it was current before any hook could see it: asked of the driver
 * while the shortcut holds. */
#define POP_HOOK(fn)                                \
    TL_EXPORT CUresult fn(CUcontext *pctx)          \
    {                                               \
        ENTER();                                    \
        (void)outer;                                \
        CUresult rc = CALL_REAL(fn, pctx);          \
        if (rc == CUDA_SUCCESS)                     \
            tl_context_current_seen();              \
        LEAVE();                                    \
        return rc;                                  \
    }
POP_HOOK(cuCtxPopCurrent)
POP_HOOK(cuCtxPopCurrent_v2)
#undef POP_HOOK

/* Context teardown frees the context's memory in the driver.  Recorded
 * before the real call: once the driver has freed the memory, its addresses
 * may be handed out again.  The legacy entry points have the same
 * signatures and the same teardown. */
#define TEARDOWN_HOOK(fn, type, arg, ctx, dev)  \
    TL_EXPORT CUresult fn(type arg)             \
    {                                           \
        ENTER();                                \
        if (outer)                              \
            tl_teardown_context((ctx), (dev));  \
        CUresult rc = CALL_REAL(fn, arg);       \
        LEAVE();                                \
        return rc;                              \
    }

TEARDOWN_HOOK(cuCtxDestroy_v2, CUcontext, ctx, ctx, -1)
TEARDOWN_HOOK(cuCtxDestroy, CUcontext, ctx, ctx, -1)
TEARDOWN_HOOK(cuDevicePrimaryCtxReset_v2, CUdevice, dev, NULL, dev)
TEARDOWN_HOOK(cuDevicePrimaryCtxReset, CUdevice, dev, NULL, dev)
