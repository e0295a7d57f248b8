/*
 * driver_procaddr.c — cuGetProcAddress: how runtimes really reach the driver.
 *
 * NVIDIA's runtime dlsyms only cuGetProcAddress_v2 and asks it for every other
 * entry point by base name ("cuMemAlloc"), a CUDA version (1000*major +
 * 10*minor) and flags.  The version picks the ABI: one base name has several
 * exported variants (cuMemAlloc: 32-bit v1 before 3.2, cuMemAlloc_v2 since),
 * and handing out the wrong one breaks the caller.  The table below lists, per
 * base name, each exported variant with the first CUDA version whose headers
 * use it (the PFN_<name>_v<version> typedefs of cudaTypedefs.h); the lookup
 * returns the newest variant whose version is <= the one asked for.
 *
 * The pointer returned is the address of exactly that exported symbol in this
 * library, as dlsym(handle, "cuMemAlloc_v2") gives it: libcuda is linked with
 * -Bsymbolic-functions, so an LD_PRELOAD library that defines cuMemAlloc_v2
 * does not change what cuGetProcAddress returns — as with the real driver,
 * interposers must hook cuGetProcAddress itself.
 *
 * Semantics (cuda.h, CUDA 13.0):
 *  - cuGetProcAddress_v2: unknown symbol -> CUDA_SUCCESS, *pfn = NULL,
 *    status SYMBOL_NOT_FOUND; known but no variant old enough ->
 *    CUDA_SUCCESS, *pfn = NULL, status VERSION_NOT_SUFFICIENT; cudaVersion
 *    above the driver's version, NULL symbol/pfn, or flags other than
 *    DEFAULT / LEGACY_STREAM / PER_THREAD_DEFAULT_STREAM -> INVALID_VALUE.
 *  - the 4-argument cuGetProcAddress of CUDA 11.3-11.8 has no status and
 *    reports both misses as CUDA_ERROR_NOT_FOUND, as it did then.
 *  - PER_THREAD_DEFAULT_STREAM selects the _ptsz variant where one exists,
 *    else the legacy one; DEFAULT and LEGACY_STREAM select the legacy one
 *    (the driver is not compiled for per-thread default streams).
 *
 * Deviations: the legacy 32-bit variants (CUdeviceptr_v1, e.g. cuMemAlloc
 * before 3020, cuCtxCreate before 3020, cuDeviceTotalMem before 3020) are not
 * provided, so such requests get VERSION_NOT_SUFFICIENT; only cuMemAllocAsync,
 * cuMemFreeAsync, cuMemAllocFromPoolAsync and the capture and graph-launch
 * functions have _ptsz variants here (the
 * real driver also has cuStreamSynchronize_ptsz and many copy/launch ones).
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "simcuda.h"

struct proc_entry {
    const char *base;
    const char *variant;            /* exported symbol name */
    int version;                    /* first CUDA version using this variant */
    int ptsz;                       /* per-thread-default-stream variant */
    void *fn;
};

#define V(base, variant, version) { #base, #variant, version, 0, (void *)variant }
#define PTSZ(base, variant, version) { #base, #variant, version, 1, (void *)variant }

