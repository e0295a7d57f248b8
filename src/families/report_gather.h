/*
 * report_gather.h — what the preload library gathers for one report (or the
 * live state) under its locks: call sites with their raw frames, pool,
 * device, owner and growth rows.  assemble.c fills it and runs the passes,
 * the allocator views (pools.c, growth.c, owners.c, bridge.c) contribute
 * rows, and report_build.c turns it into the report model (model.h) that
 * is written and printed.
 */
#ifndef TL_REPORT_GATHER_H
#define TL_REPORT_GATHER_H

#include "tl_internal.h"

#include <jansson.h>

#include "sizes.h"

/* Every declaration below is of this library (hidden): the compiler then
 * reaches its variables directly, not through the GOT. */
#pragma GCC visibility push(hidden)

struct tl_pool;   /* model.h */
struct tl_report;

/* One live allocation of a call site, as the report lists it: where it
 * lies (0 for rows keyed by a handle, which have no address), its size
 * and on which device (TL_NO_DEVICE for host memory). */
struct tl_site_allocation {
    uint64_t address, bytes;
    uint8_t device;
    bool size_unknown; /* an array whose size the driver did not report: bytes null */
};

struct tl_site {
    struct tl_callsite *cs;
    long long bytes;
    long long count;
    /* Up to TENSORLEAK_ADDRESSES of its allocations, lowest address first
     * (which ones when it has more is unspecified); count - nallocations
     * of them are not listed.  Points into the model's site_allocations. */
    struct tl_site_allocation *allocations;
    size_t nallocations;
    /* Of count, allocations whose size the driver did not report (CUDA
     * arrays): bytes leaves them out and reports say its size is unknown. */
    long long unknown_size_count;
    bool suppressed;
    const char *rule; /* the suppression rule that matched, or NULL */
    const char *owner;       /* owners.c: owner name, or NULL before attribution */
    const char *owner_class; /* "cache", "workspace", "library", "user" */
};

struct tl_owner_row {
    char name[64];
    const char *cls;
    long long live_bytes, live_count, peak_bytes;
};

/* Live bytes of one call site on one device, in a pool's segments or not:
 * what owners.c sums per owner and device (assemble.c's gathering). */
struct tl_site_device {
    uint32_t site;  /* call-site id */
    int device;     /* -1: host memory (pinned, registered), no device's */
    bool held;      /* segments an annotated pool holds */
    long long bytes, count;
};

/* One owner's live memory on one device (-1: host memory).  Summed over
 * the devices, an owner's rows give its process-wide tl_owner_row. */
struct tl_owner_device_row {
    char name[64];
    const char *cls;
    int device;
    long long live_bytes, live_count;
};

struct tl_device_row {
    bool present;
    bool have_info;
    uint64_t free, total;
    uint64_t reserved, allocated;
    uint64_t largest_free;
    double fragmentation;
    /* Some free space lies where tensorleak sees no layout (a
     * driver pool, a cache nobody annotated): largest_free and
     * fragmentation are unknown. */
    bool layout_unknown;
    /* The driver did not answer cuMemGetInfo now (at exit): total is its
     * last answer, read at total_time (CLOCK_REALTIME seconds). */
    bool total_last_good;
    double total_time;
    /* bridge.c: the frameworks' pools as read hold more than the driver now
     * gave this process: their layouts say nothing of this device. */
    bool frameworks_unfit;
    /* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (cuDeviceGetUuid), as
     * nvidia-smi and DCGM print it; "" when the driver did not say. */
    char uuid[48];
};

struct tl_layout_block {
    uint64_t offset, bytes;
};
struct tl_layout_segment {
    uint64_t base, bytes;
    struct tl_layout_block *blocks;
    size_t nblocks;
};

