/* pool_race — pools created, filled with segments and destroyed on one
 * thread while another writes snapshots: destroying a pool used to look its
 * segments up in the live table under the pools' lock, while a report holds
 * every shard lock and then takes the pools' lock (a lock-order deadlock).
 * The program says how far both got, and exits 3 when neither made
 * progress for 5 s.
 *
 *   it_pool_race POOLS SEGMENTS */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "cudart_compat.h"
#include "tensorleak.h"

static int pools = 20, segments = 20000;
static atomic_bool done;
static atomic_long pools_done, snapshots_done;

static void *destroyer(void *arg)
{
    (void)arg;
    /* At least `pools` pools, and on until the other thread has written
     * 50 snapshots, so that many of them overlap a destroy. */
    for (int k = 0; k < pools || atomic_load(&snapshots_done) < 50; k++) {
        tensorleak_pool *p = tensorleak_pool_create("race", 0);
        for (int i = 0; i < segments; i++)
            tensorleak_pool_segment(p, (void *)(uintptr_t)(0x7000000000ull + ((uint64_t)k << 32) + i * 4096ull),
                                    4096);
        tensorleak_pool_destroy(p);
        atomic_fetch_add(&pools_done, 1);
    }
    atomic_store(&done, true);
    return NULL;
}

static void *snapshotter(void *arg)
{
    (void)arg;
    while (!atomic_load(&done)) {
        if (tensorleak_snapshot("race") == 0)
            atomic_fetch_add(&snapshots_done, 1);
        struct timespec pause = {0, 1000000};
        nanosleep(&pause, NULL);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc > 2) {
        pools = atoi(argv[1]);
        segments = atoi(argv[2]);
    }
    void *d;
    if (cudaMalloc(&d, 256) != cudaSuccess) /* tensorleak reports only processes that used CUDA */
        return 2;
    cudaFree(d);
    pthread_t a, b;
    pthread_create(&a, NULL, destroyer, NULL);
    pthread_create(&b, NULL, snapshotter, NULL);
    long last_p = -1, last_s = -1;
    for (int stalled = 0; !atomic_load(&done);) {
        struct timespec tick = {0, 100000000};
        nanosleep(&tick, NULL);
        long np = atomic_load(&pools_done), ns = atomic_load(&snapshots_done);
        stalled = (np == last_p && ns == last_s) ? stalled + 1 : 0;
        last_p = np;
        last_s = ns;
        if (stalled >= 50) {
            printf("pool_race: stalled at %ld pools, %ld snapshots\n", np, ns);
            fflush(stdout);
            _exit(3);
        }
    }
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    printf("pool_race: %s pools, %s snapshots\n", atomic_load(&pools_done) >= pools ? "all" : "too few",
           atomic_load(&snapshots_done) >= 50 ? "50+" : "too few");
    return 0;
}
