/*
 * snapshot.c — reports while the program runs: on a signal, on a timer, or
 * when the program asks (tensorleak_snapshot, tensorleak_snapshot_to,
 * tensorleak_mark).
 *
 * A signal handler may interrupt a hook that holds a table lock, so it does
 * nothing but set a flag and post a semaphore (both async-signal-safe,
 * errno kept).  A watcher thread, started with every signal blocked so that
 * no signal is ever delivered to it, waits on the semaphore (with a timeout:
 * the next interval report or live update) and takes the snapshot like any
 * other thread would: no unwinding, allocation or locking in signal context.
 * No descriptor is involved: a pipe would sit in the program's descriptor
 * table, where a program that closes what it did not open (a daemon) can
 * close it or have its own file take its number.
 *
 * The signals are installed at the first CUDA call (or client API call),
 * only where the program left them at SIG_DFL (preload.c says why).
 *
 * The watcher is a thread the program did not make, so it must never be the
 * reason a forked child hangs.  fork() copies only the forking thread: any
 * lock the watcher held at that instant stays locked forever in the child,
 * and glibc re-initialises only some of its own (malloc's, stdio's, the
 * loader's), not tzset's or the locale's.  A child of a program that was
 * single-threaded before us must find libc as usable as it would have
 * without us.  So the watcher works only while it holds work_lock and the
 * first fork prepare handler (preload.c's list) takes work_lock: fork()
 * waits for the unit of work in progress (a live update is milliseconds, a
 * report of a large table seconds) and the watcher is asleep in
 * sem_clockwait() at the fork.
 */
#include "tl_internal.h"

#include <errno.h>
#include <semaphore.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static sem_t wake;
static bool wake_ready; /* sem_init succeeded */
static atomic_bool want_snapshot, want_mark;
static pthread_t watcher;
static bool watcher_running;
static bool restart_after_fork; /* in a forked child: the parent's watcher ran */
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
    atomic_store(sig == tl_opt.mark_signal ? &want_mark : &want_snapshot, true);
    sem_post(&wake); /* EOVERFLOW: a wake-up is pending already */
    errno = saved;
}

static double monotonic_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Sleeps until a signal posts the semaphore or the nearer of two deadlines
 * passes: the next interval report, the next live state update (live.c). */
static void *watch(void *arg)
{
    (void)arg;
    on_watcher = true;
    double next_report = tl_opt.interval > 0 ? monotonic_s() + tl_opt.interval : -1.0;
    for (;;) {
        /* A later attach may turn the interval on or off (tl_snapshot_wake). */
        if (tl_opt.interval <= 0)
            next_report = -1.0;
        else if (next_report < 0)
            next_report = monotonic_s() + tl_opt.interval;
        double next = tl_live_state_next_due();
        if (next_report >= 0 && (next < 0 || next_report < next))
            next = next_report;
        int rc;
        if (next < 0) {
            rc = sem_wait(&wake);
        } else {
            struct timespec until;
            until.tv_sec = (time_t)next;
            until.tv_nsec = (long)((next - (double)until.tv_sec) * 1e9);
            if (until.tv_nsec >= 1000000000L)
                until.tv_nsec = 999999999L;
            rc = sem_clockwait(&wake, CLOCK_MONOTONIC, &until);
        }
        if (rc != 0 && errno == EINTR)
            continue;
        if (rc != 0 && errno != ETIMEDOUT)
            return NULL;
        /* Several signals that arrived together make one snapshot: the
         * state they would all show is the same. */
        while (rc == 0 && sem_trywait(&wake) == 0)
            ;
        pthread_mutex_lock(&work_lock);
        /* Tracking off (after a detach, or the exit report): the watcher
         * idles, writing nothing. */
        bool active = atomic_load(&tl_active);
        bool mark = atomic_exchange(&want_mark, false), snap = atomic_exchange(&want_snapshot, false);
        if (mark && active)
            tl_mark("signal");
        if (snap && active)
            tl_report_write(TL_REASON_SIGNAL, NULL, NULL, NULL);
        double now = monotonic_s();
        if (next_report >= 0 && now >= next_report) {
            /* Once Python's atexit has run, the program is tearing down:
             * what it frees then is no request, and a mark would end every
             * growth run with a fall (a slow teardown spans several
             * intervals).  The interval report is still written. */
            if (active && !tl_bridge_closed())
                tl_mark("interval");
            if (active)
                tl_report_write(TL_REASON_INTERVAL, NULL, NULL, NULL);
            next_report = monotonic_s() + tl_opt.interval;
        }
        tl_live_state_tick(now);
        pthread_mutex_unlock(&work_lock);
    }
}

void tl_snapshot_wake(void)
{
    if (wake_ready)
        sem_post(&wake);
}

void tl_snapshot_stop_writing(void (*last)(void))
{
    pthread_mutex_lock(&work_lock);
    last();
    pthread_mutex_unlock(&work_lock);
}

