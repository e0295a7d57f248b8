/*
 * tracker.c — what the hooks call: record an allocation, a free, a failure,
 * a context teardown.  Hooks stay thin (hooks_*.c); this file owns the
 * counters and the policy (what counts as an invalid free, which memory a
 * teardown releases).
 */
#include "counts.h"
#include "record.h"
#include "tl_internal.h"
#include "live_shard.h"
#include "track_hot.h"

#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

struct tl_stats tl_stats;
/* State of the owner and budget families that counting reads on every row
 * (counts.h): defined here and filled by owners.c and budget.c, so record/
 * never calls into families/. */
struct tl_owner_running tl_owner_figures[TL_MAX_OWNERS + 1];
atomic_bool tl_budget_active;
_Atomic(tl_row_owner_fn) tl_held_row_owner;

/* A thread's small tracker state, one TLS block (its id is the table's,
 * tl_table_thread.tid, which the hot path reads). */
struct tracker_tls {
    unsigned ctx_generation; /* of the cached context */
    void *ctx;               /* the context last resolved on this thread */
    int ctx_index;
    int ctx_device;          /* its device as the table of contexts says */
};
static __thread struct tracker_tls tt TL_TLS_IE;

static void single_end_locked(void);

static uint32_t current_tid(void)
{
    if (TL_UNLIKELY(!tl_table_thread.tid))
        tl_table_thread.tid = (uint32_t)syscall(SYS_gettid);
    return tl_table_thread.tid;
}

static pthread_mutex_t ctx_lock = PTHREAD_MUTEX_INITIALIZER; /* the contexts' table; a leaf lock */

/* The contexts' lock is held across a fork (it is a leaf: nothing is taken
 * under it), so the child's copy of the table is whole and the lock free. */
void tl_tracker_before_fork(void)
{
    pthread_mutex_lock(&ctx_lock);
}

void tl_tracker_after_fork_in_parent(void)
{
    pthread_mutex_unlock(&ctx_lock);
}

void tl_contexts_locked_call(void (*fn)(void))
{
    pthread_mutex_lock(&ctx_lock);
    fn();
    pthread_mutex_unlock(&ctx_lock);
}

/* Forked children get a new tid; the cached one would be the parent's. */
void tl_tracker_after_fork(void)
{
    tl_table_thread.tid = (uint32_t)syscall(SYS_gettid);
    /* The child makes contexts of its own, under handles it may reuse. */
    single_end_locked();
    pthread_mutex_unlock(&ctx_lock);
    for (int d = 0; d < TL_MAX_DEVICES; d++)
        atomic_store(&tl_device_used[d], false);
}

const char *tl_kind_name(enum tl_kind kind)
{
    return (unsigned)kind < TL_KIND_COUNT ? tl_kind_rows[kind].name : "unknown";
}


/* The per-shard call-site deltas go to the call site's atomics when their
 * slot is wanted by another call site (counts.h), and at every fold. */
void tl_flush_site(struct tl_shard_site *s)
{
    struct tl_callsite *cs = tl_callsite_by_id(s->id);
    if (cs) {
        if (s->bytes)
            atomic_fetch_add_explicit(&cs->live_bytes, s->bytes, memory_order_relaxed);
        if (s->count)
            atomic_fetch_add_explicit(&cs->live_count, s->count, memory_order_relaxed);
        if (s->allocs)
            atomic_fetch_add_explicit(&cs->total_allocs, s->allocs, memory_order_relaxed);
    }
    *s = (struct tl_shard_site){0};
}

atomic_bool tl_device_used[TL_MAX_DEVICES];

