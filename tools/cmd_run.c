/*
 * cmd_run.c: `tensorleak run [OPTIONS] [--] CMD ARGS...`: run CMD with
 * libtensorleak.so preloaded.
 *
 * Each option becomes the TENSORLEAK_* variable of SPEC.md, validated here
 * so that a typo is a clear error (exit 2) rather than a warning lost in the
 * program's output. The library is appended to LD_PRELOAD (what was there is
 * kept) and CMD is exec'd in place: its exit status, and the status the
 * preload's gate forces, reach the caller unchanged.
 *
 * Finding the library, relative to this executable (/proc/self/exe), so that
 * both build/tools/tensorleak and an installed copy work without setup:
 *   TENSORLEAK_LIBRARY                      when set (a path to the .so)
 *   <exe_dir>/../<libdir>/libtensorleak.so  installed tree (libdir from meson)
 *   <exe_dir>/../src/libtensorleak.so       build tree
 * and, for --sim, the simulated CUDA stack (exec_env.c, the environment
 * `tensorleak sim` sets).
 */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef TL_LIBDIR
#define TL_LIBDIR "lib"
#endif

#define RUN_MAX_DEPTH 128 /* the library's TL_MAX_DEPTH */

static const char usage[] =
    "usage: tensorleak run [--sim] [-o|--output PATTERN] [--depth N] [--python-depth N] [--fail-on KINDS]\n"
    "                      [--exitcode N] [--suppressions FILE] [--owners FILE] [--no-default-owners]\n"
    "                      [--budget SPEC] [--budget-enforce] [--interval SECONDS] [--quiet]\n"
    "                      [--] CMD ARGS...";

/* Parses a decimal integer in [0, max]; no sign, no suffix. */
static bool parse_bounded(const char *text, long max, long *out)
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
    *out = v;
    return true;
}

/* Checks a --fail-on list: leak, growth, invalid-free, oom; or none alone. */
static bool valid_fail_on(const char *list)
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
            cli_error("run: --fail-on: unknown kind '%.*s' "
                      "(expected a comma list of leak, growth, invalid-free, oom; or none)",
                      (int)(len > 40 ? 40 : len), p);
            return false;
        }
        items++;
        if (!p[len])
            break;
        p += len + 1;
    }
    if (has_none && items > 1) {
        cli_error("run: --fail-on: 'none' cannot be combined with other kinds");
        return false;
    }
    return true;
}

/* Resolves the preload library to an absolute path in `out`. */
static bool find_library(char out[PATH_MAX])
{
    const char *override = getenv("TENSORLEAK_LIBRARY");
    if (override && *override) {
        if (access(override, R_OK) != 0 || !realpath(override, out)) {
            cli_error("run: TENSORLEAK_LIBRARY=%s: %s", override, strerror(errno));
            return false;
        }
        return true;
    }
    char dir[PATH_MAX], installed[PATH_MAX + 64], build[PATH_MAX + 64];
    if (!cli_exe_dir(dir, sizeof(dir))) {
        cli_error("run: cannot locate the tensorleak executable (/proc/self/exe); "
                  "set TENSORLEAK_LIBRARY");
        return false;
    }
    cli_libdir_path(installed, sizeof(installed), dir, "libtensorleak.so");
    snprintf(build, sizeof(build), "%s../src/libtensorleak.so", dir);
    const char *candidates[] = { installed, build };
    for (size_t i = 0; i < 2; i++) {
        if (access(candidates[i], R_OK) == 0 && realpath(candidates[i], out))
            return true;
    }
    cli_error("run: libtensorleak.so not found (looked for %s and %s); "
              "build it or set TENSORLEAK_LIBRARY", installed, build);
    return false;
}

