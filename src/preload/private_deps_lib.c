/*
 * libtensorleak-deps.so — the libraries libtensorleak.so uses, linked here
 * and nowhere else (-Wl,--no-as-needed: every one is a DT_NEEDED although
 * nothing here calls it).  libtensorleak.so loads this library with
 * RTLD_LOCAL and takes its names from it, so none of them enters the
 * program's global scope (private_deps.c).  The version lets the loader
 * refuse a copy from another build of tensorleak.
 */
#include "tl_version.h"

__attribute__((visibility("default"))) const char tl_private_deps_version[] = TL_VERSION;
