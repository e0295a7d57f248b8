/*
 * bridge.c — the runtimes' caching allocators, as their own statistics see
 * them (PyTorch, JAX/XLA, CuPy, RMM).
 *
 * tensorleak sees the segments a caching allocator takes from the driver, not
 * what the cache hands out inside them, which is where a Python program's
 * leak lives.  Only the framework knows that, and only Python can ask it.
 *
 * No C code here calls into Python at report time.  The Python side pushes:
 * a daemon thread of python/tensorleak/bridge.py blocks in
 * tensorleak_bridge_wait() (reached through ctypes.CDLL, so the GIL is
 * released while it waits) until a report or a mark wants state; it reads
 * the frameworks the program imported and hands a JSON text to
 * tensorleak_bridge_submit().  The live state (live.c) asks for figures
 * every interval the same way, with a shorter bound.  The reporting thread
 * waits a bounded time (TL_BRIDGE_WAIT_MS): a program that never releases
 * the GIL gets its report with the last state, and the report says so.
 * A report reads the last state with the layouts, which the figures-only
 * states of marks and the live state never replace.  The bound is for a
 * bridge thread that cannot start reading (the GIL held); once a read has
 * begun, the bridge thread is at work and a mark or report waits for the
 * read to end (bounded by TL_BRIDGE_READ_MS; not in a thread that holds the
 * GIL itself, where the read cannot go on): a framework's read can take
 * seconds (PyTorch's first snapshot of blocks that carry Python frames
 * imports torch._inductor, about 1 s here), and a mark that gave up on it
 * would lose that request's growth.  Reports written inside an
 * allocation hook (out of memory, budget: PyTorch holds its allocator lock
 * around cudaMalloc, and the bridge would need it) and the exit report
 * (written after the interpreter finalized) never wait: they use the last
 * state and say when it was read.
 *
 * Activation without code change: when TENSORLEAK_PYTHON is on (`tensorleak
 * run` sets it) and an initialized interpreter is in the process, the first
 * CUDA call or report schedules, with Py_AddPendingCall (callable without
 * the GIL or a thread state), a call that runs in the main thread with the
 * GIL, puts the package's directory on sys.path and starts the bridge.  Its
 * own failures are caught (a pending call that fails raises in the
 * program); the program's own Ctrl-C or sys.exit, if its signal handler
 * happens to run inside it, is handed on (see boot).
 */
#include "report_gather.h"
#include "report_fields.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TL_BRIDGE_WAIT_MS 2000
/* How long a state read that has begun may take before its waiters use the
 * last state: it guards against a read that stalls (another thread took the
 * GIL and keeps it), not against a slow one. */
#define TL_BRIDGE_READ_MS 30000

static pthread_mutex_t br_lock = PTHREAD_MUTEX_INITIALIZER;
/* See tl_bridge_nudge; oom_module: tensorleak_bridge_oom_observer. */
static char oom_module[64];
static atomic_bool nudges_armed, nudge_in_flight;
#define TL_BRIDGE_NUDGES 200
static pthread_cond_t br_cond;
static pthread_once_t br_cond_once = PTHREAD_ONCE_INIT;
static unsigned long want_seq, served_seq;
/* The pending requests that want the layouts (a report's), not only figures
 * (a mark's, the live state's): the first and the last; 0 = none.  A
 * figures-only state answers the requests before full_from, never one of
 * these. */
static unsigned long full_from, full_to;
static bool waiting_seen; /* a bridge thread has called tensorleak_bridge_wait */
static bool closed;       /* the interpreter is finalizing: no more answers */
/* Two slots, so that a figures-only state (a mark's, or the live state's
 * every interval) never replaces the figures-and-layout state a report
 * waited for: `state` is the last state submitted, of either kind (marks
 * and the live state read it); `full_state` the last with the layouts
 * (reports read it), often the same object.  Each NULL until submitted;
 * their times are CLOCK_REALTIME at submission. */
static json_t *state, *full_state;
static double state_time, full_state_time;
/* The request a waiter stopped waiting for, and the bridge's last sign of
 * life then. */
static unsigned long gave_up_seq;
static struct timespec gave_up_life;
/* The latest request whose state is being read (tensorleak_bridge_reading,
 * called just before the read), and, in the thread reading it, that
 * request.  Its submission answers that request and those before it, never
 * a later one: the bridge thread may read the state in the middle of a
 * request, whenever the program lets go of the GIL, so a state read then
 * does not answer a mark made after it.  A mark or report joins a pending
 * request only while nobody has begun to read for it. */
static unsigned long taken_seq;
static __thread unsigned long reading_for TL_TLS_IE;
/* The bridge's signs of life (CLOCK_MONOTONIC, under br_lock): a read in
 * progress and when it began (tensorleak_bridge_reading to the next
 * submission), and the last time a read began or a state was submitted.
 * A waiter's bound counts from the latest of them (see wait_until). */
static bool read_in_progress;
static struct timespec read_began, last_life;
/* The verdict of this thread's last refresh, for the report it writes next
 * (refresh and apply run in the same thread; marks and reports of other
 * threads have their own). */
static __thread char last_note[160]; /* why it had no fresh state, or "" */
static __thread bool last_fresh;
/* What this thread submitted since its last refresh: 0 nothing, 1 figures,
 * 2 figures and layouts. */
static __thread int submitted_here;
/* This thread's last refresh asked for figures only (a mark, the live
 * state): its model reads `state`; otherwise (a report, or no refresh) it
 * reads `full_state`. */
static __thread bool figures_request TL_TLS_IE;
/* PyGILState_Check: does the calling thread hold the GIL (0 in a thread
 * the interpreter never bound, the watcher's). */
