/*
 * report_build.c: the gathered state (report_gather.h) as the report model
 * (model.h), every frame symbolized into it: the "resolve" pass of
 * assemble.c.  What a report says and when a field is null or left out is
 * decided here, once; report_write.c writes the model and report_text.c
 * prints it.  Field names are a contract (docs/report-format.md): add,
 * never rename.
 *
 * The model borrows: strings point into the gathered state (pool and owner
 * names, a framework pool's own fields), the per-report symbolizer cache
 * (frames) or the model's own arena (formatted figures), so a model lives
 * no longer than the gathered state it was built from.
 */
#include "report_gather.h"
#include "report_fields.h"
#include "tl_version.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *reason_name(enum tl_reason r)
{
    switch (r) {
    case TL_REASON_EXIT: return "exit";
    case TL_REASON_SIGNAL: return "signal";
    case TL_REASON_API: return "api";
    case TL_REASON_OOM: return "oom";
    case TL_REASON_INTERVAL: return "interval";
    case TL_REASON_BUDGET: return "budget";
    case TL_REASON_DETACH: return "detach";
    }
    return "exit";
}

struct build {
    struct tl_report *r;
    struct tl_gather *m;
    bool failed; /* out of memory */
    /* The live file's model (tl_report_build_live): no call sites, stacks
     * or pool layouts, so nothing is symbolized once a second. */
    bool live;
};

static void *alloc(struct build *b, size_t n, size_t size)
{
    if (n == 0)
        return NULL;
    void *p = report_alloc(b->r, n * size);
    b->failed |= !p;
    return p;
}

static const char *hex(struct build *b, uintptr_t v)
{
    const char *s = report_printf(b->r, "0x%lx", (unsigned long)v);
    b->failed |= !s;
    return s;
}

static const char *iso_time(struct build *b, double t)
{
    char when[48];
    tl_format_realtime(t, when, sizeof when);
    const char *s = report_strdup(b->r, when);
    b->failed |= !s;
    return s;
}

/* A shared allocation's identity (ipc.c's digest of its handle), as both
 * processes' reports write it; NULL (null) when unknown. */
static const char *ipc_handle(struct build *b, uint64_t digest)
{
    return digest ? report_printf(b->r, "%016llx", (unsigned long long)digest) : NULL;
}

/* A stack as the report lists it: inlined callees first, each marked, then
 * the real function, all at the same address, as addr2line -i and
 * LeakSanitizer show them.  A Python frame has no address: "python": true
 * instead, and its module is the .py file. */
static void build_stack(struct build *b, const uintptr_t *frames, int n, struct tl_stack *out)
{
    out->count = 0;
    if (b->live)
        return;
    size_t shown_count = 0;
    for (int i = 0; i < n; i++) {
        struct tl_inline_frame shown[TL_MAX_INLINE + 1];
        shown_count += (size_t)tl_frame_expand(tl_report_frame(b->m, frames[i]), shown);
    }
    out->frames = alloc(b, shown_count, sizeof *out->frames);
    if (!out->frames)
        return;
    for (int i = 0; i < n; i++) {
        const struct tl_frame_info *f = tl_report_frame(b->m, frames[i]);
        struct tl_inline_frame shown[TL_MAX_INLINE + 1];
        int k = tl_frame_expand(f, shown);
        /* The first count's symbolization and this one can differ only when
         * memory ran out in between (an uncached fallback): never past it. */
        for (int j = 0; j < k && out->count < shown_count; j++) {
            struct tl_frame *o = &out->frames[out->count++];
            o->seen.present = TL_BIT(FRAME, module) | TL_BIT(FRAME, function) | TL_BIT(FRAME, file) |
                              TL_BIT(FRAME, line);
            if (!f->python) {
                o->address = hex(b, frames[i]);
                o->offset = hex(b, f->offset);
                o->seen.present |= TL_BIT(FRAME, address) | TL_BIT(FRAME, offset);
            } else {
                o->python = true;
                o->seen.present |= TL_BIT(FRAME, python);
            }
            o->module = f->module;
            o->function = shown[j].function;
            o->file = shown[j].file;
            o->line = shown[j].line;
            if (shown[j].symbol) { /* the raw C++ symbol beside its demangled function */
                o->symbol = shown[j].symbol;
                o->seen.present |= TL_BIT(FRAME, symbol);
            }
            if (j < k - 1) {
                o->inlined = true;
                o->seen.present |= TL_BIT(FRAME, inlined);
            }
        }
    }
}

