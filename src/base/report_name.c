/*
 * report_name.c — the names TENSORLEAK_OUTPUT gives report files: its
 * pattern expanded (%p %h %r %n %%), the number a report other than the
 * exit report carries, and whether the name is the null device (no reports
 * at all).  Pure names: options.c checks a pattern with them at start,
 * report_file.c (publish/) writes under them.
 */
#include "tl_internal.h"

#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

bool tl_is_null_device(const char *path)
{
    struct stat st;
    /* Linux's null device is character device 1:3 under any name. */
    return stat(path, &st) == 0 && S_ISCHR(st.st_mode) && major(st.st_rdev) == 1 && minor(st.st_rdev) == 3;
}

/* The rank as it goes into a file name: a character other than a letter, a
 * digit, '-' or '_' becomes '_' (a '/' or ".." would put the report in
 * another directory, a newline into the name), with one warning when
 * `warn`.  Rank variables hold small integers; a launcher that sets more is
 * told once. */
static void rank_for_path(const char *rank, char *out, size_t len, bool warn)
{
    static atomic_bool once;
    bool changed = false;
    size_t i = 0;
    for (; rank[i] && i + 1 < len; i++) {
        unsigned char c = (unsigned char)rank[i];
        bool ok = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-' || c == '_';
        out[i] = ok ? (char)c : '_';
        changed |= !ok;
    }
    out[i] = 0;
    changed |= rank[i] != 0;
    if (changed && warn)
        tl_warn(&once, "the rank (RANK, OMPI_COMM_WORLD_RANK, PMI_RANK or SLURM_PROCID) holds characters other than "
                       "letters, digits, '-' and '_', or is too long for a file name; %%r in report names is '%s'", out);
}

static int expand(const char *pattern, unsigned seq, char *out, size_t outlen, bool warn)
{
    size_t o = 0;
    char tmp[HOST_NAME_MAX + 32];
    for (const char *p = pattern; *p; p++) {
        const char *piece = tmp;
        if (*p != '%') {
            tmp[0] = *p;
            tmp[1] = 0;
        } else {
            switch (*++p) {
            case 'p': snprintf(tmp, sizeof tmp, "%d", (int)getpid()); break;
            case 'h':
                if (gethostname(tmp, sizeof tmp - 1) != 0)
                    strcpy(tmp, "unknown");
                tmp[sizeof tmp - 1] = 0;
                break;
            case 'r': {
                const char *r = tl_options_rank();
                rank_for_path(r ? r : "0", tmp, sizeof tmp, warn);
                break;
            }
            case 'n': snprintf(tmp, sizeof tmp, "%u", seq); break;
            case '%': strcpy(tmp, "%"); break;
            default: return -1;
            }
        }
        size_t len = strlen(piece);
        if (o + len >= outlen)
            return -1;
        memcpy(out + o, piece, len);
        o += len;
    }
    out[o] = 0;
    return 0;
}

int tl_expand_pattern(const char *pattern, unsigned seq, char *out, size_t outlen)
{
    return expand(pattern, seq, out, outlen, false);
}

int tl_report_path(const char *pattern, unsigned seq, bool numbered, char *out, size_t outlen)
{
    if (expand(pattern, seq, out, outlen, true) != 0)
        return -1;
    if (!numbered)
        return 0;
    bool has_n = false;
    for (const char *p = pattern; *p; p++)
        if (*p == '%' && p[1]) {
            has_n |= p[1] == 'n';
            p++;
        }
    if (has_n)
        return 0; /* the pattern numbers its files itself */
    char num[16];
    int nl = snprintf(num, sizeof num, ".%u", seq);
    size_t len = strlen(out);
    size_t at = len;
    static const char ext[] = ".json";
    const char *base = strrchr(out, '/');
    base = base ? base + 1 : out;
    if (len - (size_t)(base - out) > sizeof ext - 1 && strcmp(out + len - (sizeof ext - 1), ext) == 0)
        at = len - (sizeof ext - 1);
    if (len + (size_t)nl >= outlen)
        return -1;
    memmove(out + at + nl, out + at, len - at + 1);
    memcpy(out + at, num, (size_t)nl);
    return 0;
}
