/*
 * oom.c — the out-of-memory post-mortem: when its report is written, and
 * what it concludes.
 *
 * When.  A failed allocation is reported at once, from inside the hook,
 * while the state that failed is intact — except one a framework will
 * report itself: PyTorch calls its out-of-memory observers after its
 * allocator let go of its lock, and the Python bridge registers one
 * (tensorleak_bridge_oom) that reads the framework state in the
 * failing thread and then has the report written, so the report holds
 * PyTorch's pool as it was at the failure.  Inside the hook it could only
 * have the last state read: PyTorch holds its allocator lock around
 * cudaMalloc, and reading the pool needs it.  A failure in the framework's
 * allocator (a frame of the module the bridge named) waits for the observer
 * in this thread's `pending` slot.  PyTorch fails cudaMalloc up to three
 * times for one request (after freeing one cached block, then its whole
 * cache) before it gives up; the same request failing again replaces the
 * slot.  A pending failure nobody claims — PyTorch's retry succeeded — is
 * reported at this thread's next allocation or failure, with the state
 * then, as any failure inside a hook.
 *
 * What.  tl_oom_analysis() reads the request against the failing device's
 * free memory and the free bytes of every pool on it: "not_enough_memory"
 * when the request exceeds everything free plus every cache, else
 * "fragmentation" (the caches' free bytes would hold it, no block is large
 * enough); and what would serve it: torch.cuda.empty_cache() (when the
 * device's free memory plus PyTorch's segments without a live block hold
 * the request), PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (when
 * PyTorch's native pool holds the free bytes), or only a smaller request.
 * Each pool gets the same verdict where its figures allow ("fits" when a
 * free block of its own is large enough), "unknown" with the reason where
 * they do not.  A framework pool read before the failure (a stale state)
 * is never used for it: its figures are null and its note says why.
 */
#include "report_gather.h"
#include "report_fields.h"

#include <dlfcn.h>
#include <fnmatch.h>
#include <string.h>

/* On the heap (thread_block.c), allocated at the thread's first pending
 * failure: as TLS it would be 2 KiB of the static-TLS surplus a dlopen'ed
 * copy (tensorleak attach) must fit in.  Read only while tl_oom_pending. */
static __thread TL_TLS_IE struct tl_oom_event *pending_slot;
#define pending (*pending_slot)

static void write_pending(void)
{
    struct tl_oom_event ev = pending;
    ev.late = true;
    tl_oom_pending = false;
    tl_upcalls.report_write(TL_REASON_OOM, NULL, &ev, NULL);
}

/* Does the failed call come from the framework allocator that will report
 * it (a frame in the module the bridge named)?  Only at a failure. */
static bool framework_will_report(const struct tl_oom_event *ev)
{
    char glob[64];
    if (!tl_bridge_oom_module(glob, sizeof glob))
        return false;
    for (int i = 0; i < ev->nframes; i++) {
        Dl_info info;
        if (!dladdr((void *)ev->frames[i], &info) || !info.dli_fname)
            continue;
        const char *base = strrchr(info.dli_fname, '/');
        if (fnmatch(glob, base ? base + 1 : info.dli_fname, 0) == 0)
            return true;
    }
    return false;
}

void tl_oom_failed(const struct tl_oom_event *ev)
{
    if (tl_oom_pending && (pending.bytes != ev->bytes || pending.device != ev->device))
        write_pending(); /* another request: the one before was recovered from */
    if (framework_will_report(ev) &&
        (pending_slot || tl_thread_block((void **)&pending_slot, sizeof *pending_slot))) {
        pending = *ev;
        tl_oom_pending = true;
        return;
    }
    tl_oom_pending = false;
    tl_upcalls.report_write(TL_REASON_OOM, NULL, ev, NULL);
}

void tl_oom_allocated_slow(void)
{
    if (tl_oom_pending)
        write_pending();
}

/* Called by the framework's out-of-memory observer (the bridge registered
 * it) in the failing thread, just after it submitted the state it read
 * there: writes the out-of-memory report of the `bytes` request on `device`
 * now.  0 when written. */
