/* Holds two 1 MiB buffers and waits for its standard input to close, so a
 * test can send it signals while it runs; frees one buffer before exiting. */
#include "cudart_compat.h"
#include <stdio.h>

int main(void)
{
    void *a, *b;
    if (cudaMalloc(&a, 1u << 20) != cudaSuccess || cudaMalloc(&b, 1u << 20) != cudaSuccess)
        return 1;
    printf("ready\n");
    fflush(stdout);
    int c;
    while ((c = getchar()) != EOF)
        ;
    cudaFree(a);
    printf("done\n");
    return 7;
}
