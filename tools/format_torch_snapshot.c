/*
 * format_torch_snapshot.c: `tensorleak report FILE --format torch-snapshot`,
 * the report as a pickle in the layout of torch.cuda.memory._snapshot(), for
 * https://pytorch.org/memory_viz and torch.cuda._memory_viz.
 *
 * The pickle holds plain types only (dicts, lists, strings, ints, floats,
 * bools, None), written with protocol 2 opcodes and no class opcodes, so the
 * web viewer's JavaScript unpickler and pickle.loads read it without torch.
 *
 * What becomes a segment, and why the segments' total_size adds up to the
 * report's summary.reserved_bytes:
 *   - every device pool with a known reserve: its layout's segments (allocated
 *     blocks "active_allocated", the holes between them "inactive"), or one
 *     segment of its reserve when its layout is unknown (a driver mempool,
 *     CuPy, PyTorch's cudaMallocAsync), marked "tensorleak_layout": "unknown";
 *   - the device memory outside pools: the summary counts annotated and
 *     stream-ordered pools' reserves and the direct driver allocations, and a
 *     framework pool's segments are such direct allocations, so what is left
 *     for plain allocations is each device's reserved_bytes less its pools'.
 *     Each allocation a site lists (leaks[].allocations: address, bytes,
 *     device) is a segment at its address on its device, unless it lies in
 *     a pool's layout segment (PyTorch's cudaMalloc of a segment: shown once,
 *     as the pool's). What a site does not list is one segment of its total,
 *     address unknown, placed on the devices in report order while it fits
 *     what is left there (sites of cache owners last, since a cache's
 *     segments are the ones already shown as pools); one that fits nowhere
 *     is taken to be a pool's memory. What is left after the sites is one
 *     segment that says no call site was listed for it.
 * What tensorleak does not know (the address of an allocation not listed,
 * streams, requested sizes) gets the neutral value the format needs (0, the size) and
 * is named in the segment's "tensorleak_unknown" list.
 */
#include "cli.h"
#include "model.h"
#include "report_fields.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MiB (1024ull * 1024ull)

/* ---- the pickle writer: the opcodes of protocol 2 this file needs -------- */

enum {
    OP_PROTO = 0x80, OP_STOP = '.', OP_MARK = '(', OP_EMPTY_DICT = '}', OP_EMPTY_LIST = ']',
    OP_SETITEMS = 'u', OP_APPENDS = 'e', OP_BINUNICODE = 'X', OP_BININT1 = 'K', OP_BININT = 'J',
    OP_LONG1 = 0x8a, OP_BINFLOAT = 'G', OP_NEWTRUE = 0x88, OP_NEWFALSE = 0x89, OP_NONE = 'N',
};

/* A dict or list is opened with EMPTY_DICT/EMPTY_LIST and MARK and closed with
 * SETITEMS/APPENDS, which take everything pushed since the mark (also
 * nothing). */
static void pk_dict(FILE *out)
{
    fputc(OP_EMPTY_DICT, out);
    fputc(OP_MARK, out);
}

static void pk_dict_end(FILE *out)
{
    fputc(OP_SETITEMS, out);
}

static void pk_list(FILE *out)
{
    fputc(OP_EMPTY_LIST, out);
    fputc(OP_MARK, out);
}

static void pk_list_end(FILE *out)
{
    fputc(OP_APPENDS, out);
}

static void pk_str(FILE *out, const char *s)
{
    size_t n = strlen(s);
    if (n > UINT32_MAX)
        n = UINT32_MAX;
    fputc(OP_BINUNICODE, out);
    for (int i = 0; i < 4; i++)
        fputc((int)((n >> (8 * i)) & 0xff), out);
    fwrite(s, 1, n, out);
}

static void pk_int(FILE *out, long long v)
{
    if (v >= 0 && v < 256) {
        fputc(OP_BININT1, out);
        fputc((int)v, out);
        return;
    }
    if (v >= INT32_MIN && v <= INT32_MAX) {
        uint32_t u = (uint32_t)(int32_t)v;
        fputc(OP_BININT, out);
        for (int i = 0; i < 4; i++)
            fputc((int)((u >> (8 * i)) & 0xff), out);
        return;
    }
    /* LONG1: little-endian two's complement; 8 bytes hold any long long. */
    uint64_t u = (uint64_t)v;
    fputc(OP_LONG1, out);
    fputc(8, out);
    for (int i = 0; i < 8; i++)
        fputc((int)((u >> (8 * i)) & 0xff), out);
}

