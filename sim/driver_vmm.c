/*
 * driver_vmm.c — virtual memory management: address reservations, physical
 * handles and the mappings between them (what PyTorch's expandable segments
 * use).
 *
 * Three kinds of object, with the real driver's lifetimes:
 *  - a reservation (cuMemAddressReserve) is virtual address space only, taken
 *    from one VMM range shared by all devices (a reservation is not tied to a
 *    device in CUDA); it consumes no device memory;
 *  - a physical handle (cuMemCreate) consumes device memory, in multiples of
 *    the 2 MiB granularity.  It is taken contiguously when possible, else as
 *    2 MiB pieces wherever they fit: physical pages need not be contiguous,
 *    which is why VMM sidesteps fragmentation;
 *  - a mapping (cuMemMap) places a handle inside a reservation.
 * A handle's memory returns to the device only when it has been released
 * (cuMemRelease, once per cuMemCreate and per cuMemRetainAllocationHandle)
 * and every mapping of it has been unmapped.
 *
 * Shareable handles (cuMemExportToShareableHandle, cuMemImportFromShareableHandle):
 * a handle created with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR in
 * prop->requestedHandleTypes moves its bytes, at its first export, into a
 * memory file of its own (memfd "simcuda-vmm-devN", N its device, sized to
 * the allocation) out of the device's file; an export hands out a new
 * descriptor of that file
 * (dup), so another process that receives it (SCM_RIGHTS) imports, maps and
 * copies the very same bytes.  The device's range is still charged for the
 * handle in the creating process, so cuMemGetInfo counts it there.  An
 * import in the process that holds the allocation returns that handle with
 * one more reference (cuda.h leaves open whether the handle is the same;
 * SIMCUDA_IMPORT_OWN=new gives a new handle over the file instead, as a
 * driver may); an import of another process's allocation is a handle of
 * this process over the file, charging nothing to this process's devices
 * (each process simulates its own devices).
 *
 * Error codes follow each function's documented list in cuda.h; in particular
 * mapping over an existing mapping is CUDA_ERROR_INVALID_VALUE (cuMemMap does
 * not document CUDA_ERROR_ALREADY_MAPPED).  Choices where cuda.h is silent:
 * cuMemAddressFree of a range that still has mappings, and cuMemUnmap or
 * cuMemSetAccess of a range not exactly covered by mappings, are
 * CUDA_ERROR_INVALID_VALUE.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uthash.h>

#include "simcuda.h"

struct phys_piece {
    uint64_t addr, len;
};

struct phys {
    CUmemGenericAllocationHandle id; /* key */
    int device;
    uint64_t size;
    struct phys_piece *pieces;
    size_t npieces;
    int refs;                       /* unreleased handle references */
    int maps;                       /* live mappings */
    unsigned handle_types;          /* prop->requestedHandleTypes */
    int fd;                         /* its own memory file (shareable), or -1 */
    unsigned char *bytes;           /* that file mapped read-write, or NULL */
    dev_t file_dev;                 /* the file's identity, for imports */
    ino_t file_ino;
    struct phys *origin;            /* a new handle of this process's own export: the allocation */
    int aliases;                    /* live handles whose origin this is */
    UT_hash_handle hh;
};

struct mapping {
    uint64_t addr, size;
    uint64_t offset;                /* into the handle's bytes */
    struct phys *phys;
    unsigned access;                /* CUmemAccess_flags for its device */
    struct mapping *next;           /* sorted by address */
};

struct reservation {
    uint64_t addr, size;
    struct mapping *maps;
    struct reservation *next;
};

static struct phys *handles;
static struct reservation *reservations;
static CUmemGenericAllocationHandle next_handle = 1;

static int granular(uint64_t v) { return v % SIM_GRANULARITY == 0; }

static int prop_valid(const CUmemAllocationProp *prop)
{
    return prop && prop->type == CU_MEM_ALLOCATION_TYPE_PINNED && prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE;
}

/* A handle the program may still use: created and not fully released. */
static struct phys *handle_find_locked(CUmemGenericAllocationHandle h)
{
    struct phys *p;
    HASH_FIND(hh, handles, &h, sizeof h, p);
    return p && p->refs > 0 ? p : NULL;
}

