/*
 * test_suppressions.c: the suppressions parser and glob matcher
 * (src/model/suppressions.c), which the CLI and the preload library share.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "suppressions.h"

struct errors {
    unsigned count;
    unsigned lines[8];
    char reasons[8][160];
};

static void collect(void *ctx, unsigned line, const char *reason)
{
    struct errors *e = ctx;
    if (e->count < 8) {
        e->lines[e->count] = line;
        snprintf(e->reasons[e->count], sizeof(e->reasons[0]), "%s", reason);
    }
    e->count++;
}

static int parse(struct tl_suppressions *set, const char *text, struct errors *e)
{
    memset(set, 0, sizeof(*set));
    memset(e, 0, sizeof(*e));
    return tl_suppressions_parse(set, text, strlen(text), collect, e);
}

static const struct tl_supp_frame kv_stack[] = {
    { "kv_cache_append", "/abs/samples/leaky_inference", "/abs/samples/leaky_inference.c" },
    { "serve_request", "/abs/samples/leaky_inference", "/abs/samples/leaky_inference.c" },
    { NULL, "/lib/x86_64-linux-gnu/libc.so.6", NULL },
};

Test(suppressions, rules_comments_and_blank_lines_are_parsed)
{
    struct tl_suppressions set;
    struct errors e;
    const char *text = "# header\n"
                       "leak:kv_cache_*\n"
                       "\n"
                       "   # indented comment\r\n"
                       "  growth:  serve_*  \r\n"
                       "invalid-free:libc.so.6";
    cr_assert_eq(parse(&set, text, &e), 0);
    cr_assert_eq(e.count, 0);
    cr_assert_eq(set.count, 3);
    cr_assert_eq(set.rules[0].kind, TL_SUPP_LEAK);
    cr_assert_str_eq(set.rules[0].pattern, "kv_cache_*");
    cr_assert_eq(set.rules[0].line, 2);
    cr_assert_eq(set.rules[1].kind, TL_SUPP_GROWTH);
    cr_assert_str_eq(set.rules[1].pattern, "serve_*");
    cr_assert_eq(set.rules[1].line, 5);
    cr_assert_eq(set.rules[2].kind, TL_SUPP_INVALID_FREE);
    cr_assert_str_eq(set.rules[2].pattern, "libc.so.6");
    cr_assert_eq(set.rules[2].line, 6);
    tl_suppressions_free(&set);
    cr_assert_eq(set.count, 0);
    cr_assert_null(set.rules);
}

Test(suppressions, malformed_lines_are_reported_with_their_line_numbers)
{
    struct tl_suppressions set;
    struct errors e;
    const char *text = "leak:ok\n"
                       "no colon here\n"
                       "leaks:kv\n"
                       "growth:   \n"
                       ":pattern\n"
                       "invalid-free:also_ok\n";
    cr_assert_eq(parse(&set, text, &e), 4);
    cr_assert_eq(e.count, 4);
    cr_assert_eq(e.lines[0], 2);
    cr_assert_str_eq(e.reasons[0],
                     "expected KIND:PATTERN with KIND one of leak, growth, invalid-free");
    cr_assert_eq(e.lines[1], 3);
    cr_assert_str_eq(e.reasons[1],
                     "unknown suppression kind 'leaks' (expected leak, growth or invalid-free)");
    cr_assert_eq(e.lines[2], 4);
    cr_assert_str_eq(e.reasons[2], "empty pattern after 'growth:'");
    cr_assert_eq(e.lines[3], 5);
    /* The well-formed rules are kept: the preload warns and goes on. */
    cr_assert_eq(set.count, 2);
    cr_assert_str_eq(set.rules[1].pattern, "also_ok");
    tl_suppressions_free(&set);
}

Test(suppressions, a_nul_byte_is_a_malformed_line)
{
    struct tl_suppressions set = { 0 };
    struct errors e = { 0 };
    static const char text[] = "leak:a\0b\nleak:c\n";
    cr_assert_eq(tl_suppressions_parse(&set, text, sizeof(text) - 1, collect, &e), 1);
    cr_assert_eq(e.lines[0], 1);
    cr_assert_str_eq(e.reasons[0], "NUL byte in line");
    cr_assert_eq(set.count, 1);
    tl_suppressions_free(&set);
}

