/*
 * fault_early.c — a library fault_prog links: its constructor runs before
 * the program's (and, being a dependency of the program, before the
 * preloaded library's constructor), so with FAULT_EARLY=1 it allocates
 * before tensorleak has initialised and before anyone called cuInit.
 */
#include "cudart_compat.h"

#include <stdlib.h>
#include <string.h>

void fault_early_linked(void);
void fault_early_linked(void) {}

static __attribute__((noinline)) void early_alloc(void)
{
    void *p = NULL;
    if (cudaMalloc(&p, 5u << 20) != cudaSuccess)
        abort();
}

__attribute__((constructor)) static void early_constructor(void)
{
    const char *e = getenv("FAULT_EARLY");
    if (e && strcmp(e, "1") == 0)
        early_alloc();
}
