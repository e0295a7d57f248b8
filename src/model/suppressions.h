/*
 * suppressions.h: the LeakSanitizer-style suppressions file of SPEC.md.
 *
 * One rule a line: `leak:PATTERN`, `growth:PATTERN` or `invalid-free:PATTERN`;
 * `#` starts a comment line; blank lines are ignored; whitespace around the
 * line and around the pattern is trimmed; CRLF line ends are accepted.
 * PATTERN is an fnmatch(3) glob (`*`, `?`, `[...]`; `*` also crosses `/`)
 * matched against each frame's function, module (full path and basename) and
 * source file (full path and basename). A rule matches a stack when it
 * matches any frame of it.
 *
 * Depends on libc only: the CLI (tools/) and the preload library (src/)
 * compile this same file. Nothing here is thread-safe against concurrent
 * parse/free of the same set; matching a parsed set from many threads is.
 */
#ifndef TENSORLEAK_SUPPRESSIONS_H
#define TENSORLEAK_SUPPRESSIONS_H

#include <stddef.h>

enum tl_supp_kind {
    TL_SUPP_LEAK,
    TL_SUPP_GROWTH,
    TL_SUPP_INVALID_FREE,
    TL_SUPP_KIND_COUNT
};

struct tl_supp_rule {
    enum tl_supp_kind kind;
    char *pattern;          /* NUL-terminated, trimmed, never empty */
    unsigned line;          /* 1-based line in the source buffer */
};

struct tl_suppressions {
    struct tl_supp_rule *rules;
    size_t count;
};

/* One frame as the matcher sees it; any field may be NULL (unknown). */
struct tl_supp_frame {
    const char *function;
    const char *module;
    const char *file;
};

/* Called once per malformed line with its 1-based number and a reason. */
typedef void (*tl_supp_error_fn)(void *ctx, unsigned line, const char *reason);

/*
 * Parses `len` bytes of `buf` (need not be NUL-terminated) into `out`, which
 * the caller zero-initialises (or which holds an earlier set: rules append).
 * Malformed lines are reported through `on_error` (may be NULL) and skipped;
 * the well-formed rules are kept. Returns the number of malformed lines, or
 * -1 when memory ran out (then `out` holds the rules parsed so far).
 */
int tl_suppressions_parse(struct tl_suppressions *out, const char *buf, size_t len,
                          tl_supp_error_fn on_error, void *ctx);

/* Frees the rules and zeroes `set`. Safe on a zeroed set. */
void tl_suppressions_free(struct tl_suppressions *set);

/*
 * Returns the index of the first rule of `kind` matching any of the `count`
 * frames, or -1 when none matches (or the set is empty).
 */
long tl_suppressions_match(const struct tl_suppressions *set, enum tl_supp_kind kind,
                           const struct tl_supp_frame *frames, size_t count);

/* "leak", "growth", "invalid-free"; NULL for an out-of-range kind. */
const char *tl_supp_kind_name(enum tl_supp_kind kind);

#endif
