/*
 * sleep_wake.c — a model server's sleep, wake and unload, as vLLM's sleep
 * mode does them with its CuMemAllocator.
 *
 * The weights (4 chunks of 8 MiB) and the KV cache (4 blocks of 16 MiB) live
 * in VMM memory: one cuMemAddressReserve each, a cuMemCreate handle per
 * chunk mapped with cuMemMap.  Each request's activations come from the
 * default stream-ordered pool with a release threshold of UINT64_MAX (as
 * PyTorch's backend:cudaMallocAsync sets it), so the pool caches 32 MiB.
 *
 * Sleep (vLLM level 1): the weights are copied to pinned host memory, every
 * chunk is unmapped and its handle released, the address reservations are
 * kept, and the activation cache is trimmed (what empty_cache does for that
 * backend).  Wake: a new handle per chunk, mapped at the same address, the
 * weights copied back.  Two sleep/wake cycles, three requests each way.
 * Unload: the weights and the KV cache are freed; the activation cache still
 * holds its 32 MiB until the pool is trimmed.  With --forget the unload
 * misses one weight chunk: 8 MiB of memory and its mapping leak.
 *
 * A snapshot is written at each state (labels "awake", "asleep", "woken",
 * "unloaded", "trimmed") and a mark ends every request and state change.
 *
 *   sleep_wake [--forget]
 */
#include "cudart_compat.h"
#include "tensorleak.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MiB (1u << 20)
#define WEIGHT_CHUNK (8 * MiB)
#define WEIGHT_CHUNKS 4
#define KV_BLOCK (16 * MiB)
#define KV_BLOCKS 4

typedef CUresult (*reserve_fn)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
typedef CUresult (*addrfree_fn)(CUdeviceptr, size_t);
typedef CUresult (*create_fn)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
typedef CUresult (*release_fn)(CUmemGenericAllocationHandle);
typedef CUresult (*map_fn)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
typedef CUresult (*unmap_fn)(CUdeviceptr, size_t);
typedef CUresult (*access_fn)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
typedef CUresult (*copy_fn)(CUdeviceptr, CUdeviceptr, size_t);

static reserve_fn mem_reserve;
static addrfree_fn mem_address_free;
static create_fn mem_create;
static release_fn mem_release;
static map_fn mem_map;
static unmap_fn mem_unmap;
static access_fn mem_set_access;
static copy_fn mem_copy; /* unified addressing: either side may be host memory */

/* A VMM region: one reservation, a handle per chunk (0 while asleep). */
struct region {
    CUdeviceptr base;
    size_t chunk;
    int chunks;
    CUmemGenericAllocationHandle handle[KV_BLOCKS > WEIGHT_CHUNKS ? KV_BLOCKS : WEIGHT_CHUNKS];
};

static void *entry(const char *name)
{
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult status;
    if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &status) != cudaSuccess || !fn) {
        fprintf(stderr, "sleep_wake: no driver entry point %s\n", name);
        exit(1);
    }
    return fn;
}

static void check_cu(CUresult rc, const char *what)
{
    if (rc != CUDA_SUCCESS) {
        fprintf(stderr, "sleep_wake: %s failed: %d\n", what, (int)rc);
        exit(1);
    }
}

static void check_rt(cudaError_t rc, const char *what)
{
    if (rc != cudaSuccess) {
        fprintf(stderr, "sleep_wake: %s failed: %s\n", what, cudaGetErrorString(rc));
        exit(1);
    }
}

static __attribute__((noinline)) void reserve_region(struct region *r, size_t chunk, int chunks)
{
    r->chunk = chunk;
    r->chunks = chunks;
    check_cu(mem_reserve(&r->base, chunk * (size_t)chunks, 0, 0, 0), "cuMemAddressReserve"); /* RESERVE-SITE */
}

/* Backs chunk i of the region with a new handle at its fixed address. */
static __attribute__((noinline)) void map_chunk(struct region *r, int i)
{
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    CUdeviceptr at = r->base + (CUdeviceptr)i * r->chunk;
    check_cu(mem_create(&r->handle[i], r->chunk, &prop, 0), "cuMemCreate"); /* HANDLE-SITE */
    check_cu(mem_map(at, r->chunk, 0, r->handle[i], 0), "cuMemMap");     /* MAP-SITE */
    CUmemAccessDesc access = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    check_cu(mem_set_access(at, r->chunk, &access, 1), "cuMemSetAccess");
}

/* Gives chunk i's physical memory back; the address stays reserved. */
static void unmap_chunk(struct region *r, int i)
{
    check_cu(mem_unmap(r->base + (CUdeviceptr)i * r->chunk, r->chunk), "cuMemUnmap");
    check_cu(mem_release(r->handle[i]), "cuMemRelease");
    r->handle[i] = 0;
}

static void map_region(struct region *r)
{
    for (int i = 0; i < r->chunks; i++)
        map_chunk(r, i);
}

static void unmap_region(struct region *r)
{
    for (int i = 0; i < r->chunks; i++)
        if (r->handle[i])
            unmap_chunk(r, i);
}

