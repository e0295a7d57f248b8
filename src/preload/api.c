/*
 * api.c — the calls of the client API (include/tensorleak.h) that may be a
 * process's first contact with tensorleak: each starts the library
 * (tl_init, once; a program may call them before any CUDA call, or from a
 * constructor that runs before ours) and then hands over to the layer that
 * does the work.  Starting is the preload layer's business, so the layers
 * below never call up into it.  The other tensorleak_* calls work on what a
 * started library handed out (a pool, the Python bridge) and stay with
 * their layer.
 */
#include "pools.h"

TL_EXPORT long tensorleak_site_bytes(uint64_t *rows, long max_rows);
long tensorleak_site_bytes(uint64_t *rows, long max_rows)
{
    tl_init();
    return tl_site_bytes(rows, max_rows);
}

TL_EXPORT void tensorleak_mark(const char *label);
void tensorleak_mark(const char *label)
{
    tl_init();
    tl_mark(label);
}

TL_EXPORT int tensorleak_snapshot(const char *label);
int tensorleak_snapshot(const char *label)
{
    tl_init();
    if (!atomic_load(&tl_active))
        return -1;
    return tl_report_write(TL_REASON_API, label, NULL, NULL);
}

TL_EXPORT int tensorleak_snapshot_to(const char *label, const char *path);
int tensorleak_snapshot_to(const char *label, const char *path)
{
    tl_init();
    if (!atomic_load(&tl_active) || !path || !*path)
        return -1;
    return tl_report_write_to(label, path);
}

TL_EXPORT void *tensorleak_pool_create(const char *name, int device);
void *tensorleak_pool_create(const char *name, int device)
{
    tl_init();
    return tl_pool_create(name, device);
}
