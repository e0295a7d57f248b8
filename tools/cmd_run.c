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
 *
 * A statically linked CMD (static or static-pie: no program interpreter)
 * never runs the dynamic loader, which is what reads LD_PRELOAD: nothing
 * would be tracked and no report written.  `run` says so, and refuses to
 * run it when a --fail-on gate was asked for (a gate that cannot fail
 * passes silently otherwise).  What CMD starts later is not looked at.
 */
#include "cli.h"
#include "option_rules.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef TL_LIBDIR
#define TL_LIBDIR "lib"
#endif

static const char usage[] =
    "usage: tensorleak run [--sim] [-o|--output PATTERN] [--depth N] [--python-depth N] [--fail-on KINDS]\n"
    "                      [--exitcode N] [--suppressions FILE] [--owners FILE] [--no-default-owners]\n"
    "                      [--budget SPEC] [--budget-enforce] [--interval SECONDS] [--quiet]\n"
    "                      [--] CMD ARGS...";

/* Refuses a value the library would refuse: the rule is the library's
 * (option_rules.h), said with the option's name. */
static bool value_ok(bool ok, const char *option, const char *value, const char *why)
{
    if (!ok)
        cli_error("run: --%s: invalid value '%.200s' (%s)", option, value, why);
    return ok;
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

/* The file execvp would run for `cmd`: `cmd` itself when it holds a '/',
 * else the first executable regular file of that name on PATH (execvp's
 * default path when PATH is unset).  False when there is none. */
static bool command_path(const char *cmd, char *out, size_t len)
{
    if (strchr(cmd, '/'))
        return snprintf(out, len, "%s", cmd) < (int)len;
    const char *path = getenv("PATH");
    if (!path)
        path = "/bin:/usr/bin";
    for (const char *p = path;; p++) {
        size_t n = strcspn(p, ":");
        struct stat st;
        /* An empty entry is the current directory. */
        if (snprintf(out, len, "%.*s%s%s", (int)n, n ? p : ".", "/", cmd) < (int)len && stat(out, &st) == 0 &&
            S_ISREG(st.st_mode) && access(out, X_OK) == 0)
            return true;
        p += n;
        if (!*p)
            return false;
    }
}

enum link_kind { LINK_UNKNOWN, LINK_DYNAMIC, LINK_STATIC };

static bool read_at(int fd, void *buf, size_t len, off_t off)
{
    return pread(fd, buf, len, off) == (ssize_t)len;
}

/* A native ELF file's program headers and dynamic section: dynamic when it
 * names a program interpreter (PT_INTERP); static when it has none and is
 * not a shared object run directly (one with a DT_SONAME, as the dynamic
 * loader itself in `ld.so PROG`, which does read LD_PRELOAD); unknown for
 * anything else (another class or byte order, a short file). */
static enum link_kind elf_link_kind(int fd, const unsigned char *ident)
{
    bool is64 = ident[EI_CLASS] == ELFCLASS64;
    if ((!is64 && ident[EI_CLASS] != ELFCLASS32) || ident[EI_DATA] != (BYTE_ORDER == LITTLE_ENDIAN ? ELFDATA2LSB : ELFDATA2MSB))
        return LINK_UNKNOWN;
    Elf64_Ehdr eh;
    if (is64) {
        if (!read_at(fd, &eh, sizeof eh, 0))
            return LINK_UNKNOWN;
    } else {
        Elf32_Ehdr e32;
        if (!read_at(fd, &e32, sizeof e32, 0))
            return LINK_UNKNOWN;
        eh.e_phoff = e32.e_phoff;
        eh.e_phnum = e32.e_phnum;
        eh.e_phentsize = e32.e_phentsize;
    }
    if (eh.e_phentsize != (is64 ? sizeof(Elf64_Phdr) : sizeof(Elf32_Phdr)) || eh.e_phnum == 0 || eh.e_phnum > 4096)
        return LINK_UNKNOWN;
    off_t dyn_off = 0;
    uint64_t dyn_size = 0;
    for (unsigned i = 0; i < eh.e_phnum; i++) {
        Elf64_Phdr ph;
        off_t at = (off_t)(eh.e_phoff + (uint64_t)i * eh.e_phentsize);
        if (is64) {
            if (!read_at(fd, &ph, sizeof ph, at))
                return LINK_UNKNOWN;
        } else {
            Elf32_Phdr p32;
            if (!read_at(fd, &p32, sizeof p32, at))
                return LINK_UNKNOWN;
            ph.p_type = p32.p_type;
            ph.p_offset = p32.p_offset;
            ph.p_filesz = p32.p_filesz;
        }
        if (ph.p_type == PT_INTERP)
            return LINK_DYNAMIC;
        if (ph.p_type == PT_DYNAMIC) {
            dyn_off = (off_t)ph.p_offset;
            dyn_size = ph.p_filesz;
        }
    }
    size_t each = is64 ? sizeof(Elf64_Dyn) : sizeof(Elf32_Dyn);
    for (uint64_t k = 0; k < dyn_size / each && k < 4096; k++) {
        int64_t tag;
        if (is64) {
            Elf64_Dyn d;
            if (!read_at(fd, &d, sizeof d, dyn_off + (off_t)(k * each)))
                return LINK_UNKNOWN;
            tag = d.d_tag;
        } else {
            Elf32_Dyn d;
            if (!read_at(fd, &d, sizeof d, dyn_off + (off_t)(k * each)))
                return LINK_UNKNOWN;
            tag = d.d_tag;
        }
        if (tag == DT_NULL)
            break;
        if (tag == DT_SONAME)
            return LINK_UNKNOWN;
    }
    return LINK_STATIC;
}

/* How the program at `path` is linked; a script ("#!") is judged by its
 * interpreter, as the kernel runs it (at most four levels deep).  The path
 * of the statically linked file goes to `culprit`. */
static enum link_kind program_link_kind(const char *path, char *culprit, size_t len, int depth)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return LINK_UNKNOWN;
    unsigned char head[256];
    ssize_t n = read(fd, head, sizeof head - 1);
    enum link_kind kind = LINK_UNKNOWN;
    if (n >= EI_NIDENT && memcmp(head, ELFMAG, SELFMAG) == 0) {
        kind = elf_link_kind(fd, head);
        if (kind == LINK_STATIC)
            snprintf(culprit, len, "%s", path);
    } else if (n > 2 && head[0] == '#' && head[1] == '!' && depth < 4) {
        head[n] = 0;
        char *interp = (char *)head + 2;
        interp += strspn(interp, " \t");
        interp[strcspn(interp, " \t\n")] = 0;
        if (*interp)
            kind = program_link_kind(interp, culprit, len, depth + 1);
    }
    close(fd);
    return kind;
}

