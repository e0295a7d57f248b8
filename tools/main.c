/*
 * main.c: the tensorleak command line: dispatch to one subcommand per file
 * (cmd_*.c), version and help, and the few output helpers they share.
 */
#include "cli.h"
#include "live_read.h"

#include "tl_version.h"

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char usage_text[] =
    "usage: tensorleak COMMAND [ARGS...]\n"
    "\n"
    "Track GPU memory allocations of a program and read its reports.\n"
    "\n"
    "Commands:\n"
    "  run [OPTIONS] [--] CMD ARGS...   run CMD under libtensorleak.so\n"
    "      --sim                 use the simulated CUDA driver, runtime and NVML\n"
    "      -o, --output PATTERN  report path (%p pid, %h host, %r rank, %n sequence)\n"
    "      --depth N             native frames kept per stack (0 = no stacks)\n"
    "      --python-depth N      Python frames kept per stack besides (0 = none; default 32)\n"
    "      --fail-on KINDS       leak,growth,invalid-free,oom or none\n"
    "      --exitcode N          exit status when the gate fails (default 23)\n"
    "      --suppressions FILE   suppressions file\n"
    "      --owners FILE         owner rules (owner:NAME:CLASS:KINDS:PATTERN) tried first\n"
    "      --no-default-owners   do not use the shipped owner rules\n"
    "      --budget SPEC         SIZE and/or CLASS:SIZE per device (cache, workspace, library, user)\n"
    "      --budget-enforce      refuse allocations that would cross the budget\n"
    "      --interval SECONDS    mark and snapshot every SECONDS\n"
    "      --quiet               no report on stderr\n"
    "  attach [--wait] [RUN OPTIONS] PID\n"
    "                            start tracking a running process (run's options but\n"
    "                            --sim; docs/attach.md); --wait: until it loads libcuda.so.1\n"
    "  detach PID                stop tracking it: final report, its code put back\n"
    "  snapshot PID [LABEL]      have a tracked process (attached or preloaded) write a report now\n"
    "  sim [--] CMD ARGS...      run CMD on the simulated CUDA driver, runtime and NVML,\n"
    "                            untracked (run --sim's environment without tensorleak)\n"
    "  report FILE... [--format text|json|folded|html|sarif] [-o OUT]\n"
    "                            print a report (folded: for flamegraph.pl/inferno/speedscope;\n"
    "                            html: one page with memory maps, several FILEs in order;\n"
    "                            sarif: results for code scanning, file paths relative\n"
    "                            to --source-root DIR, default the current directory)\n"
    "  check FILE [--max-leaked-bytes N] [--max-growth-bytes N] [--suppressions FILE]\n"
    "                            CI gate: exit 0 pass, 1 fail, 2 unusable input\n"
    "  diff OLD NEW              what grew between two reports, per call site\n"
    "  merge FILES... [-o OUT]   one report from the per-rank reports of a job\n"
    "  top [--once | --json]     live view of every tracked process (docs/live.md)\n"
    "  exporter [--listen HOST:PORT | --textfile DIR]\n"
    "                            Prometheus metrics of every tracked process\n"
    "\n"
    "Options:\n"
    "  -h, --help                this text\n"
    "  -V, --version             print the version\n"
    "\n"
    "Sizes accept K, M, G suffixes. Environment: TENSORLEAK_LIBRARY overrides the\n"
    "preload library that `run` uses.\n";

void cli_error(const char *fmt, ...)
{
    va_list ap;
    fputs("tensorleak: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

FILE *cli_open_output(const char *path)
{
    if (!path || strcmp(path, "-") == 0)
        return stdout;
    FILE *out = fopen(path, "w");
    if (!out)
        cli_error("%s: cannot write: %s", path, strerror(errno));
    return out;
}

bool cli_close_output(FILE *out, const char *path)
{
    bool ok = fflush(out) == 0 && !ferror(out);
    int saved = errno;
    if (out != stdout)
        ok = (fclose(out) == 0) && ok;
    if (!ok)
        cli_error("%s: write error: %s", out == stdout || !path ? "<stdout>" : path,
                  strerror(saved ? saved : errno));
    return ok;
}

int cli_option_error(const char *command, int opt, char **argv)
{
    const char *arg = optind > 0 ? argv[optind - 1] : "?";
    char short_opt[3] = { '-', (char)optopt, '\0' };
    if (strncmp(arg, "--", 2) != 0 && optopt > 0 && optopt < 128)
        arg = short_opt;
    if (opt == ':')
        cli_error("%s: option '%s' needs a value", command, arg);
    else
        cli_error("%s: unknown option '%s' (try: tensorleak --help)", command, arg);
    return CLI_EXIT_USAGE;
}

struct command {
    const char *name;
    int (*run)(int argc, char **argv);
};

static const struct command commands[] = {
    { "run", cmd_run },
    { "attach", cmd_attach },
    { "detach", cmd_detach },
    { "snapshot", cmd_snapshot },
    { "sim", cmd_sim },
    { "report", cmd_report },
    { "check", cmd_check },
    { "diff", cmd_diff },
    { "merge", cmd_merge },
    { "top", cmd_top },
    { "exporter", cmd_exporter },
};

int main(int argc, char **argv)
{
    if (argc < 2) {
        fputs(usage_text, stderr);
        return CLI_EXIT_USAGE;
    }
    const char *first = argv[1];
    if (strcmp(first, "-V") == 0 || strcmp(first, "--version") == 0) {
        printf("tensorleak %s\n", TL_VERSION);
        return CLI_EXIT_OK;
    }
    if (strcmp(first, "-h") == 0 || strcmp(first, "--help") == 0 || strcmp(first, "help") == 0) {
        fputs(usage_text, stdout);
        return CLI_EXIT_OK;
    }
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
        if (strcmp(first, commands[i].name) == 0) {
            /* Subcommands see argv[0] = their name, like their own program. */
            return commands[i].run(argc - 1, argv + 1);
        }
    }
    cli_error("unknown command '%s' (try: tensorleak --help)", first);
    return CLI_EXIT_USAGE;
}
