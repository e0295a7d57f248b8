/* Unit tests of the tracker's tables: the live-allocation table, call-site
 * interning, option parsing, report-path patterns and symbolization.  They
 * link the tracker's internals directly (tl_internal_lib). */
#include "tl_internal.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
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

/* ---- the table's owner (live_table.c): lock-free for one thread ---------- */

static void churn_pairs(uint64_t base, unsigned n, uint64_t size)
{
    for (unsigned i = 0; i < n; i++) {
        struct tl_live r = {.addr = base + (uint64_t)i * 512, .size = size, .space = TL_SPACE_MEM,
                            .kind = TL_KIND_DEVICE};
        cr_assert(tl_live_add(&r, true));
        struct tl_live out;
        cr_assert_eq(tl_live_take(TL_SPACE_MEM, r.addr, 1u << TL_KIND_DEVICE, &out), 1);
    }
}

static void *churn_alone(void *arg)
{
    (void)arg;
    churn_pairs(0x9000000, 1000, 64);
    return (void *)(uintptr_t)tl_live_owned_here();
}

Test(live_table, the_thread_that_keeps_working_owns_the_table_and_loses_it_to_another)
{
    tl_live_init();
    tl_live_clear();
    churn_pairs(0x100000, 200, 100);
    if (!tl_live_owned_here())
        cr_skip_test("membarrier(2) unavailable here: the table never has an owner");
    cr_assert_eq(atomic_load(&tl_stats.live_bytes), 0);
    cr_assert_eq(atomic_load(&tl_stats.peak_live_bytes), 100);

    pthread_t t;
    void *other_owned;
    pthread_create(&t, NULL, churn_alone, NULL);
    pthread_join(t, &other_owned);
    cr_assert(other_owned, "a thread working alone did not take the table over");
    cr_assert_not(tl_live_owned_here(), "two owners");

    /* Back on this thread: locked, and slower to claim again than before. */
    churn_pairs(0x200000, 1, 100);
    cr_assert_not(tl_live_owned_here());
    churn_pairs(0x200000, 300, 100);
    cr_assert(tl_live_owned_here());
    cr_assert_eq(atomic_load(&tl_stats.live_bytes), 0);
}

static void *one_report(void *arg)
{
    (void)arg;
    tl_live_lock_all();
    tl_live_unlock_all();
    return NULL;
}

Test(live_table, reports_do_not_push_a_lone_thread_off_the_lock_free_path)
{
    tl_live_init();
    tl_live_clear();
    churn_pairs(0x100000, 200, 8);
    if (!tl_live_owned_here())
        cr_skip_test("membarrier(2) unavailable here: the table never has an owner");
    /* A report takes the table away each round; 70 pairs (140 operations)
     * later this thread must own it again, round after round: a report is
     * not a rival thread, so the claim threshold stays at 64. */
    for (int round = 0; round < 20; round++) {
        pthread_t t;
        pthread_create(&t, NULL, one_report, NULL);
        pthread_join(t, NULL);
        cr_assert_not(tl_live_owned_here(), "round %d: the report did not take the table", round);
        churn_pairs(0x200000, 70, 8);
        cr_assert(tl_live_owned_here(), "round %d: not the owner again after 140 operations", round);
    }
}

#define RACERS 4
#define RACER_PAIRS 20000
#define RACER_KEEP_EVERY 1000

static atomic_bool racing;

static void *racer(void *arg)
{
    uintptr_t k = (uintptr_t)arg;
    uint64_t base = 0x10000000ull * (k + 1);
    for (unsigned i = 0; i < RACER_PAIRS; i++) {
        struct tl_live r = {.addr = base + (uint64_t)i * 512, .size = k + 1, .space = TL_SPACE_MEM,
                            .kind = TL_KIND_DEVICE};
        if (!tl_live_add(&r, true))
            return (void *)1;
        if (i % RACER_KEEP_EVERY == 0)
            continue; /* a survivor */
        struct tl_live out;
        if (tl_live_take(TL_SPACE_MEM, r.addr, 1u << TL_KIND_DEVICE, &out) != 1 || out.size != k + 1)
            return (void *)2;
    }
    return NULL;
}

static bool count_row(const struct tl_live *r, void *arg)
{
    (void)r;
    ++*(size_t *)arg;
    return false;
}

static void *reporter(void *arg)
{
    (void)arg;
    while (atomic_load(&racing)) {
        size_t n = 0;
        tl_live_lock_all();
        tl_live_foreach(count_row, &n);
        bool whole = n == tl_live_count();
        tl_live_unlock_all();
        if (!whole)
            return (void *)3;
        /* A report every 200 us: far more often than any real program, and
         * still leaving the racers time between two (a report holding
         * every lock back to back would starve them). */
        struct timespec pause = {0, 200000};
        nanosleep(&pause, NULL);
    }
    return NULL;
}

