/*
 * driver_ipc.c — CUDA IPC between processes of one machine:
 * cuIpcGetMemHandle, cuIpcOpenMemHandle(_v2), cuIpcCloseMemHandle.
 *
 * A device's bytes live in a memory file (driver_backing.c), so another
 * process of the same user can map the very same pages: the handle names the
 * exporting process, its memory file's descriptor and the allocation's
 * offset there, and the importer opens /proc/<pid>/fd/<fd>.  The exporter
 * also keeps a small registry (driver_exports.c), a second memory file the
 * importer reads the same way, with one slot per exported allocation: the
 * slot says whether the allocation is still alive (freeing it clears the
 * slot), so a handle of freed memory is refused as the real driver refuses it.
 * Only cuMemAlloc(Pitch) memory is exported, so this file asks the
 * cuMemAlloc family (driver_alloc.c) what an address is, and nothing else.
 *
 * The importer maps the bytes read-write at a host view of its own and hands
 * out an address in its IPC range (SIM_IPC_BASE, reserved PROT_NONE): a host
 * dereference faults, copies reach the bytes through the view.  Opening a
 * handle already open in this process returns the same address and counts a
 * reference (cuda.h); cuIpcCloseMemHandle drops one, the last unmaps.
 *
 * Errors, as the real driver answers (cuda.h's lists; the first two seen in
 * public reports, e.g. UCX's "cuIpcOpenMemHandle() failed: invalid device
 * context"):
 *  - opening a handle in the process that exported it: CUDA_ERROR_INVALID_CONTEXT;
 *  - a handle that is no handle, or of memory freed since:
 *    CUDA_ERROR_INVALID_VALUE;
 *  - an exporter that is gone (its files cannot be opened): CUDA_ERROR_MAP_FAILED;
 *  - exporting anything but the base of cuMemAlloc(Pitch) memory (managed,
 *    pool or VMM memory, an interior pointer): CUDA_ERROR_INVALID_VALUE;
 *  - closing an address no open returned, or closing it once more than it
 *    was opened: CUDA_ERROR_INVALID_VALUE.
 * Where cuda.h is silent: without a memory file (the kernel refused one)
 * cuIpcGetMemHandle is CUDA_ERROR_NOT_SUPPORTED; imports outlive context
 * teardown (they are the process's until closed).
 */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "simcuda.h"

#define IPC_MAGIC "simipc1"

/* The 64 bytes of a CUipcMemHandle as this driver fills them. */
struct ipc_handle {
    char magic[8];
    uint32_t pid;         /* the exporting process */
    int32_t mem_fd;       /* its device memory file */
    int32_t registry_fd;  /* its registry of exports */
    uint32_t slot;        /* the allocation's slot there */
    uint64_t alloc_id;    /* the allocation (unique in the exporter) */
    uint64_t offset;      /* its start in the memory file */
    uint64_t size;        /* its size as cuMemGetAddressRange reports it */
    uint32_t device;
    uint32_t reserved;
};
_Static_assert(sizeof(struct ipc_handle) <= CU_IPC_HANDLE_SIZE, "an IPC handle is 64 bytes");

/* An opened handle. */
struct ipc_import {
    uint64_t dptr, size;  /* what cuIpcOpenMemHandle returned and its size */
    uint64_t va, va_len;  /* the IPC-range addresses taken (page-aligned) */
    unsigned char *view;  /* the exporter's pages, read-write, at dptr's offset */
    void *map;            /* the mapping behind view */
    uint64_t map_len;
    uint32_t pid;
    uint64_t alloc_id;
    int device;
    struct CUctx_st *ctx; /* the context that opened it: its teardown unmaps it */
    int refs;
    struct ipc_import *next;
};

static struct ipc_import *imports;
static struct sim_ranges ipc_va;
static int ipc_va_ready;

SIM_EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    struct sim_span span;
    sim_lock();
    CUresult rc = sim_ctx_current_locked(NULL);
    if (rc == CUDA_SUCCESS && (!pHandle || !sim_alloc_span_locked(dptr, &span) || span.kind != SIM_SPAN_DEVICE ||
                               span.base != dptr || !span.ctx))
        rc = CUDA_ERROR_INVALID_VALUE;
    int registry_fd = -1;
    if (rc == CUDA_SUCCESS && (sim.dev[span.device].backing_fd < 0 || (registry_fd = sim_exports_open_locked()) < 0))
        rc = CUDA_ERROR_NOT_SUPPORTED;
    int slot = rc == CUDA_SUCCESS ? sim_exports_claim_locked(span.id) : -1;
    if (rc == CUDA_SUCCESS && slot < 0)
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (rc == CUDA_SUCCESS) {
        struct ipc_handle h = {
            .magic = IPC_MAGIC, .pid = (uint32_t)getpid(), .mem_fd = sim.dev[span.device].backing_fd,
            .registry_fd = registry_fd, .slot = (uint32_t)slot, .alloc_id = span.id,
            .offset = span.base - sim.dev[span.device].mem.base, .size = span.size, .device = (uint32_t)span.device,
        };
        memset(pHandle, 0, sizeof *pHandle);
        memcpy(pHandle, &h, sizeof h);
    }
    sim_unlock();
    return rc;
}

