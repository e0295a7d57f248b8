/*
 * assemble.c — gathers one consistent report and writes it.
 *
 * Consistency: every shard of the live table is locked while the rows are
 * aggregated by call site, so a snapshot taken while other threads allocate
 * is a state the program really was in.  Symbolization and output happen
 * after the locks are released.
 *
 * The file itself is report_file.c's.  When it cannot be written the JSON
 * goes to stderr instead, after one clear error line.
 *
 * Before anything is written the figures are checked against the report's
 * invariants (tl_report_check_invariants); what cannot be known (the free
 * space of a pool without a layout) is marked unknown, never zero.
 */
#include "report_gather.h"
#include "model.h"
#include "report_fields.h"
#include "counts.h"
#include "tl_version.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

pthread_mutex_t tl_report_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned report_seq;

/* ---- gathering ---------------------------------------------------------- */
struct gather {
    struct tl_gather *m;
    long long *bytes; /* by call-site id */
    long long *count;
    long long *held_bytes;
    long long *held_count;
    long long *unknown_size; /* by call-site id: its live rows of unknown size (not held) */
    size_t n;
    /* The second pass: the allocations each site lists.  Slot 2 id holds
     * the leaks' next free index into `allocations`, 2 id + 1 the held
     * rows'; `end` the index past each one's last place. */
    size_t *next, *end;
    struct tl_site_allocation *allocations;
    long long live_bytes, live_count, unknown_size_count;
    long long address_space_bytes, address_space_count; /* VA reservations apart */
    struct tl_ipc_mapping_row *ipc; /* IPC mappings, apart too */
    size_t nipc, cap_ipc;
    /* The same rows by (call site, device, held): open addressing, at most
     * half full, a slot empty while its count is 0.  Most sites live on one
     * device, so it holds about as many entries as there are live sites. */
    struct tl_site_device *by_device;
    size_t by_device_cap, by_device_n;
    bool by_device_failed; /* out of memory: the report is not written */
};

/* Keeps a shared handle's row for the report (dropped when out of memory:
 * the site's bytes stay right, its identity list misses it). */
static void gather_share(struct tl_gather *m, const struct tl_live *rec, const struct tl_vmm_share *sh)
{
    if (m->nshares == m->shares_cap) {
        size_t ncap = m->shares_cap ? 2 * m->shares_cap : 8;
        struct tl_share_row *grown = realloc(m->shares, ncap * sizeof *grown);
        if (!grown)
            return;
        m->shares = grown;
        m->shares_cap = ncap;
    }
    m->shares[m->nshares++] = (struct tl_share_row){.site = rec->callsite, .imported = sh->imported, .known = sh->known,
                                                    .file_dev = sh->file_dev, .file_ino = sh->file_ino, .bytes = rec->size};
}

/* One IPC mapping kept for the report; its digest is looked up after the
 * walk (ipc.c's lock is never taken inside the live table's). */
static void gather_ipc_row(struct gather *g, const struct tl_live *rec)
{
    if (g->nipc == g->cap_ipc) {
        size_t want = g->cap_ipc ? g->cap_ipc * 2 : 16;
        struct tl_ipc_mapping_row *grown = realloc(g->ipc, want * sizeof *grown);
        if (!grown)
            return; /* the summary still counts it; only its row is missing */
        g->ipc = grown;
        g->cap_ipc = want;
    }
    g->ipc[g->nipc++] = (struct tl_ipc_mapping_row){
        .addr = rec->addr, .bytes = rec->size, .refs = rec->aux, .callsite = rec->callsite, .device = rec->device};
}

/* The device a row's memory is on, or -1 for host memory (pinned and
 * registered host memory carry the device that was current, or none). */
static int row_device(const struct tl_live *rec)
{
    if (tl_holds_host_memory(rec->kind) || rec->device >= TL_MAX_DEVICES)
        return -1;
    return rec->device;
}

static size_t site_device_slot(const struct tl_site_device *t, size_t cap, uint32_t site, int device, bool held)
{
    size_t h = ((size_t)site * 0x9e3779b1u) ^ ((size_t)(device + 1) << 1) ^ (size_t)held;
    for (size_t i = h & (cap - 1);; i = (i + 1) & (cap - 1))
        if (!t[i].count || (t[i].site == site && t[i].device == device && t[i].held == held))
            return i;
}

static bool site_devices_grow(struct gather *g)
{
    size_t cap = g->by_device_cap ? g->by_device_cap * 2 : 256;
    struct tl_site_device *t = calloc(cap, sizeof *t);
    if (!t)
        return false;
    for (size_t i = 0; i < g->by_device_cap; i++) {
        const struct tl_site_device *e = &g->by_device[i];
        if (e->count)
            t[site_device_slot(t, cap, e->site, e->device, e->held)] = *e;
    }
    free(g->by_device);
    g->by_device = t;
    g->by_device_cap = cap;
    return true;
}

