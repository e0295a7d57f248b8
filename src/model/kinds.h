/*
 * kinds.h — the allocation kinds: one row per kind, and everything that
 * lists kinds (the enum, the reports' names, the headline's groups, which
 * kinds hold memory and where, the sentence a kind's size is said apart
 * with) generated from the rows.  A new kind is one row here plus the hooks
 * that record it.  Shared by the preload library and the CLI: the library
 * asks by enum on the hot path (constant-folded), the CLI by a report's
 * name.
 *
 * A fork treats every kind alike: the child's live table starts empty
 * (device memory is not inherited, and the parent's rows must not be
 * reported twice), so the rows carry no fork column.
 */
#ifndef TENSORLEAK_KINDS_H
#define TENSORLEAK_KINDS_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* What a kind's bytes are: memory on a device (counted there as its own
 * reservation), memory on the host, memory inside another allocation's
 * (an annotated pool's block: counted at the pool's own allocation), or
 * address space (not memory; its size is said apart). */
enum tl_holds { TL_HOLDS_DEVICE, TL_HOLDS_HOST, TL_HOLDS_INSIDE, TL_HOLDS_ADDRESS };

/* The headline's groups, in the order it names them (headline.h holds their
 * nouns); the last is every kind a report names that this tensorleak does
 * not know. */
enum tl_headline_group {
    TL_HL_DEVICE, TL_HL_HOST_PINNED, TL_HL_HOST_REGISTERED, TL_HL_MANAGED, TL_HL_ARRAY, TL_HL_POOL_BLOCK,
    TL_HL_VMM_RESERVATION, TL_HL_VMM_MAPPING, TL_HL_IPC_MAPPING, TL_HL_OTHER, TL_HEADLINE_GROUPS
};

/* X(ENUM, report name, older report name or NULL, headline group, holds,
 *   words after an address-space size ("" for memory)).  Rows sharing a
 * report name share every column after it; the first of them answers for
 * the name. */
#define TL_KINDS(X)                                                                                                 \
    X(DEVICE, "device", NULL, TL_HL_DEVICE, TL_HOLDS_DEVICE, "")                                                   \
    X(HOST_PINNED, "host_pinned", NULL, TL_HL_HOST_PINNED, TL_HOLDS_HOST, "")                                      \
    X(MANAGED, "managed", NULL, TL_HL_MANAGED, TL_HOLDS_DEVICE, "")                                                \
    X(VMM_HANDLE, "vmm_handle", NULL, TL_HL_DEVICE, TL_HOLDS_DEVICE, "")                                           \
    X(VMM_MAPPING, "vmm_mapping", NULL, TL_HL_VMM_MAPPING, TL_HOLDS_ADDRESS,                                       \
      " mapped range (memory counted at its handle)")                                                              \
    X(VMM_RESERVATION, "vmm_reservation", NULL, TL_HL_VMM_RESERVATION, TL_HOLDS_ADDRESS,                           \
      " of address space (not memory)")                                                                            \
    X(POOL_BLOCK, "pool_block", NULL, TL_HL_POOL_BLOCK, TL_HOLDS_INSIDE, "")                                       \
    /* a stream-ordered pool allocation: reported as "device" (older reports: "async") */                          \
    X(ASYNC, "device", "async", TL_HL_DEVICE, TL_HOLDS_DEVICE, "")                                                 \
    /* the program's own host memory pinned in place (cuMemHostRegister) */                                        \
    X(HOST_REGISTERED, "host_registered", NULL, TL_HL_HOST_REGISTERED, TL_HOLDS_HOST, "")                          \
    /* a CUDA array or mipmapped array (texture memory); its size is the driver's */                               \
    X(ARRAY, "array", NULL, TL_HL_ARRAY, TL_HOLDS_DEVICE, "")                                                      \
    /* a VMM handle from cuMemImportFromShareableHandle (reported as "vmm_handle", imported) */                     \
    X(VMM_IMPORTED, "vmm_handle", NULL, TL_HL_DEVICE, TL_HOLDS_DEVICE, "")                                         \
    /* another process's device memory opened here (cuIpcOpenMemHandle): not ours */                               \
    X(IPC_MAPPING, "ipc_mapping", NULL, TL_HL_IPC_MAPPING, TL_HOLDS_ADDRESS,                                       \
      " of another process's memory (CUDA IPC, counted there)")