static void phys_free_memory_locked(struct phys *p)
{
    for (size_t i = 0; i < p->npieces; i++) {
        sim_memory_discard_locked(p->device, p->pieces[i].addr, p->pieces[i].len);
        sim_ranges_free(&sim.dev[p->device].mem, p->pieces[i].addr, p->pieces[i].len);
    }
    free(p->pieces);
    p->pieces = NULL;
    p->npieces = 0;
    if (p->bytes)
        munmap(p->bytes, p->size);
    if (p->fd >= 0)
        close(p->fd);
    p->bytes = NULL;
    p->fd = -1;
}

#define SHARE_FILE_PREFIX "simcuda-vmm-dev"

/* Gives p a memory file of its own, mapped read-write, holding the bytes
 * its pieces held (at its first export: a handle that is never exported,
 * like most of PyTorch's expandable segments, costs no descriptor).  Returns
 * 0, or -1 with none (the kernel refused the file: the handle then cannot
 * be exported). */
static int phys_share_file_locked(struct phys *p)
{
    char name[32];
    snprintf(name, sizeof name, SHARE_FILE_PREFIX "%d", p->device);
    int fd = memfd_create(name, MFD_CLOEXEC);
    if (fd < 0)
        return -1;
    struct stat st;
    void *bytes = MAP_FAILED;
    if (ftruncate(fd, (off_t)p->size) == 0 && fstat(fd, &st) == 0)
        bytes = mmap(NULL, p->size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
    if (bytes == MAP_FAILED) {
        close(fd);
        return -1;
    }
    unsigned char *view = sim.dev[p->device].view;
    uint64_t at = 0;
    for (size_t i = 0; view && i < p->npieces; i++) {
        memcpy((unsigned char *)bytes + at, view + (p->pieces[i].addr - sim.dev[p->device].mem.base), p->pieces[i].len);
        at += p->pieces[i].len;
    }
    p->fd = fd;
    p->bytes = bytes;
    p->file_dev = st.st_dev;
    p->file_ino = st.st_ino;
    return 0;
}

/* The device memory stays while another handle of the process names the
 * allocation (SIMCUDA_IMPORT_OWN=new). */
static void phys_maybe_free_locked(struct phys *p)
{
    if (p->refs == 0 && p->maps == 0 && p->aliases == 0) {
        struct phys *origin = p->origin;
        phys_free_memory_locked(p);
        HASH_DEL(handles, p);
        free(p);
        if (origin) {
            origin->aliases--;
            phys_maybe_free_locked(origin);
        }
    }
}

/* Takes size bytes of device memory: one contiguous range if one fits, else
 * granularity-sized pieces.  Returns 0, or -1 with nothing taken. */
static int phys_take_locked(struct phys *p)
{
    struct sim_ranges *mem = &sim.dev[p->device].mem;
    if (p->size > mem->free_bytes)
        return -1;
    size_t n = p->size / SIM_GRANULARITY;
    p->pieces = calloc(n, sizeof *p->pieces);
    if (!p->pieces)
        return -1;
    uint64_t addr = sim_ranges_alloc(mem, p->size, SIM_GRANULARITY);
    if (addr) {
        p->pieces[0] = (struct phys_piece){ addr, p->size };
        p->npieces = 1;
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        /* 512-byte aligned is enough for a physical page here: only the
         * count of bytes consumed is observable. */
        addr = sim_ranges_alloc(mem, SIM_GRANULARITY, SIM_ALIGN);
        if (!addr) {
            phys_free_memory_locked(p);
            return -1;
        }
        p->pieces[p->npieces++] = (struct phys_piece){ addr, SIM_GRANULARITY };
    }
    return 0;
}

SIM_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                                unsigned long long flags)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!handle || !prop_valid(prop) || flags != 0 || size == 0 || !granular(size))
        return CUDA_ERROR_INVALID_VALUE;
    if (!sim_device_valid(prop->location.id))
        return CUDA_ERROR_INVALID_DEVICE;
    /* Win32 handles are not POSIX's, and fabric handles need an IMEX
     * channel: the device attributes for both answer 0. */
    if (prop->requestedHandleTypes & ~(unsigned)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_NOT_SUPPORTED;
    struct phys *p = calloc(1, sizeof *p);
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    p->device = prop->location.id;
    p->size = size;
    p->refs = 1;
    p->fd = -1;
    p->handle_types = prop->requestedHandleTypes;
    CUresult rc = CUDA_SUCCESS;
    sim_lock();
    if (phys_take_locked(p) != 0) {
        phys_free_memory_locked(p);
        free(p);
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
        p->id = next_handle++;
        HASH_ADD(hh, handles, id, sizeof p->id, p);
        *handle = p->id;
    }
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = CUDA_SUCCESS;
    sim_lock();
    struct phys *p = handle_find_locked(handle);
    if (!p) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        p->refs--;
        phys_maybe_free_locked(p);
    }
    sim_unlock();
    return rc;
}

