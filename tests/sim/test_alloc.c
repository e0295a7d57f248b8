/*
 * test_alloc.c — the device allocator, cuMemGetInfo accounting, error codes
 * and context teardown.  Runs with SIMCUDA_MEMORY=64M, SIMCUDA_DEVICES=2.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "sim_test.h"

#define CAPACITY (64 * MiB)

Test(alloc, calls_before_cuInit_are_not_initialized)
{
    CUdeviceptr p;
    CUcontext ctx;
    int n;
    size_t f, t;
    cu_err(cuMemAlloc_v2(&p, 512), CUDA_ERROR_NOT_INITIALIZED);
    cu_err(cuCtxGetCurrent(&ctx), CUDA_ERROR_NOT_INITIALIZED);
    cu_err(cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
    cu_err(cuMemGetInfo_v2(&f, &t), CUDA_ERROR_NOT_INITIALIZED);
    cu_err(cuInit(1), CUDA_ERROR_INVALID_VALUE);
}

Test(alloc, devices_describe_themselves)
{
    cu_ok(cuInit(0));
    int n, v;
    char name[64];
    size_t total;
    cu_ok(cuDeviceGetCount(&n));
    cr_assert_eq(n, 2);
    cu_ok(cuDriverGetVersion(&v));
    cr_assert_eq(v, 13000);
    cu_ok(cuDeviceGetName(name, sizeof name, 1));
    cr_assert_str_eq(name, "tensorleak simulated GPU");
    cu_ok(cuDeviceTotalMem_v2(&total, 1));
    cr_assert_eq(total, CAPACITY);
    cu_ok(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0));
    cr_assert_eq(v, 9);
    cu_ok(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0));
    cr_assert_eq(v, 0);
    cu_ok(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0));
    cr_assert_eq(v, 132);
    cu_ok(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 0));
    cr_assert_eq(v, 1);
    cu_ok(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0));
    cr_assert_eq(v, 1);
    cu_ok(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 0));
    cr_assert_eq(v, 1);
    CUdevice d;
    cu_err(cuDeviceGet(&d, 2), CUDA_ERROR_INVALID_DEVICE);
    cu_err(cuDeviceGetName(name, sizeof name, 2), CUDA_ERROR_INVALID_DEVICE);
}

Test(alloc, error_names_and_strings_are_the_drivers)
{
    const char *s;
    cu_ok(cuGetErrorName(CUDA_ERROR_OUT_OF_MEMORY, &s));
    cr_assert_str_eq(s, "CUDA_ERROR_OUT_OF_MEMORY");
    cu_ok(cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &s));
    cr_assert_str_eq(s, "out of memory");
    cu_err(cuGetErrorString((CUresult)12345, &s), CUDA_ERROR_INVALID_VALUE);
    cr_assert_null(s);
}

Test(alloc, allocation_needs_a_current_context)
{
    cu_ok(cuInit(0));
    CUdeviceptr p;
    size_t f, t;
    void *h;
    cu_err(cuMemAlloc_v2(&p, 512), CUDA_ERROR_INVALID_CONTEXT);
    cu_err(cuMemGetInfo_v2(&f, &t), CUDA_ERROR_INVALID_CONTEXT);
    cu_err(cuMemAllocHost_v2(&h, 512), CUDA_ERROR_INVALID_CONTEXT);
}

Test(alloc, allocations_are_512_byte_aligned_and_sized)
{
    sim_start(0);
    static const size_t sizes[] = { 1, 100, 512, 513, 4097 };
    CUdeviceptr p[5];
    size_t used = 0;
    for (int i = 0; i < 5; i++) {
        cu_ok(cuMemAlloc_v2(&p[i], sizes[i]));
        cr_assert_eq(p[i] % 512, 0, "0x%llx", (unsigned long long)p[i]);
        used += (sizes[i] + 511) / 512 * 512;
    }
    /* first fit from the bottom of an empty device: back to back */
    cr_assert_eq(p[1] - p[0], 512);
    cr_assert_eq(p[2] - p[1], 512);
    cr_assert_eq(p[3] - p[2], 512);
    cr_assert_eq(p[4] - p[3], 1024);
    cr_assert_eq(simcuda_device_used_bytes(0), used);
    cr_assert_eq(sim_free_bytes(), CAPACITY - used);
}

