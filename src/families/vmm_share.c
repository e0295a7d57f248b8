/*
 * vmm_share.c — which live VMM handles of this process were exported
 * (cuMemExportToShareableHandle) or imported (cuMemImportFromShareableHandle),
 * and the identity of the allocation behind them.
 *
 * The identity is the (st_dev, st_ino) of the POSIX file descriptor the
 * driver exported or the program imported: a descriptor passed with
 * SCM_RIGHTS names the same open file in the receiving process, so the
 * exporter's and the importer's reports name one allocation alike, and
 * `tensorleak merge` counts its bytes once.  Other handle types (fabric,
 * Win32) and descriptors fstat refuses have no identity (unknown, null).
 *
 * Few handles are ever shared, so a small array under a mutex is enough;
 * nothing here runs unless a program exports or imports (the release hook
 * asks only when tl_vmm_share_count() is not 0).
 */
#include "tl_internal.h"

#include <stdlib.h>
#include <sys/stat.h>

static pthread_mutex_t share_lock = PTHREAD_MUTEX_INITIALIZER;
/* This thread holds share_lock: a report written from a signal that
 * interrupted it must not wait for it (lookups then find nothing). */
static __thread bool share_busy TL_TLS_IE;
static struct tl_vmm_share *shares;
static size_t nshares, cap;
static atomic_size_t live_shares;

static void share_enter(void)
{
    pthread_mutex_lock(&share_lock);
    share_busy = true;
}

static void share_leave(void)
{
    share_busy = false;
    pthread_mutex_unlock(&share_lock);
}

size_t tl_vmm_share_count(void)
{
    return atomic_load_explicit(&live_shares, memory_order_relaxed);
}

static struct tl_vmm_share *find_locked(uint64_t handle)
{
    for (size_t i = 0; i < nshares; i++)
        if (shares[i].handle == handle)
            return &shares[i];
    return NULL;
}

void tl_vmm_share_note(uint64_t handle, int fd, bool imported)
{
    struct stat st;
    bool known = fd >= 0 && fstat(fd, &st) == 0;
    share_enter();
    struct tl_vmm_share *s = find_locked(handle);
    if (!s && nshares == cap) {
        size_t ncap = cap ? 2 * cap : 16;
        struct tl_vmm_share *grown = realloc(shares, ncap * sizeof *grown);
        if (grown) {
            shares = grown;
            cap = ncap;
        }
    }
    if (!s && nshares < cap) {
        s = &shares[nshares++];
        *s = (struct tl_vmm_share){.handle = handle, .imported = imported};
        atomic_store_explicit(&live_shares, nshares, memory_order_relaxed);
    }
    /* A handle exported again keeps what it was (imported or created) and
     * the first identity it was given. */
    if (s && !s->known && known) {
        s->known = true;
        s->file_dev = (uint64_t)st.st_dev;
        s->file_ino = (uint64_t)st.st_ino;
    }
    share_leave();
    if (!s)
        tl_note_dropped("out of memory for the shared-handle table");
}

void tl_vmm_share_forget(uint64_t handle)
{
    share_enter();
    struct tl_vmm_share *s = find_locked(handle);
    if (s) {
        *s = shares[--nshares];
        atomic_store_explicit(&live_shares, nshares, memory_order_relaxed);
    }
    share_leave();
}

bool tl_vmm_share_lookup(uint64_t handle, struct tl_vmm_share *out)
{
    if (tl_vmm_share_count() == 0 || share_busy)
        return false;
    share_enter();
    struct tl_vmm_share *s = find_locked(handle);
    if (s)
        *out = *s;
    share_leave();
    return s != NULL;
}

static bool same_allocation(const struct tl_vmm_share *a, const struct tl_vmm_share *b)
{
    return a->handle != b->handle && a->known && b->known && a->file_dev == b->file_dev && a->file_ino == b->file_ino;
}

bool tl_vmm_share_holder_of(uint64_t handle, uint64_t *holder)
{
    bool found = false;
    share_enter();
    struct tl_vmm_share *s = find_locked(handle);
    for (size_t i = 0; s && !found && i < nshares; i++) {
        if (same_allocation(&shares[i], s) && !shares[i].aliased) {
            *holder = shares[i].handle;
            found = true;
        }
    }
    share_leave();
    return found;
}

void tl_vmm_share_set_aliased(uint64_t handle, bool aliased)
{
    share_enter();
    struct tl_vmm_share *s = find_locked(handle);
    if (s)
        s->aliased = aliased;
    share_leave();
}

bool tl_vmm_share_take_alias(uint64_t handle, uint64_t *alias)
{
    bool found = false;
    share_enter();
    struct tl_vmm_share *s = find_locked(handle);
    for (size_t i = 0; s && !found && i < nshares; i++) {
        if (same_allocation(&shares[i], s) && shares[i].aliased) {
            shares[i].aliased = false;
            *alias = shares[i].handle;
            found = true;
        }
    }
    share_leave();
    return found;
}

uint64_t tl_vmm_share_file_size(int fd)
{
    struct stat st;
    return fd >= 0 && fstat(fd, &st) == 0 && st.st_size > 0 ? (uint64_t)st.st_size : 0;
}

void tl_vmm_share_after_fork(void)
{
    /* The child's handles are not the parent's (it has no driver state). */
    pthread_mutex_init(&share_lock, NULL);
    nshares = 0;
    atomic_store_explicit(&live_shares, 0, memory_order_relaxed);
}
