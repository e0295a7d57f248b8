/*
 * track_hot.h — the tracker's hot path, inline in the hooks of the calls
 * that nearly every allocation and free goes through (cuMemAlloc, cuMemFree,
 * cudaMalloc, cudaFree): a device row into, or out of, a live table the
 * calling thread owns, while nothing asks for the general path.  Inline
 * because a pair's whole cost is a few hundred instructions, and a call into
 * tracker.c with its own frame was a tenth of them (bench/instructions.py).
 *
 * Each function either does the whole record and says so, or does nothing
 * and says so: the hook then calls the general entry point named beside it,
 * which decides everything again.  The policy stays tracker.c's; this file
 * only has the one case that needs no decision.
 */
#ifndef TL_TRACK_HOT_H
#define TL_TRACK_HOT_H

#include "live_shard.h"
#include "record.h"
#include "tl_internal.h"

#pragma GCC visibility push(hidden)

/* While the process has one device and has shown one context (tracker.c,
 * "one context"): that context's device | its index << 8, with
 * TL_SINGLE_USED once the device holds bytes (tl_device_used); else 0. */
extern atomic_int tl_single_context;
#define TL_SINGLE_USED (1 << 16)

/* The general path of an allocation whose call site and context (encoded as
 * tl_single_context's) the hot path found already (tracker.c): so that a
 * refusal after the stack walk does not walk again. */
void tl_track_device_alloc_at(uint64_t addr, uint64_t size, struct tl_callsite *cs, int context);

/* A device row of the memory space (kind TL_KIND_DEVICE, no aux) in
 * `context` (device | index << 8 | TL_SINGLE_USED: its device holds bytes
 * already) while hot() holds (tracker.c): into a table the thread owns, or
 * else by tl_track_device_alloc_at.  Its probe and row are written out
 * rather than shared with tl_live_insert (live_shard.h): through one shared
 * probe a pair cost 22 instructions more (bench/instructions.py), GCC
 * keeping less in registers. */
static inline __attribute__((always_inline)) void tl_track_device_alloc_in(uint64_t addr, uint64_t size, int context)
{
    struct tl_callsite *cs = atomic_load_explicit(&tl_hot_device_site, memory_order_acquire);
    unsigned owner;
    if (TL_LIKELY(cs != NULL)) {
        owner = atomic_load_explicit(&cs->owner, memory_order_relaxed);
    } else {
        cs = tl_opt.depth == 0 ? tl_callsite_empty(TL_KIND_DEVICE) : tl_stack_site(TL_KIND_DEVICE, tl_opt.depth);
        if (TL_UNLIKELY(!cs) || TL_UNLIKELY((owner = atomic_load_explicit(&cs->owner, memory_order_relaxed)) == 0))
            goto general;
    }
    if (owner == 0)
        __builtin_unreachable(); /* decided (tl_hot_device_site is published with its owner) */
    uint32_t callsite = cs->id;
    if (callsite == 0)
        __builtin_unreachable(); /* call sites are numbered from 1 (callsite.c) */
    uint8_t device = (uint8_t)context;
    if (device >= TL_MAX_DEVICES)
        __builtin_unreachable(); /* tracker.c trusts a context of a device below TL_MAX_DEVICES only */
    uint64_t h = tl_shard_mix(TL_SPACE_MEM, addr);
    struct shard *s = tl_shard_of(h);
    atomic_int *busy = tl_shard_try_own();
    if (TL_UNLIKELY(!busy))
        goto general;
    if (TL_UNLIKELY(s->count >= s->grow_at))
        goto refuse;
    struct tl_live *slots = s->slots;
    size_t mask = s->cap - 1;
    size_t i = h & mask;
    if (TL_UNLIKELY(!tl_slot_empty(&slots[i]))) {
        /* Written as a loop after a first test, the free slot's usual case
         * takes no jump into the loop. */
        do {
            if (TL_UNLIKELY(tl_slot_is(&slots[i], TL_SPACE_MEM, addr)))
                goto refuse;
            i = (i + 1) & mask;
        } while (!tl_slot_empty(&slots[i]));
    }
    /* The owner's thread has its id from when it took its slot (live_table.c). */
    slots[i] = (struct tl_live){.addr = addr,
                                .size = size,
                                .callsite = callsite,
                                .tid = tl_table_thread.tid,
                                .space = TL_SPACE_MEM,
                                .kind = TL_KIND_DEVICE,
                                .device = device,
                                .ctx = (uint8_t)(context >> 8),
                                .owner = (uint8_t)owner};
    __atomic_store_n(&s->count, s->count + 1, __ATOMIC_RELAXED);
    tl_count_figures(&s->counts, NULL, TL_KIND_DEVICE, size, callsite, (uint8_t)owner, 0, device, 1, true, true, false,
                     false /* the device is used already: TL_SINGLE_USED */);
    atomic_store_explicit(busy, 0, memory_order_release);
    return;
refuse:
    atomic_store_explicit(busy, 0, memory_order_release);
general:
    tl_track_device_alloc_at(addr, size, cs, context);
}

/* A successful cuMemAlloc-like device allocation (kind TL_KIND_DEVICE,
 * space TL_SPACE_MEM, no aux, the current context's device): recorded, and
 * true; or false with nothing done, when the hook calls
 * tl_track_device_alloc. */
static inline __attribute__((always_inline)) bool tl_track_device_alloc_hot(uint64_t addr, uint64_t size)
{
    /* tl_slow_paths clear: tracking (TL_SLOW_INACTIVE), and no family waits. */
    if (TL_UNLIKELY(atomic_load_explicit(&tl_slow_paths, memory_order_relaxed) != 0) || TL_UNLIKELY(tl_oom_pending) ||
        TL_UNLIKELY(addr == 0))
        return false;
    /* One context, and its device marked used: nothing to decide. */
    int single = atomic_load_explicit(&tl_single_context, memory_order_acquire);
    if (TL_UNLIKELY(!(single & TL_SINGLE_USED)))
        return false;
    tl_track_device_alloc_in(addr, size, single);
    return true;
}

/* A free through an API whose kinds include device rows (cuMemFree,
 * cudaFree) of a device row with no aux: removed, copied to *out, and true;
 * or false with nothing done, when the hook calls tl_track_mem_free. */
static inline __attribute__((always_inline)) bool tl_track_mem_free_hot(uint64_t addr, struct tl_live *out)
{
    if (TL_UNLIKELY(atomic_load_explicit(&tl_slow_paths, memory_order_relaxed) != 0))
        return false;
    return tl_live_remove_device_owned(addr, out);
}

#pragma GCC visibility pop

#endif
