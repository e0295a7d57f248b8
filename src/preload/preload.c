/*
 * preload.c — life cycle of the preloaded library: start, fork, exit.
 *
 * A process that never reaches CUDA must run exactly as it would without
 * tensorleak (a shell in front of the real program, `ls`, a Python
 * interpreter that only imports): no descriptor, no signal handler, no
 * thread, no file read or written.  So the constructor does only what needs
 * nothing of the process: it loads the private libraries (private_deps.c:
 * dlopen holds no descriptor afterwards) and reads the options from
 * `environ`.  Everything else starts at the first CUDA call (tl_ensure_init,
 * or the first hook before our constructor ran — another library's
 * constructor may allocate first) or at the first call of the tensorleak_*
 * client API (tl_init): the owner, suppression and budget files, the fork
 * handlers, the snapshot signal and the fatal-signal handlers; the watcher
 * thread starts at the first tracked allocation (tracker.c).  Nothing heavy happens inside dlsym.
 *
 * Signal handlers are installed then, and only on a signal whose
 * disposition is still SIG_DFL.  By the first CUDA call an interpreter has
 * set up what it sets up at start: CPython reads each disposition once, at
 * start, and installs its SIGINT handler only on a SIGINT left at default;
 * so `signal.getsignal` keeps returning what Python set, and Ctrl-C raises
 * KeyboardInterrupt, as without tensorleak.  A handler the program installs
 * later replaces ours (we never re-install), and a disposition the program
 * set (a handler or SIG_IGN) is never touched.  Exec resets our handlers to
 * SIG_DFL, so an exec'd child inherits exactly the dispositions it would
 * have without us.
 *
 * The exit report is written from our ELF destructor: glibc runs atexit
 * handlers first, then destructors with the main program's before those of
 * the libraries it was loaded ahead of, so the program's own cleanup has
 * already freed what it frees.  A process that never touched CUDA writes no
 * report.
 *
 * Fork policy (TENSORLEAK_FOLLOW_FORK, default on): a forked child starts
 * with an empty table and writes its own report (its own pid in the file
 * name; ".%p" is appended to a pattern without %p so it never overwrites the
 * parent's).  Off: the child tracks nothing and writes nothing.  A child made
 * by raw clone() (or clone3, _Fork) skips pthread_atfork handlers; it finds
 * the flags of gate.c zero-filled, every hook only forwards, and it writes
 * nothing.  Exec'd children inherit LD_PRELOAD and are tracked as
 * programs of their own.
 */
#include "counts.h"
#include "hooks.h"

#include <dlfcn.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static pthread_once_t quiet_once = PTHREAD_ONCE_INIT, init_once = PTHREAD_ONCE_INIT;
static bool quiet_done; /* the private libraries loaded, the options read */
static pid_t owner_pid;

/* ---- fork ----------------------------------------------------------------
 * Everything a fork() does to tensorleak, in one list registered with one
 * pthread_atfork call (at start, init below).  Prepare handlers run from
 * the first row to the last; parent and child handlers from the last row to
 * the first, then, in a followed child (TENSORLEAK_FOLLOW_FORK), the
 * `followed` handlers in the same order.  The rows go from work that takes
 * other participants' locks down to the leaf state, and the order is the
 * contract:
 *  - before the fork, the watcher's unit of work (a report takes the
 *    tables', the Python locations', libc's locks) is finished, with the
 *    bridge told that a fork waits (os.fork holds the GIL a report may be
 *    waiting for), before pyframes' leaf locks are taken: taken the other
 *    way round, a fork would wait out the watcher's bound for a lock it
 *    holds itself; the gate reads tl_active last, once no report can turn
 *    it off;
 *  - in a child, the gate comes first, then every lock and table is the
 *    child's (the order among these rows is free: none reads another), and
 *    the watcher, whose reports read all of them and whose file name the
 *    exit report's row decides, starts last.
 * A child made without fork()'s handlers (raw clone, clone3, _Fork) runs
 * none of this: gate.c's wiped page keeps it out of everything (see the top
 * of this file). */
static void exit_report_after_fork(void)
{
    owner_pid = getpid();
}

/* The parent's report file is the parent's: a pattern without %p gets the
 * child's pid. */
