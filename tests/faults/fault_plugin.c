/*
 * fault_plugin.c — a module fault_prog dlopens, allocates from and dlcloses
 * before exit: its leaks must still be reported with frames that are named
 * or marked as belonging to an unloaded module, and nothing may crash.
 */
#include "cudart_compat.h"

#include <stdlib.h>

__attribute__((noinline)) static void plugin_alloc_block(void)
{
    void *p = NULL;
    if (cudaMalloc(&p, 2u << 20) != cudaSuccess)
        abort();
}

__attribute__((visibility("default"))) void fault_plugin_leak(int n);
void fault_plugin_leak(int n)
{
    for (int i = 0; i < n; i++)
        plugin_alloc_block();
}
