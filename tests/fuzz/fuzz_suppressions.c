/*
 * fuzz_suppressions.c — libFuzzer target for the suppressions parser shared
 * by the CLI and the preload library (src/model/suppressions.c): parse any bytes,
 * then match every parsed rule against frames made of the input itself.
 */
#include "suppressions.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void on_error(void *ctx, unsigned line, const char *reason)
{
    (void)line;
    *(size_t *)ctx += strlen(reason);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct tl_suppressions set = {0};
    size_t errs = 0;
    int rc = tl_suppressions_parse(&set, (const char *)data, size, on_error, &errs);
    if (rc < -1)
        abort();
    /* Frames from the input: a glob must never crash on any subject. */
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = 0;
    size_t half = size / 2;
    char *second = text + half;
    struct tl_supp_frame frames[3] = {
        {.function = text, .module = "/usr/lib/libcuda.so.1", .file = NULL},
        {.function = NULL, .module = second, .file = "src/a.c"},
        {.function = "main", .module = NULL, .file = text},
    };
    for (int k = 0; k < TL_SUPP_KIND_COUNT; k++) {
        long i = tl_suppressions_match(&set, (enum tl_supp_kind)k, frames, 3);
        if (i < -1 || i >= (long)set.count)
            abort();
        if (i >= 0 && set.rules[i].kind != (enum tl_supp_kind)k)
            abort();
    }
    for (size_t i = 0; i < set.count; i++)
        if (!set.rules[i].pattern[0] || set.rules[i].line == 0)
            abort(); /* documented: never empty, 1-based */
    free(text);
    tl_suppressions_free(&set);
    return 0;
}
