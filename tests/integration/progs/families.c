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
 *
 * Prints each driver answer that is not success, so the test sees the
 * program's behaviour is unchanged under the preload.
 */
#include "cuda_compat.h"
#include "cudart_compat.h"

#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef CUresult (*procaddr_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

static procaddr_fn get_proc;

static void *driver_fn(const char *name, int version)
{
    void *fn = NULL;
    CUdriverProcAddressQueryResult st;
    if (get_proc(name, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &st) != CUDA_SUCCESS || st != 0) {
        fprintf(stderr, "families: no %s at %d\n", name, version);
        exit(2);
    }
    return fn;
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
    return 2;
}
