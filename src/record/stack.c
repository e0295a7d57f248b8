/*
 * stack.c — call stacks of allocations.
 *
 * libunwind's unw_backtrace with a per-thread cache walks DWARF unwind tables,
 * so it works for code built without frame pointers.  The frames of
 * libtensorleak itself (the hook and the tracker) are cut off the top, so a
 * stack begins at the caller of the CUDA function.
 *
 * Fast path (x86-64): walking the frame-pointer chain costs a few ns a frame
 * against ~10 for DWARF, but is only right when every frame on the way keeps
 * a frame pointer.  A function without one (glibc, a vendor library, code
 * built with -O2 defaults) either leaves %rbp alone — the walk then silently
 * skips its caller's frame — or uses %rbp as a general register — the walk
 * then reads garbage.  Neither can be told from the chain itself, so a
 * frame-pointer stack is trusted only once libunwind has produced the very
 * same frames for it: a per-thread cache remembers, by the hash of the walked
 * frames, which walks were confirmed (used as is from then on) and which were
 * not (unw_backtrace every time).  Reads stay inside the thread's own stack
 * (bounds from pthread_getattr_np, once per thread), so a garbage chain can
 * cost a fallback but never a fault.
 *
 * The bottom of every stack is code without frame pointers (glibc's
 * __libc_start_call_main or start_thread, then _start or clone3), so a stack
 * shallower than the depth limit never matched on the walk alone.  Those
 * bottom frames are fixed for the life of a thread: the first time a walk
 * disagrees with libunwind only below a frame, within a few frames of the
 * stack's end, the thread remembers that frame ("the entry": its return
 * address and the address of its frame record) and libunwind's frames
 * below it, with the stack slots holding their return addresses.  A later
 * walk that meets the entry at the same frame record, with every one of those
 * slots unchanged, ends there and takes the remembered frames; the result
 * still goes through the same confirmation by libunwind as any other walk.
 *
 * Code without frame pointers (libpython, libffi, CPython extensions,
 * libtorch, vendor libraries) fails that confirmation for good.  Such a
 * stack is then walked from the modules' .eh_frame rules, decoded once per
 * return address and cached (cfi_walk.c), and that walk is trusted under
 * the same rule: its own hash, confirmed by libunwind once.  libunwind
 * itself runs only on first sight of a walk, or for code whose rules are
 * not the common shape.
 *
 * When the thread runs Python, its Python frames replace the interpreter's
 * evaluation-loop frames (pyframes.c); see tl_stack_capture.
 */
#define UNW_LOCAL_ONLY
#include "record.h"

#include <dlfcn.h>
#include <libunwind.h>
#include <link.h>
#include <string.h>

static uintptr_t self_lo, self_hi;

static int find_self(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    uintptr_t base = (uintptr_t)arg;
    if (info->dlpi_addr != base)
        return 0;
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X))
            continue;
        uintptr_t s = info->dlpi_addr + ph->p_vaddr;
        if (s < lo) lo = s;
        if (s + ph->p_memsz > hi) hi = s + ph->p_memsz;
    }
    self_lo = lo;
    self_hi = hi;
    return 1;
}

void tl_stack_init(void)
{
    Dl_info info;
    if (dladdr((void *)&tl_stack_init, &info) && info.dli_fbase)
        dl_iterate_phdr(find_self, info.dli_fbase);
    unw_set_caching_policy(unw_local_addr_space, UNW_CACHE_PER_THREAD);
}

bool tl_addr_in_self(uintptr_t addr)
{
    return addr >= self_lo && addr < self_hi;
}

/* Our own frames on top: the hook, tl_track_alloc, this function, and
 * sometimes an inlined helper; 8 covers them with room. */
#define SELF_SLACK 8

static atomic_ulong unwinds, entries_learned; /* for the report's "tracker" */
static atomic_ulong cfi_mismatches; /* call-frame-table walks libunwind contradicted */
static atomic_ulong verdicts_evicted; /* walk verdicts pushed out of a thread's cache by others */

unsigned long tl_stack_verdicts_evicted(void)
{
    return atomic_load_explicit(&verdicts_evicted, memory_order_relaxed);
}

unsigned long tl_stack_cfi_mismatches(void)
{
    return atomic_load_explicit(&cfi_mismatches, memory_order_relaxed);
}

unsigned long tl_stack_unwinds(void)
{
    return atomic_load_explicit(&unwinds, memory_order_relaxed);
}

unsigned long tl_stack_entries_learned(void)
{
    return atomic_load_explicit(&entries_learned, memory_order_relaxed);
}

/* unw_backtrace, minus our own frames. */
static int capture_unwind(uintptr_t *frames, int max)
{
    atomic_fetch_add_explicit(&unwinds, 1, memory_order_relaxed); /* already the slow path */
    void *buf[TL_MAX_DEPTH + SELF_SLACK];
    int n = unw_backtrace(buf, max + SELF_SLACK);
    if (TL_UNLIKELY(n <= 0)) {
        /* The allocation is still tracked, without its stack: say so once
         * and count it, never silently. */
        tl_note_dropped("a call stack could not be unwound (the allocation is tracked without it)");
        return 0;
    }
    int first = 0;
    while (first < n && tl_addr_in_self((uintptr_t)buf[first]))
        first++;
    int kept = n - first;
    if (kept > max)
        kept = max;
    for (int i = 0; i < kept; i++)
        frames[i] = (uintptr_t)buf[first + i];
    return kept;
}

