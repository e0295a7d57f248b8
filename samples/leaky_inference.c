/*
 * leaky_inference.c — a toy inference server loop with a real leak.
 *
 * Loads "weights" once, then serves N identical requests.  Each request
 * allocates activations and a pinned staging buffer and frees them, and
 * appends one KV-cache block that nobody ever frees: the leak tensorleak must
 * find, at kv_cache_append, growing by one block per request.
 *
 *   leaky_inference [REQUESTS]        (default 8)
 */
#include "cudart_compat.h"
#include "tensorleak.h"

#include <stdio.h>
#include <stdlib.h>

#define WEIGHTS_BYTES (64u << 20)
#define ACTIVATION_BYTES (4u << 20)
#define KV_BLOCK_BYTES (1u << 20)
#define STAGING_BYTES (64u << 10)

static void check(cudaError_t rc, const char *what)
{
    if (rc != cudaSuccess) {
        fprintf(stderr, "leaky_inference: %s failed: %s\n", what, cudaGetErrorString(rc));
        exit(1);
    }
}

/* The bug: the block is allocated per request and its pointer dropped. */
static __attribute__((noinline)) void kv_cache_append(void)
{
    void *block = NULL;
    check(cudaMalloc(&block, KV_BLOCK_BYTES), "cudaMalloc(kv block)"); /* LEAK-SITE */
}

static __attribute__((noinline)) void serve_request(int id)
{
    void *activations = NULL, *staging = NULL;
    check(cudaMalloc(&activations, ACTIVATION_BYTES), "cudaMalloc(activations)");
    check(cudaMallocHost(&staging, STAGING_BYTES), "cudaMallocHost(staging)");
    kv_cache_append();
    check(cudaFreeHost(staging), "cudaFreeHost");
    check(cudaFree(activations), "cudaFree");
    (void)id;
}

int main(int argc, char **argv)
{
    int requests = argc > 1 ? atoi(argv[1]) : 8;
    void *weights = NULL;
    check(cudaMalloc(&weights, WEIGHTS_BYTES), "cudaMalloc(weights)");
    for (int i = 0; i < requests; i++) {
        serve_request(i);
        tensorleak_mark("request");
    }
    check(cudaFree(weights), "cudaFree(weights)");
    printf("leaky_inference: served %d requests, leaked %d KV blocks of %u bytes\n", requests, requests, KV_BLOCK_BYTES);
    return 0;
}
