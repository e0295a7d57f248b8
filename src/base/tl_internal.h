/*
 * tl_internal.h — declarations shared between the files of libtensorleak.so.
 *
 * Public names are tensorleak_* (include/tensorleak.h); everything here is
 * tl_* and hidden.  Grouped by the file that defines it.
 */
#ifndef TL_INTERNAL_H
#define TL_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <pthread.h>

#include "kinds.h"
#include "option_rules.h" /* TL_MAX_DEPTH, the gate's kinds, the shared value checks */

/* Every declaration below is of this library (hidden): the compiler then
 * reaches its variables directly, not through the GOT. */
#pragma GCC visibility push(hidden)

#define TL_EXPORT __attribute__((visibility("default")))
#define TL_LIKELY(x) __builtin_expect(!!(x), 1)
#define TL_UNLIKELY(x) __builtin_expect(!!(x), 0)
/* Thread-locals of the hot path: initial-exec, so no __tls_get_addr call
 * (a preloaded library's TLS is static).  Only for small variables: a
 * dlopen'ed copy takes them from glibc's small static-TLS surplus. */
#define TL_TLS_IE __attribute__((tls_model("initial-exec")))
/* A zeroed per-thread block of `size` bytes for state too big for the
 * above: *slot (an initial-exec pointer of the caller's) is set to it, and
 * cleared when the thread exits and the block is freed (thread_block.c).
 * NULL when out of memory (counted as a dropped event). */
void *tl_thread_block(void **slot, size_t size);

/* A stored stack: up to TENSORLEAK_DEPTH native frames and, besides them,
 * up to TENSORLEAK_PYTHON_DEPTH Python frames (each at most TL_MAX_DEPTH). */
#define TL_MAX_FRAMES (2 * TL_MAX_DEPTH)
#define TL_MAX_DEVICES 16
/* The device of a row that is no device's memory (a host registration):
 * beyond every device, so no device's figures count it. */
#define TL_NO_DEVICE 255
#define TL_MAX_CONTEXTS 255

/* ---- private_deps.c ------------------------------------------------------ */
/* Loads libunwind, libdw and jansson privately (RTLD_LOCAL) and fills the
 * stubs our code calls them through; false when they cannot be loaded.
 * Called once, from the constructor (or the first hook, before it). */
bool tl_private_deps_load(void);
/* The one warning of a failed load (nothing when it succeeded): at the
 * first CUDA call. */
void tl_private_deps_warn(void);
/* private_fds.c: libunwind's memory check made to need no descriptor (its
 * imports of pipe2, read, close and syscall pointed at ours), and the opens
 * of every private library made close-on-exec; a function of each library
 * names its module. */
void tl_private_fds_install(void *libunwind_function, void *const *other_functions, size_t nother);
/* Says once (first CUDA call) when libunwind keeps its pipe. */
void tl_private_fds_warn(void);

/* ---- log.c ------------------------------------------------------------- */
/* One line on stderr, prefixed "tensorleak: ".  Rate-limited per call site
 * through the `once` flag when it is non-NULL (the warning appears once). */
void tl_warn(atomic_bool *once, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Counts an event the tracker had to drop (bookkeeping out of memory, ...). */
void tl_note_dropped(const char *why);
extern atomic_ulong tl_dropped_events;

/* ---- options.c ---------------------------------------------------------- */
/* A TENSORLEAK_BUDGET value: bytes per device in all, and per owner class
 * in owners.c's class order (cache, workspace, library, user); 0 = none. */
#define TL_BUDGET_CLASSES 4
struct tl_budget_spec {
    uint64_t total;
    uint64_t per_class[TL_BUDGET_CLASSES];
};
/* The classes' names, as TENSORLEAK_BUDGET and reports spell them. */
extern const char *const tl_budget_class_names[TL_BUDGET_CLASSES];
/* Parses a TENSORLEAK_BUDGET value (`SIZE` and/or `CLASS:SIZE`, comma
 * separated) into *out; returns 0, or -1 with *out untouched. */
int tl_budget_parse(const char *v, struct tl_budget_spec *out);

struct tl_options {
    char output[1024];       /* TENSORLEAK_OUTPUT pattern */
    bool output_null;        /* TENSORLEAK_OUTPUT is the null device: no report files (report_file.c) */
    int depth;               /* TENSORLEAK_DEPTH, 0..TL_MAX_DEPTH: native frames */
    int python_depth;        /* TENSORLEAK_PYTHON_DEPTH, 0..TL_MAX_DEPTH: Python frames besides */
    bool frames_all;         /* TENSORLEAK_FRAMES=all: text stacks show every frame, not Python first */
    int addresses;           /* TENSORLEAK_ADDRESSES: allocations a report lists per call site */
    unsigned fail_on;        /* TENSORLEAK_FAIL_ON: tl_fail_kind bits */
    int exitcode;            /* TENSORLEAK_EXITCODE */
    char suppressions[1024]; /* TENSORLEAK_SUPPRESSIONS path, "" = none */
    int signal;              /* TENSORLEAK_SIGNAL, 0 = none */
    int mark_signal;         /* TENSORLEAK_MARK_SIGNAL, 0 = none */
    bool quiet;              /* TENSORLEAK_QUIET */
    double interval;         /* TENSORLEAK_INTERVAL seconds, 0 = off */
    int growth_marks;        /* TENSORLEAK_GROWTH_MARKS */
    bool follow_fork;        /* TENSORLEAK_FOLLOW_FORK: track forked children */
    bool default_owners;     /* TENSORLEAK_DEFAULT_OWNERS: the shipped owner rules */
    bool live;               /* TENSORLEAK_LIVE: publish the live state file (live.c) */
    char live_dir[1024];     /* TENSORLEAK_LIVE_DIR, "" = the per-user default */
    double live_interval;    /* TENSORLEAK_LIVE_INTERVAL seconds between live updates */
    int keep;                /* TENSORLEAK_KEEP: interval reports kept per process, 0 = all */
    char owners[4096];       /* TENSORLEAK_OWNERS rule file, "" = none (owners.c reads it) */
    struct tl_budget_spec budget; /* TENSORLEAK_BUDGET, all 0 = none (budget.c) */
    bool budget_enforce;     /* TENSORLEAK_BUDGET_ENFORCE */
    bool python;             /* TENSORLEAK_PYTHON: start the Python bridge (bridge.c) */
    char python_rejected[1024]; /* a TENSORLEAK_PYTHON value that is no boolean, "" = none */
};
extern struct tl_options tl_opt;

/* Parses TENSORLEAK_* from `envp` (NULL: environ).  Bad values warn once,
 * naming the variable and value, and keep the default. */
void tl_options_load(char **envp);
/* Values and names tl_options_load rejected (a warning each), ever. */
extern unsigned tl_options_rejected;
/* Parsers shared with the unit tests (tl_parse_int and tl_parse_fail_on:
 * option_rules.h); return 0 on success. */
int tl_parse_bool(const char *s, bool *out);
int tl_parse_size(const char *s, uint64_t *out);
int tl_parse_signal(const char *s, int *out);
/* The process's rank for %r and the report's "rank": the first of RANK,
 * OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID set and not empty, NULL when
 * none is.  Unlike the TENSORLEAK_* variables it is read from the
 * environment at each call (reports are written long after start, where
 * getenv is safe): a worker process, a forked child included, may set its
 * rank in its environment after the library started. */
const char *tl_options_rank(void);
/* Opens the file a TENSORLEAK_* variable names, for reading: never blocks
 * (a FIFO), refuses anything but a regular file.  NULL after one warning
 * naming the variable, the path and `otherwise` (what happens instead). */
FILE *tl_options_open_file(const char *variable, const char *path, const char *otherwise);

/* Hash of a frame array for the per-thread caches (call sites, validated
 * frame-pointer walks).  Four independent multiply lanes, so 32 frames cost
 * ~8 dependent multiplies rather than 32 (this runs on every allocation),
 * then splitmix64's finalizer.  Never 0 (0 marks an empty cache slot). */
static inline uint64_t tl_hash_frames(uint64_t seed, const uintptr_t *f, size_t n)
{
    const uint64_t k = 0x9E3779B97F4A7C15ull;
    uint64_t a = 0x243F6A8885A308D3ull ^ seed, b = 0x13198A2E03707344ull, c = 0xA4093822299F31D0ull,
             d = 0x082EFA98EC4E6C89ull ^ n;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        a = (a ^ f[i]) * k;
        b = (b ^ f[i + 1]) * k;
        c = (c ^ f[i + 2]) * k;
        d = (d ^ f[i + 3]) * k;
    }
    for (; i < n; i++)
        a = (a ^ f[i]) * k;
    uint64_t h = a ^ (b >> 17 | b << 47) ^ (c >> 31 | c << 33) ^ (d >> 43 | d << 21);
    h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ull;
    h = (h ^ (h >> 27)) * 0x94D049BB133111EBull;
    h ^= h >> 31;
    return h | 1;
}

