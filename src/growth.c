/*
 * growth.c — the leak that never reaches exit.
 *
 * A server never exits, so the seed articles' test is "run the same request
 * repeatedly: a footprint that stabilises is caching, one that grows with
 * every identical request is a leak".  A mark ends an epoch (a request, a
 * signal, an interval).  At each mark every call site's live bytes are
 * compared with the previous mark; a site whose live bytes rose at each of
 * the last K marks (TENSORLEAK_GROWTH_MARKS, default 3) is growing.  A site
 * that rises then plateaus resets its streak and is not reported.
 *
 * The timeline keeps, per mark, live bytes, reserved bytes and the driver's
 * free memory (the last TL_MAX_MARKS marks; the count is kept beyond).
 */
#include "report.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TL_MAX_MARKS 4096

static pthread_mutex_t mark_lock = PTHREAD_MUTEX_INITIALIZER;
static struct tl_mark_row timeline[TL_MAX_MARKS];
static unsigned nmarks;

uint64_t tl_pools_reserved_now(void);

static void mark_site(struct tl_callsite *cs, void *arg)
{
    (void)arg;
    long long now = atomic_load_explicit(&cs->live_bytes, memory_order_relaxed);
    if (now > cs->mark_bytes) {
        if (cs->grow_streak == 0)
            cs->grow_first_bytes = cs->mark_bytes;
        cs->grow_streak++;
    } else {
        cs->grow_streak = 0;
    }
    cs->mark_bytes = now;
}

static uint64_t device_free_now(void)
{
    typedef int (*getinfo_fn)(size_t *, size_t *);
    getinfo_fn getinfo = (getinfo_fn)tl_driver_symbol("cuMemGetInfo_v2");
    size_t f = 0, t = 0;
    if (!getinfo || getinfo(&f, &t) != 0)
        return 0;
    return f;
}

void tl_mark(const char *label)
{
    if (!atomic_load(&tl_active))
        return;
    uint64_t reserved = tl_pools_reserved_now();
    uint64_t dfree = device_free_now();
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    pthread_mutex_lock(&mark_lock);
    tl_callsite_foreach(mark_site, NULL);
    struct tl_mark_row *row = &timeline[nmarks % TL_MAX_MARKS];
    memset(row, 0, sizeof *row);
    row->seq = ++nmarks;
    if (label)
        snprintf(row->label, sizeof row->label, "%s", label);
    else
        snprintf(row->label, sizeof row->label, "mark %u", row->seq);
    row->live_bytes = atomic_load(&tl_stats.live_bytes);
    row->reserved_bytes = reserved;
    row->device_free = dfree;
    row->time = (double)ts.tv_sec + ts.tv_nsec / 1e9;
    pthread_mutex_unlock(&mark_lock);
}

struct growth_collect {
    struct tl_report_model *m;
    size_t cap;
};

static void collect_site(struct tl_callsite *cs, void *arg)
{
    struct growth_collect *g = arg;
    if (cs->grow_streak < tl_opt.growth_marks)
        return;
    if (g->m->ngrowth == g->cap) {
        size_t ncap = g->cap ? g->cap * 2 : 16;
        struct tl_growth_row *n = realloc(g->m->growth, ncap * sizeof *n);
        if (!n)
            return;
        g->m->growth = n;
        g->cap = ncap;
    }
    struct tl_growth_row *row = &g->m->growth[g->m->ngrowth++];
    row->cs = cs;
    row->marks = cs->grow_streak;
    row->bytes_per_mark = (cs->mark_bytes - cs->grow_first_bytes) / cs->grow_streak;
    long long count = atomic_load(&cs->live_count);
    row->count_per_mark = cs->mark_bytes > 0 && count > 0 ? (long long)((double)count * row->bytes_per_mark / cs->mark_bytes + 0.5) : 0;
    row->suppressed = tl_suppressed(g->m, "growth", cs) != NULL;
}

static int by_rate_desc(const void *a, const void *b)
{
    const struct tl_growth_row *x = a, *y = b;
    if (x->bytes_per_mark != y->bytes_per_mark)
        return x->bytes_per_mark < y->bytes_per_mark ? 1 : -1;
    return x->cs->id < y->cs->id ? -1 : 1;
}

void tl_growth_collect(struct tl_report_model *m)
{
    pthread_mutex_lock(&mark_lock);
    struct growth_collect g = {m, 0};
    tl_callsite_foreach(collect_site, &g);
    unsigned n = nmarks < TL_MAX_MARKS ? nmarks : TL_MAX_MARKS;
    m->marks = calloc(n + 1, sizeof *m->marks);
    if (m->marks) {
        unsigned first = nmarks - n;
        for (unsigned i = 0; i < n; i++)
            m->marks[i] = timeline[(first + i) % TL_MAX_MARKS];
        m->nmarks = n;
    }
    pthread_mutex_unlock(&mark_lock);
    if (m->ngrowth > 1)
        qsort(m->growth, m->ngrowth, sizeof *m->growth, by_rate_desc);
}

void tl_growth_after_fork(void);
void tl_growth_after_fork(void)
{
    pthread_mutex_init(&mark_lock, NULL);
    nmarks = 0;
}