/* The command line: arguments are bytes, reports UTF-8; an argument that
 * does not decode is "?". */
static void build_command(struct build *b)
{
    struct tl_report *r = b->r;
    FILE *f = fopen("/proc/self/cmdline", "re");
    if (!f)
        return;
    char buf[4096];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    size_t args = 0;
    for (size_t i = 0; i < n; i += strnlen(buf + i, n - i) + 1)
        args++;
    r->command = alloc(b, args, sizeof *r->command);
    for (size_t i = 0; r->command && i < n;) {
        size_t len = strnlen(buf + i, n - i);
        json_t *s = json_stringn(buf + i, len); /* jansson's UTF-8 check */
        r->command[r->command_count++] = s ? report_strdup(r, buf + i) : "?";
        json_decref(s);
        i += len + 1;
    }
}

/* The site's exported or imported handles: each one's bytes and the
 * identity of its allocation ("st_dev:st_ino" of the shared descriptor,
 * null when unknown), which merge matches across processes. */
static void build_shared(struct build *b, uint32_t site, struct tl_leak *l)
{
    const struct tl_gather *m = b->m;
    size_t n = 0;
    for (size_t i = 0; i < m->nshares; i++)
        n += m->shares[i].site == site;
    l->shared = alloc(b, n, sizeof *l->shared);
    for (size_t i = 0; l->shared && i < m->nshares; i++) {
        const struct tl_share_row *s = &m->shares[i];
        if (s->site != site)
            continue;
        struct tl_share *o = &l->shared[l->share_count++];
        o->identity = s->known ? report_printf(b->r, "%llu:%llu", (unsigned long long)s->file_dev,
                                               (unsigned long long)s->file_ino)
                               : NULL;
        o->bytes = s->bytes;
        o->imported = s->imported;
        o->seen.present = TL_ALL(SHARE) & ~TL_BIT(SHARE, counted_elsewhere);
    }
}

static void build_site(struct build *b, const struct tl_site *s, struct tl_leak *o)
{
    o->kind = tl_kind_name(s->cs->kind);
    o->site = s->cs->id; /* as tensorleak_site_bytes (epoch.c) gives it */
    o->bytes = (uint64_t)s->bytes;
    o->count = (uint64_t)s->count;
    o->suppressed = s->suppressed;
    o->suppression = s->rule;
    o->owner = s->owner;
    o->owner_class = s->owner_class;
    o->seen.present = TL_ALL(SITE) & ~(TL_BIT(SITE, unknown_size_allocations) | TL_BIT(SITE, imported) |
                                       TL_BIT(SITE, shared) | TL_BIT(SITE, rank) | TL_BIT(SITE, pid));
    /* A site holding an allocation of unknown size has unknown bytes, not
     * the sum of the others. */
    if (s->unknown_size_count > 0) {
        o->seen.null |= TL_BIT(SITE, bytes);
        o->unknown_size_allocations = (uint64_t)s->unknown_size_count;
        o->seen.present |= TL_BIT(SITE, unknown_size_allocations);
    }
    if (s->cs->kind == TL_KIND_VMM_HANDLE || s->cs->kind == TL_KIND_VMM_IMPORTED) {
        o->imported = s->cs->kind == TL_KIND_VMM_IMPORTED;
        build_shared(b, s->cs->id, o);
        o->seen.present |= TL_BIT(SITE, imported) | TL_BIT(SITE, shared);
    }
    build_stack(b, s->cs->frames, s->cs->nframes, &o->stack);
    o->allocations = alloc(b, s->nallocations, sizeof *o->allocations);
    for (size_t i = 0; o->allocations && i < s->nallocations; i++) {
        const struct tl_site_allocation *a = &s->allocations[i];
        struct tl_allocation *e = &o->allocations[o->allocation_count++];
        e->address = a->address;
        e->bytes = a->bytes;
        e->device = a->device;
        e->seen.present = TL_ALL(ALLOC);
        if (!a->address) /* a row keyed by a handle */
            e->seen.null |= TL_BIT(ALLOC, address);
        if (a->size_unknown)
            e->seen.null |= TL_BIT(ALLOC, bytes);
        if (a->device >= TL_MAX_DEVICES) /* host memory */
            e->seen.null |= TL_BIT(ALLOC, device);
    }
    o->allocations_unlisted = (uint64_t)(s->count - (long long)s->nallocations);
}

