/*
 * dump_tables: the report model's tables (src/model/report_fields.c) as JSON,
 * {"TABLE": [{"name", "type", "required", "nullable", "nonneg", "gap", "live",
 * "table"}...]}, for schema_test.py to hold against docs/report.schema.json
 * and docs/live.schema.json; exit 1 when a table and its list of names in
 * report_fields.h disagree.
 */
#include "report_fields.h"

#include <stdio.h>

int main(void)
{
    char error[256];
    if (!report_fields_consistent(error, sizeof error)) {
        fprintf(stderr, "dump_tables: %s\n", error);
        return 1;
    }
    static const char *const types[] = {
        [TL_FIELD_U64] = "u64",       [TL_FIELD_INT] = "int",       [TL_FIELD_REAL] = "real",
        [TL_FIELD_BOOL] = "bool",     [TL_FIELD_STRING] = "string", [TL_FIELD_STRINGS] = "strings",
        [TL_FIELD_OBJECT] = "object", [TL_FIELD_LIST] = "list",     [TL_FIELD_HEX] = "hex",
    };
    const struct tl_table *tables[64];
    size_t n = report_tables(tables, 64);
    json_t *out = json_object();
    for (size_t i = 0; i < n; i++) {
        json_t *fields = json_array();
        for (size_t k = 0; k < tables[i]->nfields; k++) {
            const struct tl_field *f = &tables[i]->fields[k];
            json_array_append_new(fields, json_pack("{sssssbsbsbsbsbss?}", "name", f->name, "type", types[f->type],
                                                    "required", (f->flags & TL_FIELD_REQUIRED) != 0, "nullable",
                                                    (f->flags & TL_FIELD_NULLABLE) != 0, "nonneg",
                                                    (f->flags & TL_FIELD_NONNEG) != 0, "gap",
                                                    (f->flags & TL_FIELD_GAP) != 0, "live",
                                                    (f->flags & TL_FIELD_LIVE) != 0, "table",
                                                    f->table ? f->table->name : NULL));
        }
        json_object_set_new(out, tables[i]->name, fields);
    }
    json_dumpf(out, stdout, JSON_INDENT(1));
    putchar('\n');
    json_decref(out);
    return 0;
}