/* An unsigned figure: addresses reach 2^64 - 1, so LONG1 with a ninth, zero
 * byte keeps the top bit from reading as a sign. */
static void pk_u64(FILE *out, uint64_t v)
{
    if (v <= INT64_MAX) {
        pk_int(out, (long long)v);
        return;
    }
    fputc(OP_LONG1, out);
    fputc(9, out);
    for (int i = 0; i < 8; i++)
        fputc((int)((v >> (8 * i)) & 0xff), out);
    fputc(0, out);
}

static void pk_float(FILE *out, double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    fputc(OP_BINFLOAT, out);
    for (int i = 7; i >= 0; i--)
        fputc((int)((u >> (8 * i)) & 0xff), out);
}

static void pk_bool(FILE *out, bool b)
{
    fputc(b ? OP_NEWTRUE : OP_NEWFALSE, out);
}

static void pk_key_str(FILE *out, const char *key, const char *value)
{
    pk_str(out, key);
    if (value)
        pk_str(out, value);
    else
        fputc(OP_NONE, out);
}

static void pk_key_u64(FILE *out, const char *key, uint64_t value)
{
    pk_str(out, key);
    pk_u64(out, value);
}

/* ---- frames ------------------------------------------------------------- */

static void put_frame(FILE *out, const struct tl_frame *f)
{
    const char *file = f->file ? f->file : f->module;
    char name[256];
    if (f->function)
        snprintf(name, sizeof name, "%s", f->function);
    else if (f->module && f->offset)
        snprintf(name, sizeof name, "%s+%s", report_basename(f->module), f->offset);
    else
        snprintf(name, sizeof name, "%s", f->address ? f->address : "??");
    pk_dict(out);
    pk_key_str(out, "filename", file ? file : "??");
    pk_str(out, "line");
    pk_int(out, f->line > 0 ? f->line : 0);
    pk_key_str(out, "name", name);
    pk_dict_end(out);
}

/* PyTorch's frames are Python frames, innermost first; memory_viz shows the
 * first ones, so a stack's Python frames come first, then its native ones. */
static void put_frames(FILE *out, const struct tl_stack *stack)
{
    pk_list(out);
    for (int python = 1; stack && python >= 0; python--)
        for (size_t i = 0; i < stack->count; i++)
            if (stack->frames[i].python == (python == 1))
                put_frame(out, &stack->frames[i]);
    pk_list_end(out);
}

/* ---- segments ------------------------------------------------------------- */

enum { UNKNOWN_ADDRESS = 1, UNKNOWN_STREAM = 2, UNKNOWN_REQUESTED = 4, UNKNOWN_FRAMES = 8 };

struct segment {
    long long device;
    uint64_t address, total, allocated;
    bool small;                 /* PyTorch's small pool (segments of 2 MiB) */
    unsigned unknown;           /* UNKNOWN_* */
    const char *layout;         /* "tensorleak_layout" */
    const char *pool, *pool_kind;   /* the pool it belongs to; NULL: none */
    uint64_t allocations;       /* a call site's allocation count; 0: not a site */
    const char *note;
};

static void put_block(FILE *out, uint64_t address, uint64_t size, const char *state, const struct tl_stack *stack)
{
    pk_dict(out);
    pk_key_u64(out, "address", address);
    pk_key_u64(out, "size", size);
    pk_key_u64(out, "requested_size", strcmp(state, "inactive") ? size : 0);
    pk_key_str(out, "state", state);
    pk_str(out, "frames");
    put_frames(out, stack);
    pk_dict_end(out);
}

static void put_unknown(FILE *out, unsigned unknown)
{
    static const struct { unsigned bit; const char *name; } names[] = {
        { UNKNOWN_ADDRESS, "address" },
        { UNKNOWN_STREAM, "stream" },
        { UNKNOWN_REQUESTED, "requested_size" },
        { UNKNOWN_FRAMES, "frames" },
    };
    pk_str(out, "tensorleak_unknown");
    pk_list(out);
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (unknown & names[i].bit)
            pk_str(out, names[i].name);
    pk_list_end(out);
}

/* Writes the segment's keys and opens its "blocks" list; the caller writes
 * the blocks and calls end_segment(). */