static int (*gil_held_here)(void);
static atomic_bool kicked;    /* an interpreter was seen and the switch read */
static atomic_bool scheduled; /* the bridge's start was scheduled */
static atomic_bool bad_json_once, boot_once;
/* A fork is waiting for the watcher's work (snapshot.c).  os.fork() holds
 * the GIL, so the bridge cannot answer the watcher until the fork is done:
 * the watcher stops waiting for it and uses the last state instead. */
static atomic_int forks_waiting;

static void init_cond(void)
{
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&br_cond, &a);
    pthread_condattr_destroy(&a);
}

static struct timespec plus_ms(struct timespec t, long ms)
{
    t.tv_sec += ms / 1000;
    t.tv_nsec += (ms % 1000) * 1000000L;
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    return t;
}

static bool later_than(struct timespec a, struct timespec b)
{
    return a.tv_sec != b.tv_sec ? a.tv_sec > b.tv_sec : a.tv_nsec > b.tv_nsec;
}

static double now_realtime(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* ---- exports for the Python side ---------------------------------------- */

/* Blocks until a report wants the full framework state (1: figures and
 * layouts) or a mark wants its figures (2: statistics only, cheap), until
 * `timeout_ms` passed (0) or the bridge was closed (-1). */
TL_EXPORT int tensorleak_bridge_wait(int timeout_ms);
int tensorleak_bridge_wait(int timeout_ms)
{
    pthread_once(&br_cond_once, init_cond);
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until = plus_ms(until, timeout_ms < 0 ? 0 : timeout_ms);
    char module[sizeof oom_module];
    if (!tl_bridge_oom_module(module, sizeof module) && !atomic_exchange(&nudges_armed, true)) {
        atomic_store(&tl_bridge_setup_nudges, TL_BRIDGE_NUDGES); /* a bridge runs: set PyTorch up when ready */
        TL_SLOW_PATH_FOLLOW(TL_SLOW_NUDGE, atomic_load(&tl_bridge_setup_nudges) > 0);
    }
    pthread_mutex_lock(&br_lock);
    waiting_seen = true;
    int rc = 0;
    for (;;) {
        if (closed) {
            rc = -1;
            break;
        }
        if (want_seq != served_seq) {
            rc = full_to > served_seq ? 1 : 2;
            break;
        }
        if (pthread_cond_timedwait(&br_cond, &br_lock, &until) == ETIMEDOUT)
            break;
    }
    pthread_mutex_unlock(&br_lock);
    return rc;
}

/* The caller is about to read the framework state: what it submits next
 * answers the requests made until now, not later ones. */
TL_EXPORT void tensorleak_bridge_reading(void);
void tensorleak_bridge_reading(void)
{
    pthread_once(&br_cond_once, init_cond);
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    pthread_mutex_lock(&br_lock);
    taken_seq = reading_for = want_seq;
    read_in_progress = true;
    read_began = last_life = now;
    pthread_cond_broadcast(&br_cond); /* waiters extend their bound */
    pthread_mutex_unlock(&br_lock);
}

/* Stores the framework state (a JSON object with "time", "pools", "errors")
 * and wakes a report waiting for it.  0, or -1 when the text is not JSON. */
TL_EXPORT int tensorleak_bridge_submit(const char *text);
static long long int_or(json_t *o, const char *key, long long dflt);

int tensorleak_bridge_submit(const char *text)
{
    pthread_once(&br_cond_once, init_cond);
    json_error_t err;
    json_t *j = text ? json_loads(text, 0, &err) : NULL;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (!json_is_object(j)) {
        json_decref(j);
        tl_warn(&bad_json_once, "the Python bridge sent state that is not a JSON object; framework pools are left out");
        pthread_mutex_lock(&br_lock);
        read_in_progress = false; /* that read is over, with nothing to show */
        pthread_mutex_unlock(&br_lock);
        return -1;
    }
    json_t *errors = json_object_get(j, "errors");
    if (json_array_size(errors) > 0) {
        /* Once on stderr; every report lists them under bridge.errors. */
        static atomic_bool once;
        tl_warn(&once, "the Python bridge could not read a framework: %s (reports list it under bridge.errors)",
                json_string_value(json_array_get(errors, 0)) ? json_string_value(json_array_get(errors, 0)) : "?");
    }
    if (TL_UNLIKELY(tl_attach_wants_pools())) {
        uint64_t reserved[TL_MAX_DEVICES] = {0};
        size_t i;
        json_t *p;
        json_array_foreach(json_object_get(j, "pools"), i, p) {
            long long d = int_or(p, "device", -1), bytes = int_or(p, "reserved_bytes", 0);
            if (d >= 0 && d < TL_MAX_DEVICES && bytes > 0)
                reserved[d] += (uint64_t)bytes;
        }
        tl_attach_pools_read(reserved);
    }
    double t = now_realtime();
    bool full = !json_is_false(json_object_get(j, "full"));
    pthread_mutex_lock(&br_lock);
    /* The old states are freed after the lock: each slot always names a
     * whole object, also in a child forked while one is being freed (the
     * child keeps the pointer, not the freeing thread). */
    json_t *old = state, *old_full = NULL;
    read_in_progress = false;
    last_life = now;
    state = j;
    state_time = t;
    if (full) {
        old_full = full_state;
        full_state = json_incref(j);
        full_state_time = t;
    }
    /* The bridge thread answers the request it took; any other thread (a
     * Python mark, reading the state itself) every request made so far.
     * Figures alone answer only the requests before the first that wants
     * the layouts. */
    unsigned long answers = reading_for ? reading_for : want_seq;
    reading_for = 0;
    if (!full && full_from && answers >= full_from)
        answers = full_from - 1;
    if (answers > served_seq)
        served_seq = answers;
    if (full_to && served_seq >= full_to)
        full_from = full_to = 0;
    else if (full_from && served_seq >= full_from)
        full_from = served_seq + 1; /* those between still wait for layouts */
    pthread_cond_broadcast(&br_cond);
    pthread_mutex_unlock(&br_lock);
    json_decref(old);
    json_decref(old_full);
    submitted_here = full ? 2 : 1;
    return 0;
}

/* The bridge registered a framework's out-of-memory observer for the
 * allocator in the modules matching `module_glob` (PyTorch's
 * "libc10_cuda.so*"); NULL or "" when it is gone.  A failed allocation from
 * that allocator then waits for the observer's report (oom.c). */
static pthread_mutex_t oom_module_lock = PTHREAD_MUTEX_INITIALIZER;

TL_EXPORT void tensorleak_bridge_oom_observer(const char *module_glob);
void tensorleak_bridge_oom_observer(const char *module_glob)
{
    pthread_mutex_lock(&oom_module_lock);
    snprintf(oom_module, sizeof oom_module, "%s", module_glob && strlen(module_glob) < sizeof oom_module ? module_glob : "");
    pthread_mutex_unlock(&oom_module_lock);
    atomic_store(&tl_bridge_setup_nudges, 0); /* set up: no more nudges */
    TL_SLOW_PATH_FOLLOW(TL_SLOW_NUDGE, atomic_load(&tl_bridge_setup_nudges) > 0);
}

bool tl_bridge_oom_module(char *out, size_t len)
{
    pthread_mutex_lock(&oom_module_lock);
    snprintf(out, len, "%s", oom_module);
    pthread_mutex_unlock(&oom_module_lock);
    return out[0] != 0;
}

/* The interpreter is finalizing: the last state stays, no more requests. */
TL_EXPORT void tensorleak_bridge_close(void);
void tensorleak_bridge_close(void)
{
    pthread_once(&br_cond_once, init_cond);
    pthread_mutex_lock(&br_lock);
    closed = true;
    pthread_cond_broadcast(&br_cond);
    pthread_mutex_unlock(&br_lock);
    tensorleak_bridge_oom_observer(NULL); /* no observer runs after finalization */
}

/* Python's atexit ran (tensorleak_bridge_close): the program serves no more
 * requests.  Read by the watcher, which takes no interval mark from then on. */
bool tl_bridge_closed(void)
{
    pthread_once(&br_cond_once, init_cond);
    pthread_mutex_lock(&br_lock);
    bool c = closed;
    pthread_mutex_unlock(&br_lock);
    return c;
}

/* ---- requests from reports and marks ------------------------------------ */

/* Reports take the bridge's lock with a bound: the fatal-signal report may
 * interrupt a thread that holds it (a submit in progress), itself included;
 * it then goes without framework state rather than hang. */
static bool lock_bounded(void)
{
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += 1;
    return pthread_mutex_clocklock(&br_lock, CLOCK_MONOTONIC, &until) == 0;
}

/* How long a live-state refresh waits at most: it runs in the watcher
 * thread, which also takes signal snapshots and interval reports, and the
 * next interval asks again. */
#define TL_BRIDGE_LIVE_WAIT_MS 250

static void refresh(bool may_wait, bool full, int wait_ms, bool live);

void tl_bridge_refresh(bool may_wait)
{
    refresh(may_wait, true, TL_BRIDGE_WAIT_MS, false);
}

void tl_bridge_refresh_mark(bool may_wait)
{
    refresh(may_wait, false, TL_BRIDGE_WAIT_MS, false);
}

void tl_bridge_refresh_live(double interval)
{
    int ms = (int)(interval * 500.0); /* half an interval */
    refresh(true, false, ms < 1 ? 1 : ms < TL_BRIDGE_LIVE_WAIT_MS ? ms : TL_BRIDGE_LIVE_WAIT_MS, true);
}

/* Until when a request made at `asked` is waited for (under br_lock):
 * `wait_ms` after the request or after the bridge's last sign of life,
 * whichever is later, and while a read is in progress until
 * TL_BRIDGE_READ_MS after it began; never beyond TL_BRIDGE_READ_MS after
 * the request.  A bridge thread that keeps answering, slowly, is waited
 * for; one that cannot start is not.  The live state keeps its short
 * bound: the watcher has other work, and the next interval asks again.
 * `holds_gil`: the waiting thread holds the GIL (a report from a C call
 * that keeps it, ctypes.PyDLL): a read begun before it took the GIL cannot
 * go on until it lets go, so that read extends nothing. */
static struct timespec wait_until(struct timespec asked, int wait_ms, bool live, bool holds_gil)
{
    struct timespec until = plus_ms(asked, wait_ms);
    if (live)
        return until;
    struct timespec t = plus_ms(last_life, wait_ms);
    if (later_than(t, until))
        until = t;
    t = plus_ms(read_began, TL_BRIDGE_READ_MS);
    if (read_in_progress && !holds_gil && later_than(t, until))
        until = t;
    t = plus_ms(asked, TL_BRIDGE_READ_MS);
    return later_than(until, t) ? t : until;
}

/* Asks the bridge thread for a state (`full`: with the layouts) and waits
 * for it (see wait_until).  `live`: the live state's request, whose
 * timeout never makes a later mark or report skip its own wait. */
static void refresh(bool may_wait, bool full, int wait_ms, bool live)
{
    if (may_wait) /* not from inside a hook or a fatal signal: kicking looks symbols up */
        tl_bridge_kick();
    pthread_once(&br_cond_once, init_cond);
    int mine = submitted_here;
    submitted_here = 0;
    figures_request = !full;
    last_fresh = false;
    snprintf(last_note, sizeof last_note, "the bridge's state was busy: last state used");
    bool on_watcher = tl_upcalls.snapshot_on_watcher();
    bool holds_gil = may_wait && gil_held_here && gil_held_here();
    if (!lock_bounded())
        return;
    if (mine >= (full ? 2 : 1) && !closed) {
        /* tensorleak.mark()/snapshot() read the state in this thread just
         * before calling us: nothing to wait for. */
        last_fresh = true;
        last_note[0] = 0;
    } else if (!waiting_seen && !atomic_load(&scheduled)) {
        snprintf(last_note, sizeof last_note, "%s",
                 state ? "the Python bridge thread is not running" : "no Python bridge in this process");
    } else if (closed) {
        snprintf(last_note, sizeof last_note, "last state, read at exit before the interpreter finalized");
    } else if (!may_wait) {
        snprintf(last_note, sizeof last_note, "report written inside an allocation or at exit: last state used");
    } else if (want_seq != served_seq && gave_up_seq == want_seq && !later_than(last_life, gave_up_life)) {
        /* Someone already waited the whole bound for this request, and the
         * bridge has shown no life since: the GIL is still held.  Waiting
         * again would stall every report. */
        snprintf(last_note, sizeof last_note, "the Python bridge did not answer (GIL held): last state used");
    } else {
        /* Join a request in progress when its answer serves us too: one
         * nobody has begun to read for, and that wants the layouts if we do. */
        bool join = want_seq != served_seq && want_seq != taken_seq && (full_to == want_seq || !full);
        unsigned long mine_seq = join ? want_seq : ++want_seq;
        if (full) {
            if (!full_from)
                full_from = mine_seq;
            full_to = mine_seq;
        }
        pthread_cond_broadcast(&br_cond);
        struct timespec asked;
        clock_gettime(CLOCK_MONOTONIC, &asked);
        bool cut_by_fork = false;
        while (served_seq < mine_seq && !closed && !(cut_by_fork = on_watcher && atomic_load(&forks_waiting) > 0)) {
            /* Recomputed at each wake-up: a read that began extends it. */
            struct timespec until = wait_until(asked, wait_ms, live, holds_gil), now;
            if (pthread_cond_timedwait(&br_cond, &br_lock, &until) != ETIMEDOUT)
                continue;
            clock_gettime(CLOCK_MONOTONIC, &now);
            if (!later_than(wait_until(asked, wait_ms, live, holds_gil), now))
                break;
        }
        if (served_seq >= mine_seq) {
            last_fresh = true;
            last_note[0] = 0;
        } else if (cut_by_fork) {
            snprintf(last_note, sizeof last_note, "a fork was waiting for this report: last state used");
        } else if (closed) {
            snprintf(last_note, sizeof last_note, "last state, read at exit before the interpreter finalized");
        } else {
            if (!live) {
                gave_up_seq = want_seq;
                gave_up_life = last_life;
            }
            if (read_in_progress && !live && !holds_gil)
                snprintf(last_note, sizeof last_note,
                         "the Python bridge's state read did not finish within %d ms: last state used",
                         TL_BRIDGE_READ_MS);
            else
                snprintf(last_note, sizeof last_note,
                         "the Python bridge did not answer within %d ms (GIL held?): last state used", wait_ms);
        }
    }
    pthread_mutex_unlock(&br_lock);
}

/* ---- the state as report rows ------------------------------------------- */

static long long int_or(json_t *o, const char *key, long long dflt)
{
    json_t *v = json_object_get(o, key);
    return json_is_integer(v) ? (long long)json_integer_value(v) : dflt;
}

/* A Python frame in the shape pyframes.c gives Python frames of native
 * stacks: module = file, no address or offset, "python": true. */
static json_t *frame_json(json_t *f)
{
    json_t *o = json_object();
    json_t *fn = json_object_get(f, "function"), *file = json_object_get(f, "file");
    json_object_set(o, "module", json_is_string(file) ? file : json_null());
    json_object_set(o, "function", json_is_string(fn) ? fn : json_null());
    json_object_set(o, "file", json_is_string(file) ? file : json_null());
    json_object_set_new(o, "line", json_integer(int_or(f, "line", 0)));
    json_object_set_new(o, "python", json_boolean(json_is_true(json_object_get(f, "python"))));
    return o;
}

json_t *tl_bridge_stack_json(json_t *frames)
{
    json_t *stack = json_array();
    size_t i;
    json_t *f;
    json_array_foreach(frames, i, f)
        if (json_is_object(f))
            json_array_append_new(stack, frame_json(f));
    return stack;
}

/* A framework's Python sites in the model's shape (pool_site: bytes,
 * count, a stack of frame_json's frames). */
static json_t *sites_from(json_t *sites)
{
    json_t *out = json_array();
    size_t i;
    json_t *s;
    json_array_foreach(sites, i, s) {
        json_t *o = json_object();
        json_object_set_new(o, "bytes", json_integer(int_or(s, "bytes", 0)));
        json_object_set_new(o, "count", json_integer(int_or(s, "count", 0)));
        json_object_set_new(o, "stack", tl_bridge_stack_json(json_object_get(s, "frames")));
        json_array_append_new(out, o);
    }
    return out;
}

/* A framework's layout in the model's shape (into `view`): bases in hex, as
 * annotated pools', and the first TL_LAYOUT_MAX blocks, layout_truncated
 * when there were more.  Neither field without a layout. */
static void layout_into(json_t *view, json_t *src)
{
    json_t *layout = json_object_get(src, "layout"), *out, *seg, *b;
    json_object_del(view, "layout");
    json_object_del(view, "layout_truncated");
    if (!json_is_array(layout) || !(out = json_array()))
        return;
    bool truncated = json_is_true(json_object_get(src, "layout_truncated"));
    size_t i, k, kept = 0;
    json_array_foreach(layout, i, seg) {
        json_t *so = json_object(), *blocks = json_array();
        char base[32];
        snprintf(base, sizeof base, "0x%llx", (unsigned long long)int_or(seg, "base", 0));
        json_object_update(so, seg); /* its bytes, as the framework gave them */
        json_object_set_new(so, "base", json_string(base));
        json_array_foreach(json_object_get(seg, "blocks"), k, b) {
            if (kept++ >= TL_LAYOUT_MAX) {
                truncated = true;
                break;
            }
            json_array_append(blocks, b);
        }
        json_object_set_new(so, "blocks", blocks);
        json_array_append_new(out, so);
    }
    json_object_set_new(view, "layout", out);
    json_object_set_new(view, "layout_truncated", json_boolean(truncated));
}

/* The model's fields of framework pool `p` besides the figures its row
 * holds.  The model's pool reader (report_read.c, the pool table) reads
 * them from the framework's object, its layout and sites put in the model's
 * shape: which framework, its free blocks, its byte counts (null: not
 * published), layout and Python lines.  A value the model cannot hold
 * leaves its field out, the others kept; `refused` names the first for the
 * report's one warning.  The bridge's own fields follow: where the state
 * came from and when, and the peaks and segments the framework does not
 * publish (unknown: null, never an invented 0).  `mem` holds the strings
 * and the JSON they point into.  NULL when out of memory. */
static struct tl_pool *model_pool_from(struct tl_report *mem, json_t *p, int device, double read_at,
                                       const char **refused)
{
    const struct tl_table *t = report_field_table(&tl_report_table, "pools");
    struct tl_pool *o = report_alloc(mem, sizeof *o);
    json_t *view = json_object(); /* the framework's object, sharing its values */
    json_object_update(view, p);
    if (!mem->source)
        mem->source = json_array();
    if (json_array_append_new(mem->source, view) != 0 || !t || !o)
        return NULL;
    layout_into(view, p);
    if (json_object_get(p, "sites"))
        json_object_set_new(view, "sites", sites_from(json_object_get(p, "sites")));
    /* The schema has no null for these: a framework's null says nothing. */
    static const char *const never_null[] = {"framework", "free_blocks"};
    for (size_t k = 0; k < sizeof never_null / sizeof never_null[0]; k++)
        if (json_is_null(json_object_get(view, never_null[k])))
            json_object_del(view, never_null[k]);
    char why[200];
    if (!report_read_fields(mem, view, t,
                            TL_BIT(POOL, reserved_bytes) | TL_BIT(POOL, allocated_bytes) | TL_BIT(POOL, free_bytes) |
                                TL_BIT(POOL, layout) | TL_BIT(POOL, layout_truncated) | TL_BIT(POOL, framework) |
                                TL_BIT(POOL, free_blocks) | TL_BIT(POOL, sites),
                            o, why, sizeof why))
        *refused = report_strdup(mem, why);
    o->source = "bridge";
    o->read_at = read_at;
    o->stale = !last_fresh;
    o->state = last_fresh ? "fresh" : closed ? "final" : "stale";
    o->host = device < 0;
    o->seen.present |= TL_BIT(POOL, source) | TL_BIT(POOL, read_at) | TL_BIT(POOL, stale) | TL_BIT(POOL, state) |
                       (o->host ? TL_BIT(POOL, host) : 0);
    /* Peaks and segments only some frameworks publish (CuPy and RMM no
     * peaks; JAX, CuPy and RMM no segments): unknown unless given, and
     * utilization with the peaks. */
    uint64_t unknown = 0;
    if (!json_is_integer(json_object_get(p, "peak_allocated_bytes")))
        unknown |= TL_BIT(POOL, peak_allocated_bytes) | TL_BIT(POOL, utilization);
    if (!json_is_integer(json_object_get(p, "peak_reserved_bytes")))
        unknown |= TL_BIT(POOL, peak_reserved_bytes) | TL_BIT(POOL, utilization);
    if (!json_is_integer(json_object_get(p, "segments")))
        unknown |= TL_BIT(POOL, segments);
    o->seen.present |= unknown;
    o->seen.null |= unknown;
    return o;
}

/* What the out-of-memory post-mortem reads of a pool besides its figures
 * (oom.c): the bytes of segments without a live block, and the live
 * blocks' Python sites in segments with free space.  NULL when neither. */
static json_t *oom_fields_from(json_t *src)
{
    json_t *empty = json_object_get(src, "empty_cache_bytes"), *pinning = json_object_get(src, "pinning");
    if (!json_is_integer(empty) && !json_is_array(pinning))
        return NULL;
    json_t *o = json_object();
    if (json_is_integer(empty))
        json_object_set(o, "empty_cache_bytes", empty);
    if (json_is_array(pinning))
        json_object_set_new(o, "pinning", sites_from(pinning));
    return o;
}

/* Does this pool's reserve sit inside device memory we tracked as direct
 * allocations (segments cudaMalloc'ed, cuMemAlloc'ed or cuMemCreate'd)?  Not
 * for PyTorch's cudaMallocAsync backend (the driver's pool row already holds
 * those tensors) nor for host (pinned) pools. */
static bool inside_tracked_device_memory(json_t *p)
{
    if (json_is_false(json_object_get(p, "device_memory")))
        return false;
    json_t *fw = json_object_get(p, "framework");
    const char *mode = json_string_value(json_object_get(fw, "mode"));
    return !(mode && !strcmp(mode, "cudaMallocAsync"));
}

/* The state this thread's model shows and when it was submitted (under
 * br_lock): a report that got its answer, the last state with the layouts
 * (a figures-only state submitted since never replaces it); otherwise the
 * last state of either kind (a mark's or the live state's request, or a
 * report that did not wait or got no answer: the newest figures). */
static json_t *shown_state(double *when)
{
    bool layouts = !figures_request && last_fresh && full_state;
    *when = layouts ? full_state_time : state_time;
    return layouts ? full_state : state;
}

static json_t *bridge_object(json_t *shown, double when)
{
    json_t *b = json_object();
    const char *st = !shown ? "none" : last_fresh ? "fresh" : closed ? "final" : "stale";
    json_object_set_new(b, "state", json_string(st));
    json_object_set_new(b, "read_at", shown ? json_real(when) : json_null());
    json_object_set_new(b, "note", last_note[0] ? json_string(last_note) : json_null());
    json_t *errors = shown ? json_object_get(shown, "errors") : NULL;
    json_object_set_new(b, "errors", json_is_array(errors) ? json_deep_copy(errors) : json_array());
    return b;
}

void tl_bridge_apply(struct tl_gather *m)
{
    if (!lock_bounded())
        return;
    if (!state && !waiting_seen && !atomic_load(&scheduled)) {
        pthread_mutex_unlock(&br_lock);
        return; /* not a Python program, or the bridge is off: nothing to say */
    }
    double shown_time;
    json_t *shown = shown_state(&shown_time);
    m->bridge = bridge_object(shown, shown_time);
    json_t *pools = shown ? json_object_get(shown, "pools") : NULL;
    size_t n = json_array_size(pools);
    struct tl_pool_row *grown = n ? realloc(m->pools, (m->npools + n + 1) * sizeof *grown) : NULL;
    if (n && !grown) {
        pthread_mutex_unlock(&br_lock);
        return;
    }
    if (grown)
        m->pools = grown;
    if (n && !m->bridge_memory)
        m->bridge_memory = calloc(1, sizeof *m->bridge_memory); /* NULL: the pools without their own fields */
    uint64_t gap_by_dev[TL_MAX_DEVICES] = {0}, reserved_by_dev[TL_MAX_DEVICES] = {0};
    bool unknown_by_dev[TL_MAX_DEVICES] = {false};
    size_t i;
    json_t *p;
    json_array_foreach(pools, i, p) {
        if (!json_is_object(p))
            continue;
        struct tl_pool_row *row = &m->pools[m->npools++];
        memset(row, 0, sizeof *row);
        const char *name = json_string_value(json_object_get(p, "name"));
        const char *kind = json_string_value(json_object_get(p, "kind"));
        snprintf(row->name, sizeof row->name, "%s", name ? name : "framework pool");
        /* The kind must outlive the state (a later submit frees it). */
        static const char *const kinds[] = {"pytorch", "jax", "cupy", "cupy_pinned", "rmm"};
        row->kind = "framework";
        for (size_t k = 0; kind && k < sizeof kinds / sizeof kinds[0]; k++)
            if (!strcmp(kind, kinds[k]))
                row->kind = kinds[k];
        row->device = (int)int_or(p, "device", 0);
        row->reserved = (uint64_t)int_or(p, "reserved_bytes", 0);
        row->allocated = (uint64_t)int_or(p, "allocated_bytes", 0);
        row->free = (uint64_t)int_or(p, "free_bytes",
                                     row->reserved > row->allocated ? (long long)(row->reserved - row->allocated) : 0);
        long long largest = int_or(p, "largest_free_block", -1);
        row->largest_free = largest > 0 ? (uint64_t)largest : 0;
        row->layout_unknown = largest < 0; /* CuPy, cudaMallocAsync: the framework does not say */
        /* The framework's own figure is the same formula; computed here as
         * every other pool's is. */
        row->fragmentation = largest < 0 ? 0.0 : tl_fragmentation(row->largest_free, row->free);
        row->peak_allocated = (uint64_t)int_or(p, "peak_allocated_bytes", 0);
        row->peak_reserved = (uint64_t)int_or(p, "peak_reserved_bytes", 0);
        row->utilization = row->peak_reserved ? (double)row->peak_allocated / (double)row->peak_reserved : 0.0;
        row->segments = (uint64_t)int_or(p, "segments", 0);

        if (m->bridge_memory)
            row->bridged = model_pool_from(m->bridge_memory, p, row->device, shown_time, &row->refused);
        row->oom_extra = oom_fields_from(p);

        if (row->device >= 0 && row->device < TL_MAX_DEVICES && inside_tracked_device_memory(p)) {
            gap_by_dev[row->device] += row->reserved > row->allocated ? row->reserved - row->allocated : 0;
            reserved_by_dev[row->device] += row->reserved;
            m->devices[row->device].present = true;
            if (row->layout_unknown)
                unknown_by_dev[row->device] = true;
        }
    }
    pthread_mutex_unlock(&br_lock);

    /* Each device's allocated becomes what the allocators hand out, so its
     * gap is the caches'; reserved stays the driver's.  Its largest free
     * block and fragmentation come later from every pool that knows its
     * layout (assemble.c's figures pass), these framework pools included when
     * they fit. */
    for (int d = 0; d < TL_MAX_DEVICES; d++) {
        struct tl_device_row *r = &m->devices[d];
        /* A state that holds more than the driver now gave this process
         * was read before the framework let memory go (at exit, say): its
         * pools stay as read, the device keeps what tensorleak tracks. */
        bool fits = reserved_by_dev[d] <= r->reserved;
        if (!fits && m->bridge) {
            char note[160];
            snprintf(note, sizeof note,
                     "device %d: the frameworks' pools as read hold more than the driver now does; left out of its summary", d);
            json_array_append_new(json_object_get(m->bridge, "errors"), json_string(note));
        }
        uint64_t gap = !fits ? 0 : gap_by_dev[d] < r->allocated ? gap_by_dev[d] : r->allocated;
        r->allocated -= gap;
        r->frameworks_unfit = !fits;
        r->layout_unknown |= fits && unknown_by_dev[d];
    }
}

void tl_bridge_foreach_series(void (*pool)(const char *, const char *, long long, void *),
                              void (*site)(const char *, const char *, json_t *, long long, void *), void *arg)
{
    if (!lock_bounded())
        return;
    json_t *pools = state ? json_object_get(state, "pools") : NULL;
    size_t i;
    json_t *p;
    json_array_foreach(pools, i, p) {
        const char *name = json_string_value(json_object_get(p, "name"));
        const char *kind = json_string_value(json_object_get(p, "kind"));
        if (!name || !kind)
            continue;
        pool(name, kind, int_or(p, "allocated_bytes", 0), arg);
        json_t *sites = json_object_get(p, "sites");
        size_t k;
        json_t *s;
        json_array_foreach(sites, k, s) {
            json_t *frames = json_object_get(s, "frames");
            char *text = json_dumps(frames, JSON_COMPACT);
            if (!text)
                continue;
            /* A site is its stack; 32 frames of site-packages paths run to
             * kilobytes, so it is keyed by a hash of them (FNV-1a, 64 bits),
             * with its pool's name. */
            uint64_t h = 0xcbf29ce484222325ull;
            for (const char *c = text; *c; c++)
                h = (h ^ (unsigned char)*c) * 0x100000001b3ull;
            free(text);
            char key[96];
            snprintf(key, sizeof key, "%016llx %.60s", (unsigned long long)h, name);
            site(key, name, frames, int_or(s, "bytes", 0), arg);
        }
    }
    pthread_mutex_unlock(&br_lock);
}

/* ---- activation ---------------------------------------------------------- */

/* The directory that holds the tensorleak package: beside the library in a
 * wheel (site-packages/tensorleak/lib/libtensorleak.so), else the source
 * tree's python/ for a build-tree library. */
static bool package_dir(char *out, size_t len)
{
    Dl_info info;
    char path[PATH_MAX];
    if (dladdr((void *)package_dir, &info) && info.dli_fname && realpath(info.dli_fname, path)) {
        for (int up = 0; up < 3; up++) {
            char *slash = strrchr(path, '/');
            if (!slash)
                break;
            *slash = 0;
            if (up == 1) {
                const char *base = strrchr(path, '/');
                if (!base || strcmp(base + 1, "tensorleak") != 0)
                    break;
            }
            if (up == 2) {
                snprintf(out, len, "%s", path);
                return true;
            }
        }
    }
#ifdef TL_PYTHON_SOURCE_DIR
    char probe[PATH_MAX];
    snprintf(probe, sizeof probe, "%s/tensorleak/bridge.py", TL_PYTHON_SOURCE_DIR);
    if (access(probe, R_OK) == 0) {
        snprintf(out, len, "%s", TL_PYTHON_SOURCE_DIR);
        return true;
    }
#endif
    return false;
}

static char boot_dir[PATH_MAX];
/* The library's own path when `tensorleak attach` loaded it: that copy is
 * not in the program's global scope, where the bridge otherwise finds the
 * exports (ctypes.CDLL(None)), so the bridge opens it by name (RTLD_NOLOAD:
 * this copy, never a second).  Empty for a preloaded library. */
static char boot_library[PATH_MAX];

/* Runs in the main thread with the GIL (a pending call).  The bridge's own
 * failure is one stderr line and 0: never raised in the program.  Python
 * runs the program's signal handlers at any bytecode boundary of the main
 * thread, this call's included: a KeyboardInterrupt (Ctrl-C) or a
 * SystemExit (a SIGTERM handler calling sys.exit) raised here is the
 * program's, and -1 hands it on, raised in the program where this call ran,
 * as it would have been without tensorleak.  Swallowing it would keep a
 * program running that was told to stop. */
static int boot(void *arg)
{
    (void)arg;
    atomic_store(&nudge_in_flight, false);
    typedef void *(*add_module_fn)(const char *);
    typedef void *(*dict_fn)(void *);
    typedef void *(*run_fn)(const char *, int, void *, void *, void *);
    typedef void (*decref_fn)(void *);
    typedef int (*matches_fn)(void *);
    typedef void (*clear_fn)(void);
    add_module_fn add_module = (add_module_fn)tl_real_dlsym(RTLD_DEFAULT, "PyImport_AddModule");
    dict_fn module_dict = (dict_fn)tl_real_dlsym(RTLD_DEFAULT, "PyModule_GetDict");
    run_fn run = (run_fn)tl_real_dlsym(RTLD_DEFAULT, "PyRun_StringFlags");
    decref_fn decref = (decref_fn)tl_real_dlsym(RTLD_DEFAULT, "Py_DecRef");
    matches_fn matches = (matches_fn)tl_real_dlsym(RTLD_DEFAULT, "PyErr_ExceptionMatches");
    clear_fn clear = (clear_fn)tl_real_dlsym(RTLD_DEFAULT, "PyErr_Clear");
    void **exc_exception = (void **)tl_real_dlsym(RTLD_DEFAULT, "PyExc_Exception");
    if (!add_module || !module_dict || !run || !decref || !matches || !clear || !exc_exception) {
        tl_warn(&boot_once, "the Python bridge did not start (the interpreter's C API is not exported)");
        return 0;
    }
    /* exec in a dict of its own: nothing is bound in the program's __main__.
     * sys.path gets the directory appended, so a tensorleak the program
     * installed itself wins.  Only Exception is caught: see above. */
    char code[2 * PATH_MAX + 1024];
    snprintf(code, sizeof code,
             "__import__('builtins').exec(\"\"\"\n"
             "import sys\n"
             "try:\n"
             "    if not sys.is_finalizing():  # shutting down: too late, and nothing to say\n"
             "        d = '%s'\n"
             "        if d and d not in sys.path:\n"
             "            sys.path.append(d)\n"
             "        import tensorleak.bridge\n"
             "        lib = '%s'\n"
             "        if lib:\n"
             "            tensorleak.bridge.activate(library=lib)\n"
             "        else:\n"
             "            tensorleak.bridge.activate()\n"
             "except Exception as e:\n"
             "    try:\n"
             "        sys.stderr.write('tensorleak: the Python bridge did not start: %%r\\\\n' %% (e,))\n"
             "    except Exception:\n"
             "        pass\n"
             "\"\"\", {'__name__': '_tensorleak_boot'})\n",
             boot_dir, boot_library);
    void *main_module = add_module("__main__"); /* borrowed */
    void *globals = main_module ? module_dict(main_module) : NULL;
    if (!globals) {
        clear();
        tl_warn(&boot_once, "the Python bridge did not start");
        return 0;
    }
    void *result = run(code, 257 /* Py_file_input */, globals, globals, NULL);
    if (result) {
        decref(result);
        return 0;
    }
    if (!matches(*exc_exception))
        return -1; /* the program's KeyboardInterrupt or SystemExit, still set */
    clear();
    tl_warn(&boot_once, "the Python bridge did not start");
    return 0;
}

/* PyTorch's CUDA is initialized after the first CUDA call that started the
 * bridge, and only then take its out-of-memory observer and history: the
 * next allocations (up to TL_BRIDGE_NUDGES, one at a time) schedule the start
 * again, which sets PyTorch up once it is ready
 * (tensorleak.bridge.activate), until the bridge says the observer is
 * registered.  So the program's first PyTorch allocation is followed, at its
 * next bytecode, by the setup: an out-of-memory right after it is reported
 * with the figures of that moment.  Armed once a bridge thread waits. */
static int (*pending_call)(int (*)(void *), void *);

void tl_bridge_nudge(void)
{
    if (atomic_exchange(&nudge_in_flight, true))
        return; /* one at a time: the allocations until it runs add none */
    int left = atomic_fetch_sub(&tl_bridge_setup_nudges, 1) - 1;
    if (left <= 0)
        TL_SLOW_PATH_FOLLOW(TL_SLOW_NUDGE, atomic_load(&tl_bridge_setup_nudges) > 0);
    if (left < 0 || !pending_call || pending_call(boot, NULL) != 0)
        atomic_store(&nudge_in_flight, false); /* a full queue refuses it: the next allocation tries again */
}

/* A pool that grows without Python lines (PyTorch without its history)
 * would be a growth row without the line to fix.  Turning the history on
 * from the start costs every program (about 13 % per request); turned on
 * once a pool's growth is suspected, it costs only the programs that grow,
 * and the blocks they keep from then on name their line.  Set once; the
 * Python side reads it (tensorleak_bridge_lines_wanted) at its next state
 * read, and at once through the pending start, so that the next request's
 * blocks are already recorded. */
static atomic_bool lines_wanted;

TL_EXPORT int tensorleak_bridge_lines_wanted(void);
int tensorleak_bridge_lines_wanted(void)
{
    return atomic_load(&lines_wanted);
}

void tl_bridge_want_lines(void)
{
    if (atomic_exchange(&lines_wanted, true) || !pending_call)
        return;
    if (atomic_exchange(&nudge_in_flight, true))
        return; /* a start is already scheduled: it reads the flag */
    if (pending_call(boot, NULL) != 0)
        atomic_store(&nudge_in_flight, false); /* the next state read turns it on */
}

void tl_bridge_kick(void)
{
    static atomic_bool not_python;
    if (atomic_load_explicit(&kicked, memory_order_relaxed) || atomic_load_explicit(&not_python, memory_order_relaxed))
        return;
    typedef int (*initialized_fn)(void);
    typedef int (*pending_fn)(int (*)(void *), void *);
    initialized_fn initialized = (initialized_fn)tl_real_dlsym(RTLD_DEFAULT, "Py_IsInitialized");
    pending_fn pending = (pending_fn)tl_real_dlsym(RTLD_DEFAULT, "Py_AddPendingCall");
    if (!initialized || !pending) {
        /* No interpreter in the process at its first CUDA call: a C or C++
         * program; never looked up again. */
        atomic_store(&not_python, true);
        return;
    }
    if (!initialized())
        return; /* not yet: a later call tries again */
    if (atomic_exchange(&kicked, true))
        return;
    /* Also for a bridge the program starts itself (import tensorleak). */
    gil_held_here = (int (*)(void))tl_real_dlsym(RTLD_DEFAULT, "PyGILState_Check");
    if (tl_opt.python_rejected[0]) {
        tl_warn(NULL, "TENSORLEAK_PYTHON=%s is not 0 or 1; the Python bridge stays off", tl_opt.python_rejected);
        return;
    }
    if (!tl_opt.python)
        return;
    if (!package_dir(boot_dir, sizeof boot_dir) || strpbrk(boot_dir, "'\\\"\n")) {
        boot_dir[0] = 0; /* `import tensorleak` may still work from sys.path */
    }
    Dl_info self;
    boot_library[0] = 0;
    if (atomic_load(&tl_attached) && dladdr((void *)tl_bridge_kick, &self) && self.dli_fname &&
        !realpath(self.dli_fname, boot_library))
        boot_library[0] = 0;
    if (strpbrk(boot_library, "'\\\"\n"))
        boot_library[0] = 0; /* the bridge stays off rather than run a path as code */
    pending_call = pending;
    if (pending(boot, NULL) != 0)
        tl_warn(NULL, "the Python bridge could not be scheduled (Py_AddPendingCall failed)");
    else
        atomic_store(&scheduled, true);
}

void tl_bridge_fork_begins(void)
{
    atomic_fetch_add(&forks_waiting, 1);
    pthread_once(&br_cond_once, init_cond);
    if (lock_bounded()) { /* under the lock: a waiter sees the flag or the wake-up */
        pthread_cond_broadcast(&br_cond);
        pthread_mutex_unlock(&br_lock);
    }
}

void tl_bridge_fork_ends(void)
{
    atomic_fetch_sub(&forks_waiting, 1);
}

void tl_bridge_after_fork(void)
{
    /* The bridge thread does not exist in a forked child, and the only
     * thread here is the one that forked. */
    atomic_store(&forks_waiting, 0);
    pthread_mutex_init(&br_lock, NULL);
    init_cond();
    waiting_seen = false;
    want_seq = served_seq = gave_up_seq = taken_seq = 0;
    read_in_progress = false;
    atomic_store(&nudge_in_flight, false); /* the parent's scheduled start does not run here */
    full_from = full_to = 0;
    reading_for = 0;
}