struct tl_pool_row {
    char name[64];
    const char *kind; /* "annotated", "stream_ordered" or "graph" */
    int device;
    uint64_t reserved, allocated, free, largest_free, reserved_high, used_high;
    uint64_t peak_allocated, peak_reserved;
    double fragmentation, utilization;
    bool driver_mismatch;    /* stream-ordered: USED_MEM_CURRENT is not the tracked blocks' (pools.c) */
    uint64_t driver_used;
    uint64_t segments;
    /* Annotated pools: the layout, for memory maps (first TL_LAYOUT_MAX
     * blocks; layout_truncated when there were more). */
    struct tl_layout_segment *layout;
    size_t nlayout;
    bool layout_truncated;
    /* bridge.c: a framework pool's own model fields (where its state came
     * from and when, which framework, its layout and Python lines, the
     * counts it does not publish as null), read from the framework's JSON
     * by the model's reader, in the gather's bridge_memory; NULL for the
     * other pools.  And the reader's first refusal (that field left out),
     * NULL for none. */
    const struct tl_pool *bridged;
    const char *refused;
    /* bridge.c: what the out-of-memory post-mortem reads besides the
     * figures (oom.c): "empty_cache_bytes", "pinning"; NULL for none. */
    json_t *oom_extra;
    /* No layout (stream-ordered pool with free bytes):
     * largest_free and fragmentation are unknown.  Stream-ordered pools:
     * which driver reading the figures are ("current", "last_good" when the
     * driver stopped answering, "none" when it never answered) and when it
     * was taken (CLOCK_REALTIME seconds). */
    bool layout_unknown;
    const char *reading;
    double reading_time;
    /* Graph memory: no driver figure is known (reserved, allocated, free and
     * the highs are null); the allocation nodes tracked in it. */
    bool figures_unknown;
    uint64_t graph_nodes, graph_node_bytes;
};
#define TL_LAYOUT_MAX 8192

struct tl_growth_row {
    struct tl_callsite *cs;
    long long bytes_per_mark;
    long long count_per_mark;
    int marks;
    bool suppressed;
    json_t *extra; /* growth.c: a pool/owner/Python-site row (cs NULL): its JSON fields */
};

struct tl_mark_row {
    unsigned seq;
    char label[64];
    long long live_bytes;
    unsigned long long reserved_bytes;
    unsigned long long device_free;
    bool device_free_known; /* the driver answered; device_free is 0 otherwise */
    double time;
};

struct tl_gather {
    enum tl_reason reason;
    const char *label;
    unsigned seq;
    const struct tl_oom_event *oom;
    json_t *oom_analysis; /* oom.c: the post-mortem's fields of "oom" */

    struct tl_site *sites; /* outstanding allocations by call site, bytes desc */
    size_t nsites;
    struct tl_site *held;  /* memory held by a pool (segments), not leaks */
    size_t nheld;
    struct tl_site_allocation *site_allocations; /* every site's allocations, one block */

    long long live_bytes, live_count, peak_live_bytes;
    long long leaked_bytes, leaked_count;
    long long suppressed_bytes, suppressed_count;
    long long held_bytes;
    uint64_t reserved, allocated, largest_free;
    double fragmentation;

    struct tl_device_row devices[TL_MAX_DEVICES];
    struct tl_pool_row *pools;
    size_t npools;
    struct tl_growth_row *growth;
    size_t ngrowth;
    struct tl_mark_row *marks;
    size_t nmarks;
    struct tl_invalid_free_event *invalid;
    size_t ninvalid;
    bool *invalid_suppressed; /* assemble.c's judge: invalid[i] matched a suppression */
    size_t ninvalid_suppressed;

    struct tl_owner_row *owners;
    size_t nowners;
    struct tl_site_device *site_devices; /* assemble.c: every live row's site and device */
    size_t nsite_devices;
    struct tl_owner_device_row *owner_devices; /* owners.c: by device, then owner */
    size_t nowner_devices;
    bool owner_devices_unknown; /* owners.c ran out of memory attributing them */

    unsigned gate_failed; /* tl_fail_kind bits */
    bool silent;          /* the live state's model: its checks print nothing */
    /* List each site's allocations (tl_site.allocations): reports do; the
     * live state, which never shows them, skips that pass over the rows. */
    bool with_allocations;
    void *symbolizer;
    json_t *bridge; /* bridge.c: the "bridge" object (framework state used), or NULL */
    struct tl_report *bridge_memory; /* bridge.c: what the bridged pools hold (its arena, and as its
                                      * source the JSON their strings point into) */

    /* Address space, never added to a byte figure above: live VA
     * reservations (cuMemAddressReserve), and at exit the reservations among
     * the unsuppressed leaks. */
    long long address_space_bytes, address_space_count;
    long long leaked_address_space_bytes;
    /* Live allocations of unknown size (in the counts, in no byte figure). */
    long long unknown_size_count;

