/*
 * cmd_merge.c: `tensorleak merge FILES... [-o OUT]`: the reports of one
 * multi-process job (the ranks of torchrun, mpirun or srun) as one report.
 *
 * Rules:
 *  - Each input's rank is its "rank", or its 0-based position among FILES when
 *    that is null. Inputs are taken in rank order (ties: argument order). Two
 *    reports of the same process (same rank and pid) are refused: that is a
 *    snapshot series, not a job.
 *  - "summary": each field by its merge rule in model.h's
 *    TL_SUMMARY_FIELDS, in that table's order: byte and count figures
 *    summed, largest_free_block and fragmentation (per-device properties)
 *    the largest value, per-process tracker facts (call_sites,
 *    total_allocations, invariants_repaired) left out.
 *  - "leaks", "growth", "pools", "invalid_frees", "devices": concatenated,
 *    every entry tagged with "rank" and "pid" (devices also get their
 *    largest_free_block and fragmentation from their report's summary when
 *    they lack their own); entries are never merged
 *    across processes, so per-rank attribution stays exact. "leaks" and
 *    "growth" are re-sorted largest first (stable).
 *  - "held" (kept at exit by pools and cache/library/workspace owners): like
 *    "leaks", when any input has it; entries keep their owner and class.
 *  - "owners": summed by (name, class) over the ranks, in order of first
 *    appearance, when any input has them; peak_bytes is the sum of the
 *    ranks' peaks (an upper bound: the ranks need not peak together).
 *  - Shared VMM allocations: an imported handle (a site's "shared" entry
 *    with "imported" true) whose identity, on the same host, is also held
 *    by its creator in some input, or by an importer counted before it, is
 *    counted once: its bytes leave the merged live_bytes (and leaked_bytes
 *    or held_bytes, where its site is), its shared entry is marked
 *    "counted_elsewhere", and shared_bytes_counted_once says how many
 *    (written when some input names a shared allocation).  An identity that is null matches nothing (counted in every
 *    input that holds it).
 *  - "ipc" (CUDA IPC), when any input has it: exports and mappings
 *    concatenated and tagged, each mapping paired with the export of the
 *    same handle ("exported_by"); the memory is counted once, in the
 *    exporter (merged_ipc).
 *  - "owners_by_device": concatenated and tagged, like "devices", when any
 *    input has it.
 *  - "oom": the first rank's that has one (tagged), else null.
 *  - "ranks": per-input totals {rank, pid, host, leaked_bytes,
 *    leaked_allocations, live_bytes, reserved_bytes} plus its file.
 *  - Header: reason "merge", pid/rank/label null, host and command kept when
 *    all inputs agree (else null), time the latest, "merged_from" the files.
 *    Per-process "marks" timelines and "gate" are not merged.
 */
#include "cli.h"
#include "model.h"
#include "report_fields.h"

#include "tl_version.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>

struct input {
    struct tl_report report;
    long long rank;
    size_t position;
};

struct sorted_entry {
    json_t *value;
    uint64_t weight;
    size_t seq;
};

static int by_rank(const void *a, const void *b)
{
    const struct input *x = a, *y = b;
    if (x->rank != y->rank)
        return x->rank < y->rank ? -1 : 1;
    return x->position < y->position ? -1 : x->position > y->position;
}