static struct tl_leak *build_sites(struct build *b, const struct tl_site *sites, size_t n, size_t *count)
{
    struct tl_leak *out = alloc(b, n, sizeof *out);
    for (size_t i = 0; out && i < n; i++)
        build_site(b, &sites[i], &out[(*count)++]);
    return out;
}

/* "ipc": what this process exported (its own memory, counted in its
 * figures) and what it mapped from others (counted in none), one entry per
 * allocation, each with its handle's digest for `tensorleak merge`. */
static void build_ipc(struct build *b)
{
    const struct tl_gather *m = b->m;
    struct tl_ipc *ipc = &b->r->ipc;
    ipc->seen.present = TL_ALL(IPC);
    ipc->exported = alloc(b, m->nipc_exported, sizeof *ipc->exported);
    for (size_t i = 0; ipc->exported && i < m->nipc_exported; i++) {
        const struct tl_ipc_export *e = &m->ipc_exported[i];
        struct tl_ipc_entry *o = &ipc->exported[ipc->exported_count++];
        o->handle = ipc_handle(b, e->digest);
        o->address = hex(b, e->addr);
        o->bytes = e->bytes;
        o->site = e->callsite;
        o->seen.present = TL_ALL(IPCX) & ~(TL_BIT(IPCX, rank) | TL_BIT(IPCX, pid));
        if (e->bytes == UINT64_MAX) /* memory tracking never saw */
            o->seen.null |= TL_BIT(IPCX, bytes);
        if (!e->callsite)
            o->seen.null |= TL_BIT(IPCX, site);
    }
    size_t nmapped = m->ipc_mapped_count > 0 ? (size_t)m->ipc_mapped_count : 0;
    ipc->mapped = alloc(b, nmapped, sizeof *ipc->mapped);
    for (size_t i = 0; ipc->mapped && i < nmapped; i++) {
        const struct tl_ipc_mapping_row *e = &m->ipc_mapped[i];
        struct tl_ipc_entry *o = &ipc->mapped[ipc->mapped_count++];
        o->handle = ipc_handle(b, e->digest);
        o->address = hex(b, e->addr);
        o->bytes = e->bytes;
        o->references = e->refs;
        o->site = e->callsite;
        o->seen.present = TL_ALL(IPCM) & ~(TL_BIT(IPCM, rank) | TL_BIT(IPCM, pid) | TL_BIT(IPCM, exported_by));
        if (!e->bytes) /* the driver did not say */
            o->seen.null |= TL_BIT(IPCM, bytes);
        if (!e->callsite)
            o->seen.null |= TL_BIT(IPCM, site);
    }
}

static void build_owners(struct build *b)
{
    const struct tl_gather *m = b->m;
    struct tl_report *r = b->r;
    r->owners = alloc(b, m->nowners, sizeof *r->owners);
    for (size_t i = 0; r->owners && i < m->nowners; i++) {
        const struct tl_owner_row *w = &m->owners[i];
        r->owners[r->owner_count++] = (struct tl_owner){
            .name = w->name, .cls = w->cls, .live_bytes = (uint64_t)w->live_bytes,
            .live_allocations = (uint64_t)w->live_count, .peak_bytes = (uint64_t)w->peak_bytes,
            .seen.present = TL_ALL(OWNER)};
    }
    /* Unknown (null) when the rows could not be attributed (out of memory),
     * never an empty list that would say nobody holds anything. */
    if (m->owner_devices_unknown)
        r->seen.null |= TL_BIT(REPORT, owners_by_device);
    r->owner_devices = alloc(b, m->nowner_devices, sizeof *r->owner_devices);
    for (size_t i = 0; r->owner_devices && i < m->nowner_devices; i++) {
        const struct tl_owner_device_row *w = &m->owner_devices[i];
        struct tl_owner_device *o = &r->owner_devices[r->owner_device_count++];
        *o = (struct tl_owner_device){.name = w->name, .cls = w->cls, .live_bytes = (uint64_t)w->live_bytes,
                                      .live_allocations = (uint64_t)w->live_count, .device = w->device,
                                      .seen.present = TL_ALL(OWNDEV) & ~(TL_BIT(OWNDEV, rank) | TL_BIT(OWNDEV, pid))};
        if (w->device < 0) /* host memory */
            o->seen.null |= TL_BIT(OWNDEV, device);
    }
}

