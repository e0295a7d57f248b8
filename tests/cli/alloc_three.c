/*
 * alloc_three.c: leaks three 1 MiB device allocations through a dlopen'ed
 * libcuda.so.1 (the simulated driver under `tensorleak run --sim`), so the
 * CLI tests can compare `tensorleak report` with the preload's own text.
 */
#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>

typedef int (*cu_init_fn)(unsigned flags);
typedef int (*cu_device_get_fn)(int *device, int ordinal);
typedef int (*cu_ctx_create_fn)(void **ctx, unsigned flags, int device);
typedef int (*cu_mem_alloc_fn)(unsigned long long *dptr, size_t bytes);

int main(void)
{
    void *driver = dlopen("libcuda.so.1", RTLD_NOW);
    if (!driver) {
        fprintf(stderr, "alloc_three: %s\n", dlerror());
        return 3;
    }
    cu_init_fn cu_init = (cu_init_fn)dlsym(driver, "cuInit");
    cu_device_get_fn cu_device_get = (cu_device_get_fn)dlsym(driver, "cuDeviceGet");
    cu_ctx_create_fn cu_ctx_create = (cu_ctx_create_fn)dlsym(driver, "cuCtxCreate_v2");
    cu_mem_alloc_fn cu_mem_alloc = (cu_mem_alloc_fn)dlsym(driver, "cuMemAlloc_v2");
    if (!cu_init || !cu_device_get || !cu_ctx_create || !cu_mem_alloc)
        return 4;
    int device;
    void *ctx;
    unsigned long long ptr;
    if (cu_init(0) || cu_device_get(&device, 0) || cu_ctx_create(&ctx, 0, device))
        return 5;
    for (int i = 0; i < 3; i++) {
        if (cu_mem_alloc(&ptr, 1 << 20))
            return 6;
    }
    return 0;
}
