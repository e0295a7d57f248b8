/*
 * driver_alloc.c — the cuMemAlloc family: device, pitched, pinned host and
 * managed memory, and cuMemGetInfo.
 *
 * Every allocation is a row of one table keyed by its address: kind, size,
 * device and the context that made it (context teardown frees by owner).
 * Device, pitched and managed memory are carved from the device's address
 * range by the first-fit allocator (driver_ranges.c): start 512-byte aligned,
 * size rounded up to 512 bytes, CUDA_ERROR_OUT_OF_MEMORY when no contiguous
 * range fits.  They are address ranges only: nothing there is readable.
 *
 * Managed memory is host accessible (driver_memory.c makes its pages
 * read-write at the device addresses), so it is page-aligned and taken in
 * whole pages.
 *
 * Pinned host memory is real, writable host memory (mmap), because programs
 * write to it; it does not consume device memory, so cuMemGetInfo ignores it.
 * cuMemHostRegister pins the program's own memory: a row of the table that
 * owns nothing (unregistering or context teardown leaves the memory alone).
 * cuMemGetInfo's free is capacity minus everything consuming device memory:
 * this table, pool chunks (driver_pool.c) and VMM physical handles
 * (driver_vmm.c) — exactly the device range's allocated bytes.
 */
#include <sys/mman.h>
#include <unistd.h>
#include <uthash.h>

#include "simcuda.h"

enum alloc_kind { ALLOC_DEVICE, ALLOC_PITCH, ALLOC_MANAGED, ALLOC_HOST, ALLOC_REGISTERED };

struct alloc {
    uint64_t addr;          /* key */
    uint64_t size;          /* bytes taken: rounded (device) or mapped (host) */
    uint64_t requested;     /* bytes asked for */
    unsigned host_flags;    /* CU_MEMHOSTALLOC_* or CU_MEMHOSTREGISTER_* */
    uint64_t id;
    enum alloc_kind kind;
    int device;
    struct CUctx_st *ctx;
    UT_hash_handle hh;
};

static struct alloc *table;

/* Records one allocation; on failure to allocate the row, undoes the memory. */
static CUresult record_locked(uint64_t addr, uint64_t size, uint64_t requested, unsigned host_flags,
                              enum alloc_kind kind, struct CUctx_st *ctx)
{
    struct alloc *a = calloc(1, sizeof *a);
    if (!a)
        return CUDA_ERROR_OUT_OF_MEMORY;
    a->addr = addr;
    a->size = size;
    a->requested = requested;
    a->host_flags = host_flags;
    a->id = sim_next_alloc_id();
    a->kind = kind;
    a->device = ctx->device;
    a->ctx = ctx;
    HASH_ADD(hh, table, addr, sizeof a->addr, a);
    return CUDA_SUCCESS;
}

static void release_locked(struct alloc *a)
{
    HASH_DEL(table, a);
    if (a->kind == ALLOC_HOST) {
        munmap((void *)(uintptr_t)a->addr, a->size);
    } else if (a->kind != ALLOC_REGISTERED) {
        if (a->kind == ALLOC_MANAGED)
            sim_memory_set_host_access_locked(a->device, a->addr, a->size, 0);
        if (a->kind != ALLOC_MANAGED)
            sim_exports_forget_locked(a->id);
        sim_memory_discard_locked(a->device, a->addr, a->size);
        sim_ranges_free(&sim.dev[a->device].mem, a->addr, a->size);
    }
    free(a);
}

static CUresult device_alloc(CUdeviceptr *dptr, uint64_t bytesize, enum alloc_kind kind)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    struct CUctx_st *ctx;
    sim_lock();
    CUresult rc = sim_ctx_current_locked(&ctx);
    if (rc == CUDA_SUCCESS && (!dptr || bytesize == 0 || bytesize > SIM_MAX_MEMORY))
        rc = bytesize > SIM_MAX_MEMORY ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS) {
        uint64_t align = kind == ALLOC_MANAGED ? sim_memory_host_align() : SIM_ALIGN;
        uint64_t size = sim_align_up(bytesize, align);
        struct sim_ranges *mem = &sim.dev[ctx->device].mem;
        uint64_t addr = sim_ranges_alloc(mem, size, align);
        if (!addr) {
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        } else if ((rc = record_locked(addr, size, bytesize, 0, kind, ctx)) != CUDA_SUCCESS) {
            sim_ranges_free(mem, addr, size);
        } else {
            if (kind == ALLOC_MANAGED)
                sim_memory_set_host_access_locked(ctx->device, addr, size, 1);
            *dptr = addr;
        }
    }
    sim_unlock();
    return rc;
}

