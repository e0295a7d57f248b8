/*
 * runtime_exec.c — device code in the simulated runtime: the registration
 * calls nvcc's generated code makes at load time, kernel launches, function
 * and symbol queries, libraries.  A failed launch is recorded as the thread's
 * last error (runtime_errors.c).
 *
 * Registration is real: every __cudaRegisterFunction / __cudaRegisterVar
 * records its host address under its fat binary (PyTorch registers 477 fat
 * binaries and about 24,000 functions when it is imported), so a query about
 * an address nvcc never registered fails as NVIDIA's runtime fails it
 * (cudaErrorInvalidDeviceFunction, cudaErrorInvalidSymbol).  Running one is
 * where the simulation ends: the runtime asks the driver to load the fat
 * binary, as NVIDIA's runtime does on first use, and the simulated driver
 * refuses every module with CUDA_ERROR_NOT_SUPPORTED, so the launch fails
 * with cudaErrorNotSupported ("operation not supported"), recorded as the
 * thread's last error.  Not cudaErrorNoKernelImageForDevice: that would tell
 * the user to rebuild for another architecture, which would not help.
 *
 * A kernel handle (cudaKernel_t, from __cudaGetKernel) is the registered host
 * address itself, so every handle can be checked against the registry
 * without dereferencing what the caller passed.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "runtime.h"

/* ---- the registry of host addresses ---- */

struct fatbin {
    void *image;                    /* what nvcc passed: the fat binary wrapper */
};

enum entry_kind { ENTRY_FUNCTION, ENTRY_VARIABLE };

struct entry {
    const void *host;
    struct fatbin *fatbin;
    enum entry_kind kind;
    struct entry *next;
};

#define REGISTRY_BUCKETS 16384u   /* a power of two; chains stay short for ~24k entries */

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct entry *buckets[REGISTRY_BUCKETS];

static unsigned bucket_of(const void *host)
{
    uint64_t h = (uint64_t)(uintptr_t)host * 0x9E3779B97F4A7C15ull;
    return (unsigned)(h >> 40) & (REGISTRY_BUCKETS - 1);
}

static void registry_add(void **handle, const void *host, enum entry_kind kind)
{
    if (!handle || !host)
        return;
    struct entry *e = malloc(sizeof *e);
    if (!e)
        return; /* the address stays unknown: queries about it fail, nothing else */
    *e = (struct entry){ host, (struct fatbin *)handle, kind, NULL };
    unsigned b = bucket_of(host);
    pthread_mutex_lock(&registry_lock);
    e->next = buckets[b];
    buckets[b] = e;
    pthread_mutex_unlock(&registry_lock);
}

/* The fat binary image holding a registered address of that kind, or NULL. */
static void *registry_image(const void *host, enum entry_kind kind)
{
    void *image = NULL;
    pthread_mutex_lock(&registry_lock);
    for (struct entry *e = buckets[bucket_of(host)]; e; e = e->next) {
        if (e->host == host && e->kind == kind) {
            image = e->fatbin->image;
            break;
        }
    }
    pthread_mutex_unlock(&registry_lock);
    return image;
}

SIMRT_EXPORT void **__cudaRegisterFatBinary(void *fatCubin)
{
    struct fatbin *f = malloc(sizeof *f);
    if (!f)
        return NULL;
    f->image = fatCubin;
    return (void **)f;
}

SIMRT_EXPORT void __cudaRegisterFatBinaryEnd(void **fatCubinHandle) { (void)fatCubinHandle; }

/* Forgets every address of the binary (a library being unloaded), then the
 * binary itself. */
SIMRT_EXPORT void __cudaUnregisterFatBinary(void **fatCubinHandle)
{
    if (!fatCubinHandle)
        return;
    pthread_mutex_lock(&registry_lock);
    for (unsigned b = 0; b < REGISTRY_BUCKETS; b++) {
        for (struct entry **p = &buckets[b]; *p;) {
            if ((void **)(*p)->fatbin == fatCubinHandle) {
                struct entry *gone = *p;
                *p = gone->next;
                free(gone);
            } else {
                p = &(*p)->next;
            }
        }
    }
    pthread_mutex_unlock(&registry_lock);
    free(fatCubinHandle);
}

SIMRT_EXPORT void __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun, char *deviceFun,
                                         const char *deviceName, int thread_limit, uint3 *tid, uint3 *bid,
                                         dim3 *bDim, dim3 *gDim, int *wSize)
{
    (void)deviceFun;
    (void)deviceName;
    (void)thread_limit;
    (void)tid;
    (void)bid;
    (void)bDim;
    (void)gDim;
    (void)wSize;
    registry_add(fatCubinHandle, hostFun, ENTRY_FUNCTION);
}

