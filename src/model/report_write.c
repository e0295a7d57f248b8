/*
 * report_write.c: the report model as JSON, walking the tables of
 * report_fields.c: every field an object's tl_seen marks present, in its
 * table's order, null where it was null.  Two ways: as a jansson tree
 * (report_to_json, for code that picks entries out of it), and straight to
 * text (report_dump: the library's report files, `tensorleak report
 * --format json` and `merge`), which writes what jansson would write from
 * the tree without building it, so a report of a million listed
 * allocations costs its text in 64 KiB pieces instead of a gigabyte of
 * tree.  A field is written the same way everywhere; tl_summary_fields
 * gives merge each summary field's rule.
 */
#include "model.h"

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

static json_t *object_to_json(const struct tl_table *t, const void *elem, bool live);

/* Whether `t` marks any field LIVE: a live view of an object of a table
 * that marks none is the whole object. */
static bool table_has_live(const struct tl_table *t)
{
    for (size_t i = 0; i < t->nfields; i++)
        if (t->fields[i].flags & TL_FIELD_LIVE)
            return true;
    return false;
}

/* Field `f` of `elem` as JSON (null: it was null); NULL when out of memory
 * or, with *left_out set, when the field is left out.  `live`: objects
 * below it as the live file carries them (TL_FIELD_LIVE). */
