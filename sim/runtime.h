/*
 * runtime.h — internals of the simulated CUDA runtime (libcudart.so.13 and
 * libcudart_static.a).
 *
 *   runtime_driver.c  finding the driver exactly as NVIDIA's runtime does
 *   runtime.c         the cuda* API, each call forwarded through the table
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

/* runtime_errors.c */
cudaError_t simrt_result(CUresult r);

#endif /* TL_SIM_RUNTIME_H */
