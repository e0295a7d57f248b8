/*
 * pools.c — allocator views: annotated caching pools (client requests) and
 * the driver's stream-ordered pools.
 *
 * The point of tensorleak over a plain leak checker: a segment a caching
 * allocator keeps for reuse is *held*, not leaked; a block it handed out and
 * nobody returned *is* a leak; and "enough free bytes but no block big
 * enough" shows as fragmentation.
 *
 * Annotated pools know their layout: segments (reserved) and blocks
 * (allocated, tracked as pool_block rows keyed in their own address space,
 * since a segment's first block has the segment's address).  Free bytes,
 * the largest hole and fragmentation = 1 - largest_free / free_bytes (the
 * RMM-arena / TensorFlow-BFC definition) come from walking that layout;
 * utilization = peak allocated / peak reserved (GMLake's definition).
 *
 * Stream-ordered pools don't tell us their layout, so we report what the
 * driver states truthfully (RESERVED/USED_MEM_CURRENT and _HIGH) next to the
 * allocations we tracked, and flag a disagreement about which blocks are
 * live (the driver counts each block rounded, see DRIVER_BLOCK_ROUNDING);
 * their largest free block
 * and fragmentation are unknown, not zero.  At exit the driver may no longer
 * answer (the runtime tore its context down first): each pool keeps the last
 * reading the driver gave, taken at every report, every mark and once more
 * from an atexit handler that runs before the runtime's, and a report says
 * when it shows that reading instead of a current one.
 *
 * Graph memory is a pool per device (kind "graph"): the driver's memory for
 * CUDA graphs' allocation nodes, reserved when a graph runs and kept until
 * cuDeviceGraphMemTrim.  Its figures are cuDeviceGetGraphMemAttribute's
 * (RESERVED/USED_MEM_CURRENT and _HIGH), read like a stream-ordered pool's;
 * unknown when the driver never answered.  Its blocks are the allocation
 * nodes tracked under the call site that captured or added them (rows of
 * kind async whose aux is the graph pool), held by the pool, not leaked.
 */
#include "pools.h"
#include "report_gather.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TL_SPACE_POOL 4
#define MAX_POOLS 256
/* aux bit on a device row: the row is a segment held by annotated pool
 * (aux & 0xffff). */
#define HELD_BIT 0x80000000u

struct segment {
    uint64_t base, size;
};

/* The driver's USED_MEM_CURRENT counts a stream-ordered block at its size
 * rounded up to 512 bytes: CUDA documents only "suitably aligned" (>= 256
 * bytes) allocations; its sub-allocator hands out 512-byte multiples, as the
 * simulated driver does (sim/simcuda.h, SIM_ALIGN).  A driver that counts
 * requested bytes instead agrees too (the tracked sum itself). */
#define DRIVER_BLOCK_ROUNDING 512ull

static uint64_t driver_block_bytes(uint64_t requested)
{
    return (requested + DRIVER_BLOCK_ROUNDING - 1) / DRIVER_BLOCK_ROUNDING * DRIVER_BLOCK_ROUNDING;
}

/* The driver's four figures of a stream-ordered pool, read together. */
struct driver_reading {
    bool ok;
    cuuint64_t reserved, reserved_high, used_high, used;
    double time; /* CLOCK_REALTIME seconds */
};

struct pool {
    char name[64];
    bool annotated;
    bool alive;
    int device;
    void *driver_pool; /* CUmemoryPool for stream-ordered pools */
    bool is_default;
    bool graph;        /* the device's graph memory (no driver_pool) */
    struct driver_reading last; /* stream-ordered: the last complete answer */
    /* annotated pools: */
    struct segment *segs;
    size_t nsegs, capsegs;
    atomic_llong reserved, allocated, peak_reserved, peak_allocated;
};

static struct pool pools[MAX_POOLS]; /* index 0 unused: aux 0 = no pool */
static int npools;
static pthread_mutex_t pools_lock = PTHREAD_MUTEX_INITIALIZER;

static void raise_peak(atomic_llong *peak, long long now)
{
    long long p = atomic_load(peak);
    while (now > p && !atomic_compare_exchange_weak(peak, &p, now))
        ;
}