/* Whether the preload can take effect in `cmd`: false (said) when it is
 * statically linked; CLI_EXIT_USAGE in *rc when a gate was asked for,
 * which could then never fail. */
static bool preload_can_reach(const char *cmd, int *rc)
{
    char path[PATH_MAX], culprit[PATH_MAX];
    if (!command_path(cmd, path, sizeof path) || program_link_kind(path, culprit, sizeof culprit, 0) != LINK_STATIC)
        return true;
    const char *gate = getenv("TENSORLEAK_FAIL_ON");
    if (gate && *gate && strcmp(gate, "none") != 0) {
        cli_error("run: %s is statically linked: LD_PRELOAD cannot load libtensorleak.so into it, so nothing would be "
                  "tracked and --fail-on %s could never fail; not running it",
                  culprit, gate);
        *rc = CLI_EXIT_USAGE;
        return false;
    }
    cli_error("run: %s is statically linked: LD_PRELOAD cannot load libtensorleak.so into it; running it untracked "
              "(no report)",
              culprit);
    return true;
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
    /* The values are checked here and passed on as spelled. */
    char why[TL_OPTION_WHY];
    int number;
    unsigned kinds;
    double seconds;
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
            if (!value_ok(tl_option_depth(optarg, &number, why), opt == OPT_DEPTH ? "depth" : "python-depth", optarg, why))
                return CLI_EXIT_USAGE;
            *(opt == OPT_DEPTH ? &depth : &python_depth) = optarg;
            break;
        case OPT_FAIL_ON:
            if (!value_ok(tl_option_fail_on(optarg, &kinds, why), "fail-on", optarg, why))
                return CLI_EXIT_USAGE;
            fail_on = optarg;
            break;
        case OPT_EXITCODE:
            if (!value_ok(tl_option_exitcode(optarg, &number, why), "exitcode", optarg, why))
                return CLI_EXIT_USAGE;
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
        case OPT_INTERVAL:
            if (!value_ok(tl_option_interval(optarg, &seconds, why), "interval", optarg, why))
                return CLI_EXIT_USAGE;
            interval = optarg;
            break;
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

    int rc = 0;
    if (!preload_can_reach(argv[optind], &rc))
        return rc;
    execvp(argv[optind], &argv[optind]);
    int err = errno;
    cli_error("run: %s: %s", argv[optind], strerror(err));
    return err == ENOENT ? 127 : 126;
}
