/*
 * buffer_pool.c — the pre-allocated, fixed-block TensorBufferPool of the seed
 * article, in C: one cudaMalloc reserves every block at start, requests
 * acquire and release blocks, and a scope guard (the cleanup attribute, C's
 * RAII) releases them on every path, early returns included.  A correct run
 * leaks nothing and keeps a flat footprint; `--misuse` forgets one release
 * per request, and tensorleak points at the acquire site.
 *
 *   buffer_pool [--misuse] [REQUESTS]     (default 20; 5 with --misuse)
 */
#include "cudart_compat.h"
#include "tensorleak.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BLOCK_BYTES (2u << 20)
#define BLOCKS 8

struct buffer_pool {
    char *base;
    void *free_list[BLOCKS];
    int nfree;
    tensorleak_pool *annotation;
};

static struct buffer_pool pool;

static void pool_init(void)
{
    void *base;
    if (cudaMalloc(&base, (size_t)BLOCK_BYTES * BLOCKS) != cudaSuccess) {
        fprintf(stderr, "buffer_pool: cannot reserve the pool\n");
        exit(1);
    }
    pool.base = base;
    pool.annotation = tensorleak_pool_create("TensorBufferPool", 0);
    tensorleak_pool_segment(pool.annotation, base, (size_t)BLOCK_BYTES * BLOCKS);
    for (int i = BLOCKS - 1; i >= 0; i--)
        pool.free_list[pool.nfree++] = pool.base + (size_t)i * BLOCK_BYTES;
}

static __attribute__((noinline)) void *acquire(void)
{
    if (pool.nfree == 0) {
        fprintf(stderr, "buffer_pool: buffer exhausted\n");
        exit(1);
    }
    void *p = pool.free_list[--pool.nfree];
    tensorleak_pool_alloc(pool.annotation, p, BLOCK_BYTES); /* ACQUIRE-SITE */
    return p;
}

static void release(void *p)
{
    tensorleak_pool_free(pool.annotation, p);
    pool.free_list[pool.nfree++] = p;
}

/* The scope guard: releases the block when the variable goes out of scope. */
static void release_guard(void **p)
{
    if (*p)
        release(*p);
}
#define SCOPED_BLOCK __attribute__((cleanup(release_guard))) void *

static __attribute__((noinline)) int serve_request(int id)
{
    SCOPED_BLOCK input = acquire();
    SCOPED_BLOCK hidden = acquire();
    SCOPED_BLOCK output = acquire();
    if (id % 3 == 0)
        return 1; /* early return: the guards still release all three */
    return 0;
}

static __attribute__((noinline)) void serve_request_misused(void)
{
    void *input = acquire();
    SCOPED_BLOCK output = acquire();
    (void)input; /* the bug: input is never released */
}

int main(int argc, char **argv)
{
    int misuse = argc > 1 && strcmp(argv[1], "--misuse") == 0;
    int requests = argc > 1 + misuse ? atoi(argv[1 + misuse]) : (misuse ? 5 : 20);
    pool_init();
    for (int i = 0; i < requests; i++) {
        if (misuse)
            serve_request_misused();
        else
            serve_request(i);
        tensorleak_mark("request");
    }
    printf("buffer_pool: %d requests, %d of %d blocks free\n", requests, pool.nfree, BLOCKS);
    /* The pool lives until the process ends, like a server's. */
    return 0;
}
