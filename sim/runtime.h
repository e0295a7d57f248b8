/*
 * runtime.h — internals of the simulated CUDA runtime (libcudart.so.13 and
 * libcudart_static.a).
 *
 *   runtime_driver.c  finding the driver exactly as NVIDIA's runtime does
 *   runtime.c         the allocation API, each call forwarded through the table
 *   runtime_device.c  device properties, attributes, peer access
 *   runtime_stream.c  streams, events, host functions, capture, graphs
 *   runtime_memcpy.c  copies, memsets, pointer attributes
 *   runtime_exec.c    device code (registration, launches), the last error
 *   runtime_errors.c  CUresult -> cudaError_t, cudaGetErrorString/Name
 *
 * The runtime never references a driver symbol: it dlopens libcuda.so.1,
 * dlsyms cuGetProcAddress_v2 and fetches every entry point through it.  The
 * function-pointer types below come from the prototypes via __typeof__, which
 * creates no symbol reference (tests check `nm --undefined-only` for cu[A-Z]).
 */
#ifndef TL_SIM_RUNTIME_H
#define TL_SIM_RUNTIME_H

#include "cudart_compat.h"
#include "cuda_extra.h"

#undef cuStreamDestroy /* cuda.h maps it to _v2; we name the _v2 field directly */

#define SIMRT_EXPORT __attribute__((visibility("default")))

/* Not in cudart_compat.h (and, without cuda.h, not declared at all). */
#define SIMRT_ERROR_CALL_REQUIRES_NEWER_DRIVER ((cudaError_t)36)
#define SIMRT_ERROR_STUB_LIBRARY ((cudaError_t)34)
#define SIMRT_ERROR_DEVICE_UNINITIALIZED ((cudaError_t)201)
#define SIMRT_ERROR_MAP_BUFFER_OBJECT_FAILED ((cudaError_t)205)
#define SIMRT_ERROR_ALREADY_MAPPED ((cudaError_t)208)
#define SIMRT_ERROR_NOT_MAPPED ((cudaError_t)211)
#define SIMRT_ERROR_ILLEGAL_STATE ((cudaError_t)401)
#define SIMRT_ERROR_HOST_MEMORY_ALREADY_REGISTERED ((cudaError_t)712)
#define SIMRT_ERROR_HOST_MEMORY_NOT_REGISTERED ((cudaError_t)713)
#define SIMRT_ERROR_INVALID_SYMBOL ((cudaError_t)13)
#define SIMRT_ERROR_INVALID_MEMCPY_DIRECTION ((cudaError_t)21)
#define SIMRT_ERROR_INVALID_DEVICE_FUNCTION ((cudaError_t)98)
#define SIMRT_ERROR_PEER_ACCESS_UNSUPPORTED ((cudaError_t)217)
#define SIMRT_ERROR_NOT_READY ((cudaError_t)600)
#define SIMRT_ERROR_PEER_ACCESS_NOT_ENABLED ((cudaError_t)705)

#ifndef TL_HAVE_CUDA_H
/* Mirrors of cuda_runtime_api.h / driver_types.h (CUDA 13.0) for the calls
 * beyond the allocation API: devices, streams, events, copies, launches. */
