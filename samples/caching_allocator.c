/*
 * caching_allocator.c — a small PyTorch-style caching allocator over
 * cudaMalloc segments, annotated with tensorleak's pool API.
 *
 * It reserves 20 MiB segments and splits them into 4 MiB blocks; freed
 * blocks stay in the segment for reuse (caching, not leaking).  The run ends
 * with a 12 MiB request that fails although 20 MiB are free in the pool:
 * no hole is larger than 4 MiB (fragmentation), and the device (48 MiB,
 * SIMCUDA_MEMORY=48M) has no room for another segment.  One block is never
 * returned: the only leak.
 */
#include "cudart_compat.h"
#include "tensorleak.h"

#include <stdio.h>
#include <stdlib.h>

#define SEGMENT (20u << 20)
#define BLOCK (4u << 20)
#define BLOCKS_PER_SEGMENT (SEGMENT / BLOCK)

struct segment {
    char *base;
    int used[BLOCKS_PER_SEGMENT];
};

static struct segment segments[4];
static int nsegments;
static tensorleak_pool *pool;

static int grow(void)
{
    void *base;
    if (cudaMalloc(&base, SEGMENT) != cudaSuccess)
        return -1;
    segments[nsegments].base = base;
    tensorleak_pool_segment(pool, base, SEGMENT);
    nsegments++;
    return 0;
}

/* First fit over runs of free blocks; a new segment when none fits. */
static __attribute__((noinline)) void *block_alloc(size_t bytes)
{
    int need = (int)((bytes + BLOCK - 1) / BLOCK);
    for (int attempt = 0; attempt < 2; attempt++) {
        for (int s = 0; s < nsegments; s++) {
            for (int b = 0; b + need <= (int)BLOCKS_PER_SEGMENT; b++) {
                int ok = 1;
                for (int k = 0; k < need; k++)
                    ok &= !segments[s].used[b + k];
                if (!ok)
                    continue;
                for (int k = 0; k < need; k++)
                    segments[s].used[b + k] = need;
                void *p = segments[s].base + (size_t)b * BLOCK;
                tensorleak_pool_alloc(pool, p, (size_t)need * BLOCK); /* BLOCK-SITE */
                return p;
            }
        }
        if (nsegments == 4 || grow() != 0)
            return NULL;
    }
    return NULL;
}

static void block_free(void *p)
{
    for (int s = 0; s < nsegments; s++) {
        char *base = segments[s].base;
        if ((char *)p < base || (char *)p >= base + SEGMENT)
            continue;
        int b = (int)(((char *)p - base) / BLOCK), need = segments[s].used[b];
        tensorleak_pool_free(pool, p);
        for (int k = 0; k < need; k++)
            segments[s].used[b + k] = 0;
        return;
    }
}

static __attribute__((noinline)) void *tensor(size_t bytes)
{
    return block_alloc(bytes); /* LEAK-SITE */
}

int main(void)
{
    pool = tensorleak_pool_create("caching_allocator", 0);
    void *t[10];
    for (int i = 0; i < 10; i++)
        if (!(t[i] = tensor(BLOCK)))
            return 1;
    /* Free every other block: 20 MiB free, in 4 MiB holes. */
    for (int i = 0; i < 10; i += 2)
        block_free(t[i]);
    void *big = tensor(12u << 20);
    printf("caching_allocator: 12 MiB request %s\n", big ? "succeeded" : "failed (fragmentation)");
    /* Every block but t[7] goes back; the segments stay cached. */
    for (int i = 1; i < 10; i += 2)
        if (i != 7)
            block_free(t[i]);
    return 0;
}