/* ---- stack.c ------------------------------------------------------------ */
/* Fills `frames` (TL_MAX_FRAMES long) with up to `max` return addresses of
 * the caller of the hook, innermost first, skipping frames inside
 * libtensorleak itself, and the thread's Python frames merged in (up to
 * tl_opt.python_depth more).  Returns the number stored (0 when max is 0
 * or unwinding failed). */
int tl_stack_capture(uintptr_t *frames, int max);
void tl_stack_init(void);
/* Captures that needed libunwind (first sight of a stack, or a walk that
 * never matched), and threads whose entry frames were learned (stack.c). */
unsigned long tl_stack_unwinds(void);
unsigned long tl_stack_entries_learned(void);
bool tl_addr_in_self(uintptr_t addr);
/* Walks from the call-frame tables (cfi_walk.c): `ret` is the first return
 * address, sp and bp the registers its frame resumes with, hi the stack's
 * top.  Frames stored (at most max), or -1 where a rule is not one it
 * decodes.  *same: the walk read the very words this thread's previous walk
 * read, from the same registers, so its frames are that walk's.  Walks libunwind contradicted (stack.c confirms each once). */
int tl_cfi_walk(uintptr_t ret, uintptr_t sp, uintptr_t bp, uintptr_t hi, uintptr_t *frames, int max, bool *same);
unsigned long tl_stack_cfi_mismatches(void);
unsigned long tl_stack_verdicts_evicted(void);
/* Forgets every thread's decoded rules (a library was unloaded: its
 * addresses may come back as another's). */
void tl_cfi_flush(void);

/* ---- pyframes.c (Python frames in stacks; tl_py_maybe: record.h) --------- */
/* A Python frame in a stack's frames array: this tag | a location id.  Bit 63
 * with bits 48-62 clear is a non-canonical x86-64/AArch64 address, so no
 * return address ever looks like one. */
#define TL_PYFRAME_TAG (1ull << 63)
static inline bool tl_is_pyframe(uintptr_t v)
{
    return (v >> 48) == 0x8000;
}
/* The calling thread's Python frames, innermost first, as tagged values;
 * run_end[k]: frame k is the last one a native evaluation-loop frame runs.
 * 0 without an interpreter, without Python frames on this thread, or when
 * the chain failed a check (counted).  *same: the chain is, frame for frame,
 * the one this thread's previous call read; py and run_end are then not
 * written (tl_py_last has them). */
int tl_py_read(uintptr_t *py, bool *run_end, int max, bool *same);
/* What this thread's last tl_py_read returned, again. */
int tl_py_last(uintptr_t *py, bool *run_end);
/* Writes the native frames with each evaluation-loop frame replaced by its
 * run of Python frames (runs left over go last); returns the count, at most
 * max. */
int tl_py_merge(uintptr_t *frames, int max, const uintptr_t *native, int n, const uintptr_t *py, const bool *run_end,
                int np);
/* A Python frame value for (function, file, line), e.g. from a framework's
 * own recorded history; 0 when out of memory.  Strings are copied. */
uintptr_t tl_pyloc_intern_strings(const char *function, const char *file, int line);
/* What a Python frame value names; false for anything else. */
bool tl_pyloc_lookup(uintptr_t frame, const char **function, const char **file, int *line);
/* Captures whose Python frame chain failed a check (native frames kept). */
unsigned long tl_py_chains_unreadable(void);
/* Code objects freed since the interpreter was found (pyframes.c counts
 * them for its memo); -1 when they are not counted. */
long long tl_py_code_frees(void);
/* Call sites (distinct stacks) with Python frames (callsite.c; counted when
 * a call site is created, so the hot path pays nothing). */
unsigned long tl_callsite_python_count(void);

/* Called by dlopen_trampoline.S, before glibc's dlopen or dlmopen: notes the
 * call for the interpreter lookup and returns the real function to jump to. */
void *tl_dlopen_route(int which, uintptr_t arg2, uintptr_t arg3);

/* ---- callsite.c (tl_callsite_empty: record.h) --------------------------- */
/* enum tl_kind and its rows: kinds.h. */
const char *tl_kind_name(enum tl_kind kind);

