/*
 * report_write.c: the report model as JSON, walking the tables of
 * report_fields.c: every field an object's tl_seen marks present, in its
 * table's order, null where it was null.  The preload library writes its
 * reports with it, `tensorleak merge` its summary, so a field is written the
 * same way everywhere; tl_summary_fields gives merge each summary field's
 * rule.
 */
#include "report.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TL_SUMMARY_FLAG_0 0
#define TL_SUMMARY_INFO(name, type, flags, merge)                                                            \
    [TL_SUMMARY_##name] = {#name, TL_SUMMARY_TYPE_##type, TL_SUMMARY_FLAG_##flags, TL_SUMMARY_MERGE_##merge, \
                           offsetof(struct tl_summary, name)},
const struct tl_summary_field_info tl_summary_fields[TL_SUMMARY_NFIELDS] = {TL_SUMMARY_FIELDS(TL_SUMMARY_INFO)};
#undef TL_SUMMARY_INFO

_Static_assert(TL_SUMMARY_NFIELDS <= 64, "tl_summary.present and .null hold a bit a field");

/* A u64 past jansson's (signed) integers saturates. */
static json_t *u64_json(uint64_t v)
{
    return json_integer(v > (uint64_t)INT64_MAX ? INT64_MAX : (json_int_t)v);
}

/* Field `f` of `elem` as JSON (null: it was null); NULL when out of memory
 * or, with *left_out set, when the field is left out. */
static json_t *field_to_json(const struct tl_field *f, const void *elem, bool null, bool *left_out)
{
    const char *at = (const char *)elem + f->offset;
    json_t *v = NULL;
    *left_out = false;
    if (null) {
        v = json_null();
    } else {
        switch (f->type) {
        case TL_FIELD_U64: v = u64_json(*(const uint64_t *)at); break;
        case TL_FIELD_INT: v = json_integer(*(const long long *)at); break;
        case TL_FIELD_REAL: v = json_real(*(const double *)at); break;
        case TL_FIELD_BOOL: v = json_boolean(*(const bool *)at); break;
        case TL_FIELD_STRING:
            if (!*(const char *const *)at) {
                v = json_null();
                break;
            }
            /* A string that is not UTF-8 (a name cut inside a character,
             * a path of raw bytes) is left out, not the report. */
            if (!(v = json_string(*(const char *const *)at)))
                *left_out = true;
            break;
        case TL_FIELD_HEX: {
            char hex[24];
            snprintf(hex, sizeof hex, "0x%llx", (unsigned long long)*(const uint64_t *)at);
            v = json_string(hex);
            break;
        }
        case TL_FIELD_OBJECT: v = report_object_to_json(f->table, at); break;
        case TL_FIELD_STRINGS:
        case TL_FIELD_LIST: {
            const char *items = *(const char *const *)at;
            size_t n = *(const size_t *)((const char *)elem + f->count_offset);
            v = json_array();
            for (size_t k = 0; v && k < n; k++) {
                json_t *e = f->type == TL_FIELD_STRINGS
                                ? json_string(((const char *const *)items)[k])
                                : report_object_to_json(f->table, items + k * f->table->size);
                if (!e && f->type == TL_FIELD_STRINGS)
                    e = json_string("?"); /* not UTF-8: the entry is kept, its text not */
                if (json_array_append_new(v, e) != 0) {
                    json_decref(v);
                    v = NULL;
                }
            }
            break;
        }
        }
    }
    return v;
}

json_t *report_object_to_json(const struct tl_table *t, const void *elem)
{
    const struct tl_seen *seen = (const struct tl_seen *)((const char *)elem + t->seen_offset);
    json_t *o = json_object();
    for (size_t i = 0; o && i < t->nfields; i++) {
        const struct tl_field *f = &t->fields[i];
        if (!(seen->present >> i & 1))
            continue;
        bool left_out;
        json_t *v = field_to_json(f, elem, seen->null >> i & 1, &left_out);
        if (left_out)
            continue;
        if (!v || json_object_set_new(o, f->name, v) != 0) {
            json_decref(o);
            o = NULL;
        }
    }
    return o;
}

#define DUMP_FLAGS (JSON_INDENT(2) | JSON_REAL_PRECISION(15) | JSON_ENCODE_ANY)

/* Writes `v` (dropped) as jansson dumps it, each line after the first
 * after `indent`: as it reads nested in a document dumped whole. */
static bool put_nested(FILE *out, json_t *v, const char *indent)
{
    char *text = v ? json_dumps(v, DUMP_FLAGS) : NULL;
    json_decref(v);
    if (!text)
        return false;
    const char *line = text;
    for (const char *nl; (nl = strchr(line, '\n')); line = nl + 1) {
        fwrite(line, 1, (size_t)(nl - line + 1), out);
        fputs(indent, out);
    }
    fputs(line, out);
    free(text);
    return true;
}

bool report_write_json(FILE *out, const struct tl_report *r)
{
    const struct tl_table *t = &tl_report_table;
    const struct tl_seen *seen = (const struct tl_seen *)((const char *)r + t->seen_offset);
    size_t written = 0;
    fputc('{', out);
    for (size_t i = 0; i < t->nfields; i++) {
        const struct tl_field *f = &t->fields[i];
        bool null = seen->null >> i & 1, left_out = false;
        if (!(seen->present >> i & 1))
            continue;
        if (f->type != TL_FIELD_LIST || null) {
            json_t *v = field_to_json(f, r, null, &left_out);
            if (left_out)
                continue;
            fprintf(out, "%s\"%s\": ", written++ ? ",\n  " : "\n  ", f->name);
            if (!put_nested(out, v, "  "))
                return false;
            continue;
        }
        /* A list (leaks, sites...): one entry at a time. */
        fprintf(out, "%s\"%s\": [", written++ ? ",\n  " : "\n  ", f->name);
        const char *items = *(const char *const *)((const char *)r + f->offset);
        size_t n = *(const size_t *)((const char *)r + f->count_offset);
        for (size_t k = 0; k < n; k++) {
            fputs(k ? ",\n    " : "\n    ", out);
            if (!put_nested(out, report_object_to_json(f->table, items + k * f->table->size), "    "))
                return false;
        }
        fputs(n ? "\n  ]" : "]", out);
    }
    fputs(written ? "\n}" : "}", out);
    return true;
}

json_t *report_summary_to_json(const struct tl_summary *s)
{
    return report_object_to_json(&tl_summary_table, s);
}

json_t *report_to_json(const struct tl_report *r)
{
    return report_object_to_json(&tl_report_table, r);
}
