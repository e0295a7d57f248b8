/*
 * simcuda.h — internals of the simulated CUDA driver (libcuda.so.1).
 *
 * The simulated driver exists so tensorleak's tests can run without a GPU; its
 * whole value is fidelity: it is loaded, resolved and called exactly as
 * NVIDIA's libcuda.so.1 is (dlopen + cuGetProcAddress_v2, versioned symbols,
 * real error codes, real allocation and teardown semantics).
 *
 * Layout (one concern per file, names prefixed sim_ and hidden), in layers;
 * a file calls only into its own layer's lower files and the layers below,
 * never up (scripts/include-cycles.py shows no circle in sim/):
 *
 *   state      driver_ranges.c   first-fit free list over an address range
 *              driver_errors.c   cuGetErrorName / cuGetErrorString
 *              driver_state.c    the process-wide state (sim), its lock, the
 *                                SIMCUDA_* settings
 *   core       driver_backing.c  the bytes behind device memory (memory files,
 *                                their two views)
 *              driver_exports.c  which allocations CUDA IPC handles export
 *              driver_ctx.c      contexts (primary and created), the current
 *                                context, streams
 *   families   driver_graph.c    stream capture, graphs, graph memory nodes and
 *                                the devices' graph memory (cuDeviceGraphMemTrim, ...)
 *              driver_pool.c     stream-ordered pools (cuMemAllocAsync, cuMemPool*);
 *                                a capturing stream's allocations go to the graph
 *              driver_alloc.c    cuMemAlloc family, pinned and registered host,
 *                                managed, cuMemGetInfo; cuMemFree_v2 also frees
 *                                pool blocks and graph allocations
 *              driver_ipc.c      CUDA IPC: handles of cuMemAlloc memory, opened
 *                                by other processes
 *              driver_array.c    CUDA arrays and mipmapped arrays
 *              driver_vmm.c      virtual memory management (cuMemCreate, cuMemMap, ...)
 *              driver_event.c    events
 *              driver_module.c   module loading (refused: no device code runs here)
 *   across     driver_init.c     cuInit (brings every part up), device queries,
 *                                simcuda_*
 *              driver_teardown.c context teardown, stream destruction and
 *                                synchronisation: what they do to each family
 *              driver_memory.c   copies, memsets, pointer attributes, address
 *                                ranges, advice: any address, so every family's
 *   top        driver_procaddr.c cuGetProcAddress and its version table
 *
 * Among the families the order above is the only one allowed: pool uses
 * graph (capture), alloc uses pool and graph (cuMemFree_v2 frees anything
 * freeable), ipc uses alloc (only its memory is exported); the others use
 * no family.
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
 *   IPC imports:      SIM_IPC_BASE, SIM_IPC_SIZE (other processes' memory
 *                     opened with cuIpcOpenMemHandle)
 *   graph memory:     SIM_GRAPH_VA_BASE, SIM_GRAPH_VA_SIZE (the addresses of
 *                     graph allocation nodes, fixed when the node is made)
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
#undef cuEventElapsedTime
#undef cuDeviceGetUuid
#undef cuStreamWriteValue32

#include "cuda_extra.h"

/* Result codes the simulator returns that cuda_compat.h does not declare
 * (values from cuda.h). */
#define SIM_ERROR_NOT_READY ((CUresult)600)
#define SIM_ERROR_HOST_MEMORY_ALREADY_REGISTERED ((CUresult)712)
#define SIM_ERROR_HOST_MEMORY_NOT_REGISTERED ((CUresult)713)

/* Exported variants that cuda.h hides behind __CUDA_API_VERSION_INTERNAL or
 * its name macros.  Signatures match cudaTypedefs.h (PFN_*_vNNNN). */
CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev);
CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams,
                        unsigned int flags, CUdevice dev);
