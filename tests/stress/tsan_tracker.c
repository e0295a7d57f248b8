/*
 * tsan_tracker.c — the tracker's tables under ThreadSanitizer: 8 threads x
 * 200k tl_track_alloc/tl_track_free on overlapping addresses, linked
 * directly against the tracker sources built with -fsanitize=thread (the
 * preload library itself cannot run under TSan through LD_PRELOAD).
 *
 * Each thread owns a band of addresses and also frees addresses of the next
 * thread's band that it takes over through an atomic hand-off slot, so
 * inserts and removes of one address happen on different threads.  The
 * survivors are exact: THREADS * SURVIVORS rows of SURVIVOR_BYTES.
 * The preload layer is not linked (the layers below it never call it), and
 * the driver look-ups find no driver here.
 */
#include "tl_internal.h"

#include <stdlib.h>
#include <string.h>

#define THREADS 8
#define SURVIVORS 5
#define SURVIVOR_BYTES 4096u
#define SLOTS 32

static long ops = 200000;
#define BASE 0x100000000ull
#define ADDRESSES 4096
static _Atomic uint64_t slot[SLOTS];          /* addresses handed between threads */
static atomic_uchar owned[ADDRESSES];         /* the "driver": one owner per address */

static void release(uint64_t addr)
{
    /* The free is recorded before the address goes back to the "driver". */
    if (!tl_track_free(TL_SPACE_MEM, addr, 1u << TL_KIND_DEVICE, NULL))
        abort();
    atomic_store(&owned[(addr - BASE) / 512], 0);
}

static void *worker(void *arg)
{
    uint64_t id = (uint64_t)(uintptr_t)arg;
    uint64_t x = 0x9e3779b97f4a7c15ull * (id + 1);
    for (long i = 0; i < ops; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        unsigned idx = (unsigned)(x % ADDRESSES);
        unsigned char free_now = 0;
        if (!atomic_compare_exchange_strong(&owned[idx], &free_now, 1))
            continue; /* another thread holds this address now */
        uint64_t addr = BASE + (uint64_t)idx * 512;
        tl_track_alloc(TL_KIND_DEVICE, TL_SPACE_MEM, addr, 512, 0, 0);
        if (i & 1) {
            release(addr);
            continue;
        }
        uint64_t old = atomic_exchange(&slot[(x >> 32) % SLOTS], addr);
        if (old)
            release(old);
    }
    for (unsigned s = 0; s < SURVIVORS; s++)
        tl_track_alloc(TL_KIND_DEVICE, TL_SPACE_MEM, 0x200000000ull + (id * SURVIVORS + s) * SURVIVOR_BYTES,
                       SURVIVOR_BYTES, 0, 0);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc > 1)
        ops = atol(argv[1]);
    tl_options_load(NULL);
    /* The up-calls the library's start points at the layers above (a call
     * site's owner is decided by one, at its first row). */
    tl_upcalls_connect();
    /* No unwinding: libunwind's per-thread cache destructor crashes inside
     * GCC 12's TSan runtime at thread exit (libunwind is not instrumented).
     * Call-site interning still runs, with empty stacks. */
    tl_opt.depth = 0;
    tl_stack_init();
    atomic_store(&tl_active, true);
    pthread_t t[THREADS];
    for (uintptr_t i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, worker, (void *)i);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < SLOTS; i++) {
        uint64_t a = atomic_exchange(&slot[i], 0);
        if (a)
            release(a);
    }
    long long want_count = THREADS * SURVIVORS, want_bytes = want_count * SURVIVOR_BYTES;
    tl_live_fold(); /* live_count is folded from the shards */
    long long count = atomic_load(&tl_stats.live_count), bytes = atomic_load(&tl_stats.live_bytes);
    size_t rows = tl_live_count();
    unsigned long long invalid = atomic_load(&tl_stats.invalid_frees), dropped = atomic_load(&tl_dropped_events);
    printf("live %lld (%lld bytes), rows %zu, invalid frees %llu, dropped %llu\n", count, bytes, rows, invalid, dropped);
    if (count != want_count || bytes != want_bytes || rows != (size_t)want_count || invalid || dropped) {
        printf("FAIL: want live %lld (%lld bytes), rows %lld, no invalid frees, nothing dropped\n", want_count,
               want_bytes, want_count);
        return 1;
    }
    return 0;
}
