/*
 * driver_memory.c — what reads and writes device memory: cuMemcpy*,
 * cuMemset*, cuStreamWriteValue32, plus the queries about an address
 * (cuMemGetAddressRange, cuPointerGetAttribute(s)) and cuMemAdvise /
 * cuMemPrefetchAsync.
 *
 * These calls take any address, so this file asks every family what holds it
 * (span_find_locked: the cuMemAlloc family, pool blocks, VMM mappings, IPC
 * imports, in that order) and sits above them all (sim/README.md, "Layout").
 * The bytes themselves are driver_backing.c's.
 *
 * A copy resolves each side, piece by piece, to host-addressable bytes: device
 * memory through the device's read-write view (the bytes must lie in
 * allocated device memory, else CUDA_ERROR_INVALID_VALUE), VMM addresses
 * through their mapping to physical pieces (mapped and accessible, else
 * CUDA_ERROR_INVALID_VALUE), IPC imports through their own view, anything
 * else as a host pointer, as unified addressing lets cuMemcpy infer.  Work
 * completes at once; the Async forms validate their stream and are otherwise
 * the same.  Deviation: the direction in a function's name (HtoD, DtoH, DtoD)
 * is not enforced, both sides are inferred from their addresses.
 */
#include <string.h>

#include "simcuda.h"

/* What holds addr: the cuMemAlloc family's row (device, pitched, managed,
 * pinned or registered host memory), else a pool block, a VMM mapping or an
 * IPC import.  1 when found. */
static int span_find_locked(uint64_t addr, struct sim_span *out)
{
    return sim_alloc_span_locked(addr, out) || sim_pool_span_locked(addr, out) || sim_vmm_span_locked(addr, out) ||
           sim_ipc_span_locked(addr, out);
}

/* The device whose range holds addr, or -1. */
static int device_of(uint64_t addr)
{
    for (int d = 0; d < sim.ndevices; d++) {
        const struct sim_ranges *r = &sim.dev[d].mem;
        if (addr >= r->base && addr - r->base < r->size)
            return d;
    }
    return -1;
}

static int in_vmm_space(uint64_t addr) { return addr >= SIM_VMM_BASE && addr - SIM_VMM_BASE < SIM_VMM_SIZE; }

/* Host-addressable bytes for [addr, addr + len): sets *out and returns how
 * many bytes from addr are contiguous there (at most len), or 0 with *rc set
 * when addr is device or VMM address space holding no accessible memory. */
static uint64_t resolve_locked(uint64_t addr, uint64_t len, unsigned char **out, CUresult *rc)
{
    if (in_vmm_space(addr)) {
        uint64_t phys, run;
        unsigned char *bytes;
        unsigned access;
        if (!sim_vmm_translate_locked(addr, &phys, &bytes, &run, &access) || access == CU_MEM_ACCESS_FLAGS_PROT_NONE) {
            *rc = CUDA_ERROR_INVALID_VALUE;
            return 0;
        }
        if (bytes) {
            *out = bytes;
            return run < len ? run : len;
        }
        uint64_t got = resolve_locked(phys, run < len ? run : len, out, rc);
        return got;
    }
    if (sim_in_ipc_space(addr)) {
        uint64_t run;
        if (!sim_ipc_translate_locked(addr, out, &run)) {
            *rc = CUDA_ERROR_INVALID_VALUE;
            return 0;
        }
        return run < len ? run : len;
    }
    int d = device_of(addr);
    if (d < 0) {
        *out = (unsigned char *)(uintptr_t)addr;
        return len;
    }
    const struct sim_ranges *r = &sim.dev[d].mem;
    if (len > r->base + r->size - addr || !sim_ranges_is_allocated(r, addr, len)) {
        *rc = CUDA_ERROR_INVALID_VALUE;
        return 0;
    }
    if (!sim.dev[d].view) {
        *rc = CUDA_ERROR_NOT_SUPPORTED;
        return 0;
    }
    *out = sim.dev[d].view + (addr - r->base);
    return len;
}

static CUresult copy_locked(uint64_t dst, uint64_t src, uint64_t n)
{
    CUresult rc = CUDA_SUCCESS;
    for (uint64_t done = 0; done < n;) {
        unsigned char *d, *s;
        uint64_t nd = resolve_locked(dst + done, n - done, &d, &rc);
        uint64_t ns = nd ? resolve_locked(src + done, nd, &s, &rc) : 0;
        if (!ns)
            return rc;
        memmove(d, s, ns);
        done += ns;
    }
    return CUDA_SUCCESS;
}

