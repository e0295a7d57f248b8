/*
 * sleep_wake.c: a server's sleep and wake as vLLM's sleep mode (level 1) does
 * them with its CuMemAllocator, on the real driver.  Weights (WEIGHT_PIECES) and
 * a KV cache (KV_PIECES) live in VMM memory: one cuMemAddressReserve each, a
 * cuMemCreate handle per piece mapped with cuMemMap + cuMemSetAccess.  Requests
 * only touch the KV cache (no allocation).  Sleep: the weights are copied to
 * pinned host memory (cuMemAllocHost), every piece unmapped and its handle
 * released, the reservations kept.  Wake: a new handle per piece mapped at the
 * same address, the weights copied back and compared.  Two cycles, then an
 * unload that gives everything back.
 *
 * The ground truth holds cuMemGetInfo's free memory at each state (read right
 * before the state's mark and snapshot, labelled like the state), the handle
 * bytes and the address space the program holds then; compare.py holds each
 * state's snapshot and mark against it.  Nothing is leaked.
 */
#include <cuda.h>
#include <stdint.h>
#include "kit_common.h"

#define CK(call) KIT_CHECK_RT(call)
#define WEIGHT_PIECES 8
#define KV_PIECES 16
#define REQUESTS 3
#define STATES 5

struct region {
    CUdeviceptr base;
    int pieces;
    CUmemGenericAllocationHandle h[KV_PIECES];
};

static size_t piece;
static CUmemAllocationProp prop;
static CUmemAccessDesc access_desc;
static int requests_done, marks_taken;

__attribute__((noinline)) static void map_piece(struct region *r, int i)
{
    CK(cuMemCreate(&r->h[i], piece, &prop, 0));
    CK(cuMemMap(r->base + i * piece, piece, 0, r->h[i], 0));
    CK(cuMemSetAccess(r->base + i * piece, piece, &access_desc, 1));
}

static void map_region(struct region *r)
{
    for (int i = 0; i < r->pieces; i++)
        map_piece(r, i);
}

static void unmap_region(struct region *r)
{
    for (int i = 0; i < r->pieces; i++) {
        CK(cuMemUnmap(r->base + i * piece, piece));
        CK(cuMemRelease(r->h[i]));
    }
}

static void serve(struct region *kv)
{
    for (int i = 0; i < REQUESTS; i++) {
        kit_memset(kv->base, (unsigned char)i, (size_t)kv->pieces * piece);
        CK(cuCtxSynchronize());
        requests_done++;
        marks_taken += kit_mark("request");
    }
}

struct state {
    const char *label;
    size_t free, handles, address_space;
};
static struct state states[STATES];
static int nstates;

static void state(const char *label, size_t handles, size_t address_space)
{
    size_t free_now = 0, total = 0;
    CK(cuCtxSynchronize());
    CK(cuMemGetInfo(&free_now, &total));
    states[nstates++] = (struct state){label, free_now, handles, address_space};
    marks_taken += kit_mark(label);
    kit_snapshot(label);
}

int main(int argc, char **argv)
{
    int reset = kit_has_flag(argc, argv, "--reset"); /* compute-sanitizer's leak check needs it */
    size_t free0 = 0, free1 = 0, total = 0, gran = 0;
    CUdevice dev = kit_vmm_start(&prop, &gran, &piece);
    memset(&access_desc, 0, sizeof access_desc);
    access_desc.location = prop.location;
    access_desc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;

    /* Warm-up outside the measured window: the first copy and memset set up
     * the driver's own buffers. */
    CUdeviceptr w = 0;
    unsigned char byte = 1;
    CK(cuMemAlloc(&w, 2 * KIT_MIB));
    kit_memset(w, 0, 2 * KIT_MIB);
    CK(cuMemcpyHtoD(w, &byte, 1));
    CK(cuMemFree(w));
    CK(cuCtxSynchronize());
    CK(cuMemGetInfo(&free0, &total));

    struct region weights = {.pieces = WEIGHT_PIECES}, kv = {.pieces = KV_PIECES};
    size_t wbytes = (size_t)WEIGHT_PIECES * piece, kvbytes = (size_t)KV_PIECES * piece;
    CK(cuMemAddressReserve(&weights.base, wbytes, 0, 0, 0));
    CK(cuMemAddressReserve(&kv.base, kvbytes, 0, 0, 0));
    map_region(&weights);
    map_region(&kv);
    unsigned char *pattern = malloc(wbytes), *check = malloc(wbytes);
    if (!pattern || !check)
        return 3;
    for (size_t i = 0; i < wbytes; i++)
        pattern[i] = (unsigned char)(i * 7 + 3);
    CK(cuMemcpyHtoD(weights.base, pattern, wbytes));

    serve(&kv);
    state("awake", wbytes + kvbytes, wbytes + kvbytes);
    int intact = 1;
    for (int cycle = 1; cycle <= 2; cycle++) {
        void *backup = NULL;
        CK(cuMemAllocHost(&backup, wbytes));
        CK(cuMemcpyDtoH(backup, weights.base, wbytes));
        unmap_region(&weights);
        unmap_region(&kv);
        state(cycle == 1 ? "asleep1" : "asleep2", 0, wbytes + kvbytes);
        map_region(&weights);
        map_region(&kv);
        CK(cuMemcpyHtoD(weights.base, backup, wbytes));
        CK(cuMemFreeHost(backup));
        serve(&kv);
        state(cycle == 1 ? "woken1" : "woken2", wbytes + kvbytes, wbytes + kvbytes);
        CK(cuMemcpyDtoH(check, weights.base, wbytes));
        intact &= memcmp(pattern, check, wbytes) == 0;
    }

    unmap_region(&weights);
    unmap_region(&kv);
    CK(cuMemAddressFree(weights.base, wbytes));
    CK(cuMemAddressFree(kv.base, kvbytes));
    CK(cuCtxSynchronize());
    CK(cuMemGetInfo(&free1, &total));

    printf("TL_GROUND_TRUTH {\"sample\":\"sleep_wake\",\"api\":\"driver\",\"pid\":%d,"
           "\"requests\":%d,\"marks\":%d,\"expect_growth\":false,"
           "\"leaks\":{\"count\":0,\"bytes\":0},\"kinds\":{},\"sites\":[],"
           "\"granularity\":%zu,\"weights_intact\":%s,\"states\":[",
           (int)getpid(), requests_done, marks_taken, gran, intact ? "true" : "false");
    for (int i = 0; i < nstates; i++)
        printf("%s{\"label\":\"%s\",\"free\":%zu,\"handles\":%zu,\"address_space\":%zu}", i ? "," : "",
               states[i].label, states[i].free, states[i].handles, states[i].address_space);
    printf("],\"expected_held\":0,\"free_start\":%zu,\"free_end\":%zu,\"total\":%zu}\n", free0, free1, total);
    fflush(stdout);
    kit_snapshot("end");
    if (reset)
        CK(cuDevicePrimaryCtxReset(dev));
    free(pattern);
    free(check);
    return 0;
}
