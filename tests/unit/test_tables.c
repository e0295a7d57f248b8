/* Unit tests of the tracker's tables: the live-allocation table, call-site
 * interning, option parsing, report-path patterns and symbolization.  They
 * link the tracker's internals directly (tl_internal_lib). */
#include "tl_internal.h"

#include <criterion/criterion.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

Test(live_table, inserted_rows_are_found_and_removed_exactly_once)
{
    tl_live_clear();
    for (uint64_t i = 1; i <= 100000; i++) {
        struct tl_live r = {.addr = i * 512, .size = i, .space = TL_SPACE_MEM, .kind = TL_KIND_DEVICE};
        cr_assert(tl_live_add(&r, true));
    }
    cr_assert_eq(tl_live_count(), 100000);
    /* Remove every odd row: backward-shift deletion must keep every even
     * row reachable. */
    for (uint64_t i = 1; i <= 100000; i += 2) {
        struct tl_live out;
        cr_assert_eq(tl_live_take(TL_SPACE_MEM, i * 512, 1u << TL_KIND_DEVICE, &out), 1);
        cr_assert_eq(out.size, i);
        cr_assert_eq(tl_live_take(TL_SPACE_MEM, i * 512, 1u << TL_KIND_DEVICE, &out), 0, "freed twice");
    }
    cr_assert_eq(tl_live_count(), 50000);
    for (uint64_t i = 2; i <= 100000; i += 2) {
        struct tl_live out;
        cr_assert(tl_live_lookup(TL_SPACE_MEM, i * 512, &out), "row %llu lost", (unsigned long long)i);
        cr_assert_eq(out.size, i);
    }
}

Test(live_table, same_address_in_another_space_is_another_row)
{
    tl_live_clear();
    struct tl_live a = {.addr = 0x1000, .size = 1, .space = TL_SPACE_MEM, .kind = TL_KIND_DEVICE};
    struct tl_live b = {.addr = 0x1000, .size = 2, .space = TL_SPACE_VMM_MAP, .kind = TL_KIND_VMM_MAPPING};
    cr_assert(tl_live_add(&a, true));
    cr_assert(tl_live_add(&b, true));
    struct tl_live out;
    cr_assert(tl_live_lookup(TL_SPACE_VMM_MAP, 0x1000, &out));
    cr_assert_eq(out.size, 2);
    cr_assert(tl_live_lookup(TL_SPACE_MEM, 0x1000, &out));
    cr_assert_eq(out.size, 1);
}

Test(live_table, free_with_the_wrong_api_leaves_the_row)
{
    tl_live_clear();
    struct tl_live a = {.addr = 0x2000, .size = 7, .space = TL_SPACE_MEM, .kind = TL_KIND_HOST_PINNED};
    cr_assert(tl_live_add(&a, true));
    struct tl_live out;
    cr_assert_eq(tl_live_take(TL_SPACE_MEM, 0x2000, 1u << TL_KIND_DEVICE, &out), -1);
    cr_assert_eq(out.kind, TL_KIND_HOST_PINNED);
    cr_assert_eq(tl_live_count(), 1);
    cr_assert_eq(tl_live_take(TL_SPACE_MEM, 0x2000, 1u << TL_KIND_HOST_PINNED, &out), 1);
}

Test(callsite, identical_stacks_share_one_call_site)
{
    uintptr_t f1[] = {0x401000, 0x402000, 0x403000};
    uintptr_t f2[] = {0x401000, 0x402000, 0x403001};
    struct tl_callsite *a = tl_callsite_intern(TL_KIND_DEVICE, f1, 3);
    struct tl_callsite *b = tl_callsite_intern(TL_KIND_DEVICE, f1, 3);
    struct tl_callsite *c = tl_callsite_intern(TL_KIND_DEVICE, f2, 3);
    struct tl_callsite *d = tl_callsite_intern(TL_KIND_HOST_PINNED, f1, 3);
    struct tl_callsite *e = tl_callsite_intern(TL_KIND_DEVICE, f1, 2);
    cr_assert_not_null(a);
    cr_assert_eq(a, b);
    cr_assert_neq(a, c);
    cr_assert_neq(a, d, "kind is part of the identity");
    cr_assert_neq(a, e, "depth is part of the identity");
    cr_assert_eq(tl_callsite_by_id(a->id), a);
    cr_assert_eq(a->nframes, 3);
    cr_assert_eq(memcmp(a->frames, f1, sizeof f1), 0);
}

static void *intern_many(void *arg)
{
    uintptr_t base = (uintptr_t)arg;
    for (int i = 0; i < 2000; i++) {
        uintptr_t f[] = {base + (uintptr_t)(i % 100), 0x500000};
        if (!tl_callsite_intern(TL_KIND_DEVICE, f, 2))
            return (void *)1;
    }
    return NULL;
}

Test(callsite, threads_interning_the_same_stacks_get_the_same_sites)
{
    size_t before = tl_callsite_count();
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, intern_many, (void *)(uintptr_t)0x700000);
    for (int i = 0; i < 4; i++) {
        void *rc;
        pthread_join(t[i], &rc);
        cr_assert_null(rc);
    }
    cr_assert_eq(tl_callsite_count() - before, 100);
}

Test(options, sizes_accept_suffixes_and_reject_garbage)
{
    uint64_t v;
    cr_assert_eq(tl_parse_size("16G", &v), 0);
    cr_assert_eq(v, 16ull << 30);
    cr_assert_eq(tl_parse_size("512k", &v), 0);
    cr_assert_eq(v, 512ull << 10);
    cr_assert_eq(tl_parse_size("3MiB", &v), 0);
    cr_assert_eq(v, 3ull << 20);
    cr_assert_eq(tl_parse_size("42", &v), 0);
    cr_assert_eq(v, 42);
    cr_assert_eq(tl_parse_size("-1", &v), -1);
    cr_assert_eq(tl_parse_size("", &v), -1);
    cr_assert_eq(tl_parse_size("12X", &v), -1);
    cr_assert_eq(tl_parse_size("99999999999999999999", &v), -1);
    cr_assert_eq(tl_parse_size("17179869184G", &v), -1, "overflow");
}

