/*
 * dump_live_tables: the tables of what only the live file has, which the
 * publisher writes it with and the readers read it with
 * (src/model/live_fields.c), as JSON: {"TABLE": [{"name", "type"}...]}, for
 * schema_test.py to hold against docs/live.schema.json.
 */
#include "live_model.h"

#include <stdio.h>

int main(void)
{
    static const char *const types[] = {
        [TL_FIELD_U64] = "u64",       [TL_FIELD_INT] = "int",       [TL_FIELD_REAL] = "real",
        [TL_FIELD_BOOL] = "bool",     [TL_FIELD_STRING] = "string", [TL_FIELD_STRINGS] = "strings",
        [TL_FIELD_OBJECT] = "object", [TL_FIELD_LIST] = "list",     [TL_FIELD_HEX] = "hex",
    };
    const struct tl_table *const tables[] = {&live_state_table,   &live_marks_table, &live_growth_line_table,
                                             &live_classes_table, &live_ipc_table,   &live_budget_table};
    json_t *out = json_object();
    for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++) {
        json_t *fields = json_array();
        for (size_t k = 0; k < tables[i]->nfields; k++)
            json_array_append_new(fields, json_pack("{ssss}", "name", tables[i]->fields[k].name, "type",
                                                    types[tables[i]->fields[k].type]));
        json_object_set_new(out, tables[i]->name, fields);
    }
    json_dumpf(out, stdout, JSON_INDENT(1));
    putchar('\n');
    json_decref(out);
    return 0;
}
