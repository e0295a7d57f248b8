/*
 * owners.h — the owner decision as the allocation path meets it
 * (tracker.c): inline, one load once a call site's owner is decided.  The
 * rest of owners.c's interface is in tl_internal.h.
 */
#ifndef TL_OWNERS_H
#define TL_OWNERS_H

#include "tl_internal.h"

/* The owner index of a call site whose row is about to enter the live
 * table, decided once (-1: no call site). */
static inline int tl_owner_prepare(struct tl_callsite *cs)
{
    if (!cs)
        return -1;
    int o = atomic_load_explicit(&cs->owner, memory_order_relaxed) - 1;
    if (TL_UNLIKELY(o < 0)) {
        tl_owner_decide(cs);
        o = atomic_load_explicit(&cs->owner, memory_order_relaxed) - 1;
    }
    return o;
}

#endif
