/*
 * driver_graph.c — stream capture, graphs and graph memory.
 *
 * What the simulator models is what memory tools must get right about CUDA
 * graphs (cuda.h, "Graph memory nodes" of the programming guide):
 *
 *  - A capture (cuStreamBeginCapture_v2 .. cuStreamEndCapture) on a created
 *    stream turns cuMemAllocAsync / cuMemAllocFromPoolAsync on that stream
 *    into allocation nodes of the captured graph and cuMemFreeAsync into
 *    free nodes; cuGraphAddMemAllocNode / cuGraphAddMemFreeNode add them
 *    directly.  The pointer an allocation node returns is an address fixed
 *    for the node's lifetime (SIM_GRAPH_VA_BASE), backed by no memory yet:
 *    nothing is taken from the device while capturing.
 *  - A launch (cuGraphLaunch) backs the graph's allocations with the
 *    device's graph memory: the pool grows, in 2 MiB steps, to the most the
 *    launch has allocated at once on top of what earlier launches left
 *    allocated (USED_MEM_CURRENT), and keeps what it has (RESERVED_MEM_*)
 *    until cuDeviceGraphMemTrim gives the part not in use back.  An
 *    allocation a launch does not free stays allocated: it is freed by a free
 *    node of a later launch, cuMemFreeAsync or cuMemFree_v2; relaunching while
 *    one is still allocated is CUDA_ERROR_INVALID_VALUE unless the graph was
 *    instantiated with CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH.
 *  - Allocation sizes are rounded up to 512 bytes (SIM_ALIGN), as pool
 *    blocks are.
 *  - In global mode (and thread-local mode on the capturing thread)
 *    synchronous cuMemAlloc_v2 is not permitted while a capture is under way:
 *    CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, and the capture is invalidated
 *    (cuStreamEndCapture then answers CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
 *    and no graph).
 *
 * Deviations: only created streams can be captured (the legacy stream cannot
 * in CUDA either; the per-thread default stream can there, not here:
 * CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED); captured work other than memory
 * nodes is not recorded; dependencies are ignored (nodes run in the order
 * they were added); launching into a capturing stream is
 * CUDA_ERROR_NOT_SUPPORTED; node addresses are never reused.
 */
#include <stdlib.h>
#include <string.h>
#include <uthash.h>

#include "simcuda.h"

#define GRAPH_MAGIC 0x48505247u /* "GRPH" */
#define EXEC_MAGIC 0x43455847u  /* "GXEC" */
#define NODE_MAGIC 0x45444f4eu  /* "NODE" */
#define MAX_CAPTURES 64
#define INSTANTIATE_FLAGS_KNOWN 0xfull /* AUTO_FREE_ON_LAUNCH, UPLOAD, DEVICE_LAUNCH, USE_NODE_PRIORITY */
#define INSTANTIATE_AUTO_FREE 0x1ull

/* One allocation node's memory: its fixed address and whether a launch has
 * allocated it (and nothing freed it since). */
struct graph_alloc {
    uint64_t dptr; /* key */
    uint64_t size; /* rounded to SIM_ALIGN */
    int device;
    int allocated;
    int in_launch; /* scratch of launch_locked */
    UT_hash_handle hh;
};

enum node_type { NODE_ALLOC, NODE_FREE };
struct CUgraphNode_st {
    unsigned magic;
    enum node_type type;
    struct graph_alloc *alloc;
};

struct CUgraph_st {
    unsigned magic;
    struct CUgraphNode_st **nodes;
    size_t n, cap;
    int memory_nodes;
    int execs; /* executable graphs of it that exist */
    struct CUgraph_st *next;
};

struct CUgraphExec_st {
    unsigned magic;
    struct CUgraph_st *graph;
    struct CUgraphNode_st **nodes; /* the graph's nodes at instantiation */
    size_t n;
    unsigned long long flags;
    struct CUgraphExec_st *next;
};

