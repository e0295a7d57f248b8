/*
 * suppress.c — TENSORLEAK_SUPPRESSIONS in the preload library.
 *
 * The parser and matcher are the CLI's (src/model/suppressions.c, libc only), so
 * the library and `tensorleak check` can never disagree on a rule.  The
 * file is read once at start; a malformed line is reported with its file and
 * line number and skipped (the CLI refuses the file instead: a library must
 * not stop the program).  Matching runs at report time on symbolized frames.
 */
#include "report_gather.h"
#include "suppressions.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static struct tl_suppressions rules;
static char **rule_names; /* "leak:pattern", for the report */

/* At most this many malformed lines are named; the rest are counted, so a
 * wrong file (a JSON report, say) costs a few lines of stderr, not hundreds. */
#define MAX_NAMED_ERRORS 5
static unsigned nerrors;

static void on_error(void *ctx, unsigned line, const char *reason)
{
    if (++nerrors <= MAX_NAMED_ERRORS)
        tl_warn(NULL, "%s:%u: %s; line ignored", (const char *)ctx, line, reason);
}

void tl_suppressions_load(void)
{
    /* A later attach's file replaces the earlier attach's rules. */
    if (rule_names) {
        for (size_t i = 0; i < rules.count; i++)
            free(rule_names[i]);
        free(rule_names);
        rule_names = NULL;
    }
    tl_suppressions_free(&rules);
    if (!tl_opt.suppressions[0])
        return;
    const char *path = tl_opt.suppressions;
    FILE *f = tl_options_open_file("TENSORLEAK_SUPPRESSIONS", path, "no suppressions");
    if (!f)
        return;
    char *buf = NULL;
    size_t len = 0, cap = 0;
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (len + n > cap) {
            size_t ncap = (len + n) * 2;
            if (ncap > (64u << 20)) {
                tl_warn(NULL, "suppressions file %s is larger than 64 MiB; no suppressions", path);
                free(buf);
                fclose(f);
                return;
            }
            char *nb = realloc(buf, ncap);
            if (!nb) {
                free(buf);
                fclose(f);
                tl_warn(NULL, "out of memory reading %s; no suppressions", path);
                return;
            }
            buf = nb;
            cap = ncap;
        }
        memcpy(buf + len, chunk, n);
        len += n;
    }
    fclose(f);
    nerrors = 0;
    if (tl_suppressions_parse(&rules, buf ? buf : "", len, on_error, (void *)path) < 0)
        tl_warn(NULL, "out of memory parsing %s; some suppressions are missing", path);
    if (nerrors > MAX_NAMED_ERRORS)
        tl_warn(NULL, "%s: %u more malformed line(s) ignored", path, nerrors - MAX_NAMED_ERRORS);
    free(buf);
    rule_names = calloc(rules.count + 1, sizeof *rule_names);
    for (size_t i = 0; rule_names && i < rules.count; i++) {
        const char *kind = tl_supp_kind_name(rules.rules[i].kind);
        size_t sz = strlen(kind) + strlen(rules.rules[i].pattern) + 2;
        rule_names[i] = malloc(sz);
        if (rule_names[i])
            snprintf(rule_names[i], sz, "%s:%s", kind, rules.rules[i].pattern);
    }
}

const char *tl_suppressed(struct tl_gather *m, const char *kind, struct tl_callsite *cs)
{
    if (!rules.count || !cs)
        return NULL;
    enum tl_supp_kind k = !strcmp(kind, "leak") ? TL_SUPP_LEAK : !strcmp(kind, "growth") ? TL_SUPP_GROWTH : TL_SUPP_INVALID_FREE;
    /* Inlined callees are frames too: a rule may name one.  Up to 9 names a
     * frame, 256 frames: on the heap, not on a thread's stack. */
    struct tl_supp_frame *frames = malloc((size_t)cs->nframes * (TL_MAX_INLINE + 1) * sizeof *frames);
    if (!frames && cs->nframes) {
        tl_note_dropped("out of memory matching suppressions (a stack is reported unsuppressed)");
        return NULL;
    }
    size_t nf = 0;
    for (int i = 0; i < cs->nframes; i++) {
        const struct tl_frame_info *f = tl_report_frame(m, cs->frames[i]);
        struct tl_inline_frame shown[TL_MAX_INLINE + 1];
        int k2 = tl_frame_expand(f, shown);
        for (int j = 0; j < k2; j++)
            frames[nf++] = (struct tl_supp_frame){shown[j].function, f->module, shown[j].file};
    }
    long r = tl_suppressions_match(&rules, k, frames, nf);
    free(frames);
    if (r < 0)
        return NULL;
    return rule_names && rule_names[r] ? rule_names[r] : "suppressed";
}
