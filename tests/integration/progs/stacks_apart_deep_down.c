/* stacks_apart_deep_down — two call sites whose stacks hold the same
 * frames, at the same addresses, for their top ten frames and differ only
 * below them: main reaches the same chain of functions through from_a or
 * from_b in turn (same frame sizes, so every frame record above lies at
 * the same address either way).  A stack found again must be found by all
 * of its frames: a capture that looked only near the top would hand the
 * second path the first one's call site.
 *
 *   it_stacks_apart_deep_down [N]     leaks N 4 KiB blocks from each path */
#include <stdio.h>
#include <stdlib.h>

#include "cudart_compat.h"

/* After each call: no tail call, so every function keeps its frame. */
#define KEEP_FRAME() __asm__ volatile("" ::: "memory")

__attribute__((noinline)) static void leak(void)
{
    void *p;
    if (cudaMalloc(&p, 4096) != cudaSuccess) /* LEAK */
        exit(2);
    KEEP_FRAME();
}

#define LEVEL(name, callee)                                                                                           \
    __attribute__((noinline)) static void name(void)                                                                  \
    {                                                                                                                 \
        callee();                                                                                                     \
        KEEP_FRAME();                                                                                                 \
    }
LEVEL(down1, leak)
LEVEL(down2, down1)
LEVEL(down3, down2)
LEVEL(down4, down3)
LEVEL(down5, down4)
LEVEL(down6, down5)
LEVEL(down7, down6)
LEVEL(down8, down7)
LEVEL(from_a, down8)
LEVEL(from_b, down8)

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 100;
    for (int i = 0; i < 2 * n; i++) {
        if (i % 2)
            from_b();
        else
            from_a();
    }
    printf("stacks_apart_deep_down: %d leaks from each path\n", n);
    return 0;
}
