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
 * free memory, unknown when the driver did not answer (the last
 * TL_MAX_MARKS marks; the count is kept beyond).
 *
 * Growth where the leak lives (caching allocators).  A cache takes its next
 * segment from whichever operation runs out, so no single call stack grows
 * mark after mark, and what the program leaks is inside the cache, where
 * only the framework sees it.  So besides call sites, growth.c follows
 * series: each framework pool's allocated bytes (from the Python bridge),
 * each owner class's reserved bytes (cache, workspace, library: what call
 * sites cannot pin down; user memory stays with its call sites, so C
 * programs' reports are unchanged), and each Python allocation site the
 * framework names (PyTorch blocks with history frames).  A cache grows in
 * steps — a 20 MiB segment this request, none the next — so the test is on
 * records, not on every mark: a series grows when it set a new high (by at
 * least TL_SERIES_MIN_STEP) K times (TENSORLEAK_GROWTH_MARKS), and it has been
 * flat since its last high for no longer than the longest gap between those
 * K highs.  Steady or stepwise growth keeps setting highs as often as it did
 * (an odd flat step is within the gap); a warm-up followed by a plateau stops
 * setting them and is not growth once the plateau outlasts the warm-up's
 * longest step.
 */
#include "counts.h"
#include "report_gather.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TL_MAX_MARKS 4096

static pthread_mutex_t mark_lock = PTHREAD_MUTEX_INITIALIZER;
static struct tl_series *series; /* pools, owner classes, Python sites */
static size_t nseries, capseries;
static struct tl_mark_row timeline[TL_MAX_MARKS];
static unsigned nmarks;


/* ---- series (pure: unit-tested on the H200 fixtures) -------------------- */

void tl_series_observe(struct tl_series *s, unsigned seq, long long value, long long min_step)
{
    if (s->observed == 0) {
        s->first_mark = seq;
        s->first_value = s->max = value;
    } else if (value >= s->max + min_step) {
        /* A second figure under this key at the same mark (two pools named
         * alike, a state read twice between marks) is the same observation:
         * no second high at one mark, so highs are at distinct marks after
         * the first one and a run of growth never spans 0 marks. */
        if (seq == s->first_mark) {
            s->first_value = s->max = value;
            s->last = value;
            return;
        }
        if (s->nrec && s->rec_mark[(s->nrec - 1) % TL_SERIES_KEEP] == seq) {
            s->max = s->last = value;
            return;
        }
        s->rec_mark[s->nrec % TL_SERIES_KEEP] = seq;
        s->rec_before[s->nrec % TL_SERIES_KEEP] = s->max;
        s->nrec++;
        s->max = value;
    }
    s->last = value;
    s->last_mark = seq;
    s->observed++;
}

bool tl_series_growing(const struct tl_series *s, unsigned now, int k, struct tl_series_verdict *v)
{
    if (k < 1 || (unsigned)k >= TL_SERIES_KEEP || s->nrec < (unsigned)k)
        return false;
    unsigned first = s->nrec - (unsigned)k, last = s->nrec - 1;
    /* The mark before the first of the K highs' own gap starts: the
     * previous high, or the first observation. */
    unsigned start = first > 0 ? s->rec_mark[(first - 1) % TL_SERIES_KEEP] : s->first_mark;
    unsigned prev = start, maxgap = 0;
    for (unsigned i = first; i <= last; i++) {
        unsigned m = s->rec_mark[i % TL_SERIES_KEEP];
        if (m - prev > maxgap)
            maxgap = m - prev;
        prev = m;
    }
    unsigned last_high = s->rec_mark[last % TL_SERIES_KEEP];
    /* Quiet for as long as its longest step took: still growing (a cache
     * that takes a segment every other request); longer: a plateau. */
    if (now < last_high || now - last_high > maxgap)
        return false;
    /* The run of growth reaches back over every earlier high that came at
     * the same pace: its rate and length are the whole run's. */
    while (first > 0 && s->nrec - first < TL_SERIES_KEEP - 1) {
        unsigned before = first > 1 ? s->rec_mark[(first - 2) % TL_SERIES_KEEP] : s->first_mark;
        if (s->rec_mark[(first - 1) % TL_SERIES_KEEP] - before > maxgap)
            break;
        first--;
        start = before;
    }
    if (last_high == start) /* marks given out of order: no span to divide by */
        return false;
    if (v) {
        long long before = s->rec_before[first % TL_SERIES_KEEP];
        v->marks = (int)(now - start);
        v->bytes_per_mark = (s->max - before) / (long long)(last_high - start);
        v->from_bytes = before;
        v->to_bytes = s->max;
    }
    return true;
}

