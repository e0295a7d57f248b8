/*
 * report_text.c: the LeakSanitizer-like text report (docs/report-format.md)
 * of the report model.  The preload library prints its exit report with it
 * and `tensorleak report FILE` a saved one, so the two say the same.
 */
#include "report_fields.h"
#include "sizes.h"
#include "headline.h"
#include "stack_view.h"
#include "terminal_safe.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static const char *or_unknown(const char *s)
{
    return s && *s ? s : "??";
}

/* A field of the report as a terminal may show it ("??" when unknown):
 * reports are read from files anyone may write, and the library's own
 * names come from the program's paths and symbols. */
static void put_field(FILE *out, const char *s)
{
    tl_put_terminal_safe(out, or_unknown(s));
}

void format_frame(FILE *out, size_t index, const struct tl_frame *f)
{
    if (f->python) { /* no address: the .py file and line */
        fprintf(out, "    #%zu in ", index);
        put_field(out, f->function);
        fputc(' ', out);
        put_field(out, f->file);
        fprintf(out, ":%lld [python]\n", f->line);
        return;
    }
    fprintf(out, "    #%zu ", index);
    put_field(out, f->address);
    fputs(" in ", out);
    put_field(out, f->function);
    if (f->file && *f->file) {
        fputc(' ', out);
        put_field(out, f->file);
        if (f->line > 0)
            fprintf(out, ":%lld", f->line);
    }
    if (f->module && *f->module) {
        fputs(" (", out);
        put_field(out, report_basename(f->module));
        if (f->offset && *f->offset) {
            fputc('+', out);
            put_field(out, f->offset);
        }
        fputc(')', out);
    }
    fputc('\n', out);
}

bool format_frames_all;

size_t format_stack_rows(const struct tl_stack *stack, struct tl_view_row **rows)
{
    *rows = NULL;
    if (stack->count == 0)
        return 0;
    struct tl_view_frame *view = calloc(stack->count, sizeof *view);
    *rows = calloc(stack->count, sizeof **rows);
    size_t n = 0;
    if (view && *rows) {
        for (size_t i = 0; i < stack->count; i++)
            view[i] = (struct tl_view_frame){.python = stack->frames[i].python, .module = stack->frames[i].module};
        n = tl_stack_view(view, stack->count, format_frames_all, *rows);
    } else { /* out of memory: every frame as recorded */
        free(*rows);
        *rows = NULL;
    }
    free(view);
    return n;
}

void format_fold_words(const struct tl_stack *stack, const struct tl_view_row *row, char *buf, size_t size)
{
    struct tl_view_frame view[row->count];
    for (size_t i = 0; i < row->count; i++)
        view[i] = (struct tl_view_frame){.python = false, .module = stack->frames[row->first + i].module};
    struct tl_view_row local = { 0, row->count, true };
    tl_stack_view_fold_words(view, &local, buf, size);
}

void format_stack(FILE *out, const struct tl_stack *stack)
{
    if (stack->count == 0) {
        fputs("    (no stack: TENSORLEAK_DEPTH=0)\n", out);
        return;
    }
    struct tl_view_row *rows;
    size_t n = format_stack_rows(stack, &rows);
    if (!rows) {
        for (size_t i = 0; i < stack->count; i++)
            format_frame(out, i, &stack->frames[i]);
        return;
    }
    for (size_t r = 0; r < n; r++) {
        if (!rows[r].fold) {
            format_frame(out, rows[r].first, &stack->frames[rows[r].first]);
            continue;
        }
        char words[256];
        format_fold_words(stack, &rows[r], words, sizeof words);
        fputs("    ... ", out);
        tl_put_terminal_safe(out, words);
        fputc('\n', out);
    }
    free(rows);
}

/* "==4242==", LeakSanitizer's line prefix; "==?==" when there is no single pid (merged). */
struct prefix {
    char text[32];
};

static struct prefix prefix_of(const struct tl_report *r)
{
    struct prefix p;
    if (TL_HAS(r, REPORT, pid))
        snprintf(p.text, sizeof(p.text), "==%lld==", r->pid);
    else
        snprintf(p.text, sizeof(p.text), "==?==");
    return p;
}

/* " rank N" for entries of a merged report, else "". */
struct rank_tag {
    char text[32];
};