void tl_counts_fold_locked(struct tl_shard_counts *const *c, unsigned n)
{
    unsigned long long total = 0;
    long long dev[TL_MAX_DEVICES] = {0}, dev_bytes[TL_MAX_DEVICES] = {0}, live = 0;
    for (unsigned k = 0; k < n; k++) {
        for (unsigned i = 0; i < TL_SHARD_SITES; i++)
            if (c[k]->site[i].id)
                tl_flush_site(&c[k]->site[i]);
        total += c[k]->total_allocs;
        live += c[k]->other_count;
        for (unsigned d = 0; d < TL_MAX_DEVICES; d++) {
            dev[d] += c[k]->device_count[d];
            live += c[k]->device_count[d];
            dev_bytes[d] += c[k]->device_bytes[d];
        }
    }
    atomic_store_explicit(&tl_stats.total_allocs, total, memory_order_relaxed);
    atomic_store_explicit(&tl_stats.live_count, live, memory_order_relaxed);
    bool exact = atomic_load_explicit(&tl_budget_active, memory_order_relaxed);
    for (unsigned d = 0; d < TL_MAX_DEVICES; d++) {
        atomic_store_explicit(&tl_stats.device[d].live_count, dev[d], memory_order_relaxed);
        if (!exact) {
            atomic_store_explicit(&tl_stats.device[d].live_bytes, dev_bytes[d], memory_order_relaxed);
            tl_raise_peak(&tl_stats.device[d].peak_bytes, dev_bytes[d]);
        }
    }
}

static inline int alloc_context_index(int *device_out);

atomic_bool tl_watch_pending;

/* The watcher thread starts here, in the program's own thread at its first
 * tracked allocation, after the driver symbols the watcher calls have been
 * looked up (lookup.c): a look-up takes the loader's lock, and a thread of
 * ours holding it at the moment the program makes a child by raw clone (no
 * fork handlers) leaves it held in the child, whose exit() then waits for it
 * forever.  By now the driver is loaded: the runtime loads it inside the
 * first call, before any allocation. */
static void watch_start(void)
{
    if (!atomic_exchange(&tl_watch_pending, false))
        return;
    TL_SLOW_PATH_FOLLOW(TL_SLOW_WATCH, atomic_load(&tl_watch_pending));
    tl_driver_symbols_prefetch();
    (void)tl_demangler(); /* owners' names (owners.c): looked up once, here */
    tl_upcalls.snapshot_watch();
}

/* No reason to leave the hot path (tl_slow_paths) and no failure waiting for
 * its report on this thread: an allocation then has nothing to do after its
 * row is in, and a free nothing before or after its row is out. */
static inline bool hot(void)
{
    return TL_LIKELY(atomic_load_explicit(&tl_slow_paths, memory_order_relaxed) == 0) && TL_LIKELY(!tl_oom_pending);
}

/* A new allocation's row at call site `cs`: its owner, context, device and
 * thread.  Inline, returned by value: a caller that never takes the row's
 * address keeps it in registers. */
static inline __attribute__((always_inline)) struct tl_live row_in(struct tl_callsite *cs, enum tl_kind kind,
                                                                   uint8_t space, uint64_t addr, uint64_t size,
                                                                   int device, int ctx, uint32_t aux)
{
    int owner = tl_owner_prepare(cs);
    if (kind == TL_KIND_DEVICE)
        tl_callsite_publish_hot(cs);
    return (struct tl_live){
        .addr = addr,
        .size = size,
        .callsite = cs ? cs->id : 0,
        .owner = (uint8_t)(owner + 1), /* charged to its owner inside the table */
        .tid = current_tid(),
        .space = space,
        .kind = (uint8_t)kind,
        .device = (uint8_t)device,
        .ctx = (uint8_t)ctx,
        .aux = aux,
    };
}

/* The same in the allocating thread's context (row_in's ctx; an IPC mapping
 * takes its context's device too, the importer's), its device the
 * context's where `device` is -1. */
