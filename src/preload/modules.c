/*
 * modules.c — libraries that go away before the report is written.
 *
 * Stacks are symbolized only when a report is written, but a plugin that
 * allocated and was then dlclose'd is no longer mapped by then: its frames
 * would come out as bare addresses.  So dlclose is interposed: before the
 * real dlclose, every frame of a known call site that lies inside the
 * closing library is symbolized and kept ("pinned"); reports use the pinned
 * answer when the address no longer belongs to any module, and mark the
 * module "(unloaded)".  After an unload, libunwind's cache is flushed: its
 * cached unwind info for those addresses is stale.
 *
 * The pinned frames live in symbolize.c (tl_pin_frames_in_range,
 * tl_pinned_frame); this file only decides when to pin.
 */
#define UNW_LOCAL_ONLY
#include "report_gather.h"
#include "hooks.h"

#include <dlfcn.h>
#include <libunwind.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>

struct range {
    uintptr_t base;
    uintptr_t lo, hi;
    bool found;
};

static int find_range(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    struct range *r = arg;
    if (info->dlpi_addr != r->base)
        return 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X))
            continue;
        uintptr_t s = info->dlpi_addr + ph->p_vaddr;
        if (!r->found || s < r->lo)
            r->lo = s;
        if (!r->found || s + ph->p_memsz > r->hi)
            r->hi = s + ph->p_memsz;
        r->found = true;
    }
    return r->found;
}

TL_EXPORT int dlclose(void *handle);
int dlclose(void *handle)
{
    struct link_map *lm = NULL;
    void *volatile checked = handle; /* glibc declares it nonnull; callers may still pass NULL */
    if (atomic_load(&tl_active) && checked && tl_callsite_count() > 0 && dlinfo(handle, RTLD_DI_LINKMAP, &lm) == 0 && lm) {
        struct range r = {.base = lm->l_addr};
        dl_iterate_phdr(find_range, &r);
        if (r.found)
            tl_pin_frames_in_range(r.lo, r.hi);
    }
    int rc = tl_real_dlclose(handle);
    /* Not in a raw-clone child (tl_active reads false there, gate.c): it
     * unwinds nothing, and a thread of ours may have held these caches' locks. */
    if (rc == 0)
        atomic_fetch_add_explicit(&tl_dlcloses, 1, memory_order_release); /* lookup.c's driver symbols */
    if (rc == 0 && atomic_load(&tl_active)) {
        unw_flush_cache(unw_local_addr_space, 0, 0);
        tl_cfi_flush(); /* cfi_walk.c's rules by address */
        /* Here, in the program's thread: the watcher never looks up a
         * driver symbol itself, and until this it finds none it can use. */
        tl_driver_symbols_refresh();
    }
    return rc;
}
