/*
 * The allocation families beyond cuMemAlloc, each reached through more than
 * one load path: the runtime's export, the driver's export (linked), and
 * cuGetProcAddress_v2 at the versions NVIDIA's headers map the names to.
 *
 *   families host   host registration: 1 MiB registered through
 *                   cuGetProcAddress("cuMemHostRegister", 6050) and 256 KiB
 *                   through cudaHostRegister are never unregistered; 64 KiB
 *                   through the 4.0 entry point (cuGetProcAddress at 4000)
 *                   and 128 KiB through the driver's export are unregistered;
 *                   a second registration of a registered range fails.
 *   families host reset   the same, then cudaDeviceReset: the teardown of the
 *                   primary context undoes the two registrations left.
 *   families array  CUDA arrays: a 2D array through cudaMallocArray, a 3D
 *                   one through cuGetProcAddress("cuArray3DCreate", 3020), a
 *                   mipmapped one through the driver's export and a
 *                   1000 x 10 x 5 cudaMalloc3D are never freed; arrays made
 *                   through cuGetProcAddress and the runtime are destroyed
 *                   through another path; a destroyed array is freed twice
 *                   more; two shapes are refused.  Prints the driver's size
 *                   of each (cuArrayGetMemoryRequirements).
 *   families array reset  the same, then cudaDeviceReset.
 *   families contexts  two contexts on one device: 1 MiB through cudaMalloc
 *                   in the primary context; a second context made through
 *                   cuGetProcAddress("cuCtxCreate", 12050), 256 KiB in it
 *                   through cuMemAlloc; popped, 512 KiB through cudaMalloc
 *                   in the primary one again; pushed through
 *                   cuGetProcAddress("cuCtxPushCurrent", 4000), 64 KiB in
 *                   it, popped; the second context destroyed, which frees
 *                   its 320 KiB.  The primary context's 1.5 MiB stay.
 *   families contexts threads  1 MiB through cudaMalloc, then two threads at
 *                   once: one makes 2000 cudaMalloc+cudaFree pairs of 4 KiB
 *                   and keeps 10 more; the other makes a context (as above),
 *                   three cuMemAllocs of 64 KiB in it, and destroys it,
 *                   five times.  Prints only what failed.
 *
 * Prints each driver answer that is not success, so the test sees the
 * program's behaviour is unchanged under the preload.
 */
#include "cuda_compat.h"
#include "driver_entry.h"
#include "cudart_compat.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


static procaddr_fn get_proc;

static void *driver_fn(const char *name, int version)
{
    return driver_entry(get_proc, "families", name, version);
}

/* Page-aligned host buffers: the program's own memory, as offload and swap
 * buffers are. */
static void *buffer(size_t bytes)
{
    void *p = NULL;
    if (posix_memalign(&p, 4096, bytes) != 0)
        exit(2);
    memset(p, 0x5a, bytes);
    return p;
}

typedef CUresult (*host_register_fn)(void *, size_t, unsigned int);
typedef CUresult (*host_unregister_fn)(void *);

static __attribute__((noinline)) void register_through_procaddr(void *p, size_t bytes)
{
    host_register_fn reg = (host_register_fn)driver_fn("cuMemHostRegister", 6050);
    CUresult rc = reg(p, bytes, CU_MEMHOSTREGISTER_PORTABLE); /* FAMILY-SITE host procaddr */
    printf("cuMemHostRegister(6050) %d\n", (int)rc);
}

static __attribute__((noinline)) void register_through_runtime(void *p, size_t bytes)
{
    cudaError_t rc = cudaHostRegister(p, bytes, cudaHostRegisterDefault); /* FAMILY-SITE host runtime */
    printf("cudaHostRegister %d\n", (int)rc);
}