static __attribute__((noinline)) void *activation(size_t bytes, cudaStream_t s)
{
    void *p = NULL;
    check_rt(cudaMallocAsync(&p, bytes, s), "cudaMallocAsync"); /* ACTIVATION-SITE */
    return p;
}

static void serve_request(cudaStream_t s)
{
    void *a = activation(4 * MiB, s), *b = activation(MiB, s);
    check_rt(cudaFreeAsync(b, s), "cudaFreeAsync");
    check_rt(cudaFreeAsync(a, s), "cudaFreeAsync");
    check_rt(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    tensorleak_mark("request");
}

static void serve(cudaStream_t s, int requests)
{
    for (int i = 0; i < requests; i++)
        serve_request(s);
}

static void *backup;

static void sleep_level1(struct region *weights, struct region *kv, cudaMemPool_t pool)
{
    size_t bytes = weights->chunk * (size_t)weights->chunks;
    check_rt(cudaMallocHost(&backup, bytes), "cudaMallocHost"); /* BACKUP-SITE */
    check_cu(mem_copy((CUdeviceptr)(uintptr_t)backup, weights->base, bytes), "weights to host");
    unmap_region(weights);
    unmap_region(kv);
    check_rt(cudaMemPoolTrimTo(pool, 0), "cudaMemPoolTrimTo");
}

static void wake(struct region *weights, struct region *kv)
{
    size_t bytes = weights->chunk * (size_t)weights->chunks;
    map_region(weights);
    map_region(kv);
    check_cu(mem_copy(weights->base, (CUdeviceptr)(uintptr_t)backup, bytes), "weights back");
    check_rt(cudaFreeHost(backup), "cudaFreeHost");
    backup = NULL;
}

static size_t device_used(void)
{
    size_t free_bytes = 0, total = 0;
    check_rt(cudaMemGetInfo(&free_bytes, &total), "cudaMemGetInfo");
    return total - free_bytes;
}

static void state(const char *label)
{
    tensorleak_mark(label);
    tensorleak_snapshot(label);
    printf("sleep_wake: %-8s device memory used %zu MiB\n", label, device_used() / MiB);
}

int main(int argc, char **argv)
{
    int forget = argc > 1 && strcmp(argv[1], "--forget") == 0;
    if (cudaFree(NULL) != cudaSuccess) /* initialise the runtime, as frameworks do */
        return 1;
    mem_reserve = (reserve_fn)entry("cuMemAddressReserve");
    mem_address_free = (addrfree_fn)entry("cuMemAddressFree");
    mem_create = (create_fn)entry("cuMemCreate");
    mem_release = (release_fn)entry("cuMemRelease");
    mem_map = (map_fn)entry("cuMemMap");
    mem_unmap = (unmap_fn)entry("cuMemUnmap");
    mem_set_access = (access_fn)entry("cuMemSetAccess");
    mem_copy = (copy_fn)entry("cuMemcpy");

    cudaStream_t stream;
    check_rt(cudaStreamCreate(&stream), "cudaStreamCreate");
    cudaMemPool_t pool;
    check_rt(cudaDeviceGetDefaultMemPool(&pool, 0), "cudaDeviceGetDefaultMemPool");
    uint64_t threshold = UINT64_MAX;
    check_rt(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold), "release threshold");

    static struct region weights, kv;
    reserve_region(&weights, WEIGHT_CHUNK, WEIGHT_CHUNKS);
    reserve_region(&kv, KV_BLOCK, KV_BLOCKS);
    map_region(&weights);
    map_region(&kv);
    /* Weights with a pattern the wake must bring back. */
    size_t wbytes = WEIGHT_CHUNK * (size_t)WEIGHT_CHUNKS;
    unsigned char *host = malloc(wbytes), *check = malloc(wbytes);
    if (!host || !check)
        return 1;
    for (size_t i = 0; i < wbytes; i++)
        host[i] = (unsigned char)(i * 7 + 3);
    check_cu(mem_copy(weights.base, (CUdeviceptr)(uintptr_t)host, wbytes), "weights in");

    serve(stream, 3);
    state("awake");
    for (int cycle = 0; cycle < 2; cycle++) {
        sleep_level1(&weights, &kv, pool);
        state("asleep");
        wake(&weights, &kv);
        serve(stream, 3);
        state("woken");
    }
    check_cu(mem_copy((CUdeviceptr)(uintptr_t)check, weights.base, wbytes), "weights out");
    printf("sleep_wake: weights %s after 2 sleeps\n", memcmp(host, check, wbytes) == 0 ? "intact" : "CHANGED");

    /* Unload: the model's memory goes back to the driver, its addresses too. */
    for (int i = 0; i < weights.chunks - forget; i++)
        unmap_chunk(&weights, i);
    unmap_region(&kv);
    check_cu(mem_address_free(kv.base, kv.chunk * (size_t)kv.chunks), "cuMemAddressFree");
    if (!forget)
        check_cu(mem_address_free(weights.base, weights.chunk * (size_t)weights.chunks), "cuMemAddressFree");
    state("unloaded");
    check_rt(cudaMemPoolTrimTo(pool, 0), "cudaMemPoolTrimTo");
    state("trimmed");
    free(host);
    free(check);
    return 0;
}
