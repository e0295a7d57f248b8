/*
 * report_read.c: jansson tree -> struct tl_report (report.h), for the CLI
 * (a saved file, tools/report_load.c) and the library (its own report, to
 * print it with the same text renderer).
 *
 * Every field is checked once here, with an error that names the field by
 * its JSON path ("leaks[3].stack[0].line"), so a truncated, foreign or
 * hand-edited file ends in one clear line and exit 2, never in a crash
 * further on. Optional arrays may be missing; present ones must be well-typed.
 */
#include "report.h"

#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WHERE_MAX 96

struct loader {
    bool failed;
    bool demangle;
    char *error; /* the first failure, for the caller to say */
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
    if (!ld->failed)
        snprintf(ld->error, ld->error_size, "%s", msg);
    ld->failed = true;
}

bool report_kind_is_address_space(const char *kind)
{
    return kind && (strcmp(kind, "vmm_reservation") == 0 || strcmp(kind, "vmm_mapping") == 0 ||
                    strcmp(kind, "ipc_mapping") == 0);
}

const char *report_kind_apart_words(const char *kind)
{
    if (!report_kind_is_address_space(kind))
        return "";
    if (strcmp(kind, "vmm_reservation") == 0)
        return " of address space (not memory)";
    if (strcmp(kind, "ipc_mapping") == 0)
        return " of another process's memory (CUDA IPC, counted there)";
    return " mapped range (memory counted at its handle)";
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

static const char *get_str(struct loader *ld, json_t *obj, const char *where, const char *key)
{
    json_t *v = get(ld, obj, where, key, WANT_STRING, false);
    return v ? json_string_value(v) : NULL;
}

static uint64_t get_u64(struct loader *ld, json_t *obj, const char *where, const char *key)
{
    json_t *v = get(ld, obj, where, key, WANT_U64, false);
    return v ? (uint64_t)json_integer_value(v) : 0;
}

/*
 * A byte figure that may be unknown: null means "tensorleak could
 * not know" (largest free block, fragmentation of a pool without a layout);
 * absent (reports before null was written) means 0, as before.
 */
static bool is_unknown(json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    return v && json_is_null(v);
}

/*
 * gap_bytes: reports written before tensorleak checked its invariants may
 * hold a negative gap (a driver pool read as 0 B at exit): read as 0, never
 * refused, never shown as a wrapped 16777216.0 TiB.
 */
static uint64_t get_gap_or_u64(struct loader *ld, json_t *obj, const char *where, const char *key)
{
    json_t *v = json_object_get(obj, key);
    if (strcmp(key, "gap_bytes") == 0 && v && json_is_integer(v) && json_integer_value(v) < 0)
        return 0;
    return get_u64(ld, obj, where, key);
}

static long long get_int(struct loader *ld, json_t *obj, const char *where, const char *key)
{
    json_t *v = get(ld, obj, where, key, WANT_INT, false);
    return v ? json_integer_value(v) : 0;
}

static double get_real(struct loader *ld, json_t *obj, const char *where, const char *key)
{
    json_t *v = get(ld, obj, where, key, WANT_REAL, false);
    return v ? json_number_value(v) : 0.0;
}

static bool get_bool(struct loader *ld, json_t *obj, const char *where, const char *key)
{
    json_t *v = get(ld, obj, where, key, WANT_BOOL, false);
    return v ? json_is_true(v) : false;
}

/*
 * Allocates the C array for the optional JSON array obj[key]; returns its
 * element count (0 when absent) and the array through *items.
 */
static size_t get_array(struct loader *ld, json_t *obj, const char *key, size_t elem_size,
                        json_t **array, void **items)
{
    *items = NULL;
    *array = get(ld, obj, "", key, WANT_ARRAY, false);
    if (!*array || json_array_size(*array) == 0)
        return 0;
    size_t n = json_array_size(*array);
    *items = calloc(n, elem_size);
    if (!*items) {
        fail(ld, "%s: out of memory for %zu entries", key, n);
        return 0;
    }
    return n;
}

static json_t *element_object(struct loader *ld, json_t *array, size_t i, const char *where)
{
    json_t *e = json_array_get(array, i);
    if (!json_is_object(e)) {
        fail(ld, "%s: expected an object", where);
        return NULL;
    }
    return e;
}

/* A C++ name in a report the library wrote before it
 * demangled (or without a C++ runtime loaded) is shown demangled, by
 * libstdc++'s __cxa_demangle when the machine has it.  The demangled string
 * replaces "function" in the tree, which owns it as it owns every string. */
static const char *demangled(struct loader *ld, json_t *frame, const char *name)
{
    if (!ld->demangle || !name || name[0] != '_' || name[1] != 'Z')
        return name;
    typedef char *(*demangle_fn)(const char *, char *, size_t *, int *);
    static demangle_fn fn;
    static bool looked;
    if (!looked) {
        looked = true;
        void *h = dlopen("libstdc++.so.6", RTLD_LAZY | RTLD_LOCAL);
        fn = h ? (demangle_fn)dlsym(h, "__cxa_demangle") : NULL;
    }
    int status = -1;
    char *d = fn ? fn(name, NULL, NULL, &status) : NULL;
    if (status != 0 || !d) {
        free(d);
        return name;
    }
    if (!json_object_get(frame, "symbol"))
        json_object_set(frame, "symbol", json_object_get(frame, "function"));
    json_object_set_new(frame, "function", json_string(d));
    free(d);
    json_t *v = json_object_get(frame, "function");
    return v ? json_string_value(v) : name;
}

/* The bytes of a site's "shared" entries that a merge marked counted in
 * another input's report. */
static uint64_t counted_elsewhere(struct loader *ld, json_t *site, const char *where)
{
    json_t *shared = get(ld, site, where, "shared", WANT_ARRAY, false), *e;
    size_t i;
    uint64_t sum = 0;
    json_array_foreach(shared, i, e) {
        json_t *b = json_object_get(e, "bytes");
        if (json_is_true(json_object_get(e, "counted_elsewhere")) && json_is_integer(b) && json_integer_value(b) > 0)
            sum += (uint64_t)json_integer_value(b);
    }
    return sum;
}

static void read_stack(struct loader *ld, json_t *obj, const char *where, struct tl_stack *out)
{
    char fwhere[WHERE_MAX + 32];
    json_t *frames = get(ld, obj, where, "stack", WANT_ARRAY, false);
    out->frames = NULL;
    out->count = 0;
    if (!frames || json_array_size(frames) == 0)
        return;
    size_t n = json_array_size(frames);
    out->frames = calloc(n, sizeof(*out->frames));
    if (!out->frames) {
        fail(ld, "%s.stack: out of memory", where);
        return;
    }
    out->count = n;
    for (size_t i = 0; i < n && !ld->failed; i++) {
        snprintf(fwhere, sizeof(fwhere), "%s.stack[%zu]", where, i);
        json_t *f = element_object(ld, frames, i, fwhere);
        if (!f)
            return;
        struct tl_frame *fr = &out->frames[i];
        fr->address = get_str(ld, f, fwhere, "address");
        fr->module = get_str(ld, f, fwhere, "module");
        fr->offset = get_str(ld, f, fwhere, "offset");
        fr->function = demangled(ld, f, get_str(ld, f, fwhere, "function"));
        json_t *py = json_object_get(f, "python");
        fr->python = py && json_is_true(py);
        fr->file = get_str(ld, f, fwhere, "file");
        fr->line = get_int(ld, f, fwhere, "line");
        if (fr->line < 0)
            fr->line = 0;
    }
}

static void free_stack(struct tl_stack *s)
{
    free(s->frames);
    s->frames = NULL;
    s->count = 0;
}

/* A site's optional "allocations": {address: hex string or null, bytes,
 * device: int or null} each; more of them than its count is an error. */
static void read_allocations(struct loader *ld, json_t *site, const char *where, struct tl_leak *l)
{
    char awhere[WHERE_MAX + 48]; /* where + ".allocations[" + a size_t + "]" */
    json_t *list = get(ld, site, where, "allocations", WANT_ARRAY, false);
    l->has_allocations = list != NULL;
    if (!list || json_array_size(list) == 0)
        return;
    size_t n = json_array_size(list);
    if (n > l->count) {
        fail(ld, "%s.allocations: %zu listed, more than its count (%" PRIu64 ")", where, n, l->count);
        return;
    }
    l->allocations = calloc(n, sizeof(*l->allocations));
    if (!l->allocations) {
        fail(ld, "%s.allocations: out of memory", where);
        return;
    }
    l->allocation_count = n;
    for (size_t i = 0; i < n && !ld->failed; i++) {
        snprintf(awhere, sizeof(awhere), "%s.allocations[%zu]", where, i);
        json_t *e = element_object(ld, list, i, awhere);
        if (!e)
            return;
        struct tl_allocation *a = &l->allocations[i];
        const char *addr = get_str(ld, e, awhere, "address");
        if (!json_object_get(e, "bytes"))
            get(ld, e, awhere, "bytes", WANT_U64, true);   /* missing: the error */
        a->bytes = get_u64(ld, e, awhere, "bytes");        /* null: unknown, 0 */
        json_t *dev = get(ld, e, awhere, "device", WANT_U64, false);
        a->device = dev ? (long long)json_integer_value(dev) : -1;
        if (addr) {
            size_t digits = strncmp(addr, "0x", 2) == 0 ? strspn(addr + 2, "0123456789abcdefABCDEF") : 0;
            errno = 0;
            unsigned long long v = digits ? strtoull(addr + 2, NULL, 16) : 0;
            if (!digits || addr[2 + digits] || digits > 16 || errno) {
                fail(ld, "%s.address: '%.40s' is not a hex address (0x...)", awhere, addr);
                return;
            }
            a->has_address = true;
            a->address = v;
        }
    }
}

static void read_leaks(struct loader *ld, json_t *root, const char *key,
                       struct tl_leak **out, size_t *count)
{
    json_t *array;
    char where[WHERE_MAX];
    *count = get_array(ld, root, key, sizeof(**out), &array, (void **)out);
    for (size_t i = 0; i < *count && !ld->failed; i++) {
        snprintf(where, sizeof(where), "%s[%zu]", key, i);
        json_t *e = element_object(ld, array, i, where);
        if (!e)
            return;
        struct tl_leak *l = &(*out)[i];
        l->kind = get_str(ld, e, where, "kind");
        l->bytes = get_u64(ld, e, where, "bytes");
        l->bytes_unknown = is_unknown(e, "bytes");
        l->count = get_u64(ld, e, where, "count");
        l->unknown_size_allocations = get_u64(ld, e, where, "unknown_size_allocations");
        l->suppressed = get_bool(ld, e, where, "suppressed");
        l->suppression = get_str(ld, e, where, "suppression");
        l->imported = get_bool(ld, e, where, "imported");
        l->counted_elsewhere = counted_elsewhere(ld, e, where);
        read_stack(ld, e, where, &l->stack);
        read_allocations(ld, e, where, l);
        l->has_rank = get(ld, e, where, "rank", WANT_INT, false) != NULL;
        l->rank = get_int(ld, e, where, "rank");
        l->owner = get_str(ld, e, where, "owner");
        l->owner_class = get_str(ld, e, where, "owner_class");
    }
}

static void read_owners(struct loader *ld, json_t *root, struct tl_report *r)
{
    json_t *array;
    char where[WHERE_MAX];
    r->owner_count = get_array(ld, root, "owners", sizeof(*r->owners), &array,
                               (void **)&r->owners);
    for (size_t i = 0; i < r->owner_count && !ld->failed; i++) {
        snprintf(where, sizeof(where), "owners[%zu]", i);
        json_t *e = element_object(ld, array, i, where);
        if (!e)
            return;
        struct tl_owner *o = &r->owners[i];
        get(ld, e, where, "name", WANT_STRING, true);
        o->name = get_str(ld, e, where, "name");
        o->cls = get_str(ld, e, where, "class");
        o->live_bytes = get_u64(ld, e, where, "live_bytes");
        o->live_allocations = get_u64(ld, e, where, "live_allocations");
        o->peak_bytes = get_u64(ld, e, where, "peak_bytes");
    }
}

static void read_owner_devices(struct loader *ld, json_t *root, struct tl_report *r)
{
    json_t *array;
    char where[WHERE_MAX];
    r->owner_device_count = get_array(ld, root, "owners_by_device", sizeof(*r->owner_devices), &array,
                                      (void **)&r->owner_devices);
    for (size_t i = 0; i < r->owner_device_count && !ld->failed; i++) {
        snprintf(where, sizeof(where), "owners_by_device[%zu]", i);
        json_t *e = element_object(ld, array, i, where);
        if (!e)
            return;
        struct tl_owner_device *o = &r->owner_devices[i];
        get(ld, e, where, "name", WANT_STRING, true);
        o->name = get_str(ld, e, where, "name");
        o->cls = get_str(ld, e, where, "class");
        /* null: host memory, no device's */
        o->device = json_is_null(json_object_get(e, "device")) ? -1 : (int)get_u64(ld, e, where, "device");
        o->live_bytes = get_u64(ld, e, where, "live_bytes");
        o->live_allocations = get_u64(ld, e, where, "live_allocations");
    }
}

static void read_growth(struct loader *ld, json_t *root, struct tl_report *r)
{
    json_t *array;
    char where[WHERE_MAX];
    r->growth_count = get_array(ld, root, "growth", sizeof(*r->growth), &array,
                                (void **)&r->growth);
    for (size_t i = 0; i < r->growth_count && !ld->failed; i++) {
        snprintf(where, sizeof(where), "growth[%zu]", i);
        json_t *e = element_object(ld, array, i, where);
        if (!e)
            return;
        struct tl_growth *g = &r->growth[i];
        g->kind = get_str(ld, e, where, "kind");
        g->bytes_per_mark = get_u64(ld, e, where, "bytes_per_mark");
        g->marks = get_u64(ld, e, where, "marks");
        g->count_per_mark = get_u64(ld, e, where, "count_per_mark");
        g->suppressed = get_bool(ld, e, where, "suppressed");
        read_stack(ld, e, where, &g->stack);
        g->has_rank = get(ld, e, where, "rank", WANT_INT, false) != NULL;
        g->rank = get_int(ld, e, where, "rank");
        g->scope = get_str(ld, e, where, "scope");
        g->pool = get_str(ld, e, where, "pool");
        g->owner = get_str(ld, e, where, "owner");
        g->owner_class = get_str(ld, e, where, "owner_class");
    }
}

static void read_blocks(struct loader *ld, json_t *seg, const char *where, struct tl_segment *s)
{
    char bwhere[WHERE_MAX + 96];
    json_t *blocks = get(ld, seg, where, "blocks", WANT_ARRAY, false);
    if (!blocks || json_array_size(blocks) == 0)
        return;
    size_t n = json_array_size(blocks);
    s->blocks = calloc(n, sizeof(*s->blocks));
    if (!s->blocks) {
        fail(ld, "%s.blocks: out of memory", where);
        return;
    }
    s->block_count = n;
    uint64_t end = 0;
    for (size_t i = 0; i < n && !ld->failed; i++) {
        snprintf(bwhere, sizeof(bwhere), "%s.blocks[%zu]", where, i);
        json_t *b = element_object(ld, blocks, i, bwhere);
        if (!b)
            return;
        struct tl_block *bl = &s->blocks[i];
        get(ld, b, bwhere, "offset", WANT_U64, true);
        get(ld, b, bwhere, "bytes", WANT_U64, true);
        bl->offset = get_u64(ld, b, bwhere, "offset");
        bl->bytes = get_u64(ld, b, bwhere, "bytes");
        if (ld->failed)
            return;
        /* The memory map draws holes between blocks: they must be in order. */
        if (bl->offset < end)
            fail(ld, "%s: offset %" PRIu64 " overlaps or precedes the previous block", bwhere,
                 bl->offset);
        else if (bl->bytes > s->bytes || bl->offset > s->bytes - bl->bytes)
            fail(ld, "%s: block ends past the segment (%" PRIu64 " bytes)", bwhere, s->bytes);
        end = bl->offset + bl->bytes;
    }
}

/* The optional pools[].layout array (struct tl_segment). */
static void read_layout(struct loader *ld, json_t *pool, const char *where, struct tl_pool *p)
{
    char swhere[WHERE_MAX + 32];
    json_t *layout = get(ld, pool, where, "layout", WANT_ARRAY, false);
    p->has_layout = layout != NULL;
    p->layout_truncated = get_bool(ld, pool, where, "layout_truncated");
    if (!layout || json_array_size(layout) == 0)
        return;
    size_t n = json_array_size(layout);
    p->layout = calloc(n, sizeof(*p->layout));
    if (!p->layout) {
        fail(ld, "%s.layout: out of memory", where);
        return;
    }
    p->layout_count = n;
    for (size_t i = 0; i < n && !ld->failed; i++) {
        snprintf(swhere, sizeof(swhere), "%s.layout[%zu]", where, i);
        json_t *e = element_object(ld, layout, i, swhere);
        if (!e)
            return;
        struct tl_segment *s = &p->layout[i];
        s->base = get_str(ld, e, swhere, "base");
        get(ld, e, swhere, "bytes", WANT_U64, true);
        s->bytes = get_u64(ld, e, swhere, "bytes");
        if (!ld->failed)
            read_blocks(ld, e, swhere, s);
    }
}

static void free_pools(struct tl_report *r)
{
    for (size_t i = 0; i < r->pool_count; i++) {
        for (size_t k = 0; k < r->pools[i].layout_count; k++)
            free(r->pools[i].layout[k].blocks);
        free(r->pools[i].layout);
    }
    free(r->pools);
}

static void read_marks(struct loader *ld, json_t *root, struct tl_report *r)
{
    json_t *array;
    char where[WHERE_MAX];
    r->mark_count = get_array(ld, root, "marks", sizeof(*r->marks), &array, (void **)&r->marks);
    for (size_t i = 0; i < r->mark_count && !ld->failed; i++) {
        snprintf(where, sizeof(where), "marks[%zu]", i);
        json_t *e = element_object(ld, array, i, where);
        if (!e)
            return;
        struct tl_mark *m = &r->marks[i];
        m->seq = get_int(ld, e, where, "seq");
        m->label = get_str(ld, e, where, "label");
        m->live_bytes = get_u64(ld, e, where, "live_bytes");
        m->reserved_bytes = get_u64(ld, e, where, "reserved_bytes");
        m->has_device_free = get(ld, e, where, "device_free", WANT_U64, false) != NULL;
        m->device_free = get_u64(ld, e, where, "device_free");
        m->time = get_real(ld, e, where, "time");
    }
}

static void read_pools(struct loader *ld, json_t *root, struct tl_report *r)
{
    json_t *array;
    char where[WHERE_MAX];
    r->pool_count = get_array(ld, root, "pools", sizeof(*r->pools), &array, (void **)&r->pools);
    for (size_t i = 0; i < r->pool_count && !ld->failed; i++) {
        snprintf(where, sizeof(where), "pools[%zu]", i);
        json_t *e = element_object(ld, array, i, where);
        if (!e)
            return;
        struct tl_pool *p = &r->pools[i];
        p->name = get_str(ld, e, where, "name");
        p->kind = get_str(ld, e, where, "kind");
        p->device = get_int(ld, e, where, "device");
        p->reserved_bytes = get_u64(ld, e, where, "reserved_bytes");
        p->allocated_bytes = get_u64(ld, e, where, "allocated_bytes");
        p->free_bytes = get_u64(ld, e, where, "free_bytes");
        p->largest_free_block = get_u64(ld, e, where, "largest_free_block");
        p->fragmentation = get_real(ld, e, where, "fragmentation");
        p->layout_unknown = is_unknown(e, "largest_free_block") || is_unknown(e, "fragmentation");
        p->reading = get_str(ld, e, where, "reading");
        p->reading_time = get_str(ld, e, where, "reading_time");
        p->has_utilization = get(ld, e, where, "utilization", WANT_REAL, false) != NULL;
        p->utilization = get_real(ld, e, where, "utilization");
        p->segments = get_u64(ld, e, where, "segments");
        read_layout(ld, e, where, p);
        p->has_rank = get(ld, e, where, "rank", WANT_INT, false) != NULL;
        p->rank = get_int(ld, e, where, "rank");
        json_t *fw = get(ld, e, where, "framework", WANT_OBJECT, false);
        if (fw) {
            char fwhere[WHERE_MAX + 16];
            snprintf(fwhere, sizeof(fwhere), "%s.framework", where);
            p->has_framework = true;
            p->framework_name = get_str(ld, fw, fwhere, "name");
            p->framework_version = get_str(ld, fw, fwhere, "version");
            p->framework_mode = get_str(ld, fw, fwhere, "mode");
        }
        p->has_read_at = get(ld, e, where, "read_at", WANT_REAL, false) != NULL;
        p->read_at = get_real(ld, e, where, "read_at");
        p->state = get_str(ld, e, where, "state");
        p->bytes_unknown = is_unknown(e, "reserved_bytes");
        p->free_blocks = get_u64(ld, e, where, "free_blocks");
        p->allocation_nodes = get_u64(ld, e, where, "allocation_nodes");
        p->allocation_node_bytes = get_u64(ld, e, where, "allocation_node_bytes");
    }
}

static void read_devices(struct loader *ld, json_t *root, struct tl_report *r)
{
    json_t *array;
    char where[WHERE_MAX];
    r->device_count = get_array(ld, root, "devices", sizeof(*r->devices), &array,
                                (void **)&r->devices);
    for (size_t i = 0; i < r->device_count && !ld->failed; i++) {
        snprintf(where, sizeof(where), "devices[%zu]", i);
        json_t *e = element_object(ld, array, i, where);
        if (!e)
            return;
        struct tl_device *d = &r->devices[i];
        d->device = get_int(ld, e, where, "device");
        d->has_free = get(ld, e, where, "free", WANT_U64, false) != NULL;
        d->free = get_u64(ld, e, where, "free");
        d->total = get_u64(ld, e, where, "total");
        d->reserved_bytes = get_u64(ld, e, where, "reserved_bytes");
        d->allocated_bytes = get_u64(ld, e, where, "allocated_bytes");
        d->gap_bytes = get_gap_or_u64(ld, e, where, "gap_bytes");
        d->layout_unknown = is_unknown(e, "largest_free_block") || is_unknown(e, "fragmentation");
        d->has_largest_free_block =
            get(ld, e, where, "largest_free_block", WANT_U64, false) != NULL;
        d->largest_free_block = get_u64(ld, e, where, "largest_free_block");
        d->has_fragmentation = get(ld, e, where, "fragmentation", WANT_REAL, false) != NULL;
        d->fragmentation = get_real(ld, e, where, "fragmentation");
        d->has_rank = get(ld, e, where, "rank", WANT_INT, false) != NULL;
        d->rank = get_int(ld, e, where, "rank");
    }
}

static void read_invalid_frees(struct loader *ld, json_t *root, struct tl_report *r)
{
    json_t *array;
    char where[WHERE_MAX];
    r->invalid_free_count = get_array(ld, root, "invalid_frees", sizeof(*r->invalid_frees),
                                      &array, (void **)&r->invalid_frees);
    for (size_t i = 0; i < r->invalid_free_count && !ld->failed; i++) {
        snprintf(where, sizeof(where), "invalid_frees[%zu]", i);
        json_t *e = element_object(ld, array, i, where);
        if (!e)
            return;
        struct tl_invalid_free *f = &r->invalid_frees[i];
        f->address = get_str(ld, e, where, "address");
        f->kind = get_str(ld, e, where, "kind");
        f->suppressed = get_bool(ld, e, where, "suppressed");
        read_stack(ld, e, where, &f->stack);
        f->has_rank = get(ld, e, where, "rank", WANT_INT, false) != NULL;
        f->rank = get_int(ld, e, where, "rank");
    }
}

static void read_ranks(struct loader *ld, json_t *root, struct tl_report *r)
{
    json_t *array;
    char where[WHERE_MAX];
    r->rank_count = get_array(ld, root, "ranks", sizeof(*r->ranks), &array, (void **)&r->ranks);
    for (size_t i = 0; i < r->rank_count && !ld->failed; i++) {
        snprintf(where, sizeof(where), "ranks[%zu]", i);
        json_t *e = element_object(ld, array, i, where);
        if (!e)
            return;
        struct tl_rank *k = &r->ranks[i];
        k->rank = get_int(ld, e, where, "rank");
        k->pid = get_int(ld, e, where, "pid");
        k->host = get_str(ld, e, where, "host");
        k->leaked_bytes = get_u64(ld, e, where, "leaked_bytes");
        k->leaked_allocations = get_u64(ld, e, where, "leaked_allocations");
        k->live_bytes = get_u64(ld, e, where, "live_bytes");
        k->reserved_bytes = get_u64(ld, e, where, "reserved_bytes");
    }
}

/* The summary, field by field from TL_SUMMARY_FIELDS: absent or null
 * reads as 0 (null also sets the field's null bit, and for largest free
 * block and fragmentation layout_unknown). */
static void read_summary(struct loader *ld, json_t *root, struct tl_report *r)
{
    json_t *s = get(ld, root, "", "summary", WANT_OBJECT, true);
    if (!s)
        return;
    struct tl_summary *sum = &r->summary;
    for (size_t i = 0; i < TL_SUMMARY_NFIELDS && !ld->failed; i++) {
        const struct tl_summary_field_info *f = &tl_summary_fields[i];
        char *at = (char *)sum + f->offset;
        json_t *v = json_object_get(s, f->name);
        if (!v)
            continue;
        sum->present |= 1ull << i;
        if (json_is_null(v)) {
            sum->null |= 1ull << i;
            continue;
        }
        if (f->type == TL_SUMMARY_TYPE_REAL)
            *(double *)at = get_real(ld, s, "summary", f->name);
        else if ((f->flags & TL_SUMMARY_FLAG_GAP) && json_is_integer(v) && json_integer_value(v) < 0)
            *(uint64_t *)at = 0; /* a negative gap from before the invariants: 0 */
        else
            *(uint64_t *)at = get_u64(ld, s, "summary", f->name);
    }
    sum->layout_unknown = is_unknown(s, "largest_free_block") || is_unknown(s, "fragmentation");
}

bool report_from_json(json_t *root, const char *path, unsigned flags, struct tl_report *out, char *error,
                      size_t error_size)
{
    memset(out, 0, sizeof(*out));
    out->path = path;
    struct loader ld = {.demangle = flags & REPORT_DEMANGLE, .error = error, .error_size = error_size};
    if (error_size)
        error[0] = 0;
    out->root = json_incref(root);
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

    out->version = get_str(&ld, root, "", "version");
    out->reason = get_str(&ld, root, "", "reason");
    out->label = get_str(&ld, root, "", "label");
    out->host = get_str(&ld, root, "", "host");
    out->time = get_str(&ld, root, "", "time");
    out->has_pid = get(&ld, root, "", "pid", WANT_INT, false) != NULL;
    out->pid = get_int(&ld, root, "", "pid");
    out->has_rank = get(&ld, root, "", "rank", WANT_INT, false) != NULL;
    out->rank = get_int(&ld, root, "", "rank");
    read_summary(&ld, root, out);
    out->has_leaks_array = json_object_get(root, "leaks") != NULL;
    if (!ld.failed)
        read_leaks(&ld, root, "leaks", &out->leaks, &out->leak_count);
    out->has_sites = json_is_array(json_object_get(root, "sites"));
    if (!ld.failed)
        read_leaks(&ld, root, "sites", &out->sites, &out->site_count);
    if (!ld.failed)
        read_leaks(&ld, root, "held", &out->held, &out->held_count);
    if (!ld.failed)
        read_owners(&ld, root, out);
    if (!ld.failed)
        read_owner_devices(&ld, root, out);
    if (!ld.failed)
        read_growth(&ld, root, out);
    if (!ld.failed)
        read_marks(&ld, root, out);
    if (!ld.failed)
        read_pools(&ld, root, out);
    if (!ld.failed)
        read_devices(&ld, root, out);
    if (!ld.failed)
        read_invalid_frees(&ld, root, out);
    if (!ld.failed)
        read_ranks(&ld, root, out);
    json_t *oom = ld.failed ? NULL : get(&ld, root, "", "oom", WANT_OBJECT, false);
    if (oom) {
        out->has_oom = true;
        out->oom.bytes = get_u64(&ld, oom, "oom", "bytes");
        out->oom.kind = get_str(&ld, oom, "oom", "kind");
        out->oom.device = get_int(&ld, oom, "oom", "device");
        read_stack(&ld, oom, "oom", &out->oom.stack);
    }
    if (!ld.failed)
        return true;
bad:
    report_free(out);
    return false;
}

void report_free(struct tl_report *r)
{
    for (size_t i = 0; i < r->leak_count; i++) {
        free_stack(&r->leaks[i].stack);
        free(r->leaks[i].allocations);
    }
    free(r->leaks);
    for (size_t i = 0; i < r->site_count; i++) {
        free_stack(&r->sites[i].stack);
        free(r->sites[i].allocations);
    }
    free(r->sites);
    for (size_t i = 0; i < r->held_count; i++) {
        free_stack(&r->held[i].stack);
        free(r->held[i].allocations);
    }
    free(r->held);
    free(r->owners);
    free(r->owner_devices);
    free(r->marks);
    for (size_t i = 0; i < r->growth_count; i++)
        free_stack(&r->growth[i].stack);
    free(r->growth);
    free_pools(r);
    free(r->devices);
    for (size_t i = 0; i < r->invalid_free_count; i++)
        free_stack(&r->invalid_frees[i].stack);
    free(r->invalid_frees);
    free_stack(&r->oom.stack);
    free(r->ranks);
    if (r->root)
        json_decref(r->root);
    const char *path = r->path;
    memset(r, 0, sizeof(*r));
    r->path = path;
}
