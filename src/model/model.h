/*
 * model.h: the report model, a tensorleak JSON report (schema 1,
 * docs/report-format.md) held in memory, shared by the CLI and the preload
 * library.  The library gathers its state (report_gather.h), builds this
 * model from it (report_build.c), writes it (report_write.c) and prints it
 * (report_text.c); the CLI reads saved files into it (report_load()) and
 * renders it in every format.
 *
 * report_from_json() checks a jansson tree thoroughly once, so the
 * formatters and commands can walk plain C arrays without re-checking
 * types. Strings are borrowed from the jansson tree (`root`), which lives as
 * long as the report; every pointer below is NULL when the field was absent
 * or null. Arrays the file does not have are empty (count 0).
 */
#ifndef TENSORLEAK_REPORT_H
#define TENSORLEAK_REPORT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/*
 * The "summary" object, one line a field, in the order reports write it:
 * X(name, type, flags, merge).  This table is the summary's one
 * definition: it declares struct tl_summary, and the library's writer
 * (report_write.c), the reader (report_read.c), `tensorleak merge` and the
 * schema test (tests/schema: every field here is in docs/report.schema.json
 * and the other way round) all walk it.  A new summary field is one line
 * here plus whatever renders it.
 *
 *  type   U64: a non-negative integer (uint64_t); REAL: a number (double).
 *  flags  NULLABLE: null when unknown, never 0 (the field's bit in
 *         tl_summary.null); OPTIONAL: reports written before the field
 *         existed lack it, and merge writes it only when an input has it;
 *         GAP: a negative value (reports from before the invariants were
 *         checked) reads as 0; 0: none.
 *  merge  SUM: added over the ranks (saturating); MAX: the largest, a
 *         per-device property; NONE: a per-process fact merge leaves out;
 *         OWN: written by merge's own pass (cmd_merge.c), never summed.
 */
#define TL_SUMMARY_FIELDS(X)                                          \
    X(leaked_bytes, U64, 0, SUM)                                      \
    X(leaked_allocations, U64, 0, SUM)                                \
    X(live_bytes, U64, 0, SUM)                                        \
    X(live_allocations, U64, 0, SUM)                                  \
    X(peak_live_bytes, U64, 0, SUM)                                   \
    X(reserved_bytes, U64, 0, SUM)                                    \
    X(allocated_bytes, U64, 0, SUM)                                   \
    X(gap_bytes, U64, GAP, SUM)                                       \
    X(largest_free_block, U64, NULLABLE, MAX)                         \
    X(fragmentation, REAL, NULLABLE, MAX)                             \
    X(invariants_repaired, U64, OPTIONAL, NONE)                       \
    X(held_bytes, U64, 0, SUM)                                        \
    X(address_space_bytes, U64, OPTIONAL, SUM)                        \
    X(address_space_reservations, U64, OPTIONAL, SUM)                 \
    X(imported_bytes, U64, OPTIONAL, SUM)                             \
    X(imported_allocations, U64, OPTIONAL, SUM)                       \
    X(leaked_address_space_bytes, U64, OPTIONAL, SUM)                 \
    X(unknown_size_allocations, U64, OPTIONAL, SUM)                   \
    X(ipc_mapped_bytes, U64, OPTIONAL, SUM)                           \
    X(ipc_mappings, U64, OPTIONAL, SUM)                               \
    X(leaked_ipc_mapped_bytes, U64, OPTIONAL, SUM)                    \
    X(invalid_frees, U64, 0, SUM)                                     \
    X(suppressed_allocations, U64, 0, SUM)                            \
    X(suppressed_bytes, U64, 0, SUM)                                  \
    X(total_allocations, U64, OPTIONAL, NONE)                         \
    X(failed_allocations, U64, 0, SUM)                                \
    X(oom_failures, U64, 0, SUM)                                      \
    X(released_by_teardown_bytes, U64, 0, SUM)                        \
    X(released_by_teardown_allocations, U64, 0, SUM)                  \
    X(dropped_events, U64, 0, SUM)                                    \
    X(call_sites, U64, OPTIONAL, NONE)                                \
    X(budget_crossings, U64, 0, SUM)                                  \
    X(budget_refusals, U64, 0, SUM)                                   \
    X(shared_bytes_counted_once, U64, OPTIONAL, OWN)                  \
    X(ipc_paired_bytes, U64, OPTIONAL, OWN)                           \
    X(ipc_unpaired_mapped_bytes, U64, OPTIONAL, OWN)

