/*
 * driver_ctx.c — contexts and streams: what they are, which one is current.
 *
 * Each device has one primary context (retained/released/reset, as the runtime
 * uses it); cuCtxCreate makes further contexts.  Every thread has its own
 * context stack (cuCtxCreate pushes, cuCtxDestroy pops, cuCtxSetCurrent
 * replaces the top), so the current context is thread-local as in CUDA.
 *
 * Every family asks this file for the current context and a stream's device,
 * so it sits below them (sim/README.md, "Layout"); the calls that end a
 * context or a stream, or synchronise one, reach into the families and are
 * driver_teardown.c's.
 *
 * Created contexts are never freed, only marked dead, so a stale handle still
 * current in another thread yields CUDA_ERROR_CONTEXT_IS_DESTROYED rather than
 * a use-after-free.  Handles from the program are validated by membership in
 * our lists before being dereferenced.
 */
#include <stdlib.h>

#include "simcuda.h"

#define CTX_MAGIC 0x43545853u    /* "SXTC" */
#define STREAM_MAGIC 0x4d525453u /* "STRM" */
#define CTX_STACK_MAX 32

static struct CUctx_st primaries[SIM_MAX_DEVICES];
static struct CUctx_st *created;   /* list of contexts from cuCtxCreate */
static struct CUstream_st *streams; /* list of live streams */

static __thread struct CUctx_st *ctx_stack[CTX_STACK_MAX];
static __thread int ctx_depth;

/* Context and stream ids (cuCtxGetId, cuStreamGetId) are unique in the process
 * and never reused. */
static unsigned long long next_id(void)
{
    static unsigned long long n;
    return __atomic_add_fetch(&n, 1, __ATOMIC_RELAXED);
}

static struct CUctx_st *current(void) { return ctx_depth ? ctx_stack[ctx_depth - 1] : NULL; }

static void set_current(struct CUctx_st *ctx)
{
    if (ctx_depth == 0)
        ctx_depth = 1;
    ctx_stack[ctx_depth - 1] = ctx;
}

void sim_ctx_pop_if_current(const struct CUctx_st *ctx)
{
    if (current() == ctx)
        ctx_depth--;
}

int sim_ctx_init_primaries(void)
{
    for (int d = 0; d < sim.ndevices; d++) {
        primaries[d].magic = CTX_MAGIC;
        primaries[d].device = d;
        primaries[d].primary = 1;
        primaries[d].id = next_id();
        sim.dev[d].primary = &primaries[d];
    }
    return 0;
}

int sim_ctx_known_locked(const struct CUctx_st *ctx)
{
    for (int d = 0; d < sim.ndevices; d++)
        if (ctx == &primaries[d])
            return 1;
    for (const struct CUctx_st *c = created; c; c = c->next)
        if (c == ctx)
            return 1;
    return 0;
}

/* Status of using ctx for work: usable, never made/already gone. */
static CUresult ctx_usable(const struct CUctx_st *ctx)
{
    if (!ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (!ctx->alive)
        return ctx->primary ? CUDA_ERROR_INVALID_CONTEXT : CUDA_ERROR_CONTEXT_IS_DESTROYED;
    return CUDA_SUCCESS;
}

CUresult sim_ctx_current_locked(struct CUctx_st **out)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    struct CUctx_st *ctx = current();
    CUresult rc = ctx_usable(ctx);
    if (rc == CUDA_SUCCESS && out)
        *out = ctx;
    return rc;
}

void sim_ctx_destroy_streams_locked(const struct CUctx_st *ctx)
{
    struct CUstream_st **link = &streams;
    while (*link) {
        struct CUstream_st *s = *link;
        if (s->ctx == ctx) {
            *link = s->next;
            free(s);
        } else {
            link = &s->next;
        }
    }
}

/* ---- primary contexts ---- */

SIM_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!sim_device_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    primaries[dev].refcount++;
    primaries[dev].alive = 1;
    *pctx = &primaries[dev];
    sim_unlock();
    return CUDA_SUCCESS;
}

