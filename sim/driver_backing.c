/*
 * driver_backing.c — the bytes behind device memory.
 *
 * Each device's address range is backed by one sparse memory file (memfd;
 * shared anonymous memory where RLIMIT_FSIZE forbids a file that large),
 * mapped twice:
 *  - at the device addresses, PROT_NONE, so a host dereference of a device
 *    pointer faults as on a GPU.  Managed allocations are the exception: their
 *    pages are made read-write there, because managed memory is host
 *    accessible (they are page-aligned for it, driver_alloc.c);
 *  - at a read-write view elsewhere, which only the copy engine
 *    (driver_memory.c) uses.
 * Both views share pages, so a managed buffer written by the host is what a
 * cuMemcpyDtoH of it returns.  The file costs memory only for pages written;
 * freed memory is punched out of it (its contents are gone, as they would be
 * on a device that reuses the memory).
 *
 * Every family that takes device memory uses this file; it uses only
 * driver_state.c (sim/README.md, "Layout").
 */
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "simcuda.h"

uint64_t sim_memory_host_align(void)
{
    static uint64_t page;
    if (!page)
        page = (uint64_t)sysconf(_SC_PAGESIZE);
    return page;
}

uint64_t sim_next_alloc_id(void)
{
    static uint64_t next;
    return __atomic_add_fetch(&next, 1, __ATOMIC_RELAXED);
}

/* The device addresses as a second view of the pages behind `view`: the
 * memory file mapped again, or, with no file, the shared anonymous pages
 * duplicated by mremap (old size 0).  Only where nothing is mapped yet.
 * Returns 1 when the device addresses show the pages. */
static int map_device_view(int fd, void *view, uint64_t base, uint64_t capacity)
{
#ifdef MAP_FIXED_NOREPLACE
    if (fd >= 0) {
        void *at = mmap((void *)(uintptr_t)base, capacity, PROT_NONE, MAP_SHARED | MAP_NORESERVE | MAP_FIXED_NOREPLACE, fd, 0);
        if (at == (void *)(uintptr_t)base)
            return 1;
        if (at != MAP_FAILED)
            munmap(at, capacity); /* pre-4.17 kernels treat the flag as a hint */
        return 0;
    }
    /* Claim the range first, so that the fixed remap below replaces only
     * our own placeholder. */
    void *at = mmap((void *)(uintptr_t)base, capacity, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE,
                    -1, 0);
    if (at != (void *)(uintptr_t)base) {
        if (at != MAP_FAILED)
            munmap(at, capacity);
        return 0;
    }
    void *dup = mremap(view, 0, capacity, MREMAP_MAYMOVE | MREMAP_FIXED, (void *)(uintptr_t)base);
    if (dup != (void *)(uintptr_t)base) {
        munmap(at, capacity);
        return 0;
    }
    return mprotect(dup, capacity, PROT_NONE) == 0;
#else
    (void)fd, (void)view, (void)base, (void)capacity;
    return 0;
#endif
}

/* Whether a file of `bytes` may be made: past RLIMIT_FSIZE, ftruncate would
 * not fail but raise SIGXFSZ, which kills the program (a program may lower
 * the limit, as a test of a full disk does). */
static int file_size_allowed(uint64_t bytes)
{
    struct rlimit rl;
    return getrlimit(RLIMIT_FSIZE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY || bytes <= (uint64_t)rl.rlim_cur;
}

int sim_memory_init_device(int device, uint64_t base, uint64_t capacity)
{
    struct sim_device *d = &sim.dev[device];
    d->view = NULL;
    d->backing_fd = -1;
    d->host_mapped = 0;
    int fd = file_size_allowed(capacity) ? memfd_create("simcuda-device", MFD_CLOEXEC) : -1;
    if (fd >= 0 && ftruncate(fd, (off_t)capacity) != 0) {
        close(fd);
        fd = -1;
    }
    /* Without a memory file: shared anonymous pages, the same to both views. */
    void *view = fd >= 0 ? mmap(NULL, capacity, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0)
                         : mmap(NULL, capacity, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (view == MAP_FAILED) {
        if (fd >= 0)
            close(fd);
        sim_reserve_va(base, capacity);
        return -1;
    }
    d->view = view;
    d->backing_fd = fd;
    d->host_mapped = map_device_view(fd, view, base, capacity);
    if (!d->host_mapped)
        sim_reserve_va(base, capacity);
    return 0;
}

/* Managed memory: the pages of [addr, addr + len) at the device addresses
 * become read-write (on) or inaccessible again (off).  addr and len are
 * page-aligned.  Returns 0, or -1 when the device addresses are not backed. */
int sim_memory_set_host_access_locked(int device, uint64_t addr, uint64_t len, int on)
{
    if (!sim.dev[device].host_mapped)
        return -1;
    return mprotect((void *)(uintptr_t)addr, len, on ? PROT_READ | PROT_WRITE : PROT_NONE);
}

void sim_memory_discard_locked(int device, uint64_t addr, uint64_t len)
{
    struct sim_device *d = &sim.dev[device];
    uint64_t base = d->mem.base;
    if (d->backing_fd >= 0)
        fallocate(d->backing_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)(addr - base), (off_t)len);
    else if (d->view) {
        /* Shared anonymous pages: MADV_REMOVE frees them (both views), on
         * whole pages only. */
        uint64_t page = sim_memory_host_align(), off = addr - base;
        uint64_t first = (off + page - 1) & ~(page - 1), end = (off + len) & ~(page - 1);
        if (end > first)
            madvise((char *)d->view + first, end - first, MADV_REMOVE);
    }
}
