/*
 * families.cu: the allocation families beyond cudaMalloc, through the runtime API:
 * host registration (cudaHostRegister of the program's own memory), CUDA arrays
 * (cudaMallocArray, cudaMalloc3DArray) and pitched 3D memory (cudaMalloc3D).
 *
 * Leaks on purpose, one call site each:
 *   register_leak    cudaHostRegister, 3 MiB of mmap'd host memory    host_registered
 *   array2d_leak     cudaMallocArray, float 1024 x 512                array
 *   array3d_leak     cudaMalloc3DArray, uchar4 256 x 256 x 8          array
 *   pitched3d_leak   cudaMalloc3D, 4096 x 256 x 2 bytes               device
 * and undoes one of each: a 1 MiB registration, a 2D and a 3D array.
 *
 * The ground truth holds what the driver says, not what tensorleak should report:
 * each registered range and the driver's view of it (cudaPointerGetAttributes'
 * memory type, cudaHostGetFlags' answer, both again after unregistering), each
 * array's cudaArrayGetInfo and cudaArrayGetMemoryRequirements answer (its size, or
 * the error: the runtime documents cudaErrorInvalidValue for an array made without
 * cudaArrayDeferredMapping), one array made with cudaArrayDeferredMapping (before
 * the measured window, destroyed there too), the 3D pitch, cuMemGetInfo before and
 * after.  compare.py derives the expected report from those figures.
 */
#include <cuda_runtime.h>
#include <stdint.h>
#include <sys/mman.h>
#include "kit_common.h"

#define CK(call) KIT_CHECK_RT(call)

struct host_range {
    const char *function; /* the call site; NULL for the undone one */
    void *p;
    size_t bytes;
    int type, flags_rc;      /* while registered */
    unsigned flags;
    int type_after, flags_rc_after; /* after cudaHostUnregister (undone range only) */
};

struct array_row {
    const char *function, *api;
    int leaked, deferred;
    cudaArray_t a;
    struct cudaChannelFormatDesc desc;
    struct cudaExtent extent;
    unsigned flags;
    int info_rc, req_rc;
    struct cudaArrayMemoryRequirements req;
};

static int pointer_type(const void *p)
{
    struct cudaPointerAttributes at;
    memset(&at, 0, sizeof at);
    if (cudaPointerGetAttributes(&at, p) != cudaSuccess) {
        (void)cudaGetLastError();
        return -1;
    }
    return (int)at.type;
}

static void *host_memory(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        exit(3);
    }
    memset(p, 1, bytes);
    return p;
}

/* The driver's view of a registered range. */
static void read_registration(struct host_range *h)
{
    h->type = pointer_type(h->p);
    h->flags_rc = (int)cudaHostGetFlags(&h->flags, h->p);
    (void)cudaGetLastError();
}

__attribute__((noinline)) static void register_leak(struct host_range *h)
{
    h->p = host_memory(h->bytes);
    CK(cudaHostRegister(h->p, h->bytes, cudaHostRegisterDefault));
}

__attribute__((noinline)) static void register_undone(struct host_range *h)
{
    h->p = host_memory(h->bytes);
    CK(cudaHostRegister(h->p, h->bytes, cudaHostRegisterDefault));
}

/* cudaArrayGetInfo and cudaArrayGetMemoryRequirements for one array; a refusal
 * is kept as the error number, and cleared so the program goes on. */
static void read_array(struct array_row *r)
{
    memset(&r->req, 0, sizeof r->req);
    r->info_rc = (int)cudaArrayGetInfo(&r->desc, &r->extent, &r->flags, r->a);
    r->req_rc = (int)cudaArrayGetMemoryRequirements(&r->req, r->a, 0);
    (void)cudaGetLastError();
}

__attribute__((noinline)) static void array2d_leak(struct array_row *r, size_t w, size_t h)
{
    struct cudaChannelFormatDesc d = cudaCreateChannelDesc<float>();
    CK(cudaMallocArray(&r->a, &d, w, h, cudaArrayDefault));
}

__attribute__((noinline)) static void array3d_leak(struct array_row *r, struct cudaExtent e, unsigned flags)
{
    struct cudaChannelFormatDesc d = cudaCreateChannelDesc<uchar4>();
    CK(cudaMalloc3DArray(&r->a, &d, e, flags));
}

__attribute__((noinline)) static struct cudaPitchedPtr pitched3d_leak(struct cudaExtent e)
{
    struct cudaPitchedPtr pp;
    memset(&pp, 0, sizeof pp);
    CK(cudaMalloc3D(&pp, e));
    return pp;
}

static void print_array(const struct array_row *r, int last)
{
    printf("{\"function\":\"%s\",\"api\":\"%s\",\"leaked\":%s,\"deferred\":%s,\"info_rc\":%d,"
           "\"extent\":[%zu,%zu,%zu],\"flags\":%u,\"format\":[%d,%d,%d,%d,%d],"
           "\"req_rc\":%d,\"size\":%zu,\"alignment\":%zu}%s",
           r->function, r->api, r->leaked ? "true" : "false", r->deferred ? "true" : "false", r->info_rc,
           r->extent.width, r->extent.height, r->extent.depth, r->flags, r->desc.x, r->desc.y, r->desc.z,
           r->desc.w, (int)r->desc.f, r->req_rc, r->req.size, r->req.alignment, last ? "" : ",");
}

