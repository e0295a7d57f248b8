/*
 * driver_pool.c — stream-ordered memory pools (cuMemAllocAsync and friends).
 *
 * A pool reserves device memory in chunks taken from the device allocator and
 * sub-allocates blocks inside them (first fit, 512-byte aligned and sized).
 * A chunk is 32 MiB, or the request rounded up to the 2 MiB granularity when
 * larger; when the device cannot fit a 32 MiB chunk but can fit the request
 * rounded to 2 MiB, the smaller chunk is taken (a nearly full GPU can still
 * serve small async allocations, as a real one does).  Chunks start 2 MiB
 * aligned.
 *
 * Freed blocks stay reserved.  Wholly unused chunks go back to the device:
 *  - at synchronisation points (cuStreamSynchronize, cuCtxSynchronize) for
 *    every pool of the device, while reserved exceeds the pool's
 *    RELEASE_THRESHOLD (default 0; PyTorch sets UINT64_MAX to keep everything);
 *  - in cuMemPoolTrimTo(pool, n).
 * In both cases a chunk is released only if the pool keeps at least the
 * threshold / n bytes reserved afterwards ("the pool will be guaranteed to have
 * at least minBytesToKeep bytes reserved after the operation", cuda.h).  Chunks
 * are considered oldest first.
 *
 * Stream work completes immediately in the simulator, so a block freed with
 * cuMemFreeAsync is reusable at once, and stream ordering is not modelled.
 * Pool memory is not owned by a context: context teardown leaves it alone.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>

#include "simcuda.h"

#define POOL_MAGIC 0x4c4f4f50u /* "POOL" */

struct pool_chunk {
    uint64_t base, size;
    struct sim_ranges space;        /* free space inside the chunk */
    struct pool_chunk *next;        /* creation order */
};

struct pool_block {
    uint64_t addr;                  /* key */
    uint64_t size;
    uint64_t requested, id;         /* for the address queries (sim_pool_span_locked) */
    struct CUmemPoolHandle_st *pool;
    struct pool_chunk *chunk;
    UT_hash_handle hh;
};

struct CUmemPoolHandle_st {
    unsigned magic;
    int device;
    int is_default;
    int destroyed;                  /* destroyed with blocks outstanding */
    uint64_t max_size;              /* 0: bounded by the device only */
    uint64_t release_threshold;
    uint64_t reserved, reserved_high, used, used_high;
    int reuse[3];                   /* the REUSE_* attributes, stored only */
    struct pool_chunk *chunks;
    struct CUmemPoolHandle_st *next;
};

static struct CUmemPoolHandle_st *pools;
static struct pool_block *blocks;

static int pool_known(const struct CUmemPoolHandle_st *p)
{
    for (const struct CUmemPoolHandle_st *q = pools; q; q = q->next)
        if (q == p)
            return !q->destroyed;
    return 0;
}

static struct CUmemPoolHandle_st *pool_new_locked(int device)
{
    struct CUmemPoolHandle_st *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->magic = POOL_MAGIC;
    p->device = device;
    p->reuse[0] = p->reuse[1] = p->reuse[2] = 1;
    p->next = pools;
    pools = p;
    return p;
}

CUresult sim_pool_create_default_locked(int device)
{
    struct CUmemPoolHandle_st *p = pool_new_locked(device);
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    p->is_default = 1;
    sim.dev[device].default_pool = sim.dev[device].current_pool = p;
    return CUDA_SUCCESS;
}

static void chunk_release_locked(struct CUmemPoolHandle_st *p, struct pool_chunk **link)
{
    struct pool_chunk *c = *link;
    *link = c->next;
    sim_memory_discard_locked(p->device, c->base, c->size);
    sim_ranges_free(&sim.dev[p->device].mem, c->base, c->size);
    sim_ranges_fini(&c->space);
    p->reserved -= c->size;
    free(c);
}

/* Releases wholly unused chunks, oldest first, while the pool keeps at least
 * `keep` bytes reserved. */
static void trim_locked(struct CUmemPoolHandle_st *p, uint64_t keep)
{
    struct pool_chunk **link = &p->chunks;
    while (*link) {
        struct pool_chunk *c = *link;
        if (c->space.free_bytes == c->size && p->reserved - c->size >= keep)
            chunk_release_locked(p, link);
        else
            link = &c->next;
    }
}

static void pool_free_locked(struct CUmemPoolHandle_st *p)
{
    for (struct CUmemPoolHandle_st **link = &pools; *link; link = &(*link)->next) {
        if (*link == p) {
            *link = p->next;
            break;
        }
    }
    trim_locked(p, 0);
    free(p);
}

void sim_pool_trim_device_locked(int device)
{
    for (struct CUmemPoolHandle_st *p = pools; p; p = p->next)
        if (p->device == device)
            trim_locked(p, p->release_threshold);
}