/* Which fields of an object the report had: bit i is field i of the
 * object's table (report_fields.c), set when the field was there (present)
 * and when it was null there (null; the member then holds 0).  The writer
 * writes exactly the present fields, so a model read from a report writes
 * that report back.  A renderer asks these bits whether an optional field
 * had a value or was null (TL_HAS, TL_NULL, tl_*_layout_unknown in
 * report_fields.h); no member beside them repeats what they say. */
struct tl_seen {
    uint64_t present, null;
};

#define TL_SUMMARY_CTYPE_U64 uint64_t
#define TL_SUMMARY_CTYPE_REAL double

enum tl_summary_field {
#define TL_SUMMARY_ENUM(name, type, flags, merge) TL_SUMMARY_##name,
    TL_SUMMARY_FIELDS(TL_SUMMARY_ENUM)
#undef TL_SUMMARY_ENUM
    TL_SUMMARY_NFIELDS
};

struct tl_summary {
#define TL_SUMMARY_MEMBER(name, type, flags, merge) TL_SUMMARY_CTYPE_##type name;
    TL_SUMMARY_FIELDS(TL_SUMMARY_MEMBER)
#undef TL_SUMMARY_MEMBER
    /* Bit TL_SUMMARY_<name>: the field was in the report (present), or was
     * null there (null; its value above is 0). */
    struct tl_seen seen;
};

/* Field `bit` of an object had a value (present, not null) / was null. */
static inline bool tl_seen_has(const struct tl_seen *s, unsigned bit)
{
    return (s->present >> bit & 1) && !(s->null >> bit & 1);
}
static inline bool tl_seen_null(const struct tl_seen *s, unsigned bit)
{
    return s->null >> bit & 1;
}
/* The report gave the summary field `name` a value (not absent, not null). */
#define tl_summary_has(s, name) tl_seen_has(&(s)->seen, TL_SUMMARY_##name)

/* One entry of the table, for code that walks it (report_write.c,
 * report_read.c, cmd_merge.c). */
enum tl_summary_type { TL_SUMMARY_TYPE_U64, TL_SUMMARY_TYPE_REAL };
enum tl_summary_flags { TL_SUMMARY_FLAG_NULLABLE = 1, TL_SUMMARY_FLAG_OPTIONAL = 2, TL_SUMMARY_FLAG_GAP = 4 };
enum tl_summary_merge { TL_SUMMARY_MERGE_SUM, TL_SUMMARY_MERGE_MAX, TL_SUMMARY_MERGE_NONE, TL_SUMMARY_MERGE_OWN };
struct tl_summary_field_info {
    const char *name;
    enum tl_summary_type type;
    unsigned flags;
    enum tl_summary_merge merge;
    size_t offset; /* of its value in struct tl_summary */
};
extern const struct tl_summary_field_info tl_summary_fields[TL_SUMMARY_NFIELDS];

/* report_write.c: the summary as its JSON object, in the table's order:
 * every field seen.present marks (null where seen.null does), the others
 * left out.  NULL when out of memory. */
json_t *report_summary_to_json(const struct tl_summary *s);

struct tl_frame {
    const char *address;    /* "0x55d0c1a2b3c4" */
    const char *module;     /* path as recorded */
    const char *offset;     /* "0x13c4", offset in module */
    const char *function;
    const char *file;
    long long line;         /* 0 when unknown */
    bool python;            /* a Python frame ("python": true): no address */
    const char *symbol;     /* the raw C++ symbol beside a demangled function */
    bool inlined;           /* an inlined callee, at its caller's address */
    struct tl_seen seen;
};