#if defined(__x86_64__)

/* The verdicts on walks: 128 sets of two, so two walks whose hashes share
 * a set are both kept.  A stack without frame pointers has two walks (the
 * refused frame-pointer walk, the confirmed call-frame-table walk): in one
 * direct-mapped slot, one run in 256 had them share it and evict each other
 * on every capture, each eviction costing a libunwind run. */
#define VERIFIED_SETS 128
struct verified_slot {
    uint64_t hash; /* of (max, frames): 0 = empty */
    bool fp_ok;    /* the walk equalled unw_backtrace's stack */
    /* The call site these frames were interned as, for site_kind (NULL:
     * not yet): a confirmed walk found again needs no second hash, cache
     * probe or comparison of its frames (tl_stack_site).  Cleared whenever
     * the slot takes another hash. */
    uint8_t site_kind;
    struct tl_callsite *site;
};

#define TAIL_MAX 4 /* frames below the entry: _start or clone3 is 1-2 away */

/* A confirmed frame-pointer walk kept word for word (the walk memo): the
 * address of its first record (the first outside libtensorleak) and every
 * word the walk read from there.  A later capture whose stack holds the
 * same words at the same addresses would walk to the same frames, so the
 * same hash, the same verdict and the same call site: comparing the words
 * (two loads and two compares a frame, no bounds checks: every address
 * compared was checked when the walk was made, and lies above the current
 * frame) takes the place of the walk, its hash and the verdict lookup.  The
 * verdict itself is still asked: the memo holds only while its slot holds
 * the walk's hash with a confirmed verdict and a call site of the kind. */
struct walk_memo {
    struct verified_slot *slot; /* NULL: empty */
    uint64_t hash;              /* of the walk, as the slot must still hold */
    uintptr_t first;            /* address of the first record walked */
    int max;                    /* the depth it was walked to */
    int visited;                /* records read */
    /* The last record's link ended the walk (out of bounds, not climbing):
     * it is compared too.  Otherwise the walk ended on that record's
     * return address (0, the entry's, the depth reached) and its link,
     * never read or not needed, is not. */
    bool by_link;
    /* The walk ended at the thread's entry; tail_held: the remembered
     * frames below it were appended (append_tail). */
    bool at_entry, tail_held;
    /* [k]: record k's return address, [MEMO_LINKS + k]: its link.  The
     * first half is the capture's own frames buffer while it walks, so
     * keeping a walk costs one store a frame (walk_from). */
    uintptr_t words[2 * TL_MAX_DEPTH];
};
#define MEMO_LINKS TL_MAX_DEPTH
/* Walks kept per thread, tried from the last one found: a loop that
 * allocates from a few call sites in turn finds each. */
#define MEMO_WAYS 8
/* A thread whose captures keep missing the memo (more call sites in turn
 * than it keeps) stops trying it for a while: MEMO_GIVE_UP misses in a row
 * make the next MEMO_PAUSE captures go the usual way, keeping nothing. */
#define MEMO_GIVE_UP 32
#define MEMO_PAUSE 8192

/* One TLS block, so one __tls_get_addr per capture. */
struct stack_tls {
    uintptr_t stack_hi; /* 0 = not looked up yet; 1 = unknown (no fast path) */
    uintptr_t stack_lo;
    struct verified_slot verified[VERIFIED_SETS][2]; /* [0]: the newer */
    /* The thread's entry frame and what lies below it (see the top). */
    uint8_t entry_tries;    /* learn_entry calls so far (a few are allowed) */
    uintptr_t entry_ret;    /* return address in the entry's frame record */
    uintptr_t entry_record; /* address of that frame record */
    int ntail;
    uintptr_t tail[TAIL_MAX];      /* libunwind's frames below the entry */
    uintptr_t tail_slot[TAIL_MAX]; /* where each one's return address lives */
    /* The last capture was a confirmed call-frame-table walk: try that walk
     * first (code without frame pointers stays so), skipping the
     * frame-pointer walk that would only be refused again. */
    bool prefer_cfi;
    /* The thread's last call-frame-table walk was taken as the stack. */
    bool cfi_taken;
    /* The slot of the last capture_native when it returned a confirmed
     * frame-pointer walk as is, else NULL. */
    struct verified_slot *confirmed;
    uint8_t memo_last;     /* the way found last */
    uint8_t memo_next;     /* the way the next walk kept replaces */
    uint8_t memo_misses;   /* captures in a row the memo missed */
    uint16_t memo_paused;  /* captures left not trying it */
    struct walk_memo memo[MEMO_WAYS];
};
static __thread TL_TLS_IE struct stack_tls *tls; /* tl_thread_block */

/* The thread's stack bounds; stack_hi 1 when unknown. */
static void thread_stack_bounds(struct stack_tls *t)
{
    pthread_attr_t attr;
    void *addr;
    size_t size;
    t->stack_hi = 1;
    if (pthread_getattr_np(pthread_self(), &attr) != 0)
        return;
    if (pthread_attr_getstack(&attr, &addr, &size) == 0) {
        t->stack_lo = (uintptr_t)addr;
        t->stack_hi = (uintptr_t)addr + size;
    }
    pthread_attr_destroy(&attr);
}

