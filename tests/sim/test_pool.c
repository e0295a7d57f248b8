/*
 * test_pool.c — stream-ordered pools: chunked reservation, release threshold,
 * TrimTo, truthful attributes.  Runs with SIMCUDA_MEMORY=256M.
 */
#include <stdint.h>

#include "sim_test.h"

#define CAPACITY (256 * MiB)

static cuuint64_t attr(CUmemoryPool pool, CUmemPool_attribute a)
{
    cuuint64_t v = 0xdead;
    cu_ok(cuMemPoolGetAttribute(pool, a, &v));
    return v;
}

#define reserved(p) attr(p, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)
#define used(p) attr(p, CU_MEMPOOL_ATTR_USED_MEM_CURRENT)

static CUmemoryPool default_pool(void)
{
    CUmemoryPool pool = NULL, current = NULL;
    cu_ok(cuDeviceGetDefaultMemPool(&pool, 0));
    cu_ok(cuDeviceGetMemPool(&current, 0));
    cr_assert_eq(pool, current);
    return pool;
}

static CUmemoryPool new_pool(size_t max_size)
{
    CUmemPoolProps props = { 0 };
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = 0;
    props.maxSize = max_size;
    CUmemoryPool pool;
    cu_ok(cuMemPoolCreate(&pool, &props));
    return pool;
}

Test(pool, a_fresh_default_pool_reserves_nothing)
{
    sim_start(0);
    CUmemoryPool pool = default_pool();
    cr_assert_eq(attr(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD), 0);
    cr_assert_eq(reserved(pool), 0);
    cr_assert_eq(used(pool), 0);
    int reuse = 0;
    cu_ok(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, &reuse));
    cr_assert_eq(reuse, 1);
}

Test(pool, allocation_reserves_a_32MiB_chunk_and_suballocates)
{
    sim_start(0);
    CUmemoryPool pool = default_pool();
    CUdeviceptr a, b, c;
    cu_ok(cuMemAllocAsync(&a, 1, NULL));
    cu_ok(cuMemAllocAsync(&b, 1000, NULL));
    cu_ok(cuMemAllocAsync(&c, 1 * MiB, NULL));
    cr_assert_eq(a % 512, 0);
    cr_assert_eq(b - a, 512);
    cr_assert_eq(c - b, 1024);
    cr_assert_eq(reserved(pool), 32 * MiB);
    cr_assert_eq(used(pool), 512 + 1024 + 1 * MiB);
    cr_assert_eq(sim_free_bytes(), CAPACITY - 32 * MiB, "the whole chunk is taken from the device");
}

Test(pool, large_requests_get_a_chunk_rounded_to_2MiB)
{
    sim_start(0);
    CUmemoryPool pool = default_pool();
    CUdeviceptr p;
    cu_ok(cuMemAllocAsync(&p, 50 * MiB + 1, NULL));
    cr_assert_eq(reserved(pool), 52 * MiB);
    cr_assert_eq(used(pool), 50 * MiB + 512);
    cr_assert_eq(sim_free_bytes(), CAPACITY - 52 * MiB);
}

Test(pool, freed_blocks_stay_reserved_until_a_synchronisation_with_threshold_0)
{
    sim_start(0);
    CUmemoryPool pool = default_pool();
    CUstream s;
    cu_ok(cuStreamCreate(&s, 0));
    CUdeviceptr p;
    cu_ok(cuMemAllocAsync(&p, 4 * MiB, s));
    cu_ok(cuMemFreeAsync(p, s));
    cr_assert_eq(used(pool), 0);
    cr_assert_eq(reserved(pool), 32 * MiB);
    cr_assert_eq(sim_free_bytes(), CAPACITY - 32 * MiB);
    cu_ok(cuStreamSynchronize(s));
    cr_assert_eq(reserved(pool), 0);
    cr_assert_eq(sim_free_bytes(), CAPACITY);
    /* cuCtxSynchronize is a release point too */
    cu_ok(cuMemAllocAsync(&p, 4 * MiB, s));
    cu_ok(cuMemFreeAsync(p, s));
    cu_ok(cuCtxSynchronize());
    cr_assert_eq(reserved(pool), 0);
}

Test(pool, threshold_uint64_max_keeps_everything_until_trimmed)
{
    sim_start(0);
    CUmemoryPool pool = default_pool();
    cuuint64_t keep_all = UINT64_MAX;
    cu_ok(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep_all));
    cr_assert_eq(attr(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD), UINT64_MAX);
    CUdeviceptr p;
    cu_ok(cuMemAllocAsync(&p, 4 * MiB, NULL));
    cu_ok(cuMemFreeAsync(p, NULL));
    cu_ok(cuStreamSynchronize(NULL));
    cu_ok(cuCtxSynchronize());
    cr_assert_eq(reserved(pool), 32 * MiB);
    cr_assert_eq(sim_free_bytes(), CAPACITY - 32 * MiB);
    cu_ok(cuMemPoolTrimTo(pool, 0));
    cr_assert_eq(reserved(pool), 0);
    cr_assert_eq(sim_free_bytes(), CAPACITY);
}