static const struct proc_entry table[] = {
    V(cuInit, cuInit, 2000),
    V(cuDriverGetVersion, cuDriverGetVersion, 2020),
    V(cuGetErrorName, cuGetErrorName, 6000),
    V(cuGetErrorString, cuGetErrorString, 6000),
    V(cuGetProcAddress, cuGetProcAddress, 11030),
    V(cuGetProcAddress, cuGetProcAddress_v2, 12000),

    V(cuDeviceGet, cuDeviceGet, 2000),
    V(cuDeviceGetCount, cuDeviceGetCount, 2000),
    V(cuDeviceGetName, cuDeviceGetName, 2000),
    V(cuDeviceTotalMem, cuDeviceTotalMem_v2, 3020),
    V(cuDeviceGetAttribute, cuDeviceGetAttribute, 2000),
    V(cuDeviceGetUuid, cuDeviceGetUuid, 9020),
    V(cuDeviceGetUuid, cuDeviceGetUuid_v2, 11040),
    V(cuDeviceGetPCIBusId, cuDeviceGetPCIBusId, 4010),

    V(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain, 7000),
    V(cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease, 7000),
    V(cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease_v2, 11000),
    V(cuDevicePrimaryCtxReset, cuDevicePrimaryCtxReset, 7000),
    V(cuDevicePrimaryCtxReset, cuDevicePrimaryCtxReset_v2, 11000),
    V(cuDevicePrimaryCtxGetState, cuDevicePrimaryCtxGetState, 7000),
    V(cuDevicePrimaryCtxSetFlags, cuDevicePrimaryCtxSetFlags_v2, 11000),
    V(cuCtxCreate, cuCtxCreate_v2, 3020),
    V(cuCtxCreate, cuCtxCreate_v3, 11040),
    V(cuCtxCreate, cuCtxCreate_v4, 12050),
    V(cuCtxDestroy, cuCtxDestroy, 2000),
    V(cuCtxDestroy, cuCtxDestroy_v2, 4000),
    V(cuCtxGetCurrent, cuCtxGetCurrent, 4000),
    V(cuCtxSetCurrent, cuCtxSetCurrent, 4000),
    V(cuCtxGetDevice, cuCtxGetDevice, 2000),
    V(cuCtxGetDevice, cuCtxGetDevice_v2, 13000),
    V(cuCtxSynchronize, cuCtxSynchronize, 2000),
    V(cuCtxSynchronize, cuCtxSynchronize_v2, 13000),
    V(cuCtxPushCurrent, cuCtxPushCurrent_v2, 4000),
    V(cuCtxPopCurrent, cuCtxPopCurrent_v2, 4000),
    V(cuCtxGetApiVersion, cuCtxGetApiVersion, 3020),
    V(cuCtxGetId, cuCtxGetId, 12000),
    V(cuCtxGetFlags, cuCtxGetFlags, 7000),
    V(cuCtxSetFlags, cuCtxSetFlags, 12010),
    V(cuCtxGetStreamPriorityRange, cuCtxGetStreamPriorityRange, 5050),

    V(cuStreamCreate, cuStreamCreate, 2000),
    V(cuStreamDestroy, cuStreamDestroy, 2000),
    V(cuStreamDestroy, cuStreamDestroy_v2, 4000),
    V(cuStreamSynchronize, cuStreamSynchronize, 2000),
    V(cuStreamCreateWithPriority, cuStreamCreateWithPriority, 5050),
    V(cuStreamQuery, cuStreamQuery, 2000),
    V(cuStreamGetPriority, cuStreamGetPriority, 5050),
    V(cuStreamGetFlags, cuStreamGetFlags, 5050),
    V(cuStreamGetCtx, cuStreamGetCtx, 9020),
    V(cuStreamGetId, cuStreamGetId, 12000),
    V(cuStreamWaitEvent, cuStreamWaitEvent, 3020),
    V(cuStreamBeginCapture, cuStreamBeginCapture_v2, 10010),
    PTSZ(cuStreamBeginCapture, cuStreamBeginCapture_v2_ptsz, 10010),
    V(cuStreamBeginCaptureToGraph, cuStreamBeginCaptureToGraph, 12030),
    PTSZ(cuStreamBeginCaptureToGraph, cuStreamBeginCaptureToGraph_ptsz, 12030),
    V(cuThreadExchangeStreamCaptureMode, cuThreadExchangeStreamCaptureMode, 10010),
    V(cuStreamEndCapture, cuStreamEndCapture, 10000),
    PTSZ(cuStreamEndCapture, cuStreamEndCapture_ptsz, 10000),
    V(cuStreamIsCapturing, cuStreamIsCapturing, 10000),
    PTSZ(cuStreamIsCapturing, cuStreamIsCapturing_ptsz, 10000),
    V(cuStreamGetCaptureInfo, cuStreamGetCaptureInfo_v2, 11030),
    PTSZ(cuStreamGetCaptureInfo, cuStreamGetCaptureInfo_v2_ptsz, 11030),
    V(cuStreamGetCaptureInfo, cuStreamGetCaptureInfo_v3, 12030),
    PTSZ(cuStreamGetCaptureInfo, cuStreamGetCaptureInfo_v3_ptsz, 12030),

    V(cuGraphCreate, cuGraphCreate, 10000),
    V(cuGraphDestroy, cuGraphDestroy, 10000),
    V(cuGraphGetNodes, cuGraphGetNodes, 10000),
    V(cuGraphAddMemAllocNode, cuGraphAddMemAllocNode, 11040),
    V(cuGraphAddMemFreeNode, cuGraphAddMemFreeNode, 11040),
    V(cuGraphInstantiate, cuGraphInstantiateWithFlags, 12000),
    V(cuGraphInstantiateWithFlags, cuGraphInstantiateWithFlags, 11040),
    V(cuGraphExecDestroy, cuGraphExecDestroy, 10000),
    V(cuGraphLaunch, cuGraphLaunch, 10000),
    PTSZ(cuGraphLaunch, cuGraphLaunch_ptsz, 10000),
    V(cuDeviceGraphMemTrim, cuDeviceGraphMemTrim, 11040),
    V(cuDeviceGetGraphMemAttribute, cuDeviceGetGraphMemAttribute, 11040),
    V(cuDeviceSetGraphMemAttribute, cuDeviceSetGraphMemAttribute, 11040),

    V(cuModuleLoad, cuModuleLoad, 2000),
    V(cuModuleLoadData, cuModuleLoadData, 2000),
    V(cuModuleLoadDataEx, cuModuleLoadDataEx, 2010),
    V(cuModuleLoadFatBinary, cuModuleLoadFatBinary, 2000),
    V(cuLibraryLoadData, cuLibraryLoadData, 12000),
    V(cuLibraryLoadFromFile, cuLibraryLoadFromFile, 12000),

    V(cuEventCreate, cuEventCreate, 2000),
    V(cuEventDestroy, cuEventDestroy_v2, 4000),
    V(cuEventRecord, cuEventRecord, 2000),
    V(cuEventRecordWithFlags, cuEventRecordWithFlags, 11010),
    V(cuEventQuery, cuEventQuery, 2000),
    V(cuEventSynchronize, cuEventSynchronize, 2000),
    V(cuEventElapsedTime, cuEventElapsedTime, 2000),
    V(cuEventElapsedTime, cuEventElapsedTime_v2, 12080),

    V(cuMemGetInfo, cuMemGetInfo_v2, 3020),
    V(cuMemAlloc, cuMemAlloc_v2, 3020),
    V(cuMemAllocPitch, cuMemAllocPitch_v2, 3020),
    V(cuMemFree, cuMemFree_v2, 3020),
    V(cuMemAllocHost, cuMemAllocHost_v2, 3020),
    V(cuMemHostAlloc, cuMemHostAlloc, 2020),
    V(cuMemFreeHost, cuMemFreeHost, 2000),
    V(cuMemAllocManaged, cuMemAllocManaged, 6000),
    V(cuMemHostRegister, cuMemHostRegister, 4000),
    V(cuMemHostRegister, cuMemHostRegister_v2, 6050),
    V(cuIpcGetMemHandle, cuIpcGetMemHandle, 4010),
    V(cuIpcOpenMemHandle, cuIpcOpenMemHandle, 4010),
    V(cuIpcOpenMemHandle, cuIpcOpenMemHandle_v2, 11000),
    V(cuIpcCloseMemHandle, cuIpcCloseMemHandle, 4010),
    V(cuIpcGetEventHandle, cuIpcGetEventHandle, 4010),
    V(cuIpcOpenEventHandle, cuIpcOpenEventHandle, 4010),
    V(cuMemHostUnregister, cuMemHostUnregister, 4000),
    V(cuMemHostGetDevicePointer, cuMemHostGetDevicePointer_v2, 3020),
    V(cuArrayCreate, cuArrayCreate_v2, 3020),
    V(cuArray3DCreate, cuArray3DCreate_v2, 3020),
    V(cuArrayDestroy, cuArrayDestroy, 2000),
    V(cuArrayGetMemoryRequirements, cuArrayGetMemoryRequirements, 11060),
    V(cuMipmappedArrayCreate, cuMipmappedArrayCreate, 5000),
    V(cuMipmappedArrayDestroy, cuMipmappedArrayDestroy, 5000),
    V(cuMipmappedArrayGetMemoryRequirements, cuMipmappedArrayGetMemoryRequirements, 11060),
    V(cuMemHostGetFlags, cuMemHostGetFlags, 2030),
    V(cuMemGetAddressRange, cuMemGetAddressRange_v2, 3020),
    V(cuPointerGetAttribute, cuPointerGetAttribute, 4000),
    V(cuPointerGetAttributes, cuPointerGetAttributes, 7000),
    V(cuMemAdvise, cuMemAdvise_v2, 12020),
    V(cuMemPrefetchAsync, cuMemPrefetchAsync_v2, 12020),

    V(cuMemcpy, cuMemcpy, 4000),
    V(cuMemcpyAsync, cuMemcpyAsync, 4000),
    V(cuMemcpyPeer, cuMemcpyPeer, 4000),
    V(cuMemcpyPeerAsync, cuMemcpyPeerAsync, 4000),
    V(cuMemcpyHtoD, cuMemcpyHtoD_v2, 3020),
    V(cuMemcpyDtoH, cuMemcpyDtoH_v2, 3020),
    V(cuMemcpyDtoD, cuMemcpyDtoD_v2, 3020),
    V(cuMemcpyHtoDAsync, cuMemcpyHtoDAsync_v2, 3020),
    V(cuMemcpyDtoHAsync, cuMemcpyDtoHAsync_v2, 3020),
    V(cuMemcpyDtoDAsync, cuMemcpyDtoDAsync_v2, 3020),
    V(cuStreamWriteValue32, cuStreamWriteValue32, 8000),
    V(cuStreamWriteValue32, cuStreamWriteValue32_v2, 11070),
    V(cuMemsetD8, cuMemsetD8_v2, 3020),
    V(cuMemsetD16, cuMemsetD16_v2, 3020),
    V(cuMemsetD32, cuMemsetD32_v2, 3020),
    V(cuMemsetD2D8, cuMemsetD2D8_v2, 3020),
    V(cuMemsetD2D16, cuMemsetD2D16_v2, 3020),
    V(cuMemsetD2D32, cuMemsetD2D32_v2, 3020),
    V(cuMemsetD8Async, cuMemsetD8Async, 3020),
    V(cuMemsetD16Async, cuMemsetD16Async, 3020),
    V(cuMemsetD32Async, cuMemsetD32Async, 3020),
    V(cuMemsetD2D8Async, cuMemsetD2D8Async, 3020),
    V(cuMemsetD2D16Async, cuMemsetD2D16Async, 3020),
    V(cuMemsetD2D32Async, cuMemsetD2D32Async, 3020),

    V(cuMemAllocAsync, cuMemAllocAsync, 11020),
    PTSZ(cuMemAllocAsync, cuMemAllocAsync_ptsz, 11020),
    V(cuMemFreeAsync, cuMemFreeAsync, 11020),
    PTSZ(cuMemFreeAsync, cuMemFreeAsync_ptsz, 11020),
    V(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync, 11020),
    PTSZ(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync_ptsz, 11020),
    V(cuMemPoolCreate, cuMemPoolCreate, 11020),
    V(cuMemPoolDestroy, cuMemPoolDestroy, 11020),
    V(cuMemPoolTrimTo, cuMemPoolTrimTo, 11020),
    V(cuMemPoolSetAttribute, cuMemPoolSetAttribute, 11020),
    V(cuMemPoolGetAttribute, cuMemPoolGetAttribute, 11020),
    V(cuDeviceGetDefaultMemPool, cuDeviceGetDefaultMemPool, 11020),
    V(cuDeviceGetMemPool, cuDeviceGetMemPool, 11020),
    V(cuDeviceSetMemPool, cuDeviceSetMemPool, 11020),

    V(cuMemAddressReserve, cuMemAddressReserve, 10020),
    V(cuMemAddressFree, cuMemAddressFree, 10020),
    V(cuMemCreate, cuMemCreate, 10020),
    V(cuMemRelease, cuMemRelease, 10020),
    V(cuMemMap, cuMemMap, 10020),
    V(cuMemUnmap, cuMemUnmap, 10020),
    V(cuMemSetAccess, cuMemSetAccess, 10020),
    V(cuMemRetainAllocationHandle, cuMemRetainAllocationHandle, 11000),
    V(cuMemGetAllocationGranularity, cuMemGetAllocationGranularity, 10020),
    V(cuMemExportToShareableHandle, cuMemExportToShareableHandle, 10020),
    V(cuMemImportFromShareableHandle, cuMemImportFromShareableHandle, 10020),
    V(cuMemGetAllocationPropertiesFromHandle, cuMemGetAllocationPropertiesFromHandle, 10020),
};