static void exit_report_followed(void)
{
    if (!strstr(tl_opt.output, "%p") && strlen(tl_opt.output) + 4 < sizeof tl_opt.output)
        strcat(tl_opt.output, ".%p");
}

static void report_lock_after_fork(void)
{
    pthread_mutex_init(&tl_report_lock, NULL);
}

static void counts_after_fork(void)
{
    memset(&tl_stats, 0, sizeof tl_stats);
    tl_attach_total_base_clear();
    atomic_store(&tl_dropped_events, 0);
}

static void gate_after_fork(void)
{
    tl_gate_after_fork(tl_opt.follow_fork);
}

static const struct fork_participant {
    void (*prepare)(void);
    void (*parent)(void);
    void (*child)(void);    /* in every child fork() makes */
    void (*followed)(void); /* in a followed child, after every row's child */
} fork_participants[] = {
    /* publish: the watcher (snapshot.c), the exit report, the live state */
    {tl_snapshot_before_fork, tl_snapshot_after_fork_in_parent, tl_snapshot_after_fork_in_child, tl_snapshot_watch_after_fork},
    {NULL, NULL, exit_report_after_fork, exit_report_followed},
    {NULL, NULL, report_lock_after_fork, NULL},
    {NULL, NULL, NULL, tl_live_state_after_fork},
    /* families */
    {NULL, NULL, NULL, tl_growth_after_fork},
    {NULL, NULL, tl_bridge_after_fork, NULL},
    {NULL, NULL, tl_owners_after_fork, NULL},
    {NULL, NULL, tl_ipc_after_fork, NULL},
    {NULL, NULL, tl_vmm_share_after_fork, NULL},
    {NULL, NULL, tl_pools_after_fork, NULL},
    /* record */
    {NULL, NULL, counts_after_fork, NULL},
    {NULL, NULL, tl_callsite_reset_after_fork, NULL},
    {NULL, NULL, tl_live_reset_after_fork, NULL},
    {tl_tracker_before_fork, tl_tracker_after_fork_in_parent, tl_tracker_after_fork, NULL},
    {tl_pyframes_before_fork, tl_pyframes_after_fork, tl_pyframes_after_fork, NULL},
    /* base */
    {tl_gate_before_fork, NULL, gate_after_fork, NULL},
};
#define FORK_PARTICIPANTS (sizeof fork_participants / sizeof fork_participants[0])

static void fork_prepare(void)
{
    for (size_t i = 0; i < FORK_PARTICIPANTS; i++)
        if (fork_participants[i].prepare)
            fork_participants[i].prepare();
}

static void fork_parent(void)
{
    for (size_t i = FORK_PARTICIPANTS; i-- > 0;)
        if (fork_participants[i].parent)
            fork_participants[i].parent();
}

static void fork_child(void)
{
    for (size_t i = FORK_PARTICIPANTS; i-- > 0;)
        if (fork_participants[i].child)
            fork_participants[i].child();
    for (size_t i = FORK_PARTICIPANTS; tl_opt.follow_fork && i-- > 0;)
        if (fork_participants[i].followed)
            fork_participants[i].followed();
}

/* ---- fatal signals ------------------------------------------------------
 * A program killed by SIGTERM, SIGINT, abort() or a crash never runs its
 * destructors, so the exit report would be lost exactly when it matters.  For
 * each fatal signal still at its default action at the first CUDA call (see
 * the top of this file) we write the report, then restore the default and
 * re-raise: the process still dies of the same signal, with the same status
 * its parent sees.  Writing a report is not async-signal-safe; it is skipped
 * when the signal interrupted our own tracker on this thread (it may hold a
 * table lock), and it is attempted once. */
static const int fatal_signals[] = {SIGABRT, SIGTERM, SIGINT, SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGQUIT};
static atomic_bool fatal_entered;

