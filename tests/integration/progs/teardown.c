/* Allocates three buffers and resets the device: the driver frees them, so
 * they are released by teardown, not leaks.  A fourth buffer allocated after
 * the reset is leaked. */
#include "cudart_compat.h"
#include <stdio.h>

int main(void)
{
    void *p[3];
    for (int i = 0; i < 3; i++)
        if (cudaMalloc(&p[i], 1u << 20) != cudaSuccess)
            return 1;
    if (cudaDeviceReset() != cudaSuccess)
        return 2;
    void *after;
    if (cudaMalloc(&after, 2u << 20) != cudaSuccess) /* LEAK-SITE */
        return 3;
    printf("teardown: ok\n");
    return 0;
}
