/*
 * lookup.c — functions of other libraries that tensorleak calls itself,
 * found without the hooks: glibc's dlsym (by version: glibc 2.34 moved it
 * into libc, dlsym@GLIBC_2.34; older ones have dlsym@GLIBC_2.2.5 in libdl),
 * the driver's entry points that reports and the watcher call
 * (cuCtxGetCurrent, cuMemGetInfo_v2, ...), and the loader's counts of loads
 * and unloads that say when an answer may be stale.  Every layer above uses
 * it and it uses none of them; the hooks' own real functions are
 * resolve.c's (preload/), which asks here.
 */
#include "tl_internal.h"

#include <dlfcn.h>
#include <link.h>
#include <string.h>

typedef void *(*dlsym_fn)(void *, const char *);
static _Atomic(dlsym_fn) real_dlsym;

static dlsym_fn load_real_dlsym(void)
{
    dlsym_fn fn = atomic_load_explicit(&real_dlsym, memory_order_acquire);
    if (TL_LIKELY(fn))
        return fn;
    fn = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (!fn)
        fn = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    atomic_store_explicit(&real_dlsym, fn, memory_order_release);
    return fn;
}

void *tl_real_dlsym(void *handle, const char *name)
{
    dlsym_fn fn = load_real_dlsym();
    return fn ? fn(handle, name) : NULL;
}

/* Successful dlcloses through our interposer (modules.c): a driver symbol
 * looked up before one may point into a library that is gone. */
atomic_uint tl_dlcloses;

int tl_real_dlclose(void *handle)
{
    typedef int (*dlclose_fn)(void *);
    static _Atomic(dlclose_fn) real_dlclose;
    dlclose_fn close_fn = atomic_load(&real_dlclose);
    if (!close_fn) {
        close_fn = (dlclose_fn)tl_real_dlsym(RTLD_NEXT, "dlclose");
        atomic_store(&real_dlclose, close_fn);
    }
    return close_fn ? close_fn(handle) : -1;
}

/* The look-up itself: the libcuda.so.1 the program already loaded.
 * RTLD_NOLOAD: we never load a driver the program did not load.  No handle is
 * kept: a program (or NVIDIA's static runtime, when the driver is unusable)
 * may dlclose the driver, and a kept handle would then point at an unmapped
 * library.  *base: the driver's load address, 0 when it is not loaded; a
 * NULL name asks for that alone. */
static void *driver_lookup(const char *name, uintptr_t *base)
{
    *base = 0;
    void *h = dlopen("libcuda.so.1", RTLD_NOLOAD | RTLD_LAZY);
    if (!h)
        return NULL;
    void *fn = name ? tl_real_dlsym(h, name) : NULL;
    struct link_map *lm = NULL;
    if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm)
        *base = lm->l_addr;
    /* glibc's dlclose, not our interposer (modules.c): this runs inside
     * reports, with the tables locked. */
    tl_real_dlclose(h);
    return fn;
}

/* A driver symbol we call ourselves (cuCtxGetCurrent, cuMemGetInfo_v2, ...),
 * or, for tl_real (resolve.c), one we hook: the answer is what the driver's
 * handle finds, and tl_real refuses it if that is a hook of ours.
 * Found answers are kept, by name, until the next dlclose: dlopen and dlsym
 * take the loader's lock, and the watcher, which asks on every live update,
 * must never take it (tl_may_take_loader_lock): it gets the kept answer, or
 * NULL where none is good (not yet looked up, or from before a dlclose)
 * until a program thread looks again.  Names are string literals of ours:
 * a slot per name, taken in order, more slots than the driver hooks
 * (hooks.h; tl_real asks for those the program's look-ups did not give it)
 * and the watcher's names together, so that the watcher's always get one. */
#define DRIVER_SYMBOLS 128
static struct {
    _Atomic(const char *) name;
    _Atomic(void *) fn;
    atomic_uint closes;        /* tl_dlcloses when fn was looked up */
    atomic_uintptr_t driver;   /* the driver's load address then, 0 when none was loaded */
    atomic_ullong loads;       /* glibc's count of loads then (a miss is kept until it changes) */
    atomic_bool looked;        /* fn (NULL too) is an answer */
} driver_symbols[DRIVER_SYMBOLS];

static unsigned long long module_adds(void)
{
    unsigned long long counts[2];
    tl_module_loads(counts); /* dl_iterate_phdr: the loader's list lock, never its main lock */
    return counts[0];
}

bool tl_may_take_loader_lock(void)
{
    /* Unset before the library connects its layers (and in the static
     * builds of the unit tests): no watcher runs then. */
    bool (*on_watcher)(void) = tl_upcalls.snapshot_on_watcher;
    return !on_watcher || !on_watcher();
}

