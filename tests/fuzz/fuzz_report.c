/*
 * fuzz_report.c — libFuzzer target for the CLI's report reader
 * (src/model/report_read.c, jansson) and the formatters that walk what it
 * accepts (text, folded).  The input is handed over as a file, as the CLI
 * reads it.
 */
#include "cli.h"
#include "model.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

/* main.c's error printer, without the rest of main.c. */
void cli_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char buf[512];
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int fd = -1;
    static char path[64];
    if (fd < 0) {
        fd = memfd_create("report", 0);
        if (fd < 0)
            abort();
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != (ssize_t)size)
        abort();
    struct tl_report r;
    if (report_load(path, &r)) {
        FILE *out = fopen("/dev/null", "w");
        if (out) {
            format_text(out, &r, "fuzz.json");
            format_folded(out, &r);
            fclose(out);
        }
        report_free(&r);
    }
    return 0;
}
