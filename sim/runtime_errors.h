/*
 * runtime_errors.h — the simulated runtime's error codes beyond
 * cudart_compat.h, and the two calls every runtime file returns through
 * (runtime_errors.c).  The bottom of the runtime: it includes no other
 * runtime header.
 */
#ifndef TL_SIM_RUNTIME_ERRORS_H
#define TL_SIM_RUNTIME_ERRORS_H

#include "cudart_compat.h"
#include "cuda_extra.h"

#define SIMRT_EXPORT __attribute__((visibility("default")))

/* Not in cudart_compat.h (and, without cuda.h, not declared at all). */
#define SIMRT_ERROR_CALL_REQUIRES_NEWER_DRIVER ((cudaError_t)36)
#define SIMRT_ERROR_STUB_LIBRARY ((cudaError_t)34)
#define SIMRT_ERROR_DEVICE_UNINITIALIZED ((cudaError_t)201)
#define SIMRT_ERROR_MAP_BUFFER_OBJECT_FAILED ((cudaError_t)205)
#define SIMRT_ERROR_ALREADY_MAPPED ((cudaError_t)208)
#define SIMRT_ERROR_NOT_MAPPED ((cudaError_t)211)
#define SIMRT_ERROR_ILLEGAL_STATE ((cudaError_t)401)
#define SIMRT_ERROR_HOST_MEMORY_ALREADY_REGISTERED ((cudaError_t)712)
#define SIMRT_ERROR_HOST_MEMORY_NOT_REGISTERED ((cudaError_t)713)
#define SIMRT_ERROR_INVALID_SYMBOL ((cudaError_t)13)
#define SIMRT_ERROR_INVALID_MEMCPY_DIRECTION ((cudaError_t)21)
#define SIMRT_ERROR_INVALID_DEVICE_FUNCTION ((cudaError_t)98)
#define SIMRT_ERROR_PEER_ACCESS_UNSUPPORTED ((cudaError_t)217)
#define SIMRT_ERROR_NOT_READY ((cudaError_t)600)
#define SIMRT_ERROR_PEER_ACCESS_NOT_ENABLED ((cudaError_t)705)

/* A driver result as the runtime's error. */
cudaError_t simrt_result(CUresult r);
/* Every runtime call returns through this: a failure becomes the calling
 * thread's last error (cudaGetLastError reads and clears it), as in
 * NVIDIA's runtime, which is how a failed kernel launch reaches a program
 * that checks after the launch (PyTorch's C10_CUDA_KERNEL_LAUNCH_CHECK). */
cudaError_t simrt_status(cudaError_t e);

#endif /* TL_SIM_RUNTIME_ERRORS_H */
