/*
 * report_fields.h: the field names of every table of report_fields.c, in
 * table order, as enumerations: TL_F_<TABLE>_<field> is the field's bit in
 * its object's tl_seen.  The library's builder (report_build.c) marks the
 * fields it writes with them; report_fields_consistent() holds each list to
 * its table, name by name (tests/schema/dump_tables.c).
 */
#ifndef TL_REPORT_FIELDS_H
#define TL_REPORT_FIELDS_H

#include "model.h"

#define TL_FRAME_NAMES(X) X(FRAME, address) X(FRAME, module) X(FRAME, offset) X(FRAME, function) X(FRAME, file) \
    X(FRAME, line) X(FRAME, python) X(FRAME, symbol) X(FRAME, inlined)
#define TL_ALLOC_NAMES(X) X(ALLOC, address) X(ALLOC, bytes) X(ALLOC, device)
#define TL_SHARE_NAMES(X) X(SHARE, identity) X(SHARE, bytes) X(SHARE, imported) X(SHARE, counted_elsewhere)
#define TL_SITE_NAMES(X) X(SITE, kind) X(SITE, site) X(SITE, bytes) X(SITE, count) X(SITE, unknown_size_allocations) \
    X(SITE, suppressed) X(SITE, suppression) X(SITE, owner) X(SITE, owner_class) X(SITE, imported) X(SITE, shared)   \
    X(SITE, stack) X(SITE, allocations) X(SITE, allocations_unlisted) X(SITE, rank) X(SITE, pid)
#define TL_EXPORTER_NAMES(X) X(EXPORTER, rank) X(EXPORTER, pid)
#define TL_IPCX_NAMES(X) X(IPCX, handle) X(IPCX, address) X(IPCX, bytes) X(IPCX, site) X(IPCX, rank) X(IPCX, pid)
#define TL_IPCM_NAMES(X) X(IPCM, handle) X(IPCM, address) X(IPCM, bytes) X(IPCM, references) X(IPCM, site) \
    X(IPCM, rank) X(IPCM, pid) X(IPCM, exported_by)
#define TL_IPC_NAMES(X) X(IPC, exported) X(IPC, mapped)
#define TL_OWNER_NAMES(X) X(OWNER, name) X(OWNER, class) X(OWNER, live_bytes) X(OWNER, live_allocations) \
    X(OWNER, peak_bytes)
#define TL_OWNDEV_NAMES(X) X(OWNDEV, name) X(OWNDEV, class) X(OWNDEV, live_bytes) X(OWNDEV, live_allocations) \
    X(OWNDEV, device) X(OWNDEV, rank) X(OWNDEV, pid)
#define TL_GROWTH_NAMES(X) X(GROWTH, scope) X(GROWTH, kind) X(GROWTH, bytes_per_mark) X(GROWTH, count_per_mark)  \
    X(GROWTH, marks) X(GROWTH, suppressed) X(GROWTH, stack) X(GROWTH, from_bytes) X(GROWTH, to_bytes)              \
    X(GROWTH, pool) X(GROWTH, pool_kind) X(GROWTH, owner_class) X(GROWTH, owner) X(GROWTH, rank) X(GROWTH, pid)
#define TL_BLOCK_NAMES(X) X(BLOCK, offset) X(BLOCK, bytes)
#define TL_SEGMENT_NAMES(X) X(SEGMENT, base) X(SEGMENT, bytes) X(SEGMENT, blocks)
#define TL_POOLSITE_NAMES(X) X(POOLSITE, bytes) X(POOLSITE, count) X(POOLSITE, stack)
#define TL_FRAMEWORK_NAMES(X) X(FRAMEWORK, name) X(FRAMEWORK, version) X(FRAMEWORK, mode)
#define TL_POOL_NAMES(X) X(POOL, name) X(POOL, kind) X(POOL, device) X(POOL, reserved_bytes) X(POOL, allocated_bytes) \
    X(POOL, free_bytes) X(POOL, largest_free_block) X(POOL, fragmentation) X(POOL, utilization)                     \
    X(POOL, peak_allocated_bytes) X(POOL, peak_reserved_bytes) X(POOL, segments) X(POOL, layout)                    \
    X(POOL, layout_truncated) X(POOL, reserved_high_bytes) X(POOL, used_high_bytes) X(POOL, driver_used_bytes)      \
    X(POOL, driver_mismatch) X(POOL, reading) X(POOL, reading_time) X(POOL, allocation_nodes)                       \
    X(POOL, allocation_node_bytes) X(POOL, source) X(POOL, read_at) X(POOL, stale) X(POOL, state)                  \
    X(POOL, framework) X(POOL, free_blocks) X(POOL, host) X(POOL, sites) X(POOL, rank) X(POOL, pid)
