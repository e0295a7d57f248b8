/*
 * cmd_report.c: `tensorleak report FILE [--format text|json|folded] [-o OUT]`.
 */
#include "cli.h"
#include "report.h"

#include <getopt.h>
#include <jansson.h>
#include <string.h>

enum format { FORMAT_TEXT, FORMAT_JSON, FORMAT_FOLDED };

static const char usage[] = "usage: tensorleak report FILE [--format text|json|folded] [-o OUT]";

static bool parse_format(const char *name, enum format *out)
{
    static const char *const later[] = { "html", "sarif" };
    if (strcmp(name, "text") == 0)
        *out = FORMAT_TEXT;
    else if (strcmp(name, "json") == 0)
        *out = FORMAT_JSON;
    else if (strcmp(name, "folded") == 0)
        *out = FORMAT_FOLDED;
    else {
        for (size_t i = 0; i < sizeof(later) / sizeof(later[0]); i++) {
            if (strcmp(name, later[i]) == 0) {
                cli_error("report: format '%s' is not supported yet", name);
                return false;
            }
        }
        cli_error("report: unknown format '%s' (expected text, json or folded)", name);
        return false;
    }
    return true;
}

int cmd_report(int argc, char **argv)
{
    static const struct option options[] = {
        { "format", required_argument, NULL, 'f' },
        { "output", required_argument, NULL, 'o' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    enum format format = FORMAT_TEXT;
    const char *output = NULL;
    int opt;
    opterr = 0;
    optind = 1;
    while ((opt = getopt_long(argc, argv, ":f:o:h", options, NULL)) != -1) {
        switch (opt) {
        case 'f':
            if (!parse_format(optarg, &format))
                return CLI_EXIT_USAGE;
            break;
        case 'o':
            output = optarg;
            break;
        case 'h':
            puts(usage);
            return CLI_EXIT_OK;
        default:
            return cli_option_error("report", opt, argv);
        }
    }
    if (argc - optind != 1) {
        cli_error("report: expected one report FILE\n%s", usage);
        return CLI_EXIT_USAGE;
    }
    const char *path = argv[optind];

    struct tl_report report;
    if (!report_load(path, &report))
        return CLI_EXIT_USAGE;
    FILE *out = cli_open_output(output);
    if (!out) {
        report_free(&report);
        return CLI_EXIT_USAGE;
    }
    switch (format) {
    case FORMAT_TEXT:
        format_text(out, &report, path);
        break;
    case FORMAT_JSON:
        json_dumpf(report.root, out, JSON_INDENT(2) | JSON_REAL_PRECISION(15));
        fputc('\n', out);
        break;
    case FORMAT_FOLDED:
        format_folded(out, &report);
        break;
    }
    report_free(&report);
    return cli_close_output(out, output) ? CLI_EXIT_OK : CLI_EXIT_USAGE;
}