Test(live_table, owner_racers_and_reports_leave_exact_survivors_and_totals)
{
    tl_live_init();
    tl_live_clear();
    churn_pairs(0x100000, 200, 8); /* this thread owns the table (where membarrier works) */
    atomic_store(&racing, true);
    pthread_t t[RACERS], rep;
    pthread_create(&rep, NULL, reporter, NULL);
    for (uintptr_t k = 0; k < RACERS; k++)
        pthread_create(&t[k], NULL, racer, (void *)k);
    churn_pairs(0x300000, 20000, 8); /* the old owner keeps working meanwhile */
    for (int k = 0; k < RACERS; k++) {
        void *rc;
        pthread_join(t[k], &rc);
        cr_assert_null(rc, "racer %d failed (%p)", k, rc);
    }
    atomic_store(&racing, false);
    void *rc;
    pthread_join(rep, &rc);
    cr_assert_null(rc, "a report saw a table whose row count disagreed");

    long long want_bytes = 0;
    size_t want_rows = 0;
    for (int k = 0; k < RACERS; k++) {
        want_rows += RACER_PAIRS / RACER_KEEP_EVERY;
        want_bytes += (long long)(RACER_PAIRS / RACER_KEEP_EVERY) * (k + 1);
    }
    cr_assert_eq(tl_live_count(), want_rows);
    cr_assert_eq(atomic_load(&tl_stats.live_bytes), want_bytes);
    tl_live_fold();
    cr_assert_eq(atomic_load(&tl_stats.live_count), (long long)want_rows);
    cr_assert_eq(tl_live_sum_device_bytes(0), want_bytes);
    cr_assert_geq(atomic_load(&tl_stats.peak_live_bytes), want_bytes);
}

/* calloc, slowed down once on demand: the live table grows a shard with
 * calloc inside its critical section, so a slow calloc holds the table's
 * owner inside a lock-free section for as long as a test wants. */
#if defined(__SANITIZE_ADDRESS__)
#define SLOW_CALLOC 0 /* AddressSanitizer owns calloc */
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SLOW_CALLOC 0
#endif
#endif
#ifndef SLOW_CALLOC
#define SLOW_CALLOC 1
#endif
static atomic_bool slow_calloc_armed;
static atomic_bool in_slow_calloc;

#if SLOW_CALLOC
extern void *__libc_calloc(size_t n, size_t size);

void *calloc(size_t n, size_t size)
{
    if (atomic_exchange(&slow_calloc_armed, false)) {
        atomic_store(&in_slow_calloc, true);
        struct timespec hold = {0, 100 * 1000000};
        nanosleep(&hold, NULL);
        atomic_store(&in_slow_calloc, false);
    }
    return __libc_calloc(n, size);
}
#endif

static atomic_int owner_state; /* 0 starting, 1 owns and about to grow, -1 never owned */

static void *owner_that_grows(void *arg)
{
    (void)arg;
    churn_pairs(0x500000, 200, 4);
    if (!tl_live_owned_here()) {
        atomic_store(&owner_state, -1);
        return NULL;
    }
    atomic_store(&slow_calloc_armed, true);
    atomic_store(&owner_state, 1);
    /* Rows for shards that have none yet: the first one grows its shard. */
    for (uint64_t i = 0; i < 4096; i++) {
        struct tl_live r = {.addr = 0x6000000 + i * 512, .size = 4, .space = TL_SPACE_MEM, .kind = TL_KIND_DEVICE};
        tl_live_add(&r, true);
    }
    return NULL;
}

Test(live_table, another_thread_waits_until_the_owner_leaves_its_lock_free_section)
{
    if (!SLOW_CALLOC)
        cr_skip_test("needs its own calloc, which AddressSanitizer's replaces");
    tl_live_init();
    tl_live_clear();
    pthread_t t;
    pthread_create(&t, NULL, owner_that_grows, NULL);
    while (atomic_load(&owner_state) == 0 || (atomic_load(&owner_state) == 1 && !atomic_load(&in_slow_calloc)))
        sched_yield();
    if (atomic_load(&owner_state) < 0) {
        pthread_join(t, NULL);
        cr_skip_test("membarrier(2) unavailable here: the table never has an owner");
    }
    /* The owner sleeps inside its section now; this add must wait for it. */
    struct tl_live mine = {.addr = 0x7000000, .size = 5, .space = TL_SPACE_MEM, .kind = TL_KIND_DEVICE};
    cr_assert(tl_live_add(&mine, true));
    cr_assert_not(atomic_load(&in_slow_calloc), "entered the table while its owner was inside a section");
    pthread_join(t, NULL);
    cr_assert_eq(atomic_load(&tl_stats.live_bytes), 4096 * 4 + 5);
}