static struct rank_tag rank_tag(bool has_rank, long long rank, const char *before)
{
    struct rank_tag t = { "" };
    if (has_rank)
        snprintf(t.text, sizeof(t.text), "%srank %lld", before, rank);
    return t;
}

static void header(FILE *out, const struct tl_report *r)
{
    const struct prefix pfx = prefix_of(r);
    const struct tl_summary *s = &r->summary;
    char human[SIZE_HUMAN_MAX];
    if (s->leaked_allocations == 0) {
        fprintf(out, "%s tensorleak: no leaked device allocations\n", pfx.text);
        return;
    }
    size_t sites = 0;
    struct tl_headline headline = {0};
    for (size_t i = 0; i < r->leak_count; i++) {
        const struct tl_leak *l = &r->leaks[i];
        sites += !l->suppressed;
        if (!l->suppressed)
            tl_headline_add(&headline, l->kind, (long long)l->count, l->bytes,
                            TL_NULL(l, SITE, bytes) ? (long long)l->unknown_size_allocations : 0);
    }
    fprintf(out, "%s tensorleak: ", pfx.text);
    if (tl_headline_matches(&headline, (long long)s->leaked_allocations, s->leaked_bytes))
        tl_headline_print(out, &headline, tl_format_size);
    else /* the leaks listed do not add up to the summary: its totals, kinds unnamed */
        fprintf(out, "%" PRIu64 " leaked allocation%s (%s)", s->leaked_allocations,
                s->leaked_allocations == 1 ? "" : "s", size_human(s->leaked_bytes, human));
    fprintf(out, " from %zu call sites", sites);
    if (s->leaked_address_space_bytes > 0) /* apart from memory */
        fprintf(out, "; %s of address space left reserved", size_human(s->leaked_address_space_bytes, human));
    if (s->leaked_ipc_mapped_bytes > 0)
        fprintf(out, "; %s of other processes' memory left mapped", size_human(s->leaked_ipc_mapped_bytes, human));
    fputc('\n', out);
}

/* Per-rank totals of a merged report. */
static void ranks(FILE *out, const struct tl_report *r)
{
    const struct prefix pfx = prefix_of(r);
    char leaked[SIZE_HUMAN_MAX], live[SIZE_HUMAN_MAX], reserved[SIZE_HUMAN_MAX];
    for (size_t i = 0; i < r->rank_count; i++) {
        const struct tl_rank *k = &r->ranks[i];
        fprintf(out, "%s rank %lld: pid %lld on ", pfx.text, k->rank, k->pid);
        put_field(out, k->host);
        fprintf(out, ": %s leaked in %" PRIu64 " allocation(s); live %s, reserved %s\n",
                size_human(k->leaked_bytes, leaked),
                k->leaked_allocations, size_human(k->live_bytes, live),
                size_human(k->reserved_bytes, reserved));
    }
}

static void leaks(FILE *out, const struct tl_report *r)
{
    char human[SIZE_HUMAN_MAX];
    for (size_t i = 0; i < r->leak_count; i++) {
        const struct tl_leak *l = &r->leaks[i];
        if (l->suppressed)
            continue;
        /* As the library prints it: address space is not memory. */
        const char *what = report_kind_apart_words(l->kind);
        fprintf(out, "Leak of %s%s in %" PRIu64 " allocation(s) [",
                TL_NULL(l, SITE, bytes) ? "unknown size" : size_human(l->bytes, human), what, l->count);
        put_field(out, l->kind ? report_leak_kind(l) : NULL);
        fprintf(out, "%s] allocated from:\n", rank_tag(TL_HAS(l, SITE, rank), l->rank, ", ").text);
        format_stack(out, &l->stack);
        fputc('\n', out);
    }
}

/* A growth row without a call site: a framework pool's allocated bytes, an
 * owner's reserve, a Python line of a pool. */
