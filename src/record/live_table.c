/*
 * live_table.c — the table of live allocations.
 *
 * Data model: one row per allocation the program holds right now, keyed by
 * (address space, address): device/host/managed pointers share the unified
 * address space; VMM handles, mappings and VA reservations have their own.
 * A row is 40 bytes stored inline (no per-row malloc, no per-row list
 * pointers), so a million live allocations cost ~84 bytes each at our load
 * factor.  The call stack is not in the row: rows point at an interned call
 * site (callsite.c) by id.
 *
 * Concurrency: 64 shards, each an open-addressing table (linear probing,
 * backward-shift deletion, so no tombstones) under its own lock (an exchange
 * to take, a store to release).  Two threads allocating at once almost never
 * share a shard; a consistent snapshot takes every shard lock in order.
 * While only one thread has ever touched the table, that thread skips the
 * locks altogether ("one tracking thread" below).
 *
 * Each shard also keeps tracker.c's totals for its rows (tl_shard_counts:
 * call-site deltas, total allocations, per-device counts), changed in the
 * same critical section as the rows with plain adds; tl_live_lock_all and
 * tl_live_unlock_all fold them into tl_stats and the call sites, so the
 * holder of every lock reads totals that agree with the rows.
 */
#include "live_shard.h"

#include <errno.h>
#include <linux/membarrier.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define INITIAL_CAP 256u /* a shard's slots at its first insert */

struct shard tl_shards[NSHARDS];

/* The shard lock: one exchange to take it, a release store to drop it (a
 * pthread mutex costs a second locked instruction on unlock, plus two calls).
 * Critical sections are a few dozen instructions, so a waiter spins briefly;
 * one that keeps waiting (another thread holds every shard for a report)
 * yields, then sleeps in short naps rather than burning its core. */
static void wait_step(unsigned i)
{
    if (i < 128) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
    } else if (i < 256) {
        sched_yield();
    } else {
        struct timespec nap = {0, 50000};
        nanosleep(&nap, NULL);
    }
}

static void shard_lock_slow(struct shard *s)
{
    for (unsigned i = 0;; i++) {
        if (!atomic_load_explicit(&s->lock, memory_order_relaxed) &&
            !atomic_exchange_explicit(&s->lock, 1, memory_order_acquire))
            return;
        wait_step(i);
    }
}

static inline void shard_lock(struct shard *s)
{
    if (TL_UNLIKELY(atomic_exchange_explicit(&s->lock, 1, memory_order_acquire)))
        shard_lock_slow(s);
}

static inline void shard_unlock(struct shard *s)
{
    atomic_store_explicit(&s->lock, 0, memory_order_release);
}

/* ---- one tracking thread ------------------------------------------------
 * Most CUDA programs allocate and free from one thread at a time (often not
 * the thread that initialised CUDA).  A thread that has made a run of
 * table operations becomes the table's owner: while it owns the table it
 * works on the shards without their locks, and tracker.c's process totals
 * take plain adds (tl_count_row's `exclusive`): no locked instruction at all
 * on its allocations and frees.
 *
 * Any other thread that enters the table first revokes the ownership: under
 * owner_lock it marks the table REVOKING, makes every thread of the process
 * execute a full memory barrier (membarrier(2), private expedited), waits
 * until the owner has left the section it may be in, and clears the mark;
 * from then on everyone, the old owner included, takes the shard locks.  The
 * owner announces a section with a plain store of its `busy` flag followed
 * by a plain load of `owner`: the membarrier supplies the store-load fence
 * the owner skips (the asymmetric handshake of liburcu's membarrier flavour),
 * so either the owner sees the revocation and takes the lock, or the revoker
 * sees `busy` and waits.  Claiming takes every shard lock, so no locked
 * section is in progress when ownership starts; a locked section re-reads
 * `owner` under its shard lock.
 *
 * A thread that loses the ownership waits twice as long before claiming it
 * again, so threads that keep sharing the table settle on plain locking.
 * Without membarrier (an old kernel, a seccomp filter) nobody ever claims;
 * nor under ThreadSanitizer, which cannot see the barrier. */
#if defined(__SANITIZE_THREAD__)
#define OWNER_BUILD 0
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define OWNER_BUILD 0
#endif
#endif
#ifndef OWNER_BUILD
#define OWNER_BUILD 1
#endif