    /* Live VMM handles that were exported or imported (vmm_share.c), in
     * table order; imported_* are the imported ones' share of live_*. */
    struct tl_share_row {
        uint32_t site;   /* call-site id */
        bool imported;
        bool known;      /* file_dev/file_ino are the allocation's identity */
        uint64_t file_dev, file_ino;
        uint64_t bytes;
    } *shares;
    size_t nshares, shares_cap;
    long long imported_bytes, imported_count;
    /* CUDA IPC, never added to a byte figure above either: other processes'
     * memory mapped here (live ipc_mapping rows; at exit the mapped bytes
     * among the unsuppressed leaks), each mapping with the digest of its
     * handle, and this process's allocations exported to others. */
    long long ipc_mapped_bytes, ipc_mapped_count;
    long long leaked_ipc_mapped_bytes;
    struct tl_ipc_mapping_row {
        uint64_t digest, addr, bytes; /* bytes 0: the driver did not say */
        uint32_t refs, callsite;
        int device; /* the importing context's, TL_NO_DEVICE when unknown */
    } *ipc_mapped;
    struct tl_ipc_export *ipc_exported;
    size_t nipc_exported;

    /* The summary's largest_free/fragmentation are unknown;
     * figures repaired to keep the report's invariants (assemble.c). */
    bool layout_unknown;
    struct tl_repair {
        const char *invariant; /* e.g. "allocated <= reserved" */
        char where[80];        /* "pool 'mempool 0x...'", "device 0", "summary" */
        const char *figure;    /* the field changed */
        long long was, now;
    } repairs[16];
    size_t nrepairs, repairs_total;
};

/* assemble.c: repairs figures that break the report's
 * invariants (gap >= 0, allocated <= reserved, largest free <= free,
 * fragmentation in [0, 1], nothing above the device's memory), listing each
 * repair in m->repairs and warning once. */
void tl_report_check_invariants(struct tl_gather *m);
/* assemble.c: asks the driver for each device's memory now and keeps the
 * answer for reports the driver no longer answers for (pools.c at exit). */
void tl_report_read_devices_now(void);

/* Writes a report's text into `fd`, as it goes: 0, or an errno value. */
typedef int tl_report_writer(int fd, void *arg);
/* report_file.c: the report's text, written by `write_text(fd, arg)`, to
 * its file: to `exact` when given (the caller's own path,
 * tensorleak_snapshot_to, replaced if it exists), else under
 * TENSORLEAK_OUTPUT (plain for the exit report, numbered otherwise, never
 * replacing a file); `path` gets the name written.  The file appears whole
 * or not at all.  0, or an errno value (`write_text`'s, or ENAMETOOLONG
 * when the pattern expands too long).  The null device takes the report
 * without `write_text` being called. */
int tl_report_write_file(enum tl_reason reason, unsigned seq, const char *exact, tl_report_writer *write_text,
                         void *arg, char *path, size_t pathlen);
/* Writes all `len` bytes to `fd` (retrying what EINTR cut): 0, or an errno
 * value. */
int tl_report_write_all(int fd, const char *text, size_t len);
/* A full disk or RLIMIT_FSIZE gives an error, not SIGXFSZ killing the host
 * program: SIGXFSZ, when the program left it at its default, is ignored
 * from hold (true: it was) to release, which puts back exactly the
 * disposition saved, unless the program set one meanwhile.  Called with the
 * report lock held: the window of one report never overlaps another's.
 * While it lasts, another thread of the program writing past its limit gets
 * EFBIG instead of the signal. */
struct sigaction;
bool tl_report_sigxfsz_hold(struct sigaction *saved);
void tl_report_sigxfsz_release(bool held, const struct sigaction *saved);

/* report_build.c: the report model of what `m` gathered, every frame
 * symbolized (the model borrows from `m`: free it first); false when out of
 * memory. */
struct tl_report;
bool tl_report_build(struct tl_gather *m, struct tl_report *r);
/* The model the live file projects (live.c): the same figures without call
 * sites, held sites, stacks or pool layouts, nothing symbolized. */
bool tl_report_build_live(struct tl_gather *m, struct tl_report *r);

/* report_frames.c: symbolizes with a per-report cache, which the report
 * empties when it is done (tl_report_frames_clear). */
const struct tl_frame_info *tl_report_frame(struct tl_gather *m, uintptr_t address);
void tl_report_frames_clear(void);

/* pools.c: adds pool rows, marks held segments, fills each device's
 * reserved/allocated. */
void tl_pools_collect(struct tl_gather *m);
/* The fragmentation of free space whose largest block is `largest_free`:
 * 1 - largest_free / free (the RMM-arena / TensorFlow-BFC definition), 0
 * when nothing is free.  Every pool's, device's and the summary's. */
