/*
 * report_frames.c — the frames of one report, each symbolized once.
 *
 * A report reads the same frames many times: the owner rules (owners.c),
 * the suppressions (suppress.c), the model (report_build.c) and the live
 * state (live.c) each go through a call site's frames.  An address is
 * symbolized at its first use in a report and kept until the report is done
 * (tl_report_frames_clear); one report is gathered at a time (the report
 * lock).
 */
#include "report_gather.h"

#include <link.h>
#include <stdlib.h>

#include <uthash.h>

struct frame_entry {
    UT_hash_handle hh;
    uintptr_t address;
    struct tl_frame_info info;
};
static struct frame_entry *frame_cache;

static int find_code(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    uintptr_t a = *(uintptr_t *)arg;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type == PT_LOAD && a >= lo && a - lo < ph->p_memsz)
            return 1;
    }
    return 0;
}

/* Is `address` inside a loaded object (dl_iterate_phdr: the loader's list
 * lock, never its main one)? */
static bool loaded_code_at(uintptr_t address)
{
    return dl_iterate_phdr(find_code, &address) != 0;
}

const struct tl_frame_info *tl_report_frame(struct tl_gather *m, uintptr_t address)
{
    struct frame_entry *e;
    HASH_FIND(hh, frame_cache, &address, sizeof address, e);
    if (e)
        return &e->info;
    e = calloc(1, sizeof *e);
    static struct tl_frame_info fallback;
    if (!e) {
        tl_symbolize(m->symbolizer, address, &fallback);
        return &fallback;
    }
    e->address = address;
    tl_symbolize(m->symbolizer, address, &e->info);
    /* A library dlclose'd after allocating: its frames were pinned.  The
     * address may be mapped again since, by a file that is no loaded object
     * (the symbolizer's own read-only mapping of some library's ELF file
     * lands there as easily as anything): only code of a loaded object
     * replaces the pinned frame. */
    const struct tl_frame_info *p = tl_pinned_frame(address);
    if (p && (!e->info.module || !loaded_code_at(address)))
        e->info = *p;
    HASH_ADD(hh, frame_cache, address, sizeof address, e);
    return &e->info;
}

void tl_report_frames_clear(void)
{
    struct frame_entry *e, *tmp;
    HASH_ITER(hh, frame_cache, e, tmp) {
        HASH_DEL(frame_cache, e);
        free(e);
    }
}