static bool scoped_growth(FILE *out, const struct tl_growth *g)
{
    char human[SIZE_HUMAN_MAX];
    const struct rank_tag tag = rank_tag(TL_HAS(g, GROWTH, rank), g->rank, ", ");
    const char *rank = tag.text;
    size_human(g->bytes_per_mark, human);
    if (!g->scope || strcmp(g->scope, "call_site") == 0)
        return false;
    if (strcmp(g->scope, "owner") == 0) {
        fprintf(out, "Growth of %s per mark over %" PRIu64 " marks in the reserve of owner ", human, g->marks);
        put_field(out, g->owner);
        fputs(" (", out);
        put_field(out, g->owner_class);
        fprintf(out, "%s)\n\n", rank);
        return true;
    }
    if (strcmp(g->scope, "pool") == 0) {
        fprintf(out, "Growth of %s per mark over %" PRIu64 " marks in pool '", human, g->marks);
        put_field(out, g->pool);
        fputs("' (", out);
        put_field(out, g->kind);
        fprintf(out, ", allocated bytes%s)%s\n", rank, g->stack.count ? ", growing at:" : "");
    } else {
        fprintf(out, "Growth of %s per mark over %" PRIu64 " marks [", human, g->marks);
        put_field(out, g->kind);
        fputs(", pool '", out);
        put_field(out, g->pool);
        fprintf(out, "'%s] allocated from:\n", rank);
    }
    for (size_t i = 0; i < g->stack.count; i++)
        format_frame(out, i, &g->stack.frames[i]);
    fputc('\n', out);
    return true;
}

static void growth(FILE *out, const struct tl_report *r)
{
    char human[SIZE_HUMAN_MAX];
    for (size_t i = 0; i < r->growth_count; i++) {
        const struct tl_growth *g = &r->growth[i];
        if (g->suppressed || scoped_growth(out, g))
            continue;
        fprintf(out, "Growth of %s per mark over %" PRIu64 " marks [", size_human(g->bytes_per_mark, human), g->marks);
        put_field(out, g->kind);
        fprintf(out, "%s] allocated from:\n", rank_tag(TL_HAS(g, GROWTH, rank), g->rank, ", ").text);
        format_stack(out, &g->stack);
        fputc('\n', out);
    }
}

static void invalid_frees(FILE *out, const struct tl_report *r)
{
    for (size_t i = 0; i < r->invalid_free_count; i++) {
        const struct tl_invalid_free *f = &r->invalid_frees[i];
        if (f->suppressed)
            continue;
        fputs("Invalid free of ", out);
        put_field(out, f->address);
        fputs(" [", out);
        put_field(out, f->kind);
        fprintf(out, "%s] from:\n", rank_tag(TL_HAS(f, INVALID, rank), f->rank, ", ").text);
        format_stack(out, &f->stack);
        fputc('\n', out);
    }
}

/* ---- the out-of-memory verdict in words ---------------------------------- */

static const char *verdict_words(const char *verdict)
{
    if (!verdict)
        return "unknown";
    if (!strcmp(verdict, "not_enough_memory"))
        return "not enough memory";
    if (!strcmp(verdict, "fits"))
        return "a free block of its own would hold it";
    return verdict; /* "fragmentation", "unknown" */
}

const char *report_oom_remedy_words(const char *remedy)
{
    if (!remedy)
        return "unknown";
    if (!strcmp(remedy, "empty_cache"))
        return "torch.cuda.empty_cache()";
    if (!strcmp(remedy, "expandable_segments"))
        return "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True";
    if (!strcmp(remedy, "smaller_request"))
        return "nothing short of a smaller request";
    return remedy;
}

static const char *size_or_unknown(const struct tl_seen *seen, unsigned bit, uint64_t v, char buf[SIZE_HUMAN_MAX])
{
    return tl_seen_has(seen, bit) ? size_human(v, buf) : "unknown";
}

void report_oom_pool_words(const struct tl_oom_pool *p, char *buf, size_t size)
{
    char res[SIZE_HUMAN_MAX], alloc[SIZE_HUMAN_MAX], fr[SIZE_HUMAN_MAX], big[SIZE_HUMAN_MAX], empty[SIZE_HUMAN_MAX];
    const struct tl_seen *s = &p->seen;
    int n = snprintf(buf, size, "reserved %s, allocated %s, free %s, largest free block %s",
                     size_or_unknown(s, TL_F_OOMPOOL_reserved_bytes, p->reserved_bytes, res),
                     size_or_unknown(s, TL_F_OOMPOOL_allocated_bytes, p->allocated_bytes, alloc),
                     size_or_unknown(s, TL_F_OOMPOOL_free_bytes, p->free_bytes, fr),
                     size_or_unknown(s, TL_F_OOMPOOL_largest_free_block, p->largest_free_block, big));
    if (n >= 0 && (size_t)n < size && tl_seen_has(s, TL_F_OOMPOOL_empty_cache_bytes))
        n += snprintf(buf + n, size - (size_t)n, ", empty_cache() returns %s", size_human(p->empty_cache_bytes, empty));
    if (n >= 0 && (size_t)n < size)
        n += snprintf(buf + n, size - (size_t)n, ": %s", verdict_words(p->verdict));
    if (n >= 0 && (size_t)n < size && p->note)
        snprintf(buf + n, size - (size_t)n, " (%s)", p->note);
}