double tl_fragmentation(uint64_t largest_free, uint64_t free);
/* The driver's free and total memory on the device of context `ctx`.
 * cuMemGetInfo answers for the calling thread's current context, so `ctx`
 * is made current for the call and the caller's (none on the watcher
 * thread) put back.  False, with nothing set, when the driver does not
 * answer or one of its symbols is unknown (the watcher looks none up: they
 * are among tl_driver_symbols_prefetch's). */
bool tl_context_memory(void *ctx, int *device, uint64_t *free_bytes, uint64_t *total_bytes);
/* Is this live row a segment that a pool holds (not a leak at exit)? */
bool tl_pools_is_held(const struct tl_live *rec);
/* growth.c: growth rows and the timeline of marks. */
void tl_growth_collect(struct tl_gather *m);
/* owners.c: attributes sites to owners, moves held ones to m->held. */
void tl_owners_collect(struct tl_gather *m);
/* suppress.c: suppression rules on a call site's stack. */
const char *tl_suppressed(struct tl_gather *m, const char *kind, struct tl_callsite *cs);

/* ---- bridge.c: framework pools pushed by the Python bridge ------------- */
/* Before a report or a mark: asks the bridge thread for fresh framework state
 * and waits a bounded time when `may_wait` (never inside a hook, at exit or
 * after a timed-out request that is still unanswered). */
void tl_bridge_refresh(bool may_wait);
/* The same for a mark: the frameworks' figures only (no layouts). */
void tl_bridge_refresh_mark(bool may_wait);
/* For the live state (live.c, the watcher thread): the frameworks' figures,
 * waited for at most half an `interval` (seconds) and 250 ms; a timeout
 * here never makes a mark or report skip its own wait. */
void tl_bridge_refresh_live(double interval);
/* Adds the last framework state to the model: pool rows, the device
 * summary's allocated (the cache's gap), the "bridge" object. */
void tl_bridge_apply(struct tl_gather *m);
/* For growth.c, under its mark lock: the last state's pools (name, kind,
 * allocated) and Python sites (key, stack, bytes), one callback each. */
void tl_bridge_foreach_series(void (*pool)(const char *name, const char *kind, long long allocated, void *arg),
                              void (*site)(const char *key, const char *pool, json_t *stack, long long bytes, void *arg),
                              void *arg);
/* growth.c, at a mark (not inside a hook): a pool grows but names no
 * Python line; the bridge asks its framework for the lines of the blocks
 * allocated from now on (PyTorch's history), at the program's next bytecode. */
void tl_bridge_want_lines(void);
/* Python frames from the bridge as a report stack (frames "python": true). */
json_t *tl_bridge_stack_json(json_t *frames);
/* The module glob of the framework allocator whose out-of-memory observer
 * the bridge registered ("libc10_cuda.so*"): false when none is. */
bool tl_bridge_oom_module(char *out, size_t len);
/* oom.c: the out-of-memory report's verdict, from the model's figures. */
json_t *tl_oom_analysis(const struct tl_gather *m);
/* growth.c: series of a pool's allocated bytes, an owner class's reserved
 * bytes or a Python site's live bytes, one value per mark. */
#define TL_SERIES_KEEP 64
#define TL_SERIES_MIN_STEP (1LL << 20) /* a new high counts from 1 MiB up */
enum { TL_SERIES_POOL = 1, TL_SERIES_OWNER, TL_SERIES_PYSITE };
struct tl_series {
    int scope;
    char key[96];    /* pool name, owner class, or a Python stack's hash and pool */
    char kind[64];   /* pool kind; for a Python site, its pool's name */
    json_t *stack;   /* Python site: its frames */
    struct tl_callsite *cs; /* Python site: the frames interned, for suppressions */
    unsigned first_mark, last_mark, observed;
    long long first_value, last, max;
    unsigned nrec;   /* new highs so far; the last TL_SERIES_KEEP are kept */
    unsigned rec_mark[TL_SERIES_KEEP];
    long long rec_before[TL_SERIES_KEEP];
};
struct tl_series_verdict {
    long long bytes_per_mark, from_bytes, to_bytes;
    int marks;
};
void tl_series_observe(struct tl_series *s, unsigned seq, long long value, long long min_step);
bool tl_series_growing(const struct tl_series *s, unsigned now, int k, struct tl_series_verdict *v);
/* growth.c: names the owner of owner-class growth rows (after owners.c). */
void tl_growth_name_owners(struct tl_gather *m);

#pragma GCC visibility pop

#endif
