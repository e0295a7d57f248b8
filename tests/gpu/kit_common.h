/*
 * kit_common.h: helpers shared by the real-GPU samples of tests/gpu (C and CUDA C++).
 *
 * Each sample prints one line on stdout, "TL_GROUND_TRUTH {json}", with what it
 * knows to be true: the leaks it made on purpose (count, bytes, kinds, the function
 * that allocated them), cuMemGetInfo before and after, and its own pid.  run.sh's
 * compare.py holds tensorleak's reports against that line.
 *
 * tensorleak's client API is looked up with dlsym(RTLD_DEFAULT, ...), the way
 * include/tensorleak.h and Python's ctypes do, so the samples need neither the
 * header nor the library: without tensorleak the calls are skipped.
 */
#ifndef TL_GPU_KIT_COMMON_H
#define TL_GPU_KIT_COMMON_H

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define KIT_MIB (1024ull * 1024ull)

typedef void (*kit_mark_fn)(const char *);
typedef int (*kit_snapshot_fn)(const char *);

static kit_mark_fn kit_mark_p;
static kit_snapshot_fn kit_snapshot_p;
static int kit_resolved;

static inline void kit_resolve(void)
{
    if (kit_resolved)
        return;
    kit_resolved = 1;
    kit_mark_p = (kit_mark_fn)dlsym(RTLD_DEFAULT, "tensorleak_mark");
    kit_snapshot_p = (kit_snapshot_fn)dlsym(RTLD_DEFAULT, "tensorleak_snapshot");
}

/* One request done: a growth epoch for tensorleak. Returns 1 when tensorleak took it. */
static inline int kit_mark(const char *label)
{
    kit_resolve();
    if (!kit_mark_p)
        return 0;
    kit_mark_p(label);
    return 1;
}

/* A report now (reason "api"), so pools and devices are read while the program
 * still holds its context; -1 when tensorleak is not loaded. */
static inline int kit_snapshot(const char *label)
{
    kit_resolve();
    if (!kit_snapshot_p)
        return -1;
    return kit_snapshot_p(label);
}

static inline int kit_has_flag(int argc, char **argv, const char *flag)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], flag) == 0)
            return 1;
    return 0;
}

static inline long kit_int_arg(int argc, char **argv, const char *flag, long dflt)
{
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], flag) == 0)
            return strtol(argv[i + 1], NULL, 0);
    return dflt;
}

#define KIT_CHECK_RT(call)                                                         \
    do {                                                                           \
        int kit_e_ = (int)(call);                                                  \
        if (kit_e_ != 0) {                                                         \
            fprintf(stderr, "%s:%d: %s failed: %d\n", __FILE__, __LINE__, #call,   \
                    kit_e_);                                                       \
            exit(3);                                                               \
        }                                                                          \
    } while (0)

#ifdef __cuda_cuda_h__
/* The driver-API samples' start: device 0's primary context made current,
 * and the properties of a pinned VMM allocation on it with their 2 MiB
 * piece rounded up to the minimum granularity (*gran, *piece). */
static inline CUdevice kit_vmm_start(CUmemAllocationProp *prop, size_t *gran, size_t *piece)
{
    CUdevice dev;
    CUcontext ctx;
    KIT_CHECK_RT(cuInit(0));
    KIT_CHECK_RT(cuDeviceGet(&dev, 0));
    KIT_CHECK_RT(cuDevicePrimaryCtxRetain(&ctx, dev));
    KIT_CHECK_RT(cuCtxSetCurrent(ctx));
    memset(prop, 0, sizeof *prop);
    prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop->location.id = (int)dev;
    KIT_CHECK_RT(cuMemGetAllocationGranularity(gran, prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    *piece = ((2 * KIT_MIB + *gran - 1) / *gran) * *gran;
    return dev;
}

/* cuMemsetD8 through cuGetProcAddress, skipped where the driver lacks it (the
 * simulated driver of tests/sim), so the driver-API samples also run there. */
static inline void kit_memset(CUdeviceptr d, unsigned char v, size_t bytes)
{
    typedef CUresult (*memset_fn)(CUdeviceptr, unsigned char, size_t);
    static memset_fn fn;
    static int looked;
    if (!looked) {
        void *p = NULL;
        CUdriverProcAddressQueryResult st;
        looked = 1;
        if (cuGetProcAddress("cuMemsetD8", &p, 3020, CU_GET_PROC_ADDRESS_DEFAULT, &st) == CUDA_SUCCESS &&
            st == CU_GET_PROC_ADDRESS_SUCCESS)
            fn = (memset_fn)p;
    }
    if (fn)
        KIT_CHECK_RT(fn(d, v, bytes));
}
#endif

#endif
