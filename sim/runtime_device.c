/*
 * runtime_device.c — device queries of the simulated runtime: properties
 * (what PyTorch's torch.cuda.get_device_properties shows), attributes,
 * stream priorities, PCI bus id, peer access.
 *
 * Everything comes from the driver (cuDeviceGetAttribute, cuDeviceGetName,
 * cuDeviceTotalMem, cuDeviceGetUuid), as NVIDIA's runtime builds
 * cudaDeviceProp, so the two APIs never disagree.
 */
#include <stddef.h>
#include <string.h>

#include "runtime.h"

/* Checks an ordinal against the driver's device count. */
static cudaError_t valid_device(int device)
{
    cudaError_t e = simrt_load();
    int count = 0;
    if (e == cudaSuccess)
        e = DRV(cuDeviceGetCount, &count);
    if (e == cudaSuccess && (device < 0 || device >= count))
        e = cudaErrorInvalidDevice;
    return e;
}

/* cudaDeviceProp fields and the driver attribute each one reads
 * (CUdevice_attribute numbers, cuda.h); size_t fields are marked. */
#define INT_FIELD(f, a) { offsetof(struct cudaDeviceProp, f), a, 0 }
#define SIZE_FIELD(f, a) { offsetof(struct cudaDeviceProp, f), a, 1 }
static const struct {
    size_t offset;
    int attribute;
    int is_size;
} fields[] = {
    SIZE_FIELD(sharedMemPerBlock, 8),
    INT_FIELD(regsPerBlock, 12),
    INT_FIELD(warpSize, 10),
    SIZE_FIELD(memPitch, 11),
    INT_FIELD(maxThreadsPerBlock, 1),
    INT_FIELD(maxThreadsDim[0], 2),
    INT_FIELD(maxThreadsDim[1], 3),
    INT_FIELD(maxThreadsDim[2], 4),
    INT_FIELD(maxGridSize[0], 5),
    INT_FIELD(maxGridSize[1], 6),
    INT_FIELD(maxGridSize[2], 7),
    SIZE_FIELD(totalConstMem, 9),
    INT_FIELD(major, 75),
    INT_FIELD(minor, 76),
    SIZE_FIELD(textureAlignment, 14),
    SIZE_FIELD(texturePitchAlignment, 51),
    INT_FIELD(multiProcessorCount, 16),
    INT_FIELD(integrated, 18),
    INT_FIELD(canMapHostMemory, 19),
    SIZE_FIELD(surfaceAlignment, 30),
    INT_FIELD(concurrentKernels, 31),
    INT_FIELD(ECCEnabled, 32),
    INT_FIELD(pciBusID, 33),
    INT_FIELD(pciDeviceID, 34),
    INT_FIELD(pciDomainID, 50),
    INT_FIELD(tccDriver, 35),
    INT_FIELD(asyncEngineCount, 40),
    INT_FIELD(unifiedAddressing, 41),
    INT_FIELD(memoryBusWidth, 37),
    INT_FIELD(l2CacheSize, 38),
    INT_FIELD(persistingL2CacheMaxSize, 108),
    INT_FIELD(maxThreadsPerMultiProcessor, 39),
    INT_FIELD(streamPrioritiesSupported, 78),
    INT_FIELD(globalL1CacheSupported, 79),
    INT_FIELD(localL1CacheSupported, 80),
    SIZE_FIELD(sharedMemPerMultiprocessor, 81),
    INT_FIELD(regsPerMultiprocessor, 82),
    INT_FIELD(managedMemory, 83),
    INT_FIELD(isMultiGpuBoard, 84),
    INT_FIELD(multiGpuBoardGroupID, 85),
    INT_FIELD(hostNativeAtomicSupported, 86),
    INT_FIELD(pageableMemoryAccess, 88),
    INT_FIELD(concurrentManagedAccess, 89),
    INT_FIELD(computePreemptionSupported, 90),
    INT_FIELD(canUseHostPointerForRegisteredMem, 91),
    INT_FIELD(cooperativeLaunch, 95),
    SIZE_FIELD(sharedMemPerBlockOptin, 97),
    INT_FIELD(pageableMemoryAccessUsesHostPageTables, 100),
    INT_FIELD(directManagedMemAccessFromHost, 101),
    INT_FIELD(maxBlocksPerMultiProcessor, 106),
    INT_FIELD(accessPolicyMaxWindowSize, 109),
    SIZE_FIELD(reservedSharedMemPerBlock, 111),
    INT_FIELD(hostRegisterSupported, 99),
    INT_FIELD(sparseCudaArraySupported, 112),
    INT_FIELD(hostRegisterReadOnlySupported, 113),
    INT_FIELD(timelineSemaphoreInteropSupported, 114),
    INT_FIELD(memoryPoolsSupported, 115),
    INT_FIELD(gpuDirectRDMASupported, 116),
    INT_FIELD(gpuDirectRDMAFlushWritesOptions, 117),
    INT_FIELD(gpuDirectRDMAWritesOrdering, 118),
    INT_FIELD(memoryPoolSupportedHandleTypes, 119),
    INT_FIELD(deferredMappingCudaArraySupported, 121),
    INT_FIELD(ipcEventSupported, 125),
    INT_FIELD(clusterLaunch, 120),
    INT_FIELD(unifiedFunctionPointers, 129),
    INT_FIELD(deviceNumaConfig, 130),
    INT_FIELD(deviceNumaId, 131),
    INT_FIELD(mpsEnabled, 133),
    INT_FIELD(hostNumaId, 134),
    INT_FIELD(gpuPciSubsystemID, 140),
    INT_FIELD(hostNumaMultinodeIpcSupported, 143),
};

