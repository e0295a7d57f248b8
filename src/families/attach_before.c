/*
 * attach_before.c — the memory a process held before `tensorleak attach`.
 *
 * Tracking starts in the middle of a program's life: what it allocated before
 * is neither invisible nor a leak.  At the attach each device's per-process
 * figure is taken from the driver's own accounting, NVML's running processes
 * (the simulated NVML answers from the simulated driver), and kept as "before
 * attach".  A device pointer the table does not know, freed while attached,
 * is one of those when the driver still knows it (cuMemGetAddressRange
 * answers with it as a base, asked before the free reaches the driver): its
 * size comes off the figure instead of being an invalid free.  A double free
 * of a pointer allocated after the attach is still an invalid free: the
 * driver no longer knows it.  Not judged here: memory of other spaces (host,
 * arrays, VMM handles) from before; its frees are invalid frees as under the
 * preload.
 */
#include "cudart_compat.h"
#include "tl_internal.h"

#include <dlfcn.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define POINTER_DEVICE_ORDINAL 9 /* CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL (cuda.h) */

static struct {
    bool known;
    uint64_t process_bytes;
    atomic_ullong freed_bytes, freed_allocations;
    uint64_t pools_reserved; /* valid once pools_read */
} before[TL_MAX_DEVICES];
/* The frameworks' pools as the bridge read them first after the commit
 * (under the GIL, at the program's next bytecode): set once per attach. */
static atomic_bool pools_read, pools_wanted;
static int device_count;
static time_t attached_at;

/* NVML, as much of its ABI as this needs (nvml.h, v2/v3 process info). */
typedef int nvml_return;
typedef void *nvml_device;
struct nvml_process {
    unsigned pid;
    unsigned long long used_gpu_memory;
    unsigned gpu_instance_id, compute_instance_id;
};

/* The process's bytes on the device with PCI bus id `bus` (NVML), or false. */
static bool nvml_process_bytes(void *nvml, const char *bus, uint64_t *bytes)
{
    nvml_return (*by_bus)(const char *, nvml_device *) = (nvml_return(*)(const char *, nvml_device *))tl_real_dlsym(
        nvml, "nvmlDeviceGetHandleByPciBusId_v2");
    nvml_return (*procs)(nvml_device, unsigned *, struct nvml_process *) =
        (nvml_return(*)(nvml_device, unsigned *, struct nvml_process *))tl_real_dlsym(
            nvml, "nvmlDeviceGetComputeRunningProcesses_v3");
    if (!procs)
        procs = (nvml_return(*)(nvml_device, unsigned *, struct nvml_process *))tl_real_dlsym(
            nvml, "nvmlDeviceGetComputeRunningProcesses_v2");
    nvml_device dev;
    if (!by_bus || !procs || by_bus(bus, &dev) != 0)
        return false;
    struct nvml_process list[64];
    unsigned n = sizeof list / sizeof list[0];
    if (procs(dev, &n, list) != 0)
        return false;
    unsigned pid = (unsigned)getpid();
    *bytes = 0;
    for (unsigned i = 0; i < n; i++)
        if (list[i].pid == pid)
            *bytes = list[i].used_gpu_memory;
    return true; /* not listed: it holds nothing there */
}

void tl_attach_measure_before(void)
{
    atomic_store(&pools_read, false);
    memset(before, 0, sizeof before);
    attached_at = time(NULL);
    atomic_store(&pools_wanted, true);
    CUresult (*count)(int *) = (CUresult(*)(int *))tl_driver_symbol("cuDeviceGetCount");
    CUresult (*get)(CUdevice *, int) = (CUresult(*)(CUdevice *, int))tl_driver_symbol("cuDeviceGet");
    CUresult (*bus_id)(char *, int, CUdevice) = (CUresult(*)(char *, int, CUdevice))tl_driver_symbol("cuDeviceGetPCIBusId");
    int n = 0;
    if (!count || count(&n) != CUDA_SUCCESS || n < 0)
        n = 0;
    device_count = n < TL_MAX_DEVICES ? n : TL_MAX_DEVICES;
    /* Loaded for the query and closed again (NVML counts its users). */
    void *nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    nvml_return (*init)(void) = nvml ? (nvml_return(*)(void))tl_real_dlsym(nvml, "nvmlInit_v2") : NULL;
    nvml_return (*shutdown)(void) = nvml ? (nvml_return(*)(void))tl_real_dlsym(nvml, "nvmlShutdown") : NULL;
    bool up = init && init() == 0;
    for (int d = 0; up && get && bus_id && d < device_count; d++) {
        CUdevice dev;
        char bus[32];
        if (get(&dev, d) == CUDA_SUCCESS && bus_id(bus, sizeof bus, dev) == CUDA_SUCCESS)
            before[d].known = nvml_process_bytes(nvml, bus, &before[d].process_bytes);
    }
    if (up && shutdown)
        shutdown();
    /* glibc's dlclose: what the name binds to in a library dlopen'ed by the
     * injector (the program's libc comes first in the global scope); NVML
     * holds no call site of ours to pin. */
    if (nvml)
        tl_real_dlclose(nvml);
    /* The hook path's query, looked up now rather than inside a free. */
    (void)tl_driver_symbol("cuMemGetAddressRange_v2");
    (void)tl_driver_symbol("cuPointerGetAttribute");
}