static struct pool *new_pool_locked(const char *name, int device)
{
    if (npools + 1 >= MAX_POOLS)
        return NULL;
    struct pool *p = &pools[++npools];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name ? name : "pool");
    p->device = device;
    p->alive = true;
    return p;
}

static uint32_t index_of(const struct pool *p)
{
    return (uint32_t)(p - pools);
}

/* ---- stream-ordered pools (hooks_driver.c / hooks_runtime.c) ------------ */

/* Graph memory pools have no driver pool (NULL): never asked for here, as
 * NULL is no pool (tl_pool_note_destroyed, tl_pool_index_for_async). */
static struct pool *find_driver_pool_locked(void *driver_pool)
{
    for (int i = 1; i <= npools; i++)
        if (!pools[i].annotated && pools[i].alive && pools[i].driver_pool == driver_pool)
            return &pools[i];
    return NULL;
}

typedef CUresult (*getattr_fn)(CUmemoryPool, CUmemPool_attribute, void *);
typedef CUresult (*graph_getattr_fn)(CUdevice, CUgraphMem_attribute, void *);
typedef CUresult (*device_get_fn)(CUdevice *, int);

/* The device's graph memory figures (cuDeviceGetGraphMemAttribute, CUDA
 * 11.4); false when the driver has no such query or does not answer. */
static bool read_graph_memory(int ordinal, struct driver_reading *r)
{
    static _Atomic(graph_getattr_fn) getattr_slot;
    static _Atomic(device_get_fn) device_get_slot;
    graph_getattr_fn getattr = atomic_load(&getattr_slot);
    device_get_fn device_get = atomic_load(&device_get_slot);
    if (!getattr) {
        getattr = (graph_getattr_fn)tl_driver_symbol("cuDeviceGetGraphMemAttribute");
        atomic_store(&getattr_slot, getattr);
    }
    if (!device_get) {
        device_get = (device_get_fn)tl_driver_symbol("cuDeviceGet");
        atomic_store(&device_get_slot, device_get);
    }
    CUdevice dev;
    return getattr && device_get && device_get(&dev, ordinal) == CUDA_SUCCESS &&
           getattr(dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &r->reserved) == CUDA_SUCCESS &&
           getattr(dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH, &r->reserved_high) == CUDA_SUCCESS &&
           getattr(dev, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, &r->used_high) == CUDA_SUCCESS &&
           getattr(dev, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &r->used) == CUDA_SUCCESS;
}

/* Asks the driver for the pool's figures (pools_lock held).  A complete
 * answer becomes the pool's last good reading; a partial one is dropped. */
