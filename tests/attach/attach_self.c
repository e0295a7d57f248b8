/*
 * attach_self: the library side of `tensorleak attach`, driven by the
 * process itself (no injector): it starts without tensorleak, allocates on
 * the simulated driver, dlopen()s libtensorleak.so, calls
 * tensorleak_attach_prepare, writes the plan's bytes itself (mprotect +
 * memcpy: its own process), commits, allocates and leaks, and detaches the
 * same way.  attach_test.py checks the reports.
 *
 *   attach_self LIBRARY SETTINGS MODE
 *
 * SETTINGS: "NAME=value;NAME=value" (turned into the settings lines).
 * MODE: basic     3 leaks of 1000 B and 1 freed after the attach, a
 *                 pre-attach 4096-byte block freed after; detach, then one
 *                 more allocation and 300 ms of life
 *       refuse    cuMemAllocManaged's first bytes made unmovable (a
 *                 conditional branch) before prepare: it must be refused,
 *                 and cuMemAlloc_v2 still tracked
 *       twice     attach, leak 1, detach, attach again, leak 2, exit
 * Prints "plan N" (patches), then "ok"; exits 1 with a message on failure.
 */
#include "cuda_compat.h"
#include "tensorleak_attach.h"

#include <dirent.h>
#include <dlfcn.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef const struct tensorleak_attach_plan *(*prepare_fn)(const char *, char *, size_t);
typedef int (*commit_fn)(char *, size_t);
typedef const struct tensorleak_attach_plan *(*dprepare_fn)(char *, size_t);

static prepare_fn prepare;
static commit_fn commit, finish;
static dprepare_fn dprepare;

static void die(const char *what, const char *err)
{
    fprintf(stderr, "attach_self: %s: %s\n", what, err ? err : "");
    exit(1);
}

static void write_code(uint64_t address, const uint8_t *bytes, uint32_t len)
{
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t lo = (uintptr_t)address & ~(uintptr_t)(page - 1);
    uintptr_t hi = ((uintptr_t)address + len + (uintptr_t)page - 1) & ~(uintptr_t)(page - 1);
    if (mprotect((void *)lo, hi - lo, PROT_READ | PROT_WRITE | PROT_EXEC) != 0)
        die("mprotect", "cannot make the driver's code writable");
    memcpy((void *)(uintptr_t)address, bytes, len);
    mprotect((void *)lo, hi - lo, PROT_READ | PROT_EXEC);
    __builtin___clear_cache((char *)lo, (char *)hi);
}

static const struct tensorleak_attach_plan *attach(const char *settings)
{
    char err[256];
    const struct tensorleak_attach_plan *plan = prepare(settings, err, sizeof err);
    if (!plan)
        die("prepare", err);
    if (plan->abi != TENSORLEAK_ATTACH_ABI)
        die("prepare", "abi");
    for (uint32_t i = 0; i < plan->count; i++)
        write_code(plan->patches[i].address, plan->patches[i].replacement, plan->patches[i].length);
    if (commit(err, sizeof err) != 0)
        die("commit", err);
    printf("plan %u\n", plan->count);
    return plan;
}

static void detach(void)
{
    char err[256];
    const struct tensorleak_attach_plan *plan = dprepare(err, sizeof err);
    if (!plan)
        die("detach prepare", err);
    for (uint32_t i = 0; i < plan->count; i++)
        write_code(plan->patches[i].address, plan->patches[i].original, plan->patches[i].length);
    if (finish(err, sizeof err) != 0)
        die("detach finish", err);
}

static CUdeviceptr alloc(size_t bytes)
{
    CUdeviceptr p = 0;
    if (cuMemAlloc_v2(&p, bytes) != CUDA_SUCCESS || !p)
        die("cuMemAlloc_v2", "failed");
    return p;
}

/* The second attach's allocations of mode "again", each from a function of
 * its own that the second attach's owner and suppression rules name. */
__attribute__((noinline)) CUdeviceptr held_for_good(size_t bytes)
{
    CUdeviceptr p = alloc(bytes);
    __asm__ volatile("" ::: "memory"); /* not a tail call: the frame stays */
    return p;
}

__attribute__((noinline)) CUdeviceptr suppressed_for_good(size_t bytes)
{
    CUdeviceptr p = alloc(bytes);
    __asm__ volatile("" ::: "memory");
    return p;
}

/* Whether a file appears in DIR within 10 s (the watcher's live update). */
static bool live_file_in(const char *dir)
{
    for (int i = 0; i < 1000; i++) {
        DIR *d = opendir(dir);
        struct dirent *e;
        while (d && (e = readdir(d)))
            if (strstr(e->d_name, ".json")) {
                closedir(d);
                return true;
            }
        if (d)
            closedir(d);
        usleep(10 * 1000);
    }
    return false;
}

