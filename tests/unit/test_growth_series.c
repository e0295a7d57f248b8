/*
 * Growth of series (growth.c): a framework pool's allocated bytes, an owner
 * class's reserved bytes, one value per mark.  Driven by constructed step
 * patterns and by the per-request figures recorded on an H200
 * (tests/fixtures/h200-2026-11-30): growth is flagged for the KV-cache leak
 * within 6 requests, never for a warm-up followed by a plateau.
 */
#include "report_gather.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <string.h>

#define MiB (1LL << 20)
#define K 3 /* TENSORLEAK_GROWTH_MARKS' default */

/* Feeds values[0..n) as marks 1..n; returns the first mark at which the
 * series is growing (0: never), and the verdict at the last mark. */
static unsigned feed(const long long *values, unsigned n, bool *growing_at_end, struct tl_series_verdict *end)
{
    struct tl_series s;
    memset(&s, 0, sizeof s);
    unsigned first = 0;
    bool g = false;
    for (unsigned i = 0; i < n; i++) {
        tl_series_observe(&s, i + 1, values[i], TL_SERIES_MIN_STEP);
        g = tl_series_growing(&s, i + 1, K, end);
        if (g && !first)
            first = i + 1;
    }
    if (growing_at_end)
        *growing_at_end = g;
    return first;
}

Test(growth_series, one_segment_per_request_is_flagged_at_the_third_step)
{
    long long v[10];
    for (int i = 0; i < 10; i++)
        v[i] = 200 * MiB + 20 * MiB * i;
    bool end;
    struct tl_series_verdict vd;
    cr_assert_eq(feed(v, 10, &end, &vd), 4);
    cr_assert(end);
    cr_assert_eq(vd.bytes_per_mark, 20 * MiB);
    cr_assert_eq(vd.marks, 9); /* the whole run: marks 1..10 */
    cr_assert_eq(vd.from_bytes, 200 * MiB);
    cr_assert_eq(vd.to_bytes, 200 * MiB + 20 * MiB * 9);
}

Test(growth_series, a_segment_every_few_requests_with_flat_steps_stays_flagged)
{
    /* rise, flat, rise, rise, flat, flat, rise, flat, rise, flat, flat, rise */
    static const int step[] = {0, 1, 0, 1, 1, 0, 0, 1, 0, 1, 0, 0, 1};
    long long v[13], x = 100 * MiB;
    for (int i = 0; i < 13; i++)
        v[i] = x += step[i] * 20 * MiB;
    struct tl_series s;
    memset(&s, 0, sizeof s);
    unsigned first = 0;
    for (unsigned i = 0; i < 13; i++) {
        tl_series_observe(&s, i + 1, v[i], TL_SERIES_MIN_STEP);
        bool g = tl_series_growing(&s, i + 1, K, NULL);
        if (g && !first)
            first = i + 1;
        if (first)
            cr_assert(g, "unflagged at mark %u after it was flagged", i + 1);
    }
    cr_assert_eq(first, 5);
    struct tl_series_verdict vd;
    cr_assert(tl_series_growing(&s, 13, K, &vd));
    /* highs at 2, 4, 5, 8, 10, 13, no gap longer than 3: 120 MiB over the
     * 12 marks since the first */
    cr_assert_eq(vd.bytes_per_mark, 120 * MiB / 12);
    cr_assert_eq(vd.marks, 12);
}

Test(growth_series, one_segment_every_third_request_is_flagged)
{
    long long v[16];
    for (int i = 0; i < 16; i++)
        v[i] = 64 * MiB + 20 * MiB * (i / 3);
    bool end;
    cr_assert_eq(feed(v, 16, &end, NULL), 10); /* highs at 4, 7, 10 */
    cr_assert(end);
}

Test(growth_series, warm_up_then_plateau_is_not_growth_once_the_plateau_outlasts_a_step)
{
    /* Three rising marks of warm-up, then 47 flat ones. */
    long long v[50];
    for (int i = 0; i < 50; i++)
        v[i] = i < 4 ? 100 * MiB + 30 * MiB * i : 190 * MiB;
    struct tl_series s;
    memset(&s, 0, sizeof s);
    for (unsigned i = 0; i < 50; i++) {
        tl_series_observe(&s, i + 1, v[i], TL_SERIES_MIN_STEP);
        if (i + 1 >= 6)
            cr_assert(!tl_series_growing(&s, i + 1, K, NULL), "flagged at mark %u of the plateau", i + 1);
    }
}

Test(growth_series, a_warm_up_of_two_steps_never_fires)
{
    long long v[50];
    for (int i = 0; i < 50; i++)
        v[i] = i < 3 ? 100 * MiB + 30 * MiB * i : 160 * MiB;
    cr_assert_eq(feed(v, 50, NULL, NULL), 0);
}

Test(growth_series, steps_under_a_mebibyte_are_noise)
{
    long long v[50];
    for (int i = 0; i < 50; i++)
        v[i] = 100 * MiB + 4096 * i;
    cr_assert_eq(feed(v, 50, NULL, NULL), 0);
}

/* Two figures under one key at one mark (two pools the bridge named alike,
 * or a state submitted twice between marks) are one observation: before,
 * each rise counted as a new high at the same mark, and K of them at the
 * first mark divided the rate by a run of 0 marks (SIGFPE in the mark). */
