/*
 * driver_exports.c — which of this process's allocations are exported
 * through CUDA IPC handles, in a form other processes can read.
 *
 * The registry is a small memory file of IPC_SLOTS slots, each the id of a
 * live allocation exported there (0: free).  cuIpcGetMemHandle
 * (driver_ipc.c) claims a slot and names it in the handle; freeing the
 * allocation (driver_alloc.c) clears it, so an importer that reads the slot
 * through /proc/<pid>/fd/<fd> refuses a handle of freed memory, as the real
 * driver does.  The exporter writes slots under the driver lock; importers in
 * other processes read them with no lock, hence the atomic stores.
 *
 * It sits below the families that use it (sim/README.md, "Layout"), so that
 * the cuMemAlloc family need not know about IPC handles to retire one.
 */
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "simcuda.h"

#define IPC_SLOTS 4096

/* One registry slot: alloc_id of the live allocation exported there, 0 free. */
struct ipc_slot {
    uint64_t alloc_id;
};

static int registry_fd = -1;
static struct ipc_slot *registry; /* IPC_SLOTS slots, shared with importers */

int sim_exports_open_locked(void)
{
    if (registry)
        return registry_fd;
    int fd = memfd_create("simcuda-ipc", MFD_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t len = IPC_SLOTS * sizeof(struct ipc_slot);
    void *p = ftruncate(fd, (off_t)len) == 0 ? mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
    if (p == MAP_FAILED) {
        close(fd);
        return -1;
    }
    registry_fd = fd;
    registry = p;
    return registry_fd;
}

int sim_exports_claim_locked(uint64_t alloc_id)
{
    unsigned slot = IPC_SLOTS;
    /* The same allocation exported again is the same handle. */
    for (unsigned i = 0; i < IPC_SLOTS && slot == IPC_SLOTS; i++)
        if (registry[i].alloc_id == alloc_id)
            slot = i;
    for (unsigned i = 0; i < IPC_SLOTS && slot == IPC_SLOTS; i++)
        if (registry[i].alloc_id == 0)
            slot = i;
    if (slot == IPC_SLOTS)
        return -1;
    __atomic_store_n(&registry[slot].alloc_id, alloc_id, __ATOMIC_RELEASE);
    return (int)slot;
}

void sim_exports_forget_locked(uint64_t alloc_id)
{
    if (!registry)
        return;
    for (unsigned i = 0; i < IPC_SLOTS; i++)
        if (registry[i].alloc_id == alloc_id)
            __atomic_store_n(&registry[i].alloc_id, 0, __ATOMIC_RELEASE);
}

int sim_open_peer_fd(uint32_t pid, int fd, int flags)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%u/fd/%d", pid, fd);
    return open(path, flags | O_CLOEXEC);
}

int sim_exports_peer_lists(uint32_t pid, int peer_registry_fd, uint32_t slot, uint64_t alloc_id)
{
    int fd = sim_open_peer_fd(pid, peer_registry_fd, O_RDONLY);
    if (fd < 0)
        return -1;
    struct ipc_slot s;
    ssize_t got = pread(fd, &s, sizeof s, (off_t)slot * (off_t)sizeof s);
    close(fd);
    if (got != (ssize_t)sizeof s)
        return -1;
    return s.alloc_id == alloc_id;
}