static int host_family(bool reset)
{
    void *a = buffer(1 << 20), *b = buffer(256 << 10), *c = buffer(64 << 10), *d = buffer(128 << 10);
    register_through_procaddr(a, 1 << 20);
    register_through_runtime(b, 256 << 10);
    /* The 4.0 entry point, as a binary built before CUDA 6.5 asks for it. */
    host_register_fn legacy = (host_register_fn)driver_fn("cuMemHostRegister", 4000);
    host_unregister_fn unreg = (host_unregister_fn)driver_fn("cuMemHostUnregister", 4000);
    printf("cuMemHostRegister(4000) %d\n", (int)legacy(c, 64 << 10, 0));
    printf("cuMemHostUnregister %d\n", (int)unreg(c));
    printf("cuMemHostRegister_v2 %d\n", (int)cuMemHostRegister_v2(d, 128 << 10, 0));
    printf("cudaHostRegister again %d\n", (int)cudaHostRegister(d, 4096, 0));
    printf("cudaHostUnregister %d\n", (int)cudaHostUnregister(d));
    printf("cudaHostUnregister again %d\n", (int)cudaHostUnregister(d));
    if (reset)
        printf("cudaDeviceReset %d\n", (int)cudaDeviceReset());
    return 0;
}

/* ---- CUDA arrays ---- */

typedef CUresult (*array_create_fn)(CUarray *, const CUDA_ARRAY_DESCRIPTOR *);
typedef CUresult (*array3d_create_fn)(CUarray *, const CUDA_ARRAY3D_DESCRIPTOR *);
typedef CUresult (*array_destroy_fn)(CUarray);
typedef CUresult (*mipmap_create_fn)(CUmipmappedArray *, const CUDA_ARRAY3D_DESCRIPTOR *, unsigned int);
typedef CUresult (*mipmap_destroy_fn)(CUmipmappedArray);

static void print_size(const char *what, CUresult rc, const void *handle, bool mipmapped)
{
    CUDA_ARRAY_MEMORY_REQUIREMENTS req = {0};
    CUresult q = rc != CUDA_SUCCESS ? rc
                 : mipmapped       ? cuMipmappedArrayGetMemoryRequirements(&req, (CUmipmappedArray)handle, 0)
                                   : cuArrayGetMemoryRequirements(&req, (CUarray)handle, 0);
    printf("%s %d size %zu alignment %zu\n", what, (int)q, req.size, req.alignment);
}

static __attribute__((noinline)) cudaArray_t array_through_runtime(void)
{
    struct cudaChannelFormatDesc f = {32, 0, 0, 0, cudaChannelFormatKindFloat};
    cudaArray_t a = NULL;
    cudaError_t rc = cudaMallocArray(&a, &f, 1000, 100, cudaArrayDefault); /* FAMILY-SITE array runtime */
    print_size("cudaMallocArray", (CUresult)rc, a, false);
    return a;
}

static __attribute__((noinline)) CUarray array3d_through_procaddr(void)
{
    array3d_create_fn create = (array3d_create_fn)driver_fn("cuArray3DCreate", 3020);
    CUDA_ARRAY3D_DESCRIPTOR d = {300, 200, 3, CU_AD_FORMAT_UNSIGNED_INT8, 4, 0};
    CUarray a = NULL;
    CUresult rc = create(&a, &d); /* FAMILY-SITE array procaddr */
    print_size("cuArray3DCreate(3020)", rc, a, false);
    return a;
}

static __attribute__((noinline)) CUmipmappedArray mipmap_through_driver(void)
{
    CUDA_ARRAY3D_DESCRIPTOR d = {512, 512, 0, CU_AD_FORMAT_HALF, 1, 0};
    CUmipmappedArray m = NULL;
    CUresult rc = cuMipmappedArrayCreate(&m, &d, 10); /* FAMILY-SITE array mipmap */
    print_size("cuMipmappedArrayCreate", rc, m, true);
    return m;
}