void report_oom_sentence(const struct tl_oom *o, char *buf, size_t size)
{
    char want[SIZE_HUMAN_MAX], all[SIZE_HUMAN_MAX], dev[SIZE_HUMAN_MAX], caches[SIZE_HUMAN_MAX];
    char big[SIZE_HUMAN_MAX], back[SIZE_HUMAN_MAX];
    uint64_t cache_free = 0, largest = 0;
    bool largest_known = false;
    for (size_t i = 0; i < o->pool_count; i++) {
        const struct tl_oom_pool *p = &o->pools[i];
        if (tl_seen_has(&p->seen, TL_F_OOMPOOL_free_bytes))
            cache_free += p->free_bytes;
        if (tl_seen_has(&p->seen, TL_F_OOMPOOL_largest_free_block) && p->largest_free_block >= largest) {
            largest = p->largest_free_block;
            largest_known = true;
        }
    }
    bool known = o->verdict && strcmp(o->verdict, "unknown") != 0 && tl_seen_has(&o->seen, TL_F_OOM_device_free);
    if (!known) {
        snprintf(buf, size, "verdict unknown: %s", o->note ? o->note : "the report does not say why");
        return;
    }
    size_human(o->bytes, want);
    int n = snprintf(buf, size, "%s: %s free (%s on the device, %s in caches)", verdict_words(o->verdict),
                     size_human(o->device_free + cache_free, all), size_human(o->device_free, dev),
                     size_human(cache_free, caches));
    if (n >= 0 && (size_t)n < size && !strcmp(o->verdict, "fragmentation"))
        n += snprintf(buf + n, size - (size_t)n, ", no free block of %s (largest %s)", want,
                      largest_known ? size_human(largest, big) : "unknown");
    else if (n >= 0 && (size_t)n < size)
        n += snprintf(buf + n, size - (size_t)n, " for %s", want);
    if (n >= 0 && (size_t)n < size) {
        bool empty = o->remedy && !strcmp(o->remedy, "empty_cache") && tl_seen_has(&o->seen, TL_F_OOM_empty_cache_bytes);
        snprintf(buf + n, size - (size_t)n, "; would serve it: %s%s%s%s", report_oom_remedy_words(o->remedy),
                 empty ? " (returns " : "", empty ? size_human(o->empty_cache_bytes, back) : "", empty ? ")" : "");
    }
}

static void oom(FILE *out, const struct tl_report *r)
{
    char human[SIZE_HUMAN_MAX];
    if (!TL_HAS(r, REPORT, oom))
        return;
    fprintf(out, "Out of memory allocating %s [", size_human(r->oom.bytes, human));
    put_field(out, r->oom.kind);
    fprintf(out, "] on device %lld from:\n", r->oom.device);
    format_stack(out, &r->oom.stack);
    fputc('\n', out);
    if (!TL_HAS(&r->oom, OOM, verdict)) /* a report from before the verdict */
        return;
    char line[512];
    report_oom_sentence(&r->oom, line, sizeof line);
    fprintf(out, "Why: %s\n", line);
    for (size_t i = 0; i < r->oom.pool_count; i++) {
        const struct tl_oom_pool *p = &r->oom.pools[i];
        report_oom_pool_words(p, line, sizeof line);
        const char *when = !p->state                      ? ""
                           : !strcmp(p->state, "fresh")   ? ", read at the failure"
                           : !strcmp(p->state, "final")   ? ", read at exit"
                                                          : ", not read at the failure";
        fprintf(out, "    pool '%s' (%s%s): %s\n", or_unknown(p->name), or_unknown(p->kind), when, line);
    }
    fputc('\n', out);
    for (size_t i = 0; i < r->oom.pool_count; i++) {
        const struct tl_oom_pool *p = &r->oom.pools[i];
        if (!p->pinning_count)
            continue;
        fprintf(out, "Live blocks pinning the fragmented segments of pool '%s', largest first:\n", or_unknown(p->name));
        for (size_t k = 0; k < p->pinning_count; k++) {
            fprintf(out, "  %s in %" PRIu64 " block(s) allocated at:\n", size_human(p->pinning[k].bytes, human),
                    p->pinning[k].count);
            format_stack(out, &p->pinning[k].stack);
        }
        fputc('\n', out);
    }
}