static void site_device_add(struct gather *g, const struct tl_live *rec, bool held)
{
    if (g->by_device_failed)
        return;
    if (2 * (g->by_device_n + 1) > g->by_device_cap && !site_devices_grow(g)) {
        g->by_device_failed = true;
        return;
    }
    int device = row_device(rec);
    struct tl_site_device *e = &g->by_device[site_device_slot(g->by_device, g->by_device_cap, rec->callsite, device, held)];
    if (!e->count) {
        *e = (struct tl_site_device){.site = rec->callsite, .device = device, .held = held};
        g->by_device_n++;
    }
    e->bytes += (long long)rec->size;
    e->count++;
}

static bool gather_row(const struct tl_live *rec, void *arg)
{
    struct gather *g = arg;
    bool held = tl_pools_is_held(rec);
    if (!tl_is_address_space(rec->kind) && rec->kind != TL_KIND_POOL_BLOCK) {
        g->live_bytes += (long long)rec->size;
        g->live_count++;
    }
    bool unknown = rec->kind == TL_KIND_ARRAY && (rec->aux & TL_ARRAY_SIZE_UNKNOWN);
    g->unknown_size_count += unknown;
    if (rec->kind == TL_KIND_IPC_MAPPING)
        gather_ipc_row(g, rec);
    if (rec->kind == TL_KIND_VMM_RESERVATION) { /* address space, shown apart */
        g->address_space_bytes += (long long)rec->size;
        g->address_space_count++;
    }
    if (rec->kind == TL_KIND_VMM_IMPORTED) {
        g->m->imported_bytes += (long long)rec->size;
        g->m->imported_count++;
    }
    struct tl_vmm_share sh;
    if (rec->space == TL_SPACE_VMM_HANDLE && tl_vmm_share_lookup(rec->addr, &sh))
        gather_share(g->m, rec, &sh);
    if (rec->callsite < g->n) {
        site_device_add(g, rec, held);
        if (held) {
            g->held_bytes[rec->callsite] += (long long)rec->size;
            g->held_count[rec->callsite]++;
        } else {
            g->bytes[rec->callsite] += (long long)rec->size;
            g->count[rec->callsite]++;
            g->unknown_size[rec->callsite] += unknown;
        }
    }
    return false;
}

/* Rows keyed by a handle (VMM handles, CUDA arrays) have no address. */
static bool space_has_addresses(uint8_t space)
{
    return space != TL_SPACE_VMM_HANDLE && space != TL_SPACE_ARRAY;
}

static bool list_row(const struct tl_live *rec, void *arg)
{
    struct gather *g = arg;
    if (rec->callsite >= g->n)
        return false;
    size_t slot = 2 * (size_t)rec->callsite + tl_pools_is_held(rec);
    if (g->next[slot] < g->end[slot])
        g->allocations[g->next[slot]++] = (struct tl_site_allocation){
            .address = space_has_addresses(rec->space) ? rec->addr : 0, .bytes = rec->size,
            .device = row_device(rec) < 0 ? TL_NO_DEVICE : rec->device,
            .size_unknown = rec->kind == TL_KIND_ARRAY && (rec->aux & TL_ARRAY_SIZE_UNKNOWN)};
    return false;
}

/* Places each site's allocations (up to tl_opt.addresses a site) in one
 * block; the caller holds every shard lock, as for gather_row.  False when
 * memory ran out (then no site lists any). */
static bool list_allocations(struct gather *g)
{
    size_t cap = (size_t)tl_opt.addresses, total = 0;
    g->next = calloc(2 * g->n, sizeof *g->next);
    g->end = calloc(2 * g->n, sizeof *g->end);
    if (!g->next || !g->end)
        return false;
    for (size_t id = 0; id < g->n; id++) {
        long long counts[2] = {g->count[id], g->held_count[id]};
        for (int h = 0; h < 2; h++) {
            size_t listed = counts[h] < 0 ? 0 : (size_t)counts[h] < cap ? (size_t)counts[h] : cap;
            g->next[2 * id + h] = total;
            total += listed;
            g->end[2 * id + h] = total;
        }
    }
    g->allocations = total ? malloc(total * sizeof *g->allocations) : NULL;
    if (total && !g->allocations)
        return false;
    if (total)
        tl_live_foreach(list_row, g);
    return true;
}

static int by_address(const void *a, const void *b)
{
    const struct tl_site_allocation *x = a, *y = b;
    return x->address < y->address ? -1 : x->address > y->address;
}

/* Points a site at its listed allocations, lowest address first. */
static void attach_allocations(struct tl_site *s, const struct gather *g, size_t slot)
{
    if (!g->allocations)
        return;
    size_t start = slot ? g->end[slot - 1] : 0;
    s->allocations = g->allocations + start;
    s->nallocations = g->next[slot] - start;
    qsort(s->allocations, s->nallocations, sizeof *s->allocations, by_address);
}

static int by_bytes_desc(const void *a, const void *b)
{
    const struct tl_site *x = a, *y = b;
    /* Memory first; address space (reservations, mappings, other
     * processes' memory) after it, however large its ranges. */
    bool xa = tl_is_address_space(x->cs->kind);
    bool ya = tl_is_address_space(y->cs->kind);
    if (xa != ya)
        return xa ? 1 : -1;
    if (x->bytes != y->bytes)
        return x->bytes < y->bytes ? 1 : -1;
    if (x->count != y->count)
        return x->count < y->count ? 1 : -1;
    return x->cs->id < y->cs->id ? -1 : x->cs->id > y->cs->id;
}