/* A device's graph memory: physical pieces taken from the device, and what
 * the four CUgraphMem_attribute values report. */
struct graph_piece {
    uint64_t addr, size;
};
struct graph_mem {
    struct graph_piece *pieces;
    size_t n, cap;
    uint64_t reserved, reserved_high, used, used_high;
};

static struct CUgraph_st *graphs;
static struct CUgraphExec_st *execs;
static struct graph_alloc *allocs;
static struct graph_mem mem[SIM_MAX_DEVICES];
static struct sim_ranges node_va;
static int node_va_ready;
static struct CUstream_st *capturing[MAX_CAPTURES];
static int ncapturing; /* non-NULL slots of capturing[]; written under the lock, read with atomics */
static unsigned long long next_capture_id = 1;

static int graph_known(const struct CUgraph_st *g)
{
    for (const struct CUgraph_st *p = graphs; p; p = p->next)
        if (p == g)
            return 1;
    return 0;
}

static int exec_known(const struct CUgraphExec_st *e)
{
    for (const struct CUgraphExec_st *p = execs; p; p = p->next)
        if (p == e)
            return 1;
    return 0;
}

static struct CUgraph_st *graph_new_locked(void)
{
    struct CUgraph_st *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->magic = GRAPH_MAGIC;
    g->next = graphs;
    graphs = g;
    return g;
}

static void graph_free_locked(struct CUgraph_st *g)
{
    for (struct CUgraph_st **link = &graphs; *link; link = &(*link)->next) {
        if (*link == g) {
            *link = g->next;
            break;
        }
    }
    /* Nodes an executable graph still runs stay with it. */
    if (!g->execs)
        for (size_t i = 0; i < g->n; i++)
            free(g->nodes[i]);
    free(g->nodes);
    g->magic = 0;
    free(g);
}

static CUresult graph_add_node_locked(struct CUgraph_st *g, enum node_type type, struct graph_alloc *a,
                                      struct CUgraphNode_st **out)
{
    if (g->n == g->cap) {
        size_t ncap = g->cap ? g->cap * 2 : 8;
        struct CUgraphNode_st **n = realloc(g->nodes, ncap * sizeof *n);
        if (!n)
            return CUDA_ERROR_OUT_OF_MEMORY;
        g->nodes = n;
        g->cap = ncap;
    }
    struct CUgraphNode_st *node = calloc(1, sizeof *node);
    if (!node)
        return CUDA_ERROR_OUT_OF_MEMORY;
    node->magic = NODE_MAGIC;
    node->type = type;
    node->alloc = a;
    g->nodes[g->n++] = node;
    g->memory_nodes = 1;
    if (out)
        *out = node;
    return CUDA_SUCCESS;
}

/* An allocation node's address: reserved now, backed at launch. */
static CUresult node_alloc_locked(struct CUgraph_st *g, uint64_t bytesize, int device, CUdeviceptr *dptr,
                                  struct CUgraphNode_st **out)
{
    if (!node_va_ready) {
        if (sim_ranges_init(&node_va, SIM_GRAPH_VA_BASE, SIM_GRAPH_VA_SIZE) != 0)
            return CUDA_ERROR_OUT_OF_MEMORY;
        sim_reserve_va(SIM_GRAPH_VA_BASE, SIM_GRAPH_VA_SIZE);
        node_va_ready = 1;
    }
    if (bytesize > SIM_MAX_MEMORY)
        return CUDA_ERROR_OUT_OF_MEMORY;
    uint64_t size = sim_align_up(bytesize, SIM_ALIGN);
    uint64_t addr = sim_ranges_alloc(&node_va, size, SIM_ALIGN);
    struct graph_alloc *a = addr ? calloc(1, sizeof *a) : NULL;
    if (!a)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *a = (struct graph_alloc){.dptr = addr, .size = size, .device = device};
    CUresult rc = graph_add_node_locked(g, NODE_ALLOC, a, out);
    if (rc != CUDA_SUCCESS) {
        sim_ranges_free(&node_va, addr, size);
        free(a);
        return rc;
    }
    HASH_ADD(hh, allocs, dptr, sizeof a->dptr, a);
    *dptr = addr;
    return CUDA_SUCCESS;
}

