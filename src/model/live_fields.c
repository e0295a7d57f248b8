/*
 * live_fields.c — the tables of what only the live file has (live_model.h),
 * and the live document as the model's writer writes it.  Their fields are
 * docs/live.schema.json's; the schema suite holds the two together
 * (tests/schema/dump_live_tables.c).
 */
#include "live_model.h"

#include <string.h>

#define LIVE_FIELD(T, member, name, type) {name, TL_FIELD_##type, TL_FIELD_NULLABLE, offsetof(T, member), 0, NULL}
#define LIVE_OBJECT(T, member, name, table) {name, TL_FIELD_OBJECT, 0, offsetof(T, member), 0, &table}
#define LIVE_LIST(T, member, count, name, table) \
    {name, TL_FIELD_LIST, 0, offsetof(T, member), offsetof(T, count), &table}
#define LIVE_TABLE(T, name, fields) {name, sizeof(T), offsetof(T, seen), fields, sizeof fields / sizeof fields[0], NULL}

static const struct tl_field state_fields[] = {
    LIVE_FIELD(struct live_state, process, "process", STRING),
    LIVE_FIELD(struct live_state, start_time, "start_time", REAL),
    LIVE_FIELD(struct live_state, start_ticks, "start_ticks", U64),
    LIVE_FIELD(struct live_state, pid_namespace, "pid_namespace", STRING),
    LIVE_FIELD(struct live_state, update_time, "update_time", REAL),
    LIVE_FIELD(struct live_state, interval, "interval", REAL),
};
const struct tl_table live_state_table = LIVE_TABLE(struct live_state, "live", state_fields);

static const struct tl_field marks_fields[] = {
    LIVE_FIELD(struct live_marks, count, "count", U64),
    LIVE_FIELD(struct live_marks, last_label, "last_label", STRING),
    LIVE_FIELD(struct live_marks, last_time, "last_time", REAL),
};
const struct tl_table live_marks_table = LIVE_TABLE(struct live_marks, "marks", marks_fields);

static const struct tl_field line_fields[] = {
    LIVE_FIELD(struct live_growth_line, site, "site", STRING),
    LIVE_FIELD(struct live_growth_line, since_mark, "since_mark", INT),
};
const struct tl_table live_growth_line_table = LIVE_TABLE(struct live_growth_line, "growth", line_fields);

static const struct tl_field class_fields[] = {
    [LIVE_CLASS_USER] = LIVE_FIELD(struct live_classes, bytes[LIVE_CLASS_USER], "user", INT),
    [LIVE_CLASS_CACHE] = LIVE_FIELD(struct live_classes, bytes[LIVE_CLASS_CACHE], "cache", INT),
    [LIVE_CLASS_WORKSPACE] = LIVE_FIELD(struct live_classes, bytes[LIVE_CLASS_WORKSPACE], "workspace", INT),
    [LIVE_CLASS_LIBRARY] = LIVE_FIELD(struct live_classes, bytes[LIVE_CLASS_LIBRARY], "library", INT),
};
const struct tl_table live_classes_table = LIVE_TABLE(struct live_classes, "owner_classes", class_fields);

static const struct tl_field ipc_fields[] = {
    LIVE_FIELD(struct live_ipc_row, device, "device", INT),
    LIVE_FIELD(struct live_ipc_row, mapped_bytes, "mapped_bytes", U64),
    LIVE_FIELD(struct live_ipc_row, mappings, "mappings", U64),
};
const struct tl_table live_ipc_table = LIVE_TABLE(struct live_ipc_row, "ipc.devices", ipc_fields);

static const struct tl_field ipc_object_fields[] = {
    LIVE_LIST(struct live_ipc, devices, ndevices, "devices", live_ipc_table),
};
const struct tl_table live_ipc_object_table = LIVE_TABLE(struct live_ipc, "ipc", ipc_object_fields);