static struct tl_series *series_find_existing(int scope, const char *key)
{
    for (size_t i = 0; i < nseries; i++)
        if (series[i].scope == scope && !strcmp(series[i].key, key))
            return &series[i];
    return NULL;
}

static struct tl_series *series_find(int scope, const char *key)
{
    for (size_t i = 0; i < nseries; i++)
        if (series[i].scope == scope && !strcmp(series[i].key, key))
            return &series[i];
    if (nseries == capseries) {
        size_t ncap = capseries ? capseries * 2 : 32;
        struct tl_series *n = realloc(series, ncap * sizeof *n);
        if (!n)
            return NULL;
        series = n;
        capseries = ncap;
    }
    struct tl_series *s = &series[nseries++];
    memset(s, 0, sizeof *s);
    s->scope = scope;
    snprintf(s->key, sizeof s->key, "%s", key);
    return s;
}

/* A Python stack as a call site of Python frames (pyframes.c), so that
 * suppressions (growth:GLOB) apply to rows named by Python lines. */
static struct tl_callsite *python_callsite(json_t *stack)
{
    uintptr_t frames[TL_MAX_FRAMES];
    int n = 0;
    size_t i;
    json_t *f;
    json_array_foreach(stack, i, f) {
        if (n == TL_MAX_FRAMES)
            break;
        const char *fn = json_string_value(json_object_get(f, "function"));
        const char *file = json_string_value(json_object_get(f, "file"));
        uintptr_t v = tl_pyloc_intern_strings(fn ? fn : "??", file ? file : "??",
                                              (int)json_integer_value(json_object_get(f, "line")));
        if (!v)
            return NULL;
        frames[n++] = v;
    }
    return n ? tl_callsite_intern(TL_KIND_DEVICE, frames, n) : NULL;
}

struct observe_ctx {
    unsigned seq;
};

static void observe_pool(const char *name, const char *kind, long long allocated, void *arg)
{
    struct observe_ctx *o = arg;
    struct tl_series *s = series_find(TL_SERIES_POOL, name);
    if (!s)
        return;
    snprintf(s->kind, sizeof s->kind, "%s", kind);
    tl_series_observe(s, o->seq, allocated, TL_SERIES_MIN_STEP);
}

/* Python sites come and go with the program's stacks: past TL_MAX_SERIES
 * series, those not seen for TL_SERIES_KEEP marks make room (pools and
 * owner classes are few and stay). */
#define TL_MAX_SERIES 4096

static void forget_old_sites(unsigned now)
{
    size_t kept = 0;
    for (size_t i = 0; i < nseries; i++) {
        struct tl_series *s = &series[i];
        if (s->scope == TL_SERIES_PYSITE && s->last_mark + TL_SERIES_KEEP < now) {
            json_decref(s->stack);
            continue;
        }
        if (kept != i)
            series[kept] = *s;
        kept++;
    }
    nseries = kept;
}

static void observe_site(const char *key, const char *pool, json_t *stack, long long bytes, void *arg)
{
    struct observe_ctx *o = arg;
    if (!series_find_existing(TL_SERIES_PYSITE, key) && nseries >= TL_MAX_SERIES) {
        forget_old_sites(o->seq);
        if (nseries >= TL_MAX_SERIES)
            return;
    }
    struct tl_series *s = series_find(TL_SERIES_PYSITE, key);
    if (!s)
        return;
    snprintf(s->kind, sizeof s->kind, "%s", pool);
    if (!s->stack) {
        s->stack = json_deep_copy(stack);
        /* Interned here, at a mark, never in a report: the fatal-signal
         * report must not take pyframes.c's lock. */
        s->cs = python_callsite(stack);
    }
    tl_series_observe(s, o->seq, bytes, TL_SERIES_MIN_STEP);
}

struct site_bytes {
    struct tl_callsite *cs;
    long long bytes;
};
struct site_list {
    struct site_bytes *v;
    size_t n, cap;
};

static void list_site(struct tl_callsite *cs, void *arg)
{
    struct site_list *l = arg;
    long long b = atomic_load_explicit(&cs->live_bytes, memory_order_relaxed);
    if (b <= 0 || tl_is_address_space(cs->kind))
        return;
    if (l->n == l->cap) {
        size_t ncap = l->cap ? l->cap * 2 : 64;
        struct site_bytes *n = realloc(l->v, ncap * sizeof *n);
        if (!n)
            return;
        l->v = n;
        l->cap = ncap;
    }
    l->v[l->n++] = (struct site_bytes){cs, b};
}

