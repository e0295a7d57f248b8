/*
 * report_write.c: the report model's tables, and JSON written from them.
 * The preload library writes its summary with report_summary_to_json, so a
 * field of TL_SUMMARY_FIELDS (report.h) is written, read and merged the
 * same way everywhere.
 */
#include "report.h"

#include <stdint.h>

#define TL_SUMMARY_FLAG_0 0
#define TL_SUMMARY_INFO(name, type, flags, merge)                                                            \
    [TL_SUMMARY_##name] = {#name, TL_SUMMARY_TYPE_##type, TL_SUMMARY_FLAG_##flags, TL_SUMMARY_MERGE_##merge, \
                           offsetof(struct tl_summary, name)},
const struct tl_summary_field_info tl_summary_fields[TL_SUMMARY_NFIELDS] = {TL_SUMMARY_FIELDS(TL_SUMMARY_INFO)};
#undef TL_SUMMARY_INFO

_Static_assert(TL_SUMMARY_NFIELDS <= 64, "tl_summary.present and .null hold a bit a field");

json_t *report_summary_to_json(const struct tl_summary *s)
{
    json_t *o = json_object();
    if (!o)
        return NULL;
    for (size_t i = 0; i < TL_SUMMARY_NFIELDS; i++) {
        const struct tl_summary_field_info *f = &tl_summary_fields[i];
        if (!(s->present >> i & 1))
            continue;
        const char *at = (const char *)s + f->offset;
        json_t *v;
        if (s->null >> i & 1)
            v = json_null();
        else if (f->type == TL_SUMMARY_TYPE_REAL)
            v = json_real(*(const double *)at);
        else /* jansson's integers are signed: a sum past INT64_MAX saturates */
            v = json_integer(*(const uint64_t *)at > (uint64_t)INT64_MAX ? INT64_MAX : (json_int_t) * (const uint64_t *)at);
        if (json_object_set_new(o, f->name, v) != 0) {
            json_decref(o);
            return NULL;
        }
    }
    return o;
}
