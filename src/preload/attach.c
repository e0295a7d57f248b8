/*
 * attach.c — the library's side of `tensorleak attach PID`
 * (include/tensorleak_attach.h is the contract with the injector).
 *
 * The injector dlopens this library into a running process and calls these
 * functions from one hijacked thread.  Nothing here writes the driver's code:
 * prepare builds a trampoline per hooked entry point of the loaded
 * libcuda.so.1 (patch.c) and hands back the bytes; the injector writes them
 * while every thread is stopped.  Before any patch is written, each hook's
 * real function is its trampoline (or, for an entry that could not be moved,
 * the untouched entry itself), so a hook never calls back into a patched
 * entry.  Tracking starts at commit: between the write and commit the hooks
 * only forward (tl_active false).
 *
 * Covered: every call into a patched driver entry, whoever holds its address
 * (the program, NVIDIA's runtime, which ends every cudaMalloc family call in
 * the driver, PyTorch's driver pointers).  Not covered: an entry refused
 * here (one warning names it; a later cuGetProcAddress of it hands out our
 * hook, so code that looks it up after the attach is tracked); the runtime's
 * own rows (cudaMalloc and the rest are seen as the driver calls they make).
 *
 * The library is loaded RTLD_LOCAL and never closed: its exported hook names
 * interpose nothing, and its destructor writes the exit report.  Options come
 * from the settings string only.
 */
#include "hooks.h"
#include "patch.h"

#include "tensorleak_attach.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

enum attach_state { NOT_ATTACHED, PREPARED, ATTACHED, DETACHING };

static pthread_mutex_t attach_lock = PTHREAD_MUTEX_INITIALIZER;
static enum attach_state state;
static bool ever_attached; /* tl_used is then ours, not the preload's */

/* Per driver row: where its trampoline is (NULL: not built, or refused) and
 * the patch that sends its entry to the hook.  Trampolines are never freed:
 * a thread may still be running in one after a detach. */
static struct {
    void *entry;
    void *trampoline;
    bool refused;
    struct tensorleak_patch patch;
} rows[TL_HOOK_COUNT];
static struct tensorleak_patch patches[TL_HOOK_COUNT]; /* the plan's */
static struct tensorleak_attach_plan plan;
static unsigned char *arena;
static size_t arena_size;