Test(alloc, mem_get_info_is_exact)
{
    sim_start(0);
    size_t free, total;
    cu_ok(cuMemGetInfo_v2(&free, &total));
    cr_assert_eq(free, CAPACITY);
    cr_assert_eq(total, CAPACITY);
    CUdeviceptr a, b, m, pitched;
    size_t pitch;
    cu_ok(cuMemAlloc_v2(&a, 10 * MiB));
    cu_ok(cuMemAlloc_v2(&b, 1000));
    cu_ok(cuMemAllocManaged(&m, 3 * MiB, CU_MEM_ATTACH_GLOBAL));
    cu_ok(cuMemAllocPitch_v2(&pitched, &pitch, 1000, 10, 4));
    cr_assert_eq(pitch, 1024);
    cr_assert_eq(sim_free_bytes(), CAPACITY - 10 * MiB - 1024 - 3 * MiB - 10240);
    cu_ok(cuMemFree_v2(a));
    cu_ok(cuMemFree_v2(b));
    cu_ok(cuMemFree_v2(m));
    cu_ok(cuMemFree_v2(pitched));
    cr_assert_eq(sim_free_bytes(), CAPACITY);
    cr_assert_eq(simcuda_largest_free_block(0), CAPACITY);
}

Test(alloc, pinned_host_memory_is_writable_and_not_device_memory)
{
    sim_start(0);
    void *h = NULL, *h2 = NULL;
    cu_ok(cuMemAllocHost_v2(&h, 1 * MiB));
    cu_ok(cuMemHostAlloc(&h2, 4096, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP));
    memset(h, 0xab, 1 * MiB);
    memset(h2, 0xcd, 4096);
    cr_assert_eq(((unsigned char *)h)[MiB - 1], 0xab);
    cr_assert_eq(sim_free_bytes(), CAPACITY);
    cu_err(cuMemFree_v2((CUdeviceptr)(uintptr_t)h), CUDA_ERROR_INVALID_VALUE);
    cu_err(cuMemHostAlloc(&h2, 4096, 0x80), CUDA_ERROR_INVALID_VALUE);
    cu_ok(cuMemFreeHost(h));
    cu_ok(cuMemFreeHost(h2));
    cu_err(cuMemFreeHost(h), CUDA_ERROR_INVALID_VALUE);
    cu_ok(cuMemFreeHost(NULL));
}

Test(alloc, bad_arguments_and_bad_frees)
{
    sim_start(0);
    CUdeviceptr p;
    size_t pitch;
    cu_err(cuMemAlloc_v2(&p, 0), CUDA_ERROR_INVALID_VALUE);
    cu_err(cuMemAlloc_v2(NULL, 512), CUDA_ERROR_INVALID_VALUE);
    cu_err(cuMemAllocManaged(&p, 512, CU_MEM_ATTACH_SINGLE), CUDA_ERROR_INVALID_VALUE);
    cu_err(cuMemAllocPitch_v2(&p, &pitch, 100, 10, 3), CUDA_ERROR_INVALID_VALUE);
    cu_ok(cuMemFree_v2(0));
    cu_ok(cuMemAlloc_v2(&p, 512));
    cu_err(cuMemFree_v2(p + 512), CUDA_ERROR_INVALID_VALUE);
    cu_err(cuMemFree_v2(0xdeadbeef000ull), CUDA_ERROR_INVALID_VALUE);
    cu_ok(cuMemFree_v2(p));
    cu_err(cuMemFree_v2(p), CUDA_ERROR_INVALID_VALUE); /* double free */
}

Test(alloc, out_of_memory_when_no_contiguous_range_fits)
{
    sim_start(0);
    CUdeviceptr p[8], q;
    for (int i = 0; i < 8; i++)
        cu_ok(cuMemAlloc_v2(&p[i], 8 * MiB));
    cu_err(cuMemAlloc_v2(&q, 512), CUDA_ERROR_OUT_OF_MEMORY);
    for (int i = 0; i < 8; i += 2)
        cu_ok(cuMemFree_v2(p[i]));
    /* 32 MiB free in total, but in four separate 8 MiB holes */
    cr_assert_eq(sim_free_bytes(), 32 * MiB);
    cr_assert_eq(simcuda_largest_free_block(0), 8 * MiB);
    cu_err(cuMemAlloc_v2(&q, 16 * MiB), CUDA_ERROR_OUT_OF_MEMORY);
    cu_err(cuMemAlloc_v2(&q, 8 * MiB + 1), CUDA_ERROR_OUT_OF_MEMORY);
    cu_ok(cuMemAlloc_v2(&q, 8 * MiB));
    cr_assert_eq(q, p[0], "first fit reuses the lowest hole");
    /* freeing p[3] coalesces the holes at p[2] and p[4] with it: 24 MiB */
    cu_ok(cuMemFree_v2(p[3]));
    cr_assert_eq(simcuda_largest_free_block(0), 24 * MiB);
    cu_ok(cuMemAlloc_v2(&q, 24 * MiB));
    cr_assert_eq(q, p[2]);
}

