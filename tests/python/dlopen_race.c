/* Threads allocate and free in a loop while the main thread dlopen()s and
 * dlclose()s a library whose constructor allocates (ctor_alloc.c), 300
 * times.  Each dlopen makes tensorleak look for a Python interpreter again:
 * a look that held a lock of tensorleak's across dlsym (which takes the
 * loader's lock) would wait for the dlopen while the constructor's
 * allocation waits for that lock.  Usage: dlopen_race LIBRARY
 *
 * The main thread allocates once before any other thread starts, so the
 * runtime's own lazy load (dlopen and dlsym of the driver under a
 * once-lock, as NVIDIA's runtime does it) is over before the race: a
 * constructor's first CUDA call racing another thread's first CUDA call
 * can deadlock inside the runtime itself, real or simulated, and that is
 * not what this program tests.  A hang here can only be tensorleak's. */
#include "cudart_compat.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>

static atomic_bool done;

static void *allocate_in_a_loop(void *arg)
{
    (void)arg;
    while (!atomic_load(&done)) {
        void *p = NULL;
        if (cudaMalloc(&p, 4096) == cudaSuccess)
            cudaFree(p);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 2)
        return 2;
    void *first = NULL;
    if (cudaMalloc(&first, 4096) != cudaSuccess) {
        fputs("dlopen_race: the runtime did not load\n", stderr);
        return 1;
    }
    cudaFree(first);
    pthread_t threads[3];
    for (int i = 0; i < 3; i++)
        pthread_create(&threads[i], NULL, allocate_in_a_loop, NULL);
    int rc = 0;
    for (int i = 0; i < 300 && rc == 0; i++) {
        void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
        if (!lib) {
            fprintf(stderr, "dlopen_race: %s\n", dlerror());
            rc = 1;
        } else {
            dlclose(lib);
        }
    }
    atomic_store(&done, true);
    for (int i = 0; i < 3; i++)
        pthread_join(threads[i], NULL);
    if (rc == 0)
        puts("dlopen_race: ok");
    return rc;
}
