/*
 * test_interpose.c — run with LD_PRELOAD=libsim_interposer.so.  The program
 * reaches the driver only through dlopen, as runtimes do.
 */
#include <dlfcn.h>

#include "sim_test.h"

typedef CUresult (*get_proc_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

Test(interpose, cuGetProcAddress_returns_the_drivers_own_symbol_not_a_preloaded_one)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    cr_assert_not_null(h, "%s", dlerror());
    void *preloaded = dlsym(RTLD_DEFAULT, "cuMemAlloc_v2");
    void *own = dlsym(h, "cuMemAlloc_v2");
    cr_assert_not_null(preloaded);
    cr_assert_neq(preloaded, own, "the interposer must be loaded for this test to mean anything");

    get_proc_fn gpa = (get_proc_fn)dlsym(h, "cuGetProcAddress_v2");
    void *fn = NULL;
    cr_assert_eq(gpa("cuMemAlloc", &fn, 3020, 0, NULL), CUDA_SUCCESS);
    cr_assert_eq(fn, own);
}
