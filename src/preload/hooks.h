/*
 * hooks.h — the list of every function libtensorleak interposes, and how a
 * hook reaches the real one.
 *
 * One X-macro list feeds the dlsym router (which names to hand our hook
 * for), the cuGetProcAddress router (which variant a (name, version, flags)
 * lookup means) and the real-function slots, so they cannot drift apart.
 *
 * Driver rows: X(exported name, base name for cuGetProcAddress, minimum
 * cudaVersion of this variant, per-thread-default-stream variant?).
 * The minimum versions follow cuda.h's versioning (e.g. cuMemAlloc became
 * cuMemAlloc_v2 in CUDA 3.2).
 */
#ifndef TL_HOOKS_H
#define TL_HOOKS_H

#include "cudart_compat.h"
#include "pools.h"
#include "tl_internal.h"

/* Every declaration below is of this library (hidden): the compiler then
 * reaches its variables directly, not through the GOT. */
#pragma GCC visibility push(hidden)

#define TL_DRIVER_HOOKS(X)                                               \
    X(cuMemAlloc_v2, cuMemAlloc, 3020, 0)                                \
    X(cuMemAllocPitch_v2, cuMemAllocPitch, 3020, 0)                      \
    X(cuMemFree_v2, cuMemFree, 3020, 0)                                  \
    X(cuMemAllocHost_v2, cuMemAllocHost, 3020, 0)                        \
    X(cuMemHostAlloc, cuMemHostAlloc, 2020, 0)                           \
    X(cuMemFreeHost, cuMemFreeHost, 2000, 0)                             \
    X(cuMemAllocManaged, cuMemAllocManaged, 6000, 0)                     \
    X(cuMemHostRegister, cuMemHostRegister, 4000, 0)                     \
    X(cuMemHostRegister_v2, cuMemHostRegister, 6050, 0)                  \
    X(cuMemHostUnregister, cuMemHostUnregister, 4000, 0)                 \
    X(cuArrayCreate_v2, cuArrayCreate, 3020, 0)                          \
    X(cuArray3DCreate_v2, cuArray3DCreate, 3020, 0)                      \
    X(cuArrayDestroy, cuArrayDestroy, 2000, 0)                           \
    X(cuMipmappedArrayCreate, cuMipmappedArrayCreate, 5000, 0)           \
    X(cuMipmappedArrayDestroy, cuMipmappedArrayDestroy, 5000, 0)         \
    X(cuIpcGetMemHandle, cuIpcGetMemHandle, 4010, 0)                     \
    X(cuIpcOpenMemHandle, cuIpcOpenMemHandle, 4010, 0)                   \
    X(cuIpcOpenMemHandle_v2, cuIpcOpenMemHandle, 11000, 0)               \
    X(cuIpcCloseMemHandle, cuIpcCloseMemHandle, 4010, 0)                 \
    X(cuMemAllocAsync, cuMemAllocAsync, 11020, 0)                        \
    X(cuMemAllocAsync_ptsz, cuMemAllocAsync, 11020, 1)                   \
    X(cuMemFreeAsync, cuMemFreeAsync, 11020, 0)                          \
    X(cuMemFreeAsync_ptsz, cuMemFreeAsync, 11020, 1)                     \
    X(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync, 11020, 0)        \
    X(cuMemAllocFromPoolAsync_ptsz, cuMemAllocFromPoolAsync, 11020, 1)   \
    X(cuMemPoolCreate, cuMemPoolCreate, 11020, 0)                        \
    X(cuMemPoolDestroy, cuMemPoolDestroy, 11020, 0)                      \
    X(cuMemAddressReserve, cuMemAddressReserve, 10020, 0)                \
    X(cuMemAddressFree, cuMemAddressFree, 10020, 0)                      \
    X(cuMemCreate, cuMemCreate, 10020, 0)                                \
    X(cuMemRelease, cuMemRelease, 10020, 0)                              \
    X(cuMemMap, cuMemMap, 10020, 0)                                      \
    X(cuMemUnmap, cuMemUnmap, 10020, 0)                                  \
    X(cuMemRetainAllocationHandle, cuMemRetainAllocationHandle, 11000, 0) \
    X(cuMemExportToShareableHandle, cuMemExportToShareableHandle, 10020, 0) \
    X(cuMemImportFromShareableHandle, cuMemImportFromShareableHandle, 10020, 0) \
    X(cuStreamBeginCapture_v2, cuStreamBeginCapture, 10010, 0)           \
    X(cuStreamBeginCapture_v2_ptsz, cuStreamBeginCapture, 10010, 1)      \
    X(cuStreamBeginCaptureToGraph, cuStreamBeginCaptureToGraph, 12030, 0) \
    X(cuStreamBeginCaptureToGraph_ptsz, cuStreamBeginCaptureToGraph, 12030, 1) \
    X(cuStreamEndCapture, cuStreamEndCapture, 10000, 0)                  \
    X(cuStreamEndCapture_ptsz, cuStreamEndCapture, 10000, 1)             \
    X(cuGraphAddMemAllocNode, cuGraphAddMemAllocNode, 11040, 0)          \
    X(cuGraphAddMemFreeNode, cuGraphAddMemFreeNode, 11040, 0)            \
    X(cuCtxCreate, cuCtxCreate, 2000, 0)                                 \
    X(cuCtxCreate_v2, cuCtxCreate, 3020, 0)                              \
    X(cuCtxCreate_v3, cuCtxCreate, 11040, 0)                             \
    X(cuCtxCreate_v4, cuCtxCreate, 12050, 0)                             \
    X(cuCtxSetCurrent, cuCtxSetCurrent, 4000, 0)                         \
    X(cuCtxPushCurrent, cuCtxPushCurrent, 2000, 0)                       \
    X(cuCtxPushCurrent_v2, cuCtxPushCurrent, 4000, 0)                    \
    X(cuCtxPopCurrent, cuCtxPopCurrent, 2000, 0)                         \
    X(cuCtxPopCurrent_v2, cuCtxPopCurrent, 4000, 0)                      \
    X(cuCtxDestroy, cuCtxDestroy, 2000, 0)                               \
    X(cuCtxDestroy_v2, cuCtxDestroy, 4000, 0)                            \
    X(cuDevicePrimaryCtxReset, cuDevicePrimaryCtxReset, 7000, 0)         \
    X(cuDevicePrimaryCtxReset_v2, cuDevicePrimaryCtxReset, 11000, 0)     \
    X(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain, 7000, 0)       \
    X(cuGetProcAddress, cuGetProcAddress, 11030, 0)                      \
    X(cuGetProcAddress_v2, cuGetProcAddress, 12000, 0)

