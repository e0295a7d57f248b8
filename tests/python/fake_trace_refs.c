/*
 * fake_trace_refs.c — an executable that exports the CPython C API symbols
 * pyframes.c looks up (find_interpreter), with its type objects laid out as
 * a default build's or as a --with-trace-refs build's, for test_pyframes.py.
 *
 *     py_fake_trace_refs trace-refs|default
 *
 * A --with-trace-refs build puts two pointers (_ob_next, _ob_prev: the
 * refchain of every live object) before PyObject's refcount and type, so in
 * PyTypeObject word 6 is tp_basicsize and tp_dealloc is word 8; in a
 * default build word 6 is tp_dealloc.  tensorleak wraps PyCode_Type's
 * deallocator at byte offset 48 (word 6) to count code-object frees; it must
 * do so only in the default layout: in the other one it would write a
 * function pointer over tp_basicsize.
 *
 * Allocates on the simulated runtime (1 MiB kept, 2 MiB freed), then prints
 * every word of PyCode_Type that is not what it was before, where its
 * tp_dealloc slot now points (dladdr: a function in libtensorleak.so once
 * wrapped), and calls that slot three times on a fake code object, as the
 * interpreter would, printing how often the original deallocator ran.
 * Always exits 0: the checks are the test's.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cudart_compat.h"

#define TYPE_WORDS 16
/* Word indices of PyTypeObject's first fields (PyObject_VAR_HEAD, then
 * tp_name, tp_basicsize, tp_itemsize, tp_dealloc), shifted by `extra`. */
enum { OB_REFCNT, OB_TYPE, OB_SIZE, TP_NAME, TP_BASICSIZE, TP_ITEMSIZE, TP_DEALLOC };

uintptr_t PyType_Type[TYPE_WORDS], PyCode_Type[TYPE_WORDS], PyUnicode_Type[TYPE_WORDS];
const unsigned long Py_Version = 0x030c01f0; /* 3.12.1 final */

static int original_deallocs;
static void code_dealloc(void *code)
{
    (void)code;
    original_deallocs++;
}
static void type_dealloc(void *o) { (void)o; }
static void str_dealloc(void *o) { (void)o; }

/* No thread state: no Python frame is read, only the interpreter found. */
void *PyGILState_GetThisThreadState(void) { return NULL; }
void *_PyThreadState_UncheckedGet(void) { return NULL; }
const char *Py_GetVersion(void) { return "3.12.1 (fake)"; }
int Py_IsInitialized(void) { return 1; }
int PyCode_Addr2Line(void *code, int offset)
{
    (void)code;
    (void)offset;
    return 1;
}
void *_PyEval_EvalFrameDefault(void *tstate, void *frame, int throwflag)
{
    (void)tstate;
    (void)throwflag;
    return frame;
}

static void lay_out(uintptr_t *t, int extra, const char *name, intptr_t basicsize, intptr_t itemsize,
                    void (*dealloc)(void *))
{
    t[extra + OB_REFCNT] = 1;
    t[extra + OB_TYPE] = (uintptr_t)PyType_Type;
    t[extra + TP_NAME] = (uintptr_t)name;
    t[extra + TP_BASICSIZE] = (uintptr_t)basicsize;
    t[extra + TP_ITEMSIZE] = (uintptr_t)itemsize;
    t[extra + TP_DEALLOC] = (uintptr_t)dealloc;
}

int main(int argc, char **argv)
{
    int extra = argc > 1 && strcmp(argv[1], "trace-refs") == 0 ? 2 : 0;
    lay_out(PyType_Type, extra, "type", 920, 40, type_dealloc);
    lay_out(PyCode_Type, extra, "code", 200, 2, code_dealloc);
    lay_out(PyUnicode_Type, extra, "str", 80, 1, str_dealloc);
    if (extra) { /* the refchain: type <-> code <-> str <-> type */
        PyType_Type[0] = (uintptr_t)PyCode_Type, PyType_Type[1] = (uintptr_t)PyUnicode_Type;
        PyCode_Type[0] = (uintptr_t)PyUnicode_Type, PyCode_Type[1] = (uintptr_t)PyType_Type;
        PyUnicode_Type[0] = (uintptr_t)PyType_Type, PyUnicode_Type[1] = (uintptr_t)PyCode_Type;
    }
    uintptr_t before[TYPE_WORDS];
    memcpy(before, PyCode_Type, sizeof before);

    void *kept = NULL, *freed = NULL;
    if (cudaMalloc(&kept, 1 << 20) != cudaSuccess || cudaMalloc(&freed, 2 << 20) != cudaSuccess ||
        cudaFree(freed) != cudaSuccess)
        printf("allocation failed\n");

    int changed = 0;
    for (int i = 0; i < TYPE_WORDS; i++)
        if (PyCode_Type[i] != before[i]) {
            printf("word %d: %#lx -> %#lx\n", i, (unsigned long)before[i], (unsigned long)PyCode_Type[i]);
            changed++;
        }
    printf("words changed: %d\n", changed);

    void (*dealloc)(void *) = (void (*)(void *))PyCode_Type[extra + TP_DEALLOC];
    Dl_info at;
    if (dealloc == code_dealloc)
        printf("tp_dealloc: original\n");
    else if (dladdr((void *)dealloc, &at) && at.dli_fname)
        printf("tp_dealloc: %s in %s\n", at.dli_sname ? at.dli_sname : "?", at.dli_fname);
    else
        printf("tp_dealloc: unknown %p\n", (void *)dealloc);
    uintptr_t code_object[4] = {1, (uintptr_t)PyCode_Type, 0, 0};
    for (int i = 0; i < 3; i++)
        dealloc(code_object);
    printf("original deallocs: %d\n", original_deallocs);
    return 0;
}
