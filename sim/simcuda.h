/*
 * simcuda.h — internals of the simulated CUDA driver (libcuda.so.1).
 *
 * The simulated driver exists so tensorleak's tests can run without a GPU; its
 * whole value is fidelity: it is loaded, resolved and called exactly as
 * NVIDIA's libcuda.so.1 is (dlopen + cuGetProcAddress_v2, versioned symbols,
 * real error codes, real allocation and teardown semantics).
 *
 * Layout (one concern per file, names prefixed sim_ and hidden):
 *   driver_ranges.c   first-fit free list over an address range
 *   driver_init.c     environment, devices, cuInit, device queries, simcuda_*
 *   driver_errors.c   cuGetErrorName / cuGetErrorString
 *   driver_ctx.c      contexts (primary and created), streams, synchronisation
 *   driver_alloc.c    cuMemAlloc family, pinned host, managed, cuMemGetInfo
 *   driver_pool.c     stream-ordered pools (cuMemAllocAsync, cuMemPool*)
 *   driver_vmm.c      virtual memory management (cuMemCreate, cuMemMap, ...)
 *   driver_procaddr.c cuGetProcAddress and its version table
 *
 * Locking: one process-wide mutex (sim.lock) guards all driver state.  This is
 * a test double, so simplicity beats scalability; functions named *_locked
 * expect the caller to hold it.
 *
 * Address layout (fake GPU virtual addresses, reserved PROT_NONE in the host
 * address space when possible so no host allocation can ever share them and
 * any dereference faults, as a real device pointer would).  The ranges lie
 * in what AddressSanitizer calls HighMem, so they work under ASan too:
 *   device d memory:  SIM_DEVICE_BASE + d * SIM_DEVICE_STRIDE, capacity bytes
 *   VMM reservations: SIM_VMM_BASE, SIM_VMM_SIZE (one range for all devices:
 *                     a cuMemAddressReserve range is not tied to a device)
 */
#ifndef TL_SIMCUDA_H
#define TL_SIMCUDA_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda_compat.h"

/* We define the legacy unversioned entry points (identical signatures to their
 * _v2 successors); cuda.h macro-maps these names to _v2, so unmap them. */
#undef cuCtxDestroy
#undef cuDevicePrimaryCtxRelease
#undef cuDevicePrimaryCtxReset
#undef cuStreamDestroy

#ifndef TL_HAVE_CUDA_H
/* Declared by cuda.h but missing from cuda_compat.h. */
typedef struct CUexecAffinityParam_st CUexecAffinityParam;
#define CU_STREAM_LEGACY ((CUstream)0x1)
#define CU_STREAM_PER_THREAD ((CUstream)0x2)
CUresult cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx);
CUresult cuCtxSynchronize_v2(CUcontext ctx);
#endif

/* Exported variants that cuda.h hides behind __CUDA_API_VERSION_INTERNAL or
 * its name macros.  Signatures match cudaTypedefs.h (PFN_*_vNNNN). */
CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev);
CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams,
                        unsigned int flags, CUdevice dev);
CUresult cuCtxDestroy(CUcontext ctx);
CUresult cuDevicePrimaryCtxRelease(CUdevice dev);
CUresult cuDevicePrimaryCtxReset(CUdevice dev);
CUresult cuStreamDestroy(CUstream hStream);

/* Test-only introspection, exported from libcuda.so.1 but NOT part of CUDA:
 * bytes of device memory consumed (capacity - free) and the largest
 * contiguous free range of device dev (0 for an unknown device or before
 * cuInit). */
size_t simcuda_device_used_bytes(int dev);
size_t simcuda_largest_free_block(int dev);

#define SIM_EXPORT __attribute__((visibility("default")))

#define SIM_MAX_DEVICES 8
#define SIM_DEFAULT_MEMORY (16ull << 30)
#define SIM_MAX_MEMORY (1ull << 40)           /* one device slot */
#define SIM_DEVICE_BASE 0x200000000000ull     /* 32 TiB */
#define SIM_DEVICE_STRIDE 0x10000000000ull    /* 1 TiB per device */
#define SIM_VMM_BASE 0x300000000000ull        /* 48 TiB */
#define SIM_VMM_SIZE 0x40000000000ull         /* 4 TiB of reservable VA */
#define SIM_DRIVER_VERSION 13000

