/*
 * driver_teardown.c — the calls that end a context or a stream, or
 * synchronise one: what they do to every family's memory.
 *
 * Tearing a context down (cuCtxDestroy, cuDevicePrimaryCtxReset, the last
 * cuDevicePrimaryCtxRelease) frees every cuMemAlloc-family allocation made in
 * it (driver_alloc.c), its CUDA arrays (driver_array.c) and the IPC handles it
 * opened (driver_ipc.c), and destroys its streams, as the real driver does.
 * It does not free VMM handles or stream-ordered pool memory: cuda.h notes
 * those are not tied to a context.  A stream destroyed while capturing stops
 * its capture (driver_graph.c).  Synchronising is where pools give back
 * unused chunks (driver_pool.c).
 *
 * Contexts and streams themselves are driver_ctx.c's, below every family;
 * these calls reach into the families, so they sit above them
 * (sim/README.md, "Layout").
 */
#include <stdlib.h>

#include "simcuda.h"

static void teardown_locked(struct CUctx_st *ctx)
{
    sim_alloc_release_ctx_locked(ctx);
    sim_array_release_ctx_locked(ctx);
    sim_ipc_release_ctx_locked(ctx);
    sim_ctx_destroy_streams_locked(ctx);
}

/* ---- primary contexts ---- */

/* The last release resets the context (frees its memory); releasing one that
 * was never retained is CUDA_ERROR_INVALID_CONTEXT (cuda.h). */
static CUresult primary_release(CUdevice dev)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!sim_device_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    struct CUctx_st *primary = sim.dev[dev].primary;
    CUresult rc = CUDA_SUCCESS;
    sim_lock();
    if (primary->refcount == 0) {
        rc = CUDA_ERROR_INVALID_CONTEXT;
    } else if (--primary->refcount == 0) {
        teardown_locked(primary);
        primary->alive = 0;
    }
    sim_unlock();
    return rc;
}

/* Frees everything the primary context owns; the retain count is unchanged
 * ("Resetting the primary context does not release it"), so the context stays
 * usable by those who retained it.  Not inlined into the two entry points:
 * inlined, each began with `push; movslq; call` inside its first 5 bytes,
 * which `tensorleak attach` cannot move; as a tail call each is `jmp
 * primary_reset`, which it relocates (as for driver_array.c's destroy). */
__attribute__((noinline)) static CUresult primary_reset(CUdevice dev)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!sim_device_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    sim_lock();
    teardown_locked(sim.dev[dev].primary);
    sim_unlock();
    return CUDA_SUCCESS;
}

/* The CUDA 7.0 entry points have the same signatures and, for what we
 * simulate, the same behaviour as their CUDA 11.0 _v2 successors; each is its
 * own exported symbol, as in libcuda. */
SIM_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) { return primary_release(dev); }
SIM_EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev) { return primary_release(dev); }
SIM_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) { return primary_reset(dev); }
SIM_EXPORT CUresult cuDevicePrimaryCtxReset(CUdevice dev) { return primary_reset(dev); }

/* ---- created contexts ---- */

static CUresult ctx_destroy(CUcontext ctx)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!ctx)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    /* Primary contexts are managed with Retain/Release/Reset only. */
    if (!sim_ctx_known_locked(ctx) || ctx->primary || !ctx->alive) {
        sim_unlock();
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    teardown_locked(ctx);
    ctx->alive = 0;
    sim_unlock();
    sim_ctx_pop_if_current(ctx); /* popped, as with cuCtxPopCurrent */
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx) { return ctx_destroy(ctx); }
SIM_EXPORT CUresult cuCtxDestroy(CUcontext ctx) { return ctx_destroy(ctx); }

/* ---- synchronisation ---- */

/* Work completes immediately in the simulator; what synchronising does here is
 * what it does to memory on a real device: pools give back unused chunks
 * above their release threshold. */
static CUresult ctx_synchronize(CUcontext ctx)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    struct CUctx_st *c = NULL;
    sim_lock();
    CUresult rc = sim_ctx_resolve_locked(ctx, &c);
    if (rc == CUDA_SUCCESS)
        sim_pool_trim_device_locked(c->device);
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuCtxSynchronize_v2(CUcontext ctx) { return ctx_synchronize(ctx); }
SIM_EXPORT CUresult cuCtxSynchronize(void) { return ctx_synchronize(NULL); }

SIM_EXPORT CUresult cuStreamSynchronize(CUstream hStream)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    int device;
    sim_lock();
    CUresult rc = sim_stream_device_locked(hStream, &device);
    if (rc == CUDA_SUCCESS)
        sim_pool_trim_device_locked(device);
    sim_unlock();
    return rc;
}

/* ---- streams ---- */

static CUresult stream_destroy(CUstream hStream)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = CUDA_ERROR_INVALID_HANDLE;
    sim_lock();
    if (sim_stream_unlink_locked(hStream)) {
        sim_graph_stream_gone_locked(hStream);
        free(hStream);
        rc = CUDA_SUCCESS;
    }
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuStreamDestroy_v2(CUstream hStream) { return stream_destroy(hStream); }
SIM_EXPORT CUresult cuStreamDestroy(CUstream hStream) { return stream_destroy(hStream); }