static void begin_segment(FILE *out, const struct segment *s)
{
    pk_dict(out);
    pk_str(out, "device");
    pk_int(out, s->device);
    pk_key_u64(out, "address", s->address);
    pk_key_u64(out, "total_size", s->total);
    pk_key_u64(out, "stream", 0);
    pk_key_str(out, "segment_type", s->small ? "small" : "large");
    pk_str(out, "segment_pool_id");
    pk_list(out);
    pk_int(out, 0);
    pk_int(out, 0);
    pk_list_end(out);
    pk_key_u64(out, "allocated_size", s->allocated);
    pk_key_u64(out, "active_size", s->allocated);
    pk_key_u64(out, "requested_size", s->allocated);
    pk_str(out, "is_expandable");
    pk_bool(out, false);
    pk_str(out, "frames");
    pk_list(out);
    pk_list_end(out);
    pk_key_str(out, "tensorleak_layout", s->layout);
    put_unknown(out, s->unknown);
    if (s->pool) {
        pk_key_str(out, "tensorleak_pool", s->pool);
        pk_key_str(out, "tensorleak_pool_kind", s->pool_kind);
    }
    if (s->allocations)
        pk_key_u64(out, "tensorleak_allocations", s->allocations);
    if (s->note)
        pk_key_str(out, "tensorleak_note", s->note);
    pk_str(out, "blocks");
    pk_list(out);
}

static void end_segment(FILE *out)
{
    pk_list_end(out);
    pk_dict_end(out);
}

/* A segment of one block: a call site's memory, a pool without layout, the
 * rest of a device. */
static void put_whole_segment(FILE *out, const struct segment *s, const char *state, const struct tl_stack *stack)
{
    begin_segment(out, s);
    put_block(out, s->address, s->total, state, stack);
    end_segment(out);
}

/* A segment of a pool's layout, its holes as inactive blocks. The report
 * keeps no stacks per block, so blocks carry no frames. */
static uint64_t put_layout_segment(FILE *out, const struct tl_pool *p, const struct tl_segment *seg)
{
    uint64_t base = strtoull(seg->base, NULL, 16), allocated = 0;
    for (size_t b = 0; b < seg->block_count; b++)
        allocated += seg->blocks[b].bytes;
    bool pytorch = strcmp(p->kind, "pytorch") == 0;
    struct segment s = {
        .device = p->device, .address = base, .total = seg->bytes, .allocated = allocated,
        .small = pytorch && seg->bytes <= 2 * MiB,
        .unknown = UNKNOWN_STREAM | UNKNOWN_REQUESTED | UNKNOWN_FRAMES,
        .layout = p->layout_truncated ? "truncated" : "known", .pool = p->name, .pool_kind = p->kind,
        .note = p->layout_truncated ? "the report left some blocks out: what it did not list is shown inactive" : NULL,
    };
    begin_segment(out, &s);
    uint64_t at = 0;
    for (size_t b = 0; b < seg->block_count; b++) {
        const struct tl_block *bl = &seg->blocks[b];
        if (bl->offset > at)
            put_block(out, base + at, bl->offset - at, "inactive", NULL);
        put_block(out, base + bl->offset, bl->bytes, "active_allocated", NULL);
        at = bl->offset + bl->bytes;
    }
    if (at < seg->bytes)
        put_block(out, base + at, seg->bytes - at, "inactive", NULL);
    end_segment(out);
    return seg->bytes;
}

/* Every segment of a device pool with a known reserve; returns the bytes
 * written, which is the pool's reserve. */
static uint64_t put_pool(FILE *out, const struct tl_pool *p)
{
    uint64_t listed = 0;
    for (size_t i = 0; i < p->layout_count && TL_HAS(p, POOL, layout); i++) {
        if (listed + p->layout[i].bytes > p->reserved_bytes)
            break;
        listed += put_layout_segment(out, p, &p->layout[i]);
    }
    if (listed >= p->reserved_bytes)
        return listed;
    uint64_t rest = p->reserved_bytes - listed;
    uint64_t allocated = 0;
    if (!TL_HAS(p, POOL, layout) || p->layout_count == 0)
        allocated = p->allocated_bytes < rest ? p->allocated_bytes : rest;
    struct segment s = {
        .device = p->device, .total = rest, .allocated = allocated,
        .unknown = UNKNOWN_ADDRESS | UNKNOWN_STREAM | UNKNOWN_REQUESTED | UNKNOWN_FRAMES,
        .layout = "unknown", .pool = p->name, .pool_kind = p->kind,
        .note = listed ? "the part of the pool's reserve its layout in the report does not list"
                       : "the pool's reserve; the report has no layout of its blocks",
    };
    /* One block for the whole segment: allocated when the pool says all of it
     * is, otherwise inactive, and allocated_size says how much is in use. */
    put_whole_segment(out, &s, allocated == rest && rest ? "active_allocated" : "inactive", NULL);
    return p->reserved_bytes;
}