TL_EXPORT int tensorleak_bridge_oom(int device, unsigned long long bytes);
int tensorleak_bridge_oom(int device, unsigned long long bytes)
{
    if (!atomic_load(&tl_active) || device < 0 || device >= TL_MAX_DEVICES)
        return -1;
    struct tl_oom_event ev;
    if (tl_oom_pending && pending.device == device) {
        ev = pending; /* the hook's: the native stack of the failing cudaMalloc */
        tl_oom_pending = false;
    } else {
        /* The framework refused without a failed driver call (PyTorch's
         * per-process memory fraction): this thread's stack now. */
        memset(&ev, 0, sizeof ev);
        ev.bytes = bytes;
        ev.kind = TL_KIND_DEVICE;
        ev.device = device;
        ev.nframes = tl_stack_capture(ev.frames, tl_opt.depth);
        atomic_fetch_add_explicit(&tl_stats.oom_failures, 1, memory_order_relaxed);
    }
    ev.bytes = bytes; /* the framework's request, rounded as it asked the driver */
    ev.observed = true;
    return tl_upcalls.report_write(TL_REASON_OOM, NULL, &ev, NULL);
}

/* ---- the verdict ---------------------------------------------------------- */

static json_t *bytes_or_null(bool known, uint64_t v)
{
    return known ? json_integer((json_int_t)v) : json_null();
}

static bool is_framework(const struct tl_pool_row *p)
{
    return p->bridged != NULL; /* bridge.c's rows carry their own fields */
}

static const char *state_of(const struct tl_pool_row *p)
{
    return is_framework(p) ? p->bridged->state : NULL;
}

/* `field`: a TL_BIT(POOL, ...) the framework may leave unpublished (null). */
static bool known_field(const struct tl_pool_row *p, uint64_t field)
{
    return !(p->bridged && (p->bridged->seen.null & field));
}

