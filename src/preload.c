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
 * by raw clone() skips pthread_atfork handlers; it is recognised by its pid
 * and writes nothing.  Exec'd children inherit LD_PRELOAD and are tracked as
 * programs of their own.
 */
#include "hooks.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static pid_t owner_pid;
atomic_bool tl_used; /* some CUDA entry point was reached */

void tl_snapshot_start(void);
void tl_snapshot_after_fork(void);
void tl_tracker_after_fork(void);
void tl_pools_after_fork(void);
void tl_suppressions_load(void);

static void after_fork_child(void)
{
    owner_pid = getpid();
    tl_tracker_after_fork();
    tl_live_clear();
    tl_callsite_reset_after_fork();
    tl_pools_after_fork();
    memset(&tl_stats, 0, sizeof tl_stats);
    atomic_store(&tl_dropped_events, 0);
    pthread_mutex_init(&tl_report_lock, NULL);
    if (!tl_opt.follow_fork) {
        atomic_store(&tl_active, false);
        atomic_store(&tl_used, false);
        return;
    }
    if (!strstr(tl_opt.output, "%p") && strlen(tl_opt.output) + 4 < sizeof tl_opt.output)
        strcat(tl_opt.output, ".%p");
    atomic_store(&tl_used, false);
    tl_snapshot_after_fork();
}

static void init(void)
{
    tl_options_load(NULL);
    tl_stack_init();
    owner_pid = getpid();
    pthread_atfork(NULL, NULL, after_fork_child);
    tl_suppressions_load();
    atomic_store(&tl_active, true);
    tl_snapshot_start();
}

void tl_init(void)
{
    pthread_once(&init_once, init);
}

void tl_ensure_init(void)
{
    if (TL_UNLIKELY(!atomic_load_explicit(&tl_used, memory_order_relaxed))) {
        tl_init();
        atomic_store_explicit(&tl_used, true, memory_order_relaxed);
    }
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
