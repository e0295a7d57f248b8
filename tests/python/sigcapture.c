/*
 * sigcapture.c — a timer signal handler that reaches tensorleak, for
 * signal_capture_app.py (test_pyframes.py).
 *
 * A SIGALRM every few tens of microseconds (ITIMER_REAL); when it lands
 * inside one of tensorleak's captures, the handler frees a pointer the pool
 * never handed out (an invalid free, recorded with its stack) and hands out
 * a 64-byte block of a pool (tracked unconditionally, also with its stack).
 * Neither goes through an interposed CUDA call, so tensorleak's hook-depth
 * guard does not keep them out: a capture begins while the interrupted one
 * is in flight on the same thread.
 */
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/time.h>
#include <ucontext.h>

#include <tensorleak.h>

#define BLOCK_BYTES 64
#define BLOCKS_AT 0x7e0000000000ull /* pool blocks: never a device address the simulator hands out */
#define BOGUS_AT 0x7d0000000000ull  /* freed, never handed out */

static tensorleak_pool *pool;
static volatile sig_atomic_t ticks, acted;

/* Where the interrupted code may be for the handler to act: tensorleak's
 * capture code (stack.c, cfi_walk.c, pyframes.c), [lo, hi) each.  Nowhere
 * else: tensorleak's handler-side work (a call site made, a row added)
 * takes malloc's and its own tables' locks, which the interrupted thread
 * may hold anywhere else (inside malloc, callsite.c, live_table.c).  Those
 * are not what this checks: two captures of one thread interleaved are. */
#define MAX_RANGES 64
static uintptr_t range_lo[MAX_RANGES], range_hi[MAX_RANGES];
static int nranges;

static int in_capture(uintptr_t pc)
{
    for (int i = 0; i < nranges; i++)
        if (pc >= range_lo[i] && pc < range_hi[i])
            return 1;
    return 0;
}

/* Named in every stack the handler's captures take. */
__attribute__((noinline)) void sigcapture_on_tick(int sig, siginfo_t *info, void *context)
{
    (void)sig;
    (void)info;
    ticks++;
    if (!in_capture((uintptr_t)((ucontext_t *)context)->uc_mcontext.gregs[REG_RIP]))
        return;
    int saved = errno;
    unsigned long k = (unsigned long)acted++;
    tensorleak_pool_free(pool, (const void *)(uintptr_t)(BOGUS_AT + k * BLOCK_BYTES));
    tensorleak_pool_alloc(pool, (const void *)(uintptr_t)(BLOCKS_AT + k * BLOCK_BYTES), BLOCK_BYTES);
    errno = saved;
}

/* Starts a tick every `usec` microseconds; the handler acts when it
 * interrupts one of the n functions at offset[i] (size[i] bytes) of
 * libtensorleak.so.  0, or -1 when not running under tensorleak or the
 * timer cannot be set. */
int sigcapture_start(int usec, int n, const unsigned long *offset, const unsigned long *size)
{
    Dl_info lib;
    void *anchor = dlsym(RTLD_DEFAULT, "tensorleak_pool_alloc");
    pool = tensorleak_pool_create("signal", 0);
    if (!pool || !anchor || !dladdr(anchor, &lib) || n > MAX_RANGES)
        return -1;
    for (nranges = 0; nranges < n; nranges++) {
        range_lo[nranges] = (uintptr_t)lib.dli_fbase + offset[nranges];
        range_hi[nranges] = range_lo[nranges] + size[nranges];
    }
    /* Each call resolves its tensorleak function on its first use (dlsym,
     * not for a signal handler): here, with a null pointer that does nothing. */
    tensorleak_pool_free(pool, NULL);
    tensorleak_pool_alloc(pool, NULL, 0);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = sigcapture_on_tick;
    sa.sa_flags = SA_RESTART | SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    struct itimerval every = {{0, usec}, {0, usec}};
    if (sigaction(SIGALRM, &sa, NULL) != 0 || setitimer(ITIMER_REAL, &every, NULL) != 0)
        return -1;
    return 0;
}

/* How many ticks acted. */
long sigcapture_acted(void)
{
    return (long)acted;
}

/* Stops the ticks; how many there were. */
long sigcapture_stop(void)
{
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
    signal(SIGALRM, SIG_IGN);
    return (long)ticks;
}