static const char *const class_name[] = {"cache", "workspace", "library", "user"};

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

/* The driver's free memory for a mark, into *out; false when unknown.  The
 * device is that of the calling thread's current context; a thread without
 * one (the watcher's interval and signal marks) reads the device of the
 * first live context tensorleak knows of, which in a process of one device
 * is its device.  No other device stands in when the driver does not answer
 * for that one: a timeline's figures stay one device's. */
static bool device_free_now(uint64_t *out)
{
    typedef int (*getcur_fn)(void **);
    getcur_fn getcur = (getcur_fn)tl_driver_symbol("cuCtxGetCurrent");
    void *ctx = NULL;
    if (!getcur || getcur(&ctx) != 0)
        return false;
    if (!ctx && tl_known_contexts(&ctx, 1) != 1)
        return false;
    int device;
    uint64_t total;
    return tl_context_memory(ctx, &device, out, &total);
}

void tl_mark(const char *label)
{
    if (!atomic_load(&tl_active))
        return;
    /* Framework state for this mark (a bounded wait; none inside a hook). */
    tl_bridge_refresh_mark(tl_hook_depth == 0);
    uint64_t reserved = tl_pools_reserved_now();
    uint64_t dfree = 0;
    bool dfree_known = device_free_now(&dfree);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    /* Owner classes' reserved bytes: the sites are listed under the call-site
     * table's lock, their classes looked up (owners.c's lock) after it. */
    struct site_list sites = {0};
    tl_callsite_foreach(list_site, &sites);
    long long by_class[4] = {0};
    bool class_seen[4] = {false};
    for (size_t i = 0; i < sites.n; i++) {
        int c = tl_owner_class_of(sites.v[i].cs);
        if (c >= 0 && c < 3) {
            by_class[c] += sites.v[i].bytes;
            class_seen[c] = true;
        }
    }
    free(sites.v);
    pthread_mutex_lock(&mark_lock);
    tl_callsite_foreach(mark_site, NULL);
    struct observe_ctx octx = {nmarks + 1};
    for (int c = 0; c < 3; c++) {
        struct tl_series *s = class_seen[c] || series_find_existing(TL_SERIES_OWNER, class_name[c]) ? series_find(TL_SERIES_OWNER, class_name[c]) : NULL;
        if (s)
            tl_series_observe(s, octx.seq, by_class[c], TL_SERIES_MIN_STEP);
    }
    tl_bridge_foreach_series(observe_pool, observe_site, &octx);
    /* A pool one high short of growth: its lines are wanted before the
     * next request (see tl_bridge_want_lines). */
    int suspect = tl_opt.growth_marks > 1 ? tl_opt.growth_marks - 1 : 1;
    bool want_lines = false;
    for (size_t i = 0; i < nseries && !want_lines; i++)
        want_lines = series[i].scope == TL_SERIES_POOL && tl_series_growing(&series[i], octx.seq, suspect, NULL);
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
    row->device_free_known = dfree_known;
    row->time = (double)ts.tv_sec + ts.tv_nsec / 1e9;
    pthread_mutex_unlock(&mark_lock);
    if (want_lines && tl_hook_depth == 0)
        tl_bridge_want_lines();
}

struct growth_collect {
    struct tl_gather *m;
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
    memset(row, 0, sizeof *row);
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
    if (!x->cs || !y->cs) /* call sites first, then series in their order */
        return x->cs ? -1 : y->cs ? 1 : (x < y ? -1 : 1);
    return x->cs->id < y->cs->id ? -1 : 1;
}

static const char *const scope_name[] = {"", "pool", "owner", "python_site"};

/* The fastest-growing Python site of a pool: it names the pool's growth
 * (nseries when none grows). */
static size_t first_growing_site(const char *pool)
{
    size_t best = nseries;
    long long best_rate = 0;
    for (size_t j = 0; j < nseries; j++) {
        struct tl_series_verdict v;
        if (series[j].scope == TL_SERIES_PYSITE && !strcmp(series[j].kind, pool) && series[j].stack &&
            tl_series_growing(&series[j], nmarks, tl_opt.growth_marks, &v) && (best == nseries || v.bytes_per_mark > best_rate)) {
            best = j;
            best_rate = v.bytes_per_mark;
        }
    }
    return best;
}

/* Rows for the series that grow; an owner class whose growth a call-site
 * row already shows is left to that row, and a Python site that names its
 * pool's growth row is not repeated. */
