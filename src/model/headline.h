/*
 * headline.h — the first line of a text report, "N leaked device
 * allocations (X) and M leaked pinned host allocations (Y) ..." that
 * report_text.c prints, in the preload library's exit report and in
 * `tensorleak report` alike.
 *
 * Leaks are counted by what they hold, so that every count names its kind
 * truly: device memory (cuMemAlloc family, stream-ordered blocks, VMM
 * handles), pinned host memory (allocated, or the program's registered),
 * managed memory, CUDA arrays (texture memory), blocks of annotated pools;
 * VMM address ranges and mappings are address space, counted without bytes
 * (their size is said apart, after the call sites).
 */
#ifndef TENSORLEAK_HEADLINE_H
#define TENSORLEAK_HEADLINE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kinds.h"

struct tl_headline {
    long long count[TL_HEADLINE_GROUPS];
    uint64_t bytes[TL_HEADLINE_GROUPS];
    long long unknown[TL_HEADLINE_GROUPS]; /* of count, allocations of unknown size (not in bytes) */
};

/* Per group (kinds.h says which kinds are in it): its noun in the singular
 * and plural. */
static const struct {
    const char *one, *many;
} tl_headline_groups[TL_HEADLINE_GROUPS] = {
    [TL_HL_DEVICE] = {"device allocation", "device allocations"},
    [TL_HL_HOST_PINNED] = {"pinned host allocation", "pinned host allocations"},
    [TL_HL_HOST_REGISTERED] = {"registered host range", "registered host ranges"},
    [TL_HL_MANAGED] = {"managed allocation", "managed allocations"},
    [TL_HL_ARRAY] = {"CUDA array", "CUDA arrays"},
    [TL_HL_POOL_BLOCK] = {"pool block", "pool blocks"},
    [TL_HL_VMM_RESERVATION] = {"VMM address range", "VMM address ranges"},
    [TL_HL_VMM_MAPPING] = {"VMM mapping", "VMM mappings"},
    [TL_HL_IPC_MAPPING] = {"CUDA IPC mapping", "CUDA IPC mappings"},
    [TL_HL_OTHER] = {"allocation of another kind", "allocations of another kind"},
};

/* Whether group g's bytes are memory: its kinds' (a kind this tensorleak
 * does not know counts as memory). */
static inline bool tl_headline_group_memory(int g)
{
    for (int i = 0; i < TL_KIND_COUNT; i++)
        if ((int)tl_kind_rows[i].group == g)
            return tl_kind_rows[i].holds != TL_HOLDS_ADDRESS;
    return true;
}

/* Adds one leak row of `kind` (its JSON name, "device" for stream-ordered
 * blocks too; older reports say "async"); `unknown` of its `count`
 * allocations have a size the driver did not report (not in `bytes`). */
static inline void tl_headline_add(struct tl_headline *h, const char *kind, long long count, uint64_t bytes,
                                   long long unknown)
{
    const struct tl_kind_row *row = tl_kind_row_named(kind);
    int g = row ? (int)row->group : TL_HL_OTHER;
    h->count[g] += count;
    h->bytes[g] += tl_headline_group_memory(g) ? bytes : 0;
    h->unknown[g] += unknown;
}

/* Whether the rows add up to a summary's leaked allocations and bytes (a
 * report written by hand, or cut short, may list fewer). */
static inline bool tl_headline_matches(const struct tl_headline *h, long long count, uint64_t bytes)
{
    long long c = 0;
    uint64_t b = 0;
    for (int i = 0; i < TL_HEADLINE_GROUPS; i++) {
        c += h->count[i];
        b += h->bytes[i];
    }
    return c == count && b == bytes;
}

/* Writes "3 leaked device allocations (2.0 MiB) and 1 leaked pinned host
 * allocation (4.0 KiB)": the groups with leaks, in the order above, sizes
 * by `format_size` (the caller's "%.1f MiB" formatter).  A group whose
 * allocations all have unknown size says "(size unknown)"; one with some
 * "(2.0 MiB and 1 of unknown size)". */
static inline void tl_headline_print(FILE *out, const struct tl_headline *h,
                                     void (*format_size)(uint64_t bytes, char *buf, size_t len))
{
    int shown = 0, total = 0;
    for (int i = 0; i < TL_HEADLINE_GROUPS; i++)
        total += h->count[i] > 0;
    for (int i = 0; i < TL_HEADLINE_GROUPS; i++) {
        if (h->count[i] <= 0)
            continue;
        shown++;
        fputs(shown == 1 ? "" : shown == total ? " and " : ", ", out);
        fprintf(out, "%lld leaked %s", h->count[i],
                h->count[i] == 1 ? tl_headline_groups[i].one : tl_headline_groups[i].many);
        bool memory = tl_headline_group_memory(i);
        if (memory && h->unknown[i] >= h->count[i]) {
            fputs(" (size unknown)", out);
        } else if (memory) {
            char size[32];
            format_size(h->bytes[i], size, sizeof size);
            if (h->unknown[i] > 0)
                fprintf(out, " (%s and %lld of unknown size)", size, h->unknown[i]);
            else
                fprintf(out, " (%s)", size);
        }
    }
}

#endif
