/*
 * test_report_dump.c — report_dump() (src/model/report_write.c) writes a model
 * straight to text, without a jansson tree, and must write what jansson
 * writes from the tree (report_to_json) byte for byte: the library's report
 * files (JSON_INDENT(1) | JSON_ENSURE_ASCII) and the CLI's `report --format
 * json` and `merge` (JSON_INDENT(2) | JSON_REAL_PRECISION(15)) are compared
 * against saved expected files and read by other tools.  Every saved report
 * of tests/cli is checked, then models with what only a model built in
 * memory can hold: strings that need escapes, are not ASCII or are not
 * UTF-8 (left out, or "?" in a list), reals at the edges of their format,
 * and enough listed allocations to cross the writer's buffer many times.
 */
#include "model.h"

#include <criterion/criterion.h>
#include <glob.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const size_t flag_sets[] = {
    JSON_INDENT(1) | JSON_ENSURE_ASCII,        /* the library's report files */
    JSON_INDENT(2) | JSON_REAL_PRECISION(15),  /* the CLI's */
    JSON_COMPACT,
    0,
    JSON_INDENT(3) | JSON_ESCAPE_SLASH | JSON_REAL_PRECISION(4),
};

struct text {
    char *data;
    size_t len, cap, calls;
    size_t fail_at; /* the call that fails (1-based); 0: none */
};

static int to_text(const char *buffer, size_t size, void *arg)
{
    struct text *t = arg;
    if (++t->calls == t->fail_at)
        return -1;
    if (t->len + size + 1 > t->cap) {
        t->cap = (t->len + size + 1) * 2;
        t->data = realloc(t->data, t->cap);
        cr_assert(t->data);
    }
    memcpy(t->data + t->len, buffer, size);
    t->len += size;
    t->data[t->len] = 0;
    return 0;
}

/* report_dump equals jansson's dump of report_to_json, with every flag set. */
static void assert_dumps_as_jansson(const struct tl_report *r, const char *what)
{
    json_t *tree = report_to_json(r);
    cr_assert(tree, "%s: report_to_json failed", what);
    for (size_t i = 0; i < sizeof flag_sets / sizeof flag_sets[0]; i++) {
        char *want = json_dumps(tree, flag_sets[i]);
        struct text got = {0};
        cr_assert(want);
        cr_assert_eq(report_dump(r, flag_sets[i], to_text, &got), 0, "%s, flags %#zx: failed", what, flag_sets[i]);
        cr_assert(got.data, "%s: nothing written", what);
        size_t at = 0;
        while (want[at] && want[at] == got.data[at])
            at++;
        cr_assert(!want[at] && !got.data[at],
                  "%s, flags %#zx: differs at byte %zu of %zu (got %zu bytes):\n want ...%.60s\n got  ...%.60s", what,
                  flag_sets[i], at, strlen(want), got.len, want + (at > 20 ? at - 20 : 0),
                  got.data + (at > 20 ? at - 20 : 0));
        free(want);
        free(got.data);
    }
    json_decref(tree);
}

static void load(json_t *root, struct tl_report *r)
{
    char error[256];
    cr_assert(report_from_json(root, "test", NULL, r, error, sizeof error), "report_from_json: %s", error);
}

static json_t *leaky_tree(void)
{
    json_error_t e;
    json_t *root = json_load_file(CLI_REPORTS "/leaky.json", 0, &e);
    cr_assert(root, "leaky.json: %s", e.text);
    return root;
}

Test(report_dump, every_saved_report_is_written_as_jansson_writes_its_tree)
{
    glob_t g;
    cr_assert_eq(glob(CLI_REPORTS "/*.json", 0, NULL, &g), 0);
    size_t compared = 0;
    for (size_t i = 0; i < g.gl_pathc; i++) {
        json_t *root = json_load_file(g.gl_pathv[i], 0, NULL);
        struct tl_report r;
        char error[256];
        /* Broken inputs of the CLI tests (truncated, not UTF-8, a foreign
         * tool's) have no model to write. */
        if (root && report_from_json(root, g.gl_pathv[i], NULL, &r, error, sizeof error)) {
            assert_dumps_as_jansson(&r, g.gl_pathv[i]);
            report_free(&r);
            compared++;
        }
        json_decref(root);
    }
    globfree(&g);
    cr_assert_geq(compared, 15, "only %zu reports read", compared);
}