static inline __attribute__((always_inline)) struct tl_live row_at(struct tl_callsite *cs, enum tl_kind kind,
                                                                   uint8_t space, uint64_t addr, uint64_t size,
                                                                   int device, uint32_t aux)
{
    int ctx_device = -1;
    int ctx = ((space == TL_SPACE_MEM && kind != TL_KIND_POOL_BLOCK) || space == TL_SPACE_ARRAY || space == TL_SPACE_IPC)
                  ? alloc_context_index(&ctx_device)
                  : 0;
    if (device < 0)
        device = ctx_device >= 0 ? ctx_device : 0;
    return row_in(cs, kind, space, addr, size, device, ctx, aux);
}

/* The same, its call site found here (*cs_out). */
static inline __attribute__((always_inline)) struct tl_live new_row(enum tl_kind kind, uint8_t space, uint64_t addr,
                                                                    uint64_t size, int device, uint32_t aux,
                                                                    struct tl_callsite **cs_out)
{
    struct tl_callsite *cs = tl_opt.depth > 0 ? tl_stack_site(kind, tl_opt.depth) : tl_callsite_empty(kind);
    *cs_out = cs;
    return row_at(cs, kind, space, addr, size, device, aux);
}

/* A new row into the table by the general insert, then what the families
 * asked for after an allocation. */
static inline __attribute__((always_inline)) void insert_row(struct tl_callsite *cs, struct tl_live rec)
{
    bool budget = atomic_load_explicit(&tl_budget_active, memory_order_relaxed);
    if (!tl_live_insert(&rec, rec.kind, true, budget)) {
        tl_note_dropped("out of memory for the live-allocation table");
        return;
    }
    if (TL_UNLIKELY(budget)) {
        /* A copy: `rec` itself never has its address taken, so it can stay
         * in registers and be stored straight into its slot. */
        struct tl_live row = rec;
        tl_upcalls.budget_after_alloc(cs, &row);
    }
    if (TL_UNLIKELY(tl_oom_pending))
        tl_upcalls.oom_allocated_slow(); /* the framework recovered from its failure: report it now */
    if (TL_UNLIKELY(atomic_load_explicit(&tl_bridge_setup_nudges, memory_order_relaxed) > 0))
        tl_upcalls.bridge_nudge();
}

/* insert_row, out of line for the hot path's rare turns to it. */
static __attribute__((noinline)) void insert_row_cold(struct tl_callsite *cs, struct tl_live rec)
{
    insert_row(cs, rec);
}

/* Every allocation's record.  Inlined into tl_track_alloc and into
 * tl_track_device_alloc, where kind, space, device and aux are constants
 * and the tests on them fold away. */
static inline __attribute__((always_inline)) void track_alloc(enum tl_kind kind, uint8_t space, uint64_t addr,
                                                              uint64_t size, int device, uint32_t aux)
{
    if (!atomic_load_explicit(&tl_active, memory_order_relaxed) || addr == 0)
        return;
    if (TL_UNLIKELY(atomic_load_explicit(&tl_watch_pending, memory_order_relaxed)))
        watch_start();
    struct tl_callsite *cs;
    struct tl_live rec = new_row(kind, space, addr, size, device, aux, &cs);
    insert_row(cs, rec);
}

/* A device row of the memory space while hot() holds but the one-context
 * shortcut does not (the hooks' hot path refused): the hot insert of
 * track_hot.h in the context the driver names, when its device is used
 * already. */
static inline __attribute__((always_inline)) void track_device_alloc_hot(uint64_t addr, uint64_t size)
{
    if (!atomic_load_explicit(&tl_active, memory_order_relaxed) || addr == 0)
        return;
    int device = -1;
    int ctx = alloc_context_index(&device);
    if (TL_LIKELY(device >= 0 && device < TL_MAX_DEVICES) &&
        TL_LIKELY(atomic_load_explicit(&tl_device_used[device], memory_order_relaxed))) {
        tl_track_device_alloc_in(addr, size, device | ctx << 8 | TL_SINGLE_USED);
        return;
    }
    struct tl_callsite *cs = tl_opt.depth > 0 ? tl_stack_site(TL_KIND_DEVICE, tl_opt.depth)
                                              : tl_callsite_empty(TL_KIND_DEVICE);
    insert_row_cold(cs, row_in(cs, TL_KIND_DEVICE, TL_SPACE_MEM, addr, size, device >= 0 ? device : 0, ctx, 0));
}

