/*
 * driver_state.c — the simulated driver's process-wide state, the one lock
 * that guards it, and the settings read from the environment.
 *
 * This is the bottom of the driver: every other driver_*.c file uses it and
 * it uses none of them (sim/README.md, "Layout").
 *
 * Environment (read once, on the first cuInit or cuGetProcAddress):
 *   SIMCUDA_DEVICES  number of devices, 0..8 (default 1)
 *   SIMCUDA_MEMORY   capacity of each device, bytes with optional K/M/G
 *                    suffix (binary multiples), at most 1T (default 16G)
 *   SIMCUDA_TRACE    1/true/yes/on: log each cuGetProcAddress lookup
 *   SIMCUDA_IMPORT_OWN, SIMCUDA_ARRAY_REQUIREMENTS: see sim/README.md
 *   SIMCUDA_POOL_QUERY  read when cuInit succeeds (below)
 * A bad value prints one line on stderr and the default is used.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>

#include "simcuda.h"

struct sim_state sim = { .lock = PTHREAD_MUTEX_INITIALIZER };

static pthread_once_t config_once = PTHREAD_ONCE_INIT;

void sim_lock(void) { pthread_mutex_lock(&sim.lock); }
void sim_unlock(void) { pthread_mutex_unlock(&sim.lock); }

int sim_is_initialized(void) { return __atomic_load_n(&sim.initialized, __ATOMIC_ACQUIRE); }

int sim_device_valid(CUdevice dev) { return dev >= 0 && dev < sim.ndevices; }

/* Parses "123", "64K", "512M", "16G" (binary multiples).  Returns 0 and sets
 * *out, or -1 for anything else, zero, or more than SIM_MAX_MEMORY. */
static int parse_size(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    if (*s < '0' || *s > '9')
        return -1;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno)
        return -1;
    unsigned shift = 0;
    switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    default: break;
    }
    if (*end != '\0' || v == 0 || v > (SIM_MAX_MEMORY >> shift))
        return -1;
    *out = (uint64_t)v << shift;
    return 0;
}

static int parse_bool(const char *s, int *out)
{
    static const char *yes[] = { "1", "true", "yes", "on" };
    static const char *no[] = { "0", "false", "no", "off" };
    for (size_t i = 0; i < 4; i++) {
        if (strcasecmp(s, yes[i]) == 0) { *out = 1; return 0; }
        if (strcasecmp(s, no[i]) == 0) { *out = 0; return 0; }
    }
    return -1;
}

static void read_config(void)
{
    const char *s;
    sim.ndevices = 1;
    sim.capacity = SIM_DEFAULT_MEMORY;
    sim.trace = 0;

    if ((s = getenv("SIMCUDA_DEVICES")) && *s) {
        char *end;
        long n = strtol(s, &end, 10);
        if (*end == '\0' && n >= 0 && n <= SIM_MAX_DEVICES)
            sim.ndevices = (int)n;
        else
            fprintf(stderr, "simcuda: bad SIMCUDA_DEVICES='%s', using 1\n", s);
    }
    if ((s = getenv("SIMCUDA_MEMORY")) && *s && parse_size(s, &sim.capacity) != 0) {
        fprintf(stderr, "simcuda: bad SIMCUDA_MEMORY='%s', using 16G\n", s);
        sim.capacity = SIM_DEFAULT_MEMORY;
    }
    if ((s = getenv("SIMCUDA_TRACE")) && *s && parse_bool(s, &sim.trace) != 0) {
        fprintf(stderr, "simcuda: bad SIMCUDA_TRACE='%s', using 0\n", s);
        sim.trace = 0;
    }
    sim.import_own_new = 0;
    if ((s = getenv("SIMCUDA_IMPORT_OWN")) && *s) {
        if (strcmp(s, "new") == 0)
            sim.import_own_new = 1;
        else if (strcmp(s, "same") != 0)
            fprintf(stderr, "simcuda: bad SIMCUDA_IMPORT_OWN='%s', using same\n", s);
    }
    sim.array_requirements_deferred_only = 0;
    if ((s = getenv("SIMCUDA_ARRAY_REQUIREMENTS")) && *s) {
        if (!strcmp(s, "deferred-only"))
            sim.array_requirements_deferred_only = 1;
        else if (strcmp(s, "answer") != 0)
            fprintf(stderr, "simcuda: bad SIMCUDA_ARRAY_REQUIREMENTS='%s', using answer\n", s);
    }
}

void sim_config_once(void) { pthread_once(&config_once, read_config); }

/* Reserves [hint, hint + size) of host address space with PROT_NONE so the
 * fake device addresses can never be handed to a host allocation (a tracker
 * keyed by address must never see a device and a host pointer collide).
 * Costs no memory (MAP_NORESERVE, never touched).  When the kernel refuses
 * (address taken, RLIMIT_AS), the range is used unreserved: still far from
 * where glibc places mappings. */
void *sim_reserve_va(uint64_t hint, uint64_t size)
{
#ifdef MAP_FIXED_NOREPLACE
    void *p = mmap((void *)(uintptr_t)hint, size, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
    if (p != MAP_FAILED && p != (void *)(uintptr_t)hint) {
        munmap(p, size); /* pre-4.17 kernels treat the flag as a hint */
        p = MAP_FAILED;
    }
    return p == MAP_FAILED ? NULL : p;
#else
    (void)hint;
    (void)size;
    return NULL;
#endif
}

/* SIMCUDA_POOL_QUERY=fail-at-exit: once the exit handler registered at
 * cuInit has run, pool queries and cuMemGetInfo answer
 * CUDA_ERROR_DEINITIALIZED, as NVIDIA's driver does after the runtime tore
 * its context down at exit (seen with PyTorch's cudaMallocAsync backend and
 * cuda.bindings on an H200).  Handlers registered later (after the first
 * pool use) still see answers.  SIMCUDA_POOL_QUERY=fail: pool queries never
 * answer. */
static bool pool_queries_dead, torn_down;

static void pool_queries_die(void)
{
    __atomic_store_n(&pool_queries_dead, true, __ATOMIC_RELEASE);
}

static void tear_down_at_exit(void)
{
    pool_queries_die();
    __atomic_store_n(&torn_down, true, __ATOMIC_RELEASE);
}

bool sim_torn_down(void)
{
    return __atomic_load_n(&torn_down, __ATOMIC_ACQUIRE);
}

bool sim_pool_queries_refused(void)
{
    return __atomic_load_n(&pool_queries_dead, __ATOMIC_ACQUIRE);
}

void sim_pool_arm_exit_failure(void)
{
    const char *s = getenv("SIMCUDA_POOL_QUERY");
    if (s && !strcmp(s, "fail-at-exit"))
        atexit(tear_down_at_exit);
    else if (s && !strcmp(s, "fail"))
        pool_queries_die();
}
