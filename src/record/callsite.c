/*
 * callsite.c — interned call stacks ("call sites").
 *
 * Data model (jemalloc-prof style): a call site is the pair (allocation kind,
 * stack of return addresses).  Every live allocation points at one by a
 * 32-bit id; the call site carries the running totals the reports need (live
 * bytes and count, allocations ever made) so a report never walks the live
 * table to aggregate.  Call sites are never freed: their number is bounded by
 * the program's distinct allocation paths, not by its allocations.
 *
 * Hot path: a per-thread direct-mapped cache of recently seen stacks answers
 * almost every lookup without a lock; a miss takes the global uthash table's
 * mutex.  Ids index a two-level directory read without locks.
 */
#include "tl_internal.h"

#include <stdlib.h>
#include <string.h>

#define HASH_NONFATAL_OOM 1
#define uthash_nonfatal_oom(obj) (uthash_oom_hit = true)
static __thread bool uthash_oom_hit;
#include <uthash.h>

struct entry {
    UT_hash_handle hh;
    struct tl_callsite *cs;
    size_t keylen;
    uintptr_t key[]; /* kind|nframes word, then frames: the uthash key */
};

static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static struct entry *table;

/* id -> call site: DIR_SIZE chunks of CHUNK pointers, allocated on demand. */
#define CHUNK 4096u
#define DIR_SIZE 4096u
static _Atomic(struct tl_callsite **) directory[DIR_SIZE];
static atomic_uint next_id = 1; /* 0 means "no call site" */
static atomic_ulong python_sites; /* call sites with a Python frame */

unsigned long tl_callsite_python_count(void)
{
    return atomic_load_explicit(&python_sites, memory_order_relaxed);
}

#define CACHE_SLOTS 256
struct cache_slot {
    uint64_t hash;
    struct tl_callsite *cs;
};
/* On the heap (thread_block.c): as TLS it would be 4 KiB of the static-TLS
 * surplus a dlopen'ed copy (tensorleak attach) must fit in. */
static __thread TL_TLS_IE struct cache_slot *cache;

static bool matches(const struct tl_callsite *cs, enum tl_kind kind, const uintptr_t *frames, int n)
{
    return cs->kind == kind && cs->nframes == n && memcmp(cs->frames, frames, (size_t)n * sizeof *frames) == 0;
}

static bool publish(struct tl_callsite *cs)
{
    uint32_t id = atomic_fetch_add(&next_id, 1);
    uint32_t d = id / CHUNK;
    if (d >= DIR_SIZE)
        return false;
    struct tl_callsite **chunk = atomic_load(&directory[d]);
    if (!chunk) {
        chunk = calloc(CHUNK, sizeof *chunk);
        if (!chunk)
            return false;
        struct tl_callsite **expected = NULL;
        if (!atomic_compare_exchange_strong(&directory[d], &expected, chunk)) {
            free(chunk);
            chunk = expected;
        }
    }
    cs->id = id;
    __atomic_store_n(&chunk[id % CHUNK], cs, __ATOMIC_RELEASE);
    return true;
}

struct tl_callsite *tl_callsite_by_id(uint32_t id)
{
    if (id == 0 || id / CHUNK >= DIR_SIZE)
        return NULL;
    struct tl_callsite **chunk = atomic_load(&directory[id / CHUNK]);
    return chunk ? __atomic_load_n(&chunk[id % CHUNK], __ATOMIC_ACQUIRE) : NULL;
}

/* The empty stack of each kind (TENSORLEAK_DEPTH=0, or unwinding failed):
 * found without hashing or the per-thread cache. */
_Atomic(struct tl_callsite *) tl_empty_site[TL_KIND_COUNT];
_Atomic(struct tl_callsite *) tl_hot_device_site;

static struct tl_callsite *intern_slow(enum tl_kind kind, const uintptr_t *frames, int n);

struct tl_callsite *tl_callsite_intern(enum tl_kind kind, const uintptr_t *frames, int n)
{
    if (n == 0 && (unsigned)kind < TL_KIND_COUNT) {
        struct tl_callsite *cs = atomic_load_explicit(&tl_empty_site[kind], memory_order_acquire);
        if (TL_LIKELY(cs != NULL))
            return cs;
        cs = intern_slow(kind, frames, 0);
        if (cs)
            atomic_store_explicit(&tl_empty_site[kind], cs, memory_order_release);
        return cs;
    }
    return intern_slow(kind, frames, n);
}