void tl_track_alloc(enum tl_kind kind, uint8_t space, uint64_t addr, uint64_t size, int device, uint32_t aux)
{
    track_alloc(kind, space, addr, size, device, aux);
}

/* A device row while hot() does not hold: out of line, so that the hot
 * path saves no more registers than it uses itself. */
static __attribute__((noinline)) void device_alloc_general(uint64_t addr, uint64_t size)
{
    track_alloc(TL_KIND_DEVICE, TL_SPACE_MEM, addr, size, -1, 0);
}

static inline __attribute__((always_inline)) void track_device_alloc(uint64_t addr, uint64_t size)
{
    if (hot())
        track_device_alloc_hot(addr, size);
    else
        device_alloc_general(addr, size);
}

void tl_track_device_alloc(uint64_t addr, uint64_t size)
{
    track_device_alloc(addr, size);
}

void tl_track_device_alloc_at(uint64_t addr, uint64_t size, struct tl_callsite *cs, int context)
{
    insert_row(cs, row_in(cs, TL_KIND_DEVICE, TL_SPACE_MEM, addr, size, context & 0xff, (context >> 8) & 0xff, 0));
}

/* Inside tl_live_foreach (the row's shard lock is held). */
void tl_track_forget(const struct tl_live *rec)
{
    tl_count_row(tl_live_counts_of(rec), rec, -1, false, false);
    if (TL_UNLIKELY(atomic_load_explicit(&tl_budget_active, memory_order_relaxed)))
        tl_upcalls.budget_after_free(rec);
}

/* Invalid frees: kept in a fixed ring of the first TL_MAX_INVALID, counted
 * beyond that. */
static struct tl_invalid_free_event invalid[TL_MAX_INVALID];
static atomic_size_t ninvalid;

static void record_invalid(uint64_t addr, uint8_t kind)
{
    atomic_fetch_add_explicit(&tl_stats.invalid_frees, 1, memory_order_relaxed);
    size_t i = atomic_fetch_add(&ninvalid, 1);
    if (i >= TL_MAX_INVALID)
        return;
    uintptr_t frames[TL_MAX_FRAMES];
    int n = tl_stack_capture(frames, tl_opt.depth);
    struct tl_callsite *cs = tl_callsite_intern(kind, frames, n);
    invalid[i] = (struct tl_invalid_free_event){.addr = addr, .callsite = cs ? cs->id : 0, .kind = kind};
}

size_t tl_invalid_frees(struct tl_invalid_free_event *out, size_t max)
{
    size_t n = atomic_load(&ninvalid);
    if (n > TL_MAX_INVALID)
        n = TL_MAX_INVALID;
    if (n > max)
        n = max;
    memcpy(out, invalid, n * sizeof *out);
    return n;
}

/* A free that removed no row: rc is tl_live_take's (0 not found, -1 found
 * with another kind, copied to *rec). */
static __attribute__((noinline)) void free_not_tracked(int rc, uint8_t space, uint64_t addr, unsigned kinds_mask,
                                                       const struct tl_live *rec)
{
    /* Attached: a pointer from before the attach is no invalid free. */
    if (TL_UNLIKELY(atomic_load_explicit(&tl_attached, memory_order_relaxed)) && rc == 0 &&
        tl_upcalls.attach_freed_before(space, addr))
        return;
    /* Never seen, freed twice, or freed with the wrong API: the driver still
     * gets the call unchanged and answers for itself. */
    unsigned k = 0;
    while (k < TL_KIND_COUNT && !(kinds_mask & (1u << k)))
        k++;
    record_invalid(addr, rc == -1 ? rec->kind : (uint8_t)(k < TL_KIND_COUNT ? k : 0));
}

