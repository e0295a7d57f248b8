/*
 * format_sarif.c: reports as one SARIF 2.1.0 log, for GitHub and GitLab code
 * scanning. Each leak site, growing site, invalid free and out-of-memory
 * event of every report given becomes one result:
 *
 *   tensorleak/leak          error    leaks[] (live sites, for a snapshot)
 *   tensorleak/growth        warning  growth[]
 *   tensorleak/invalid-free  error    invalid_frees[]
 *   tensorleak/oom           warning  oom
 *
 * The location is the user's frame (tl_stack_user_frame, stack_view.h: the
 * program's Python line, else the top frame with a file outside the C
 * library, the CUDA driver and runtime, tensorleak itself and its client
 * header). Scanners want paths relative to the repository: leading "./"
 * and "../" are dropped (meson compiles from a build directory one level
 * below the sources, so DWARF says "../src/x.c"), and absolute paths under
 * the source root (--source-root DIR, default the current directory) are
 * made relative to it; other absolute paths stay absolute file URIs. The whole stack goes in the result's "stacks".
 * Suppressed entries are kept, with an external suppression, as SARIF asks.
 */
#include "cli.h"
#include "model.h"
#include "report_fields.h"
#include "sizes.h"
#include "stack_view.h"

#include "tl_version.h"

#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum rule { RULE_LEAK, RULE_GROWTH, RULE_INVALID_FREE, RULE_OOM };

static const struct {
    const char *id, *name, *level, *text;
} rules[] = {
    [RULE_LEAK] = { "tensorleak/leak", "DeviceMemoryLeak", "error",
                    "GPU memory allocated here was never freed." },
    [RULE_GROWTH] = { "tensorleak/growth", "DeviceMemoryGrowth", "warning",
                      "Live GPU memory allocated here grows with every mark (request)." },
    [RULE_INVALID_FREE] = { "tensorleak/invalid-free", "InvalidFree", "error",
                            "A free of an address that is not a live allocation." },
    [RULE_OOM] = { "tensorleak/oom", "OutOfMemory", "warning",
                   "A GPU allocation failed for lack of memory." },
};

const struct tl_frame *sarif_user_frame(const struct tl_stack *stack)
{
    struct tl_view_frame *view = calloc(stack->count ? stack->count : 1, sizeof *view);
    if (!view)
        return NULL;
    for (size_t i = 0; i < stack->count; i++)
        view[i] = (struct tl_view_frame){stack->frames[i].python, stack->frames[i].module, stack->frames[i].file};
    size_t i = tl_stack_user_frame(view, stack->count);
    free(view);
    return i < stack->count ? &stack->frames[i] : NULL;
}

static char source_root[PATH_MAX];

void sarif_set_source_root(const char *dir)
{
    snprintf(source_root, sizeof(source_root), "%s", dir);
    size_t n = strlen(source_root);
    while (n > 1 && source_root[n - 1] == '/')
        source_root[--n] = '\0';
}

/* The file as a URI reference relative to the repository (see the top). */
static json_t *artifact_location(const char *file)
{
    if (!source_root[0] && !getcwd(source_root, sizeof(source_root) - 1))
        source_root[0] = '\0';
    const char *cwd = source_root;
    json_t *loc = json_object();
    if (file[0] == '/') {
        size_t n = strlen(cwd);
        if (n > 1 && strncmp(file, cwd, n) == 0 && file[n] == '/') {
            json_object_set_new(loc, "uri", json_string(file + n + 1));
            json_object_set_new(loc, "uriBaseId", json_string("%SRCROOT%"));
        } else {
            char *uri = malloc(strlen(file) + 8);
            if (uri) {
                sprintf(uri, "file://%s", file);
                json_object_set_new(loc, "uri", json_string(uri));
                free(uri);
            }
        }
        return loc;
    }
    while (strncmp(file, "./", 2) == 0 || strncmp(file, "../", 3) == 0)
        file += file[1] == '/' ? 2 : 3;
    json_object_set_new(loc, "uri", json_string(file));
    json_object_set_new(loc, "uriBaseId", json_string("%SRCROOT%"));
    return loc;
}

static json_t *location_of(const struct tl_frame *f)
{
    json_t *loc = json_object();
    if (f->file && *f->file) {
        json_t *phys = json_object();
        json_object_set_new(phys, "artifactLocation", artifact_location(f->file));
        if (f->line > 0)
            json_object_set_new(phys, "region", json_pack("{sI}", "startLine", (json_int_t)f->line));
        json_object_set_new(loc, "physicalLocation", phys);
    }
    if (f->function && *f->function)
        json_object_set_new(loc, "logicalLocations",
                            json_pack("[{ss,ss}]", "fullyQualifiedName", f->function, "kind",
                                      "function"));
    return loc;
}