SIMRT_EXPORT cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device)
{
    if (!prop)
        return simrt_status(cudaErrorInvalidValue);
    cudaError_t e = valid_device(device);
    if (e != cudaSuccess)
        return simrt_status(e);
    struct cudaDeviceProp p;
    memset(&p, 0, sizeof p);
    e = DRV(cuDeviceGetName, p.name, (int)sizeof p.name, device);
    if (e == cudaSuccess)
        e = DRV(cuDeviceGetUuid_v2, (CUuuid *)&p.uuid, device);
    if (e == cudaSuccess)
        e = DRV(cuDeviceTotalMem_v2, &p.totalGlobalMem, device);
    for (size_t i = 0; e == cudaSuccess && i < sizeof fields / sizeof fields[0]; i++) {
        int v = 0;
        e = DRV(cuDeviceGetAttribute, &v, (CUdevice_attribute)fields[i].attribute, device);
        char *at = (char *)&p + fields[i].offset;
        if (fields[i].is_size) {
            size_t wide = (size_t)(unsigned)v;
            memcpy(at, &wide, sizeof wide);
        } else {
            memcpy(at, &v, sizeof v);
        }
    }
    if (e == cudaSuccess)
        *prop = p;
    return simrt_status(e);
}

/* cudaDeviceAttr values are the driver's CUdevice_attribute values. */
SIMRT_EXPORT cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device)
{
    if (!value)
        return simrt_status(cudaErrorInvalidValue);
    cudaError_t e = valid_device(device);
    return simrt_status(e != cudaSuccess ? e : DRV(cuDeviceGetAttribute, value, (CUdevice_attribute)attr, device));
}

SIMRT_EXPORT cudaError_t cudaDeviceGetStreamPriorityRange(int *leastPriority, int *greatestPriority)
{
    cudaError_t e = simrt_enter();
    return simrt_status(e != cudaSuccess ? e : DRV(cuCtxGetStreamPriorityRange, leastPriority, greatestPriority));
}

SIMRT_EXPORT cudaError_t cudaDeviceGetPCIBusId(char *pciBusId, int len, int device)
{
    cudaError_t e = valid_device(device);
    return simrt_status(e != cudaSuccess ? e : DRV(cuDeviceGetPCIBusId, pciBusId, len, device));
}

/* The simulated devices have no peer access (each is its own address range;
 * copies between them go through the host view, cudaMemcpyPeer): every
 * pair answers 0 and enabling is cudaErrorPeerAccessUnsupported, what a
 * real system without NVLink or P2P-capable PCIe answers. */
SIMRT_EXPORT cudaError_t cudaDeviceCanAccessPeer(int *canAccessPeer, int device, int peerDevice)
{
    if (!canAccessPeer)
        return simrt_status(cudaErrorInvalidValue);
    cudaError_t e = valid_device(device);
    if (e == cudaSuccess)
        e = valid_device(peerDevice);
    if (e == cudaSuccess)
        *canAccessPeer = 0;
    return simrt_status(e);
}

SIMRT_EXPORT cudaError_t cudaDeviceEnablePeerAccess(int peerDevice, unsigned int flags)
{
    cudaError_t e = simrt_enter();
    if (e == cudaSuccess && flags != 0)
        e = cudaErrorInvalidValue;
    if (e == cudaSuccess)
        e = valid_device(peerDevice);
    if (e == cudaSuccess)
        e = peerDevice == simrt_current_device() ? cudaErrorInvalidDevice : SIMRT_ERROR_PEER_ACCESS_UNSUPPORTED;
    return simrt_status(e);
}