/* ---- shareable handles ---- */

SIM_EXPORT CUresult cuMemExportToShareableHandle(void *shareableHandle, CUmemGenericAllocationHandle handle,
                                                 CUmemAllocationHandleType handleType, unsigned long long flags)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!shareableHandle || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = CUDA_SUCCESS;
    sim_lock();
    struct phys *p = handle_find_locked(handle);
    if (!p || !(p->handle_types & handleType) || handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
        /* An unknown handle, or a type the handle was not created to allow. */
        rc = CUDA_ERROR_INVALID_VALUE;
    } else if (p->fd < 0 && phys_share_file_locked(p) != 0) {
        rc = CUDA_ERROR_NOT_SUPPORTED; /* the kernel refused the handle's memory file */
    } else {
        /* A new descriptor per export: the caller owns and closes it. */
        int fd = dup(p->fd);
        if (fd < 0)
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        else
            *(int *)shareableHandle = fd;
    }
    sim_unlock();
    return rc;
}

/* The device an exported memory file belongs to, from its name; -1 when the
 * descriptor is no file this driver exported. */
static int share_file_device(int fd)
{
    char path[64], target[128];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(path, target, sizeof target - 1);
    if (n <= 0)
        return -1;
    target[n] = '\0';
    const char *prefix = "/memfd:" SHARE_FILE_PREFIX;
    if (strncmp(target, prefix, strlen(prefix)) != 0)
        return -1;
    int device;
    return sscanf(target + strlen(prefix), "%d", &device) == 1 ? device : -1;
}

SIM_EXPORT CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *osHandle,
                                                   CUmemAllocationHandleType shHandleType)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!handle)
        return CUDA_ERROR_INVALID_VALUE;
    if (shHandleType == CU_MEM_HANDLE_TYPE_WIN32 || shHandleType == CU_MEM_HANDLE_TYPE_WIN32_KMT ||
        shHandleType == CU_MEM_HANDLE_TYPE_FABRIC)
        return CUDA_ERROR_NOT_SUPPORTED; /* memory this process cannot support */
    if (shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_INVALID_VALUE;
    /* The descriptor travels in the pointer's value (cuda.h's samples pass
     * (void *)(uintptr_t)fd). */
    int fd = (int)(intptr_t)osHandle;
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    int device = share_file_device(fd);
    if (device < 0 || (uint64_t)st.st_size == 0 || !granular((uint64_t)st.st_size))
        return CUDA_ERROR_INVALID_VALUE;
    if (!sim_device_valid(device))
        return CUDA_ERROR_NOT_SUPPORTED;
    CUresult rc = CUDA_SUCCESS;
    sim_lock();
    struct phys *p, *tmp;
    HASH_ITER(hh, handles, p, tmp) {
        if (p->refs > 0 && p->fd >= 0 && p->file_dev == st.st_dev && p->file_ino == st.st_ino)
            break;
    }
    struct phys *origin = p;
    if (p && !sim.import_own_new) {
        p->refs++;
        *handle = p->id;
    } else if (!(p = calloc(1, sizeof *p))) {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
        p->device = device;
        p->size = (uint64_t)st.st_size;
        p->refs = 1;
        p->handle_types = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        p->file_dev = st.st_dev;
        p->file_ino = st.st_ino;
        /* The driver's own reference: the caller may close its descriptor. */
        p->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
        void *bytes = p->fd >= 0 ? mmap(NULL, p->size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, p->fd, 0)
                                 : MAP_FAILED;
        if (bytes == MAP_FAILED) {
            if (p->fd >= 0)
                close(p->fd);
            free(p);
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            p->bytes = bytes;
            if (origin) {
                p->origin = origin;
                origin->aliases++;
            }
            p->id = next_handle++;
            HASH_ADD(hh, handles, id, sizeof p->id, p);
            *handle = p->id;
        }
    }
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop, CUmemGenericAllocationHandle handle)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!prop)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    struct phys *p = handle_find_locked(handle);
    if (p) {
        memset(prop, 0, sizeof *prop);
        prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop->requestedHandleTypes = (CUmemAllocationHandleType)p->handle_types;
        prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop->location.id = p->device;
        rc = CUDA_SUCCESS;
    }
    sim_unlock();
    return rc;
}

