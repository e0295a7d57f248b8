/*
 * sizes.c: see sizes.h.
 */
#include "sizes.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>

bool size_parse(const char *text, uint64_t *out)
{
    const char *p = text;
    uint64_t value = 0;
    if (!isdigit((unsigned char)*p))
        return false;
    while (isdigit((unsigned char)*p)) {
        unsigned digit = (unsigned)(*p - '0');
        if (value > (UINT64_MAX - digit) / 10)
            return false;
        value = value * 10 + digit;
        p++;
    }
    unsigned shift = 0;
    switch (*p) {
    case 'k': case 'K': shift = 10; break;
    case 'm': case 'M': shift = 20; break;
    case 'g': case 'G': shift = 30; break;
    case 't': case 'T': shift = 40; break;
    case '\0': break;
    default: return false;
    }
    if (shift) {
        p++;
        if (*p && strcasecmp(p, "iB") != 0 && strcasecmp(p, "B") != 0)
            return false;
        if (value > (UINT64_MAX >> shift))
            return false;
        value <<= shift;
    }
    *out = value;
    return true;
}

static void human_magnitude(uint64_t bytes, char *buf, size_t len, const char *sign)
{
    static const char *const units[] = { "KiB", "MiB", "GiB", "TiB" };
    if (bytes > (uint64_t)INT64_MAX) {
        /* A negative byte count cast to unsigned: never a size to print
         * (it would show as "16777216.0 TiB"). */
        snprintf(buf, len, "unknown");
        return;
    }
    if (bytes < 1024) {
        snprintf(buf, len, "%s%" PRIu64 " B", sign, bytes);
        return;
    }
    double value = (double)bytes / 1024.0;
    size_t unit = 0;
    while (value >= 1024.0 && unit + 1 < sizeof(units) / sizeof(units[0])) {
        value /= 1024.0;
        unit++;
    }
    snprintf(buf, len, "%s%.1f %s", sign, value, units[unit]);
}

const char *size_human(uint64_t bytes, char buf[SIZE_HUMAN_MAX])
{
    human_magnitude(bytes, buf, SIZE_HUMAN_MAX, "");
    return buf;
}

const char *size_human_signed(int64_t bytes, char buf[SIZE_HUMAN_MAX])
{
    uint64_t magnitude = bytes < 0 ? (uint64_t)0 - (uint64_t)bytes : (uint64_t)bytes;
    human_magnitude(magnitude, buf, SIZE_HUMAN_MAX, bytes < 0 ? "-" : "+");
    return buf;
}

void tl_format_size(uint64_t bytes, char *buf, size_t len)
{
    human_magnitude(bytes, buf, len, "");
}

void tl_format_realtime(double t, char *buf, size_t len)
{
    time_t secs = (time_t)t;
    struct tm tm;
    char when[40];
    gmtime_r(&secs, &tm);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf, len, "%s.%03dZ", when, (int)((t - (double)secs) * 1000.0) % 1000);
}