Test(suppressions, an_empty_buffer_and_no_callback_are_fine)
{
    struct tl_suppressions set = { 0 };
    cr_assert_eq(tl_suppressions_parse(&set, "", 0, NULL, NULL), 0);
    cr_assert_eq(tl_suppressions_parse(&set, "bad\n", 4, NULL, NULL), 1);
    cr_assert_eq(set.count, 0);
    cr_assert_eq(tl_suppressions_match(&set, TL_SUPP_LEAK, kv_stack, 3), -1);
    tl_suppressions_free(&set);
}

static long match_one(const char *rules, enum tl_supp_kind kind,
                      const struct tl_supp_frame *frames, size_t n)
{
    struct tl_suppressions set;
    struct errors e;
    cr_assert_eq(parse(&set, rules, &e), 0, "rules: %s", rules);
    long r = tl_suppressions_match(&set, kind, frames, n);
    tl_suppressions_free(&set);
    return r;
}

Test(suppressions, glob_matches_function_names)
{
    cr_assert_eq(match_one("leak:kv_cache_append", TL_SUPP_LEAK, kv_stack, 3), 0);
    cr_assert_eq(match_one("leak:kv_*", TL_SUPP_LEAK, kv_stack, 3), 0);
    cr_assert_eq(match_one("leak:serve_reques?", TL_SUPP_LEAK, kv_stack, 3), 0);
    cr_assert_eq(match_one("leak:kv_cache", TL_SUPP_LEAK, kv_stack, 3), -1,
                 "a pattern without wildcards matches whole names only");
    cr_assert_eq(match_one("leak:*cache", TL_SUPP_LEAK, kv_stack, 3), -1);
}

Test(suppressions, modules_match_by_full_path_or_basename)
{
    cr_assert_eq(match_one("leak:libc.so.6", TL_SUPP_LEAK, kv_stack, 3), 0);
    cr_assert_eq(match_one("leak:/lib/*/libc.so.*", TL_SUPP_LEAK, kv_stack, 3), 0);
    cr_assert_eq(match_one("leak:leaky_inference", TL_SUPP_LEAK, kv_stack, 3), 0);
    cr_assert_eq(match_one("leak:libcuda*", TL_SUPP_LEAK, kv_stack, 3), -1);
}

Test(suppressions, files_match_by_full_path_or_basename)
{
    cr_assert_eq(match_one("leak:*/samples/*.c", TL_SUPP_LEAK, kv_stack, 1), 0);
    cr_assert_eq(match_one("leak:leaky_inference.c", TL_SUPP_LEAK, kv_stack, 1), 0);
    cr_assert_eq(match_one("leak:other.c", TL_SUPP_LEAK, kv_stack, 1), -1);
}

Test(suppressions, only_rules_of_the_asked_kind_match)
{
    const char *rules = "growth:kv_*\ninvalid-free:kv_*\nleak:serve_*\n";
    cr_assert_eq(match_one(rules, TL_SUPP_LEAK, kv_stack, 3), 2);
    cr_assert_eq(match_one(rules, TL_SUPP_GROWTH, kv_stack, 3), 0);
    cr_assert_eq(match_one(rules, TL_SUPP_INVALID_FREE, kv_stack, 3), 1);
    cr_assert_eq(match_one("growth:kv_*\n", TL_SUPP_LEAK, kv_stack, 3), -1);
}

Test(suppressions, unknown_fields_and_empty_stacks_never_match)
{
    static const struct tl_supp_frame unknown[] = { { NULL, NULL, NULL }, { "", "", "" } };
    cr_assert_eq(match_one("leak:*", TL_SUPP_LEAK, unknown, 2), -1);
    cr_assert_eq(match_one("leak:*", TL_SUPP_LEAK, kv_stack, 0), -1);
    cr_assert_eq(tl_suppressions_match(NULL, TL_SUPP_LEAK, kv_stack, 3), -1);
}

Test(suppressions, kind_names_round_trip)
{
    cr_assert_str_eq(tl_supp_kind_name(TL_SUPP_LEAK), "leak");
    cr_assert_str_eq(tl_supp_kind_name(TL_SUPP_GROWTH), "growth");
    cr_assert_str_eq(tl_supp_kind_name(TL_SUPP_INVALID_FREE), "invalid-free");
    cr_assert_null(tl_supp_kind_name(TL_SUPP_KIND_COUNT));
}
