/*
 * live_shard.h — the live table's shards and its hot operations, for
 * live_table.c (which owns them), tracker.c and track_hot.h (whose
 * allocation and free paths inline them, so a tracked pair makes no call
 * into the table; the hooks include track_hot.h, and through it this).
 * The data model, the locking and the one-owner protocol are described
 * atop live_table.c; nothing here is for any other file.
 */
#ifndef TL_LIVE_SHARD_H
#define TL_LIVE_SHARD_H

#include "counts.h"
#include "tl_internal.h"

/* Every declaration below is of this library (hidden): the compiler then
 * reaches its variables directly, not through the GOT. */
#pragma GCC visibility push(hidden)

#define SHARD_BITS 6
#define NSHARDS (1u << SHARD_BITS)
#define OWNER_SLOTS 64 /* threads that may hold a slot at once */

struct shard {
    atomic_int lock; /* 0 free, 1 held: shard_lock (live_table.c) */
    struct tl_live *slots;
    size_t cap; /* power of two, or 0 before the first insert */
    size_t count;
    size_t grow_at; /* cap * 4 / 5: an insert at this count grows the shard first (0 when cap is) */
    struct tl_shard_counts counts; /* tracker.c's totals for these rows */
} __attribute__((aligned(2048))); /* a power of two: a shard's address is a shift of the hash */

extern struct shard tl_shards[NSHARDS];

/* The table's owner: 0 nobody, REVOKING, or slot + 1 of the owning thread. */
extern atomic_uint tl_table_owner;
/* A slot per thread that may own the table; `busy` is set while its thread
 * is inside a section without the lock. */
struct tl_owner_slot {
    atomic_int busy; /* written by its thread only */
    bool taken;      /* under owner_lock (live_table.c) */
} __attribute__((aligned(64)));
extern struct tl_owner_slot tl_owner_slot[OWNER_SLOTS];

/* The thread's table state (struct tl_table_tls, tl_internal.h), in the
 * thread's hot block. */
#define tl_table_thread (tl_thread_hot.table)

/* The slow halves of enter and leave (live_table.c): take and drop shard
 * s's lock, ending another thread's ownership first. */
bool tl_shard_enter_locked(struct shard *s);
void tl_shard_leave_locked(struct shard *s);
/* Doubles shard s's capacity (entered); false when out of memory. */
bool tl_shard_grow(struct shard *s);

/* The owner's path into the table: this thread's busy flag, raised, when it
 * owns the table (a release store of 0 leaves), else NULL with nothing held.
 * The busy flag is raised before `owner` is read at all: a thread with a
 * slot that does not own the table only lowers it again (nobody waits on a
 * non-owner's flag), and the owner reads `owner` once. */
static inline __attribute__((always_inline)) atomic_int *tl_shard_try_own(void)
{
    unsigned token = tl_table_thread.token;
    if (TL_UNLIKELY(token == 0))
        return NULL;
    atomic_int *busy = tl_table_thread.busy;
    if (busy == NULL)
        __builtin_unreachable(); /* set with the token (take_slot) */
    atomic_store_explicit(busy, 1, memory_order_relaxed);
    atomic_signal_fence(memory_order_seq_cst); /* the revoker's membarrier orders the CPU */
    if (TL_LIKELY(atomic_load_explicit(&tl_table_owner, memory_order_relaxed) == token))
        return busy;
    atomic_store_explicit(busy, 0, memory_order_release);
    return NULL;
}

/* Enters shard s: true as the owner without the lock (leave with the same
 * value).  The owner's path is inline in every table operation. */
static inline __attribute__((always_inline)) bool tl_shard_enter(struct shard *s)
{
    return tl_shard_try_own() ? true : tl_shard_enter_locked(s);
}

static inline __attribute__((always_inline)) void tl_shard_leave(struct shard *s, bool owned)
{
    if (TL_LIKELY(owned)) {
        atomic_store_explicit(tl_table_thread.busy, 0, memory_order_release);
        return;
    }
    tl_shard_leave_locked(s);
}

static inline uint64_t tl_shard_mix(uint8_t space, uint64_t addr)
{
    /* One multiply spreads every input bit over the product's high half,
     * where the shard bits are; folding that half down gives the slot bits
     * (low) the same: allocations aligned to large powers of two do not
     * share a probe chain.  Every table operation hashes, so it stays
     * short (splitmix64's full finalizer cost three times as much). */
    uint64_t z = (addr ^ ((uint64_t)space * 0x9E3779B97F4A7C15ull)) * 0xBF58476D1CE4E5B9ull;
    return z ^ (z >> 32);
}

