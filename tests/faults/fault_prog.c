/*
 * fault_prog.c — one program, many ways to end and to make children, for
 * tests/faults/faults_test.py.  Every mode first leaks LEAKS blocks of
 * BLOCK bytes with cudaMalloc at leak_blocks(), then does what its name says:
 *
 *   return | exit | _exit | abort | sigterm | sigint | segv
 *   fork | fork-nofollow | fork-exec | vfork-exec | posix-spawn | clone
 *   clone-held WHAT N [LIB] (while a thread of the library holds lock WHAT,
 *     tensorleak_test_hold's number, N raw clones one after the other, each
 *     child allocating; prints how many hung)
 *   fork-storm N GOFILE (once GOFILE exists, N children at once, each of
 *     which uses libc's locking functions)
 *   report-under-loader-lock LIB DIR PLUGIN (PLUGIN loaded and unloaded;
 *     then, while a thread of the library holds the loader's lock,
 *     dlopen'ing LIB: SIGUSR2, then SIGUSR1 twice, each time waiting for
 *     the report DIR/r.PID.N.json; prints how many came.  Run with
 *     TENSORLEAK_MARK_SIGNAL=SIGUSR2)
 *   fork-held-work (a fork while the watcher's work holds its lock, the
 *     work let go only once the fork waits for it; prints whether the fork
 *     waited less than 5 s)
 *   fork-held-contexts (the same while a thread of the library holds the
 *     tracker's table of contexts; the child resets its device, whose
 *     teardown reads that table, and exits 0)
 *   dlopen PLUGIN | threads | leak2 (what exec'd children run)
 *
 * Children print "child PID" on stdout so the driver knows which report is
 * whose.  A library this program links (fault_early.c) and this program's own
 * constructor each leak one block before main when FAULT_EARLY=1.
 */
#include "cudart_compat.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BLOCK (1u << 20)
#define LEAKS 3

extern char **environ;
void fault_early_linked(void);

static void die(const char *what)
{
    fprintf(stderr, "fault_prog: %s failed\n", what);
    exit(3);
}

static __attribute__((noinline)) void leak_blocks(int n, size_t bytes)
{
    for (int i = 0; i < n; i++) {
        void *p = NULL;
        if (cudaMalloc(&p, bytes) != cudaSuccess)
            die("cudaMalloc");
    }
}

__attribute__((constructor)) static void program_constructor(void)
{
    const char *e = getenv("FAULT_EARLY");
    if (e && strcmp(e, "1") == 0)
        leak_blocks(1, 3 * BLOCK);
}