/* Frees what gather() keeps only while it runs (the per-site allocations
 * and the per-device table move into the model). */
static void gather_free(struct gather *g)
{
    free(g->bytes); free(g->count); free(g->held_bytes); free(g->held_count); free(g->unknown_size);
    free(g->next); free(g->end);
}

static bool gather(struct tl_gather *m)
{
    struct gather g = {.m = m};
    tl_live_lock_all();
    g.n = tl_callsite_count() + 2;
    g.bytes = calloc(g.n, sizeof *g.bytes);
    g.count = calloc(g.n, sizeof *g.count);
    g.held_bytes = calloc(g.n, sizeof *g.held_bytes);
    g.held_count = calloc(g.n, sizeof *g.held_count);
    g.unknown_size = calloc(g.n, sizeof *g.unknown_size);
    if (!g.bytes || !g.count || !g.held_bytes || !g.held_count || !g.unknown_size) {
        tl_live_unlock_all();
        gather_free(&g);
        return false;
    }
    tl_live_foreach(gather_row, &g);
    if (m->with_allocations && !list_allocations(&g)) {
        free(g.allocations);
        g.allocations = NULL;
    }
    tl_pools_collect(m); /* under the same locks: one consistent state */
    tl_live_unlock_all();
    m->ipc_mapped = g.ipc;
    m->ipc_mapped_count = (long long)g.nipc;
    for (size_t i = 0; i < g.nipc; i++) {
        m->ipc_mapped[i].digest = tl_ipc_import_digest(g.ipc[i].addr);
        m->ipc_mapped_bytes += (long long)g.ipc[i].bytes;
    }
    m->ipc_exported = calloc(TL_MAX_IPC_EXPORTS, sizeof *m->ipc_exported);
    if (m->ipc_exported)
        m->nipc_exported = tl_ipc_exports(m->ipc_exported, TL_MAX_IPC_EXPORTS);
    if (g.by_device_failed) {
        gather_free(&g);
        free(g.by_device);
        free(g.allocations);
        return false;
    }
    /* Packed in place: the owners' per-device figures need only the entries. */
    for (size_t i = 0; i < g.by_device_cap; i++)
        if (g.by_device[i].count)
            g.by_device[m->nsite_devices++] = g.by_device[i];
    m->site_devices = g.by_device;

    m->live_bytes = g.live_bytes;
    m->live_count = g.live_count;
    m->address_space_bytes = g.address_space_bytes;
    m->address_space_count = g.address_space_count;
    m->unknown_size_count = g.unknown_size_count;
    m->peak_live_bytes = atomic_load(&tl_stats.peak_live_bytes);
    m->site_allocations = g.allocations;
    size_t nsites = 0, nheld = 0;
    for (size_t id = 1; id < g.n; id++) {
        nsites += g.count[id] > 0;
        nheld += g.held_count[id] > 0;
    }
    m->sites = calloc(nsites + 1, sizeof *m->sites);
    m->held = calloc(nheld + 1, sizeof *m->held);
    bool ok = m->sites && m->held;
    for (size_t id = 1; ok && id < g.n; id++) {
        struct tl_callsite *cs = tl_callsite_by_id((uint32_t)id);
        if (!cs)
            continue;
        if (g.count[id] > 0) {
            struct tl_site *s = &m->sites[m->nsites++];
            *s = (struct tl_site){.cs = cs, .bytes = g.bytes[id], .count = g.count[id],
                                  .unknown_size_count = g.unknown_size[id]};
            attach_allocations(s, &g, 2 * id);
        }
        if (g.held_count[id] > 0) {
            struct tl_site *s = &m->held[m->nheld++];
            *s = (struct tl_site){.cs = cs, .bytes = g.held_bytes[id], .count = g.held_count[id]};
            attach_allocations(s, &g, 2 * id + 1);
            m->held_bytes += g.held_bytes[id];
        }
    }
    gather_free(&g);
    if (!ok)
        return false;
    qsort(m->sites, m->nsites, sizeof *m->sites, by_bytes_desc);
    qsort(m->held, m->nheld, sizeof *m->held, by_bytes_desc);
    return true;
}

/* The last answer cuMemGetInfo gave per device: at exit the driver may no
 * longer answer, and the device's size still bounds every figure on it. */
static struct {
    bool ok;
    uint64_t total;
    double time;
    char uuid[48]; /* a device's UUID never changes: asked once */
} last_info[TL_MAX_DEVICES];

/* The device's UUID in nvidia-smi's form, once per device ("" when the
 * driver has no cuDeviceGetUuid or says no). */
