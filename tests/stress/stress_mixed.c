/*
 * stress_mixed.c — THREADS threads each make OPS allocation/free pairs of
 * mixed kinds (cudaMalloc, cudaMallocHost, cudaMallocManaged,
 * cudaMallocAsync) through the simulated runtime, and keep an exactly known
 * set of survivors.  Half of the frees are made by another thread than the
 * one that allocated (a shared hand-off ring), so allocation and free race
 * on the same addresses: the simulated driver's first-fit allocator hands a
 * just-freed address straight to the next caller, whichever thread it is.
 * A tracker that recorded the free after the real free would lose or
 * double-count rows here, and the exit report would be off.
 *
 *   stress_mixed [THREADS] [OPS]        (defaults 8 and 200000)
 *
 * Prints one line with the survivors it left: the driver (stress_test.py)
 * compares it with the exit report.  Survivor sizes are distinct per kind so
 * a row counted under the wrong kind shows.
 */
#include "cudart_compat.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

enum { K_DEVICE, K_HOST, K_MANAGED, K_ASYNC, K_COUNT };

/* Survivors per thread and kind, and their sizes (distinct, 512-aligned
 * except the host one, which the simulator does not round). */
#define SURVIVORS_PER_KIND 3
static const size_t survivor_size[K_COUNT] = {3 << 20, 1 << 20, 5 << 20, 7 << 20};

#define RING 64
static _Atomic(uintptr_t) ring[RING];   /* (pointer | kind) handed to any thread */

static int threads = 8;
static long ops = 200000;
static cudaStream_t stream;

static void die(cudaError_t rc, const char *what)
{
    fprintf(stderr, "stress_mixed: %s failed: %s\n", what, cudaGetErrorString(rc));
    exit(3);
}

static void *alloc_kind(int kind, size_t bytes)
{
    void *p = NULL;
    cudaError_t rc;
    switch (kind) {
    case K_DEVICE: rc = cudaMalloc(&p, bytes); break;
    case K_HOST: rc = cudaMallocHost(&p, bytes); break;
    case K_MANAGED: rc = cudaMallocManaged(&p, bytes, cudaMemAttachGlobal); break;
    default: rc = cudaMallocAsync(&p, bytes, stream); break;
    }
    if (rc != cudaSuccess)
        die(rc, "allocation");
    /* Pointers are at least 8-aligned: the low bits carry the kind. */
    if ((uintptr_t)p & 7)
        die(cudaErrorInvalidValue, "alignment");
    return p;
}

static void free_kind(int kind, void *p)
{
    cudaError_t rc;
    switch (kind) {
    case K_HOST: rc = cudaFreeHost(p); break;
    case K_ASYNC: rc = cudaFreeAsync(p, stream); break;
    default: rc = cudaFree(p); break;
    }
    if (rc != cudaSuccess)
        die(rc, "free");
}

static void *worker(void *arg)
{
    unsigned id = (unsigned)(uintptr_t)arg;
    uint64_t x = 0x9e3779b97f4a7c15ull * (id + 1); /* xorshift: deterministic per thread */
    for (long i = 0; i < ops; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        int kind = (int)(x % K_COUNT);
        /* Host memory is real mmap'ed memory in the simulator: keep it small. */
        size_t bytes = kind == K_HOST ? 4096 : 512 * (1 + (x >> 8) % 64);
        void *p = alloc_kind(kind, bytes);
        if (i & 1) {
            free_kind(kind, p);
            continue;
        }
        /* Hand it to whoever comes next; free what was there before. */
        uintptr_t old = atomic_exchange(&ring[(x >> 20) % RING], (uintptr_t)p | (uintptr_t)kind);
        if (old)
            free_kind((int)(old & 7), (void *)(old & ~(uintptr_t)7));
    }
    for (int k = 0; k < K_COUNT; k++)
        for (int s = 0; s < SURVIVORS_PER_KIND; s++)
            (void)alloc_kind(k, survivor_size[k]); /* deliberately leaked */
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc > 1)
        threads = atoi(argv[1]);
    if (argc > 2)
        ops = atol(argv[2]);
    if (threads < 1 || threads > 64 || ops < 0)
        return 2;
    cudaError_t rc = cudaStreamCreate(&stream);
    if (rc != cudaSuccess)
        die(rc, "cudaStreamCreate");
    pthread_t t[64];
    for (int i = 0; i < threads; i++)
        if (pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)i) != 0)
            return 3;
    for (int i = 0; i < threads; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < RING; i++) {
        uintptr_t v = atomic_exchange(&ring[i], 0);
        if (v)
            free_kind((int)(v & 7), (void *)(v & ~(uintptr_t)7));
    }
    if ((rc = cudaStreamSynchronize(stream)) != cudaSuccess)
        die(rc, "cudaStreamSynchronize");
    long long count = 0, bytes = 0;
    printf("survivors");
    for (int k = 0; k < K_COUNT; k++) {
        long long n = (long long)threads * SURVIVORS_PER_KIND;
        printf(" %lld:%zu", n, survivor_size[k]);
        count += n;
        bytes += n * (long long)survivor_size[k];
    }
    printf(" total %lld %lld\n", count, bytes);
    return 0;
}
