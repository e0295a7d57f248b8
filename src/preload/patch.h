/*
 * patch.h — trampolines for driver entry points (patch.c), used by attach.c.
 */
#ifndef TL_PATCH_H
#define TL_PATCH_H

#include <stdbool.h>
#include <stddef.h>

#include "tensorleak_attach.h"

/* Bytes one entry needs in the arena: the stub to the hook, the trampoline. */
#define TL_PATCH_SLOT 80

/* size bytes, read-write, within 1 GiB of `anchor` (the driver's load
 * address); NULL when no room is free there. */
void *tl_patch_arena_near(const void *anchor, size_t size);

/* Builds the stub and trampoline of `entry` in `slot` (TL_PATCH_SLOT bytes of
 * the arena, writable now) and the patch that sends `entry` to `hook`;
 * *trampoline is where the hook's real function now starts.  False with the
 * reason in `why` when the entry's first instructions cannot be moved;
 * nothing is changed anywhere then. */
bool tl_patch_build(void *entry, void *hook, unsigned char *slot, struct tensorleak_patch *out, void **trampoline,
                    char *why, size_t whylen);

#endif