/* The context rows (cuCtxCreate through cuCtxPopCurrent_v2 above, in one
 * run) only tell the tracker's one-context shortcut about contexts; an
 * attached process never takes it (its contexts predate us), so attach.c
 * leaves these entry points unpatched. */
#define TL_HOOK_IS_CONTEXT_ROW(id) ((id) >= TL_HOOK_cuCtxCreate && (id) <= TL_HOOK_cuCtxPopCurrent_v2)

#define TL_RUNTIME_HOOKS(X)          \
    X(cudaMalloc)                    \
    X(cudaFree)                      \
    X(cudaMallocHost)                \
    X(cudaHostAlloc)                 \
    X(cudaFreeHost)                  \
    X(cudaHostRegister)              \
    X(cudaHostUnregister)            \
    X(cudaMallocManaged)             \
    X(cudaMallocPitch)               \
    X(cudaMalloc3D)                  \
    X(cudaMallocArray)               \
    X(cudaMalloc3DArray)             \
    X(cudaMallocMipmappedArray)      \
    X(cudaFreeArray)                 \
    X(cudaFreeMipmappedArray)        \
    X(cudaIpcGetMemHandle)           \
    X(cudaIpcOpenMemHandle)          \
    X(cudaIpcCloseMemHandle)         \
    X(cudaMallocAsync)               \
    X(cudaMallocAsync_ptsz)          \
    X(cudaFreeAsync)                 \
    X(cudaFreeAsync_ptsz)            \
    X(cudaMallocFromPoolAsync)       \
    X(cudaMallocFromPoolAsync_ptsz)  \
    X(cudaDeviceReset)