/* Every free's record.  Inlined into tl_track_free and into
 * tl_track_mem_free, where the space is a constant and `rec` the caller's. */
static inline __attribute__((always_inline)) bool track_free(uint8_t space, uint64_t addr, unsigned kinds_mask,
                                                             struct tl_live *rec, bool is_hot)
{
    bool budget = !is_hot && atomic_load_explicit(&tl_budget_active, memory_order_relaxed);
    int rc = tl_live_remove(space, addr, kinds_mask, rec, budget);
    if (TL_LIKELY(rc == 1)) {
        if (TL_UNLIKELY(budget))
            tl_upcalls.budget_after_free(rec);
        return true;
    }
    free_not_tracked(rc, space, addr, kinds_mask, rec);
    return false;
}

bool tl_track_free(uint8_t space, uint64_t addr, unsigned kinds_mask, struct tl_live *out)
{
    if (!atomic_load_explicit(&tl_active, memory_order_relaxed))
        return false;
    /* The row goes straight to the caller's record (no second copy). */
    struct tl_live local;
    return track_free(space, addr, kinds_mask, out ? out : &local, false);
}

/* The general free of the memory space: the hooks try
 * tl_track_mem_free_hot first (track_hot.h). */
bool tl_track_mem_free(uint64_t addr, unsigned kinds_mask, struct tl_live *out)
{
    if (!atomic_load_explicit(&tl_active, memory_order_relaxed))
        return false;
    if (TL_LIKELY(atomic_load_explicit(&tl_slow_paths, memory_order_relaxed) == 0))
        return track_free(TL_SPACE_MEM, addr, kinds_mask, out, true);
    return track_free(TL_SPACE_MEM, addr, kinds_mask, out, false);
}

void tl_track_restore(const struct tl_live *rec)
{
    if (!tl_live_add(rec, false)) {
        tl_note_dropped("out of memory for the live-allocation table");
        return;
    }
    if (TL_UNLIKELY(atomic_load_explicit(&tl_budget_active, memory_order_relaxed)))
        tl_upcalls.budget_after_alloc(tl_callsite_by_id(rec->callsite), rec);
}

void tl_track_failure(int is_oom, enum tl_kind kind, uint64_t size, int device)
{
    if (!atomic_load_explicit(&tl_active, memory_order_relaxed))
        return;
    atomic_fetch_add_explicit(&tl_stats.failed_allocs, 1, memory_order_relaxed);
    if (!is_oom)
        return;
    atomic_fetch_add_explicit(&tl_stats.oom_failures, 1, memory_order_relaxed);
    /* The post-mortem: a report now, while the state that failed is intact. */
    static __thread bool in_oom_report;
    if (in_oom_report)
        return;
    in_oom_report = true;
    struct tl_oom_event ev = {.bytes = size, .kind = (uint8_t)kind, .device = device};
    ev.nframes = tl_stack_capture(ev.frames, tl_opt.depth);
    if (ev.device < 0) {
        int d = -1;
        tl_current_context_index(&d);
        ev.device = d < 0 ? 0 : d;
    }
    tl_upcalls.oom_failed(&ev);
    in_oom_report = false;
}

/* ---- contexts ----------------------------------------------------------- */
/* Index 0 = unknown.  Contexts are few; a linear table is simplest. */
struct ctx_entry {
    void *ctx;
    int device;
    bool primary;
};
static struct ctx_entry contexts[TL_MAX_CONTEXTS + 1];
static int ncontexts;
/* Bumps when a context goes away or its device changes: each thread's cached
 * context (tracker_tls) is stale then. */
static atomic_uint ctx_generation;