CUresult cuCtxDestroy(CUcontext ctx);
CUresult cuDevicePrimaryCtxRelease(CUdevice dev);
CUresult cuDevicePrimaryCtxReset(CUdevice dev);
CUresult cuStreamDestroy(CUstream hStream);
CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd);
CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev);
CUresult cuMemHostRegister(void *p, size_t bytesize, unsigned int Flags);
CUresult cuStreamWriteValue32(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags);
CUresult cuStreamGetCaptureInfo_v2(CUstream hStream, CUstreamCaptureStatus *captureStatus_out, cuuint64_t *id_out,
                                   CUgraph *graph_out, const CUgraphNode **dependencies_out,
                                   size_t *numDependencies_out);
CUresult cuStreamGetCaptureInfo_v2_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus_out, cuuint64_t *id_out,
                                        CUgraph *graph_out, const CUgraphNode **dependencies_out,
                                        size_t *numDependencies_out);
CUresult cuStreamGetCaptureInfo_v3_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus_out, cuuint64_t *id_out,
                                        CUgraph *graph_out, const CUgraphNode **dependencies_out,
                                        const CUgraphEdgeData **edgeData_out, size_t *numDependencies_out);

/* Test-only introspection, exported from libcuda.so.1 but NOT part of CUDA:
 * bytes of device memory consumed (capacity - free) and the largest
 * contiguous free range of device dev (0 for an unknown device or before
 * cuInit). */
size_t simcuda_device_used_bytes(int dev);
size_t simcuda_largest_free_block(int dev);
int simcuda_device_count(void);          /* SIMCUDA_DEVICES, before any cuInit */
size_t simcuda_device_capacity(void);    /* SIMCUDA_MEMORY, before any cuInit */

#define SIM_EXPORT __attribute__((visibility("default")))

#define SIM_MAX_DEVICES 8
#define SIM_DEFAULT_MEMORY (16ull << 30)
#define SIM_MAX_MEMORY (1ull << 40)           /* one device slot */
#define SIM_DEVICE_BASE 0x200000000000ull     /* 32 TiB */
#define SIM_DEVICE_STRIDE 0x10000000000ull    /* 1 TiB per device */
#define SIM_VMM_BASE 0x300000000000ull        /* 48 TiB */
#define SIM_VMM_SIZE 0x40000000000ull         /* 4 TiB of reservable VA */
#define SIM_IPC_BASE 0x340000000000ull        /* 52 TiB: right after the VMM range */
#define SIM_IPC_SIZE 0x40000000000ull         /* 4 TiB of imported memory */
#define SIM_GRAPH_VA_BASE 0x380000000000ull   /* 56 TiB: after the IPC range */
#define SIM_GRAPH_VA_SIZE 0x10000000000ull    /* 1 TiB of graph node addresses */
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
int sim_ranges_is_allocated(const struct sim_ranges *r, uint64_t addr, uint64_t len);

