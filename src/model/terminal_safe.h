/*
 * terminal_safe.h: text from outside (report fields, live files, the
 * environment, suppression files) as it may reach a terminal.  A terminal
 * acts on control characters instead of showing them (ESC starts CSI and
 * OSC sequences that move the cursor, retitle the window or write the
 * clipboard; BEL rings), so every text output of the CLI and every warning
 * of the library shows each one as '?'.  Text without control characters is
 * passed through byte for byte.
 *
 * Header-only (libc only) because the preload library, the CLI and the
 * test and fuzz programs each compile their own subset of the sources.
 */
#ifndef TENSORLEAK_TERMINAL_SAFE_H
#define TENSORLEAK_TERMINAL_SAFE_H

#include <stddef.h>
#include <stdio.h>

/*
 * How many bytes at s make one control character: 1 for C0 (0x00-0x1f, tab
 * and newline included: a field must not forge lines) and DEL, 2 for a C1
 * control in UTF-8 (U+0080-U+009F: 0xc2 0x80-0x9f, which terminals such as
 * xterm read as CSI, OSC, ST...); 0 for anything else.  s[0] must not be
 * the terminating NUL.
 */
static inline size_t tl_control_len(const char *s)
{
    const unsigned char *u = (const unsigned char *)s;
    if (u[0] < 0x20 || u[0] == 0x7f)
        return 1;
    if (u[0] == 0xc2 && u[1] >= 0x80 && u[1] <= 0x9f)
        return 2;
    return 0;
}

/* Writes s to out with each control character as '?'. */
static inline void tl_put_terminal_safe(FILE *out, const char *s)
{
    while (*s) {
        size_t n = tl_control_len(s);
        fputc(n ? '?' : *s, out);
        s += n ? n : 1;
    }
}

/* Copies s into out (len > 0 bytes, NUL-terminated, cut to fit) with each
 * control character as '?'; out may be s itself (the text only shrinks).
 * Returns the length written. */
static inline size_t tl_copy_terminal_safe(char *out, size_t len, const char *s)
{
    size_t o = 0;
    while (*s && o + 1 < len) {
        size_t n = tl_control_len(s);
        out[o++] = n ? '?' : *s;
        s += n ? n : 1;
    }
    out[o] = 0;
    return o;
}

#endif