/* ---- reservations ---- */

SIM_EXPORT CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                        unsigned long long flags)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!ptr || size == 0 || size % 4096 || addr % 4096 || flags != 0 || (alignment & (alignment - 1)))
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t align = alignment > SIM_GRANULARITY ? alignment : SIM_GRANULARITY;
    struct reservation *r = calloc(1, sizeof *r);
    if (!r)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult rc = CUDA_SUCCESS;
    sim_lock();
    /* addr is a hint: honoured when that range is free and aligned. */
    uint64_t got = 0;
    if (addr && addr % align == 0 && sim_ranges_alloc_at(&sim.vmm_va, addr, size) == 0)
        got = addr;
    if (!got)
        got = sim_ranges_alloc(&sim.vmm_va, size, align);
    if (!got) {
        free(r);
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
        r->addr = got;
        r->size = size;
        r->next = reservations;
        reservations = r;
        *ptr = got;
    }
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    for (struct reservation **link = &reservations; *link; link = &(*link)->next) {
        struct reservation *r = *link;
        if (r->addr == ptr && r->size == size) {
            if (!r->maps) {
                *link = r->next;
                sim_ranges_free(&sim.vmm_va, r->addr, r->size);
                free(r);
                rc = CUDA_SUCCESS;
            }
            break;
        }
    }
    sim_unlock();
    return rc;
}

static struct reservation *reservation_containing_locked(uint64_t addr, uint64_t size)
{
    for (struct reservation *r = reservations; r; r = r->next)
        if (addr >= r->addr && addr - r->addr < r->size && r->addr + r->size - addr >= size)
            return r;
    return NULL;
}

/* ---- mappings ---- */

SIM_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                             unsigned long long flags)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (flags != 0 || size == 0 || !granular(ptr) || !granular(size) || !granular(offset))
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    struct phys *p = handle_find_locked(handle);
    struct reservation *r = reservation_containing_locked(ptr, size);
    if (p && r && offset <= p->size && size <= p->size - offset) {
        struct mapping **link = &r->maps;
        while (*link && (*link)->addr + (*link)->size <= ptr)
            link = &(*link)->next;
        /* *link is the first mapping ending after ptr: it must start at or
         * after the end of the new one, or they overlap. */
        if (!*link || (*link)->addr >= ptr + size) {
            struct mapping *m = calloc(1, sizeof *m);
            if (!m) {
                rc = CUDA_ERROR_OUT_OF_MEMORY;
            } else {
                m->addr = ptr;
                m->size = size;
                m->offset = offset;
                m->phys = p;
                m->access = CU_MEM_ACCESS_FLAGS_PROT_NONE; /* mappings start inaccessible */
                m->next = *link;
                *link = m;
                p->maps++;
                rc = CUDA_SUCCESS;
            }
        }
    }
    sim_unlock();
    return rc;
}

/* Finds the run of mappings that exactly tiles [ptr, ptr + size); returns the
 * link to its first mapping, or NULL when the range has a gap or cuts a
 * mapping.  With `partial`, the range may start or end inside a mapping. */
static struct mapping **mapped_run_locked(uint64_t ptr, uint64_t size, int partial)
{
    struct reservation *r = reservation_containing_locked(ptr, size);
    if (!r || size == 0)
        return NULL;
    struct mapping **first = &r->maps;
    while (*first && (*first)->addr + (*first)->size <= ptr)
        first = &(*first)->next;
    uint64_t at = ptr, end = ptr + size;
    struct mapping *m = *first;
    if (!m || m->addr > ptr || (!partial && m->addr != ptr))
        return NULL;
    for (; m && at < end; m = m->next) {
        if (m->addr > at)
            return NULL; /* gap */
        at = m->addr + m->size;
    }
    if (at < end || (!partial && at != end))
        return NULL;
    return first;
}

