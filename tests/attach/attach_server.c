/* attach_server: a server on the CUDA driver API that runs without
 * tensorleak, for the end-to-end attach tests.  Commands on stdin, one per
 * line, each answered with one line:
 *   pre N      N blocks of 1 MiB, kept ("pre N")
 *   req        one request: 1 MiB kept (the leak), 3 MiB freed ("served K")
 *   freepre    frees the pre blocks ("freed N")
 *   spin       8 threads allocate and free 64 KiB in a loop ("spinning")
 *   stop       the threads stop, each keeps one 64 KiB block ("stopped")
 *   fork       a child allocates and frees 1 MiB and exits 0 ("child 0")
 *   q          exit 0
 * It prints "ready" once its context is current. */
#include "cuda_compat.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define THREADS 8

static CUdeviceptr pre[1024];
static int npre, served;
static CUcontext ctx;
static atomic_bool stop;
static pthread_t threads[THREADS];
static CUdeviceptr kept[THREADS];

static void check(CUresult rc, const char *what)
{
    if (rc != CUDA_SUCCESS) {
        fprintf(stderr, "attach_server: %s: %d\n", what, (int)rc);
        _exit(3);
    }
}

static void *allocate_in_a_loop(void *arg)
{
    long i = (long)arg;
    check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    /* Busy, but leaving the cores now and then: eight threads that never
     * block on two cores make each attach wait for the scheduler to run every
     * one of them to its stop, which is the test's cost, not its point. */
    for (unsigned n = 1; !atomic_load(&stop); n++) {
        CUdeviceptr p;
        check(cuMemAlloc_v2(&p, 64 << 10), "cuMemAlloc");
        check(cuMemFree_v2(p), "cuMemFree");
        if (n % 64 == 0)
            usleep(100);
    }
    check(cuMemAlloc_v2(&kept[i], 64 << 10), "cuMemAlloc");
    return NULL;
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    CUdevice dev;
    check(cuInit(0), "cuInit");
    check(cuDeviceGet(&dev, 0), "cuDeviceGet");
    check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
    check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    puts("ready");
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
        int n;
        if (sscanf(line, "pre %d", &n) == 1) {
            for (int i = 0; i < n && npre < 1024; i++)
                check(cuMemAlloc_v2(&pre[npre++], 1 << 20), "cuMemAlloc");
            printf("pre %d\n", n);
        } else if (strcmp(line, "req\n") == 0) {
            CUdeviceptr leak, tmp;
            check(cuMemAlloc_v2(&leak, 1 << 20), "cuMemAlloc");
            check(cuMemAlloc_v2(&tmp, 3 << 20), "cuMemAlloc");
            check(cuMemFree_v2(tmp), "cuMemFree");
            printf("served %d\n", ++served);
        } else if (strcmp(line, "freepre\n") == 0) {
            for (int i = 0; i < npre; i++)
                check(cuMemFree_v2(pre[i]), "cuMemFree");
            printf("freed %d\n", npre);
            npre = 0;
        } else if (strcmp(line, "spin\n") == 0) {
            atomic_store(&stop, false);
            for (long i = 0; i < THREADS; i++)
                pthread_create(&threads[i], NULL, allocate_in_a_loop, (void *)i);
            puts("spinning");
        } else if (strcmp(line, "stop\n") == 0) {
            atomic_store(&stop, true);
            for (int i = 0; i < THREADS; i++)
                pthread_join(threads[i], NULL);
            puts("stopped");
        } else if (strcmp(line, "fork\n") == 0) {
            pid_t child = fork();
            if (child == 0) {
                CUdeviceptr p;
                check(cuMemAlloc_v2(&p, 1 << 20), "cuMemAlloc");
                check(cuMemFree_v2(p), "cuMemFree");
                _exit(0);
            }
            int status = -1;
            waitpid(child, &status, 0);
            printf("child %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
        } else if (strcmp(line, "q\n") == 0) {
            break;
        }
    }
    return 0;
}