static json_t *stacks_of(const struct tl_stack *stack)
{
    json_t *frames = json_array();
    for (size_t i = 0; i < stack->count; i++) {
        const struct tl_frame *f = &stack->frames[i];
        json_t *frame = json_object();
        json_object_set_new(frame, "location", location_of(f));
        if (f->module && *f->module)
            json_object_set_new(frame, "module", json_string(report_basename(f->module)));
        if (f->address && *f->address)
            json_object_set_new(frame, "address", json_string(f->address));
        json_array_append_new(frames, frame);
    }
    return json_pack("[{s{ss}so}]", "message", "text", "allocation stack", "frames", frames);
}

/* FNV-1a over the kind and the stack's functions: stable across runs and ASLR. */
static json_t *fingerprint(enum rule rule, const char *kind, const struct tl_stack *stack)
{
    uint64_t h = 1469598103934665603ull;
    const char *parts[2] = { rules[rule].id, kind ? kind : "" };
    for (size_t p = 0; p < 2; p++) {
        for (const char *c = parts[p]; *c; c++)
            h = (h ^ (unsigned char)*c) * 1099511628211ull;
        h = (h ^ '|') * 1099511628211ull;
    }
    for (size_t i = 0; i < stack->count; i++) {
        const struct tl_frame *f = &stack->frames[i];
        const char *name = f->function ? f->function : f->offset ? f->offset : "?";
        for (const char *c = name; *c; c++)
            h = (h ^ (unsigned char)*c) * 1099511628211ull;
        h = (h ^ ';') * 1099511628211ull;
    }
    char hex[20];
    snprintf(hex, sizeof(hex), "%016" PRIx64, h);
    return json_pack("{ss}", "tensorleakStack/v1", hex);
}

static const char *where_text(const struct tl_stack *stack)
{
    const struct tl_frame *f = sarif_user_frame(stack);
    if (!f && stack->count > 0)
        f = &stack->frames[0];
    return f && f->function && *f->function ? f->function : "an unknown function";
}

/*
 * The run's "results", written one result at a time as each is made: a
 * report's sites become results several times their size, and a tree of all
 * of them cost 3.5 GB on a 200 MB report.  The layout is jansson's
 * (JSON_INDENT(2)) at the results' depth in the log, so the document reads
 * as if the log had been dumped whole.
 */
struct result_stream {
    FILE *out;
    size_t count;
    bool failed;
};

/* "runs": [ { "results": [ RESULT: four levels deep. */
#define RESULT_INDENT "        "

/* Writes `text` with RESULT_INDENT before each of its lines. */
static void put_indented(FILE *out, const char *text)
{
    fputs(RESULT_INDENT, out);
    for (const char *nl; (nl = strchr(text, '\n')); text = nl + 1) {
        fwrite(text, 1, (size_t)(nl - text + 1), out);
        fputs(RESULT_INDENT, out);
    }
    fputs(text, out);
}

