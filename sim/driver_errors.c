/*
 * driver_errors.c — cuGetErrorName / cuGetErrorString.
 *
 * Names and strings are the real driver's for every code the simulator can
 * return (and a few neighbours).  As in the real driver, an unknown code gives
 * CUDA_ERROR_INVALID_VALUE and a NULL string; both work before cuInit.
 */
#include "simcuda.h"

static const struct {
    int code;
    const char *name, *text;
} errors[] = {
    { 0, "CUDA_SUCCESS", "no error" },
    { 1, "CUDA_ERROR_INVALID_VALUE", "invalid argument" },
    { 2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory" },
    { 3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error" },
    { 4, "CUDA_ERROR_DEINITIALIZED", "driver shutting down" },
    { 34, "CUDA_ERROR_STUB_LIBRARY", "CUDA driver is a stub library" },
    { 100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected" },
    { 101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal" },
    { 201, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context" },
    { 208, "CUDA_ERROR_ALREADY_MAPPED", "resource already mapped" },
    { 211, "CUDA_ERROR_NOT_MAPPED", "resource not mapped" },
    { 400, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle" },
    { 401, "CUDA_ERROR_ILLEGAL_STATE", "the operation cannot be performed in the present state" },
    { 500, "CUDA_ERROR_NOT_FOUND", "named symbol not found" },
    { 600, "CUDA_ERROR_NOT_READY", "device not ready" },
    { 709, "CUDA_ERROR_CONTEXT_IS_DESTROYED", "context is destroyed" },
    { 800, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted" },
    { 801, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported" },
    { 999, "CUDA_ERROR_UNKNOWN", "unknown error" },
};

static int find(CUresult error)
{
    for (int i = 0; i < (int)(sizeof errors / sizeof errors[0]); i++)
        if (errors[i].code == (int)error)
            return i;
    return -1;
}

SIM_EXPORT CUresult cuGetErrorName(CUresult error, const char **pStr)
{
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    int i = find(error);
    *pStr = i >= 0 ? errors[i].name : NULL;
    return i >= 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SIM_EXPORT CUresult cuGetErrorString(CUresult error, const char **pStr)
{
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    int i = find(error);
    *pStr = i >= 0 ? errors[i].text : NULL;
    return i >= 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
