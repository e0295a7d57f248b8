/*
 * cmd_diff.c: `tensorleak diff OLD NEW`: what grew between two reports,
 * call site by call site, largest growth first.
 *
 * What is compared: the "sites" arrays (live call sites of a snapshot) when
 * both reports have one, else their "leaks"; entries marked suppressed are
 * left out. A call site's identity is its kind plus, frame by frame, the
 * module's basename with the function and file:line when the function is
 * known, else with the module offset. Raw addresses are ignored, so sites
 * match across runs despite ASLR; entries of one report with the same
 * identity are added together. Sites whose bytes and count did not change are
 * not listed.
 */
#include "cli.h"
#include "model.h"
#include "report_fields.h"
#include "sizes.h"
#include "terminal_safe.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

struct diff_site {
    char *key;
    int64_t old_bytes, new_bytes;
    int64_t old_count, new_count;
    const struct tl_leak *shown;   /* the NEW entry when there is one */
    bool shown_new;
    bool size_unknown;             /* an entry's bytes were null: its bytes leave some out */
};

struct key_buf {
    char *text;
    size_t len, cap;
};

static bool key_put(struct key_buf *k, const char *s)
{
    size_t n = strlen(s);
    if (k->len + n + 1 > k->cap) {
        size_t cap = k->cap ? k->cap : 128;
        while (k->len + n + 1 > cap)
            cap *= 2;
        char *text = realloc(k->text, cap);
        if (!text)
            return false;
        k->text = text;
        k->cap = cap;
    }
    memcpy(k->text + k->len, s, n + 1);
    k->len += n;
    return true;
}

/* Fields are separated by bytes that cannot occur in JSON-decoded names. */
static char *site_key(const struct tl_leak *l)
{
    struct key_buf k = { 0 };
    char line[32];
    /* An imported handle's site is not a created one's. */
    bool ok = key_put(&k, l->kind ? l->kind : "?") && (!l->imported || key_put(&k, " imported"));
    for (size_t i = 0; ok && i < l->stack.count; i++) {
        const struct tl_frame *f = &l->stack.frames[i];
        ok = key_put(&k, "\x1f") && key_put(&k, f->module ? report_basename(f->module) : "");
        if (ok && f->function) {
            snprintf(line, sizeof(line), ":%lld", f->line);
            ok = key_put(&k, "\x1e") && key_put(&k, f->function) && key_put(&k, "\x1e") &&
                 key_put(&k, f->file ? f->file : "") && key_put(&k, line);
        } else if (ok) {
            ok = key_put(&k, "+") && key_put(&k, f->offset ? f->offset : "?");
        }
    }
    if (!ok) {
        free(k.text);
        return NULL;
    }
    return k.text;
}

static int by_key(const void *a, const void *b)
{
    return strcmp(((const struct diff_site *)a)->key, ((const struct diff_site *)b)->key);
}

static int by_growth(const void *a, const void *b)
{
    const struct diff_site *x = a, *y = b;
    int64_t dx = x->new_bytes - x->old_bytes, dy = y->new_bytes - y->old_bytes;
    if (dx != dy)
        return dx > dy ? -1 : 1;
    int64_t cx = x->new_count - x->old_count, cy = y->new_count - y->old_count;
    if (cx != cy)
        return cx > cy ? -1 : 1;
    return strcmp(x->key, y->key);
}

static int64_t clamp64(uint64_t v)
{
    return v > INT64_MAX ? INT64_MAX : (int64_t)v;
}

/* Hand-edited reports can hold absurd sizes: saturate instead of overflowing. */
static int64_t add_sat(int64_t a, int64_t b)
{
    int64_t r;
    if (__builtin_add_overflow(a, b, &r))
        return b > 0 ? INT64_MAX : INT64_MIN;
    return r;
}

/* Appends the non-suppressed entries of one side; false when out of memory. */
static bool add_side(struct diff_site *sites, size_t *n, const struct tl_leak *entries,
                     size_t count, bool is_new)
{
    for (size_t i = 0; i < count; i++) {
        const struct tl_leak *l = &entries[i];
        if (l->suppressed)
            continue;
        struct diff_site *s = &sites[(*n)++];
        memset(s, 0, sizeof(*s));
        s->key = site_key(l);
        if (!s->key)
            return false;
        s->size_unknown = TL_NULL(l, SITE, bytes);
        if (is_new) {
            s->new_bytes = clamp64(l->bytes);
            s->new_count = clamp64(l->count);
            s->shown = l;
            s->shown_new = true;
        } else {
            s->old_bytes = clamp64(l->bytes);
            s->old_count = clamp64(l->count);
            s->shown = l;
        }
    }
    return true;
}

