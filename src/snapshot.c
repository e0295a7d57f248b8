/*
 * snapshot.c — reports while the program runs: on a signal, on a timer, or
 * when the program asks (tensorleak_snapshot, tensorleak_snapshot_to,
 * tensorleak_mark).
 *
 * A signal handler may interrupt a hook that holds a table lock, so it does
 * nothing but write one byte into a pipe (async-signal-safe, errno kept).  A
 * watcher thread, started with every signal blocked so that no signal is ever
 * delivered to it, reads the pipe and takes the snapshot like any other
 * thread would: no unwinding, allocation or locking in signal context.
 *
 * The watcher is a thread the program did not make, so it must never be the
 * reason a forked child hangs.  fork() copies only the forking thread: any
 * lock the watcher held at that instant stays locked forever in the child,
 * and glibc re-initialises only some of its own (malloc's, stdio's, the
 * loader's), not tzset's or the locale's.  A child of a program that was
 * single-threaded before us must find libc as usable as it would have
 * without us.  So the watcher works only while it holds work_lock and a
 * pthread_atfork prepare handler takes work_lock: fork() waits for the unit
 * of work in progress (a live update is milliseconds, a report of a large
 * table seconds) and the watcher is asleep in poll() at the fork.
 */
#include "tl_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int wake_pipe[2] = {-1, -1};
static pthread_t watcher;
static bool watcher_running;
static pthread_mutex_t work_lock = PTHREAD_MUTEX_INITIALIZER;
/* Per forking thread: two threads may fork at once, one after the other
 * through work_lock. */
static __thread bool work_held_for_fork;
static __thread bool on_watcher;

bool tl_snapshot_on_watcher(void)
{
    return on_watcher;
}

static void on_signal(int sig)
{
    int saved = errno;
    char byte = sig == tl_opt.mark_signal ? 'M' : 'S';
    ssize_t w = write(wake_pipe[1], &byte, 1);
    (void)w; /* a full pipe already holds a pending request */
    errno = saved;
}

static double monotonic_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Sleeps in poll until a signal's byte arrives or the nearer of two
 * deadlines passes: the next interval report, the next live state update
 * (live.c). */
static void *watch(void *arg)
{
    (void)arg;
    on_watcher = true;
    double next_report = tl_opt.interval > 0 ? monotonic_s() + tl_opt.interval : -1.0;
    for (;;) {
        double now = monotonic_s(), next = tl_live_state_next_due();
        if (next_report >= 0 && (next < 0 || next_report < next))
            next = next_report;
        int timeout_ms = next < 0 ? -1 : next <= now ? 0 : (int)((next - now) * 1000.0) + 1;
        struct pollfd pfd = {.fd = wake_pipe[0], .events = POLLIN};
        int rc = poll(&pfd, 1, timeout_ms);
        if (rc < 0 && errno == EINTR)
            continue;
        if (rc < 0)
            return NULL;
        pthread_mutex_lock(&work_lock);
        if (rc == 0) {
            now = monotonic_s();
            if (next_report >= 0 && now >= next_report) {
                tl_mark("interval");
                tl_report_write(TL_REASON_INTERVAL, NULL, NULL, NULL);
                next_report = monotonic_s() + tl_opt.interval;
            }
            tl_live_state_tick(now);
        } else {
            char buf[64];
            ssize_t n = read(wake_pipe[0], buf, sizeof buf);
            bool snap = false, mark = false;
            for (ssize_t i = 0; i < n; i++) {
                snap |= buf[i] == 'S';
                mark |= buf[i] == 'M';
            }
            /* Several signals that arrived together make one snapshot: the
             * state they would all show is the same. */
            if (mark)
                tl_mark("signal");
            if (snap)
                tl_report_write(TL_REASON_SIGNAL, NULL, NULL, NULL);
        }
        pthread_mutex_unlock(&work_lock);
    }
}

/* fork() waits for the watcher's unit of work (see the top of this file).
 * The wait is bounded: should the watcher ever wait for something the forking
 * thread holds (a fork from a signal handler that interrupted one of our
 * hooks), the fork goes ahead after the bound rather than never. */
#define FORK_WAIT_S 10

static void before_fork(void)
{
    work_held_for_fork = false;
    if (on_watcher)
        return; /* something the watcher called forks: it holds work_lock */
    /* A report waiting for the Python bridge would wait its whole bound:
     * os.fork() holds the GIL the bridge needs. */
    tl_bridge_fork_begins();
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += FORK_WAIT_S;
    /* Taken even before the watcher runs: uncontended then, and a fork
     * just after pthread_create is covered.  A monotonic bound: a step of
     * the wall clock never stretches it. */
    work_held_for_fork = pthread_mutex_clocklock(&work_lock, CLOCK_MONOTONIC, &until) == 0;
}