void sim_trace(const char *fmt, ...)
{
    sim_config_once();
    if (!sim.trace)
        return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "simcuda: %s\n", line); /* one write per line: no interleaving */
}

/* The variant of `symbol` for `version` and `flags`, or NULL with *status
 * saying why. */
static const struct proc_entry *lookup(const char *symbol, int version, cuuint64_t flags,
                                       CUdriverProcAddressQueryResult *status)
{
    const struct proc_entry *best = NULL, *best_ptsz = NULL;
    int known = 0;
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        const struct proc_entry *e = &table[i];
        if (strcmp(e->base, symbol) != 0)
            continue;
        known = 1;
        if (e->version > version)
            continue;
        const struct proc_entry **slot = e->ptsz ? &best_ptsz : &best;
        if (!*slot || e->version > (*slot)->version)
            *slot = e;
    }
    if (flags == CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM && best_ptsz)
        best = best_ptsz;
    *status = best ? CU_GET_PROC_ADDRESS_SUCCESS
                   : known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return best;
}

/* Shared by both entry points: validates, looks up, traces.  Returns the
 * CUresult of cuGetProcAddress_v2; *status tells the legacy form what to map. */
static CUresult get_proc_address(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                 CUdriverProcAddressQueryResult *status)
{
    if (!symbol || !pfn || cudaVersion > SIM_DRIVER_VERSION ||
        (flags != CU_GET_PROC_ADDRESS_DEFAULT && flags != CU_GET_PROC_ADDRESS_LEGACY_STREAM &&
         flags != CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)) {
        sim_trace("cuGetProcAddress(%s, %d, %llu) -> invalid value", symbol ? symbol : "(null)", cudaVersion,
                  (unsigned long long)flags);
        if (pfn)
            *pfn = NULL;
        return CUDA_ERROR_INVALID_VALUE;
    }
    const struct proc_entry *e = lookup(symbol, cudaVersion, flags, status);
    *pfn = e ? e->fn : NULL;
    sim_trace("cuGetProcAddress(%s, %d, %llu) -> %s", symbol, cudaVersion, (unsigned long long)flags,
              e ? e->variant
                : *status == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT ? "NULL (version not sufficient)"
                                                                          : "NULL (symbol not found)");
    return CUDA_SUCCESS;
}

/* Works before cuInit: the runtime fetches cuInit through it. */
SIM_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                                        CUdriverProcAddressQueryResult *symbolStatus)
{
    CUdriverProcAddressQueryResult status;
    CUresult rc = get_proc_address(symbol, pfn, cudaVersion, flags, &status);
    if (rc == CUDA_SUCCESS && symbolStatus)
        *symbolStatus = status;
    return rc;
}

SIM_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    CUdriverProcAddressQueryResult status;
    CUresult rc = get_proc_address(symbol, pfn, cudaVersion, flags, &status);
    if (rc == CUDA_SUCCESS && status != CU_GET_PROC_ADDRESS_SUCCESS)
        rc = CUDA_ERROR_NOT_FOUND;
    return rc;
}