/* ---- one context ----------------------------------------------------------
 * Nearly every process has one device and on it one context, the device's
 * primary one (the runtime's).  Every allocation's context is then that one,
 * and asking the driver (cuCtxGetCurrent, the dearest step of recording a
 * cuMemAlloc) tells nothing new.  So the tracker stops asking once the
 * process has one device and has shown it one context, and asks again for
 * good once it shows another: the hooks report every context created, set or
 * pushed and every primary context retained (tl_context_seen); a teardown, a
 * context's device changing and a fork end it too, and a process attached to
 * never starts it (its contexts were made before we could see them).  What
 * this cannot see is a context made current by none of the public entry
 * points. */
static _Atomic(void *) single_ctx; /* the one context shown so far (written under ctx_lock) */
static atomic_bool single_ended;   /* a second one was shown: never again (written under ctx_lock) */
/* tl_single_context (track_hot.h): device | index << 8 of the one context
 * while the tracker trusts it, | TL_SINGLE_USED once its device holds
 * bytes; else 0.  Its two writers each write, then read the other's flag
 * (seq_cst), so the bit is never left clear while the device is used. */
atomic_int tl_single_context;

void tl_single_device_used(unsigned d)
{
    int v = atomic_load(&tl_single_context);
    while (v != 0 && (unsigned)(v & 0xff) == d && !(v & TL_SINGLE_USED) &&
           !atomic_compare_exchange_weak(&tl_single_context, &v, v | TL_SINGLE_USED))
        ;
}

/* The index first, then `ended` with release: a thread that sees the
 * shortcut ended without taking ctx_lock (tl_context_seen) and then
 * allocates reads tl_single_context as 0. */
static void single_end_locked(void)
{
    atomic_store_explicit(&tl_single_context, 0, memory_order_relaxed);
    atomic_store_explicit(&single_ended, true, memory_order_release);
}

static void single_seen_locked(void *ctx)
{
    if (atomic_load_explicit(&single_ended, memory_order_acquire))
        return;
    void *known = atomic_load_explicit(&single_ctx, memory_order_relaxed);
    if (!known)
        atomic_store_explicit(&single_ctx, ctx, memory_order_relaxed);
    else if (known != ctx)
        single_end_locked();
}

static int ctx_index_locked(void *ctx, int device, bool primary)
{
    for (int i = 1; i <= ncontexts; i++)
        if (contexts[i].ctx == ctx) {
            if (primary)
                contexts[i].primary = true;
            if (device >= 0 && contexts[i].device != device) {
                contexts[i].device = device;
                /* Threads cache a context's device with its index. */
                atomic_fetch_add_explicit(&ctx_generation, 1, memory_order_release);
                single_end_locked();
            }
            return i;
        }
    if (ncontexts >= TL_MAX_CONTEXTS)
        return 0;
    ncontexts++;
    contexts[ncontexts] = (struct ctx_entry){ctx, device, primary};
    return ncontexts;
}

void tl_note_context(void *ctx, int device, bool primary)
{
    if (!ctx || !atomic_load_explicit(&tl_active, memory_order_relaxed))
        return;
    pthread_mutex_lock(&ctx_lock);
    ctx_index_locked(ctx, device, primary);
    pthread_mutex_unlock(&ctx_lock);
}

void tl_context_seen(void *ctx)
{
    if (!ctx || !atomic_load_explicit(&tl_active, memory_order_relaxed) ||
        atomic_load_explicit(&single_ended, memory_order_acquire) ||
        atomic_load_explicit(&single_ctx, memory_order_relaxed) == ctx)
        return; /* the common case: the one context set current again */
    pthread_mutex_lock(&ctx_lock);
    single_seen_locked(ctx);
    pthread_mutex_unlock(&ctx_lock);
}

int tl_context_device(uint8_t ctx_index)
{
    return ctx_index && ctx_index <= ncontexts ? contexts[ctx_index].device : -1;
}

typedef int (*get_current_fn)(void **);
typedef int (*get_device_fn)(int *);
typedef int (*get_count_fn)(int *);
/* Resolved once; published with atomics because hooks on several threads
 * may get here first at the same time. */
