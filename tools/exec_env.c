/*
 * exec_env.c: the environment `tensorleak run` and `tensorleak sim` give the
 * command they exec: paths relative to this executable, LD_PRELOAD and
 * LD_LIBRARY_PATH edits, and the simulated CUDA stack.
 *
 * The simulated stack (sim/README.md) is found relative to this executable
 * (/proc/self/exe), so a build tree and an installed tree both work:
 *   <exe_dir>/../<libdir>/tensorleak/sim/   installed tree
 *   <exe_dir>/../sim/                       build tree
 * Its directory goes first on LD_LIBRARY_PATH, so dlopen("libcuda.so.1")
 * and dlopen("libnvidia-ml.so.1") find the simulated driver and NVML; its
 * libcudart.so.13 is preloaded, because programs that need that runtime
 * through a DT_RPATH (PyTorch's wheels: $ORIGIN/../../nvidia/cu13/lib) would
 * otherwise load NVIDIA's, which cannot run on a simulated driver (it needs
 * cuGetExportTable).  A preloaded library of that soname is the one every
 * later reference binds to.
 */
#include "cli.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef TL_LIBDIR
#define TL_LIBDIR "lib"
#endif

bool cli_exe_dir(char *buf, size_t size)
{
    ssize_t n = readlink("/proc/self/exe", buf, size - 1);
    if (n <= 0 || (size_t)n >= size - 1)
        return false;
    buf[n] = '\0';
    char *slash = strrchr(buf, '/');
    if (!slash)
        return false;
    slash[1] = '\0';
    return true;
}

void cli_libdir_path(char *out, size_t size, const char *dir, const char *rest)
{
    if (TL_LIBDIR[0] == '/')
        snprintf(out, size, "%s/%s", TL_LIBDIR, rest);
    else
        snprintf(out, size, "%s../%s/%s", dir, TL_LIBDIR, rest);
}

bool cli_path_list_safe(const char *command, const char *what, const char *path)
{
    if (strpbrk(path, ": \t")) {
        cli_error("%s: %s path '%s' contains ':' or a blank, which LD_PRELOAD "
                  "and LD_LIBRARY_PATH cannot hold", command, what, path);
        return false;
    }
    return true;
}

/* Whether `item` is an entry of a ':' (or, for LD_PRELOAD, ' ') list. */
static bool list_contains(const char *list, const char *item)
{
    size_t len = strlen(item);
    for (const char *p = list; (p = strstr(p, item)) != NULL; p += len) {
        bool starts = p == list || p[-1] == ':' || p[-1] == ' ';
        bool ends = p[len] == '\0' || p[len] == ':' || p[len] == ' ';
        if (starts && ends)
            return true;
    }
    return false;
}

bool cli_extend_list(const char *name, const char *item, bool prepend)
{
    const char *old = getenv(name);
    if (!old || !*old)
        return setenv(name, item, 1) == 0;
    if (list_contains(old, item))
        return true;
    size_t len = strlen(old) + strlen(item) + 2;
    char *value = malloc(len);
    if (!value)
        return false;
    if (prepend)
        snprintf(value, len, "%s:%s", item, old);
    else
        snprintf(value, len, "%s:%s", old, item);
    bool ok = setenv(name, value, 1) == 0;
    free(value);
    return ok;
}

bool cli_find_library(const char *command, char *out)
{
    const char *override = getenv("TENSORLEAK_LIBRARY");
    if (override && *override) {
        if (access(override, R_OK) != 0 || !realpath(override, out)) {
            cli_error("%s: TENSORLEAK_LIBRARY=%s: %s", command, override, strerror(errno));
            return false;
        }
        return true;
    }
    char dir[PATH_MAX], installed[PATH_MAX + 64], build[PATH_MAX + 64];
    if (!cli_exe_dir(dir, sizeof(dir))) {
        cli_error("%s: cannot locate the tensorleak executable (/proc/self/exe); "
                  "set TENSORLEAK_LIBRARY", command);
        return false;
    }
    cli_libdir_path(installed, sizeof(installed), dir, "libtensorleak.so");
    snprintf(build, sizeof(build), "%s../src/libtensorleak.so", dir);
    const char *candidates[] = { installed, build };
    for (size_t i = 0; i < 2; i++) {
        if (access(candidates[i], R_OK) == 0 && realpath(candidates[i], out))
            return true;
    }
    cli_error("%s: libtensorleak.so not found (looked for %s and %s); "
              "build it or set TENSORLEAK_LIBRARY", command, installed, build);
    return false;
}

/* Resolves the simulated stack's directory to an absolute path in `out`. */
static bool find_sim_dir(const char *command, char out[PATH_MAX])
{
    char dir[PATH_MAX], installed[PATH_MAX + 64], build[PATH_MAX + 64], probe[PATH_MAX * 2];
    if (!cli_exe_dir(dir, sizeof(dir))) {
        cli_error("%s: cannot locate the tensorleak executable (/proc/self/exe)", command);
        return false;
    }
    cli_libdir_path(installed, sizeof(installed), dir, "tensorleak/sim");
    snprintf(build, sizeof(build), "%s../sim", dir);
    const char *candidates[] = { installed, build };
    for (size_t i = 0; i < 2; i++) {
        snprintf(probe, sizeof(probe), "%s/libcuda.so.1", candidates[i]);
        if (access(probe, R_OK) == 0 && realpath(candidates[i], out))
            return true;
    }
    cli_error("%s: simulated driver libcuda.so.1 not found (looked in %s and %s)", command, installed, build);
    return false;
}

bool cli_sim_environment(const char *command)
{
    char sim_dir[PATH_MAX], runtime[PATH_MAX + 32];
    if (!find_sim_dir(command, sim_dir) || !cli_path_list_safe(command, "simulated CUDA", sim_dir))
        return false;
    snprintf(runtime, sizeof(runtime), "%s/libcudart.so.13", sim_dir);
    if (access(runtime, R_OK) != 0) {
        cli_error("%s: simulated runtime %s: %s", command, runtime, strerror(errno));
        return false;
    }
    if (!cli_extend_list("LD_LIBRARY_PATH", sim_dir, true) || !cli_extend_list("LD_PRELOAD", runtime, false)) {
        cli_error("%s: cannot set the environment: %s", command, strerror(errno));
        return false;
    }
    return true;
}