/* The verdict on the walk of hash h, or NULL when none is kept. */
static inline const struct verified_slot *verdict(const struct stack_tls *t, uint64_t h)
{
    const struct verified_slot *set = t->verified[h % VERIFIED_SETS];
    if (TL_LIKELY(set[0].hash == h))
        return &set[0];
    if (set[1].hash == h)
        return &set[1];
    return NULL;
}

/* Keeps a verdict as its set's newer one; the older of the set goes when
 * both are taken (counted: each one gone costs a libunwind run when its
 * stack comes again). */
static void keep_verdict(struct stack_tls *t, uint64_t h, bool fp_ok)
{
    struct verified_slot *set = t->verified[h % VERIFIED_SETS];
    if (set[0].hash != h) {
        if (set[1].hash != h && set[1].hash != 0)
            atomic_fetch_add_explicit(&verdicts_evicted, 1, memory_order_relaxed);
        set[1] = set[0];
        set[0].site = NULL; /* another walk's frames: its site is not ours */
    }
    set[0].hash = h;
    set[0].fp_ok = fp_ok;
}

/* Walks the %rbp chain from `fp` (the caller's own frame).  Returns the
 * frames after ours, up to `max`; stops at the first link that is not a
 * plausible frame record (outside [our frame, stack top), not increasing,
 * misaligned), or after the frame whose return address is `stop_ret` (its
 * record's address goes to *stop_record).  `records`, when not NULL, gets
 * each frame's record; `memo`, when not NULL, is kept as the walk goes
 * (`frames` must then be its words: the links go MEMO_LINKS words after
 * the frames; visited and by_link are set).  Inlined into the walkers
 * below, so the hot one carries no option it does not use. */
static inline __attribute__((always_inline)) int walk_from(const uintptr_t *fp, uintptr_t *frames,
                                                           uintptr_t *records, struct walk_memo *memo, int max,
                                                           uintptr_t hi, uintptr_t stop_ret, uintptr_t *stop_record)
{
    /* Records must climb the stack, so once the first one (our own frame)
     * is in bounds only the top needs checking. */
    const uintptr_t top = hi - 2 * sizeof(uintptr_t);
    *stop_record = 0;
    if (memo) {
        memo->visited = 0;
        memo->by_link = false;
    }
    /* Our own frames (the hook, the tracker, this walker) come off the top. */
    /* No count of them: each record is above the last and below the top,
     * so the loop ends. */
    for (;;) {
        uintptr_t f = (uintptr_t)fp;
        if (f > top || (f & 7))
            return 0;
        /* A return address of 0 is not ours either: the loop below stops
         * at it with no frames, as a test here would. */
        if (!tl_addr_in_self(fp[1]))
            break;
        const uintptr_t *next = (const uintptr_t *)fp[0];
        if ((uintptr_t)next <= f)
            return 0;
        fp = next;
    }
    /* One running pointer and no separate count: an add less per frame. */
    uintptr_t *out = frames, *const end = frames + (max > 0 ? max : 0);
    bool by_link = false, ret0 = false;
    while (out < end) {
        uintptr_t f = (uintptr_t)fp;
        if (f > top || (f & 7)) {
            by_link = true;
            break;
        }
        uintptr_t ret = fp[1];
        if (ret == 0) {
            if (memo)
                *out = 0; /* a record read: its return address is compared */
            ret0 = true;
            break;
        }
        if (records)
            records[out - frames] = f;
        *out++ = ret;
        if (ret == stop_ret) {
            *stop_record = f;
            break;
        }
        const uintptr_t *next = (const uintptr_t *)fp[0];
        if (memo)
            out[MEMO_LINKS - 1] = (uintptr_t)next;
        if ((uintptr_t)next <= f) {
            by_link = out < end;
            break;
        }
        fp = next;
    }
    int n = (int)(out - frames);
    if (memo) {
        memo->visited = n + ret0;
        memo->by_link = by_link;
    }
    return n;
}

__attribute__((noinline)) static int walk_fp(uintptr_t *frames, int max, uintptr_t hi)
{
    uintptr_t none;
    return walk_from(__builtin_frame_address(0), frames, NULL, NULL, max, hi, 0, &none);
}

__attribute__((noinline)) static int walk_fp_to_entry(uintptr_t *frames, int max, uintptr_t hi, uintptr_t entry_ret,
                                                      uintptr_t *entry_record)
{
    return walk_from(__builtin_frame_address(0), frames, NULL, NULL, max, hi, entry_ret, entry_record);
}

/* The walk from `first` (the first record outside libtensorleak, found by
 * first_record) into memo's words, kept as it goes; stops at the entry
 * when one is known (entry_ret not 0: no return address is 0 here). */
__attribute__((noinline)) static int walk_fp_memo(const uintptr_t *first, int max, uintptr_t hi, uintptr_t entry_ret,
                                                  uintptr_t *entry_record, struct walk_memo *memo)
{
    return walk_from(first, memo->words, NULL, memo, max, hi, entry_ret, entry_record);
}

