/*
 * epoch.c — live bytes per call site, cheaply, for a caller that compares
 * two moments of its own (the pytest plugin: a test's start and its end).
 *
 * tensorleak_site_bytes() copies the call sites' own counters (folded from
 * the shards first): no stack is symbolized and no report is written, so it
 * costs microseconds where a snapshot costs the symbolization of every live
 * stack (tens of milliseconds in a Python process).  The ids are the
 * reports' "site" field (report_build.c), so a caller that sees a site rise
 * takes one snapshot and finds the site's stack and owner there.
 */
#include "tl_internal.h"

struct site_rows {
    uint64_t *rows;
    long max;
    long n;
};

static void add_row(struct tl_callsite *cs, void *arg)
{
    struct site_rows *r = arg;
    long long bytes = atomic_load_explicit(&cs->live_bytes, memory_order_relaxed);
    long long count = atomic_load_explicit(&cs->live_count, memory_order_relaxed);
    if (bytes <= 0 && count <= 0)
        return;
    if (r->n < r->max) {
        r->rows[3 * r->n] = cs->id;
        r->rows[3 * r->n + 1] = bytes > 0 ? (uint64_t)bytes : 0;
        r->rows[3 * r->n + 2] = count > 0 ? (uint64_t)count : 0;
    }
    r->n++;
}

/* Fills up to `max_rows` rows of three values, (call-site id, live bytes,
 * live allocations), one per call site that holds live allocations, and
 * returns how many such sites there are: more than `max_rows` means the
 * buffer was short (call again with a bigger one).  -1 when not tracking
 * (before init, after the exit report, or a bad argument).  The client
 * API's tensorleak_site_bytes (api.c) starts the library first. */
long tl_site_bytes(uint64_t *rows, long max_rows)
{
    if (!atomic_load(&tl_active) || max_rows < 0 || (max_rows > 0 && !rows))
        return -1;
    struct site_rows r = {rows, max_rows, 0};
    tl_callsite_foreach(add_row, &r);
    return r.n;
}
