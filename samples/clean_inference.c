/*
 * clean_inference.c — the same loop as leaky_inference with the KV cache
 * released at the end of each request: tensorleak must report zero leaks
 * and no growth, however many requests run.
 *
 *   clean_inference [REQUESTS]        (default 50)
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
        fprintf(stderr, "clean_inference: %s failed: %s\n", what, cudaGetErrorString(rc));
        exit(1);
    }
}

static __attribute__((noinline)) void serve_request(void)
{
    void *activations = NULL, *staging = NULL, *kv = NULL;
    check(cudaMalloc(&activations, ACTIVATION_BYTES), "cudaMalloc(activations)");
    check(cudaMallocHost(&staging, STAGING_BYTES), "cudaMallocHost(staging)");
    check(cudaMalloc(&kv, KV_BLOCK_BYTES), "cudaMalloc(kv)");
    check(cudaFree(kv), "cudaFree(kv)");
    check(cudaFreeHost(staging), "cudaFreeHost");
    check(cudaFree(activations), "cudaFree");
}

int main(int argc, char **argv)
{
    int requests = argc > 1 ? atoi(argv[1]) : 50;
    void *weights = NULL;
    check(cudaMalloc(&weights, WEIGHTS_BYTES), "cudaMalloc(weights)");
    for (int i = 0; i < requests; i++) {
        serve_request();
        tensorleak_mark("request");
    }
    check(cudaFree(weights), "cudaFree(weights)");
    printf("clean_inference: served %d requests\n", requests);
    return 0;
}
