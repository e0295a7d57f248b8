/* A C program that loads a C++ plugin after the preload (dlopen, as CPython
 * loads an extension), keeps one device allocation, runs every unwinding
 * case of the plugin and prints where the names of tensorleak's own
 * dependencies resolve in the global scope.  Its output and status must be
 * the same with and without libtensorleak.so.
 *
 *   cxx_host PLUGIN [RTLD_GLOBAL|RTLD_LOCAL] [keep-in-plugin]
 *
 * keep-in-plugin: the kept allocation is the plugin's (cxx_keep_device, a
 * C++ function), not main's, and only it runs.
 */
#define _GNU_SOURCE
#include "cudart_compat.h"
#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

static const char *const cases[] = {
    "cxx_plain_throw",
    "cxx_call_once_throw",
    "cxx_rethrow_across_libraries",
    "cxx_pthread_exit_runs_destructors",
    "cxx_pthread_cancel_runs_destructors",
};

/* One name of each library tensorleak uses, and of the C++ unwinding ABI. */
static const char *const probes[] = {
    "_Unwind_RaiseException", "_Unwind_Resume", "_Unwind_ForcedUnwind", "_Unwind_Backtrace",
    "unw_backtrace", "_ULx86_64_step", "dwfl_begin", "elf_begin", "json_object", "lzma_code",
    "BZ2_bzDecompress", "inflate",
};

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: cxx_host PLUGIN [RTLD_GLOBAL|RTLD_LOCAL]\n");
        return 2;
    }
    bool in_plugin = argc > 3 && strcmp(argv[3], "keep-in-plugin") == 0;
    void *dev = NULL;
    if (!in_plugin && cudaMalloc(&dev, 1u << 20) != cudaSuccess) /* kept: the report's one leak */
        return 3;
    int mode = argc > 2 && strcmp(argv[2], "RTLD_GLOBAL") == 0 ? RTLD_GLOBAL : RTLD_LOCAL;
    void *plugin = dlopen(argv[1], RTLD_NOW | mode);
    if (!plugin) {
        fprintf(stderr, "cxx_host: %s\n", dlerror());
        return 4;
    }
    if (in_plugin) {
        int (*keep)(unsigned) = (int (*)(unsigned))dlsym(plugin, "cxx_keep_device");
        return keep && keep(1u << 20) ? 0 : 3;
    }
    int failed = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int (*fn)(void) = (int (*)(void))dlsym(plugin, cases[i]);
        int ok = fn && fn();
        printf("%s: %s\n", cases[i], ok ? "ok" : "FAILED");
        fflush(stdout);
        failed += !ok;
    }
    for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) {
        void *p = dlsym(RTLD_DEFAULT, probes[i]);
        Dl_info info;
        const char *where = "not in the global scope";
        if (p && dladdr(p, &info) && info.dli_fname) {
            where = strrchr(info.dli_fname, '/') ? strrchr(info.dli_fname, '/') + 1 : info.dli_fname;
        }
        printf("%s: %s\n", probes[i], where);
    }
    return failed ? 1 : 0;
}