Test(options, booleans_fail_on_lists_and_signals)
{
    bool b;
    cr_assert_eq(tl_parse_bool("Yes", &b), 0);
    cr_assert(b);
    cr_assert_eq(tl_parse_bool("off", &b), 0);
    cr_assert(!b);
    cr_assert_eq(tl_parse_bool("2", &b), -1);
    unsigned k;
    cr_assert_eq(tl_parse_fail_on("leak,oom", &k), 0);
    cr_assert_eq(k, TL_FAIL_LEAK | TL_FAIL_OOM);
    cr_assert_eq(tl_parse_fail_on("none", &k), 0);
    cr_assert_eq(k, 0);
    cr_assert_eq(tl_parse_fail_on("leak,bogus", &k), -1);
    int s;
    cr_assert_eq(tl_parse_signal("SIGUSR2", &s), 0);
    cr_assert_eq(s, SIGUSR2);
    cr_assert_eq(tl_parse_signal("usr1", &s), 0);
    cr_assert_eq(s, SIGUSR1);
    cr_assert_eq(tl_parse_signal("none", &s), 0);
    cr_assert_eq(s, 0);
    cr_assert_eq(tl_parse_signal("SIGKILL", &s), -1);
    cr_assert_eq(tl_parse_signal("9", &s), -1);
    cr_assert_eq(tl_parse_signal("SIGNOPE", &s), -1);
}

Test(options, bad_values_keep_defaults)
{
    char *env[] = {"TENSORLEAK_DEPTH=abc", "TENSORLEAK_EXITCODE=0", "TENSORLEAK_OUTPUT=x%q", "TENSORLEAK_QUIET=1", NULL};
    tl_options_load(env);
    cr_assert_eq(tl_opt.depth, 32);
    cr_assert_eq(tl_opt.exitcode, 23);
    cr_assert_str_eq(tl_opt.output, "tensorleak.%p.json");
    cr_assert(tl_opt.quiet);
}

Test(report_path, pattern_expands_pid_sequence_rank_and_percent)
{
    char out[256], want[256];
    setenv("RANK", "3", 1);
    cr_assert_eq(tl_expand_pattern("r%r-%p.%n%%.json", 7, out, sizeof out), 0);
    snprintf(want, sizeof want, "r3-%d.7%%.json", (int)getpid());
    cr_assert_str_eq(out, want);
    cr_assert_eq(tl_expand_pattern("bad%x", 1, out, sizeof out), -1);
    cr_assert_eq(tl_expand_pattern("%p%p%p", 1, out, 4), -1, "too long");
    unsetenv("RANK");
}

__attribute__((noinline)) int unit_known_function(void)
{
    return 41 + (int)(uintptr_t)__builtin_return_address(0) % 1;
}

Test(symbolize, a_function_of_this_binary_is_named_with_file_and_line)
{
    void *session = tl_symbolizer_open();
    cr_assert_not_null(session);
    struct tl_frame_info f;
    /* A return address points after the call; symbolization looks at the
     * byte before it, so +1 stands in for "a return address in it". */
    tl_symbolize(session, (uintptr_t)&unit_known_function + 1, &f);
    cr_assert_str_eq(f.function, "unit_known_function");
    cr_assert_not_null(f.file);
    cr_assert(strstr(f.file, "test_tables.c") != NULL, "file %s", f.file);
    cr_assert_gt(f.line, 0);
    cr_assert_not_null(f.module);
    cr_assert(strstr(f.module, "unit_tables") != NULL, "module %s", f.module);
    tl_symbolizer_close(session);
}

__attribute__((noinline)) void *unit_return_address(void)
{
    return __builtin_return_address(0);
}

static inline __attribute__((always_inline)) void *unit_inlined_helper(void)
{
    return unit_return_address(); /* INLINED-CALL */
}

__attribute__((noinline)) void *unit_outer_function(void)
{
    return unit_inlined_helper(); /* OUTER-CALL */
}

static int line_of(const char *marker)
{
    FILE *f = fopen(UNIT_SOURCE, "r");
    char buf[512];
    int n = 0, found = 0;
    while (f && fgets(buf, sizeof buf, f)) {
        n++;
        if (strstr(buf, marker) && !strstr(buf, "line_of")) {
            found = n;
            break;
        }
    }
    if (f)
        fclose(f);
    return found;
}

Test(symbolize, an_inlined_call_expands_into_callee_then_caller)
{
    uintptr_t ret = (uintptr_t)unit_outer_function();
    void *session = tl_symbolizer_open();
    cr_assert_not_null(session);
    struct tl_frame_info f;
    tl_symbolize(session, ret, &f);
    struct tl_inline_frame shown[TL_MAX_INLINE + 1];
    int k = tl_frame_expand(&f, shown);
    cr_assert_eq(k, 2, "frames at the address: %d", k);
    cr_assert_str_eq(shown[0].function, "unit_inlined_helper");
    cr_assert_eq(shown[0].line, line_of("INLINED-CALL"), "inlined line %d (%s)", shown[0].line, shown[0].file);
    cr_assert_str_eq(shown[1].function, "unit_outer_function");
    cr_assert_eq(shown[1].line, line_of("OUTER-CALL"));
    cr_assert(strstr(shown[1].file, "test_tables.c") != NULL);
    tl_symbolizer_close(session);
}