static void collect_series(struct tl_gather *m, size_t *cap, unsigned class_flagged)
{
    for (size_t i = 0; i < nseries; i++) {
        struct tl_series *s = &series[i];
        struct tl_series_verdict v;
        if (!tl_series_growing(s, nmarks, tl_opt.growth_marks, &v))
            continue;
        if (s->scope == TL_SERIES_OWNER) {
            unsigned c = 0;
            while (c < 3 && strcmp(class_name[c], s->key) != 0)
                c++;
            if (c < 3 && (class_flagged & (1u << c)))
                continue;
        }
        if (s->scope == TL_SERIES_PYSITE && first_growing_site(s->kind) == i) {
            struct tl_series *pool = series_find_existing(TL_SERIES_POOL, s->kind);
            if (pool && tl_series_growing(pool, nmarks, tl_opt.growth_marks, NULL))
                continue;
        }
        if (m->ngrowth == *cap) {
            size_t ncap = *cap ? *cap * 2 : 16;
            struct tl_growth_row *n = realloc(m->growth, ncap * sizeof *n);
            if (!n)
                return;
            m->growth = n;
            *cap = ncap;
        }
        struct tl_growth_row *row = &m->growth[m->ngrowth++];
        memset(row, 0, sizeof *row);
        row->marks = v.marks;
        row->bytes_per_mark = v.bytes_per_mark;
        json_t *o = json_object();
        json_object_set_new(o, "scope", json_string(scope_name[s->scope]));
        json_object_set_new(o, "from_bytes", json_integer(v.from_bytes));
        json_object_set_new(o, "to_bytes", json_integer(v.to_bytes));
        if (s->scope == TL_SERIES_POOL) {
            json_object_set_new(o, "kind", json_string(s->kind));
            json_object_set_new(o, "pool", json_string(s->key));
            json_object_set_new(o, "pool_kind", json_string(s->kind));
            /* Named by the Python line that grows inside it, when the
             * framework gives one (the first growing site of this pool). */
            size_t j = first_growing_site(s->key);
            json_object_set_new(o, "stack", j < nseries ? tl_bridge_stack_json(series[j].stack) : json_array());
            struct tl_callsite *cs = j < nseries ? series[j].cs : NULL;
            row->suppressed = cs && tl_suppressed(m, "growth", cs) != NULL;
        } else if (s->scope == TL_SERIES_OWNER) {
            json_object_set_new(o, "kind", json_string("device"));
            json_object_set_new(o, "owner_class", json_string(s->key));
            json_object_set_new(o, "owner", json_null());
            json_object_set_new(o, "stack", json_array());
        } else {
            struct tl_series *pool = series_find_existing(TL_SERIES_POOL, s->kind);
            json_object_set_new(o, "kind", json_string("python"));
            json_object_set_new(o, "pool", json_string(s->kind));
            json_object_set_new(o, "pool_kind", pool ? json_string(pool->kind) : json_null());
            json_object_set_new(o, "stack", tl_bridge_stack_json(s->stack));
            struct tl_callsite *cs = s->cs;
            row->suppressed = cs && tl_suppressed(m, "growth", cs) != NULL;
        }
        row->extra = o;
    }
}

void tl_growth_name_owners(struct tl_gather *m)
{
    for (size_t i = 0; i < m->ngrowth; i++) {
        json_t *o = m->growth[i].extra;
        const char *cls = o ? json_string_value(json_object_get(o, "owner_class")) : NULL;
        if (!cls)
            continue;
        const struct tl_owner_row *best = NULL;
        for (size_t k = 0; k < m->nowners; k++)
            if (!strcmp(m->owners[k].cls, cls) && (!best || m->owners[k].live_bytes > best->live_bytes))
                best = &m->owners[k];
        if (best)
            json_object_set_new(o, "owner", json_string(best->name));
    }
}

void tl_growth_collect(struct tl_gather *m)
{
    pthread_mutex_lock(&mark_lock);
    struct growth_collect g = {m, 0};
    tl_callsite_foreach(collect_site, &g);
    unsigned class_flagged = 0;
    for (size_t i = 0; i < m->ngrowth; i++) {
        int c = tl_owner_class_of(m->growth[i].cs);
        if (c >= 0 && c < 3)
            class_flagged |= 1u << c;
    }
    collect_series(m, &g.cap, class_flagged);
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

void tl_growth_after_fork(void)
{
    pthread_mutex_init(&mark_lock, NULL);
    nmarks = 0;
    for (size_t i = 0; i < nseries; i++)
        json_decref(series[i].stack);
    nseries = 0;
}
