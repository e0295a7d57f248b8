/*
 * driver_module.c — loading device code, which the simulator cannot run.
 *
 * There is no device to execute kernels on, so every way of loading a module
 * or library fails with CUDA_ERROR_NOT_SUPPORTED, after the checks cuda.h
 * documents (NOT_INITIALIZED, INVALID_VALUE, INVALID_CONTEXT).  Clients then
 * see the driver's own error code, the same with and without an interposer,
 * instead of a missing symbol.  Nothing is allocated.
 */
#include "simcuda.h"

static CUresult load(const void *out, const void *image)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!out || !image)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    CUresult rc = sim_ctx_current_locked(NULL);
    sim_unlock();
    return rc == CUDA_SUCCESS ? CUDA_ERROR_NOT_SUPPORTED : rc;
}

SIM_EXPORT CUresult cuModuleLoad(CUmodule *module, const char *fname) { return load(module, fname); }

SIM_EXPORT CUresult cuModuleLoadData(CUmodule *module, const void *image) { return load(module, image); }

SIM_EXPORT CUresult cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions,
                                       CUjit_option *options, void **optionValues)
{
    (void)numOptions;
    (void)options;
    (void)optionValues;
    return load(module, image);
}

SIM_EXPORT CUresult cuModuleLoadFatBinary(CUmodule *module, const void *fatCubin) { return load(module, fatCubin); }
