/*
 * runtime_memcpy.c — copies, memsets and pointer attributes of the simulated
 * runtime: the calls that move PyTorch's bytes (tensor.to("cuda"),
 * .cpu(), torch.zeros, copy_) and tell it what a pointer is.
 *
 * With unified addressing the driver infers both sides of a copy from their
 * addresses (cuMemcpy), as NVIDIA's runtime does for cudaMemcpyDefault; the
 * kind is checked for range only (the simulated driver does not check the
 * direction a name states either, sim/README.md).
 */
#include <stdint.h>

#include "runtime.h"

#define DPTR(p) ((CUdeviceptr)(uintptr_t)(p))

static cudaError_t check_kind(enum cudaMemcpyKind kind)
{
    return (unsigned)kind <= (unsigned)cudaMemcpyDefault ? cudaSuccess : SIMRT_ERROR_INVALID_MEMCPY_DIRECTION;
}

SIMRT_EXPORT cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
    cudaError_t e = simrt_enter();
    if (e == cudaSuccess)
        e = check_kind(kind);
    return simrt_status(e != cudaSuccess ? e : DRV(cuMemcpy, DPTR(dst), DPTR(src), count));
}

SIMRT_EXPORT cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                                         cudaStream_t stream)
{
    cudaError_t e = simrt_enter();
    if (e == cudaSuccess)
        e = check_kind(kind);
    return simrt_status(e != cudaSuccess ? e : DRV(cuMemcpyAsync, DPTR(dst), DPTR(src), count, stream));
}

/* Row by row: width bytes of each of height rows, pitches at least width. */
SIMRT_EXPORT cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                                           size_t height, enum cudaMemcpyKind kind, cudaStream_t stream)
{
    cudaError_t e = simrt_enter();
    if (e == cudaSuccess)
        e = check_kind(kind);
    if (e == cudaSuccess && height > 1 && (dpitch < width || spitch < width))
        e = cudaErrorInvalidValue;
    for (size_t row = 0; e == cudaSuccess && row < height && width; row++)
        e = DRV(cuMemcpyAsync, DPTR(dst) + row * dpitch, DPTR(src) + row * spitch, width, stream);
    return simrt_status(e);
}

SIMRT_EXPORT cudaError_t cudaMemcpyPeerAsync(void *dst, int dstDevice, const void *src, int srcDevice, size_t count,
                                             cudaStream_t stream)
{
    CUcontext dctx = NULL, sctx = NULL;
    cudaError_t e = simrt_enter();
    if (e == cudaSuccess)
        e = simrt_primary(dstDevice, &dctx);
    if (e == cudaSuccess)
        e = simrt_primary(srcDevice, &sctx);
    return simrt_status(e != cudaSuccess ? e
                                         : DRV(cuMemcpyPeerAsync, DPTR(dst), dctx, DPTR(src), sctx, count, stream));
}

SIMRT_EXPORT cudaError_t cudaMemset(void *devPtr, int value, size_t count)
{
    cudaError_t e = simrt_enter();
    return simrt_status(e != cudaSuccess ? e : DRV(cuMemsetD8_v2, DPTR(devPtr), (unsigned char)value, count));
}

SIMRT_EXPORT cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream)
{
    cudaError_t e = simrt_enter();
    return simrt_status(e != cudaSuccess ? e
                                         : DRV(cuMemsetD8Async, DPTR(devPtr), (unsigned char)value, count, stream));
}

/* The driver's plural query, which answers memory it does not know with
 * success and zeros: that is cudaMemoryTypeUnregistered (CUDA 11 and
 * later), not an error. */
SIMRT_EXPORT cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attributes, const void *ptr)
{
    if (!attributes)
        return simrt_status(cudaErrorInvalidValue);
    cudaError_t e = simrt_enter();
    if (e != cudaSuccess)
        return simrt_status(e);
    unsigned type = 0;
    int ordinal = -2;
    CUdeviceptr device_ptr = 0;
    void *host_ptr = NULL;
    int managed = 0;
    CUpointer_attribute which[] = { CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                    CU_POINTER_ATTRIBUTE_DEVICE_POINTER, CU_POINTER_ATTRIBUTE_HOST_POINTER,
                                    CU_POINTER_ATTRIBUTE_IS_MANAGED };
    void *data[] = { &type, &ordinal, &device_ptr, &host_ptr, &managed };
    e = DRV(cuPointerGetAttributes, 5, which, data, DPTR(ptr));
    if (e != cudaSuccess)
        return simrt_status(e);
    struct cudaPointerAttributes a = { cudaMemoryTypeUnregistered, -2, NULL, NULL, { 0 } };
    if (managed)
        a.type = cudaMemoryTypeManaged;
    else if (type == CU_MEMORYTYPE_DEVICE)
        a.type = cudaMemoryTypeDevice;
    else if (type == CU_MEMORYTYPE_HOST)
        a.type = cudaMemoryTypeHost;
    if (a.type != cudaMemoryTypeUnregistered) {
        a.device = ordinal;
        a.devicePointer = (void *)(uintptr_t)device_ptr;
        a.hostPointer = host_ptr;
    }
    *attributes = a;
    return cudaSuccess;
}