/* "largest free block 6.0 MiB (fragmentation 0.75)", or "unknown" for
 * both when the report says it could not know (null). */
static const char *free_space_words(bool unknown, uint64_t largest, double fragmentation, char *buf,
                                    size_t len)
{
    char size[SIZE_HUMAN_MAX];
    if (unknown)
        snprintf(buf, len, "largest free block unknown (fragmentation unknown)");
    else
        snprintf(buf, len, "largest free block %s (fragmentation %.2f)", size_human(largest, size),
                 fragmentation);
    return buf;
}

static void devices(FILE *out, const struct tl_report *r)
{
    char reserved[SIZE_HUMAN_MAX], allocated[SIZE_HUMAN_MAX], gap[SIZE_HUMAN_MAX];
    char free_space[96];
    for (size_t i = 0; i < r->device_count; i++) {
        const struct tl_device *d = &r->devices[i];
        /* Reports of one device may keep these in the summary only. */
        bool known_here = TL_HAS(d, DEVICE, largest_free_block) || tl_device_layout_unknown(d);
        uint64_t block = TL_HAS(d, DEVICE, largest_free_block) ? d->largest_free_block
                                                   : r->summary.largest_free_block;
        double frag = TL_HAS(d, DEVICE, fragmentation) ? d->fragmentation : r->summary.fragmentation;
        bool unknown = known_here ? tl_device_layout_unknown(d) : tl_summary_layout_unknown(&r->summary);
        fprintf(out, "%s%s device %lld: reserved %s, allocated %s, gap %s; %s\n",
                prefix_of(r).text, rank_tag(TL_HAS(d, DEVICE, rank), d->rank, " ").text, d->device,
                size_human(d->reserved_bytes, reserved),
                size_human(d->allocated_bytes, allocated), size_human(d->gap_bytes, gap),
                free_space_words(unknown, block, frag, free_space, sizeof free_space));
    }
}

/* A process tensorleak attached to: what each device held before (the
 * driver's per-process figure) and how much of it was freed since; growth is
 * per interval when TENSORLEAK_INTERVAL gave the marks. */
static void before_attach(FILE *out, const struct tl_report *r)
{
    if (!(r->seen.present & TL_BIT(REPORT, attach)))
        return;
    const struct tl_attach *a = &r->attach;
    fprintf(out, "%s attached at %s; leaks and growth are judged from then on", prefix_of(r).text,
            a->time ? a->time : "?");
    if (!(a->seen.null & TL_BIT(ATTACH, interval)))
        fprintf(out, " (growth per %g s interval)", a->interval);
    fputc('\n', out);
    for (size_t i = 0; i < a->before_count; i++) {
        const struct tl_attach_before *b = &a->before[i];
        char held[SIZE_HUMAN_MAX], freed[SIZE_HUMAN_MAX];
        if (b->seen.null & TL_BIT(BEFORE, process_bytes))
            fprintf(out, "%s device %lld before attach: unknown (no per-process figure), %s freed since in %" PRIu64
                         " allocation(s)\n",
                    prefix_of(r).text, b->device, size_human(b->freed_bytes, freed), b->freed_allocations);
        else
            fprintf(out, "%s device %lld before attach: %s held, %s of it freed since in %" PRIu64 " allocation(s)\n",
                    prefix_of(r).text, b->device, size_human(b->process_bytes, held),
                    size_human(b->freed_bytes, freed), b->freed_allocations);
        if (!(b->seen.null & TL_BIT(BEFORE, framework_reserved_bytes))) {
            char pools[SIZE_HUMAN_MAX];
            fprintf(out, "%s device %lld before attach: %s reserved by framework pools\n", prefix_of(r).text,
                    b->device, size_human(b->framework_reserved_bytes, pools));
        }
    }
}

/* " [torch 2.11.0 native; state of 2026-11-30T21:02:03.123Z, read at exit]":
 * which framework a bridge's pool row is of and when its state was read. */
