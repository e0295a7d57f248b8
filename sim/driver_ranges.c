/*
 * driver_ranges.c — a first-fit allocator over one address range.
 *
 * Used for each device's memory, for each stream-ordered pool chunk and for the
 * VMM reservation space.  The free list is an array of extents sorted by start
 * address and kept coalesced (no two extents touch), so "largest free block"
 * and "no contiguous range fits" are exact: fragmentation in the simulator is
 * real fragmentation.  First fit (lowest address that fits) rather than best
 * fit: it is what simple device allocators do, and it makes addresses
 * predictable for tests (allocations fill the range from the bottom).
 */
#include <stdlib.h>
#include <string.h>

#include "simcuda.h"

static int ranges_reserve(struct sim_ranges *r, size_t need)
{
    if (need <= r->cap)
        return 0;
    size_t cap = r->cap ? r->cap * 2 : 16;
    while (cap < need)
        cap *= 2;
    struct sim_extent *e = realloc(r->ext, cap * sizeof *e);
    if (!e)
        return -1;
    r->ext = e;
    r->cap = cap;
    return 0;
}

static int ranges_insert(struct sim_ranges *r, size_t at, uint64_t start, uint64_t len)
{
    if (ranges_reserve(r, r->n + 1) != 0)
        return -1;
    memmove(&r->ext[at + 1], &r->ext[at], (r->n - at) * sizeof r->ext[0]);
    r->ext[at].start = start;
    r->ext[at].len = len;
    r->n++;
    return 0;
}

static void ranges_remove(struct sim_ranges *r, size_t at)
{
    memmove(&r->ext[at], &r->ext[at + 1], (r->n - at - 1) * sizeof r->ext[0]);
    r->n--;
}

/* Returns 0, or -1 when the bookkeeping array cannot be allocated. */
int sim_ranges_init(struct sim_ranges *r, uint64_t base, uint64_t size)
{
    memset(r, 0, sizeof *r);
    r->base = base;
    r->size = size;
    if (size == 0)
        return 0;
    if (ranges_insert(r, 0, base, size) != 0)
        return -1;
    r->free_bytes = size;
    return 0;
}

void sim_ranges_fini(struct sim_ranges *r)
{
    free(r->ext);
    memset(r, 0, sizeof *r);
}

/* Takes [start, start + len) out of free extent i, which must contain it. */
static int ranges_take(struct sim_ranges *r, size_t i, uint64_t start, uint64_t len)
{
    struct sim_extent e = r->ext[i];
    uint64_t head = start - e.start;
    uint64_t tail = e.start + e.len - (start + len);
    if (head && tail) {
        /* Splitting one extent in two needs a slot: get it before changing
         * anything so failure leaves the list intact. */
        if (ranges_insert(r, i + 1, start + len, tail) != 0)
            return -1;
        r->ext[i].len = head;
    } else if (head) {
        r->ext[i].len = head;
    } else if (tail) {
        r->ext[i].start = start + len;
        r->ext[i].len = tail;
    } else {
        ranges_remove(r, i);
    }
    r->free_bytes -= len;
    return 0;
}

/* First fit: the lowest address aligned to `align` (a power of two) with
 * `size` free bytes after it.  Returns the address, or 0 when no contiguous
 * range fits (0 is never inside a range: all bases are far above it). */
uint64_t sim_ranges_alloc(struct sim_ranges *r, uint64_t size, uint64_t align)
{
    if (size == 0 || size > r->free_bytes)
        return 0;
    for (size_t i = 0; i < r->n; i++) {
        uint64_t start = sim_align_up(r->ext[i].start, align);
        uint64_t end = r->ext[i].start + r->ext[i].len;
        if (start < end && end - start >= size)
            return ranges_take(r, i, start, size) == 0 ? start : 0;
    }
    return 0;
}

/* Allocates exactly [addr, addr + size).  Returns 0, or -1 when any byte of it
 * is not free. */
int sim_ranges_alloc_at(struct sim_ranges *r, uint64_t addr, uint64_t size)
{
    for (size_t i = 0; i < r->n; i++) {
        const struct sim_extent *e = &r->ext[i];
        if (addr >= e->start && addr - e->start <= e->len && e->start + e->len - addr >= size)
            return size ? ranges_take(r, i, addr, size) : 0;
        if (e->start > addr)
            break;
    }
    return -1;
}

/* Returns [addr, addr + size) to the free list, merging with its neighbours.
 * The caller guarantees the range was allocated (the simulator's tables are
 * the authority on what is live). */
void sim_ranges_free(struct sim_ranges *r, uint64_t addr, uint64_t size)
{
    if (size == 0)
        return;
    size_t i = 0;
    while (i < r->n && r->ext[i].start < addr)
        i++;
    int merge_prev = i > 0 && r->ext[i - 1].start + r->ext[i - 1].len == addr;
    int merge_next = i < r->n && addr + size == r->ext[i].start;
    if (merge_prev && merge_next) {
        r->ext[i - 1].len += size + r->ext[i].len;
        ranges_remove(r, i);
    } else if (merge_prev) {
        r->ext[i - 1].len += size;
    } else if (merge_next) {
        r->ext[i].start = addr;
        r->ext[i].len += size;
    } else if (ranges_insert(r, i, addr, size) != 0) {
        /* Out of host memory for bookkeeping: the range stays unusable, which
         * is a leak inside the simulator, never a double allocation. */
        return;
    }
    r->free_bytes += size;
}

uint64_t sim_ranges_largest(const struct sim_ranges *r)
{
    uint64_t best = 0;
    for (size_t i = 0; i < r->n; i++)
        if (r->ext[i].len > best)
            best = r->ext[i].len;
    return best;
}

/* Whether no byte of [addr, addr + len) is free: a binary search for the
 * first free extent ending after addr, which must start at or after the end. */
int sim_ranges_is_allocated(const struct sim_ranges *r, uint64_t addr, uint64_t len)
{
    size_t lo = 0, hi = r->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (r->ext[mid].start + r->ext[mid].len <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo == r->n || r->ext[lo].start >= addr + len;
}
