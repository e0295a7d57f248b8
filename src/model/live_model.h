/*
 * live_model.h — what only the live file has (docs/live.schema.json), beside
 * the report model that holds the rest of it: the fields the report's tables
 * mark live (TL_FIELD_LIVE) are the report's, these are the live file's own,
 * each object described by a table (live_fields.c) that the model's reader
 * and writer walk as they walk the report's.  The publisher (live.c) fills
 * them and writes the file with live_to_json; the readers (live_read.c) read
 * them back with the same tables; `top --json` is live_to_json again.
 */
#ifndef TL_LIVE_MODEL_H
#define TL_LIVE_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model.h"

struct live_state {             /* "live": which process, and when */
    const char *process;        /* the executable's name, never its arguments */
    double start_time;
    uint64_t start_ticks;       /* /proc/PID/stat's start time: which process of that pid */
    const char *pid_namespace;  /* "pid:[N]": whose pids these are */
    double update_time, interval;
    struct tl_seen seen;
};
struct live_marks {             /* "marks": the marks so far */
    uint64_t count;
    const char *last_label;     /* null before the first mark */
    double last_time;
    struct tl_seen seen;
};
struct live_growth_line {       /* a "growth" row's own fields, beside the report's */
    const char *site;           /* one line: the site's user frame (stack_view.h) */
    long long since_mark;       /* the streak spans this many marks up to the last */
    struct tl_seen seen;
};
/* "owner_classes": live bytes per owner class, a class present when an
 * owner of it is; in the order the default owner rules first name them. */
enum { LIVE_CLASS_USER, LIVE_CLASS_CACHE, LIVE_CLASS_WORKSPACE, LIVE_CLASS_LIBRARY, LIVE_CLASSES };
struct live_classes {
    long long bytes[LIVE_CLASSES];
    struct tl_seen seen;
};
struct live_ipc_row {           /* "ipc.devices": other processes' memory mapped here, per importing device */
    long long device;
    uint64_t mapped_bytes, mappings;
    struct tl_seen seen;
};
struct live_ipc {               /* "ipc" */
    struct live_ipc_row *devices;
    size_t ndevices;
    struct tl_seen seen;
};
struct live_budget_row {        /* "budgets" */
    long long device;
    const char *cls;
    uint64_t bytes;
    long long used_bytes;
    bool exceeded;
    struct tl_seen seen;
};
/* The live file's own top-level fields, in the order they follow the
 * report's; growth[i] is the report's growth[i]'s own part. */
struct live_doc {
    const char *kind;           /* "live" */
    struct live_marks marks;
    struct live_growth_line *growth;
    size_t ngrowth;
    struct live_classes classes;
    struct live_ipc ipc;
    struct live_budget_row *budgets;
    size_t nbudgets;
    struct live_state live;
    struct tl_seen seen;
};

/* Field bits of each table (live_fields.c), in table order. */
enum { LIVE_F_STATE_process, LIVE_F_STATE_start_time, LIVE_F_STATE_start_ticks, LIVE_F_STATE_pid_namespace,
       LIVE_F_STATE_update_time, LIVE_F_STATE_interval, LIVE_F_STATE_COUNT };
enum { LIVE_F_MARKS_count, LIVE_F_MARKS_last_label, LIVE_F_MARKS_last_time, LIVE_F_MARKS_COUNT };
enum { LIVE_F_LINE_site, LIVE_F_LINE_since_mark, LIVE_F_LINE_COUNT };
enum { LIVE_F_IPCDEV_device, LIVE_F_IPCDEV_mapped_bytes, LIVE_F_IPCDEV_mappings, LIVE_F_IPCDEV_COUNT };
enum { LIVE_F_IPC_devices, LIVE_F_IPC_COUNT };
enum { LIVE_F_BUDGET_device, LIVE_F_BUDGET_class, LIVE_F_BUDGET_bytes, LIVE_F_BUDGET_used_bytes,
       LIVE_F_BUDGET_exceeded, LIVE_F_BUDGET_COUNT };
enum { LIVE_F_DOC_kind, LIVE_F_DOC_marks, LIVE_F_DOC_growth, LIVE_F_DOC_owner_classes, LIVE_F_DOC_ipc,
       LIVE_F_DOC_budgets, LIVE_F_DOC_live, LIVE_F_DOC_COUNT };
#define LIVE_BIT(table, name) (1ull << LIVE_F_##table##_##name)
#define LIVE_ALL(table) ((1ull << LIVE_F_##table##_COUNT) - 1)

extern const struct tl_table live_state_table, live_marks_table, live_growth_line_table, live_classes_table,
    live_ipc_table, live_ipc_object_table, live_budget_table, live_doc_table;

/* Whether field `name` of `elem`, a row of `t`, has a value (present, not
 * null): unknown otherwise, shown as such, never as 0. */
bool live_has(const struct tl_table *t, const void *elem, const char *name);

/* The live document of `r` and `d`: the fields of the report the tables mark
 * live, the live file's own laid over them (a growth row's own fields into
 * that row), in the tables' order.  NULL when out of memory. */
json_t *live_to_json(const struct tl_report *r, const struct live_doc *d);

#endif
