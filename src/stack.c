/*
 * stack.c — call stacks of allocations.
 *
 * libunwind's unw_backtrace with a per-thread cache walks DWARF unwind tables,
 * so it works for code built without frame pointers.  The frames of
 * libtensorleak itself (the hook and the tracker) are cut off the top, so a
 * stack begins at the caller of the CUDA function.
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

int tl_stack_capture(uintptr_t *frames, int max)
{
    if (max <= 0)
        return 0;
    /* Our own frames on top: the hook, tl_track_alloc, this function, and
     * sometimes an inlined helper; 8 covers them with room. */
    void *buf[TL_MAX_DEPTH + 8];
    int want = max + 8;
    int n = unw_backtrace(buf, want);
    if (n <= 0)
        return 0;
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