enum tl_hook_id {
#define TL_ENUM_DRIVER(name, base, ver, ptsz) TL_HOOK_##name,
#define TL_ENUM_RUNTIME(name) TL_HOOK_##name,
    TL_DRIVER_HOOKS(TL_ENUM_DRIVER)
    TL_RUNTIME_HOOKS(TL_ENUM_RUNTIME)
    TL_HOOK_COUNT
#undef TL_ENUM_DRIVER
#undef TL_ENUM_RUNTIME
};
_Static_assert(TL_HOOK_cuCtxPopCurrent_v2 - TL_HOOK_cuCtxCreate == 8, "the context rows are one run of nine");

struct tl_hook {
    const char *name;     /* the exported symbol */
    const char *base;     /* cuGetProcAddress name; NULL for runtime rows */
    int min_version;
    bool ptsz;
    void *hook;           /* our definition (attach.c corrects it where the GOT bound the name elsewhere) */
    _Atomic(void *) real; /* the definition we forward to */
};
extern struct tl_hook tl_hooks[TL_HOOK_COUNT];

/* The real function of a hook: captured at lookup, else the next
 * definition after ours, else one from the already-loaded driver. */
void *tl_real(enum tl_hook_id id);
#define REAL(fn) ((__typeof__(&fn))tl_real(TL_HOOK_##fn))

/* Resolves every hook's real function that is loaded now (RTLD_NEXT), at
 * the first CUDA call, before any thread of ours starts (gate.c). */
void tl_resolve_all(void);
/* `fn` is one of our hooks (their definitions as attach.c corrected them). */
bool tl_is_own_hook(const void *fn);
/* Finds the hook row for an exported name; NULL when we don't hook it. */
struct tl_hook *tl_hook_by_name(const char *name);
/* Lazy, idempotent initialisation from inside a hook; TL_ENTER calls it
 * only until tl_used is set.  False in a child nobody told us about (gate.c):
 * the hook then only forwards. */
bool tl_ensure_init(void);

/* ---- shared by hooks_driver.c and hooks_runtime.c ------------------------ */


/* What cuMemFree/cudaFree may release: stream-ordered pointers too. */
#define TL_MEM_KINDS (TL_MASK(TL_KIND_DEVICE) | TL_MASK(TL_KIND_MANAGED) | TL_MASK(TL_KIND_ASYNC))

/* Enter/leave: lazily initialise and track nesting.  A nested hook (the
 * driver call inside cudaMalloc) runs inside an outer one that has
 * initialised already, so it skips even that call.  In a child nobody told
 * us about tl_used reads false (gate.c) and tl_ensure_init leaves `outer`
 * false: the hook forwards and touches nothing of ours. */
#define TL_ENTER()                                                                      \
    bool outer = tl_hook_depth++ == 0;                                                  \
    if (TL_LIKELY(outer) && TL_UNLIKELY(!atomic_load_explicit(&tl_used, memory_order_relaxed))) \
        outer = tl_ensure_init()
#define TL_LEAVE() tl_hook_depth--

/* TENSORLEAK_BUDGET_ENFORCE: an allocation that would cross a budget fails
 * with `err` (out-of-memory) as if the device were full, without reaching
 * the driver. */
#define TL_BUDGET_GUARD(kind, bytes, err)                                                         \
    if (outer && TL_UNLIKELY(atomic_load_explicit(&tl_budget_enforcing, memory_order_relaxed)) && \
        tl_budget_refuse((kind), (bytes))) {                                                      \
        TL_LEAVE();                                                                               \
        return (err);                                                                             \
    }

/* REAL() with its common case inline: the pointer is resolved already. */
static inline void *tl_real_fast(enum tl_hook_id id)
{
    void *fn = atomic_load_explicit(&tl_hooks[id].real, memory_order_acquire);
    return TL_LIKELY(fn != NULL) ? fn : tl_real(id);
}

/* A hook reached from inside another (the driver call inside cudaMalloc)
 * does nothing but forward, so it forwards first: a tail call, before any
 * bookkeeping or frame; `unresolved` (out of line, so that this path keeps
 * no frame) forwards while the real function is not resolved yet.  Calls
 * the real function makes still see a nested depth.  What follows it runs at
 * depth 0 only (TL_ENTER_OUTERMOST). */
