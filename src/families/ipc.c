/*
 * ipc.c — CUDA IPC as both sides of one shared allocation see it.
 *
 * The exporting process owns the memory: its row is an ordinary device
 * allocation, and it remembers here which allocations it exported and under
 * which handle.  The importing process holds an ipc_mapping row (hooks
 * count its bytes apart from its own memory, counts.h) and remembers here
 * which handle each mapping came from.  Both record the same identity, a
 * digest of the 64-byte handle the two processes passed between them, so
 * `tensorleak merge` can pair an importer's mapping with the exporter's
 * allocation and count the memory once, in the exporter.
 *
 * Not on any allocation's path: only the cuIpc* hooks and reports come here,
 * under one mutex.  The tables are small and grow by doubling; an entry that
 * cannot be stored is counted as a dropped event and the pairing of that
 * allocation is lost, nothing else.
 */
#include <stdlib.h>
#include <string.h>

#include "tl_internal.h"

struct export_entry {
    uint64_t digest, addr, bytes; /* bytes: the row's, UINT64_MAX unknown */
    uint32_t callsite;            /* the exported row's; 0: not tracked */
};

struct import_entry {
    uint64_t digest, addr;
};

static pthread_mutex_t ipc_lock = PTHREAD_MUTEX_INITIALIZER;
static struct export_entry *exports;
static size_t nexports, cap_exports;
static struct import_entry *imports;
static size_t nimports, cap_imports;

uint64_t tl_ipc_digest(const void *handle)
{
    /* FNV-1a over the handle's bytes: stable across processes and builds. */
    const unsigned char *p = handle;
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < 64; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h ? h : 1;
}

/* Room for one more entry of `size` bytes in *arr; false when out of memory. */
static bool reserve(void **arr, size_t n, size_t *cap, size_t size)
{
    if (n < *cap)
        return true;
    size_t want = *cap ? *cap * 2 : 16;
    void *grown = realloc(*arr, want * size);
    if (!grown)
        return false;
    *arr = grown;
    *cap = want;
    return true;
}

void tl_ipc_note_export(const void *handle, uint64_t addr)
{
    uint64_t digest = tl_ipc_digest(handle);
    struct tl_live rec;
    bool tracked = tl_live_lookup(TL_SPACE_MEM, addr, &rec);
    pthread_mutex_lock(&ipc_lock);
    size_t i = 0;
    while (i < nexports && !(exports[i].digest == digest && exports[i].addr == addr))
        i++;
    if (i == nexports) {
        /* An address exported before, freed and allocated again, is another
         * allocation under another handle: the old entry goes. */
        for (i = 0; i < nexports && exports[i].addr != addr; i++)
            ;
        if (i == nexports && !reserve((void **)&exports, nexports, &cap_exports, sizeof *exports)) {
            pthread_mutex_unlock(&ipc_lock);
            tl_note_dropped("out of memory for the IPC export table");
            return;
        }
        exports[i] = (struct export_entry){
            .digest = digest, .addr = addr, .bytes = tracked ? rec.size : UINT64_MAX,
            .callsite = tracked ? rec.callsite : 0,
        };
        if (i == nexports)
            nexports++;
    }
    pthread_mutex_unlock(&ipc_lock);
}

void tl_ipc_note_import(const void *handle, uint64_t addr)
{
    uint64_t digest = tl_ipc_digest(handle);
    pthread_mutex_lock(&ipc_lock);
    size_t i = 0;
    while (i < nimports && imports[i].addr != addr)
        i++;
    if (i == nimports && !reserve((void **)&imports, nimports, &cap_imports, sizeof *imports)) {
        pthread_mutex_unlock(&ipc_lock);
        tl_note_dropped("out of memory for the IPC import table");
        return;
    }
    imports[i] = (struct import_entry){.digest = digest, .addr = addr};
    if (i == nimports)
        nimports++;
    pthread_mutex_unlock(&ipc_lock);
}

void tl_ipc_note_closed(uint64_t addr)
{
    pthread_mutex_lock(&ipc_lock);
    for (size_t i = 0; i < nimports; i++)
        if (imports[i].addr == addr) {
            imports[i] = imports[--nimports];
            break;
        }
    pthread_mutex_unlock(&ipc_lock);
}

uint64_t tl_ipc_import_digest(uint64_t addr)
{
    uint64_t digest = 0;
    pthread_mutex_lock(&ipc_lock);
    for (size_t i = 0; i < nimports && !digest; i++)
        if (imports[i].addr == addr)
            digest = imports[i].digest;
    pthread_mutex_unlock(&ipc_lock);
    return digest;
}

size_t tl_ipc_exports(struct tl_ipc_export *out, size_t max)
{
    /* Copied out first: ours and the live table's locks are never held
     * together (tl_ipc_note_export, reports). */
    pthread_mutex_lock(&ipc_lock);
    size_t n = 0;
    for (size_t i = 0; i < nexports && n < max; i++)
        out[n++] = (struct tl_ipc_export){.digest = exports[i].digest, .addr = exports[i].addr,
                                          .bytes = exports[i].bytes, .callsite = exports[i].callsite};
    pthread_mutex_unlock(&ipc_lock);
    /* Still exported only while the same row lives at the address (no free
     * hook looks here: frees stay as cheap as they were). */
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) {
        struct tl_live rec;
        if (out[i].callsite && !(tl_live_lookup(TL_SPACE_MEM, out[i].addr, &rec) && rec.callsite == out[i].callsite &&
                                 rec.size == out[i].bytes))
            continue;
        out[kept++] = out[i];
    }
    return kept;
}

void tl_ipc_after_fork(void)
{
    /* The parent's exports and mappings are not the child's.  The tables
     * are dropped, not reused: a fork while another thread was growing one
     * leaves the child the pointer realloc already freed, and writing
     * there would corrupt the child's heap.  The child leaks at most the
     * two blocks it inherited. */
    pthread_mutex_init(&ipc_lock, NULL);
    exports = NULL;
    imports = NULL;
    nexports = cap_exports = 0;
    nimports = cap_imports = 0;
}
