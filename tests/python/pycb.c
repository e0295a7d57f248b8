/* A C library that calls back into Python (through a ctypes CFUNCTYPE):
 * the Python -> C -> Python -> allocation case of the pyframes tests. */
__attribute__((noinline, visibility("default"))) void pyframes_call_back(void (*cb)(void))
{
    cb();
    __asm__ volatile("" ::: "memory"); /* keeps the call a call, not a tail jump */
}

/* A thread the interpreter did not create: it calls back into Python (the
 * callback's ctypes thunk gives it a thread state for the call, then drops
 * it) and allocates with no thread state at all, before and after. */
#include <pthread.h>
#include <stddef.h>

typedef int (*malloc_fn)(void **, size_t);
struct c_thread_args {
    void (*cb)(void);
    malloc_fn cuda_malloc;
};

static void *c_thread_main(void *arg)
{
    struct c_thread_args *a = arg;
    void *p = NULL;
    if (a->cuda_malloc)
        a->cuda_malloc(&p, 5u << 20);
    if (a->cb)
        a->cb();
    if (a->cuda_malloc)
        a->cuda_malloc(&p, 5u << 20);
    return NULL;
}

__attribute__((visibility("default"))) int pyframes_in_c_thread(void (*cb)(void), malloc_fn cuda_malloc)
{
    struct c_thread_args a = {cb, cuda_malloc};
    pthread_t t;
    if (pthread_create(&t, NULL, c_thread_main, &a) != 0)
        return -1;
    return pthread_join(t, NULL);
}