/* The fields an allocator view gathered as JSON, read into their element
 * through its table: a scoped growth row's (growth.c), the bridge object.
 * A field the table refuses is left out, the others kept, and the report
 * says so once (a framework pool's refused fields too, bridge.c). */
static atomic_bool refused;

static void add_json_fields(struct build *b, json_t *extra, const char *table, void *element)
{
    const struct tl_table *t = report_field_table(&tl_report_table, table);
    char error[160];
    if (t && extra && !report_read_into(b->r, extra, t, element, error, sizeof error))
        tl_warn(&refused, "report: gathered %s fields left out (%s)", t->name, error);
}

/* A framework pool's own fields, as bridge.c filled them from the
 * framework's state (they live in the gathered state): where the state
 * came from and when, which framework, its layout and Python lines, and
 * the counts it does not publish (null). */
static void add_bridged_fields(struct tl_pool *o, const struct tl_pool *f)
{
    o->source = f->source;
    o->read_at = f->read_at;
    o->stale = f->stale;
    o->state = f->state;
    o->framework = f->framework;
    o->free_blocks = f->free_blocks;
    o->host = f->host;
    o->layout = f->layout;
    o->layout_count = f->layout_count;
    o->layout_truncated = f->layout_truncated;
    o->sites = f->sites;
    o->site_count = f->site_count;
    o->seen.present |= f->seen.present;
    o->seen.null |= f->seen.null;
}

static void build_pools(struct build *b)
{
    const struct tl_gather *m = b->m;
    struct tl_report *r = b->r;
    r->pools = alloc(b, m->npools, sizeof *r->pools);
    for (size_t i = 0; r->pools && i < m->npools; i++) {
        const struct tl_pool_row *p = &m->pools[i];
        struct tl_pool *o = &r->pools[r->pool_count++];
        o->name = p->name;
        o->kind = p->kind;
        o->device = p->device;
        o->reserved_bytes = p->reserved;
        o->allocated_bytes = p->allocated;
        o->free_bytes = p->free;
        o->largest_free_block = p->largest_free;
        o->fragmentation = p->fragmentation;
        o->utilization = p->utilization;
        o->peak_allocated_bytes = p->peak_allocated;
        o->peak_reserved_bytes = p->peak_reserved;
        o->segments = p->segments;
        o->seen.present = TL_BIT(POOL, name) | TL_BIT(POOL, kind) | TL_BIT(POOL, device) |
                          TL_BIT(POOL, reserved_bytes) | TL_BIT(POOL, allocated_bytes) | TL_BIT(POOL, free_bytes) |
                          TL_BIT(POOL, largest_free_block) | TL_BIT(POOL, fragmentation) |
                          TL_BIT(POOL, utilization) | TL_BIT(POOL, peak_allocated_bytes) |
                          TL_BIT(POOL, peak_reserved_bytes) | TL_BIT(POOL, segments);
        if (p->figures_unknown) /* graph memory the driver never reported */
            o->seen.null |= TL_BIT(POOL, reserved_bytes) | TL_BIT(POOL, allocated_bytes) | TL_BIT(POOL, free_bytes) |
                            TL_BIT(POOL, peak_allocated_bytes) | TL_BIT(POOL, peak_reserved_bytes);
        if (p->layout_unknown)
            o->seen.null |= TL_BIT(POOL, largest_free_block) | TL_BIT(POOL, fragmentation);
        if (!strcmp(p->kind, "annotated") && !b->live) {
            o->layout = alloc(b, p->nlayout, sizeof *o->layout);
            for (size_t k = 0; o->layout && k < p->nlayout; k++) {
                const struct tl_layout_segment *ls = &p->layout[k];
                struct tl_segment *seg = &o->layout[o->layout_count++];
                seg->base = hex(b, (uintptr_t)ls->base);
                seg->bytes = ls->bytes;
                seg->seen.present = TL_ALL(SEGMENT);
                seg->blocks = alloc(b, ls->nblocks, sizeof *seg->blocks);
                for (size_t j = 0; seg->blocks && j < ls->nblocks; j++)
                    seg->blocks[seg->block_count++] = (struct tl_block){
                        .offset = ls->blocks[j].offset, .bytes = ls->blocks[j].bytes, .seen.present = TL_ALL(BLOCK)};
            }
            o->layout_truncated = p->layout_truncated;
            o->seen.present |= TL_BIT(POOL, layout) | TL_BIT(POOL, layout_truncated);
        }
        /* Which driver answer the figures are: "last_good" when the driver
         * stopped answering (at exit) and an earlier one is shown. */
        bool stream = !strcmp(p->kind, "stream_ordered"), graph = !strcmp(p->kind, "graph");
        if (stream || graph) {
            o->reserved_high_bytes = p->reserved_high;
            o->used_high_bytes = p->used_high;
            o->reading = p->reading ? p->reading : "none";
            o->reading_time = p->reading_time > 0 ? iso_time(b, p->reading_time) : NULL;
            o->seen.present |= TL_BIT(POOL, reserved_high_bytes) | TL_BIT(POOL, used_high_bytes) |
                               TL_BIT(POOL, reading) | TL_BIT(POOL, reading_time);
        }
        if (stream) {
            o->driver_used_bytes = p->driver_used;
            o->driver_mismatch = p->driver_mismatch;
            o->seen.present |= TL_BIT(POOL, driver_used_bytes) | TL_BIT(POOL, driver_mismatch);
        }
        if (graph) {
            /* cuDeviceGetGraphMemAttribute's highs, and the allocation nodes
             * held in this memory (pools.c). */
            if (p->figures_unknown)
                o->seen.null |= TL_BIT(POOL, reserved_high_bytes) | TL_BIT(POOL, used_high_bytes);
            o->allocation_nodes = p->graph_nodes;
            o->allocation_node_bytes = p->graph_node_bytes;
            o->seen.present |= TL_BIT(POOL, allocation_nodes) | TL_BIT(POOL, allocation_node_bytes);
        }
        if (p->bridged)
            add_bridged_fields(o, p->bridged);
        if (p->refused)
            tl_warn(&refused, "report: gathered pool fields left out (%s)", p->refused);
    }
}

