/*
 * log.c — the one logger: "tensorleak: " lines on stderr, written with a
 * single write(2) so lines from threads never interleave, and rate-limited
 * per call site by a caller-owned flag.
 */
#include "tl_internal.h"
#include "terminal_safe.h"

#include <stdarg.h>
#include <string.h>
#include <unistd.h>

atomic_ulong tl_dropped_events;

void tl_warn(atomic_bool *once, const char *fmt, ...)
{
    if (once && atomic_exchange_explicit(once, true, memory_order_relaxed))
        return;
    char line[1024];
    int n = snprintf(line, sizeof line, "tensorleak: ");
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (m < 0)
        return;
    /* Messages quote environment values and file contents. */
    size_t len = (size_t)n + tl_copy_terminal_safe(line + n, sizeof line - (size_t)n - 1, line + n);
    line[len++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, len);
    (void)w;
}

void tl_note_dropped(const char *why)
{
    static atomic_bool warned;
    atomic_fetch_add_explicit(&tl_dropped_events, 1, memory_order_relaxed);
    tl_warn(&warned, "%s; some events are not tracked (counted as dropped_events in the report)", why);
}
