/*
 * nvml.c — the simulated NVML, libnvidia-ml.so.1: what PyTorch (the
 * expandable-segments allocator, its out-of-memory message, CUDA IPC),
 * nvidia-smi-like tools and monitoring agents ask about the simulated GPUs.
 *
 * Its figures are the simulated driver's, read from the libcuda.so.1 this
 * process loads (dlopen by soname, as NVML itself finds the driver):
 * nvmlDeviceGetMemoryInfo's used is the device memory in use (capacity minus
 * cuMemGetInfo's free), total the capacity.  Each process simulates its
 * devices alone (sim/README.md), so the running processes of a device are
 * this process, listed while it holds device memory, with that many bytes.
 *
 * The devices have no NVLink, no fabric and no peer access: NVLink queries
 * answer NVML_ERROR_NOT_SUPPORTED, the fabric state and the P2P status
 * NOT_SUPPORTED, as on a PCIe part without them.  Calls before nvmlInit are NVML_ERROR_UNINITIALIZED;
 * init and shutdown count, as NVML's do.  Signatures follow nvml.h (the
 * unversioned nvmlDeviceGetComputeRunningProcesses is v1's, with 16-byte
 * entries; _v2 and _v3 have 24-byte ones).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define NVML_EXPORT __attribute__((visibility("default")))

typedef int nvmlReturn_t;
enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_FUNCTION_NOT_FOUND = 13,
    NVML_ERROR_UNKNOWN = 999,
};
enum { NVML_P2P_STATUS_NOT_SUPPORTED = 5 };

#define SIM_MAX_DEVICES 8
#define SIM_DRIVER_VERSION 13000

typedef struct nvmlDevice_st {
    int index;
} *nvmlDevice_t;

typedef struct {
    unsigned long long total, free, used;
} nvmlMemory_t;

typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
} nvmlProcessInfo_v1_t;

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;

static struct nvmlDevice_st devices[SIM_MAX_DEVICES] = {
    { 0 }, { 1 }, { 2 }, { 3 }, { 4 }, { 5 }, { 6 }, { 7 },
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int init_count;
static int (*drv_count)(void);
static size_t (*drv_capacity)(void);
static size_t (*drv_used)(int);

static nvmlReturn_t init(void)
{
    nvmlReturn_t r = NVML_SUCCESS;
    pthread_mutex_lock(&lock);
    if (!drv_count) {
        void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
        if (h) {
            drv_count = (int (*)(void))dlsym(h, "simcuda_device_count");
            drv_capacity = (size_t (*)(void))dlsym(h, "simcuda_device_capacity");
            drv_used = (size_t (*)(int))dlsym(h, "simcuda_device_used_bytes");
        }
        /* A driver that is not the simulated one has none of these: NVML
         * cannot describe its devices. */
        if (!drv_count || !drv_capacity || !drv_used) {
            drv_count = NULL;
            r = NVML_ERROR_DRIVER_NOT_LOADED;
        }
    }
    if (r == NVML_SUCCESS)
        init_count++;
    pthread_mutex_unlock(&lock);
    return r;
}

NVML_EXPORT nvmlReturn_t nvmlInit_v2(void) { return init(); }
NVML_EXPORT nvmlReturn_t nvmlInit(void) { return init(); }
NVML_EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    (void)flags;
    return init();
}

NVML_EXPORT nvmlReturn_t nvmlShutdown(void)
{
    nvmlReturn_t r = NVML_SUCCESS;
    pthread_mutex_lock(&lock);
    if (init_count == 0)
        r = NVML_ERROR_UNINITIALIZED;
    else
        init_count--;
    pthread_mutex_unlock(&lock);
    return r;
}

static int initialized(void)
{
    pthread_mutex_lock(&lock);
    int n = init_count;
    pthread_mutex_unlock(&lock);
    return n > 0;
}

static int device_count(void)
{
    int n = drv_count();
    return n < 0 ? 0 : n > SIM_MAX_DEVICES ? SIM_MAX_DEVICES : n;
}