static struct graph_alloc *alloc_find_locked(uint64_t dptr)
{
    struct graph_alloc *a;
    HASH_FIND(hh, allocs, &dptr, sizeof dptr, a);
    return a;
}

static CUresult node_free_locked(struct CUgraph_st *g, CUdeviceptr dptr, struct CUgraphNode_st **out)
{
    struct graph_alloc *a = alloc_find_locked(dptr);
    if (!a)
        return CUDA_ERROR_INVALID_VALUE; /* only graph allocations can be freed by a graph */
    return graph_add_node_locked(g, NODE_FREE, a, out);
}

/* ---- the devices' graph memory ---- */

static void raise_high(uint64_t *high, uint64_t now)
{
    if (now > *high)
        *high = now;
}

/* Grows device d's graph memory to at least `need` bytes. */
static CUresult mem_reserve_locked(int d, uint64_t need)
{
    struct graph_mem *m = &mem[d];
    if (need <= m->reserved)
        return CUDA_SUCCESS;
    uint64_t size = sim_align_up(need - m->reserved, SIM_GRANULARITY);
    if (m->n == m->cap) {
        size_t ncap = m->cap ? m->cap * 2 : 8;
        struct graph_piece *p = realloc(m->pieces, ncap * sizeof *p);
        if (!p)
            return CUDA_ERROR_OUT_OF_MEMORY;
        m->pieces = p;
        m->cap = ncap;
    }
    uint64_t addr = sim_ranges_alloc(&sim.dev[d].mem, size, SIM_GRANULARITY);
    if (!addr)
        return CUDA_ERROR_OUT_OF_MEMORY;
    m->pieces[m->n++] = (struct graph_piece){addr, size};
    m->reserved += size;
    raise_high(&m->reserved_high, m->reserved);
    return CUDA_SUCCESS;
}

/* Gives back the newest pieces while what stays still covers the memory in
 * use. */
static void mem_trim_locked(int d)
{
    struct graph_mem *m = &mem[d];
    while (m->n && m->reserved - m->pieces[m->n - 1].size >= m->used) {
        struct graph_piece p = m->pieces[--m->n];
        sim_memory_discard_locked(d, p.addr, p.size);
        sim_ranges_free(&sim.dev[d].mem, p.addr, p.size);
        m->reserved -= p.size;
    }
}

static void alloc_release_locked(struct graph_alloc *a)
{
    a->allocated = 0;
    mem[a->device].used -= a->size;
}

/* Runs the memory nodes of `e` in order.  Validated first, so a launch that
 * fails changes nothing. */
static CUresult launch_locked(struct CUgraphExec_st *e)
{
    uint64_t used[SIM_MAX_DEVICES], peak[SIM_MAX_DEVICES];
    for (int d = 0; d < SIM_MAX_DEVICES; d++)
        used[d] = peak[d] = mem[d].used;
    bool auto_free = (e->flags & INSTANTIATE_AUTO_FREE) != 0;
    for (size_t i = 0; i < e->n; i++)
        e->nodes[i]->alloc->in_launch = e->nodes[i]->alloc->allocated;
    for (size_t i = 0; i < e->n; i++) {
        struct graph_alloc *a = e->nodes[i]->alloc;
        if (e->nodes[i]->type == NODE_ALLOC) {
            if (a->in_launch && !auto_free)
                return CUDA_ERROR_INVALID_VALUE; /* last launch's allocation not freed */
            if (a->in_launch)
                used[a->device] -= a->size;
            a->in_launch = 1;
            used[a->device] += a->size;
            if (used[a->device] > peak[a->device])
                peak[a->device] = used[a->device];
        } else {
            if (!a->in_launch)
                return CUDA_ERROR_INVALID_VALUE; /* freeing what is not allocated */
            a->in_launch = 0;
            used[a->device] -= a->size;
        }
    }
    for (int d = 0; d < SIM_MAX_DEVICES; d++) {
        CUresult rc = mem_reserve_locked(d, peak[d]);
        if (rc != CUDA_SUCCESS)
            return rc;
    }
    for (size_t i = 0; i < e->n; i++)
        e->nodes[i]->alloc->allocated = e->nodes[i]->alloc->in_launch;
    for (int d = 0; d < SIM_MAX_DEVICES; d++) {
        mem[d].used = used[d];
        raise_high(&mem[d].used_high, peak[d]);
    }
    return CUDA_SUCCESS;
}

