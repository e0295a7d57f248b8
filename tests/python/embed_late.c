/* A C program that embeds CPython the way a plugin host or a server does:
 * nothing of Python is linked at build time.  It first allocates from C
 * (so tensorleak has captured a stack, and found no interpreter, before
 * libpython exists in the process), then dlopen()s the libpython named on
 * its command line, with RTLD_GLOBAL or RTLD_LOCAL, gives Python one C
 * function of its own (gpu_malloc: cudaMalloc of the simulated runtime) and
 * runs a script that calls it from named functions.  test_pyframes.py checks
 * that the script's leak is reported at its Python lines.
 *
 * Usage: embed_late LIBPYTHON SCRIPT global|local
 * PYTHONHOME must name that libpython's prefix (its standard library). */
#include "cudart_compat.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

/* The few C API declarations used, written out: they are the stable ABI
 * (PyMethodDef, METH_O) of every CPython 3. */
typedef void *(*py_cfunc)(void *self, void *arg);
struct py_method_def {
    const char *name;
    py_cfunc meth;
    int flags;
    const char *doc;
};
#define PY_METH_O 0x0008

static long (*py_long_as_long)(void *);
static void *(*py_long_from_long)(long);

/* Called by the script: leaks size bytes of device memory, returns 0. */
static void *gpu_malloc(void *self, void *size)
{
    (void)self;
    void *p = NULL;
    if (cudaMalloc(&p, (size_t)py_long_as_long(size)) != cudaSuccess)
        return py_long_from_long(1);
    return py_long_from_long(0);
}

static struct py_method_def gpu_malloc_def = {"gpu_malloc", gpu_malloc, PY_METH_O, NULL};

/* Before any Python exists: leaks 1 MiB from C. */
__attribute__((noinline)) static int allocate_before_python(void)
{
    void *p = NULL;
    return cudaMalloc(&p, 1 << 20) == cudaSuccess ? 0 : 1;
}

static void *sym(void *lib, const char *name)
{
    void *p = dlsym(lib, name);
    if (!p)
        fprintf(stderr, "embed_late: %s: %s\n", name, dlerror());
    return p;
}

int main(int argc, char **argv)
{
    if (argc != 4 || (strcmp(argv[3], "global") != 0 && strcmp(argv[3], "local") != 0)) {
        fprintf(stderr, "usage: embed_late LIBPYTHON SCRIPT global|local\n");
        return 2;
    }
    if (allocate_before_python() != 0) {
        fprintf(stderr, "embed_late: cudaMalloc failed\n");
        return 1;
    }
    void *lib = dlopen(argv[1], RTLD_NOW | (strcmp(argv[3], "global") == 0 ? RTLD_GLOBAL : RTLD_LOCAL));
    if (!lib) {
        fprintf(stderr, "embed_late: %s\n", dlerror());
        return 1;
    }
    void (*initialize_ex)(int) = (void (*)(int))sym(lib, "Py_InitializeEx");
    int (*finalize_ex)(void) = (int (*)(void))sym(lib, "Py_FinalizeEx");
    void *(*cfunction_new)(struct py_method_def *, void *, void *) =
        (void *(*)(struct py_method_def *, void *, void *))sym(lib, "PyCFunction_NewEx");
    void *(*add_module)(const char *) = (void *(*)(const char *))sym(lib, "PyImport_AddModule");
    void *(*module_dict)(void *) = (void *(*)(void *))sym(lib, "PyModule_GetDict");
    int (*dict_set)(void *, const char *, void *) = (int (*)(void *, const char *, void *))sym(lib, "PyDict_SetItemString");
    int (*run_string)(const char *, void *) = (int (*)(const char *, void *))sym(lib, "PyRun_SimpleStringFlags");
    py_long_as_long = (long (*)(void *))sym(lib, "PyLong_AsLong");
    py_long_from_long = (void *(*)(long))sym(lib, "PyLong_FromLong");
    if (!initialize_ex || !finalize_ex || !cfunction_new || !add_module || !module_dict || !dict_set || !run_string ||
        !py_long_as_long || !py_long_from_long)
        return 1;
    initialize_ex(0);
    void *fn = cfunction_new(&gpu_malloc_def, NULL, NULL);
    void *main_dict = module_dict(add_module("__main__"));
    if (!fn || !main_dict || dict_set(main_dict, "gpu_malloc", fn) != 0)
        return 1;
    /* The path goes into a Python string literal: no quote or backslash. */
    if (strchr(argv[2], '\'') || strchr(argv[2], '\\')) {
        fprintf(stderr, "embed_late: the script's path has a quote or a backslash\n");
        return 2;
    }
    char code[8192];
    snprintf(code, sizeof code, "exec(compile(open('%s').read(), '%s', 'exec'))", argv[2], argv[2]);
    if (run_string(code, NULL) != 0)
        return 1;
    return finalize_ex() == 0 ? 0 : 1;
}
