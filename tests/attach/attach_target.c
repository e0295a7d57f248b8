/* attach_target: a program that runs untracked and is attached to by
 * tests/attach.  `answer()` is what the test library patches (42 before,
 * 43 while attached).
 *
 *   attach_target read [nocuda]  commands on stdin, one per line:
 *                                a: print "answer N"; load: dlopen
 *                                libcuda.so.1, print "loaded"; q: exit 7
 *   attach_target busy           the same, and a thread calling answer()
 *                                without pause
 *   attach_target threads        the same, and 8 such threads
 *   attach_target sleep MS       sleep MS ms in one clock_nanosleep (which an
 *                                attach interrupts and must restart), then
 *                                say whether it slept whole, print answer,
 *                                exit 7
 * It prints "ready" once libcuda.so.1 is loaded (or at once with nocuda). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

__attribute__((noinline)) int answer(void)
{
    return 42;
}

static atomic_long calls;
static atomic_long wrong; /* answers neither 42 nor 43: a torn patch */

static void *spin(void *arg)
{
    (void)arg;
    for (;;) {
        int a = answer();
        if (a != 42 && a != 43)
            atomic_fetch_add(&wrong, 1);
        atomic_fetch_add(&calls, 1);
    }
    return NULL;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void load_driver(void)
{
    if (!dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL)) {
        fprintf(stderr, "attach_target: %s\n", dlerror());
        exit(3);
    }
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "read";
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!(argc > 2 && strcmp(argv[2], "nocuda") == 0))
        load_driver();
    int spinners = strcmp(mode, "busy") == 0 ? 1 : strcmp(mode, "threads") == 0 ? 8 : 0;
    for (int i = 0; i < spinners; i++) {
        pthread_t t;
        pthread_create(&t, NULL, spin, NULL);
    }
    puts("ready");
    if (strcmp(mode, "sleep") == 0) {
        long ms = argc > 2 ? atol(argv[2]) : 2000;
        struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L }, rem;
        double t0 = now_ms();
        int rc = clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, &rem);
        double slept = now_ms() - t0;
        printf("slept: %s\n", rc ? "interrupted" : slept >= ms ? "whole" : "short");
        printf("answer %d\n", answer());
        return 7;
    }
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
        if (strcmp(line, "a\n") == 0) {
            printf("answer %d\n", answer());
        } else if (strcmp(line, "load\n") == 0) {
            load_driver();
            puts("loaded");
        } else if (strcmp(line, "calls\n") == 0) {
            long before = atomic_load(&calls);
            struct timespec ts = { 0, 50000000 };
            nanosleep(&ts, NULL);
            printf("spinning %s, wrong %ld\n", atomic_load(&calls) > before || !spinners ? "yes" : "no",
                   atomic_load(&wrong));
        } else if (strcmp(line, "q\n") == 0) {
            return 7;
        }
    }
    return 7;
}