int sim_graph_free_outside_locked(uint64_t dptr)
{
    struct graph_alloc *a = alloc_find_locked(dptr);
    if (!a || !a->allocated)
        return 0;
    alloc_release_locked(a);
    return 1;
}

/* ---- capture ---- */

static struct CUstream_st **capture_slot_locked(const struct CUstream_st *s)
{
    for (int i = 0; i < MAX_CAPTURES; i++)
        if (capturing[i] == s)
            return &capturing[i];
    return NULL;
}

/* The created stream behind hStream, or NULL with *rc: the default streams
 * cannot be captured here. */
static struct CUstream_st *capture_stream_locked(CUstream hStream, CUresult *rc)
{
    int device;
    *rc = sim_stream_device_locked(hStream, &device);
    if (*rc != CUDA_SUCCESS)
        return NULL;
    if (hStream == NULL || hStream == CU_STREAM_LEGACY || hStream == CU_STREAM_PER_THREAD) {
        *rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        return NULL;
    }
    return hStream;
}

/* Begins a capture into a new graph, or into `into` (cuStreamBeginCaptureToGraph:
 * the program's graph, which an invalidated capture leaves to the program). */
static CUresult begin_capture(CUstream hStream, CUstreamCaptureMode mode, struct CUgraph_st *into)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
        mode != CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    struct CUstream_st *s = into && !graph_known(into) ? NULL : capture_stream_locked(hStream, &rc);
    if (s && s->capture_status != CU_STREAM_CAPTURE_STATUS_NONE)
        rc = CUDA_ERROR_ILLEGAL_STATE;
    struct CUstream_st **slot = s && rc == CUDA_SUCCESS ? capture_slot_locked(NULL) : NULL;
    if (s && rc == CUDA_SUCCESS && !slot)
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    struct CUgraph_st *g = rc != CUDA_SUCCESS ? NULL : into ? into : graph_new_locked();
    if (rc == CUDA_SUCCESS && !g)
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (rc == CUDA_SUCCESS) {
        s->capture_status = CU_STREAM_CAPTURE_STATUS_ACTIVE;
        s->capture_mode = mode;
        s->capture_graph = g;
        s->capture_graph_owned = into == NULL;
        s->capture_id = next_capture_id++;
        s->capture_thread = pthread_self();
        *slot = s;
        __atomic_store_n(&ncapturing, ncapturing + 1, __ATOMIC_RELAXED);
    }
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode)
{
    return begin_capture(hStream, mode, NULL);
}

SIM_EXPORT CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode)
{
    return begin_capture(hStream, mode, NULL);
}

/* Dependencies are ignored, as everywhere here; a graph is required. */
static CUresult begin_capture_to_graph(CUstream hStream, CUgraph hGraph, const CUgraphNode *dependencies,
                                       size_t numDependencies, CUstreamCaptureMode mode)
{
    if (!hGraph || (numDependencies && !dependencies))
        return sim_is_initialized() ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_INITIALIZED;
    return begin_capture(hStream, mode, hGraph);
}