__attribute__((noinline)) static int walk_fp_records(uintptr_t *frames, uintptr_t *records, int max, uintptr_t hi)
{
    uintptr_t none;
    return walk_from(__builtin_frame_address(0), frames, records, NULL, max, hi, 0, &none);
}

/* Learns the thread's entry from a walk that libunwind disagreed with:
 * called once per thread, from the capture that first needs it.  Steps a
 * libunwind cursor (slow, but once) for the frames and their stack
 * pointers; the walk's frame records give the entry's record address. */
__attribute__((noinline)) static void learn_entry(struct stack_tls *t, int max)
{
    t->entry_tries++;
    uintptr_t ip[TL_MAX_DEPTH + SELF_SLACK + 1], sp[TL_MAX_DEPTH + SELF_SLACK + 1];
    unw_context_t uc;
    unw_cursor_t c;
    if (unw_getcontext(&uc) != 0 || unw_init_local(&c, &uc) != 0)
        return;
    int m = 0, cap = max + SELF_SLACK + 1, step = 1;
    while (m < cap && step > 0) {
        unw_word_t i, p;
        if (unw_get_reg(&c, UNW_REG_IP, &i) != 0 || unw_get_reg(&c, UNW_REG_SP, &p) != 0)
            return;
        /* A signal frame's ip is the interrupted pc, not a return
         * address in a slot under sp: nothing to learn from such a stack. */
        if (unw_is_signal_frame(&c) > 0)
            return;
        ip[m] = i;
        sp[m] = p;
        m++;
        step = unw_step(&c);
    }
    if (step != 0)
        return; /* deeper than the limit (the walk never needs a tail), or an error */
    int first = 0;
    while (first < m && tl_addr_in_self(ip[first]))
        first++;
    /* The walk again, with each frame's record. */
    uintptr_t walked[TL_MAX_DEPTH], record[TL_MAX_DEPTH];
    int n = walk_fp_records(walked, record, max, t->stack_hi);
    /* Both start at the return address into the program (ip[first] is
     * what the walk's first frame record holds). */
    const uintptr_t *unwound = ip + first;
    int total = m - first;
    int k = 0;
    while (k < n && k < total && walked[k] == unwound[k])
        k++;
    int below = total - k;
    if (k == 0 || below < 1 || below > TAIL_MAX || total > max)
        return;
    /* Below the entry (walked[k - 1]): unwound[k ..].  The call in a frame
     * pushed its return address just under that frame's stack pointer. */
    for (int j = 0; j < below; j++) {
        uintptr_t slot = sp[first + k + j] - sizeof(uintptr_t);
        if (slot < record[k - 1] || slot > t->stack_hi - sizeof(uintptr_t) ||
            *(const uintptr_t *)slot != unwound[k + j])
            return; /* not an ordinary call's return address */
        t->tail[j] = unwound[k + j];
        t->tail_slot[j] = slot;
    }
    t->entry_ret = walked[k - 1];
    t->entry_record = record[k - 1];
    t->ntail = below;
    /* Walks kept before now did not stop at the entry. */
    for (int j = 0; j < MEMO_WAYS; j++)
        t->memo[j].slot = NULL;
    atomic_fetch_add_explicit(&entries_learned, 1, memory_order_relaxed);
}

/* The walk from the call-frame tables (cfi_walk.c), starting at the first
 * frame outside libtensorleak: its return address, stack pointer and rbp
 * come from our own frame records.  -1 when it cannot be done. */
__attribute__((noinline)) static int walk_cfi(uintptr_t *frames, int max, uintptr_t hi, bool *same)
{
    *same = false;
    const uintptr_t *fp = __builtin_frame_address(0);
    const uintptr_t top = hi - 2 * sizeof(uintptr_t);
    for (int self = 0;; self++) {
        uintptr_t f = (uintptr_t)fp;
        if (f > top || (f & 7) || fp[1] == 0 || self > SELF_SLACK * 4)
            return -1;
        if (!tl_addr_in_self(fp[1]))
            break;
        const uintptr_t *next = (const uintptr_t *)fp[0];
        if ((uintptr_t)next <= f)
            return -1;
        fp = next;
    }
    /* fp: the hook's frame record.  Its caller resumes with rsp just above
     * it and with the rbp the hook saved. */
    return tl_cfi_walk(fp[1], (uintptr_t)fp + 2 * sizeof(uintptr_t), fp[0], hi, frames, max, same);
}

/* Call-frame-table walks hash apart from frame-pointer walks of the same
 * frames: their verdicts differ. */
#define CFI_SEED(max) ((uint64_t)(max) | 1ull << 32)

/* Keeps the verdict on a call-frame-table walk (`walked`, m frames, hash h)
 * against libunwind's stack of the same capture (u frames), and prefers
 * that walk from the next capture on when it agreed: the thread's memo in
 * cfi_walk.c holds it (taken). */
static void judge_cfi(struct stack_tls *t, uint64_t h, const uintptr_t *walked, int m, const uintptr_t *unwound,
                      int u)
{
    bool ok = u == m && memcmp(walked, unwound, (size_t)m * sizeof *walked) == 0;
    keep_verdict(t, h, ok);
    if (!ok)
        atomic_fetch_add_explicit(&cfi_mismatches, 1, memory_order_relaxed);
    t->prefer_cfi = t->cfi_taken = ok;
}