struct tl_callsite {
    uint32_t id;
    uint8_t kind;
    uint8_t nframes;
    _Atomic uint8_t owner; /* owner index + 1 once decided (owners.c), 0 before */
    uint64_t hash;
    atomic_llong live_bytes;
    atomic_llong live_count;
    atomic_ullong total_allocs;
    /* Growth tracking (growth.c), touched only under the mark lock. */
    long long mark_bytes;      /* live bytes at the last mark */
    int grow_streak;           /* consecutive marks with growth */
    long long grow_first_bytes; /* live bytes when the streak started */
    uintptr_t frames[];
};

/* Returns the interned call site for (kind, frames), creating it; NULL only
 * when bookkeeping memory ran out (counted as a dropped event). */
struct tl_callsite *tl_callsite_intern(enum tl_kind kind, const uintptr_t *frames, int n);
/* The interned call site of the calling thread's stack: tl_stack_capture
 * and tl_callsite_intern, with nothing done again for a stack that is the
 * thread's last one (a Python loop allocating from one line). */
struct tl_callsite *tl_stack_site(enum tl_kind kind, int max);
/* Calls fn for every call site; the table lock is held. */
void tl_callsite_foreach(void (*fn)(struct tl_callsite *, void *), void *arg);
size_t tl_callsite_count(void);
/* epoch.c: (call-site id, live bytes, live allocations) of every call site
 * holding memory, up to max_rows rows; how many there are, -1 when not
 * tracking (tensorleak_site_bytes, include/tensorleak.h). */
long tl_site_bytes(uint64_t *rows, long max_rows);
/* Every call site's owner undecided again (a later attach's owner rules). */
void tl_callsite_forget_owners(void);
void tl_callsite_reset_after_fork(void);

/* ---- live_table.c ------------------------------------------------------- */
/* A live allocation.  Key: (space, addr).  40 bytes, stored inline in an
 * open-addressing table. */
/* 4 is pools.c's (annotated pool blocks); arrays are keyed by handle; an
 * IPC mapping by the address its open returned (TL_SPACE_IPC). */
enum tl_space {
    TL_SPACE_MEM = 0, TL_SPACE_VMM_HANDLE = 1, TL_SPACE_VMM_MAP = 2, TL_SPACE_VMM_VA = 3, TL_SPACE_ARRAY = 5,
    TL_SPACE_IPC = 6,
};
/* The aux of a TL_KIND_ARRAY row whose size the driver did not report: the
 * row holds 0 bytes and reports count it among allocations of unknown size. */
#define TL_ARRAY_SIZE_UNKNOWN 1u

struct tl_live {
    uint64_t addr;     /* 0 = empty slot */
    uint64_t size;
    uint32_t callsite; /* id; 0 = none (unknown) */
    uint32_t tid;
    uint8_t space;
    uint8_t kind;
    uint8_t device;
    uint8_t ctx;       /* context index (tracker.c), 0 = unknown */
    uint8_t owner;     /* owner index + 1 (owners.c, its call site's), 0 = none */
    uint32_t aux;      /* kind-specific: pool index, handle refcount */
};

/* Adds a row.  The row and tracker.c's totals (tl_count_row) change in the
 * same critical section, so whoever holds every shard lock sees totals that
 * agree with the rows.  `fresh`: a new allocation (counts in total_allocs),
 * not a restored row.  False when the table cannot grow. */
bool tl_live_add(const struct tl_live *rec, bool fresh);
/* Removes the row of (space, addr) if its kind is in `kinds_mask` (bit per
 * enum tl_kind) and copies it to *out.  Returns 1 when removed, 0 when not
 * found, -1 when found with another kind (then it stays, copied to *out). */
int tl_live_take(uint8_t space, uint64_t addr, unsigned kinds_mask, struct tl_live *out);
void tl_live_clear(void);
/* tl_live_clear for a forked child: does not touch the parent's arrays. */
void tl_live_reset_after_fork(void);
bool tl_live_lookup(uint8_t space, uint64_t addr, struct tl_live *out);
/* Updates the aux field of a live record; false when not found. */
bool tl_live_set_aux(uint8_t space, uint64_t addr, uint32_t aux);
/* Locks every shard (a consistent view), calls fn per record, unlocks.
 * If fn returns true the record is removed. */
void tl_live_foreach(bool (*fn)(const struct tl_live *, void *), void *arg);
void tl_live_lock_all(void);
void tl_live_unlock_all(void);
size_t tl_live_count(void);
size_t tl_live_memory_bytes(void);
/* Per-shard totals (tracker.c's, kept in the shard): the caller holds the
 * shard lock of `rec` (tl_live_foreach callbacks do). */
struct tl_shard_counts *tl_live_counts_of(const struct tl_live *rec);
/* Folds the per-shard totals now: under every shard lock, taken unless this
 * thread already holds them (inside tl_live_lock_all). */
void tl_live_fold(void);
/* Registers membarrier(2) so that a thread that owns the table can skip the shard
 * locks (live_table.c); without it every access locks.  Idempotent. */
void tl_live_init(void);
/* This thread is inside a live-table section (a signal interrupted it). */
bool tl_live_busy_here(void);
/* This thread owns the table: works on it without locks (tests). */
bool tl_live_owned_here(void);
/* How many times a thread has taken the table over (tests). */
unsigned long tl_live_claims(void);


/* ---- tracker.c ---------------------------------------------------------- */
struct tl_device_stats {
    atomic_llong live_bytes;   /* tracked allocations on this device */
    atomic_llong live_count;
    atomic_llong peak_bytes;
};

struct tl_stats {
    /* Written on every allocation and free while threads share the table:
     * a cache line of their own, so the flags every hook reads (tl_active
     * and the like) do not travel between cores with them. */
    _Alignas(64) atomic_llong live_bytes;
    atomic_llong peak_live_bytes;
    _Alignas(64) atomic_llong live_count;
    atomic_ullong total_allocs;
    atomic_ullong failed_allocs;
    atomic_ullong oom_failures;
    atomic_ullong invalid_frees;
    atomic_ullong teardown_bytes;
    atomic_ullong teardown_allocs;
    atomic_llong async_live_bytes; /* stream-ordered allocations, inside pool reserves */
    struct tl_device_stats device[TL_MAX_DEVICES];
    char pad_after[64]; /* nothing read on the hot path shares the last line */
};
extern struct tl_stats tl_stats;
/* tl_stats.live_bytes and peak_live_bytes are shared atomics, exact at every
 * moment (the peak).  tl_stats.live_count and device[].live_count are
 * folded (tl_live_fold, tl_live_lock_all).  device[].live_bytes and
 * device[].peak_bytes are exact atomics while a budget is set
 * (tl_budget_active, fixed before tracking starts: budget.c reads them on
 * every allocation); otherwise they are folded too, and the current value is
 * tl_live_sum_device_bytes(). */
