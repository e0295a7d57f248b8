/* loaded_libs — allocates from a library without debug info and takes a
 * snapshot (the report symbolizes its stacks, looking for that library's
 * separate debug file), then
 * prints which of the libraries a debuginfod query would bring are mapped
 * in this process: a report must not load libraries into the program. */
#include <stdio.h>
#include <string.h>

#include "cudart_compat.h"
#include "tensorleak.h"

int nodebug_alloc(void **p, unsigned long bytes);

int main(void)
{
    void *p;
    if (nodebug_alloc(&p, 1u << 20) != 0)
        return 1;
    if (tensorleak_snapshot("symbolized") != 0)
        return 2;
    FILE *maps = fopen("/proc/self/maps", "r");
    if (!maps)
        return 3;
    char line[4096];
    int debuginfod = 0, curl = 0;
    while (fgets(line, sizeof line, maps)) {
        debuginfod |= strstr(line, "libdebuginfod") != NULL;
        curl |= strstr(line, "libcurl") != NULL;
    }
    fclose(maps);
    printf("libdebuginfod %s\nlibcurl %s\n", debuginfod ? "mapped" : "absent", curl ? "mapped" : "absent");
    cudaFree(p);
    return 0;
}
