/*
 * churn.c — the allocation workload of the overhead benchmark (BENCHMARKS.md).
 *
 *   churn cuda|host pairs N [depth D] [threads T] [sites S] [size B]
 *       Each of T threads makes N alloc+free pairs (cudaMalloc/cudaFree, or
 *       malloc/free for the heaptrack comparison) from the bottom of a chain
 *       of D recursive calls.  Pair i comes from call site i % S: the
 *       innermost levels of the chain pick one of four call instructions from
 *       two bits of the site number, so S sites are S distinct stacks.  A
 *       warm-up of S pairs (at least 1000) per thread precedes the timed part.
 *
 *   churn cuda|host live L [depth D] [sites C] [size B]
 *       Makes L allocations from C call sites and exits holding them all
 *       (the tracker's exit report is what gets timed, by the caller).
 *       With `snapfork 1` it then raises SIGUSR1 (tensorleak's default
 *       snapshot signal: the watcher writes a report of them all), sleeps
 *       50 ms so the watcher is inside that report, and times one fork():
 *       how long the watcher's report holds a fork (snapshot.c).
 *
 * `attach LIBRARY` (driver/cuda rows): the process starts without the
 * preload and, after the runtime's start and before the workers, attaches
 * to itself as `tensorleak attach` would (tensorleak_attach_prepare, the
 * plan's bytes written into its own code with mprotect + memcpy,
 * tensorleak_attach_commit), so its pairs pass through the trampolines.
 * Settings: the TENSORLEAK_* variables of its environment, one line each.
 *
 * Built a second time as `tracker_churn` (-DCHURN_TRACKER, linked with the
 * tracker's internals and the simulated driver): the api word is `tracker`,
 * and an allocation is a direct tl_track_alloc/tl_track_free of an address
 * of the thread's own, with no driver call.  Its T=2 rows measure whether
 * tensorleak's own hot path scales (the simulated driver takes one global
 * lock per call, so churn's T=2 rows measure mostly the driver).
 *
 * Prints one JSON line on stdout: CPU time (the sum of the timed threads'
 * CLOCK_THREAD_CPUTIME_ID), wall time, and for `live` the resident set size
 * and the CLOCK_MONOTONIC instant main returned, so the caller can time
 * everything after it (atexit handlers: the exit report).
 */
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#ifdef CHURN_TRACKER
#include "cuda_compat.h"
#include "tl_internal.h"
#else
#include "cudart_compat.h"
#include "tensorleak_attach.h"

#include <dlfcn.h>
#include <sys/mman.h>
#endif

#define SITE_LEVELS 8 /* innermost levels that branch on the site: 4^8 sites */

#ifndef CHURN_TRACKER
static int use_cuda = 1;
static int use_driver; /* cuMemAlloc/cuMemFree instead of cudaMalloc/cudaFree */
#endif
static size_t alloc_size = 256;
/* sizes K: pair i asks for SIZE_MIN + (i % K) * SIZE_STEP bytes (K <= 64:
 * 4 KiB to under 20 KiB), so a size-keyed path is not always the same one. */
#define SIZE_MIN 4096u
#define SIZE_STEP 256u
static unsigned size_count;
static __thread unsigned size_next;

static size_t next_size(void)
{
    if (!size_count)
        return alloc_size;
    return SIZE_MIN + (size_next++ % size_count) * SIZE_STEP;
}
static volatile uintptr_t sink;

