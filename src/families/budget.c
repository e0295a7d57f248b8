/*
 * budget.c — keep each runtime inside its memory budget.
 *
 * Seed article 002: "define a memory budget per runtime so one service's
 * reservation does not silently prevent another from starting".
 *
 *   TENSORLEAK_BUDGET=6G                      device memory per device
 *   TENSORLEAK_BUDGET=user:2G,cache:6G        per owner class (owners.c)
 *   TENSORLEAK_BUDGET=8G,user:2G              both
 *   TENSORLEAK_BUDGET_ENFORCE=1               refuse what would cross
 *
 * Device memory is what the process holds through tracked allocations on
 * that device (cuMemAlloc family, stream-ordered allocations, VMM handles;
 * not pinned host memory, mappings or address ranges).  When a budget is
 * crossed: one warning naming the allocation that crossed it, and a report
 * (reason "budget"); the next warning comes after usage fell back below it.
 * Enforced: the allocation that would cross fails with out-of-memory as if
 * the device were full — the answer caching allocators handle by freeing
 * their cache and retrying — without reaching the driver; counted.
 *
 * Per-class accounting needs each call site's owner class at allocation
 * time; owners.c answers it once per call site from dladdr (module and
 * exported symbol names), which covers the default rules.
 */
#include "report_gather.h"

#include <stdlib.h>
#include <string.h>

enum { CLASSES = TL_BUDGET_CLASSES }; /* cache, workspace, library, user: owners.c's order */

atomic_bool tl_budget_enforcing; /* tl_budget_active is tracker.c's */
static uint64_t total_budget;            /* 0 = none */
static uint64_t class_budget[CLASSES];   /* 0 = none */
static atomic_llong class_live[CLASSES][TL_MAX_DEVICES];
static atomic_bool over_total[TL_MAX_DEVICES];
static atomic_bool over_class[CLASSES][TL_MAX_DEVICES];
static atomic_ullong refusals, crossings;

static bool counts_as_device_memory(uint8_t kind)
{
    return tl_holds_device_memory(kind);
}

void tl_budget_load(void)
{
    /* A later attach starts its own count, with no budget crossed yet. */
    atomic_store(&crossings, 0);
    atomic_store(&refusals, 0);
    for (int d = 0; d < TL_MAX_DEVICES; d++) {
        atomic_store(&over_total[d], false);
        for (int c = 0; c < CLASSES; c++)
            atomic_store(&over_class[c][d], false);
    }
    total_budget = tl_opt.budget.total;
    memcpy(class_budget, tl_opt.budget.per_class, sizeof class_budget);
    bool any = total_budget != 0;
    for (int c = 0; c < CLASSES; c++)
        any |= class_budget[c] != 0;
    bool enforce = tl_opt.budget_enforce;
    if (enforce && !any)
        tl_warn(NULL, "TENSORLEAK_BUDGET_ENFORCE is set but TENSORLEAK_BUDGET is not; nothing to enforce");
    atomic_store(&tl_budget_active, any);
    TL_SLOW_PATH_FOLLOW(TL_SLOW_BUDGET, atomic_load(&tl_budget_active));
    atomic_store(&tl_budget_enforcing, any && enforce);
}

static int clamp_device(int d)
{
    return d >= 0 && d < TL_MAX_DEVICES ? d : 0;
}

/* The allocation's site, for the warning: its innermost frame (a rare
 * event, so a full symbolization is affordable). */
static void describe(struct tl_callsite *cs, char *out, size_t len)
{
    void *session = cs && cs->nframes ? tl_symbolizer_open() : NULL;
    if (!session) {
        snprintf(out, len, "an allocation without a stack (TENSORLEAK_DEPTH=0)");
        return;
    }
    struct tl_frame_info f;
    tl_symbolize(session, cs->frames[0], &f);
    const char *base = f.module ? strrchr(f.module, '/') : NULL;
    if (f.file && f.line > 0)
        snprintf(out, len, "%s %s:%d (%s+0x%lx)", f.function ? f.function : "??", f.file, f.line,
                 base ? base + 1 : f.module ? f.module : "?", (unsigned long)f.offset);
    else
        snprintf(out, len, "%s (%s+0x%lx)", f.function ? f.function : "??", base ? base + 1 : f.module ? f.module : "?",
                 (unsigned long)f.offset);
    tl_symbolizer_close(session);
}

static void crossed(const char *what, uint64_t budget, long long now, int device, struct tl_callsite *cs, bool refused)
{
    char site[256], b[32], n[32];
    describe(cs, site, sizeof site);
    tl_format_size(budget, b, sizeof b);
    tl_format_size((uint64_t)(now > 0 ? now : 0), n, sizeof n);
    atomic_fetch_add(&crossings, 1);
    tl_warn(NULL, "%s budget of %s on device %d %s at %s (%s held)", what, b, device,
            refused ? "would be crossed: allocation refused" : "crossed", site, n);
    tl_upcalls.report_write(TL_REASON_BUDGET, what, NULL, NULL);
}