/* Validates the stream (NULL: the current context must exist) and copies. */
static CUresult copy(uint64_t dst, uint64_t src, size_t n, CUstream stream)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    int device;
    sim_lock();
    CUresult rc = sim_stream_device_locked(stream, &device);
    if (rc == CUDA_SUCCESS && n)
        rc = copy_locked(dst, src, n);
    sim_unlock();
    return rc;
}

#define HOST(p) ((uint64_t)(uintptr_t)(p))

SIM_EXPORT CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
    return copy(dst, src, ByteCount, NULL);
}

SIM_EXPORT CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream)
{
    return copy(dst, src, ByteCount, hStream);
}

SIM_EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
    return copy(dstDevice, HOST(srcHost), ByteCount, NULL);
}

SIM_EXPORT CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    return copy(HOST(dstHost), srcDevice, ByteCount, NULL);
}

SIM_EXPORT CUresult cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{
    return copy(dstDevice, srcDevice, ByteCount, NULL);
}

SIM_EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
                                         CUstream hStream)
{
    return copy(dstDevice, HOST(srcHost), ByteCount, hStream);
}

SIM_EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream)
{
    return copy(HOST(dstHost), srcDevice, ByteCount, hStream);
}

SIM_EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
                                         CUstream hStream)
{
    return copy(dstDevice, srcDevice, ByteCount, hStream);
}

/* Peer copies name both contexts, which must be usable; the bytes move as any
 * other copy's (all devices share the process's address space here). */
static CUresult copy_peer(CUdeviceptr dst, CUcontext dstContext, CUdeviceptr src, CUcontext srcContext, size_t n,
                          CUstream stream)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    struct CUctx_st *c;
    sim_lock();
    CUresult rc = !dstContext || !srcContext ? CUDA_ERROR_INVALID_CONTEXT : sim_ctx_resolve_locked(dstContext, &c);
    if (rc == CUDA_SUCCESS)
        rc = sim_ctx_resolve_locked(srcContext, &c);
    sim_unlock();
    return rc == CUDA_SUCCESS ? copy(dst, src, n, stream) : rc;
}

SIM_EXPORT CUresult cuMemcpyPeer(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
                                 CUcontext srcContext, size_t ByteCount)
{
    return copy_peer(dstDevice, dstContext, srcDevice, srcContext, ByteCount, NULL);
}

SIM_EXPORT CUresult cuMemcpyPeerAsync(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
                                      CUcontext srcContext, size_t ByteCount, CUstream hStream)
{
    return copy_peer(dstDevice, dstContext, srcDevice, srcContext, ByteCount, hStream);
}

/* ---- memset: Height rows of Width elements of `size` bytes, dstPitch apart ---- */

static CUresult fill_locked(uint64_t dst, uint64_t count, unsigned value, unsigned size)
{
    CUresult rc = CUDA_SUCCESS;
    uint64_t n = count * size;
    for (uint64_t done = 0; done < n;) {
        unsigned char *d;
        uint64_t got = resolve_locked(dst + done, n - done, &d, &rc);
        if (!got)
            return rc;
        /* Pieces split at 2 MiB physical boundaries, whole elements each. */
        for (uint64_t i = 0; i < got; i++)
            d[i] = (unsigned char)(value >> (8 * ((done + i) % size)));
        done += got;
    }
    return CUDA_SUCCESS;
}

static CUresult fill(CUdeviceptr dst, size_t pitch, unsigned value, unsigned size, size_t width, size_t height,
                     CUstream stream)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    /* Elements must be naturally aligned (cuda.h: "dstDevice ... 2-byte
     * aligned" for D16, 4 for D32), and a pitch must hold a row. */
    if (dst % size != 0 || (height > 1 && (pitch < width * size || pitch % size != 0)))
        return CUDA_ERROR_INVALID_VALUE;
    int device;
    sim_lock();
    CUresult rc = sim_stream_device_locked(stream, &device);
    for (size_t row = 0; rc == CUDA_SUCCESS && row < height && width; row++)
        rc = fill_locked(dst + row * pitch, width, value, size);
    sim_unlock();
    return rc;
}

/* cuStreamWriteValue32: one 4-byte aligned word written in stream order
 * (at once here); flags DEFAULT (0) or NO_MEMORY_BARRIER (1).  The _v2 form
 * (11070) takes the same arguments; cuda.h's name maps to it. */
static CUresult write_value32(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags)
{
    if (flags & ~1u)
        return CUDA_ERROR_INVALID_VALUE;
    return fill(addr, 0, value, 4, 1, 1, stream);
}

