/*
 * option_rules.c: the rules of the TENSORLEAK_* values that both the library
 * and `tensorleak run` check (option_rules.h).  libc only.
 */
#include "option_rules.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int tl_parse_int(const char *s, long min, long max, long *out)
{
    /* strtol would skip leading blanks and accept "+5": ask for digits. */
    if (!*s || !(isdigit((unsigned char)*s) || (*s == '-' && isdigit((unsigned char)s[1]))))
        return -1;
    errno = 0;
    char *end;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

static bool int_in(const char *v, long min, long max, int *out, char why[TL_OPTION_WHY], const char *unit)
{
    long n;
    if (tl_parse_int(v, min, max, &n) != 0) {
        snprintf(why, TL_OPTION_WHY, "expected %ld to %ld%s", min, max, unit);
        return false;
    }
    *out = (int)n;
    return true;
}

bool tl_option_depth(const char *v, int *out, char why[TL_OPTION_WHY])
{
    return int_in(v, 0, TL_MAX_DEPTH, out, why, " frames");
}

bool tl_option_exitcode(const char *v, int *out, char why[TL_OPTION_WHY])
{
    return int_in(v, 1, 255, out, why, "");
}

bool tl_option_fail_on(const char *v, unsigned *out, char why[TL_OPTION_WHY])
{
    static const struct { const char *word; unsigned bits; } kinds[] = {
        {"leak", TL_FAIL_LEAK}, {"growth", TL_FAIL_GROWTH}, {"invalid-free", TL_FAIL_INVALID_FREE},
        {"oom", TL_FAIL_OOM}, {"none", 0},
    };
    unsigned bits = 0;
    size_t items = 0;
    bool none = false;
    for (const char *p = v;; p++) {
        size_t len = strcspn(p, ",");
        size_t k = 0;
        while (k < sizeof kinds / sizeof kinds[0] && !(strlen(kinds[k].word) == len && strncmp(p, kinds[k].word, len) == 0))
            k++;
        if (k == sizeof kinds / sizeof kinds[0]) {
            snprintf(why, TL_OPTION_WHY,
                     "unknown kind '%.*s': expected a comma list of leak, growth, invalid-free, oom; or none",
                     (int)(len > 40 ? 40 : len), p);
            return false;
        }
        bits |= kinds[k].bits;
        none |= kinds[k].bits == 0;
        items++;
        p += len;
        if (!*p)
            break;
    }
    if (none && items > 1) {
        snprintf(why, TL_OPTION_WHY, "'none' cannot be combined with other kinds");
        return false;
    }
    *out = bits;
    return true;
}

int tl_parse_fail_on(const char *s, unsigned *out)
{
    char why[TL_OPTION_WHY];
    return tl_option_fail_on(s, out, why) ? 0 : -1;
}

bool tl_option_interval(const char *v, double *out, char why[TL_OPTION_WHY])
{
    char *end;
    errno = 0;
    double d = strtod(v, &end);
    /* !(d >= 0) also refuses NaN. */
    if (!*v || *end || errno || !(d >= 0.0) || d > 86400.0 * 365) {
        snprintf(why, TL_OPTION_WHY, "expected seconds, 0 (off) to 31536000");
        return false;
    }
    *out = d;
    return true;
}