/* A stack whose frame-pointer walk was not confirmed: the call-frame-table
 * walk, trusted under the same rule (confirmed by libunwind once per
 * distinct walk, by its own hash), else libunwind. */
static int capture_cfi(struct stack_tls *t, uintptr_t *frames, int max)
{
    bool same;
    int m = walk_cfi(frames, max, t->stack_hi, &same);
    t->cfi_taken = false;
    if (m <= 0)
        return capture_unwind(frames, max);
    uint64_t h = tl_hash_frames(CFI_SEED(max), frames, (size_t)m);
    const struct verified_slot *slot = verdict(t, h);
    if (TL_LIKELY(slot != NULL)) {
        t->prefer_cfi = slot->fp_ok;
        if (slot->fp_ok) {
            t->cfi_taken = true;
            return m;
        }
        return capture_unwind(frames, max);
    }
    uintptr_t walked[TL_MAX_DEPTH];
    memcpy(walked, frames, (size_t)m * sizeof *frames);
    int u = capture_unwind(frames, max);
    judge_cfi(t, h, walked, m, frames, u);
    return u;
}

/* The stack still holds the remembered frames below the entry, whose
 * frame record a walk ended at `record`. */
static inline bool tail_holds(const struct stack_tls *t, uintptr_t record)
{
    if (record != t->entry_record)
        return false;
    for (int j = 0; j < t->ntail; j++)
        if (t->tail_slot[j] < record || t->tail_slot[j] > t->stack_hi - sizeof(uintptr_t) ||
            *(const uintptr_t *)t->tail_slot[j] != t->tail[j])
            return false;
    return true;
}

/* The remembered frames below the entry after the n of a walk. */
static inline int push_tail(const struct stack_tls *t, uintptr_t *frames, int n, int max)
{
    for (int j = 0; j < t->ntail && n < max; j++)
        frames[n++] = t->tail[j];
    return n;
}

/* The remembered frames below the entry, when the stack still holds them. */
static inline int append_tail(const struct stack_tls *t, uintptr_t record, uintptr_t *frames, int n, int max)
{
    return tail_holds(t, record) ? push_tail(t, frames, n, max) : n;
}

/* A frame-pointer walk (n frames, hash h) with no verdict kept: libunwind
 * gives the stack, and that one unwind judges every walk this capture can
 * make, so the walk the next capture takes is already judged.  Judged one
 * per capture instead, the next capture's walk could be one without a
 * verdict again, for good: a frame-pointer walk through a frame that uses
 * %rbp for data can differ every time, and two verdicts that pushed each
 * other out of the cache did so on every capture.  In order: the walk as
 * made; when it is refused (the thread's entry unknown) the walk ending at
 * the entry learned now; then the call-frame-table walk, preferred from
 * the next capture on when libunwind agrees. */
__attribute__((noinline)) static int first_sight(struct stack_tls *t, uint64_t h, uintptr_t *frames, int n, int max)
{
    uintptr_t walked[TL_MAX_DEPTH];
    memcpy(walked, frames, (size_t)n * sizeof *frames);
    int m = capture_unwind(frames, max);
    bool ok = m == n && memcmp(walked, frames, (size_t)n * sizeof *frames) == 0;
    keep_verdict(t, h, ok);
    if (ok)
        return m;
    if (!t->entry_ret && t->entry_tries < 4 && m < max) {
        learn_entry(t, max);
        if (t->entry_ret) {
            uintptr_t record;
            n = walk_fp_to_entry(walked, max, t->stack_hi, t->entry_ret, &record);
            if (record)
                n = append_tail(t, record, walked, n, max);
            ok = m == n && memcmp(walked, frames, (size_t)n * sizeof *frames) == 0;
            keep_verdict(t, tl_hash_frames((uint64_t)max, walked, (size_t)n), ok);
            if (ok)
                return m;
        }
    }
    bool same;
    int c = walk_cfi(walked, max, t->stack_hi, &same);
    if (c > 0)
        judge_cfi(t, tl_hash_frames(CFI_SEED(max), walked, (size_t)c), walked, c, frames, m);
    else
        t->cfi_taken = false;
    return m;
}

/* Where site_of_capture's walk starts and which memo keeps it. */
struct walk_hint {
    const uintptr_t *first; /* the first frame record outside libtensorleak */
    struct walk_memo *memo; /* emptied: its words are the capture's frames */
};

/* *same: the frames are this thread's last call-frame-table walk's, found
 * the same again (cfi_walk.c) and taken then.  `hint` (NULL: none): the
 * frame-pointer walk starts there and is kept in its memo when confirmed;
 * `frames` is then the memo's words.  Inline in its callers: a frame of
 * ours fewer for every walk to skip. */