static void print_host(const struct host_range *h, int last)
{
    printf("{\"function\":%s%s%s,\"bytes\":%zu,\"leaked\":%s,\"pointer_type\":%d,\"flags_rc\":%d,\"flags\":%u,"
           "\"pointer_type_after\":%d,\"flags_rc_after\":%d}%s",
           h->function ? "\"" : "", h->function ? h->function : "null", h->function ? "\"" : "", h->bytes,
           h->function ? "true" : "false", h->type, h->flags_rc, h->flags, h->type_after, h->flags_rc_after,
           last ? "" : ",");
}

int main(int argc, char **argv)
{
    int reset = kit_has_flag(argc, argv, "--reset");
    size_t free0 = 0, free1 = 0, total = 0;
    enum { ARRAY_2D_LEAK, ARRAY_3D_LEAK, ARRAY_2D_FREED, ARRAY_3D_FREED, ARRAY_DEFERRED, ARRAYS };
    struct array_row arr[ARRAYS];
    memset(arr, 0, sizeof arr);
    arr[ARRAY_2D_LEAK].function = "array2d_leak", arr[ARRAY_2D_LEAK].api = "cudaMallocArray";
    arr[ARRAY_3D_LEAK].function = "array3d_leak", arr[ARRAY_3D_LEAK].api = "cudaMalloc3DArray";
    arr[ARRAY_2D_FREED].function = "array2d_leak", arr[ARRAY_2D_FREED].api = "cudaMallocArray";
    arr[ARRAY_3D_FREED].function = "array3d_leak", arr[ARRAY_3D_FREED].api = "cudaMalloc3DArray";
    arr[ARRAY_DEFERRED].function = "array3d_leak", arr[ARRAY_DEFERRED].api = "cudaMalloc3DArray";
    arr[ARRAY_2D_LEAK].leaked = arr[ARRAY_3D_LEAK].leaked = 1;
    arr[ARRAY_DEFERRED].deferred = 1;

    CK(cudaSetDevice(0));
    CK(cudaFree(0));
    /* Warm-up outside the measured window: a plain allocation, and the
     * deferred-mapping array whose requirements the runtime documents as
     * answered (it holds no memory until mapped).  A runtime that refuses
     * the flag leaves info_rc at its error. */
    void *w = NULL;
    CK(cudaMalloc(&w, 2 * KIT_MIB));
    CK(cudaFree(w));
    {
        struct cudaChannelFormatDesc d = cudaCreateChannelDesc<uchar4>();
        struct array_row *r = &arr[ARRAY_DEFERRED];
        int rc = (int)cudaMalloc3DArray(&r->a, &d, make_cudaExtent(256, 256, 8), cudaArrayDeferredMapping);
        if (rc == 0) {
            read_array(r);
            CK(cudaFreeArray(r->a));
        } else {
            (void)cudaGetLastError();
            r->info_rc = r->req_rc = rc;
        }
    }
    CK(cudaDeviceSynchronize());
    CK(cudaMemGetInfo(&free0, &total));

    struct host_range host[2] = {{"register_leak", NULL, 3 * KIT_MIB, 0, 0, 0, -1, -1},
                                 {NULL, NULL, 1 * KIT_MIB, 0, 0, 0, -1, -1}};
    register_leak(&host[0]);
    register_undone(&host[1]);
    read_registration(&host[0]);
    read_registration(&host[1]);
    CK(cudaHostUnregister(host[1].p));
    host[1].type_after = pointer_type(host[1].p);
    host[1].flags_rc_after = (int)cudaHostGetFlags(&host[1].flags, host[1].p);
    (void)cudaGetLastError();

    array2d_leak(&arr[ARRAY_2D_LEAK], 1024, 512);
    array3d_leak(&arr[ARRAY_3D_LEAK], make_cudaExtent(256, 256, 8), cudaArrayDefault);
    array2d_leak(&arr[ARRAY_2D_FREED], 512, 512);
    array3d_leak(&arr[ARRAY_3D_FREED], make_cudaExtent(128, 128, 4), cudaArrayDefault);
    for (int i = 0; i < ARRAY_DEFERRED; i++)
        read_array(&arr[i]);
    CK(cudaFreeArray(arr[ARRAY_2D_FREED].a));
    CK(cudaFreeArray(arr[ARRAY_3D_FREED].a));

    struct cudaExtent pe = make_cudaExtent(4096, 256, 2);
    struct cudaPitchedPtr pp = pitched3d_leak(pe);
    CK(cudaMemset3D(pp, 0, pe));
    CK(cudaDeviceSynchronize());
    CK(cudaMemGetInfo(&free1, &total));

    printf("TL_GROUND_TRUTH {\"sample\":\"families\",\"api\":\"runtime\",\"pid\":%d,"
           "\"requests\":0,\"marks\":0,\"expect_growth\":null,\"families\":{\"host\":[",
           (int)getpid());
    for (int i = 0; i < 2; i++)
        print_host(&host[i], i == 1);
    printf("],\"arrays\":[");
    for (int i = 0; i < ARRAYS; i++)
        print_array(&arr[i], i == ARRAYS - 1);
    printf("],\"pitched\":{\"function\":\"pitched3d_leak\",\"pitch\":%zu,\"xsize\":%zu,\"ysize\":%zu,"
           "\"depth\":%zu,\"bytes\":%zu}},\"free_start\":%zu,\"free_end\":%zu,\"total\":%zu}\n",
           pp.pitch, pp.xsize, pp.ysize, pe.depth, pp.pitch * pp.ysize * pe.depth, free0, free1, total);
    fflush(stdout);
    kit_snapshot("end");
    if (reset)
        CK(cudaDeviceReset());
    return 0;
}
