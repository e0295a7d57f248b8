/*
 * cmd_report.c: `tensorleak report FILE... [--format text|json|folded|html|sarif|torch-snapshot] [-o OUT]`.
 * html and sarif take several reports (snapshots of one run, or ranks) and
 * show them in the order given; the other formats print exactly one.
 */
#include "cli.h"
#include "model.h"

#include <getopt.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

enum format { FORMAT_TEXT, FORMAT_JSON, FORMAT_FOLDED, FORMAT_HTML, FORMAT_SARIF, FORMAT_TORCH_SNAPSHOT };

static const char usage[] =
    "usage: tensorleak report FILE... [--format text|json|folded|html|sarif|torch-snapshot] [-o OUT]\n"
    "                         [--source-root DIR]  (sarif: paths relative to DIR)\n"
    "                         [--frames python|all]  (text, html: Python frames first, native runs\n"
    "                         folded; all: every frame as recorded)\n"
    "       (several FILEs only with html or sarif)";

static bool parse_format(const char *name, enum format *out)
{
    if (strcmp(name, "text") == 0)
        *out = FORMAT_TEXT;
    else if (strcmp(name, "json") == 0)
        *out = FORMAT_JSON;
    else if (strcmp(name, "folded") == 0)
        *out = FORMAT_FOLDED;
    else if (strcmp(name, "html") == 0)
        *out = FORMAT_HTML;
    else if (strcmp(name, "sarif") == 0)
        *out = FORMAT_SARIF;
    else if (strcmp(name, "torch-snapshot") == 0)
        *out = FORMAT_TORCH_SNAPSHOT;
    else {
        cli_error("report: unknown format '%s' (expected text, json, folded, html, sarif or torch-snapshot)",
                  name);
        return false;
    }
    return true;
}

int cmd_report(int argc, char **argv)
{
    static const struct option options[] = {
        { "format", required_argument, NULL, 'f' },
        { "output", required_argument, NULL, 'o' },
        { "source-root", required_argument, NULL, 's' },
        { "frames", required_argument, NULL, 'F' },
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
        case 's':
            sarif_set_source_root(optarg);
            break;
        case 'F':
            if (strcmp(optarg, "all") != 0 && strcmp(optarg, "python") != 0) {
                cli_error("report: --frames takes python or all, not '%s'", optarg);
                return CLI_EXIT_USAGE;
            }
            format_frames_all = strcmp(optarg, "all") == 0;
            break;
        case 'h':
            puts(usage);
            return CLI_EXIT_OK;
        default:
            return cli_option_error("report", opt, argv);
        }
    }
    size_t count = argc > optind ? (size_t)(argc - optind) : 0;
    bool many = format == FORMAT_HTML || format == FORMAT_SARIF;
    if (count == 0 || (count > 1 && !many)) {
        cli_error("report: expected %s\n%s", many ? "one or more report FILEs" : "one report FILE",
                  usage);
        return CLI_EXIT_USAGE;
    }
    struct tl_report *reports = calloc(count, sizeof(*reports));
    if (!reports) {
        cli_error("report: out of memory");
        return CLI_EXIT_USAGE;
    }
    int status = CLI_EXIT_USAGE;
    size_t loaded = 0;
    for (; loaded < count; loaded++) {
        if (!report_load(argv[optind + (int)loaded], &reports[loaded]))
            goto out;
    }
    FILE *out = cli_open_output(output);
    if (!out)
        goto out;
    const struct tl_report *report = &reports[0];
    switch (format) {
    case FORMAT_TEXT:
        format_text(out, report, report->path);
        break;
    case FORMAT_JSON:
        if (!report_write_json(out, report)) {
            cli_error("report: out of memory");
            cli_close_output(out, output);
            goto out;
        }
        fputc('\n', out);
        break;
    case FORMAT_FOLDED:
        format_folded(out, report);
        break;
    case FORMAT_HTML:
        format_html(out, reports, count);
        break;
    case FORMAT_SARIF:
        format_sarif(out, reports, count);
        break;
    case FORMAT_TORCH_SNAPSHOT:
        format_torch_snapshot(out, report);
        break;
    }
    status = cli_close_output(out, output) ? CLI_EXIT_OK : CLI_EXIT_USAGE;
out:
    for (size_t i = 0; i < count; i++)
        report_free(&reports[i]);
    free(reports);
    return status;
}