static uint64_t now_ns(clockid_t clk)
{
    struct timespec ts;
    clock_gettime(clk, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#ifdef CHURN_TRACKER
/* Each thread frees what it allocated: 16 addresses of its own in turn. */
static atomic_uint next_thread;
static __thread uint64_t thread_base, thread_count;

static void *do_alloc(void)
{
    if (!thread_base)
        thread_base = (uint64_t)(atomic_fetch_add(&next_thread, 1) + 1) << 36;
    uint64_t addr = thread_base + (thread_count++ % 16) * 512;
    tl_track_alloc(TL_KIND_DEVICE, TL_SPACE_MEM, addr, next_size(), -1, 0);
    return (void *)(uintptr_t)addr;
}

static void do_free(void *p)
{
    tl_track_free(TL_SPACE_MEM, (uintptr_t)p, 1u << TL_KIND_DEVICE, NULL);
}
#else
static void *do_alloc(void)
{
    if (use_driver) {
        CUdeviceptr d = 0;
        if (cuMemAlloc_v2(&d, next_size()) != CUDA_SUCCESS) {
            fprintf(stderr, "churn: cuMemAlloc failed\n");
            exit(2);
        }
        return (void *)(uintptr_t)d;
    }
    if (use_cuda) {
        void *p = NULL;
        if (cudaMalloc(&p, next_size()) != cudaSuccess) {
            fprintf(stderr, "churn: cudaMalloc failed\n");
            exit(2);
        }
        return p;
    }
    void *p = malloc(next_size());
    if (!p)
        exit(2);
    sink = (uintptr_t)p;
    return p;
}

static void do_free(void *p)
{
    if (use_driver)
        cuMemFree_v2((CUdeviceptr)(uintptr_t)p);
    else if (use_cuda)
        cudaFree(p);
    else
        free(p);
}
#endif

/* What the bottom of the chain does: one pair, or one kept allocation. */
struct leaf {
    void **keep; /* NULL: free at once */
};

__attribute__((noinline)) static int chain(int level, unsigned site, struct leaf *lf);

/* The four call instructions are kept apart by the distinct constants added
 * after each (no tail call, no merging: four return addresses). */
__attribute__((noinline)) static int chain(int level, unsigned site, struct leaf *lf)
{
    int r;
    if (level == 0) {
        void *p = do_alloc();
        if (lf->keep)
            *lf->keep = p;
        else
            do_free(p);
        return 1;
    }
    if (level <= SITE_LEVELS) {
        switch ((site >> (2 * (level - 1))) & 3u) {
        case 0: r = chain(level - 1, site, lf) + 1; break;
        case 1: r = chain(level - 1, site, lf) + 3; break;
        case 2: r = chain(level - 1, site, lf) + 7; break;
        default: r = chain(level - 1, site, lf) + 15; break;
        }
    } else {
        r = chain(level - 1, site, lf) + 31;
    }
    __asm__ volatile("" : "+r"(r) : : "memory");
    return r;
}

struct worker {
    pthread_t thread;
    long pairs;
    int depth;
    unsigned sites;
    pthread_barrier_t *start;
    uint64_t cpu_ns;
};

#ifndef CHURN_TRACKER
static CUcontext driver_ctx; /* the runtime's primary context, for the driver rows */

/* Writes LEN bytes of the plan into this process's own code. */
static int write_code(uint64_t address, const uint8_t *bytes, uint32_t len)
{
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t lo = (uintptr_t)address & ~(uintptr_t)(page - 1);
    uintptr_t hi = ((uintptr_t)address + len + (uintptr_t)page - 1) & ~(uintptr_t)(page - 1);
    if (mprotect((void *)lo, hi - lo, PROT_READ | PROT_WRITE | PROT_EXEC) != 0)
        return -1;
    memcpy((void *)(uintptr_t)address, bytes, len);
    mprotect((void *)lo, hi - lo, PROT_READ | PROT_EXEC);
    __builtin___clear_cache((char *)lo, (char *)hi);
    return 0;
}

extern char **environ;

/* Attaches LIBRARY to this process (see the header comment); 0 or -1 with
 * a message on stderr.  The library stays attached until exit. */
static int attach_self(const char *library)
{
    typedef const struct tensorleak_attach_plan *(*prepare_fn)(const char *, char *, size_t);
    typedef int (*commit_fn)(char *, size_t);
    char settings[4096] = "", err[256] = "";
    size_t used = 0;
    for (char **e = environ; *e; e++)
        if (strncmp(*e, "TENSORLEAK_", 11) == 0) {
            int n = snprintf(settings + used, sizeof settings - used, "%s\n", *e);
            if (n < 0 || (size_t)n >= sizeof settings - used) {
                fprintf(stderr, "churn: attach: the TENSORLEAK_* settings are too long\n");
                return -1;
            }
            used += (size_t)n;
        }
    void *lib = dlopen(library, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "churn: attach: %s\n", dlerror());
        return -1;
    }
    prepare_fn prepare = (prepare_fn)dlsym(lib, "tensorleak_attach_prepare");
    commit_fn commit = (commit_fn)dlsym(lib, "tensorleak_attach_commit");
    if (!prepare || !commit) {
        fprintf(stderr, "churn: attach: %s has no attach interface\n", library);
        return -1;
    }
    const struct tensorleak_attach_plan *plan = prepare(settings, err, sizeof err);
    if (!plan || plan->abi != TENSORLEAK_ATTACH_ABI) {
        fprintf(stderr, "churn: attach: prepare: %s\n", plan ? "ABI mismatch" : err);
        return -1;
    }
    for (uint32_t i = 0; i < plan->count; i++)
        if (write_code(plan->patches[i].address, plan->patches[i].replacement, plan->patches[i].length) != 0) {
            fprintf(stderr, "churn: attach: mprotect failed\n");
            return -1;
        }
    if (commit(err, sizeof err) != 0) {
        fprintf(stderr, "churn: attach: commit: %s\n", err);
        return -1;
    }
    fprintf(stderr, "churn: attached, %u entry points patched\n", plan->count);
    return 0;
}
#endif

static void *run_worker(void *arg)
{
    struct worker *w = arg;
    struct leaf lf = {NULL};
#ifndef CHURN_TRACKER
    if (use_driver && cuCtxSetCurrent(driver_ctx) != CUDA_SUCCESS) {
        fprintf(stderr, "churn: cuCtxSetCurrent failed\n");
        exit(2);
    }
#endif
    long warm = w->sites > 1000 ? (long)w->sites : 1000;
    for (long i = 0; i < warm; i++)
        chain(w->depth, (unsigned)(i % w->sites), &lf);
    pthread_barrier_wait(w->start);
    uint64_t c0 = now_ns(CLOCK_THREAD_CPUTIME_ID);
    for (long i = 0; i < w->pairs; i++)
        chain(w->depth, (unsigned)(i % w->sites), &lf);
    w->cpu_ns = now_ns(CLOCK_THREAD_CPUTIME_ID) - c0;
    return NULL;
}

static long rss_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "VmRSS:", 6) == 0)
            kb = strtol(line + 6, NULL, 10);
    if (f)
        fclose(f);
    return kb;
}