#define TL_DEVICE_NAMES(X) X(DEVICE, device) X(DEVICE, uuid) X(DEVICE, free) X(DEVICE, total) X(DEVICE, reading)    \
    X(DEVICE, reading_time) X(DEVICE, reserved_bytes) X(DEVICE, allocated_bytes) X(DEVICE, gap_bytes)              \
    X(DEVICE, largest_free_block) X(DEVICE, fragmentation) X(DEVICE, rank) X(DEVICE, pid)
#define TL_REPAIR_NAMES(X) X(REPAIR, invariant) X(REPAIR, where) X(REPAIR, figure) X(REPAIR, was) X(REPAIR, now)
#define TL_MARK_NAMES(X) X(MARK, seq) X(MARK, label) X(MARK, live_bytes) X(MARK, reserved_bytes) \
    X(MARK, device_free) X(MARK, time)
#define TL_INVALID_NAMES(X) X(INVALID, address) X(INVALID, kind) X(INVALID, suppressed) X(INVALID, stack) \
    X(INVALID, rank) X(INVALID, pid)
#define TL_OOMPOOL_NAMES(X) X(OOMPOOL, name) X(OOMPOOL, kind) X(OOMPOOL, state) X(OOMPOOL, reserved_bytes)   \
    X(OOMPOOL, allocated_bytes) X(OOMPOOL, free_bytes) X(OOMPOOL, largest_free_block)                             \
    X(OOMPOOL, empty_cache_bytes) X(OOMPOOL, verdict) X(OOMPOOL, note) X(OOMPOOL, pinning)
#define TL_OOM_NAMES(X) X(OOM, bytes) X(OOM, kind) X(OOM, device) X(OOM, stack) X(OOM, device_free)               \
    X(OOM, verdict) X(OOM, remedy) X(OOM, empty_cache_bytes) X(OOM, note) X(OOM, pools) X(OOM, rank) X(OOM, pid)
#define TL_TRACKER_NAMES(X) X(TRACKER, stacks_unwound) X(TRACKER, thread_entries_learned) X(TRACKER, python_stacks) \
    X(TRACKER, python_stacks_unreadable) X(TRACKER, python_code_objects_freed) X(TRACKER, cfi_walks_contradicted)  \
    X(TRACKER, table_owner_claims) X(TRACKER, walk_verdicts_evicted)
#define TL_BRIDGE_NAMES(X) X(BRIDGE, state) X(BRIDGE, read_at) X(BRIDGE, note) X(BRIDGE, errors)
#define TL_GATE_NAMES(X) X(GATE, fail_on) X(GATE, failed) X(GATE, failed_kinds)
#define TL_BEFORE_NAMES(X) X(BEFORE, device) X(BEFORE, process_bytes) X(BEFORE, freed_bytes) X(BEFORE, freed_allocations) \
    X(BEFORE, framework_reserved_bytes)
#define TL_ATTACH_NAMES(X) X(ATTACH, time) X(ATTACH, interval) X(ATTACH, before)
#define TL_RANK_NAMES(X) X(RANK, rank) X(RANK, pid) X(RANK, host) X(RANK, file) X(RANK, leaked_bytes) \
    X(RANK, leaked_allocations) X(RANK, live_bytes) X(RANK, reserved_bytes)
#define TL_REPORT_NAMES(X) X(REPORT, tool) X(REPORT, schema) X(REPORT, version) X(REPORT, reason) X(REPORT, label) \
    X(REPORT, seq) X(REPORT, pid) X(REPORT, rank) X(REPORT, host) X(REPORT, command) X(REPORT, time)               \
    X(REPORT, depth) X(REPORT, python_depth) X(REPORT, merged_from) X(REPORT, summary) X(REPORT, tracker)          \
    X(REPORT, leaks) X(REPORT, sites) X(REPORT, ipc) X(REPORT, held) X(REPORT, owners) X(REPORT, owners_by_device) \
    X(REPORT, pools) X(REPORT, devices) X(REPORT, repairs) X(REPORT, growth) X(REPORT, bridge) X(REPORT, marks)    \
    X(REPORT, invalid_frees) X(REPORT, oom) X(REPORT, gate) X(REPORT, ranks) X(REPORT, attach)