/* Folds entries with equal keys (sorted) into one; returns the new count. */
static size_t combine(struct diff_site *sites, size_t n)
{
    size_t out = 0;
    for (size_t i = 0; i < n; i++) {
        if (out > 0 && strcmp(sites[out - 1].key, sites[i].key) == 0) {
            struct diff_site *d = &sites[out - 1];
            d->old_bytes = add_sat(d->old_bytes, sites[i].old_bytes);
            d->new_bytes = add_sat(d->new_bytes, sites[i].new_bytes);
            d->old_count = add_sat(d->old_count, sites[i].old_count);
            d->new_count = add_sat(d->new_count, sites[i].new_count);
            d->size_unknown |= sites[i].size_unknown;
            if (sites[i].shown_new && !d->shown_new) {
                d->shown = sites[i].shown;
                d->shown_new = true;
            }
            free(sites[i].key);
        } else {
            sites[out++] = sites[i];
        }
    }
    return out;
}

static int diff_reports(const struct tl_report *old, const struct tl_report *new)
{
    bool use_sites = TL_HAS(old, REPORT, sites) && TL_HAS(new, REPORT, sites);
    const struct tl_leak *old_e = use_sites ? old->sites : old->leaks;
    const struct tl_leak *new_e = use_sites ? new->sites : new->leaks;
    size_t old_n = use_sites ? old->site_count : old->leak_count;
    size_t new_n = use_sites ? new->site_count : new->leak_count;

    struct diff_site *sites = calloc(old_n + new_n + 1, sizeof(*sites));
    size_t n = 0;
    bool ok = sites && add_side(sites, &n, old_e, old_n, false) &&
              add_side(sites, &n, new_e, new_n, true);
    if (!ok) {
        cli_error("diff: out of memory");
        for (size_t i = 0; sites && i < n; i++)
            free(sites[i].key);
        free(sites);
        return CLI_EXIT_USAGE;
    }
    qsort(sites, n, sizeof(*sites), by_key);
    n = combine(sites, n);

    int64_t total_bytes = 0, total_count = 0;
    size_t changed = 0;
    for (size_t i = 0; i < n; i++) {
        int64_t db = sites[i].new_bytes - sites[i].old_bytes;
        int64_t dc = sites[i].new_count - sites[i].old_count;
        if (!report_kind_is_address_space(sites[i].shown->kind)) /* not memory */
            total_bytes = add_sat(total_bytes, db);
        total_count = add_sat(total_count, dc);
        if (db != 0 || dc != 0)
            sites[changed++] = sites[i];
        else
            free(sites[i].key);
    }
    qsort(sites, changed, sizeof(*sites), by_growth);

    char human[SIZE_HUMAN_MAX];
    fputs("tensorleak diff: ", stdout);
    tl_put_terminal_safe(stdout, old->path);
    fputs(" -> ", stdout);
    tl_put_terminal_safe(stdout, new->path);
    printf(" (%s): %+" PRId64 " byte(s) (%s), %+" PRId64 " allocation(s) in %zu changed call site(s)\n",
           use_sites ? "live sites" : "leaks", total_bytes,
           size_human_signed(total_bytes, human), total_count, changed);
    for (size_t i = 0; i < changed; i++) {
        const struct diff_site *s = &sites[i];
        printf("%+" PRId64 " byte(s) (%s), %+" PRId64 " allocation(s) [", s->new_bytes - s->old_bytes,
               size_human_signed(s->new_bytes - s->old_bytes, human), s->new_count - s->old_count);
        tl_put_terminal_safe(stdout, s->shown->kind ? report_leak_kind(s->shown) : "??");
        printf("%s]: %" PRId64 " -> %" PRId64 " byte(s), %" PRId64 " -> %" PRId64 " allocation(s), from:\n",
               s->size_unknown ? ", size unknown" : "",
               s->old_bytes, s->new_bytes, s->old_count, s->new_count);
        format_stack(stdout, &s->shown->stack);
        free(s->key);
    }
    free(sites);
    return CLI_EXIT_OK;
}

int cmd_diff(int argc, char **argv)
{
    if (argc == 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
        puts("usage: tensorleak diff OLD NEW");
        return CLI_EXIT_OK;
    }
    if (argc != 3) {
        cli_error("diff: expected two reports\nusage: tensorleak diff OLD NEW");
        return CLI_EXIT_USAGE;
    }
    struct tl_report old, new;
    if (!report_load(argv[1], &old))
        return CLI_EXIT_USAGE;
    if (!report_load(argv[2], &new)) {
        report_free(&old);
        return CLI_EXIT_USAGE;
    }
    int rc = diff_reports(&old, &new);
    report_free(&old);
    report_free(&new);
    return rc;
}