static void build_devices(struct build *b)
{
    const struct tl_gather *m = b->m;
    struct tl_report *r = b->r;
    size_t n = 0;
    for (int d = 0; d < TL_MAX_DEVICES; d++)
        n += m->devices[d].present;
    r->devices = alloc(b, n, sizeof *r->devices);
    for (int d = 0; r->devices && d < TL_MAX_DEVICES; d++) {
        const struct tl_device_row *dr = &m->devices[d];
        if (!dr->present)
            continue;
        struct tl_device *o = &r->devices[r->device_count++];
        o->device = d;
        o->uuid = dr->uuid[0] ? dr->uuid : NULL;
        o->free = dr->free;
        o->total = dr->total;
        o->reserved_bytes = dr->reserved;
        o->allocated_bytes = dr->allocated;
        o->gap_bytes = dr->reserved - dr->allocated;
        o->largest_free_block = dr->largest_free;
        o->fragmentation = dr->fragmentation;
        o->seen.present = TL_ALL(DEVICE) & ~(TL_BIT(DEVICE, reading) | TL_BIT(DEVICE, reading_time) |
                                             TL_BIT(DEVICE, rank) | TL_BIT(DEVICE, pid));
        if (!dr->have_info)
            o->seen.null |= TL_BIT(DEVICE, free);
        if (!dr->have_info && !dr->total_last_good)
            o->seen.null |= TL_BIT(DEVICE, total);
        if (dr->total_last_good) { /* the driver stopped answering: its last total */
            o->reading = "last_good";
            o->reading_time = iso_time(b, dr->total_time);
            o->seen.present |= TL_BIT(DEVICE, reading) | TL_BIT(DEVICE, reading_time);
        }
        if (dr->layout_unknown)
            o->seen.null |= TL_BIT(DEVICE, largest_free_block) | TL_BIT(DEVICE, fragmentation);
    }
}

