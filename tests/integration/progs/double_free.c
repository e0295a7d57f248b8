/* Frees one buffer twice and frees a pointer that was never allocated: two
 * invalid frees; the driver's own answers reach the program unchanged. */
#include "cudart_compat.h"
#include <stdio.h>

int main(void)
{
    void *p;
    if (cudaMalloc(&p, 4096) != cudaSuccess)
        return 1;
    cudaError_t first = cudaFree(p);
    cudaError_t second = cudaFree(p); /* INVALID-SITE */
    cudaError_t bogus = cudaFree((void *)0x1234);
    printf("double_free: %d %d %d\n", (int)first, (int)second, (int)bogus);
    return 0;
}