SIMRT_EXPORT void __cudaRegisterVar(void **fatCubinHandle, char *hostVar, char *deviceAddress,
                                    const char *deviceName, int ext, size_t size, int constant, int global)
{
    (void)deviceAddress;
    (void)deviceName;
    (void)ext;
    (void)size;
    (void)constant;
    (void)global;
    registry_add(fatCubinHandle, hostVar, ENTRY_VARIABLE);
}

/* What using a registered address comes to: the driver is asked to load its
 * fat binary.  The simulated driver refuses every module (its answer is
 * passed on); a driver that loaded one would still leave no kernel to run
 * here, so success is cudaErrorNotSupported too. */
static cudaError_t use(const void *host, enum entry_kind kind)
{
    cudaError_t e = simrt_enter();
    if (e != cudaSuccess)
        return e;
    void *image = host ? registry_image(host, kind) : NULL;
    if (!image)
        return kind == ENTRY_FUNCTION ? SIMRT_ERROR_INVALID_DEVICE_FUNCTION : SIMRT_ERROR_INVALID_SYMBOL;
    CUmodule module = NULL;
    e = DRV(cuModuleLoadData, &module, image);
    return e == cudaSuccess ? cudaErrorNotSupported : e;
}

/* ---- launch configuration (<<<...>>> pushes it, the stub pops it) ---- */

#define CONFIG_DEPTH 16

struct launch_config {
    dim3 grid, block;
    size_t shared;
    void *stream;
};

static __thread struct launch_config tls_config[CONFIG_DEPTH];
static __thread int tls_config_depth;

SIMRT_EXPORT unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem, void *stream)
{
    if (tls_config_depth >= CONFIG_DEPTH)
        return 1;
    tls_config[tls_config_depth++] = (struct launch_config){ gridDim, blockDim, sharedMem, stream };
    return 0;
}

/* cudaErrorMissingConfiguration (52) when nothing was pushed. */
SIMRT_EXPORT cudaError_t __cudaPopCallConfiguration(dim3 *gridDim, dim3 *blockDim, size_t *sharedMem, void *stream)
{
    if (tls_config_depth == 0)
        return simrt_status((cudaError_t)52);
    struct launch_config c = tls_config[--tls_config_depth];
    *gridDim = c.grid;
    *blockDim = c.block;
    *sharedMem = c.shared;
    *(void **)stream = c.stream;
    return cudaSuccess;
}

/* ---- kernels ---- */

SIMRT_EXPORT cudaError_t __cudaGetKernel(cudaKernel_t *kernel, const void *func)
{
    if (!kernel)
        return simrt_status(cudaErrorInvalidValue);
    if (!func || !registry_image(func, ENTRY_FUNCTION))
        return simrt_status(SIMRT_ERROR_INVALID_DEVICE_FUNCTION);
    *kernel = (cudaKernel_t)(uintptr_t)func;
    return cudaSuccess;
}

SIMRT_EXPORT cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args,
                                            size_t sharedMem, cudaStream_t stream)
{
    (void)gridDim;
    (void)blockDim;
    (void)args;
    (void)sharedMem;
    (void)stream;
    return simrt_status(use((const void *)kernel, ENTRY_FUNCTION));
}

SIMRT_EXPORT cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args,
                                                 size_t sharedMem, cudaStream_t stream)
{
    return __cudaLaunchKernel(kernel, gridDim, blockDim, args, sharedMem, stream);
}

SIMRT_EXPORT cudaError_t cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args,
                                          size_t sharedMem, cudaStream_t stream)
{
    (void)gridDim;
    (void)blockDim;
    (void)args;
    (void)sharedMem;
    (void)stream;
    return simrt_status(use(func, ENTRY_FUNCTION));
}

SIMRT_EXPORT cudaError_t cudaLaunchCooperativeKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args,
                                                     size_t sharedMem, cudaStream_t stream)
{
    return cudaLaunchKernel(func, gridDim, blockDim, args, sharedMem, stream);
}

SIMRT_EXPORT cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *config, const void *func, void **args)
{
    (void)args;
    if (!config)
        return simrt_status(cudaErrorInvalidValue);
    return simrt_status(use(func, ENTRY_FUNCTION));
}

SIMRT_EXPORT cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes *attr, const void *func)
{
    if (!attr)
        return simrt_status(cudaErrorInvalidValue);
    return simrt_status(use(func, ENTRY_FUNCTION));
}

SIMRT_EXPORT cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value)
{
    (void)attr;
    (void)value;
    return simrt_status(use(func, ENTRY_FUNCTION));
}

SIMRT_EXPORT cudaError_t cudaKernelSetAttributeForDevice(cudaKernel_t kernel, enum cudaFuncAttribute attr,
                                                         int value, int device)
{
    (void)attr;
    (void)value;
    (void)device;
    return simrt_status(use((const void *)kernel, ENTRY_FUNCTION));
}