Test(pool, trim_keeps_at_least_the_bytes_asked_and_only_releases_unused_chunks)
{
    sim_start(0);
    CUmemoryPool pool = default_pool();
    cuuint64_t keep_all = UINT64_MAX;
    cu_ok(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep_all));
    CUdeviceptr a, b, c;
    cu_ok(cuMemAllocAsync(&a, 20 * MiB, NULL)); /* chunk 1 */
    cu_ok(cuMemAllocAsync(&b, 20 * MiB, NULL)); /* does not fit the 12 MiB left: chunk 2 */
    cu_ok(cuMemAllocAsync(&c, 20 * MiB, NULL)); /* chunk 3 */
    cr_assert_eq(reserved(pool), 96 * MiB);
    cu_ok(cuMemFreeAsync(a, NULL));
    cu_ok(cuMemFreeAsync(b, NULL));
    cu_ok(cuMemPoolTrimTo(pool, 40 * MiB));
    cr_assert_eq(reserved(pool), 64 * MiB, "one unused chunk released; a second would go below 40 MiB");
    cu_ok(cuMemPoolTrimTo(pool, 0));
    cr_assert_eq(reserved(pool), 32 * MiB, "the chunk holding c stays");
    cr_assert_eq(used(pool), 20 * MiB);
    cr_assert_eq(sim_free_bytes(), CAPACITY - 32 * MiB);
}

Test(pool, a_nonzero_threshold_is_kept_at_synchronisation)
{
    sim_start(0);
    CUmemoryPool pool = default_pool();
    cuuint64_t threshold = 32 * MiB;
    cu_ok(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold));
    CUdeviceptr a, b;
    cu_ok(cuMemAllocAsync(&a, 30 * MiB, NULL));
    cu_ok(cuMemAllocAsync(&b, 30 * MiB, NULL));
    cu_ok(cuMemFreeAsync(a, NULL));
    cu_ok(cuMemFreeAsync(b, NULL));
    cu_ok(cuCtxSynchronize());
    cr_assert_eq(reserved(pool), 32 * MiB);
}

Test(pool, high_watermarks_track_peaks_and_reset_only_to_zero)
{
    sim_start(0);
    CUmemoryPool pool = default_pool();
    CUdeviceptr a, b;
    cu_ok(cuMemAllocAsync(&a, 3 * MiB, NULL));
    cu_ok(cuMemAllocAsync(&b, 5 * MiB, NULL));
    cu_ok(cuMemFreeAsync(b, NULL));
    cu_ok(cuStreamSynchronize(NULL));
    cr_assert_eq(attr(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH), 8 * MiB);
    cr_assert_eq(attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH), 32 * MiB);
    cuuint64_t zero = 0, one = 1;
    cu_err(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &one), CUDA_ERROR_INVALID_VALUE);
    cu_err(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &zero), CUDA_ERROR_INVALID_VALUE);
    cu_err(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &zero), CUDA_ERROR_INVALID_VALUE);
    cu_ok(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &zero));
    cr_assert_eq(attr(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH), 3 * MiB);
    cu_ok(cuMemFreeAsync(a, NULL));
    cu_ok(cuStreamSynchronize(NULL));
    cu_ok(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &zero));
    cr_assert_eq(attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH), 0);
}

Test(pool, cuMemFree_v2_returns_an_async_block_to_its_pool)
{
    sim_start(0);
    CUmemoryPool pool = default_pool();
    CUdeviceptr p;
    cu_ok(cuMemAllocAsync(&p, 2 * MiB, NULL));
    cu_ok(cuMemFree_v2(p));
    cr_assert_eq(used(pool), 0);
    cr_assert_eq(reserved(pool), 32 * MiB);
    cu_err(cuMemFreeAsync(p, NULL), CUDA_ERROR_INVALID_VALUE);
    cu_err(cuMemFree_v2(p), CUDA_ERROR_INVALID_VALUE);
}

Test(pool, cuMemFreeAsync_rejects_non_pool_memory)
{
    sim_start(0);
    CUdeviceptr p;
    cu_ok(cuMemAlloc_v2(&p, 512));
    cu_err(cuMemFreeAsync(p, NULL), CUDA_ERROR_INVALID_VALUE);
    cu_ok(cuMemFree_v2(p));
}

