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
    struct cli_settings settings;
    int rc = cli_settings_parse("run", false, usage, argc, argv, &settings);
    if (rc >= 0)
        return rc;
    if (optind >= argc) {
        cli_settings_free(&settings);
        cli_error("run: expected a command to run\n%s", usage);
        return CLI_EXIT_USAGE;
    }

    char library[PATH_MAX];
    if (!cli_find_library("run", library) || !cli_path_list_safe("run", "library", library)) {
        cli_settings_free(&settings);
        return CLI_EXIT_USAGE;
    }

    bool ok = true;
    for (size_t i = 0; i < settings.count; i++)
        ok = ok && setenv(settings.name[i], settings.value[i], 1) == 0;
    bool sim = settings.sim;
    cli_settings_free(&settings);
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

    rc = 0;
    if (!preload_can_reach(argv[optind], &rc))
        return rc;
    execvp(argv[optind], &argv[optind]);
    int err = errno;
    cli_error("run: %s: %s", argv[optind], strerror(err));
    return err == ENOENT ? 127 : 126;
}