/* Totals that change on every allocation but are read only by reports and
 * marks live per live-table shard, changed under the shard lock with plain
 * adds (no shared atomics on the hot path), and are folded into tl_stats and
 * the call sites' atomics by tl_counts_fold().  The counters read directly
 * at any time (process and per-device live bytes, the peaks, live_count)
 * stay shared atomics. */
#define TL_SHARD_SITES 32
struct tl_shard_site {
    uint32_t id;     /* call-site id; 0 = empty */
    uint32_t allocs; /* pending total_allocs */
    long long bytes; /* pending live_bytes */
    long long count; /* pending live_count */
    long long unused; /* pads a slot to 32 bytes: a slot's address is a shift of its index */
};
struct tl_shard_counts {
    unsigned long long total_allocs;               /* ever, this shard */
    /* The rows holding memory, each counted once: in its device's count
     * when it has one (a device row: nearly every row), else in other_count;
     * tl_counts_fold_locked sums them. */
    long long device_count[TL_MAX_DEVICES];        /* live rows, per device */
    long long other_count;                         /* live rows in no device's count */
    struct tl_shard_site site[TL_SHARD_SITES];     /* call-site deltas, by id */
    /* Written under the shard lock with relaxed atomic stores (plain moves,
     * no locked instruction), read without it by tl_live_sum_device_bytes below. */
    long long device_bytes[TL_MAX_DEVICES];        /* their bytes, per device */
};
/* A lock-free sum of the per-shard totals: exact when no allocation or free
 * runs concurrently (and each term is a value its shard really had). */
long long tl_live_sum_device_bytes(int device);
/* A device has held tracked memory (set once, never cleared but by fork). */
extern atomic_bool tl_device_used[TL_MAX_DEVICES];
/* tl_count_row (counts.h) adds a row to or drops it from these totals. */
/* Folds every shard's pending totals into tl_stats and the call sites; the
 * caller holds every shard lock (tl_live_lock_all does this itself). */
void tl_counts_fold_locked(struct tl_shard_counts *const *shards, unsigned n);

/* ---- gate.c: the flags every hook reads, on a page a child made without
 * fork handlers finds zero-filled (MADV_WIPEONFORK); see gate.c. */
struct tl_flags_page {
    atomic_bool active; /* tl_active: false before init, after the exit report, in a raw-clone child */
    atomic_bool used;   /* tl_used: some CUDA entry point was reached (preload.c) */
    atomic_bool armed;  /* this is a process we were told about (init, fork handler) */
    char page[4096 - 3 * sizeof(atomic_bool)];
} __attribute__((aligned(4096)));
extern struct tl_flags_page tl_flags;
#define tl_active (tl_flags.active)
#define tl_used (tl_flags.used)
/* At init, before any thread of ours exists: marks the page and arms it. */
void tl_gate_arm(void);
/* Every write of tl_active: the flag, then TL_SLOW_INACTIVE after it.  (A
 * raw-clone child reads tl_active false from its wiped page while the bit
 * stays clear: its hooks never reach the tracker, tl_ensure_init says so.) */
void tl_set_active(bool on);
/* A child nobody told us about (made by raw clone, clone3, _Fork): every
 * hook forwards and nothing is tracked.  Reads the page; where the page
 * could not be marked, calls getpid(), so only slow paths ask. */
bool tl_gate_foreign(void);
bool tl_gate_wiped(void);
/* Fork participant (preload.c's list): the child's page is wiped, the
 * parent's flags are put back as the fork policy says. */
void tl_gate_before_fork(void);
void tl_gate_after_fork(bool follow);
/* exit() has reached our destructor (set there, never cleared): glibc has
 * run or is running the last exit handlers, and refuses new ones once they
 * are done, so a late registration failing is the process going, not an
 * error (live.c). */
extern atomic_bool tl_exit_began;

/* What a thread's hooks read on the hot path, one initial-exec TLS block,
 * so that one load of its offset (from the GOT) reaches all of it.  Each
 * part is its owner's: `table` the live table's (live_table.c, through
 * live_shard.h's tl_table_thread), `hook_depth` the hooks' re-entrancy guard
 * (tl_hook_depth: hooks nest, cudaMalloc -> cuMemAlloc_v2, and only the
 * outermost one records), `oom_pending` oom.c's (tl_oom_pending). */
struct tl_table_tls {
    unsigned token;       /* slot + 1; 0 while the thread has no slot */
    uint32_t tid;         /* gettid(), once known: always while it has a slot (take_slot) */
    atomic_int *busy;     /* &tl_owner_slot[token - 1].busy while it has one */
    unsigned streak;      /* locked operations since the last claim attempt */
    unsigned claim_shift; /* losses so far: claims after CLAIM_AFTER << claim_shift */
    bool in_locked_shard; /* taking, holding or dropping a shard lock */
    bool in_all;          /* the same for every lock (tl_live_lock_all) */
    bool exiting;         /* gave its slot back: never claims again */
    bool claimed;         /* owned the table since its last locked operation */
};
struct tl_thread_hot {
    struct tl_table_tls table;
    int hook_depth;
    bool oom_pending;
};
extern __thread struct tl_thread_hot tl_thread_hot TL_TLS_IE; /* base/upcalls.c */
#define tl_hook_depth (tl_thread_hot.hook_depth)

void tl_track_alloc(enum tl_kind kind, uint8_t space, uint64_t addr, uint64_t size, int device, uint32_t aux);
/* tl_track_alloc(TL_KIND_DEVICE, TL_SPACE_MEM, addr, size, -1, 0): the
 * row of nearly every allocation (cuMemAlloc, cudaMalloc), in a copy of its
 * own with the kind's tests folded. */
void tl_track_device_alloc(uint64_t addr, uint64_t size);
/* Removes a tracked allocation before the real free runs (so no other thread
 * can receive the same address in between).  A pointer we never saw is an
 * invalid free; returns false then.  `kinds_mask` restricts which kinds the
 * freeing API may release (cuMemFreeHost frees only host memory, ...).
 * *out (when not NULL) gets the removed row; its contents are unspecified
 * when false is returned. */
bool tl_track_free(uint8_t space, uint64_t addr, unsigned kinds_mask, struct tl_live *out);
/* tl_track_free of a TL_SPACE_MEM address (cuMemFree, cudaFree and the
 * other frees of the memory space: nearly every free), in a copy of its own
 * with the space's hash folded; `out` is required.  The hooks try
 * tl_track_mem_free_hot (track_hot.h) first. */
