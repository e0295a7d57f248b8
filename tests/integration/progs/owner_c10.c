/* Stands in for PyTorch's libc10_cuda.so: the module name is what the
 * default owner rule matches.  Segments come from cudaMalloc (the caching
 * allocator's reserve), tensors from cudaMallocAsync (as under
 * backend:cudaMallocAsync, where each tensor is the program's own). */
#include "cudart_compat.h"
void *c10_segment_alloc(size_t bytes);
void *c10_async_tensor(size_t bytes);
__attribute__((noinline)) void *c10_segment_alloc(size_t bytes)
{
    void *p = NULL;
    return cudaMalloc(&p, bytes) == cudaSuccess ? p : NULL;
}
__attribute__((noinline)) void *c10_async_tensor(size_t bytes)
{
    void *p = NULL;
    return cudaMallocAsync(&p, bytes, NULL) == cudaSuccess ? p : NULL;
}

/* ---- PyTorch's two paths, under the names libc10_cuda.so really has ------
 *
 * pytorch/pytorch c10/cuda/CUDACachingAllocator.cpp: NativeCachingAllocator::
 * allocate (and raw_alloc) either call the caching path (NativeCachingAllocator::
 * malloc -> DeviceCachingAllocator::malloc -> alloc_block -> cudaMalloc, or
 * with expandable_segments:True a cuMemAddressReserve'd range that
 * ExpandableSegment::map grows with cuMemCreate and mapAndSetAccess maps with
 * cuMemMap), or, with PYTORCH_NO_CUDA_MEMORY_CACHING=1, the file-static
 * uncached_allocate: one cudaMalloc per tensor.  Here raw_alloc stands for a
 * build where uncached_allocate was inlined into its caller.  The mangled
 * names are those of a real torch 2.11 run (alloc_block, ExpandableSegment),
 * or g++'s for the same declarations. */
#include <stdlib.h>
#include <string.h>

#define NATIVE "_ZN3c104cuda20CUDACachingAllocator6Native"
#define SEGMENT_SIZE (18ull << 30) /* ~1.1x the simulated 16 GiB GPU, as PyTorch reserves */

static int uncached(void)
{
    const char *v = getenv("PYTORCH_NO_CUDA_MEMORY_CACHING");
    return v && *v && strcmp(v, "0") != 0;
}

static int expandable(void)
{
    const char *v = getenv("PYTORCH_CUDA_ALLOC_CONF");
    return v && strstr(v, "expandable_segments:True") != NULL;
}

static void *driver(const char *name)
{
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult status;
    if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &status) != cudaSuccess)
        return NULL;
    return fn;
}

/* One expandable segment per pool (large, small), grown at its end. */
struct segment {
    CUdeviceptr base;
    size_t used;
};
static struct segment segments[2];

__attribute__((noinline)) int es_map_and_set_access(struct segment *s, CUmemGenericAllocationHandle h, size_t bytes)
    __asm__(NATIVE "12_GLOBAL__N_117ExpandableSegment15mapAndSetAccessEmm");
__attribute__((noinline)) int es_map_and_set_access(struct segment *s, CUmemGenericAllocationHandle h, size_t bytes)
{
    typedef CUresult (*map_fn)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
    map_fn map = (map_fn)driver("cuMemMap");
    return map && map(s->base + s->used, bytes, 0, h, 0) == CUDA_SUCCESS ? 0 : -1;
}

__attribute__((noinline)) void *es_map(struct segment *s, size_t bytes)
    __asm__(NATIVE "12_GLOBAL__N_117ExpandableSegment3mapENS3_12SegmentRangeE");
__attribute__((noinline)) void *es_map(struct segment *s, size_t bytes)
{
    typedef CUresult (*create_fn)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
    create_fn create = (create_fn)driver("cuMemCreate");
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    CUmemGenericAllocationHandle h;
    if (!create || create(&h, bytes, &prop, 0) != CUDA_SUCCESS || es_map_and_set_access(s, h, bytes) != 0)
        return NULL;
    void *p = (void *)(uintptr_t)(s->base + s->used);
    s->used += bytes;
    return p;
}

__attribute__((noinline)) void *alloc_block(size_t bytes, int pool)
    __asm__(NATIVE "22DeviceCachingAllocator11alloc_blockERNS2_12_GLOBAL__N_111AllocParamsEbRKSt10shared_ptrINS_15GatheredContextEERSt11unique_lockISt15recursive_mutexE");
__attribute__((noinline)) void *alloc_block(size_t bytes, int pool)
{
    if (!expandable()) {
        void *p = NULL;
        return cudaMalloc(&p, bytes) == cudaSuccess ? p : NULL;
    }
    struct segment *s = &segments[pool];
    if (!s->base) {
        typedef CUresult (*reserve_fn)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
        reserve_fn reserve = (reserve_fn)driver("cuMemAddressReserve");
        if (!reserve || reserve(&s->base, SEGMENT_SIZE, 0, 0, 0) != CUDA_SUCCESS)
            return NULL;
    }
    size_t rounded = (bytes + (2u << 20) - 1) & ~(size_t)((2u << 20) - 1);
    return es_map(s, rounded);
}

__attribute__((noinline)) void *device_malloc(size_t bytes, int pool)
    __asm__(NATIVE "22DeviceCachingAllocator6mallocEmP11CUstream_st");
__attribute__((noinline)) void *device_malloc(size_t bytes, int pool)
{
    return alloc_block(bytes, pool);
}

__attribute__((noinline)) void *native_malloc(size_t bytes, int pool)
    __asm__(NATIVE "22NativeCachingAllocator6mallocEPPvamP11CUstream_st");
__attribute__((noinline)) void *native_malloc(size_t bytes, int pool)
{
    return device_malloc(bytes, pool);
}

static __attribute__((noinline)) void *uncached_allocate(size_t bytes) __asm__(NATIVE "L17uncached_allocateEm");
static __attribute__((noinline)) void *uncached_allocate(size_t bytes)
{
    void *p = NULL;
    return cudaMalloc(&p, bytes) == cudaSuccess ? p : NULL; /* UNCACHED-SITE */
}

__attribute__((noinline)) void *native_allocate(size_t bytes) __asm__(NATIVE "22NativeCachingAllocator8allocateEm");
__attribute__((noinline)) void *native_allocate(size_t bytes)
{
    return uncached() ? uncached_allocate(bytes) : native_malloc(bytes, 0);
}

__attribute__((noinline)) void *native_raw_alloc(size_t bytes) __asm__(NATIVE "22NativeCachingAllocator9raw_allocEm");
__attribute__((noinline)) void *native_raw_alloc(size_t bytes)
{
    if (uncached()) {
        void *p = NULL;
        return cudaMalloc(&p, bytes) == cudaSuccess ? p : NULL; /* RAW-UNCACHED-SITE */
    }
    return native_malloc(bytes, 1);
}

/* The program's view: a tensor, a raw allocation, and freeing a tensor
 * (uncached_delete frees it; the caching path keeps the block cached). */
void *c10_tensor(size_t bytes);
void *c10_raw_alloc(size_t bytes);
void c10_tensor_free(void *p);
void *c10_tensor(size_t bytes)
{
    return native_allocate(bytes);
}
void *c10_raw_alloc(size_t bytes)
{
    return native_raw_alloc(bytes);
}
void c10_tensor_free(void *p)
{
    if (uncached())
        cudaFree(p);
}