SIMRT_EXPORT cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *numBlocks, const void *func,
                                                                                int blockSize,
                                                                                size_t dynamicSMemSize,
                                                                                unsigned int flags)
{
    (void)blockSize;
    (void)dynamicSMemSize;
    (void)flags;
    if (!numBlocks)
        return simrt_status(cudaErrorInvalidValue);
    return simrt_status(use(func, ENTRY_FUNCTION));
}

SIMRT_EXPORT cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, const void *func,
                                                                       int blockSize, size_t dynamicSMemSize)
{
    return cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(numBlocks, func, blockSize, dynamicSMemSize, 0);
}

/* ---- device variables ---- */

SIMRT_EXPORT cudaError_t cudaGetSymbolAddress(void **devPtr, const void *symbol)
{
    if (!devPtr)
        return simrt_status(cudaErrorInvalidValue);
    return simrt_status(use(symbol, ENTRY_VARIABLE));
}

SIMRT_EXPORT cudaError_t cudaMemcpyToSymbol(const void *symbol, const void *src, size_t count, size_t offset,
                                            enum cudaMemcpyKind kind)
{
    (void)src;
    (void)count;
    (void)offset;
    (void)kind;
    return simrt_status(use(symbol, ENTRY_VARIABLE));
}

/* ---- libraries (CUDA 12.0): loaded through the driver, which refuses ---- */

SIMRT_EXPORT cudaError_t cudaLibraryLoadData(cudaLibrary_t *library, const void *code,
                                             enum cudaJitOption *jitOptions, void **jitOptionsValues,
                                             unsigned int numJitOptions, enum cudaLibraryOption *libraryOptions,
                                             void **libraryOptionValues, unsigned int numLibraryOptions)
{
    cudaError_t e = simrt_enter();
    if (e != cudaSuccess)
        return simrt_status(e);
    return simrt_status(DRV(cuLibraryLoadData, (CUlibrary *)library, code, (CUjit_option *)jitOptions,
                            jitOptionsValues, numJitOptions, (CUlibraryOption *)libraryOptions,
                            libraryOptionValues, numLibraryOptions));
}

SIMRT_EXPORT cudaError_t cudaLibraryLoadFromFile(cudaLibrary_t *library, const char *fileName,
                                                 enum cudaJitOption *jitOptions, void **jitOptionsValues,
                                                 unsigned int numJitOptions,
                                                 enum cudaLibraryOption *libraryOptions,
                                                 void **libraryOptionValues, unsigned int numLibraryOptions)
{
    cudaError_t e = simrt_enter();
    if (e != cudaSuccess)
        return simrt_status(e);
    return simrt_status(DRV(cuLibraryLoadFromFile, (CUlibrary *)library, fileName, (CUjit_option *)jitOptions,
                            jitOptionsValues, numJitOptions, (CUlibraryOption *)libraryOptions,
                            libraryOptionValues, numLibraryOptions));
}

/* No library can have been loaded, so every handle is unknown. */
static cudaError_t no_library(void)
{
    cudaError_t e = simrt_load();
    return simrt_status(e != cudaSuccess ? e : cudaErrorInvalidResourceHandle);
}

SIMRT_EXPORT cudaError_t cudaLibraryUnload(cudaLibrary_t library)
{
    (void)library;
    return no_library();
}

SIMRT_EXPORT cudaError_t cudaLibraryGetKernel(cudaKernel_t *pKernel, cudaLibrary_t library, const char *name)
{
    (void)pKernel;
    (void)library;
    (void)name;
    return no_library();
}

SIMRT_EXPORT cudaError_t cudaLibraryGetKernelCount(unsigned int *count, cudaLibrary_t lib)
{
    (void)count;
    (void)lib;
    return no_library();
}

SIMRT_EXPORT cudaError_t cudaLibraryGetGlobal(void **dptr, size_t *bytes, cudaLibrary_t library, const char *name)
{
    (void)dptr;
    (void)bytes;
    (void)library;
    (void)name;
    return no_library();
}

SIMRT_EXPORT cudaError_t cudaLibraryGetManaged(void **dptr, size_t *bytes, cudaLibrary_t library, const char *name)
{
    (void)dptr;
    (void)bytes;
    (void)library;
    (void)name;
    return no_library();
}

SIMRT_EXPORT cudaError_t cudaLibraryGetUnifiedFunction(void **fptr, cudaLibrary_t library, const char *symbol)
{
    (void)fptr;
    (void)library;
    (void)symbol;
    return no_library();
}

/* ---- profiler control: no profiler is ever attached, so nothing to do ---- */

SIMRT_EXPORT cudaError_t cudaProfilerStart(void) { return simrt_status(simrt_enter()); }
SIMRT_EXPORT cudaError_t cudaProfilerStop(void) { return simrt_status(simrt_enter()); }