static struct pool_chunk *chunk_reserve_locked(struct CUmemPoolHandle_st *p, uint64_t size)
{
    uint64_t want = sim_align_up(size, SIM_GRANULARITY);
    uint64_t sizes[2] = { want > SIM_POOL_CHUNK ? want : SIM_POOL_CHUNK, want };
    struct sim_ranges *mem = &sim.dev[p->device].mem;
    for (int i = 0; i < 2; i++) {
        uint64_t csize = sizes[i];
        if (p->max_size && p->reserved + csize > p->max_size)
            continue;
        uint64_t base = sim_ranges_alloc(mem, csize, SIM_GRANULARITY);
        if (!base)
            continue;
        struct pool_chunk *c = calloc(1, sizeof *c);
        if (!c || sim_ranges_init(&c->space, base, csize) != 0) {
            free(c);
            sim_ranges_free(mem, base, csize);
            return NULL;
        }
        c->base = base;
        c->size = csize;
        struct pool_chunk **tail = &p->chunks;
        while (*tail)
            tail = &(*tail)->next;
        *tail = c;
        p->reserved += csize;
        if (p->reserved > p->reserved_high)
            p->reserved_high = p->reserved;
        return c;
    }
    return NULL;
}

static CUresult pool_alloc_locked(struct CUmemPoolHandle_st *p, uint64_t bytesize, CUdeviceptr *dptr)
{
    uint64_t size = sim_align_up(bytesize, SIM_ALIGN);
    struct pool_chunk *c;
    uint64_t addr = 0;
    for (c = p->chunks; c; c = c->next)
        if ((addr = sim_ranges_alloc(&c->space, size, SIM_ALIGN)) != 0)
            break;
    if (!addr) {
        if (!(c = chunk_reserve_locked(p, size)))
            return CUDA_ERROR_OUT_OF_MEMORY;
        addr = sim_ranges_alloc(&c->space, size, SIM_ALIGN);
    }
    struct pool_block *b = calloc(1, sizeof *b);
    if (!b) {
        sim_ranges_free(&c->space, addr, size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    b->addr = addr;
    b->size = size;
    b->requested = bytesize;
    b->id = sim_next_alloc_id();
    b->pool = p;
    b->chunk = c;
    HASH_ADD(hh, blocks, addr, sizeof b->addr, b);
    p->used += size;
    if (p->used > p->used_high)
        p->used_high = p->used;
    *dptr = addr;
    return CUDA_SUCCESS;
}

/* Returns a block to its pool.  Used by cuMemFreeAsync and by cuMemFree_v2,
 * which accepts pool pointers too.  Returns 1 when addr was a pool block. */
int sim_pool_free_block_locked(uint64_t addr)
{
    struct pool_block *b;
    HASH_FIND(hh, blocks, &addr, sizeof addr, b);
    if (!b)
        return 0;
    struct CUmemPoolHandle_st *p = b->pool;
    HASH_DEL(blocks, b);
    sim_ranges_free(&b->chunk->space, b->addr, b->size);
    p->used -= b->size;
    free(b);
    /* A pool destroyed with blocks outstanding goes once the last is freed. */
    if (p->destroyed && p->used == 0)
        pool_free_locked(p);
    return 1;
}

/* The block holding addr (a linear scan: only address queries need it). */
int sim_pool_span_locked(uint64_t addr, struct sim_span *out)
{
    struct pool_block *b, *tmp;
    HASH_ITER(hh, blocks, b, tmp) {
        if (addr >= b->addr && addr - b->addr < b->size) {
            *out = (struct sim_span){ .base = b->addr, .size = b->requested, .kind = SIM_SPAN_POOL,
                                      .device = b->pool->device, .pool = b->pool, .id = b->id };
            return 1;
        }
    }
    return 0;
}

/* ---- allocation entry points ---- */

static CUresult alloc_async(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!dptr || bytesize == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (bytesize > SIM_MAX_MEMORY)
        return CUDA_ERROR_OUT_OF_MEMORY;
    int device;
    sim_lock();
    CUresult rc = sim_stream_device_locked(hStream, &device);
    int captured = 0;
    if (rc == CUDA_SUCCESS)
        rc = sim_graph_capture_alloc_locked(hStream, bytesize, device, dptr, &captured);
    if (rc == CUDA_SUCCESS && !captured) {
        if (!pool)
            pool = sim.dev[device].current_pool;
        else if (!pool_known(pool))
            rc = CUDA_ERROR_INVALID_VALUE;
    }
    if (rc == CUDA_SUCCESS && !captured)
        rc = pool_alloc_locked(pool, bytesize, dptr);
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    return alloc_async(dptr, bytesize, NULL, hStream);
}

static CUresult alloc_from_pool(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream)
{
    if (!pool)
        return sim_is_initialized() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
    return alloc_async(dptr, bytesize, pool, hStream);
}

SIM_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream)
{
    return alloc_from_pool(dptr, bytesize, pool, hStream);
}

/* Freeing 0 is a no-op, as with cuMemFree. */
static CUresult free_async(CUdeviceptr dptr, CUstream hStream)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    int device;
    sim_lock();
    CUresult rc = sim_stream_device_locked(hStream, &device);
    int captured = 0;
    if (rc == CUDA_SUCCESS && dptr != 0)
        rc = sim_graph_capture_free_locked(hStream, dptr, &captured);
    if (rc == CUDA_SUCCESS && dptr != 0 && !captured && !sim_pool_free_block_locked(dptr) &&
        !sim_graph_free_outside_locked(dptr))
        rc = CUDA_ERROR_INVALID_VALUE;
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
    return free_async(dptr, hStream);
}