static json_t *field_to_json(const struct tl_field *f, const void *elem, bool null, bool live, bool *left_out)
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
        case TL_FIELD_OBJECT: v = object_to_json(f->table, at, live); break;
        case TL_FIELD_STRINGS:
        case TL_FIELD_LIST: {
            const char *items = *(const char *const *)at;
            size_t n = *(const size_t *)((const char *)elem + f->count_offset);
            v = json_array();
            for (size_t k = 0; v && k < n; k++) {
                json_t *e = f->type == TL_FIELD_STRINGS
                                ? json_string(((const char *const *)items)[k])
                                : object_to_json(f->table, items + k * f->table->size, live);
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

static json_t *object_to_json(const struct tl_table *t, const void *elem, bool live)
{
    const struct tl_seen *seen = (const struct tl_seen *)((const char *)elem + t->seen_offset);
    live = live && table_has_live(t);
    json_t *o = json_object();
    for (size_t i = 0; o && i < t->nfields; i++) {
        const struct tl_field *f = &t->fields[i];
        if (!(seen->present >> i & 1) || (live && !(f->flags & TL_FIELD_LIVE)))
            continue;
        bool left_out;
        json_t *v = field_to_json(f, elem, seen->null >> i & 1, live, &left_out);
        if (left_out)
            continue;
        if (!v || json_object_set_new(o, f->name, v) != 0) {
            json_decref(o);
            o = NULL;
        }
    }
    return o;
}

json_t *report_object_to_json(const struct tl_table *t, const void *elem)
{
    return object_to_json(t, elem, false);
}

json_t *report_live_object_to_json(const struct tl_table *t, const void *elem)
{
    return object_to_json(t, elem, true);
}

/* ---- the model as jansson would dump its tree, without the tree -------- */

/* Text gathered before it goes to the sink: a million listed allocations
 * are a hundred megabytes of report, written in pieces of this size. */
#define DUMP_BUFFER (64 * 1024)

struct dump {
    json_dump_callback_t sink;
    void *data;
    size_t flags;
    char *buf;
    size_t used;
    bool failed; /* out of memory, a figure jansson refuses, or the sink said no */
};

static void dump_flush(struct dump *d)
{
    if (d->used && !d->failed && d->sink(d->buf, d->used, d->data) != 0)
        d->failed = true;
    d->used = 0;
}

static void put(struct dump *d, const char *s, size_t n)
{
    if (d->used + n > DUMP_BUFFER) {
        dump_flush(d);
        if (n > DUMP_BUFFER) {
            if (!d->failed && d->sink(s, n, d->data) != 0)
                d->failed = true;
            return;
        }
    }
    memcpy(d->buf + d->used, s, n);
    d->used += n;
}

static void put_str(struct dump *d, const char *s)
{
    put(d, s, strlen(s));
}

/* What jansson writes between two values: a newline and `depth` levels of
 * indentation, or with no indentation a space where `space` asks. */
static void put_indent(struct dump *d, int depth, bool space)
{
    static const char spaces[] = "                                ";
    size_t n = (size_t)depth * (d->flags & JSON_MAX_INDENT);
    if (!(d->flags & JSON_MAX_INDENT)) {
        if (space && !(d->flags & JSON_COMPACT))
            put(d, " ", 1);
        return;
    }
    put(d, "\n", 1);
    for (; n > sizeof spaces - 1; n -= sizeof spaces - 1)
        put(d, spaces, sizeof spaces - 1);
    put(d, spaces, n);
}

static void put_int(struct dump *d, long long v)
{
    char text[24], *p = text + sizeof text;
    unsigned long long u = v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v;
    do
        *--p = (char)('0' + u % 10);
    while (u /= 10);
    if (v < 0)
        *--p = '-';
    put(d, p, (size_t)(text + sizeof text - p));
}

static void put_hex(struct dump *d, uint64_t v)
{
    char text[24], *p = text + sizeof text;
    *--p = '"';
    do
        *--p = "0123456789abcdef"[v & 15];
    while (v >>= 4);
    *--p = 'x';
    *--p = '0';
    *--p = '"';
    put(d, p, (size_t)(text + sizeof text - p));
}

/* A real as jansson writes it at this precision; a value it refuses (not
 * finite) fails the dump, as it fails report_to_json. */
static void put_real(struct dump *d, double v)
{
    json_t *j = json_real(v);
    char *text = j ? json_dumps(j, d->flags | JSON_ENCODE_ANY) : NULL;
    json_decref(j);
    if (!text)
        d->failed = true;
    else
        put_str(d, text);
    free(text);
}

/* The length of `s` when jansson writes it as it is between quotes (no
 * escape, nothing past ASCII); -1 when it does not. */
static long plain_length(const char *s, size_t flags)
{
    const unsigned char *p = (const unsigned char *)s;
    for (; *p; p++)
        if (*p < 0x20 || *p >= 0x80 || *p == '"' || *p == '\\' || (*p == '/' && (flags & JSON_ESCAPE_SLASH)))
            return -1;
    return (long)(p - (const unsigned char *)s);
}

/* A string that needs escapes or is not ASCII, as jansson writes it
 * (malloc'd); NULL when it is not UTF-8 (*left_out) or memory ran out. */
static char *escaped_string(const char *s, size_t flags, bool *left_out)
{
    json_t *j = json_string(s);
    *left_out = !j;
    char *text = j ? json_dumps(j, flags | JSON_ENCODE_ANY) : NULL;
    json_decref(j);
    return text;
}

static void put_plain(struct dump *d, const char *s, size_t n)
{
    put(d, "\"", 1);
    put(d, s, n);
    put(d, "\"", 1);
}

/* An entry of a list of strings: one that is not UTF-8 is "?", as
 * field_to_json keeps it. */
static void put_string_entry(struct dump *d, const char *s)
{
    long n = s ? plain_length(s, d->flags) : -1;
    bool left_out = true;
    char *text = n < 0 && s ? escaped_string(s, d->flags, &left_out) : NULL;
    if (n >= 0)
        put_plain(d, s, (size_t)n);
    else if (text)
        put_str(d, text);
    else if (left_out)
        put_plain(d, "?", 1);
    else
        d->failed = true;
    free(text);
}

static void put_object(struct dump *d, const struct tl_table *t, const void *elem, int depth);

/* A list field's entries at `depth`, each as jansson writes an array's. */
static void put_list(struct dump *d, const struct tl_field *f, const void *elem, int depth)
{
    const char *items = *(const char *const *)((const char *)elem + f->offset);
    size_t n = *(const size_t *)((const char *)elem + f->count_offset);
    put(d, "[", 1);
    if (!n) {
        put(d, "]", 1);
        return;
    }
    put_indent(d, depth + 1, false);
    for (size_t k = 0; k < n && !d->failed; k++) {
        if (f->type == TL_FIELD_STRINGS)
            put_string_entry(d, ((const char *const *)items)[k]);
        else
            put_object(d, f->table, items + k * f->table->size, depth + 1);
        if (k + 1 < n) {
            put(d, ",", 1);
            put_indent(d, depth + 1, true);
        }
    }
    put_indent(d, depth, false);
    put(d, "]", 1);
}

/* report_object_to_json(t, elem) as jansson dumps it at `depth`: the same
 * fields (a string that is not UTF-8 left out), the same text. */
static void put_object(struct dump *d, const struct tl_table *t, const void *elem, int depth)
{
    const struct tl_seen *seen = (const struct tl_seen *)((const char *)elem + t->seen_offset);
    const char *separator = d->flags & JSON_COMPACT ? ":" : ": ";
    size_t written = 0;
    put(d, "{", 1);
    for (size_t i = 0; i < t->nfields && !d->failed; i++) {
        const struct tl_field *f = &t->fields[i];
        if (!(seen->present >> i & 1))
            continue;
        bool null = seen->null >> i & 1;
        const char *at = (const char *)elem + f->offset;
        const char *s = !null && f->type == TL_FIELD_STRING ? *(const char *const *)at : NULL;
        long plain = s ? plain_length(s, d->flags) : 0;
        char *text = NULL;
        if (plain < 0) {
            bool left_out;
            if (!(text = escaped_string(s, d->flags, &left_out))) {
                d->failed |= !left_out;
                continue; /* not UTF-8: the field is left out, not the report */
            }
        }
        if (written)
            put(d, ",", 1);
        put_indent(d, depth + 1, written++ > 0);
        put_plain(d, f->name, strlen(f->name));
        put_str(d, separator);
        if (null || (f->type == TL_FIELD_STRING && !s)) {
            put(d, "null", 4);
        } else {
            switch (f->type) {
            case TL_FIELD_U64: {
                uint64_t v = *(const uint64_t *)at; /* past jansson's integers: saturated */
                put_int(d, v > (uint64_t)INT64_MAX ? INT64_MAX : (long long)v);
                break;
            }
            case TL_FIELD_INT: put_int(d, *(const long long *)at); break;
            case TL_FIELD_REAL: put_real(d, *(const double *)at); break;
            case TL_FIELD_BOOL: put_str(d, *(const bool *)at ? "true" : "false"); break;
            case TL_FIELD_STRING:
                if (text)
                    put_str(d, text);
                else
                    put_plain(d, s, (size_t)plain);
                break;
            case TL_FIELD_HEX: put_hex(d, *(const uint64_t *)at); break;
            case TL_FIELD_OBJECT: put_object(d, f->table, at, depth + 1); break;
            case TL_FIELD_STRINGS:
            case TL_FIELD_LIST: put_list(d, f, elem, depth + 1); break;
            }
        }
        free(text);
    }
    if (written)
        put_indent(d, depth, false);
    put(d, "}", 1);
}

int report_dump(const struct tl_report *r, size_t flags, json_dump_callback_t sink, void *data)
{
    if (flags & (JSON_SORT_KEYS | JSON_EMBED))
        return -1;
    struct dump d = {.sink = sink, .data = data, .flags = flags, .buf = malloc(DUMP_BUFFER)};
    if (!d.buf)
        return -1;
    put_object(&d, &tl_report_table, r, 0);
    dump_flush(&d);
    free(d.buf);
    return d.failed ? -1 : 0;
}

/* The CLI's output: a write error stays in the stream's error flag, which
 * closing the output reports (cli_close_output); false here means out of
 * memory only. */
static int dump_to_stream(const char *buffer, size_t size, void *data)
{
    fwrite(buffer, 1, size, data);
    return 0;
}

bool report_write_json(FILE *out, const struct tl_report *r)
{
    return report_dump(r, JSON_INDENT(2) | JSON_REAL_PRECISION(15), dump_to_stream, out) == 0;
}

json_t *report_summary_to_json(const struct tl_summary *s)
{
    return report_object_to_json(&tl_summary_table, s);
}

json_t *report_to_json(const struct tl_report *r)
{
    return report_object_to_json(&tl_report_table, r);
}