static void usage(void)
{
    fprintf(stderr, "usage: churn cuda|driver|host|tracker pairs N [depth D] [threads T] [sites S] [size B] [sizes K]\n"
                    "                  [attach LIBRARY]\n"
                    "       churn cuda|driver|host|tracker live L [depth D] [sites C] [size B] [sizes K] [snapfork 1]\n"
                    "       (tracker: only the tracker_churn build)\n");
    exit(2);
}

int main(int argc, char **argv)
{
    if (argc < 4)
        usage();
#ifdef CHURN_TRACKER
    if (strcmp(argv[1], "tracker") != 0)
        usage();
    /* What preload.c's constructor does, without the hooks. */
    if (cuInit(0) != CUDA_SUCCESS) {
        fprintf(stderr, "churn: the simulated driver did not initialise\n");
        return 2;
    }
    tl_upcalls_connect();
    tl_options_load(NULL);
    tl_live_init();
    tl_stack_init();
    atomic_store(&tl_active, true);
    const char *api = "tracker";
#else
    use_driver = strcmp(argv[1], "driver") == 0;
    use_cuda = use_driver || strcmp(argv[1], "cuda") == 0;
    if (!use_cuda && strcmp(argv[1], "host") != 0)
        usage();
#endif
    int live = strcmp(argv[2], "live") == 0;
    if (!live && strcmp(argv[2], "pairs") != 0)
        usage();
    long n = atol(argv[3]);
    int depth = 10, threads = 1;
    unsigned sites = 1;
    int snapfork = 0;
    const char *attach_library = NULL;
    for (int i = 4; i + 1 < argc; i += 2) {
        long v = atol(argv[i + 1]);
        if (strcmp(argv[i], "attach") == 0) attach_library = argv[i + 1];
        else if (strcmp(argv[i], "depth") == 0) depth = (int)v;
        else if (strcmp(argv[i], "threads") == 0) threads = (int)v;
        else if (strcmp(argv[i], "sites") == 0) sites = (unsigned)v;
        else if (strcmp(argv[i], "size") == 0) alloc_size = (size_t)v;
        else if (strcmp(argv[i], "sizes") == 0) size_count = (unsigned)v;
        else if (strcmp(argv[i], "snapfork") == 0) snapfork = (int)v;
        else usage();
    }
    if (n <= 0 || depth < 0 || threads < 1 || threads > 64 || sites < 1 || alloc_size < 1 || size_count > 64)
        usage();
#ifdef CHURN_TRACKER
    if (snapfork)
        usage(); /* no preloaded library here to catch SIGUSR1 */
    if (attach_library)
        usage(); /* the tracker is linked in: nothing to attach */
#endif
#ifndef CHURN_TRACKER
    if (use_cuda) {
        /* Initialise the runtime outside the timed part. */
        void *p;
        if (cudaMalloc(&p, 1) != cudaSuccess) {
            fprintf(stderr, "churn: no simulated device\n");
            return 2;
        }
        cudaFree(p);
        if (use_driver && cuCtxGetCurrent(&driver_ctx) != CUDA_SUCCESS) {
            fprintf(stderr, "churn: no current context after the runtime's first call\n");
            return 2;
        }
    }
    if (attach_library && (!use_cuda || attach_self(attach_library) != 0))
        return 2;
    const char *api = use_driver ? "driver" : use_cuda ? "cuda" : "host";
#endif

    if (live) {
        void **keep = malloc((size_t)n * sizeof *keep);
        if (!keep)
            return 2;
        long rss0 = rss_kb();
        uint64_t c0 = now_ns(CLOCK_PROCESS_CPUTIME_ID);
        for (long i = 0; i < n; i++) {
            struct leaf lf = {&keep[i]};
            chain(depth, (unsigned)(i % sites), &lf);
        }
        uint64_t cpu = now_ns(CLOCK_PROCESS_CPUTIME_ID) - c0;
        long long fork_ns = -1;
        if (snapfork) {
            raise(SIGUSR1);
            nanosleep(&(struct timespec){0, 50 * 1000 * 1000}, NULL);
            uint64_t f0 = now_ns(CLOCK_MONOTONIC);
            pid_t child = fork();
            if (child == 0)
                _exit(0);
            fork_ns = (long long)(now_ns(CLOCK_MONOTONIC) - f0);
            if (child > 0)
                waitpid(child, NULL, 0);
            else
                fork_ns = -1;
        }
        printf("{\"api\":\"%s\",\"mode\":\"live\",\"live\":%ld,\"depth\":%d,\"sites\":%u,"
               "\"cpu_ns\":%llu,\"rss_before_kb\":%ld,\"rss_kb\":%ld,\"fork_ns\":%lld,\"main_end_mono_ns\":%llu}\n",
               api, n, depth, sites, (unsigned long long)cpu, rss0, rss_kb(), fork_ns,
               (unsigned long long)now_ns(CLOCK_MONOTONIC));
        fflush(stdout);
        return 0; /* holding every allocation */
    }

    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
    struct worker *w = calloc((size_t)threads, sizeof *w);
    for (int t = 0; t < threads; t++) {
        w[t] = (struct worker){.pairs = n, .depth = depth, .sites = sites, .start = &start};
        pthread_create(&w[t].thread, NULL, run_worker, &w[t]);
    }
    pthread_barrier_wait(&start);
    uint64_t t0 = now_ns(CLOCK_MONOTONIC);
    uint64_t cpu = 0;
    for (int t = 0; t < threads; t++) {
        pthread_join(w[t].thread, NULL);
        cpu += w[t].cpu_ns;
    }
    uint64_t wall = now_ns(CLOCK_MONOTONIC) - t0;
    double total = (double)n * threads;
    printf("{\"api\":\"%s\",\"mode\":\"pairs\",\"pairs\":%ld,\"threads\":%d,\"depth\":%d,\"sites\":%u,"
           "\"cpu_ns\":%llu,\"wall_ns\":%llu,\"cpu_ns_per_pair\":%.1f,\"pairs_per_s\":%.0f}\n",
           api, n, threads, depth, sites, (unsigned long long)cpu, (unsigned long long)wall,
           (double)cpu / total, total / ((double)wall / 1e9));
    return 0;
}
