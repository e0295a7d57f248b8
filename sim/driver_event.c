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
 *
 * Interprocess events (cuIpcGetEventHandle / cuIpcOpenEventHandle): the
 * handle names the exporting process and its event; opening it makes an
 * event of the importer's current context that behaves like one created
 * with CU_EVENT_DISABLE_TIMING (cuda.h).  Every process's work completes at
 * once, so what the other process recorded is always complete, and waiting
 * on the imported event never blocks.
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "simcuda.h"

struct CUevent_st {
    struct CUctx_st *ctx;
    unsigned flags;
    unsigned long long id;          /* unique in the process: IPC handles name it */
    int recorded;
    struct timespec at;
    struct CUevent_st *next;
};

static struct CUevent_st *events;
static unsigned long long next_event_id = 1;

static struct CUevent_st *event_find_locked(CUevent e)
{
    for (struct CUevent_st *p = events; p; p = p->next)
        if (p == e)
            return p;
    return NULL;
}

/* A new event of the current context, or an error. */
static CUresult event_new_locked(unsigned flags, struct CUevent_st **out)
{
    struct CUctx_st *ctx;
    CUresult rc = sim_ctx_current_locked(&ctx);
    if (rc != CUDA_SUCCESS)
        return rc;
    struct CUevent_st *e = calloc(1, sizeof *e);
    if (!e)
        return CUDA_ERROR_OUT_OF_MEMORY;
    e->ctx = ctx;
    e->flags = flags;
    e->id = next_event_id++;
    e->next = events;
    events = e;
    *out = e;
    return CUDA_SUCCESS;
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
    struct CUevent_st *e = NULL;
    sim_lock();
    CUresult rc = event_new_locked(Flags, &e);
    if (rc == CUDA_SUCCESS)
        *phEvent = e;
    sim_unlock();
    return rc;
}

/* The 64 bytes of an interprocess event handle. */
struct ipc_event_handle {
    char magic[16];                 /* "simcuda-ipc-evt" */
    int32_t pid;                    /* the exporting process */
    uint64_t id;                    /* its event */
};
_Static_assert(sizeof(struct ipc_event_handle) <= sizeof(CUipcEventHandle), "IPC event handle too large");
static const char ipc_event_magic[16] = "simcuda-ipc-evt";

/* An event not created with CU_EVENT_INTERPROCESS has no handle:
 * CUDA_ERROR_INVALID_VALUE (the simulator's reading of cuda.h's list). */
SIM_EXPORT CUresult cuIpcGetEventHandle(CUipcEventHandle *pHandle, CUevent event)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!pHandle)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    struct CUevent_st *e = event_find_locked(event);
    CUresult rc = !e ? CUDA_ERROR_INVALID_HANDLE
                     : !(e->flags & CU_EVENT_INTERPROCESS) ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
    if (rc == CUDA_SUCCESS) {
        struct ipc_event_handle h = { .pid = (int32_t)getpid(), .id = e->id };
        memcpy(h.magic, ipc_event_magic, sizeof h.magic);
        memset(pHandle, 0, sizeof *pHandle);
        memcpy(pHandle, &h, sizeof h);
    }
    sim_unlock();
    return rc;
}

/* A handle that is no handle: CUDA_ERROR_INVALID_VALUE; an exporter that is
 * gone: CUDA_ERROR_MAP_FAILED (as for IPC memory handles, driver_ipc.c). */
SIM_EXPORT CUresult cuIpcOpenEventHandle(CUevent *phEvent, CUipcEventHandle handle)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    struct ipc_event_handle h;
    memcpy(&h, &handle, sizeof h);
    if (!phEvent || memcmp(h.magic, ipc_event_magic, sizeof h.magic) != 0 || h.pid <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (kill(h.pid, 0) != 0 && errno == ESRCH)
        return CUDA_ERROR_MAP_FAILED;
    struct CUevent_st *e = NULL;
    sim_lock();
    CUresult rc = event_new_locked(CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS, &e);
    if (rc == CUDA_SUCCESS)
        *phEvent = e;
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
