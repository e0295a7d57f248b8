/*
 * fuzz_live.c — libFuzzer target for the live state reader that `tensorleak
 * top` and `tensorleak exporter` run on every file of the live directory
 * (src/model/live_read.c), and for the exposition written from what it accepts
 * (cmd_exporter.c): a live file is written by another process, so anything
 * may be in it.
 */
#include "cli.h"
#include "live_read.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* main.c's error printer, without the rest of main.c. */
void cli_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char buf[512];
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
}

/* main.c's, for cmd_exporter.c's option parsing (never reached here). */
int cli_option_error(const char *command, int opt, char **argv)
{
    (void)command, (void)opt, (void)argv;
    return CLI_EXIT_USAGE;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static FILE *sink;
    if (!sink && !(sink = fopen("/dev/null", "w")))
        abort();
    struct live_proc p;
    char why[256];
    memset(&p, 0, sizeof p);
    if (live_parse((const char *)data, size, &p, why, sizeof why) == 0) {
        struct live_set s = {.procs = &p, .n = 1};
        exporter_write_metrics(sink, &s);
        (void)live_held_by_owners(&p);
        live_proc_free(&p);
    } else if (!why[0]) {
        abort(); /* a refusal always says why */
    }
    return 0;
}