#define CLAIM_AFTER 64u        /* locked operations in a row before claiming */
#define CLAIM_SHIFT_MAX 14      /* each loss doubles the wait, up to 64 << 14 = 2^20 */
#define REVOKING UINT32_MAX

atomic_uint tl_table_owner; /* live_shard.h */
static pthread_mutex_t owner_lock = PTHREAD_MUTEX_INITIALIZER;
/* A thread gets a slot on its first claim and gives it back when it exits
 * (slot_key's destructor), so short-lived threads do not use them up. */
struct tl_owner_slot tl_owner_slot[OWNER_SLOTS];
static pthread_key_t slot_key;
static atomic_ulong claims; /* ownerships begun, for tests */
/* The last revocation was a report's (lock_all): not the owner's loss. */
static atomic_bool revoked_for_report;
static atomic_bool owning_possible; /* membarrier works: claiming is allowed */


/* At thread exit.  An exiting owner is in no section, so it hands the table
 * back without a handshake; its later hook calls (other keys' destructors)
 * lock, since the slot may soon be another thread's. */
static void give_back_slot(void *arg)
{
    unsigned token = (unsigned)(uintptr_t)arg;
    tl_table_thread.in_all = true; /* owner_lock held: no report from a signal handler */
    atomic_signal_fence(memory_order_seq_cst);
    pthread_mutex_lock(&owner_lock);
    if (atomic_load(&tl_table_owner) == token)
        atomic_store(&tl_table_owner, 0);
    /* Whatever this thread left behind (a longjmp out of a section), the
     * next holder of the slot starts idle. */
    atomic_store(&tl_owner_slot[token - 1].busy, 0);
    tl_owner_slot[token - 1].taken = false;
    pthread_mutex_unlock(&owner_lock);
    tl_table_thread.token = 0;
    tl_table_thread.busy = NULL;
    tl_table_thread.exiting = true;
    atomic_signal_fence(memory_order_seq_cst);
    tl_table_thread.in_all = false;
}

/* Under owner_lock. */
static bool take_slot(void)
{
    for (unsigned k = 0; k < OWNER_SLOTS; k++)
        if (!tl_owner_slot[k].taken) {
            if (pthread_setspecific(slot_key, (void *)(uintptr_t)(k + 1)) != 0)
                return false;
            tl_owner_slot[k].taken = true;
            if (!tl_table_thread.tid)
                tl_table_thread.tid = (uint32_t)syscall(SYS_gettid);
            tl_table_thread.busy = &tl_owner_slot[k].busy;
            tl_table_thread.token = k + 1;
            return true;
        }
    return false;
}

static long membarrier_call(int cmd)
{
#ifdef __NR_membarrier
    return syscall(__NR_membarrier, cmd, 0, 0);
#else
    (void)cmd;
    errno = ENOSYS;
    return -1;
#endif
}