struct tl_stack {
    struct tl_frame *frames;    /* frames[0] is the innermost (#0) */
    size_t count;
};

/* One entry of a site's optional "allocations" list. */
struct tl_allocation {
    uint64_t address;           /* null (unset): a row keyed by a handle */
    uint64_t bytes;             /* 0 when the size is unknown (null) */
    long long device;           /* -1: host memory (null) */
    struct tl_seen seen;
};

/* One entry of a VMM handle site's "shared": a handle it exported or
 * imported, with the identity of the allocation behind it. */
struct tl_share {
    const char *identity;       /* "st_dev:st_ino" of the shared descriptor; NULL: unknown */
    uint64_t bytes;
    bool imported;
    bool counted_elsewhere;     /* merge: another input counts these bytes */
    struct tl_seen seen;
};

/* One entry of "leaks" (or of "sites", "held"): a deduplicated call site. */
struct tl_leak {
    const char *kind;           /* "device", "host_pinned", ... */
    long long site;             /* the call site's id (tensorleak_site_bytes) */
    /* Null (0 here) when some of the allocations have a size the driver did
     * not report (unknown_size_allocations of them). */
    uint64_t bytes;
    uint64_t count;
    uint64_t unknown_size_allocations;
    bool suppressed;
    const char *suppression;    /* "leak:pattern" that matched, if any */
    const char *owner;          /* optional: "PyTorch caching allocator", "user" */
    const char *owner_class;    /* optional: "cache", "workspace", "library", "user" */
    bool imported;              /* vmm_handle: imported from a shareable handle (optional "imported") */
    struct tl_share *shared;
    size_t share_count;
    struct tl_stack stack;
    /* Optional "allocations": some of its live allocations (absent from
     * reports written before they were listed). */
    struct tl_allocation *allocations;
    size_t allocation_count;
    uint64_t allocations_unlisted;
    long long rank;             /* entries of a merged report carry their rank */
    long long pid;              /* ... and the input's pid */
    struct tl_seen seen;
    uint64_t counted_elsewhere; /* merge: bytes of its "shared" entries another input counts */
};

/* "ipc": this process's allocations exported to others, and other
 * processes' allocations mapped here, each with its handle's digest. */
struct tl_ipc_exporter {       /* merged reports: the input that exported it */
    long long rank, pid;
    struct tl_seen seen;
};
struct tl_ipc_entry {
    const char *handle;         /* 16 hex digits; NULL: unknown */
    const char *address;
    uint64_t bytes;             /* 0 when unknown (null) */
    uint64_t references;        /* mapped: opens of the handle not yet closed */
    long long site;             /* the call site; 0 when untracked (null) */
    long long rank, pid;        /* merged reports */
    struct tl_ipc_exporter exported_by; /* merged reports, mapped (null: not an input) */
    struct tl_seen seen;
};
struct tl_ipc {
    struct tl_ipc_entry *exported;
    size_t exported_count;
    struct tl_ipc_entry *mapped;
    size_t mapped_count;
    struct tl_seen seen;
};

/*
 * One entry of the optional "owners" array: memory attributed by the owner
 * rules (data/owners.rules) to one owner; "user" is what no rule matched.
 */
struct tl_owner {
    const char *name;
    const char *cls;            /* "cache" | "workspace" | "library" | "user" */
    uint64_t live_bytes, live_allocations, peak_bytes;
    struct tl_seen seen;
};

/* One entry of the optional "owners_by_device": an owner's live memory on
 * one device (device -1: host memory). */
struct tl_owner_device {
    const char *name;
    const char *cls;
    uint64_t live_bytes, live_allocations;
    long long device;
    long long rank, pid;        /* merged reports */
    struct tl_seen seen;
};