static __attribute__((noinline)) void pitched_3d_through_runtime(void)
{
    struct cudaPitchedPtr p = {0};
    cudaError_t rc = cudaMalloc3D(&p, (struct cudaExtent){1000, 10, 5}); /* FAMILY-SITE array malloc3d */
    printf("cudaMalloc3D %d pitch %zu xsize %zu ysize %zu\n", (int)rc, p.pitch, p.xsize, p.ysize);
}

static int array_family(bool reset)
{
    array_through_runtime();
    array3d_through_procaddr();
    mipmap_through_driver();
    pitched_3d_through_runtime();

    /* Destroyed, each through another path than it was made by. */
    array_create_fn create = (array_create_fn)driver_fn("cuArrayCreate", 3020);
    array_destroy_fn destroy = (array_destroy_fn)driver_fn("cuArrayDestroy", 2000);
    mipmap_create_fn mcreate = (mipmap_create_fn)driver_fn("cuMipmappedArrayCreate", 5000);
    mipmap_destroy_fn mdestroy = (mipmap_destroy_fn)driver_fn("cuMipmappedArrayDestroy", 5000);
    CUDA_ARRAY_DESCRIPTOR d2 = {640, 480, CU_AD_FORMAT_UNSIGNED_INT16, 2};
    CUarray a2 = NULL;
    CUresult rc = create(&a2, &d2);
    print_size("cuArrayCreate(3020)", rc, a2, false);
    printf("cudaFreeArray %d\n", (int)cudaFreeArray((cudaArray_t)a2));

    struct cudaChannelFormatDesc u8 = {8, 8, 8, 8, cudaChannelFormatKindUnsigned};
    cudaArray_t a3 = NULL;
    cudaError_t e = cudaMalloc3DArray(&a3, &u8, (struct cudaExtent){64, 64, 64}, 0);
    print_size("cudaMalloc3DArray", (CUresult)e, a3, false);
    printf("cuArrayDestroy %d\n", (int)cuArrayDestroy((CUarray)a3));
    printf("cudaFreeArray again %d\n", (int)cudaFreeArray(a3));

    cudaMipmappedArray_t m1 = NULL;
    struct cudaChannelFormatDesc f32 = {32, 0, 0, 0, cudaChannelFormatKindFloat};
    e = cudaMallocMipmappedArray(&m1, &f32, (struct cudaExtent){256, 256, 0}, 9, 0);
    print_size("cudaMallocMipmappedArray", (CUresult)e, m1, true);
    printf("cuMipmappedArrayDestroy(5000) %d\n", (int)mdestroy((CUmipmappedArray)m1));

    CUDA_ARRAY3D_DESCRIPTOR d3 = {128, 0, 0, CU_AD_FORMAT_FLOAT, 4, 0};
    CUmipmappedArray m2 = NULL;
    rc = mcreate(&m2, &d3, 8);
    print_size("cuMipmappedArrayCreate(5000)", rc, m2, true);
    printf("cudaFreeMipmappedArray %d\n", (int)cudaFreeMipmappedArray((cudaMipmappedArray_t)m2));

    /* Refused by the driver: too many levels, and an unknown format. */
    CUmipmappedArray bad = NULL;
    printf("cuMipmappedArrayCreate 9 levels %d\n", (int)mcreate(&bad, &d3, 9));
    CUDA_ARRAY_DESCRIPTOR odd = {16, 16, (CUarray_format)0x7f, 1};
    printf("cuArrayCreate odd format %d\n", (int)create(&a2, &odd));
    CUDA_ARRAY_DESCRIPTOR d1 = {4096, 0, CU_AD_FORMAT_UNSIGNED_INT8, 1};
    CUarray a1 = NULL;
    rc = create(&a1, &d1);
    print_size("cuArrayCreate(3020) 1D", rc, a1, false);
    printf("cuArrayDestroy(2000) %d\n", (int)destroy(a1));
    printf("cuArrayDestroy(2000) again %d\n", (int)destroy((CUarray)a3));
    if (reset)
        printf("cudaDeviceReset %d\n", (int)cudaDeviceReset());
    return 0;
}

