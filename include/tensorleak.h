/*
 * tensorleak.h — client requests for programs running under tensorleak.
 *
 * For runtimes with their own caching allocator, in the way of Valgrind's
 * mempool client requests: declare a pool, the segments it reserved from the
 * driver, and the blocks it hands out.  tensorleak then reports segments
 * still held at exit as the pool's reserve (not leaks), blocks still handed
 * out as leaks at the block's allocation site, and the pool's fragmentation.
 * Marks delimit requests for growth detection; snapshots write a report now.
 *
 * Header-only and link-free: each call resolves the function of the same
 * name that libtensorleak.so exports, once, with dlsym(RTLD_DEFAULT, ...), and
 * is a cheap no-op when the program is not running under tensorleak.  From
 * other languages call those exports directly (Python:
 * ctypes.CDLL(None).tensorleak_mark(b"request")).  Thread-safe.  Link with
 * -ldl on glibc < 2.34.
 */
#ifndef TENSORLEAK_H
#define TENSORLEAK_H

#include <stddef.h>

#ifndef _GNU_SOURCE
#define TENSORLEAK_UNDEF_GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#ifdef TENSORLEAK_UNDEF_GNU_SOURCE
#undef _GNU_SOURCE
#undef TENSORLEAK_UNDEF_GNU_SOURCE
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tensorleak_pool tensorleak_pool;

/* Resolves `name` once per call site; a null pointer when tensorleak is absent.
 * The sentinel (void *)1 means "looked up, not there". */
#define TENSORLEAK__RESOLVE(type, name)                                              \
    static void *tensorleak__fn;                                                      \
    void *tensorleak__p = __atomic_load_n(&tensorleak__fn, __ATOMIC_ACQUIRE);         \
    if (!tensorleak__p) {                                                             \
        tensorleak__p = dlsym(RTLD_DEFAULT, "tensorleak_" name);                     \
        if (!tensorleak__p)                                                           \
            tensorleak__p = (void *)1;                                                \
        __atomic_store_n(&tensorleak__fn, tensorleak__p, __ATOMIC_RELEASE);           \
    }                                                                                 \
    __typeof__(type) tensorleak__call = tensorleak__p == (void *)1 ? (type)0 : (type)tensorleak__p

/* Declares a pool on `device`; NULL when not running under tensorleak (the
 * other pool calls accept NULL). `name` is copied. */
static inline tensorleak_pool *tensorleak_pool_create(const char *name, int device)
{
    TENSORLEAK__RESOLVE(tensorleak_pool *(*)(const char *, int), "pool_create");
    return tensorleak__call ? tensorleak__call(name, device) : (tensorleak_pool *)0;
}

/* The pool reserved [base, base+bytes) from the driver. */
static inline void tensorleak_pool_segment(tensorleak_pool *pool, const void *base, size_t bytes)
{
    TENSORLEAK__RESOLVE(void (*)(tensorleak_pool *, const void *, size_t), "pool_segment");
    if (tensorleak__call && pool)
        tensorleak__call(pool, base, bytes);
}

/* The pool gave the segment at `base` back (before it calls cudaFree). */
static inline void tensorleak_pool_segment_release(tensorleak_pool *pool, const void *base)
{
    TENSORLEAK__RESOLVE(void (*)(tensorleak_pool *, const void *), "pool_segment_release");
    if (tensorleak__call && pool)
        tensorleak__call(pool, base);
}

/* The pool handed out [ptr, ptr+bytes) from one of its segments. */
static inline void tensorleak_pool_alloc(tensorleak_pool *pool, const void *ptr, size_t bytes)
{
    TENSORLEAK__RESOLVE(void (*)(tensorleak_pool *, const void *, size_t), "pool_alloc");
    if (tensorleak__call && pool)
        tensorleak__call(pool, ptr, bytes);
}

/* The block at `ptr` came back to the pool. */
static inline void tensorleak_pool_free(tensorleak_pool *pool, const void *ptr)
{
    TENSORLEAK__RESOLVE(void (*)(tensorleak_pool *, const void *), "pool_free");
    if (tensorleak__call && pool)
        tensorleak__call(pool, ptr);
}

/* The pool is gone; its segments are no longer held by it. */
static inline void tensorleak_pool_destroy(tensorleak_pool *pool)
{
    TENSORLEAK__RESOLVE(void (*)(tensorleak_pool *), "pool_destroy");
    if (tensorleak__call && pool)
        tensorleak__call(pool);
}

/* Ends an epoch (e.g. one request served): growth detection compares the
 * live bytes of every call site from mark to mark. */
static inline void tensorleak_mark(const char *label)
{
    TENSORLEAK__RESOLVE(void (*)(const char *), "mark");
    if (tensorleak__call)
        tensorleak__call(label);
}

/* Writes a report now (reason "api").  0 on success, -1 on failure or when
 * not running under tensorleak. */
static inline int tensorleak_snapshot(const char *label)
{
    TENSORLEAK__RESOLVE(int (*)(const char *), "snapshot");
    return tensorleak__call ? tensorleak__call(label) : -1;
}

/* Writes a report (reason "api") to exactly `path`, replacing a file of that
 * name: for tools that name each report themselves (a test runner keeping
 * one report per test).  0 on success, -1 on failure or when not running
 * under tensorleak. */
static inline int tensorleak_snapshot_to(const char *label, const char *path)
{
    TENSORLEAK__RESOLVE(int (*)(const char *, const char *), "snapshot_to");
    return tensorleak__call ? tensorleak__call(label, path) : -1;
}

#undef TENSORLEAK__RESOLVE

#ifdef __cplusplus
}
#endif
#endif /* TENSORLEAK_H */