static inline struct shard *tl_shard_of(uint64_t h)
{
    return &tl_shards[h >> (64 - SHARD_BITS)];
}

/* tl_count_row with `owned` made a constant in each branch (`kind` is
 * rec->kind, passed apart so that a caller that knows it as a constant folds
 * the dispatch away), so each copy
 * carries only its own kind of add; device rows (cuMemAlloc, cudaMalloc:
 * nearly every row) get copies of their own with the kind's tests folded. */
static inline __attribute__((always_inline)) void tl_shard_count(struct tl_shard_counts *c, const struct tl_live *rec,
                                                                 uint8_t kind, int sign, bool fresh, bool owned,
                                                                 bool budget)
{
    if (TL_LIKELY(kind == TL_KIND_DEVICE)) {
        if (TL_LIKELY(owned))
            tl_count_kind(c, rec, TL_KIND_DEVICE, sign, fresh, true, budget);
        else
            tl_count_kind(c, rec, TL_KIND_DEVICE, sign, fresh, false, budget);
    } else if (owned) {
        tl_count_kind(c, rec, kind, sign, fresh, true, budget);
    } else {
        tl_count_kind(c, rec, kind, sign, fresh, false, budget);
    }
}

/* A row's space and kind as one 16-bit value, to compare with tl_space_kind. */
_Static_assert(offsetof(struct tl_live, kind) == offsetof(struct tl_live, space) + 1, "kind follows space");
static inline uint16_t tl_slot_space_kind(const struct tl_live *r)
{
    uint16_t v;
    __builtin_memcpy(&v, &r->space, sizeof v);
    return v;
}

static inline uint16_t tl_space_kind(uint8_t space, uint8_t kind)
{
    uint8_t b[2] = {space, kind};
    uint16_t v;
    __builtin_memcpy(&v, b, sizeof v);
    return v;
}

static inline bool tl_slot_is(const struct tl_live *r, uint8_t space, uint64_t addr)
{
    return r->addr == addr && r->space == space;
}

/* Slot state: addr 0 is empty, whatever the slot's other fields hold (a
 * removal clears only the address; an insert writes the whole row).
 * Address 0 is never a valid allocation in any space we track (handles
 * start at 1 in real drivers too), so it can mark emptiness. */
static inline bool tl_slot_empty(const struct tl_live *r)
{
    return r->addr == 0;
}

/* Backward-shift deletion: closes the hole so every probe chain stays whole. */
static inline void tl_shard_delete_at(struct shard *s, size_t i)
{
    size_t mask = s->cap - 1;
    size_t j = i;
    for (;;) {
        j = (j + 1) & mask;
        if (TL_LIKELY(tl_slot_empty(&s->slots[j])))
            break;
        size_t home = tl_shard_mix(s->slots[j].space, s->slots[j].addr) & mask;
        /* Move j back into the hole at i unless its home lies in (i, j]. */
        bool in_between = (i <= j) ? (home > i && home <= j) : (home > i || home <= j);
        if (in_between)
            continue;
        s->slots[i] = s->slots[j];
        i = j;
    }
    s->slots[i].addr = 0;
    __atomic_store_n(&s->count, s->count - 1, __ATOMIC_RELAXED);
}

/* The slot of (space, addr) in entered shard s, or -1. */
static inline long tl_shard_find(struct shard *s, uint64_t h, uint8_t space, uint64_t addr)
{
    if (!s->cap)
        return -1;
    size_t mask = s->cap - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
        if (tl_slot_empty(&s->slots[i]))
            return -1;
        if (tl_slot_is(&s->slots[i], space, addr))
            return (long)i;
    }
}

/* tl_live_add (tl_internal.h), inline for tracker.c's allocations; `kind`
 * is rec->kind (a constant where the caller knows it), `budget`
 * tl_budget_active (tl_count_kind). */