static _Atomic(get_current_fn) cached_current;
static _Atomic(get_device_fn) cached_device;

/* A context this thread has not seen as current since the last teardown. */
static _Atomic(get_count_fn) cached_count;

/* The process sees exactly one device (the condition of trusting one
 * context): asked of the driver once. */
static bool one_device(void)
{
    static atomic_int answer; /* 0 not asked, 1 one device, -1 not */
    int a = atomic_load_explicit(&answer, memory_order_relaxed);
    if (!a) {
        get_count_fn get_count = atomic_load_explicit(&cached_count, memory_order_acquire);
        int n = 0;
        a = get_count && get_count(&n) == 0 && n == 1 ? 1 : -1;
        atomic_store_explicit(&answer, a, memory_order_relaxed);
    }
    return a > 0;
}

/* A context this thread has not seen as current since the last teardown. */
static __attribute__((noinline)) int context_index_slow(void *ctx, unsigned gen, int *device_out)
{
    get_device_fn get_device = atomic_load_explicit(&cached_device, memory_order_acquire);
    int dev = -1;
    if (!get_device || get_device(&dev) != 0)
        dev = -1;
    bool single_device = one_device();
    pthread_mutex_lock(&ctx_lock);
    int idx = ctx_index_locked(ctx, dev, false);
    int idx_device = tl_context_device((uint8_t)idx);
    single_seen_locked(ctx);
    if (single_device && idx > 0 && idx_device >= 0 && idx_device < TL_MAX_DEVICES &&
        !atomic_load_explicit(&tl_attached, memory_order_relaxed) &&
        !atomic_load_explicit(&single_ended, memory_order_relaxed) &&
        atomic_load_explicit(&single_ctx, memory_order_relaxed) == ctx &&
        atomic_load_explicit(&ctx_generation, memory_order_relaxed) == gen) {
        atomic_store(&tl_single_context, idx_device | idx << 8);
        if (atomic_load(&tl_device_used[idx_device]))
            tl_single_device_used((unsigned)idx_device);
    }
    pthread_mutex_unlock(&ctx_lock);
    tt.ctx = ctx;
    tt.ctx_index = idx;
    tt.ctx_device = idx_device;
    tt.ctx_generation = gen;
    if (device_out)
        *device_out = dev;
    return idx;
}

static __attribute__((noinline)) get_current_fn resolve_context_functions(void)
{
    get_device_fn get_device = (get_device_fn)tl_driver_symbol("cuCtxGetDevice");
    get_current_fn get_current = (get_current_fn)tl_driver_symbol("cuCtxGetCurrent");
    if (!get_current || !get_device)
        return NULL;
    atomic_store_explicit(&cached_count, (get_count_fn)tl_driver_symbol("cuDeviceGetCount"), memory_order_release);
    atomic_store_explicit(&cached_device, get_device, memory_order_release);
    atomic_store_explicit(&cached_current, get_current, memory_order_release);
    return get_current;
}

/* Inline: every allocation asks (tl_track_alloc). */
static inline int current_context_index(int *device_out)
{
    get_current_fn get_current = atomic_load_explicit(&cached_current, memory_order_acquire);
    if (TL_UNLIKELY(!get_current) && !(get_current = resolve_context_functions()))
        return 0;
    void *ctx = NULL;
    if (get_current(&ctx) != 0 || !ctx)
        return 0;
    unsigned gen = atomic_load_explicit(&ctx_generation, memory_order_acquire);
    if (TL_LIKELY(ctx == tt.ctx && gen == tt.ctx_generation)) {
        if (device_out)
            *device_out = tt.ctx_device;
        return tt.ctx_index;
    }
    return context_index_slow(ctx, gen, device_out);
}