static struct tl_callsite *intern_slow(enum tl_kind kind, const uintptr_t *frames, int n)
{
    uintptr_t head = (uintptr_t)kind | ((uintptr_t)n << 8);
    uint64_t h = tl_hash_frames(head, frames, (size_t)n);

    struct cache_slot *c = cache;
    if (TL_UNLIKELY(!c))
        c = tl_thread_block((void **)&cache, CACHE_SLOTS * sizeof *c);
    struct cache_slot unused, *slot = c ? &c[h % CACHE_SLOTS] : &unused;
    if (c && slot->hash == h && matches(slot->cs, kind, frames, n))
        return slot->cs;

    /* The uthash key: the kind|nframes word, then the frames. */
    uintptr_t key[TL_MAX_FRAMES + 1];
    key[0] = head;
    memcpy(key + 1, frames, (size_t)n * sizeof *frames);
    size_t words = (size_t)n + 1;
    size_t keylen = words * sizeof(uintptr_t);
    struct entry *e = NULL;
    pthread_mutex_lock(&table_lock);
    HASH_FIND_BYHASHVALUE(hh, table, key, keylen, (unsigned)h, e);
    if (!e) {
        e = calloc(1, sizeof *e + keylen);
        struct tl_callsite *cs = calloc(1, sizeof *cs + (size_t)n * sizeof(uintptr_t));
        if (!e || !cs || !publish(cs)) {
            free(e);
            free(cs);
            pthread_mutex_unlock(&table_lock);
            tl_note_dropped("out of memory for call-site bookkeeping");
            return NULL;
        }
        cs->kind = (uint8_t)kind;
        cs->nframes = (uint8_t)n;
        cs->hash = h;
        memcpy(cs->frames, frames, (size_t)n * sizeof *frames);
        for (int i = 0; i < n; i++)
            if (tl_is_pyframe(frames[i])) {
                atomic_fetch_add_explicit(&python_sites, 1, memory_order_relaxed);
                break;
            }
        e->cs = cs;
        e->keylen = keylen;
        memcpy(e->key, key, keylen);
        uthash_oom_hit = false;
        HASH_ADD_KEYPTR_BYHASHVALUE(hh, table, e->key, keylen, (unsigned)h, e);
        if (uthash_oom_hit) {
            /* The call site stays valid (it is published by id); it just
             * won't be found again, so later allocations from the same stack
             * create twins.  Reports merge by stack, so nothing is lost. */
            tl_note_dropped("out of memory growing the call-site table");
        }
    }
    pthread_mutex_unlock(&table_lock);
    slot->hash = h;
    slot->cs = e->cs;
    return e->cs;
}

/* Folds the live table's pending per-shard deltas first, so every call
 * site's totals are exact as of that moment (marks compare them). */
void tl_callsite_foreach(void (*fn)(struct tl_callsite *, void *), void *arg)
{
    tl_live_fold();
    uint32_t end = atomic_load(&next_id);
    for (uint32_t id = 1; id < end; id++) {
        struct tl_callsite *cs = tl_callsite_by_id(id);
        if (cs)
            fn(cs, arg);
    }
}

size_t tl_callsite_count(void)
{
    return atomic_load(&next_id) - 1;
}

/* A later attach decides owners under its own rules (owners.c): every call
 * site's owner is undecided again.  Tracking is off (the hooks forward). */
void tl_callsite_forget_owners(void)
{
    atomic_store(&tl_hot_device_site, NULL); /* its owner goes now */
    uint32_t end = atomic_load(&next_id);
    for (uint32_t id = 1; id < end; id++) {
        struct tl_callsite *cs = tl_callsite_by_id(id);
        if (cs)
            atomic_store(&cs->owner, 0);
    }
}

/* In a forked child: the stacks stay valid (same address space image), the
 * totals belong to the parent. */
void tl_callsite_reset_after_fork(void)
{
    pthread_mutex_init(&table_lock, NULL);
    /* tl_empty_site stays: the call sites themselves survive the fork. */
    uint32_t end = atomic_load(&next_id);
    for (uint32_t id = 1; id < end; id++) {
        struct tl_callsite *cs = tl_callsite_by_id(id);
        if (!cs)
            continue;
        atomic_store(&cs->live_bytes, 0);
        atomic_store(&cs->live_count, 0);
        atomic_store(&cs->total_allocs, 0);
        cs->mark_bytes = 0;
        cs->grow_streak = 0;
        cs->grow_first_bytes = 0;
    }
}