/* NVML_SUCCESS when the handle is one of ours and NVML is initialised. */
static nvmlReturn_t check(nvmlDevice_t device)
{
    if (!initialized())
        return NVML_ERROR_UNINITIALIZED;
    for (int i = 0; i < device_count(); i++)
        if (device == &devices[i])
            return NVML_SUCCESS;
    return NVML_ERROR_INVALID_ARGUMENT;
}

NVML_EXPORT const char *nvmlErrorString(nvmlReturn_t result)
{
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    default: return "Unknown Error";
    }
}

NVML_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion)
{
    if (!cudaDriverVersion)
        return NVML_ERROR_INVALID_ARGUMENT;
    *cudaDriverVersion = SIM_DRIVER_VERSION;
    return NVML_SUCCESS;
}

NVML_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion)
{
    return nvmlSystemGetCudaDriverVersion_v2(cudaDriverVersion);
}

NVML_EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    if (!initialized())
        return NVML_ERROR_UNINITIALIZED;
    if (!version)
        return NVML_ERROR_INVALID_ARGUMENT;
    if ((unsigned)snprintf(version, length, "tensorleak-sim-%d", SIM_DRIVER_VERSION) >= length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    return NVML_SUCCESS;
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
    if (!initialized())
        return NVML_ERROR_UNINITIALIZED;
    if (!deviceCount)
        return NVML_ERROR_INVALID_ARGUMENT;
    *deviceCount = (unsigned)device_count();
    return NVML_SUCCESS;
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    if (!initialized())
        return NVML_ERROR_UNINITIALIZED;
    if (!device || index >= (unsigned)device_count())
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = &devices[index];
    return NVML_SUCCESS;
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
    nvmlReturn_t r = check(device);
    if (r == NVML_SUCCESS && !index)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS)
        *index = (unsigned)device->index;
    return r;
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    nvmlReturn_t r = check(device);
    if (r == NVML_SUCCESS && !name)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS && (unsigned)snprintf(name, length, "tensorleak simulated GPU") >= length)
        r = NVML_ERROR_INSUFFICIENT_SIZE;
    return r;
}

/* The UUID cuDeviceGetUuid gives (driver_init.c: "tensorleak-sim", 0,
 * ordinal), in NVML's "GPU-" text form. */