/* Not permitted during a capture in global mode (driver_graph.c). */
SIM_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    if (sim_is_initialized() && sim_graph_captures_under_way()) {
        sim_lock();
        CUresult rc = sim_graph_unsafe_call_locked();
        sim_unlock();
        if (rc != CUDA_SUCCESS)
            return rc;
    }
    return device_alloc(dptr, bytesize, ALLOC_DEVICE);
}

/* Rows are padded to a 512-byte pitch (the alignment cudaMallocPitch gives on
 * current GPUs); ElementSizeBytes must be 4, 8 or 16 as documented. */
SIM_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
                                       size_t Height, unsigned int ElementSizeBytes)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!pPitch || WidthInBytes == 0 || Height == 0 ||
        (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16))
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t pitch = sim_align_up(WidthInBytes, SIM_PITCH_ALIGN);
    if (Height > SIM_MAX_MEMORY / pitch)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = device_alloc(dptr, pitch * Height, ALLOC_PITCH);
    if (rc == CUDA_SUCCESS)
        *pPitch = pitch;
    return rc;
}

/* Only CU_MEM_ATTACH_GLOBAL or CU_MEM_ATTACH_HOST are valid (cuda.h). */
SIM_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST)
        return sim_is_initialized() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
    return device_alloc(dptr, bytesize, ALLOC_MANAGED);
}

/* Frees device, pitched and managed memory, and also blocks from
 * cuMemAllocAsync / cuMemAllocFromPoolAsync (they return to their pool), as
 * the real cuMemFree_v2 does.  0 is a no-op; anything else unknown, including
 * pinned host memory, is CUDA_ERROR_INVALID_VALUE. */
SIM_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (dptr == 0)
        return CUDA_SUCCESS;
    CUresult rc = CUDA_SUCCESS;
    uint64_t key = dptr;
    struct alloc *a;
    sim_lock();
    HASH_FIND(hh, table, &key, sizeof key, a);
    if (a && a->kind != ALLOC_HOST && a->kind != ALLOC_REGISTERED)
        release_locked(a);
    else if (a || (!sim_pool_free_block_locked(key) && !sim_graph_free_outside_locked(key)))
        rc = CUDA_ERROR_INVALID_VALUE;
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuMemGetInfo_v2(size_t *free, size_t *total)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (sim_torn_down())
        return CUDA_ERROR_DEINITIALIZED;
    struct CUctx_st *ctx;
    sim_lock();
    CUresult rc = sim_ctx_current_locked(&ctx);
    if (rc == CUDA_SUCCESS && (!free || !total))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS) {
        *free = sim.dev[ctx->device].mem.free_bytes;
        *total = sim.dev[ctx->device].capacity;
    }
    sim_unlock();
    return rc;
}

/* ---- pinned host memory ---- */

static CUresult host_alloc(void **pp, size_t bytesize, unsigned int Flags)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    const unsigned valid = CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED;
    struct CUctx_st *ctx;
    sim_lock();
    CUresult rc = sim_ctx_current_locked(&ctx);
    if (rc == CUDA_SUCCESS && (!pp || bytesize == 0 || (Flags & ~valid)))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS) {
        /* Page-granular and page-aligned, like the driver's pinned buffers. */
        uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
        uint64_t len = sim_align_up(bytesize, page);
        void *p = len < bytesize ? MAP_FAILED
                                 : mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) {
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        } else if ((rc = record_locked((uint64_t)(uintptr_t)p, len, bytesize, Flags, ALLOC_HOST, ctx)) !=
                   CUDA_SUCCESS) {
            munmap(p, len);
        } else {
            *pp = p;
        }
    }
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
    return host_alloc(pp, bytesize, Flags);
}

SIM_EXPORT CUresult cuMemAllocHost_v2(void **pp, size_t bytesize)
{
    return host_alloc(pp, bytesize, 0);
}

SIM_EXPORT CUresult cuMemFreeHost(void *p)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!p)
        return CUDA_SUCCESS;
    uint64_t key = (uint64_t)(uintptr_t)p;
    struct alloc *a;
    CUresult rc = CUDA_SUCCESS;
    sim_lock();
    HASH_FIND(hh, table, &key, sizeof key, a);
    if (a && a->kind == ALLOC_HOST)
        release_locked(a);
    else
        rc = CUDA_ERROR_INVALID_VALUE;
    sim_unlock();
    return rc;
}

/* Context teardown: everything of this family the context made goes. */
void sim_alloc_release_ctx_locked(struct CUctx_st *ctx)
{
    struct alloc *a, *tmp;
    HASH_ITER(hh, table, a, tmp) {
        if (a->ctx == ctx)
            release_locked(a);
    }
}

/* ---- registered host memory ---- */

/* The row whose [addr, addr + size) holds p, or NULL.  A linear scan: this
 * is a test double, and only the address queries below need it. */