static void build_growth(struct build *b)
{
    const struct tl_gather *m = b->m;
    struct tl_report *r = b->r;
    r->growth = alloc(b, m->ngrowth, sizeof *r->growth);
    for (size_t i = 0; r->growth && i < m->ngrowth; i++) {
        const struct tl_growth_row *g = &m->growth[i];
        struct tl_growth *o = &r->growth[r->growth_count++];
        o->bytes_per_mark = (uint64_t)g->bytes_per_mark;
        o->marks = (uint64_t)g->marks;
        o->suppressed = g->suppressed;
        o->seen.present = TL_BIT(GROWTH, bytes_per_mark) | TL_BIT(GROWTH, count_per_mark) | TL_BIT(GROWTH, marks) |
                          TL_BIT(GROWTH, suppressed);
        if (!g->cs) { /* a pool, owner or Python-site row: its fields from growth.c */
            o->seen.null |= TL_BIT(GROWTH, count_per_mark);
            add_json_fields(b, g->extra, "growth", o);
            continue;
        }
        o->scope = "call_site";
        o->kind = tl_kind_name(g->cs->kind);
        o->count_per_mark = (uint64_t)g->count_per_mark;
        build_stack(b, g->cs->frames, g->cs->nframes, &o->stack);
        o->seen.present |= TL_BIT(GROWTH, scope) | TL_BIT(GROWTH, kind) | TL_BIT(GROWTH, stack);
    }
}

static void build_marks_and_invalid(struct build *b)
{
    struct tl_gather *m = b->m;
    struct tl_report *r = b->r;
    r->marks = alloc(b, m->nmarks, sizeof *r->marks);
    for (size_t i = 0; r->marks && i < m->nmarks; i++) {
        const struct tl_mark_row *k = &m->marks[i];
        r->marks[r->mark_count++] = (struct tl_mark){
            .seq = k->seq, .label = k->label, .live_bytes = (uint64_t)k->live_bytes,
            .reserved_bytes = k->reserved_bytes, .device_free = k->device_free, .time = k->time,
            .seen.present = TL_ALL(MARK), .seen.null = k->device_free_known ? 0 : TL_BIT(MARK, device_free)};
    }
    r->invalid_frees = alloc(b, m->ninvalid, sizeof *r->invalid_frees);
    for (size_t i = 0; r->invalid_frees && i < m->ninvalid; i++) {
        struct tl_invalid_free *o = &r->invalid_frees[r->invalid_free_count++];
        struct tl_callsite *cs = tl_callsite_by_id(m->invalid[i].callsite);
        o->address = hex(b, (uintptr_t)m->invalid[i].addr);
        o->kind = tl_kind_name(m->invalid[i].kind);
        o->suppressed = m->invalid_suppressed[i]; /* decided by the judge pass */
        if (cs)
            build_stack(b, cs->frames, cs->nframes, &o->stack);
        o->seen.present = TL_ALL(INVALID) & ~(TL_BIT(INVALID, rank) | TL_BIT(INVALID, pid));
    }
}

static void build_gate(struct build *b)
{
    struct tl_gate *g = &b->r->gate;
    static const char *const kinds[] = {"leak", "growth", "invalid-free", "oom"};
    g->fail_on = alloc(b, 4, sizeof *g->fail_on);
    g->failed_kinds = alloc(b, 4, sizeof *g->failed_kinds);
    for (unsigned k = 0; g->fail_on && g->failed_kinds && k < 4; k++) {
        if (tl_opt.fail_on & (1u << k))
            g->fail_on[g->fail_on_count++] = kinds[k];
        if (b->m->gate_failed & (1u << k))
            g->failed_kinds[g->failed_kind_count++] = kinds[k];
    }
    g->failed = b->m->gate_failed != 0;
    g->seen.present = TL_ALL(GATE);
}

/* The summary's figures (model.h's TL_SUMMARY_FIELDS), every field the
 * library writes marked present; unknown ones null, never 0. */