struct tl_growth {
    /* Rows without a call site: "scope" "pool" (a framework pool's
     * allocated bytes), "owner" (an owner's reserve), "python_site"; NULL or
     * "call_site" for a call site's row. */
    const char *scope;
    const char *kind;
    uint64_t bytes_per_mark;
    long long count_per_mark;   /* 0 for rows without a call site (null) */
    uint64_t marks;
    bool suppressed;
    struct tl_stack stack;
    long long from_bytes, to_bytes; /* rows without a call site */
    const char *pool;           /* pool and python_site rows */
    const char *pool_kind;
    const char *owner_class, *owner;  /* owner rows */
    long long rank, pid;
    struct tl_seen seen;
};

/* One allocated block of a pool segment (optional "layout", see tl_segment). */
struct tl_block {
    uint64_t offset;            /* from the segment base */
    uint64_t bytes;
    struct tl_seen seen;
};

/*
 * One reserved segment of an annotated pool, from the optional
 * pools[].layout array: {"base": "0x...", "bytes": N, "blocks": [...]}.
 * report_from_json() checks that blocks are sorted, do not overlap and end
 * inside the segment, so what lies between them are the free holes.
 */
struct tl_segment {
    const char *base;
    uint64_t bytes;
    struct tl_block *blocks;
    size_t block_count;
    struct tl_seen seen;
};

/* A framework pool's Python line and what it holds (pools[].sites). */
struct tl_pool_site {
    uint64_t bytes, count;
    struct tl_stack stack;
    struct tl_seen seen;
};

/* Which framework a bridge's pool is of (pools[].framework). */
struct tl_framework {
    const char *name, *version, *mode;
    struct tl_seen seen;
};

struct tl_pool {
    const char *name;
    const char *kind;           /* "annotated" | "stream_ordered" | "graph" | a framework's */
    long long device;
    /* reserved_bytes null: a host pool without byte counts, or graph memory
     * the driver never reported. */
    uint64_t reserved_bytes, allocated_bytes, free_bytes, largest_free_block;
    double fragmentation;
    double utilization;
    uint64_t peak_allocated_bytes, peak_reserved_bytes;
    uint64_t segments;          /* "segments": how many, 0 when absent */
    struct tl_segment *layout;
    size_t layout_count;
    bool layout_truncated;      /* the writer left segments or blocks out */
    /* Stream-ordered pools and graph memory: the driver's highs, and which
     * reading the figures are ("current", "last_good", "none") and when. */
    uint64_t reserved_high_bytes, used_high_bytes;
    uint64_t driver_used_bytes;
    bool driver_mismatch;
    const char *reading;
    const char *reading_time;   /* ISO-8601, when the driver gave that reading */
    /* Graph memory: the allocation nodes it holds (their sites are held). */
    uint64_t allocation_nodes, allocation_node_bytes;
    /* A framework's pool read by the Python bridge: where from, when its
     * state was read, whether fresh, which framework, its Python lines. */
    const char *source;
    double read_at;             /* unix time */
    bool stale;
    const char *state;          /* "fresh" | "stale" | "final" */
    struct tl_framework framework;
    uint64_t free_blocks;
    bool host;
    struct tl_pool_site *sites;
    size_t site_count;
    long long rank, pid;
    struct tl_seen seen;
};

/* One entry of "marks": the totals when tensorleak_mark() was called. */
struct tl_mark {
    long long seq;
    const char *label;
    uint64_t live_bytes, reserved_bytes;
    uint64_t device_free;       /* null when the driver did not answer (TL_NULL) */
    double time;                /* seconds, as recorded */
    struct tl_seen seen;
};

struct tl_device {
    long long device;
    const char *uuid;           /* "GPU-..." (cuDeviceGetUuid); NULL when unknown */
    uint64_t free, total;
    const char *reading;        /* "last_good": total is the driver's last answer */
    const char *reading_time;
    uint64_t reserved_bytes, allocated_bytes, gap_bytes;
    uint64_t largest_free_block;
    double fragmentation;
    long long rank, pid;
    struct tl_seen seen;
};

/* One entry of "repairs": a figure that broke an invariant, repaired. */
struct tl_repair_entry {
    const char *invariant, *where, *figure;
    long long was, now;
    struct tl_seen seen;
};

