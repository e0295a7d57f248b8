/*
 * counts.h — tracker.c's bookkeeping of one row entering or leaving the live
 * table.  It runs inside the table's critical section (live_table.c) on every
 * allocation and free, so it is inline there; the policy is tracker.c's.
 */
#ifndef TL_COUNTS_H
#define TL_COUNTS_H

#include "tl_internal.h"

/* Every declaration below is of this library (hidden): the compiler then
 * reaches its variables directly, not through the GOT. */
#pragma GCC visibility push(hidden)

/* Hands a per-shard call-site slot's deltas to the call site (tracker.c). */
void tl_flush_site(struct tl_shard_site *s);
/* Device d holds bytes for the first time (tl_device_used just set): the
 * one-context shortcut may now take the hot path (tracker.c). */
void tl_single_device_used(unsigned d);

static inline void tl_raise_peak(atomic_llong *peak, long long now)
{
    long long p = atomic_load_explicit(peak, memory_order_relaxed);
    while (TL_UNLIKELY(now > p) && !atomic_compare_exchange_weak(peak, &p, now))
        ;
}

/* The exclusive version: nobody else writes the peak. */
static inline void tl_raise_peak_exclusive(atomic_llong *peak, long long now)
{
    if (now > atomic_load_explicit(peak, memory_order_relaxed))
        atomic_store_explicit(peak, now, memory_order_relaxed);
}

/* A row's figures into its call site's slot of the shard (counts of the
 * slot's own call site; tl_count_figures hands a slot that holds another
 * over first).  Address space adds no bytes: a call site's live bytes are
 * what growth compares at each mark (growth.c). */
static inline __attribute__((always_inline)) void tl_site_add(struct tl_shard_site *s, uint8_t kind, long long bytes,
                                                              int sign, bool fresh)
{
    s->bytes += tl_is_address_space(kind) ? 0 : bytes;
    s->count += sign;
    s->allocs += fresh;
}

/* A per-shard total: the shard lock is held (or the table owned), so
 * load+add+store is exact; the relaxed atomic accesses (plain moves) let
 * readers sum without it. */
static inline void tl_shard_add(long long *x, long long d)
{
    __atomic_store_n(x, __atomic_load_n(x, __ATOMIC_RELAXED) + d, __ATOMIC_RELAXED);
}

/* A row entering (bytes > 0) or leaving the live table, inside its critical
 * section (tl_count_row, live_table.c): its owner's running live bytes and,
 * when they grew (`entering`), their peak.  Address space counts in none,
 * nor a row of no owner.  Inline: it runs on every allocation and free.
 * `owner` and `aux` are the row's (rec, which is read only for a device row
 * with an aux, may be NULL when aux is 0). */
static inline __attribute__((always_inline)) void tl_owner_count(const struct tl_live *rec, uint8_t kind, uint8_t owner,
                                                                 uint32_t aux, long long bytes, bool entering,
                                                                 bool exclusive)
{
    if (tl_is_address_space(kind))
        return;
    /* Only a device row's aux can mark it held by a pool (pools.c). */
    unsigned o = owner;
    if (TL_UNLIKELY(kind == TL_KIND_DEVICE && aux)) {
        tl_row_owner_fn held = atomic_load_explicit(&tl_held_row_owner, memory_order_acquire);
        if (held)
            o = (unsigned)(held(rec) + 1);
    }
    if (o > TL_MAX_OWNERS)
        __builtin_unreachable(); /* owner bytes and held() answer owner indexes */
    /* A row of no owner counts into the sink, [0]: no test. */
    struct tl_owner_running *r = &tl_owner_figures[o];
    long long now;
    if (exclusive) {
        now = atomic_load_explicit(&r->live, memory_order_relaxed) + bytes;
        atomic_store_explicit(&r->live, now, memory_order_relaxed);
    } else {
        now = atomic_fetch_add_explicit(&r->live, bytes, memory_order_relaxed) + bytes;
    }
    if (entering) {
        if (exclusive)
            tl_raise_peak_exclusive(&r->peak, now);
        else
            tl_raise_peak(&r->peak, now);
    }
}

static inline __attribute__((always_inline)) void tl_owner_count_row(const struct tl_live *rec, long long bytes,
                                                                     bool exclusive)
{
    tl_owner_count(rec, rec->kind, rec->owner, rec->aux, bytes, bytes > 0, exclusive);
}