Test(alloc, a_request_larger_than_the_device_fails)
{
    sim_start(0);
    CUdeviceptr p;
    cu_err(cuMemAlloc_v2(&p, CAPACITY + 1), CUDA_ERROR_OUT_OF_MEMORY);
    cu_ok(cuMemAlloc_v2(&p, CAPACITY));
}

Test(alloc, devices_have_separate_memory)
{
    CUcontext c0 = sim_start(0), c1;
    CUdeviceptr p0, p1;
    cu_ok(cuMemAlloc_v2(&p0, 4 * MiB));
    cu_ok(cuDevicePrimaryCtxRetain(&c1, 1));
    cr_assert_neq(c0, c1);
    cu_ok(cuCtxSetCurrent(c1));
    CUdevice d;
    cu_ok(cuCtxGetDevice(&d));
    cr_assert_eq(d, 1);
    cr_assert_eq(sim_free_bytes(), CAPACITY);
    cu_ok(cuMemAlloc_v2(&p1, 2 * MiB));
    cr_assert_eq(simcuda_device_used_bytes(0), 4 * MiB);
    cr_assert_eq(simcuda_device_used_bytes(1), 2 * MiB);
    cr_assert_neq(p0, p1);
    cu_ok(cuMemFree_v2(p0)); /* a unified address identifies its device */
    cr_assert_eq(simcuda_device_used_bytes(0), 0);
}

Test(alloc, destroying_a_context_frees_its_allocations)
{
    sim_start(0);
    CUdeviceptr keep, d, pitched, managed;
    size_t pitch;
    void *host;
    cu_ok(cuMemAlloc_v2(&keep, 1 * MiB));
    CUcontext primary, ctx;
    cu_ok(cuCtxGetCurrent(&primary));
    cu_ok(cuCtxCreate_v4(&ctx, NULL, 0, 0));
    CUcontext cur;
    cu_ok(cuCtxGetCurrent(&cur));
    cr_assert_eq(cur, ctx, "cuCtxCreate makes the new context current");
    cu_ok(cuMemAlloc_v2(&d, 2 * MiB));
    cu_ok(cuMemAllocPitch_v2(&pitched, &pitch, 4096, 256, 16));
    cu_ok(cuMemAllocManaged(&managed, 3 * MiB, CU_MEM_ATTACH_GLOBAL));
    cu_ok(cuMemAllocHost_v2(&host, 8192));
    cr_assert_eq(simcuda_device_used_bytes(0), 1 * MiB + 2 * MiB + 1 * MiB + 3 * MiB);
    cu_ok(cuCtxDestroy_v2(ctx));
    cr_assert_eq(simcuda_device_used_bytes(0), 1 * MiB);
    cu_ok(cuCtxGetCurrent(&cur));
    cr_assert_eq(cur, primary, "destroy pops back to the previous context");
    cu_err(cuMemFree_v2(d), CUDA_ERROR_INVALID_VALUE);
    cu_err(cuMemFreeHost(host), CUDA_ERROR_INVALID_VALUE);
    cu_err(cuCtxDestroy_v2(ctx), CUDA_ERROR_INVALID_CONTEXT);
    cu_ok(cuMemFree_v2(keep));
}

Test(alloc, using_a_destroyed_context_fails)
{
    cu_ok(cuInit(0));
    CUcontext ctx;
    CUdeviceptr p;
    cu_ok(cuCtxCreate_v2(&ctx, 0, 0));
    cu_ok(cuCtxSetCurrent(ctx));
    cu_ok(cuCtxDestroy(ctx)); /* the legacy name behaves the same */
    cu_ok(cuCtxSetCurrent(NULL));
    cu_err(cuMemAlloc_v2(&p, 512), CUDA_ERROR_INVALID_CONTEXT);
    cu_err(cuCtxSetCurrent(ctx), CUDA_ERROR_CONTEXT_IS_DESTROYED);
}

Test(alloc, primary_context_reset_frees_its_allocations_and_keeps_it_usable)
{
    CUcontext ctx = sim_start(0);
    CUdeviceptr a, b;
    void *h;
    cu_ok(cuMemAlloc_v2(&a, 5 * MiB));
    cu_ok(cuMemAllocManaged(&b, 1 * MiB, CU_MEM_ATTACH_HOST));
    cu_ok(cuMemAllocHost_v2(&h, 4096));
    cu_ok(cuDevicePrimaryCtxReset_v2(0));
    cr_assert_eq(sim_free_bytes(), CAPACITY);
    cu_err(cuMemFree_v2(a), CUDA_ERROR_INVALID_VALUE);
    cu_err(cuMemFreeHost(h), CUDA_ERROR_INVALID_VALUE);
    CUcontext cur;
    cu_ok(cuCtxGetCurrent(&cur));
    cr_assert_eq(cur, ctx);
    cu_ok(cuMemAlloc_v2(&a, 512));
    cu_ok(cuDevicePrimaryCtxReset(0)); /* legacy name */
    cr_assert_eq(sim_free_bytes(), CAPACITY);
}

