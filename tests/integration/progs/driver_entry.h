/*
 * driver_entry.h — a driver entry point by (base name, cudaVersion) through
 * cuGetProcAddress, for the test programs that reach an allocation family
 * that way.  `get` is the cuGetProcAddress_v2 the program reached (linked,
 * or through dlsym: each is a load path of its own); `prog` names the
 * program in the error.  Exits 2 when the driver has no such entry point, so
 * the test's expected output cannot match by accident.
 */
#ifndef TL_TEST_DRIVER_ENTRY_H
#define TL_TEST_DRIVER_ENTRY_H

#include <stdio.h>
#include <stdlib.h>

typedef CUresult (*procaddr_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

static inline void *driver_entry(procaddr_fn get, const char *prog, const char *name, int version)
{
    void *fn = NULL;
    CUdriverProcAddressQueryResult st;
    if (!get || get(name, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &st) != CUDA_SUCCESS || st != 0) {
        fprintf(stderr, "%s: no %s at %d\n", prog, name, version);
        exit(2);
    }
    return fn;
}

#endif
