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

/* Libraries (CUDA 12.0) are modules loaded context-independently: refused
 * alike. */
SIM_EXPORT CUresult cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jitOptions,
                                      void **jitOptionsValues, unsigned int numJitOptions,
                                      CUlibraryOption *libraryOptions, void **libraryOptionValues,
                                      unsigned int numLibraryOptions)
{
    (void)jitOptions;
    (void)jitOptionsValues;
    (void)numJitOptions;
    (void)libraryOptions;
    (void)libraryOptionValues;
    (void)numLibraryOptions;
    return load(library, code);
}

SIM_EXPORT CUresult cuLibraryLoadFromFile(CUlibrary *library, const char *fileName, CUjit_option *jitOptions,
                                          void **jitOptionsValues, unsigned int numJitOptions,
                                          CUlibraryOption *libraryOptions, void **libraryOptionValues,
                                          unsigned int numLibraryOptions)
{
    return cuLibraryLoadData(library, fileName, jitOptions, jitOptionsValues, numJitOptions, libraryOptions,
                             libraryOptionValues, numLibraryOptions);
}
