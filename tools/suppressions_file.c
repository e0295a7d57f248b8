/*
 * suppressions_file.c: the CLI's glue around suppressions.c: read a rules
 * file whole, print each malformed line as FILE:LINE, and match rules
 * against report stacks.
 */
#include "cli.h"
#include "model.h"
#include "suppressions.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct file_ctx {
    const char *path;
};

static void print_line_error(void *ctx, unsigned line, const char *reason)
{
    const struct file_ctx *fc = ctx;
    cli_error("%s:%u: %s", fc->path, line, reason);
}

bool suppressions_load_file(const char *path, struct tl_suppressions *out)
{
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        cli_error("%s: cannot open suppressions file: %s", path, strerror(errno));
        return false;
    }
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    bool ok = buf != NULL;
    while (ok) {
        if (len == cap) {
            char *bigger = cap < (1u << 30) ? realloc(buf, cap * 2) : NULL;
            if (!bigger) {
                cli_error("%s: suppressions file too large", path);
                ok = false;
                break;
            }
            buf = bigger;
            cap *= 2;
        }
        size_t n = fread(buf + len, 1, cap - len, fp);
        len += n;
        if (n == 0) {
            if (ferror(fp)) {
                cli_error("%s: cannot read suppressions file: %s", path, strerror(errno));
                ok = false;
            }
            break;
        }
    }
    fclose(fp);
    if (ok) {
        struct file_ctx ctx = { path };
        int errors = tl_suppressions_parse(out, buf, len, print_line_error, &ctx);
        if (errors < 0)
            cli_error("%s: out of memory", path);
        ok = errors == 0;
    }
    free(buf);
    if (!ok)
        tl_suppressions_free(out);
    return ok;
}

long suppressions_match_stack(const struct tl_suppressions *set, enum tl_supp_kind kind,
                              const struct tl_stack *stack)
{
    if (!set || set->count == 0 || stack->count == 0)
        return -1;
    struct tl_supp_frame *frames = calloc(stack->count, sizeof(*frames));
    if (!frames)
        return -1;
    for (size_t i = 0; i < stack->count; i++) {
        frames[i].function = stack->frames[i].function;
        frames[i].module = stack->frames[i].module;
        frames[i].file = stack->frames[i].file;
    }
    long rule = tl_suppressions_match(set, kind, frames, stack->count);
    free(frames);
    return rule;
}
