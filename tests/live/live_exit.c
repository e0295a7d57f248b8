/*
 * live_exit.c — a program that exits while tensorleak's watcher may be
 * updating its live file.
 *
 *   live_exit quick MS       allocates, lives MS milliseconds, returns from main
 *   live_exit in-rename DIR  allocates, waits until slow_rename.so (preloaded
 *                            before libtensorleak.so) says the watcher is
 *                            inside a rename of the live file (DIR/in-rename),
 *                            returns from main; an exit handler of its own,
 *                            registered before tensorleak's and so run after
 *                            it, waits (at most 10 s) until that rename
 *                            returned (DIR/renamed): the watcher's write
 *                            finishes while the process is still exiting
 *   live_exit forks N        allocates, then forks N children one after the
 *                            other, each allocating 1 MiB (kept: a leak in
 *                            its own report) and exiting; prints the wall
 *                            time of the N fork/wait pairs in seconds
 */
#include "cudart_compat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *marks;

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Waits at most `ms` milliseconds for DIR/NAME; whether it appeared. */
static int wait_for_mark(const char *name, long ms)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", marks, name);
    for (long waited = 0; waited < ms; waited += 5) {
        if (access(path, F_OK) == 0)
            return 1;
        sleep_ms(5);
    }
    return 0;
}

static void wait_for_rename(void)
{
    if (!wait_for_mark("renamed", 10000))
        fprintf(stderr, "live_exit: the watcher's rename did not return\n");
}

static double monotonic_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int fork_children(int n)
{
    double start = monotonic_s();
    for (int i = 0; i < n; i++) {
        pid_t pid = fork();
        if (pid == 0) {
            void *p = NULL;
            exit(cudaMalloc(&p, 1 << 20) == cudaSuccess ? 0 : 3);
        }
        int status;
        if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
            return 4;
    }
    printf("%.3f\n", monotonic_s() - start);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 3 || (strcmp(argv[1], "quick") && strcmp(argv[1], "in-rename") && strcmp(argv[1], "forks"))) {
        fprintf(stderr, "usage: live_exit quick MS | in-rename DIR | forks N\n");
        return 2;
    }
    int in_rename = !strcmp(argv[1], "in-rename");
    if (in_rename) {
        marks = argv[2];
        atexit(wait_for_rename);
    }
    void *p = NULL;
    if (cudaMalloc(&p, 1 << 20) != cudaSuccess)
        return 3;
    if (!strcmp(argv[1], "forks"))
        return fork_children(atoi(argv[2]));
    if (!in_rename) {
        sleep_ms(atol(argv[2]));
        return 0;
    }
    if (!wait_for_mark("in-rename", 10000)) {
        fprintf(stderr, "live_exit: the watcher never renamed\n");
        return 4;
    }
    return 0;
}
