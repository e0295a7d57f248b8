/*
 * report_json.c — the report model as the JSON document of SPEC.md
 * (schema 1).  Field names are a contract: add, never rename.
 */
#include "report_gather.h"
#include "report.h"
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
    }
    return "exit";
}

static json_t *hex(uintptr_t v)
{
    char buf[32];
    snprintf(buf, sizeof buf, "0x%lx", (unsigned long)v);
    return json_string(buf);
}

static json_t *str_or_null(const char *s)
{
    return s ? json_string(s) : json_null();
}

json_t *tl_stack_to_json(struct tl_gather *m, const uintptr_t *frames, int n)
{
    json_t *stack = json_array();
    for (int i = 0; i < n; i++) {
        const struct tl_frame_info *f = tl_report_frame(m, frames[i]);
        struct tl_inline_frame shown[TL_MAX_INLINE + 1];
        int k = tl_frame_expand(f, shown);
        /* Inlined callees first, each marked, then the real function: all
         * at the same address, as addr2line -i and LeakSanitizer show them. */
        for (int j = 0; j < k; j++) {
            json_t *o = json_object();
            /* A Python frame has no address: "python": true instead, and
             * its module is the .py file. */
            if (!f->python)
                json_object_set_new(o, "address", hex(frames[i]));
            json_object_set_new(o, "module", str_or_null(f->module));
            if (!f->python)
                json_object_set_new(o, "offset", hex(f->offset));
            json_object_set_new(o, "function", str_or_null(shown[j].function));
            json_object_set_new(o, "file", str_or_null(shown[j].file));
            json_object_set_new(o, "line", json_integer(shown[j].line));
            if (f->python)
                json_object_set_new(o, "python", json_true());
            /* The raw C++ symbol beside its demangled "function". */
            if (shown[j].symbol)
                json_object_set_new(o, "symbol", json_string(shown[j].symbol));
            if (j < k - 1)
                json_object_set_new(o, "inlined", json_true());
            json_array_append_new(stack, o);
        }
    }
    return stack;
}

static json_t *command_line(void)
{
    json_t *arr = json_array();
    FILE *f = fopen("/proc/self/cmdline", "re");
    if (!f)
        return arr;
    char buf[4096];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    for (size_t i = 0; i < n;) {
        size_t len = strnlen(buf + i, n - i);
        /* Arguments are bytes; jansson wants UTF-8.  Keep what decodes. */
        json_t *s = json_stringn(buf + i, len);
        json_array_append_new(arr, s ? s : json_string("?"));
        i += len + 1;
    }
    return arr;
}

/* The site's exported or imported handles: each one's bytes and the
 * identity of its allocation ("st_dev:st_ino" of the shared descriptor,
 * null when unknown), which merge matches across processes. */
static json_t *shared_json(const struct tl_gather *m, uint32_t site)
{
    json_t *arr = json_array();
    for (size_t i = 0; i < m->nshares; i++) {
        const struct tl_share_row *r = &m->shares[i];
        if (r->site != site)
            continue;
        json_t *o = json_object();
        char id[48];
        snprintf(id, sizeof id, "%llu:%llu", (unsigned long long)r->file_dev, (unsigned long long)r->file_ino);
        json_object_set_new(o, "identity", r->known ? json_string(id) : json_null());
        json_object_set_new(o, "bytes", json_integer((json_int_t)r->bytes));
        json_object_set_new(o, "imported", json_boolean(r->imported));
        json_array_append_new(arr, o);
    }
    return arr;
}