static const struct tl_field budget_fields[] = {
    LIVE_FIELD(struct live_budget_row, device, "device", INT),
    LIVE_FIELD(struct live_budget_row, cls, "class", STRING),
    LIVE_FIELD(struct live_budget_row, bytes, "bytes", U64),
    LIVE_FIELD(struct live_budget_row, used_bytes, "used_bytes", INT),
    LIVE_FIELD(struct live_budget_row, exceeded, "exceeded", BOOL),
};
const struct tl_table live_budget_table = LIVE_TABLE(struct live_budget_row, "budgets", budget_fields);

static const struct tl_field doc_fields[] = {
    LIVE_FIELD(struct live_doc, kind, "kind", STRING),
    LIVE_OBJECT(struct live_doc, marks, "marks", live_marks_table),
    LIVE_LIST(struct live_doc, growth, ngrowth, "growth", live_growth_line_table),
    LIVE_OBJECT(struct live_doc, classes, "owner_classes", live_classes_table),
    LIVE_OBJECT(struct live_doc, ipc, "ipc", live_ipc_object_table),
    LIVE_LIST(struct live_doc, budgets, nbudgets, "budgets", live_budget_table),
    LIVE_OBJECT(struct live_doc, live, "live", live_state_table),
};
const struct tl_table live_doc_table = LIVE_TABLE(struct live_doc, "live file", doc_fields);

_Static_assert(sizeof state_fields / sizeof state_fields[0] == LIVE_F_STATE_COUNT, "live_model.h's bits");
_Static_assert(sizeof marks_fields / sizeof marks_fields[0] == LIVE_F_MARKS_COUNT, "live_model.h's bits");
_Static_assert(sizeof line_fields / sizeof line_fields[0] == LIVE_F_LINE_COUNT, "live_model.h's bits");
_Static_assert(sizeof ipc_fields / sizeof ipc_fields[0] == LIVE_F_IPCDEV_COUNT, "live_model.h's bits");
_Static_assert(sizeof budget_fields / sizeof budget_fields[0] == LIVE_F_BUDGET_COUNT, "live_model.h's bits");
_Static_assert(sizeof doc_fields / sizeof doc_fields[0] == LIVE_F_DOC_COUNT, "live_model.h's bits");

bool live_has(const struct tl_table *t, const void *elem, const char *name)
{
    const struct tl_seen *seen = (const struct tl_seen *)((const char *)elem + t->seen_offset);
    for (size_t i = 0; i < t->nfields; i++)
        if (!strcmp(t->fields[i].name, name))
            return tl_seen_has(seen, (unsigned)i);
    return false;
}

/* "growth" is the live file's own list: each row the report's growth row
 * as the live file carries it (TL_FIELD_LIVE), its own fields after. */
static json_t *growth_rows(const struct tl_report *r, const struct live_doc *d, json_t *own)
{
    const struct tl_table *t = report_field_table(&tl_report_table, "growth");
    json_t *rows = json_array();
    for (size_t i = 0; rows && i < d->ngrowth && i < r->growth_count; i++) {
        json_t *row = report_live_object_to_json(t, &r->growth[i]);
        if (!row || json_object_update(row, json_array_get(own, i)) != 0 || json_array_append_new(rows, row) != 0) {
            json_decref(row);
            json_decref(rows);
            rows = NULL;
        }
    }
    return rows;
}

json_t *live_to_json(const struct tl_report *r, const struct live_doc *d)
{
    json_t *root = report_live_object_to_json(&tl_report_table, r);
    json_t *own = report_object_to_json(&live_doc_table, d);
    json_t *growth = own ? json_object_get(own, "growth") : NULL;
    /* The own fields after the report's, in live_doc_table's order. */
    if (!root || !own || (growth && json_object_set_new(own, "growth", growth_rows(r, d, growth)) != 0) ||
        json_object_update(root, own) != 0) {
        json_decref(root);
        root = NULL;
    }
    json_decref(own);
    return root;
}