static int wait_child(pid_t pid)
{
    int st;
    if (waitpid(pid, &st, 0) != pid)
        die("waitpid");
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void sleep_1ms(void)
{
    struct timespec ms = {0, 1000000};
    nanosleep(&ms, NULL);
}

/* A child that hangs is killed: exit status 4 says so, instead of a parent
 * that waits forever. */
static int wait_child_bounded(pid_t pid, int seconds)
{
    for (long waited_ms = 0;; waited_ms++) {
        int st;
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        if (w < 0)
            die("waitpid");
        if (waited_ms >= seconds * 1000L)
            break;
        sleep_1ms();
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return -1;
}

/* What a forked child may do in a program that had no threads: glibc's
 * time conversion (tzset's lock), stdio and malloc. */
static void use_libc_locks(void)
{
    time_t now = time(NULL);
    struct tm tm;
    char text[64];
    gmtime_r(&now, &tm);
    localtime_r(&now, &tm);
    strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S", &tm);
    FILE *f = fopen("/dev/null", "w");
    if (f) {
        fprintf(f, "%s\n", text);
        fclose(f);
    }
    free(malloc(4096));
}

static void announce(pid_t pid)
{
    printf("child %d\n", (int)pid);
    fflush(stdout);
}

#define THREADS 8
static pthread_barrier_t barrier;
static void *first_use(void *arg)
{
    (void)arg;
    pthread_barrier_wait(&barrier);
    leak_blocks(1, BLOCK / 2);
    return NULL;
}

static int child_fn(void *arg)
{
    (void)arg;
    leak_blocks(2, BLOCK);
    exit(0); /* runs destructors: the library must not report for this child */
}

/* fork-held-work: the main thread's id, and the library's release. */
static pid_t main_tid;
static void (*release_held)(void);

/* Is the main thread asleep in a futex wait (a lock taken in fork's
 * prepare handlers)?  /proc/self/task/TID/syscall starts with the number of
 * the system call it is blocked in. */
static bool main_waits_in_futex(void)
{
    char path[64], text[32] = {0};
    snprintf(path, sizeof path, "/proc/self/task/%d/syscall", (int)main_tid);
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return false;
    ssize_t n = read(fd, text, sizeof text - 1);
    close(fd);
    return n > 0 && atol(text) == SYS_futex;
}

/* Lets the held work go once the main thread has waited in fork() for 30 ms
 * (or after 10 s, when it never does). */
static void *release_once_the_fork_waits(void *arg)
{
    (void)arg;
    for (int waiting_ms = 0, ms = 0; waiting_ms < 30 && ms < 10000; ms++) {
        waiting_ms = main_waits_in_futex() ? waiting_ms + 1 : 0;
        sleep_1ms();
    }
    release_held();
    return NULL;
}

int main(int argc, char **argv)
{
    fault_early_linked();
    const char *mode = argc > 1 ? argv[1] : "return";
    char *self = argv[0];
    if (strcmp(mode, "leak2") == 0) {
        leak_blocks(2, BLOCK);
        return 0;
    }
    if (strcmp(mode, "threads") == 0) {
        /* No CUDA call before this point: the threads race to the first one. */
        pthread_t t[THREADS];
        pthread_barrier_init(&barrier, NULL, THREADS);
        for (int i = 0; i < THREADS; i++)
            pthread_create(&t[i], NULL, first_use, NULL);
        for (int i = 0; i < THREADS; i++)
            pthread_join(t[i], NULL);
        puts("threads done");
        return 0;
    }
    leak_blocks(LEAKS, BLOCK);
    fflush(stdout);
    if (strcmp(mode, "return") == 0) {
        puts("returning");
        return 0;
    }
    if (strcmp(mode, "exit") == 0) {
        puts("exiting");
        exit(7);
    }
    if (strcmp(mode, "_exit") == 0)
        _exit(9);
    if (strcmp(mode, "abort") == 0)
        abort();
    if (strcmp(mode, "sigterm") == 0)
        raise(SIGTERM);
    if (strcmp(mode, "sigint") == 0)
        raise(SIGINT);
    if (strcmp(mode, "segv") == 0) {
        volatile int *null = NULL;
        *null = 1;
    }
    if (strcmp(mode, "fork") == 0) {
        pid_t pid = fork();
        if (pid == 0) {
            leak_blocks(2, BLOCK);
            exit(0);
        }
        announce(pid);
        return wait_child(pid);
    }
    if (strcmp(mode, "fork-storm") == 0 && argc > 3) {
        /* Forks once GOFILE exists (the driver creates it when the moment
         * it wants has come), back to back, waited for afterwards. */
        int n = atoi(argv[2]);
        for (int waited_ms = 0; access(argv[3], F_OK) != 0; waited_ms++) {
            if (waited_ms > 20000)
                die("waiting for the go file");
            sleep_1ms();
        }
        pid_t *pids = calloc((size_t)n, sizeof *pids);
        if (!pids)
            die("calloc");
        for (int i = 0; i < n; i++) {
            pids[i] = fork();
            if (pids[i] < 0)
                die("fork");
            if (pids[i] == 0) {
                use_libc_locks();
                _exit(0);
            }
        }
        int hung = 0, failed = 0;
        for (int i = 0; i < n; i++) {
            int st = wait_child_bounded(pids[i], hung ? 0 : 10);
            hung += st < 0;
            failed += st > 0;
        }
        free(pids);
        printf("%d children, %d hung, %d failed\n", n, hung, failed);
        return hung || failed ? 4 : 0;
    }
    if (strcmp(mode, "fork-exec") == 0) {
        pid_t pid = fork();
        if (pid == 0) {
            execl(self, self, "leak2", (char *)NULL);
            _exit(127);
        }
        announce(pid);
        return wait_child(pid);
    }
    if (strcmp(mode, "vfork-exec") == 0) {
        pid_t pid = vfork();
        if (pid == 0) {
            execl(self, self, "leak2", (char *)NULL);
            _exit(127);
        }
        announce(pid);
        return wait_child(pid);
    }
    if (strcmp(mode, "posix-spawn") == 0) {
        pid_t pid;
        char *args[] = {self, "leak2", NULL};
        if (posix_spawn(&pid, self, NULL, NULL, args, environ) != 0)
            die("posix_spawn");
        announce(pid);
        return wait_child(pid);
    }
    if (strcmp(mode, "clone") == 0) {
        /* Raw clone: no pthread_atfork handlers run in the child. */
        long pid = syscall(SYS_clone, (unsigned long)SIGCHLD, NULL, NULL, NULL, NULL);
        if (pid == 0)
            child_fn(NULL);
        if (pid < 0)
            die("clone");
        announce((pid_t)pid);
        return wait_child((pid_t)pid);
    }
    if (strcmp(mode, "clone-held") == 0 && argc > 3) {
        /* The library's test switch, found as a test finds it: not linked. */
        int (*hold)(int, const char *) = (int (*)(int, const char *))dlsym(RTLD_DEFAULT, "tensorleak_test_hold");
        void (*release)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "tensorleak_test_release");
        if (!hold || !release)
            die("dlsym(tensorleak_test_hold)");
        int n = atoi(argv[3]);
        if (hold(atoi(argv[2]), argc > 4 ? argv[4] : NULL) != 0)
            die("tensorleak_test_hold");
        /* Nothing below takes the held lock: no allocation, no dlsym, no
         * stdio until it is released. */
        int hung = 0, failed = 0;
        for (int i = 0; i < n; i++) {
            long pid = syscall(SYS_clone, (unsigned long)SIGCHLD, NULL, NULL, NULL, NULL);
            if (pid == 0) {
                /* A call site the parent never saw: its first allocation. */
                void *p = NULL;
                _exit(cudaMalloc(&p, BLOCK) == cudaSuccess && cudaFree(p) == cudaSuccess ? 0 : 5);
            }
            if (pid < 0)
                break;
            int st = wait_child_bounded((pid_t)pid, hung ? 1 : 10);
            hung += st < 0;
            failed += st > 0;
        }
        release();
        printf("%d children, %d hung, %d failed\n", n, hung, failed);
        return hung || failed ? 4 : 0;
    }
    if (strcmp(mode, "report-under-loader-lock") == 0 && argc > 4) {
        /* While a thread of the library holds the loader's lock: a mark and
         * two signal reports, a live update between them, each waited for
         * (20 s bound, none once one is missing) before the next.  The
         * watcher symbolizes the leaks' stacks, names their owners and reads
         * the devices without that lock, or waits until it is let go.  A
         * dlclose before: what the watcher kept of the driver is from
         * before it. */
        void *plugin = dlopen(argv[4], RTLD_NOW | RTLD_LOCAL);
        if (!plugin || dlclose(plugin) != 0)
            die("dlopen and dlclose of the plugin");
        int (*hold)(int, const char *) = (int (*)(int, const char *))dlsym(RTLD_DEFAULT, "tensorleak_test_hold");
        void (*release)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "tensorleak_test_release");
        if (!hold || !release)
            die("dlsym(tensorleak_test_hold)");
        char report[2][4096];
        for (int i = 0; i < 2; i++)
            if (snprintf(report[i], sizeof report[i], "%s/r.%d.%d.json", argv[3], (int)getpid(), i + 1) >=
                (int)sizeof report[i])
                die("snprintf");
        if (hold(1, argv[2]) != 0)
            die("tensorleak_test_hold");
        /* Nothing below takes the loader's lock until it is released. */
        raise(SIGUSR2);
        int written = 0;
        for (int i = 0; i < 2; i++) {
            raise(SIGUSR1);
            for (int waited_ms = 0; access(report[i], F_OK) != 0 && waited_ms < (written == i ? 20000 : 0); waited_ms++)
                sleep_1ms();
            written += access(report[i], F_OK) == 0;
        }
        release();
        printf("%d of 2 reports written while the loader's lock was held\n", written);
        return 0;
    }
    if (strcmp(mode, "fork-held-work") == 0 || strcmp(mode, "fork-held-contexts") == 0) {
        /* The work a report does takes a Python location's lock, which the
         * fork's prepare handlers take too: after the watcher's, or the
         * fork waits out its bound (10 s) for a lock it holds itself. */
        int (*hold)(int, const char *) = (int (*)(int, const char *))dlsym(RTLD_DEFAULT, "tensorleak_test_hold");
        release_held = (void (*)(void))dlsym(RTLD_DEFAULT, "tensorleak_test_release");
        if (!hold || !release_held)
            die("dlsym(tensorleak_test_hold)");
        bool contexts = strcmp(mode, "fork-held-contexts") == 0;
        if (hold(contexts ? 7 : 6, NULL) != 0)
            die("tensorleak_test_hold");
        main_tid = (pid_t)syscall(SYS_gettid);
        pthread_t releaser;
        if (pthread_create(&releaser, NULL, release_once_the_fork_waits, NULL) != 0)
            die("pthread_create");
        struct timespec before, after;
        clock_gettime(CLOCK_MONOTONIC, &before);
        pid_t pid = fork();
        if (pid == 0)
            _exit(contexts && cudaDeviceReset() != cudaSuccess ? 6 : 0);
        if (pid < 0)
            die("fork");
        clock_gettime(CLOCK_MONOTONIC, &after);
        pthread_join(releaser, NULL);
        int st = wait_child_bounded(pid, 10);
        double waited = (double)(after.tv_sec - before.tv_sec) + (double)(after.tv_nsec - before.tv_nsec) / 1e9;
        printf("the fork waited %s 5 s; the child exited %d\n", waited < 5.0 ? "less than" : "at least", st);
        return 0;
    }
    if (strcmp(mode, "dlopen") == 0 && argc > 2) {
        void *h = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
        if (!h)
            die(dlerror());
        void (*plugin_leak)(int) = (void (*)(int))dlsym(h, "fault_plugin_leak");
        if (!plugin_leak)
            die("dlsym(fault_plugin_leak)");
        plugin_leak(2);
        if (dlclose(h) != 0)
            die("dlclose");
        puts("unloaded");
        return 0;
    }
    fprintf(stderr, "fault_prog: unknown mode %s\n", mode);
    return 2;
}
