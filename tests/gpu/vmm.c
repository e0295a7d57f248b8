/*
 * vmm.c: a segment grown the way PyTorch's expandable_segments grows one:
 * reserve a large virtual range (cuMemAddressReserve), back it piece by piece with
 * physical handles (cuMemCreate, one granularity each: 2 MiB on current GPUs),
 * cuMemMap + cuMemSetAccess each piece, use it, then shrink it again: unmap every
 * piece, release every handle but one (leaked on purpose, kind vmm_handle, at
 * create_piece), free the range.  The virtual reservation is not memory: only the
 * physical handle may be counted.
 */
#include <cuda.h>
#include <stdint.h>
#include "kit_common.h"

#define CK(call) KIT_CHECK_RT(call)
#define PIECES 6
#define LEAKED_PIECE 3
#define RESERVE_PIECES 64

__attribute__((noinline)) static CUmemGenericAllocationHandle create_piece(size_t bytes,
                                                                           const CUmemAllocationProp *prop)
{
    CUmemGenericAllocationHandle h = 0;
    CK(cuMemCreate(&h, bytes, prop, 0));
    return h;
}

int main(int argc, char **argv)
{
    int reset = kit_has_flag(argc, argv, "--reset");
    size_t free0 = 0, free1 = 0, total = 0, gran = 0, piece = 0;
    CUmemAllocationProp prop;
    CUdevice dev = kit_vmm_start(&prop, &gran, &piece);

    CUmemAccessDesc access;
    memset(&access, 0, sizeof access);
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;

    /* Warm-up outside the measured window. */
    CUdeviceptr w = 0;
    CK(cuMemAlloc(&w, 2 * KIT_MIB));
    kit_memset(w, 0, 2 * KIT_MIB);
    CK(cuMemFree(w));
    CK(cuCtxSynchronize());
    CK(cuMemGetInfo(&free0, &total));

    CUdeviceptr va = 0;
    CK(cuMemAddressReserve(&va, RESERVE_PIECES * piece, 0, 0, 0));
    CUmemGenericAllocationHandle h[PIECES];
    for (int i = 0; i < PIECES; i++) { /* grow */
        h[i] = create_piece(piece, &prop);
        CK(cuMemMap(va + i * piece, piece, 0, h[i], 0));
        CK(cuMemSetAccess(va + i * piece, piece, &access, 1));
    }
    kit_memset(va, 7, PIECES * piece);
    CK(cuCtxSynchronize());
    for (int i = 0; i < PIECES; i++) { /* shrink */
        CK(cuMemUnmap(va + i * piece, piece));
        if (i != LEAKED_PIECE)
            CK(cuMemRelease(h[i]));
    }
    CK(cuMemAddressFree(va, RESERVE_PIECES * piece));
    CK(cuCtxSynchronize());
    CK(cuMemGetInfo(&free1, &total));

    printf("TL_GROUND_TRUTH {\"sample\":\"vmm\",\"api\":\"driver\",\"pid\":%d,"
           "\"requests\":0,\"marks\":0,\"expect_growth\":null,"
           "\"leaks\":{\"count\":1,\"bytes\":%zu},"
           "\"kinds\":{\"vmm_handle\":[1,%zu]},"
           "\"sites\":[{\"function\":\"create_piece\",\"count\":1,\"bytes\":%zu}],"
           "\"granularity\":%zu,\"reserved_va\":%zu,"
           "\"expected_held\":%zu,\"free_start\":%zu,\"free_end\":%zu,\"total\":%zu}\n",
           (int)getpid(), piece, piece, piece, gran, (size_t)RESERVE_PIECES * piece, piece, free0,
           free1, total);
    fflush(stdout);
    kit_snapshot("end");
    if (reset)
        CK(cuDevicePrimaryCtxReset(dev));
    return 0;
}