__attribute__((format(printf, 3, 4))) static void fail(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || !errlen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* Another copy of libtensorleak in the process (preloaded or attached from
 * another path): its path in `other`. */
struct other_copy {
    const char *self;
    char other[512];
};

static int find_other_copy(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    struct other_copy *o = arg;
    const char *name = info->dlpi_name;
    if (!name || !*name || strcmp(name, o->self) == 0)
        return 0;
    const char *base = strrchr(name, '/');
    base = base ? base + 1 : name;
    if (strncmp(base, "libtensorleak.so", 16) != 0)
        return 0;
    snprintf(o->other, sizeof o->other, "%s", name);
    return 1;
}

/* Is our own file named in LD_PRELOAD (the preload tracks, or will at its
 * first CUDA call)? */
static bool preloaded_here(const char *self)
{
    const char *preload = getenv("LD_PRELOAD");
    const char *base = strrchr(self, '/');
    base = base ? base + 1 : self;
    return preload && *base && strstr(preload, base) != NULL;
}

/* The settings string as an environment-like array (tl_options_load). */
static char **settings_env(const char *settings, char *err, size_t errlen)
{
    size_t lines = 1;
    for (const char *p = settings; *p; p++)
        lines += *p == '\n';
    char **envp = calloc(lines + 1, sizeof *envp);
    char *copy = strdup(settings);
    if (!envp || !copy) {
        free(envp);
        free(copy);
        fail(err, errlen, "out of memory");
        return NULL;
    }
    size_t n = 0;
    for (char *save = NULL, *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (strncmp(line, "TENSORLEAK_", 11) != 0 || !strchr(line, '=')) {
            fail(err, errlen, "settings: expected TENSORLEAK_NAME=value, got '%.100s'", line);
            free(copy);
            free(envp);
            return NULL;
        }
        envp[n++] = line;
    }
    return envp; /* envp[0] points at the start of copy (or envp is empty) */
}

static void settings_env_free(char **envp, const char *settings)
{
    (void)settings;
    if (envp && envp[0])
        free(envp[0]);
    free(envp);
}

static bool arena_ready(void *libcuda_entry, char *err, size_t errlen)
{
    if (arena)
        return true;
    long page = sysconf(_SC_PAGESIZE);
    arena_size = ((size_t)TL_HOOK_COUNT * TL_PATCH_SLOT + (size_t)page - 1) & ~((size_t)page - 1);
    arena = tl_patch_arena_near(libcuda_entry, arena_size);
    if (!arena) {
        fail(err, errlen, "no free memory within reach of libcuda.so.1 for the trampolines");
        return false;
    }
    return true;
}

/* Each row's hook as this library defines it.  `&cuMemAlloc_v2` in our code
 * goes through the GOT, which the loader resolved in the global scope first:
 * where the program links libcuda.so.1, that is the driver's entry, and a
 * patch "to the hook" would jump to itself.  Our own handle's dlsym looks in
 * this library first. */
static bool own_hooks(char *err, size_t errlen)
{
    Dl_info self;
    if (!dladdr((void *)&tensorleak_attach_prepare, &self) || !self.dli_fname) {
        fail(err, errlen, "cannot find the library's own path");
        return false;
    }
    void *h = dlopen(self.dli_fname, RTLD_NOLOAD | RTLD_LAZY);
    if (!h) {
        fail(err, errlen, "cannot open the library's own handle");
        return false;
    }
    bool ok = true;
    for (int i = 0; i < TL_HOOK_COUNT && ok; i++) {
        void *fn = tl_real_dlsym(h, tl_hooks[i].name);
        Dl_info where;
        if (!fn || !dladdr(fn, &where) || where.dli_fbase != self.dli_fbase) {
            fail(err, errlen, "the library does not define %s", tl_hooks[i].name);
            ok = false;
        } else {
            tl_hooks[i].hook = fn;
        }
    }
    dlclose(h);
    return ok;
}

/* Builds (or, after a detach, finds again) every driver row's trampoline. */
static bool build_plan(void *libcuda, char *err, size_t errlen)
{
    uint32_t count = 0;
    bool arena_writable = false;
    for (int i = 0; i < TL_HOOK_COUNT; i++) {
        struct tl_hook *h = &tl_hooks[i];
        if (!h->base || TL_HOOK_IS_CONTEXT_ROW(i))
            continue;
        void *entry = tl_real_dlsym(libcuda, h->name);
        if (!entry || entry == h->hook)
            continue;
        if (rows[i].entry == entry && (rows[i].trampoline || rows[i].refused)) {
            /* Attached before: the trampoline stays valid while the entry's
             * bytes are the ones it was built from. */
            if (rows[i].trampoline && memcmp(entry, rows[i].patch.original, rows[i].patch.length) == 0)
                patches[count++] = rows[i].patch;
            else if (rows[i].trampoline)
                tl_warn(NULL, "attach: %s is not hooked: its first bytes changed since the last attach", h->name);
            continue;
        }
        if (!arena_ready(entry, err, errlen))
            return false;
        if (!arena_writable) {
            /* After a detach other threads may still run in the arena's
             * trampolines: it stays executable while a new row is written. */
            int prot = ever_attached ? PROT_READ | PROT_WRITE | PROT_EXEC : PROT_READ | PROT_WRITE;
            if (mprotect(arena, arena_size, prot) != 0) {
                fail(err, errlen, "cannot write the trampolines: mprotect failed");
                return false;
            }
            arena_writable = true;
        }
        char why[160];
        void *tramp = NULL;
        struct tensorleak_patch p;
        rows[i].entry = entry;
        if (!tl_patch_build(entry, h->hook, arena + (size_t)i * TL_PATCH_SLOT, &p, &tramp, why, sizeof why)) {
            rows[i].refused = true;
            tl_warn(NULL, "attach: %s is not hooked: %s", h->name, why);
            continue;
        }
        rows[i].trampoline = tramp;
        rows[i].patch = p;
        patches[count++] = p;
    }
    if (arena_writable && mprotect(arena, arena_size, PROT_READ | PROT_EXEC) != 0) {
        fail(err, errlen, "cannot make the trampolines executable: mprotect failed");
        return false;
    }
    plan.abi = TENSORLEAK_ATTACH_ABI;
    plan.count = count;
    plan.patches = patches;
    return true;
}

/* Each driver row's real function: its trampoline, or the untouched entry
 * when it was refused.  Stored before any patch is written. */
static void point_reals_at_trampolines(void)
{
    for (int i = 0; i < TL_HOOK_COUNT; i++) {
        if (rows[i].trampoline)
            atomic_store_explicit(&tl_hooks[i].real, rows[i].trampoline, memory_order_release);
        else if (rows[i].refused)
            atomic_store_explicit(&tl_hooks[i].real, rows[i].entry, memory_order_release);
    }
}

/* Refuses a process another tensorleak tracks already (or will: preloaded,
 * before its first CUDA call). */
static bool tracked_elsewhere(char *err, size_t errlen)
{
    Dl_info self;
    if (!dladdr((void *)&tensorleak_attach_prepare, &self) || !self.dli_fname) {
        fail(err, errlen, "cannot find the library's own path");
        return true;
    }
    struct other_copy o = {self.dli_fname, ""};
    if (dl_iterate_phdr(find_other_copy, &o)) {
        fail(err, errlen, "the process is already tracked by %s", o.other);
        return true;
    }
    if (preloaded_here(self.dli_fname) || (atomic_load(&tl_used) && !ever_attached)) {
        fail(err, errlen, "the process is already tracked: tensorleak is preloaded (LD_PRELOAD)");
        return true;
    }
    return false;
}

TL_EXPORT const struct tensorleak_attach_plan *tensorleak_attach_prepare(const char *settings, char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = 0;
    pthread_mutex_lock(&attach_lock);
    const struct tensorleak_attach_plan *result = NULL;
    char **envp = NULL;
    if (state == ATTACHED || state == PREPARED) {
        fail(err, errlen, "the process is already tracked: tensorleak is attached");
        goto out;
    }
    if (state == DETACHING) {
        fail(err, errlen, "a detach is under way (tensorleak_detach_finish not called)");
        goto out;
    }
    if (tracked_elsewhere(err, errlen))
        goto out;
    void *libcuda = dlopen("libcuda.so.1", RTLD_NOLOAD | RTLD_LAZY);
    if (!libcuda) {
        fail(err, errlen, "libcuda.so.1 is not loaded in the process (it has not used CUDA yet)");
        goto out;
    }
    envp = settings_env(settings ? settings : "", err, errlen);
    if (!envp)
        goto close;
    if (!own_hooks(err, errlen) || !tl_attach_options(envp, err, errlen) || !build_plan(libcuda, err, errlen))
        goto close;
    /* Nothing below fails: the process changes from here only. */
    tl_attach_init();
    point_reals_at_trampolines();
    ever_attached = true;
    state = PREPARED;
    result = &plan;
close:
    /* The driver stays loaded: the program holds it. */
    dlclose(libcuda);
out:
    settings_env_free(envp, settings);
    pthread_mutex_unlock(&attach_lock);
    return result;
}

TL_EXPORT int tensorleak_attach_commit(char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = 0;
    pthread_mutex_lock(&attach_lock);
    int rc = -1;
    if (state != PREPARED) {
        fail(err, errlen, "tensorleak_attach_prepare has not succeeded");
    } else {
        tl_attach_begin_tracking();
        state = ATTACHED;
        rc = 0;
    }
    pthread_mutex_unlock(&attach_lock);
    return rc;
}

TL_EXPORT const struct tensorleak_attach_plan *tensorleak_detach_prepare(char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = 0;
    pthread_mutex_lock(&attach_lock);
    const struct tensorleak_attach_plan *result = NULL;
    if (state != ATTACHED && state != PREPARED) {
        fail(err, errlen, "the process is not attached");
    } else {
        state = DETACHING;
        result = &plan; /* the injector writes each patch's `original` back */
    }
    pthread_mutex_unlock(&attach_lock);
    return result;
}

TL_EXPORT int tensorleak_detach_finish(char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = 0;
    pthread_mutex_lock(&attach_lock);
    int rc = -1;
    if (state != DETACHING) {
        fail(err, errlen, "tensorleak_detach_prepare has not succeeded");
    } else {
        /* Each entry is the driver's own code again; a thread still inside a
         * hook (or a caller of a hook cuGetProcAddress handed out) forwards
         * to the trampoline, which stays. */
        if (atomic_load(&tl_attached))
            tl_attach_end_tracking();
        atomic_store(&tl_attached, false);
        state = NOT_ATTACHED;
        rc = 0;
    }
    pthread_mutex_unlock(&attach_lock);
    return rc;
}