json_t *tl_oom_analysis(const struct tl_gather *m)
{
    const struct tl_oom_event *ev = m->oom;
    if (!ev)
        return NULL;
    uint64_t want = ev->bytes;
    int dev = ev->device;
    const struct tl_device_row *dr = dev >= 0 && dev < TL_MAX_DEVICES ? &m->devices[dev] : NULL;
    bool free_known = dr && dr->present && dr->have_info;
    uint64_t dfree = free_known ? dr->free : 0;

    json_t *o = json_object(), *pools = json_array();
    uint64_t cache_free = 0, empty = 0, torch_native_free = 0;
    bool cache_free_unknown = false, empty_known = false, torch_native = false, any_fits = false;
    for (size_t i = 0; i < m->npools; i++) {
        const struct tl_pool_row *p = &m->pools[i];
        if (p->device != dev || (p->bridged && p->bridged->host))
            continue;
        json_t *row = json_object();
        json_object_set_new(row, "name", json_string(p->name));
        json_object_set_new(row, "kind", json_string(p->kind));
        const char *state = state_of(p);
        json_object_set_new(row, "state", state ? json_string(state) : json_null());
        bool stale = state && strcmp(state, "fresh") != 0;
        bool figures = !stale && !p->figures_unknown && known_field(p, TL_BIT(POOL, free_bytes)) &&
                       known_field(p, TL_BIT(POOL, reserved_bytes)) && known_field(p, TL_BIT(POOL, allocated_bytes));
        bool largest_known = figures && !p->layout_unknown;
        json_t *oom_extra = p->oom_extra;
        json_t *e = oom_extra ? json_object_get(oom_extra, "empty_cache_bytes") : NULL;
        bool e_known = !stale && json_is_integer(e);
        json_object_set_new(row, "reserved_bytes", bytes_or_null(figures, p->reserved));
        json_object_set_new(row, "allocated_bytes", bytes_or_null(figures, p->allocated));
        json_object_set_new(row, "free_bytes", bytes_or_null(figures, p->free));
        json_object_set_new(row, "largest_free_block", bytes_or_null(largest_known, p->largest_free));
        json_object_set_new(row, "empty_cache_bytes", bytes_or_null(e_known, e_known ? (uint64_t)json_integer_value(e) : 0));
        const char *verdict = "unknown", *note = NULL;
        if (stale)
            note = "the framework's state was not read at the failure (only PyTorch's out-of-memory observer reads it "
                   "there); its last figures are in the report's pools";
        else if (!figures)
            note = "the pool does not publish its byte counts";
        else if (largest_known && p->largest_free >= want)
            verdict = "fits";
        else if (free_known && dfree + p->free < want)
            verdict = "not_enough_memory";
        else if (!free_known)
            note = "the driver's free memory is unknown";
        else if (largest_known)
            verdict = "fragmentation";
        else
            note = "the pool does not publish its largest free block";
        json_t *pin = oom_extra && !stale ? json_object_get(oom_extra, "pinning") : NULL;
        if (!note && !pin && !strcmp(verdict, "fragmentation") && !strcmp(p->kind, "pytorch"))
            note = "TENSORLEAK_TORCH_HISTORY=1 names the live blocks that pin its segments";
        json_object_set_new(row, "verdict", json_string(verdict));
        json_object_set_new(row, "note", note ? json_string(note) : json_null());
        json_object_set(row, "pinning", json_is_array(pin) ? pin : json_null());
        json_array_append_new(pools, row);

        any_fits |= !strcmp(verdict, "fits");
        if (figures)
            cache_free += p->free;
        else
            cache_free_unknown = true;
        bool torch = !strcmp(p->kind, "pytorch");
        if (torch && e_known) {
            empty += (uint64_t)json_integer_value(e);
            empty_known = true;
        }
        if (torch && figures && p->bridged) {
            const char *mode = p->bridged->framework.mode;
            if (mode && !strcmp(mode, "native")) {
                torch_native = true;
                torch_native_free += p->free;
            }
        }
    }

    /* A cache whose pool nobody read (PyTorch's before the bridge had its
     * state): its segments are on the device, its free bytes unknown. */
    uint64_t cache_reserved = 0, pooled = 0;
    for (size_t i = 0; i < m->nowner_devices; i++)
        if (m->owner_devices[i].device == dev && m->owner_devices[i].cls && !strcmp(m->owner_devices[i].cls, "cache"))
            cache_reserved += (uint64_t)m->owner_devices[i].live_bytes;
    for (size_t i = 0; i < m->npools; i++)
        if (m->pools[i].device == dev && is_framework(&m->pools[i]))
            pooled += m->pools[i].reserved;
    if (cache_reserved > pooled)
        cache_free_unknown = true;

    const char *verdict = "unknown", *remedy = NULL, *note = NULL;
    if (tl_holds_host_memory(ev->kind))
        note = "host memory: the device's figures do not apply";
    else if (ev->kind == TL_KIND_VMM_RESERVATION)
        note = "address space, not memory: the device's figures do not apply";
    else if (want == 0)
        note = "the request's size is unknown (the driver sizes a CUDA array)";
    else if (ev->late)
        note = "written after the framework recovered from the failure (it freed cached memory and went on): "
               "the figures are of that later moment";
    else if (!free_known)
        note = "the driver's free memory at the failure is unknown";
    else if (dfree + cache_free < want && cache_free_unknown)
        note = "a cache's free bytes are unknown (a pool not read at the failure, or a cache without one): "
               "the request may fit in them";
    else if (dfree + cache_free < want) {
        verdict = "not_enough_memory";
        remedy = "smaller_request";
    } else if (dfree >= want && !any_fits) {
        note = "the driver had that much free memory yet refused it: its own free memory is fragmented, or a "
               "limit refused it (a per-process memory fraction, a pool's size limit)";
    } else {
        verdict = "fragmentation";
        if (empty_known && empty > 0 && dfree + empty >= want)
            remedy = "empty_cache";
        else if (torch_native && dfree + torch_native_free >= want)
            remedy = "expandable_segments";
        else
            remedy = "smaller_request";
    }
    json_object_set_new(o, "device_free", bytes_or_null(free_known, dfree));
    json_object_set_new(o, "verdict", json_string(verdict));
    json_object_set_new(o, "remedy", remedy ? json_string(remedy) : json_null());
    json_object_set_new(o, "empty_cache_bytes", bytes_or_null(empty_known, empty));
    json_object_set_new(o, "note", note ? json_string(note) : json_null());
    json_object_set_new(o, "pools", pools);
    return o;
}