/* One entry of "ranks", which only merged reports have. */
struct tl_rank {
    long long rank;
    long long pid;
    const char *host;
    uint64_t leaked_bytes, leaked_allocations, live_bytes, reserved_bytes;
    const char *file;
    struct tl_seen seen;
};

struct tl_invalid_free {
    const char *address;
    const char *kind;
    bool suppressed;
    struct tl_stack stack;
    long long rank, pid;
    struct tl_seen seen;
};

/* One pool of the failing device as the out-of-memory post-mortem read it
 * ("oom.pools"): its figures at the failure, and whether its free bytes
 * would have served the request. */
struct tl_oom_pool {
    const char *name, *kind;
    const char *state;          /* the bridge's pools: "fresh" (read at the failure) | "stale" | "final" */
    uint64_t reserved_bytes, allocated_bytes, free_bytes, largest_free_block;
    uint64_t empty_cache_bytes; /* segments without a live block: what releasing the cache returns */
    const char *verdict;        /* "not_enough_memory" | "fragmentation" | "fits" | "unknown" */
    const char *note;           /* why a figure or the verdict is unknown */
    struct tl_pool_site *pinning; /* live blocks in segments with free space, by call site */
    size_t pinning_count;
    struct tl_seen seen;
};

struct tl_oom {
    uint64_t bytes;
    const char *kind;
    long long device;
    struct tl_stack stack;
    /* The post-mortem (reports since the verdict; null or absent before):
     * the driver's free memory at the failure, the verdict, what would
     * serve the request, and the failing device's pools. */
    uint64_t device_free;
    const char *verdict;        /* "not_enough_memory" | "fragmentation" | "unknown" */
    const char *remedy;         /* "empty_cache" | "expandable_segments" | "smaller_request" | NULL */
    uint64_t empty_cache_bytes;
    const char *note;
    struct tl_oom_pool *pools;
    size_t pool_count;
    long long rank, pid;
    struct tl_seen seen;
};

/* "tracker": what tracking cost (report-format.md says each count). */
struct tl_tracker {
    uint64_t stacks_unwound, thread_entries_learned, python_stacks, python_stacks_unreadable;
    uint64_t python_code_objects_freed; /* 0 where not counted (null) */
    uint64_t cfi_walks_contradicted, table_owner_claims, walk_verdicts_evicted;
    struct tl_seen seen;
};

/* "bridge": the Python bridge's state (null when none serves). */
struct tl_bridge {
    const char *state;          /* "none" | "fresh" | "stale" | "final" */
    double read_at;
    const char *note;
    const char **errors;
    size_t error_count;
    struct tl_seen seen;
};

/* One device's memory from before `tensorleak attach` (attach_before.c). */
struct tl_attach_before {
    long long device;
    uint64_t process_bytes;     /* the driver's per-process figure at the attach (NVML); null when unknown */
    uint64_t freed_bytes;       /* pointers from before the attach freed since (cuMemGetAddressRange sizes) */
    uint64_t freed_allocations;
    uint64_t framework_reserved_bytes; /* the frameworks' pools, the bridge's first read after the attach; null when none */
    struct tl_seen seen;
};

/* "attach": only in a process tensorleak attached to. */
struct tl_attach {
    const char *time;           /* when tracking began */
    double interval;            /* TENSORLEAK_INTERVAL: growth is per interval; null when none */
    struct tl_attach_before *before;
    size_t before_count;
    struct tl_seen seen;
};

/* "gate": the CI gate's verdict. */
struct tl_gate {
    const char **fail_on;
    size_t fail_on_count;
    bool failed;
    const char **failed_kinds;
    size_t failed_kind_count;
    struct tl_seen seen;
};

struct tl_report {
    const char *path;           /* as given on the command line */
    /* The report as the model writes it (report_to_json), for code that
     * carries entries over as JSON (merge): built by report_tree() at its
     * first call, NULL until then.  `source` is the tree read, which the
     * strings point into. */
    json_t *root;
    json_t *source;
    /* The reader's demangler (report_from_json's), NULL for none. */
    char *(*demangler)(const char *mangled);
    struct tl_report_arena *arena; /* strings and lists the model owns */