/* ---- created contexts ---- */

static CUresult ctx_create(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    if (!sim_device_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    struct CUctx_st *ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        return CUDA_ERROR_OUT_OF_MEMORY;
    ctx->magic = CTX_MAGIC;
    ctx->device = dev;
    ctx->alive = 1;
    ctx->flags = flags;
    ctx->id = next_id();
    sim_lock();
    ctx->next = created;
    created = ctx;
    sim_unlock();
    /* cuCtxCreate pushes the new context onto the calling thread's stack. */
    if (ctx_depth < CTX_STACK_MAX)
        ctx_stack[ctx_depth++] = ctx;
    else
        set_current(ctx);
    *pctx = ctx;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    return ctx_create(pctx, flags, dev);
}

/* Execution-affinity and CIG parameters have no meaning without hardware and
 * are accepted and ignored. */
SIM_EXPORT CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams,
                                   unsigned int flags, CUdevice dev)
{
    (void)paramsArray;
    (void)numParams;
    return ctx_create(pctx, flags, dev);
}

SIM_EXPORT CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams,
                                   unsigned int flags, CUdevice dev)
{
    (void)ctxCreateParams;
    return ctx_create(pctx, flags, dev);
}

SIM_EXPORT CUresult cuCtxGetCurrent(CUcontext *pctx)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    *pctx = current();
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (ctx) {
        sim_lock();
        int known = sim_ctx_known_locked(ctx);
        CUresult rc = known ? (ctx->primary || ctx->alive ? CUDA_SUCCESS : CUDA_ERROR_CONTEXT_IS_DESTROYED)
                            : CUDA_ERROR_INVALID_CONTEXT;
        sim_unlock();
        if (rc != CUDA_SUCCESS)
            return rc;
    }
    set_current(ctx);
    return CUDA_SUCCESS;
}

/* Resolves ctx (NULL = the current one) to a usable context. */
CUresult sim_ctx_resolve_locked(CUcontext ctx, struct CUctx_st **out)
{
    if (!ctx)
        return sim_ctx_current_locked(out);
    if (!sim_ctx_known_locked(ctx))
        return CUDA_ERROR_INVALID_CONTEXT;
    CUresult rc = ctx_usable(ctx);
    if (rc == CUDA_SUCCESS)
        *out = ctx;
    return rc;
}

static CUresult ctx_get_device(CUdevice *device, CUcontext ctx)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUctx_st *c = NULL;
    sim_lock();
    CUresult rc = sim_ctx_resolve_locked(ctx, &c);
    if (rc == CUDA_SUCCESS)
        *device = c->device;
    sim_unlock();
    return rc;
}

/* CUDA 13.0 added the _v2 forms taking an explicit context (NULL: current). */
SIM_EXPORT CUresult cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx) { return ctx_get_device(device, ctx); }
SIM_EXPORT CUresult cuCtxGetDevice(CUdevice *device) { return ctx_get_device(device, NULL); }

/* ---- streams ---- */

static int stream_known(const struct CUstream_st *s)
{
    for (const struct CUstream_st *p = streams; p; p = p->next)
        if (p == s)
            return 1;
    return 0;
}

int sim_stream_unlink_locked(struct CUstream_st *s)
{
    for (struct CUstream_st **link = &streams; *link; link = &(*link)->next) {
        if (*link == s) {
            *link = s->next;
            return 1;
        }
    }
    return 0;
}

/* The device a stream's work runs on.  NULL, CU_STREAM_LEGACY and
 * CU_STREAM_PER_THREAD mean the current context's default stream. */
CUresult sim_stream_device_locked(CUstream s, int *device)
{
    struct CUctx_st *ctx;
    CUresult rc;
    if (s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD) {
        rc = sim_ctx_current_locked(&ctx);
    } else if (!stream_known(s)) {
        rc = CUDA_ERROR_INVALID_HANDLE;
    } else {
        ctx = s->ctx;
        rc = ctx_usable(ctx);
    }
    if (rc == CUDA_SUCCESS)
        *device = ctx->device;
    return rc;
}