static int by_weight(const void *a, const void *b)
{
    const struct sorted_entry *x = a, *y = b;
    if (x->weight != y->weight)
        return x->weight > y->weight ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static uint64_t add_sat(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static json_t *json_u64(uint64_t v)
{
    return json_integer(v > (uint64_t)INT64_MAX ? INT64_MAX : (json_int_t)v);
}

/* The summary by each field's merge rule (model.h's TL_SUMMARY_FIELDS):
 * SUM and MAX over the inputs, an OPTIONAL field only when some input has
 * it, NONE and OWN fields left to nobody and to the passes below.  One rank
 * that could not know its largest free block makes the largest over all
 * ranks unknown too (unknown is not zero): both layout figures are null. */
static json_t *merged_summary(const struct input *in, size_t n)
{
    struct tl_summary sum = {0};
    bool layout_unknown = false;
    for (size_t i = 0; i < n; i++)
        layout_unknown |= tl_summary_layout_unknown(&in[i].report.summary);
    for (size_t k = 0; k < TL_SUMMARY_NFIELDS; k++) {
        const struct tl_summary_field_info *f = &tl_summary_fields[k];
        if (f->merge != TL_SUMMARY_MERGE_SUM && f->merge != TL_SUMMARY_MERGE_MAX)
            continue;
        bool any = false;
        for (size_t i = 0; i < n; i++) {
            const struct tl_summary *s = &in[i].report.summary;
            if (!tl_seen_has(&s->seen, (unsigned)k))
                continue;
            any = true;
            const char *from = (const char *)s + f->offset;
            char *to = (char *)&sum + f->offset;
            if (f->type == TL_SUMMARY_TYPE_REAL) {
                double v = *(const double *)from;
                if (v > *(double *)to)
                    *(double *)to = v;
            } else {
                uint64_t v = *(const uint64_t *)from, *t = (uint64_t *)to;
                *t = f->merge == TL_SUMMARY_MERGE_SUM ? add_sat(*t, v) : v > *t ? v : *t;
            }
        }
        if (any || !(f->flags & TL_SUMMARY_FLAG_OPTIONAL))
            sum.seen.present |= 1ull << k;
        if ((f->flags & TL_SUMMARY_FLAG_NULLABLE) && layout_unknown)
            sum.seen.null |= 1ull << k;
    }
    return report_summary_to_json(&sum);
}

/* One allocation held through a shareable handle in some input. */
struct shared_key {
    const char *host, *identity;
};

/* The key as one string (its host's length first, so that no two keys
 * read alike), for the sets below: jansson objects, hash tables, so that a
 * job with many shared allocations is not compared pairwise.  NULL when out
 * of memory. */
static char *key_text(struct shared_key k)
{
    const char *host = k.host ? k.host : "";
    char *text = NULL;
    return asprintf(&text, "%zu:%s%s", strlen(host), host, k.identity) < 0 ? NULL : text;
}

/* Calls fn for each "shared" entry with an identity in the sites of `key`
 * ("leaks" or "held") of every input. */
static void foreach_shared(const struct input *in, size_t n, const char *key,
                           void (*fn)(struct shared_key k, json_t *site, json_t *entry, const char *key, void *arg),
                           void *arg)
{
    for (size_t i = 0; i < n; i++) {
        size_t j, k;
        json_t *site, *entry;
        json_array_foreach(json_object_get(in[i].report.root, key), j, site) {
            json_array_foreach(json_object_get(site, "shared"), k, entry) {
                const char *id = json_string_value(json_object_get(entry, "identity"));
                if (id)
                    fn((struct shared_key){in[i].report.host, id}, site, entry, key, arg);
            }
        }
    }
}

struct shared_pass {
    json_t *created, *imported; /* sets of key_text */
    uint64_t dup_live, dup_leaked, dup_held;
};

static bool key_among(json_t *set, const char *text)
{
    return json_object_get(set, text) != NULL;
}

static void key_add(json_t *set, const char *text)
{
    json_object_set_new_nocheck(set, text, json_true());
}

static void note_creator(struct shared_key k, json_t *site, json_t *entry, const char *key, void *arg)
{
    struct shared_pass *p = arg;
    (void)site, (void)key;
    char *text = json_is_true(json_object_get(entry, "imported")) ? NULL : key_text(k);
    if (text)
        key_add(p->created, text);
    free(text);
}

static void note_import(struct shared_key k, json_t *site, json_t *entry, const char *key, void *arg)
{
    struct shared_pass *p = arg;
    if (!json_is_true(json_object_get(entry, "imported")))
        return;
    char *text = key_text(k);
    bool first = text && !key_among(p->created, text) && !key_among(p->imported, text);
    if (first)
        key_add(p->imported, text); /* the first holder in the job: counted */
    free(text);
    if (first)
        return;
    json_t *b = json_object_get(entry, "bytes");
    uint64_t bytes = json_is_integer(b) && json_integer_value(b) > 0 ? (uint64_t)json_integer_value(b) : 0;
    /* Marked on the input, before "leaks" and "held" are copied: readers of
     * the merged report (check) leave these bytes out as the summary does. */
    json_object_set_new(entry, "counted_elsewhere", json_true());
    p->dup_live = add_sat(p->dup_live, bytes);
    if (strcmp(key, "held") == 0)
        p->dup_held = add_sat(p->dup_held, bytes);
    else if (!json_is_true(json_object_get(site, "suppressed")))
        p->dup_leaked = add_sat(p->dup_leaked, bytes);
}

static void count_shared(struct shared_key k, json_t *site, json_t *entry, const char *key, void *arg)
{
    (void)k, (void)site, (void)entry, (void)key;
    (*(size_t *)arg)++;
}

static uint64_t sub_floor(uint64_t a, uint64_t b)
{
    return a > b ? a - b : 0;
}

static void set_reduced(json_t *summary, const char *field, uint64_t by)
{
    json_t *v = json_object_get(summary, field);
    if (json_is_integer(v))
        json_object_set_new(summary, field, json_u64(sub_floor((uint64_t)json_integer_value(v), by)));
}

/* The merged summary with each shared allocation's bytes counted once. */
static void count_shared_once(const struct input *in, size_t n, json_t *summary)
{
    size_t total = 0;
    foreach_shared(in, n, "leaks", count_shared, &total);
    foreach_shared(in, n, "held", count_shared, &total);
    if (total == 0)
        return; /* no input shares an allocation it can name */
    struct shared_pass p = {.created = json_object(), .imported = json_object()};
    if (p.created && p.imported) {
        foreach_shared(in, n, "leaks", note_creator, &p);
        foreach_shared(in, n, "held", note_creator, &p);
        foreach_shared(in, n, "leaks", note_import, &p);
        foreach_shared(in, n, "held", note_import, &p);
        set_reduced(summary, "live_bytes", p.dup_live);
        set_reduced(summary, "leaked_bytes", p.dup_leaked);
        set_reduced(summary, "held_bytes", p.dup_held);
    }
    json_object_set_new(summary, "shared_bytes_counted_once", json_u64(p.dup_live));
    json_decref(p.created);
    json_decref(p.imported);
}

static uint64_t entry_weight(json_t *entry, const char *key, const char *times)
{
    json_t *v = json_object_get(entry, key);
    uint64_t w = json_is_integer(v) ? (uint64_t)json_integer_value(v) : 0;
    /* Address space sorts after memory, however large the range. */
    if (report_kind_is_address_space(json_string_value(json_object_get(entry, "kind"))))
        w = 0;
    if (times) {
        json_t *t = json_object_get(entry, times);
        uint64_t m = json_is_integer(t) ? (uint64_t)json_integer_value(t) : 0;
        w = m != 0 && w > UINT64_MAX / m ? UINT64_MAX : w * m;
    }
    return w;
}

/*
 * A report may keep a device's largest free block and fragmentation in its
 * summary only (one device); once devices of many ranks sit side by side the
 * merged summary no longer says which is whose, so copy them in.
 */
static void keep_device_fragmentation(json_t *device, const struct tl_report *from)
{
    /* A negative gap (reports written before tensorleak checked its
     * invariants) is never written again: 0, as report_load reads it. */
    json_t *gap = json_object_get(device, "gap_bytes");
    if (json_is_integer(gap) && json_integer_value(gap) < 0)
        json_object_set_new(device, "gap_bytes", json_integer(0));
    bool unknown = tl_summary_layout_unknown(&from->summary); /* null stays null */
    if (!json_object_get(device, "largest_free_block"))
        json_object_set_new(device, "largest_free_block",
                            unknown ? json_null() : json_u64(from->summary.largest_free_block));
    if (!json_object_get(device, "fragmentation"))
        json_object_set_new(device, "fragmentation",
                            unknown ? json_null() : json_real(from->summary.fragmentation));
}

/*
 * Concatenates array `key` of every input, tagging entries with rank and pid;
 * when `weight_key` is set, sorts by it (times `times_key`) largest first.
 */
static json_t *merged_array(const struct input *in, size_t n, const char *key,
                            const char *weight_key, const char *times_key)
{
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += json_array_size(json_object_get(in[i].report.root, key));
    struct sorted_entry *entries = calloc(total + 1, sizeof(*entries));
    json_t *out = json_array();
    if (!entries || !out) {
        free(entries);
        json_decref(out);
        return NULL;
    }
    size_t count = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *array = json_object_get(in[i].report.root, key);
        size_t j;
        json_t *e;
        json_array_foreach(array, j, e) {
            /* Moved, not copied: the inputs' trees are dropped once merged. */
            json_t *copy = json_incref(e);
            json_object_set_new(copy, "rank", json_integer(in[i].rank));
            json_object_set_new(copy, "pid", json_integer(in[i].report.pid));
            if (strcmp(key, "devices") == 0)
                keep_device_fragmentation(copy, &in[i].report);
            entries[count].value = copy;
            entries[count].weight = weight_key ? entry_weight(e, weight_key, times_key) : 0;
            entries[count].seq = count;
            count++;
        }
    }
    if (weight_key)
        qsort(entries, count, sizeof(*entries), by_weight);
    for (size_t i = 0; i < count; i++)
        json_array_append_new(out, entries[i].value);
    free(entries);
    return out;
}

/* "owners" of every input summed by (name, class), first appearance first. */
static json_t *merged_owners(const struct input *in, size_t n)
{
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += in[i].report.owner_count;
    struct tl_owner *sum = calloc(total + 1, sizeof(*sum));
    if (!sum)
        return NULL;
    size_t count = 0;
    for (size_t i = 0; i < n; i++) {
        const struct tl_report *r = &in[i].report;
        for (size_t k = 0; k < r->owner_count; k++) {
            const struct tl_owner *o = &r->owners[k];
            const char *cls = o->cls ? o->cls : "";
            size_t j = 0;
            while (j < count && !(strcmp(sum[j].name, o->name) == 0 && strcmp(sum[j].cls, cls) == 0))
                j++;
            if (j == count) {
                sum[count].name = o->name;
                sum[count].cls = cls;
                count++;
            }
            sum[j].live_bytes = add_sat(sum[j].live_bytes, o->live_bytes);
            sum[j].live_allocations = add_sat(sum[j].live_allocations, o->live_allocations);
            sum[j].peak_bytes = add_sat(sum[j].peak_bytes, o->peak_bytes);
        }
    }
    json_t *out = json_array();
    for (size_t j = 0; out && j < count; j++) {
        json_t *e = json_object();
        json_object_set_new(e, "name", json_string(sum[j].name));
        json_object_set_new(e, "class", *sum[j].cls ? json_string(sum[j].cls) : json_null());
        json_object_set_new(e, "live_bytes", json_u64(sum[j].live_bytes));
        json_object_set_new(e, "live_allocations", json_u64(sum[j].live_allocations));
        json_object_set_new(e, "peak_bytes", json_u64(sum[j].peak_bytes));
        json_array_append_new(out, e);
    }
    free(sum);
    return out;
}

/* An "ipc" list ("exported" or "mapped") of every input, tagged with rank
 * and pid. */
static json_t *merged_ipc_list(const struct input *in, size_t n, const char *key)
{
    json_t *out = json_array();
    for (size_t i = 0; out && i < n; i++) {
        json_t *list = json_object_get(json_object_get(in[i].report.root, "ipc"), key), *e;
        size_t j;
        json_array_foreach(list, j, e) {
            json_t *copy = json_deep_copy(e);
            if (!json_is_object(copy)) {
                json_decref(copy);
                continue;
            }
            json_object_set_new(copy, "rank", json_integer(in[i].rank));
            json_object_set_new(copy, "pid", json_integer(in[i].report.pid));
            json_array_append_new(out, copy);
        }
    }
    return out;
}

/*
 * "ipc" of a merged report: every input's exports and mappings, each mapping
 * paired with the export of the same handle in another process
 * ("exported_by": its rank and pid; null when that process is not among the
 * inputs).  The memory is the exporter's and is counted there once, however
 * many processes map it; the summary gains ipc_paired_bytes (distinct
 * exported allocations some input maps) and ipc_unpaired_mapped_bytes
 * (mapped bytes whose exporter is not here: counted in no input).
 */
static json_t *merged_ipc(const struct input *in, size_t n, json_t *summary)
{
    json_t *exported = merged_ipc_list(in, n, "exported"), *mapped = merged_ipc_list(in, n, "mapped");
    json_t *ipc = json_object();
    if (!exported || !mapped || !ipc) {
        json_decref(exported);
        json_decref(mapped);
        json_decref(ipc);
        return NULL;
    }
    uint64_t paired = 0, unpaired = 0;
    size_t nexp = json_array_size(exported);
    bool *counted = calloc(nexp + 1, sizeof *counted);
    /* handle -> the exports of it, in order: each mapping looks up its own
     * handle's, not every export. */
    json_t *by_handle = json_object();
    size_t j;
    json_t *m;
    json_array_foreach(exported, j, m) {
        const char *h = json_string_value(json_object_get(m, "handle"));
        if (!h || !by_handle)
            continue;
        json_t *list = json_object_get(by_handle, h);
        if (!list)
            json_object_set_new_nocheck(by_handle, h, list = json_array());
        json_array_append_new(list, json_integer((json_int_t)j));
    }
    json_array_foreach(mapped, j, m) {
        const char *handle = json_string_value(json_object_get(m, "handle"));
        json_t *bytes = json_object_get(m, "bytes");
        long long pid = json_integer_value(json_object_get(m, "pid"));
        json_t *candidates = handle ? json_object_get(by_handle, handle) : NULL;
        size_t k = nexp;
        for (size_t c = 0; c < json_array_size(candidates) && k == nexp; c++) {
            size_t e = (size_t)json_integer_value(json_array_get(candidates, c));
            if (json_integer_value(json_object_get(json_array_get(exported, e), "pid")) != pid)
                k = e;
        }
        if (k == nexp) {
            json_object_set_new(m, "exported_by", json_null());
            if (json_is_integer(bytes))
                unpaired = add_sat(unpaired, (uint64_t)json_integer_value(bytes));
            continue;
        }
        json_t *x = json_array_get(exported, k);
        json_object_set_new(m, "exported_by", json_pack("{sOsO}", "rank", json_object_get(x, "rank"), "pid",
                                                        json_object_get(x, "pid")));
        json_t *xb = json_object_get(x, "bytes");
        if (counted && !counted[k] && json_is_integer(xb)) {
            counted[k] = true;
            paired = add_sat(paired, (uint64_t)json_integer_value(xb));
        }
    }
    free(counted);
    json_decref(by_handle);
    json_object_set_new(summary, "ipc_paired_bytes", json_u64(paired));
    json_object_set_new(summary, "ipc_unpaired_mapped_bytes", json_u64(unpaired));
    json_object_set_new(ipc, "exported", exported);
    json_object_set_new(ipc, "mapped", mapped);
    return ipc;
}

static bool any_has(const struct input *in, size_t n, const char *key)
{
    for (size_t i = 0; i < n; i++)
        if (json_is_array(json_object_get(in[i].report.root, key)))
            return true;
    return false;
}

/* The string field `key` when every input has the same value, else null. */
static json_t *common_value(const struct input *in, size_t n, const char *key)
{
    json_t *first = json_object_get(in[0].report.root, key);
    for (size_t i = 1; i < n; i++) {
        if (!first || !json_equal(first, json_object_get(in[i].report.root, key)))
            return json_null();
    }
    return first ? json_deep_copy(first) : json_null();
}

static json_t *merge_inputs(const struct input *in, size_t n)
{
    json_t *out = json_object();
    json_object_set_new(out, "tool", json_string("tensorleak"));
    json_object_set_new(out, "schema", json_integer(1));
    json_object_set_new(out, "version", json_string(TL_VERSION));
    json_object_set_new(out, "reason", json_string("merge"));
    json_object_set_new(out, "label", json_null());
    json_object_set_new(out, "pid", json_null());
    json_object_set_new(out, "rank", json_null());
    json_object_set_new(out, "host", common_value(in, n, "host"));
    json_object_set_new(out, "command", common_value(in, n, "command"));
    const char *latest = NULL;
    for (size_t i = 0; i < n; i++) {
        const char *t = in[i].report.time;
        if (t && (!latest || strcmp(t, latest) > 0))
            latest = t;
    }
    json_object_set_new(out, "time", latest ? json_string(latest) : json_null());
    json_t *from = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(from, json_string(in[i].report.path));
    json_object_set_new(out, "merged_from", from);
    json_t *summary = merged_summary(in, n);
    if (summary)
        count_shared_once(in, n, summary);
    json_object_set_new(out, "summary", summary);
    bool any_ipc = false;
    for (size_t i = 0; i < n; i++)
        any_ipc |= json_is_object(json_object_get(in[i].report.root, "ipc"));
    if (any_ipc && summary)
        json_object_set_new(out, "ipc", merged_ipc(in, n, summary));
    json_object_set_new(out, "leaks", merged_array(in, n, "leaks", "bytes", NULL));
    if (any_has(in, n, "held"))
        json_object_set_new(out, "held", merged_array(in, n, "held", "bytes", NULL));
    if (any_has(in, n, "owners"))
        json_object_set_new(out, "owners", merged_owners(in, n));
    if (any_has(in, n, "owners_by_device")) /* device ordinals are each process's own: never summed */
        json_object_set_new(out, "owners_by_device", merged_array(in, n, "owners_by_device", NULL, NULL));
    json_object_set_new(out, "pools", merged_array(in, n, "pools", NULL, NULL));
    json_object_set_new(out, "devices", merged_array(in, n, "devices", NULL, NULL));
    json_object_set_new(out, "growth",
                        merged_array(in, n, "growth", "bytes_per_mark", "marks"));
    json_object_set_new(out, "invalid_frees", merged_array(in, n, "invalid_frees", NULL, NULL));
    json_t *oom = json_null();
    for (size_t i = 0; i < n; i++) {
        json_t *o = json_object_get(in[i].report.root, "oom");
        if (json_is_object(o)) {
            json_decref(oom);
            oom = json_deep_copy(o);
            json_object_set_new(oom, "rank", json_integer(in[i].rank));
            json_object_set_new(oom, "pid", json_integer(in[i].report.pid));
            break;
        }
    }
    json_object_set_new(out, "oom", oom);
    json_t *ranks = json_array();
    for (size_t i = 0; i < n; i++) {
        const struct tl_report *r = &in[i].report;
        json_t *e = json_object();
        json_object_set_new(e, "rank", json_integer(in[i].rank));
        json_object_set_new(e, "pid", json_integer(r->pid));
        json_object_set_new(e, "host", r->host ? json_string(r->host) : json_null());
        json_object_set_new(e, "file", json_string(r->path));
        json_object_set_new(e, "leaked_bytes", json_u64(r->summary.leaked_bytes));
        json_object_set_new(e, "leaked_allocations", json_u64(r->summary.leaked_allocations));
        json_object_set_new(e, "live_bytes", json_u64(r->summary.live_bytes));
        json_object_set_new(e, "reserved_bytes", json_u64(r->summary.reserved_bytes));
        json_array_append_new(ranks, e);
    }
    json_object_set_new(out, "ranks", ranks);
    return out;
}

int cmd_merge(int argc, char **argv)
{
    static const char usage[] = "usage: tensorleak merge FILES... [-o OUT]";
    static const struct option options[] = {
        { "output", required_argument, NULL, 'o' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    const char *output = NULL;
    int opt;
    opterr = 0;
    optind = 1;
    while ((opt = getopt_long(argc, argv, ":o:h", options, NULL)) != -1) {
        switch (opt) {
        case 'o':
            output = optarg;
            break;
        case 'h':
            puts(usage);
            return CLI_EXIT_OK;
        default:
            return cli_option_error("merge", opt, argv);
        }
    }
    size_t n = (size_t)(argc - optind);
    if (n == 0) {
        cli_error("merge: expected at least one report\n%s", usage);
        return CLI_EXIT_USAGE;
    }
    struct input *in = calloc(n, sizeof(*in));
    if (!in) {
        cli_error("merge: out of memory");
        return CLI_EXIT_USAGE;
    }
    int rc = CLI_EXIT_USAGE;
    size_t loaded = 0;
    for (; loaded < n; loaded++) {
        struct input *i = &in[loaded];
        const char *path = argv[optind + (int)loaded];
        if (!report_load(path, &i->report))
            goto out;
        /* Merge copies entries from the report as its model writes it.  The
         * model is read again from that tree, and the tree read from the
         * file dropped: one tree per input, not two. */
        json_t *tree = json_incref(report_tree(&i->report));
        report_free(&i->report);
        char error[512] = "out of memory";
        if (!tree || !report_from_json(tree, path, NULL, &i->report, error, sizeof error)) {
            cli_error("merge: %s: %s", path, error);
            json_decref(tree);
            goto out;
        }
        i->report.root = tree; /* what report_tree would build again */
        i->position = loaded;
        i->rank = TL_HAS(&i->report, REPORT, rank) ? i->report.rank : (long long)loaded;
    }
    qsort(in, n, sizeof(*in), by_rank);
    for (size_t i = 1; i < n; i++) {
        if (in[i].rank == in[i - 1].rank && in[i].report.pid == in[i - 1].report.pid) {
            cli_error("merge: %s and %s are reports of the same process (rank %lld, pid %lld)",
                      in[i - 1].report.path, in[i].report.path, in[i].rank, in[i].report.pid);
            goto out;
        }
    }
    /* The merged tree, read into the report model and written from it: the
     * report in the tables' order, and checked as any report is read. */
    json_t *tree = merge_inputs(in, n);
    /* The merged tree holds what it needs of the inputs: free them before
     * the merged report is read, so the two never take memory together. */
    for (size_t i = 0; i < loaded; i++)
        report_free(&in[i].report);
    loaded = 0;
    if (!tree) {
        cli_error("merge: out of memory");
        goto out;
    }
    struct tl_report model;
    char error[512];
    bool read = report_from_json(tree, "merge", NULL, &model, error, sizeof error);
    json_decref(tree); /* the model keeps its own reference */
    if (!read) {
        cli_error("merge: the merged report does not read back: %s", error);
        goto out;
    }
    FILE *fp = cli_open_output(output);
    if (fp) {
        bool written = report_write_json(fp, &model);
        fputc('\n', fp);
        if (!written)
            cli_error("merge: out of memory");
        if (cli_close_output(fp, output) && written)
            rc = CLI_EXIT_OK;
    }
    report_free(&model);
out:
    for (size_t i = 0; i < loaded; i++)
        report_free(&in[i].report);
    free(in);
    return rc;
}