static void build_summary(const struct tl_gather *m, struct tl_summary *s)
{
    *s = (struct tl_summary){
        .leaked_bytes = (uint64_t)m->leaked_bytes,
        .leaked_allocations = (uint64_t)m->leaked_count,
        .live_bytes = (uint64_t)m->live_bytes,
        .live_allocations = (uint64_t)m->live_count,
        .peak_live_bytes = (uint64_t)m->peak_live_bytes,
        .reserved_bytes = m->reserved,
        .allocated_bytes = m->allocated,
        .gap_bytes = m->reserved - m->allocated,
        .largest_free_block = m->largest_free,
        .fragmentation = m->fragmentation,
        .invariants_repaired = m->repairs_total,
        .held_bytes = (uint64_t)m->held_bytes,
        /* VA reservations and other processes' memory mapped here (CUDA
         * IPC) are address space, apart from memory. */
        .address_space_bytes = (uint64_t)m->address_space_bytes,
        .address_space_reservations = (uint64_t)m->address_space_count,
        .imported_bytes = (uint64_t)m->imported_bytes,
        .imported_allocations = (uint64_t)m->imported_count,
        .leaked_address_space_bytes = (uint64_t)m->leaked_address_space_bytes,
        .unknown_size_allocations = (uint64_t)m->unknown_size_count,
        .ipc_mapped_bytes = (uint64_t)m->ipc_mapped_bytes,
        .ipc_mappings = (uint64_t)m->ipc_mapped_count,
        .leaked_ipc_mapped_bytes = (uint64_t)m->leaked_ipc_mapped_bytes,
        .invalid_frees = atomic_load(&tl_stats.invalid_frees),
        .suppressed_allocations = (uint64_t)m->suppressed_count,
        .suppressed_bytes = (uint64_t)m->suppressed_bytes,
        .total_allocations = atomic_load(&tl_stats.total_allocs) - tl_attach_total_base(),
        .failed_allocations = atomic_load(&tl_stats.failed_allocs),
        .oom_failures = atomic_load(&tl_stats.oom_failures),
        .released_by_teardown_bytes = atomic_load(&tl_stats.teardown_bytes),
        .released_by_teardown_allocations = atomic_load(&tl_stats.teardown_allocs),
        .dropped_events = atomic_load(&tl_dropped_events),
        .call_sites = tl_callsite_count(),
        .budget_crossings = tl_budget_crossings(),
        .budget_refusals = tl_budget_refusals(),
    };
    for (size_t i = 0; i < TL_SUMMARY_NFIELDS; i++) /* all but merge's own */
        if (tl_summary_fields[i].merge != TL_SUMMARY_MERGE_OWN)
            s->seen.present |= 1ull << i;
    if (m->layout_unknown)
        s->seen.null = 1ull << TL_SUMMARY_largest_free_block | 1ull << TL_SUMMARY_fragmentation;
}

/* What tracking cost here: stacks that needed DWARF unwinding (the rest
 * were frame-pointer walks), threads whose bottom frames were learned,
 * distinct stacks with Python frames and captures whose Python chain failed
 * a check, code objects freed (null where not counted), times a thread
 * took the live table over (lock-free while alone). */
static void build_tracker(struct tl_tracker *t)
{
    long long code_frees = tl_py_code_frees();
    *t = (struct tl_tracker){
        .stacks_unwound = tl_stack_unwinds(),
        .thread_entries_learned = tl_stack_entries_learned(),
        .python_stacks = tl_callsite_python_count(),
        .python_stacks_unreadable = tl_py_chains_unreadable(),
        .python_code_objects_freed = code_frees < 0 ? 0 : (uint64_t)code_frees,
        .cfi_walks_contradicted = tl_stack_cfi_mismatches(),
        .table_owner_claims = tl_live_claims(),
        .walk_verdicts_evicted = tl_stack_verdicts_evicted(),
        .seen.present = TL_ALL(TRACKER),
    };
    if (code_frees < 0)
        t->seen.null = TL_BIT(TRACKER, python_code_objects_freed);
}

/* "attach": when tracking began and each device's memory from before
 * (attach_before.c); absent in a process that was not attached to. */
