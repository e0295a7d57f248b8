/* shallow_stacks — allocations from stacks shorter than the depth limit, on
 * the main thread and on a second thread.  The frame-pointer walk reaches
 * each thread's entry code (glibc, no frame pointers), so its stacks end
 * with frames only libunwind can find: every leak must still come from one
 * call site per thread, whose stack ends as libunwind's does.
 *
 *   it_shallow_stacks [N]     leaks N 4 KiB blocks from each thread */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "cudart_compat.h"

static int n_leaks = 100;

__attribute__((noinline)) static void leak_from_main(void)
{
    void *p;
    if (cudaMalloc(&p, 4096) != cudaSuccess) /* LEAK_MAIN */
        exit(2);
}

__attribute__((noinline)) static void leak_from_worker(void)
{
    void *p;
    if (cudaMalloc(&p, 4096) != cudaSuccess) /* LEAK_WORKER */
        exit(2);
}

static void *worker(void *arg)
{
    (void)arg;
    for (int i = 0; i < n_leaks; i++)
        leak_from_worker();
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc > 1)
        n_leaks = atoi(argv[1]);
    for (int i = 0; i < n_leaks; i++)
        leak_from_main();
    pthread_t t;
    if (pthread_create(&t, NULL, worker, NULL) != 0)
        return 2;
    pthread_join(t, NULL);
    printf("shallow_stacks: %d leaks from each thread\n", n_leaks);
    return 0;
}
