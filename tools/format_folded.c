/*
 * format_folded.c: collapsed stacks ("folded") for flame graphs: one line per
 * non-suppressed leak site, `outer;...;inner BYTES`, the format
 * flamegraph.pl, inferno and speedscope read. Frames are the function name,
 * or `module+offset` when it is unknown; `;` and control characters inside a
 * name are replaced so that they cannot split a frame or a line.  An
 * imported VMM handle's stack ends in a `[imported vmm_handle]` frame: its
 * bytes may be another process's allocation too (docs/report-format.md).
 */
#include "cli.h"
#include "model.h"
#include "terminal_safe.h"

#include <inttypes.h>

static void put_clean(FILE *out, const char *s)
{
    while (*s) {
        size_t n = tl_control_len(s);
        fputc(n ? '?' : *s == ';' ? ':' : *s, out);
        s += n ? n : 1;
    }
}

static void put_frame(FILE *out, const struct tl_frame *f)
{
    if (f->function && *f->function) {
        put_clean(out, f->function);
    } else if (f->module && *f->module) {
        put_clean(out, report_basename(f->module));
        if (f->offset && *f->offset) {
            fputc('+', out);
            put_clean(out, f->offset);
        }
    } else if (f->address && *f->address) {
        put_clean(out, f->address);
    } else {
        fputs("[unknown]", out);
    }
}

void format_folded(FILE *out, const struct tl_report *r)
{
    for (size_t i = 0; i < r->leak_count; i++) {
        const struct tl_leak *l = &r->leaks[i];
        if (l->suppressed || l->bytes == 0)
            continue;
        if (l->stack.count == 0)
            fputs("[unknown]", out);
        for (size_t j = l->stack.count; j-- > 0;) {
            put_frame(out, &l->stack.frames[j]);
            if (j > 0)
                fputc(';', out);
        }
        if (l->imported)
            fputs(";[imported vmm_handle]", out);
        fprintf(out, " %" PRIu64 "\n", l->bytes);
    }
}