SIM_EXPORT CUresult cuStreamBeginCaptureToGraph(CUstream hStream, CUgraph hGraph, const CUgraphNode *dependencies,
                                                const CUgraphEdgeData *dependencyData, size_t numDependencies,
                                                CUstreamCaptureMode mode)
{
    (void)dependencyData;
    return begin_capture_to_graph(hStream, hGraph, dependencies, numDependencies, mode);
}

SIM_EXPORT CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream hStream, CUgraph hGraph,
                                                     const CUgraphNode *dependencies,
                                                     const CUgraphEdgeData *dependencyData, size_t numDependencies,
                                                     CUstreamCaptureMode mode)
{
    (void)dependencyData;
    return begin_capture_to_graph(hStream, hGraph, dependencies, numDependencies, mode);
}

static void capture_stop_locked(struct CUstream_st *s)
{
    struct CUstream_st **slot = capture_slot_locked(s);
    if (slot) {
        *slot = NULL;
        __atomic_store_n(&ncapturing, ncapturing - 1, __ATOMIC_RELAXED);
    }
    s->capture_status = CU_STREAM_CAPTURE_STATUS_NONE;
    s->capture_graph = NULL;
}

static CUresult end_capture(CUstream hStream, CUgraph *phGraph)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!phGraph)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc;
    sim_lock();
    struct CUstream_st *s = capture_stream_locked(hStream, &rc);
    if (rc == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED || (s && s->capture_status == CU_STREAM_CAPTURE_STATUS_NONE))
        rc = CUDA_ERROR_ILLEGAL_STATE; /* no capture under way on this stream */
    else if (s && s->capture_mode != CU_STREAM_CAPTURE_MODE_RELAXED &&
             !pthread_equal(s->capture_thread, pthread_self()))
        rc = CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
    if (rc == CUDA_SUCCESS) {
        struct CUgraph_st *g = s->capture_graph;
        if (s->capture_status == CU_STREAM_CAPTURE_STATUS_INVALIDATED) {
            if (s->capture_graph_owned)
                graph_free_locked(g);
            *phGraph = NULL;
            rc = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
        } else {
            *phGraph = g;
        }
        capture_stop_locked(s);
    }
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuStreamEndCapture(CUstream hStream, CUgraph *phGraph) { return end_capture(hStream, phGraph); }
SIM_EXPORT CUresult cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph) { return end_capture(hStream, phGraph); }

/* The capture state of a stream; the default streams never capture here. */
static CUresult capture_info(CUstream hStream, CUstreamCaptureStatus *status, cuuint64_t *id, CUgraph *graph,
                             const CUgraphNode **deps, const CUgraphEdgeData **edges, size_t *ndeps)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!status)
        return CUDA_ERROR_INVALID_VALUE;
    int device;
    sim_lock();
    CUresult rc = sim_stream_device_locked(hStream, &device);
    if (rc == CUDA_SUCCESS) {
        const struct CUstream_st *s =
            hStream == NULL || hStream == CU_STREAM_LEGACY || hStream == CU_STREAM_PER_THREAD ? NULL : hStream;
        *status = s ? (CUstreamCaptureStatus)s->capture_status : CU_STREAM_CAPTURE_STATUS_NONE;
        bool active = *status != CU_STREAM_CAPTURE_STATUS_NONE;
        if (id && active)
            *id = s->capture_id;
        if (graph && active)
            *graph = s->capture_graph;
        if (deps && active)
            *deps = NULL;
        if (edges && active)
            *edges = NULL;
        if (ndeps && active)
            *ndeps = 0;
    }
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
    return capture_info(hStream, captureStatus, NULL, NULL, NULL, NULL, NULL);
}

SIM_EXPORT CUresult cuStreamIsCapturing_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
    return capture_info(hStream, captureStatus, NULL, NULL, NULL, NULL, NULL);
}