/* ---- driver_state.c: process-wide state, its lock, the settings ---- */
struct sim_pool;
struct sim_device {
    uint64_t capacity;
    unsigned char *view;            /* read-write view of the device's bytes, or NULL */
    int backing_fd;                 /* memory file behind both views, or -1 */
    int host_mapped;                /* the device addresses map the memory file */
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
    int import_own_new;             /* SIMCUDA_IMPORT_OWN=new */
    /* SIMCUDA_ARRAY_REQUIREMENTS=deferred-only: cu(Mipmapped)ArrayGet-
     * MemoryRequirements refuse arrays made without
     * CUDA_ARRAY3D_DEFERRED_MAPPING, as cuda.h documents. */
    int array_requirements_deferred_only;
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
void sim_pool_arm_exit_failure(void);           /* SIMCUDA_POOL_QUERY, read when cuInit succeeds */
bool sim_torn_down(void);                       /* SIMCUDA_POOL_QUERY=fail-at-exit, after exit */
bool sim_pool_queries_refused(void);            /* SIMCUDA_POOL_QUERY: pool (and graph memory) queries fail now */

/* ---- driver_backing.c: the bytes behind device memory ---- */
/* Every device's range is backed by one sparse memory file, seen twice: at
 * the device addresses (PROT_NONE, except managed allocations) and at a
 * private read-write view the copy engine uses.  Returns 0, or -1 when the
 * kernel refused (the range is then a bare PROT_NONE reservation, and copies
 * to it fail with CUDA_ERROR_NOT_SUPPORTED). */
int sim_memory_init_device(int device, uint64_t base, uint64_t capacity);
uint64_t sim_memory_host_align(void);   /* the page size */
int sim_memory_set_host_access_locked(int device, uint64_t addr, uint64_t len, int on);
void sim_memory_discard_locked(int device, uint64_t addr, uint64_t len);
uint64_t sim_next_alloc_id(void);

/* ---- driver_exports.c: allocations exported through CUDA IPC handles ---- */
/* The registry's descriptor (made on first use), or -1 when the kernel
 * refused a memory file. */
int sim_exports_open_locked(void);
/* The slot listing alloc_id (the one it already has, else a free one), or -1
 * when every slot is taken.  The registry must be open. */
int sim_exports_claim_locked(uint64_t alloc_id);
/* A freed allocation is no longer exported: handles of it are refused. */
void sim_exports_forget_locked(uint64_t alloc_id);
/* Another process's descriptor fd, opened through /proc; -1 when it is gone. */
int sim_open_peer_fd(uint32_t pid, int fd, int flags);
/* Whether process pid's registry (its descriptor registry_fd) still lists
 * alloc_id at slot: 1 yes, 0 no, -1 when the registry cannot be read. */
int sim_exports_peer_lists(uint32_t pid, int registry_fd, uint32_t slot, uint64_t alloc_id);

/* ---- driver_ctx.c: contexts and streams ---- */
struct CUctx_st {
    unsigned magic;
    int device;
    int primary;
    int refcount;                   /* primary: retain count */
    int alive;                      /* created: not destroyed; primary: retained */
    unsigned flags;
    unsigned long long id;          /* cuCtxGetId: unique in the process */
    struct CUctx_st *next;          /* all created contexts, never freed */
};
struct CUstream_st {
    unsigned magic;
    struct CUctx_st *ctx;
    unsigned flags;
    int priority;
    unsigned long long id;          /* cuStreamGetId: unique in the process */
    int alive;
    struct CUstream_st *next;
    /* Stream capture (driver_graph.c): CU_STREAM_CAPTURE_STATUS_*, the
     * mode, the graph being built, the capture's id and the thread that
     * began it. */
    int capture_status;
    int capture_mode;
    struct CUgraph_st *capture_graph;
    int capture_graph_owned;        /* made by the capture (not cuStreamBeginCaptureToGraph's) */
    unsigned long long capture_id;
    pthread_t capture_thread;
};
int sim_ctx_init_primaries(void);
CUresult sim_ctx_current_locked(struct CUctx_st **out);
CUresult sim_stream_device_locked(CUstream s, int *device);
CUresult sim_ctx_resolve_locked(CUcontext ctx, struct CUctx_st **out); /* NULL: current */
int sim_ctx_known_locked(const struct CUctx_st *ctx);      /* a primary or created context */
void sim_ctx_pop_if_current(const struct CUctx_st *ctx);   /* this thread's stack */
void sim_ctx_destroy_streams_locked(const struct CUctx_st *ctx);
/* Takes s out of the live streams (1 when it was one); the caller frees it. */
int sim_stream_unlink_locked(struct CUstream_st *s);

/* What holds an address: the allocation (cuMemAlloc family, pinned or
 * registered host memory, a pool block, a VMM mapping or an IPC import) it
 * lies in.  Each family answers for its own (sim_*_span_locked);
 * driver_memory.c asks them all. */
enum sim_span_kind { SIM_SPAN_DEVICE, SIM_SPAN_MANAGED, SIM_SPAN_HOST, SIM_SPAN_POOL, SIM_SPAN_VMM, SIM_SPAN_IPC };
struct sim_span {
    uint64_t base, size;            /* the allocation as the program asked for it */
    enum sim_span_kind kind;
    int device;
    struct CUctx_st *ctx;           /* NULL for pool blocks and VMM mappings */
    struct CUmemPoolHandle_st *pool; /* pool blocks only */
    unsigned host_flags;            /* SIM_SPAN_HOST: CU_MEMHOSTALLOC_* / CU_MEMHOSTREGISTER_* */
    uint64_t id;                    /* process-wide unique per allocation */
};

/* ---- driver_graph.c: stream capture, graphs, graph memory ---- */
/* cuMemAllocAsync / cuMemFreeAsync on stream s: when s is capturing, the call
 * becomes an allocation (free) node of its graph and *handled is set; the
 * result is then the call's answer. */
CUresult sim_graph_capture_alloc_locked(CUstream s, uint64_t bytesize, int device, CUdeviceptr *dptr, int *handled);
CUresult sim_graph_capture_free_locked(CUstream s, CUdeviceptr dptr, int *handled);
/* cuMemFree_v2 / cuMemFreeAsync outside capture of a graph allocation that a
 * launch left allocated: 1 when dptr was one (and is freed now). */
int sim_graph_free_outside_locked(uint64_t dptr);
/* A call that is not permitted while a capture in global (or this thread's
 * thread-local) mode is under way: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
 * and the capture is invalidated; CUDA_SUCCESS otherwise. */
CUresult sim_graph_unsafe_call_locked(void);
/* Some capture is under way (read without the lock: a cheap test before
 * sim_graph_unsafe_call_locked on the cuMemAlloc_v2 path). */
int sim_graph_captures_under_way(void);
/* A stream being destroyed stops capturing (its graph is discarded). */
void sim_graph_stream_gone_locked(struct CUstream_st *s);

/* ---- driver_pool.c: stream-ordered pools ---- */
CUresult sim_pool_create_default_locked(int device);
int sim_pool_free_block_locked(uint64_t addr); /* 1 when addr was a pool block */
int sim_pool_span_locked(uint64_t addr, struct sim_span *out); /* 1 when addr is in a pool block */
void sim_pool_trim_device_locked(int device);  /* synchronisation point */

/* ---- driver_alloc.c: the cuMemAlloc family ---- */
void sim_alloc_release_ctx_locked(struct CUctx_st *ctx);
int sim_alloc_span_locked(uint64_t addr, struct sim_span *out); /* 1 when addr is in one of its allocations */

/* ---- driver_array.c: CUDA arrays owned by a context ---- */
void sim_array_release_ctx_locked(struct CUctx_st *ctx);

/* ---- driver_vmm.c ---- */
/* The mapping holding va (1 when found, 0 otherwise); *phys is the device
 * address backing va, or *bytes (else NULL) the host-addressable bytes of a
 * shareable handle's own memory file, and *run how many bytes from va stay
 * contiguous there; *access the mapping's CUmemAccess_flags. */
int sim_vmm_translate_locked(uint64_t va, uint64_t *phys, unsigned char **bytes, uint64_t *run, unsigned *access);
int sim_vmm_span_locked(uint64_t addr, struct sim_span *out); /* 1 when addr is mapped */

/* ---- driver_ipc.c ---- */
/* The import holding addr (1 when found): *host its bytes, *run how many
 * bytes from addr stay in it. */
int sim_ipc_translate_locked(uint64_t addr, unsigned char **host, uint64_t *run);
int sim_ipc_span_locked(uint64_t addr, struct sim_span *out); /* 1 when addr is imported */
/* The teardown of ctx unmaps every handle it opened, whatever its reference
 * count: the mapping is a resource of the importing context. */
void sim_ipc_release_ctx_locked(struct CUctx_st *ctx);
static inline int sim_in_ipc_space(uint64_t addr) { return addr >= SIM_IPC_BASE && addr - SIM_IPC_BASE < SIM_IPC_SIZE; }

/* ---- driver_procaddr.c ---- */
void sim_trace(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif /* TL_SIMCUDA_H */
