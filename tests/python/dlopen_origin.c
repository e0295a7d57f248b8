/* Loads a library by a bare name found only along this program's own
 * RUNPATH ($ORIGIN), then by "$ORIGIN/NAME", then allocates from C.  glibc
 * resolves both from the object that calls dlopen; tensorleak interposes
 * dlopen (dlopen_trampoline.S), and the program must still load what it
 * loads without it.  Usage: dlopen_origin NAME */
#include "cudart_compat.h"

#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    if (argc != 2)
        return 2;
    void *by_name = dlopen(argv[1], RTLD_NOW);
    if (!by_name) {
        fprintf(stderr, "dlopen_origin: %s\n", dlerror());
        return 1;
    }
    char origin[512];
    snprintf(origin, sizeof origin, "$ORIGIN/%s", argv[1]);
    void *by_origin = dlopen(origin, RTLD_NOW);
    if (by_origin != by_name) {
        fprintf(stderr, "dlopen_origin: %s: %s\n", origin, by_origin ? "another object" : dlerror());
        return 1;
    }
    void *p = NULL;
    if (cudaMalloc(&p, 2 << 20) != cudaSuccess)
        return 1;
    puts("dlopen_origin: ok");
    return 0;
}
