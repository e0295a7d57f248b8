/*
 * upcalls.c — the calls that run up a layer, and the flags that gate them.
 *
 * A layer of src/ names only the layers below it (docs/architecture.md).
 * What recording and the families must have done by a layer above them (the
 * budget checked after an allocation, the out-of-memory post-mortem, the
 * watcher started, a report written) goes through a pointer of tl_upcalls,
 * which preload/connect.c sets once, at the library's start, before anything
 * can track.  The flags that the hot path tests before such a call live here
 * too, below both the tracker that reads them and the family that sets them:
 * a process that needs none of these calls pays one test of each flag.
 */
#include "tl_internal.h"

struct tl_upcalls tl_upcalls;

__thread struct tl_thread_hot tl_thread_hot TL_TLS_IE;
atomic_int tl_bridge_setup_nudges;
atomic_uint tl_slow_paths = TL_SLOW_INACTIVE;
atomic_bool tl_attached;