/* An H100's range: 0 is the lowest priority, -5 the greatest. */
#define STREAM_PRIORITY_LEAST 0
#define STREAM_PRIORITY_GREATEST (-5)

static CUresult stream_create(CUstream *phStream, unsigned int Flags, int priority)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!phStream || (Flags & ~(unsigned)CU_STREAM_NON_BLOCKING))
        return CUDA_ERROR_INVALID_VALUE;
    struct CUctx_st *ctx;
    sim_lock();
    CUresult rc = sim_ctx_current_locked(&ctx);
    if (rc == CUDA_SUCCESS) {
        struct CUstream_st *s = calloc(1, sizeof *s);
        if (!s) {
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            s->magic = STREAM_MAGIC;
            s->ctx = ctx;
            s->flags = Flags;
            /* cuda.h: out-of-range priorities are clamped to the range. */
            s->priority = priority > STREAM_PRIORITY_LEAST      ? STREAM_PRIORITY_LEAST
                          : priority < STREAM_PRIORITY_GREATEST ? STREAM_PRIORITY_GREATEST
                                                                : priority;
            s->id = next_id();
            s->alive = 1;
            s->next = streams;
            streams = s;
            *phStream = s;
        }
    }
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    return stream_create(phStream, Flags, STREAM_PRIORITY_LEAST);
}

SIM_EXPORT CUresult cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority)
{
    return stream_create(phStream, flags, priority);
}

/* A stream's own record, or NULL with *rc set; the default streams (NULL,
 * CU_STREAM_LEGACY, CU_STREAM_PER_THREAD) have none, and *ctx is then the
 * current context. */
static struct CUstream_st *stream_lookup_locked(CUstream s, struct CUctx_st **ctx, CUresult *rc)
{
    *rc = CUDA_SUCCESS;
    if (s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD) {
        *rc = sim_ctx_current_locked(ctx);
        return NULL;
    }
    if (!stream_known(s)) {
        *rc = CUDA_ERROR_INVALID_HANDLE;
        return NULL;
    }
    *ctx = s->ctx;
    *rc = ctx_usable(s->ctx);
    return s;
}

/* Work completes at once, so every stream is idle. */
SIM_EXPORT CUresult cuStreamQuery(CUstream hStream)
{
    int device;
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    sim_lock();
    CUresult rc = sim_stream_device_locked(hStream, &device);
    sim_unlock();
    return rc;
}

enum stream_field { STREAM_PRIORITY, STREAM_FLAGS, STREAM_CTX, STREAM_ID };

/* One property of a stream; the default streams read as a created stream
 * with default flags and the lowest priority in the current context.  Their
 * ids are fixed (legacy 0, per-thread 1); created streams count from the
 * process-wide id sequence, above them. */
static CUresult stream_get(CUstream hStream, enum stream_field field, void *out)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUctx_st *ctx;
    CUresult rc;
    sim_lock();
    struct CUstream_st *s = stream_lookup_locked(hStream, &ctx, &rc);
    if (rc == CUDA_SUCCESS) {
        switch (field) {
        case STREAM_PRIORITY: *(int *)out = s ? s->priority : STREAM_PRIORITY_LEAST; break;
        case STREAM_FLAGS: *(unsigned *)out = s ? s->flags : CU_STREAM_DEFAULT; break;
        case STREAM_CTX: *(CUcontext *)out = ctx; break;
        case STREAM_ID:
            *(unsigned long long *)out = s ? 1000 + s->id : hStream == CU_STREAM_PER_THREAD ? 1 : 0;
            break;
        }
    }
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuStreamGetPriority(CUstream hStream, int *priority)
{
    return stream_get(hStream, STREAM_PRIORITY, priority);
}