#define HANDOFF_ROUNDS 300
#define HANDOFF_PAIRS 3000
#define HANDOFF_KEEP_EVERY 500

static atomic_bool handoff_done;

static void *handoff_worker(void *arg)
{
    uint64_t base = 0x1000000000ull + (uintptr_t)arg * 0x1000000ull;
    for (unsigned i = 0; i < HANDOFF_PAIRS; i++) {
        struct tl_live r = {.addr = base + (uint64_t)i * 512, .size = 8, .space = TL_SPACE_MEM,
                            .kind = TL_KIND_DEVICE};
        if (!tl_live_add(&r, true))
            break;
        struct tl_live out;
        if (i % HANDOFF_KEEP_EVERY != 0 && tl_live_take(TL_SPACE_MEM, r.addr, 1u << TL_KIND_DEVICE, &out) != 1)
            break;
    }
    atomic_store(&handoff_done, true);
    return NULL;
}

Test(live_table, ownership_changes_hands_hundreds_of_times_without_losing_a_row)
{
    tl_live_init();
    tl_live_clear();
    struct tl_live anchor_row = {.addr = 0x4000, .size = 1, .space = TL_SPACE_MEM, .kind = TL_KIND_DEVICE};
    cr_assert(tl_live_add(&anchor_row, true));
    unsigned long claims_before = tl_live_claims();
    /* Each worker is a new thread: it claims after a short run, and this
     * thread's own allocations take the table back from it again and
     * again (and claim it in turn). */
    for (uintptr_t round = 0; round < HANDOFF_ROUNDS; round++) {
        atomic_store(&handoff_done, false);
        pthread_t t;
        pthread_create(&t, NULL, handoff_worker, (void *)round);
        for (uint64_t a = 0x8000000; !atomic_load(&handoff_done); a += 512) {
            struct tl_live mine = {.addr = a, .size = 3, .space = TL_SPACE_MEM, .kind = TL_KIND_DEVICE};
            struct tl_live out;
            cr_assert(tl_live_add(&mine, true));
            cr_assert(tl_live_lookup(TL_SPACE_MEM, 0x4000, NULL));
            cr_assert_eq(tl_live_take(TL_SPACE_MEM, a, 1u << TL_KIND_DEVICE, &out), 1);
        }
        pthread_join(t, NULL);
    }
    size_t want_rows = 1 + HANDOFF_ROUNDS * (HANDOFF_PAIRS / HANDOFF_KEEP_EVERY);
    cr_assert_eq(tl_live_count(), want_rows);
    cr_assert_eq(atomic_load(&tl_stats.live_bytes), 1 + 8LL * (long long)(want_rows - 1));
    for (uintptr_t round = 0; round < HANDOFF_ROUNDS; round++)
        for (unsigned i = 0; i < HANDOFF_PAIRS; i += HANDOFF_KEEP_EVERY)
            cr_assert(tl_live_lookup(TL_SPACE_MEM, 0x1000000000ull + round * 0x1000000ull + i * 512ull, NULL));
    if (tl_live_claims() == claims_before)
        cr_skip_test("membarrier(2) unavailable here: the table never has an owner");
    cr_assert_gt(tl_live_claims() - claims_before, HANDOFF_ROUNDS / 2, "only %lu handovers",
                 tl_live_claims() - claims_before);
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
    /* The documented spelling only, as `tensorleak run --fail-on` has it. */
    cr_assert_eq(tl_parse_fail_on("all", &k), -1);
    cr_assert_eq(tl_parse_fail_on("none,leak", &k), -1);
    cr_assert_eq(tl_parse_fail_on("leak, oom", &k), -1);
    cr_assert_eq(tl_parse_fail_on("leak,,oom", &k), -1);
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

/* The rows' defaults are the documented ones (README.md's table). */
Test(options, defaults_from_the_rows)
{
    char *env[] = {NULL};
    tl_options_load(env);
    cr_assert_str_eq(tl_opt.output, "tensorleak.%p.json");
    cr_assert(!tl_opt.output_null);
    cr_assert_eq(tl_opt.depth, 32);
    cr_assert_eq(tl_opt.python_depth, 32);
    cr_assert(!tl_opt.frames_all);
    cr_assert_eq(tl_opt.addresses, 256);
    cr_assert_eq(tl_opt.fail_on, 0);
    cr_assert_eq(tl_opt.exitcode, 23);
    cr_assert_str_eq(tl_opt.suppressions, "");
    cr_assert_eq(tl_opt.signal, SIGUSR1);
    cr_assert_eq(tl_opt.mark_signal, 0);
    cr_assert(!tl_opt.quiet);
    cr_assert_eq(tl_opt.interval, 0.0);
    cr_assert_eq(tl_opt.growth_marks, 3);
    cr_assert(tl_opt.follow_fork);
    cr_assert(tl_opt.default_owners);
    cr_assert(tl_opt.live);
    cr_assert_str_eq(tl_opt.live_dir, "");
    cr_assert_eq(tl_opt.live_interval, 1.0);
    cr_assert_eq(tl_opt.keep, 100);
    cr_assert_str_eq(tl_opt.owners, "");
    cr_assert_eq(tl_opt.budget.total, 0);
    cr_assert(!tl_opt.budget_enforce);
    cr_assert(!tl_opt.python);
    cr_assert_str_eq(tl_opt.python_rejected, "");
}

/* The rules `tensorleak run` shares: 0 is the interval's off; a gate's
 * status is never 0. */
Test(options, shared_rules_interval_zero_exitcode_nonzero)
{
    char *env[] = {"TENSORLEAK_INTERVAL=0", "TENSORLEAK_FAIL_ON=all", NULL};
    tl_options_load(env);
    cr_assert_eq(tl_opt.interval, 0.0);
    cr_assert_eq(tl_opt.fail_on, 0, "'all' is no documented kind");
    char why[TL_OPTION_WHY];
    int n;
    cr_assert(!tl_option_exitcode("0", &n, why));
    cr_assert_str_eq(why, "expected 1 to 255");
    cr_assert(tl_option_exitcode("255", &n, why));
    cr_assert_eq(n, 255);
    double d;
    cr_assert(tl_option_interval("0", &d, why));
    cr_assert(!tl_option_interval("-1", &d, why));
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

/* A rank is a file name's part, never a path: '/', '.', newlines and the
 * like become '_', and a rank too long for one is cut. */
Test(report_path, a_rank_never_leaves_the_directory_or_breaks_the_name)
{
    static const char *const cases[][2] = {
        {"../../etc/x", "______etc_x"}, {"..", "__"}, {"a/b", "a_b"}, {"1\n2", "1_2"},
        {"7", "7"}, {"node-3_a", "node-3_a"}, {"\x1b[2J", "__2J"},
    };
    char out[256], want[256];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        setenv("RANK", cases[i][0], 1);
        cr_assert_eq(tl_report_path("r%r.json", 1, false, out, sizeof out), 0);
        snprintf(want, sizeof want, "r%s.json", cases[i][1]);
        cr_assert_str_eq(out, want, "rank %zu", i);
    }
    char huge[300];
    memset(huge, '9', sizeof huge - 1);
    huge[sizeof huge - 1] = 0;
    setenv("RANK", huge, 1);
    cr_assert_eq(tl_report_path("r%r", 1, false, out, sizeof out), 0);
    cr_assert(strlen(out) < 120 && strspn(out + 1, "9") == strlen(out) - 1, "cut, digits only: %s", out);
    unsetenv("RANK");
}

/* Numbered names for every report but the exit report. */
Test(report_path, numbered_reports_get_a_sequence_before_json_or_at_the_end)
{
    char out[256], want[256];
    int pid = (int)getpid();
    cr_assert_eq(tl_report_path("tensorleak.%p.json", 4, false, out, sizeof out), 0);
    snprintf(want, sizeof want, "tensorleak.%d.json", pid);
    cr_assert_str_eq(out, want, "the exit report keeps the plain name");
    cr_assert_eq(tl_report_path("tensorleak.%p.json", 4, true, out, sizeof out), 0);
    snprintf(want, sizeof want, "tensorleak.%d.4.json", pid);
    cr_assert_str_eq(out, want);
    cr_assert_eq(tl_report_path("out/report", 12, true, out, sizeof out), 0);
    cr_assert_str_eq(out, "out/report.12", "no .json: the number goes at the end");
    cr_assert_eq(tl_report_path("dir.json/.json", 3, true, out, sizeof out), 0);
    cr_assert_str_eq(out, "dir.json/.json.3", "a bare '.json' file name is not an extension");
    cr_assert_eq(tl_report_path("r.%n.json", 5, true, out, sizeof out), 0);
    cr_assert_str_eq(out, "r.5.json", "a pattern with %n numbers itself");
    cr_assert_eq(tl_report_path("r%%n.json", 5, true, out, sizeof out), 0);
    cr_assert_str_eq(out, "r%n.5.json", "%%n is a literal, not a sequence");
    cr_assert_eq(tl_report_path("abcd.json", 123, true, out, 12), -1, "too long with the number");
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
