/*
 * report.h: the report model, a tensorleak JSON report (schema 1,
 * docs/report-format.md) held in memory, shared by the CLI and the preload
 * library.  The library gathers its state (report_gather.h), writes it as
 * JSON (report_json.c) and reads that back into this model to print it
 * (report_text.c); the CLI reads saved files into it (report_load()).
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
    uint64_t present, null;
    /* largest_free_block or fragmentation was null: unknown, not 0 (some
     * free space has no layout tensorleak can see). */
    bool layout_unknown;
};

/* The report gave the summary field `name` a value (not absent, not null). */
#define tl_summary_has(s, name) \
    (((s)->present >> TL_SUMMARY_##name & 1) && !((s)->null >> TL_SUMMARY_##name & 1))

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
 * every field `present` marks (null where `null` does), the others left
 * out.  NULL when out of memory. */
json_t *report_summary_to_json(const struct tl_summary *s);

struct tl_frame {
    const char *address;    /* "0x55d0c1a2b3c4" */
    const char *module;     /* path as recorded */
    const char *offset;     /* "0x13c4", offset in module */
    const char *function;
    const char *file;
    long long line;         /* 0 when unknown */
    bool python;            /* a Python frame ("python": true): no address */
};

struct tl_stack {
    struct tl_frame *frames;    /* frames[0] is the innermost (#0) */
    size_t count;
};

/* One entry of a site's optional "allocations" list. */
struct tl_allocation {
    bool has_address;           /* false: a row keyed by a handle (null) */
    uint64_t address;
    uint64_t bytes;
    long long device;           /* -1: host memory (null) */
};

/* One entry of "leaks" (or of "sites"): a deduplicated call site. */
struct tl_leak {
    const char *kind;           /* "device", "host_pinned", ... */
    uint64_t bytes;             /* 0 when bytes_unknown */
    uint64_t count;
    /* Optional "allocations": some of its live allocations; has_allocations
     * false in reports written before they were listed. */
    bool has_allocations;
    struct tl_allocation *allocations;
    size_t allocation_count;
    /* "bytes" is null: some of the allocations have a size the driver did
     * not report (unknown_size_allocations of them). */
    bool bytes_unknown;
    uint64_t unknown_size_allocations;
    bool suppressed;
    const char *suppression;    /* "leak:pattern" that matched, if any */
    struct tl_stack stack;
    bool has_rank;              /* entries of a merged report carry their rank */
    long long rank;
    const char *owner;          /* optional: "PyTorch caching allocator", "user" */
    const char *owner_class;    /* optional: "cache", "workspace", "library", "user" */
    bool imported;              /* vmm_handle: imported from a shareable handle (optional "imported") */
    uint64_t counted_elsewhere; /* merge: bytes of its "shared" entries another input counts */
};

/*
 * One entry of the optional "owners" array: memory attributed by the owner
 * rules (data/owners.rules) to one owner; "user" is what no rule matched.
 */
struct tl_owner {
    const char *name;
    const char *cls;            /* "cache" | "workspace" | "library" | "user" */
    uint64_t live_bytes, live_allocations, peak_bytes;
};

/* One entry of the optional "owners_by_device": an owner's live memory on
 * one device (device -1: host memory). */
struct tl_owner_device {
    const char *name;
    const char *cls;
    int device;
    uint64_t live_bytes, live_allocations;
};

struct tl_growth {
    const char *kind;
    uint64_t bytes_per_mark;
    uint64_t marks;
    uint64_t count_per_mark;
    bool suppressed;
    struct tl_stack stack;
    bool has_rank;
    long long rank;
    /* Rows without a call site: "scope" "pool" (a framework pool's
     * allocated bytes), "owner" (an owner's reserve), "python_site"; NULL or
     * "call_site" for a call site's row. */
    const char *scope;
    const char *pool;           /* pool and python_site rows */
    const char *owner, *owner_class;  /* owner rows */
};

/* One allocated block of a pool segment (optional "layout", see tl_segment). */
struct tl_block {
    uint64_t offset;            /* from the segment base */
    uint64_t bytes;
};

/*
 * One reserved segment of an annotated pool, from the optional
 * pools[].layout array: {"base": "0x...", "bytes": N, "blocks": [...]}.
 * report_load() checks that blocks are sorted, do not overlap and end inside
 * the segment, so what lies between them are the free holes.
 */
struct tl_segment {
    const char *base;
    uint64_t bytes;
    struct tl_block *blocks;
    size_t block_count;
};

struct tl_pool {
    const char *name;
    const char *kind;           /* "annotated" | "stream_ordered" | "graph" | a framework's */
    long long device;
    uint64_t reserved_bytes, allocated_bytes, free_bytes, largest_free_block;
    double fragmentation;
    bool has_utilization;
    double utilization;
    uint64_t segments;          /* "segments": how many, 0 when absent */
    bool layout_unknown;        /* largest_free_block/fragmentation null */
    const char *reading;        /* stream-ordered: "current", "last_good", "none" */
    const char *reading_time;   /* ISO-8601, when the driver gave that reading */
    bool has_layout;            /* "layout" present (possibly empty) */
    bool layout_truncated;      /* the writer left segments or blocks out */
    struct tl_segment *layout;
    size_t layout_count;
    bool has_rank;
    long long rank;
    /* A framework's pool read by the Python bridge: "framework"
     * {name, version, mode}, when its state was read, whether fresh. */
    bool has_framework;
    const char *framework_name, *framework_version, *framework_mode;
    bool has_read_at;
    double read_at;             /* unix time */
    const char *state;          /* "fresh" | "stale" | "final" */
    bool bytes_unknown;         /* reserved_bytes null: a host pool without byte counts, or
                                 * graph memory the driver never reported */
    uint64_t free_blocks;
    /* Graph memory: the allocation nodes it holds (their sites are held). */
    uint64_t allocation_nodes, allocation_node_bytes;
};

/* One entry of "marks": the totals when tensorleak_mark() was called. */
struct tl_mark {
    long long seq;
    const char *label;
    uint64_t live_bytes, reserved_bytes;
    bool has_device_free;
    uint64_t device_free;
    double time;                /* seconds, as recorded */
};

struct tl_device {
    long long device;
    uint64_t free, total;
    uint64_t reserved_bytes, allocated_bytes, gap_bytes;
    bool has_largest_free_block;   /* else the summary's applies */
    uint64_t largest_free_block;
    bool has_fragmentation;
    double fragmentation;
    bool layout_unknown;           /* largest_free_block/fragmentation null */
    bool has_free;                 /* "free" known (null at exit when the driver
                                      stopped answering; "total" may be its last) */
    bool has_rank;
    long long rank;
};

/* One entry of "ranks", which only merged reports have. */
struct tl_rank {
    long long rank;
    long long pid;
    const char *host;
    uint64_t leaked_bytes, leaked_allocations, live_bytes, reserved_bytes;
};

struct tl_invalid_free {
    const char *address;
    const char *kind;
    bool suppressed;
    struct tl_stack stack;
    bool has_rank;
    long long rank;
};

struct tl_oom {
    uint64_t bytes;
    const char *kind;
    long long device;
    struct tl_stack stack;
};

struct tl_report {
    const char *path;           /* as given on the command line */
    json_t *root;

    bool has_pid;               /* false for merged reports */
    long long pid;
    bool has_rank;
    long long rank;
    const char *host, *reason, *label, *time, *version;

    struct tl_summary summary;
    bool has_leaks_array;
    struct tl_leak *leaks;
    size_t leak_count;
    bool has_sites;             /* optional "sites": live call sites */
    struct tl_leak *sites;
    size_t site_count;
    struct tl_leak *held;       /* optional "held": kept at exit by a pool or a */
    size_t held_count;          /* cache/library/workspace owner (not leaks) */
    struct tl_owner *owners;    /* optional "owners" */
    size_t owner_count;
    struct tl_owner_device *owner_devices; /* optional "owners_by_device" */
    size_t owner_device_count;
    struct tl_mark *marks;
    size_t mark_count;
    struct tl_growth *growth;
    size_t growth_count;
    struct tl_pool *pools;
    size_t pool_count;
    struct tl_device *devices;
    size_t device_count;
    struct tl_invalid_free *invalid_frees;
    size_t invalid_free_count;
    bool has_oom;
    struct tl_oom oom;
    struct tl_rank *ranks;
    size_t rank_count;
};

/*
 * Loads and checks the report at `path` ("-" reads stdin). On failure prints
 * `tensorleak: PATH: <reason>` on stderr and returns false; `out` is then
 * left empty (report_free() is still safe). Never aborts on bad input.
 * (tools/report_load.c, the CLI's only)
 */
bool report_load(const char *path, struct tl_report *out);

/* report_read.c: reads the report tree `root` (kept, with a reference of
 * its own, as out->root) into `out`; `path` is what out->path says.  False
 * on a field of the wrong type or a broken layout, with the first failure in
 * `error` ("leaks[3].stack[0].line: expected an integer") and `out` left
 * empty.  REPORT_DEMANGLE: C++ names still mangled ("_Z...") are demangled
 * with libstdc++'s __cxa_demangle, loaded for it (the CLI; the library has
 * demangled what it could already and loads nothing at exit). */
#define REPORT_DEMANGLE 1u
bool report_from_json(json_t *root, const char *path, unsigned flags, struct tl_report *out, char *error,
                      size_t error_size);

void report_free(struct tl_report *report);

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

#endif