/* Slot i's answer for `name`, looked up now; `closes`: tl_dlcloses before. */
static void *look_up(int i, const char *name, unsigned closes)
{
    unsigned long long loads = module_adds();
    uintptr_t driver;
    void *fn = driver_lookup(name, &driver);
    atomic_store_explicit(&driver_symbols[i].looked, false, memory_order_relaxed);
    atomic_store_explicit(&driver_symbols[i].fn, fn, memory_order_relaxed);
    atomic_store_explicit(&driver_symbols[i].closes, closes, memory_order_relaxed);
    atomic_store_explicit(&driver_symbols[i].driver, driver, memory_order_relaxed);
    atomic_store_explicit(&driver_symbols[i].loads, loads, memory_order_relaxed);
    atomic_store_explicit(&driver_symbols[i].looked, true, memory_order_release);
    return fn;
}

void *tl_driver_symbol(const char *name)
{
    unsigned closes = atomic_load_explicit(&tl_dlcloses, memory_order_acquire);
    int i = 0;
    for (; i < DRIVER_SYMBOLS; i++) {
        const char *n = atomic_load_explicit(&driver_symbols[i].name, memory_order_acquire);
        if (!n) {
            const char *expected = NULL;
            if (atomic_compare_exchange_strong(&driver_symbols[i].name, &expected, name) || expected == name ||
                strcmp(expected, name) == 0)
                break;
            continue;
        }
        if (n == name || strcmp(n, name) == 0)
            break;
    }
    bool may_look = tl_may_take_loader_lock();
    uintptr_t driver;
    if (i == DRIVER_SYMBOLS)
        return may_look ? driver_lookup(name, &driver) : NULL; /* more names than slots: asked each time */
    if (atomic_load_explicit(&driver_symbols[i].looked, memory_order_acquire) &&
        atomic_load_explicit(&driver_symbols[i].closes, memory_order_relaxed) == closes) {
        void *fn = atomic_load_explicit(&driver_symbols[i].fn, memory_order_relaxed);
        /* The watcher keeps a miss: the program's threads look again once
         * a library was loaded (the hooks, their reports). */
        if (fn || !may_look || atomic_load_explicit(&driver_symbols[i].loads, memory_order_relaxed) == module_adds())
            return fn;
    }
    /* Not looked up yet, or looked up before a dlclose, which may have
     * unloaded the driver: unknown to the watcher until a program thread
     * looks (the prefetch, tl_driver_symbols_refresh after each dlclose). */
    if (!may_look)
        return NULL;
    return look_up(i, name, closes);
}

void tl_driver_symbols_refresh(void)
{
    unsigned closes = atomic_load_explicit(&tl_dlcloses, memory_order_acquire);
    /* An answer from the driver still loaded where it was is still good
     * (the same file at the same address): only its count moves on. */
    uintptr_t driver;
    (void)driver_lookup(NULL, &driver);
    for (int i = 0; i < DRIVER_SYMBOLS; i++) {
        const char *name = atomic_load_explicit(&driver_symbols[i].name, memory_order_acquire);
        if (!name || !atomic_load_explicit(&driver_symbols[i].looked, memory_order_acquire))
            continue;
        if (driver && atomic_load_explicit(&driver_symbols[i].driver, memory_order_relaxed) == driver)
            atomic_store_explicit(&driver_symbols[i].closes, closes, memory_order_release);
        else
            (void)look_up(i, name, closes);
    }
}

void tl_driver_symbols_prefetch(void)
{
    /* Every name the watcher's reports and live updates look up: the
     * watcher never looks one up itself (tl_may_take_loader_lock), so one
     * missing here is unknown (NULL) there until a program thread asks. */
    static const char *const watched[] = {
        "cuMemGetInfo_v2",            /* growth.c: each device's figures */
        "cuDeviceGet",                /* pools.c */
        "cuDeviceGetGraphMemAttribute",
        "cuMemPoolGetAttribute",
        "cuDeviceGetMemPool",
        "cuDeviceGetDefaultMemPool",
        "cuCtxGetCurrent",            /* assemble.c: the devices of a report */
        "cuCtxGetDevice",
        "cuCtxSetCurrent",
        "cuDeviceGetCount",
        "cuDeviceGetPCIBusId",
        "cuDeviceGetUuid",
        "cuDeviceGetUuid_v2",
        "cuMemGetAddressRange_v2",    /* the hooks and attach_before.c */
        "cuMemGetAllocationPropertiesFromHandle",
        "cuPointerGetAttribute",
        "cuStreamIsCapturing",
    };
    for (size_t i = 0; i < sizeof watched / sizeof watched[0]; i++)
        (void)tl_driver_symbol(watched[i]);
}

/* ---- the loader's counts ------------------------------------------------- */

static int count_loads(struct dl_phdr_info *info, size_t size, void *data)
{
    unsigned long long *counts = data;
    if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs) {
        counts[0] = info->dlpi_adds;
        counts[1] = info->dlpi_subs;
    }
    return 1; /* the counts are the same in every entry: the first will do */
}

void tl_module_loads(unsigned long long counts[2])
{
    counts[0] = counts[1] = 0;
    dl_iterate_phdr(count_loads, counts);
}