SIM_EXPORT CUresult cuStreamWriteValue32(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags)
{
    return write_value32(stream, addr, value, flags);
}

SIM_EXPORT CUresult cuStreamWriteValue32_v2(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags)
{
    return write_value32(stream, addr, value, flags);
}

SIM_EXPORT CUresult cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
    return fill(dstDevice, 0, uc, 1, N, 1, NULL);
}
SIM_EXPORT CUresult cuMemsetD16_v2(CUdeviceptr dstDevice, unsigned short us, size_t N)
{
    return fill(dstDevice, 0, us, 2, N, 1, NULL);
}
SIM_EXPORT CUresult cuMemsetD32_v2(CUdeviceptr dstDevice, unsigned int ui, size_t N)
{
    return fill(dstDevice, 0, ui, 4, N, 1, NULL);
}
SIM_EXPORT CUresult cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream)
{
    return fill(dstDevice, 0, uc, 1, N, 1, hStream);
}
SIM_EXPORT CUresult cuMemsetD16Async(CUdeviceptr dstDevice, unsigned short us, size_t N, CUstream hStream)
{
    return fill(dstDevice, 0, us, 2, N, 1, hStream);
}
SIM_EXPORT CUresult cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream)
{
    return fill(dstDevice, 0, ui, 4, N, 1, hStream);
}
SIM_EXPORT CUresult cuMemsetD2D8_v2(CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc, size_t Width,
                                    size_t Height)
{
    return fill(dstDevice, dstPitch, uc, 1, Width, Height, NULL);
}
SIM_EXPORT CUresult cuMemsetD2D16_v2(CUdeviceptr dstDevice, size_t dstPitch, unsigned short us, size_t Width,
                                     size_t Height)
{
    return fill(dstDevice, dstPitch, us, 2, Width, Height, NULL);
}
SIM_EXPORT CUresult cuMemsetD2D32_v2(CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui, size_t Width,
                                     size_t Height)
{
    return fill(dstDevice, dstPitch, ui, 4, Width, Height, NULL);
}
SIM_EXPORT CUresult cuMemsetD2D8Async(CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc, size_t Width,
                                      size_t Height, CUstream hStream)
{
    return fill(dstDevice, dstPitch, uc, 1, Width, Height, hStream);
}
SIM_EXPORT CUresult cuMemsetD2D16Async(CUdeviceptr dstDevice, size_t dstPitch, unsigned short us, size_t Width,
                                       size_t Height, CUstream hStream)
{
    return fill(dstDevice, dstPitch, us, 2, Width, Height, hStream);
}
SIM_EXPORT CUresult cuMemsetD2D32Async(CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui, size_t Width,
                                       size_t Height, CUstream hStream)
{
    return fill(dstDevice, dstPitch, ui, 4, Width, Height, hStream);
}

/* ---- queries about an address ---- */

/* The allocation holding dptr: base and size as requested.  cuda.h:
 * CUDA_ERROR_NOT_FOUND when no allocation holds it; either output may be
 * NULL. */
SIM_EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    struct sim_span span;
    sim_lock();
    CUresult rc = sim_ctx_current_locked(NULL);
    if (rc == CUDA_SUCCESS && !span_find_locked(dptr, &span))
        rc = CUDA_ERROR_NOT_FOUND;
    sim_unlock();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (pbase)
        *pbase = span.base;
    if (psize)
        *psize = span.size;
    return CUDA_SUCCESS;
}

/* One attribute of a found span.  Returns CUDA_SUCCESS, or
 * CUDA_ERROR_INVALID_VALUE for an attribute the span does not have. */
static CUresult span_attribute(const struct sim_span *s, uint64_t ptr, CUpointer_attribute attr, void *data)
{
    int managed = s->kind == SIM_SPAN_MANAGED, host = s->kind == SIM_SPAN_HOST;
    switch ((int)attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
        *(CUcontext *)data = s->ctx;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned *)data = host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
        /* Unified addressing: pinned memory's device address is its host one. */
        *(CUdeviceptr *)data = ptr;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        if (!host && !managed)
            return CUDA_ERROR_INVALID_VALUE;
        *(void **)data = (void *)(uintptr_t)ptr;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE: /* cuMemAlloc memory (driver_ipc.c) */
        *(int *)data = s->kind == SIM_SPAN_DEVICE;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE:
        *(int *)data = 0;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MAPPED:
        *(int *)data = 1;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
        *(unsigned long long *)data = s->id;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
        *(int *)data = managed;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        *(int *)data = s->device;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
        *(CUdeviceptr *)data = s->base;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
        *(size_t *)data = s->size;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
        *(unsigned long long *)data = 0; /* CU_MEM_HANDLE_TYPE_NONE: nothing is exportable */
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
        *(unsigned *)data = CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
        *(CUmemoryPool *)data = s->pool;
        return CUDA_SUCCESS;
    default: /* P2P_TOKENS needs the nv-p2p kernel interface */
        return CUDA_ERROR_INVALID_VALUE;
    }
}

