/*
 * fault_blocker.c — a library whose constructor blocks inside dlopen, so the
 * thread loading it holds the loader's lock (tensorleak_test_hold's
 * HOLD_LOADER) until the test lets it go.
 */
#include <dlfcn.h>

__attribute__((constructor)) static void block_in_constructor(void)
{
    void (*block)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "tensorleak_test_block");
    if (block)
        block();
}