static inline __attribute__((always_inline)) int capture_native(uintptr_t *frames, int max, bool *same,
                                                                const struct walk_hint *hint)
{
    struct stack_tls *t = tls;
    *same = false;
    if (TL_UNLIKELY(!t) && !(t = tl_thread_block((void **)&tls, sizeof *t)))
        return capture_unwind(frames, max);
    t->confirmed = NULL;
    if (TL_UNLIKELY(t->stack_hi == 0))
        thread_stack_bounds(t);
    /* Walk only on the thread's own stack: on another one (a coroutine's,
     * a signal stack) the bounds would not keep the reads safe. */
    uintptr_t here = (uintptr_t)__builtin_frame_address(0);
    if (TL_UNLIKELY(t->stack_hi == 1 || here < t->stack_lo || here >= t->stack_hi))
        return capture_unwind(frames, max);

    if (t->prefer_cfi) {
        bool walk_same;
        int m = walk_cfi(frames, max, t->stack_hi, &walk_same);
        if (m > 0 && walk_same && t->cfi_taken) {
            *same = true;
            return m;
        }
        if (m > 0) {
            uint64_t h = tl_hash_frames(CFI_SEED(max), frames, (size_t)m);
            const struct verified_slot *slot = verdict(t, h);
            if (TL_LIKELY(slot && slot->fp_ok)) {
                t->cfi_taken = true;
                return m;
            }
        }
        t->cfi_taken = false;
        t->prefer_cfi = false; /* the usual order below */
    }
    int n;
    struct walk_memo *memo = hint ? hint->memo : NULL;
    if (memo) {
        uintptr_t record;
        n = walk_fp_memo(hint->first, max, t->stack_hi, t->entry_ret, &record, memo);
        memo->at_entry = record != 0;
        memo->tail_held = record && tail_holds(t, record);
        if (memo->tail_held)
            n = push_tail(t, frames, n, max);
    } else if (t->entry_ret) {
        uintptr_t record;
        n = walk_fp_to_entry(frames, max, t->stack_hi, t->entry_ret, &record);
        if (record)
            n = append_tail(t, record, frames, n, max);
    } else {
        n = walk_fp(frames, max, t->stack_hi);
    }
    uint64_t h = tl_hash_frames((uint64_t)max, frames, (size_t)n);
    const struct verified_slot *slot = verdict(t, h);
    if (TL_LIKELY(slot != NULL)) {
        if (slot->fp_ok) {
            t->confirmed = (struct verified_slot *)slot;
            if (memo && n > 0) {
                memo->slot = t->confirmed;
                memo->hash = h;
                memo->first = (uintptr_t)hint->first;
                memo->max = max;
            }
            return n;
        }
        return capture_cfi(t, frames, max);
    }
    return first_sight(t, h, frames, n, max);
}

/* The call site remembered for the thread's last capture_native, when that
 * returned a confirmed walk as is and the walk was interned as `kind`. */
static inline struct tl_callsite *confirmed_site(enum tl_kind kind)
{
    const struct verified_slot *slot = tls ? tls->confirmed : NULL;
    return slot && slot->site && slot->site_kind == kind ? slot->site : NULL;
}

static inline void remember_confirmed_site(enum tl_kind kind, struct tl_callsite *cs)
{
    struct verified_slot *slot = tls ? tls->confirmed : NULL;
    if (slot && cs) {
        slot->site_kind = (uint8_t)kind;
        slot->site = cs;
    }
}

/* The first frame record outside libtensorleak above `fp` (a frame of
 * ours), as walk_from's first loop finds it; NULL where that loop finds
 * no frames. */
static inline const uintptr_t *first_record(const uintptr_t *fp, uintptr_t hi)
{
    const uintptr_t top = hi - 2 * sizeof(uintptr_t);
    for (;;) {
        uintptr_t f = (uintptr_t)fp;
        if (f > top || (f & 7))
            return NULL;
        if (!tl_addr_in_self(fp[1]))
            return fp;
        const uintptr_t *next = (const uintptr_t *)fp[0];
        if ((uintptr_t)next <= f)
            return NULL;
        fp = next;
    }
}

/* The stack from `fp` (m->first) still holds every word m's walk read;
 * *last gets the address of the last record compared. */
static inline bool memo_holds(const struct walk_memo *m, const uintptr_t *fp, uintptr_t *last)
{
    const uintptr_t *w = m->words, *const end = w + m->visited - 1;
    /* Record k's return address, then its link (the next record). */
#define SAME_RECORD(k)                                                                                                \
    do {                                                                                                              \
        if (fp[1] != w[k])                                                                                            \
            return false;                                                                                             \
        fp = (const uintptr_t *)fp[0];                                                                                \
        if ((uintptr_t)fp != w[MEMO_LINKS + (k)])                                                                     \
            return false;                                                                                             \
    } while (0)
    /* Four records a round: fewer loop tests per frame. */
    for (; w + 3 < end; w += 4) {
        SAME_RECORD(0);
        SAME_RECORD(1);
        SAME_RECORD(2);
        SAME_RECORD(3);
    }
    for (; w < end; w++)
        SAME_RECORD(0);
#undef SAME_RECORD
    *last = (uintptr_t)fp;
    return fp[1] == w[0] && (!m->by_link || fp[0] == w[MEMO_LINKS]);
}

/* The call site of way m's walk, when the stack from `first` still holds
 * its words and its verdict and call site still hold; else NULL.  *same:
 * the words held (the walk would be m's again). */
