/* snap_exit — holds 1 MiB, asks for a snapshot, then exits holding it: the
 * snapshot and the exit report must both survive under a pattern without
 * %n (the default).  With an argument, first writes a report to exactly
 * that path with tensorleak_snapshot_to.
 *
 *   it_snap_exit [PATH] */
#include <stdio.h>
#include <unistd.h>

#include "cudart_compat.h"
#include "tensorleak.h"

int main(int argc, char **argv)
{
    void *a, *b;
    if (cudaMalloc(&a, 1u << 20) != cudaSuccess)
        return 1;
    printf("pid %d\n", (int)getpid());
    if (argc > 1)
        printf("snapshot_to %d\n", tensorleak_snapshot_to("to-path", argv[1]));
    printf("snapshot %d\n", tensorleak_snapshot("before-exit"));
    if (cudaMalloc(&b, 2u << 20) != cudaSuccess)
        return 1;
    cudaFree(b);
    return 0;
}