/* fork() waits for the watcher's unit of work (see the top of this file;
 * preload.c's list of fork participants runs this first).  The wait is
 * bounded: should the watcher ever wait for something the forking thread
 * holds (a fork from a signal handler that interrupted one of our hooks),
 * the fork goes ahead after the bound rather than never. */
#define FORK_WAIT_S 10

void tl_snapshot_before_fork(void)
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

void tl_snapshot_after_fork_in_parent(void)
{
    if (on_watcher)
        return;
    tl_bridge_fork_ends();
    if (work_held_for_fork)
        pthread_mutex_unlock(&work_lock);
    work_held_for_fork = false;
}

/* The handler each signal got from tl_signal_install_if_default. */
static _Atomic(void (*)(int)) installed[NSIG];

bool tl_signal_install_if_default(int sig, void (*handler)(int), int flags, struct sigaction *old)
{
    struct sigaction now, before;
    if (sigaction(sig, NULL, &now) != 0 || (now.sa_flags & SA_SIGINFO) || now.sa_handler != SIG_DFL) {
        if (old)
            *old = now;
        return false;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sa.sa_flags = flags;
    sigemptyset(&sa.sa_mask);
    if (sigaction(sig, &sa, &before) != 0)
        return false;
    /* Another thread of the program set a disposition between the two
     * calls: it goes back. */
    if ((before.sa_flags & SA_SIGINFO) || before.sa_handler != SIG_DFL) {
        sigaction(sig, &before, NULL);
        if (old)
            *old = before;
        return false;
    }
    if (sig > 0 && sig < NSIG)
        atomic_store(&installed[sig], handler);
    return true;
}

void tl_signals_restore(void)
{
    for (int sig = 1; sig < NSIG; sig++) {
        void (*mine)(int) = atomic_exchange(&installed[sig], NULL);
        struct sigaction now;
        if (!mine || sigaction(sig, NULL, &now) != 0 || (now.sa_flags & SA_SIGINFO) || now.sa_handler != mine)
            continue; /* the program's own since: left alone */
        struct sigaction dfl;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        sigemptyset(&dfl.sa_mask);
        sigaction(sig, &dfl, NULL);
    }
}

/* Only on a signal at SIG_DFL: a handler of the program's stays, and so
 * does SIG_IGN (an exec'd child inherits SIG_IGN; it would inherit SIG_DFL
 * from our handler). */
static void install(int sig)
{
    struct sigaction old;
    if (sig > 0 && !tl_signal_install_if_default(sig, on_signal, SA_RESTART, &old) &&
        ((old.sa_flags & SA_SIGINFO) || old.sa_handler != on_signal))
        tl_warn(NULL, "signal %d already has a handler or is ignored in this program; snapshots on it are off", sig);
}

static atomic_bool watcher_started;

/* At the first CUDA call or client API call: the semaphore and the
 * handlers.  A signal that arrives before the watcher runs leaves its flag
 * and a post for it. */
void tl_snapshot_start(void)
{
    if (!(tl_opt.signal || tl_opt.mark_signal || tl_opt.interval > 0 || tl_opt.live))
        return;
    if (!wake_ready) { /* once: a later attach's watcher is the same */
        if (sem_init(&wake, 0, 0) != 0) {
            tl_warn(NULL, "cannot create the snapshot semaphore (%s); signal snapshots are off", strerror(errno));
            return;
        }
        wake_ready = true;
    }
    install(tl_opt.signal);
    install(tl_opt.mark_signal);
}

/* The watcher thread starts at the program's first tracked allocation
 * (tracker.c), not when the library loads: a program that forks before it touches the GPU (Python's
 * multiprocessing, a server's pre-fork workers) stays single-threaded until
 * then, as it would be without tensorleak (CPython 3.12+ warns on a fork of
 * a multi-threaded process, and the warning would change its output). */
void tl_snapshot_watch(void)
{
    if (!wake_ready || atomic_exchange(&watcher_started, true))
        return;
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

/* The watcher thread does not exist in a forked child.  The semaphore is
 * the child's own copy (not shared between processes); it starts again at
 * zero, and a request the parent had pending is the parent's. */
void tl_snapshot_after_fork_in_child(void)
{
    /* Held by this thread since tl_snapshot_before_fork; the watcher it
     * guarded is not in this process. */
    pthread_mutex_init(&work_lock, NULL);
    work_held_for_fork = false;
    restart_after_fork = watcher_running;
    watcher_running = false;
    atomic_store(&watcher_started, false);
    if (wake_ready) {
        sem_destroy(&wake);
        wake_ready = sem_init(&wake, 0, 0) == 0;
    }
    atomic_store(&want_snapshot, false);
    atomic_store(&want_mark, false);
}

/* A followed child gets a watcher of its own if the parent had one
 * running: last of the fork participants, once everything its reports read
 * is the child's. */
void tl_snapshot_watch_after_fork(void)
{
    if (restart_after_fork)
        tl_snapshot_watch();
    restart_after_fork = false;
}