#define TL_F_ENUM(table, name) TL_F_##table##_##name,
#define TL_F_ENUMERATE(list, table) enum { list(TL_F_ENUM) TL_F_##table##_COUNT };
TL_F_ENUMERATE(TL_FRAME_NAMES, FRAME)
TL_F_ENUMERATE(TL_ALLOC_NAMES, ALLOC)
TL_F_ENUMERATE(TL_SHARE_NAMES, SHARE)
TL_F_ENUMERATE(TL_SITE_NAMES, SITE)
TL_F_ENUMERATE(TL_EXPORTER_NAMES, EXPORTER)
TL_F_ENUMERATE(TL_IPCX_NAMES, IPCX)
TL_F_ENUMERATE(TL_IPCM_NAMES, IPCM)
TL_F_ENUMERATE(TL_IPC_NAMES, IPC)
TL_F_ENUMERATE(TL_OWNER_NAMES, OWNER)
TL_F_ENUMERATE(TL_OWNDEV_NAMES, OWNDEV)
TL_F_ENUMERATE(TL_GROWTH_NAMES, GROWTH)
TL_F_ENUMERATE(TL_BLOCK_NAMES, BLOCK)
TL_F_ENUMERATE(TL_SEGMENT_NAMES, SEGMENT)
TL_F_ENUMERATE(TL_POOLSITE_NAMES, POOLSITE)
TL_F_ENUMERATE(TL_FRAMEWORK_NAMES, FRAMEWORK)
TL_F_ENUMERATE(TL_POOL_NAMES, POOL)
TL_F_ENUMERATE(TL_DEVICE_NAMES, DEVICE)
TL_F_ENUMERATE(TL_REPAIR_NAMES, REPAIR)
TL_F_ENUMERATE(TL_MARK_NAMES, MARK)
TL_F_ENUMERATE(TL_INVALID_NAMES, INVALID)
TL_F_ENUMERATE(TL_OOMPOOL_NAMES, OOMPOOL)
TL_F_ENUMERATE(TL_OOM_NAMES, OOM)
TL_F_ENUMERATE(TL_TRACKER_NAMES, TRACKER)
TL_F_ENUMERATE(TL_BRIDGE_NAMES, BRIDGE)
TL_F_ENUMERATE(TL_GATE_NAMES, GATE)
TL_F_ENUMERATE(TL_BEFORE_NAMES, BEFORE)
TL_F_ENUMERATE(TL_ATTACH_NAMES, ATTACH)
TL_F_ENUMERATE(TL_RANK_NAMES, RANK)
TL_F_ENUMERATE(TL_REPORT_NAMES, REPORT)
#undef TL_F_ENUMERATE
#undef TL_F_ENUM

/* Field `field` of `obj`, an object of table TABLE, had a value in the
 * report (not absent, not null): what a renderer asks before it shows an
 * optional figure. */
#define TL_HAS(obj, TABLE, field) tl_seen_has(&(obj)->seen, TL_F_##TABLE##_##field)
/* ... was null there: a figure the report says is unknown, not 0. */
#define TL_NULL(obj, TABLE, field) tl_seen_null(&(obj)->seen, TL_F_##TABLE##_##field)

/* Free space with no layout tensorleak can see: largest_free_block or
 * fragmentation null (unknown, not 0). */
static inline bool tl_pool_layout_unknown(const struct tl_pool *p)
{
    return TL_NULL(p, POOL, largest_free_block) || TL_NULL(p, POOL, fragmentation);
}
static inline bool tl_device_layout_unknown(const struct tl_device *d)
{
    return TL_NULL(d, DEVICE, largest_free_block) || TL_NULL(d, DEVICE, fragmentation);
}
static inline bool tl_summary_layout_unknown(const struct tl_summary *s)
{
    return tl_seen_null(&s->seen, TL_SUMMARY_largest_free_block) || tl_seen_null(&s->seen, TL_SUMMARY_fragmentation);
}

/* A field's bit, for tl_seen.present and .null. */
#define TL_BIT(table, name) (1ull << TL_F_##table##_##name)
/* Every field of a table present. */
#define TL_ALL(table) ((1ull << TL_F_##table##_COUNT) - 1)

/* Each table's fields against its list above, name by name; false with the
 * first difference in `error`. */
bool report_fields_consistent(char *error, size_t size);
/* Every table below the report's, each once (the schema test's dump). */
size_t report_tables(const struct tl_table **out, size_t max);

#endif
