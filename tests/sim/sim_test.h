/*
 * sim_test.h — helpers shared by the simulated-CUDA fidelity tests.
 *
 * Tests call the versioned driver names (cuMemAlloc_v2, cuCtxCreate_v4, ...)
 * explicitly so they compile identically against NVIDIA's cuda.h and against
 * src/base/cuda_compat.h.  Criterion runs every test in a fresh process, so each
 * test starts before cuInit with its own environment.
 */
#ifndef TL_SIM_TEST_H
#define TL_SIM_TEST_H

#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda_compat.h"

#ifndef CU_STREAM_PER_THREAD /* cuda.h has it; cuda_compat.h does not */
#define CU_STREAM_PER_THREAD ((CUstream)0x2)
#endif

/* Exported legacy variants cuda.h hides or macro-maps to _v2. */
#undef cuCtxDestroy
#undef cuDevicePrimaryCtxRelease
#undef cuDevicePrimaryCtxReset
CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev);
CUresult cuCtxDestroy(CUcontext ctx);
CUresult cuDevicePrimaryCtxRelease(CUdevice dev);
CUresult cuDevicePrimaryCtxReset(CUdevice dev);

/* Test-only introspection exported by the simulated libcuda.so.1 (not CUDA). */
size_t simcuda_device_used_bytes(int dev);
size_t simcuda_largest_free_block(int dev);

#define MiB (1024ull * 1024ull)

#define cu_ok(call) cr_assert_eq((call), CUDA_SUCCESS, "%s failed", #call)
#define cu_err(call, code) cr_assert_eq((int)(call), (int)(code), "%s: expected %s", #call, #code)

/* cuInit plus the primary context of `dev` made current, as most programs
 * (and the runtime) start. */
static inline CUcontext sim_start(int dev)
{
    CUcontext ctx = NULL;
    cu_ok(cuInit(0));
    cu_ok(cuDevicePrimaryCtxRetain(&ctx, dev));
    cu_ok(cuCtxSetCurrent(ctx));
    return ctx;
}

static inline size_t sim_free_bytes(void)
{
    size_t free = 0, total = 0;
    cu_ok(cuMemGetInfo_v2(&free, &total));
    return free;
}

/* Everything written to stderr since cr_redirect_stderr (use as .init).
 * Closes our end of the pipe first so the read sees end-of-file; stderr goes
 * to /dev/null afterwards. */
static inline const char *sim_captured_stderr(void)
{
    static char buf[1 << 16];
    fflush(stderr);
    int fd = open("/dev/null", O_WRONLY);
    dup2(fd, 2);
    close(fd);
    size_t n = fread(buf, 1, sizeof buf - 1, cr_get_redirected_stderr());
    buf[n] = '\0';
    return buf;
}

#endif /* TL_SIM_TEST_H */