bool tl_track_mem_free(uint64_t addr, unsigned kinds_mask, struct tl_live *out);
/* Bit per tl_kind for tl_track_free's kinds_mask. */
#define TL_MASK(k) (1u << (k))
/* Drops a removed row from the totals (call-site, process, device). */
void tl_track_forget(const struct tl_live *rec);
/* Puts back a record tl_track_free removed, when the real free failed. */
void tl_track_restore(const struct tl_live *rec);
void tl_track_failure(int is_oom, enum tl_kind kind, uint64_t size, int device);
void tl_note_context(void *ctx, int device, bool primary);
/* A context was created, made current or retained (the context hooks): the
 * tracker trusts the process to have one context only until it sees a
 * second (tracker.c). */
void tl_context_seen(void *ctx);
/* tl_context_seen of the calling thread's current context, as the driver
 * says (after a pop); asks nothing once the shortcut has ended. */
void tl_context_current_seen(void);
int tl_current_context_index(int *device_out);
/* Context teardown: releases every cuMemAlloc-family allocation of the
 * context (or all primary contexts of `device` when ctx is NULL). */
void tl_teardown_context(void *ctx, int device);
int tl_context_device(uint8_t ctx_index);

struct tl_invalid_free_event {
    uint64_t addr;
    uint32_t callsite;
    uint8_t kind;
};
/* Invalid frees are kept (the first TL_MAX_INVALID) for the report. */
#define TL_MAX_INVALID 1024
size_t tl_invalid_frees(struct tl_invalid_free_event *out, size_t max);
struct tl_callsite *tl_callsite_by_id(uint32_t id);

/* Forked children get a new tid; the cached one would be the parent's.  The
 * contexts' table is locked across the fork (before/after in parent). */
void tl_tracker_before_fork(void);
/* For tests (test_hold.c): runs fn while holding the contexts' table lock. */
void tl_contexts_locked_call(void (*fn)(void));
void tl_tracker_after_fork_in_parent(void);
void tl_tracker_after_fork(void);
/* The live contexts we know of (assemble.c visits each for cuMemGetInfo):
 * stores at most max, returns how many. */
int tl_known_contexts(void **out, int max);

/* ---- owners.c (tl_owner_prepare: record.h) ------------------------------ */
/* Each owner's running live bytes and their highest value, by owner index.
 * The two share a cache line; written as tracker.c writes
 * tl_stats.live_bytes (plain stores while one thread owns the live table,
 * atomics otherwise), by tl_owner_count_row (counts.h). */
#define TL_MAX_OWNERS 128
struct tl_owner_running {
    _Alignas(16) atomic_llong live;
    atomic_llong peak;
};
/* Indexed by a row's owner byte (owner index + 1): [0] takes the rows of
 * no owner, so that counting a row never tests for one; nothing reads it.
 * Defined in tracker.c. */
extern struct tl_owner_running tl_owner_figures[TL_MAX_OWNERS + 1];
/* Decides the owner of a call site (dladdr names; no lock of ours held
 * meanwhile) and keeps it in cs->owner; on the watcher, which must not take
 * the loader's lock, it leaves the site undecided. */
void tl_owner_decide(struct tl_callsite *cs);
/* The owner of a device row whose aux is set: "annotated pools" when a pool
 * holds it as a segment, else the row's own (-1: none).  tl_owners_load
 * hands it to the tracker as tl_held_row_owner (counts.h). */
int tl_owner_of_held_row(const struct tl_live *rec);
/* What counts.h asks for a device row whose aux is set; NULL until the
 * owners are loaded (the row's own owner then).  Defined in tracker.c, so
 * that record/ reads the owners' state and never calls into families/. */
typedef int (*tl_row_owner_fn)(const struct tl_live *rec);
extern _Atomic(tl_row_owner_fn) tl_held_row_owner;

/* Reads the owner rules (tl_opt.owners, then the shipped ones unless
 * TENSORLEAK_DEFAULT_OWNERS is off), at start. */
void tl_owners_load(void);
/* In a forked child: its owners hold nothing yet (fork participant). */
void tl_owners_after_fork(void);
/* The owner class of a call site (budget.c's and growth.c's class order:
 * cache, workspace, library, user); a site without a stack is the user's. */
int tl_owner_class_of(struct tl_callsite *cs);

/* ---- ipc.c (CUDA IPC: what this process exported and opened) ----------- */
/* The identity of a shared allocation: a digest of its 64-byte handle,
 * the same in the exporting and the importing process.  Never 0. */
uint64_t tl_ipc_digest(const void *handle);
/* An allocation at `addr` was exported (cuIpcGetMemHandle succeeded). */
void tl_ipc_note_export(const void *handle, uint64_t addr);
/* A handle was opened at `addr` (a new mapping, not a re-open), and its last
 * reference closed. */
void tl_ipc_note_import(const void *handle, uint64_t addr);
void tl_ipc_note_closed(uint64_t addr);
/* The digest of the mapping opened at `addr`; 0 when none is known. */
uint64_t tl_ipc_import_digest(uint64_t addr);
/* Exports whose allocation is still live: digest, address, and the row's
 * size and call site (stores at most max, returns how many).  The caller
 * holds no live-table lock. */
struct tl_ipc_export {
    uint64_t digest, addr, bytes;
    uint32_t callsite;
};
#define TL_MAX_IPC_EXPORTS 1024
size_t tl_ipc_exports(struct tl_ipc_export *out, size_t max);
void tl_ipc_after_fork(void);

/* ---- budget.c ------------------------------------------------------------ */
extern atomic_bool tl_budget_active;    /* a TENSORLEAK_BUDGET is set (defined in tracker.c, set here) */
extern atomic_bool tl_budget_enforcing; /* ... and TENSORLEAK_BUDGET_ENFORCE */
struct tl_callsite;
void tl_budget_after_alloc(struct tl_callsite *cs, const struct tl_live *rec);
void tl_budget_after_free(const struct tl_live *rec);
bool tl_budget_refuse(enum tl_kind kind, uint64_t bytes);
unsigned long long tl_budget_refusals(void);
unsigned long long tl_budget_crossings(void);
/* One budget on one device that has held memory: the class ("device" for
 * the whole device's budget), its bytes, what is held now, whether it is
 * crossed.  Fills at most max rows; returns how many. */
struct tl_budget_row {
    int device;
    const char *cls;
    uint64_t bytes;
    long long used;
    bool exceeded;
};
int tl_budget_rows(struct tl_budget_row *out, int max);
/* Applies tl_opt.budget and tl_opt.budget_enforce (after tl_options_load). */
void tl_budget_load(void);