SIM_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    struct mapping **link = mapped_run_locked(ptr, size, 0);
    if (link) {
        uint64_t end = ptr + size;
        while (*link && (*link)->addr < end) {
            struct mapping *m = *link;
            *link = m->next;
            m->phys->maps--;
            phys_maybe_free_locked(m->phys);
            free(m);
        }
        rc = CUDA_SUCCESS;
    }
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!desc || count == 0)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < count; i++) {
        unsigned f = desc[i].flags;
        if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE || !sim_device_valid(desc[i].location.id) ||
            (f != CU_MEM_ACCESS_FLAGS_PROT_NONE && f != CU_MEM_ACCESS_FLAGS_PROT_READ &&
             f != CU_MEM_ACCESS_FLAGS_PROT_READWRITE))
            return CUDA_ERROR_INVALID_VALUE;
    }
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    struct mapping **link = mapped_run_locked(ptr, size, 1);
    if (link) {
        for (struct mapping *m = *link; m && m->addr < ptr + size; m = m->next)
            for (size_t i = 0; i < count; i++)
                if (desc[i].location.id == m->phys->device)
                    m->access = desc[i].flags;
        rc = CUDA_SUCCESS;
    }
    sim_unlock();
    return rc;
}

/* addr may be anywhere inside a mapping; adds a reference to release. */
SIM_EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!handle)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    uint64_t a = (uint64_t)(uintptr_t)addr;
    sim_lock();
    struct reservation *r = reservation_containing_locked(a, 1);
    for (struct mapping *m = r ? r->maps : NULL; m; m = m->next) {
        if (a >= m->addr && a - m->addr < m->size) {
            m->phys->refs++;
            *handle = m->phys->id;
            rc = CUDA_SUCCESS;
            break;
        }
    }
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                                  CUmemAllocationGranularity_flags option)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!granularity || !prop_valid(prop) || !sim_device_valid(prop->location.id) ||
        (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
        return CUDA_ERROR_INVALID_VALUE;
    *granularity = SIM_GRANULARITY;
    return CUDA_SUCCESS;
}

/* ---- address queries (driver_memory.c) ---- */

static struct mapping *mapping_containing_locked(uint64_t va)
{
    struct reservation *r = reservation_containing_locked(va, 1);
    for (struct mapping *m = r ? r->maps : NULL; m; m = m->next)
        if (va >= m->addr && va - m->addr < m->size)
            return m;
    return NULL;
}

int sim_vmm_translate_locked(uint64_t va, uint64_t *phys, unsigned char **bytes, uint64_t *run, unsigned *access)
{
    struct mapping *m = mapping_containing_locked(va);
    if (!m)
        return 0;
    *bytes = NULL;
    if (m->phys->bytes) {
        /* A shareable handle's bytes are its own file's. */
        *bytes = m->phys->bytes + (va - m->addr + m->offset);
        *run = m->size - (va - m->addr);
        *access = m->access;
        return 1;
    }
    /* The handle's bytes are its pieces in order; the mapping starts at its
     * offset into them. */
    uint64_t off = va - m->addr + m->offset;
    for (size_t i = 0; i < m->phys->npieces; i++) {
        const struct phys_piece *pc = &m->phys->pieces[i];
        if (off < pc->len) {
            *phys = pc->addr + off;
            *run = pc->len - off;
            if (*run > m->size - (va - m->addr))
                *run = m->size - (va - m->addr);
            *access = m->access;
            return 1;
        }
        off -= pc->len;
    }
    return 0;
}

int sim_vmm_span_locked(uint64_t addr, struct sim_span *out)
{
    struct mapping *m = mapping_containing_locked(addr);
    if (!m)
        return 0;
    *out = (struct sim_span){ .base = m->addr, .size = m->size, .kind = SIM_SPAN_VMM, .device = m->phys->device,
                              .id = m->phys->id };
    return 1;
}
