/* Every (name, version, flags) lookup through cuGetProcAddress_v2 under the
 * preload must hand back a function of exactly the variant the real driver
 * resolved: dladdr names our hook, which bears the variant's name. */
#include "cuda_compat.h"
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

typedef CUresult (*procaddr_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

int main(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW);
    procaddr_fn get = lib ? (procaddr_fn)dlsym(lib, "cuGetProcAddress_v2") : NULL;
    if (!get)
        return 2;
    static const struct { const char *sym; int ver; unsigned flags; } q[] = {
        {"cuMemAlloc", 3020, 0}, {"cuMemAlloc", 12000, 0}, {"cuMemFree", 12000, 0},
        {"cuMemAllocAsync", 11020, 0}, {"cuMemAllocAsync", 12000, 1}, {"cuMemAllocAsync", 12000, 2},
        {"cuMemFreeAsync", 12000, 2}, {"cuMemAllocFromPoolAsync", 12000, 2},
        {"cuCtxDestroy", 4000, 0}, {"cuDevicePrimaryCtxReset", 11000, 0},
        {"cuGetProcAddress", 11030, 0}, {"cuGetProcAddress", 12000, 0},
        {"cuMemCreate", 12000, 0}, {"cuMemGetInfo", 12000, 0}, {"cuNoSuchFunction", 12000, 0},
    };
    for (size_t i = 0; i < sizeof q / sizeof q[0]; i++) {
        void *fn = NULL;
        CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SUCCESS;
        CUresult rc = get(q[i].sym, &fn, q[i].ver, q[i].flags, &st);
        Dl_info info;
        const char *name = fn && dladdr(fn, &info) && info.dli_sname ? info.dli_sname : "NULL";
        const char *where = fn && dladdr(fn, &info) && info.dli_fname && strstr(info.dli_fname, "libtensorleak") ? "hook" : "driver";
        printf("%s %d %u -> rc=%d status=%d %s (%s)\n", q[i].sym, q[i].ver, q[i].flags, (int)rc, (int)st, name, fn ? where : "-");
    }
    return 0;
}
