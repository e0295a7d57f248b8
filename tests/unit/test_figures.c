/*
 * test_figures.c — the report's invariants: impossible
 * figures are repaired before anything is written, each repair is listed,
 * one warning names the first; sizes are never formatted from a negative
 * number.  The inputs are the figures of the first H200 run's exit reports.
 */
#include "report_gather.h"

#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <limits.h>
#include <math.h>
#include <string.h>

#define MiB (1ull << 20)
#define GiB (1ull << 30)

static struct tl_pool_row pool_rows[4];

static struct tl_gather model(size_t npools)
{
    struct tl_gather m;
    memset(&m, 0, sizeof m);
    memset(pool_rows, 0, sizeof pool_rows);
    m.pools = pool_rows;
    m.npools = npools;
    m.devices[0].present = true;
    m.devices[0].have_info = true;
    m.devices[0].total = 141 * GiB;
    return m;
}

/* PyTorch backend:cudaMallocAsync at exit: the driver no longer answered,
 * so the pool read reserved 0 with 33 MiB allocated. */
Test(invariants, allocated_above_reserved_raises_reserved_per_pool_device_and_summary, .init = cr_redirect_stderr)
{
    struct tl_gather m = model(1);
    struct tl_pool_row *p = &pool_rows[0];
    snprintf(p->name, sizeof p->name, "mempool 0x5");
    p->kind = "stream_ordered";
    p->allocated = 33 * MiB;
    m.devices[0].reserved = 64 * MiB + 205 * 1024; /* 64.2 MiB */
    m.devices[0].allocated = 97 * MiB + 205 * 1024;
    m.reserved = m.devices[0].reserved;
    m.allocated = m.devices[0].allocated;
    tl_report_check_invariants(&m);
    cr_assert_eq(p->reserved, 33 * MiB);
    cr_assert_eq(m.devices[0].reserved, 97 * MiB + 205 * 1024);
    cr_assert_eq(m.reserved, 97 * MiB + 205 * 1024, "gap 0, not 16777216.0 TiB");
    cr_assert_eq(m.repairs_total, 3);
    cr_assert_eq(m.nrepairs, 3);
    cr_assert_str_eq(m.repairs[0].invariant, "allocated <= reserved");
    cr_assert_str_eq(m.repairs[0].where, "pool 'mempool 0x5'");
    cr_assert_str_eq(m.repairs[0].figure, "reserved_bytes");
    cr_assert_eq(m.repairs[0].was, 0);
    cr_assert_eq(m.repairs[0].now, (long long)(33 * MiB));
    cr_assert_str_eq(m.repairs[1].where, "device 0");
    cr_assert_str_eq(m.repairs[2].where, "summary");
    fflush(stderr);
    cr_assert_stderr_eq_str("tensorleak: 3 impossible figure(s) in this report repaired (first: allocated <= reserved at "
                            "pool 'mempool 0x5', reserved_bytes 0 -> 34603008); listed under \"repairs\" in the report\n");
}

Test(invariants, largest_free_above_free_and_fragmentation_out_of_range_are_clamped, .init = cr_redirect_stderr)
{
    struct tl_gather m = model(1);
    struct tl_pool_row *p = &pool_rows[0];
    snprintf(p->name, sizeof p->name, "kv");
    p->kind = "annotated";
    p->reserved = 10 * MiB;
    p->allocated = 4 * MiB;
    p->free = 6 * MiB;
    p->largest_free = 8 * MiB;
    p->fragmentation = -1.0 / 3.0;
    m.devices[0].reserved = 10 * MiB;
    m.devices[0].allocated = 4 * MiB;
    m.devices[0].largest_free = 8 * MiB;
    m.devices[0].fragmentation = NAN;
    m.reserved = 10 * MiB;
    m.allocated = 4 * MiB;
    m.largest_free = 6 * MiB;
    m.fragmentation = 0.0;
    tl_report_check_invariants(&m);
    cr_assert_eq(p->largest_free, 6 * MiB);
    cr_assert(p->fragmentation == 0.0);
    cr_assert_eq(m.devices[0].largest_free, 6 * MiB);
    cr_assert(m.devices[0].fragmentation == 0.0, "NaN is no fraction");
    cr_assert_eq(m.repairs_total, 4);
    cr_assert_str_eq(m.repairs[0].invariant, "largest free block <= free");
    cr_assert_str_eq(m.repairs[1].invariant, "0 <= fragmentation <= 1");
    cr_assert_str_eq(m.repairs[3].where, "device 0");
}