static void after_fork_in_parent(void)
{
    if (on_watcher)
        return;
    tl_bridge_fork_ends(false);
    if (work_held_for_fork)
        pthread_mutex_unlock(&work_lock);
    work_held_for_fork = false;
}

static void install(int sig)
{
    if (sig <= 0)
        return;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    struct sigaction old;
    if (sigaction(sig, NULL, &old) == 0 && old.sa_handler != SIG_DFL && old.sa_handler != SIG_IGN &&
        old.sa_handler != on_signal) {
        tl_warn(NULL, "signal %d already has a handler in this program; snapshots on it are off", sig);
        return;
    }
    sigaction(sig, &sa, NULL);
}

static atomic_bool watcher_started;
static pthread_once_t fork_handlers_once = PTHREAD_ONCE_INIT;

/* Registered at the first CUDA call, after pyframes.c's handlers, which
 * are registered first here if another library's constructor reached CUDA
 * before pyframes' constructor ran: prepare handlers run in reverse order of
 * registration, so the watcher's work, which may take pyframes' locks, is
 * done before those locks are taken for the fork. */
static void register_fork_handlers(void)
{
    tl_pyframes_register_fork_handlers();
    if (pthread_atfork(before_fork, after_fork_in_parent, NULL) != 0)
        tl_warn(NULL, "cannot register the fork handlers; a fork during a live update may hang the child");
}

static void close_pipe(void)
{
    if (wake_pipe[0] >= 0) {
        close(wake_pipe[0]);
        close(wake_pipe[1]);
    }
    wake_pipe[0] = wake_pipe[1] = -1;
}

static bool open_pipe(void)
{
    /* The read end blocks in poll, not in read: keep it non-blocking so a
     * spurious wake-up never hangs the watcher. */
    if (pipe2(wake_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
        tl_warn(NULL, "cannot create the snapshot pipe (%s); signal snapshots are off", strerror(errno));
        wake_pipe[0] = wake_pipe[1] = -1;
        return false;
    }
    return true;
}

/* At start: the pipe and the handlers, no thread.  A signal that arrives
 * before the watcher runs waits in the pipe. */
void tl_snapshot_start(void)
{
    if (!(tl_opt.signal || tl_opt.mark_signal || tl_opt.interval > 0 || tl_opt.live) || !open_pipe())
        return;
    install(tl_opt.signal);
    install(tl_opt.mark_signal);
}

/* The watcher thread starts at the program's first CUDA call, not when the
 * library loads: a program that forks before it touches the GPU (Python's
 * multiprocessing, a server's pre-fork workers) stays single-threaded until
 * then, as it would be without tensorleak (CPython 3.12+ warns on a fork of
 * a multi-threaded process, and the warning would change its output). */
void tl_snapshot_watch(void)
{
    if (wake_pipe[0] < 0 || atomic_exchange(&watcher_started, true))
        return;
    pthread_once(&fork_handlers_once, register_fork_handlers);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&watcher, NULL, watch, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        tl_warn(NULL, "cannot start the snapshot thread (%s); signal snapshots are off", strerror(rc));
        return;
    }
    pthread_detach(watcher);
    watcher_running = true;
}

/* The watcher thread does not exist in a forked child, and the inherited
 * pipe is shared with the parent: a new pipe, and a new watcher if the
 * parent had one running and the child is followed.  An unfollowed child
 * keeps no pipe, so a signal it receives never wakes the parent's watcher. */
void tl_snapshot_after_fork(bool follow)
{
    /* Held by this thread since before_fork; the watcher it guarded is not
     * in this process. */
    pthread_mutex_init(&work_lock, NULL);
    work_held_for_fork = false;
    tl_bridge_fork_ends(true);
    bool was_running = watcher_running;
    watcher_running = false;
    atomic_store(&watcher_started, false);
    /* Unfollowed too: the child's own Python bridge (started by its
     * after-fork handler) must not find br_lock held by a thread that is
     * not there. */
    tl_bridge_after_fork();
    if (!follow) {
        close_pipe();
        return;
    }
    tl_growth_after_fork();
    tl_live_state_after_fork();
    if (wake_pipe[0] < 0)
        return;
    close_pipe();
    if (open_pipe() && was_running)
        tl_snapshot_watch();
}

TL_EXPORT void tensorleak_mark(const char *label);
void tensorleak_mark(const char *label)
{
    tl_init();
    tl_mark(label);
}

TL_EXPORT int tensorleak_snapshot(const char *label);
int tensorleak_snapshot(const char *label)
{
    tl_init();
    if (!atomic_load(&tl_active))
        return -1;
    return tl_report_write(TL_REASON_API, label, NULL, NULL);
}

TL_EXPORT int tensorleak_snapshot_to(const char *label, const char *path);
int tensorleak_snapshot_to(const char *label, const char *path)
{
    tl_init();
    if (!atomic_load(&tl_active) || !path || !*path)
        return -1;
    return tl_report_write_to(label, path);
}