SIM_EXPORT CUresult cuStreamGetCaptureInfo_v2(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                              cuuint64_t *id_out, CUgraph *graph_out,
                                              const CUgraphNode **dependencies_out, size_t *numDependencies_out)
{
    return capture_info(hStream, captureStatus_out, id_out, graph_out, dependencies_out, NULL, numDependencies_out);
}

SIM_EXPORT CUresult cuStreamGetCaptureInfo_v2_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                                   cuuint64_t *id_out, CUgraph *graph_out,
                                                   const CUgraphNode **dependencies_out, size_t *numDependencies_out)
{
    return capture_info(hStream, captureStatus_out, id_out, graph_out, dependencies_out, NULL, numDependencies_out);
}

SIM_EXPORT CUresult cuStreamGetCaptureInfo_v3(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                              cuuint64_t *id_out, CUgraph *graph_out,
                                              const CUgraphNode **dependencies_out,
                                              const CUgraphEdgeData **edgeData_out, size_t *numDependencies_out)
{
    return capture_info(hStream, captureStatus_out, id_out, graph_out, dependencies_out, edgeData_out,
                        numDependencies_out);
}

SIM_EXPORT CUresult cuStreamGetCaptureInfo_v3_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                                   cuuint64_t *id_out, CUgraph *graph_out,
                                                   const CUgraphNode **dependencies_out,
                                                   const CUgraphEdgeData **edgeData_out, size_t *numDependencies_out)
{
    return capture_info(hStream, captureStatus_out, id_out, graph_out, dependencies_out, edgeData_out,
                        numDependencies_out);
}

/* The capturing created stream behind s (a handle the caller validated), or
 * NULL when s is not capturing. */
static struct CUstream_st *captured_locked(CUstream s)
{
    if (s == NULL || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD)
        return NULL;
    return s->capture_status != CU_STREAM_CAPTURE_STATUS_NONE ? s : NULL;
}

CUresult sim_graph_capture_alloc_locked(CUstream hStream, uint64_t bytesize, int device, CUdeviceptr *dptr,
                                        int *handled)
{
    struct CUstream_st *s = ncapturing ? captured_locked(hStream) : NULL;
    *handled = s != NULL;
    if (!s)
        return CUDA_SUCCESS;
    if (s->capture_status == CU_STREAM_CAPTURE_STATUS_INVALIDATED)
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    return node_alloc_locked(s->capture_graph, bytesize, device, dptr, NULL);
}

CUresult sim_graph_capture_free_locked(CUstream hStream, CUdeviceptr dptr, int *handled)
{
    struct CUstream_st *s = ncapturing ? captured_locked(hStream) : NULL;
    *handled = s != NULL;
    if (!s)
        return CUDA_SUCCESS;
    if (s->capture_status == CU_STREAM_CAPTURE_STATUS_INVALIDATED)
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    return node_free_locked(s->capture_graph, dptr, NULL);
}

int sim_graph_captures_under_way(void)
{
    return __atomic_load_n(&ncapturing, __ATOMIC_RELAXED) != 0;
}

/* The calling thread's capture interaction mode (cuda.h,
 * cuThreadExchangeStreamCaptureMode): GLOBAL by default. */
static __thread int thread_capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

SIM_EXPORT CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
    if (!mode || (*mode != CU_STREAM_CAPTURE_MODE_GLOBAL && *mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
                  *mode != CU_STREAM_CAPTURE_MODE_RELAXED))
        return CUDA_ERROR_INVALID_VALUE;
    int old = thread_capture_mode;
    thread_capture_mode = (int)*mode;
    *mode = (CUstreamCaptureMode)old;
    return CUDA_SUCCESS;
}

/* cuda.h: a thread in GLOBAL mode may not make unsafe calls while it has a
 * capture of its own under way (not begun relaxed) or another thread has a
 * GLOBAL one; in THREAD_LOCAL mode only its own captures count; RELAXED
 * threads are never prohibited. */
