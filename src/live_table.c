/*
 * live_table.c — the table of live allocations.
 *
 * Data model: one row per allocation the program holds right now, keyed by
 * (address space, address): device/host/managed pointers share the unified
 * address space; VMM handles, mappings and VA reservations have their own.
 * A row is 40 bytes stored inline (no per-row malloc, no per-row list
 * pointers), so a million live allocations cost ~84 bytes each at our load
 * factor.  The call stack is not in the row: rows point at an interned call
 * site (callsite.c) by id.
 *
 * Concurrency: 64 shards, each an open-addressing table (linear probing,
 * backward-shift deletion, so no tombstones) under its own lock (an exchange to take, a store to release).  Two threads
 * allocating at once almost never share a shard; a consistent snapshot takes
 * every shard lock in order.
 *
 * Each shard also keeps tracker.c's totals for its rows (tl_shard_counts:
 * call-site deltas, total allocations, per-device counts), changed in the
 * same critical section as the rows with plain adds; tl_live_lock_all and
 * tl_live_unlock_all fold them into tl_stats and the call sites, so the
 * holder of every lock reads totals that agree with the rows.
 */
#include "tl_internal.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SHARD_BITS 6
#define NSHARDS (1u << SHARD_BITS)
#define INITIAL_CAP 256u

struct shard {
    atomic_int lock; /* 0 free, 1 held: shard_lock below */
    struct tl_live *slots;
    size_t cap; /* power of two, or 0 before the first insert */
    size_t count;
    struct tl_shard_counts counts; /* tracker.c's totals for these rows */
} __attribute__((aligned(64)));

static struct shard shards[NSHARDS];

/* The shard lock: one exchange to take it, a release store to drop it (a
 * pthread mutex costs a second locked instruction on unlock, plus two calls).
 * Critical sections are a few dozen instructions, so a waiter spins briefly;
 * one that keeps waiting (another thread holds every shard for a report)
 * yields, then sleeps in short naps rather than burning its core. */
static void shard_lock_slow(struct shard *s)
{
    for (unsigned i = 0;; i++) {
        if (!atomic_load_explicit(&s->lock, memory_order_relaxed) &&
            !atomic_exchange_explicit(&s->lock, 1, memory_order_acquire))
            return;
        if (i < 128) {
#if defined(__x86_64__) || defined(__i386__)
            __builtin_ia32_pause();
#endif
        } else if (i < 256) {
            sched_yield();
        } else {
            struct timespec nap = {0, 50000};
            nanosleep(&nap, NULL);
        }
    }
}

static inline void shard_lock(struct shard *s)
{
    if (TL_UNLIKELY(atomic_exchange_explicit(&s->lock, 1, memory_order_acquire)))
        shard_lock_slow(s);
}

static inline void shard_unlock(struct shard *s)
{
    atomic_store_explicit(&s->lock, 0, memory_order_release);
}