static void framework_note(FILE *out, const struct tl_pool *p)
{
    const char *v = p->framework.version, *m = p->framework.mode;
    char when[64] = "??";
    if (TL_HAS(p, POOL, read_at) && p->read_at >= 0 && p->read_at < 1e11)
        tl_format_realtime(p->read_at, when, sizeof when);
    const char *said = !p->state || strcmp(p->state, "fresh") == 0 ? ""
                       : strcmp(p->state, "final") == 0        ? ", read at exit"
                                                                : ", stale";
    fputs(" [", out);
    tl_put_terminal_safe(out, p->framework.name ? p->framework.name : "framework");
    if (v) {
        fputc(' ', out);
        tl_put_terminal_safe(out, v);
    }
    if (m) {
        fputc(' ', out);
        tl_put_terminal_safe(out, m);
    }
    fprintf(out, "; state of %s%s]", when, said);
}

static void pools(FILE *out, const struct tl_report *r)
{
    char reserved[SIZE_HUMAN_MAX], allocated[SIZE_HUMAN_MAX], free_space[96];
    for (size_t i = 0; i < r->pool_count; i++) {
        const struct tl_pool *p = &r->pools[i];
        if (TL_HAS(p, POOL, framework) && p->device < 0) { /* a framework's host pool (CuPy pinned) */
            fprintf(out, "%s%s pool '", prefix_of(r).text, rank_tag(TL_HAS(p, POOL, rank), p->rank, " ").text);
            put_field(out, p->name);
            fputs("' (", out);
            put_field(out, p->kind);
            fputs(", host): ", out);
            if (TL_NULL(p, POOL, reserved_bytes))
                fprintf(out, "%" PRIu64 " free block(s); no byte counts published", p->free_blocks);
            else
                fprintf(out, "reserved %s, allocated %s", size_human(p->reserved_bytes, reserved),
                        size_human(p->allocated_bytes, allocated));
            framework_note(out, p);
            fputc('\n', out);
            continue;
        }
        bool graph = p->kind && strcmp(p->kind, "graph") == 0;
        bool unknown = graph && TL_NULL(p, POOL, reserved_bytes); /* the driver never reported graph memory */
        fprintf(out, "%s%s pool '", prefix_of(r).text, rank_tag(TL_HAS(p, POOL, rank), p->rank, " ").text);
        put_field(out, p->name);
        fputs("' (", out);
        put_field(out, p->kind);
        fprintf(out, ", device %lld): reserved %s, allocated %s; %s", p->device,
                unknown ? "unknown" : size_human(p->reserved_bytes, reserved),
                unknown ? "unknown" : size_human(p->allocated_bytes, allocated),
                free_space_words(tl_pool_layout_unknown(p), p->largest_free_block, p->fragmentation,
                                 free_space, sizeof free_space));
        if (graph) /* the allocation nodes it holds */
            fprintf(out, "; %" PRIu64 " allocation node(s), %s", p->allocation_nodes,
                    size_human(p->allocation_node_bytes, allocated));
        /* The driver stopped answering (at exit): the figures are its last
         * answer, from the time given. */
        if (p->reading && strcmp(p->reading, "last_good") == 0) {
            fputs(" [driver reading of ", out);
            put_field(out, p->reading_time);
            fputc(']', out);
        }
        else if (p->reading && strcmp(p->reading, "none") == 0)
            fprintf(out, " [the driver never answered]");
        if (TL_HAS(p, POOL, framework))
            framework_note(out, p);
        fputc('\n', out);
    }
}

/*
 * "==PID== owners: user 3.0 MiB (user), NCCL 8.0 MiB (library)", as the
 * preload prints it: only when some owner other than "user" is named.
 */
static void owners(FILE *out, const struct tl_report *r)
{
    bool named = false;
    for (size_t i = 0; i < r->owner_count; i++)
        named |= !r->owners[i].name || strcmp(r->owners[i].name, "user") != 0;
    if (!named)
        return;
    char human[SIZE_HUMAN_MAX];
    fprintf(out, "%s owners:", prefix_of(r).text);
    for (size_t i = 0; i < r->owner_count; i++) {
        const struct tl_owner *o = &r->owners[i];
        fprintf(out, "%s ", i ? "," : "");
        put_field(out, o->name);
        fprintf(out, " %s (", size_human(o->live_bytes, human));
        put_field(out, o->cls);
        fputc(')', out);
    }
    fputc('\n', out);
}

