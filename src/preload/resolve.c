/*
 * resolve.c — finding the real functions behind our hooks.
 *
 * A hook forwards to the pointer captured when the program looked the
 * function up (through dlsym on the driver's handle or through
 * cuGetProcAddress); for direct calls (a program linked with -lcuda or
 * -lcudart) it asks for the next definition after ours, RTLD_NEXT, and then
 * the driver the program loaded.  Both look-ups are lookup.c's (base/),
 * glibc's dlsym and the driver's handle; what this file adds is the table
 * of hooks, and that none of them is ever taken for the real function.
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

bool tl_is_own_hook(const void *fn)
{
    for (int i = 0; fn && i < TL_HOOK_COUNT; i++)
        if (tl_hooks[i].hook == fn)
            return true;
    return false;
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
    if (!fn && h->base) {
        fn = tl_driver_symbol(h->name);
        /* Whatever the driver's handle finds: never one of our own hooks
         * as "the real one". */
        if (tl_is_own_hook(fn))
            fn = NULL;
    }
    if (fn) {
        void *expected = NULL;
        if (!atomic_compare_exchange_strong(&h->real, &expected, fn))
            fn = expected;
    }
    return fn;
}