/* The per-thread-default-stream variants differ from the legacy ones only in
 * what stream 0 means; the simulator completes all work at once, so they
 * behave alike — but they are distinct exported symbols, as in libcuda. */
SIM_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    return alloc_async(dptr, bytesize, NULL, hStream);
}

SIM_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                                 CUstream hStream)
{
    return alloc_from_pool(dptr, bytesize, pool, hStream);
}

SIM_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
    return free_async(dptr, hStream);
}

/* ---- pool management ---- */

SIM_EXPORT CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!pool || !poolProps || poolProps->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
        poolProps->location.type != CU_MEM_LOCATION_TYPE_DEVICE || !sim_device_valid(poolProps->location.id))
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    struct CUmemPoolHandle_st *p = pool_new_locked(poolProps->location.id);
    if (p) {
        p->max_size = poolProps->maxSize;
        *pool = p;
    }
    sim_unlock();
    return p ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

SIM_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = CUDA_SUCCESS;
    sim_lock();
    if (!pool_known(pool) || pool->is_default) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        struct sim_device *d = &sim.dev[pool->device];
        if (d->current_pool == pool)
            d->current_pool = d->default_pool;
        if (pool->used == 0) {
            pool_free_locked(pool);
        } else {
            /* Outstanding blocks: the pool goes when the last one is freed. */
            pool->destroyed = 1;
            trim_locked(pool, 0);
        }
    }
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = CUDA_SUCCESS;
    sim_lock();
    if (!pool_known(pool))
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        trim_locked(pool, minBytesToKeep);
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = CUDA_SUCCESS;
    sim_lock();
    if (!pool_known(pool) || !value) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        switch (attr) {
        case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
        case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
        case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
            pool->reuse[attr - CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES] = *(int *)value != 0;
            break;
        case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
            pool->release_threshold = *(cuuint64_t *)value;
            break;
        /* High watermarks may only be reset, by writing 0 (cuda.h). */
        case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
            if (*(cuuint64_t *)value != 0)
                rc = CUDA_ERROR_INVALID_VALUE;
            else
                pool->reserved_high = pool->reserved;
            break;
        case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
            if (*(cuuint64_t *)value != 0)
                rc = CUDA_ERROR_INVALID_VALUE;
            else
                pool->used_high = pool->used;
            break;
        default: /* the *_CURRENT values are read-only */
            rc = CUDA_ERROR_INVALID_VALUE;
            break;
        }
    }
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (sim_pool_queries_refused())
        return CUDA_ERROR_DEINITIALIZED;
    CUresult rc = CUDA_SUCCESS;
    sim_lock();
    if (!pool_known(pool) || !value) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        switch (attr) {
        case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
        case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
        case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
            *(int *)value = pool->reuse[attr - CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES];
            break;
        case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: *(cuuint64_t *)value = pool->release_threshold; break;
        case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: *(cuuint64_t *)value = pool->reserved; break;
        case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: *(cuuint64_t *)value = pool->reserved_high; break;
        case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: *(cuuint64_t *)value = pool->used; break;
        case CU_MEMPOOL_ATTR_USED_MEM_HIGH: *(cuuint64_t *)value = pool->used_high; break;
        default: rc = CUDA_ERROR_INVALID_VALUE; break;
        }
    }
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!sim_device_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    if (!pool_out)
        return CUDA_ERROR_INVALID_VALUE;
    *pool_out = sim.dev[dev].default_pool;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!sim_device_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    if (!pool)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    *pool = sim.dev[dev].current_pool;
    sim_unlock();
    return CUDA_SUCCESS;
}

/* The pool must belong to dev. */
SIM_EXPORT CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!sim_device_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    CUresult rc = CUDA_SUCCESS;
    sim_lock();
    if (!pool_known(pool) || pool->device != dev)
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        sim.dev[dev].current_pool = pool;
    sim_unlock();
    return rc;
}