Test(report_dump, strings_needing_escapes_or_not_ascii_or_not_utf8_are_written_as_jansson_writes_them)
{
    json_t *root = leaky_tree();
    struct tl_report r;
    load(root, &r);
    json_decref(root);
    cr_assert_geq(r.leak_count, 1);
    cr_assert_geq(r.leaks[0].stack.count, 2);
    cr_assert_geq(r.command_count, 2);
    /* Quotes, backslashes, a slash, control characters (named and not),
     * DEL, two- and four-byte UTF-8. */
    r.host = "caf\xc3\xa9 \"q\" \\ a/b \b\f\n\r\t\x01\x1f\x7f \xf0\x9f\x98\x80 \xe2\x82\xac";
    r.label = "\xc3"; /* cut inside a character: the field is left out */
    r.command[0] = "\xff\xfe"; /* not UTF-8 in a list: "?" */
    r.command[1] = "\xed\xa0\x80"; /* a UTF-16 surrogate, not UTF-8 */
    r.leaks[0].stack.frames[0].function = "std::vector<\xce\xbb>::push_back";
    r.leaks[0].stack.frames[1].file = "/src/\x80.c"; /* left out */
    r.leaks[0].kind = ""; /* empty */
    assert_dumps_as_jansson(&r, "escapes");
    report_free(&r);
}

Test(report_dump, reals_and_integers_at_the_edges_are_written_as_jansson_writes_them)
{
    static const double reals[] = {0.0, -0.0, 1.0, 0.1, 1.0 / 3.0, 1e-7, 1e16, 1e17, 1e300, -2.5e-300, 123456789.0,
                                   1796293412.9024339, 4.9e-324};
    for (size_t i = 0; i < sizeof reals / sizeof reals[0]; i++) {
        json_t *root = leaky_tree();
        struct tl_report r;
        load(root, &r);
        json_decref(root);
        r.summary.fragmentation = reals[i];
        r.summary.seen.present |= 1ull << TL_SUMMARY_fragmentation;
        r.summary.seen.null &= ~(1ull << TL_SUMMARY_fragmentation);
        r.summary.leaked_bytes = i % 2 ? UINT64_MAX : (uint64_t)INT64_MAX; /* saturated past jansson's integers */
        r.summary.live_bytes = 0;
        r.pid = i % 2 ? LLONG_MIN : -1;
        char what[64];
        snprintf(what, sizeof what, "real %.17g", reals[i]);
        assert_dumps_as_jansson(&r, what);
        report_free(&r);
    }
}

Test(report_dump, a_real_jansson_refuses_fails_the_dump_as_it_fails_the_tree)
{
    json_t *root = leaky_tree();
    struct tl_report r;
    load(root, &r);
    json_decref(root);
    r.summary.fragmentation = NAN;
    r.summary.seen.present |= 1ull << TL_SUMMARY_fragmentation;
    r.summary.seen.null &= ~(1ull << TL_SUMMARY_fragmentation);
    cr_assert_null(report_to_json(&r));
    struct text got = {0};
    cr_assert_eq(report_dump(&r, JSON_INDENT(1), to_text, &got), -1);
    free(got.data);
    report_free(&r);
}

/* 20,000 listed allocations (about 1.4 MB of text): the writer's 64 KiB
 * buffer is handed on and refilled some twenty times mid-entry. */
static json_t *many_allocations_tree(size_t n)
{
    json_t *root = leaky_tree();
    json_t *leak = json_array_get(json_object_get(root, "leaks"), 0);
    json_t *list = json_array();
    for (size_t i = 0; i < n; i++) {
        json_t *a = json_object();
        char address[32];
        snprintf(address, sizeof address, "0x%zx", 0x7f0000000000 + i * 0x200);
        json_object_set_new(a, "address", i % 97 ? json_string(address) : json_null());
        json_object_set_new(a, "bytes", i % 89 ? json_integer((json_int_t)(i * 512 + 1)) : json_null());
        json_object_set_new(a, "device", i % 83 ? json_integer((json_int_t)(i % 8)) : json_null());
        json_array_append_new(list, a);
    }
    json_object_set_new(leak, "count", json_integer((json_int_t)n));
    json_object_set_new(leak, "allocations", list);
    json_object_set_new(leak, "allocations_unlisted", json_integer(0));
    return root;
}

Test(report_dump, a_report_larger_than_the_buffer_is_written_whole_and_in_order)
{
    json_t *root = many_allocations_tree(20000);
    struct tl_report r;
    load(root, &r);
    json_decref(root);
    cr_assert_eq(r.leaks[0].allocation_count, 20000);
    assert_dumps_as_jansson(&r, "20000 allocations");
    report_free(&r);
}

Test(report_dump, a_sink_that_fails_stops_the_dump_with_an_error)
{
    json_t *root = many_allocations_tree(20000);
    struct tl_report r;
    load(root, &r);
    json_decref(root);
    for (size_t fail_at = 1; fail_at <= 3; fail_at++) {
        struct text got = {.fail_at = fail_at};
        cr_assert_eq(report_dump(&r, JSON_INDENT(1), to_text, &got), -1);
        cr_assert_eq(got.calls, fail_at, "the sink was called again after it failed");
        free(got.data);
    }
    struct text got = {0};
    cr_assert_eq(report_dump(&r, JSON_INDENT(1) | JSON_SORT_KEYS, to_text, &got), -1, "sorted keys are refused");
    cr_assert_eq(got.calls, 0);
    report_free(&r);
}