/* Writes result `r` and drops it. */
static void result_put(struct result_stream *rs, json_t *r)
{
    char *text = r ? json_dumps(r, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(r);
    if (!text) {
        rs->failed = true;
        return;
    }
    fputs(rs->count++ ? ",\n" : "\n", rs->out);
    put_indented(rs->out, text);
    free(text);
}

static void add_result(struct result_stream *results, enum rule rule, const char *text, const char *kind,
                       const struct tl_stack *stack, json_t *properties, const char *suppression,
                       bool suppressed)
{
    json_t *r = json_object();
    json_object_set_new(r, "ruleId", json_string(rules[rule].id));
    json_object_set_new(r, "ruleIndex", json_integer(rule));
    json_object_set_new(r, "level", json_string(rules[rule].level));
    json_object_set_new(r, "message", json_pack("{ss}", "text", text));
    const struct tl_frame *top = sarif_user_frame(stack);
    json_t *locations = json_array();
    if (top)
        json_array_append_new(locations, location_of(top));
    json_object_set_new(r, "locations", locations);
    if (stack->count > 0)
        json_object_set_new(r, "stacks", stacks_of(stack));
    json_object_set_new(r, "partialFingerprints", fingerprint(rule, kind, stack));
    if (suppressed) {
        json_t *s = json_pack("{ss}", "kind", "external");
        if (suppression)
            json_object_set_new(s, "justification", json_string(suppression));
        json_object_set_new(r, "suppressions", json_pack("[o]", s));
    }
    json_object_set_new(r, "properties", properties);
    result_put(results, r);
}

static void add_report(struct result_stream *results, const struct tl_report *rep, bool tag_report)
{
    char text[512], a[SIZE_HUMAN_MAX];
    bool snapshot = rep->reason && strcmp(rep->reason, "exit") != 0;
    for (size_t i = 0; i < rep->leak_count; i++) {
        const struct tl_leak *l = &rep->leaks[i];
        /* A range or a mapping is address space, not memory. */
        const char *what = report_kind_apart_words(l->kind);
        if (TL_NULL(l, SITE, bytes)) /* the driver gave no size: unknown, not 0 */
            snprintf(text, sizeof(text), "%s of unknown size in %" PRIu64 " allocation(s) [%s] allocated in %s",
                     snapshot ? "Live" : "Leak", l->count, report_leak_kind(l), where_text(&l->stack));
        else
            snprintf(text, sizeof(text),
                     "%s of %s%s (%" PRIu64 " bytes) in %" PRIu64 " allocation(s) [%s] allocated in %s",
                     snapshot ? "Live" : "Leak", size_human(l->bytes, a), what, l->bytes, l->count,
                     report_leak_kind(l), where_text(&l->stack));
        json_t *props = json_pack("{sIsIss}", "bytes", (json_int_t)l->bytes, "count",
                                  (json_int_t)l->count, "kind", l->kind ? l->kind : "device");
        if (TL_NULL(l, SITE, bytes))
            json_object_set_new(props, "bytes", json_null());
        if (l->imported)
            json_object_set_new(props, "imported", json_true());
        if (tag_report)
            json_object_set_new(props, "report", json_string(rep->path));
        if (TL_HAS(l, SITE, rank))
            json_object_set_new(props, "rank", json_integer(l->rank));
        add_result(results, RULE_LEAK, text, l->kind, &l->stack, props, l->suppression,
                   l->suppressed);
    }
    for (size_t i = 0; i < rep->growth_count; i++) {
        const struct tl_growth *g = &rep->growth[i];
        /* Rows without a call site say what grew, as the text does. */
        const char *scope = g->scope && strcmp(g->scope, "call_site") != 0 ? g->scope : NULL;
        int n = snprintf(text, sizeof(text), "Growth of %s (%" PRIu64 " bytes) per mark over %" PRIu64 " marks",
                         size_human(g->bytes_per_mark, a), g->bytes_per_mark, g->marks);
        size_t at = n > 0 && (size_t)n < sizeof(text) ? (size_t)n : sizeof(text) - 1;
        if (scope && strcmp(scope, "owner") == 0)
            snprintf(text + at, sizeof(text) - at, " in the reserve of owner %s (%s)", g->owner ? g->owner : "?",
                     g->owner_class ? g->owner_class : "?");
        else if (scope && strcmp(scope, "pool") == 0)
            snprintf(text + at, sizeof(text) - at, " in pool '%s' (%s, allocated bytes)%s%s", g->pool ? g->pool : "?",
                     g->kind ? g->kind : "?", g->stack.count ? ", growing in " : "",
                     g->stack.count ? where_text(&g->stack) : "");
        else if (scope)
            snprintf(text + at, sizeof(text) - at, " [%s, pool '%s'] allocated in %s", g->kind ? g->kind : "?",
                     g->pool ? g->pool : "?", where_text(&g->stack));
        else
            snprintf(text + at, sizeof(text) - at, " [%s] allocated in %s", g->kind ? g->kind : "device",
                     where_text(&g->stack));
        json_t *props = json_pack("{sIsIsIss}", "bytes_per_mark", (json_int_t)g->bytes_per_mark,
                                  "count_per_mark", (json_int_t)g->count_per_mark, "marks",
                                  (json_int_t)g->marks, "kind", g->kind ? g->kind : "device");
        if (scope) {
            json_object_set_new(props, "scope", json_string(scope));
            json_object_set_new(props, "count_per_mark", json_null()); /* a pool or reserve has no count */
            if (g->pool)
                json_object_set_new(props, "pool", json_string(g->pool));
            if (g->owner)
                json_object_set_new(props, "owner", json_string(g->owner));
            if (g->owner_class)
                json_object_set_new(props, "owner_class", json_string(g->owner_class));
        }
        if (tag_report)
            json_object_set_new(props, "report", json_string(rep->path));
        if (TL_HAS(g, GROWTH, rank))
            json_object_set_new(props, "rank", json_integer(g->rank));
        add_result(results, RULE_GROWTH, text, g->kind, &g->stack, props, NULL, g->suppressed);
    }
    for (size_t i = 0; i < rep->invalid_free_count; i++) {
        const struct tl_invalid_free *f = &rep->invalid_frees[i];
        snprintf(text, sizeof(text), "Invalid free of %s [%s] in %s",
                 f->address ? f->address : "an unknown address", f->kind ? f->kind : "device",
                 where_text(&f->stack));
        json_t *props = json_pack("{ss}", "kind", f->kind ? f->kind : "device");
        if (f->address)
            json_object_set_new(props, "address", json_string(f->address));
        if (tag_report)
            json_object_set_new(props, "report", json_string(rep->path));
        if (TL_HAS(f, INVALID, rank))
            json_object_set_new(props, "rank", json_integer(f->rank));
        add_result(results, RULE_INVALID_FREE, text, f->kind, &f->stack, props, NULL,
                   f->suppressed);
    }
    if (TL_HAS(rep, REPORT, oom)) {
        const struct tl_oom *o = &rep->oom;
        snprintf(text, sizeof(text),
                 "Out of memory: a %s [%s] allocation failed on device %lld in %s",
                 size_human(o->bytes, a), o->kind ? o->kind : "device", o->device,
                 where_text(&o->stack));
        json_t *props = json_pack("{sIsssI}", "bytes", (json_int_t)o->bytes, "kind",
                                  o->kind ? o->kind : "device", "device", (json_int_t)o->device);
        if (TL_HAS(o, OOM, verdict)) { /* the post-mortem: why, and what would serve it */
            char why[512];
            report_oom_sentence(o, why, sizeof why);
            size_t n = strlen(text);
            if (n + 8 < sizeof text)
                snprintf(text + n, sizeof text - n, ". Why: %.*s", (int)(sizeof text - n - 8), why);
            json_object_set_new(props, "verdict", json_string(o->verdict));
            json_object_set_new(props, "remedy", o->remedy ? json_string(o->remedy) : json_null());
        }
        if (tag_report)
            json_object_set_new(props, "report", json_string(rep->path));
        add_result(results, RULE_OOM, text, o->kind, &o->stack, props, NULL, false);
    }
}

/* A largest free block or fragmentation as SARIF carries it: the number,
 * or the string "unknown" where the report says null. */
static json_t *u64_or_unknown(bool unknown, uint64_t v)
{
    return unknown ? json_string("unknown") : json_integer((json_int_t)v);
}

static json_t *real_or_unknown(bool unknown, double v)
{
    return unknown ? json_string("unknown") : json_real(v);
}

/*
 * The memory figures of each report's pools and devices, for the run's
 * property bag: what a result cannot say (nothing leaked, yet a pool's free
 * space is fragmented or unknown).
 */
static json_t *memory_properties(const struct tl_report *reports, size_t count)
{
    json_t *memory = json_array();
    char text[256], a[SIZE_HUMAN_MAX], b[SIZE_HUMAN_MAX], c[SIZE_HUMAN_MAX];
    for (size_t i = 0; i < count; i++) {
        const struct tl_report *rep = &reports[i];
        for (size_t k = 0; k < rep->device_count; k++) {
            const struct tl_device *d = &rep->devices[k];
            bool here = TL_HAS(d, DEVICE, largest_free_block) || tl_device_layout_unknown(d);
            bool unknown = here ? tl_device_layout_unknown(d) : tl_summary_layout_unknown(&rep->summary);
            uint64_t largest = TL_HAS(d, DEVICE, largest_free_block) ? d->largest_free_block : rep->summary.largest_free_block;
            double frag = TL_HAS(d, DEVICE, fragmentation) ? d->fragmentation : rep->summary.fragmentation;
            if (unknown)
                snprintf(text, sizeof text, "device %lld: reserved %s, allocated %s; largest free block unknown "
                         "(fragmentation unknown)", d->device, size_human(d->reserved_bytes, a),
                         size_human(d->allocated_bytes, b));
            else
                snprintf(text, sizeof text, "device %lld: reserved %s, allocated %s; largest free block %s "
                         "(fragmentation %.2f)", d->device, size_human(d->reserved_bytes, a),
                         size_human(d->allocated_bytes, b), size_human(largest, c), frag);
            json_t *o = json_pack("{sIsIsIsI}", "device", (json_int_t)d->device, "reserved_bytes",
                                  (json_int_t)d->reserved_bytes, "allocated_bytes", (json_int_t)d->allocated_bytes,
                                  "gap_bytes", (json_int_t)d->gap_bytes);
            json_object_set_new(o, "largest_free_block", u64_or_unknown(unknown, largest));
            json_object_set_new(o, "fragmentation", real_or_unknown(unknown, frag));
            json_object_set_new(o, "text", json_string(text));
            if (count > 1)
                json_object_set_new(o, "report", json_string(rep->path));
            if (TL_HAS(d, DEVICE, rank))
                json_object_set_new(o, "rank", json_integer(d->rank));
            json_array_append_new(memory, o);
        }
        for (size_t k = 0; k < rep->pool_count; k++) {
            const struct tl_pool *p = &rep->pools[k];
            json_t *o = json_pack("{sssssIsIsIsI}", "pool", p->name ? p->name : "?", "kind",
                                  p->kind ? p->kind : "?", "device", (json_int_t)p->device, "reserved_bytes",
                                  (json_int_t)p->reserved_bytes, "allocated_bytes", (json_int_t)p->allocated_bytes,
                                  "free_bytes", (json_int_t)p->free_bytes);
            json_object_set_new(o, "largest_free_block", u64_or_unknown(tl_pool_layout_unknown(p), p->largest_free_block));
            json_object_set_new(o, "fragmentation", real_or_unknown(tl_pool_layout_unknown(p), p->fragmentation));
            if (TL_NULL(p, POOL, reserved_bytes)) { /* a framework's host pool without byte counts (CuPy pinned) */
                json_object_set_new(o, "reserved_bytes", json_null());
                json_object_set_new(o, "allocated_bytes", json_null());
                json_object_set_new(o, "free_bytes", json_null());
                snprintf(text, sizeof text, "pool '%s' (%s, host): %" PRIu64 " free block(s); no byte counts published",
                         p->name ? p->name : "?", p->kind ? p->kind : "?", p->free_blocks);
            } else if (tl_pool_layout_unknown(p))
                snprintf(text, sizeof text, "pool '%s': reserved %s, allocated %s; largest free block unknown "
                         "(fragmentation unknown)", p->name ? p->name : "?", size_human(p->reserved_bytes, a),
                         size_human(p->allocated_bytes, b));
            else
                snprintf(text, sizeof text, "pool '%s': reserved %s, allocated %s; largest free block %s "
                         "(fragmentation %.2f)", p->name ? p->name : "?", size_human(p->reserved_bytes, a),
                         size_human(p->allocated_bytes, b), size_human(p->largest_free_block, c), p->fragmentation);
            json_object_set_new(o, "text", json_string(text));
            if (p->reading)
                json_object_set_new(o, "reading", json_string(p->reading));
            if (count > 1)
                json_object_set_new(o, "report", json_string(rep->path));
            if (TL_HAS(p, POOL, rank))
                json_object_set_new(o, "rank", json_integer(p->rank));
            json_array_append_new(memory, o);
        }
    }
    return memory;
}

bool format_sarif(FILE *out, const struct tl_report *reports, size_t count)
{
    json_t *rule_list = json_array();
    for (size_t i = 0; i < sizeof(rules) / sizeof(rules[0]); i++) {
        json_array_append_new(rule_list,
            json_pack("{ss,ss,s{ss},s{ss}}", "id", rules[i].id, "name", rules[i].name,
                      "shortDescription", "text", rules[i].text, "defaultConfiguration",
                      "level", rules[i].level));
    }
    /* The log with a placeholder for the results, written around them. */
    static const char placeholder[] = "\"\\u0001results\\u0001\"";
    json_t *results = json_string("\001results\001");
    json_t *driver = json_pack("{ss,ss,ss,so}", "name", "tensorleak", "version", TL_VERSION,
                               "semanticVersion", TL_VERSION, "rules", rule_list);
    json_t *log = json_pack("{ss,ss,s[{s{so},so,s{so}}]}",
                            "$schema", "https://json.schemastore.org/sarif-2.1.0.json",
                            "version", "2.1.0", "runs", "tool", "driver", driver,
                            "results", results, "properties", "memory",
                            memory_properties(reports, count));
    char *text = log ? json_dumps(log, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(log);
    char *at = text ? strstr(text, placeholder) : NULL;
    if (!at) {
        free(text);
        return false;
    }
    fwrite(text, 1, (size_t)(at - text), out);
    fputc('[', out);
    struct result_stream rs = {out, 0, false};
    for (size_t i = 0; i < count; i++)
        add_report(&rs, &reports[i], count > 1);
    if (rs.count)
        fputs("\n      ", out);
    fputc(']', out);
    fputs(at + strlen(placeholder), out);
    fputc('\n', out);
    free(text);
    return !rs.failed;
}