static struct alloc *containing_locked(uint64_t p)
{
    struct alloc *a, *tmp;
    HASH_ITER(hh, table, a, tmp) {
        uint64_t len = a->kind == ALLOC_HOST || a->kind == ALLOC_REGISTERED ? a->requested : a->size;
        if (p >= a->addr && p - a->addr < len)
            return a;
    }
    return NULL;
}

static int overlaps_locked(uint64_t p, uint64_t len)
{
    struct alloc *a, *tmp;
    HASH_ITER(hh, table, a, tmp) {
        if ((a->kind == ALLOC_HOST || a->kind == ALLOC_REGISTERED) && p < a->addr + a->size && a->addr < p + len)
            return 1;
    }
    return 0;
}

/* cuda.h: CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED when the range overlaps
 * pinned memory; IOMEMORY needs a device mapping of PCI space, which the
 * simulator has none of (CUDA_ERROR_NOT_SUPPORTED). */
SIM_EXPORT CUresult cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    const unsigned valid = CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_IOMEMORY |
                           CU_MEMHOSTREGISTER_READ_ONLY;
    struct CUctx_st *ctx;
    uint64_t addr = (uint64_t)(uintptr_t)p;
    sim_lock();
    CUresult rc = sim_ctx_current_locked(&ctx);
    if (rc == CUDA_SUCCESS && (!p || bytesize == 0 || (Flags & ~valid) || addr + bytesize < addr))
        rc = CUDA_ERROR_INVALID_VALUE;
    else if (rc == CUDA_SUCCESS && (Flags & CU_MEMHOSTREGISTER_IOMEMORY))
        rc = CUDA_ERROR_NOT_SUPPORTED;
    else if (rc == CUDA_SUCCESS && overlaps_locked(addr, bytesize))
        rc = SIM_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    if (rc == CUDA_SUCCESS)
        rc = record_locked(addr, bytesize, bytesize, Flags, ALLOC_REGISTERED, ctx);
    sim_unlock();
    return rc;
}

/* The CUDA 4.0 entry point: the same call (cuda.h maps the name to _v2 since
 * 6.5; the driver still exports it for binaries built before). */
SIM_EXPORT CUresult cuMemHostRegister(void *p, size_t bytesize, unsigned int Flags)
{
    return cuMemHostRegister_v2(p, bytesize, Flags);
}

/* p must be the address a cuMemHostRegister was given (cuda.h:
 * CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED otherwise). */
SIM_EXPORT CUresult cuMemHostUnregister(void *p)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t key = (uint64_t)(uintptr_t)p;
    struct alloc *a;
    CUresult rc = CUDA_SUCCESS;
    sim_lock();
    HASH_FIND(hh, table, &key, sizeof key, a);
    if (a && a->kind == ALLOC_REGISTERED)
        release_locked(a);
    else
        rc = SIM_ERROR_HOST_MEMORY_NOT_REGISTERED;
    sim_unlock();
    return rc;
}

/* Unified addressing (every simulated device has it): the device address of
 * pinned or registered memory is its host address, with or without DEVICEMAP
 * (cuda.h, "Unified Addressing").  Flags must be 0; memory that is not pinned
 * has no device address (CUDA_ERROR_INVALID_VALUE). */
SIM_EXPORT CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int Flags)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!pdptr || !p || Flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    CUresult rc = sim_ctx_current_locked(NULL);
    struct alloc *a = rc == CUDA_SUCCESS ? containing_locked((uint64_t)(uintptr_t)p) : NULL;
    if (rc == CUDA_SUCCESS && (!a || (a->kind != ALLOC_HOST && a->kind != ALLOC_REGISTERED)))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        *pdptr = (CUdeviceptr)(uintptr_t)p;
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuMemHostGetFlags(unsigned int *pFlags, void *p)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!pFlags || !p)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    CUresult rc = sim_ctx_current_locked(NULL);
    struct alloc *a = rc == CUDA_SUCCESS ? containing_locked((uint64_t)(uintptr_t)p) : NULL;
    if (rc == CUDA_SUCCESS && (!a || a->kind != ALLOC_HOST))
        rc = CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        *pFlags = a->host_flags;
    sim_unlock();
    return rc;
}

int sim_alloc_span_locked(uint64_t addr, struct sim_span *out)
{
    struct alloc *a = containing_locked(addr);
    if (!a)
        return 0;
    *out = (struct sim_span){
        .base = a->addr, .size = a->requested, .device = a->device, .ctx = a->ctx,
        .host_flags = a->host_flags, .id = a->id,
        .kind = a->kind == ALLOC_MANAGED ? SIM_SPAN_MANAGED
              : a->kind == ALLOC_HOST || a->kind == ALLOC_REGISTERED ? SIM_SPAN_HOST : SIM_SPAN_DEVICE,
    };
    return 1;
}
