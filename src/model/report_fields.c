/*
 * report_fields.c: the tables of the report model (model.h), one a JSON
 * object, each listing its fields in the order reports write them, and
 * what each object derives once read or built.
 *
 * The order is the library's, as it has written reports since schema 1; a
 * field only merged reports have (rank, pid) comes last.  Types follow
 * docs/report.schema.json, which the schema test holds every table to.
 */
#include "report_fields.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ---- memory the model owns ---------------------------------------------- */

struct tl_report_arena {
    struct tl_report_arena *next;
    size_t used, size;
    max_align_t data[];
};

void *report_alloc(struct tl_report *r, size_t size)
{
    size = (size + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
    struct tl_report_arena *a = r->arena;
    if (!a || a->size - a->used < size) {
        size_t cap = size > 60000 ? size : 60000;
        a = calloc(1, sizeof *a + cap);
        if (!a)
            return NULL;
        a->size = cap;
        a->next = r->arena;
        r->arena = a;
    }
    void *p = (char *)a->data + a->used;
    a->used += size;
    return p;
}

const char *report_strdup(struct tl_report *r, const char *s)
{
    if (!s)
        return NULL;
    size_t n = strlen(s) + 1;
    char *d = report_alloc(r, n);
    if (d)
        memcpy(d, s, n);
    return d;
}

const char *report_printf(struct tl_report *r, const char *fmt, ...)
{
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return report_strdup(r, buf);
}

void report_arena_free(struct tl_report *r)
{
    while (r->arena) {
        struct tl_report_arena *next = r->arena->next;
        free(r->arena);
        r->arena = next;
    }
}

/* ---- what each object derives -------------------------------------------- */

/* A C++ name still mangled ("_Z..."), in a report the library wrote
 * before it demangled or without a C++ runtime loaded, is shown demangled
 * when the reader was given a demangler (the CLI's, tools/report_load.c);
 * the mangled name becomes the frame's "symbol". */
static void demangle(struct tl_report *r, struct tl_frame *f, report_demangler *fn)
{
    const char *name = f->function;
    if (!fn || !name || name[0] != '_' || name[1] != 'Z')
        return;
    char *d = fn(name);
    const char *kept = d ? report_strdup(r, d) : NULL;
    free(d);
    if (!kept)
        return;
    if (!(f->seen.present & TL_BIT(FRAME, symbol))) {
        f->symbol = name;
        f->seen.present |= TL_BIT(FRAME, symbol);
    }
    f->function = kept;
}

static bool frame_derive(struct tl_report *r, void *e, char *error, size_t size)
{
    (void)error, (void)size;
    struct tl_frame *f = e;
    if (f->line < 0)
        f->line = 0;
    demangle(r, f, r->demangler);
    return true;
}

static bool allocation_derive(struct tl_report *r, void *e, char *error, size_t size)
{
    (void)r, (void)error, (void)size;
    struct tl_allocation *a = e;
    a->device = tl_seen_has(&a->seen, TL_F_ALLOC_device) ? a->device : -1;
    return true;
}

static bool site_derive(struct tl_report *r, void *e, char *error, size_t size)
{
    (void)r;
    struct tl_leak *l = e;
    if (l->allocation_count > l->count) {
        snprintf(error, size, ".allocations: %zu listed, more than its count (%" PRIu64 ")", l->allocation_count,
                 l->count);
        return false;
    }
    l->counted_elsewhere = 0;
    for (size_t i = 0; i < l->share_count; i++)
        if (l->shared[i].counted_elsewhere)
            l->counted_elsewhere += l->shared[i].bytes;
    return true;
}

static bool owner_device_derive(struct tl_report *r, void *e, char *error, size_t size)
{
    (void)r, (void)error, (void)size;
    struct tl_owner_device *o = e;
    if (tl_seen_null(&o->seen, TL_F_OWNDEV_device))
        o->device = -1; /* host memory, no device's */
    return true;
}

/* The memory map draws holes between blocks: they must be in order and
 * inside the segment. */
static bool segment_derive(struct tl_report *r, void *e, char *error, size_t size)
{
    (void)r;
    const struct tl_segment *s = e;
    uint64_t end = 0;
    for (size_t i = 0; i < s->block_count; i++) {
        const struct tl_block *b = &s->blocks[i];
        if (b->offset < end) {
            snprintf(error, size, ".blocks[%zu]: offset %" PRIu64 " overlaps or precedes the previous block", i,
                     b->offset);
            return false;
        }
        if (b->bytes > s->bytes || b->offset > s->bytes - b->bytes) {
            snprintf(error, size, ".blocks[%zu]: block ends past the segment (%" PRIu64 " bytes)", i, s->bytes);
            return false;
        }
        end = b->offset + b->bytes;
    }
    return true;
}

/* ---- the tables ------------------------------------------------------------ */

#define R TL_FIELD_REQUIRED
#define N TL_FIELD_NULLABLE
#define NN TL_FIELD_NONNEG
#define GAP TL_FIELD_GAP
#define L TL_FIELD_LIVE
#define FIELD(T, member, type, flags) {#member, TL_FIELD_##type, flags, offsetof(T, member), 0, NULL}
#define NAMED(T, member, name, type, flags) {name, TL_FIELD_##type, flags, offsetof(T, member), 0, NULL}
#define OBJECT(T, member, name, table, flags) {name, TL_FIELD_OBJECT, flags, offsetof(T, member), 0, &table}
#define LIST(T, member, count, name, table, flags) \
    {name, TL_FIELD_LIST, flags, offsetof(T, member), offsetof(T, count), &table}
#define STRINGS(T, member, count, name, flags) {name, TL_FIELD_STRINGS, flags, offsetof(T, member), offsetof(T, count), NULL}
#define TABLE(T, name, fields, derive) {name, sizeof(T), offsetof(T, seen), fields, sizeof fields / sizeof fields[0], derive}
#define STACK(T) LIST(T, stack.frames, stack.count, "stack", frame_table, 0)

static const struct tl_field frame_fields[] = {
    FIELD(struct tl_frame, address, STRING, 0),   FIELD(struct tl_frame, module, STRING, N),
    FIELD(struct tl_frame, offset, STRING, 0),    FIELD(struct tl_frame, function, STRING, N),
    FIELD(struct tl_frame, file, STRING, N),      FIELD(struct tl_frame, line, INT, N),
    FIELD(struct tl_frame, python, BOOL, 0),      FIELD(struct tl_frame, symbol, STRING, 0),
    FIELD(struct tl_frame, inlined, BOOL, 0),
};
static const struct tl_table frame_table = TABLE(struct tl_frame, "frame", frame_fields, frame_derive);

static const struct tl_field allocation_fields[] = {
    FIELD(struct tl_allocation, address, HEX, R | N),
    FIELD(struct tl_allocation, bytes, U64, R | N),
    FIELD(struct tl_allocation, device, INT, R | N | NN),
};
static const struct tl_table allocation_table =
    TABLE(struct tl_allocation, "site_allocation", allocation_fields, allocation_derive);

static const struct tl_field share_fields[] = {
    FIELD(struct tl_share, identity, STRING, R | N),
    FIELD(struct tl_share, bytes, U64, R),
    FIELD(struct tl_share, imported, BOOL, R),
    FIELD(struct tl_share, counted_elsewhere, BOOL, 0),
};
static const struct tl_table share_table = TABLE(struct tl_share, "site.shared", share_fields, NULL);

static const struct tl_field site_fields[] = {
    FIELD(struct tl_leak, kind, STRING, 0),
    FIELD(struct tl_leak, site, INT, NN),
    FIELD(struct tl_leak, bytes, U64, N),
    FIELD(struct tl_leak, count, U64, 0),
    FIELD(struct tl_leak, unknown_size_allocations, U64, 0),
    FIELD(struct tl_leak, suppressed, BOOL, 0),
    FIELD(struct tl_leak, suppression, STRING, N),
    FIELD(struct tl_leak, owner, STRING, N),
    FIELD(struct tl_leak, owner_class, STRING, N),
    FIELD(struct tl_leak, imported, BOOL, 0),
    LIST(struct tl_leak, shared, share_count, "shared", share_table, 0),
    STACK(struct tl_leak),
    LIST(struct tl_leak, allocations, allocation_count, "allocations", allocation_table, 0),
    FIELD(struct tl_leak, allocations_unlisted, U64, 0),
    FIELD(struct tl_leak, rank, INT, 0),
    FIELD(struct tl_leak, pid, INT, 0),
};
static const struct tl_table site_table = TABLE(struct tl_leak, "site", site_fields, site_derive);

static const struct tl_field exporter_fields[] = {
    FIELD(struct tl_ipc_exporter, rank, INT, 0),
    FIELD(struct tl_ipc_exporter, pid, INT, N),
};
static const struct tl_table exporter_table = TABLE(struct tl_ipc_exporter, "ipc.mapped.exported_by", exporter_fields, NULL);

static const struct tl_field ipc_exported_fields[] = {
    FIELD(struct tl_ipc_entry, handle, STRING, R | N),
    FIELD(struct tl_ipc_entry, address, STRING, R),
    FIELD(struct tl_ipc_entry, bytes, U64, R | N),
    FIELD(struct tl_ipc_entry, site, INT, N | NN),
    FIELD(struct tl_ipc_entry, rank, INT, 0),
    FIELD(struct tl_ipc_entry, pid, INT, N),
};
static const struct tl_table ipc_exported_table = TABLE(struct tl_ipc_entry, "ipc.exported", ipc_exported_fields, NULL);

static const struct tl_field ipc_mapped_fields[] = {
    FIELD(struct tl_ipc_entry, handle, STRING, R | N),
    FIELD(struct tl_ipc_entry, address, STRING, R),
    FIELD(struct tl_ipc_entry, bytes, U64, R | N),
    FIELD(struct tl_ipc_entry, references, U64, 0),
    FIELD(struct tl_ipc_entry, site, INT, N | NN),
    FIELD(struct tl_ipc_entry, rank, INT, 0),
    FIELD(struct tl_ipc_entry, pid, INT, N),
    OBJECT(struct tl_ipc_entry, exported_by, "exported_by", exporter_table, N),
};
static const struct tl_table ipc_mapped_table = TABLE(struct tl_ipc_entry, "ipc.mapped", ipc_mapped_fields, NULL);

static const struct tl_field ipc_fields[] = {
    LIST(struct tl_ipc, exported, exported_count, "exported", ipc_exported_table, 0),
    LIST(struct tl_ipc, mapped, mapped_count, "mapped", ipc_mapped_table, 0),
};
static const struct tl_table ipc_table = TABLE(struct tl_ipc, "ipc", ipc_fields, NULL);

static const struct tl_field owner_fields[] = {
    FIELD(struct tl_owner, name, STRING, R),
    NAMED(struct tl_owner, cls, "class", STRING, N),
    FIELD(struct tl_owner, live_bytes, U64, 0),
    FIELD(struct tl_owner, live_allocations, U64, 0),
    FIELD(struct tl_owner, peak_bytes, U64, 0),
};
static const struct tl_table owner_table = TABLE(struct tl_owner, "owner", owner_fields, NULL);

static const struct tl_field owner_device_fields[] = {
    FIELD(struct tl_owner_device, name, STRING, R),
    NAMED(struct tl_owner_device, cls, "class", STRING, 0),
    FIELD(struct tl_owner_device, live_bytes, U64, 0),
    FIELD(struct tl_owner_device, live_allocations, U64, 0),
    FIELD(struct tl_owner_device, device, INT, N | NN),
    FIELD(struct tl_owner_device, rank, INT, 0),
    FIELD(struct tl_owner_device, pid, INT, 0),
};
static const struct tl_table owner_device_table =
    TABLE(struct tl_owner_device, "owner_device", owner_device_fields, owner_device_derive);

static const struct tl_field growth_fields[] = {
    FIELD(struct tl_growth, scope, STRING, L),
    FIELD(struct tl_growth, kind, STRING, L),
    FIELD(struct tl_growth, bytes_per_mark, U64, L),
    FIELD(struct tl_growth, count_per_mark, INT, N | L),
    FIELD(struct tl_growth, marks, U64, L),
    FIELD(struct tl_growth, suppressed, BOOL, L),
    STACK(struct tl_growth),
    FIELD(struct tl_growth, from_bytes, INT, L),
    FIELD(struct tl_growth, to_bytes, INT, L),
    FIELD(struct tl_growth, pool, STRING, L),
    FIELD(struct tl_growth, pool_kind, STRING, N | L),
    FIELD(struct tl_growth, owner_class, STRING, L),
    FIELD(struct tl_growth, owner, STRING, N | L),
    FIELD(struct tl_growth, rank, INT, 0),
    FIELD(struct tl_growth, pid, INT, 0),
};
static const struct tl_table growth_table = TABLE(struct tl_growth, "growth", growth_fields, NULL);

static const struct tl_field block_fields[] = {
    FIELD(struct tl_block, offset, U64, R),
    FIELD(struct tl_block, bytes, U64, R),
};
static const struct tl_table block_table = TABLE(struct tl_block, "layout_segment.blocks", block_fields, NULL);

static const struct tl_field segment_fields[] = {
    FIELD(struct tl_segment, base, STRING, 0),
    FIELD(struct tl_segment, bytes, U64, R),
    LIST(struct tl_segment, blocks, block_count, "blocks", block_table, 0),
};
static const struct tl_table segment_table = TABLE(struct tl_segment, "layout_segment", segment_fields, segment_derive);

static const struct tl_field pool_site_fields[] = {
    FIELD(struct tl_pool_site, bytes, U64, 0),
    FIELD(struct tl_pool_site, count, U64, 0),
    STACK(struct tl_pool_site),
};
static const struct tl_table pool_site_table = TABLE(struct tl_pool_site, "pool_site", pool_site_fields, NULL);

static const struct tl_field framework_fields[] = {
    FIELD(struct tl_framework, name, STRING, 0),
    FIELD(struct tl_framework, version, STRING, N),
    FIELD(struct tl_framework, mode, STRING, N),
};
static const struct tl_table framework_table = TABLE(struct tl_framework, "framework", framework_fields, NULL);

static const struct tl_field pool_fields[] = {
    FIELD(struct tl_pool, name, STRING, L),
    FIELD(struct tl_pool, kind, STRING, L),
    FIELD(struct tl_pool, device, INT, L),
    FIELD(struct tl_pool, reserved_bytes, U64, N | L),
    FIELD(struct tl_pool, allocated_bytes, U64, N | L),
    FIELD(struct tl_pool, free_bytes, U64, N | L),
    FIELD(struct tl_pool, largest_free_block, U64, N | L),
    FIELD(struct tl_pool, fragmentation, REAL, N | L),
    FIELD(struct tl_pool, utilization, REAL, N | L),
    FIELD(struct tl_pool, peak_allocated_bytes, U64, N | L),
    FIELD(struct tl_pool, peak_reserved_bytes, U64, N | L),
    FIELD(struct tl_pool, segments, U64, N | L),
    LIST(struct tl_pool, layout, layout_count, "layout", segment_table, 0),
    FIELD(struct tl_pool, layout_truncated, BOOL, 0),
    FIELD(struct tl_pool, reserved_high_bytes, U64, N),
    FIELD(struct tl_pool, used_high_bytes, U64, N),
    FIELD(struct tl_pool, driver_used_bytes, U64, 0),
    FIELD(struct tl_pool, driver_mismatch, BOOL, 0),
    FIELD(struct tl_pool, reading, STRING, L),
    FIELD(struct tl_pool, reading_time, STRING, N),
    FIELD(struct tl_pool, allocation_nodes, U64, 0),
    FIELD(struct tl_pool, allocation_node_bytes, U64, 0),
    FIELD(struct tl_pool, source, STRING, L),
    FIELD(struct tl_pool, read_at, REAL, 0),
    FIELD(struct tl_pool, stale, BOOL, 0),
    FIELD(struct tl_pool, state, STRING, L),
    OBJECT(struct tl_pool, framework, "framework", framework_table, L),
    FIELD(struct tl_pool, free_blocks, U64, 0),
    FIELD(struct tl_pool, host, BOOL, L),
    LIST(struct tl_pool, sites, site_count, "sites", pool_site_table, 0),
    FIELD(struct tl_pool, rank, INT, 0),
    FIELD(struct tl_pool, pid, INT, 0),
};
static const struct tl_table pool_table = TABLE(struct tl_pool, "pool", pool_fields, NULL);

static const struct tl_field device_fields[] = {
    FIELD(struct tl_device, device, INT, 0),
    FIELD(struct tl_device, uuid, STRING, N),
    FIELD(struct tl_device, free, U64, N),
    FIELD(struct tl_device, total, U64, N),
    FIELD(struct tl_device, reading, STRING, 0),
    FIELD(struct tl_device, reading_time, STRING, 0),
    FIELD(struct tl_device, reserved_bytes, U64, 0),
    FIELD(struct tl_device, allocated_bytes, U64, 0),
    FIELD(struct tl_device, gap_bytes, U64, GAP),
    FIELD(struct tl_device, largest_free_block, U64, N),
    FIELD(struct tl_device, fragmentation, REAL, N),
    FIELD(struct tl_device, rank, INT, 0),
    FIELD(struct tl_device, pid, INT, 0),
};
static const struct tl_table device_table = TABLE(struct tl_device, "device", device_fields, NULL);

static const struct tl_field repair_fields[] = {
    FIELD(struct tl_repair_entry, invariant, STRING, R),
    FIELD(struct tl_repair_entry, where, STRING, R),
    FIELD(struct tl_repair_entry, figure, STRING, R),
    FIELD(struct tl_repair_entry, was, INT, R),
    FIELD(struct tl_repair_entry, now, INT, R),
};
static const struct tl_table repair_table = TABLE(struct tl_repair_entry, "repair", repair_fields, NULL);

static const struct tl_field mark_fields[] = {
    FIELD(struct tl_mark, seq, INT, 0),
    FIELD(struct tl_mark, label, STRING, 0),
    FIELD(struct tl_mark, live_bytes, U64, 0),
    FIELD(struct tl_mark, reserved_bytes, U64, 0),
    FIELD(struct tl_mark, device_free, U64, N),
    FIELD(struct tl_mark, time, REAL, 0),
};
static const struct tl_table mark_table = TABLE(struct tl_mark, "mark", mark_fields, NULL);

static const struct tl_field invalid_free_fields[] = {
    FIELD(struct tl_invalid_free, address, STRING, 0),
    FIELD(struct tl_invalid_free, kind, STRING, 0),
    FIELD(struct tl_invalid_free, suppressed, BOOL, 0),
    STACK(struct tl_invalid_free),
    FIELD(struct tl_invalid_free, rank, INT, 0),
    FIELD(struct tl_invalid_free, pid, INT, 0),
};
static const struct tl_table invalid_free_table =
    TABLE(struct tl_invalid_free, "invalid_free", invalid_free_fields, NULL);

static const struct tl_field oom_pool_fields[] = {
    FIELD(struct tl_oom_pool, name, STRING, R),
    FIELD(struct tl_oom_pool, kind, STRING, 0),
    FIELD(struct tl_oom_pool, state, STRING, N),
    FIELD(struct tl_oom_pool, reserved_bytes, U64, N),
    FIELD(struct tl_oom_pool, allocated_bytes, U64, N),
    FIELD(struct tl_oom_pool, free_bytes, U64, N),
    FIELD(struct tl_oom_pool, largest_free_block, U64, N),
    FIELD(struct tl_oom_pool, empty_cache_bytes, U64, N),
    FIELD(struct tl_oom_pool, verdict, STRING, R),
    FIELD(struct tl_oom_pool, note, STRING, N),
    LIST(struct tl_oom_pool, pinning, pinning_count, "pinning", pool_site_table, N),
};
static const struct tl_table oom_pool_table = TABLE(struct tl_oom_pool, "oom_pool", oom_pool_fields, NULL);

static const struct tl_field oom_fields[] = {
    FIELD(struct tl_oom, bytes, U64, 0),
    FIELD(struct tl_oom, kind, STRING, 0),
    FIELD(struct tl_oom, device, INT, 0),
    STACK(struct tl_oom),
    FIELD(struct tl_oom, device_free, U64, N),
    FIELD(struct tl_oom, verdict, STRING, 0),
    FIELD(struct tl_oom, remedy, STRING, N),
    FIELD(struct tl_oom, empty_cache_bytes, U64, N),
    FIELD(struct tl_oom, note, STRING, N),
    LIST(struct tl_oom, pools, pool_count, "pools", oom_pool_table, 0),
    FIELD(struct tl_oom, rank, INT, 0),
    FIELD(struct tl_oom, pid, INT, 0),
};
static const struct tl_table oom_table = TABLE(struct tl_oom, "oom", oom_fields, NULL);

static const struct tl_field tracker_fields[] = {
    FIELD(struct tl_tracker, stacks_unwound, U64, 0),
    FIELD(struct tl_tracker, thread_entries_learned, U64, 0),
    FIELD(struct tl_tracker, python_stacks, U64, 0),
    FIELD(struct tl_tracker, python_stacks_unreadable, U64, 0),
    FIELD(struct tl_tracker, python_code_objects_freed, U64, N),
    FIELD(struct tl_tracker, cfi_walks_contradicted, U64, 0),
    FIELD(struct tl_tracker, table_owner_claims, U64, 0),
    FIELD(struct tl_tracker, walk_verdicts_evicted, U64, 0),
};
static const struct tl_table tracker_table = TABLE(struct tl_tracker, "tracker", tracker_fields, NULL);

static const struct tl_field bridge_fields[] = {
    FIELD(struct tl_bridge, state, STRING, R),
    FIELD(struct tl_bridge, read_at, REAL, R | N),
    FIELD(struct tl_bridge, note, STRING, R | N),
    STRINGS(struct tl_bridge, errors, error_count, "errors", R),
};
static const struct tl_table bridge_table = TABLE(struct tl_bridge, "bridge", bridge_fields, NULL);

static const struct tl_field gate_fields[] = {
    STRINGS(struct tl_gate, fail_on, fail_on_count, "fail_on", R),
    FIELD(struct tl_gate, failed, BOOL, R),
    STRINGS(struct tl_gate, failed_kinds, failed_kind_count, "failed_kinds", R),
};
static const struct tl_table gate_table = TABLE(struct tl_gate, "gate", gate_fields, NULL);

static const struct tl_field before_fields[] = {
    FIELD(struct tl_attach_before, device, INT, 0),
    FIELD(struct tl_attach_before, process_bytes, U64, N),
    FIELD(struct tl_attach_before, freed_bytes, U64, 0),
    FIELD(struct tl_attach_before, freed_allocations, U64, 0),
    FIELD(struct tl_attach_before, framework_reserved_bytes, U64, N),
};
static const struct tl_table before_table = TABLE(struct tl_attach_before, "before_attach", before_fields, NULL);

static const struct tl_field attach_fields[] = {
    FIELD(struct tl_attach, time, STRING, 0),
    FIELD(struct tl_attach, interval, REAL, N),
    LIST(struct tl_attach, before, before_count, "before", before_table, 0),
};
static const struct tl_table attach_table = TABLE(struct tl_attach, "attach", attach_fields, NULL);

static const struct tl_field rank_fields[] = {
    FIELD(struct tl_rank, rank, INT, 0),
    FIELD(struct tl_rank, pid, INT, N),
    FIELD(struct tl_rank, host, STRING, N),
    FIELD(struct tl_rank, file, STRING, 0),
    FIELD(struct tl_rank, leaked_bytes, U64, 0),
    FIELD(struct tl_rank, leaked_allocations, U64, 0),
    FIELD(struct tl_rank, live_bytes, U64, 0),
    FIELD(struct tl_rank, reserved_bytes, U64, 0),
};
static const struct tl_table rank_table = TABLE(struct tl_rank, "ranks", rank_fields, NULL);

#define TL_SUMMARY_FLAG_0 0
#define TL_SUMMARY_FLAG_NULLABLE N
#define TL_SUMMARY_FLAG_OPTIONAL 0
#define TL_SUMMARY_FLAG_GAP GAP
#define TL_SUMMARY_TABLE_FIELD(name, type, flags, merge) FIELD(struct tl_summary, name, type, TL_SUMMARY_FLAG_##flags),
static const struct tl_field summary_fields[] = {TL_SUMMARY_FIELDS(TL_SUMMARY_TABLE_FIELD)};
#undef TL_SUMMARY_TABLE_FIELD
const struct tl_table tl_summary_table = TABLE(struct tl_summary, "summary", summary_fields, NULL);

static const struct tl_field report_fields[] = {
    FIELD(struct tl_report, tool, STRING, L),
    FIELD(struct tl_report, schema, INT, L),
    FIELD(struct tl_report, version, STRING, L),
    FIELD(struct tl_report, reason, STRING, 0),
    FIELD(struct tl_report, label, STRING, N),
    FIELD(struct tl_report, seq, INT, 0),
    FIELD(struct tl_report, pid, INT, N | L),
    FIELD(struct tl_report, rank, INT, N | L),
    FIELD(struct tl_report, host, STRING, N | L),
    STRINGS(struct tl_report, command, command_count, "command", N),
    FIELD(struct tl_report, time, STRING, N),
    FIELD(struct tl_report, depth, INT, 0),
    FIELD(struct tl_report, python_depth, INT, 0),
    STRINGS(struct tl_report, merged_from, merged_from_count, "merged_from", 0),
    OBJECT(struct tl_report, summary, "summary", tl_summary_table, R | L),
    OBJECT(struct tl_report, tracker, "tracker", tracker_table, 0),
    LIST(struct tl_report, leaks, leak_count, "leaks", site_table, 0),
    LIST(struct tl_report, sites, site_count, "sites", site_table, 0),
    OBJECT(struct tl_report, ipc, "ipc", ipc_table, 0),
    LIST(struct tl_report, held, held_count, "held", site_table, 0),
    LIST(struct tl_report, owners, owner_count, "owners", owner_table, L),
    LIST(struct tl_report, owner_devices, owner_device_count, "owners_by_device", owner_device_table, N | L),
    LIST(struct tl_report, pools, pool_count, "pools", pool_table, L),
    LIST(struct tl_report, devices, device_count, "devices", device_table, L),
    LIST(struct tl_report, repairs, repair_count, "repairs", repair_table, 0),
    LIST(struct tl_report, growth, growth_count, "growth", growth_table, 0),
    OBJECT(struct tl_report, bridge, "bridge", bridge_table, N),
    LIST(struct tl_report, marks, mark_count, "marks", mark_table, 0),
    LIST(struct tl_report, invalid_frees, invalid_free_count, "invalid_frees", invalid_free_table, 0),
    OBJECT(struct tl_report, oom, "oom", oom_table, N),
    OBJECT(struct tl_report, gate, "gate", gate_table, 0),
    LIST(struct tl_report, ranks, rank_count, "ranks", rank_table, 0),
    OBJECT(struct tl_report, attach, "attach", attach_table, 0),
};
const struct tl_table tl_report_table = TABLE(struct tl_report, "report", report_fields, NULL);

/* ---- deriving a built model ------------------------------------------------ */

static void derive_object(struct tl_report *r, const struct tl_table *t, void *e)
{
    char error[8];
    for (size_t i = 0; i < t->nfields; i++) {
        const struct tl_field *f = &t->fields[i];
        char *at = (char *)e + f->offset;
        if (f->type == TL_FIELD_OBJECT) {
            derive_object(r, f->table, at);
        } else if (f->type == TL_FIELD_LIST) {
            char *items = *(char **)at;
            size_t n = *(size_t *)((char *)e + f->count_offset);
            for (size_t k = 0; k < n; k++)
                derive_object(r, f->table, items + k * f->table->size);
        }
    }
    if (t->derive)
        t->derive(r, e, error, sizeof error);
}

void report_derive(struct tl_report *r)
{
    derive_object(r, &tl_report_table, r);
}

/* ---- the tables against report_fields.h's lists ---------------------------- */

#define TL_F_NAME(table, name) #name,
#define TL_F_CHECK(list, table_var)                                                                          \
    {                                                                                                         \
        static const char *const names[] = {list(TL_F_NAME)};                                                 \
        size_t n = sizeof names / sizeof names[0];                                                            \
        if (n != (table_var).nfields) {                                                                       \
            snprintf(error, size, "%s: %zu fields in the table, %zu in report_fields.h", (table_var).name,   \
                     (table_var).nfields, n);                                                                 \
            return false;                                                                                     \
        }                                                                                                     \
        for (size_t i = 0; i < n; i++)                                                                        \
            if (strcmp(names[i], (table_var).fields[i].name) != 0) {                                          \
                snprintf(error, size, "%s: field %zu is %s in the table, %s in report_fields.h",             \
                         (table_var).name, i, (table_var).fields[i].name, names[i]);                          \
                return false;                                                                                 \
            }                                                                                                 \
    }

bool report_fields_consistent(char *error, size_t size)
{
    TL_F_CHECK(TL_FRAME_NAMES, frame_table)
    TL_F_CHECK(TL_ALLOC_NAMES, allocation_table)
    TL_F_CHECK(TL_SHARE_NAMES, share_table)
    TL_F_CHECK(TL_SITE_NAMES, site_table)
    TL_F_CHECK(TL_EXPORTER_NAMES, exporter_table)
    TL_F_CHECK(TL_IPCX_NAMES, ipc_exported_table)
    TL_F_CHECK(TL_IPCM_NAMES, ipc_mapped_table)
    TL_F_CHECK(TL_IPC_NAMES, ipc_table)
    TL_F_CHECK(TL_OWNER_NAMES, owner_table)
    TL_F_CHECK(TL_OWNDEV_NAMES, owner_device_table)
    TL_F_CHECK(TL_GROWTH_NAMES, growth_table)
    TL_F_CHECK(TL_BLOCK_NAMES, block_table)
    TL_F_CHECK(TL_SEGMENT_NAMES, segment_table)
    TL_F_CHECK(TL_POOLSITE_NAMES, pool_site_table)
    TL_F_CHECK(TL_FRAMEWORK_NAMES, framework_table)
    TL_F_CHECK(TL_POOL_NAMES, pool_table)
    TL_F_CHECK(TL_DEVICE_NAMES, device_table)
    TL_F_CHECK(TL_REPAIR_NAMES, repair_table)
    TL_F_CHECK(TL_MARK_NAMES, mark_table)
    TL_F_CHECK(TL_INVALID_NAMES, invalid_free_table)
    TL_F_CHECK(TL_OOMPOOL_NAMES, oom_pool_table)
    TL_F_CHECK(TL_OOM_NAMES, oom_table)
    TL_F_CHECK(TL_TRACKER_NAMES, tracker_table)
    TL_F_CHECK(TL_BRIDGE_NAMES, bridge_table)
    TL_F_CHECK(TL_GATE_NAMES, gate_table)
    TL_F_CHECK(TL_BEFORE_NAMES, before_table)
    TL_F_CHECK(TL_ATTACH_NAMES, attach_table)
    TL_F_CHECK(TL_RANK_NAMES, rank_table)
    TL_F_CHECK(TL_REPORT_NAMES, tl_report_table)
    if (TL_SUMMARY_NFIELDS != tl_summary_table.nfields) {
        snprintf(error, size, "summary: the table and TL_SUMMARY_FIELDS differ");
        return false;
    }
    return true;
}

size_t report_tables(const struct tl_table **out, size_t max)
{
    size_t n = 0;
    if (max)
        out[n++] = &tl_report_table;
    for (size_t i = 0; i < n; i++) /* breadth first; each table once */
        for (size_t k = 0; k < out[i]->nfields; k++) {
            const struct tl_table *t = out[i]->fields[k].table;
            bool known = !t;
            for (size_t j = 0; j < n && !known; j++)
                known = out[j] == t;
            if (!known && n < max)
                out[n++] = t;
        }
    return n;
}

const struct tl_table *report_field_table(const struct tl_table *t, const char *name)
{
    for (size_t i = 0; i < t->nfields; i++)
        if (strcmp(t->fields[i].name, name) == 0)
            return t->fields[i].table;
    return NULL;
}
