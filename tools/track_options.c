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
#include "option_rules.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* Refuses a value the library would refuse: the rule is the library's
 * (option_rules.h), said with the option's name. */
static bool value_ok(const char *command, bool ok, const char *option, const char *value, const char *why)
{
    if (!ok)
        cli_error("%s: --%s: invalid value '%.200s' (%s)", command, option, value, why);
    return ok;
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
    /* The values are checked here and passed on as spelled. */
    char why[TL_OPTION_WHY];
    int opt, number;
    unsigned kinds;
    double seconds;
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
            if (!value_ok(command, tl_option_depth(optarg, &number, why), opt == OPT_DEPTH ? "depth" : "python-depth",
                          optarg, why))
                goto usage;
            ok = settings_put(out, opt == OPT_DEPTH ? "TENSORLEAK_DEPTH" : "TENSORLEAK_PYTHON_DEPTH", optarg);
            break;
        case OPT_FAIL_ON:
            if (!value_ok(command, tl_option_fail_on(optarg, &kinds, why), "fail-on", optarg, why))
                goto usage;
            ok = settings_put(out, "TENSORLEAK_FAIL_ON", optarg);
            break;
        case OPT_EXITCODE:
            if (!value_ok(command, tl_option_exitcode(optarg, &number, why), "exitcode", optarg, why))
                goto usage;
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
        case OPT_INTERVAL:
            if (!value_ok(command, tl_option_interval(optarg, &seconds, why), "interval", optarg, why))
                goto usage;
            ok = settings_put(out, "TENSORLEAK_INTERVAL", optarg);
            break;
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
