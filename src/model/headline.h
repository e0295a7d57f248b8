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

enum { TL_HEADLINE_GROUPS = 10 };

struct tl_headline {
    long long count[TL_HEADLINE_GROUPS];
    uint64_t bytes[TL_HEADLINE_GROUPS];
    long long unknown[TL_HEADLINE_GROUPS]; /* of count, allocations of unknown size (not in bytes) */
};

/* Per group: the report kinds in it (space-separated), its noun in the
 * singular and plural, and whether its bytes are memory. */
static const struct {
    const char *kinds, *one, *many;
    bool memory;
} tl_headline_groups[TL_HEADLINE_GROUPS] = {
    {"device async vmm_handle", "device allocation", "device allocations", true},
    {"host_pinned", "pinned host allocation", "pinned host allocations", true},
    {"host_registered", "registered host range", "registered host ranges", true},
    {"managed", "managed allocation", "managed allocations", true},
    {"array", "CUDA array", "CUDA arrays", true},
    {"pool_block", "pool block", "pool blocks", true},
    {"vmm_reservation", "VMM address range", "VMM address ranges", false},
    {"vmm_mapping", "VMM mapping", "VMM mappings", false},
    {"ipc_mapping", "CUDA IPC mapping", "CUDA IPC mappings", false},
    {"", "allocation of another kind", "allocations of another kind", true},
};

/* Adds one leak row of `kind` (its JSON name, "device" for stream-ordered
 * blocks too; older reports say "async"); `unknown` of its `count`
 * allocations have a size the driver did not report (not in `bytes`). */
static inline void tl_headline_add(struct tl_headline *h, const char *kind, long long count, uint64_t bytes,
                                   long long unknown)
{
    size_t len = kind ? strlen(kind) : 0;
    int g = TL_HEADLINE_GROUPS - 1;
    for (int i = 0; i < TL_HEADLINE_GROUPS - 1 && g == TL_HEADLINE_GROUPS - 1; i++) {
        for (const char *k = tl_headline_groups[i].kinds; *k;) {
            size_t n = strcspn(k, " ");
            if (n == len && len && !strncmp(k, kind, n)) {
                g = i;
                break;
            }
            k += n + (k[n] == ' ');
        }
    }
    h->count[g] += count;
    h->bytes[g] += tl_headline_groups[g].memory ? bytes : 0;
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
        if (tl_headline_groups[i].memory && h->unknown[i] >= h->count[i]) {
            fputs(" (size unknown)", out);
        } else if (tl_headline_groups[i].memory) {
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
