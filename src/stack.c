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
 */
#define UNW_LOCAL_ONLY
#include "tl_internal.h"

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

/* unw_backtrace, minus our own frames. */
static int capture_unwind(uintptr_t *frames, int max)
{
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

#define VERIFIED_SLOTS 256
struct verified_slot {
    uint64_t hash; /* of (max, frames): 0 = empty */
    bool fp_ok;    /* the walk equalled unw_backtrace's stack */
};

/* One TLS block, so one __tls_get_addr per capture. */
struct stack_tls {
    uintptr_t stack_hi; /* 0 = not looked up yet; 1 = unknown (no fast path) */
    struct verified_slot verified[VERIFIED_SLOTS];
};
static __thread struct stack_tls tls;

static uintptr_t thread_stack_hi(void)
{
    pthread_attr_t attr;
    void *addr;
    size_t size;
    if (pthread_getattr_np(pthread_self(), &attr) != 0)
        return 1;
    int rc = pthread_attr_getstack(&attr, &addr, &size);
    pthread_attr_destroy(&attr);
    return rc == 0 ? (uintptr_t)addr + size : 1;
}

/* Walks the %rbp chain from this frame.  Returns the frames after ours, up
 * to `max`; stops at the first link that is not a plausible frame record
 * (outside [our frame, stack top), not increasing, misaligned). */
__attribute__((noinline)) static int walk_fp(uintptr_t *frames, int max, uintptr_t hi)
{
    const uintptr_t *fp = __builtin_frame_address(0);
    uintptr_t lo = (uintptr_t)fp;
    int n = 0, self = 0;
    while (n < max) {
        uintptr_t f = (uintptr_t)fp;
        if (f < lo || f > hi - 2 * sizeof(uintptr_t) || (f & 7))
            break;
        uintptr_t ret = fp[1];
        if (ret == 0)
            break;
        if (n == 0 && tl_addr_in_self(ret)) {
            if (++self > SELF_SLACK * 4)
                return 0;
        } else {
            frames[n++] = ret;
        }
        const uintptr_t *next = (const uintptr_t *)fp[0];
        if ((uintptr_t)next <= f)
            break;
        fp = next;
    }
    return n;
}

int tl_stack_capture(uintptr_t *frames, int max)
{
    if (max <= 0)
        return 0;
    struct stack_tls *t = &tls;
    if (TL_UNLIKELY(t->stack_hi == 0))
        t->stack_hi = thread_stack_hi();
    if (TL_UNLIKELY(t->stack_hi == 1))
        return capture_unwind(frames, max);

    int n = walk_fp(frames, max, t->stack_hi);
    uint64_t h = tl_hash_frames((uint64_t)max, frames, (size_t)n);
    struct verified_slot *slot = &t->verified[h % VERIFIED_SLOTS];
    if (TL_LIKELY(slot->hash == h)) {
        if (slot->fp_ok)
            return n;
        return capture_unwind(frames, max);
    }
    /* First time this walk is seen (or its slot was taken): ask libunwind
     * and remember whether the walk agreed. */
    uintptr_t walked[TL_MAX_DEPTH];
    memcpy(walked, frames, (size_t)n * sizeof *frames);
    int m = capture_unwind(frames, max);
    slot->hash = h;
    slot->fp_ok = m == n && memcmp(walked, frames, (size_t)n * sizeof *frames) == 0;
    return m;
}

#else /* no frame-pointer fast path on this architecture */

int tl_stack_capture(uintptr_t *frames, int max)
{
    if (max <= 0)
        return 0;
    return capture_unwind(frames, max);
}

#endif