int main(int argc, char **argv)
{
    if (argc != 4)
        die("usage", "attach_self LIBRARY SETTINGS MODE");
    /* SETTINGS: lines separated by ';'; mode "again" takes the second
     * attach's after a '|'. */
    char settings[1024], again[1024] = "";
    snprintf(settings, sizeof settings, "%s\n", argv[2]);
    char *bar = strchr(settings, '|');
    if (bar) {
        *bar = 0;
        snprintf(again, sizeof again, "%s", bar + 1);
        strcat(settings, "\n");
    }
    for (char *c = settings; *c; c++)
        if (*c == ';')
            *c = '\n';
    for (char *c = again; *c; c++)
        if (*c == ';')
            *c = '\n';
    const char *mode = argv[3];

    CUcontext ctx;
    if (cuInit(0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
        die("cuInit", "failed");
    /* Before the attach: 4096 B kept until after it, 512 B never freed. */
    CUdeviceptr before = alloc(4096);
    (void)alloc(512);

    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        die("dlopen", dlerror());
    prepare = (prepare_fn)dlsym(lib, "tensorleak_attach_prepare");
    commit = (commit_fn)dlsym(lib, "tensorleak_attach_commit");
    dprepare = (dprepare_fn)dlsym(lib, "tensorleak_detach_prepare");
    finish = (commit_fn)dlsym(lib, "tensorleak_detach_finish");
    if (!prepare || !commit || !dprepare || !finish)
        die("dlsym", "the attach interface is missing");

    if (strcmp(mode, "refuse") == 0) {
        /* `jne +0` (75 00): a conditional branch in the bytes a patch would
         * replace.  Restored before anything calls the function again. */
        uint8_t *managed = (uint8_t *)dlsym(RTLD_DEFAULT, "cuMemAllocManaged");
        uint8_t saved[2] = {managed[0], managed[1]};
        static const uint8_t jne0[2] = {0x75, 0x00};
        write_code((uint64_t)(uintptr_t)managed, jne0, 2);
        const struct tensorleak_attach_plan *plan = attach(settings);
        for (uint32_t i = 0; i < plan->count; i++)
            if (plan->patches[i].address == (uint64_t)(uintptr_t)managed)
                die("refuse", "cuMemAllocManaged is in the plan");
        write_code((uint64_t)(uintptr_t)managed, saved, 2);
        (void)alloc(1000); /* one leak, tracked */
        CUdeviceptr m = 0;
        if (cuMemAllocManaged(&m, 2000, CU_MEM_ATTACH_GLOBAL) != CUDA_SUCCESS)
            die("cuMemAllocManaged", "failed");
        printf("ok\n");
        return 0;
    }

    attach(settings);
    if (strcmp(mode, "basic") == 0) {
        /* The snapshot signal (TENSORLEAK_SIGNAL, SIGUSR1 by default) while
         * attached; its default disposition again after the detach. */
        struct sigaction sa;
        if (sigaction(SIGUSR1, NULL, &sa) != 0 || sa.sa_handler == SIG_DFL)
            die("attached", "SIGUSR1 has no snapshot handler");
        for (int i = 0; i < 3; i++)
            (void)alloc(1000);
        CUdeviceptr freed = alloc(2000);
        if (cuMemFree_v2(freed) != CUDA_SUCCESS)
            die("cuMemFree_v2", "failed");
        if (cuMemFree_v2(before) != CUDA_SUCCESS)
            die("cuMemFree_v2 (before)", "failed");
        detach();
        if (sigaction(SIGUSR1, NULL, &sa) != 0 || sa.sa_handler != SIG_DFL)
            die("detached", "SIGUSR1 is not back to its default disposition");
        /* After the detach: nothing of this is tracked, and the watcher
         * (TENSORLEAK_INTERVAL) writes nothing while the program goes on. */
        (void)alloc(3000);
        usleep(300 * 1000);
    } else if (strcmp(mode, "twice") == 0) {
        (void)alloc(1000);
        detach();
        attach(settings);
        (void)alloc(2000);
        (void)alloc(2000);
    } else if (strcmp(mode, "again") == 0) {
        /* The first attach: 8000 B allocated and freed (its peak), 1000 B
         * kept; none of the second attach's settings. */
        CUdeviceptr big = alloc(8000);
        (void)alloc(1000);
        if (cuMemFree_v2(big) != CUDA_SUCCESS)
            die("cuMemFree_v2", "failed");
        detach();
        attach(again);
        struct sigaction sa;
        if (sigaction(SIGUSR2, NULL, &sa) != 0 || sa.sa_handler == SIG_DFL)
            die("again", "SIGUSR2 (the second attach's TENSORLEAK_SIGNAL) has no snapshot handler");
        (void)held_for_good(2000);
        (void)suppressed_for_good(2000);
        (void)alloc(2000);
        const char *dir = strstr(again, "TENSORLEAK_LIVE_DIR=");
        if (dir) {
            char path[512];
            snprintf(path, sizeof path, "%s", dir + strlen("TENSORLEAK_LIVE_DIR="));
            path[strcspn(path, "\n")] = 0;
            printf("live %s\n", live_file_in(path) ? "yes" : "no");
        }
    } else {
        die("mode", mode);
    }
    printf("ok\n");
    return 0;
}
