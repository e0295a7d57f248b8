/* Budgets.  `warn`: holds up to 10 x 1 MiB, frees, then holds 6 x 1 MiB:
 * with a 4 MiB budget that crosses it twice.  `enforce`: allocates 1 MiB
 * buffers until one fails, then frees two and retries, as a caching
 * allocator does when the device is full. */
#include "cudart_compat.h"
#include <stdio.h>
#include <string.h>

static void *bufs[16];

static int fill(int n)
{
    for (int i = 0; i < n; i++)
        if (cudaMalloc(&bufs[i], 1u << 20) != cudaSuccess) /* BUDGET-SITE */
            return i;
    return n;
}

static void drain(int n)
{
    for (int i = 0; i < n; i++)
        cudaFree(bufs[i]);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "enforce") == 0) {
        int got = fill(8);
        if (got == 8) {
            printf("budget_demo: nothing refused\n");
            drain(8);
            return 0;
        }
        cudaFree(bufs[0]);
        cudaFree(bufs[1]);
        void *retry;
        cudaError_t rc = cudaMalloc(&retry, 1u << 20);
        printf("budget_demo: refused at %d, retry %s\n", got + 1, rc == cudaSuccess ? "ok" : "failed");
        for (int i = 2; i < got; i++)
            cudaFree(bufs[i]);
        if (rc == cudaSuccess)
            cudaFree(retry);
        return 0;
    }
    int a = fill(10);
    drain(a);
    int b = fill(6);
    drain(b);
    printf("budget_demo: held %d then %d MiB\n", a, b);
    return 0;
}
