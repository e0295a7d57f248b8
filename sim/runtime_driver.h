/*
 * runtime_driver.h — the driver entry points the simulated runtime fetches
 * (runtime_driver.c) and the table that holds them.
 *
 * The function-pointer types come from the prototypes via __typeof__, which
 * creates no symbol reference (tests check `nm --undefined-only` for cu[A-Z]).
 */
#ifndef TL_SIM_RUNTIME_DRIVER_H
#define TL_SIM_RUNTIME_DRIVER_H

#include "runtime_errors.h"

#undef cuStreamDestroy /* cuda.h maps it to _v2; we name the _v2 field directly */

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
    X(cuIpcGetEventHandle, "cuIpcGetEventHandle", 4010, 0)        \
    X(cuIpcOpenEventHandle, "cuIpcOpenEventHandle", 4010, 0)      \
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
    X(cuGraphGetNodes, "cuGraphGetNodes", 10000, 0)               \
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

extern struct simrt_driver simrt_drv;
cudaError_t simrt_load(void);       /* once per process; then its result */

#endif /* TL_SIM_RUNTIME_DRIVER_H */
