/*
 * driver_init.c — cuInit, and the devices as the driver API describes them
 * (cuDeviceGet*, the simcuda_* test exports).
 *
 * cuInit brings up every part of the driver once, in order: each device's
 * memory (driver_backing.c) and address range, the VMM range, the primary
 * contexts (driver_ctx.c) and each device's default pool (driver_pool.c);
 * that is why this file sits above the API families (sim/README.md,
 * "Layout").  The settings it reads come from driver_state.c.
 *
 * Every device is a "tensorleak simulated GPU": compute capability 9.0, 132 SMs,
 * unified addressing, memory pools and VMM supported.  There is no hidden
 * context overhead: cuMemGetInfo's free is exactly capacity minus what the
 * program's allocations consume, so tests can assert exact numbers.
 */
#include <stdio.h>
#include <string.h>

#include "simcuda.h"

static pthread_once_t init_once = PTHREAD_ONCE_INIT;

static void init_devices(void)
{
    sim_config_once();
    sim.init_result = CUDA_SUCCESS;
    if (sim.ndevices == 0) {
        sim.init_result = CUDA_ERROR_NO_DEVICE;
        return;
    }
    for (int d = 0; d < sim.ndevices; d++) {
        uint64_t base = SIM_DEVICE_BASE + (uint64_t)d * SIM_DEVICE_STRIDE;
        sim.dev[d].capacity = sim.capacity;
        sim_memory_init_device(d, base, sim.capacity); /* unbacked: copies fail, allocation works */
        if (sim_ranges_init(&sim.dev[d].mem, base, sim.capacity) != 0) {
            sim.init_result = CUDA_ERROR_OUT_OF_MEMORY;
            return;
        }
    }
    sim_reserve_va(SIM_VMM_BASE, SIM_VMM_SIZE);
    if (sim_ranges_init(&sim.vmm_va, SIM_VMM_BASE, SIM_VMM_SIZE) != 0 ||
        sim_ctx_init_primaries() != 0) {
        sim.init_result = CUDA_ERROR_OUT_OF_MEMORY;
        return;
    }
    sim_lock();
    for (int d = 0; d < sim.ndevices && sim.init_result == CUDA_SUCCESS; d++)
        sim.init_result = sim_pool_create_default_locked(d);
    sim_unlock();
    if (sim.init_result == CUDA_SUCCESS) {
        sim_pool_arm_exit_failure();
        __atomic_store_n(&sim.initialized, 1, __ATOMIC_RELEASE);
    }
}

SIM_EXPORT CUresult cuInit(unsigned int flags)
{
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_once(&init_once, init_devices);
    return sim.init_result;
}

/* Like the real driver, the version is available before cuInit. */
SIM_EXPORT CUresult cuDriverGetVersion(int *driverVersion)
{
    if (!driverVersion)
        return CUDA_ERROR_INVALID_VALUE;
    *driverVersion = SIM_DRIVER_VERSION;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuDeviceGetCount(int *count)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    *count = sim.ndevices;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    if (!sim_device_valid(ordinal))
        return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!sim_device_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    if (!name || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    snprintf(name, (size_t)len, "%s", "tensorleak simulated GPU");
    return CUDA_SUCCESS;
}

/* A stable UUID per ordinal, so the same device reads the same in every
 * process (tools key devices by it): "tensorleak-sim" + 0x00 + ordinal. */
static CUresult device_uuid(CUuuid *uuid, CUdevice dev)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!sim_device_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    if (!uuid)
        return CUDA_ERROR_INVALID_VALUE;
    static const char prefix[14] = "tensorleak-sim";
    memcpy(uuid->bytes, prefix, sizeof prefix);
    uuid->bytes[14] = 0;
    uuid->bytes[15] = (char)dev;
    return CUDA_SUCCESS;
}

/* The same bytes from both: the _v2 form (CUDA 11.4) differs from the first
 * only on MIG instances, which the simulator has none of. */
SIM_EXPORT CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev) { return device_uuid(uuid, dev); }
SIM_EXPORT CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev) { return device_uuid(uuid, dev); }

/* Device d sits at PCI bus d + 1 of domain 0, as the attributes below say. */
SIM_EXPORT CUresult cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!sim_device_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    if (!pciBusId || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    snprintf(pciBusId, (size_t)len, "0000:%02x:00.0", dev + 1);
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!sim_device_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    if (!bytes)
        return CUDA_ERROR_INVALID_VALUE;
    *bytes = sim.dev[dev].capacity;
    return CUDA_SUCCESS;
}

/* Values an H100-class part reports; attributes not listed read as 0, which is
 * what a real device reports for features it lacks. */