static void format_uuid(int index, char out[41])
{
    unsigned char b[16];
    memcpy(b, "tensorleak-sim", 14);
    b[14] = 0;
    b[15] = (unsigned char)index;
    snprintf(out, 41, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2],
             b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    nvmlReturn_t r = check(device);
    if (r != NVML_SUCCESS)
        return r;
    if (!uuid)
        return NVML_ERROR_INVALID_ARGUMENT;
    char text[41];
    format_uuid(device->index, text);
    if (strlen(text) >= length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(uuid, text, strlen(text) + 1);
    return NVML_SUCCESS;
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    if (!initialized())
        return NVML_ERROR_UNINITIALIZED;
    if (!uuid || !device)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < device_count(); i++) {
        char text[41];
        format_uuid(i, text);
        if (strcmp(text, uuid) == 0) {
            *device = &devices[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

/* Device i sits at domain 0, bus i + 1, device 0, function 0 (the driver's
 * cuDeviceGetPCIBusId); the domain may be written with 4 or 8 digits. */
NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device)
{
    if (!initialized())
        return NVML_ERROR_UNINITIALIZED;
    if (!pciBusId || !device)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned domain, bus, dev, fn;
    char extra;
    if (sscanf(pciBusId, "%x:%x:%x.%x%c", &domain, &bus, &dev, &fn, &extra) != 4)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < device_count(); i++) {
        if (domain == 0 && bus == (unsigned)i + 1 && dev == 0 && fn == 0) {
            *device = &devices[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    nvmlReturn_t r = check(device);
    if (r != NVML_SUCCESS)
        return r;
    if (!memory)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned long long total = drv_capacity(), used = drv_used(device->index);
    *memory = (nvmlMemory_t){ total, total - used, used };
    return NVML_SUCCESS;
}

/* nvmlMemory_v2 (version word nvmlMemory_v2 = sizeof | 2 << 24): nothing is
 * reserved by a simulated driver. */
NVML_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    nvmlReturn_t r = check(device);
    if (r != NVML_SUCCESS)
        return r;
    if (!memory || memory->version != ((unsigned)sizeof(nvmlMemory_v2_t) | 2u << 24))
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned long long total = drv_capacity(), used = drv_used(device->index);
    *memory = (nvmlMemory_v2_t){ memory->version, total, 0, total - used, used };
    return NVML_SUCCESS;
}

/* This process, when it holds memory on the device: 0 or 1 entries of
 * `size` bytes each, written by `fill`. */
static nvmlReturn_t running_processes(nvmlDevice_t device, unsigned int *infoCount, void *infos, size_t size)
{
    nvmlReturn_t r = check(device);
    if (r != NVML_SUCCESS)
        return r;
    if (!infoCount)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned long long used = drv_used(device->index);
    unsigned n = used ? 1 : 0;
    if (*infoCount < n) {
        *infoCount = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    *infoCount = n;
    if (n && !infos)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (n) {
        nvmlProcessInfo_t entry = { (unsigned)getpid(), used, 0xFFFFFFFFu, 0xFFFFFFFFu };
        memcpy(infos, &entry, size);
    }
    return NVML_SUCCESS;
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
                                                              nvmlProcessInfo_v1_t *infos)
{
    return running_processes(device, infoCount, infos, sizeof(nvmlProcessInfo_v1_t));
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                                 nvmlProcessInfo_t *infos)
{
    return running_processes(device, infoCount, infos, sizeof(nvmlProcessInfo_t));
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                                 nvmlProcessInfo_t *infos)
{
    return running_processes(device, infoCount, infos, sizeof(nvmlProcessInfo_t));
}

/* ---- links the simulated devices do not have ---- */

static nvmlReturn_t unsupported(nvmlDevice_t device)
{
    nvmlReturn_t r = check(device);
    return r != NVML_SUCCESS ? r : NVML_ERROR_NOT_SUPPORTED;
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t device, unsigned int link, int *type)
{
    (void)link;
    (void)type;
    return unsupported(device);
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link, void *pci)
{
    (void)link;
    (void)pci;
    return unsupported(device);
}

/* The fabric probe a Hopper part without NVSwitch answers: success, state
 * NVML_GPU_FABRIC_STATE_NOT_SUPPORTED (0), no clique, no cluster.  The
 * struct's size is in its version word (size | version << 24); every byte
 * after that word is zero in this answer. */
NVML_EXPORT nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t device, void *gpuFabricInfo)
{
    nvmlReturn_t r = check(device);
    if (r != NVML_SUCCESS)
        return r;
    unsigned version;
    if (!gpuFabricInfo)
        return NVML_ERROR_INVALID_ARGUMENT;
    memcpy(&version, gpuFabricInfo, sizeof version);
    size_t size = version & 0xFFFFFFu;
    if (size < 2 * sizeof version || size > 256)
        return NVML_ERROR_INVALID_ARGUMENT;
    memset((char *)gpuFabricInfo + sizeof version, 0, size - sizeof version);
    return NVML_SUCCESS;
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t device1, nvmlDevice_t device2, int p2pIndex,
                                                int *p2pStatus)
{
    (void)p2pIndex;
    nvmlReturn_t r = check(device1);
    if (r == NVML_SUCCESS)
        r = check(device2);
    if (r == NVML_SUCCESS && !p2pStatus)
        r = NVML_ERROR_INVALID_ARGUMENT;
    if (r == NVML_SUCCESS)
        *p2pStatus = NVML_P2P_STATUS_NOT_SUPPORTED;
    return r;
}
