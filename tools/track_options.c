/*
 * track_options.c: the tracking options `tensorleak run` and `tensorleak
 * attach` share, one getopt table, validated here so that a typo is a clear
 * error (exit 2) rather than a warning lost in the program's output.
 *
 * Each option becomes one TENSORLEAK_* setting of SPEC.md (name and value);
 * `run` puts them in the environment of the command it execs, `attach` sends
 * them to the library it loads as "NAME=value\n" lines.  Paths (suppressions,
 * owners) are made absolute, because the program reads them later from its
 * own working directory.
 */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define TRACK_MAX_DEPTH 128 /* the library's TL_MAX_DEPTH */

/* Parses a decimal integer in [0, max]; no sign, no suffix. */
static bool parse_bounded(const char *text, long max)
{
    if (!*text)
        return false;
    long v = 0;
    for (const char *p = text; *p; p++) {
        if (*p < '0' || *p > '9')
            return false;
        v = v * 10 + (*p - '0');
        if (v > max)
            return false;
    }
    return true;
}

/* Checks a --fail-on list: leak, growth, invalid-free, oom; or none alone. */
static bool valid_fail_on(const char *command, const char *list)
{
    static const char *const kinds[] = { "leak", "growth", "invalid-free", "oom", "none" };
    size_t items = 0;
    bool has_none = false;
    const char *p = list;
    for (;;) {
        size_t len = strcspn(p, ",");
        bool known = false;
        for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
            if (strlen(kinds[k]) == len && strncmp(p, kinds[k], len) == 0) {
                known = true;
                has_none |= k == 4;
            }
        }
        if (!known) {
            cli_error("%s: --fail-on: unknown kind '%.*s' "
                      "(expected a comma list of leak, growth, invalid-free, oom; or none)",
                      command, (int)(len > 40 ? 40 : len), p);
            return false;
        }
        items++;
        if (!p[len])
            break;
        p += len + 1;
    }
    if (has_none && items > 1) {
        cli_error("%s: --fail-on: 'none' cannot be combined with other kinds", command);
        return false;
    }
    return true;
}

/* Sets NAME (replacing an earlier value of the same option); false when out of memory. */
static bool settings_put(struct cli_settings *s, const char *name, const char *value)
{
    char *copy = strdup(value);
    if (!copy)
        return false;
    for (size_t i = 0; i < s->count; i++) {
        if (strcmp(s->name[i], name) == 0) {
            free(s->value[i]);
            s->value[i] = copy;
            return true;
        }
    }
    if (s->count == CLI_SETTINGS_MAX) {
        free(copy);
        return false;
    }
    s->name[s->count] = name;
    s->value[s->count++] = copy;
    return true;
}

void cli_settings_free(struct cli_settings *s)
{
    for (size_t i = 0; i < s->count; i++)
        free(s->value[i]);
    s->count = 0;
}

