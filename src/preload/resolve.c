/*
 * resolve.c — finding the real functions behind our hooks.
 *
 * A hook forwards to the pointer captured when the program looked the
 * function up (through dlsym on the driver's handle or through
 * cuGetProcAddress); for direct calls (a program linked with -lcuda or
 * -lcudart) it asks for the next definition after ours, RTLD_NEXT.  Our own
 * lookups use glibc's dlsym by version: glibc 2.34 moved it into libc
 * (dlsym@GLIBC_2.34), older ones have dlsym@GLIBC_2.2.5 in libdl.
 */
#include "hooks.h"

#include <dlfcn.h>
#include <string.h>

struct tl_hook tl_hooks[TL_HOOK_COUNT] = {
#define TL_ROW_DRIVER(name, base, ver, ptsz) [TL_HOOK_##name] = {#name, #base, ver, ptsz, (void *)&name, NULL},
#define TL_ROW_RUNTIME(name) [TL_HOOK_##name] = {#name, NULL, 0, false, (void *)&name, NULL},
    TL_DRIVER_HOOKS(TL_ROW_DRIVER)
    TL_RUNTIME_HOOKS(TL_ROW_RUNTIME)
#undef TL_ROW_DRIVER
#undef TL_ROW_RUNTIME
};

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

/* The look-up itself: the libcuda.so.1 the program already loaded.
 * RTLD_NOLOAD: we never load a driver the program did not load.  No handle is
 * kept: a program (or NVIDIA's static runtime, when the driver is unusable)
 * may dlclose the driver, and a kept handle would then point at an unmapped
 * library. */
static void *driver_lookup(const char *name)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOLOAD | RTLD_LAZY);
    if (!h)
        return NULL;
    void *fn = tl_real_dlsym(h, name);
    /* glibc's dlclose, not our interposer (modules.c): this runs inside
     * reports, with the tables locked. */
    typedef int (*dlclose_fn)(void *);
    static _Atomic(dlclose_fn) real_dlclose;
    dlclose_fn close_fn = atomic_load(&real_dlclose);
    if (!close_fn) {
        close_fn = (dlclose_fn)tl_real_dlsym(RTLD_NEXT, "dlclose");
        atomic_store(&real_dlclose, close_fn);
    }
    if (close_fn)
        close_fn(h);
    /* Never hand back one of our own hooks as "the real one". */
    for (int i = 0; fn && i < TL_HOOK_COUNT; i++)
        if (tl_hooks[i].hook == fn)
            return NULL;
    return fn;
}

/* A driver symbol we call ourselves (cuCtxGetCurrent, cuMemGetInfo_v2, ...).
 * Found answers are kept, by name, until the next dlclose: dlopen and dlsym
 * take the loader's lock, and the watcher asks on every live update.  A
 * thread that holds that lock when the program makes a child by raw clone
 * (no fork handlers, the lock not reset) leaves it held in the child, whose
 * exit() then waits for it forever in the loader's finalisation.  Names
 * are string literals of ours, a handful: a slot per name, taken in order. */
#define DRIVER_SYMBOLS 32
static struct {
    _Atomic(const char *) name;
    _Atomic(void *) fn;
    atomic_uint closes;        /* tl_dlcloses when fn was looked up */
    atomic_ullong loads;       /* glibc's count of loads then (a miss is kept until it changes) */
    atomic_bool looked;        /* fn (NULL too) is an answer */
} driver_symbols[DRIVER_SYMBOLS];

static unsigned long long module_adds(void)
{
    unsigned long long counts[2];
    tl_module_loads(counts); /* dl_iterate_phdr: the loader's list lock, never its main lock */
    return counts[0];
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
    if (i == DRIVER_SYMBOLS)
        return driver_lookup(name); /* more names than slots: asked each time */
    if (atomic_load_explicit(&driver_symbols[i].looked, memory_order_acquire) &&
        atomic_load_explicit(&driver_symbols[i].closes, memory_order_relaxed) == closes) {
        void *fn = atomic_load_explicit(&driver_symbols[i].fn, memory_order_relaxed);
        if (fn || atomic_load_explicit(&driver_symbols[i].loads, memory_order_relaxed) == module_adds())
            return fn;
    }
    unsigned long long loads = module_adds();
    void *fn = driver_lookup(name);
    atomic_store_explicit(&driver_symbols[i].looked, false, memory_order_relaxed);
    atomic_store_explicit(&driver_symbols[i].fn, fn, memory_order_relaxed);
    atomic_store_explicit(&driver_symbols[i].closes, closes, memory_order_relaxed);
    atomic_store_explicit(&driver_symbols[i].loads, loads, memory_order_relaxed);
    atomic_store_explicit(&driver_symbols[i].looked, true, memory_order_release);
    return fn;
}

void tl_driver_symbols_prefetch(void)
{
    static const char *const watched[] = {
        "cuMemGetInfo_v2",            /* growth.c: each device's figures */
        "cuDeviceGet",                /* pools.c */
        "cuDeviceGetGraphMemAttribute",
        "cuMemPoolGetAttribute",
        "cuDeviceGetMemPool",
        "cuDeviceGetDefaultMemPool",
    };
    for (size_t i = 0; i < sizeof watched / sizeof watched[0]; i++)
        (void)tl_driver_symbol(watched[i]);
}

/* Before the first thread of ours starts: a child made by raw clone forwards
 * every hook, and must find the real function resolved, not ask dlsym for it
 * (the loader's lock may have been one of our threads' at the clone).  The
 * next definition after ours, as tl_real would find it at the first call;
 * driver rows the driver loaded later are captured at the program's own
 * look-ups (procaddr.c). */
void tl_resolve_all(void)
{
    for (int i = 0; i < TL_HOOK_COUNT; i++) {
        struct tl_hook *h = &tl_hooks[i];
        if (atomic_load_explicit(&h->real, memory_order_acquire))
            continue;
        void *fn = tl_real_dlsym(RTLD_NEXT, h->name);
        void *expected = NULL;
        if (fn && fn != h->hook)
            atomic_compare_exchange_strong(&h->real, &expected, fn);
    }
}

struct tl_hook *tl_hook_by_name(const char *name)
{
    for (int i = 0; i < TL_HOOK_COUNT; i++)
        if (strcmp(tl_hooks[i].name, name) == 0)
            return &tl_hooks[i];
    return NULL;
}

void *tl_real(enum tl_hook_id id)
{
    struct tl_hook *h = &tl_hooks[id];
    void *fn = atomic_load_explicit(&h->real, memory_order_acquire);
    if (TL_LIKELY(fn))
        return fn;
    fn = tl_real_dlsym(RTLD_NEXT, h->name);
    if (fn == h->hook)
        fn = NULL;
    if (!fn && h->base)
        fn = tl_driver_symbol(h->name);
    if (fn) {
        void *expected = NULL;
        if (!atomic_compare_exchange_strong(&h->real, &expected, fn))
            fn = expected;
    }
    return fn;
}