static bool read_driver_pool_locked(struct pool *p, struct driver_reading *out)
{
    struct driver_reading r = {0};
    if (p->graph) {
        if (!read_graph_memory(p->device, &r))
            return false;
    } else {
        getattr_fn getattr = (getattr_fn)tl_driver_symbol("cuMemPoolGetAttribute");
        if (!getattr || getattr(p->driver_pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &r.reserved) != CUDA_SUCCESS ||
            getattr(p->driver_pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &r.reserved_high) != CUDA_SUCCESS ||
            getattr(p->driver_pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &r.used_high) != CUDA_SUCCESS ||
            getattr(p->driver_pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &r.used) != CUDA_SUCCESS)
            return false;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    r.time = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
    r.ok = true;
    p->last = r;
    if (out)
        *out = r;
    return true;
}

/* Runs before the runtime's own exit handler (registered after it, see
 * note_driver_pool_locked): the last moment the driver surely answers. */
static void read_pools_at_exit(void)
{
    if (!atomic_load(&tl_active))
        return;
    pthread_mutex_lock(&pools_lock);
    for (int i = 1; i <= npools; i++)
        if (pools[i].alive && !pools[i].annotated)
            read_driver_pool_locked(&pools[i], NULL);
    pthread_mutex_unlock(&pools_lock);
    /* The devices' memory too, outside pools_lock (a report takes the
     * report lock, then pools_lock). */
    tl_upcalls.report_read_devices_now();
}

/* A stream-ordered pool was first seen: by then the runtime (if any) has
 * registered its exit handler, so ours, registered now, runs before it. */
static void note_driver_pool_locked(void)
{
    static bool registered;
    if (registered)
        return;
    registered = true;
    if (atexit(read_pools_at_exit) != 0)
        tl_warn(NULL, "cannot register the exit-time pool reading; stream-ordered pools may show their last report's figures");
}

void tl_pool_note_created(CUmemoryPool pool, const CUmemPoolProps *props)
{
    if (!pool || !atomic_load(&tl_active))
        return;
    pthread_mutex_lock(&pools_lock);
    if (!find_driver_pool_locked(pool)) {
        char name[64];
        snprintf(name, sizeof name, "mempool %p", (void *)pool);
        struct pool *p = new_pool_locked(name, props ? props->location.id : 0);
        if (p) {
            p->driver_pool = pool;
            note_driver_pool_locked();
        }
    }
    pthread_mutex_unlock(&pools_lock);
}

static bool release_pool_rows(const struct tl_live *rec, void *arg)
{
    uint32_t idx = *(uint32_t *)arg;
    if (rec->space != TL_SPACE_MEM || rec->kind != TL_KIND_ASYNC || rec->aux != idx)
        return false;
    tl_track_forget(rec);
    atomic_fetch_add(&tl_stats.teardown_bytes, rec->size);
    atomic_fetch_add(&tl_stats.teardown_allocs, 1);
    return true;
}

void tl_pool_note_destroyed(CUmemoryPool pool)
{
    if (!pool || !atomic_load(&tl_active))
        return; /* the driver refuses a null pool; no pool of ours has no driver pool but graph memory */
    pthread_mutex_lock(&pools_lock);
    struct pool *p = find_driver_pool_locked(pool);
    uint32_t idx = p ? index_of(p) : 0;
    if (p)
        p->alive = false;
    pthread_mutex_unlock(&pools_lock);
    if (!idx || !atomic_load(&tl_active))
        return;
    /* Destroying a pool frees what is still allocated from it. */
    tl_live_lock_all();
    tl_live_foreach(release_pool_rows, &idx);
    tl_live_unlock_all();
}

uint32_t tl_pool_index_for_async(CUmemoryPool pool, bool from_current_device)
{
    int device = -1;
    if (from_current_device) {
        typedef CUresult (*getpool_fn)(CUmemoryPool *, CUdevice);
        static getpool_fn get_mem_pool;
        if (!get_mem_pool)
            get_mem_pool = (getpool_fn)tl_driver_symbol("cuDeviceGetMemPool");
        tl_current_context_index(&device);
        if (!get_mem_pool || device < 0 || get_mem_pool(&pool, device) != CUDA_SUCCESS)
            return 0;
    }
    if (!pool)
        return 0;
    pthread_mutex_lock(&pools_lock);
    struct pool *p = find_driver_pool_locked(pool);
    if (!p) {
        /* First sight of a pool we did not see created: the device's
         * default pool (or one made before tensorleak started). */
        typedef CUresult (*defpool_fn)(CUmemoryPool *, CUdevice);
        defpool_fn get_default = (defpool_fn)tl_driver_symbol("cuDeviceGetDefaultMemPool");
        CUmemoryPool def = NULL;
        int dev = device >= 0 ? device : 0;
        bool is_default = get_default && get_default(&def, dev) == CUDA_SUCCESS && def == pool;
        char name[64];
        if (is_default)
            snprintf(name, sizeof name, "default mempool (device %d)", dev);
        else
            snprintf(name, sizeof name, "mempool %p", (void *)pool);
        p = new_pool_locked(name, dev);
        if (p) {
            p->driver_pool = pool;
            p->is_default = is_default;
            note_driver_pool_locked();
        }
    }
    uint32_t idx = p ? index_of(p) : 0;
    pthread_mutex_unlock(&pools_lock);
    return idx;
}

uint32_t tl_pool_index_for_graph(int device)
{
    if (device < 0)
        tl_current_context_index(&device);
    if (device < 0 || device >= TL_MAX_DEVICES)
        device = 0;
    pthread_mutex_lock(&pools_lock);
    struct pool *p = NULL;
    for (int i = 1; i <= npools && !p; i++)
        if (pools[i].graph && pools[i].alive && pools[i].device == device)
            p = &pools[i];
    if (!p) {
        char name[64];
        snprintf(name, sizeof name, "graph memory (device %d)", device);
        p = new_pool_locked(name, device);
        if (p) {
            p->graph = true;
            note_driver_pool_locked();
        }
    }
    uint32_t idx = p ? index_of(p) : 0;
    pthread_mutex_unlock(&pools_lock);
    if (!idx)
        tl_note_dropped("too many pools (256): a graph allocation is tracked as a stream-ordered one");
    return idx;
}

/* A pool's graph flag is set before its index is handed out and never
 * changes, so rows read it without the lock. */
bool tl_pools_is_graph(const struct tl_live *rec)
{
    return rec->space == TL_SPACE_MEM && rec->kind == TL_KIND_ASYNC && rec->aux && rec->aux < MAX_POOLS &&
           pools[rec->aux].graph;
}

/* ---- annotated pools (client requests) ---------------------------------- */

static struct pool *checked(void *handle)
{
    struct pool *p = handle;
    if (!p || p < &pools[1] || p > &pools[MAX_POOLS - 1] || !p->annotated || !p->alive) {
        static atomic_bool warned;
        tl_warn(&warned, "a tensorleak_pool_* call passed an unknown or destroyed pool; ignored");
        return NULL;
    }
    return p;
}

void *tl_pool_create(const char *name, int device)
{
    pthread_mutex_lock(&pools_lock);
    struct pool *p = new_pool_locked(name, device < 0 || device >= TL_MAX_DEVICES ? 0 : device);
    if (p)
        p->annotated = true;
    pthread_mutex_unlock(&pools_lock);
    if (!p)
        tl_note_dropped("too many pools (256)");
    return p;
}

TL_EXPORT void tensorleak_pool_segment(void *pool, const void *base, size_t bytes);
void tensorleak_pool_segment(void *handle, const void *base, size_t bytes)
{
    pthread_mutex_lock(&pools_lock);
    struct pool *p = checked(handle);
    if (!p) {
        pthread_mutex_unlock(&pools_lock);
        return;
    }
    if (p->nsegs == p->capsegs) {
        size_t ncap = p->capsegs ? p->capsegs * 2 : 16;
        struct segment *n = realloc(p->segs, ncap * sizeof *n);
        if (!n) {
            pthread_mutex_unlock(&pools_lock);
            tl_note_dropped("out of memory for pool segments");
            return;
        }
        p->segs = n;
        p->capsegs = ncap;
    }
    p->segs[p->nsegs++] = (struct segment){(uintptr_t)base, bytes};
    long long r = atomic_fetch_add(&p->reserved, (long long)bytes) + (long long)bytes;
    raise_peak(&p->peak_reserved, r);
    uint32_t idx = index_of(p);
    pthread_mutex_unlock(&pools_lock);
    /* The segment came from a hooked cudaMalloc/cuMemAlloc: it is now the
     * pool's reserve, held rather than leaked at exit. */
    struct tl_live rec;
    if (tl_live_lookup(TL_SPACE_MEM, (uintptr_t)base, &rec) && rec.kind == TL_KIND_DEVICE)
        tl_live_set_aux(TL_SPACE_MEM, (uintptr_t)base, HELD_BIT | idx);
}

TL_EXPORT void tensorleak_pool_segment_release(void *pool, const void *base);
void tensorleak_pool_segment_release(void *handle, const void *base)
{
    pthread_mutex_lock(&pools_lock);
    struct pool *p = checked(handle);
    if (!p) {
        pthread_mutex_unlock(&pools_lock);
        return;
    }
    for (size_t i = 0; i < p->nsegs; i++) {
        if (p->segs[i].base == (uintptr_t)base) {
            atomic_fetch_sub(&p->reserved, (long long)p->segs[i].size);
            p->segs[i] = p->segs[--p->nsegs];
            break;
        }
    }
    pthread_mutex_unlock(&pools_lock);
    struct tl_live rec;
    if (tl_live_lookup(TL_SPACE_MEM, (uintptr_t)base, &rec) && (rec.aux & HELD_BIT))
        tl_live_set_aux(TL_SPACE_MEM, (uintptr_t)base, 0);
}

TL_EXPORT void tensorleak_pool_alloc(void *pool, const void *ptr, size_t bytes);
void tensorleak_pool_alloc(void *handle, const void *ptr, size_t bytes)
{
    struct pool *p = handle;
    pthread_mutex_lock(&pools_lock);
    p = checked(handle);
    pthread_mutex_unlock(&pools_lock);
    if (!p || !ptr)
        return;
    tl_hook_depth++;
    tl_track_alloc(TL_KIND_POOL_BLOCK, TL_SPACE_POOL, (uintptr_t)ptr, bytes, p->device, index_of(p));
    tl_hook_depth--;
    long long a = atomic_fetch_add(&p->allocated, (long long)bytes) + (long long)bytes;
    raise_peak(&p->peak_allocated, a);
}

TL_EXPORT void tensorleak_pool_free(void *pool, const void *ptr);
void tensorleak_pool_free(void *handle, const void *ptr)
{
    pthread_mutex_lock(&pools_lock);
    struct pool *p = checked(handle);
    pthread_mutex_unlock(&pools_lock);
    if (!p || !ptr)
        return;
    struct tl_live rec;
    if (tl_track_free(TL_SPACE_POOL, (uintptr_t)ptr, TL_MASK(TL_KIND_POOL_BLOCK), &rec))
        atomic_fetch_sub(&p->allocated, (long long)rec.size);
}

TL_EXPORT void tensorleak_pool_destroy(void *pool);
void tensorleak_pool_destroy(void *handle)
{
    pthread_mutex_lock(&pools_lock);
    struct pool *p = checked(handle);
    struct segment *segs = NULL;
    size_t nsegs = 0;
    if (p) {
        /* The segments leave with the pool; their rows are unmarked below,
         * after pools_lock is dropped: a report holds every shard lock while
         * it takes pools_lock, so taking a shard lock under it deadlocks. */
        segs = p->segs;
        nsegs = p->nsegs;
        p->segs = NULL;
        p->nsegs = p->capsegs = 0;
        atomic_store(&p->reserved, 0);
        p->alive = false;
    }
    pthread_mutex_unlock(&pools_lock);
    /* Its blocks stay: a block never returned is still a leak. */
    for (size_t i = 0; i < nsegs; i++) {
        struct tl_live rec;
        if (tl_live_lookup(TL_SPACE_MEM, segs[i].base, &rec) && (rec.aux & HELD_BIT))
            tl_live_set_aux(TL_SPACE_MEM, segs[i].base, 0);
    }
    free(segs);
}

/* ---- report rows --------------------------------------------------------- */

bool tl_pools_is_held(const struct tl_live *rec)
{
    return (rec->space == TL_SPACE_MEM && rec->kind == TL_KIND_DEVICE && (rec->aux & HELD_BIT)) || tl_pools_is_graph(rec);
}

struct block {
    uint64_t addr, size;
};
struct collect {
    struct block *blocks; /* annotated pool blocks, all pools */
    uint32_t *block_pool;
    size_t n, cap;
    long long async_bytes[MAX_POOLS];
    uint64_t async_driver_bytes[MAX_POOLS]; /* the same blocks as the driver counts them */
    long long direct_reserved[TL_MAX_DEVICES]; /* direct device memory not in a pool */
    long long async_unpooled[TL_MAX_DEVICES];
    long long graph_nodes[MAX_POOLS]; /* async rows per pool: graph allocation nodes */
};

static bool collect_row(const struct tl_live *rec, void *arg)
{
    struct collect *c = arg;
    int dev = rec->device < TL_MAX_DEVICES ? rec->device : 0;
    if (rec->space == TL_SPACE_POOL && rec->kind == TL_KIND_POOL_BLOCK) {
        if (c->n == c->cap) {
            size_t ncap = c->cap ? c->cap * 2 : 256;
            struct block *nb = realloc(c->blocks, ncap * sizeof *nb);
            uint32_t *np = nb ? realloc(c->block_pool, ncap * sizeof *np) : NULL;
            if (!nb || !np) {
                if (nb)
                    c->blocks = nb;
                return false;
            }
            c->blocks = nb;
            c->block_pool = np;
            c->cap = ncap;
        }
        c->blocks[c->n] = (struct block){rec->addr, rec->size};
        c->block_pool[c->n++] = rec->aux;
    } else if (rec->space == TL_SPACE_MEM && rec->kind == TL_KIND_ASYNC) {
        if (rec->aux && rec->aux < MAX_POOLS) {
            c->async_bytes[rec->aux] += (long long)rec->size;
            c->async_driver_bytes[rec->aux] += driver_block_bytes(rec->size);
            c->graph_nodes[rec->aux]++;
        } else
            c->async_unpooled[dev] += (long long)rec->size;
    } else if (tl_holds_device_memory(rec->kind) && !tl_pools_is_held(rec)) { /* a stream-ordered one: above */
        c->direct_reserved[dev] += (long long)rec->size;
    }
    return false;
}

static int by_addr(const void *a, const void *b)
{
    const struct block *x = a, *y = b;
    return x->addr < y->addr ? -1 : x->addr > y->addr;
}

static int by_base(const void *a, const void *b)
{
    const struct segment *x = a, *y = b;
    return x->base < y->base ? -1 : x->base > y->base;
}

/* Walks one annotated pool's segments against its (sorted) blocks, and
 * keeps the layout for the memory map. */
static void layout(struct pool *p, struct block *blocks, size_t n, struct tl_pool_row *row)
{
    qsort(p->segs, p->nsegs, sizeof *p->segs, by_base);
    qsort(blocks, n, sizeof *blocks, by_addr);
    uint64_t largest = 0, free_total = 0, allocated = 0;
    size_t b = 0, kept = 0;
    row->layout = calloc(p->nsegs + 1, sizeof *row->layout);
    for (size_t s = 0; s < p->nsegs; s++) {
        uint64_t lo = p->segs[s].base, hi = lo + p->segs[s].size, cursor = lo;
        struct tl_layout_segment *ls = row->layout ? &row->layout[row->nlayout++] : NULL;
        if (ls) {
            ls->base = lo;
            ls->bytes = p->segs[s].size;
        }
        while (b < n && blocks[b].addr < lo)
            b++; /* a block outside every segment: counted, not placed */
        size_t first = b;
        for (; b < n && blocks[b].addr < hi; b++) {
            uint64_t start = blocks[b].addr > cursor ? blocks[b].addr : cursor;
            if (start > cursor) {
                uint64_t hole = start - cursor;
                free_total += hole;
                if (hole > largest)
                    largest = hole;
            }
            uint64_t end = blocks[b].addr + blocks[b].size;
            if (end > hi)
                end = hi;
            if (end > cursor) {
                allocated += end - (blocks[b].addr > cursor ? blocks[b].addr : cursor);
                cursor = end;
            }
        }
        if (hi > cursor) {
            free_total += hi - cursor;
            if (hi - cursor > largest)
                largest = hi - cursor;
        }
        size_t nb = b - first;
        if (ls && nb && kept < TL_LAYOUT_MAX) {
            if (kept + nb > TL_LAYOUT_MAX) {
                nb = TL_LAYOUT_MAX - kept;
                row->layout_truncated = true;
            }
            ls->blocks = calloc(nb, sizeof *ls->blocks);
            for (size_t k = 0; ls->blocks && k < nb; k++)
                ls->blocks[ls->nblocks++] = (struct tl_layout_block){blocks[first + k].addr - lo, blocks[first + k].size};
            kept += nb;
        } else if (nb) {
            row->layout_truncated = true;
        }
    }
    row->reserved = (uint64_t)atomic_load(&p->reserved);
    row->allocated = allocated;
    row->free = free_total;
    row->largest_free = largest;
    row->fragmentation = tl_fragmentation(largest, free_total);
    row->segments = p->nsegs;
}

/* A graph memory row: the driver's figures as it states them (USED_MEM is
 * what the graphs' allocations hold now), unknown when it never answered;
 * the allocation nodes tracked under their call sites beside them. */
static void collect_graph_locked(struct pool *p, const struct collect *c, int i, struct tl_pool_row *row)
{
    row->kind = "graph";
    struct driver_reading r;
    if (read_driver_pool_locked(p, &r)) {
        row->reading = "current";
    } else if (p->last.ok) {
        r = p->last;
        row->reading = "last_good";
    } else {
        r = (struct driver_reading){0};
        row->reading = "none";
        row->figures_unknown = true;
    }
    row->reading_time = r.time;
    row->reserved = r.reserved;
    row->allocated = row->driver_used = r.used;
    row->reserved_high = row->peak_reserved = r.reserved_high;
    row->used_high = row->peak_allocated = r.used_high;
    row->free = r.reserved > r.used ? r.reserved - r.used : 0;
    row->layout_unknown = true; /* the driver tells no layout of graph memory */
    row->graph_nodes = c->graph_nodes[i];
    row->graph_node_bytes = (uint64_t)c->async_bytes[i];
}

double tl_fragmentation(uint64_t largest_free, uint64_t free)
{
    return free ? 1.0 - (double)largest_free / (double)free : 0.0;
}

/* Called by assemble.c with every live-table shard locked: the pool rows, and
 * each device's reserved and allocated bytes (direct allocations and pool
 * reserves) and whether some of its free space has no layout.  Its largest
 * free block, fragmentation and the summary come later, from every pool
 * (assemble.c's figures pass). */
void tl_pools_collect(struct tl_gather *m)
{
    struct collect *c = calloc(1, sizeof *c);
    if (!c)
        return;
    tl_live_foreach(collect_row, c);

    pthread_mutex_lock(&pools_lock);
    m->pools = calloc((size_t)npools + 1, sizeof *m->pools);
    uint64_t dev_reserved[TL_MAX_DEVICES] = {0}, dev_allocated[TL_MAX_DEVICES] = {0};
    bool dev_unknown[TL_MAX_DEVICES] = {false};
    struct block *scratch = c->n ? malloc(c->n * sizeof *scratch) : NULL;
    for (int i = 1; m->pools && i <= npools; i++) {
        struct pool *p = &pools[i];
        if (!p->alive)
            continue;
        struct tl_pool_row *row = &m->pools[m->npools];
        snprintf(row->name, sizeof row->name, "%s", p->name);
        row->device = p->device;
        if (p->annotated) {
            row->kind = "annotated";
            size_t k = 0;
            for (size_t j = 0; scratch && j < c->n; j++)
                if (c->block_pool[j] == (uint32_t)i)
                    scratch[k++] = c->blocks[j];
            layout(p, scratch, k, row);
            row->peak_allocated = (uint64_t)atomic_load(&p->peak_allocated);
            row->peak_reserved = (uint64_t)atomic_load(&p->peak_reserved);
        } else if (p->graph) {
            collect_graph_locked(p, c, i, row);
        } else {
            row->kind = "stream_ordered";
            row->allocated = (uint64_t)c->async_bytes[i];
            struct driver_reading r;
            if (read_driver_pool_locked(p, &r)) {
                row->reading = "current";
            } else if (p->last.ok) {
                r = p->last; /* the driver stopped answering (at exit) */
                row->reading = "last_good";
            } else {
                r = (struct driver_reading){0};
                row->reading = "none";
            }
            row->reading_time = r.time;
            row->reserved = r.reserved;
            row->reserved_high = row->peak_reserved = r.reserved_high;
            row->used_high = row->peak_allocated = r.used_high;
            row->driver_used = r.used;
            /* Rounding alone is no disagreement; a block live for one
             * side only is (unless its bytes exactly cancel another's). */
            row->driver_mismatch = r.ok && r.used != row->allocated && r.used != c->async_driver_bytes[i];
            row->free = row->reserved > row->allocated ? row->reserved - row->allocated : 0;
            /* No layout from the driver: with free bytes in the pool (or a
             * reserve never read), its largest free block and fragmentation
             * are unknown. */
            row->layout_unknown = row->free > 0 || !r.ok;
        }
        row->utilization = row->peak_reserved ? (double)row->peak_allocated / (double)row->peak_reserved : 0.0;
        int d = p->device >= 0 && p->device < TL_MAX_DEVICES ? p->device : 0;
        dev_reserved[d] += row->reserved;
        dev_allocated[d] += row->allocated;
        if (row->layout_unknown)
            dev_unknown[d] = true;
        if (row->reserved || row->allocated || p->annotated || p->graph)
            m->npools++;
    }
    pthread_mutex_unlock(&pools_lock);
    free(scratch);

    for (int d = 0; d < TL_MAX_DEVICES; d++) {
        struct tl_device_row *r = &m->devices[d];
        r->reserved = dev_reserved[d] + (uint64_t)c->direct_reserved[d] + (uint64_t)c->async_unpooled[d];
        r->allocated = dev_allocated[d] + (uint64_t)c->direct_reserved[d] + (uint64_t)c->async_unpooled[d];
        r->layout_unknown = dev_unknown[d];
        if (r->reserved || atomic_load(&tl_device_used[d]))
            r->present = true;
    }
    free(c->blocks);
    free(c->block_pool);
    free(c);
}

/* Reserved bytes right now, for the timeline of marks: direct device memory
 * plus every pool's reserve.  Cheaper than a report: no table walk. */
uint64_t tl_pools_reserved_now(void)
{
    long long direct = 0;
    for (int d = 0; d < TL_MAX_DEVICES; d++)
        direct += tl_live_sum_device_bytes(d); /* folded: no shared atomic */
    uint64_t pooled = 0;
    pthread_mutex_lock(&pools_lock);
    for (int i = 1; i <= npools; i++) {
        if (!pools[i].alive || pools[i].annotated)
            continue;
        struct driver_reading r;
        if (read_driver_pool_locked(&pools[i], &r))
            pooled += r.reserved;
        else if (pools[i].last.ok)
            pooled += pools[i].last.reserved;
    }
    pthread_mutex_unlock(&pools_lock);
    /* Async allocations sit inside their pool's reserve: counted once. */
    direct -= atomic_load(&tl_stats.async_live_bytes);
    return (uint64_t)(direct > 0 ? direct : 0) + pooled;
}

bool tl_context_memory(void *ctx, int *device, uint64_t *free_bytes, uint64_t *total_bytes)
{
    typedef int (*getinfo_fn)(size_t *, size_t *);
    typedef int (*getcur_fn)(void **);
    typedef int (*setcur_fn)(void *);
    typedef int (*getdev_fn)(int *);
    getinfo_fn getinfo = (getinfo_fn)tl_driver_symbol("cuMemGetInfo_v2");
    getcur_fn getcur = (getcur_fn)tl_driver_symbol("cuCtxGetCurrent");
    setcur_fn setcur = (setcur_fn)tl_driver_symbol("cuCtxSetCurrent");
    getdev_fn getdev = (getdev_fn)tl_driver_symbol("cuCtxGetDevice");
    void *saved = NULL;
    if (!ctx || !getinfo || !getcur || !setcur || !getdev || getcur(&saved) != 0)
        return false;
    if (ctx != saved && setcur(ctx) != 0)
        return false;
    int dev = -1;
    size_t f = 0, t = 0;
    bool ok = getdev(&dev) == 0 && getinfo(&f, &t) == 0;
    if (ctx != saved)
        setcur(saved);
    if (ok) {
        *device = dev;
        *free_bytes = f;
        *total_bytes = t;
    }
    return ok;
}

void tl_pools_after_fork(void)
{
    pthread_mutex_init(&pools_lock, NULL);
    for (int i = 1; i <= npools; i++)
        pools[i].alive = false;
    npools = 0;
}