/* cuda.h: CUDA_ERROR_INVALID_VALUE for a pointer no allocation holds. */
SIM_EXPORT CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!data)
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_span span;
    sim_lock();
    CUresult rc = span_find_locked(ptr, &span) ? span_attribute(&span, ptr, attribute, data)
                                                    : CUDA_ERROR_INVALID_VALUE;
    sim_unlock();
    return rc;
}

/* cuda.h: "Unlike cuPointerGetAttribute, this function will not return an
 * error when the ptr encountered is not a valid CUDA pointer. Instead, the
 * attributes are assigned default NULL values and CUDA_SUCCESS is returned"
 * — the way to ask whether a pointer is CUDA memory at all. */
SIM_EXPORT CUresult cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute *attributes, void **data,
                                           CUdeviceptr ptr)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    if (numAttributes == 0 || !attributes || !data)
        return CUDA_ERROR_INVALID_VALUE;
    struct sim_span span;
    CUresult rc = CUDA_SUCCESS;
    sim_lock();
    int found = span_find_locked(ptr, &span);
    for (unsigned i = 0; i < numAttributes && rc == CUDA_SUCCESS; i++) {
        if (!data[i])
            continue;
        if (found && span_attribute(&span, ptr, attributes[i], data[i]) == CUDA_SUCCESS)
            continue;
        switch ((int)attributes[i]) {
        case CU_POINTER_ATTRIBUTE_P2P_TOKENS:
            rc = CUDA_ERROR_INVALID_VALUE;
            break;
        case CU_POINTER_ATTRIBUTE_CONTEXT: case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
        case CU_POINTER_ATTRIBUTE_HOST_POINTER: case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
        case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
        case CU_POINTER_ATTRIBUTE_BUFFER_ID: case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
        case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
            *(unsigned long long *)data[i] = 0;
            break;
        case CU_POINTER_ATTRIBUTE_RANGE_SIZE: case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
            *(size_t *)data[i] = 0;
            break;
        case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
            *(int *)data[i] = -2; /* what the driver reports for host memory */
            break;
        default:
            if ((int)attributes[i] <= 0 || (int)attributes[i] > CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE)
                rc = CUDA_ERROR_INVALID_VALUE;
            else
                *(unsigned *)data[i] = 0;
        }
    }
    sim_unlock();
    return rc;
}

/* Advice and prefetching change where managed pages live on a real system;
 * here they live in one place, so both only validate: the range must lie in
 * one managed allocation (cuda.h: CUDA_ERROR_INVALID_VALUE otherwise; device
 * memory may be prefetched only to its own device, which is a no-op). */
static CUresult managed_range_check(CUdeviceptr ptr, size_t count, int allow_device)
{
    if (!sim_is_initialized())
        return CUDA_ERROR_NOT_INITIALIZED;
    struct sim_span span;
    sim_lock();
    CUresult rc = sim_ctx_current_locked(NULL);
    if (rc == CUDA_SUCCESS &&
        (count == 0 || !span_find_locked(ptr, &span) || ptr + count > span.base + span.size ||
         (span.kind != SIM_SPAN_MANAGED && !(allow_device && span.kind != SIM_SPAN_HOST))))
        rc = CUDA_ERROR_INVALID_VALUE;
    sim_unlock();
    return rc;
}

SIM_EXPORT CUresult cuMemAdvise_v2(CUdeviceptr devPtr, size_t count, CUmem_advise advice, CUmemLocation location)
{
    (void)location;
    if ((int)advice < 1 || (int)advice > 6)
        return CUDA_ERROR_INVALID_VALUE;
    return managed_range_check(devPtr, count, 0);
}

SIM_EXPORT CUresult cuMemPrefetchAsync_v2(CUdeviceptr devPtr, size_t count, CUmemLocation location,
                                          unsigned int flags, CUstream hStream)
{
    (void)location;
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult rc = managed_range_check(devPtr, count, 1);
    if (rc == CUDA_SUCCESS) {
        int device;
        sim_lock();
        rc = sim_stream_device_locked(hStream, &device);
        sim_unlock();
    }
    return rc;
}
