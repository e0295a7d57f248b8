/*
 * report_text.c — the exit report on stderr, in LeakSanitizer's shape so
 * people and their log scrapers recognise it (SPEC.md shows it).
 */
#include "report.h"
#include "../tools/headline.h"
#include "../tools/stack_view.h"

#include <stdlib.h>

#include <string.h>
#include <time.h>
#include <unistd.h>

void tl_format_size(uint64_t bytes, char *buf, size_t len)
{
    static const char *const units[] = {"KiB", "MiB", "GiB", "TiB"};
    if (bytes > (uint64_t)INT64_MAX) {
        /* A negative byte count cast to unsigned: never a size to print
         * (it showed as "16777216.0 TiB"). */
        snprintf(buf, len, "unknown");
        return;
    }
    if (bytes < 1024) {
        snprintf(buf, len, "%llu B", (unsigned long long)bytes);
        return;
    }
    double v = (double)bytes / 1024.0;
    unsigned u = 0;
    while (v >= 1024.0 && u < 3) {
        v /= 1024.0;
        u++;
    }
    snprintf(buf, len, "%.1f %s", v, units[u]);
}

static const char *basename_of(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* One frame a person reads: an address's inlined callee or real function. */
struct shown_frame {
    const struct tl_frame_info *f;
    uintptr_t address;
    struct tl_inline_frame at;
};

static void print_frame(FILE *out, int index, const struct shown_frame *s)
{
    if (s->f->python) { /* "#3 in serve_request app.py:42 [python]" */
        fprintf(out, "    #%d in %s %s:%d [python]\n", index, s->at.function ? s->at.function : "??",
                s->at.file ? s->at.file : "??", s->at.line);
        return;
    }
    fprintf(out, "    #%d 0x%lx in %s", index, (unsigned long)s->address, s->at.function ? s->at.function : "??");
    if (s->at.file && s->at.line > 0)
        fprintf(out, " %s:%d", s->at.file, s->at.line);
    else if (s->at.file)
        fprintf(out, " %s", s->at.file);
    if (s->f->module)
        fprintf(out, " (%s+0x%lx)", basename_of(s->f->module), (unsigned long)s->f->offset);
    fputc('\n', out);
}

/* A stack as `tensorleak report` prints it (tools/stack_view.h: the
 * innermost Python frame first and native runs folded, or every frame with
 * TENSORLEAK_FRAMES=all), numbered as the report's JSON lists the frames. */
static void print_stack(struct tl_report_model *m, FILE *out, const uintptr_t *frames, int n)
{
    if (n == 0) {
        fprintf(out, "    (no stack: TENSORLEAK_DEPTH=0)\n");
        return;
    }
    size_t cap = (size_t)n * (TL_MAX_INLINE + 1), count = 0;
    struct shown_frame *shown = calloc(cap, sizeof *shown);
    struct tl_view_frame *view = calloc(cap, sizeof *view);
    struct tl_view_row *rows = calloc(cap, sizeof *rows);
    if (!shown || !view || !rows) {
        free(shown), free(view), free(rows);
        fprintf(out, "    (stack not shown: out of memory)\n");
        return;
    }
    for (int i = 0; i < n; i++) {
        const struct tl_frame_info *f = tl_report_frame(m, frames[i]);
        struct tl_inline_frame at[TL_MAX_INLINE + 1];
        int k = tl_frame_expand(f, at);
        for (int j = 0; j < k; j++) {
            shown[count] = (struct shown_frame){f, frames[i], at[j]};
            view[count] = (struct tl_view_frame){f->python, f->module};
            count++;
        }
    }
    size_t nrows = tl_stack_view(view, count, tl_opt.frames_all, rows);
    for (size_t r = 0; r < nrows; r++) {
        if (!rows[r].fold) {
            print_frame(out, (int)rows[r].first, &shown[rows[r].first]);
            continue;
        }
        char words[256];
        tl_stack_view_fold_words(view, &rows[r], words, sizeof words);
        fprintf(out, "    ... %s\n", words);
    }
    free(shown), free(view), free(rows);
}

void tl_format_realtime(double t, char *buf, size_t len)
{
    time_t secs = (time_t)t;
    struct tm tm;
    char when[40];
    gmtime_r(&secs, &tm);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf, len, "%s.%03dZ", when, (int)((t - (double)secs) * 1000.0) % 1000);
}

/* "largest free block 6.0 MiB (fragmentation 0.75)", or its unknown form
 * when the free space has no layout tensorleak can see. */