static void on_fatal(int sig)
{
    if (!atomic_exchange(&fatal_entered, true) && tl_hook_depth == 0 && !tl_live_busy_here() && atomic_load(&tl_active) && atomic_load(&tl_used) &&
        getpid() == owner_pid && tl_report_lock_for_fatal()) {
        char label[32];
        snprintf(label, sizeof label, "fatal signal %d (%s)", sig, sigabbrev_np(sig) ? sigabbrev_np(sig) : "?");
        tl_report_write(TL_REASON_EXIT, label, NULL, NULL);
        tl_set_active(false);
    }
    /* The process dies without exit handlers: its live file goes now (only
     * this process's, and only one it published). */
    tl_live_state_remove();
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, NULL);
    /* Delivered when we return (it is blocked while we run); a synchronous
     * fault re-executes the faulting instruction and dies of it anyway. */
    raise(sig);
}

static void install_fatal_handlers(void)
{
    for (size_t i = 0; i < sizeof fatal_signals / sizeof fatal_signals[0]; i++)
        tl_signal_install_if_default(fatal_signals[i], on_fatal, SA_ONSTACK, NULL);
}

/* Is this copy the one the program's global scope resolves the tensorleak_*
 * names to (preloaded, or linked in)?  A copy `tensorleak attach` dlopen'ed
 * (RTLD_LOCAL) is not: its options are the injector's settings only, and
 * the target's TENSORLEAK_* variables are neither read nor warned about. */
static bool in_global_scope(void)
{
#ifdef TL_PRIVATE_DEPS_LINKED
    return true; /* the static tracker of the tests: linked into the program */
#else
    /* The program's handle searches the global scope only (RTLD_DEFAULT
     * from here would search this library's own scope as well).  glibc's
     * dlopen, not our interposer. */
    typedef void *(*dlopen_fn)(const char *, int);
    dlopen_fn real_open = (dlopen_fn)tl_real_dlsym(RTLD_NEXT, "dlopen");
    void *program = real_open ? real_open(NULL, RTLD_LAZY | RTLD_NOLOAD) : NULL;
    if (!program)
        return true; /* cannot tell: as a preloaded copy */
    void *fn = tl_real_dlsym(program, "tensorleak_attach_prepare");
    Dl_info found, self;
    return fn && dladdr(fn, &found) && dladdr((void *)&in_global_scope, &self) && found.dli_fbase == self.dli_fbase;
#endif
}

/* The constructor's part: nothing that the process could see. */
static void init_quiet(void)
{
    tl_upcalls_connect(); /* before anything of ours can run */
    tl_gate_arm(); /* before any thread of ours, before any hook tracks */
    /* Before anything that unwinds, symbolizes or writes JSON; without its
     * libraries tensorleak stays off (tl_active false: every hook passes
     * through). */
    if (!tl_private_deps_load())
        return;
    static char *no_variables[] = {NULL};
    tl_options_load(in_global_scope() ? NULL : no_variables);
    quiet_done = true;
}

/* The rest, at the first CUDA call or client API call. */
static void init(void)
{
    pthread_once(&quiet_once, init_quiet);
    if (!quiet_done)
        return;
    tl_live_init();
    tl_stack_init();
    owner_pid = getpid();
    if (pthread_atfork(fork_prepare, fork_parent, fork_child) != 0)
        tl_warn(NULL, "cannot register the fork handlers; a forked child may hang or report its parent's allocations");
    tl_suppressions_load();
    tl_owners_load();
    tl_budget_load();
    tl_set_active(true);
    tl_snapshot_start();
    install_fatal_handlers();
}

void tl_init(void)
{
    pthread_once(&init_once, init);
}

bool tl_ensure_init(void)
{
    if (TL_UNLIKELY(!atomic_load_explicit(&tl_used, memory_order_relaxed))) {
        tl_init();
        if (tl_gate_foreign())
            return false;
        tl_resolve_all();
        tl_private_deps_warn();
        atomic_store_explicit(&tl_used, true, memory_order_relaxed);
        /* The watcher starts at the first tracked allocation, once the driver
         * is loaded (tl_track_alloc, tl_watch_start). */
        atomic_store_explicit(&tl_watch_pending, true, memory_order_release);
        TL_SLOW_PATH_FOLLOW(TL_SLOW_WATCH, atomic_load(&tl_watch_pending));
        tl_bridge_kick(); /* a Python program's first CUDA call starts its bridge */
    }
    return true;
}

__attribute__((constructor)) static void tl_constructor(void)
{
    pthread_once(&quiet_once, init_quiet);
}

