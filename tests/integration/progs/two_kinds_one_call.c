/* two_kinds_one_call — one call instruction that reaches cudaMalloc and
 * cudaMallocHost in turn (through a function pointer), so both kinds of
 * allocation come from the very same stack.  A call site is the pair (kind,
 * stack): the report must keep one per kind, however the stack was found
 * again (the thread's memo of a confirmed walk remembers one kind at a time).
 *
 *   it_two_kinds_one_call [N]     leaks N 4 KiB blocks of each kind */
#include <stdio.h>
#include <stdlib.h>

#include "cudart_compat.h"

typedef cudaError_t (*alloc_fn)(void **, size_t);

__attribute__((noinline)) static void leak_through(alloc_fn alloc)
{
    void *p;
    if (alloc(&p, 4096) != cudaSuccess) /* LEAK_BOTH */
        exit(2);
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 100;
    /* volatile: the compiler must not split the call into two. */
    alloc_fn volatile fns[2] = {cudaMalloc, cudaMallocHost};
    for (int i = 0; i < 2 * n; i++)
        leak_through(fns[i % 2]);
    printf("two_kinds_one_call: %d leaks of each kind\n", n);
    return 0;
}
