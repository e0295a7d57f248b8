/*
 * record.h — the inline fast paths of the record layer that the allocation
 * path runs (tracker.c, stack.c): each reads one atomic and calls out of
 * line only the first time.  The declarations they stand on are in
 * tl_internal.h.
 */
#ifndef TL_RECORD_H
#define TL_RECORD_H

#include "tl_internal.h"

/* ---- callsite.c ---------------------------------------------------------- */
/* The call site of `kind` with no frames (TENSORLEAK_DEPTH=0): once made,
 * one load, inline on every allocation. */
extern _Atomic(struct tl_callsite *) tl_empty_site[TL_KIND_COUNT];
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

#endif