int cmd_run(int argc, char **argv)
{
    enum { OPT_SIM = 256, OPT_DEPTH, OPT_PYTHON_DEPTH, OPT_FAIL_ON, OPT_EXITCODE, OPT_SUPPRESSIONS, OPT_QUIET, OPT_OWNERS,
           OPT_NO_DEFAULT_OWNERS, OPT_BUDGET, OPT_BUDGET_ENFORCE, OPT_INTERVAL };
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
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    bool sim = false, quiet = false, no_default_owners = false, budget_enforce = false;
    const char *output = NULL, *depth = NULL, *python_depth = NULL, *fail_on = NULL, *exitcode = NULL;
    const char *owners = NULL, *budget = NULL, *interval = NULL;
    const char *supp_path = NULL;
    long number;
    int opt;
    opterr = 0;
    optind = 1;
    /* '+': stop at CMD, so that CMD's own options are left alone. */
    while ((opt = getopt_long(argc, argv, "+:o:h", options, NULL)) != -1) {
        switch (opt) {
        case OPT_SIM:
            sim = true;
            break;
        case 'o':
            if (!*optarg) {
                cli_error("run: --output: empty pattern");
                return CLI_EXIT_USAGE;
            }
            output = optarg;
            break;
        case OPT_DEPTH:
        case OPT_PYTHON_DEPTH:
            if (!parse_bounded(optarg, RUN_MAX_DEPTH, &number)) {
                cli_error("run: --%s: invalid value '%s' (expected 0 to %d frames)",
                          opt == OPT_DEPTH ? "depth" : "python-depth", optarg, RUN_MAX_DEPTH);
                return CLI_EXIT_USAGE;
            }
            *(opt == OPT_DEPTH ? &depth : &python_depth) = optarg;
            break;
        case OPT_FAIL_ON:
            if (!valid_fail_on(optarg))
                return CLI_EXIT_USAGE;
            fail_on = optarg;
            break;
        case OPT_EXITCODE:
            if (!parse_bounded(optarg, 255, &number)) {
                cli_error("run: --exitcode: invalid value '%s' (expected 0 to 255)", optarg);
                return CLI_EXIT_USAGE;
            }
            exitcode = optarg;
            break;
        case OPT_SUPPRESSIONS:
            supp_path = optarg;
            break;
        case OPT_QUIET:
            quiet = true;
            break;
        case OPT_OWNERS:
            owners = optarg;
            break;
        case OPT_NO_DEFAULT_OWNERS:
            no_default_owners = true;
            break;
        case OPT_BUDGET:
            /* The library validates the spelling and says so; an empty one
             * is an obvious mistake worth refusing here. */
            if (!*optarg) {
                cli_error("run: --budget: empty value (expected SIZE and/or CLASS:SIZE)");
                return CLI_EXIT_USAGE;
            }
            budget = optarg;
            break;
        case OPT_BUDGET_ENFORCE:
            budget_enforce = true;
            break;
        case OPT_INTERVAL: {
            char *end;
            double seconds = strtod(optarg, &end);
            if (!*optarg || *end || !(seconds > 0) || seconds > 86400.0 * 365) {
                cli_error("run: --interval: invalid value '%s' (expected seconds > 0)", optarg);
                return CLI_EXIT_USAGE;
            }
            interval = optarg;
            break;
        }
        case 'h':
            puts(usage);
            return CLI_EXIT_OK;
        default:
            return cli_option_error("run", opt, argv);
        }
    }
    if (optind >= argc) {
        cli_error("run: expected a command to run\n%s", usage);
        return CLI_EXIT_USAGE;
    }

    char supp_abs[PATH_MAX];
    if (supp_path) {
        /* Refuse a bad file now, with FILE:LINE, rather than a warning at run time. */
        struct tl_suppressions supp = { 0 };
        if (!suppressions_load_file(supp_path, &supp))
            return CLI_EXIT_USAGE;
        tl_suppressions_free(&supp);
        /* The program may chdir before it reads the file: pass it absolute. */
        if (!realpath(supp_path, supp_abs)) {
            cli_error("run: %s: %s", supp_path, strerror(errno));
            return CLI_EXIT_USAGE;
        }
    }
    char owners_abs[PATH_MAX];
    if (owners && !realpath(owners, owners_abs)) {
        cli_error("run: --owners: %s: %s", owners, strerror(errno));
        return CLI_EXIT_USAGE;
    }
    if (budget_enforce && !budget && !getenv("TENSORLEAK_BUDGET")) {
        cli_error("run: --budget-enforce needs --budget (or TENSORLEAK_BUDGET)");
        return CLI_EXIT_USAGE;
    }
    char library[PATH_MAX];
    if (!find_library(library) || !cli_path_list_safe("run", "library", library))
        return CLI_EXIT_USAGE;

    bool ok = true;
    if (output)
        ok = ok && setenv("TENSORLEAK_OUTPUT", output, 1) == 0;
    if (depth)
        ok = ok && setenv("TENSORLEAK_DEPTH", depth, 1) == 0;
    if (python_depth)
        ok = ok && setenv("TENSORLEAK_PYTHON_DEPTH", python_depth, 1) == 0;
    if (fail_on)
        ok = ok && setenv("TENSORLEAK_FAIL_ON", fail_on, 1) == 0;
    if (exitcode)
        ok = ok && setenv("TENSORLEAK_EXITCODE", exitcode, 1) == 0;
    if (supp_path)
        ok = ok && setenv("TENSORLEAK_SUPPRESSIONS", supp_abs, 1) == 0;
    if (quiet)
        ok = ok && setenv("TENSORLEAK_QUIET", "1", 1) == 0;
    if (owners)
        ok = ok && setenv("TENSORLEAK_OWNERS", owners_abs, 1) == 0;
    if (no_default_owners)
        ok = ok && setenv("TENSORLEAK_DEFAULT_OWNERS", "0", 1) == 0;
    if (budget)
        ok = ok && setenv("TENSORLEAK_BUDGET", budget, 1) == 0;
    if (budget_enforce)
        ok = ok && setenv("TENSORLEAK_BUDGET_ENFORCE", "1", 1) == 0;
    if (interval)
        ok = ok && setenv("TENSORLEAK_INTERVAL", interval, 1) == 0;
    /* The Python bridge is on under `run` unless the caller
     * said otherwise (a bare LD_PRELOAD leaves it off). */
    ok = ok && setenv("TENSORLEAK_PYTHON", "1", 0) == 0;
    /* The library comes before the simulated runtime in LD_PRELOAD: its
     * runtime hooks find the real functions as the next definition. */
    ok = ok && cli_extend_list("LD_PRELOAD", library, false);
    if (!ok) {
        cli_error("run: cannot set the environment: %s", strerror(errno));
        return CLI_EXIT_USAGE;
    }
    if (sim && !cli_sim_environment("run"))
        return CLI_EXIT_USAGE;

    execvp(argv[optind], &argv[optind]);
    int err = errno;
    cli_error("run: %s: %s", argv[optind], strerror(err));
    return err == ENOENT ? 127 : 126;
}
