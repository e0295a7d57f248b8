/*
 * record.h — the inline fast paths of the record layer that the allocation
 * path runs (tracker.c, stack.c): each reads one atomic and calls out of
 * line only the first time.  The declarations they stand on are in
 * tl_internal.h.
 */
#ifndef TL_RECORD_H
#define TL_RECORD_H

#include "tl_internal.h"

/* Every declaration below is of this library (hidden): the compiler then
 * reaches its variables directly, not through the GOT. */
#pragma GCC visibility push(hidden)

/* ---- callsite.c ---------------------------------------------------------- */
/* The call site of `kind` with no frames (TENSORLEAK_DEPTH=0): once made,
 * one load, inline on every allocation. */
extern _Atomic(struct tl_callsite *) tl_empty_site[TL_KIND_COUNT];
/* At depth 0, the device kind's empty call site once its owner is decided:
 * every device allocation's, with nothing to decide (track_hot.h).  NULL
 * before, at depth > 0, and from when owners are forgotten until the
 * tracker publishes it again (tl_callsite_publish_hot). */
extern _Atomic(struct tl_callsite *) tl_hot_device_site;
static inline void tl_callsite_publish_hot(struct tl_callsite *cs)
{
    if (tl_opt.depth == 0 && cs && cs == atomic_load_explicit(&tl_empty_site[TL_KIND_DEVICE], memory_order_relaxed) &&
        atomic_load_explicit(&cs->owner, memory_order_relaxed) != 0 &&
        TL_UNLIKELY(atomic_load_explicit(&tl_hot_device_site, memory_order_relaxed) != cs))
        atomic_store_explicit(&tl_hot_device_site, cs, memory_order_release);
}
static inline struct tl_callsite *tl_callsite_empty(enum tl_kind kind)
{
    struct tl_callsite *cs = (unsigned)kind < TL_KIND_COUNT
                                 ? atomic_load_explicit(&tl_empty_site[kind], memory_order_acquire)
                                 : NULL;
    return TL_LIKELY(cs != NULL) ? cs : tl_callsite_intern(kind, NULL, 0);
}

/* ---- pyframes.c ---------------------------------------------------------- */
/* An interpreter may be in the process (not ruled out yet). */
extern atomic_int tl_py_state;
static inline bool tl_py_maybe(void)
{
    return atomic_load_explicit(&tl_py_state, memory_order_relaxed) != 1;
}

/* ---- owners (families/owners.c decides) ---------------------------------- */
/* The owner index of a call site whose row is about to enter the live
 * table, decided once by the owner rules (-1: no call site).  After the
 * first time it is one load; the decision is an up-call because the rules
 * belong to families/. */
static inline int tl_owner_prepare(struct tl_callsite *cs)
{
    if (!cs)
        return -1;
    int o = atomic_load_explicit(&cs->owner, memory_order_relaxed) - 1;
    if (TL_UNLIKELY(o < 0)) {
        tl_upcalls.owner_decide(cs);
        o = atomic_load_explicit(&cs->owner, memory_order_relaxed) - 1;
    }
    return o;
}

#pragma GCC visibility pop

#endif
