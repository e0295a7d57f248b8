/*
 * procaddr.c — the two ways a program looks a driver function up at run
 * time, and how we hand it a hook instead:
 *
 *  - dlsym(handle, "cuMemAlloc_v2") on a dlopen'ed libcuda.so.1: a function
 *    merely exported by an LD_PRELOAD library is not in that handle's scope,
 *    so we interpose dlsym itself (dlsym_trampoline.S + tl_dlsym_route);
 *  - cuGetProcAddress(_v2)("cuMemAlloc", cudaVersion, flags): NVIDIA's
 *    runtime fetches every entry point this way.  We ask the real driver
 *    first, then return the hook of *exactly* the variant it resolved —
 *    a hook of another variant would break the caller's ABI
 *    (HAMi-core PR #320).
 */
#include "hooks.h"

#include <ctype.h>
#include <dlfcn.h>
#include <string.h>

/* Driver names are "cu" + capital letter, runtime names "cuda" + capital:
 * cudnn*, cublas*, cufft* ... pass through untouched (HAMi-core PR #215). */
static bool maybe_ours(const char *name)
{
    if (name[0] != 'c' || name[1] != 'u')
        return false;
    if (isupper((unsigned char)name[2]))
        return true;
    return strncmp(name, "cuda", 4) == 0 && isupper((unsigned char)name[4]);
}

/* Called by the dlsym trampoline.  Does no initialisation beyond resolving
 * glibc's dlsym: heavy work inside dlsym hung driver start-up in other
 * interposers (HAMi-core #52). */
void *tl_dlsym_route(void *handle, const char *name, void **result)
{
    static void *glibc_dlsym;
    if (!glibc_dlsym) {
        glibc_dlsym = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
        if (!glibc_dlsym)
            glibc_dlsym = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    }
    /* RTLD_NEXT is about the caller's position in the search order: only
     * glibc, reached by the tail jump, can answer it. */
    if (!name || handle == RTLD_NEXT || !maybe_ours(name))
        return glibc_dlsym;
    struct tl_hook *h = tl_hook_by_name(name);
    if (!h)
        return glibc_dlsym;
    /* Always honour the caller's handle: the symbol must exist there. */
    void *real = tl_real_dlsym(handle, name);
    if (!real) {
        *result = NULL;
        return NULL;
    }
    if (tl_is_own_hook(real)) {
        /* RTLD_DEFAULT found our export first.  Answer as the process would
         * without us: our hook if a real definition exists, else NULL. */
        if (!tl_real((enum tl_hook_id)(h - tl_hooks)))
            real = NULL;
        *result = real ? h->hook : NULL;
        return NULL;
    }
    void *expected = NULL;
    atomic_compare_exchange_strong(&h->real, &expected, real);
    *result = h->hook;
    return NULL;
}

/* ---- cuGetProcAddress --------------------------------------------------- */

/* The variant a (symbol, version, flags) lookup means, per our table: among
 * rows with this base name and the requested stream flavour, the newest whose
 * minimum version is <= cudaVersion.  NULL when the caller wants a variant
 * we do not hook (e.g. a pre-3.2 32-bit cuMemAlloc). */
static struct tl_hook *variant_for(const char *symbol, int version, cuuint64_t flags)
{
    bool want_ptsz = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    bool base_has_ptsz = false;
    for (int i = 0; i < TL_HOOK_COUNT; i++)
        if (tl_hooks[i].base && strcmp(tl_hooks[i].base, symbol) == 0 && tl_hooks[i].ptsz)
            base_has_ptsz = true;
    struct tl_hook *best = NULL;
    for (int i = 0; i < TL_HOOK_COUNT; i++) {
        struct tl_hook *h = &tl_hooks[i];
        if (!h->base || strcmp(h->base, symbol) != 0)
            continue;
        if (base_has_ptsz && h->ptsz != want_ptsz)
            continue;
        if (h->min_version <= version && (!best || h->min_version > best->min_version))
            best = h;
    }
    return best;
}

static bool known_base(const char *symbol)
{
    for (int i = 0; i < TL_HOOK_COUNT; i++)
        if (tl_hooks[i].base && strcmp(tl_hooks[i].base, symbol) == 0)
            return true;
    return false;
}

/* Replaces *pfn (what the real driver returned) by our hook of the same
 * variant.  First by identity: the pointer equals one we already know for
 * a variant.  Then by the version table. */
static void swap_in_hook(const char *symbol, void **pfn, int version, cuuint64_t flags)
{
    if (!symbol || !pfn || !*pfn || !known_base(symbol) || tl_is_own_hook(*pfn))
        return;
    for (int i = 0; i < TL_HOOK_COUNT; i++) {
        struct tl_hook *h = &tl_hooks[i];
        if (h->base && strcmp(h->base, symbol) == 0 && atomic_load(&h->real) == *pfn) {
            *pfn = h->hook;
            return;
        }
    }
    struct tl_hook *h = variant_for(symbol, version, flags);
    if (!h) {
        static atomic_bool warned;
        tl_warn(&warned, "%s requested at CUDA version %d (a legacy variant) is not tracked", symbol, version);
        return;
    }
    void *expected = NULL;
    atomic_compare_exchange_strong(&h->real, &expected, *pfn);
    *pfn = h->hook;
}

TL_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                       CUdriverProcAddressQueryResult *symbolStatus)
{
    bool tracked = tl_ensure_init();
    CUresult (*real)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *) = REAL(cuGetProcAddress_v2);
    if (!real)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = real(symbol, pfn, cudaVersion, flags, symbolStatus);
    if (rc == CUDA_SUCCESS && tracked) /* a raw-clone child gets the real function */
        swap_in_hook(symbol, pfn, cudaVersion, flags);
    return rc;
}

TL_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    bool tracked = tl_ensure_init();
    CUresult (*real)(const char *, void **, int, cuuint64_t) = REAL(cuGetProcAddress);
    if (!real)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = real(symbol, pfn, cudaVersion, flags);
    if (rc == CUDA_SUCCESS && tracked) /* a raw-clone child gets the real function */
        swap_in_hook(symbol, pfn, cudaVersion, flags);
    return rc;
}