Test(pool, explicit_pools_allocate_and_can_become_current)
{
    sim_start(0);
    CUmemoryPool def = default_pool(), pool = new_pool(0), current;
    CUdeviceptr p, q;
    cu_ok(cuMemAllocFromPoolAsync(&p, 1 * MiB, pool, NULL));
    cr_assert_eq(used(pool), 1 * MiB);
    cr_assert_eq(reserved(def), 0);
    cu_ok(cuDeviceSetMemPool(0, pool));
    cu_ok(cuDeviceGetMemPool(&current, 0));
    cr_assert_eq(current, pool);
    cu_ok(cuMemAllocAsync(&q, 1 * MiB, NULL));
    cr_assert_eq(used(pool), 2 * MiB);
    /* destroying the current pool makes the default current again; its
     * memory goes once the outstanding blocks are freed */
    cu_ok(cuMemPoolDestroy(pool));
    cu_ok(cuDeviceGetMemPool(&current, 0));
    cr_assert_eq(current, def);
    cr_assert_eq(sim_free_bytes(), CAPACITY - 32 * MiB);
    cu_ok(cuMemFreeAsync(p, NULL));
    cu_ok(cuMemFree_v2(q));
    cr_assert_eq(sim_free_bytes(), CAPACITY);
    cu_err(cuMemPoolTrimTo(pool, 0), CUDA_ERROR_INVALID_VALUE);
    cu_err(cuMemPoolDestroy(def), CUDA_ERROR_INVALID_VALUE);
}

Test(pool, max_size_bounds_a_pool)
{
    sim_start(0);
    CUmemoryPool pool = new_pool(8 * MiB);
    CUdeviceptr p;
    cu_ok(cuMemAllocFromPoolAsync(&p, 6 * MiB, pool, NULL));
    cr_assert_eq(reserved(pool), 6 * MiB, "a 32 MiB chunk would exceed maxSize; the request rounded to 2 MiB fits");
    cu_err(cuMemAllocFromPoolAsync(&p, 4 * MiB, pool, NULL), CUDA_ERROR_OUT_OF_MEMORY);
}

Test(pool, a_nearly_full_device_still_serves_small_async_allocations)
{
    sim_start(0);
    CUmemoryPool pool = default_pool();
    CUdeviceptr big, p;
    cu_ok(cuMemAlloc_v2(&big, CAPACITY - 10 * MiB));
    cu_ok(cuMemAllocAsync(&p, 1 * MiB, NULL));
    cr_assert_eq(reserved(pool), 2 * MiB);
    cu_err(cuMemAllocAsync(&p, 20 * MiB, NULL), CUDA_ERROR_OUT_OF_MEMORY);
}

Test(pool, pool_memory_survives_context_teardown)
{
    cu_ok(cuInit(0));
    CUcontext ctx;
    cu_ok(cuCtxCreate_v4(&ctx, NULL, 0, 0));
    CUdeviceptr p;
    cu_ok(cuMemAllocAsync(&p, 1 * MiB, NULL));
    cu_ok(cuCtxDestroy_v2(ctx));
    cr_assert_eq(simcuda_device_used_bytes(0), 32 * MiB);
    CUmemoryPool pool;
    cu_ok(cuDeviceGetDefaultMemPool(&pool, 0));
    cr_assert_eq(used(pool), 1 * MiB);
    cu_ok(cuMemFree_v2(p));
    cr_assert_eq(used(pool), 0);
}

Test(pool, per_thread_stream_variants_allocate_from_the_same_pool)
{
    sim_start(0);
    CUmemoryPool pool = default_pool(), other = new_pool(0);
    CUdeviceptr p, q;
    cu_ok(cuMemAllocAsync_ptsz(&p, 1 * MiB, CU_STREAM_PER_THREAD));
    cu_ok(cuMemAllocFromPoolAsync_ptsz(&q, 1 * MiB, other, CU_STREAM_PER_THREAD));
    cr_assert_eq(used(pool), 1 * MiB);
    cr_assert_eq(used(other), 1 * MiB);
    cu_ok(cuMemFreeAsync_ptsz(p, CU_STREAM_PER_THREAD));
    cu_ok(cuMemFreeAsync_ptsz(q, CU_STREAM_PER_THREAD));
    cr_assert_eq(used(pool) + used(other), 0);
}

Test(pool, async_allocation_checks_its_arguments)
{
    CUdeviceptr p;
    cu_err(cuMemAllocAsync(&p, 512, NULL), CUDA_ERROR_NOT_INITIALIZED);
    cu_ok(cuInit(0));
    cu_err(cuMemAllocAsync(&p, 512, NULL), CUDA_ERROR_INVALID_CONTEXT);
    sim_start(0);
    cu_err(cuMemAllocAsync(&p, 0, NULL), CUDA_ERROR_INVALID_VALUE);
    cu_err(cuMemAllocAsync(&p, 512, (CUstream)0x1234), CUDA_ERROR_INVALID_HANDLE);
    cu_err(cuMemAllocFromPoolAsync(&p, 512, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
}