void tl_context_current_seen(void)
{
    if (!atomic_load_explicit(&tl_active, memory_order_relaxed) ||
        atomic_load_explicit(&single_ended, memory_order_acquire))
        return; /* nothing to learn: no driver call */
    get_current_fn get_current = atomic_load_explicit(&cached_current, memory_order_acquire);
    if (!get_current && !(get_current = resolve_context_functions()))
        return;
    void *ctx = NULL;
    if (get_current(&ctx) == 0)
        tl_context_seen(ctx);
}

int tl_current_context_index(int *device_out)
{
    return current_context_index(device_out);
}

/* current_context_index for a successful allocation, which had a context:
 * while the process has shown one, that one, without asking the driver. */
static inline int alloc_context_index(int *device_out)
{
    int single = atomic_load_explicit(&tl_single_context, memory_order_acquire);
    if (TL_LIKELY(single > 0)) {
        *device_out = single & 0xff;
        return (single >> 8) & 0xff;
    }
    return current_context_index(device_out);
}

struct teardown {
    bool match[TL_MAX_CONTEXTS + 1];
};

static bool released_by_teardown(const struct tl_live *rec, void *arg)
{
    const struct teardown *t = arg;
    if ((rec->space != TL_SPACE_MEM && rec->space != TL_SPACE_ARRAY && rec->space != TL_SPACE_IPC) ||
        !t->match[rec->ctx])
        return false;
    /* cuCtxDestroy frees cuMemAlloc-family memory only: not stream-ordered
     * pool memory nor VMM handles (cuda.h, cuCtxDestroy).  It also undoes
     * the context's host registrations (the memory stays the program's),
     * destroys its CUDA arrays and unmaps the IPC handles it opened, whatever
     * their reference count (the driver counts them per context). */
    if (rec->kind != TL_KIND_DEVICE && rec->kind != TL_KIND_HOST_PINNED && rec->kind != TL_KIND_MANAGED &&
        rec->kind != TL_KIND_HOST_REGISTERED && rec->kind != TL_KIND_ARRAY && rec->kind != TL_KIND_IPC_MAPPING)
        return false;
    tl_track_forget(rec);
    /* A mapping's bytes are the exporter's memory, in no byte figure of this
     * process but ipc_mapped_bytes: the mapping counts as an allocation
     * released, its bytes in released_by_teardown_bytes would be counted
     * twice once reports are merged. */
    if (rec->kind != TL_KIND_IPC_MAPPING)
        atomic_fetch_add_explicit(&tl_stats.teardown_bytes, rec->size, memory_order_relaxed);
    atomic_fetch_add_explicit(&tl_stats.teardown_allocs, 1, memory_order_relaxed);
    return true;
}

void tl_teardown_context(void *ctx, int device)
{
    if (!atomic_load(&tl_active))
        return;
    struct teardown t;
    memset(&t, 0, sizeof t);
    bool any = false;
    pthread_mutex_lock(&ctx_lock);
    for (int i = 1; i <= ncontexts; i++) {
        bool m = ctx ? contexts[i].ctx == ctx : (contexts[i].primary && contexts[i].device == device);
        if (m) {
            t.match[i] = true;
            any = true;
            /* A destroyed context is gone and a new one may reuse its
             * address; a reset primary context keeps its handle. */
            if (ctx)
                contexts[i].ctx = NULL;
        }
    }
    atomic_fetch_add_explicit(&ctx_generation, 1, memory_order_release);
    single_end_locked();
    pthread_mutex_unlock(&ctx_lock);
    if (!any)
        return;
    tl_live_lock_all();
    tl_live_foreach(released_by_teardown, &t);
    tl_live_unlock_all();
}

/* The live contexts we know of (assemble.c visits each for cuMemGetInfo). */
int tl_known_contexts(void **out, int max)
{
    int n = 0;
    pthread_mutex_lock(&ctx_lock);
    for (int i = 1; i <= ncontexts && n < max; i++)
        if (contexts[i].ctx)
            out[n++] = contexts[i].ctx;
    pthread_mutex_unlock(&ctx_lock);
    return n;
}