/* After a tracked allocation (tracker.c); no table lock is held. */
void tl_budget_after_alloc(struct tl_callsite *cs, const struct tl_live *rec)
{
    if (!counts_as_device_memory(rec->kind))
        return;
    int d = clamp_device(rec->device);
    int c = tl_owner_class_of(cs);
    long long cls_now = atomic_fetch_add(&class_live[c][d], (long long)rec->size) + (long long)rec->size;
    long long dev_now = atomic_load(&tl_stats.device[d].live_bytes);
    if (total_budget && dev_now > (long long)total_budget && !atomic_exchange(&over_total[d], true))
        crossed("device", total_budget, dev_now, d, cs, false);
    if (class_budget[c] && cls_now > (long long)class_budget[c] && !atomic_exchange(&over_class[c][d], true))
        crossed(tl_budget_class_names[c], class_budget[c], cls_now, d, cs, false);
}

/* After a tracked free, teardown or restore; may run under table locks, so
 * only counters and flags here. */
void tl_budget_after_free(const struct tl_live *rec)
{
    if (!counts_as_device_memory(rec->kind))
        return;
    int d = clamp_device(rec->device);
    int c = tl_owner_class_of(tl_callsite_by_id(rec->callsite));
    long long cls_now = atomic_fetch_sub(&class_live[c][d], (long long)rec->size) - (long long)rec->size;
    long long dev_now = atomic_load(&tl_stats.device[d].live_bytes);
    if (total_budget && dev_now <= (long long)total_budget)
        atomic_store(&over_total[d], false);
    if (class_budget[c] && cls_now <= (long long)class_budget[c])
        atomic_store(&over_class[c][d], false);
}

/* Enforcement, before the driver is called: true when `bytes` more of
 * `kind` would cross a budget; the hook then answers out-of-memory. */
bool tl_budget_refuse(enum tl_kind kind, uint64_t bytes)
{
    if (!counts_as_device_memory((uint8_t)kind))
        return false;
    int d = -1;
    tl_current_context_index(&d);
    d = clamp_device(d);
    long long dev_now = atomic_load(&tl_stats.device[d].live_bytes);
    struct tl_callsite *cs = NULL;
    const char *what = NULL;
    uint64_t budget = 0;
    long long would = 0;
    bool any_class = false;
    for (int c = 0; c < CLASSES; c++)
        any_class |= class_budget[c] != 0;
    if (total_budget && dev_now + (long long)bytes > (long long)total_budget) {
        what = "device";
        budget = total_budget;
        would = dev_now + (long long)bytes;
    } else if (any_class || total_budget) {
        uintptr_t frames[TL_MAX_FRAMES];
        int n = tl_stack_capture(frames, tl_opt.depth);
        cs = tl_callsite_intern(kind, frames, n);
        int c = tl_owner_class_of(cs);
        long long cls_now = atomic_load(&class_live[c][d]);
        if (class_budget[c] && cls_now + (long long)bytes > (long long)class_budget[c]) {
            what = tl_budget_class_names[c];
            budget = class_budget[c];
            would = cls_now + (long long)bytes;
        }
    }
    if (!what)
        return false;
    atomic_fetch_add(&refusals, 1);
    if (!cs) {
        uintptr_t frames[TL_MAX_FRAMES];
        int n = tl_stack_capture(frames, tl_opt.depth);
        cs = tl_callsite_intern(kind, frames, n);
    }
    atomic_bool *flag = !strcmp(what, "device") ? &over_total[d] : &over_class[strcmp(what, "cache") == 0 ? 0 : strcmp(what, "workspace") == 0 ? 1 : strcmp(what, "library") == 0 ? 2 : 3][d];
    if (!atomic_exchange(flag, true))
        crossed(what, budget, would, d, cs, true);
    return true;
}

unsigned long long tl_budget_refusals(void)
{
    return atomic_load(&refusals);
}

unsigned long long tl_budget_crossings(void)
{
    return atomic_load(&crossings);
}

/* The budgets as the live state shows them (live.c): per device that has
 * held memory, the device budget and each class budget that is set. */
int tl_budget_rows(struct tl_budget_row *out, int max)
{
    int n = 0;
    for (int d = 0; d < TL_MAX_DEVICES; d++) {
        if (!atomic_load(&tl_device_used[d]))
            continue;
        if (total_budget && n < max)
            out[n++] = (struct tl_budget_row){d, "device", total_budget, atomic_load(&tl_stats.device[d].live_bytes),
                                              atomic_load(&over_total[d])};
        for (int c = 0; c < CLASSES; c++)
            if (class_budget[c] && n < max)
                out[n++] = (struct tl_budget_row){d, tl_budget_class_names[c], class_budget[c],
                                                  atomic_load(&class_live[c][d]), atomic_load(&over_class[c][d])};
    }
    return n;
}