/* Every cuMemAlloc-family allocation and pool block starts on and is sized in
 * multiples of SIM_ALIGN.  The real driver documents only >= 256 bytes
 * ("suitably aligned for any kind of variable"); in practice its sub-allocator
 * hands out 512-byte multiples, which also matches PyTorch's kMinBlockSize.  */
#define SIM_ALIGN 512ull
#define SIM_GRANULARITY (2ull << 20)          /* VMM and pool-chunk granularity */
#define SIM_POOL_CHUNK (32ull << 20)          /* default pool reservation step */
#define SIM_PITCH_ALIGN 512ull

static inline uint64_t sim_align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

/* ---- driver_ranges.c: first-fit free list over [base, base + size) ---- */
struct sim_extent {
    uint64_t start, len;
};
struct sim_ranges {
    uint64_t base, size, free_bytes;
    struct sim_extent *ext; /* free extents, sorted by start, never adjacent */
    size_t n, cap;
};
int sim_ranges_init(struct sim_ranges *r, uint64_t base, uint64_t size);
void sim_ranges_fini(struct sim_ranges *r);
uint64_t sim_ranges_alloc(struct sim_ranges *r, uint64_t size, uint64_t align);
int sim_ranges_alloc_at(struct sim_ranges *r, uint64_t addr, uint64_t size);
void sim_ranges_free(struct sim_ranges *r, uint64_t addr, uint64_t size);
uint64_t sim_ranges_largest(const struct sim_ranges *r);

/* ---- driver_init.c: process-wide state ---- */
struct sim_pool;
struct sim_device {
    uint64_t capacity;
    struct sim_ranges mem;          /* device memory: physical and address alike */
    struct CUctx_st *primary;
    struct CUmemPoolHandle_st *default_pool, *current_pool;
};
struct sim_state {
    pthread_mutex_t lock;
    int initialized;                /* cuInit succeeded (read atomically) */
    CUresult init_result;
    int ndevices;
    uint64_t capacity;
    int trace;                      /* SIMCUDA_TRACE */
    struct sim_device dev[SIM_MAX_DEVICES];
    struct sim_ranges vmm_va;
};
extern struct sim_state sim;

void sim_config_once(void);         /* parse SIMCUDA_* once; safe before cuInit */
int sim_is_initialized(void);
void sim_lock(void);
void sim_unlock(void);
int sim_device_valid(CUdevice dev);
void *sim_reserve_va(uint64_t hint, uint64_t size); /* PROT_NONE host reservation */

/* ---- driver_ctx.c: contexts and streams ---- */
struct CUctx_st {
    unsigned magic;
    int device;
    int primary;
    int refcount;                   /* primary: retain count */
    int alive;                      /* created: not destroyed; primary: retained */
    unsigned flags;
    struct CUctx_st *next;          /* all created contexts, never freed */
};
struct CUstream_st {
    unsigned magic;
    struct CUctx_st *ctx;
    unsigned flags;
    int alive;
    struct CUstream_st *next;
};
int sim_ctx_init_primaries(void);
CUresult sim_ctx_current_locked(struct CUctx_st **out);
CUresult sim_stream_device_locked(CUstream s, int *device);

/* ---- driver_alloc.c: allocations owned by a context ---- */
void sim_alloc_release_ctx_locked(struct CUctx_st *ctx);

/* ---- driver_pool.c ---- */
CUresult sim_pool_create_default_locked(int device);
int sim_pool_free_block_locked(uint64_t addr); /* 1 when addr was a pool block */
void sim_pool_trim_device_locked(int device);  /* synchronisation point */
void sim_pool_arm_exit_failure(void);           /* SIMCUDA_POOL_QUERY */
bool sim_torn_down(void);                       /* SIMCUDA_POOL_QUERY=fail-at-exit, after exit */

/* ---- driver_procaddr.c ---- */
void sim_trace(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif /* TL_SIMCUDA_H */
