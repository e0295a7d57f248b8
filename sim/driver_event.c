/*
 * driver_event.c — events: created in the current context, recorded on a
 * stream, waited for, timed.
 *
 * Work completes at once in the simulator, so a recorded event has completed
 * when cuEventRecord returns; its time is the host's monotonic clock then, so
 * cuEventElapsedTime measures real time between two records.  Handles are
 * validated by membership in the list of live events before use.  Events of a
 * torn-down context go with it in CUDA; here they stay valid until destroyed
 * (nothing observable hangs on them).
 */
#include <stdlib.h>
#include <time.h>

#include "simcuda.h"

struct CUevent_st {
    struct CUctx_st *ctx;
    unsigned flags;
    int recorded;
    struct timespec at;
    struct CUevent_st *next;
};

static struct CUevent_st *events;

static struct CUevent_st *event_find_locked(CUevent e)
{
    for (struct CUevent_st *p = events; p; p = p->next)
        if (p == e)
            return p;
    return NULL;
}

SIM_EXPORT CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    const unsigned valid = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
    /* cuda.h: an interprocess event must also disable timing. */
    if (!phEvent || (Flags & ~valid) ||
        ((Flags & CU_EVENT_INTERPROCESS) && !(Flags & CU_EVENT_DISABLE_TIMING)))
        return CUDA_ERROR_INVALID_VALUE;
    struct CUctx_st *ctx;
    sim_lock();
    CUresult rc = sim_ctx_current_locked(&ctx);
    if (rc == CUDA_SUCCESS) {
        struct CUevent_st *e = calloc(1, sizeof *e);
        if (!e) {
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            e->ctx = ctx;
            e->flags = Flags;
            e->next = events;
            events = e;
            *phEvent = e;
        }
    }
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuEventDestroy_v2(CUevent hEvent)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = CUDA_ERROR_INVALID_HANDLE;
    sim_lock();
    for (struct CUevent_st **link = &events; *link; link = &(*link)->next) {
        if (*link == hEvent) {
            *link = hEvent->next;
            free(hEvent);
            rc = CUDA_SUCCESS;
            break;
        }
    }
    sim_unlock();
    return rc;
}

/* The stream must be usable; CU_EVENT_RECORD_EXTERNAL (1) only matters under
 * stream capture, which the simulator does not do. */
static CUresult event_record(CUevent hEvent, CUstream hStream, unsigned flags)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (flags & ~1u)
        return CUDA_ERROR_INVALID_VALUE;
    int device;
    sim_lock();
    struct CUevent_st *e = event_find_locked(hEvent);
    CUresult rc = e ? sim_stream_device_locked(hStream, &device) : CUDA_ERROR_INVALID_HANDLE;
    if (rc == CUDA_SUCCESS) {
        e->recorded = 1;
        clock_gettime(CLOCK_MONOTONIC, &e->at);
    }
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuEventRecord(CUevent hEvent, CUstream hStream) { return event_record(hEvent, hStream, 0); }

SIM_EXPORT CUresult cuEventRecordWithFlags(CUevent hEvent, CUstream hStream, unsigned int flags)
{
    return event_record(hEvent, hStream, flags);
}

/* An event never recorded has no work to wait for: complete (cuda.h). */
static CUresult event_wait(CUevent hEvent)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    sim_lock();
    CUresult rc = event_find_locked(hEvent) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuEventQuery(CUevent hEvent) { return event_wait(hEvent); }
SIM_EXPORT CUresult cuEventSynchronize(CUevent hEvent) { return event_wait(hEvent); }

/* cuda.h: CUDA_ERROR_INVALID_HANDLE when either event was created with
 * CU_EVENT_DISABLE_TIMING or has not been recorded. */
static CUresult elapsed(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!pMilliseconds)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    struct CUevent_st *a = event_find_locked(hStart), *b = event_find_locked(hEnd);
    CUresult rc = CUDA_SUCCESS;
    if (!a || !b || !a->recorded || !b->recorded || ((a->flags | b->flags) & CU_EVENT_DISABLE_TIMING))
        rc = CUDA_ERROR_INVALID_HANDLE;
    else
        *pMilliseconds = (float)((double)(b->at.tv_sec - a->at.tv_sec) * 1e3 +
                                 (double)(b->at.tv_nsec - a->at.tv_nsec) / 1e6);
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    return elapsed(pMilliseconds, hStart, hEnd);
}

SIM_EXPORT CUresult cuEventElapsedTime_v2(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    return elapsed(pMilliseconds, hStart, hEnd);
}

/* Recorded work has completed, so waiting adds nothing to the stream. */
SIM_EXPORT CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (Flags & ~1u) /* CU_EVENT_WAIT_DEFAULT / CU_EVENT_WAIT_EXTERNAL */
        return CUDA_ERROR_INVALID_VALUE;
    int device;
    sim_lock();
    CUresult rc = event_find_locked(hEvent) ? sim_stream_device_locked(hStream, &device) : CUDA_ERROR_INVALID_HANDLE;
    sim_unlock();
    return rc;
}