static void free_space_words(bool unknown, uint64_t largest, double fragmentation, char *buf, size_t len)
{
    if (unknown) {
        snprintf(buf, len, "largest free block unknown (fragmentation unknown)");
        return;
    }
    char size[32];
    tl_format_size(largest, size, sizeof size);
    snprintf(buf, len, "largest free block %s (fragmentation %.2f)", size, fragmentation);
}

void tl_report_print_text(struct tl_report_model *m, FILE *out, const char *path)
{
    int pid = (int)getpid();
    char a[32], b[32], c[96], d[96];
    size_t nleak_sites = 0;
    struct tl_headline headline = {0};
    for (size_t i = 0; i < m->nsites; i++) {
        const struct tl_site *s = &m->sites[i];
        nleak_sites += !s->suppressed;
        if (!s->suppressed)
            tl_headline_add(&headline, tl_kind_name(s->cs->kind), s->count, (uint64_t)s->bytes,
                            s->unknown_size_count);
    }
    if (m->leaked_count == 0) {
        fprintf(out, "==%d== tensorleak: no leaked device allocations\n", pid);
    } else {
        fprintf(out, "==%d== tensorleak: ", pid);
        tl_headline_print(out, &headline, tl_format_size);
        fprintf(out, " from %zu call sites", nleak_sites);
        if (m->leaked_address_space_bytes > 0) { /* apart from memory */
            tl_format_size((uint64_t)m->leaked_address_space_bytes, b, sizeof b);
            fprintf(out, "; %s of address space left reserved", b);
        }
        if (m->leaked_ipc_mapped_bytes > 0) { /* the exporter's memory */
            tl_format_size((uint64_t)m->leaked_ipc_mapped_bytes, b, sizeof b);
            fprintf(out, "; %s of other processes' memory left mapped", b);
        }
        fputc('\n', out);
    }
    for (size_t i = 0; i < m->nsites; i++) {
        const struct tl_site *s = &m->sites[i];
        if (s->suppressed)
            continue;
        if (s->unknown_size_count > 0) /* as the JSON's null bytes */
            snprintf(a, sizeof a, "unknown size");
        else
            tl_format_size((uint64_t)s->bytes, a, sizeof a);
        /* A range is address space, a mapping's memory is its handle's. */
        const char *what = s->cs->kind == TL_KIND_VMM_RESERVATION ? " of address space (not memory)"
                           : s->cs->kind == TL_KIND_VMM_MAPPING   ? " mapped range (memory counted at its handle)"
                           : s->cs->kind == TL_KIND_IPC_MAPPING   ? " of another process's memory (CUDA IPC, counted there)"
                                                                  : "";
        fprintf(out, "Leak of %s%s in %lld allocation(s) [%s%s] allocated from:\n", a, what, s->count, tl_kind_name(s->cs->kind),
                s->cs->kind == TL_KIND_VMM_IMPORTED ? ", imported" : "");
        print_stack(m, out, s->cs->frames, s->cs->nframes);
        fputc('\n', out);
    }
    for (size_t i = 0; i < m->ngrowth; i++) {
        const struct tl_growth_row *g = &m->growth[i];
        if (g->suppressed)
            continue;
        if (!g->cs) { /* pool, owner or Python-site growth */
            tl_growth_print_scoped(m, out, g);
            continue;
        }
        tl_format_size((uint64_t)g->bytes_per_mark, a, sizeof a);
        fprintf(out, "Growth of %s per mark over %d marks [%s] allocated from:\n", a, g->marks, tl_kind_name(g->cs->kind));
        print_stack(m, out, g->cs->frames, g->cs->nframes);
        fputc('\n', out);
    }
    for (size_t i = 0; i < m->ninvalid; i++) {
        struct tl_callsite *cs = tl_callsite_by_id(m->invalid[i].callsite);
        if (cs && tl_suppressed(m, "invalid-free", cs))
            continue;
        fprintf(out, "Invalid free of 0x%llx [%s] from:\n", (unsigned long long)m->invalid[i].addr,
                tl_kind_name(m->invalid[i].kind));
        if (cs)
            print_stack(m, out, cs->frames, cs->nframes);
        fputc('\n', out);
    }
    for (size_t i = 0; i < m->npools; i++) {
        const struct tl_pool_row *p = &m->pools[i];
        if (p->extra && p->device < 0) { /* a framework's host pool */
            tl_bridge_print_host_pool(out, pid, p);
            continue;
        }
        if (p->figures_unknown) {
            snprintf(a, sizeof a, "unknown");
            snprintf(b, sizeof b, "unknown");
        } else {
            tl_format_size(p->reserved, a, sizeof a);
            tl_format_size(p->allocated, b, sizeof b);
        }
        free_space_words(p->layout_unknown, p->largest_free, p->fragmentation, c, sizeof c);
        fprintf(out, "==%d== pool '%s' (%s, device %d): reserved %s, allocated %s; %s", pid, p->name, p->kind, p->device, a, b, c);
        if (!strcmp(p->kind, "graph")) { /* the allocation nodes it holds */
            tl_format_size(p->graph_node_bytes, a, sizeof a);
            fprintf(out, "; %llu allocation node(s), %s", (unsigned long long)p->graph_nodes, a);
        }
        /* The driver stopped answering (at exit): its last answer. */
        if (p->reading && !strcmp(p->reading, "last_good")) {
            char when[48];
            tl_format_realtime(p->reading_time, when, sizeof when);
            fprintf(out, " [driver reading of %s]", when);
        } else if (p->reading && !strcmp(p->reading, "none")) {
            fprintf(out, " [the driver never answered]");
        }
        if (p->extra) /* which framework, state of when */
            tl_bridge_print_pool_note(out, p);
        fputc('\n', out);
    }
    for (int dev = 0; dev < TL_MAX_DEVICES; dev++) {
        const struct tl_device_row *r = &m->devices[dev];
        if (!r->present)
            continue;
        tl_format_size(r->reserved, a, sizeof a);
        tl_format_size(r->allocated, b, sizeof b);
        tl_format_size(r->reserved >= r->allocated ? r->reserved - r->allocated : 0, c, sizeof c);
        free_space_words(r->layout_unknown, r->largest_free, r->fragmentation, d, sizeof d);
        fprintf(out, "==%d== device %d: reserved %s, allocated %s, gap %s; %s\n", pid, dev, a, b, c, d);
    }
    if (m->nowners > 1 || (m->nowners == 1 && strcmp(m->owners[0].name, "user") != 0)) {
        fprintf(out, "==%d== owners:", pid);
        for (size_t i = 0; i < m->nowners; i++) {
            tl_format_size((uint64_t)m->owners[i].live_bytes, a, sizeof a);
            fprintf(out, "%s %s %s (%s)", i ? "," : "", m->owners[i].name, a, m->owners[i].cls);
        }
        fputc('\n', out);
    }
    if (m->held_bytes > 0) {
        tl_format_size((uint64_t)m->held_bytes, a, sizeof a);
        fprintf(out, "==%d== held by pools at exit (not leaks): %s\n", pid, a);
    }
    if (m->address_space_bytes > 0) {
        tl_format_size((uint64_t)m->address_space_bytes, a, sizeof a);
        fprintf(out, "==%d== address space reserved (VMM ranges, not memory): %s in %lld range(s)\n", pid, a,
                m->address_space_count);
    }
    if (m->unknown_size_count > 0)
        fprintf(out, "==%d== size unknown: %lld live allocation(s) the driver gave no size for, in no byte figure above\n",
                pid, m->unknown_size_count);
    if (m->nipc_exported > 0) {
        uint64_t exported = 0;
        bool unknown = false; /* an export of memory tracking never saw: unknown, not 0 */
        for (size_t i = 0; i < m->nipc_exported; i++) {
            unknown |= m->ipc_exported[i].bytes == UINT64_MAX;
            exported += unknown ? 0 : m->ipc_exported[i].bytes;
        }
        if (unknown)
            snprintf(a, sizeof a, "unknown bytes");
        else
            tl_format_size(exported, a, sizeof a);
        fprintf(out, "==%d== exported to other processes (CUDA IPC, this process's memory): %s in %zu allocation(s)\n",
                pid, a, m->nipc_exported);
    }
    if (m->ipc_mapped_count > 0) {
        tl_format_size((uint64_t)m->ipc_mapped_bytes, a, sizeof a);
        fprintf(out, "==%d== mapped from other processes (CUDA IPC, their memory): %s in %lld mapping(s)\n", pid, a,
                m->ipc_mapped_count);
    }
    if (m->suppressed_count > 0)
        fprintf(out, "==%d== suppressed: %lld byte(s) in %lld allocation(s)\n", pid, m->suppressed_bytes, m->suppressed_count);
    unsigned long long torn = atomic_load(&tl_stats.teardown_allocs);
    if (torn > 0)
        fprintf(out, "==%d== released by context teardown: %llu byte(s) in %llu allocation(s)\n", pid,
                (unsigned long long)atomic_load(&tl_stats.teardown_bytes), torn);
    unsigned long long dropped = atomic_load(&tl_dropped_events);
    if (dropped)
        fprintf(out, "==%d== warning: %llu event(s) dropped; counts may be low\n", pid, dropped);
    fprintf(out, "SUMMARY: tensorleak: %lld byte(s) leaked in %lld allocation(s). Report: %s\n", m->leaked_bytes, m->leaked_count,
            path);
    fflush(out);
}