static const struct { int attr, value; } attributes[] = {
    { 1, 1024 },            /* MAX_THREADS_PER_BLOCK */
    { 2, 1024 }, { 3, 1024 }, { 4, 64 },                  /* MAX_BLOCK_DIM_X/Y/Z */
    { 5, 2147483647 }, { 6, 65535 }, { 7, 65535 },        /* MAX_GRID_DIM_X/Y/Z */
    { 8, 49152 },           /* MAX_SHARED_MEMORY_PER_BLOCK */
    { 9, 65536 },           /* TOTAL_CONSTANT_MEMORY */
    { 10, 32 },             /* WARP_SIZE */
    { 11, 2147483647 },     /* MAX_PITCH */
    { 12, 65536 },          /* MAX_REGISTERS_PER_BLOCK */
    { 13, 1980000 },        /* CLOCK_RATE (kHz) */
    { CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT, 512 },
    { CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 132 },
    { 19, 1 },              /* CAN_MAP_HOST_MEMORY */
    { 30, 512 },            /* SURFACE_ALIGNMENT */
    { 31, 1 },              /* CONCURRENT_KERNELS */
    { 36, 2619000 },        /* MEMORY_CLOCK_RATE (kHz) */
    { 37, 5120 },           /* GLOBAL_MEMORY_BUS_WIDTH */
    { 38, 52428800 },       /* L2_CACHE_SIZE */
    { 39, 2048 },           /* MAX_THREADS_PER_MULTIPROCESSOR */
    { 40, 3 },              /* ASYNC_ENGINE_COUNT */
    { CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 1 },
    { 51, 32 },             /* TEXTURE_PITCH_ALIGNMENT */
    { CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 9 },
    { CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0 },
    { 78, 1 },              /* STREAM_PRIORITIES_SUPPORTED */
    { 79, 1 }, { 80, 1 },   /* GLOBAL/LOCAL_L1_CACHE_SUPPORTED */
    { 81, 233472 },         /* MAX_SHARED_MEMORY_PER_MULTIPROCESSOR */
    { 82, 65536 },          /* MAX_REGISTERS_PER_MULTIPROCESSOR */
    { 83, 1 },              /* MANAGED_MEMORY */
    { 89, 1 },              /* CONCURRENT_MANAGED_ACCESS */
    { 90, 1 },              /* COMPUTE_PREEMPTION_SUPPORTED */
    { 95, 1 },              /* COOPERATIVE_LAUNCH */
    { 97, 232448 },         /* MAX_SHARED_MEMORY_PER_BLOCK_OPTIN */
    { 99, 1 },              /* HOST_REGISTER_SUPPORTED */
    { 103, 1 },             /* HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED (driver_vmm.c) */
    { 106, 32 },            /* MAX_BLOCKS_PER_MULTIPROCESSOR */
    { 111, 1024 },          /* RESERVED_SHARED_MEMORY_PER_BLOCK */
    { 113, 1 },             /* READ_ONLY_HOST_REGISTER_SUPPORTED */
    { 125, 1 },             /* IPC_EVENT_SUPPORTED (driver_event.c) */
    { CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 1 },
    { CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 1 },
};
#define SIM_DEVICE_ATTRIBUTE_MAX 148 /* CU_DEVICE_ATTRIBUTE_MAX in CUDA 13.0 */

SIM_EXPORT CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!sim_device_valid(dev))
        return CUDA_ERROR_INVALID_DEVICE;
    if (!pi || (int)attrib <= 0 || (int)attrib >= SIM_DEVICE_ATTRIBUTE_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    *pi = 0;
    for (size_t i = 0; i < sizeof attributes / sizeof attributes[0]; i++)
        if (attributes[i].attr == (int)attrib)
            *pi = attributes[i].value;
    if ((int)attrib == 33)
        *pi = dev + 1; /* cuDeviceGetPCIBusId agrees */
    return CUDA_SUCCESS;
}

SIM_EXPORT size_t simcuda_device_used_bytes(int dev)
{
    if (!sim_is_initialized() || !sim_device_valid(dev))
        return 0;
    sim_lock();
    size_t used = sim.dev[dev].mem.size - sim.dev[dev].mem.free_bytes;
    sim_unlock();
    return used;
}

SIM_EXPORT size_t simcuda_largest_free_block(int dev)
{
    if (!sim_is_initialized() || !sim_device_valid(dev))
        return 0;
    sim_lock();
    size_t largest = sim_ranges_largest(&sim.dev[dev].mem);
    sim_unlock();
    return largest;
}

/* What the simulated NVML (nvml.c) reads without initialising CUDA in the
 * process, as NVIDIA's NVML needs no CUDA context: the configured device
 * count and capacity. */
SIM_EXPORT int simcuda_device_count(void)
{
    sim_config_once();
    return sim.ndevices;
}

SIM_EXPORT size_t simcuda_device_capacity(void)
{
    sim_config_once();
    return sim.capacity;
}