static CUresult open_locked(CUdeviceptr *pdptr, const struct ipc_handle *h, struct CUctx_st *ctx)
{
    for (struct ipc_import *im = imports; im; im = im->next)
        if (im->pid == h->pid && im->alloc_id == h->alloc_id) {
            im->refs++;
            *pdptr = im->dptr;
            return CUDA_SUCCESS;
        }
    int alive = sim_exports_peer_lists(h->pid, h->registry_fd, h->slot, h->alloc_id);
    if (alive < 0)
        return CUDA_ERROR_MAP_FAILED;
    if (!alive)
        return CUDA_ERROR_INVALID_VALUE;
    if (!ipc_va_ready) {
        sim_reserve_va(SIM_IPC_BASE, SIM_IPC_SIZE);
        if (sim_ranges_init(&ipc_va, SIM_IPC_BASE, SIM_IPC_SIZE) != 0)
            return CUDA_ERROR_OUT_OF_MEMORY;
        ipc_va_ready = 1;
    }
    uint64_t page = sim_memory_host_align();
    uint64_t lead = h->offset % page, map_len = sim_align_up(lead + h->size, page);
    struct ipc_import *im = calloc(1, sizeof *im);
    if (!im)
        return CUDA_ERROR_OUT_OF_MEMORY;
    int fd = sim_open_peer_fd(h->pid, h->mem_fd, O_RDWR);
    void *map = fd >= 0 ? mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)(h->offset - lead)) : MAP_FAILED;
    if (fd >= 0)
        close(fd);
    uint64_t va = map != MAP_FAILED ? sim_ranges_alloc(&ipc_va, map_len, page) : 0;
    if (!va) {
        if (map != MAP_FAILED)
            munmap(map, map_len);
        free(im);
        return map == MAP_FAILED ? CUDA_ERROR_MAP_FAILED : CUDA_ERROR_OUT_OF_MEMORY;
    }
    *im = (struct ipc_import){
        .dptr = va + lead, .size = h->size, .va = va, .va_len = map_len, .view = (unsigned char *)map + lead,
        .map = map, .map_len = map_len, .pid = h->pid, .alloc_id = h->alloc_id, .device = ctx->device, .ctx = ctx,
        .refs = 1,
        .next = imports,
    };
    imports = im;
    *pdptr = im->dptr;
    return CUDA_SUCCESS;
}

/* cuIpcOpenMemHandle of CUDA 4.1 and its CUDA 11.0 successor take the same
 * arguments. */
static CUresult ipc_open(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    struct ipc_handle h;
    memcpy(&h, &handle, sizeof h);
    struct CUctx_st *ctx;
    sim_lock();
    CUresult rc = sim_ctx_current_locked(&ctx);
    if (rc == CUDA_SUCCESS && (!pdptr || (Flags & ~(unsigned)CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) ||
                               memcmp(h.magic, IPC_MAGIC, sizeof h.magic) != 0))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS && h.pid == (uint32_t)getpid())
        rc = CUDA_ERROR_INVALID_CONTEXT;
    if (rc == CUDA_SUCCESS)
        rc = open_locked(pdptr, &h, ctx);
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
    return ipc_open(pdptr, handle, Flags);
}

SIM_EXPORT CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
    return ipc_open(pdptr, handle, Flags);
}

/* Unlinks *at and gives back its mapping and its IPC-range addresses. */
static void unmap_locked(struct ipc_import **at)
{
    struct ipc_import *im = *at;
    *at = im->next;
    munmap(im->map, im->map_len);
    sim_ranges_free(&ipc_va, im->va, im->va_len);
    free(im);
}

SIM_EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    sim_lock();
    CUresult rc = sim_ctx_current_locked(NULL);
    struct ipc_import **at = &imports;
    while (*at && (*at)->dptr != dptr)
        at = &(*at)->next;
    if (rc == CUDA_SUCCESS && !*at)
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS && --(*at)->refs == 0)
        unmap_locked(at);
    sim_unlock();
    return rc;
}

/* cuCtxDestroy "destroys and cleans up all resources associated with the
 * context"; an opened handle is one (cuda.h counts its references per
 * context).  Afterwards the address is no mapping: copies there fail and a
 * close is CUDA_ERROR_INVALID_VALUE, as for any address no open returned. */
void sim_ipc_release_ctx_locked(struct CUctx_st *ctx)
{
    struct ipc_import **at = &imports;
    while (*at) {
        if ((*at)->ctx == ctx)
            unmap_locked(at);
        else
            at = &(*at)->next;
    }
}

static const struct ipc_import *import_holding_locked(uint64_t addr)
{
    for (const struct ipc_import *im = imports; im; im = im->next)
        if (addr >= im->dptr && addr - im->dptr < im->size)
            return im;
    return NULL;
}

int sim_ipc_translate_locked(uint64_t addr, unsigned char **host, uint64_t *run)
{
    const struct ipc_import *im = import_holding_locked(addr);
    if (!im)
        return 0;
    *host = im->view + (addr - im->dptr);
    *run = im->size - (addr - im->dptr);
    return 1;
}

int sim_ipc_span_locked(uint64_t addr, struct sim_span *out)
{
    const struct ipc_import *im = import_holding_locked(addr);
    if (!im)
        return 0;
    *out = (struct sim_span){ .base = im->dptr, .size = im->size, .kind = SIM_SPAN_IPC, .device = im->device,
                              .id = im->alloc_id };
    return 1;
}
