/* dlsym of library names that only look like CUDA driver names must return
 * the library's own functions; a driver name looked up in a handle that does
 * not define it must stay NULL. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 2;
    }
    const char *names[] = {"cudnnCreate", "cublasCreate_v2"};
    for (int i = 0; i < 2; i++) {
        void *fn = dlsym(lib, names[i]);
        Dl_info info;
        if (!fn || !dladdr(fn, &info) || !info.dli_fname || !strstr(info.dli_fname, "fake_cudnn")) {
            fprintf(stderr, "%s resolved outside the library\n", names[i]);
            return 1;
        }
        printf("%s -> %s\n", names[i], strrchr(info.dli_fname, '/') + 1);
    }
    void *missing = dlsym(lib, "cuMemAlloc_v2");
    printf("cuMemAlloc_v2 in fake library -> %s\n", missing ? "FOUND" : "NULL");
    return missing ? 1 : 0;
}
