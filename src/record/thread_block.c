/*
 * thread_block.c — per-thread state of the hot path, on the heap.
 *
 * The stack walkers keep tens of KiB per thread (rule caches, memos).  As
 * `static __thread` data of a shared library that is global-dynamic TLS:
 * every function that touches it calls __tls_get_addr, several times a
 * capture (~20 ns a pair in a Python loop, BENCHMARKS.md).  Initial-exec
 * TLS is one %fs-relative load, but a dlopen'ed copy of the library must
 * take it from glibc's small static-TLS surplus, so only a pointer each is
 * initial-exec: it points at a block allocated on the thread's first use.
 *
 * At thread exit a key destructor frees the blocks and clears the pointers
 * first, so a hook that runs later in the exit (another key's destructor
 * freeing GPU memory) allocates a new block instead of using a freed one;
 * glibc runs destructors again for a key set during destruction (up to
 * PTHREAD_DESTRUCTOR_ITERATIONS times), so that one is freed as well.
 */
#include "tl_internal.h"

#include <stdlib.h>
#include <string.h>

struct block {
    struct block *next;
    void **slot; /* the owner's thread-local pointer to `data` */
    _Alignas(64) unsigned char data[];
};

static pthread_key_t key;
static bool have_key;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static __thread TL_TLS_IE struct block *blocks;

static void free_blocks(void *head)
{
    (void)head; /* the list is this thread's `blocks` */
    struct block *b = blocks;
    blocks = NULL;
    while (b) {
        struct block *next = b->next;
        *b->slot = NULL;
        free(b);
        b = next;
    }
}

static void make_key(void)
{
    have_key = pthread_key_create(&key, free_blocks) == 0;
}

void *tl_thread_block(void **slot, size_t size)
{
    pthread_once(&key_once, make_key);
    struct block *b = NULL;
    if (posix_memalign((void **)&b, 64, sizeof *b + size) != 0) {
        tl_note_dropped("out of memory for a thread's stack-walk state (its stacks are walked the slow way)");
        return NULL;
    }
    memset(b, 0, sizeof *b + size);
    b->slot = slot;
    b->next = blocks;
    blocks = b;
    /* Without the key the block lives as long as the process: a bounded
     * leak per thread, said nowhere worse than in this comment. */
    if (have_key)
        pthread_setspecific(key, b);
    *slot = b->data;
    return b->data;
}