static inline uint64_t mix(uint8_t space, uint64_t addr)
{
    /* splitmix64's finalizer: every input bit reaches the shard and slot bits. */
    uint64_t z = addr ^ ((uint64_t)space << 61) ^ ((uint64_t)space * 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline struct shard *shard_of(uint64_t h)
{
    return &shards[h >> (64 - SHARD_BITS)];
}

static inline bool same(const struct tl_live *r, uint8_t space, uint64_t addr)
{
    return r->addr == addr && r->space == space;
}

/* Slot state: addr 0 with space 0 is empty.  Address 0 is never a valid
 * allocation in any space we track (handles start at 1 in real drivers too),
 * so it can mark emptiness. */
static inline bool empty(const struct tl_live *r)
{
    return r->addr == 0;
}

static bool grow(struct shard *s)
{
    size_t ncap = s->cap ? s->cap * 2 : INITIAL_CAP;
    struct tl_live *n = calloc(ncap, sizeof *n);
    if (!n)
        return false;
    for (size_t i = 0; i < s->cap; i++) {
        struct tl_live *r = &s->slots[i];
        if (empty(r))
            continue;
        size_t j = mix(r->space, r->addr) & (ncap - 1);
        while (!empty(&n[j]))
            j = (j + 1) & (ncap - 1);
        n[j] = *r;
    }
    free(s->slots);
    s->slots = n;
    s->cap = ncap;
    return true;
}

bool tl_live_add(const struct tl_live *rec, bool fresh)
{
    uint64_t h = mix(rec->space, rec->addr);
    struct shard *s = shard_of(h);
    shard_lock(s);
    if ((s->count + 1) * 5 > s->cap * 4 && !grow(s)) {
        shard_unlock(s);
        return false;
    }
    size_t mask = s->cap - 1;
    size_t i = h & mask;
    while (!empty(&s->slots[i])) {
        if (same(&s->slots[i], rec->space, rec->addr)) {
            /* The driver handed out an address we still think is live: we
             * missed its free (an untracked path).  The new row wins, and
             * the old one leaves the totals with the table. */
            tl_count_row(&s->counts, &s->slots[i], -1, false);
            s->slots[i] = *rec;
            tl_count_row(&s->counts, rec, 1, fresh);
            shard_unlock(s);
            return true;
        }
        i = (i + 1) & mask;
    }
    s->slots[i] = *rec;
    s->count++;
    tl_count_row(&s->counts, rec, 1, fresh);
    shard_unlock(s);
    return true;
}

/* Backward-shift deletion: closes the hole so every probe chain stays whole. */
static void delete_at(struct shard *s, size_t i)
{
    size_t mask = s->cap - 1;
    size_t j = i;
    for (;;) {
        j = (j + 1) & mask;
        if (empty(&s->slots[j]))
            break;
        size_t home = mix(s->slots[j].space, s->slots[j].addr) & mask;
        /* Move j back into the hole at i unless its home lies in (i, j]. */
        bool in_between = (i <= j) ? (home > i && home <= j) : (home > i || home <= j);
        if (in_between)
            continue;
        s->slots[i] = s->slots[j];
        i = j;
    }
    memset(&s->slots[i], 0, sizeof s->slots[i]);
    s->count--;
}

static long find(struct shard *s, uint64_t h, uint8_t space, uint64_t addr)
{
    if (!s->cap)
        return -1;
    size_t mask = s->cap - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
        if (empty(&s->slots[i]))
            return -1;
        if (same(&s->slots[i], space, addr))
            return (long)i;
    }
}

int tl_live_take(uint8_t space, uint64_t addr, unsigned kinds_mask, struct tl_live *out)
{
    uint64_t h = mix(space, addr);
    struct shard *s = shard_of(h);
    shard_lock(s);
    long i = find(s, h, space, addr);
    int rc = 0;
    if (i >= 0) {
        *out = s->slots[i];
        rc = -1;
        if (kinds_mask & (1u << s->slots[i].kind)) {
            tl_count_row(&s->counts, out, -1, false);
            delete_at(s, (size_t)i);
            rc = 1;
        }
    }
    shard_unlock(s);
    return rc;
}

struct tl_shard_counts *tl_live_counts_of(const struct tl_live *rec)
{
    return &shard_of(mix(rec->space, rec->addr))->counts;
}

static __thread bool holding_all TL_TLS_IE; /* this thread is inside lock_all */

static void fold(void)
{
    struct tl_shard_counts *c[NSHARDS];
    for (unsigned k = 0; k < NSHARDS; k++)
        c[k] = &shards[k].counts;
    tl_counts_fold_locked(c, NSHARDS);
}

void tl_live_fold(void)
{
    if (holding_all) {
        fold();
        return;
    }
    tl_live_lock_all();
    tl_live_unlock_all();
}

bool tl_live_lookup(uint8_t space, uint64_t addr, struct tl_live *out)
{
    uint64_t h = mix(space, addr);
    struct shard *s = shard_of(h);
    shard_lock(s);
    long i = find(s, h, space, addr);
    if (i >= 0 && out)
        *out = s->slots[i];
    shard_unlock(s);
    return i >= 0;
}

bool tl_live_set_aux(uint8_t space, uint64_t addr, uint32_t aux)
{
    uint64_t h = mix(space, addr);
    struct shard *s = shard_of(h);
    shard_lock(s);
    long i = find(s, h, space, addr);
    if (i >= 0)
        s->slots[i].aux = aux;
    shard_unlock(s);
    return i >= 0;
}

/* Both fold the per-shard totals: on locking, so that the holder reads
 * totals that agree with the rows; on unlocking, to publish what the holder
 * changed (a teardown dropping rows). */
void tl_live_lock_all(void)
{
    for (unsigned i = 0; i < NSHARDS; i++)
        shard_lock(&shards[i]);
    holding_all = true;
    fold();
}

void tl_live_unlock_all(void)
{
    fold();
    holding_all = false;
    for (unsigned i = NSHARDS; i-- > 0;)
        shard_unlock(&shards[i]);
}

/* Callers hold every shard lock (tl_live_lock_all). */
void tl_live_foreach(bool (*fn)(const struct tl_live *, void *), void *arg)
{
    for (unsigned k = 0; k < NSHARDS; k++) {
        struct shard *s = &shards[k];
        for (size_t i = 0; i < s->cap;) {
            if (!empty(&s->slots[i]) && fn(&s->slots[i], arg)) {
                /* The shift may move a not-yet-visited row into slot i (from a
                 * later slot) — or, at the wrap-around, one already visited
                 * from the front; the latter is harmless for our callers
                 * because fn is idempotent on rows it keeps. */
                delete_at(s, i);
                continue;
            }
            i++;
        }
    }
}

long long tl_live_sum_count(void)
{
    long long n = 0;
    for (unsigned k = 0; k < NSHARDS; k++)
        n += __atomic_load_n(&shards[k].counts.live_count, __ATOMIC_RELAXED);
    return n;
}

long long tl_live_sum_device_bytes(int device)
{
    long long n = 0;
    if (device < 0 || device >= TL_MAX_DEVICES)
        return 0;
    for (unsigned k = 0; k < NSHARDS; k++)
        n += __atomic_load_n(&shards[k].counts.device_bytes[device], __ATOMIC_RELAXED);
    return n;
}

size_t tl_live_count(void)
{
    size_t n = 0;
    for (unsigned k = 0; k < NSHARDS; k++)
        n += __atomic_load_n(&shards[k].count, __ATOMIC_RELAXED);
    return n;
}

size_t tl_live_memory_bytes(void)
{
    size_t n = sizeof shards;
    for (unsigned k = 0; k < NSHARDS; k++)
        n += __atomic_load_n(&shards[k].cap, __ATOMIC_RELAXED) * sizeof(struct tl_live);
    return n;
}

/* After fork the child starts with no live allocations: device memory is not
 * inherited across fork, and the parent's rows must never be reported twice.
 * Only the forking thread exists in the child, so no lock is held by anyone
 * else — but one may have been held at the fork: reinitialise them. */
void tl_live_clear(void)
{
    for (unsigned k = 0; k < NSHARDS; k++) {
        struct shard *s = &shards[k];
        atomic_store_explicit(&s->lock, 0, memory_order_relaxed);
        if (s->slots)
            memset(s->slots, 0, s->cap * sizeof *s->slots);
        s->count = 0;
        memset(&s->counts, 0, sizeof s->counts);
    }
}