static json_t *site_json(struct tl_gather *m, const struct tl_site *s)
{
    json_t *o = json_object();
    json_object_set_new(o, "kind", json_string(tl_kind_name(s->cs->kind)));
    /* The call site's id, as tensorleak_site_bytes (epoch.c) gives it. */
    json_object_set_new(o, "site", json_integer(s->cs->id));
    /* A site holding an allocation of unknown size has unknown bytes, not
     * the sum of the others. */
    json_object_set_new(o, "bytes", s->unknown_size_count > 0 ? json_null() : json_integer(s->bytes));
    json_object_set_new(o, "count", json_integer(s->count));
    if (s->unknown_size_count > 0)
        json_object_set_new(o, "unknown_size_allocations", json_integer(s->unknown_size_count));
    json_object_set_new(o, "suppressed", json_boolean(s->suppressed));
    json_object_set_new(o, "suppression", str_or_null(s->rule));
    json_object_set_new(o, "owner", str_or_null(s->owner));
    json_object_set_new(o, "owner_class", str_or_null(s->owner_class));
    if (s->cs->kind == TL_KIND_VMM_HANDLE || s->cs->kind == TL_KIND_VMM_IMPORTED) {
        json_object_set_new(o, "imported", json_boolean(s->cs->kind == TL_KIND_VMM_IMPORTED));
        json_object_set_new(o, "shared", shared_json(m, s->cs->id));
    }
    json_object_set_new(o, "stack", tl_stack_to_json(m, s->cs->frames, s->cs->nframes));
    json_t *allocs = json_array();
    for (size_t i = 0; i < s->nallocations; i++) {
        const struct tl_site_allocation *a = &s->allocations[i];
        json_t *e = json_object();
        json_object_set_new(e, "address", a->address ? hex(a->address) : json_null());
        json_object_set_new(e, "bytes", a->size_unknown ? json_null() : json_integer((json_int_t)a->bytes));
        json_object_set_new(e, "device", a->device < TL_MAX_DEVICES ? json_integer(a->device) : json_null());
        json_array_append_new(allocs, e);
    }
    json_object_set_new(o, "allocations", allocs);
    json_object_set_new(o, "allocations_unlisted", json_integer(s->count - (long long)s->nallocations));
    return o;
}

/* A shared allocation's identity (ipc.c's digest of its handle), as both
 * processes' reports write it. */
static json_t *ipc_handle_json(uint64_t digest)
{
    char buf[24];
    snprintf(buf, sizeof buf, "%016llx", (unsigned long long)digest);
    return digest ? json_string(buf) : json_null();
}

/* "ipc": what this process exported (its own memory, counted in its
 * figures) and what it mapped from others (counted in none), one entry per
 * allocation, each with its handle's digest for `tensorleak merge`. */
static json_t *ipc_json(const struct tl_gather *m)
{
    json_t *ipc = json_object(), *exported = json_array(), *mapped = json_array();
    for (size_t i = 0; i < m->nipc_exported; i++) {
        const struct tl_ipc_export *e = &m->ipc_exported[i];
        json_t *o = json_object();
        json_object_set_new(o, "handle", ipc_handle_json(e->digest));
        json_object_set_new(o, "address", hex(e->addr));
        json_object_set_new(o, "bytes", e->bytes == UINT64_MAX ? json_null() : json_integer((json_int_t)e->bytes));
        json_object_set_new(o, "site", e->callsite ? json_integer(e->callsite) : json_null());
        json_array_append_new(exported, o);
    }
    for (long long i = 0; i < m->ipc_mapped_count; i++) {
        const struct tl_ipc_mapping_row *r = &m->ipc_mapped[i];
        json_t *o = json_object();
        json_object_set_new(o, "handle", ipc_handle_json(r->digest));
        json_object_set_new(o, "address", hex(r->addr));
        json_object_set_new(o, "bytes", r->bytes ? json_integer((json_int_t)r->bytes) : json_null());
        json_object_set_new(o, "references", json_integer(r->refs));
        json_object_set_new(o, "site", r->callsite ? json_integer(r->callsite) : json_null());
        json_array_append_new(mapped, o);
    }
    json_object_set_new(ipc, "exported", exported);
    json_object_set_new(ipc, "mapped", mapped);
    return ipc;
}

/* A byte figure, or null when it is unknown. */
static json_t *bytes_unless(bool unknown, uint64_t bytes)
{
    return unknown ? json_null() : json_integer((json_int_t)bytes);
}