SIM_EXPORT CUresult cuStreamGetFlags(CUstream hStream, unsigned int *flags)
{
    return stream_get(hStream, STREAM_FLAGS, flags);
}

SIM_EXPORT CUresult cuStreamGetCtx(CUstream hStream, CUcontext *pctx) { return stream_get(hStream, STREAM_CTX, pctx); }

SIM_EXPORT CUresult cuStreamGetId(CUstream hStream, unsigned long long *streamId)
{
    return stream_get(hStream, STREAM_ID, streamId);
}

SIM_EXPORT CUresult cuCtxGetStreamPriorityRange(int *leastPriority, int *greatestPriority)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    sim_lock();
    CUresult rc = sim_ctx_current_locked(NULL);
    sim_unlock();
    if (rc == CUDA_SUCCESS && leastPriority)
        *leastPriority = STREAM_PRIORITY_LEAST;
    if (rc == CUDA_SUCCESS && greatestPriority)
        *greatestPriority = STREAM_PRIORITY_GREATEST;
    return rc;
}

/* ---- the context stack ---- */

/* cuda.h: pushes ctx (usable, not NULL) onto the calling thread's stack. */
SIM_EXPORT CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    struct CUctx_st *c;
    sim_lock();
    CUresult rc = sim_ctx_resolve_locked(ctx, &c);
    sim_unlock();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (ctx_depth == CTX_STACK_MAX)
        return CUDA_ERROR_OUT_OF_MEMORY;
    ctx_stack[ctx_depth++] = ctx;
    return CUDA_SUCCESS;
}

/* Pops the top of the stack into *pctx (may be NULL); an empty stack is
 * CUDA_ERROR_INVALID_CONTEXT. */
SIM_EXPORT CUresult cuCtxPopCurrent_v2(CUcontext *pctx)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (ctx_depth == 0 || !ctx_stack[ctx_depth - 1])
        return CUDA_ERROR_INVALID_CONTEXT;
    struct CUctx_st *top = ctx_stack[--ctx_depth];
    if (pctx)
        *pctx = top;
    return CUDA_SUCCESS;
}

/* Every context speaks the API version 3020 introduced (what NVIDIA's driver
 * reports for contexts made through the _v2 entry points). */
SIM_EXPORT CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int *version)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!version)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUctx_st *c;
    sim_lock();
    CUresult rc = sim_ctx_resolve_locked(ctx, &c);
    sim_unlock();
    if (rc == CUDA_SUCCESS)
        *version = 3020;
    return rc;
}

SIM_EXPORT CUresult cuCtxGetId(CUcontext ctx, unsigned long long *ctxId)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!ctxId)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUctx_st *c;
    sim_lock();
    CUresult rc = sim_ctx_resolve_locked(ctx, &c);
    if (rc == CUDA_SUCCESS)
        *ctxId = c->id;
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuCtxGetFlags(unsigned int *flags)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!flags)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUctx_st *c;
    sim_lock();
    CUresult rc = sim_ctx_current_locked(&c);
    if (rc == CUDA_SUCCESS)
        *flags = c->flags;
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuCtxSetFlags(unsigned int flags)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (flags & ~(unsigned)CU_CTX_FLAGS_MASK)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUctx_st *c;
    sim_lock();
    CUresult rc = sim_ctx_current_locked(&c);
    if (rc == CUDA_SUCCESS)
        c->flags = flags;
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!sim_device_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    if (!flags || !active)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    *flags = primaries[dev].flags;
    *active = primaries[dev].refcount > 0;
    sim_unlock();
    return CUDA_SUCCESS;
}

/* Since CUDA 11.0 the flags may be set while the context is active. */
SIM_EXPORT CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!sim_device_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    if (flags & ~(unsigned)CU_CTX_FLAGS_MASK)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    primaries[dev].flags = flags;
    sim_unlock();
    return CUDA_SUCCESS;
}