/* ---- pools.c -------------------------------------------------------------- */
/* Reserved bytes right now, for the timeline of marks: direct device memory
 * plus every pool's reserve.  Cheaper than a report: no table walk. */
uint64_t tl_pools_reserved_now(void);
/* In a forked child: a fresh lock, and the parent's pools are not alive. */
void tl_pools_after_fork(void);

/* ---- vmm_share.c: exported and imported VMM handles ---------------------- */
struct tl_vmm_share {
    uint64_t handle;
    bool imported;             /* from cuMemImportFromShareableHandle */
    bool known;                /* file_dev/file_ino identify the allocation */
    bool aliased;              /* imported, its bytes counted at another live handle of this process */
    uint64_t file_dev, file_ino; /* the exported/imported descriptor's fstat */
};
/* A handle was exported (`imported` false) or imported; fd is its POSIX
 * descriptor, -1 for other handle types.  Idempotent per handle. */
void tl_vmm_share_note(uint64_t handle, int fd, bool imported);
/* The handle's last reference is gone. */
void tl_vmm_share_forget(uint64_t handle);
bool tl_vmm_share_lookup(uint64_t handle, struct tl_vmm_share *out);
/* Another noted handle of the same allocation as `handle` (same known
 * identity) that counts its bytes (not aliased); false when none. */
bool tl_vmm_share_holder_of(uint64_t handle, uint64_t *holder);
void tl_vmm_share_set_aliased(uint64_t handle, bool aliased);
/* An aliased handle of the same allocation as `handle`, unmarked (it is to
 * count the bytes from now on); false when none. */
bool tl_vmm_share_take_alias(uint64_t handle, uint64_t *alias);
/* Handles noted now (0: nothing to look up). */
size_t tl_vmm_share_count(void);
/* The allocation's size as the descriptor's file tells it; 0 when it does
 * not (a driver whose exported files have no size). */
uint64_t tl_vmm_share_file_size(int fd);
void tl_vmm_share_after_fork(void);

/* ---- growth.c ------------------------------------------------------------- */
/* A mark: the figures growth is judged on, with `label` (signal, interval or
 * the API's). */
void tl_mark(const char *label);
void tl_growth_after_fork(void);

/* ---- snapshot.c (signals, interval reports, the watcher thread) ----------- */
/* At the first CUDA or client API call, and at each later attach (with its
 * settings): the semaphore (created once) and the handlers, no thread. */
void tl_snapshot_start(void);
/* Installs `handler` on `sig` if the program left it at SIG_DFL; false
 * otherwise (*old, when given, gets the program's disposition).  A
 * disposition the program sets concurrently wins. */
struct sigaction;
bool tl_signal_install_if_default(int sig, void (*handler)(int), int flags, struct sigaction *old);
/* Every disposition tl_signal_install_if_default set that is still ours goes
 * back to SIG_DFL (a detach); tl_snapshot_start installs the next attach's. */
void tl_signals_restore(void);
/* At the program's first CUDA call: starts the watcher thread. */
void tl_snapshot_watch(void);
/* Fork participants (preload.c's list says in which order they run): the
 * watcher's unit of work done and work_lock held across the fork; in a
 * child, the watcher's state reset and, in a followed child, a watcher of
 * its own started. */
void tl_snapshot_before_fork(void);
void tl_snapshot_after_fork_in_parent(void);
void tl_snapshot_after_fork_in_child(void);
void tl_snapshot_watch_after_fork(void);
/* Fork participant (preload.c's list): pyframes.c's leaf locks held across
 * the fork, so the child gets them free and its tables consistent. */
void tl_pyframes_before_fork(void);
void tl_pyframes_after_fork(void);
/* Runs `last` between two of the watcher's units of work: a report it
 * writes and tracking turned off there leave the watcher nothing to write
 * after it (a detach). */
void tl_snapshot_stop_writing(void (*last)(void));
/* Wakes the watcher to read the options again (an attach's interval). */
void tl_snapshot_wake(void);
/* True on the watcher thread. */
bool tl_snapshot_on_watcher(void);

/* ---- suppress.c ----------------------------------------------------------- */
/* Reads TENSORLEAK_SUPPRESSIONS' file at start; bad lines warn and are skipped. */
void tl_suppressions_load(void);

/* ---- bridge.c (activation; its gathering functions are in report_gather.h) */
/* Starts the Python bridge when TENSORLEAK_PYTHON is on and an initialized
 * interpreter is in the process (Py_AddPendingCall; cheap after the first). */
void tl_bridge_kick(void);
void tl_bridge_nudge(void);
/* The interpreter is finalizing (Python's atexit ran): no more requests. */
bool tl_bridge_closed(void);
/* In a forked child: the bridge thread does not exist there. */
void tl_bridge_after_fork(void);
/* Around a fork (snapshot.c's handlers, in the parent): while it waits,
 * the watcher's requests to the bridge stop waiting for an answer. */
void tl_bridge_fork_begins(void);
void tl_bridge_fork_ends(void);

/* ---- procaddr.c ----------------------------------------------------------- */
/* Called by dlsym_trampoline.S in place of glibc's dlsym: *result is our hook
 * when `name` is a function we interpose; returns the dlsym to jump to. */
void *tl_dlsym_route(void *handle, const char *name, void **result);

/* ---- symbolize.c -------------------------------------------------------- */
/* Functions the compiler inlined at one return address, innermost first. */
#define TL_MAX_INLINE 8
struct tl_inline_frame {
    const char *function; /* demangled when the name was a C++ one */
    const char *file;
    int line;
    const char *symbol;   /* the raw (mangled) name when it differs, else NULL */
};

struct tl_frame_info {
    uintptr_t address;
    const char *module;   /* full path, or NULL */
    uintptr_t offset;     /* address - module load base */
    const char *function; /* the real (out-of-line) function, or NULL */
    const char *file;     /* where that function is at this address: the */
    int line;             /* call site of the outermost inlined callee, if any */
    int ninline;
    struct tl_inline_frame inl[TL_MAX_INLINE];
    const char *symbol;   /* function's raw (mangled) name when it differs, else NULL */
    bool python;          /* a Python frame: function, file, line; no address */
};
/* A C++ symbol demangled (Itanium ABI, by the process's __cxa_demangle when a
 * C++ runtime is loaded); `name` itself when it is not mangled or cannot be
 * demangled.  Results live as long as the process. */