CUresult sim_graph_unsafe_call_locked(void)
{
    CUresult rc = CUDA_SUCCESS;
    for (int i = 0; i < MAX_CAPTURES; i++) {
        struct CUstream_st *s = capturing[i];
        if (!s || thread_capture_mode == CU_STREAM_CAPTURE_MODE_RELAXED)
            continue;
        bool own = pthread_equal(s->capture_thread, pthread_self());
        bool prohibits = (own && s->capture_mode != CU_STREAM_CAPTURE_MODE_RELAXED) ||
                         (thread_capture_mode == CU_STREAM_CAPTURE_MODE_GLOBAL &&
                          s->capture_mode == CU_STREAM_CAPTURE_MODE_GLOBAL);
        if (prohibits) {
            s->capture_status = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
            rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        }
    }
    return rc;
}

void sim_graph_stream_gone_locked(struct CUstream_st *s)
{
    if (!capture_slot_locked(s))
        return;
    if (s->capture_graph_owned)
        graph_free_locked(s->capture_graph);
    capture_stop_locked(s);
}

/* ---- graphs ---- */

SIM_EXPORT CUresult cuGraphCreate(CUgraph *phGraph, unsigned int flags)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!phGraph || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    struct CUgraph_st *g = graph_new_locked();
    if (g)
        *phGraph = g;
    sim_unlock();
    return g ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

SIM_EXPORT CUresult cuGraphDestroy(CUgraph hGraph)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    sim_lock();
    CUresult rc = graph_known(hGraph) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        graph_free_locked(hGraph);
    sim_unlock();
    return rc;
}

/* cuda.h: with nodes NULL, *numNodes is set to the count; otherwise up to
 * *numNodes nodes are written, the rest of the array is set to NULL and
 * *numNodes to the number written. */
SIM_EXPORT CUresult cuGraphGetNodes(CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!numNodes)
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    CUresult rc = graph_known(hGraph) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS && !nodes) {
        *numNodes = hGraph->n;
    } else if (rc == CUDA_SUCCESS) {
        size_t written = hGraph->n < *numNodes ? hGraph->n : *numNodes;
        for (size_t i = 0; i < *numNodes; i++)
            nodes[i] = i < written ? hGraph->nodes[i] : NULL;
        *numNodes = written;
    }
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuGraphAddMemAllocNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                           size_t numDependencies, CUDA_MEM_ALLOC_NODE_PARAMS *nodeParams)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!phGraphNode || !nodeParams || nodeParams->bytesize == 0 || (numDependencies && !dependencies) ||
        nodeParams->poolProps.allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
        nodeParams->poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
        nodeParams->poolProps.handleTypes != CU_MEM_HANDLE_TYPE_NONE ||
        !sim_device_valid(nodeParams->poolProps.location.id))
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    CUresult rc = graph_known(hGraph) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        rc = node_alloc_locked(hGraph, nodeParams->bytesize, nodeParams->poolProps.location.id, &nodeParams->dptr,
                               phGraphNode);
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuGraphAddMemFreeNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
                                          size_t numDependencies, CUdeviceptr dptr)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!phGraphNode || (numDependencies && !dependencies))
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    CUresult rc = graph_known(hGraph) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        rc = node_free_locked(hGraph, dptr, phGraphNode);
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!phGraphExec || (flags & ~INSTANTIATE_FLAGS_KNOWN))
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    CUresult rc = graph_known(hGraph) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    /* A graph with memory nodes has at most one executable graph at a time. */
    if (rc == CUDA_SUCCESS && hGraph->memory_nodes && hGraph->execs)
        rc = CUDA_ERROR_INVALID_VALUE;
    struct CUgraphExec_st *e = rc == CUDA_SUCCESS ? calloc(1, sizeof *e) : NULL;
    if (rc == CUDA_SUCCESS && e && hGraph->n) {
        e->nodes = malloc(hGraph->n * sizeof *e->nodes);
        if (!e->nodes) {
            free(e);
            e = NULL;
        }
    }
    if (rc == CUDA_SUCCESS && !e)
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (rc == CUDA_SUCCESS) {
        e->magic = EXEC_MAGIC;
        e->graph = hGraph;
        if (hGraph->n)
            memcpy(e->nodes, hGraph->nodes, hGraph->n * sizeof *e->nodes);
        e->n = hGraph->n;
        e->flags = flags;
        e->next = execs;
        execs = e;
        hGraph->execs++;
        *phGraphExec = e;
    }
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuGraphExecDestroy(CUgraphExec hGraphExec)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    for (struct CUgraphExec_st **link = &execs; *link; link = &(*link)->next) {
        struct CUgraphExec_st *e = *link;
        if (e != hGraphExec)
            continue;
        *link = e->next;
        if (graph_known(e->graph))
            e->graph->execs--;
        else
            for (size_t i = 0; i < e->n; i++)
                free(e->nodes[i]); /* the graph went first and left them to us */
        free(e->nodes);
        e->magic = 0;
        free(e);
        rc = CUDA_SUCCESS;
        break;
    }
    sim_unlock();
    return rc;
}