    const char *tool;
    long long schema;
    const char *version, *reason, *label;
    long long seq;
    long long pid;
    long long rank;
    const char *host;
    const char **command;
    size_t command_count;
    const char *time;
    long long depth, python_depth;

    struct tl_summary summary;
    struct tl_tracker tracker;
    struct tl_leak *leaks;
    size_t leak_count;
    struct tl_leak *sites;      /* optional "sites": live call sites */
    size_t site_count;
    struct tl_leak *held;       /* optional "held": kept at exit by a pool or a */
    size_t held_count;          /* cache/library/workspace owner (not leaks) */
    struct tl_ipc ipc;
    struct tl_owner *owners;    /* optional "owners" */
    size_t owner_count;
    struct tl_owner_device *owner_devices; /* optional "owners_by_device" */
    size_t owner_device_count;
    struct tl_pool *pools;
    size_t pool_count;
    struct tl_device *devices;
    size_t device_count;
    struct tl_repair_entry *repairs;
    size_t repair_count;
    struct tl_growth *growth;
    size_t growth_count;
    struct tl_bridge bridge;
    struct tl_mark *marks;
    size_t mark_count;
    struct tl_invalid_free *invalid_frees;
    size_t invalid_free_count;
    struct tl_oom oom;
    struct tl_gate gate;
    const char **merged_from;
    size_t merged_from_count;
    struct tl_rank *ranks;
    struct tl_attach attach;
    size_t rank_count;
    struct tl_seen seen;

};

/* ---- report_fields.c: the tables of fields -------------------------------
 * Every object of a report is described by a table: its fields in the order
 * they are written, each with its JSON type and where it lives in the model.
 * The reader (report_read.c) and the writer (report_write.c) walk these
 * tables and nothing else, the schema test (tests/schema) holds each table
 * against docs/report.schema.json, so a field is one line in a table plus
 * whatever renders it. */
enum tl_field_type {
    TL_FIELD_U64,     /* uint64_t: a non-negative integer */
    TL_FIELD_INT,     /* long long: an integer */
    TL_FIELD_REAL,    /* double: a number */
    TL_FIELD_BOOL,    /* bool */
    TL_FIELD_STRING,  /* const char * */
    TL_FIELD_STRINGS, /* const char **, with a size_t count: an array of strings */
    TL_FIELD_OBJECT,  /* an embedded struct, described by its table */
    TL_FIELD_LIST,    /* T *, with a size_t count: an array of objects */
    TL_FIELD_HEX,     /* uint64_t: an address, written "0x..." in lower-case hex */
};
/* A reader error when the field is absent, or null unless NULLABLE. */
#define TL_FIELD_REQUIRED 1u
/* The schema allows null (the reader keeps any field's null, in tl_seen). */
#define TL_FIELD_NULLABLE 2u
/* INT: a negative value is an error. */
#define TL_FIELD_NONNEG 4u
/* U64: a negative value (a gap from before the invariants) reads as 0. */
#define TL_FIELD_GAP 8u
/* The live file (src/live.c, docs/live.schema.json) carries the field.  An
 * OBJECT or LIST marked LIVE whose own table marks no field LIVE is carried
 * whole. */
#define TL_FIELD_LIVE 16u

struct tl_table;
struct tl_field {
    const char *name;
    unsigned char type, flags;
    size_t offset;       /* the value (OBJECT: the struct; LIST, STRINGS: the pointer) */
    size_t count_offset; /* LIST, STRINGS: the size_t count */
    const struct tl_table *table; /* OBJECT, LIST: the element's */
};
struct tl_table {
    const char *name;    /* what the schema calls it ("pool", "summary") */
    size_t size;         /* of one element */
    size_t seen_offset;  /* of its struct tl_seen */
    const struct tl_field *fields;
    size_t nfields;
    /* Once an element is read or built: its derived members (a null device
     * as -1, a site's counted_elsewhere) and the checks types cannot say;
     * false with a message (appended to the element's path) when the
     * element is wrong. */
    bool (*derive)(struct tl_report *r, void *element, char *error, size_t size);
};
/* The report itself; its fields' tables hang below it. */
extern const struct tl_table tl_report_table;
extern const struct tl_table tl_summary_table;
/* report_write.c: one object (an element of `t`) as JSON; NULL when out of
 * memory. */