static void build_attach(struct build *b)
{
    struct tl_report *r = b->r;
    struct tl_attach_row rows[TL_MAX_DEVICES];
    size_t n = 0;
    long long when = 0;
    if (!tl_attach_before_rows(rows, TL_MAX_DEVICES, &n, &when))
        return;
    struct tl_attach *a = &r->attach;
    r->seen.present |= TL_BIT(REPORT, attach);
    a->seen.present = TL_ALL(ATTACH);
    a->time = iso_time(b, (double)when);
    a->interval = tl_opt.interval;
    if (tl_opt.interval <= 0)
        a->seen.null |= TL_BIT(ATTACH, interval);
    a->before = alloc(b, n, sizeof *a->before);
    for (size_t i = 0; a->before && i < n; i++) {
        struct tl_attach_before *o = &a->before[a->before_count++];
        o->device = rows[i].device;
        o->process_bytes = rows[i].process_bytes;
        o->freed_bytes = rows[i].freed_bytes;
        o->freed_allocations = rows[i].freed_allocations;
        o->framework_reserved_bytes = rows[i].pools_reserved;
        o->seen.present = TL_ALL(BEFORE);
        if (!rows[i].known)
            o->seen.null |= TL_BIT(BEFORE, process_bytes);
        if (!rows[i].pools_known)
            o->seen.null |= TL_BIT(BEFORE, framework_reserved_bytes);
    }
}

static bool build_model(struct tl_gather *m, struct tl_report *r, bool live)
{
    memset(r, 0, sizeof *r);
    struct build b = {.r = r, .m = m, .live = live};
    r->seen.present = TL_ALL(REPORT) & ~(TL_BIT(REPORT, merged_from) | TL_BIT(REPORT, sites) | TL_BIT(REPORT, ranks) |
                                        TL_BIT(REPORT, attach));
    r->tool = "tensorleak";
    r->schema = 1;
    r->version = TL_VERSION;
    r->reason = reason_name(m->reason);
    r->label = m->label;
    r->seq = m->seq;
    r->pid = getpid();
    const char *rank = tl_options_rank();
    char *end = NULL;
    long rk = rank ? strtol(rank, &end, 10) : 0;
    if (rank && end && !*end)
        r->rank = rk;
    else
        r->seen.null |= TL_BIT(REPORT, rank);
    char host[HOST_NAME_MAX + 1] = "unknown";
    gethostname(host, sizeof host - 1);
    r->host = report_strdup(r, host);
    build_command(&b);
    char when[64];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    r->time = report_strdup(r, when);
    r->depth = tl_opt.depth;
    r->python_depth = tl_opt.python_depth;

    build_summary(m, &r->summary);
    build_tracker(&r->tracker);
    r->leaks = live ? NULL : build_sites(&b, m->sites, m->nsites, &r->leak_count);
    build_ipc(&b);
    r->held = live ? NULL : build_sites(&b, m->held, m->nheld, &r->held_count);
    build_owners(&b);
    build_pools(&b);
    build_devices(&b);

    /* Figures that broke an invariant and were repaired (assemble.c). */
    r->repairs = alloc(&b, m->nrepairs, sizeof *r->repairs);
    for (size_t i = 0; r->repairs && i < m->nrepairs; i++) {
        const struct tl_repair *p = &m->repairs[i];
        r->repairs[r->repair_count++] = (struct tl_repair_entry){
            .invariant = p->invariant, .where = p->where, .figure = p->figure, .was = p->was, .now = p->now,
            .seen.present = TL_ALL(REPAIR)};
    }
    build_growth(&b);
    /* Which framework state the pools come from (null: none). */
    if (m->bridge)
        add_json_fields(&b, m->bridge, "bridge", &r->bridge);
    else
        r->seen.null |= TL_BIT(REPORT, bridge);
    build_marks_and_invalid(&b);
    if (m->oom) {
        r->oom = (struct tl_oom){.bytes = m->oom->bytes, .kind = tl_kind_name(m->oom->kind), .device = m->oom->device,
                                 .seen.present = TL_BIT(OOM, bytes) | TL_BIT(OOM, kind) | TL_BIT(OOM, device) |
                                                 TL_BIT(OOM, stack)};
        build_stack(&b, m->oom->frames, m->oom->nframes, &r->oom.stack);
        if (m->oom_analysis) /* the verdict (oom.c) */
            add_json_fields(&b, m->oom_analysis, "oom", &r->oom);
    } else {
        r->seen.null |= TL_BIT(REPORT, oom);
    }
    build_gate(&b);
    build_attach(&b);
    report_derive(r);
    if (b.failed || !r->host || !r->time) {
        report_free(r);
        return false;
    }
    return true;
}

bool tl_report_build(struct tl_gather *m, struct tl_report *r)
{
    return build_model(m, r, false);
}

bool tl_report_build_live(struct tl_gather *m, struct tl_report *r)
{
    return build_model(m, r, true);
}