bool tl_attach_wants_pools(void)
{
    return atomic_load_explicit(&pools_wanted, memory_order_relaxed) && atomic_load(&tl_attached);
}

void tl_attach_pools_read(const uint64_t reserved[TL_MAX_DEVICES])
{
    if (!atomic_exchange(&pools_wanted, false))
        return;
    for (int d = 0; d < TL_MAX_DEVICES; d++)
        before[d].pools_reserved = reserved[d];
    atomic_store_explicit(&pools_read, true, memory_order_release);
}

static atomic_ullong total_base;

/* Tracking is off (the hooks forward) and the earlier attach's rows are
 * dropped, out of every total: nothing changes these meanwhile.  The peaks
 * start at what is live (nothing); the total is folded from the shards'
 * counts since the library loaded, so it keeps a base. */
void tl_attach_reset_counts(void)
{
    tl_live_fold();
    atomic_store(&total_base, atomic_load(&tl_stats.total_allocs));
    atomic_store(&tl_stats.failed_allocs, 0);
    atomic_store(&tl_stats.oom_failures, 0);
    atomic_store(&tl_stats.invalid_frees, 0);
    atomic_store(&tl_stats.teardown_bytes, 0);
    atomic_store(&tl_stats.teardown_allocs, 0);
    atomic_store(&tl_stats.peak_live_bytes, atomic_load(&tl_stats.live_bytes));
    for (int d = 0; d < TL_MAX_DEVICES; d++) {
        /* Exact from here if this attach set a budget (counts.h). */
        long long live = tl_live_sum_device_bytes(d);
        atomic_store(&tl_stats.device[d].live_bytes, live);
        atomic_store(&tl_stats.device[d].peak_bytes, live);
    }
    for (int o = 1; o <= TL_MAX_OWNERS; o++)
        atomic_store(&tl_owner_figures[o].peak, atomic_load(&tl_owner_figures[o].live));
}

unsigned long long tl_attach_total_base(void)
{
    return atomic_load(&total_base);
}

void tl_attach_total_base_clear(void)
{
    atomic_store(&total_base, 0);
}

bool tl_attach_freed_before(uint8_t space, uint64_t addr)
{
    if (space != TL_SPACE_MEM)
        return false;
    CUresult (*range)(CUdeviceptr *, size_t *, CUdeviceptr) =
        (CUresult(*)(CUdeviceptr *, size_t *, CUdeviceptr))tl_driver_symbol("cuMemGetAddressRange_v2");
    CUresult (*attr)(void *, int, CUdeviceptr) =
        (CUresult(*)(void *, int, CUdeviceptr))tl_driver_symbol("cuPointerGetAttribute");
    CUdeviceptr base = 0;
    size_t size = 0;
    if (!range || range(&base, &size, (CUdeviceptr)addr) != CUDA_SUCCESS || base != addr || !size)
        return false;
    int device = -1;
    if (!attr || attr(&device, POINTER_DEVICE_ORDINAL, (CUdeviceptr)addr) != CUDA_SUCCESS ||
        device < 0 || device >= TL_MAX_DEVICES)
        return true; /* the driver's allocation all the same: no invalid free, no device to count it on */
    atomic_fetch_add(&before[device].freed_bytes, size);
    atomic_fetch_add(&before[device].freed_allocations, 1);
    return true;
}

bool tl_attach_before_rows(struct tl_attach_row *out, size_t max, size_t *count, long long *when)
{
    if (!atomic_load(&tl_attached))
        return false;
    *when = (long long)attached_at;
    size_t n = 0;
    for (int d = 0; d < device_count && n < max; d++)
        out[n++] = (struct tl_attach_row){.device = d,
                                          .known = before[d].known,
                                          .process_bytes = before[d].process_bytes,
                                          .freed_bytes = atomic_load(&before[d].freed_bytes),
                                          .freed_allocations = atomic_load(&before[d].freed_allocations),
                                          .pools_known = atomic_load_explicit(&pools_read, memory_order_acquire),
                                          .pools_reserved = before[d].pools_reserved};
    *count = n;
    return true;
}