#define TL_NESTED_FORWARD(fn, unresolved, ...)                                            \
    do {                                                                                  \
        if (tl_hook_depth > 0) {                                                          \
            __typeof__(&fn) real_ = (__typeof__(&fn))atomic_load_explicit(                \
                &tl_hooks[TL_HOOK_##fn].real, memory_order_acquire);                      \
            if (TL_LIKELY(real_ != NULL))                                                 \
                return real_(__VA_ARGS__);                                                \
            return unresolved(__VA_ARGS__);                                               \
        }                                                                                 \
    } while (0)

/* TL_ENTER for a hook reached at depth 0 only (after TL_NESTED_FORWARD):
 * the depth is set, not read. */
#define TL_ENTER_OUTERMOST()                                                            \
    tl_hook_depth = 1;                                                                  \
    bool outer = true;                                                                  \
    if (TL_UNLIKELY(!atomic_load_explicit(&tl_used, memory_order_relaxed)))             \
        outer = tl_ensure_init()

/* Calls the real `fn`, or answers `missing` when there is none. */
#define TL_CALL_REAL(fn, missing, ...)                                         \
    ({                                                                         \
        __typeof__(&fn) real_ = (__typeof__(&fn))tl_real_fast(TL_HOOK_##fn);   \
        real_ ? real_(__VA_ARGS__) : (missing);                                \
    })

/* ---- graph memory (hooks_driver.c, pools.c) ------------------------------ */
/* How many streams are capturing now, as the begin/end-capture hooks count
 * them (an upper bound: a capturing stream destroyed is not subtracted).
 * Only while it is non-zero does a stream-ordered allocation ask the driver
 * whether its stream is capturing. */
extern atomic_int tl_capturing_streams;
/* Is `stream` capturing (cuStreamIsCapturing)?  `per_thread`: the caller is a
 * _ptsz entry point, for which stream 0 is the per-thread default stream.
 * False when the driver cannot say. */
bool tl_stream_capturing(CUstream stream, bool per_thread);
/* The aux of a stream-ordered allocation's row: the device's graph memory
 * when `stream` is capturing, else the pool it came from.  The capture
 * query runs only while some capture is under way. */
#define TL_ASYNC_AUX(pool, from_device, stream, per_thread)                                          \
    (TL_UNLIKELY(atomic_load_explicit(&tl_capturing_streams, memory_order_relaxed) > 0) &&         \
             tl_stream_capturing((CUstream)(stream), (per_thread))                                 \
         ? tl_pool_index_for_graph(-1)                                                             \
         : tl_pool_index_for_async((pool), (from_device)))

/* The device memory a CUDA array (or, with `mipmapped`, a mipmapped array)
 * holds, as the driver answers cuArrayGetMemoryRequirements for the current
 * device, in *bytes; false when the driver cannot say (no such entry point
 * before CUDA 11.6, or the query refused): the row is then recorded with 0
 * bytes and TL_ARRAY_SIZE_UNKNOWN in its aux, and reports say its size is
 * unknown rather than 0. */
bool tl_array_bytes(void *handle, bool mipmapped, uint64_t *bytes);
/* Records a created array (the hooks of both APIs): its size as
 * tl_array_bytes says, or unknown. */
void tl_track_array(void *handle, bool mipmapped);

/* ---- CUDA IPC (hooks_driver.c, shared with hooks_runtime.c) ------------- */
/* After a successful open at `addr` of `handle`: a new mapping row (its
 * bytes the driver's cuMemGetAddressRange size, 0 when it cannot say), or
 * one more reference of a mapping already open there. */
void tl_ipc_opened(const void *handle, uint64_t addr);
/* Before a close of `addr`: true when it drops one of several references
 * (the mapping stays; call tl_ipc_unref after a successful close), false
 * when the close ends the mapping (or it is unknown): then a tracked free. */
bool tl_ipc_is_shared_ref(uint64_t addr);
void tl_ipc_unref(uint64_t addr);

#pragma GCC visibility pop

#endif
