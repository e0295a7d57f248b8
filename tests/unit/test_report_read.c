/*
 * test_report_read.c — report_read_fields() (src/model/report_read.c): the
 * model's reader on an object some of whose fields are not the model's to
 * read (a framework's pool object, src/families/bridge.c), field by field
 * from the table as report_from_json reads them.
 */
#include "report_fields.h"

#include <criterion/criterion.h>

Test(report_read, only_the_fields_asked_for_are_read_and_a_refused_one_is_left_out)
{
    json_t *pool = json_loads("{\"name\": \"cupy pinned\", \"device\": -1, \"segments\": 2, \"reserved_bytes\": null,"
                              " \"allocated_bytes\": 5, \"free_blocks\": -3, \"framework\": {\"name\": \"cupy\","
                              " \"version\": null, \"mode\": \"pinned_pool\"}}",
                              0, NULL);
    cr_assert(pool);
    struct tl_report mem = {0};
    struct tl_pool o = {.name = "kept", .segments = 9, .free_blocks = 4};
    const struct tl_table *t = report_field_table(&tl_report_table, "pools");
    char error[160];
    uint64_t asked = TL_BIT(POOL, reserved_bytes) | TL_BIT(POOL, allocated_bytes) | TL_BIT(POOL, free_bytes) |
                     TL_BIT(POOL, framework) | TL_BIT(POOL, free_blocks);
    cr_assert_not(report_read_fields(&mem, pool, t, asked, &o, error, sizeof error));
    cr_assert_str_eq(error, "pool.free_blocks: expected a non-negative integer");
    /* Asked and given: read, a null marked null; free_bytes asked but not
     * given, free_blocks refused: as they were, not seen. */
    cr_assert_eq(o.seen.present, TL_BIT(POOL, reserved_bytes) | TL_BIT(POOL, allocated_bytes) | TL_BIT(POOL, framework));
    cr_assert_eq(o.seen.null, TL_BIT(POOL, reserved_bytes));
    cr_assert_eq(o.allocated_bytes, 5);
    cr_assert_eq(o.free_blocks, 4);
    cr_assert_str_eq(o.framework.name, "cupy");
    cr_assert_str_eq(o.framework.mode, "pinned_pool");
    cr_assert(tl_seen_null(&o.framework.seen, TL_F_FRAMEWORK_version));
    /* Given but not asked: not read. */
    cr_assert_str_eq(o.name, "kept");
    cr_assert_eq(o.segments, 9);
    cr_assert_eq(o.device, 0);
    report_arena_free(&mem);
    json_decref(pool);
}