/* CLOCK_REALTIME seconds as ISO-8601 UTC with milliseconds. */
static json_t *iso_time(double t)
{
    char when[48];
    tl_format_realtime(t, when, sizeof when);
    return json_string(when);
}

/* The fields an owner row and an owner's row on one device share. */
static json_t *owner_json(const char *name, const char *cls, long long bytes, long long count)
{
    json_t *o = json_object();
    json_object_set_new(o, "name", json_string(name));
    json_object_set_new(o, "class", json_string(cls));
    json_object_set_new(o, "live_bytes", json_integer(bytes));
    json_object_set_new(o, "live_allocations", json_integer(count));
    return o;
}

/* The summary's figures (report.h's TL_SUMMARY_FIELDS), every field the
 * library writes marked present; unknown ones null, never 0. */
static struct tl_summary summary_of(const struct tl_gather *m)
{
    struct tl_summary s = {
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
        .total_allocations = atomic_load(&tl_stats.total_allocs),
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
            s.seen.present |= 1ull << i;
    if (m->layout_unknown)
        s.seen.null = 1ull << TL_SUMMARY_largest_free_block | 1ull << TL_SUMMARY_fragmentation;
    return s;
}

json_t *tl_report_to_json(struct tl_gather *m)
{
    json_t *root = json_object();
    if (!root)
        return NULL;
    json_object_set_new(root, "tool", json_string("tensorleak"));
    json_object_set_new(root, "schema", json_integer(1));
    json_object_set_new(root, "version", json_string(TL_VERSION));
    json_object_set_new(root, "reason", json_string(reason_name(m->reason)));
    json_object_set_new(root, "label", str_or_null(m->label));
    json_object_set_new(root, "seq", json_integer(m->seq));
    json_object_set_new(root, "pid", json_integer(getpid()));
    const char *rank = tl_options_rank();
    char *end = NULL;
    long r = rank ? strtol(rank, &end, 10) : 0;
    json_object_set_new(root, "rank", rank && end && !*end ? json_integer(r) : json_null());
    char host[HOST_NAME_MAX + 1] = "unknown";
    gethostname(host, sizeof host - 1);
    json_object_set_new(root, "host", json_string(host));
    json_object_set_new(root, "command", command_line());
    char when[64];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    json_object_set_new(root, "time", json_string(when));
    json_object_set_new(root, "depth", json_integer(tl_opt.depth));
    json_object_set_new(root, "python_depth", json_integer(tl_opt.python_depth));

    struct tl_summary s = summary_of(m);
    json_t *sum = report_summary_to_json(&s);
    json_object_set_new(root, "summary", sum ? sum : json_null());

    /* What tracking cost here: stacks that needed DWARF unwinding (the rest
     * were frame-pointer walks), threads whose bottom frames were learned,
     * times a thread took the live table over (lock-free while alone). */
    json_t *trk = json_object();
    json_object_set_new(trk, "stacks_unwound", json_integer((json_int_t)tl_stack_unwinds()));
    json_object_set_new(trk, "thread_entries_learned", json_integer((json_int_t)tl_stack_entries_learned()));
    /* Distinct stacks (call sites) with Python frames /
     * captures whose Python frame chain failed a check. */
    json_object_set_new(trk, "python_stacks", json_integer((json_int_t)tl_callsite_python_count()));
    json_object_set_new(trk, "python_stacks_unreadable", json_integer((json_int_t)tl_py_chains_unreadable()));
    long long code_frees = tl_py_code_frees();
    json_object_set_new(trk, "python_code_objects_freed", code_frees < 0 ? json_null() : json_integer((json_int_t)code_frees));
    json_object_set_new(trk, "cfi_walks_contradicted", json_integer((json_int_t)tl_stack_cfi_mismatches()));
    json_object_set_new(trk, "table_owner_claims", json_integer((json_int_t)tl_live_claims()));
    json_object_set_new(root, "tracker", trk);

    json_t *leaks = json_array();
    for (size_t i = 0; i < m->nsites; i++)
        json_array_append_new(leaks, site_json(m, &m->sites[i]));
    json_object_set_new(root, "leaks", leaks);

    json_object_set_new(root, "ipc", ipc_json(m));

    json_t *held = json_array();
    for (size_t i = 0; i < m->nheld; i++)
        json_array_append_new(held, site_json(m, &m->held[i]));
    json_object_set_new(root, "held", held);

    json_t *owners = json_array();
    for (size_t i = 0; i < m->nowners; i++) {
        const struct tl_owner_row *w = &m->owners[i];
        json_t *o = owner_json(w->name, w->cls, w->live_bytes, w->live_count);
        json_object_set_new(o, "peak_bytes", json_integer(w->peak_bytes));
        json_array_append_new(owners, o);
    }
    json_object_set_new(root, "owners", owners);

    /* Unknown (null) when the rows could not be attributed (out of memory),
     * never an empty list that would say nobody holds anything. */
    json_t *by_device = m->owner_devices_unknown ? json_null() : json_array();
    for (size_t i = 0; i < m->nowner_devices; i++) {
        const struct tl_owner_device_row *w = &m->owner_devices[i];
        json_t *o = owner_json(w->name, w->cls, w->live_bytes, w->live_count);
        json_object_set_new(o, "device", w->device < 0 ? json_null() : json_integer(w->device));
        json_array_append_new(by_device, o);
    }
    json_object_set_new(root, "owners_by_device", by_device);

    json_t *pools = json_array();
    for (size_t i = 0; i < m->npools; i++) {
        const struct tl_pool_row *p = &m->pools[i];
        json_t *o = json_object();
        json_object_set_new(o, "name", json_string(p->name));
        json_object_set_new(o, "kind", json_string(p->kind));
        json_object_set_new(o, "device", json_integer(p->device));
        json_object_set_new(o, "reserved_bytes", bytes_unless(p->figures_unknown, p->reserved));
        json_object_set_new(o, "allocated_bytes", bytes_unless(p->figures_unknown, p->allocated));
        json_object_set_new(o, "free_bytes", bytes_unless(p->figures_unknown, p->free));
        json_object_set_new(o, "largest_free_block", p->layout_unknown ? json_null() : json_integer((json_int_t)p->largest_free));
        json_object_set_new(o, "fragmentation", p->layout_unknown ? json_null() : json_real(p->fragmentation));
        json_object_set_new(o, "utilization", json_real(p->utilization));
        json_object_set_new(o, "peak_allocated_bytes", bytes_unless(p->figures_unknown, p->peak_allocated));
        json_object_set_new(o, "peak_reserved_bytes", bytes_unless(p->figures_unknown, p->peak_reserved));
        json_object_set_new(o, "segments", json_integer((json_int_t)p->segments));
        if (!strcmp(p->kind, "annotated")) {
            json_t *layout = json_array();
            for (size_t k = 0; k < p->nlayout; k++) {
                const struct tl_layout_segment *ls = &p->layout[k];
                json_t *seg = json_object(), *blocks = json_array();
                json_object_set_new(seg, "base", hex((uintptr_t)ls->base));
                json_object_set_new(seg, "bytes", json_integer((json_int_t)ls->bytes));
                for (size_t j = 0; j < ls->nblocks; j++) {
                    json_t *blk = json_object();
                    json_object_set_new(blk, "offset", json_integer((json_int_t)ls->blocks[j].offset));
                    json_object_set_new(blk, "bytes", json_integer((json_int_t)ls->blocks[j].bytes));
                    json_array_append_new(blocks, blk);
                }
                json_object_set_new(seg, "blocks", blocks);
                json_array_append_new(layout, seg);
            }
            json_object_set_new(o, "layout", layout);
            json_object_set_new(o, "layout_truncated", json_boolean(p->layout_truncated));
        }
        if (!strcmp(p->kind, "stream_ordered")) {
            json_object_set_new(o, "reserved_high_bytes", json_integer((json_int_t)p->reserved_high));
            json_object_set_new(o, "used_high_bytes", json_integer((json_int_t)p->used_high));
            json_object_set_new(o, "driver_used_bytes", json_integer((json_int_t)p->driver_used));
            json_object_set_new(o, "driver_mismatch", json_boolean(p->driver_mismatch));
            /* Which driver answer these figures are: "last_good" when the
             * driver stopped answering (at exit) and an earlier one is shown. */
            json_object_set_new(o, "reading", json_string(p->reading ? p->reading : "none"));
            json_object_set_new(o, "reading_time", p->reading_time > 0 ? iso_time(p->reading_time) : json_null());
        }
        if (!strcmp(p->kind, "graph")) {
            /* cuDeviceGetGraphMemAttribute's highs, which reading they are,
             * and the allocation nodes held in this memory (pools.c). */
            json_object_set_new(o, "reserved_high_bytes", bytes_unless(p->figures_unknown, p->reserved_high));
            json_object_set_new(o, "used_high_bytes", bytes_unless(p->figures_unknown, p->used_high));
            json_object_set_new(o, "reading", json_string(p->reading ? p->reading : "none"));
            json_object_set_new(o, "reading_time", p->reading_time > 0 ? iso_time(p->reading_time) : json_null());
            json_object_set_new(o, "allocation_nodes", json_integer((json_int_t)p->graph_nodes));
            json_object_set_new(o, "allocation_node_bytes", json_integer((json_int_t)p->graph_node_bytes));
        }
        if (p->extra) /* a framework pool's own fields (bridge.c) */
            json_object_update(o, p->extra);
        json_array_append_new(pools, o);
    }
    json_object_set_new(root, "pools", pools);

    json_t *devices = json_array();
    for (int d = 0; d < TL_MAX_DEVICES; d++) {
        const struct tl_device_row *dr = &m->devices[d];
        if (!dr->present)
            continue;
        json_t *o = json_object();
        json_object_set_new(o, "device", json_integer(d));
        json_object_set_new(o, "uuid", dr->uuid[0] ? json_string(dr->uuid) : json_null());
        json_object_set_new(o, "free", dr->have_info ? json_integer((json_int_t)dr->free) : json_null());
        json_object_set_new(o, "total", dr->have_info || dr->total_last_good ? json_integer((json_int_t)dr->total)
                                                                             : json_null());
        if (dr->total_last_good) { /* the driver stopped answering: its last total */
            json_object_set_new(o, "reading", json_string("last_good"));
            json_object_set_new(o, "reading_time", iso_time(dr->total_time));
        }
        json_object_set_new(o, "reserved_bytes", json_integer((json_int_t)dr->reserved));
        json_object_set_new(o, "allocated_bytes", json_integer((json_int_t)dr->allocated));
        json_object_set_new(o, "gap_bytes", json_integer((json_int_t)(dr->reserved - dr->allocated)));
        json_object_set_new(o, "largest_free_block", dr->layout_unknown ? json_null() : json_integer((json_int_t)dr->largest_free));
        json_object_set_new(o, "fragmentation", dr->layout_unknown ? json_null() : json_real(dr->fragmentation));
        json_array_append_new(devices, o);
    }
    json_object_set_new(root, "devices", devices);

    /* Figures that broke an invariant and were repaired (report.c). */
    json_t *repairs = json_array();
    for (size_t i = 0; i < m->nrepairs; i++) {
        const struct tl_repair *r = &m->repairs[i];
        json_t *o = json_object();
        json_object_set_new(o, "invariant", json_string(r->invariant));
        json_object_set_new(o, "where", json_string(r->where));
        json_object_set_new(o, "figure", json_string(r->figure));
        json_object_set_new(o, "was", json_integer(r->was));
        json_object_set_new(o, "now", json_integer(r->now));
        json_array_append_new(repairs, o);
    }
    json_object_set_new(root, "repairs", repairs);

    json_t *growth = json_array();
    for (size_t i = 0; i < m->ngrowth; i++) {
        const struct tl_growth_row *g = &m->growth[i];
        json_t *o = json_object();
        if (!g->cs) { /* a pool, owner or Python-site row (growth.c) */
            json_object_update(o, g->extra);
            json_object_set_new(o, "bytes_per_mark", json_integer(g->bytes_per_mark));
            json_object_set_new(o, "count_per_mark", json_null());
            json_object_set_new(o, "marks", json_integer(g->marks));
            json_object_set_new(o, "suppressed", json_boolean(g->suppressed));
            json_array_append_new(growth, o);
            continue;
        }
        json_object_set_new(o, "scope", json_string("call_site"));
        json_object_set_new(o, "kind", json_string(tl_kind_name(g->cs->kind)));
        json_object_set_new(o, "bytes_per_mark", json_integer(g->bytes_per_mark));
        json_object_set_new(o, "count_per_mark", json_integer(g->count_per_mark));
        json_object_set_new(o, "marks", json_integer(g->marks));
        json_object_set_new(o, "suppressed", json_boolean(g->suppressed));
        json_object_set_new(o, "stack", tl_stack_to_json(m, g->cs->frames, g->cs->nframes));
        json_array_append_new(growth, o);
    }
    json_object_set_new(root, "growth", growth);
    /* Which framework state the pools come from (null: none) */
    json_object_set(root, "bridge", m->bridge ? m->bridge : json_null());

    json_t *marks = json_array();
    for (size_t i = 0; i < m->nmarks; i++) {
        const struct tl_mark_row *k = &m->marks[i];
        json_t *o = json_object();
        json_object_set_new(o, "seq", json_integer(k->seq));
        json_object_set_new(o, "label", json_string(k->label));
        json_object_set_new(o, "live_bytes", json_integer(k->live_bytes));
        json_object_set_new(o, "reserved_bytes", json_integer((json_int_t)k->reserved_bytes));
        json_object_set_new(o, "device_free", json_integer((json_int_t)k->device_free));
        json_object_set_new(o, "time", json_real(k->time));
        json_array_append_new(marks, o);
    }
    json_object_set_new(root, "marks", marks);

    json_t *invalid = json_array();
    for (size_t i = 0; i < m->ninvalid; i++) {
        json_t *o = json_object();
        json_object_set_new(o, "address", hex((uintptr_t)m->invalid[i].addr));
        json_object_set_new(o, "kind", json_string(tl_kind_name(m->invalid[i].kind)));
        struct tl_callsite *cs = tl_callsite_by_id(m->invalid[i].callsite);
        json_object_set_new(o, "suppressed", json_boolean(cs && tl_suppressed(m, "invalid-free", cs)));
        json_object_set_new(o, "stack", cs ? tl_stack_to_json(m, cs->frames, cs->nframes) : json_array());
        json_array_append_new(invalid, o);
    }
    json_object_set_new(root, "invalid_frees", invalid);

    if (m->oom) {
        json_t *o = json_object();
        json_object_set_new(o, "bytes", json_integer((json_int_t)m->oom->bytes));
        json_object_set_new(o, "kind", json_string(tl_kind_name(m->oom->kind)));
        json_object_set_new(o, "device", json_integer(m->oom->device));
        json_object_set_new(o, "stack", tl_stack_to_json(m, m->oom->frames, m->oom->nframes));
        json_object_set_new(root, "oom", o);
    } else {
        json_object_set_new(root, "oom", json_null());
    }

    json_t *gate = json_object();
    json_t *fail_on = json_array(), *failed = json_array();
    static const char *const kinds[] = {"leak", "growth", "invalid-free", "oom"};
    for (unsigned k = 0; k < 4; k++) {
        if (tl_opt.fail_on & (1u << k))
            json_array_append_new(fail_on, json_string(kinds[k]));
        if (m->gate_failed & (1u << k))
            json_array_append_new(failed, json_string(kinds[k]));
    }
    json_object_set_new(gate, "fail_on", fail_on);
    json_object_set_new(gate, "failed", json_boolean(m->gate_failed != 0));
    json_object_set_new(gate, "failed_kinds", failed);
    json_object_set_new(root, "gate", gate);
    return root;
}