static bool kind_reserves(const char *kind)
{
    return !strcmp(kind, "device") || !strcmp(kind, "managed") || !strcmp(kind, "vmm_handle") ||
           !strcmp(kind, "async");
}

struct device_room {
    long long device;
    uint64_t left;              /* reserved bytes not yet shown by a segment */
};

/* The room of `device`; a report without devices[] has one room for all. */
static struct device_room *room_of(struct device_room *room, size_t nroom, long long device)
{
    for (size_t d = 0; d < nroom; d++)
        if (room[d].device == device)
            return &room[d];
    return nroom == 1 && room[0].device == 0 ? &room[0] : NULL;
}

/* Is [address, address + bytes) inside a segment of a pool's layout (a
 * framework pool's segment is also one of the driver allocations the
 * report lists at its call site)? */
static bool in_pool_layout(const struct tl_report *r, long long device, uint64_t address, uint64_t bytes)
{
    for (size_t i = 0; i < r->pool_count; i++) {
        const struct tl_pool *p = &r->pools[i];
        if (p->device != device || !TL_HAS(p, POOL, layout) || TL_NULL(p, POOL, reserved_bytes))
            continue;
        for (size_t k = 0; k < p->layout_count; k++) {
            uint64_t base = strtoull(p->layout[k].base, NULL, 16);
            if (address >= base && bytes <= p->layout[k].bytes && address - base <= p->layout[k].bytes - bytes)
                return true;
        }
    }
    return false;
}

/* A site's listed allocations, each a segment of one block at its address;
 * returns the bytes of those shown (or left to a pool's layout), which the
 * site's remaining segment does not repeat, and their number in *ndone. */
static uint64_t put_site_allocations(FILE *out, const struct tl_report *r, const struct tl_leak *site,
                                     struct device_room *room, size_t nroom, uint64_t *ndone)
{
    uint64_t done = 0;
    *ndone = 0;
    for (size_t k = 0; k < site->allocation_count; k++) {
        const struct tl_allocation *a = &site->allocations[k];
        if (!TL_HAS(a, ALLOC, address) || a->device < 0 || a->bytes == 0)
            continue;
        if (in_pool_layout(r, a->device, a->address, a->bytes)) {
            done += a->bytes;   /* shown as the pool's segment already */
            ++*ndone;
            continue;
        }
        struct device_room *dr = room_of(room, nroom, a->device);
        if (!dr || dr->left < a->bytes)
            continue;
        dr->left -= a->bytes;
        done += a->bytes;
        ++*ndone;
        struct segment s = {
            .device = a->device, .address = a->address, .total = a->bytes, .allocated = a->bytes,
            .unknown = UNKNOWN_STREAM | UNKNOWN_REQUESTED | (site->stack.count ? 0 : UNKNOWN_FRAMES),
            .layout = "allocation", .allocations = 1,
        };
        put_whole_segment(out, &s, "active_allocated", &site->stack);
    }
    return done;
}

static void put_sites(FILE *out, const struct tl_report *r, const struct tl_leak *sites, size_t count,
                      bool cache_owners, struct device_room *room, size_t nroom)
{
    for (size_t i = 0; i < count; i++) {
        const struct tl_leak *site = &sites[i];
        bool cache = site->owner_class && !strcmp(site->owner_class, "cache");
        if (cache != cache_owners || !kind_reserves(site->kind) || site->bytes == 0)
            continue;
        uint64_t listed, shown = put_site_allocations(out, r, site, room, nroom, &listed);
        if (shown >= site->bytes)
            continue;
        uint64_t bytes = site->bytes - shown, allocations = site->count > listed ? site->count - listed : 1;
        size_t d = 0;
        while (d < nroom && room[d].left < bytes)
            d++;
        if (d == nroom)
            continue;   /* more than any device has left: a pool's segments */
        room[d].left -= bytes;
        struct segment s = {
            .device = room[d].device, .total = bytes, .allocated = bytes,
            .unknown = UNKNOWN_ADDRESS | UNKNOWN_STREAM | UNKNOWN_REQUESTED | (site->stack.count ? 0 : UNKNOWN_FRAMES),
            .layout = allocations == 1 ? "allocation" : "call_site", .allocations = allocations,
            .note = allocations == 1 ? NULL
                    : listed ? "the allocations of one call site the report does not list one by one: their total"
                             : "the allocations of one call site: the report keeps their total, not each one",
        };
        put_whole_segment(out, &s, "active_allocated", &site->stack);
    }
}

