/* Marks taken where the driver's free memory has to be found: one on the
 * main thread (its current context), the ones the test asks of the watcher
 * thread (SIGUSR2, which has no context), and one from an atexit handler
 * registered before the driver's own (cuInit registers it), so it runs
 * after the driver's and, under SIMCUDA_POOL_QUERY=fail-at-exit, finds a
 * driver that no longer answers cuMemGetInfo. */
#include "cudart_compat.h"
#include "tensorleak.h"
#include <stdio.h>
#include <stdlib.h>

static void after_the_driver(void)
{
    tensorleak_mark("after the driver's exit handler");
}

int main(void)
{
    if (atexit(after_the_driver) != 0)
        return 1;
    void *a;
    if (cudaMalloc(&a, 3u << 20) != cudaSuccess)
        return 1;
    tensorleak_mark("main thread");
    printf("ready\n");
    fflush(stdout);
    int c;
    while ((c = getchar()) != EOF)
        ;
    return 0;
}