static bool register_membarrier(void)
{
    long cmds = membarrier_call(MEMBARRIER_CMD_QUERY);
    return cmds >= 0 && (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED) &&
           membarrier_call(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0;
}

/* membarrier registered for this address space: 0 not yet, 1 yes, -1 no. */
static int registered;

/* Allows claiming.  The system calls it needs (the membarrier query and
 * registration) wait for the first claim: a process that never allocates
 * on the GPU never makes them. */
void tl_live_init(void)
{
    if (OWNER_BUILD)
        atomic_store(&owning_possible, true);
}

/* Under owner_lock, before the first claim of this address space. */
static bool ready_to_own(void)
{
    static bool have_key;
    if (registered == 0) {
        if (!have_key)
            have_key = pthread_key_create(&slot_key, give_back_slot) == 0;
        registered = have_key && register_membarrier() ? 1 : -1;
        if (registered < 0)
            atomic_store(&owning_possible, false);
    }
    return registered > 0;
}

/* Ends the current ownership, if any; returns with owner == 0 as far as
 * this thread knows (a claim may follow at any time; locked sections
 * re-check under their shard lock). */
static void end_ownership(bool for_report)
{
    pthread_mutex_lock(&owner_lock);
    unsigned o = atomic_load(&tl_table_owner);
    if (o != 0) {
        atomic_store_explicit(&revoked_for_report, for_report, memory_order_relaxed);
        atomic_store(&tl_table_owner, REVOKING);
        if (membarrier_call(MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0) {
            /* Registered, so this should not fail.  If it does, nobody
             * claims again, and the owner's store of busy gets far longer
             * than a store buffer holds it to become visible before we
             * trust what we read. */
            static atomic_bool warned;
            tl_warn(&warned, "membarrier failed (%s); the live table stays locked from now on", strerror(errno));
            atomic_store(&owning_possible, false);
            struct timespec ms = {0, 1000000};
            nanosleep(&ms, NULL);
        }
        for (unsigned i = 0; atomic_load_explicit(&tl_owner_slot[o - 1].busy, memory_order_acquire); i++)
            wait_step(i);
        atomic_store(&tl_table_owner, 0);
    }
    pthread_mutex_unlock(&owner_lock);
}

static void lock_every_shard(void);
static void unlock_every_shard(void);

/* After a run of locked operations: take the table if nobody has it. */
static void try_claim(void)
{
    tl_table_thread.streak = 0;
    if (!atomic_load_explicit(&owning_possible, memory_order_relaxed) || tl_table_thread.exiting || atomic_load_explicit(&tl_table_owner, memory_order_relaxed) != 0)
        return;
    /* owner_lock and, below, every shard lock: a signal handler on this
     * thread must not start a report meanwhile (tl_live_busy_here). */
    tl_table_thread.in_all = true;
    atomic_signal_fence(memory_order_seq_cst);
    if (pthread_mutex_trylock(&owner_lock) != 0) {
        atomic_signal_fence(memory_order_seq_cst);
        tl_table_thread.in_all = false;
        return;
    }
    if (!ready_to_own()) {
        /* No membarrier here: every access keeps its lock. */
    } else if (!tl_table_thread.token && !take_slot()) {
        /* Every slot is held by a live thread: stay locked until one
         * exits (the streak starts over, so no retry storm). */
    } else if (atomic_load(&tl_table_owner) == 0) {
        /* With every shard lock held no locked section is running, and each
         * one that starts after sees the new owner under its lock. */
        lock_every_shard();
        atomic_store_explicit(&tl_table_owner, tl_table_thread.token, memory_order_release);
        atomic_fetch_add_explicit(&claims, 1, memory_order_relaxed);
        tl_table_thread.claimed = true;
        unlock_every_shard();
    }
    pthread_mutex_unlock(&owner_lock);
    atomic_signal_fence(memory_order_seq_cst);
    tl_table_thread.in_all = false;
}

/* Takes shard s's lock (first ending another thread's ownership). */
__attribute__((noinline)) bool tl_shard_enter_locked(struct shard *s)
{
    if (TL_UNLIKELY(tl_table_thread.claimed)) {
        /* Another thread took the table from us: claim later next time,
         * unless it only wanted a report. */
        tl_table_thread.claimed = false;
        if (!atomic_load_explicit(&revoked_for_report, memory_order_relaxed) && tl_table_thread.claim_shift < CLAIM_SHIFT_MAX)
            tl_table_thread.claim_shift++;
    }
    /* Set before the lock is taken and cleared after it is dropped, so a
     * signal handler never mistakes a held lock for a free one. */
    tl_table_thread.in_locked_shard = true;
    atomic_signal_fence(memory_order_seq_cst);
    for (;;) {
        unsigned o = atomic_load_explicit(&tl_table_owner, memory_order_acquire);
        if (TL_UNLIKELY(o != 0))
            end_ownership(false);
        shard_lock(s);
        /* Acquire: a revoker's store of 0 follows the owner's lock-free
         * writes (it waited for them), and those may be to this shard. */
        if (TL_LIKELY(atomic_load_explicit(&tl_table_owner, memory_order_acquire) == 0))
            break;
        shard_unlock(s); /* claimed meanwhile */
    }
    return false;
}

__attribute__((noinline)) void tl_shard_leave_locked(struct shard *s)
{
    shard_unlock(s);
    atomic_signal_fence(memory_order_seq_cst);
    tl_table_thread.in_locked_shard = false;
    if (TL_UNLIKELY(++tl_table_thread.streak >= CLAIM_AFTER << tl_table_thread.claim_shift))
        try_claim();
}

bool tl_live_busy_here(void)
{
    return tl_table_thread.in_locked_shard || tl_table_thread.in_all ||
           (tl_table_thread.token && atomic_load_explicit(&tl_owner_slot[tl_table_thread.token - 1].busy, memory_order_relaxed));
}

unsigned long tl_live_claims(void)
{
    return atomic_load(&claims);
}

bool tl_live_owned_here(void)
{
    return tl_table_thread.token && atomic_load(&tl_table_owner) == tl_table_thread.token;
}

bool tl_shard_grow(struct shard *s)
{
    size_t ncap = s->cap ? s->cap * 2 : INITIAL_CAP;
    struct tl_live *n = calloc(ncap, sizeof *n);
    if (!n)
        return false;
    for (size_t i = 0; i < s->cap; i++) {
        struct tl_live *r = &s->slots[i];
        if (tl_slot_empty(r))
            continue;
        size_t j = tl_shard_mix(r->space, r->addr) & (ncap - 1);
        while (!tl_slot_empty(&n[j]))
            j = (j + 1) & (ncap - 1);
        n[j] = *r;
    }
    free(s->slots);
    s->slots = n;
    s->cap = ncap;
    s->grow_at = ncap * 4 / 5;
    return true;
}

bool tl_live_add(const struct tl_live *rec, bool fresh)
{
    return tl_live_insert(rec, rec->kind, fresh, atomic_load_explicit(&tl_budget_active, memory_order_relaxed));
}

int tl_live_take(uint8_t space, uint64_t addr, unsigned kinds_mask, struct tl_live *out)
{
    return tl_live_remove(space, addr, kinds_mask, out, atomic_load_explicit(&tl_budget_active, memory_order_relaxed));
}

struct tl_shard_counts *tl_live_counts_of(const struct tl_live *rec)
{
    return &tl_shard_of(tl_shard_mix(rec->space, rec->addr))->counts;
}

static __thread bool holding_all TL_TLS_IE; /* this thread is inside lock_all */

static void fold(void)
{
    struct tl_shard_counts *c[NSHARDS];
    for (unsigned k = 0; k < NSHARDS; k++)
        c[k] = &tl_shards[k].counts;
    tl_counts_fold_locked(c, NSHARDS);
}

void tl_live_fold(void)
{
    if (holding_all) {
        fold();
        return;
    }
    tl_live_lock_all();
    tl_live_unlock_all();
}

bool tl_live_lookup(uint8_t space, uint64_t addr, struct tl_live *out)
{
    uint64_t h = tl_shard_mix(space, addr);
    struct shard *s = tl_shard_of(h);
    bool owned = tl_shard_enter(s);
    long i = tl_shard_find(s, h, space, addr);
    if (i >= 0 && out)
        *out = s->slots[i];
    tl_shard_leave(s, owned);
    return i >= 0;
}

bool tl_live_set_aux(uint8_t space, uint64_t addr, uint32_t aux)
{
    uint64_t h = tl_shard_mix(space, addr);
    struct shard *s = tl_shard_of(h);
    bool owned = tl_shard_enter(s);
    long i = tl_shard_find(s, h, space, addr);
    if (i >= 0) {
        /* The aux may change the row's owner (a segment an annotated pool
         * now holds): it leaves the old owner's figures and joins the new's. */
        tl_owner_count_row(&s->slots[i], -(long long)s->slots[i].size, owned);
        s->slots[i].aux = aux;
        tl_owner_count_row(&s->slots[i], (long long)s->slots[i].size, owned);
    }
    tl_shard_leave(s, owned);
    return i >= 0;
}

/* Both fold the per-shard totals: on locking, so that the holder reads
 * totals that agree with the rows; on unlocking, to publish what the holder
 * changed (a teardown dropping rows). */
static void lock_every_shard(void)
{
    for (unsigned i = 0; i < NSHARDS; i++)
        shard_lock(&tl_shards[i]);
}

static void unlock_every_shard(void)
{
    for (unsigned i = NSHARDS; i-- > 0;)
        shard_unlock(&tl_shards[i]);
}

void tl_live_lock_all(void)
{
    /* The owner needs only the locks: nobody else is in the table without
     * one.  Anyone else ends the ownership first. */
    tl_table_thread.in_all = true;
    atomic_signal_fence(memory_order_seq_cst);
    for (;;) {
        unsigned o = atomic_load(&tl_table_owner);
        if (o != 0 && o != tl_table_thread.token)
            end_ownership(true);
        lock_every_shard();
        o = atomic_load(&tl_table_owner);
        if (o == 0 || o == tl_table_thread.token)
            break;
        unlock_every_shard();
    }
    holding_all = true;
    fold();
}

void tl_live_unlock_all(void)
{
    fold();
    holding_all = false;
    unlock_every_shard();
    atomic_signal_fence(memory_order_seq_cst);
    tl_table_thread.in_all = false;
}

/* Callers hold every shard lock (tl_live_lock_all). */
void tl_live_foreach(bool (*fn)(const struct tl_live *, void *), void *arg)
{
    for (unsigned k = 0; k < NSHARDS; k++) {
        struct shard *s = &tl_shards[k];
        for (size_t i = 0; i < s->cap;) {
            if (!tl_slot_empty(&s->slots[i]) && fn(&s->slots[i], arg)) {
                /* The shift may move a not-yet-visited row into slot i (from a
                 * later slot) — or, at the wrap-around, one already visited
                 * from the front; the latter is harmless for our callers
                 * because fn is idempotent on rows it keeps. */
                tl_shard_delete_at(s, i);
                continue;
            }
            i++;
        }
    }
}

long long tl_live_sum_device_bytes(int device)
{
    long long n = 0;
    if (device < 0 || device >= TL_MAX_DEVICES)
        return 0;
    for (unsigned k = 0; k < NSHARDS; k++)
        n += __atomic_load_n(&tl_shards[k].counts.device_bytes[device], __ATOMIC_RELAXED);
    return n;
}

size_t tl_live_count(void)
{
    size_t n = 0;
    for (unsigned k = 0; k < NSHARDS; k++)
        n += __atomic_load_n(&tl_shards[k].count, __ATOMIC_RELAXED);
    return n;
}

size_t tl_live_memory_bytes(void)
{
    size_t n = sizeof tl_shards;
    for (unsigned k = 0; k < NSHARDS; k++)
        n += __atomic_load_n(&tl_shards[k].cap, __ATOMIC_RELAXED) * sizeof(struct tl_live);
    return n;
}

/* After fork the child starts with no live allocations: device memory is not
 * inherited across fork, and the parent's rows must never be reported twice.
 * Only the forking thread exists in the child, so no lock is held by anyone
 * else — but one may have been held at the fork: reinitialise them. */
/* In a forked child, another thread of the parent may have been inside a
 * shard (half way through growing it, the old array freed and the new one
 * not yet in place), so the arrays are not touched at all: the child starts
 * with empty shards and leaves the parent's copies where they lie (their
 * pages are shared with the parent until written, and never are). */
void tl_live_reset_after_fork(void)
{
    for (unsigned k = 0; k < NSHARDS; k++) {
        tl_shards[k].slots = NULL;
        tl_shards[k].cap = 0;
        tl_shards[k].grow_at = 0;
    }
    tl_live_clear();
}

void tl_live_clear(void)
{
    for (unsigned k = 0; k < NSHARDS; k++) {
        struct shard *s = &tl_shards[k];
        atomic_store_explicit(&s->lock, 0, memory_order_relaxed);
        if (s->slots)
            memset(s->slots, 0, s->cap * sizeof *s->slots);
        s->count = 0;
        memset(&s->counts, 0, sizeof s->counts);
    }
    /* This thread is the child's only one, and the membarrier registration
     * belonged to the parent's address space: start over. */
    atomic_store(&tl_table_owner, 0);
    pthread_mutex_init(&owner_lock, NULL);
    for (unsigned k = 0; k < OWNER_SLOTS; k++) {
        atomic_store(&tl_owner_slot[k].busy, 0);
        tl_owner_slot[k].taken = tl_table_thread.token == k + 1;
    }
    tl_table_thread.in_locked_shard = false;
    tl_table_thread.in_all = false;
    tl_table_thread.streak = 0;
    if (registered > 0)
        registered = 0; /* the child registers again at its first claim */
}