typedef struct CUevent_st *cudaEvent_t;
typedef struct CUuuid_st cudaUUID_t;
typedef struct CUgraphNode_st *cudaGraphNode_t;
typedef CUgraphEdgeData cudaGraphEdgeData;
typedef struct CUuserObject_st *cudaUserObject_t;
typedef struct CUlib_st *cudaLibrary_t;
typedef struct CUkern_st *cudaKernel_t;
typedef unsigned long long cudaGraphConditionalHandle;
typedef struct cudaLaunchConfig_st cudaLaunchConfig_t;
struct cudaFuncAttributes;
struct cudaGraphNodeParams;
struct cudaMemAccessDesc;
typedef struct CUipcEventHandle_st { char reserved[64]; } cudaIpcEventHandle_t;
typedef void (*cudaHostFn_t)(void *userData);
typedef void (*cudaStreamCallback_t)(cudaStream_t stream, cudaError_t status, void *userData);
/* Enums whose values the runtime only passes on: their first members. */
enum cudaJitOption { cudaJitMaxRegisters = 0 };
enum cudaLibraryOption { cudaLibraryHostUniversalFunctionAndDataTable = 0 };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
enum cudaDeviceAttr { cudaDevAttrMaxThreadsPerBlock = 1 };
enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0, cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3, cudaMemcpyDefault = 4
};
enum cudaMemoryType {
    cudaMemoryTypeUnregistered = 0, cudaMemoryTypeHost = 1, cudaMemoryTypeDevice = 2, cudaMemoryTypeManaged = 3
};
struct cudaPointerAttributes {
    enum cudaMemoryType type;
    int device;
    void *devicePointer;
    void *hostPointer;
    long reserved[8];
};
typedef struct dim3 { unsigned int x, y, z; } dim3;
typedef struct uint3 { unsigned int x, y, z; } uint3;
struct cudaDeviceProp {
    char name[256];
    cudaUUID_t uuid;
    char luid[8];
    unsigned int luidDeviceNodeMask;
    size_t totalGlobalMem, sharedMemPerBlock;
    int regsPerBlock, warpSize;
    size_t memPitch;
    int maxThreadsPerBlock, maxThreadsDim[3], maxGridSize[3];
    size_t totalConstMem;
    int major, minor;
    size_t textureAlignment, texturePitchAlignment;
    int multiProcessorCount, integrated, canMapHostMemory;
    int maxTexture1D, maxTexture1DMipmap, maxTexture2D[2], maxTexture2DMipmap[2], maxTexture2DLinear[3];
    int maxTexture2DGather[2], maxTexture3D[3], maxTexture3DAlt[3], maxTextureCubemap;
    int maxTexture1DLayered[2], maxTexture2DLayered[3], maxTextureCubemapLayered[2];
    int maxSurface1D, maxSurface2D[2], maxSurface3D[3], maxSurface1DLayered[2], maxSurface2DLayered[3];
    int maxSurfaceCubemap, maxSurfaceCubemapLayered[2];
    size_t surfaceAlignment;
    int concurrentKernels, ECCEnabled, pciBusID, pciDeviceID, pciDomainID, tccDriver, asyncEngineCount;
    int unifiedAddressing, memoryBusWidth, l2CacheSize, persistingL2CacheMaxSize, maxThreadsPerMultiProcessor;
    int streamPrioritiesSupported, globalL1CacheSupported, localL1CacheSupported;
    size_t sharedMemPerMultiprocessor;
    int regsPerMultiprocessor, managedMemory, isMultiGpuBoard, multiGpuBoardGroupID, hostNativeAtomicSupported;
    int pageableMemoryAccess, concurrentManagedAccess, computePreemptionSupported;
    int canUseHostPointerForRegisteredMem, cooperativeLaunch;
    size_t sharedMemPerBlockOptin;
    int pageableMemoryAccessUsesHostPageTables, directManagedMemAccessFromHost, maxBlocksPerMultiProcessor;
    int accessPolicyMaxWindowSize;
    size_t reservedSharedMemPerBlock;
    int hostRegisterSupported, sparseCudaArraySupported, hostRegisterReadOnlySupported;
    int timelineSemaphoreInteropSupported, memoryPoolsSupported, gpuDirectRDMASupported;
    unsigned int gpuDirectRDMAFlushWritesOptions;
    int gpuDirectRDMAWritesOrdering;
    unsigned int memoryPoolSupportedHandleTypes;
    int deferredMappingCudaArraySupported, ipcEventSupported, clusterLaunch, unifiedFunctionPointers;
    int deviceNumaConfig, deviceNumaId, mpsEnabled, hostNumaId;
    unsigned int gpuPciDeviceID, gpuPciSubsystemID;
    int hostNumaMultinodeIpcSupported;
    int reserved[56];
};
#endif
_Static_assert(sizeof(struct cudaDeviceProp) == 1008, "cudaDeviceProp layout differs from driver_types.h (CUDA 13.0)");
_Static_assert(sizeof(struct cudaPointerAttributes) == 88, "cudaPointerAttributes layout differs from driver_types.h");

/* Every driver entry point the runtime uses:
 *   X(field/prototype, base name asked for, CUDA version, flags)
 * The version is the one whose ABI the runtime calls (cudaTypedefs.h's
 * PFN_<base>_v<version>), as the real runtime asks; flags 2 fetch the
 * per-thread-default-stream variant for the runtime's _ptsz exports. */
