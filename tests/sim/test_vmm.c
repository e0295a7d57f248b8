/*
 * test_vmm.c — virtual memory management: reservations cost nothing, physical
 * handles cost memory until released and unmapped.  SIMCUDA_MEMORY=64M.
 */
#include "sim_test.h"

#define CAPACITY (64 * MiB)
#define GRAN (2 * MiB)

static CUmemAllocationProp prop(int dev)
{
    CUmemAllocationProp p = { 0 };
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = dev;
    return p;
}

static CUmemGenericAllocationHandle create(size_t size)
{
    CUmemAllocationProp p = prop(0);
    CUmemGenericAllocationHandle h = 0;
    cu_ok(cuMemCreate(&h, size, &p, 0));
    return h;
}

static void grant(CUdeviceptr ptr, size_t size)
{
    CUmemAccessDesc d = { .location = { CU_MEM_LOCATION_TYPE_DEVICE, 0 }, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
    cu_ok(cuMemSetAccess(ptr, size, &d, 1));
}

Test(vmm, granularity_is_2MiB)
{
    cu_ok(cuInit(0));
    CUmemAllocationProp p = prop(0);
    size_t g = 0;
    cu_ok(cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    cr_assert_eq(g, GRAN);
    cu_ok(cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    cr_assert_eq(g, GRAN);
    p.location.id = 7;
    cu_err(cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_ERROR_INVALID_VALUE);
}

Test(vmm, reserving_address_space_consumes_no_memory)
{
    sim_start(0);
    CUdeviceptr va;
    cu_ok(cuMemAddressReserve(&va, 16 * CAPACITY, 0, 0, 0)); /* PyTorch reserves more than the GPU has */
    cr_assert_eq(va % GRAN, 0);
    cr_assert_eq(sim_free_bytes(), CAPACITY);
    cr_assert_eq(simcuda_device_used_bytes(0), 0);
    CUdeviceptr va2;
    cu_ok(cuMemAddressReserve(&va2, GRAN, 1ull << 30, 0, 0));
    cr_assert_eq(va2 % (1ull << 30), 0);
    cu_err(cuMemAddressFree(va, GRAN), CUDA_ERROR_INVALID_VALUE); /* size must match */
    cu_ok(cuMemAddressFree(va, 16 * CAPACITY));
    cu_ok(cuMemAddressFree(va2, GRAN));
    cu_err(cuMemAddressFree(va2, GRAN), CUDA_ERROR_INVALID_VALUE);
}

Test(vmm, create_needs_a_granular_size_and_consumes_memory)
{
    cu_ok(cuInit(0));
    CUmemAllocationProp p = prop(0);
    CUmemGenericAllocationHandle h;
    cu_err(cuMemCreate(&h, 3 * MiB, &p, 0), CUDA_ERROR_INVALID_VALUE);
    cu_err(cuMemCreate(&h, 0, &p, 0), CUDA_ERROR_INVALID_VALUE);
    cu_err(cuMemCreate(&h, GRAN, &p, 1), CUDA_ERROR_INVALID_VALUE);
    p.location.id = 5;
    cu_err(cuMemCreate(&h, GRAN, &p, 0), CUDA_ERROR_INVALID_DEVICE);
    h = create(4 * MiB);
    cr_assert_eq(simcuda_device_used_bytes(0), 4 * MiB);
    cu_err(cuMemCreate(&h, CAPACITY, &(CUmemAllocationProp){ 0 }, 0), CUDA_ERROR_INVALID_VALUE);
    p = prop(0);
    cu_err(cuMemCreate(&h, CAPACITY, &p, 0), CUDA_ERROR_OUT_OF_MEMORY);
    cu_ok(cuMemCreate(&h, CAPACITY - 4 * MiB, &p, 0));
    cr_assert_eq(simcuda_device_used_bytes(0), CAPACITY);
}

Test(vmm, release_before_unmap_keeps_memory_until_unmapped)
{
    sim_start(0);
    CUdeviceptr va;
    cu_ok(cuMemAddressReserve(&va, 8 * MiB, 0, 0, 0));
    CUmemGenericAllocationHandle h = create(4 * MiB);
    cu_ok(cuMemMap(va, 4 * MiB, 0, h, 0));
    grant(va, 4 * MiB);
    cu_ok(cuMemRelease(h));
    cr_assert_eq(sim_free_bytes(), CAPACITY - 4 * MiB, "still mapped");
    cu_err(cuMemRelease(h), CUDA_ERROR_INVALID_VALUE); /* the handle itself is gone */
    cu_ok(cuMemUnmap(va, 4 * MiB));
    cr_assert_eq(sim_free_bytes(), CAPACITY);
    cu_ok(cuMemAddressFree(va, 8 * MiB));
}

Test(vmm, unmap_before_release_keeps_memory_until_released)
{
    sim_start(0);
    CUdeviceptr va;
    cu_ok(cuMemAddressReserve(&va, 8 * MiB, 0, 0, 0));
    CUmemGenericAllocationHandle h = create(4 * MiB);
    cu_ok(cuMemMap(va, 4 * MiB, 0, h, 0));
    cu_ok(cuMemUnmap(va, 4 * MiB));
    cr_assert_eq(sim_free_bytes(), CAPACITY - 4 * MiB, "handle not released");
    cu_ok(cuMemMap(va + 4 * MiB, 4 * MiB, 0, h, 0)); /* still usable */
    cu_ok(cuMemUnmap(va + 4 * MiB, 4 * MiB));
    cu_ok(cuMemRelease(h));
    cr_assert_eq(sim_free_bytes(), CAPACITY);
}

Test(vmm, mappings_must_lie_in_a_reservation_and_not_overlap)
{
    sim_start(0);
    CUdeviceptr va;
    cu_ok(cuMemAddressReserve(&va, 8 * MiB, 0, 0, 0));
    CUmemGenericAllocationHandle h = create(4 * MiB), h2 = create(2 * MiB);
    cu_err(cuMemMap(va + 6 * MiB, 4 * MiB, 0, h, 0), CUDA_ERROR_INVALID_VALUE); /* runs past the end */
    cu_err(cuMemMap(va + 512, 2 * MiB, 0, h2, 0), CUDA_ERROR_INVALID_VALUE);    /* not granular */
    cu_err(cuMemMap(va, 6 * MiB, 0, h, 0), CUDA_ERROR_INVALID_VALUE);           /* bigger than the handle */
    cu_err(cuMemMap(va, 2 * MiB, 4 * MiB, h, 0), CUDA_ERROR_INVALID_VALUE);     /* offset + size too big */
    cu_err(cuMemMap(0x1000000000ull, 2 * MiB, 0, h, 0), CUDA_ERROR_INVALID_VALUE); /* not reserved */
    cu_ok(cuMemMap(va + 2 * MiB, 4 * MiB, 0, h, 0));
    cu_err(cuMemMap(va, 4 * MiB, 0, h2, 0), CUDA_ERROR_INVALID_VALUE);           /* overlaps */
    cu_err(cuMemMap(va + 4 * MiB, 2 * MiB, 0, h2, 0), CUDA_ERROR_INVALID_VALUE); /* inside */
    cu_ok(cuMemMap(va, 2 * MiB, 0, h2, 0));                                     /* adjacent is fine */
    cu_err(cuMemAddressFree(va, 8 * MiB), CUDA_ERROR_INVALID_VALUE);            /* still mapped */
    cu_err(cuMemUnmap(va + 2 * MiB, 2 * MiB), CUDA_ERROR_INVALID_VALUE);        /* cuts a mapping */
    cu_err(cuMemUnmap(va, 8 * MiB), CUDA_ERROR_INVALID_VALUE);                  /* unmapped tail */
    cu_ok(cuMemUnmap(va, 6 * MiB));                                             /* both at once */
    cu_ok(cuMemAddressFree(va, 8 * MiB));
}

Test(vmm, set_access_needs_a_mapped_range)
{
    sim_start(0);
    CUdeviceptr va;
    cu_ok(cuMemAddressReserve(&va, 8 * MiB, 0, 0, 0));
    CUmemGenericAllocationHandle h = create(4 * MiB);
    CUmemAccessDesc d = { .location = { CU_MEM_LOCATION_TYPE_DEVICE, 0 }, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
    cu_err(cuMemSetAccess(va, 4 * MiB, &d, 1), CUDA_ERROR_INVALID_VALUE);
    cu_ok(cuMemMap(va, 4 * MiB, 0, h, 0));
    cu_ok(cuMemSetAccess(va, 4 * MiB, &d, 1));
    cu_err(cuMemSetAccess(va, 6 * MiB, &d, 1), CUDA_ERROR_INVALID_VALUE);
    d.location.id = 9;
    cu_err(cuMemSetAccess(va, 4 * MiB, &d, 1), CUDA_ERROR_INVALID_VALUE);
}

Test(vmm, retained_handles_need_one_release_each)
{
    sim_start(0);
    CUdeviceptr va;
    cu_ok(cuMemAddressReserve(&va, 4 * MiB, 0, 0, 0));
    CUmemGenericAllocationHandle h = create(4 * MiB), again = 0;
    cu_ok(cuMemMap(va, 4 * MiB, 0, h, 0));
    cu_ok(cuMemRetainAllocationHandle(&again, (void *)(uintptr_t)(va + 3 * MiB + 17)));
    cr_assert_eq(again, h);
    cu_err(cuMemRetainAllocationHandle(&again, (void *)(uintptr_t)(va + 4 * MiB)), CUDA_ERROR_INVALID_VALUE);
    cu_ok(cuMemRelease(h));
    cu_ok(cuMemUnmap(va, 4 * MiB));
    cr_assert_eq(sim_free_bytes(), CAPACITY - 4 * MiB, "one reference left");
    cu_ok(cuMemRelease(again));
    cr_assert_eq(sim_free_bytes(), CAPACITY);
}

Test(vmm, physical_memory_need_not_be_contiguous)
{
    sim_start(0);
    /* Fragment the device into alternating 2 MiB holes. */
    CUdeviceptr blocks[32];
    for (int i = 0; i < 32; i++)
        cu_ok(cuMemAlloc_v2(&blocks[i], 2 * MiB));
    for (int i = 0; i < 32; i += 2)
        cu_ok(cuMemFree_v2(blocks[i]));
    cr_assert_eq(simcuda_largest_free_block(0), 2 * MiB);
    CUdeviceptr p;
    cu_err(cuMemAlloc_v2(&p, 8 * MiB), CUDA_ERROR_OUT_OF_MEMORY);
    /* cuMemCreate still gets 8 MiB: pages come from wherever they are free */
    CUmemGenericAllocationHandle h = create(8 * MiB);
    cr_assert_eq(sim_free_bytes(), CAPACITY - 16 * 2 * MiB - 8 * MiB);
    cu_ok(cuMemRelease(h));
    cr_assert_eq(sim_free_bytes(), CAPACITY - 16 * 2 * MiB);
}

Test(vmm, vmm_memory_survives_context_teardown)
{
    cu_ok(cuInit(0));
    CUcontext ctx;
    cu_ok(cuCtxCreate_v4(&ctx, NULL, 0, 0));
    CUdeviceptr va;
    cu_ok(cuMemAddressReserve(&va, 2 * MiB, 0, 0, 0));
    CUmemGenericAllocationHandle h = create(2 * MiB);
    cu_ok(cuMemMap(va, 2 * MiB, 0, h, 0));
    cu_ok(cuCtxDestroy_v2(ctx));
    cr_assert_eq(simcuda_device_used_bytes(0), 2 * MiB);
    cu_ok(cuMemUnmap(va, 2 * MiB));
    cu_ok(cuMemRelease(h));
    cr_assert_eq(simcuda_device_used_bytes(0), 0);
}
