/*
 * report_read.c: jansson tree -> struct tl_report (model.h), walking the
 * tables of report_fields.c: for the CLI (a saved file, tools/report_load.c,
 * and merge's tree) and the library (the fields its allocator views gather
 * as JSON, report_build.c; a framework's pool object, bridge.c).
 *
 * Every field is checked once here, with an error that names the field by
 * its JSON path ("leaks[3].stack[0].line"), so a truncated, foreign or
 * hand-edited file ends in one clear line and exit 2, never in a crash
 * further on. Optional arrays may be missing; present ones must be well-typed.
 */
#include "model.h"
#include "kinds.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WHERE_MAX 96

struct loader {
    bool failed;
    bool said;    /* error holds the first failure, for the caller to say */
    bool lenient; /* report_read_into: strings lists keep their strings only */
    char *error;
    size_t error_size;
};

static void fail(struct loader *ld, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void fail(struct loader *ld, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (!ld->said)
        snprintf(ld->error, ld->error_size, "%s", msg);
    ld->said = ld->failed = true;
}

bool report_kind_is_address_space(const char *kind)
{
    const struct tl_kind_row *row = tl_kind_row_named(kind);
    return row && row->holds == TL_HOLDS_ADDRESS;
}

const char *report_kind_apart_words(const char *kind)
{
    const struct tl_kind_row *row = tl_kind_row_named(kind);
    return row ? row->apart : "";
}

const char *report_leak_kind(const struct tl_leak *l)
{
    if (l->imported)
        return "vmm_handle, imported";
    return l->kind ? l->kind : "device";
}

const char *report_basename(const char *path)
{
    if (!path)
        return NULL;
    const char *slash = strrchr(path, '/');
    return slash && slash[1] ? slash + 1 : path;
}

/* Field kinds a schema-1 report may hold, checked by get(). */
enum want { WANT_STRING, WANT_U64, WANT_INT, WANT_REAL, WANT_BOOL, WANT_ARRAY, WANT_OBJECT };

static const char *const want_text[] = {
    [WANT_STRING] = "a string",
    [WANT_U64] = "a non-negative integer",
    [WANT_INT] = "an integer",
    [WANT_REAL] = "a number",
    [WANT_BOOL] = "true or false",
    [WANT_ARRAY] = "an array",
    [WANT_OBJECT] = "an object",
};

/*
 * Returns obj[key] when present, non-null and of the wanted kind; NULL when
 * absent or null (fails when `required`); fails on any other type.
 */
static json_t *get(struct loader *ld, json_t *obj, const char *where, const char *key,
                   enum want want, bool required)
{
    json_t *v = json_object_get(obj, key);
    const char *dot = *where ? "." : "";
    if (!v || json_is_null(v)) {
        if (required)
            fail(ld, "%s%s%s: missing (%s expected)", where, dot, key, want_text[want]);
        return NULL;
    }
    bool ok = false;
    switch (want) {
    case WANT_STRING: ok = json_is_string(v); break;
    case WANT_U64: ok = json_is_integer(v) && json_integer_value(v) >= 0; break;
    case WANT_INT: ok = json_is_integer(v); break;
    case WANT_REAL: ok = json_is_number(v); break;
    case WANT_BOOL: ok = json_is_boolean(v); break;
    case WANT_ARRAY: ok = json_is_array(v); break;
    case WANT_OBJECT: ok = json_is_object(v); break;
    }
    if (!ok) {
        fail(ld, "%s%s%s: expected %s", where, dot, key, want_text[want]);
        return NULL;
    }
    return v;
}

/* One object of the report, field by field from its table: every field
 * seen is marked present (and null), typed, and stored; lists and objects
 * below are read the same way, each element then derived and checked. */
static void read_object(struct loader *ld, struct tl_report *r, json_t *obj, const char *where,
                        const struct tl_table *t, void *elem);

static void read_field(struct loader *ld, struct tl_report *r, json_t *obj, const char *where,
                       const struct tl_field *f, void *elem, struct tl_seen *seen, size_t i)
{
    static const enum want want_of[] = {
        [TL_FIELD_U64] = WANT_U64,       [TL_FIELD_INT] = WANT_INT,     [TL_FIELD_REAL] = WANT_REAL,
        [TL_FIELD_BOOL] = WANT_BOOL,     [TL_FIELD_STRING] = WANT_STRING, [TL_FIELD_STRINGS] = WANT_ARRAY,
        [TL_FIELD_OBJECT] = WANT_OBJECT, [TL_FIELD_LIST] = WANT_ARRAY, [TL_FIELD_HEX] = WANT_STRING,
    };
    const char *dot = *where ? "." : "";
    json_t *raw = json_object_get(obj, f->name);
    if (!raw) {
        if (f->flags & TL_FIELD_REQUIRED)
            fail(ld, "%s%s%s: missing (%s expected)", where, dot, f->name, want_text[want_of[f->type]]);
        return;
    }
    seen->present |= 1ull << i;
    if (json_is_null(raw)) {
        seen->null |= 1ull << i;
        if ((f->flags & TL_FIELD_REQUIRED) && !(f->flags & TL_FIELD_NULLABLE))
            fail(ld, "%s%s%s: missing (%s expected)", where, dot, f->name, want_text[want_of[f->type]]);
        return;
    }
    char *at = (char *)elem + f->offset;
    if (f->type == TL_FIELD_U64 && (f->flags & TL_FIELD_GAP) && json_is_integer(raw) && json_integer_value(raw) < 0) {
        *(uint64_t *)at = 0; /* a negative gap from before the invariants: 0 */
        return;
    }
    enum want want = f->type == TL_FIELD_INT && (f->flags & TL_FIELD_NONNEG) ? WANT_U64 : want_of[f->type];
    json_t *v = get(ld, obj, where, f->name, want, false);
    if (!v)
        return;
    char sub[WHERE_MAX + 64];
    snprintf(sub, sizeof sub, "%s%s%s", where, dot, f->name);
    switch (f->type) {
    case TL_FIELD_U64: *(uint64_t *)at = (uint64_t)json_integer_value(v); break;
    case TL_FIELD_INT: *(long long *)at = json_integer_value(v); break;
    case TL_FIELD_REAL: *(double *)at = json_number_value(v); break;
    case TL_FIELD_BOOL: *(bool *)at = json_is_true(v); break;
    case TL_FIELD_STRING: *(const char **)at = json_string_value(v); break;
    case TL_FIELD_HEX: {
        const char *text = json_string_value(v);
        size_t digits = strncmp(text, "0x", 2) == 0 ? strspn(text + 2, "0123456789abcdefABCDEF") : 0;
        errno = 0;
        unsigned long long n = digits ? strtoull(text + 2, NULL, 16) : 0;
        if (!digits || text[2 + digits] || digits > 16 || errno)
            fail(ld, "%s: '%.40s' is not a hex address (0x...)", sub, text);
        *(uint64_t *)at = n;
        break;
    }
    case TL_FIELD_OBJECT: read_object(ld, r, v, sub, f->table, at); break;
    case TL_FIELD_STRINGS:
    case TL_FIELD_LIST: {
        size_t n = json_array_size(v), kept = 0;
        size_t elem_size = f->type == TL_FIELD_LIST ? f->table->size : sizeof(const char *);
        char *items = n ? report_alloc(r, n * elem_size) : NULL;
        if (n && !items) {
            fail(ld, "%s: out of memory for %zu entries", sub, n);
            return;
        }
        *(void **)at = items;
        for (size_t k = 0; k < n && !ld->failed; k++) {
            char ewhere[WHERE_MAX + 96];
            snprintf(ewhere, sizeof ewhere, "%s[%zu]", sub, k);
            json_t *e = json_array_get(v, k);
            if (f->type == TL_FIELD_STRINGS) {
                if (json_is_string(e))
                    ((const char **)items)[kept++] = json_string_value(e);
                else if (!ld->lenient)
                    fail(ld, "%s: expected a string", ewhere);
            } else if (!json_is_object(e)) {
                fail(ld, "%s: expected an object", ewhere);
            } else {
                read_object(ld, r, e, ewhere, f->table, items + kept++ * elem_size);
            }
        }
        *(size_t *)((char *)elem + f->count_offset) = kept;
        break;
    }
    }
}

static void read_object(struct loader *ld, struct tl_report *r, json_t *obj, const char *where,
                        const struct tl_table *t, void *elem)
{
    struct tl_seen *seen = (struct tl_seen *)((char *)elem + t->seen_offset);
    for (size_t i = 0; i < t->nfields && !ld->failed; i++)
        read_field(ld, r, obj, where, &t->fields[i], elem, seen, i);
    char why[256];
    if (!ld->failed && t->derive && !t->derive(r, elem, why, sizeof why))
        fail(ld, "%s%s", where, why);
}

bool report_read_into(struct tl_report *r, json_t *obj, const struct tl_table *t, void *elem, char *error,
                      size_t size)
{
    return report_read_fields(r, obj, t, ~0ull, elem, error, size);
}

bool report_read_fields(struct tl_report *r, json_t *obj, const struct tl_table *t, uint64_t fields, void *elem,
                        char *error, size_t size)
{
    struct loader ld = {.lenient = true, .error = error, .error_size = size};
    if (size)
        error[0] = 0;
    char *before = malloc(t->size);
    if (!json_is_object(obj) || !before) {
        fail(&ld, json_is_object(obj) ? "out of memory" : "expected an object");
        free(before);
        return false;
    }
    /* Field by field: one the table refuses is left as `elem` had it, the
     * others are read. */
    bool all = true;
    struct tl_seen *seen = (struct tl_seen *)((char *)elem + t->seen_offset);
    for (size_t i = 0; i < t->nfields; i++) {
        if (!(fields >> i & 1) || !json_object_get(obj, t->fields[i].name))
            continue;
        memcpy(before, elem, t->size);
        read_field(&ld, r, obj, t->name, &t->fields[i], elem, seen, i);
        if (ld.failed) {
            memcpy(elem, before, t->size);
            ld.failed = false;
            all = false;
        }
    }
    free(before);
    char why[256];
    if (t->derive && !t->derive(r, elem, why, sizeof why)) {
        fail(&ld, "%s%s", t->name, why);
        all = false;
    }
    return all;
}

bool report_from_json(json_t *root, const char *path, report_demangler *demangle, struct tl_report *out,
                      char *error, size_t error_size)
{
    memset(out, 0, sizeof(*out));
    out->path = path;
    out->demangler = demangle;
    struct loader ld = {.error = error, .error_size = error_size};
    if (error_size)
        error[0] = 0;
    out->source = json_incref(root);
    if (!json_is_object(root)) {
        fail(&ld, "not a tensorleak report (top level is not a JSON object)");
        goto bad;
    }
    json_t *tool = json_object_get(root, "tool");
    if (!json_is_string(tool) || strcmp(json_string_value(tool), "tensorleak") != 0) {
        fail(&ld, "not a tensorleak report (no \"tool\": \"tensorleak\")");
        goto bad;
    }
    json_t *schema = json_object_get(root, "schema");
    if (!json_is_integer(schema)) {
        fail(&ld, "not a tensorleak report (\"schema\" is missing or not an integer)");
        goto bad;
    }
    if (json_integer_value(schema) != 1) {
        fail(&ld, "unsupported report schema %lld (this tensorleak reads schema 1)",
             json_integer_value(schema));
        goto bad;
    }

    read_object(&ld, out, root, "", &tl_report_table, out);
    if (!ld.failed)
        return true;
bad:
    report_free(out);
    return false;
}

json_t *report_tree(struct tl_report *r)
{
    if (!r->root)
        r->root = report_to_json(r);
    return r->root;
}

void report_free(struct tl_report *r)
{
    report_arena_free(r);
    json_decref(r->root);
    json_decref(r->source);
    const char *path = r->path;
    memset(r, 0, sizeof(*r));
    r->path = path;
}
