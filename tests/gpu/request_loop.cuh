/*
 * request_loop.cuh: the runtime-API request loop behind leaky.cu and clean.cu,
 * the real-GPU twins of the simulated leaky/clean inference samples.
 *
 * Model weights are allocated once; each request allocates activations (freed)
 * and appends one KV-cache buffer.  The leaky build forgets to evict the KV
 * buffers (one leaked allocation per request, at kv_cache_append); the clean
 * build evicts each at the end of its request.  Sizes are whole 2 MiB pages so
 * cuMemGetInfo deltas are exact.
 */
#include <cuda_runtime.h>
#include <stdint.h>
#include "kit_common.h"

__global__ void kit_fill(float *p, size_t n, float v)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n)
        p[i] = v + (float)(i & 7);
}

static void launch_fill(void *p, size_t bytes, float v)
{
    size_t n = bytes / sizeof(float);
    kit_fill<<<(unsigned)((n + 255) / 256), 256>>>((float *)p, n, v);
    KIT_CHECK_RT(cudaGetLastError());
}

static size_t kv_bytes_for(int request) { return (size_t)(1 + request % 3) * 2 * KIT_MIB; }

/* The leaking call site: the ground truth names this function. */
__attribute__((noinline)) void *kv_cache_append(int request)
{
    void *kv = NULL;
    KIT_CHECK_RT(cudaMalloc(&kv, kv_bytes_for(request)));
    launch_fill(kv, kv_bytes_for(request), (float)request);
    return kv;
}

__attribute__((noinline)) static void *activations_alloc(size_t bytes)
{
    void *p = NULL;
    KIT_CHECK_RT(cudaMalloc(&p, bytes));
    return p;
}

__attribute__((noinline)) static void serve_request(int request, int leak)
{
    void *act = activations_alloc(8 * KIT_MIB);
    launch_fill(act, 8 * KIT_MIB, 1.0f);
    void *kv = kv_cache_append(request);
    KIT_CHECK_RT(cudaFree(act));
    if (!leak)
        KIT_CHECK_RT(cudaFree(kv)); /* eviction: the clean build does it */
}

static int run_requests(int argc, char **argv, int leak, const char *name)
{
    int requests = (int)kit_int_arg(argc, argv, "--requests", 16);
    int reset = kit_has_flag(argc, argv, "--reset"); /* for compute-sanitizer's leak check */
    size_t free0 = 0, free1 = 0, total = 0;

    KIT_CHECK_RT(cudaSetDevice(0));
    KIT_CHECK_RT(cudaFree(0)); /* create the context */
    /* Warm-up outside the measured window: loads the kernel, settles lazy driver state. */
    void *w = activations_alloc(2 * KIT_MIB);
    launch_fill(w, 2 * KIT_MIB, 0.0f);
    KIT_CHECK_RT(cudaDeviceSynchronize());
    KIT_CHECK_RT(cudaFree(w));
    KIT_CHECK_RT(cudaMemGetInfo(&free0, &total));

    void *weights = activations_alloc(64 * KIT_MIB);
    launch_fill(weights, 64 * KIT_MIB, 0.5f);
    int marks = 0;
    unsigned long long leaked_bytes = 0;
    for (int r = 0; r < requests; r++) {
        serve_request(r, leak);
        if (leak)
            leaked_bytes += kv_bytes_for(r);
        KIT_CHECK_RT(cudaDeviceSynchronize());
        marks += kit_mark("request");
    }
    KIT_CHECK_RT(cudaFree(weights));
    KIT_CHECK_RT(cudaDeviceSynchronize());
    KIT_CHECK_RT(cudaMemGetInfo(&free1, &total));
    int leaked = leak ? requests : 0;

    printf("TL_GROUND_TRUTH {\"sample\":\"%s\",\"api\":\"runtime\",\"pid\":%d,"
           "\"requests\":%d,\"marks\":%d,\"expect_growth\":%s,"
           "\"leaks\":{\"count\":%d,\"bytes\":%llu},"
           "\"kinds\":{\"device\":[%d,%llu]},"
           "\"sites\":[{\"function\":\"kv_cache_append\",\"count\":%d,\"bytes\":%llu}],"
           "\"expected_held\":%llu,\"free_start\":%zu,\"free_end\":%zu,\"total\":%zu}\n",
           name, (int)getpid(), requests, marks, leak ? "true" : "false", leaked, leaked_bytes,
           leaked, leaked_bytes, leaked, leaked_bytes, leaked_bytes, free0, free1, total);
    fflush(stdout);
    kit_snapshot("end");
    if (reset)
        KIT_CHECK_RT(cudaDeviceReset());
    return 0;
}
