/*
 * preload.c — life cycle of the preloaded library: start, fork, exit.
 *
 * Initialisation is cheap and deferred: the constructor (or the first hook,
 * whichever runs first — another library's constructor may allocate before
 * ours runs) parses options and warms the unwinder.  The watcher thread for
 * snapshots starts there too.  Nothing heavy happens inside dlsym.
 *
 * The exit report is written from our ELF destructor: glibc runs atexit
 * handlers first, then destructors with the main program's before those of
 * the libraries it was loaded ahead of, so the program's own cleanup has
 * already freed what it frees.  A process that never touched CUDA writes no
 * report (a shell in front of the real program, say).
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
#include "hooks.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static pid_t owner_pid;

static void after_fork_child(void)
{
    tl_gate_after_fork(tl_opt.follow_fork);
    owner_pid = getpid();
    tl_tracker_after_fork();
    tl_live_reset_after_fork();
    tl_callsite_reset_after_fork();
    tl_pools_after_fork();
    tl_vmm_share_after_fork();
    tl_ipc_after_fork();
    memset(&tl_stats, 0, sizeof tl_stats);
    atomic_store(&tl_dropped_events, 0);
    pthread_mutex_init(&tl_report_lock, NULL);
    if (!tl_opt.follow_fork) {
        tl_snapshot_after_fork(false);
        return;
    }
    if (!strstr(tl_opt.output, "%p") && strlen(tl_opt.output) + 4 < sizeof tl_opt.output)
        strcat(tl_opt.output, ".%p");
    tl_snapshot_after_fork(true);
}

/* ---- fatal signals ------------------------------------------------------
 * A program killed by SIGTERM, SIGINT, abort() or a crash never runs its
 * destructors, so the exit report would be lost exactly when it matters.  For
 * each fatal signal the program left at its default action we write the
 * report, then restore the default and re-raise: the process still dies of
 * the same signal, with the same status its parent sees.  Writing a report
 * is not async-signal-safe; it is skipped when the signal interrupted our own
 * tracker on this thread (it may hold a table lock), and it is attempted
 * once. */
static const int fatal_signals[] = {SIGABRT, SIGTERM, SIGINT, SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGQUIT};
static atomic_bool fatal_entered;

static void on_fatal(int sig)
{
    if (!atomic_exchange(&fatal_entered, true) && tl_hook_depth == 0 && !tl_live_busy_here() && atomic_load(&tl_active) && atomic_load(&tl_used) &&
        getpid() == owner_pid && tl_report_lock_for_fatal()) {
        char label[32];
        snprintf(label, sizeof label, "fatal signal %d (%s)", sig, sigabbrev_np(sig) ? sigabbrev_np(sig) : "?");
        tl_report_write(TL_REASON_EXIT, label, NULL, NULL);
        atomic_store(&tl_active, false);
    }
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
    for (size_t i = 0; i < sizeof fatal_signals / sizeof fatal_signals[0]; i++) {
        struct sigaction old;
        if (sigaction(fatal_signals[i], NULL, &old) != 0)
            continue;
        if ((old.sa_flags & SA_SIGINFO) || old.sa_handler != SIG_DFL)
            continue; /* the program's own handler, or ignored: leave it */
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_fatal;
        sigemptyset(&sa.sa_mask);
        sa.sa_flags = SA_ONSTACK;
        sigaction(fatal_signals[i], &sa, NULL);
    }
}

static void init(void)
{
    tl_gate_arm(); /* before any thread of ours, before any hook tracks */
    /* Before anything that unwinds, symbolizes or writes JSON; without its
     * libraries tensorleak stays off (tl_active false: every hook passes
     * through). */
    if (!tl_private_deps_load())
        return;
    tl_options_load(NULL);
    tl_live_init();
    tl_stack_init();
    owner_pid = getpid();
    pthread_atfork(tl_gate_before_fork, NULL, after_fork_child);
    tl_suppressions_load();
    tl_owners_load();
    tl_budget_load();
    atomic_store(&tl_active, true);
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
        tl_snapshot_watch();
        tl_bridge_kick(); /* a Python program's first CUDA call starts its bridge */
    }
    return true;
}

__attribute__((constructor)) static void tl_constructor(void)
{
    tl_init();
}

__attribute__((destructor)) static void tl_destructor(void)
{
    if (!atomic_load(&tl_active) || !atomic_load(&tl_used) || getpid() != owner_pid)
        return;
    unsigned gate_failed = 0;
    tl_report_write(TL_REASON_EXIT, NULL, NULL, &gate_failed);
    /* Frees that later destructors make are not the program's business. */
    atomic_store(&tl_active, false);
    if (gate_failed) {
        fflush(NULL);
        _exit(tl_opt.exitcode);
    }
}
