/*
 * suppressions.c: parse a suppressions file and match its rules against
 * stacks. Format and semantics: suppressions.h. libc only (see there).
 */
#include "suppressions.h"
#include "terminal_safe.h"

#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const kind_names[TL_SUPP_KIND_COUNT] = {
    [TL_SUPP_LEAK] = "leak",
    [TL_SUPP_GROWTH] = "growth",
    [TL_SUPP_INVALID_FREE] = "invalid-free",
};

const char *tl_supp_kind_name(enum tl_supp_kind kind)
{
    if ((unsigned)kind >= TL_SUPP_KIND_COUNT)
        return NULL;
    return kind_names[kind];
}

static int is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

/* Error messages quote bytes of the file: control characters (terminal
 * escape sequences) are shown as '?', never written to a terminal. */
static void report(tl_supp_error_fn on_error, void *ctx, unsigned line, const char *reason)
{
    if (!on_error)
        return;
    char clean[160];
    tl_copy_terminal_safe(clean, sizeof clean, reason);
    on_error(ctx, line, clean);
}

/* Appends one rule; returns 0, or -1 when out of memory. */
static int add_rule(struct tl_suppressions *set, enum tl_supp_kind kind,
                    const char *pattern, size_t pattern_len, unsigned line)
{
    struct tl_supp_rule *rules = realloc(set->rules, (set->count + 1) * sizeof(*rules));
    if (!rules)
        return -1;
    set->rules = rules;
    char *copy = malloc(pattern_len + 1);
    if (!copy)
        return -1;
    memcpy(copy, pattern, pattern_len);
    copy[pattern_len] = '\0';
    rules[set->count].kind = kind;
    rules[set->count].pattern = copy;
    rules[set->count].line = line;
    set->count++;
    return 0;
}

/*
 * Parses one line [s, e) already known to be non-blank and not a comment.
 * Returns 1 when malformed (reported), 0 when added, -1 when out of memory.
 */
static int parse_rule(struct tl_suppressions *set, const char *s, const char *e,
                      unsigned line, tl_supp_error_fn on_error, void *ctx)
{
    char reason[160];
    if (memchr(s, '\0', (size_t)(e - s))) {
        report(on_error, ctx, line, "NUL byte in line");
        return 1;
    }
    const char *colon = memchr(s, ':', (size_t)(e - s));
    if (!colon) {
        report(on_error, ctx, line,
               "expected KIND:PATTERN with KIND one of leak, growth, invalid-free");
        return 1;
    }
    const char *kind_end = colon;
    while (kind_end > s && is_space(kind_end[-1]))
        kind_end--;
    size_t kind_len = (size_t)(kind_end - s);
    int kind = -1;
    for (int k = 0; k < TL_SUPP_KIND_COUNT; k++) {
        if (strlen(kind_names[k]) == kind_len && memcmp(kind_names[k], s, kind_len) == 0)
            kind = k;
    }
    if (kind < 0) {
        snprintf(reason, sizeof(reason),
                 "unknown suppression kind '%.*s' (expected leak, growth or invalid-free)",
                 kind_len > 40 ? 40 : (int)kind_len, s);
        report(on_error, ctx, line, reason);
        return 1;
    }
    const char *p = colon + 1;
    while (p < e && is_space(*p))
        p++;
    if (p == e) {
        snprintf(reason, sizeof(reason), "empty pattern after '%s:'", kind_names[kind]);
        report(on_error, ctx, line, reason);
        return 1;
    }
    return add_rule(set, (enum tl_supp_kind)kind, p, (size_t)(e - p), line) < 0 ? -1 : 0;
}

int tl_suppressions_parse(struct tl_suppressions *out, const char *buf, size_t len,
                          tl_supp_error_fn on_error, void *ctx)
{
    int errors = 0;
    unsigned line = 0;
    const char *end = buf + len;
    const char *s = buf;
    while (s < end) {
        const char *nl = memchr(s, '\n', (size_t)(end - s));
        const char *e = nl ? nl : end;
        const char *next = nl ? nl + 1 : end;
        line++;
        while (s < e && is_space(*s))
            s++;
        while (e > s && is_space(e[-1]))
            e--;
        if (s < e && *s != '#') {
            int rc = parse_rule(out, s, e, line, on_error, ctx);
            if (rc < 0)
                return -1;
            errors += rc;
        }
        s = next;
    }
    return errors;
}

void tl_suppressions_free(struct tl_suppressions *set)
{
    for (size_t i = 0; i < set->count; i++)
        free(set->rules[i].pattern);
    free(set->rules);
    set->rules = NULL;
    set->count = 0;
}

static const char *basename_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* A path field matches by its full text or by its last component. */
static int path_matches(const char *pattern, const char *path)
{
    if (!path || !*path)
        return 0;
    if (fnmatch(pattern, path, 0) == 0)
        return 1;
    const char *base = basename_of(path);
    return base != path && fnmatch(pattern, base, 0) == 0;
}

static int frame_matches(const char *pattern, const struct tl_supp_frame *f)
{
    if (f->function && *f->function && fnmatch(pattern, f->function, 0) == 0)
        return 1;
    return path_matches(pattern, f->module) || path_matches(pattern, f->file);
}

long tl_suppressions_match(const struct tl_suppressions *set, enum tl_supp_kind kind,
                           const struct tl_supp_frame *frames, size_t count)
{
    if (!set)
        return -1;
    for (size_t r = 0; r < set->count; r++) {
        if (set->rules[r].kind != kind)
            continue;
        for (size_t i = 0; i < count; i++) {
            if (frame_matches(set->rules[r].pattern, &frames[i]))
                return (long)r;
        }
    }
    return -1;
}
