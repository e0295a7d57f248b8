/*
 * test_procaddr.c — cuGetProcAddress behaves as cuda.h documents and hands out
 * exactly the exported variant a version and flags select.
 */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "sim_test.h"

static void *driver(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    cr_assert_not_null(h, "libcuda.so.1 should already be loaded: %s", dlerror());
    return h;
}

/* Asserts that (symbol, version, flags) resolves to the exported `variant`. */
static void expect_variant(const char *symbol, int version, cuuint64_t flags, const char *variant)
{
    void *fn = (void *)1;
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    cr_assert_eq(cuGetProcAddress_v2(symbol, &fn, version, flags, &status), CUDA_SUCCESS, "%s@%d", symbol, version);
    cr_assert_eq(status, CU_GET_PROC_ADDRESS_SUCCESS, "%s@%d flags %llu", symbol, version, (unsigned long long)flags);
    void *want = dlsym(driver(), variant);
    cr_assert_not_null(want, "%s is not exported", variant);
    cr_assert_eq(fn, want, "%s@%d flags %llu should be %s", symbol, version, (unsigned long long)flags, variant);
}

static void expect_status(const char *symbol, int version, cuuint64_t flags, CUdriverProcAddressQueryResult want)
{
    void *fn = (void *)1;
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
    cr_assert_eq(cuGetProcAddress_v2(symbol, &fn, version, flags, &status), CUDA_SUCCESS);
    cr_assert_null(fn, "%s@%d must give NULL", symbol, version);
    cr_assert_eq(status, want, "%s@%d status %d", symbol, version, status);
}

Test(procaddr, base_name_and_version_select_the_versioned_abi)
{
    expect_variant("cuMemAlloc", 3020, 0, "cuMemAlloc_v2");
    expect_variant("cuMemAlloc", 13000, 0, "cuMemAlloc_v2");
    expect_variant("cuMemFree", 3020, 0, "cuMemFree_v2");
    expect_variant("cuMemGetInfo", 12000, 0, "cuMemGetInfo_v2");
    expect_variant("cuDeviceTotalMem", 3020, 0, "cuDeviceTotalMem_v2");
    expect_variant("cuCtxDestroy", 2000, 0, "cuCtxDestroy");
    expect_variant("cuCtxDestroy", 3999, 0, "cuCtxDestroy");
    expect_variant("cuCtxDestroy", 4000, 0, "cuCtxDestroy_v2");
    expect_variant("cuStreamDestroy", 2000, 0, "cuStreamDestroy");
    expect_variant("cuStreamDestroy", 4000, 0, "cuStreamDestroy_v2");
    expect_variant("cuDevicePrimaryCtxReset", 7000, 0, "cuDevicePrimaryCtxReset");
    expect_variant("cuDevicePrimaryCtxReset", 10020, 0, "cuDevicePrimaryCtxReset");
    expect_variant("cuDevicePrimaryCtxReset", 11000, 0, "cuDevicePrimaryCtxReset_v2");
    expect_variant("cuDevicePrimaryCtxRelease", 11000, 0, "cuDevicePrimaryCtxRelease_v2");
    expect_variant("cuCtxGetDevice", 12080, 0, "cuCtxGetDevice");
    expect_variant("cuCtxGetDevice", 13000, 0, "cuCtxGetDevice_v2");
    expect_variant("cuCtxSynchronize", 13000, 0, "cuCtxSynchronize_v2");
}

Test(procaddr, cuCtxCreate_follows_its_three_abis)
{
    expect_variant("cuCtxCreate", 3020, 0, "cuCtxCreate_v2");
    expect_variant("cuCtxCreate", 11030, 0, "cuCtxCreate_v2");
    expect_variant("cuCtxCreate", 11040, 0, "cuCtxCreate_v3");
    expect_variant("cuCtxCreate", 12040, 0, "cuCtxCreate_v3");
    expect_variant("cuCtxCreate", 12050, 0, "cuCtxCreate_v4");
    expect_variant("cuCtxCreate", 13000, 0, "cuCtxCreate_v4");
}

