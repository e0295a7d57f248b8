/*
 * live_server.c — a server that never exits on its own, for the live
 * state tests: MODE requests, then a mark and a snapshot to SNAPSHOT, then
 * READY is created and it waits (at most 120 s) until stdin closes.
 *
 *   leaky N     keeps one 1 MiB block per request (a growth row)
 *   pool N      a clean program whose cache is declared with the pool API:
 *               one 8 MiB segment, a 2 MiB block kept, 1 MiB blocks handed
 *               out and back
 *   twodev N    two devices (SIMCUDA_DEVICES=2), each owner somewhere else:
 *               3 MiB of user memory on device 0; on device 1 a 5 MiB
 *               reserve by cache_reserve (the tests' owner rule names it)
 *               and 2 MiB of user memory; 1 MiB of pinned host memory
 */
#include "cudart_compat.h"
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tensorleak.h"
#include <time.h>
#include <unistd.h>

static void *keep[4096];

static void serve_leaky(int i)
{
    void *p = NULL;
    cudaMalloc(&p, 1 << 20); /* kept: the leak */
    keep[i % 4096] = p;
    void *tmp = NULL;
    cudaMalloc(&tmp, 3 << 20);
    cudaFree(tmp);
}

/* Neither inlined nor cloned: the owner rule matches this function name. */
__attribute__((noinline, noclone)) static void *cache_reserve(size_t bytes)
{
    void *p = NULL;
    cudaMalloc(&p, bytes);
    return p;
}

static void serve_two_devices(int i)
{
    if (i == 0) {
        cudaSetDevice(0);
        cudaMalloc(&keep[0], 3 << 20);
        cudaSetDevice(1);
        keep[1] = cache_reserve(5 << 20);
        cudaMalloc(&keep[2], 2 << 20);
        cudaMallocHost(&keep[3], 1 << 20);
    }
    void *tmp = NULL; /* a request's scratch, given back */
    cudaMalloc(&tmp, 1 << 20);
    cudaFree(tmp);
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: live_server leaky|pool|twodev N SNAPSHOT READY\n");
        return 2;
    }
    int n = atoi(argv[2]);
    tensorleak_pool *pool = NULL;
    char *segment = NULL;
    if (!strcmp(argv[1], "pool")) {
        cudaMalloc((void **)&segment, 8 << 20);
        pool = tensorleak_pool_create("server cache", 0);
        tensorleak_pool_segment(pool, segment, 8 << 20);
    }
    for (int i = 0; i < n; i++) {
        if (pool) {
            /* The cache keeps a 2 MiB block for good; each request takes
             * 1 MiB from it and gives it back: reserved 8, allocated 2. */
            if (i == 0)
                tensorleak_pool_alloc(pool, segment + 6 * (1 << 20), 2 << 20);
            tensorleak_pool_alloc(pool, segment + (i % 4) * (1 << 20), 1 << 20);
            tensorleak_pool_free(pool, segment + (i % 4) * (1 << 20));
        } else if (!strcmp(argv[1], "twodev")) {
            serve_two_devices(i);
        } else {
            serve_leaky(i);
        }
        tensorleak_mark("request");
    }
    if (tensorleak_snapshot_to("ready", argv[3]) != 0)
        return 3;
    FILE *f = fopen(argv[4], "w");
    if (f)
        fclose(f);
    struct pollfd p = {.fd = 0, .events = POLLIN};
    for (time_t end = time(NULL) + 120; time(NULL) < end;) {
        char buf[64];
        if (poll(&p, 1, 1000) > 0 && read(0, buf, sizeof buf) <= 0)
            break;
    }
    return 0;
}
