/* One call site that leaks, grows and frees wrongly, for a `leak:` rule
 * run end to end: kv_cache_append keeps a 1 MiB block per request (a mark
 * after each), then kv_cache_drop frees the first block twice and a pointer
 * that was never allocated.  A `leak:kv_cache_*` rule suppresses the leak;
 * the growth row and both invalid frees stay (only `growth:` and
 * `invalid-free:` rules suppress those).
 *
 *   suppressed_site [REQUESTS]   (default 6, at most 64)
 */
#include "cudart_compat.h"
#include "tensorleak.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define KV_BLOCK_BYTES (1u << 20)
#define MAX_REQUESTS 64

static __attribute__((noinline)) void *kv_cache_append(void)
{
    void *block = NULL;
    if (cudaMalloc(&block, KV_BLOCK_BYTES) != cudaSuccess) /* GROW-SITE */
        exit(1);
    return block;
}

static __attribute__((noinline)) void kv_cache_drop(void *block)
{
    cudaFree(block);
    cudaFree(block);                  /* INVALID-TWICE */
    cudaFree((void *)(uintptr_t)0x1234); /* INVALID-BOGUS */
    __asm__ volatile("" ::: "memory"); /* no tail call: this frame stays on the stack */
}

int main(int argc, char **argv)
{
    int requests = argc > 1 ? atoi(argv[1]) : 6;
    if (requests < 1 || requests > MAX_REQUESTS)
        return 2;
    void *kept[MAX_REQUESTS];
    for (int i = 0; i < requests; i++) {
        kept[i] = kv_cache_append();
        tensorleak_mark("request");
    }
    kv_cache_drop(kept[0]);
    printf("suppressed_site: %d requests, %d blocks kept\n", requests, requests - 1);
    return 0;
}