static inline struct tl_callsite *memo_way_site(const struct stack_tls *t, const struct walk_memo *m,
                                                enum tl_kind kind, int max, const uintptr_t *first, bool *same)
{
    uintptr_t last;
    if (m->first != (uintptr_t)first || m->max != max || !m->slot || !memo_holds(m, first, &last))
        return NULL;
    if (TL_UNLIKELY(m->at_entry) && tail_holds(t, last) != m->tail_held)
        return NULL;
    *same = true;
    const struct verified_slot *slot = m->slot;
    if (TL_UNLIKELY(slot->hash != m->hash || !slot->fp_ok || slot->site_kind != kind))
        return NULL;
    return slot->site;
}

/* The call site of a native-only capture (of `kind`, `max` deep) by the
 * walk memo, with nothing walked or hashed; NULL when the memo does not
 * hold it, and then *hint says where the capture's walk is to start and
 * which way is to keep it (hint->memo NULL: the usual capture, nothing
 * kept).  `fp`: the caller's frame.  What capture_native would do, in
 * short: the same conditions (the thread's own stack, no call-frame-table
 * walk preferred), the same walk found again word for word, the same
 * verdict and call site as confirmed_site, and the same state left
 * (t->confirmed). */
static inline struct tl_callsite *memo_site(enum tl_kind kind, int max, const uintptr_t *fp, struct walk_hint *hint)
{
    hint->memo = NULL;
    struct stack_tls *t = tls;
    if (TL_UNLIKELY(!t || t->stack_hi <= 1 || t->prefer_cfi || (uintptr_t)fp < t->stack_lo ||
                    (uintptr_t)fp >= t->stack_hi))
        return NULL;
    if (TL_UNLIKELY(t->memo_paused)) {
        t->memo_paused--;
        return NULL;
    }
    const uintptr_t *first = first_record(fp, t->stack_hi);
    if (TL_UNLIKELY(!first))
        return NULL;
    unsigned way = t->memo_last;
    bool same = false;
    for (int i = 0; i < MEMO_WAYS; i++, way = (way + 1) % MEMO_WAYS) {
        struct walk_memo *m = &t->memo[way];
        struct tl_callsite *cs = memo_way_site(t, m, kind, max, first, &same);
        if (TL_LIKELY(cs != NULL)) {
            t->memo_last = (uint8_t)way;
            t->memo_misses = 0;
            t->confirmed = m->slot;
            return cs;
        }
        if (same)
            break; /* its walk, another verdict or site now: kept again */
    }
    if (!same) {
        way = t->memo_next;
        t->memo_next = (uint8_t)((way + 1) % MEMO_WAYS);
        if (++t->memo_misses >= MEMO_GIVE_UP) {
            t->memo_misses = 0;
            t->memo_paused = MEMO_PAUSE;
        }
    }
    t->memo_last = (uint8_t)way;
    t->memo[way].slot = NULL;
    hint->first = first;
    hint->memo = &t->memo[way];
    return NULL;
}

#else /* no frame-pointer fast path on this architecture */

/* No walk memo: memo_site never hints, the capture keeps its own buffer. */
struct walk_memo {
    uintptr_t words[TL_MAX_FRAMES];
};
struct walk_hint {
    struct walk_memo *memo; /* NULL */
};

static inline __attribute__((always_inline)) int capture_native(uintptr_t *frames, int max, bool *same,
                                                                const struct walk_hint *hint)
{
    (void)hint;
    *same = false;
    return capture_unwind(frames, max);
}

static inline struct tl_callsite *confirmed_site(enum tl_kind kind)
{
    (void)kind;
    return NULL;
}

static inline void remember_confirmed_site(enum tl_kind kind, struct tl_callsite *cs)
{
    (void)kind;
    (void)cs;
}

static inline struct tl_callsite *memo_site(enum tl_kind kind, int max, const uintptr_t *fp, struct walk_hint *hint)
{
    (void)kind;
    (void)max;
    (void)fp;
    hint->memo = NULL;
    return NULL;
}

#endif

/* The thread's last Python-merged capture, and its call site once interned
 * (tl_stack_site).  A capture whose native walk and Python chain are both
 * the last ones again (cfi_walk.c, pyframes.c: each checked by re-reading
 * the words it depends on) has these frames: the merge, the hash and the
 * call-site lookup are skipped.  A loop allocating from one line of Python
 * does nothing else. */
struct capture_memo {
    int n, max, python_max; /* n 0: none */
    enum tl_kind kind;
    struct tl_callsite *site; /* NULL: not interned since the frames were stored */
    uintptr_t frames[TL_MAX_FRAMES];
};
static __thread TL_TLS_IE struct capture_memo *cmemo; /* tl_thread_block */

/* The native stack, with the thread's Python frames merged in where the
 * interpreter runs them (pyframes.c; nothing more without an interpreter).
 *
 * Python frames have a budget of their own (TENSORLEAK_PYTHON_DEPTH)
 * besides the native one (max): a PyTorch allocation is 15-25 native frames
 * deep (allocator, dispatcher, bindings) before the evaluation loop
 * (tests/gpu/torch_loop.py --leak on an H200, 2026-11-30), so in one budget
 * the native frames would push out the very Python lines the stack is for.
 *
 * *same: the frames are cmemo's (then `frames` is not written); *held: cmemo
 * holds this capture's frames (found again, or stored now). */