#define TL_KIND_ENUM_(e, name, old, group, holds, apart) TL_KIND_##e,
enum tl_kind { TL_KINDS(TL_KIND_ENUM_) TL_KIND_COUNT };
#undef TL_KIND_ENUM_

struct tl_kind_row {
    const char *name, *old_name;
    enum tl_headline_group group;
    enum tl_holds holds;
    const char *apart;
};
#define TL_KIND_ROW_(e, name, old, group, holds, apart) [TL_KIND_##e] = {name, old, group, holds, apart},
static const struct tl_kind_row tl_kind_rows[TL_KIND_COUNT] = {TL_KINDS(TL_KIND_ROW_)};
#undef TL_KIND_ROW_

/* Tests of a kind (an enum tl_kind; any other value is no kind) against its
 * row: chains of compares with constants, so that a test on the hot path
 * compiles to what the hand-written chain did (bench/instructions.py: the
 * same count per pair). */
#define TL_KIND_IS_MEMORY_(e, name, old, group, holds, apart) || (k == TL_KIND_##e && (holds) != TL_HOLDS_ADDRESS)
#define TL_KIND_IS_ADDRESS_(e, name, old, group, holds, apart) || (k == TL_KIND_##e && (holds) == TL_HOLDS_ADDRESS)
#define TL_KIND_IS_DEVICE_(e, name, old, group, holds, apart) || (k == TL_KIND_##e && (holds) == TL_HOLDS_DEVICE)
#define TL_KIND_IS_HOST_(e, name, old, group, holds, apart) || (k == TL_KIND_##e && (holds) == TL_HOLDS_HOST)

/* Kinds that hold memory (a VA reservation and a mapping do not: the handle
 * behind a mapping is what holds memory). */
static inline bool tl_holds_memory(uint8_t k)
{
    return false TL_KINDS(TL_KIND_IS_MEMORY_);
}

/* Kinds that are address space, not this process's memory: a VA reservation
 * (cuMemAddressReserve), a mapping (cuMemMap) of a handle into one, and a
 * mapping of another process's memory (cuIpcOpenMemHandle).  Their rows are
 * tracked (a forgotten one is a leak of its kind) but their bytes are never
 * added to a byte figure: PyTorch reserves ~1.1x the GPU per expandable
 * segment, a mapping's memory is its handle's, and an IPC mapping's memory
 * is the exporting process's. */
static inline bool tl_is_address_space(uint8_t k)
{
    return false TL_KINDS(TL_KIND_IS_ADDRESS_);
}

/* Kinds whose memory is on a device as their own reservation (a pool's
 * block is inside its pool's; host memory is not on a device). */
static inline bool tl_holds_device_memory(uint8_t k)
{
    return false TL_KINDS(TL_KIND_IS_DEVICE_);
}

/* Kinds of host memory (pinned: allocated, or the program's registered). */
static inline bool tl_holds_host_memory(uint8_t k)
{
    return false TL_KINDS(TL_KIND_IS_HOST_);
}

#undef TL_KIND_IS_MEMORY_
#undef TL_KIND_IS_ADDRESS_
#undef TL_KIND_IS_DEVICE_
#undef TL_KIND_IS_HOST_

/* A kind's row by a report's name for it (the older name too); NULL for a
 * name this tensorleak does not know. */
static inline const struct tl_kind_row *tl_kind_row_named(const char *name)
{
    for (int i = 0; name && i < TL_KIND_COUNT; i++)
        if (strcmp(tl_kind_rows[i].name, name) == 0 ||
            (tl_kind_rows[i].old_name && strcmp(tl_kind_rows[i].old_name, name) == 0))
            return &tl_kind_rows[i];
    return NULL;
}

#endif