static CUresult graph_launch(CUgraphExec hGraphExec, CUstream hStream)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    int device;
    sim_lock();
    CUresult rc = exec_known(hGraphExec) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    if (rc == CUDA_SUCCESS)
        rc = sim_stream_device_locked(hStream, &device);
    if (rc == CUDA_SUCCESS && captured_locked(hStream))
        rc = CUDA_ERROR_NOT_SUPPORTED;
    if (rc == CUDA_SUCCESS)
        rc = launch_locked(hGraphExec);
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) { return graph_launch(hGraphExec, hStream); }
SIM_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{
    return graph_launch(hGraphExec, hStream);
}

/* ---- graph memory attributes ---- */

SIM_EXPORT CUresult cuDeviceGraphMemTrim(CUdevice device)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!sim_device_valid(device))
        return CUDA_ERROR_INVALID_DEVICE;
    sim_lock();
    mem_trim_locked(device);
    sim_unlock();
    return CUDA_SUCCESS;
}

SIM_EXPORT CUresult cuDeviceGetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr, void *value)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!sim_device_valid(device))
        return CUDA_ERROR_INVALID_DEVICE;
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    if (sim_pool_queries_refused()) /* SIMCUDA_POOL_QUERY, as for pools */
        return CUDA_ERROR_DEINITIALIZED;
    CUresult rc = CUDA_SUCCESS;
    sim_lock();
    const struct graph_mem *m = &mem[device];
    switch (attr) {
    case CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT: *(cuuint64_t *)value = m->used; break;
    case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH: *(cuuint64_t *)value = m->used_high; break;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT: *(cuuint64_t *)value = m->reserved; break;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH: *(cuuint64_t *)value = m->reserved_high; break;
    default: rc = CUDA_ERROR_INVALID_VALUE; break;
    }
    sim_unlock();
    return rc;
}

/* Only the highs can be set, and only to 0: they restart from the current
 * values (cuda.h). */
SIM_EXPORT CUresult cuDeviceSetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr, void *value)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!sim_device_valid(device))
        return CUDA_ERROR_INVALID_DEVICE;
    if (!value || *(cuuint64_t *)value != 0 ||
        (attr != CU_GRAPH_MEM_ATTR_USED_MEM_HIGH && attr != CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH))
        return CUDA_ERROR_INVALID_VALUE;
    sim_lock();
    struct graph_mem *m = &mem[device];
    if (attr == CU_GRAPH_MEM_ATTR_USED_MEM_HIGH)
        m->used_high = m->used;
    else
        m->reserved_high = m->reserved;
    sim_unlock();
    return CUDA_SUCCESS;
}