const char *tl_demangle(const char *name);
/* The process's __cxa_demangle: from the global scope, else from a C++
 * runtime loaded locally (libstdc++, libc++abi); kept once found, NULL
 * while none is loaded.  Looks up (the loader's lock) until found: called
 * from tl_owners_load at start, reports, and owner decisions in the
 * tracked process only (gate.c); on the watcher it only reads what the
 * program's threads found (tl_may_take_loader_lock). */
typedef char *(*tl_demangle_fn)(const char *, char *, size_t *, int *);
tl_demangle_fn tl_demangler(void);
/* One address as the frames a person reads, innermost first: the inlined
 * callees, then the real function.  Returns how many (1..TL_MAX_INLINE+1). */
int tl_frame_expand(const struct tl_frame_info *f, struct tl_inline_frame *out);
/* Begins a symbolization session over the current address space. */
void *tl_symbolizer_open(void);
void tl_symbolize(void *session, uintptr_t address, struct tl_frame_info *out);
void tl_symbolizer_close(void *session);
/* Symbolizes and keeps every call-site frame in [lo, hi) (a library about to
 * be dlclose'd); tl_pinned_frame answers for them once they are unmapped. */
void tl_pin_frames_in_range(uintptr_t lo, uintptr_t hi);
const struct tl_frame_info *tl_pinned_frame(uintptr_t address);

/* ---- assemble.c --------------------------------------------------------- */
enum tl_reason { TL_REASON_EXIT, TL_REASON_SIGNAL, TL_REASON_API, TL_REASON_OOM, TL_REASON_INTERVAL, TL_REASON_BUDGET, TL_REASON_DETACH };
struct tl_oom_event {
    uint64_t bytes;
    uint8_t kind;
    bool observed; /* reported by the framework's own out-of-memory observer (oom.c) */
    bool late;     /* reported after the framework recovered from it and went on (oom.c) */
    int device;
    int nframes;
    uintptr_t frames[TL_MAX_FRAMES];
};
/* Writes a JSON report (and at exit the stderr text report).  Returns 0 on
 * success.  `gate_failed` receives the gate's verdict (exit reports). */
int tl_report_write(enum tl_reason reason, const char *label, const struct tl_oom_event *oom, unsigned *gate_failed);
/* oom.c: a failed allocation for lack of memory, from inside its hook:
 * reported now, or left for the framework's out-of-memory observer when
 * the failure is in its allocator (see oom.c). */
void tl_oom_failed(const struct tl_oom_event *ev);
/* The thread's next successful allocation after a failure left for the
 * framework's observer (tl_oom_pending) reports it. */
void tl_oom_allocated_slow(void);
/* Fatal-signal path: may a report be written now without deadlocking? */
bool tl_report_lock_for_fatal(void);
/* A report (reason "api") to exactly `path`, replacing a file there.  0 on
 * success. */
int tl_report_write_to(const char *label, const char *path);

/* ---- report_name.c ------------------------------------------------------ */
/* Expands TENSORLEAK_OUTPUT's %p %h %r %n %%; returns 0 or -1 if too long. */
int tl_expand_pattern(const char *pattern, unsigned seq, char *out, size_t outlen);
/* Whether `path` is the null device (/dev/null, or a link to it): a report
 * "written" there is no report at all, and nothing is created beside it. */
bool tl_is_null_device(const char *path);
/* Report files: the exit report is written under the plain
 * pattern, every other report under a numbered name (`.N` before a final
 * ".json", or at the end, when the pattern has no %n); `numbered` picks.
 * Returns 0 or -1 if too long. */
int tl_report_path(const char *pattern, unsigned seq, bool numbered, char *out, size_t outlen);

/* ---- live.c (the live state file, read by tensorleak top / exporter) ---- */
/* When the next live update is due (CLOCK_MONOTONIC seconds), or a
 * negative number when live state is off. */
double tl_live_state_next_due(void);
/* Publishes the live state if it is due at `now` (the watcher thread). */
void tl_live_state_tick(double now);
/* In a forked child: the parent's file and lock are not the child's. */
void tl_live_state_after_fork(void);
/* Removes this process's live file now; async-signal-safe (fatal signals). */
void tl_live_state_remove(void);
/* Publishing again after tl_live_state_remove (a second attach). */
void tl_live_state_resume(void);
/* A later attach's prepare, after the earlier attach's file was removed:
 * its live directory (TENSORLEAK_LIVE_DIR) is chosen at its first update. */
void tl_live_state_forget_dir(void);
/* An interval report was written to `path` (assemble.c, report lock held):
 * the oldest beyond TENSORLEAK_KEEP that this process wrote are removed. */
void tl_interval_reports_retain(const char *path);
/* assemble.c: the figures a report would hold now, handed to fn under the
 * report lock (no file written, no report number used); -1 when they could
 * not be gathered. */
struct tl_gather;
int tl_report_with_model(void (*fn)(struct tl_gather *m, void *arg), void *arg);

/* ---- attach_before.c (memory from before tensorleak attach) -------------- */
/* At the attach: each device's per-process figure (NVML). */
void tl_attach_measure_before(void);
/* At commit: the counts a report gives (total, failed, out of memory,
 * invalid frees, teardown; the peaks) start from this attach. */
void tl_attach_reset_counts(void);
/* The total allocations of earlier attaches, which tl_stats.total_allocs
 * (folded from every shard's count since the library loaded) includes. */
unsigned long long tl_attach_total_base(void);
/* In a forked child, whose counts start at 0. */
void tl_attach_total_base_clear(void);
/* A free the table does not know, while attached: true when the driver still
 * knows `addr` as an allocation's base (one from before the attach; its size
 * comes off that figure), false when it is an invalid free. */
bool tl_attach_freed_before(uint8_t space, uint64_t addr);
struct tl_attach_row {
    int device;
    bool known; /* process_bytes is the driver's */
    uint64_t process_bytes, freed_bytes, freed_allocations;
    bool pools_known; /* pools_reserved is the bridge's */
    uint64_t pools_reserved;
};
/* The bridge's first state after the commit is wanted (bridge.c), and its
 * pools' reserved bytes per device, recorded once per attach. */
bool tl_attach_wants_pools(void);
void tl_attach_pools_read(const uint64_t reserved[TL_MAX_DEVICES]);
/* The rows (up to max) and when tracking began; false when not attached. */
bool tl_attach_before_rows(struct tl_attach_row *out, size_t max, size_t *count, long long *when);

/* ---- upcalls.c: the calls that run up a layer ---------------------------
 * Set once by tl_upcalls_connect (preload/connect.c) at the library's start
 * (the constructor, or the first hook or client call before it), before
 * anything can track; each points at the function of its name with tl_ in
 * front.  A call whose comment names a flag is made only while that flag is
 * set: the hot path tests the flag, never the pointer. */
