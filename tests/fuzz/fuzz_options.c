/*
 * fuzz_options.c — libFuzzer target for the option parsers of src/base/options.c
 * (tl_parse_bool/size/int/fail_on/signal), TENSORLEAK_OUTPUT's pattern
 * expansion (tl_expand_pattern, src/base/report_name.c) and tl_options_load over an
 * environment made from the input.  The first byte picks the parser.
 */
#include "tl_internal.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    unsigned which = data[0];
    char *s = malloc(size);
    if (!s)
        return 0;
    memcpy(s, data + 1, size - 1);
    s[size - 1] = 0;
    bool b;
    uint64_t u;
    long l;
    unsigned bits;
    int sig;
    switch (which % 7) {
    case 0: tl_parse_bool(s, &b); break;
    case 1: tl_parse_size(s, &u); break;
    case 2:
        if (tl_parse_int(s, -5, 300, &l) == 0 && (l < -5 || l > 300))
            abort();
        break;
    case 3:
        if (tl_parse_fail_on(s, &bits) == 0 && (bits & ~0xfu))
            abort();
        break;
    case 4:
        if (tl_parse_signal(s, &sig) == 0 && (sig < 0 || sig > SIGRTMAX || sig == SIGKILL || sig == SIGSEGV))
            abort();
        break;
    case 5: {
        char out[64];
        size_t cap = 1 + (which >> 3) % sizeof out;
        if (tl_expand_pattern(s, which, out, cap) == 0 && strlen(out) >= cap)
            abort();
        break;
    }
    default: {
        /* NUL-separated "NAME=value" entries become the environment. */
        char *env[16];
        size_t n = 0;
        for (char *p = s; p < s + size - 1 && n < 15; p += strlen(p) + 1)
            env[n++] = p;
        env[n] = NULL;
        tl_options_load(env);
        if (tl_opt.depth < 0 || tl_opt.depth > TL_MAX_DEPTH || tl_opt.exitcode < 1 || tl_opt.exitcode > 255 ||
            memchr(tl_opt.output, 0, sizeof tl_opt.output) == NULL || !tl_opt.output[0])
            abort();
        break;
    }
    }
    free(s);
    return 0;
}

