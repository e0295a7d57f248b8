/* first_figures — the figures a user reads first, on a known history
 * (driver API, primary context of device 0):
 *   cuMemAlloc 10 MiB, freed (the peak: 10 MiB, nothing else live yet);
 *   2 x cuMemAlloc 1 MiB, kept;
 *   cuMemAllocHost 4 KiB (pinned host), kept;
 *   a created stream-ordered pool serving 5000 B (kept) and 1 MiB + 7 B
 *   (freed).  The driver counts both blocks rounded to 512 B.
 * At exit the user owner holds 2 MiB + 4 KiB + 5000 B and peaked at 10 MiB.
 *
 *   it_first_figures [hidden-block | hidden-free | owned]
 *     owned: instead, 200 cuMemAlloc+cuMemFree pairs of 1 MiB (past the
 *                   first 64 operations the thread owns the live table:
 *                   the tracker's hot insert and removal), then 3 x 2 MiB
 *                   kept, from one line.
 *     hidden-block: the pool also serves 512 B that tensorleak never sees;
 *     hidden-free:  the 5000 B block is freed where tensorleak does not see
 *                   it (the driver holds one block fewer than it thinks).
 * Both go through libit_hidden_pool.so, loaded RTLD_DEEPBIND so that its
 * calls bind to libcuda.so.1 itself, ahead of the preloaded hooks. */
#include "cuda_compat.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void ok(CUresult rc, const char *what)
{
    if (rc != CUDA_SUCCESS) {
        fprintf(stderr, "first_figures: %s failed: %d\n", what, (int)rc);
        exit(1);
    }
}
#define CHECK(call) ok((call), #call)

typedef CUresult (*hidden_alloc_fn)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
typedef CUresult (*hidden_free_fn)(CUdeviceptr, CUstream);

static void *hidden(const char *name)
{
    void *lib = dlopen("libit_hidden_pool.so", RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    void *fn = lib ? dlsym(lib, name) : NULL;
    if (!fn) {
        fprintf(stderr, "first_figures: libit_hidden_pool.so: %s\n", dlerror());
        exit(1);
    }
    return fn;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    CUcontext ctx; /* the primary context of device 0 */
    CHECK(cuInit(0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CHECK(cuCtxSetCurrent(ctx));

    CUdeviceptr big, a, b;
    if (strcmp(mode, "owned") == 0) {
        for (int i = 0; i < 200; i++) {
            CHECK(cuMemAlloc_v2(&big, 1u << 20));
            CHECK(cuMemFree_v2(big));
        }
        for (int i = 0; i < 3; i++)
            CHECK(cuMemAlloc_v2(&a, 2u << 20));
        return 0;
    }
    CHECK(cuMemAlloc_v2(&big, 10u << 20));
    CHECK(cuMemFree_v2(big));
    CHECK(cuMemAlloc_v2(&a, 1u << 20));
    CHECK(cuMemAlloc_v2(&b, 1u << 20));
    void *host;
    CHECK(cuMemAllocHost_v2(&host, 4096));

    const CUmemPoolProps props = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
                                  .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
    CUmemoryPool pool;
    CHECK(cuMemPoolCreate(&pool, &props));
    CUdeviceptr small, odd;
    CHECK(cuMemAllocFromPoolAsync(&small, 5000, pool, NULL));
    CHECK(cuMemAllocFromPoolAsync(&odd, (1u << 20) + 7, pool, NULL));
    CHECK(cuMemFreeAsync(odd, NULL));
    if (!strcmp(mode, "hidden-block")) {
        CUdeviceptr unseen;
        CHECK(((hidden_alloc_fn)hidden("hidden_alloc"))(&unseen, 512, pool, NULL));
    } else if (!strcmp(mode, "hidden-free")) {
        CHECK(((hidden_free_fn)hidden("hidden_free"))(small, NULL));
    }
    cuuint64_t used = 0;
    CHECK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used));
    printf("first_figures: driver used %llu\n", (unsigned long long)used);
    return 0;
}