struct tl_upcalls {
    /* record/ (tracker.c) -> families/ and publish/ */
    void (*budget_after_alloc)(struct tl_callsite *cs, const struct tl_live *rec); /* tl_budget_active */
    void (*budget_after_free)(const struct tl_live *rec);                          /* tl_budget_active */
    void (*oom_allocated_slow)(void);                                              /* tl_oom_pending */
    void (*bridge_nudge)(void);                                /* tl_bridge_setup_nudges > 0 */
    bool (*attach_freed_before)(uint8_t space, uint64_t addr); /* tl_attached, a free the table does not know */
    void (*oom_failed)(const struct tl_oom_event *ev);         /* every failure for lack of memory */
    void (*snapshot_watch)(void);                              /* tl_watch_pending: the first tracked allocation */
    void (*owner_decide)(struct tl_callsite *cs);              /* a call site's first row (record.h) */
    /* families/ (and base/: snapshot_on_watcher) -> publish/ */
    int (*report_write)(enum tl_reason reason, const char *label, const struct tl_oom_event *oom, unsigned *gate_failed);
    void (*report_read_devices_now)(void); /* pools.c, at exit */
    bool (*snapshot_on_watcher)(void);     /* bridge.c; lookup.c (base/) */
};
extern struct tl_upcalls tl_upcalls;
/* This thread has a failure waiting for the framework's out-of-memory
 * observer (oom.c); its next successful allocation reports it. */
#define tl_oom_pending (tl_thread_hot.oom_pending)
/* Allocations left that schedule the bridge's PyTorch setup again
 * (bridge.c), 0 once done or in a program without the bridge. */
extern atomic_int tl_bridge_setup_nudges;
/* Why an allocation or a free must take the tracker's general path rather
 * than its hot one, a bit per reason while it holds, so that the hot path
 * tests one word for all of them.  The flags above stay the truth; each
 * writer of one makes its bit follow it after the write
 * (TL_SLOW_PATH_FOLLOW). */
enum {
    TL_SLOW_WATCH = 1u << 0,  /* tl_watch_pending */
    TL_SLOW_BUDGET = 1u << 1, /* tl_budget_active */
    TL_SLOW_NUDGE = 1u << 2,  /* tl_bridge_setup_nudges > 0 */
    TL_SLOW_INACTIVE = 1u << 3, /* !tl_active (tl_set_active); set from the start */
};
extern atomic_uint tl_slow_paths;
static inline void tl_slow_path(unsigned bit, bool on)
{
    if (on)
        atomic_fetch_or(&tl_slow_paths, bit);
    else
        atomic_fetch_and(&tl_slow_paths, ~bit);
}
/* Sets `bit` to what the flag says (`flag_on`, read again), until the flag
 * reads the same after the bit's write: of writers racing on one flag, the
 * last to write the bit saw the flag's last value, so the bit is never left
 * clear while the flag holds (a general path missed) nor set after it
 * (every later allocation sent the long way). */
#define TL_SLOW_PATH_FOLLOW(bit, flag_on)  \
    do {                                   \
        bool on_;                          \
        do {                               \
            on_ = (flag_on);               \
            tl_slow_path((bit), on_);      \
        } while ((flag_on) != on_);        \
    } while (0)
/* Set while this library tracks a process it was attached to (preload.c). */
extern atomic_bool tl_attached;

/* ---- connect.c ------------------------------------------------------------ */
void tl_upcalls_connect(void);

/* ---- preload.c ---------------------------------------------------------- */
/* Starts the library, once: the first hook (tl_ensure_init) or client API
 * call (api.c).  Only preload/ calls it; the layers below are started. */
void tl_init(void);
/* attach.c's start-up: the options from `settings` (NAME=value strings, as
 * the environment), false with the reason in err when one is rejected; then
 * the rest of tl_init, tracking still off (nothing in it can fail). */
bool tl_attach_options(char **settings, char *err, size_t errlen);
void tl_attach_init(void);
/* Tracking from now (the injector wrote the patches); the watcher starts at
 * the next tracked allocation, the Python bridge at the next bytecode. */
void tl_attach_begin_tracking(void);
/* The report of reason "detach", tracking off, the live file removed. */
void tl_attach_end_tracking(void);
extern pthread_mutex_t tl_report_lock;

/* ---- lookup.c: functions of other libraries, found without the hooks --- */
/* dlsym as glibc defines it, resolved by version (GLIBC_2.34, then 2.2.5). */
void *tl_real_dlsym(void *handle, const char *name);
/* glibc's dlclose, not our interposer (modules.c, which pins frames and
 * counts tl_dlcloses); -1 when it cannot be found. */
int tl_real_dlclose(void *handle);
/* A function of the driver the program loaded (NULL when it loaded none or
 * the driver lacks it); answers are kept until the next dlclose. */
void *tl_driver_symbol(const char *name);
extern atomic_uint tl_dlcloses; /* successful dlcloses (modules.c), for tl_driver_symbol */
/* Looks up, in the calling (program) thread, the driver symbols the watcher
 * calls, so that the watcher itself never takes the loader's lock for them. */
void tl_driver_symbols_prefetch(void);
/* After a dlclose (modules.c), in the program's thread: makes every driver
 * symbol asked for so far good again for the watcher, which finds answers
 * from before a dlclose stale and cannot look them up itself (looked up
 * again unless the driver is still loaded where it was). */
void tl_driver_symbols_refresh(void);
/* False on a thread of ours (the watcher): it must not take the loader's
 * lock (dlopen, dlsym, dladdr, dlinfo, dlclose).  A child the program makes
 * with a raw clone (no fork handlers) keeps that lock held if one of our
 * threads held it at the clone, and its exit() waits for it forever in the
 * loader's finalisation.  The program's own threads may: they would take it
 * themselves, and a clone they make is their own doing. */
bool tl_may_take_loader_lock(void);
/* glibc's counts of libraries loaded and unloaded so far
 * (dl_iterate_phdr's dlpi_adds and dlpi_subs): when they change, an address
 * may belong to other code than it did.  Takes the loader's list lock
 * (dl_iterate_phdr's), never its main one: a raw-clone child's exit() does
 * not wait for the list lock. */
void tl_module_loads(unsigned long long counts[2]);
/* The watcher is to start at the next tracked allocation (tracker.c). */
extern atomic_bool tl_watch_pending;

#pragma GCC visibility pop

#endif /* TL_INTERNAL_H */