Test(invariants, no_figure_above_the_device_memory, .init = cr_redirect_stderr)
{
    struct tl_gather m = model(1);
    m.devices[0].total = GiB;
    struct tl_pool_row *p = &pool_rows[0];
    snprintf(p->name, sizeof p->name, "p");
    p->kind = "stream_ordered";
    p->reserved = 2 * GiB;
    p->allocated = GiB / 2;
    p->free = 2 * GiB - GiB / 2;
    p->layout_unknown = true;
    p->fragmentation = NAN; /* unknown: left alone */
    m.devices[0].reserved = 2 * GiB;
    m.devices[0].allocated = GiB / 2;
    m.reserved = 2 * GiB;
    m.allocated = GiB / 2;
    tl_report_check_invariants(&m);
    cr_assert_eq(p->reserved, GiB);
    cr_assert_eq(p->free, GiB / 2, "free follows its reserve");
    cr_assert_eq(m.devices[0].reserved, GiB);
    cr_assert_eq(m.reserved, GiB);
    cr_assert_eq(m.repairs_total, 4);
    cr_assert_str_eq(m.repairs[0].invariant, "figure <= device memory");
    cr_assert_str_eq(m.repairs[1].invariant, "free <= reserved - allocated");
}

Test(invariants, the_last_known_device_size_still_bounds_the_figures, .init = cr_redirect_stderr)
{
    struct tl_gather m = model(0);
    m.devices[0].have_info = false; /* cuMemGetInfo failed at exit */
    m.devices[0].total_last_good = true;
    m.devices[0].total = GiB;
    m.devices[0].reserved = (uint64_t)-(long long)(33 * MiB); /* a wrapped negative */
    m.devices[0].allocated = 33 * MiB;
    m.reserved = 33 * MiB;
    m.allocated = 33 * MiB;
    tl_report_check_invariants(&m);
    cr_assert_eq(m.devices[0].reserved, GiB, "clamped to the device, then allocated <= reserved holds");
    cr_assert_eq(m.repairs_total, 1);
    cr_assert_str_eq(m.repairs[0].invariant, "figure <= device memory");
    cr_assert_eq(m.repairs[0].was, -(long long)(33 * MiB), "the wrapped figure is shown as the negative it was");
}

Test(invariants, a_consistent_report_is_left_alone_and_says_nothing, .init = cr_redirect_stderr)
{
    struct tl_gather m = model(0);
    m.devices[0].reserved = 32 * MiB;
    m.devices[0].allocated = MiB;
    m.devices[0].layout_unknown = true;
    m.devices[0].fragmentation = NAN;
    m.reserved = 32 * MiB;
    m.allocated = MiB;
    m.layout_unknown = true;
    m.live_bytes = (long long)MiB;
    tl_report_check_invariants(&m);
    cr_assert_eq(m.repairs_total, 0);
    cr_assert_eq(m.devices[0].reserved, 32 * MiB);
    fflush(stderr);
    cr_assert_stderr_eq_str("");
}

Test(invariants, negative_byte_counts_become_zero, .init = cr_redirect_stderr)
{
    struct tl_gather m = model(0);
    m.devices[0].present = false;
    m.live_bytes = -5;
    m.held_bytes = -(long long)MiB;
    tl_report_check_invariants(&m);
    cr_assert_eq(m.live_bytes, 0);
    cr_assert_eq(m.held_bytes, 0);
    cr_assert_eq(m.repairs_total, 2);
    cr_assert_str_eq(m.repairs[0].invariant, "bytes >= 0");
    cr_assert_str_eq(m.repairs[1].figure, "held_bytes");
}

/* A framework's fragmentation comes from its JSON as any number: the
 * repair records it in thousandths, saturated, never through an
 * out-of-range float-to-integer conversion (undefined; x86 gave INT64_MIN
 * for 1e300, a large fraction listed as a hugely negative one). */
Test(invariants, a_fraction_far_out_of_range_is_recorded_saturated, .init = cr_redirect_stderr)
{
    struct tl_gather m = model(2);
    snprintf(pool_rows[0].name, sizeof pool_rows[0].name, "torch cuda:0");
    pool_rows[0].kind = "pytorch";
    pool_rows[0].fragmentation = 1e300;
    snprintf(pool_rows[1].name, sizeof pool_rows[1].name, "jax cuda:0");
    pool_rows[1].kind = "jax";
    pool_rows[1].fragmentation = -1e300;
    m.devices[0].fragmentation = NAN;
    tl_report_check_invariants(&m);
    cr_assert(pool_rows[0].fragmentation == 1.0);
    cr_assert(pool_rows[1].fragmentation == 0.0);
    cr_assert(m.devices[0].fragmentation == 0.0);
    cr_assert_eq(m.nrepairs, 3);
    cr_assert_eq(m.repairs[0].was, LLONG_MAX);
    cr_assert_eq(m.repairs[0].now, 1000);
    cr_assert_eq(m.repairs[1].was, LLONG_MIN);
    cr_assert_eq(m.repairs[1].now, 0);
    cr_assert_eq(m.repairs[2].was, 0, "NaN has no number: recorded as 0");
}

Test(format_size, a_negative_number_is_never_a_size)
{
    char buf[32];
    tl_format_size((uint64_t)(-33 * (long long)MiB), buf, sizeof buf);
    cr_assert_str_eq(buf, "unknown", "was 16777216.0 TiB");
    tl_format_size(33 * MiB, buf, sizeof buf);
    cr_assert_str_eq(buf, "33.0 MiB");
    tl_format_size(1023, buf, sizeof buf);
    cr_assert_str_eq(buf, "1023 B");
}