typedef CUresult (*ctx_create_fn)(CUcontext *, CUctxCreateParams *, unsigned int, CUdevice);
typedef CUresult (*ctx_push_fn)(CUcontext);

static __attribute__((noinline)) void *device_alloc(size_t bytes)
{
    CUdeviceptr p = 0;
    printf("cuMemAlloc %d\n", (int)cuMemAlloc_v2(&p, bytes));
    return (void *)(uintptr_t)p;
}

static int contexts(void)
{
    void *p = NULL;
    printf("cudaMalloc %d\n", (int)cudaMalloc(&p, 1 << 20));
    ctx_create_fn create = (ctx_create_fn)driver_fn("cuCtxCreate", 12050);
    ctx_push_fn push = (ctx_push_fn)driver_fn("cuCtxPushCurrent", 4000);
    CUcontext second = NULL, popped = NULL;
    printf("cuCtxCreate(12050) %d\n", (int)create(&second, NULL, 0, 0));
    device_alloc(256 << 10);
    printf("cuCtxPopCurrent %d\n", (int)cuCtxPopCurrent_v2(&popped));
    printf("cudaMalloc %d\n", (int)cudaMalloc(&p, 512 << 10));
    printf("cuCtxPushCurrent(4000) %d\n", (int)push(second));
    device_alloc(64 << 10);
    printf("cuCtxPopCurrent %d\n", (int)cuCtxPopCurrent_v2(&popped));
    printf("cuCtxDestroy %d\n", (int)cuCtxDestroy_v2(second));
    return 0;
}

static void *pairs_in_primary(void *arg)
{
    (void)arg;
    for (int i = 0; i < 2000; i++) {
        void *p = NULL;
        if (cudaMalloc(&p, 4096) != cudaSuccess || cudaFree(p) != cudaSuccess)
            printf("pair %d failed\n", i);
    }
    for (int i = 0; i < 10; i++) {
        void *p = NULL;
        if (cudaMalloc(&p, 4096) != cudaSuccess)
            printf("kept %d failed\n", i);
    }
    return NULL;
}

static void *contexts_made_and_destroyed(void *arg)
{
    ctx_create_fn create = arg;
    for (int round = 0; round < 5; round++) {
        CUcontext ctx = NULL;
        if (create(&ctx, NULL, 0, 0) != CUDA_SUCCESS) {
            printf("cuCtxCreate failed\n");
            return NULL;
        }
        for (int i = 0; i < 3; i++) {
            CUdeviceptr p = 0;
            if (cuMemAlloc_v2(&p, 64 << 10) != CUDA_SUCCESS)
                printf("cuMemAlloc failed\n");
        }
        if (cuCtxDestroy_v2(ctx) != CUDA_SUCCESS)
            printf("cuCtxDestroy failed\n");
    }
    return NULL;
}

static int contexts_threads(void)
{
    void *p = NULL;
    if (cudaMalloc(&p, 1 << 20) != cudaSuccess)
        printf("cudaMalloc failed\n");
    pthread_t a, b;
    pthread_create(&a, NULL, pairs_in_primary, NULL);
    pthread_create(&b, NULL, contexts_made_and_destroyed, driver_fn("cuCtxCreate", 12050));
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    /* The runtime's first call loads the driver and makes a context current. */
    if (cudaFree(NULL) != cudaSuccess)
        return 2;
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    get_proc = lib ? (procaddr_fn)dlsym(lib, "cuGetProcAddress_v2") : NULL;
    if (!get_proc)
        return 2;
    if (strcmp(argv[1], "host") == 0)
        return host_family(argc > 2 && strcmp(argv[2], "reset") == 0);
    if (strcmp(argv[1], "array") == 0)
        return array_family(argc > 2 && strcmp(argv[2], "reset") == 0);
    if (strcmp(argv[1], "contexts") == 0)
        return argc > 2 && strcmp(argv[2], "threads") == 0 ? contexts_threads() : contexts();
    return 2;
}