Test(procaddr, cuGetProcAddress_finds_itself_by_version)
{
    expect_variant("cuGetProcAddress", 11030, 0, "cuGetProcAddress");
    expect_variant("cuGetProcAddress", 11080, 0, "cuGetProcAddress");
    expect_variant("cuGetProcAddress", 12000, 0, "cuGetProcAddress_v2");
    expect_status("cuGetProcAddress", 11020, 0, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
}

Test(procaddr, per_thread_flag_selects_ptsz_variants_only_where_they_exist)
{
    const char *async[] = { "cuMemAllocAsync", "cuMemFreeAsync", "cuMemAllocFromPoolAsync" };
    for (int i = 0; i < 3; i++) {
        char ptsz[64];
        snprintf(ptsz, sizeof ptsz, "%s_ptsz", async[i]);
        expect_variant(async[i], 11020, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, ptsz);
        expect_variant(async[i], 11020, CU_GET_PROC_ADDRESS_LEGACY_STREAM, async[i]);
        expect_variant(async[i], 11020, CU_GET_PROC_ADDRESS_DEFAULT, async[i]);
        expect_variant(async[i], 13000, CU_GET_PROC_ADDRESS_DEFAULT, async[i]);
    }
    /* No per-thread variant: the legacy one, as documented. */
    expect_variant("cuMemAlloc", 3020, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuMemAlloc_v2");
    expect_variant("cuStreamSynchronize", 2000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuStreamSynchronize");
}

Test(procaddr, the_ptsz_variants_are_distinct_symbols)
{
    cr_assert_neq(dlsym(driver(), "cuMemAllocAsync"), dlsym(driver(), "cuMemAllocAsync_ptsz"));
    cr_assert_neq(dlsym(driver(), "cuMemFreeAsync"), dlsym(driver(), "cuMemFreeAsync_ptsz"));
}

Test(procaddr, a_version_older_than_the_symbol_is_not_sufficient)
{
    expect_status("cuMemAllocAsync", 11010, 0, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    expect_status("cuMemAllocAsync", 11010, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
                  CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    expect_status("cuMemCreate", 10010, 0, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    expect_status("cuMemRetainAllocationHandle", 10020, 0, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    /* The 32-bit CUdeviceptr_v1 ABI is not simulated. */
    expect_status("cuMemAlloc", 3010, 0, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    expect_status("cuMemAlloc", 2000, 0, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
}

Test(procaddr, unknown_symbols_give_null_and_success_with_symbol_not_found)
{
    expect_status("cuNoSuchFunction", 13000, 0, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    /* symbol is the base name; versioned names are not looked up */
    expect_status("cuMemAlloc_v2", 13000, 0, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    expect_status("cudnnCreate", 13000, 0, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    void *fn = (void *)1;
    cu_ok(cuGetProcAddress_v2("cuNoSuchFunction", &fn, 13000, 0, NULL)); /* status is optional */
    cr_assert_null(fn);
}

Test(procaddr, invalid_arguments_are_rejected)
{
    void *fn = NULL;
    CUdriverProcAddressQueryResult status;
    cu_err(cuGetProcAddress_v2(NULL, &fn, 13000, 0, &status), CUDA_ERROR_INVALID_VALUE);
    cu_err(cuGetProcAddress_v2("cuMemAlloc", NULL, 13000, 0, &status), CUDA_ERROR_INVALID_VALUE);
    /* newer than the driver (13000) */
    cu_err(cuGetProcAddress_v2("cuMemAlloc", &fn, 13010, 0, &status), CUDA_ERROR_INVALID_VALUE);
    cu_err(cuGetProcAddress_v2("cuMemAlloc", &fn, 13000, 3, &status), CUDA_ERROR_INVALID_VALUE);
    cu_err(cuGetProcAddress_v2("cuMemAlloc", &fn, 13000, 4, &status), CUDA_ERROR_INVALID_VALUE);
}

Test(procaddr, legacy_four_argument_form_reports_misses_as_not_found)
{
    void *fn = (void *)1;
    cu_ok(cuGetProcAddress("cuMemAlloc", &fn, 11030, 0));
    cr_assert_eq(fn, dlsym(driver(), "cuMemAlloc_v2"));
    fn = (void *)1;
    cu_err(cuGetProcAddress("cuNoSuchFunction", &fn, 11030, 0), CUDA_ERROR_NOT_FOUND);
    cr_assert_null(fn);
    fn = (void *)1;
    cu_err(cuGetProcAddress("cuMemAllocAsync", &fn, 11010, 0), CUDA_ERROR_NOT_FOUND);
    cr_assert_null(fn);
}

Test(procaddr, works_before_cuInit_and_the_result_is_callable)
{
    CUresult (*init)(unsigned) = NULL;
    CUresult (*alloc)(CUdeviceptr *, size_t) = NULL;
    cu_ok(cuGetProcAddress_v2("cuInit", (void **)&init, 2000, 0, NULL));
    cu_ok(cuGetProcAddress_v2("cuMemAlloc", (void **)&alloc, 3020, 0, NULL));
    cr_assert_not_null(init);
    CUdeviceptr p = 0;
    cu_err(alloc(&p, 512), CUDA_ERROR_NOT_INITIALIZED);
    cu_ok(init(0));
    CUcontext ctx;
    cu_ok(cuDevicePrimaryCtxRetain(&ctx, 0));
    cu_ok(cuCtxSetCurrent(ctx));
    cu_ok(alloc(&p, 512));
    cr_assert_neq(p, 0);
    cu_ok(cuMemFree_v2(p));
}

/* Every exported cu* symbol is reachable through cuGetProcAddress: the table
 * and the exports cannot drift apart. */
Test(procaddr, every_exported_entry_point_is_reachable)
{
    static const struct { const char *base; int version; cuuint64_t flags; const char *variant; } all[] = {
        { "cuInit", 2000, 0, "cuInit" }, { "cuDriverGetVersion", 2020, 0, "cuDriverGetVersion" },
        { "cuGetErrorName", 6000, 0, "cuGetErrorName" }, { "cuGetErrorString", 6000, 0, "cuGetErrorString" },
        { "cuDeviceGet", 2000, 0, "cuDeviceGet" }, { "cuDeviceGetCount", 2000, 0, "cuDeviceGetCount" },
        { "cuDeviceGetName", 2000, 0, "cuDeviceGetName" }, { "cuDeviceGetAttribute", 2000, 0, "cuDeviceGetAttribute" },
        { "cuDevicePrimaryCtxRetain", 7000, 0, "cuDevicePrimaryCtxRetain" },
        { "cuDevicePrimaryCtxRelease", 7000, 0, "cuDevicePrimaryCtxRelease" },
        { "cuCtxGetCurrent", 4000, 0, "cuCtxGetCurrent" }, { "cuCtxSetCurrent", 4000, 0, "cuCtxSetCurrent" },
        { "cuCtxGetDevice", 2000, 0, "cuCtxGetDevice" }, { "cuCtxSynchronize", 2000, 0, "cuCtxSynchronize" },
        { "cuStreamCreate", 2000, 0, "cuStreamCreate" }, { "cuStreamSynchronize", 2000, 0, "cuStreamSynchronize" },
        { "cuMemAllocPitch", 3020, 0, "cuMemAllocPitch_v2" }, { "cuMemAllocHost", 3020, 0, "cuMemAllocHost_v2" },
        { "cuMemHostAlloc", 2020, 0, "cuMemHostAlloc" }, { "cuMemFreeHost", 2000, 0, "cuMemFreeHost" },
        { "cuMemAllocManaged", 6000, 0, "cuMemAllocManaged" },
        { "cuMemPoolCreate", 11020, 0, "cuMemPoolCreate" }, { "cuMemPoolDestroy", 11020, 0, "cuMemPoolDestroy" },
        { "cuMemPoolTrimTo", 11020, 0, "cuMemPoolTrimTo" },
        { "cuMemPoolSetAttribute", 11020, 0, "cuMemPoolSetAttribute" },
        { "cuMemPoolGetAttribute", 11020, 0, "cuMemPoolGetAttribute" },
        { "cuDeviceGetDefaultMemPool", 11020, 0, "cuDeviceGetDefaultMemPool" },
        { "cuDeviceGetMemPool", 11020, 0, "cuDeviceGetMemPool" }, { "cuDeviceSetMemPool", 11020, 0, "cuDeviceSetMemPool" },
        { "cuMemAddressReserve", 10020, 0, "cuMemAddressReserve" }, { "cuMemAddressFree", 10020, 0, "cuMemAddressFree" },
        { "cuMemCreate", 10020, 0, "cuMemCreate" }, { "cuMemRelease", 10020, 0, "cuMemRelease" },
        { "cuMemMap", 10020, 0, "cuMemMap" }, { "cuMemUnmap", 10020, 0, "cuMemUnmap" },
        { "cuMemSetAccess", 10020, 0, "cuMemSetAccess" },
        { "cuMemRetainAllocationHandle", 11000, 0, "cuMemRetainAllocationHandle" },
        { "cuMemGetAllocationGranularity", 10020, 0, "cuMemGetAllocationGranularity" },
    };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        expect_variant(all[i].base, all[i].version, all[i].flags, all[i].variant);
}

Test(procaddr, trace_logs_each_lookup, .init = cr_redirect_stderr)
{
    setenv("SIMCUDA_TRACE", "1", 1);
    void *fn;
    cu_ok(cuGetProcAddress_v2("cuMemAlloc", &fn, 3020, 0, NULL));
    cu_ok(cuGetProcAddress_v2("cuMemAllocAsync", &fn, 11020, 2, NULL));
    cu_ok(cuGetProcAddress_v2("cuNoSuchFunction", &fn, 13000, 0, NULL));
    cu_ok(cuGetProcAddress_v2("cuMemAllocAsync", &fn, 11000, 0, NULL));
    cr_assert_str_eq(sim_captured_stderr(),
                     "simcuda: cuGetProcAddress(cuMemAlloc, 3020, 0) -> cuMemAlloc_v2\n"
                     "simcuda: cuGetProcAddress(cuMemAllocAsync, 11020, 2) -> cuMemAllocAsync_ptsz\n"
                     "simcuda: cuGetProcAddress(cuNoSuchFunction, 13000, 0) -> NULL (symbol not found)\n"
                     "simcuda: cuGetProcAddress(cuMemAllocAsync, 11000, 0) -> NULL (version not sufficient)\n");
}

Test(procaddr, trace_is_silent_by_default, .init = cr_redirect_stderr)
{
    unsetenv("SIMCUDA_TRACE");
    void *fn;
    cu_ok(cuGetProcAddress_v2("cuMemAlloc", &fn, 3020, 0, NULL));
    cr_assert_str_eq(sim_captured_stderr(), "");
}
