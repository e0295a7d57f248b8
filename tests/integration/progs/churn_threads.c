/* Four threads allocate and free in a loop while the main thread waits for
 * its standard input to close; three 1 MiB buffers stay live throughout.
 * Prints how many pairs ran and exits 5. */
#include "cudart_compat.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>

static atomic_bool stop;
static atomic_long pairs;

static void *churn(void *arg)
{
    size_t bytes = 4096u << ((unsigned long)arg % 4);
    while (!atomic_load(&stop)) {
        void *p;
        if (cudaMalloc(&p, bytes) != cudaSuccess || cudaFree(p) != cudaSuccess)
            return (void *)1;
        atomic_fetch_add(&pairs, 1);
    }
    return NULL;
}

int main(void)
{
    void *keep[3];
    for (int i = 0; i < 3; i++)
        if (cudaMalloc(&keep[i], 1u << 20) != cudaSuccess)
            return 1;
    pthread_t t[4];
    for (long i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, churn, (void *)i);
    printf("ready\n");
    fflush(stdout);
    while (getchar() != EOF)
        ;
    atomic_store(&stop, true);
    int bad = 0;
    for (int i = 0; i < 4; i++) {
        void *rc;
        pthread_join(t[i], &rc);
        bad |= rc != NULL;
    }
    for (int i = 0; i < 3; i++)
        cudaFree(keep[i]);
    printf("churned %s\n", bad ? "with errors" : "ok");
    return 5;
}