__attribute__((destructor)) static void tl_destructor(void)
{
    atomic_store(&tl_exit_began, true);
    if (!atomic_load(&tl_active) || !atomic_load(&tl_used) || getpid() != owner_pid)
        return;
    unsigned gate_failed = 0;
    tl_report_write(TL_REASON_EXIT, NULL, NULL, &gate_failed);
    /* Frees that later destructors make are not the program's business. */
    tl_set_active(false);
    if (gate_failed) {
        fflush(NULL);
        _exit(tl_opt.exitcode);
    }
}

/* ---- attach (attach.c) ----------------------------------------------------
 * A library dlopen'ed into a running process by `tensorleak attach`: the
 * constructor ran at the dlopen (the private libraries are loaded); the
 * options are read again, from the injector's settings only
 * (tl_attach_options), and, once the trampolines are built, the rest of the
 * start-up runs (tl_attach_init), with tracking off until
 * tl_attach_begin_tracking.  A detach puts back the signal dispositions the
 * start-up set; the next attach sets them again. */
bool tl_attach_options(char **settings, char *err, size_t errlen)
{
    pthread_once(&quiet_once, init_quiet);
    if (!quiet_done) {
        snprintf(err, errlen, "the library's private dependencies could not be loaded");
        return false;
    }
    unsigned rejected = tl_options_rejected;
    tl_options_load(settings);
    if (tl_options_rejected != rejected) {
        snprintf(err, errlen, "settings rejected (see the tensorleak: warning on the process's stderr)");
        return false;
    }
    return true;
}

/* A later attach's prepare: its settings replace the earlier attach's
 * (tl_init, which read them the first time, runs once).  Tracking is off
 * and the watcher idle since the detach (nothing reads these meanwhile). */
static void settings_again(void)
{
    tl_suppressions_load();
    tl_callsite_forget_owners(); /* decided under the earlier attach's rules */
    tl_owners_load();
    tl_budget_load();
    tl_live_state_forget_dir();
    tl_snapshot_start(); /* a detach put the signals back to their defaults */
    install_fatal_handlers();
}

void tl_attach_init(void)
{
    static bool again;
    tl_init();
    if (again)
        settings_again();
    again = true;
    tl_set_active(false); /* the hooks only forward until commit */
    tl_resolve_all();
    tl_private_deps_warn();
    atomic_store_explicit(&tl_used, true, memory_order_relaxed); /* TL_ENTER never runs tl_ensure_init */
}

/* Under the row's shard lock (tl_live_foreach): the row leaves every
 * total it was counted in (process, device, call site, owner), as a free
 * would take it out. */
static bool drop_row(const struct tl_live *rec, void *arg)
{
    (void)arg;
    tl_count_row(tl_live_counts_of(rec), rec, -1, false, false);
    return true;
}

void tl_attach_begin_tracking(void)
{
    tl_live_foreach(drop_row, NULL); /* rows of an earlier attach ended with its detach */
    tl_attach_reset_counts();
    tl_attach_measure_before();
    atomic_store(&tl_attached, true);
    tl_live_state_resume();
    /* The watcher starts now, not at the first tracked allocation as under
     * the preload: the driver is loaded and the program has run on it, and a
     * program whose caches already hold what it needs (PyTorch's pool) may
     * make no tracked allocation for a long time, while its interval marks
     * and the bridge's pool figures are due from the attach on. */
    atomic_store(&tl_watch_pending, false);
    TL_SLOW_PATH_FOLLOW(TL_SLOW_WATCH, atomic_load(&tl_watch_pending));
    tl_driver_symbols_prefetch();
    tl_snapshot_watch();
    tl_set_active(true);
    tl_snapshot_wake(); /* a watcher of an earlier attach: this attach's interval */
    tl_bridge_kick(); /* a Python program's bridge starts at its next bytecode, under the GIL */
}

static void final_report(void)
{
    tl_report_write(TL_REASON_DETACH, NULL, NULL, NULL);
    tl_set_active(false);
}

void tl_attach_end_tracking(void)
{
    tl_snapshot_stop_writing(final_report);
    atomic_store(&tl_attached, false);
    tl_live_state_remove();
    tl_signals_restore();
}
