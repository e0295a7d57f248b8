/*
 * pools.h — pools.c's interface where it needs CUDA types: the driver's
 * stream-ordered pools and graph memory as the hooks report them, and the
 * pools a program annotates (tensorleak_pool_create, started in api.c).
 */
#ifndef TL_POOLS_H
#define TL_POOLS_H

#include "cudart_compat.h"
#include "tl_internal.h"

/* Every declaration below is of this library (hidden): the compiler then
 * reaches its variables directly, not through the GOT. */
#pragma GCC visibility push(hidden)

/* A pool made by cuMemPoolCreate / destroyed by cuMemPoolDestroy. */
void tl_pool_note_created(CUmemoryPool pool, const CUmemPoolProps *props);
void tl_pool_note_destroyed(CUmemoryPool pool);
/* The pool index a stream-ordered allocation's row carries (its aux). */
uint32_t tl_pool_index_for_async(CUmemoryPool pool, bool from_current_device);

/* The pool index (row aux) of `device`'s graph memory (-1: the current
 * context's device); 0 when there is no room for another pool. */
uint32_t tl_pool_index_for_graph(int device);
/* Is this live row a graph allocation node (its pool is graph memory)? */
bool tl_pools_is_graph(const struct tl_live *rec);

/* A pool the program annotates (tensorleak_pool_create, after tl_init):
 * its handle, NULL when there is no room for another (counted as dropped). */
void *tl_pool_create(const char *name, int device);

#pragma GCC visibility pop

#endif