/* ---- device traces: the report's marks ------------------------------------ */

static void put_marks(FILE *out, const struct tl_report *r)
{
    pk_list(out);
    for (size_t i = 0; i < r->mark_count; i++) {
        const struct tl_mark *m = &r->marks[i];
        pk_dict(out);
        pk_key_str(out, "action", "snapshot");
        pk_key_u64(out, "addr", 0);
        pk_key_u64(out, "size", 0);
        pk_key_u64(out, "stream", 0);
        pk_str(out, "frames");
        pk_list(out);
        pk_list_end(out);
        pk_str(out, "time_us");
        pk_int(out, (long long)(m->time * 1e6));
        if (TL_HAS(m, MARK, device_free))
            pk_key_u64(out, "device_free", m->device_free);
        pk_key_str(out, "tensorleak_mark", m->label);
        pk_dict_end(out);
    }
    pk_list_end(out);
}

bool format_torch_snapshot(FILE *out, const struct tl_report *r)
{
    /* Rooms per device from devices[]; a report without them has its
     * summary's reserve on device 0. */
    size_t nroom = r->device_count ? r->device_count : 1;
    struct device_room *room = calloc(nroom, sizeof *room);
    if (!room) {
        cli_error("report: out of memory");
        return false;
    }
    if (r->device_count == 0)
        room[0].left = r->summary.reserved_bytes;
    long long max_device = 0;
    for (size_t d = 0; d < r->device_count; d++) {
        room[d].device = r->devices[d].device;
        room[d].left = r->devices[d].reserved_bytes;
        if (room[d].device > max_device)
            max_device = room[d].device;
    }

    fputc(OP_PROTO, out);
    fputc(2, out);
    pk_dict(out);
    pk_str(out, "segments");
    pk_list(out);
    for (size_t i = 0; i < r->pool_count; i++) {
        const struct tl_pool *p = &r->pools[i];
        if (p->device < 0 || TL_NULL(p, POOL, reserved_bytes))
            continue;   /* host memory, or a pool that publishes no bytes */
        uint64_t shown = put_pool(out, p);
        if (p->device > max_device)
            max_device = p->device;
        for (size_t d = 0; d < nroom; d++)
            if (room[d].device == p->device || r->device_count == 0)
                room[d].left = room[d].left > shown ? room[d].left - shown : 0;
    }
    const struct tl_leak *sites = (r->seen.present & TL_BIT(REPORT, leaks)) || !TL_HAS(r, REPORT, sites) ? r->leaks : r->sites;
    size_t site_count = (r->seen.present & TL_BIT(REPORT, leaks)) || !TL_HAS(r, REPORT, sites) ? r->leak_count : r->site_count;
    for (int cache_owners = 0; cache_owners <= 1; cache_owners++) {
        put_sites(out, r, sites, site_count, cache_owners, room, nroom);
        put_sites(out, r, r->held, r->held_count, cache_owners, room, nroom);
    }
    for (size_t d = 0; d < nroom; d++) {
        if (room[d].left == 0)
            continue;
        struct segment s = {
            .device = room[d].device, .total = room[d].left, .allocated = room[d].left,
            .unknown = UNKNOWN_ADDRESS | UNKNOWN_STREAM | UNKNOWN_REQUESTED | UNKNOWN_FRAMES,
            .layout = "unknown",
            .note = "device memory outside the pools for which the report lists no call site",
        };
        put_whole_segment(out, &s, "active_allocated", NULL);
    }
    pk_list_end(out);

    /* One trace per device ordinal; the marks are the process's, on each. */
    pk_str(out, "device_traces");
    pk_list(out);
    for (long long d = 0; d <= max_device; d++)
        put_marks(out, r);
    pk_list_end(out);

    pk_str(out, "tensorleak");
    pk_dict(out);
    pk_key_str(out, "report", r->path);
    pk_key_str(out, "reason", r->reason);
    pk_key_u64(out, "reserved_bytes", r->summary.reserved_bytes);
    pk_key_u64(out, "allocated_bytes", r->summary.allocated_bytes);
    pk_str(out, "fragmentation");
    if (tl_summary_layout_unknown(&r->summary))
        fputc(OP_NONE, out);
    else
        pk_float(out, r->summary.fragmentation);
    pk_dict_end(out);

    pk_dict_end(out);
    fputc(OP_STOP, out);
    free(room);
    return true;
}
