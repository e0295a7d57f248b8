/*
 * vmm_expandable.c — a segment that grows by mapping 2 MiB physical handles
 * into one reserved virtual range, as PyTorch's expandable_segments:True does.
 * Like PyTorch, it fetches the VMM entry points through the runtime's
 * cudaGetDriverEntryPointByVersion.  It grows to 5 pieces and shrinks by 2;
 * without --clean it then forgets the rest: 3 handles (6 MiB of memory),
 * 3 mappings and the 1 GiB address range (which is not memory) leak.
 *
 *   vmm_expandable [--clean]
 */
#include "cudart_compat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PIECE (2u << 20)
#define RANGE (1ull << 30)

typedef CUresult (*reserve_fn)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
typedef CUresult (*addrfree_fn)(CUdeviceptr, size_t);
typedef CUresult (*create_fn)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
typedef CUresult (*release_fn)(CUmemGenericAllocationHandle);
typedef CUresult (*map_fn)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
typedef CUresult (*unmap_fn)(CUdeviceptr, size_t);
typedef CUresult (*access_fn)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);

static void *entry(const char *name)
{
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult status;
    if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &status) != cudaSuccess || !fn) {
        fprintf(stderr, "vmm_expandable: no driver entry point %s\n", name);
        exit(1);
    }
    return fn;
}

#define CHECK(call)                                                                  \
    do {                                                                             \
        CUresult rc_ = (call);                                                       \
        if (rc_ != CUDA_SUCCESS) {                                                   \
            fprintf(stderr, "vmm_expandable: %s failed: %d\n", #call, (int)rc_);     \
            exit(1);                                                                 \
        }                                                                            \
    } while (0)

static create_fn mem_create;
static map_fn mem_map;
static access_fn mem_set_access;

static __attribute__((noinline)) CUmemGenericAllocationHandle grow(CUdeviceptr at)
{
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    CUmemGenericAllocationHandle h;
    CHECK(mem_create(&h, PIECE, &prop, 0)); /* HANDLE-SITE */
    CHECK(mem_map(at, PIECE, 0, h, 0)); /* MAP-SITE */
    CUmemAccessDesc access = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CHECK(mem_set_access(at, PIECE, &access, 1));
    return h;
}

int main(int argc, char **argv)
{
    int clean = argc > 1 && strcmp(argv[1], "--clean") == 0;
    if (cudaFree(NULL) != cudaSuccess) /* initialise the runtime, as frameworks do */
        return 1;
    reserve_fn reserve = (reserve_fn)entry("cuMemAddressReserve");
    addrfree_fn addr_free = (addrfree_fn)entry("cuMemAddressFree");
    release_fn release = (release_fn)entry("cuMemRelease");
    unmap_fn unmap = (unmap_fn)entry("cuMemUnmap");
    mem_create = (create_fn)entry("cuMemCreate");
    mem_map = (map_fn)entry("cuMemMap");
    mem_set_access = (access_fn)entry("cuMemSetAccess");

    CUdeviceptr base;
    CHECK(reserve(&base, RANGE, 0, 0, 0)); /* RESERVE-SITE */
    CUmemGenericAllocationHandle pieces[5];
    for (int i = 0; i < 5; i++)
        pieces[i] = grow(base + (CUdeviceptr)i * PIECE);
    for (int i = 4; i >= 3; i--) {
        CHECK(unmap(base + (CUdeviceptr)i * PIECE, PIECE));
        CHECK(release(pieces[i]));
    }
    if (clean) {
        for (int i = 2; i >= 0; i--) {
            CHECK(unmap(base + (CUdeviceptr)i * PIECE, PIECE));
            CHECK(release(pieces[i]));
        }
        CHECK(addr_free(base, RANGE));
    }
    printf("vmm_expandable: %s\n", clean ? "released everything" : "left 3 pieces mapped");
    return 0;
}
