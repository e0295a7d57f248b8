/*
 * test_hold.c — for tests only: a thread of ours holds one lock until told
 * to let go, so a test can make a child (raw clone, fork) at the very moment
 * a lock of ours, of the loader's or of libc's is held by a thread the child
 * will not have.  Reached only by calling the functions below (no
 * environment variable turns it on); a program that never calls them never
 * has the thread.
 */
#include "tl_internal.h"

#include <dlfcn.h>
#include <link.h>
#include <semaphore.h>
#include <signal.h>
#include <string.h>

/* What tensorleak_test_hold holds. */
enum hold_what {
    HOLD_LOADER = 1,       /* the loader's lock (dlopen of `lib`, whose constructor calls tensorleak_test_block) */
    HOLD_LOADER_WRITE = 2, /* the loader's list lock (a dl_iterate_phdr callback that blocks) */
    HOLD_TABLE = 3,        /* every live-table shard lock (tl_live_lock_all, as a report) */
    HOLD_REPORT = 4,       /* the report lock */
    HOLD_STDERR = 5,       /* stderr's FILE lock */
    /* the watcher's work lock, taken as the watcher takes it for a report;
     * once released, the work interns a Python location (pyframes.c's
     * lock) before it lets go, as a report's growth of Python lines does */
    HOLD_WATCHER_WORK = 6,
    HOLD_CONTEXTS = 7, /* the tracker's table of contexts (tracker.c's ctx_lock) */
};

static sem_t held, release;
static int what;
static const char *lib;
static bool holding;

TL_EXPORT void tensorleak_test_block(void);
void tensorleak_test_block(void)
{
    sem_post(&held);
    while (sem_wait(&release) != 0)
        ;
}

static int block_in_callback(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)info;
    (void)size;
    (void)arg;
    tensorleak_test_block();
    return 1;
}

static void work_then_python_location(void)
{
    tensorleak_test_block();
    tl_pyloc_intern_strings("held_by_the_watcher", "test_hold.c", 1);
}

static void *holder(void *arg)
{
    (void)arg;
    switch (what) {
    case HOLD_LOADER: {
        void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
        if (!h) /* nothing blocked: let the caller go on, and fail */
            sem_post(&held);
        break;
    }
    case HOLD_LOADER_WRITE:
        dl_iterate_phdr(block_in_callback, NULL);
        break;
    case HOLD_TABLE:
        tl_live_lock_all();
        tensorleak_test_block();
        tl_live_unlock_all();
        break;
    case HOLD_REPORT:
        pthread_mutex_lock(&tl_report_lock);
        tensorleak_test_block();
        pthread_mutex_unlock(&tl_report_lock);
        break;
    case HOLD_STDERR:
        flockfile(stderr);
        tensorleak_test_block();
        funlockfile(stderr);
        break;
    case HOLD_WATCHER_WORK:
        tl_snapshot_stop_writing(work_then_python_location);
        break;
    case HOLD_CONTEXTS:
        tl_contexts_locked_call(tensorleak_test_block);
        break;
    default:
        sem_post(&held);
        break;
    }
    return NULL;
}

/* Returns 0 once a thread of ours holds lock `which` (enum hold_what above;
 * `library` for HOLD_LOADER), -1 when it cannot.  One hold at a time. */
TL_EXPORT int tensorleak_test_hold(int which, const char *library);
int tensorleak_test_hold(int which, const char *library)
{
    if (holding || which < HOLD_LOADER || which > HOLD_CONTEXTS || (which == HOLD_LOADER && !library))
        return -1;
    sem_init(&held, 0, 0);
    sem_init(&release, 0, 0);
    what = which;
    lib = library;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_t t;
    int rc = pthread_create(&t, NULL, holder, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0)
        return -1;
    pthread_detach(t);
    while (sem_wait(&held) != 0)
        ;
    holding = true;
    return 0;
}

/* Lets go of the lock tensorleak_test_hold took. */
TL_EXPORT void tensorleak_test_release(void);
void tensorleak_test_release(void)
{
    if (!holding)
        return;
    sem_post(&release);
    holding = false;
}