/* The totals lines under the devices, each only when non-zero. */
static void totals(FILE *out, const struct tl_report *r)
{
    const struct prefix pfx = prefix_of(r);
    const struct tl_summary *s = &r->summary;
    char human[SIZE_HUMAN_MAX];
    if (s->held_bytes > 0)
        fprintf(out, "%s held by pools at exit (not leaks): %s\n", pfx.text,
                size_human(s->held_bytes, human));
    /* Address space, apart from memory. */
    if (s->address_space_bytes > 0 && tl_summary_has(s, address_space_reservations))
        fprintf(out, "%s address space reserved (VMM ranges, not memory): %s in %" PRIu64 " range(s)\n", pfx.text,
                size_human(s->address_space_bytes, human), s->address_space_reservations);
    if (s->unknown_size_allocations > 0) /* in no byte figure */
        fprintf(out, "%s size unknown: %" PRIu64 " live allocation(s) the driver gave no size for, in no byte "
                     "figure above\n",
                pfx.text, s->unknown_size_allocations);
    /* CUDA IPC: this process's exported memory, then other processes' mapped here. */
    if (r->ipc.exported_count > 0) {
        uint64_t bytes = 0;
        bool unknown = false; /* an export of memory tracking never saw: unknown, not 0 */
        for (size_t i = 0; i < r->ipc.exported_count; i++) {
            const struct tl_ipc_entry *e = &r->ipc.exported[i];
            unknown |= !tl_seen_has(&e->seen, TL_F_IPCX_bytes);
            bytes += unknown ? 0 : e->bytes;
        }
        fprintf(out, "%s exported to other processes (CUDA IPC, this process's memory): %s in %zu allocation(s)\n",
                pfx.text, unknown ? "unknown bytes" : size_human(bytes, human), r->ipc.exported_count);
    }
    if (s->ipc_mapped_bytes > 0 && tl_summary_has(s, ipc_mappings))
        fprintf(out, "%s mapped from other processes (CUDA IPC, their memory): %s in %" PRIu64 " mapping(s)\n",
                pfx.text, size_human(s->ipc_mapped_bytes, human), s->ipc_mappings);
    if (s->suppressed_allocations > 0)
        fprintf(out, "%s suppressed: %" PRIu64 " byte(s) in %" PRIu64 " allocation(s)\n", pfx.text,
                s->suppressed_bytes, s->suppressed_allocations);
    if (s->released_by_teardown_allocations > 0)
        fprintf(out, "%s released by context teardown: %" PRIu64 " byte(s) in %" PRIu64
                     " allocation(s)\n",
                pfx.text, s->released_by_teardown_bytes, s->released_by_teardown_allocations);
    if (s->dropped_events > 0)
        fprintf(out, "%s warning: %" PRIu64 " event(s) dropped; counts may be low\n", pfx.text,
                s->dropped_events);
}

/*
 * Reports written before tensorleak checked its invariants may say that a
 * pool or device has more allocated than reserved (a driver pool read as
 * 0 B at exit): shown as written, with one line saying they cannot be right.
 */
static void impossible_figures(FILE *out, const struct tl_report *r)
{
    bool bad = r->summary.allocated_bytes > r->summary.reserved_bytes;
    for (size_t i = 0; i < r->pool_count; i++)
        bad |= r->pools[i].allocated_bytes > r->pools[i].reserved_bytes;
    for (size_t i = 0; i < r->device_count; i++)
        bad |= r->devices[i].allocated_bytes > r->devices[i].reserved_bytes;
    if (bad)
        fprintf(out, "%s warning: this report has more allocated than reserved: its figures were written "
                     "before tensorleak checked them and cannot all be right\n", prefix_of(r).text);
}

void format_text(FILE *out, const struct tl_report *r, const char *report_name)
{
    header(out, r);
    ranks(out, r);
    leaks(out, r);
    growth(out, r);
    invalid_frees(out, r);
    oom(out, r);
    pools(out, r);
    devices(out, r);
    before_attach(out, r);
    impossible_figures(out, r);
    owners(out, r);
    totals(out, r);
    fprintf(out, "SUMMARY: tensorleak: %" PRIu64 " byte(s) leaked in %" PRIu64 " allocation(s). Report: ",
            r->summary.leaked_bytes, r->summary.leaked_allocations);
    tl_put_terminal_safe(out, report_name);
    fputc('\n', out);
}
