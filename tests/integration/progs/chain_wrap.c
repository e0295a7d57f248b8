/* An interposer of its own: forwards chain_value through RTLD_NEXT, as
 * many libraries do.  If our dlsym wrapper changed the caller glibc sees,
 * RTLD_NEXT would start after libtensorleak, find this function again and
 * recurse until the stack overflows. */
#include <dlfcn.h>

int chain_value(void);
int chain_value(void)
{
    int (*next)(void) = (int (*)(void))dlsym(RTLD_NEXT, "chain_value");
    return next ? next() + 1 : -1;
}

/* A real reference to libchain_base keeps it NEEDED by this library under
 * --as-needed, so it follows us in the search order. */
int chain_base_version(void);
int chain_wrap_base_version(void);
int chain_wrap_base_version(void) { return chain_base_version(); }