json_t *report_object_to_json(const struct tl_table *t, const void *elem);
/* report_write.c: the fields of `elem` (an element of `t`) that the live
 * file carries (TL_FIELD_LIVE), as JSON; NULL when out of memory. */
json_t *report_live_object_to_json(const struct tl_table *t, const void *elem);

/* Memory a model owns (report_fields.c): zeroed blocks, freed with it. */
void *report_alloc(struct tl_report *r, size_t size);
/* Frees what report_alloc gave (report_free does). */
void report_arena_free(struct tl_report *r);
/* A copy of `s` (NULL for NULL) the model owns; NULL when out of memory. */
const char *report_strdup(struct tl_report *r, const char *s);
/* printf into a string the model owns. */
const char *report_printf(struct tl_report *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* report_read.c: the fields of `obj` read into `elem`, an element of `t`
 * (as report_from_json reads them, each marked seen); fields obj lacks, and
 * fields the table refuses, keep what `elem` had, and a list of strings
 * keeps its strings only.  The library adds what its allocator views
 * gathered as JSON (a scoped growth row's fields) this way.  False, with the
 * first refusal in `error`, when something was left out. */
bool report_read_into(struct tl_report *r, json_t *obj, const struct tl_table *t, void *elem, char *error,
                      size_t size);
/* The same, for the fields of `t` whose bits (TL_BIT, report_fields.h) are
 * in `fields` only: for an object whose other fields are read otherwise
 * (a framework's pool object, whose figures its gather row keeps). */
bool report_read_fields(struct tl_report *r, json_t *obj, const struct tl_table *t, uint64_t fields, void *elem,
                        char *error, size_t size);
/* report_fields.c: the table of field `name` of `t` (an object or a list's
 * element), NULL when it has none. */
const struct tl_table *report_field_table(const struct tl_table *t, const char *name);

/* The derived members of every object of a model built in memory (the
 * library's), as report_from_json sets them for a model it reads. */
void report_derive(struct tl_report *r);
/* report_write.c: the model as its JSON report: exactly the present fields
 * of every object, in the tables' order.  NULL when out of memory. */
json_t *report_to_json(const struct tl_report *r);
/* Writes exactly what json_dump_callback(report_to_json(r), sink, data,
 * flags) would, byte for byte, straight from the model: no tree (a tree
 * costs about 1 KB a listed allocation), the text handed to `sink` in
 * pieces of up to 64 KiB.  Flags: JSON_INDENT, JSON_COMPACT,
 * JSON_ENSURE_ASCII, JSON_ESCAPE_SLASH, JSON_REAL_PRECISION; JSON_SORT_KEYS
 * and JSON_EMBED are refused.  0, or -1 when out of memory, when `sink`
 * failed or on a real jansson refuses (not finite: report_to_json fails on
 * it too); the text given to `sink` is then cut. */
int report_dump(const struct tl_report *r, size_t flags, json_dump_callback_t sink, void *data);
/* report_dump(r, JSON_INDENT(2) | JSON_REAL_PRECISION(15)) into `out`, as
 * the CLI writes a report.  False when out of memory (the text written is
 * then cut); a write error is left in `out`'s error flag. */
bool report_write_json(FILE *out, const struct tl_report *r);

/*
 * Loads and checks the report at `path` ("-" reads stdin). On failure prints
 * `tensorleak: PATH: <reason>` on stderr and returns false; `out` is then
 * left empty (report_free() is still safe). Never aborts on bad input.
 * (tools/report_load.c, the CLI's only)
 */
bool report_load(const char *path, struct tl_report *out);

/* A demangler: the demangled name (malloc'd), or NULL. */
typedef char *report_demangler(const char *mangled);

/* report_read.c: reads the report tree `root` (a reference of its own kept
 * in out->source) into `out`; `path` is what out->path says.  False on a
 * field of the wrong type or a broken layout, with the first failure in
 * `error` ("leaks[3].stack[0].line: expected an integer") and `out` left
 * empty.  `demangle`, when given, demangles C++ names still mangled
 * ("_Z...") (the CLI's; the library has demangled what it could already and
 * loads nothing at exit). */
bool report_from_json(json_t *root, const char *path, report_demangler *demangle, struct tl_report *out,
                      char *error, size_t error_size);

void report_free(struct tl_report *report);

/* The report as the model writes it (report_to_json), built at the first
 * call and kept in report->root until report_free; NULL when out of memory.
 * Only what re-emits entries as JSON needs it: the tree costs about what
 * the tree read costs. */
json_t *report_tree(struct tl_report *report);

/* Last path component of a module path ("leaky_inference"). */
const char *report_basename(const char *path);

/* A VA reservation, a mapping or another process's memory mapped here (CUDA
 * IPC) is address space, not this process's memory: listed as what it is,
 * never added to a byte figure (the handle mapped there, or the exporting
 * process, holds the memory). */
bool report_kind_is_address_space(const char *kind);
/* What a leak of such a kind is, for a text line (" of address space (not
 * memory)", ...); "" for memory. */
const char *report_kind_apart_words(const char *kind);

/* A leak's kind as the formats show it: "vmm_handle, imported" for an
 * imported handle, "device" when the report names none. */
const char *report_leak_kind(const struct tl_leak *l);

/* ---- report_text.c: the LeakSanitizer-like text report ------------------ */
/* The whole report, as the library prints it at exit and `tensorleak
 * report` prints a saved one; "Report: REPORT_NAME" ends it. */
void format_text(FILE *out, const struct tl_report *report, const char *report_name);
/* One "    #N 0xADDR in FUNC FILE:LINE (MODULE+OFF)" line. */
void format_frame(FILE *out, size_t index, const struct tl_frame *frame);
/* A stack as a person reads it (stack_view.h: the innermost Python frame
 * first, native runs folded into one line naming their libraries, every
 * frame when format_frames_all), or a line saying there is none. */
void format_stack(FILE *out, const struct tl_stack *stack);
/* Every frame as recorded (`tensorleak report --frames all`,
 * TENSORLEAK_FRAMES=all). */
extern bool format_frames_all;
/* The rows of a stack (stack_view.h) in *rows (malloc'd, the caller frees;
 * NULL when out of memory or empty) and their count. */
struct tl_view_row;
size_t format_stack_rows(const struct tl_stack *stack, struct tl_view_row **rows);
/* A folded row's words: "7 native frames: libffi, _ctypes, libpython3.11". */
void format_fold_words(const struct tl_stack *stack, const struct tl_view_row *row, char *buf, size_t size);
/* The out-of-memory verdict in one sentence, as every format says it (the
 * report has one: TL_HAS(&r->oom, OOM, verdict)): "fragmentation: 620.0 MiB free (20.0
 * MiB on the device, 600.0 MiB in caches), no free block of 50.0 MiB
 * (largest 15.0 MiB); would serve it: PYTORCH_CUDA_ALLOC_CONF=...". */
void report_oom_sentence(const struct tl_oom *oom, char *buf, size_t size);
/* One pool of "oom.pools" in words: "reserved 800.0 MiB, allocated 200.0
 * MiB, free 600.0 MiB, largest free block 15.0 MiB, empty_cache() returns
 * 0 B: fragmentation", "unknown" for a figure the report does not have. */
void report_oom_pool_words(const struct tl_oom_pool *pool, char *buf, size_t size);
/* "torch.cuda.empty_cache()", "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
 * "nothing short of a smaller request"; "unknown" for none. */
const char *report_oom_remedy_words(const char *remedy);

#endif
