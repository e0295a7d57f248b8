/*
 * runtime_errors.c — driver results as runtime errors, and their names and
 * strings (the real runtime's, for every code the simulator can produce), and
 * the thread's last error.  It uses no other runtime file, so every one of
 * them can use it.
 * Works without a driver: cudaGetErrorString(cudaErrorInsufficientDriver) is
 * what a program prints when libcuda.so.1 is missing.
 */
#include "runtime_errors.h"

/* Driver codes and runtime codes coincide for everything the simulated driver
 * returns except the few renamed ones (OUT_OF_MEMORY is
 * cudaErrorMemoryAllocation, INVALID_CONTEXT is cudaErrorDeviceUninitialized,
 * ...), which share their numbers too; anything unknown is cudaErrorUnknown. */
cudaError_t simrt_result(CUresult r)
{
    switch ((int)r) {
    case 0: return cudaSuccess;
    case 1: return cudaErrorInvalidValue;
    case 2: return cudaErrorMemoryAllocation;
    case 3: return cudaErrorInitializationError;
    case 4: return cudaErrorCudartUnloading;
    case 34: return SIMRT_ERROR_STUB_LIBRARY;
    case 100: return cudaErrorNoDevice;
    case 101: return cudaErrorInvalidDevice;
    case 201: return SIMRT_ERROR_DEVICE_UNINITIALIZED;
    case 205: return SIMRT_ERROR_MAP_BUFFER_OBJECT_FAILED;
    case 208: return SIMRT_ERROR_ALREADY_MAPPED;
    case 211: return SIMRT_ERROR_NOT_MAPPED;
    case 400: return cudaErrorInvalidResourceHandle;
    case 401: return SIMRT_ERROR_ILLEGAL_STATE;
    case 500: return cudaErrorSymbolNotFound;
    case 600: return SIMRT_ERROR_NOT_READY;
    case 709: return cudaErrorContextIsDestroyed;
    case 712: return SIMRT_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    case 713: return SIMRT_ERROR_HOST_MEMORY_NOT_REGISTERED;
    case 800: return cudaErrorNotPermitted;
    case 801: return cudaErrorNotSupported;
    case 900: return cudaErrorStreamCaptureUnsupported;
    case 901: return cudaErrorStreamCaptureInvalidated;
    case 903: return cudaErrorStreamCaptureUnmatched;
    case 908: return cudaErrorStreamCaptureWrongThread;
    default: return cudaErrorUnknown;
    }
}

static const struct {
    int code;
    const char *name, *text;
} errors[] = {
    { 0, "cudaSuccess", "no error" },
    { 1, "cudaErrorInvalidValue", "invalid argument" },
    { 2, "cudaErrorMemoryAllocation", "out of memory" },
    { 3, "cudaErrorInitializationError", "initialization error" },
    { 4, "cudaErrorCudartUnloading", "driver shutting down" },
    { 13, "cudaErrorInvalidSymbol", "invalid device symbol" },
    { 17, "cudaErrorInvalidDevicePointer", "invalid device pointer" },
    { 21, "cudaErrorInvalidMemcpyDirection", "invalid copy direction for memcpy" },
    { 52, "cudaErrorMissingConfiguration", "__global__ function call is not configured" },
    { 34, "cudaErrorStubLibrary", "CUDA driver is a stub library" },
    { 35, "cudaErrorInsufficientDriver", "CUDA driver version is insufficient for CUDA runtime version" },
    { 36, "cudaErrorCallRequiresNewerDriver", "API call is not supported in the installed CUDA driver" },
    { 98, "cudaErrorInvalidDeviceFunction", "invalid device function" },
    { 100, "cudaErrorNoDevice", "no CUDA-capable device is detected" },
    { 101, "cudaErrorInvalidDevice", "invalid device ordinal" },
    { 201, "cudaErrorDeviceUninitialized", "invalid device context" },
    { 205, "cudaErrorMapBufferObjectFailed", "mapping of buffer object failed" },
    { 208, "cudaErrorAlreadyMapped", "resource already mapped" },
    { 209, "cudaErrorNoKernelImageForDevice", "no kernel image is available for execution on the device" },
    { 211, "cudaErrorNotMapped", "resource not mapped" },
    { 217, "cudaErrorPeerAccessUnsupported", "peer access is not supported between these two devices" },
    { 400, "cudaErrorInvalidResourceHandle", "invalid resource handle" },
    { 401, "cudaErrorIllegalState", "the operation cannot be performed in the present state" },
    { 500, "cudaErrorSymbolNotFound", "named symbol not found" },
    { 600, "cudaErrorNotReady", "device not ready" },
    { 704, "cudaErrorPeerAccessAlreadyEnabled", "peer access is already enabled" },
    { 705, "cudaErrorPeerAccessNotEnabled", "peer access has not been enabled" },
    { 709, "cudaErrorContextIsDestroyed", "context is destroyed" },
    { 712, "cudaErrorHostMemoryAlreadyRegistered", "part or all of the requested memory range is already mapped" },
    { 713, "cudaErrorHostMemoryNotRegistered", "pointer does not correspond to a registered memory region" },
    { 800, "cudaErrorNotPermitted", "operation not permitted" },
    { 801, "cudaErrorNotSupported", "operation not supported" },
    { 900, "cudaErrorStreamCaptureUnsupported", "operation not permitted when stream is capturing" },
    { 901, "cudaErrorStreamCaptureInvalidated", "operation failed due to a previous error during capture" },
    { 903, "cudaErrorStreamCaptureUnmatched", "capture was not ended in the same stream as it began" },
    { 908, "cudaErrorStreamCaptureWrongThread", "attempt to terminate a thread-local capture sequence from another thread" },
    { 999, "cudaErrorUnknown", "unknown error" },
};

static int find(cudaError_t error)
{
    for (int i = 0; i < (int)(sizeof errors / sizeof errors[0]); i++)
        if (errors[i].code == (int)error)
            return i;
    return -1;
}

SIMRT_EXPORT const char *cudaGetErrorString(cudaError_t error)
{
    int i = find(error);
    return i >= 0 ? errors[i].text : "unrecognized error code";
}

SIMRT_EXPORT const char *cudaGetErrorName(cudaError_t error)
{
    int i = find(error);
    return i >= 0 ? errors[i].name : "unrecognized error code";
}

/* ---- the last error ---- */

static __thread cudaError_t tls_last_error;

cudaError_t simrt_status(cudaError_t e)
{
    if (e != cudaSuccess)
        tls_last_error = e;
    return e;
}

SIMRT_EXPORT cudaError_t cudaGetLastError(void)
{
    cudaError_t e = tls_last_error;
    tls_last_error = cudaSuccess;
    return e;
}

SIMRT_EXPORT cudaError_t cudaPeekAtLastError(void) { return tls_last_error; }