static inline __attribute__((always_inline)) bool tl_live_insert(const struct tl_live *rec, uint8_t kind, bool fresh,
                                                                 bool budget)
{
    uint64_t h = tl_shard_mix(rec->space, rec->addr);
    struct shard *s = tl_shard_of(h);
    bool owned = tl_shard_enter(s);
    /* count + 1 > cap * 4 / 5, a load factor of at most 0.8 */
    if (TL_UNLIKELY(s->count >= s->grow_at) && !tl_shard_grow(s)) {
        tl_shard_leave(s, owned);
        return false;
    }
    size_t mask = s->cap - 1;
    size_t i = h & mask;
    while (!tl_slot_empty(&s->slots[i])) {
        if (TL_UNLIKELY(tl_slot_is(&s->slots[i], rec->space, rec->addr))) {
            /* The driver handed out an address we still think is live: we
             * missed its free (an untracked path).  The new row wins, and
             * the old one leaves the totals with the table. */
            tl_count_row(&s->counts, &s->slots[i], -1, false, owned);
            s->slots[i] = *rec;
            tl_count_row(&s->counts, rec, 1, fresh, owned);
            tl_shard_leave(s, owned);
            return true;
        }
        i = (i + 1) & mask;
    }
    s->slots[i] = *rec;
    __atomic_store_n(&s->count, s->count + 1, __ATOMIC_RELAXED);
    tl_shard_count(&s->counts, rec, kind, 1, fresh, owned, budget);
    tl_shard_leave(s, owned);
    return true;
}

/* The hot removal: a device row of the memory space (kind TL_KIND_DEVICE,
 * aux 0) freed by an API whose kinds_mask allows it, no budget set, from a
 * table this thread owns; the row is copied to *out.  False, having changed
 * nothing, otherwise (the table not this thread's, no such row, another
 * kind, an aux, a device past TL_MAX_DEVICES): the caller then takes the
 * general free (tl_track_mem_free, by way of track_hot.h). */
static inline __attribute__((always_inline)) bool tl_live_remove_device_owned(uint64_t addr, struct tl_live *out)
{
    uint64_t h = tl_shard_mix(TL_SPACE_MEM, addr);
    struct shard *s = tl_shard_of(h);
    atomic_int *busy = tl_shard_try_own();
    if (TL_UNLIKELY(!busy))
        return false;
    if (TL_UNLIKELY(!s->cap))
        goto refuse;
    struct tl_live *slots = s->slots;
    size_t mask = s->cap - 1;
    size_t i = h & mask;
    /* Space and kind in one compare: a row of this address in the space but
     * of another kind is passed over, and the probe ends at an empty slot
     * (there is one row per address and space), a refusal. */
    while (!(slots[i].addr == addr && tl_slot_space_kind(&slots[i]) == tl_space_kind(TL_SPACE_MEM, TL_KIND_DEVICE))) {
        if (TL_UNLIKELY(tl_slot_empty(&slots[i])))
            goto refuse;
        i = (i + 1) & mask;
    }
    struct tl_live *row = &slots[i];
    uint64_t size = row->size;
    uint32_t callsite = row->callsite;
    uint8_t owner = row->owner, device = row->device;
    if (TL_UNLIKELY(row->aux != 0) || TL_UNLIKELY(device >= TL_MAX_DEVICES))
        goto refuse;
    /* The whole row in a few wide moves; its figures were read above. */
    __builtin_memcpy(out, row, sizeof *out);
    tl_shard_delete_at(s, i);
    tl_count_figures(&s->counts, NULL, TL_KIND_DEVICE, size, callsite, owner, 0, device, -1, false, true, false, false);
    atomic_store_explicit(busy, 0, memory_order_release);
    return true;
refuse:
    atomic_store_explicit(busy, 0, memory_order_release);
    return false;
}

/* tl_live_take (tl_internal.h), inline for tracker.c's frees; `budget` as
 * for tl_live_insert. */
static inline __attribute__((always_inline)) int tl_live_remove(uint8_t space, uint64_t addr, unsigned kinds_mask,
                                                                struct tl_live *out, bool budget)
{
    uint64_t h = tl_shard_mix(space, addr);
    struct shard *s = tl_shard_of(h);
    bool owned = tl_shard_enter(s);
    long i = tl_shard_find(s, h, space, addr);
    int rc = 0;
    if (TL_LIKELY(i >= 0)) {
        *out = s->slots[i];
        rc = -1;
        if (TL_LIKELY(kinds_mask & (1u << out->kind))) {
            /* The hole closed first, while the probe's shard fields are
             * still at hand; the totals count the row from *out. */
            tl_shard_delete_at(s, (size_t)i);
            tl_shard_count(&s->counts, out, out->kind, -1, false, owned, budget);
            rc = 1;
        }
    }
    tl_shard_leave(s, owned);
    return rc;
}

#pragma GCC visibility pop

#endif