Test(alloc, last_primary_release_resets_and_extra_release_fails)
{
    sim_start(0);
    CUcontext again;
    CUdeviceptr p;
    cu_ok(cuDevicePrimaryCtxRetain(&again, 0));
    cu_ok(cuMemAlloc_v2(&p, 7 * MiB));
    cu_ok(cuDevicePrimaryCtxRelease_v2(0));
    cr_assert_eq(simcuda_device_used_bytes(0), 7 * MiB, "still retained once");
    cu_ok(cuDevicePrimaryCtxRelease(0));
    cr_assert_eq(simcuda_device_used_bytes(0), 0);
    cu_err(cuDevicePrimaryCtxRelease_v2(0), CUDA_ERROR_INVALID_CONTEXT);
    cu_err(cuMemAlloc_v2(&p, 512), CUDA_ERROR_INVALID_CONTEXT);
}

static void *other_thread(void *arg)
{
    CUcontext *out = arg;
    cuCtxGetCurrent(out);
    return NULL;
}

Test(alloc, current_context_is_per_thread)
{
    sim_start(0);
    CUcontext seen = (CUcontext)1;
    pthread_t t;
    pthread_create(&t, NULL, other_thread, &seen);
    pthread_join(t, NULL);
    cr_assert_null(seen);
}

Test(alloc, streams_belong_to_a_context)
{
    sim_start(0);
    CUstream s;
    cu_ok(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    cu_ok(cuStreamSynchronize(s));
    cu_ok(cuStreamSynchronize(NULL));
    cu_ok(cuStreamDestroy_v2(s));
    cu_err(cuStreamDestroy_v2(s), CUDA_ERROR_INVALID_HANDLE);
    cu_err(cuStreamCreate(&s, 0x10), CUDA_ERROR_INVALID_VALUE);
    cu_ok(cuCtxSynchronize());
}

enum { THREADS = 8, EACH = 200 };
static CUdeviceptr allocated[THREADS * EACH];

static void *alloc_worker(void *arg)
{
    CUdeviceptr *out = arg;
    CUcontext ctx;
    if (cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
        return NULL;
    for (int i = 0; i < EACH; i++)
        if (cuMemAlloc_v2(&out[i], 1000) != CUDA_SUCCESS)
            out[i] = 0;
    return NULL;
}

static int by_address(const void *a, const void *b)
{
    CUdeviceptr x = *(const CUdeviceptr *)a, y = *(const CUdeviceptr *)b;
    return x < y ? -1 : x > y;
}

Test(alloc, concurrent_allocations_never_overlap)
{
    cu_ok(cuInit(0));
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, alloc_worker, &allocated[i * EACH]);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    cr_assert_eq(simcuda_device_used_bytes(0), (size_t)THREADS * EACH * 1024);
    qsort(allocated, THREADS * EACH, sizeof allocated[0], by_address);
    cr_assert_neq(allocated[0], 0);
    for (int i = 1; i < THREADS * EACH; i++)
        cr_assert_geq(allocated[i] - allocated[i - 1], 1024);
}

Test(alloc, a_bad_memory_size_warns_once_and_uses_16G, .init = cr_redirect_stderr)
{
    setenv("SIMCUDA_MEMORY", "lots", 1);
    cu_ok(cuInit(0));
    size_t total;
    cu_ok(cuDeviceTotalMem_v2(&total, 0));
    cr_assert_eq(total, 16ull << 30);
    cr_assert_str_eq(sim_captured_stderr(), "simcuda: bad SIMCUDA_MEMORY='lots', using 16G\n");
}

/* SIMCUDA_* is read once per process, and each test is its own process. */
static void expect_capacity(const char *text, size_t bytes)
{
    setenv("SIMCUDA_MEMORY", text, 1);
    cu_ok(cuInit(0));
    size_t total;
    cu_ok(cuDeviceTotalMem_v2(&total, 0));
    cr_assert_eq(total, bytes, "SIMCUDA_MEMORY=%s", text);
}

Test(alloc, memory_size_in_gibibytes) { expect_capacity("1G", 1ull << 30); }
Test(alloc, memory_size_in_kibibytes) { expect_capacity("512K", 512 * 1024); }
Test(alloc, memory_size_suffix_is_case_insensitive) { expect_capacity("3m", 3 * MiB); }
Test(alloc, memory_size_in_bytes) { expect_capacity("1000000", 1000000); }

Test(alloc, zero_devices_means_no_device)
{
    setenv("SIMCUDA_DEVICES", "0", 1);
    cu_err(cuInit(0), CUDA_ERROR_NO_DEVICE);
    int n;
    cu_err(cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
}