int cli_settings_parse(const char *command, bool attach, const char *usage, int argc, char **argv,
                       struct cli_settings *out)
{
    enum { OPT_SIM = 256, OPT_DEPTH, OPT_PYTHON_DEPTH, OPT_FAIL_ON, OPT_EXITCODE, OPT_SUPPRESSIONS, OPT_QUIET, OPT_OWNERS,
           OPT_NO_DEFAULT_OWNERS, OPT_BUDGET, OPT_BUDGET_ENFORCE, OPT_INTERVAL, OPT_WAIT };
    static const struct option options[] = {
        { "sim", no_argument, NULL, OPT_SIM },
        { "output", required_argument, NULL, 'o' },
        { "depth", required_argument, NULL, OPT_DEPTH },
        { "python-depth", required_argument, NULL, OPT_PYTHON_DEPTH },
        { "fail-on", required_argument, NULL, OPT_FAIL_ON },
        { "exitcode", required_argument, NULL, OPT_EXITCODE },
        { "suppressions", required_argument, NULL, OPT_SUPPRESSIONS },
        { "quiet", no_argument, NULL, OPT_QUIET },
        { "owners", required_argument, NULL, OPT_OWNERS },
        { "no-default-owners", no_argument, NULL, OPT_NO_DEFAULT_OWNERS },
        { "budget", required_argument, NULL, OPT_BUDGET },
        { "budget-enforce", no_argument, NULL, OPT_BUDGET_ENFORCE },
        { "interval", required_argument, NULL, OPT_INTERVAL },
        { "wait", no_argument, NULL, OPT_WAIT },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    memset(out, 0, sizeof *out);
    bool budget_enforce = false, has_budget = false, ok = true;
    char abs_path[PATH_MAX];
    int opt;
    opterr = 0;
    optind = 1;
    /* '+': stop at the first operand (run's CMD, whose own options are left alone). */
    while (ok && (opt = getopt_long(argc, argv, "+:o:h", options, NULL)) != -1) {
        switch (opt) {
        case OPT_SIM:
            if (attach) {
                cli_error("%s: --sim does not apply: the process already runs on its driver", command);
                goto usage;
            }
            out->sim = true;
            break;
        case OPT_WAIT:
            if (!attach)
                return cli_option_error(command, '?', argv);
            out->wait = true;
            break;
        case 'o':
            if (!*optarg) {
                cli_error("%s: --output: empty pattern", command);
                goto usage;
            }
            ok = settings_put(out, "TENSORLEAK_OUTPUT", optarg);
            break;
        case OPT_DEPTH:
        case OPT_PYTHON_DEPTH:
            if (!parse_bounded(optarg, TRACK_MAX_DEPTH)) {
                cli_error("%s: --%s: invalid value '%s' (expected 0 to %d frames)", command,
                          opt == OPT_DEPTH ? "depth" : "python-depth", optarg, TRACK_MAX_DEPTH);
                goto usage;
            }
            ok = settings_put(out, opt == OPT_DEPTH ? "TENSORLEAK_DEPTH" : "TENSORLEAK_PYTHON_DEPTH", optarg);
            break;
        case OPT_FAIL_ON:
            if (!valid_fail_on(command, optarg))
                goto usage;
            ok = settings_put(out, "TENSORLEAK_FAIL_ON", optarg);
            break;
        case OPT_EXITCODE:
            if (!parse_bounded(optarg, 255)) {
                cli_error("%s: --exitcode: invalid value '%s' (expected 0 to 255)", command, optarg);
                goto usage;
            }
            ok = settings_put(out, "TENSORLEAK_EXITCODE", optarg);
            break;
        case OPT_SUPPRESSIONS: {
            /* Refuse a bad file now, with FILE:LINE, rather than a warning at run time. */
            struct tl_suppressions supp = { 0 };
            if (!suppressions_load_file(optarg, &supp))
                goto usage;
            tl_suppressions_free(&supp);
            if (!realpath(optarg, abs_path)) {
                cli_error("%s: %s: %s", command, optarg, strerror(errno));
                goto usage;
            }
            ok = settings_put(out, "TENSORLEAK_SUPPRESSIONS", abs_path);
            break;
        }
        case OPT_QUIET:
            ok = settings_put(out, "TENSORLEAK_QUIET", "1");
            break;
        case OPT_OWNERS:
            if (!realpath(optarg, abs_path)) {
                cli_error("%s: --owners: %s: %s", command, optarg, strerror(errno));
                goto usage;
            }
            ok = settings_put(out, "TENSORLEAK_OWNERS", abs_path);
            break;
        case OPT_NO_DEFAULT_OWNERS:
            ok = settings_put(out, "TENSORLEAK_DEFAULT_OWNERS", "0");
            break;
        case OPT_BUDGET:
            /* The library validates the spelling and says so; an empty one
             * is an obvious mistake worth refusing here. */
            if (!*optarg) {
                cli_error("%s: --budget: empty value (expected SIZE and/or CLASS:SIZE)", command);
                goto usage;
            }
            has_budget = true;
            ok = settings_put(out, "TENSORLEAK_BUDGET", optarg);
            break;
        case OPT_BUDGET_ENFORCE:
            budget_enforce = true;
            ok = settings_put(out, "TENSORLEAK_BUDGET_ENFORCE", "1");
            break;
        case OPT_INTERVAL: {
            char *end;
            double seconds = strtod(optarg, &end);
            if (!*optarg || *end || !(seconds > 0) || seconds > 86400.0 * 365) {
                cli_error("%s: --interval: invalid value '%s' (expected seconds > 0)", command, optarg);
                goto usage;
            }
            ok = settings_put(out, "TENSORLEAK_INTERVAL", optarg);
            break;
        }
        case 'h':
            puts(usage);
            cli_settings_free(out);
            return CLI_EXIT_OK;
        default:
            cli_settings_free(out);
            return cli_option_error(command, opt, argv);
        }
    }
    if (!ok) {
        cli_error("%s: out of memory", command);
        goto usage;
    }
    /* `run` also honours a budget its caller's environment sets; `attach`
     * takes nothing from any environment but its command line. */
    if (budget_enforce && !has_budget && (attach || !getenv("TENSORLEAK_BUDGET"))) {
        cli_error("%s: --budget-enforce needs --budget%s", command, attach ? "" : " (or TENSORLEAK_BUDGET)");
        goto usage;
    }
    return -1;
usage:
    cli_settings_free(out);
    return CLI_EXIT_USAGE;
}