static void device_uuid(int dev)
{
    if (last_info[dev].uuid[0])
        return;
    typedef int (*deviceget_fn)(int *, int);
    typedef int (*uuid_fn)(unsigned char *, int);
    deviceget_fn deviceget = (deviceget_fn)tl_driver_symbol("cuDeviceGet");
    uuid_fn uuid = (uuid_fn)tl_driver_symbol("cuDeviceGetUuid_v2");
    if (!uuid)
        uuid = (uuid_fn)tl_driver_symbol("cuDeviceGetUuid");
    int handle;
    unsigned char b[16];
    if (!deviceget || !uuid || deviceget(&handle, dev) != 0 || uuid(b, handle) != 0)
        return;
    snprintf(last_info[dev].uuid, sizeof last_info[dev].uuid,
             "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2], b[3], b[4],
             b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

/* Driver view per device: each known context's device, and the caller's
 * (tl_context_memory makes each current for its reading and puts the
 * caller's back). */
static void device_info(struct tl_gather *m)
{
    typedef int (*getcur_fn)(void **);
    getcur_fn getcur = (getcur_fn)tl_driver_symbol("cuCtxGetCurrent");
    void *saved = NULL;
    if (!getcur || getcur(&saved) != 0)
        return;
    void *ctxs[TL_MAX_CONTEXTS + 1];
    int n = tl_known_contexts(ctxs, TL_MAX_CONTEXTS);
    if (saved)
        ctxs[n++] = saved;
    for (int i = n; i-- > 0;) {
        int dev = -1;
        uint64_t free_b = 0, total_b = 0;
        if (tl_context_memory(ctxs[i], &dev, &free_b, &total_b) && dev >= 0 && dev < TL_MAX_DEVICES) {
            m->devices[dev].present = true;
            m->devices[dev].have_info = true;
            m->devices[dev].free = free_b;
            m->devices[dev].total = total_b;
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            last_info[dev].ok = true;
            last_info[dev].total = total_b;
            last_info[dev].time = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
            device_uuid(dev);
        }
    }
}

/* Devices the driver did not answer for now: their total from its last
 * answer (free changes; it stays unknown). */
static void device_info_last_good(struct tl_gather *m)
{
    for (int d = 0; d < TL_MAX_DEVICES; d++) {
        struct tl_device_row *r = &m->devices[d];
        if (r->present)
            memcpy(r->uuid, last_info[d].uuid, sizeof r->uuid);
        if (r->present && !r->have_info && last_info[d].ok) {
            r->total_last_good = true;
            r->total = last_info[d].total;
            r->total_time = last_info[d].time;
        }
    }
}

void tl_report_read_devices_now(void)
{
    pthread_mutex_lock(&tl_report_lock);
    struct tl_gather *m = calloc(1, sizeof *m);
    if (m)
        device_info(m);
    free(m);
    pthread_mutex_unlock(&tl_report_lock);
}

/* ---- figures: unknown is not zero, impossible is never printed ---------- */

/* Memory a cache holds without telling us its layout (owner rules, not an
 * annotated pool) has free space inside it that we cannot see: the largest
 * free block and fragmentation of its device are unknown.  `nheld_pools`:
 * the held sites before owners.c appended its own (annotated segments). */
static void mark_unseen_caches(struct tl_gather *m, size_t nheld_pools)
{
    bool cache = false;
    for (size_t i = nheld_pools; i < m->nheld && !cache; i++)
        cache = m->held[i].owner_class && !strcmp(m->held[i].owner_class, "cache");
    if (!cache)
        return;
    /* A site carries no device: every device with memory outside the
     * pools we see may hold it. */
    uint64_t pooled[TL_MAX_DEVICES] = {0};
    for (size_t i = 0; i < m->npools; i++)
        if (m->pools[i].device >= 0 && m->pools[i].device < TL_MAX_DEVICES)
            pooled[m->pools[i].device] += m->pools[i].reserved;
    for (int d = 0; d < TL_MAX_DEVICES; d++) {
        struct tl_device_row *r = &m->devices[d];
        if (r->present && r->reserved > pooled[d]) {
            r->layout_unknown = true;
            m->layout_unknown = true;
        }
    }
}

static void note_repair(struct tl_gather *m, const char *invariant, const char *where, const char *figure,
                        long long was, long long now)
{
    m->repairs_total++;
    if (m->nrepairs == sizeof m->repairs / sizeof m->repairs[0])
        return;
    struct tl_repair *r = &m->repairs[m->nrepairs++];
    r->invariant = invariant;
    snprintf(r->where, sizeof r->where, "%s", where);
    r->figure = figure;
    r->was = was;
    r->now = now;
}

static void fix_at_most(struct tl_gather *m, uint64_t *fig, uint64_t limit, const char *invariant, const char *where,
                        const char *figure)
{
    if (*fig <= limit)
        return;
    /* A figure past 2^63 is a negative number that wrapped: shown as such. */
    note_repair(m, invariant, where, figure, (long long)*fig, (long long)limit);
    *fig = limit;
}

static void fix_fraction(struct tl_gather *m, double *f, bool unknown, const char *where)
{
    if (unknown || (*f >= 0.0 && *f <= 1.0))
        return;
    double now = *f > 1.0 ? 1.0 : 0.0; /* NaN and negatives become 0 */
    /* Recorded in thousandths, saturated: a framework's number may be any
     * double, and converting one out of range to an integer is undefined. */
    double was = *f * 1000.0;
    long long was_k = was != was ? 0 : was >= 0x1p63 ? LLONG_MAX : was <= -0x1p63 ? LLONG_MIN : (long long)was;
    note_repair(m, "0 <= fragmentation <= 1", where, "fragmentation", was_k, (long long)(now * 1000.0));
    *f = now;
}

/* One device's memory bounds every figure on it (when the driver said). */
static uint64_t device_limit(const struct tl_gather *m, int d)
{
    if (d < 0 || d >= TL_MAX_DEVICES || !(m->devices[d].have_info || m->devices[d].total_last_good) ||
        m->devices[d].total == 0)
        return UINT64_MAX >> 1;
    return m->devices[d].total;
}

/* The report's invariants (SPEC "Figures: unknown is not zero"): gap >= 0,
 * allocated <= reserved per pool and device, largest free block <= free,
 * 0 <= fragmentation <= 1, no figure above the device's memory, no byte
 * figure negative.  A figure that breaks one is repaired here, before
 * anything is written, and each repair is listed in the report. */
void tl_report_check_invariants(struct tl_gather *m)
{
    char where[80];
    /* The summary's bound: all devices' memory, when every device said. */
    uint64_t all_total = 0;
    for (int d = 0; d < TL_MAX_DEVICES; d++)
        if (m->devices[d].present)
            all_total = all_total == UINT64_MAX || device_limit(m, d) == UINT64_MAX >> 1 ? UINT64_MAX
                                                                                        : all_total + device_limit(m, d);
    for (size_t i = 0; i < m->npools; i++) {
        struct tl_pool_row *p = &m->pools[i];
        uint64_t limit = device_limit(m, p->device);
        const char *bound = limit == UINT64_MAX >> 1 ? "bytes >= 0" : "figure <= device memory";
        snprintf(where, sizeof where, "pool '%s'", p->name);
        fix_at_most(m, &p->reserved, limit, bound, where, "reserved_bytes");
        fix_at_most(m, &p->allocated, limit, bound, where, "allocated_bytes");
        if (p->allocated > p->reserved) {
            /* What the program holds is real; a reserve below it is a stale
             * or missing driver reading. */
            note_repair(m, "allocated <= reserved", where, "reserved_bytes", (long long)p->reserved, (long long)p->allocated);
            p->reserved = p->allocated;
        }
        fix_at_most(m, &p->free, p->reserved - p->allocated, "free <= reserved - allocated", where, "free_bytes");
        if (!p->layout_unknown)
            fix_at_most(m, &p->largest_free, p->free, "largest free block <= free", where, "largest_free_block");
        fix_fraction(m, &p->fragmentation, p->layout_unknown, where);
    }
    for (int d = 0; d < TL_MAX_DEVICES; d++) {
        struct tl_device_row *r = &m->devices[d];
        if (!r->present)
            continue;
        uint64_t limit = device_limit(m, d);
        const char *bound = limit == UINT64_MAX >> 1 ? "bytes >= 0" : "figure <= device memory";
        snprintf(where, sizeof where, "device %d", d);
        fix_at_most(m, &r->reserved, limit, bound, where, "reserved_bytes");
        fix_at_most(m, &r->allocated, limit, bound, where, "allocated_bytes");
        if (r->allocated > r->reserved) {
            note_repair(m, "allocated <= reserved", where, "reserved_bytes", (long long)r->reserved, (long long)r->allocated);
            r->reserved = r->allocated;
        }
        if (!r->layout_unknown)
            fix_at_most(m, &r->largest_free, r->reserved - r->allocated, "largest free block <= free", where,
                        "largest_free_block");
        fix_fraction(m, &r->fragmentation, r->layout_unknown, where);
    }
    if (all_total && all_total != UINT64_MAX) {
        fix_at_most(m, &m->reserved, all_total, "figure <= device memory", "summary", "reserved_bytes");
        fix_at_most(m, &m->allocated, all_total, "figure <= device memory", "summary", "allocated_bytes");
    } else {
        fix_at_most(m, &m->reserved, UINT64_MAX >> 1, "bytes >= 0", "summary", "reserved_bytes");
        fix_at_most(m, &m->allocated, UINT64_MAX >> 1, "bytes >= 0", "summary", "allocated_bytes");
    }
    if (m->allocated > m->reserved) {
        note_repair(m, "allocated <= reserved", "summary", "reserved_bytes", (long long)m->reserved, (long long)m->allocated);
        m->reserved = m->allocated;
    }
    if (!m->layout_unknown)
        fix_at_most(m, &m->largest_free, m->reserved - m->allocated, "largest free block <= free", "summary",
                    "largest_free_block");
    fix_fraction(m, &m->fragmentation, m->layout_unknown, "summary");
    static const char *const byte_names[] = {"live_bytes", "peak_live_bytes", "leaked_bytes", "suppressed_bytes", "held_bytes"};
    long long *const bytes[] = {&m->live_bytes, &m->peak_live_bytes, &m->leaked_bytes, &m->suppressed_bytes, &m->held_bytes};
    for (size_t i = 0; i < sizeof bytes / sizeof bytes[0]; i++)
        if (*bytes[i] < 0) {
            note_repair(m, "bytes >= 0", "summary", byte_names[i], *bytes[i], 0);
            *bytes[i] = 0;
        }
    if (m->repairs_total && !m->silent) {
        const struct tl_repair *r = &m->repairs[0];
        tl_warn(NULL, "%zu impossible figure(s) in this report repaired (first: %s at %s, %s %lld -> %lld); listed under "
                      "\"repairs\" in the report",
                m->repairs_total, r->invariant, r->where, r->figure, r->was, r->now);
    }
}

static void apply_suppressions(struct tl_gather *m)
{
    for (size_t i = 0; i < m->nsites; i++) {
        struct tl_site *s = &m->sites[i];
        s->rule = tl_suppressed(m, "leak", s->cs);
        s->suppressed = s->rule != NULL;
    }
}

static void decide_gate(struct tl_gather *m)
{
    unsigned failed = 0;
    if (m->reason == TL_REASON_EXIT) {
        if (m->leaked_count > 0)
            failed |= TL_FAIL_LEAK;
        for (size_t i = 0; i < m->ngrowth; i++)
            if (!m->growth[i].suppressed)
                failed |= TL_FAIL_GROWTH;
        if (m->ninvalid > m->ninvalid_suppressed || atomic_load(&tl_stats.invalid_frees) > TL_MAX_INVALID)
            failed |= TL_FAIL_INVALID_FREE;
        if (atomic_load(&tl_stats.oom_failures) > 0)
            failed |= TL_FAIL_OOM;
    }
    m->gate_failed = failed & tl_opt.fail_on;
}

static void free_model(struct tl_gather *m)
{
    free(m->sites);
    free(m->held);
    free(m->site_allocations);
    free(m->owners);
    free(m->site_devices);
    free(m->owner_devices);
    for (size_t i = 0; m->pools && i < m->npools; i++) {
        for (size_t k = 0; k < m->pools[i].nlayout; k++)
            free(m->pools[i].layout[k].blocks);
        free(m->pools[i].layout);
        json_decref(m->pools[i].oom_extra);
    }
    json_decref(m->oom_analysis);
    if (m->bridge_memory)
        report_free(m->bridge_memory); /* its arena and the JSON its strings point into */
    free(m->bridge_memory);
    free(m->pools);
    for (size_t i = 0; m->growth && i < m->ngrowth; i++)
        json_decref(m->growth[i].extra);
    json_decref(m->bridge);
    free(m->growth);
    free(m->marks);
    free(m->invalid);
    free(m->invalid_suppressed);
    free(m->shares);
    free(m->ipc_mapped);
    free(m->ipc_exported);
    tl_symbolizer_close(m->symbolizer);
    tl_report_frames_clear();
}

static __thread bool writing_here;

/* For the fatal-signal path: false when this thread is inside a report (the
 * signal interrupted it, locks held) or another report does not finish
 * within two seconds. */
bool tl_report_lock_for_fatal(void)
{
    if (writing_here)
        return false;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 2;
    if (pthread_mutex_timedlock(&tl_report_lock, &until) != 0)
        return false;
    pthread_mutex_unlock(&tl_report_lock);
    return true;
}

static const char *reason_words(enum tl_reason reason)
{
    switch (reason) {
    case TL_REASON_SIGNAL: return "snapshot on signal";
    case TL_REASON_API: return "snapshot";
    case TL_REASON_INTERVAL: return "interval snapshot";
    case TL_REASON_BUDGET: return "budget report";
    case TL_REASON_DETACH: return "final report (detach)";
    case TL_REASON_OOM: return "out-of-memory report";
    case TL_REASON_EXIT: break;
    }
    return "report";
}

/* One line on stderr for a report other than the exit report: what it is
 * and the file it went to. */
static void print_snapshot_line(const struct tl_gather *m, const char *shown)
{
    char live[32];
    tl_format_size((uint64_t)(m->live_bytes > 0 ? m->live_bytes : 0), live, sizeof live);
    tl_warn(NULL, "%s%s%s%s: %lld live allocation(s), %s; report: %s", reason_words(m->reason), m->label ? " \"" : "",
            m->label ? m->label : "", m->label ? "\"" : "", m->live_count, live, shown);
}

/* The figures pass, once every contributor has written its share (pools.c
 * each device's reserve and allocations, bridge.c the caches' gap, owners
 * the caches whose free space no layout shows): each device's largest free
 * block and fragmentation over the pools that know their layout (annotated
 * ones, and framework pools whose state fits the device), then the
 * summary's.  Unknown stays unknown: a device with free space no layout
 * shows makes the summary's layout figures unknown too. */
static void figures(struct tl_gather *m)
{
    m->reserved = m->allocated = m->largest_free = 0;
    uint64_t all_free = 0;
    for (int d = 0; d < TL_MAX_DEVICES; d++) {
        struct tl_device_row *r = &m->devices[d];
        uint64_t dev_free = 0, largest = 0;
        for (size_t k = 0; k < m->npools; k++) {
            const struct tl_pool_row *p = &m->pools[k];
            bool knows = !strcmp(p->kind, "annotated") || (p->bridged && !p->layout_unknown && !r->frameworks_unfit);
            if (p->device != d || !knows)
                continue;
            dev_free += p->free;
            if (p->largest_free > largest)
                largest = p->largest_free;
        }
        r->largest_free = largest;
        r->fragmentation = tl_fragmentation(largest, dev_free);
        m->layout_unknown |= r->layout_unknown;
        all_free += dev_free;
        if (largest > m->largest_free)
            m->largest_free = largest;
        m->reserved += r->reserved;
        m->allocated += r->allocated;
    }
    m->fragmentation = tl_fragmentation(m->largest_free, all_free);
}

/* The judge pass: at exit every unsuppressed site is a leak; a forgotten
 * VA reservation or mapping is a leak to report but not bytes of memory
 * (the handle behind a mapping holds the memory, and a reservation may be
 * 1.1x the GPU, as PyTorch's is); suppressed sites and invalid frees are
 * counted apart. */
static void judge(struct tl_gather *m)
{
    for (size_t i = 0; i < m->nsites; i++) {
        uint8_t kind = m->sites[i].cs->kind;
        long long bytes = tl_is_address_space(kind) ? 0 : m->sites[i].bytes;
        if (m->sites[i].suppressed) {
            m->suppressed_bytes += bytes;
            m->suppressed_count += m->sites[i].count;
        } else if (m->reason == TL_REASON_EXIT) {
            m->leaked_bytes += bytes;
            m->leaked_count += m->sites[i].count;
            if (kind == TL_KIND_VMM_RESERVATION)
                m->leaked_address_space_bytes += m->sites[i].bytes;
            if (kind == TL_KIND_IPC_MAPPING) /* the exporter's memory, kept alive from here */
                m->leaked_ipc_mapped_bytes += m->sites[i].bytes;
        }
    }
    m->invalid = calloc(TL_MAX_INVALID, sizeof *m->invalid);
    m->invalid_suppressed = calloc(TL_MAX_INVALID, sizeof *m->invalid_suppressed);
    if (m->invalid && m->invalid_suppressed)
        m->ninvalid = tl_invalid_frees(m->invalid, TL_MAX_INVALID);
    for (size_t i = 0; i < m->ninvalid; i++) {
        struct tl_callsite *cs = tl_callsite_by_id(m->invalid[i].callsite);
        m->invalid_suppressed[i] = cs && tl_suppressed(m, "invalid-free", cs);
        m->ninvalid_suppressed += m->invalid_suppressed[i];
    }
}

/*
 * The passes of a report, in order (the caller holds the report lock and has
 * asked the Python bridge for fresh framework state, outside it).  Each reads
 * what the passes before it wrote into `m` and nothing that comes after.
 *
 *  1. gather       assemble.c    under every shard lock: live rows by call
 *                                site (m->sites, held segments in m->held),
 *                                by site and device, listed allocations,
 *                                address space, IPC mappings; pools.c's pool
 *                                rows and device reserve under the same
 *                                locks (one consistent state).
 *  2. devices      assemble.c    the driver's free/total and UUID per device
 *                                (or its last good answer).
 *  3. frameworks   bridge.c      framework pool rows and the caches' gap in
 *                                each device's allocated bytes (needs 1).
 *  4. growth       growth.c      growth rows and the marks' timeline; pool
 *                                series need 3's rows.
 *  5. owners       owners.c      sites attributed to owners, the held ones
 *                                moved to m->held, owner and owner-by-device
 *                                rows; unseen caches make their device's
 *                                layout unknown; owner-class growth rows get
 *                                their owner's name (after 4).
 *  6. figures      assemble.c    each device's largest free block and
 *                                fragmentation, then the summary's figures,
 *                                once (after 1, 3 and 5 contributed).
 *  7. suppressions suppress.c    each site's rule (symbolizing its stack).
 *  8. judge        assemble.c    leaked / suppressed / address-space sums,
 *                                invalid frees and which are suppressed
 *                                (after 5 moved held sites out, after 7).
 *  9. gate         assemble.c    which fail-on kinds failed (after 4 and 8).
 * 10. invariants   assemble.c    figures repaired to the report's invariants,
 *                                each repair listed; last, once every figure
 *                                has its value.
 * Then report_write: 11. resolve (report_build.c: the report model, every
 * frame symbolized) and 12. publish (the file from report_write.c, the
 * stderr text from report_text.c, both of that one model).
 *
 * False when out of memory.
 */
static bool build_model(struct tl_gather *m)
{
    if (!gather(m))
        return false;
    m->symbolizer = tl_symbolizer_open();
    device_info(m);
    device_info_last_good(m);
    tl_bridge_apply(m);
    tl_growth_collect(m);
    size_t nheld_pools = m->nheld;
    tl_owners_collect(m);
    mark_unseen_caches(m, nheld_pools);
    tl_growth_name_owners(m);
    figures(m);
    apply_suppressions(m);
    judge(m);
    decide_gate(m);
    tl_report_check_invariants(m);
    m->oom_analysis = tl_oom_analysis(m);
    return true;
}

/* The report file's text: the whole document as jansson's json_dumps(...,
 * JSON_INDENT(1) | JSON_ENSURE_ASCII) writes it, and a newline. */
#define REPORT_FILE_FLAGS (JSON_INDENT(1) | JSON_ENSURE_ASCII)

struct model_text {
    const struct tl_report *model;
    bool failed; /* the model could not be written (out of memory), as opposed to the file */
};

struct fd_sink {
    int fd, err;
};

static int dump_to_fd(const char *buffer, size_t size, void *data)
{
    struct fd_sink *s = data;
    s->err = tl_report_write_all(s->fd, buffer, size);
    return s->err ? -1 : 0;
}

/* report_file.c's writer: the model written into `fd` entry by entry, with
 * no JSON tree or whole text in memory (a million listed allocations made
 * a gigabyte of tree). */
static int write_model(int fd, void *arg)
{
    struct model_text *t = arg;
    struct fd_sink s = {.fd = fd};
    if (report_dump(t->model, REPORT_FILE_FLAGS, dump_to_fd, &s) == 0 && dump_to_fd("\n", 1, &s) == 0)
        return 0;
    t->failed = !s.err;
    return s.err ? s.err : ENOMEM;
}

static int report_write(enum tl_reason reason, const char *label, const struct tl_oom_event *oom, unsigned *gate_failed,
                        const char *exact_path)
{
    /* Framework state first, outside the report lock; never
     * waited for inside a hook (OOM, budget) or at exit. */
    tl_bridge_refresh(tl_hook_depth == 0 &&
                      (reason == TL_REASON_SIGNAL || reason == TL_REASON_API || reason == TL_REASON_INTERVAL));
    pthread_mutex_lock(&tl_report_lock);
    writing_here = true;
    struct tl_gather m = {.reason = reason, .label = label, .oom = oom, .with_allocations = true};
    m.seq = ++report_seq;
    int rc = -1;
    if (!build_model(&m)) {
        tl_warn(NULL, "out of memory while gathering a report; no report written");
        goto out;
    }

    char path[PATH_MAX];
    const char *shown = path;
    struct tl_report model;
    bool have_model = tl_report_build(&m, &model);
    /* Over the file and the stderr text alike. */
    struct sigaction xfsz_saved;
    bool xfsz_held = tl_report_sigxfsz_hold(&xfsz_saved);
    struct model_text text = {.model = &model};
    int err = have_model ? tl_report_write_file(reason, m.seq, exact_path, write_model, &text, path, sizeof path) : 0;
    if (!have_model || text.failed) {
        tl_warn(NULL, "out of memory while writing a report");
        shown = "(not written)";
    } else if (err == 0) {
        rc = 0;
        if (reason == TL_REASON_INTERVAL)
            tl_interval_reports_retain(path); /* TENSORLEAK_KEEP: the oldest go */
    } else {
        if (err == ENAMETOOLONG)
            tl_warn(NULL, "report path %s is too long; the report follows on stderr",
                    exact_path ? "given to tensorleak_snapshot_to" : "from TENSORLEAK_OUTPUT");
        else
            tl_warn(NULL, "cannot write report %s: %s; the report follows on stderr", path, strerror(err));
        fflush(stderr);
        write_model(STDERR_FILENO, &text);
        shown = "(stderr)";
    }

    if (!tl_opt.quiet) {
        if (reason == TL_REASON_EXIT && have_model) {
            /* The renderer of `tensorleak report`, over the same model: the
             * text a person and a log scraper read is the saved report's. */
            format_frames_all = tl_opt.frames_all;
            format_text(stderr, &model, shown);
            fflush(stderr);
        } else if (reason == TL_REASON_EXIT) {
            /* No model (out of memory): the verdict a CI log scrapes still. */
            fprintf(stderr, "SUMMARY: tensorleak: %lld byte(s) leaked in %lld allocation(s). Report: %s\n",
                    m.leaked_bytes, m.leaked_count, shown);
            fflush(stderr);
        } else if (reason == TL_REASON_OOM && oom) {
            char want[32], why[512];
            tl_format_size(oom->bytes, want, sizeof want);
            if (have_model && TL_HAS(&model.oom, OOM, verdict))
                report_oom_sentence(&model.oom, why, sizeof why);
            else
                snprintf(why, sizeof why, "verdict unknown");
            tl_warn(NULL, "out of memory allocating %s on device %d: %s; report: %s", want, oom->device, why, shown);
        } else {
            print_snapshot_line(&m, shown);
        }
    }
    tl_report_sigxfsz_release(xfsz_held, &xfsz_saved);
    if (gate_failed)
        *gate_failed = m.gate_failed;
    if (have_model)
        report_free(&model);
out:
    free_model(&m);
    writing_here = false;
    pthread_mutex_unlock(&tl_report_lock);
    return rc;
}

int tl_report_write(enum tl_reason reason, const char *label, const struct tl_oom_event *oom, unsigned *gate_failed)
{
    return report_write(reason, label, oom, gate_failed, NULL);
}

int tl_report_write_to(const char *label, const char *path)
{
    return report_write(TL_REASON_API, label, NULL, NULL, path);
}

int tl_report_with_model(void (*fn)(struct tl_gather *m, void *arg), void *arg)
{
    pthread_mutex_lock(&tl_report_lock);
    writing_here = true;
    /* Figures as a snapshot would show them: no exit verdict, no number. */
    struct tl_gather m = {.reason = TL_REASON_API, .silent = true};
    int rc = -1;
    if (build_model(&m)) {
        fn(&m, arg);
        rc = 0;
    }
    free_model(&m);
    writing_here = false;
    pthread_mutex_unlock(&tl_report_lock);
    return rc;
}
