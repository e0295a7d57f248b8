/*
 * runtime_driver.c — how the runtime reaches the driver, step for step as
 * NVIDIA's libcudart does (shared and static alike):
 *
 *   1. on first use (pthread_once): dlopen("libcuda.so.1", RTLD_NOW|RTLD_GLOBAL);
 *   2. dlsym(handle, "cuGetProcAddress_v2") — the only symbol looked up by name;
 *   3. ask that function for "cuGetProcAddress" itself, at 11030 (the legacy
 *      4-argument form) and at 12000, and use the 12000 one from then on;
 *   4. fetch every entry point by base name, version and flags;
 *   5. cuInit(0) and check the driver is at least as new as the runtime.
 *
 * Anything a tool wants to observe (an LD_PRELOAD tracker, SIMCUDA_TRACE)
 * therefore sees exactly the sequence a real runtime produces.  If the driver
 * cannot be loaded every call fails with cudaErrorInsufficientDriver, as with
 * the real runtime on a machine without NVIDIA's driver.
 */
#include <dlfcn.h>
#include <pthread.h>

#include "runtime_driver.h"

struct simrt_driver simrt_drv;

/* The load runs dlopen and dlsym under this once-lock, and both take the
 * loader's lock.  So a library constructor whose first CUDA call comes
 * while another thread's first CUDA call is loading the driver deadlocks:
 * that thread waits in dlsym for the loader's lock the constructor's dlopen
 * holds, the constructor waits for the once-lock.  The real runtime, loading
 * the driver inside its one-time initialisation, can deadlock the same way,
 * so the simulation keeps it rather than hide it (loading the driver
 * outside the once-lock would make the simulated runtime safer than the
 * real one); a program that needs CUDA in constructors makes one CUDA call
 * before it starts threads. */
static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static cudaError_t load_result = cudaErrorInsufficientDriver;

static void *fetch(const char *name, int version, cuuint64_t flags)
{
    void *fn = NULL;
    CUdriverProcAddressQueryResult status;
    if (simrt_drv.cuGetProcAddress_v2(name, &fn, version, flags, &status) != CUDA_SUCCESS ||
        status != CU_GET_PROC_ADDRESS_SUCCESS)
        return NULL;
    return fn;
}

static void load(void)
{
    void *handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!handle)
        return;
    simrt_drv.cuGetProcAddress_v2 = (__typeof__(simrt_drv.cuGetProcAddress_v2))dlsym(handle, "cuGetProcAddress_v2");
    if (!simrt_drv.cuGetProcAddress_v2)
        return;
    (void)fetch("cuGetProcAddress", 11030, CU_GET_PROC_ADDRESS_DEFAULT);
    simrt_drv.cuGetProcAddress_v2 =
        (__typeof__(simrt_drv.cuGetProcAddress_v2))fetch("cuGetProcAddress", 12000, CU_GET_PROC_ADDRESS_DEFAULT);
    if (!simrt_drv.cuGetProcAddress_v2)
        return;

    /* A missing entry point stays NULL: calls needing it fail with
     * cudaErrorCallRequiresNewerDriver, the rest keep working. */
#define SIMRT_FETCH(proto, name, version, flags) \
    simrt_drv.proto = (__typeof__(simrt_drv.proto))fetch(name, version, flags);
    SIMRT_DRIVER_ENTRIES(SIMRT_FETCH)
#undef SIMRT_FETCH

    int version = 0;
    if (!simrt_drv.cuInit || !simrt_drv.cuDriverGetVersion ||
        simrt_drv.cuDriverGetVersion(&version) != CUDA_SUCCESS || version < CUDART_VERSION)
        return;
    CUresult r = simrt_drv.cuInit(0);
    load_result = r == CUDA_SUCCESS ? cudaSuccess : simrt_result(r);
}

cudaError_t simrt_load(void)
{
    pthread_once(&load_once, load);
    return load_result;
}
