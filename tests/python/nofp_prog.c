/* Code built without frame pointers (as libtorch, libpython and vendor
 * libraries are): 200 allocations and frees from one call chain.  The walk
 * from the call-frame tables makes libunwind run once per distinct stack,
 * not per allocation (test_pyframes.py reads the report's counters). */
#include "cudart_compat.h"

__attribute__((noinline)) static void *level3(size_t n)
{
    void *p = 0;
    cudaMalloc(&p, n);
    __asm__ volatile("" ::: "memory");
    return p;
}

__attribute__((noinline)) static void *level2(size_t n)
{
    void *p = level3(n + 1);
    __asm__ volatile("" ::: "memory");
    return p;
}

__attribute__((noinline)) static void *level1(size_t n)
{
    void *p = level2(n + 1);
    __asm__ volatile("" ::: "memory");
    return p;
}

int main(void)
{
    for (int i = 0; i < 200; i++)
        cudaFree(level1(4096));
    return 0;
}
