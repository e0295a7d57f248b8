/*
 * private_deps.c — libunwind, libdw/libelf and jansson, kept out of the
 * program's symbol scope.
 *
 * A preloaded library's DT_NEEDED libraries join the global scope right
 * behind the program's own, ahead of every library the program loads later.
 * libunwind.so.8 exports the C++ unwinding ABI (_Unwind_RaiseException and
 * the rest), so linking it made libstdc++ loaded afterwards (a C++ plugin, a
 * Python extension) unwind with libunwind's implementation while libgcc_s's
 * personality routine and glibc's thread cancellation expect libgcc's: an
 * exception thrown out of std::call_once aborted the process, and a thread
 * ending in pthread_exit skipped its destructors.  The same holds in small
 * for every symbol of libdw, libelf, jansson and the compression libraries
 * they pull in: the program must resolve exactly what it would without us.
 *
 * Linking them statically with hidden symbols would be simplest, but
 * Debian's libunwind.a and libdw.a are not position-independent and
 * libjansson.a assumes copy relocations: none can go into a shared object.
 * So they are loaded with dlopen(RTLD_LOCAL), which keeps a library and
 * everything it needs out of the global scope, through libtensorleak-deps.so
 * (next to this library), which links them and nothing else: the sonames are
 * the linker's, and auditwheel bundles them for the wheel as for any
 * DT_NEEDED.  Our code calls them through hidden stubs generated from
 * private_deps.txt (one indirect jump, as a PLT entry would be), filled here
 * once, at start: the constructor, or the first hook before it, when the
 * process is still starting up (no dlopen while another thread holds the
 * loader's lock).  If the library cannot be loaded, or lacks a name, every
 * stub stays at a function returning 0 and tensorleak tracks nothing; the
 * one warning waits for the first CUDA call, so that a shell or any other
 * program in front of the real one, which never reaches CUDA, stays quiet.
 *
 * Builds that link the libraries directly (the static tracker of the unit
 * tests, -DTL_PRIVATE_DEPS_LINKED) have nothing to load.
 */
#include "tl_internal.h"

#ifdef TL_PRIVATE_DEPS_LINKED

bool tl_private_deps_load(void)
{
    return true;
}

void tl_private_deps_warn(void)
{
}

#else

#include <dlfcn.h>
#include <limits.h>
#include <stdarg.h>
#include <link.h>
#include <string.h>

#include "private_deps_table.h"
#include "tl_version.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* Why the libraries could not be loaded, "" when they were (or not tried). */
static char failure[PATH_MAX + 256];

__attribute__((format(printf, 1, 2))) static bool fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(failure, sizeof failure, fmt, ap);
    va_end(ap);
    return false;
}

void tl_private_deps_warn(void)
{
    static atomic_bool warned;
    if (failure[0])
        tl_warn(&warned, "%s; not tracking", failure);
    else
        tl_private_fds_warn();
}

/* The directory of libtensorleak.so, absolute ($ORIGIN): the deps library is
 * installed beside it in every layout (build tree, prefix, wheel). */
static bool own_directory(char *dir, size_t size)
{
    Dl_info info;
    struct link_map *self = NULL;
    char origin[PATH_MAX];
    if (!dladdr1((void *)own_directory, &info, (void **)&self, RTLD_DL_LINKMAP) || !self ||
        dlinfo(self, RTLD_DI_ORIGIN, origin) != 0)
        return false;
    return (size_t)snprintf(dir, size, "%s", origin) < size;
}

bool tl_private_deps_load(void)
{
    static bool loaded;
    if (loaded)
        return true;
    char path[PATH_MAX];
    char dir[PATH_MAX];
    if (!own_directory(dir, sizeof dir) || (size_t)snprintf(path, sizeof path, "%s/%s", dir, TL_PRIVATE_DEPS_NAME) >= sizeof path)
        return fail("cannot find the directory of libtensorleak.so to load %s", TL_PRIVATE_DEPS_NAME);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        return fail("cannot load %s (%s)", path, why ? why : "unknown error");
    }
    const char *version = tl_real_dlsym(h, "tl_private_deps_version");
    if (!version || strcmp(version, TL_VERSION) != 0) {
        fail("%s is of tensorleak %s, this library of %s", path, version ? version : "(unknown)", TL_VERSION);
        dlclose(h);
        return false;
    }
    /* All names first, then the slots: never half the stubs filled. */
    void *funcs[COUNT(tl_dep_func_names)];
    for (size_t i = 0; i < COUNT(tl_dep_func_names); i++)
        if (!(funcs[i] = tl_real_dlsym(h, tl_dep_func_names[i]))) {
            fail("%s lacks %s (a libunwind, libdw or jansson older than the build's?)", path, tl_dep_func_names[i]);
            dlclose(h);
            return false;
        }
    void *datas[COUNT(tl_dep_data)];
    for (size_t i = 0; i < COUNT(tl_dep_data); i++)
        if (!(datas[i] = tl_real_dlsym(h, tl_dep_data[i].name))) {
            fail("%s lacks %s", path, tl_dep_data[i].name);
            dlclose(h);
            return false;
        }
    for (size_t i = 0; i < COUNT(tl_dep_data); i++)
        *tl_dep_data[i].var = *(void **)datas[i];
    for (size_t i = 0; i < COUNT(tl_dep_func_names); i++)
        tl_dep_slots[i] = funcs[i];
    loaded = true; /* the handle is kept: the stubs point into it */
    /* Before their first call: libunwind's opens its pipe (private_fds.c).
     * A function of each library names its module. */
    void *others[] = {tl_real_dlsym(h, "dwfl_begin"), tl_real_dlsym(h, "elf_begin"), tl_real_dlsym(h, "json_dumps")};
    tl_private_fds_install(tl_real_dlsym(h, "unw_backtrace"), others, sizeof others / sizeof others[0]);
    return true;
}

#endif