/* The capture takes the native stack alone (no Python frames to merge). */
static inline bool native_only(void)
{
    return TL_LIKELY(!tl_py_maybe()) || tl_opt.python_depth <= 0;
}

/* `hint`: for a native-only capture (NULL: none), see capture_native. */
static inline __attribute__((always_inline)) int capture(uintptr_t *frames, int max, bool *same, bool *held,
                                                         const struct walk_hint *hint)
{
    *same = *held = false;
    if (max <= 0)
        return 0;
    bool native_same, py_same;
    const int python_max = tl_opt.python_depth;
    if (native_only())
        return capture_native(frames, max, &native_same, hint);
    struct capture_memo *c = cmemo;
    if (TL_UNLIKELY(!c) && !(c = tl_thread_block((void **)&cmemo, sizeof *c)))
        return capture_native(frames, max, &native_same, NULL); /* no memory: native frames only (counted) */
    uintptr_t nat[TL_MAX_DEPTH], py[TL_MAX_DEPTH];
    bool run_end[TL_MAX_DEPTH];
    int n = capture_native(nat, max, &native_same, NULL);
    int np = tl_py_read(py, run_end, python_max, &py_same);
    if (np == 0) {
        c->n = 0;
        memcpy(frames, nat, (size_t)n * sizeof *frames);
        return n;
    }
    if (native_same && py_same && c->n > 0 && c->max == max && c->python_max == python_max) {
        *same = *held = true;
        return c->n;
    }
    if (py_same)
        tl_py_last(py, run_end);
    int o = tl_py_merge(frames, n + np, nat, n, py, run_end, np);
    c->n = o;
    c->max = max;
    c->python_max = python_max;
    c->site = NULL;
    memcpy(c->frames, frames, (size_t)o * sizeof *frames);
    *held = true;
    return o;
}

/* A capture that begins while this thread is inside another (a signal
 * handler that allocates, reaching tensorleak_pool_free's invalid-free
 * record or a pool allocation with no hook around it) must not read or
 * write the memos the interrupted one is using: the interrupted capture
 * would come back to another stack's words, frames or call site.  It takes
 * libunwind's native stack instead, touching no memo. */
static __thread TL_TLS_IE int capturing;

int tl_stack_capture(uintptr_t *frames, int max)
{
    if (TL_UNLIKELY(capturing))
        return max > 0 ? capture_unwind(frames, max) : 0;
    capturing = 1;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    bool same, held;
    int n = capture(frames, max, &same, &held, NULL);
    if (same)
        memcpy(frames, cmemo->frames, (size_t)n * sizeof *frames);
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    capturing = 0;
    return n;
}

/* The call site of a capture the walk memo did not answer; `hint` as
 * memo_site left it.  Out of line: its frames buffer and its registers
 * are no cost to the memo's answers. */
static inline __attribute__((always_inline)) struct tl_callsite *site_of_capture(enum tl_kind kind, int max,
                                                                     const struct walk_hint *hint)
{
    uintptr_t buffer[TL_MAX_FRAMES];
    uintptr_t *frames = hint->memo ? hint->memo->words : buffer;
    frames[0] = 0; /* a capture of no frames writes none (tells GCC so) */
    bool same, held;
    int n = capture(frames, max, &same, &held, hint->memo ? hint : NULL);
    struct capture_memo *c = cmemo;
    if (same) {
        if (TL_LIKELY(c->site && c->kind == kind))
            return c->site;
        memcpy(frames, c->frames, (size_t)n * sizeof *frames);
    }
    /* Native frames only (nothing merged): a confirmed walk seen before
     * carries its call site. */
    if (!held && n > 0) {
        struct tl_callsite *known = confirmed_site(kind);
        if (TL_LIKELY(known != NULL))
            return known;
    }
    struct tl_callsite *cs = tl_callsite_intern(kind, frames, n);
    if (held) {
        c->site = cs;
        c->kind = kind;
    } else if (n > 0) {
        remember_confirmed_site(kind, cs);
    }
    return cs;
}

/* The call site of a capture begun inside another (see capturing). */
__attribute__((noinline)) static struct tl_callsite *site_of_nested_capture(enum tl_kind kind, int max)
{
    uintptr_t frames[TL_MAX_DEPTH];
    int n = max > 0 ? capture_unwind(frames, max) : 0;
    return tl_callsite_intern(kind, frames, n);
}

struct tl_callsite *tl_stack_site(enum tl_kind kind, int max)
{
    if (TL_UNLIKELY(capturing))
        return site_of_nested_capture(kind, max);
    capturing = 1;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    /* A native stack walked before, found again in the walk memo. */
    struct walk_hint hint = {.memo = NULL};
    struct tl_callsite *cs = NULL;
    /* From our caller's frame (a frame of ours, which keeps a frame
     * pointer): this one's record is ours, no need to test it. */
    if (max > 0 && native_only())
        cs = memo_site(kind, max, *(const uintptr_t *const *)__builtin_frame_address(0), &hint);
    if (!cs)
        cs = site_of_capture(kind, max, &hint);
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    capturing = 0;
    return cs;
}
