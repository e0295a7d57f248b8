/* The live file as the model's writer writes it (live_to_json,
 * src/model/live_fields.c) and as the readers read it (live_parse,
 * src/model/live_read.c).  live_file.json is a file the library wrote
 * (live_server twodev under owner rules and budgets, with a leaky server's
 * growth row, the pool server's pool, a framework pool and an IPC mapping
 * spliced in): read and written again it must come back byte for byte,
 * which is what `tensorleak top --json` prints of each process. */
#include "live_read.h"
#include "report_fields.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    cr_assert(f, "%s", path);
    char *text = calloc(1, 1 << 16);
    size_t n = fread(text, 1, (1 << 16) - 1, f);
    fclose(f);
    cr_assert(n > 0 && n < (1 << 16) - 1);
    return text;
}

/* `text` read as a live file and written again, as the library writes it. */
static char *rewritten(const char *text)
{
    struct live_proc p;
    char why[160] = "";
    cr_assert_eq(live_parse(text, strlen(text), &p, why, sizeof why), 0, "%s", why);
    json_t *doc = live_to_json(&p.model, &p.doc);
    cr_assert(doc);
    char *out = json_dumps(doc, JSON_COMPACT | JSON_ENSURE_ASCII);
    json_decref(doc);
    live_proc_free(&p);
    return out;
}

/* `text` without its first occurrence of `cut`. */
static char *without(const char *text, const char *cut)
{
    const char *at = strstr(text, cut);
    cr_assert(at, "%s", cut);
    char *out = malloc(strlen(text) + 1);
    size_t head = (size_t)(at - text);
    memcpy(out, text, head);
    strcpy(out + head, at + strlen(cut));
    return out;
}

Test(live_doc, a_live_file_read_and_written_again_is_the_same_text)
{
    char *text = slurp(LIVE_FILE);
    char *again = rewritten(text);
    cr_assert_str_eq(again, text);
    free(again);
    free(text);
}

Test(live_doc, a_figure_of_the_wrong_type_is_left_out_and_the_rest_kept)
{
    char *text = slurp(LIVE_FILE);
    const char *good = "\"reserved_bytes\":10485760,";
    char *want = without(text, good);
    /* The summary's reserved bytes as a string: unknown, not 0. */
    char *hostile = malloc(strlen(text) + 32);
    const char *at = strstr(text, good);
    sprintf(hostile, "%.*s\"reserved_bytes\":\"lots\",%s", (int)(at - text), text, at + strlen(good));
    char *again = rewritten(hostile);
    cr_assert_str_eq(again, want);
    free(again);
    free(hostile);
    free(want);
    free(text);
}

Test(live_doc, the_live_files_own_fields_follow_the_reports_and_a_growth_rows_follow_its_row)
{
    struct tl_growth g = {.scope = "call_site", .bytes_per_mark = 4096,
                          .seen.present = TL_BIT(GROWTH, scope) | TL_BIT(GROWTH, bytes_per_mark)};
    struct tl_report r = {.pid = 7, .growth = &g, .growth_count = 1, .seen.present = TL_BIT(REPORT, pid)};
    struct live_growth_line line = {.site = "f a.c:3", .since_mark = 1, .seen.present = LIVE_ALL(LINE)};
    struct live_doc d = {
        .kind = "live",
        .marks = {2, .seen.present = LIVE_ALL(MARKS),
                  .seen.null = LIVE_BIT(MARKS, last_label) | LIVE_BIT(MARKS, last_time)},
        .growth = &line,
        .ngrowth = 1,
        .classes = {.bytes[LIVE_CLASS_CACHE] = 5, .seen.present = 1ull << LIVE_CLASS_CACHE},
        .ipc = {.seen.present = LIVE_ALL(IPC)},
        .live = {.process = "p", .interval = 0.5,
                 .seen.present = LIVE_BIT(STATE, process) | LIVE_BIT(STATE, interval)},
        .seen.present = LIVE_ALL(DOC) & ~LIVE_BIT(DOC, budgets),
    };
    json_t *doc = live_to_json(&r, &d);
    char *text = json_dumps(doc, JSON_COMPACT);
    cr_assert_str_eq(text, "{\"pid\":7,\"kind\":\"live\",\"marks\":{\"count\":2,\"last_label\":null,\"last_time\":null},"
                           "\"growth\":[{\"scope\":\"call_site\",\"bytes_per_mark\":4096,\"site\":\"f a.c:3\","
                           "\"since_mark\":1}],\"owner_classes\":{\"cache\":5},\"ipc\":{\"devices\":[]},"
                           "\"live\":{\"process\":\"p\",\"interval\":0.5}}");
    free(text);
    json_decref(doc);
}