#define SIMRT_DRIVER_ENTRIES(X)                                   \
    X(cuInit, "cuInit", 2000, 0)                                  \
    X(cuDriverGetVersion, "cuDriverGetVersion", 2020, 0)          \
    X(cuDeviceGet, "cuDeviceGet", 2000, 0)                        \
    X(cuDeviceGetCount, "cuDeviceGetCount", 2000, 0)              \
    X(cuDeviceGetAttribute, "cuDeviceGetAttribute", 2000, 0)      \
    X(cuDeviceGetName, "cuDeviceGetName", 2000, 0)                \
    X(cuDeviceTotalMem_v2, "cuDeviceTotalMem", 3020, 0)           \
    X(cuDeviceGetUuid_v2, "cuDeviceGetUuid", 11040, 0)            \
    X(cuDeviceGetPCIBusId, "cuDeviceGetPCIBusId", 4010, 0)        \
    X(cuCtxGetStreamPriorityRange, "cuCtxGetStreamPriorityRange", 5050, 0) \
    X(cuStreamCreateWithPriority, "cuStreamCreateWithPriority", 5050, 0) \
    X(cuStreamQuery, "cuStreamQuery", 2000, 0)                    \
    X(cuStreamGetPriority, "cuStreamGetPriority", 5050, 0)        \
    X(cuStreamWaitEvent, "cuStreamWaitEvent", 3020, 0)            \
    X(cuEventCreate, "cuEventCreate", 2000, 0)                    \
    X(cuEventDestroy_v2, "cuEventDestroy", 4000, 0)               \
    X(cuEventRecord, "cuEventRecord", 2000, 0)                    \
    X(cuEventRecordWithFlags, "cuEventRecordWithFlags", 11010, 0) \
    X(cuEventQuery, "cuEventQuery", 2000, 0)                      \
    X(cuEventSynchronize, "cuEventSynchronize", 2000, 0)          \
    X(cuEventElapsedTime_v2, "cuEventElapsedTime", 12080, 0)      \
    X(cuMemcpy, "cuMemcpy", 4000, 0)                              \
    X(cuMemcpyAsync, "cuMemcpyAsync", 4000, 0)                    \
    X(cuMemcpyPeerAsync, "cuMemcpyPeerAsync", 4000, 0)            \
    X(cuMemsetD8_v2, "cuMemsetD8", 3020, 0)                       \
    X(cuMemsetD8Async, "cuMemsetD8Async", 3020, 0)                \
    X(cuPointerGetAttributes, "cuPointerGetAttributes", 7000, 0)  \
    X(cuModuleLoadData, "cuModuleLoadData", 2000, 0)              \
    X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", 7000, 0) \
    X(cuDevicePrimaryCtxReset_v2, "cuDevicePrimaryCtxReset", 11000, 0) \
    X(cuCtxGetCurrent, "cuCtxGetCurrent", 4000, 0)                \
    X(cuCtxSetCurrent, "cuCtxSetCurrent", 4000, 0)                \
    X(cuCtxSynchronize, "cuCtxSynchronize", 2000, 0)              \
    X(cuStreamCreate, "cuStreamCreate", 2000, 0)                  \
    X(cuStreamDestroy_v2, "cuStreamDestroy", 4000, 0)             \
    X(cuStreamSynchronize, "cuStreamSynchronize", 2000, 0)        \
    X(cuMemGetInfo_v2, "cuMemGetInfo", 3020, 0)                   \
    X(cuMemAlloc_v2, "cuMemAlloc", 3020, 0)                       \
    X(cuMemAllocPitch_v2, "cuMemAllocPitch", 3020, 0)             \
    X(cuMemFree_v2, "cuMemFree", 3020, 0)                         \
    X(cuMemAllocHost_v2, "cuMemAllocHost", 3020, 0)               \
    X(cuMemHostAlloc, "cuMemHostAlloc", 2020, 0)                  \
    X(cuMemFreeHost, "cuMemFreeHost", 2000, 0)                    \
    X(cuMemHostRegister_v2, "cuMemHostRegister", 6050, 0)         \
    X(cuMemHostUnregister, "cuMemHostUnregister", 4000, 0)        \
    X(cuIpcGetMemHandle, "cuIpcGetMemHandle", 4010, 0)            \
    X(cuIpcOpenMemHandle_v2, "cuIpcOpenMemHandle", 11000, 0)      \
    X(cuIpcCloseMemHandle, "cuIpcCloseMemHandle", 4010, 0)        \
    X(cuMemAllocManaged, "cuMemAllocManaged", 6000, 0)            \
    X(cuArray3DCreate_v2, "cuArray3DCreate", 3020, 0)             \
    X(cuArrayDestroy, "cuArrayDestroy", 2000, 0)                  \
    X(cuArrayGetMemoryRequirements, "cuArrayGetMemoryRequirements", 11060, 0) \
    X(cuMipmappedArrayCreate, "cuMipmappedArrayCreate", 5000, 0)  \
    X(cuMipmappedArrayDestroy, "cuMipmappedArrayDestroy", 5000, 0) \
    X(cuMipmappedArrayGetMemoryRequirements, "cuMipmappedArrayGetMemoryRequirements", 11060, 0) \
    X(cuMemAllocAsync, "cuMemAllocAsync", 11020, 0)               \
    X(cuMemAllocAsync_ptsz, "cuMemAllocAsync", 11020, 2)          \
    X(cuMemFreeAsync, "cuMemFreeAsync", 11020, 0)                 \
    X(cuMemFreeAsync_ptsz, "cuMemFreeAsync", 11020, 2)            \
    X(cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync", 11020, 0) \
    X(cuMemAllocFromPoolAsync_ptsz, "cuMemAllocFromPoolAsync", 11020, 2) \
    X(cuMemPoolCreate, "cuMemPoolCreate", 11020, 0)               \
    X(cuMemPoolDestroy, "cuMemPoolDestroy", 11020, 0)             \
    X(cuMemPoolTrimTo, "cuMemPoolTrimTo", 11020, 0)               \
    X(cuMemPoolSetAttribute, "cuMemPoolSetAttribute", 11020, 0)   \
    X(cuMemPoolGetAttribute, "cuMemPoolGetAttribute", 11020, 0)   \
    X(cuDeviceGetDefaultMemPool, "cuDeviceGetDefaultMemPool", 11020, 0) \
    X(cuDeviceGetMemPool, "cuDeviceGetMemPool", 11020, 0)         \
    X(cuDeviceSetMemPool, "cuDeviceSetMemPool", 11020, 0)         \
    X(cuStreamBeginCapture_v2, "cuStreamBeginCapture", 10010, 0)  \
    X(cuStreamBeginCapture_v2_ptsz, "cuStreamBeginCapture", 10010, 2) \
    X(cuStreamEndCapture, "cuStreamEndCapture", 10000, 0)         \
    X(cuStreamEndCapture_ptsz, "cuStreamEndCapture", 10000, 2)    \
    X(cuStreamIsCapturing, "cuStreamIsCapturing", 10000, 0)       \
    X(cuStreamIsCapturing_ptsz, "cuStreamIsCapturing", 10000, 2)  \
    X(cuStreamGetCaptureInfo_v3, "cuStreamGetCaptureInfo", 12030, 0) \
    X(cuThreadExchangeStreamCaptureMode, "cuThreadExchangeStreamCaptureMode", 10010, 0) \
    X(cuLibraryLoadData, "cuLibraryLoadData", 12000, 0)       \
    X(cuLibraryLoadFromFile, "cuLibraryLoadFromFile", 12000, 0) \
    X(cuStreamBeginCaptureToGraph, "cuStreamBeginCaptureToGraph", 12030, 0) \
    X(cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags", 11040, 0) \
    X(cuGraphLaunch, "cuGraphLaunch", 10000, 0)                   \
    X(cuGraphLaunch_ptsz, "cuGraphLaunch", 10000, 2)              \
    X(cuGraphExecDestroy, "cuGraphExecDestroy", 10000, 0)         \
    X(cuGraphDestroy, "cuGraphDestroy", 10000, 0)                 \
    X(cuDeviceGraphMemTrim, "cuDeviceGraphMemTrim", 11040, 0)     \
    X(cuDeviceGetGraphMemAttribute, "cuDeviceGetGraphMemAttribute", 11040, 0) \
    X(cuDeviceSetGraphMemAttribute, "cuDeviceSetGraphMemAttribute", 11040, 0)

struct simrt_driver {
    /* cuGetProcAddress as fetched through itself at 12000: used for every
     * other lookup and for cudaGetDriverEntryPoint*. */
    __typeof__(&cuGetProcAddress_v2) cuGetProcAddress_v2;
#define SIMRT_FIELD(proto, name, version, flags) __typeof__(&proto) proto;
    SIMRT_DRIVER_ENTRIES(SIMRT_FIELD)
#undef SIMRT_FIELD
};

/* runtime_driver.c */
extern struct simrt_driver simrt_drv;
cudaError_t simrt_load(void);       /* once per process; then its result */

/* Calls a fetched driver entry point, or fails as the real runtime does when
 * the installed driver lacks it. */
#define DRV(fn, ...) (simrt_drv.fn ? simrt_result(simrt_drv.fn(__VA_ARGS__)) : SIMRT_ERROR_CALL_REQUIRES_NEWER_DRIVER)

/* runtime.c */
/* The prologue of every call that needs a context: loads the driver and
 * makes the thread's device's primary context current. */
cudaError_t simrt_enter(void);
/* The primary context of a device, retained on first use. */
cudaError_t simrt_primary(int device, CUcontext *out);
int simrt_current_device(void);
/* Every runtime call returns through this: a failure becomes the calling
 * thread's last error (cudaGetLastError reads and clears it), as in
 * NVIDIA's runtime, which is how a failed kernel launch reaches a program
 * that checks after the launch (PyTorch's C10_CUDA_KERNEL_LAUNCH_CHECK). */
cudaError_t simrt_status(cudaError_t e);

/* runtime_errors.c */
cudaError_t simrt_result(CUresult r);

#endif /* TL_SIM_RUNTIME_H */