/* Adds (sign +1) or drops (-1) a row to/from the totals; the caller holds
 * the lock of the shard that owns `c`, or owns the table (`exclusive`: no
 * other thread changes any total, so plain adds do).  The row's figures come
 * apart from the row (kind, size, callsite, owner, aux, device: rec's, which
 * tl_owner_count reads only for a device row with an aux), so that a caller
 * that knows some as constants, or has them in registers, gets a copy with
 * their tests folded away; `budget` is tl_budget_active, read by the caller
 * (the hot path knows it false); `mark_used` false for a caller that knows
 * tl_device_used[device] set already.  A caller that has counted the call
 * site itself (tl_site_add) passes callsite 0. */
static inline __attribute__((always_inline)) void tl_count_figures(struct tl_shard_counts *c, const struct tl_live *rec,
                                                                   uint8_t kind, uint64_t size, uint32_t callsite,
                                                                   uint8_t owner, uint32_t aux, uint8_t device,
                                                                   int sign, bool fresh, bool exclusive, bool budget,
                                                                   bool mark_used)
{
    long long bytes = sign * (long long)size;
    if (fresh)
        c->total_allocs++;
    if (callsite) {
        struct tl_shard_site *s = &c->site[callsite % TL_SHARD_SITES];
        if (TL_UNLIKELY(s->id != callsite)) {
            if (s->id)
                tl_flush_site(s);
            s->id = callsite;
        }
        tl_site_add(s, kind, bytes, sign, fresh);
    }
    tl_owner_count(rec, kind, owner, aux, bytes, sign > 0, exclusive); /* the owner's running peak, as the process's below */
    if (!tl_holds_memory(kind) || kind == TL_KIND_POOL_BLOCK)
        return; /* pool blocks live inside segments already counted */
    if (kind == TL_KIND_ASYNC)
        atomic_fetch_add_explicit(&tl_stats.async_live_bytes, bytes, memory_order_relaxed);
    /* The one shared read-modify-write: process live bytes, for an exact
     * peak (a plain add for the table's owner, live_table.c).  The rest are this
     * shard's, changed under its lock. */
    long long now;
    if (exclusive) {
        now = atomic_load_explicit(&tl_stats.live_bytes, memory_order_relaxed) + bytes;
        atomic_store_explicit(&tl_stats.live_bytes, now, memory_order_relaxed);
    } else {
        now = atomic_fetch_add_explicit(&tl_stats.live_bytes, bytes, memory_order_relaxed) + bytes;
    }
    if (sign > 0) {
        if (exclusive)
            tl_raise_peak_exclusive(&tl_stats.peak_live_bytes, now);
        else
            tl_raise_peak(&tl_stats.peak_live_bytes, now);
    }
    if (device < TL_MAX_DEVICES && kind != TL_KIND_HOST_PINNED) {
        unsigned d = device;
        c->device_count[d] += sign;
        tl_shard_add(&c->device_bytes[d], bytes);
        if (mark_used && sign > 0 && bytes > 0 &&
            TL_UNLIKELY(!atomic_load_explicit(&tl_device_used[d], memory_order_relaxed))) {
            atomic_store(&tl_device_used[d], true);
            tl_single_device_used(d);
        }
        if (TL_UNLIKELY(budget)) {
            /* budget.c reads the device's bytes on every allocation. */
            struct tl_device_stats *ds = &tl_stats.device[d];
            long long dn = atomic_fetch_add_explicit(&ds->live_bytes, bytes, memory_order_relaxed) + bytes;
            if (sign > 0)
                tl_raise_peak(&ds->peak_bytes, dn);
        }
    } else {
        c->other_count += sign;
    }
}

/* tl_count_figures of a row (`kind` apart: see there). */
static inline __attribute__((always_inline)) void tl_count_kind(struct tl_shard_counts *c, const struct tl_live *rec,
                                                                uint8_t kind, int sign, bool fresh, bool exclusive,
                                                                bool budget)
{
    tl_count_figures(c, rec, kind, rec->size, rec->callsite, rec->owner, rec->aux, rec->device, sign, fresh, exclusive,
                     budget, true);
}

static inline __attribute__((always_inline)) void tl_count_row(struct tl_shard_counts *c, const struct tl_live *rec,
                                                               int sign, bool fresh, bool exclusive)
{
    tl_count_kind(c, rec, rec->kind, sign, fresh, exclusive,
                  atomic_load_explicit(&tl_budget_active, memory_order_relaxed));
}

#pragma GCC visibility pop

#endif
