/*
 * connect.c — the up-calls of the layers below (base/upcalls.c) pointed at
 * the functions of the layers above that answer them.
 *
 * Called once, first in the library's start (init_quiet: from the
 * constructor, or from the first hook or client call that runs before it;
 * a copy that `tensorleak attach` dlopen'ed runs its constructor at the
 * dlopen).  Tracking starts later (tl_active), the watcher and the bridge
 * later still, so no up-call can be made before its pointer is set.  A
 * forked child inherits them.
 */
#include "report_gather.h"

void tl_upcalls_connect(void)
{
    tl_upcalls = (struct tl_upcalls){
        .budget_after_alloc = tl_budget_after_alloc,
        .budget_after_free = tl_budget_after_free,
        .oom_allocated_slow = tl_oom_allocated_slow,
        .bridge_nudge = tl_bridge_nudge,
        .attach_freed_before = tl_attach_freed_before,
        .oom_failed = tl_oom_failed,
        .snapshot_watch = tl_snapshot_watch,
        .owner_decide = tl_owner_decide,
        .report_write = tl_report_write,
        .report_read_devices_now = tl_report_read_devices_now,
        .snapshot_on_watcher = tl_snapshot_on_watcher,
    };
}