Test(growth_series, figures_repeated_within_one_mark_are_one_observation)
{
    struct tl_series s;
    memset(&s, 0, sizeof s);
    for (int i = 0; i < 4; i++)
        tl_series_observe(&s, 1, 100 * MiB + 20 * MiB * i, TL_SERIES_MIN_STEP);
    struct tl_series_verdict vd;
    cr_assert(!tl_series_growing(&s, 1, K, &vd));
    /* Steady growth seen twice per mark is flagged as if seen once. */
    long long v[10];
    for (int i = 0; i < 10; i++)
        v[i] = 200 * MiB + 20 * MiB * i;
    memset(&s, 0, sizeof s);
    unsigned first = 0;
    for (unsigned i = 0; i < 10; i++) {
        tl_series_observe(&s, i + 1, v[i] - 10 * MiB, TL_SERIES_MIN_STEP);
        tl_series_observe(&s, i + 1, v[i], TL_SERIES_MIN_STEP);
        if (tl_series_growing(&s, i + 1, K, &vd) && !first)
            first = i + 1;
    }
    cr_assert_eq(first, 4);
    cr_assert_eq(vd.bytes_per_mark, 20 * MiB);
    cr_assert_eq(vd.marks, 9);
    cr_assert_eq(vd.from_bytes, 200 * MiB);
}

/* ---- the H200 fixtures -------------------------------------------------- */

static json_t *fixture(const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", FIXTURES, name);
    json_error_t err;
    json_t *j = json_load_file(path, 0, &err);
    cr_assert_not_null(j, "cannot read %s: %s", path, err.text);
    return j;
}

static unsigned series_of(json_t *per_request, const char *key, long long *out)
{
    size_t i;
    json_t *r;
    json_array_foreach(per_request, i, r)
        out[i] = (long long)json_integer_value(json_object_get(r, key));
    return (unsigned)json_array_size(per_request);
}

Test(growth_series, torch_kv_cache_leak_is_flagged_within_six_requests_in_every_mode)
{
    static const char *const files[] = {"torch_native_leak_snapshot.json", "torch_expandable_leak_snapshot.json",
                                        "torch_async_leak_stats.json"};
    for (int f = 0; f < 3; f++) {
        json_t *d = fixture(files[f]);
        json_t *pr = json_object_get(d, "per_request");
        long long v[64];
        bool end;
        struct tl_series_verdict vd;
        /* the pool's allocated bytes */
        unsigned n = series_of(pr, "allocated_bytes.all.current", v);
        cr_assert_eq(n, 6);
        unsigned at = feed(v, n, &end, &vd);
        cr_assert(at >= 1 && at <= 6 && end, "%s: allocated flagged at %u, at end %d", files[f], at, end);
        cr_assert_eq(vd.bytes_per_mark, (v[5] - v[0]) / 5, "%s", files[f]);
        cr_assert_eq(vd.marks, 5, "%s", files[f]);
        /* the owner's reserved bytes (expandable: its last step is flat) */
        n = series_of(pr, "reserved_bytes.all.current", v);
        at = feed(v, n, &end, NULL);
        cr_assert(at >= 1 && at <= 6 && end, "%s: reserved flagged at %u, at end %d", files[f], at, end);
        json_decref(d);
    }
}

Test(growth_series, torch_clean_twin_over_fifty_requests_is_never_flagged)
{
    /* The leak's first request, served 50 times: the state a clean loop
     * returns to at every mark. */
    json_t *d = fixture("torch_native_leak_snapshot.json");
    json_t *first = json_array_get(json_object_get(d, "per_request"), 0);
    long long v[50];
    for (int i = 0; i < 50; i++)
        v[i] = (long long)json_integer_value(json_object_get(first, "allocated_bytes.all.current"));
    cr_assert_eq(feed(v, 50, NULL, NULL), 0);
    json_decref(d);
}

Test(growth_series, jax_growth_without_preallocation_and_none_in_the_preallocated_reserve)
{
    json_t *d = fixture("jax_grow_stats.json");
    long long v[64];
    unsigned n = series_of(json_object_get(d, "per_request"), "bytes_in_use", v);
    struct tl_series_verdict vd;
    bool end;
    cr_assert_eq(feed(v, n, &end, &vd), 4);
    cr_assert(end);
    cr_assert_eq(vd.bytes_per_mark, 16 * MiB);
    json_decref(d);
    d = fixture("jax_prealloc_stats.json");
    n = series_of(json_object_get(d, "per_request"), "pool_bytes", v);
    cr_assert_eq(feed(v, n, NULL, NULL), 0); /* 104.85 GiB reserved once */
    n = series_of(json_object_get(d, "per_request"), "bytes_in_use", v);
    cr_assert_eq(feed(v, n, NULL, NULL), 4);
    json_decref(d);
}

Test(growth_series, cupy_pool_growing_every_other_request_is_flagged)
{
    json_t *d = fixture("cupy_pool_stats.json");
    long long v[64];
    unsigned n = series_of(json_object_get(d, "per_request"), "used", v);
    bool end;
    struct tl_series_verdict vd;
    cr_assert_eq(feed(v, n, &end, &vd), 7); /* highs at 3, 5, 7 */
    cr_assert(end);
    cr_assert_eq(vd.bytes_per_mark, 4 * MiB); /* 8 MiB every other request */
    n = series_of(json_object_get(d, "per_request"), "total", v);
    cr_assert_eq(feed(v, n, NULL, NULL), 6); /* reserve: highs at 2, 4, 6 */
    json_decref(d);
}
