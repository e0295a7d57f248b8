/*
 * pyframes.c — Python frames in allocation stacks.
 *
 * When the allocating thread runs Python code, its frame chain is read in
 * the hook and merged into the native stack, so a report names the line of
 * Python that allocated.  The interpreter is found at run time
 * (dlsym on the process's global scope: a shared libpython or an executable
 * that exports the C API; else a libpython*.so loaded with RTLD_LOCAL, by
 * its own handle); without one nothing here costs more than one relaxed
 * load per captured stack.
 *
 * Safety.  The hook may run with the GIL released (ctypes.CDLL, PyTorch's
 * operator bindings, Cython `nogil` calls): the thread's own frame chain
 * cannot change while the thread is inside the call, so it is read as is,
 * without the GIL, the way faulthandler reads it from a signal handler.
 * Nothing here runs Python code, allocates a Python object or takes a lock
 * of the interpreter: the thread state comes from PyGILState_GetThisThreadState
 * (a thread-specific-storage read) or, from 3.12 on, the thread-local current
 * thread state; frames and code objects are read at the offsets of the
 * running version (table below); the line comes from PyCode_Addr2Line, a pure
 * decoder of the code object's immutable location table.  Every code object
 * must have PyCode_Type as its type and every link must be aligned; a chain
 * that fails a check gives the native stack alone and is counted
 * (tl_py_chains_unreadable), never guessed.
 *
 * Cost.  Each distinct code location (code object, instruction offset) is
 * resolved to function, file and line once, then found in a per-thread
 * cache; the stack stores a tagged value per Python frame (tl_internal.h:
 * TL_PYFRAME_TAG | location id), so call-site interning, growth, owners,
 * suppressions and the reports' frame caches treat it as any other frame.
 * A freed code object's address may be reused by another: the cache key is
 * the code object's address, the instruction offset and the addresses of
 * its name and file strings, so a reused address with other strings misses.
 *
 * Merging.  Before 3.11 every Python frame runs in a native
 * _PyEval_EvalFrameDefault frame of its own; from 3.11 one native frame runs
 * a run of Python frames, which ends at an entry frame (3.11: is_entry) or,
 * from 3.12, at a shim frame owned by the C stack that each entry into the
 * evaluation loop pushes.  Each native frame inside _PyEval_EvalFrameDefault
 * is replaced by its run, innermost first (py-spy's and pystack's merge).
 * Python frames whose evaluation frame is not on the native stack (the
 * native walk stopped early) go after the native frames, outermost last.
 *
 * Not supported, skipped with one note: free-threaded builds (another object
 * header) and versions outside 3.9-3.13.  Sub-interpreters: from 3.12 the
 * thread's current thread state is the running interpreter's, so a
 * sub-interpreter's frames are named (the frames of the interpreter that
 * called into it are not joined); before 3.12 only the thread's bound state
 * (the main interpreter's) can be found once the GIL is released, so its
 * frames are named.  The interpreter is looked for at the first stack
 * captured and, while none is found, again at the first one after each
 * dlopen or dlmopen (dlopen_trampoline.S), so a program that embeds Python
 * after it started allocating (a server, a plugin host) gets its frames;
 * "finding the interpreter" below says what is and is not found.
 */
#include "tl_internal.h"

#include <dlfcn.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>

/* Field offsets per version, as offsetof gives them against each version's
 * headers (internal ones included) on x86-64.  No program in this tree prints
 * them; tests/python/test_pyframes.py reads a leak's Python line through them
 * on every CPython 3.9-3.13 installed. */
struct py_layout {
    unsigned version;                 /* 0x30b = 3.11 */
    int ts_frame;                     /* 3.9/3.10: frame; 3.13: current_frame */
    int ts_cframe, cf_current;        /* 3.11/3.12: cframe->current_frame */
    int ts_interp;
    int fr_code, fr_back, fr_instr;   /* f_code/f_executable, f_back/previous, f_lasti/prev_instr/instr_ptr */
    int fr_owner, fr_entry;           /* -1: no such field */
    int co_filename, co_name, co_qualname, co_code, co_firstlineno;
    int u_state, u_length, u_ascii_size, u_compact_size;
};

static const struct py_layout layouts[] = {
    /* 3.9.18 */ {0x309, .ts_frame=24, .ts_cframe=0, .cf_current=0, .ts_interp=16, .fr_code=32, .fr_back=24, .fr_instr=104, .fr_owner=-1, .fr_entry=-1, .co_filename=104, .co_name=112, .co_qualname=0, .co_code=0, .co_firstlineno=40, .u_state=32, .u_length=16, .u_ascii_size=48, .u_compact_size=72},
    /* 3.10.13 */ {0x30a, .ts_frame=24, .ts_cframe=0, .cf_current=0, .ts_interp=16, .fr_code=32, .fr_back=24, .fr_instr=96, .fr_owner=-1, .fr_entry=-1, .co_filename=104, .co_name=112, .co_qualname=0, .co_code=0, .co_firstlineno=40, .u_state=32, .u_length=16, .u_ascii_size=48, .u_compact_size=72},
    /* 3.11.7 */ {0x30b, .ts_frame=0, .ts_cframe=56, .cf_current=8, .ts_interp=16, .fr_code=32, .fr_back=48, .fr_instr=56, .fr_owner=69, .fr_entry=68, .co_filename=112, .co_name=120, .co_qualname=128, .co_code=184, .co_firstlineno=72, .u_state=32, .u_length=16, .u_ascii_size=48, .u_compact_size=72},
    /* 3.12.1 */ {0x30c, .ts_frame=0, .ts_cframe=56, .cf_current=0, .ts_interp=16, .fr_code=0, .fr_back=8, .fr_instr=56, .fr_owner=70, .fr_entry=-1, .co_filename=112, .co_name=120, .co_qualname=128, .co_code=192, .co_firstlineno=68, .u_state=32, .u_length=16, .u_ascii_size=40, .u_compact_size=56},
    /* 3.13.0 */ {0x30d, .ts_frame=72, .ts_cframe=0, .cf_current=0, .ts_interp=16, .fr_code=0, .fr_back=8, .fr_instr=56, .fr_owner=70, .fr_entry=-1, .co_filename=112, .co_name=120, .co_qualname=128, .co_code=200, .co_firstlineno=68, .u_state=32, .u_length=16, .u_ascii_size=40, .u_compact_size=56},
};

#define FRAME_OWNED_BY_CSTACK 3 /* 3.12, 3.13 (Include/internal/pycore_frame.h) */
#define MAX_CHAIN 4096          /* a longer chain is a loop: unreadable */

enum { PY_UNKNOWN = 0, PY_NONE, PY_READY };
atomic_int tl_py_state; /* PY_UNKNOWN, PY_NONE (= 1, tl_py_maybe), PY_READY */
#define py_state tl_py_state
static pthread_mutex_t detect_lock = PTHREAD_MUTEX_INITIALIZER;
static const struct py_layout *L;
static void *(*current_tstate)(void);   /* 3.12+: this thread's, while it holds the GIL */
static void *(*gil_state_tstate)(void); /* the one bound to this thread, GIL held or not */
static int (*is_initialized)(void);
static int (*addr2line)(void *code, int byte_offset);
static uintptr_t code_type, unicode_type;
static uintptr_t eval_lo, eval_hi; /* _PyEval_EvalFrameDefault's code, 0 = unknown */
static atomic_ulong chains_unreadable; /* rare: a shared counter is fine here */
/* Code objects freed since the interpreter was found, counted by a wrapper
 * around PyCode_Type's tp_dealloc (see count_code_frees); 0 while unknown. */
static atomic_ulong code_frees;
/* PyCode_Type's deallocator slot, once it holds the wrapper: NULL while
 * frees are not counted. */
typedef _Atomic(void (*)(void *)) dealloc_slot;
static _Atomic(dealloc_slot *) code_dealloc_slot;
static pthread_mutex_t loc_lock;

/* A fork while another thread holds detect_lock or loc_lock (resolving a
 * new location: malloc and the line-table decode inside) would leave the
 * child's copy locked forever and hang its first new Python location.  Both
 * are held across fork instead (a participant of preload.c's fork list), so
 * the child gets them free and the tables consistent.  Leaf locks: nothing
 * under them forks or takes another. */
void tl_pyframes_before_fork(void)
{
    pthread_mutex_lock(&detect_lock);
    pthread_mutex_lock(&loc_lock);
}

void tl_pyframes_after_fork(void)
{
    pthread_mutex_unlock(&loc_lock);
    pthread_mutex_unlock(&detect_lock);
}

unsigned long tl_py_chains_unreadable(void)
{
    return atomic_load_explicit(&chains_unreadable, memory_order_relaxed);
}

long long tl_py_code_frees(void)
{
    if (!atomic_load_explicit(&code_dealloc_slot, memory_order_relaxed))
        return -1;
    return (long long)atomic_load_explicit(&code_frees, memory_order_relaxed);
}

/* ---- finding the interpreter ---------------------------------------------
 * At the first captured stack, and again at the first one after each dlopen
 * or dlmopen while none was found: an embedding program or a plugin host may
 * load libpython long after its first allocation (dlopen_trampoline.S calls
 * tl_dlopen_route).  Its symbols are looked up in the process's global scope
 * (a libpython linked in, or loaded with RTLD_GLOBAL; an executable that
 * exports the C API), else in a loaded libpython*.so that only its own
 * handle sees (RTLD_LOCAL, dlopen's default, or a plugin linked with it).
 * Anything else (another link-map namespace, a libpython under another
 * name, an executable that does not export the API) is not found: stacks
 * stay native.
 *
 * The look itself runs without detect_lock, which is taken only to publish
 * what it found: dlsym, dladdr and dlopen take the loader's lock, and a
 * thread inside dlopen holds that lock while a library constructor of its
 * allocates and may wait for detect_lock. */
struct py_found {
    int state;     /* PY_NONE or PY_READY */
    bool again;    /* PY_NONE because no interpreter is loaded: look again after the next dlopen */
    char why[192]; /* the one-line note when one is found and cannot be read */
    void *scope;   /* where its symbols are: RTLD_DEFAULT or its library's handle */
    void *pin;     /* a reference on its library, or NULL: see find_interpreter */
    const struct py_layout *layout;
    struct py_layout debug; /* 3.13: the running build's own offsets */
    void *(*current_tstate)(void), *(*gil_state_tstate)(void);
    int (*is_initialized)(void);
    int (*addr2line)(void *, int);
    uintptr_t code_type, unicode_type, eval_lo, eval_hi;
};

static unsigned running_version(void *scope)
{
    const unsigned long *hex = tl_real_dlsym(scope, "Py_Version"); /* 3.11+ */
    if (hex)
        return (unsigned)(*hex >> 16);
    const char *(*get_version)(void) = (const char *(*)(void))tl_real_dlsym(scope, "Py_GetVersion");
    if (!get_version)
        return 0;
    unsigned major = 0, minor = 0;
    if (sscanf(get_version(), "%u.%u", &major, &minor) != 2)
        return 0;
    return major << 8 | minor;
}

/* 3.13 publishes its own offsets for debuggers at the start of _PyRuntime
 * (_Py_DebugOffsets, Include/internal/pycore_runtime.h: cookie "xdebugpy",
 * version, free_threaded, then sections of uint64 offsets).  Those of the
 * running build are used over the table's; the layout of the struct itself
 * is 3.13's (3.14 reorders it).  False (with the note in f->why) when they
 * rule the chain out: a free-threaded build, a cookie that is not there, or
 * words that do not agree with 3.13.0's layout of the struct. */
static struct py_layout debug_layout;

static bool layout_from_debug_offsets(struct py_found *f, unsigned v)
{
    const uint64_t *d = tl_real_dlsym(f->scope, "_PyRuntime");
    if (!d || memcmp(d, "xdebugpy", 8) != 0 || (d[1] >> 16) != v) {
        snprintf(f->why, sizeof f->why, "Python 3.13 without its debug offsets (_PyRuntime): stacks show native frames only");
        return false;
    }
    if (d[2]) {
        snprintf(f->why, sizeof f->why, "free-threaded Python: its frames are not read; stacks show native frames only");
        return false;
    }
    /* Word indices of 3.13's _Py_DebugOffsets: thread_state at 19,
     * interpreter_frame at 28, code_object at 34 (each section starts with
     * its struct's size).  They are only right while the struct is 3.13.0's:
     * each offset read must lie inside its section's struct and pointers be
     * aligned, and two sections after them must hold what they hold in every
     * default build: PyObject's {size 16, ob_type 8} at 44 and the str
     * section's state, length and PyASCIIObject size (68-70) equal to the
     * table's.  A field added before them moves those words: refused. */
    static const struct {
        int size_at, first, last;
    } sections[] = {{19, 20, 27}, {28, 29, 33}, {34, 35, 43}};
    bool agree = d[44] == 16 && d[45] == 8 && d[68] == (uint64_t)f->layout->u_state &&
                 d[69] == (uint64_t)f->layout->u_length && d[70] == (uint64_t)f->layout->u_ascii_size;
    for (size_t s = 0; s < sizeof sections / sizeof sections[0]; s++)
        for (int i = sections[s].first; i <= sections[s].last; i++)
            agree = agree && d[sections[s].size_at] <= 1u << 16 && d[i] < d[sections[s].size_at];
    const int pointers[] = {22, 23, 29, 30, 31, 35, 36, 37};
    for (size_t i = 0; i < sizeof pointers / sizeof pointers[0]; i++)
        agree = agree && d[pointers[i]] % 8 == 0;
    if (!agree) {
        snprintf(f->why, sizeof f->why,
                 "Python 3.13 whose debug offsets (_PyRuntime) are not laid out as 3.13.0's: stacks show native frames only");
        return false;
    }
    f->debug = *f->layout;
    f->debug.ts_interp = (int)d[22];
    f->debug.ts_frame = (int)d[23];
    f->debug.fr_back = (int)d[29];
    f->debug.fr_code = (int)d[30];
    f->debug.fr_instr = (int)d[31];
    f->debug.fr_owner = (int)d[33];
    f->debug.co_filename = (int)d[35];
    f->debug.co_name = (int)d[36];
    f->debug.co_qualname = (int)d[37];
    f->debug.co_firstlineno = (int)d[39];
    f->debug.co_code = (int)d[43];
    f->layout = &f->debug;
    return true;
}

/* The memo of tl_py_read trusts a frame that sits at the same address and
 * runs the same code object at the same instruction as at the thread's last
 * capture, reading nothing but the frame.  That is only right while no code
 * object has been freed since: code made and freed at run time (exec, FX,
 * torch.compile) comes back at the same addresses with other names.  The
 * interpreter says nothing when a code object goes (PyCode_AddWatcher is
 * 3.12+ and needs the GIL to register), so PyCode_Type's deallocator is
 * wrapped: the wrapper counts, then calls the interpreter's own, so the
 * program sees the same deallocation.  The slot is one aligned pointer,
 * replaced atomically: a thread freeing a code object at that moment runs
 * either function.  PyCode_Type is a static type that cannot be subclassed,
 * so no other type inherits the slot.  Never undone: this library is never
 * unloaded while the program runs. */
#define TP_DEALLOC_OFFSET 48 /* PyObject_VAR_HEAD, tp_name, tp_basicsize, tp_itemsize (every 3.x) */
static _Atomic(void (*)(void *)) code_dealloc;

static void code_dealloc_counted(void *code)
{
    atomic_fetch_add_explicit(&code_frees, 1, memory_order_relaxed);
    atomic_load_explicit(&code_dealloc, memory_order_acquire)(code);
}

/* PyCode_Type laid out as the offsets above say: a type object whose type
 * is the type of types (PyType_Type is its own type), named "code", with
 * a plausible size, and a deallocator in the interpreter's own code.  A
 * build with a bigger object header (--with-trace-refs puts two links first)
 * fails this, so its tp_basicsize is never taken for tp_dealloc; the memo
 * then checks names, as without the count. */
static bool code_type_as_expected(uintptr_t type, void (*dealloc)(void *))
{
    const uintptr_t *t = (const uintptr_t *)type;
    uintptr_t meta = t[1];
    const char *name = (const char *)t[3];
    intptr_t basicsize = (intptr_t)t[4];
    Dl_info type_at, dealloc_at;
    return meta >= 4096 && !(meta & 7) && ((const uintptr_t *)meta)[1] == meta && (uintptr_t)name >= 4096 &&
           strcmp(name, "code") == 0 &&
           basicsize >= 64 && basicsize <= 4096 && dealloc && dladdr((void *)type, &type_at) &&
           dladdr((void *)dealloc, &dealloc_at) && type_at.dli_fbase == dealloc_at.dli_fbase;
}

static void count_code_frees(void)
{
    dealloc_slot *slot = (dealloc_slot *)(code_type + TP_DEALLOC_OFFSET);
    void (*current)(void *) = atomic_load(slot);
    if (current == code_dealloc_counted || !code_type_as_expected(code_type, current))
        return;
    /* Published before the slot points at the wrapper: a thread that calls
     * the wrapper finds it (acquire there). */
    atomic_store_explicit(&code_dealloc, current, memory_order_release);
    if (atomic_compare_exchange_strong(slot, &current, code_dealloc_counted)) {
        atomic_store(&code_dealloc_slot, slot);
    }
}

/* glibc's dlopen (0) and dlmopen (1), or whatever is next after us. */
static void *real_dl(int which)
{
    static _Atomic(void *) real[2];
    void *fn = atomic_load_explicit(&real[which], memory_order_acquire);
    if (!fn) {
        fn = tl_real_dlsym(RTLD_NEXT, which ? "dlmopen" : "dlopen");
        atomic_store_explicit(&real[which], fn, memory_order_release);
    }
    return fn;
}

static void unpin(void *handle)
{
    /* glibc's dlclose, not modules.c's: this only drops our reference. */
    int (*close_fn)(void *) = (int (*)(void *))tl_real_dlsym(RTLD_NEXT, "dlclose");
    if (handle && close_fn)
        close_fn(handle);
}

struct libpython_paths {
    char *path[8];
    int n;
};

static int collect_libpython(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    struct libpython_paths *c = arg;
    const char *name = info->dlpi_name, *base = name ? strrchr(name, '/') : NULL;
    base = base ? base + 1 : name;
    if (base && strncmp(base, "libpython", 9) == 0 && c->n < (int)(sizeof c->path / sizeof c->path[0])) {
        c->path[c->n] = strdup(name);
        if (c->path[c->n])
            c->n++;
    }
    return 0;
}

/* A handle on a loaded libpython*.so that exports the C API, or NULL.  The
 * paths are copied first: dl_iterate_phdr holds a lock of the loader's that
 * dlopen must not be called under. */
static void *local_libpython(void)
{
    struct libpython_paths c = {.n = 0};
    dl_iterate_phdr(collect_libpython, &c);
    void *(*open_fn)(const char *, int) = (void *(*)(const char *, int))real_dl(0);
    void *found = NULL;
    for (int i = 0; i < c.n; i++) {
        void *h = !found && open_fn ? open_fn(c.path[i], RTLD_NOLOAD | RTLD_LAZY) : NULL;
        if (h && tl_real_dlsym(h, "PyGILState_GetThisThreadState"))
            found = h;
        else
            unpin(h);
        free(c.path[i]);
    }
    return found;
}

/* A reference on the library that defines sym (NULL for the executable,
 * which is never unloaded). */
static void *pin_library_of(void *sym)
{
    Dl_info info;
    void *(*open_fn)(const char *, int) = (void *(*)(const char *, int))real_dl(0);
    if (!open_fn || !dladdr(sym, &info) || !info.dli_fname || !info.dli_fname[0])
        return NULL;
    return open_fn(info.dli_fname, RTLD_NOLOAD | RTLD_LAZY);
}

/* Fills f; takes no lock of ours.  The interpreter's library is kept
 * loaded (f->pin, a reference of our own) once its frames are read: the
 * hooks call into it (Py_IsInitialized, PyGILState_GetThisThreadState), and
 * a program or plugin host that dlclose'd it would otherwise leave them
 * calling unmapped code. */
static void find_interpreter(struct py_found *f)
{
    memset(f, 0, sizeof *f);
    f->state = PY_NONE;
    f->scope = RTLD_DEFAULT;
    void *gil_tstate = tl_real_dlsym(RTLD_DEFAULT, "PyGILState_GetThisThreadState");
    if (gil_tstate) {
        f->pin = pin_library_of(gil_tstate);
    } else if ((f->pin = local_libpython()) != NULL) {
        f->scope = f->pin;
        gil_tstate = tl_real_dlsym(f->scope, "PyGILState_GetThisThreadState");
    }
    if (!gil_tstate) {
        f->again = true; /* no interpreter in the process (yet) */
        return;
    }
    unsigned v = running_version(f->scope);
    for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++)
        if (layouts[i].version == v)
            f->layout = &layouts[i];
    if (!f->layout) {
        snprintf(f->why, sizeof f->why,
                 "Python %u.%u: frame layout unknown (3.9-3.13 are read); stacks show native frames only", v >> 8,
                 v & 0xff);
        return;
    }
    if (v == 0x30d && !layout_from_debug_offsets(f, v))
        return;
    if (tl_real_dlsym(f->scope, "_Py_DecRefShared")) {
        snprintf(f->why, sizeof f->why, "free-threaded Python: its frames are not read; stacks show native frames only");
        return;
    }
    /* From 3.12 the current thread state is thread-local (NULL while this
     * thread has released the GIL); before, _PyThreadState_UncheckedGet
     * answers with whichever thread holds the GIL, so only the GILState
     * binding is this thread's own. */
    void *unchecked = v >= 0x30d ? tl_real_dlsym(f->scope, "PyThreadState_GetUnchecked")
                      : v == 0x30c ? tl_real_dlsym(f->scope, "_PyThreadState_UncheckedGet")
                                   : NULL;
    f->current_tstate = (void *(*)(void))unchecked;
    f->gil_state_tstate = (void *(*)(void))gil_tstate;
    f->is_initialized = (int (*)(void))tl_real_dlsym(f->scope, "Py_IsInitialized");
    f->addr2line = (int (*)(void *, int))tl_real_dlsym(f->scope, "PyCode_Addr2Line");
    f->code_type = (uintptr_t)tl_real_dlsym(f->scope, "PyCode_Type");
    f->unicode_type = (uintptr_t)tl_real_dlsym(f->scope, "PyUnicode_Type");
    if (!f->is_initialized || !f->addr2line || !f->code_type || !f->unicode_type) {
        snprintf(f->why, sizeof f->why, "Python %u.%u without its C API exported: stacks show native frames only",
                 v >> 8, v & 0xff);
        return;
    }
    void *eval = tl_real_dlsym(f->scope, "_PyEval_EvalFrameDefault");
    Dl_info info;
    const ElfW(Sym) *sym = NULL;
    if (eval && dladdr1(eval, &info, (void **)&sym, RTLD_DL_SYMENT) && sym && sym->st_size) {
        f->eval_lo = (uintptr_t)eval;
        f->eval_hi = f->eval_lo + sym->st_size;
    }
    f->state = PY_READY;
}

/* dlopen and dlmopen calls so far (tl_dlopen_route), and whether the last
 * look found no interpreter at all, so that a library loaded since may
 * bring one (an interpreter found and not read is not looked for again: its
 * note is said once). */
static atomic_ulong loads_begun;
static atomic_bool look_again;

static void detect(void)
{
    if (atomic_load(&py_state) != PY_UNKNOWN)
        return;
    unsigned long loads = atomic_load(&loads_begun);
    struct py_found f;
    find_interpreter(&f);
    pthread_mutex_lock(&detect_lock);
    bool publish = atomic_load(&py_state) == PY_UNKNOWN, ready = publish && f.state == PY_READY;
    if (ready) {
        if (f.layout == &f.debug) {
            debug_layout = f.debug;
            f.layout = &debug_layout;
        }
        L = f.layout;
        current_tstate = f.current_tstate;
        gil_state_tstate = f.gil_state_tstate;
        is_initialized = f.is_initialized;
        addr2line = f.addr2line;
        code_type = f.code_type;
        unicode_type = f.unicode_type;
        eval_lo = f.eval_lo;
        eval_hi = f.eval_hi;
        count_code_frees();
    } else if (publish && f.why[0]) {
        tl_warn(NULL, "%s", f.why);
    }
    if (publish) {
        atomic_store(&look_again, f.again);
        /* A dlopen that began while we looked may be loading one: the next
         * stack looks again. */
        bool loading = f.again && atomic_load(&loads_begun) != loads;
        if (!loading)
            atomic_store(&py_state, f.state);
    }
    pthread_mutex_unlock(&detect_lock);
    if (!ready)
        unpin(f.pin);
}

/* Called by dlopen_trampoline.S before every dlopen and dlmopen, which it
 * then jumps to (so glibc sees the program's call, not ours).  When no
 * interpreter was found, the first stack captured after this looks again,
 * by which time the library is loaded, unless that stack is captured by
 * another thread while this dlopen is still on its way to the loader's lock:
 * that look finds nothing, and the next dlopen (Python loads every extension
 * module with one, ctypes every library) looks again.  No allocation, no
 * loader call beyond the first lookup of the real function; detect_lock is
 * never held across anything that waits. */
void *tl_dlopen_route(int which, uintptr_t arg2, uintptr_t arg3)
{
    void *fn = real_dl(which);
    /* RTLD_NOLOAD loads nothing: tensorleak's own lookups in libcuda.so.1
     * (lookup.c), which may come once per allocation, look for nothing. */
    if ((int)(which ? arg3 : arg2) & RTLD_NOLOAD)
        return fn;
    atomic_fetch_add(&loads_begun, 1);
    /* Not in a raw-clone child (tl_active reads false there, gate.c): a
     * thread of ours may have held detect_lock at the clone. */
    if (atomic_load_explicit(&py_state, memory_order_relaxed) == PY_NONE && atomic_load(&tl_active)) {
        pthread_mutex_lock(&detect_lock);
        int none = PY_NONE;
        if (atomic_load(&look_again))
            atomic_compare_exchange_strong(&py_state, &none, PY_UNKNOWN);
        pthread_mutex_unlock(&detect_lock);
    }
    return fn;
}

/* ---- code locations -------------------------------------------------------
 * Two tables under one lock, filled on first sight only:
 *   code key (code object, offset, name, file) -> location id
 *   location (function, file, line)            -> location id
 * so two offsets on the same line share one frame value. */
struct pyloc {
    char *function, *file;
    int line;
};
#define LOC_CHUNK 4096u
#define LOC_DIR 1024u
static _Atomic(struct pyloc *) loc_dir[LOC_DIR];
static atomic_uint nlocs = 1; /* id 0: none */
static pthread_mutex_t loc_lock = PTHREAD_MUTEX_INITIALIZER; /* declared above (fork handlers) */

struct code_key {
    uintptr_t code, name, file, tag;
    int offset;
    uint32_t id; /* 0 = empty */
};
static struct code_key *code_tab;
static size_t code_cap, code_used;
struct loc_slot {
    uint64_t hash;
    uint32_t id;
};
static struct loc_slot *loc_tab;
static size_t loc_cap, loc_used;

static uint64_t mix(uint64_t h)
{
    h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ull;
    h = (h ^ (h >> 27)) * 0x94D049BB133111EBull;
    return h ^ (h >> 31);
}

static uint64_t str_hash(uint64_t h, const char *s)
{
    for (; s && *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001B3ull;
    return mix(h);
}

static struct pyloc *loc_at(uint32_t id)
{
    if (id == 0 || id / LOC_CHUNK >= LOC_DIR)
        return NULL;
    struct pyloc *chunk = atomic_load_explicit(&loc_dir[id / LOC_CHUNK], memory_order_acquire);
    return chunk ? &chunk[id % LOC_CHUNK] : NULL;
}

static bool same(const char *a, const char *b)
{
    return a == b || (a && b && strcmp(a, b) == 0);
}

/* Finds or adds the location; takes ownership of function and file (freed
 * when found).  Caller holds loc_lock.  0 when out of memory. */
static uint32_t loc_intern_locked(char *function, char *file, int line)
{
    uint64_t h = str_hash(str_hash((uint64_t)line * 0x9E3779B97F4A7C15ull, function), file) | 1;
    if (loc_used * 2 >= loc_cap) {
        size_t ncap = loc_cap ? loc_cap * 2 : 1024;
        struct loc_slot *nt = calloc(ncap, sizeof *nt);
        if (!nt)
            goto oom;
        for (size_t i = 0; i < loc_cap; i++)
            if (loc_tab[i].id)
                for (size_t j = loc_tab[i].hash & (ncap - 1);; j = (j + 1) & (ncap - 1))
                    if (!nt[j].id) {
                        nt[j] = loc_tab[i];
                        break;
                    }
        free(loc_tab);
        loc_tab = nt;
        loc_cap = ncap;
    }
    size_t j = h & (loc_cap - 1);
    for (; loc_tab[j].id; j = (j + 1) & (loc_cap - 1)) {
        struct pyloc *p = loc_at(loc_tab[j].id);
        if (loc_tab[j].hash == h && p && p->line == line && same(p->function, function) && same(p->file, file)) {
            free(function);
            free(file);
            return loc_tab[j].id;
        }
    }
    uint32_t id = atomic_load(&nlocs);
    if (id / LOC_CHUNK >= LOC_DIR)
        goto oom;
    struct pyloc *chunk = atomic_load(&loc_dir[id / LOC_CHUNK]);
    if (!chunk) {
        chunk = calloc(LOC_CHUNK, sizeof *chunk);
        if (!chunk)
            goto oom;
        atomic_store_explicit(&loc_dir[id / LOC_CHUNK], chunk, memory_order_release);
    }
    chunk[id % LOC_CHUNK] = (struct pyloc){function, file, line};
    atomic_store_explicit(&nlocs, id + 1, memory_order_release);
    loc_tab[j] = (struct loc_slot){h, id};
    loc_used++;
    return id;
oom:
    free(function);
    free(file);
    tl_note_dropped("out of memory for Python frame bookkeeping (the frame is left out)");
    return 0;
}

uintptr_t tl_pyloc_intern_strings(const char *function, const char *file, int line)
{
    char *fn = function ? strdup(function) : NULL, *fl = file ? strdup(file) : NULL;
    if ((function && !fn) || (file && !fl)) {
        free(fn);
        free(fl);
        return 0;
    }
    pthread_mutex_lock(&loc_lock);
    uint32_t id = loc_intern_locked(fn, fl, line);
    pthread_mutex_unlock(&loc_lock);
    return id ? TL_PYFRAME_TAG | id : 0;
}

bool tl_pyloc_lookup(uintptr_t frame, const char **function, const char **file, int *line)
{
    if (!tl_is_pyframe(frame))
        return false;
    uint32_t id = (uint32_t)(frame & ~TL_PYFRAME_TAG);
    if (id >= atomic_load_explicit(&nlocs, memory_order_acquire))
        return false;
    struct pyloc *p = loc_at(id);
    if (!p)
        return false;
    *function = p->function;
    *file = p->file;
    *line = p->line;
    return true;
}

static inline uintptr_t rd(uintptr_t base, int off)
{
    return *(const uintptr_t *)(base + (uintptr_t)off);
}

static inline bool plausible(uintptr_t p)
{
    return p >= 4096 && (p & 7) == 0 && p < (1ull << 47);
}

/* A str object's text as a malloc'd UTF-8 string, from its compact storage
 * (never PyUnicode_AsUTF8, which may allocate); NULL when it is not one. */
static char *read_str(uintptr_t s)
{
    if (!plausible(s) || rd(s, 8) != unicode_type)
        return NULL;
    uint32_t state = *(const uint32_t *)(s + (uintptr_t)L->u_state);
    unsigned kind = (state >> 2) & 7, compact = (state >> 5) & 1, ascii = (state >> 6) & 1;
    intptr_t len = (intptr_t)rd(s, L->u_length);
    if (!compact || len < 0 || len > 4096 || (kind != 1 && kind != 2 && kind != 4))
        return NULL;
    const unsigned char *data = (const unsigned char *)(s + (uintptr_t)(ascii ? L->u_ascii_size : L->u_compact_size));
    char *out = malloc((size_t)len * 4 + 1), *o = out;
    if (!out)
        return NULL;
    for (intptr_t i = 0; i < len; i++) {
        uint32_t c = kind == 1 ? data[i] : kind == 2 ? ((const uint16_t *)data)[i] : ((const uint32_t *)data)[i];
        if (c < 0x80) {
            *o++ = (char)c;
        } else if (c < 0x800) {
            *o++ = (char)(0xC0 | c >> 6);
            *o++ = (char)(0x80 | (c & 0x3F));
        } else if (c < 0x10000) {
            *o++ = (char)(0xE0 | c >> 12);
            *o++ = (char)(0x80 | ((c >> 6) & 0x3F));
            *o++ = (char)(0x80 | (c & 0x3F));
        } else {
            *o++ = (char)(0xF0 | c >> 18);
            *o++ = (char)(0x80 | ((c >> 12) & 0x3F));
            *o++ = (char)(0x80 | ((c >> 6) & 0x3F));
            *o++ = (char)(0x80 | (c & 0x3F));
        }
    }
    *o = 0;
    return out;
}

/* Whether the interpreter has begun to free what a chain is read from.  A
 * thread reads its own chain without the GIL (the hooks run inside calls
 * that released it), so nothing stops the main thread from finalizing
 * meanwhile: Py_FinalizeEx clears "initialized" first, then clears and
 * frees every other thread's state, the daemon threads' included, while
 * those threads are still inside a call (up to 3.13 at once; 3.14 keeps a
 * state until its thread lets go), then the modules, their code and the
 * memory it all lived in.  Nothing the interpreter offers lets a reader
 * hold that off, so the flag is read again before each frame and after
 * every wait (the location lock): a read then only faults if the thread is
 * preempted between the check and the load and the finalizing thread frees
 * that very memory in the meantime, where a check at the start alone left
 * the whole walk, lock waits included, open. */
static inline bool interpreter_gone(void)
{
    return !is_initialized();
}

static uint32_t resolve_slow(uintptr_t code, uintptr_t name, uintptr_t file, uintptr_t tag, int offset)
{
    pthread_mutex_lock(&loc_lock);
    uint32_t id = 0;
    if (interpreter_gone())
        goto out; /* the wait for the lock may have been long: see interpreter_gone */
    if (code_used * 2 >= code_cap) {
        size_t ncap = code_cap ? code_cap * 2 : 1024;
        struct code_key *nt = calloc(ncap, sizeof *nt);
        if (!nt) {
            pthread_mutex_unlock(&loc_lock);
            tl_note_dropped("out of memory for Python frame bookkeeping (the frame is left out)");
            return 0;
        }
        for (size_t i = 0; i < code_cap; i++)
            if (code_tab[i].id)
                for (size_t j = mix(code_tab[i].code ^ (uint64_t)code_tab[i].offset << 40) & (ncap - 1);;
                     j = (j + 1) & (ncap - 1))
                    if (!nt[j].id) {
                        nt[j] = code_tab[i];
                        break;
                    }
        free(code_tab);
        code_tab = nt;
        code_cap = ncap;
    }
    size_t j = mix(code ^ (uint64_t)offset << 40) & (code_cap - 1);
    for (; code_tab[j].id; j = (j + 1) & (code_cap - 1)) {
        struct code_key *k = &code_tab[j];
        if (k->code == code && k->offset == offset && k->name == name && k->file == file && k->tag == tag) {
            id = k->id;
            goto out;
        }
    }
    char *fn = read_str(name), *fl = read_str(file);
    /* The interpreter's own decoder of the location table: no allocation,
     * no lock, no Python code. */
    int line = addr2line((void *)code, offset);
    id = loc_intern_locked(fn, fl, line);
    if (id) {
        code_tab[j] = (struct code_key){code, name, file, tag, offset, id};
        code_used++;
    }
out:
    pthread_mutex_unlock(&loc_lock);
    return id;
}

/* ---- capture ------------------------------------------------------------ */
#define PY_CACHE_SLOTS 512
#define PY_MEMO TL_MAX_DEPTH
struct py_cache_slot {
    uintptr_t code, name, tag;
    int offset;
    uint32_t id;
};
/* One step of the thread's last chain: the frame's own words (hot: all a
 * chain found again reads, two steps to a cache line with flags apart) and
 * what they were resolved to, with the count of code objects freed when
 * they were last checked against the code object itself (cold). */
struct py_memo_hot {
    uintptr_t frame, code, ip;
};
struct py_memo_cold {
    uintptr_t name, tag;
    unsigned long frees;
    uint32_t id;
};
/* One TLS block, so one TLS lookup per capture.  memo: the frames of the
 * thread's last capture, step by step from the innermost.  A frame at the
 * same address, with the same entry/owner byte, running the same code
 * object at the same instruction, is the same location.  While no code
 * object has been freed since that step was checked, the frame's own cache
 * line says so (the code object it holds is alive, and no other can have
 * taken its address); otherwise the code object's name is compared too, by
 * pointer and text.  In a loop every step matches, and a capture whose every
 * step matches and that ends where the last one ended has the last one's
 * frames: tl_py_read says so (*same), and the caller skips the merge. */
struct py_tls {
    struct py_cache_slot cache[PY_CACHE_SLOTS];
    struct py_memo_hot memo[PY_MEMO];
    uint8_t memo_flags[PY_MEMO]; /* the frame's entry (3.11) or owner (3.12+) byte */
    struct py_memo_cold memo_cold[PY_MEMO];
    int memo_steps, memo_n, memo_max; /* where the last chain ended; -1 steps: unreadable */
    uintptr_t memo_end;               /* the link it stopped at (0: the chain's end) */
    unsigned long memo_frees;         /* code objects freed when every step was last checked */
    uintptr_t memo_out[PY_MEMO];      /* what it returned */
    bool memo_run_end[PY_MEMO];
};
static __thread TL_TLS_IE struct py_tls *py_tls; /* tl_thread_block */

/* The chain from f is the memo's, frame for frame, read from the frames
 * alone (no code object has been freed since every step was checked), and
 * ends where the last one did.
 *
 * Every address read is the chain's own: step k reads the frame the memo
 * names only once step k - 1 has found that very address in its back link
 * (step 0: the thread's current frame).  But the address is taken from the
 * memo, not from the link just loaded, and the compiler is not told the two
 * are equal (the empty asm): so no load waits for the one before, and the
 * processor reads the frames ahead of the checks, in parallel, where a walk
 * link by link waits a load's latency per frame.  A read it runs ahead of a
 * failing check is discarded, never faults: only the checked path retires. */
static inline bool same_chain(const struct py_tls *t, uintptr_t f, int flags_at, bool legacy)
{
    const int back = L->fr_back, code_at = L->fr_code, instr = L->fr_instr, steps = t->memo_steps;
    const bool shims = L->version >= 0x30c;
    if (steps <= 0 || steps > PY_MEMO || f != t->memo[0].frame)
        return false;
    for (int k = 0; k < steps; k++) {
        const struct py_memo_hot *m = &t->memo[k];
        uintptr_t a = m->frame;
        __asm__("" : "+r"(a));
        uint8_t flags = flags_at >= 0 ? *(const uint8_t *)(a + (uintptr_t)flags_at) : 0;
        if (flags != t->memo_flags[k])
            return false;
        if (!(shims && flags == FRAME_OWNED_BY_CSTACK)) {
            uintptr_t ip = legacy ? (uintptr_t)*(const int *)(a + (uintptr_t)instr) : rd(a, instr);
            if (rd(a, code_at) != m->code || ip != m->ip)
                return false;
        }
        if (rd(a, back) != (k + 1 < steps ? m[1].frame : t->memo_end))
            return false;
    }
    return true;
}

/* A fingerprint of a live str's text, read in place: its length and its
 * first and last eight bytes (of a compact ASCII string; other kinds give
 * other but stable bytes of the object, all inside it).  Code objects and
 * their names are freed and made again at the same addresses (exec'd, FX or
 * torch.compile code), so pointers alone named forty functions made one
 * after another with five names; file names differ at their ends
 * (/tmp/gen_a.py, /tmp/gen_b.py).  The string belongs to the code object
 * the frame runs: alive. */
static inline uintptr_t str_tag(uintptr_t s)
{
    if (!plausible(s))
        return 0;
    uintptr_t len = rd(s, L->u_length), word = rd(s, L->u_ascii_size);
    if (len < 8)
        word &= ((uintptr_t)1 << (len * 8)) - 1; /* the bytes after the text are not the string's */
    else if (len > 8 && len <= 4096)
        word ^= *(const uintptr_t *)(s + (uintptr_t)L->u_ascii_size + len - 8) * 0xC2B2AE3D27D4EB4Full;
    return word ^ len * 0x9E3779B97F4A7C15ull;
}

/* What tells a code object from another made at its address after it was
 * freed: its name's and its file's text (fingerprints above) and its first
 * line (the same function compiled from a source shifted by a few lines).
 * Not its line table: a body changed below an unchanged first line, under
 * the same name and file, at the same address, still passes for the old. */
static inline uintptr_t code_tag(uintptr_t code, uintptr_t name)
{
    uintptr_t file = str_tag(rd(code, L->co_filename));
    uint32_t first = *(const uint32_t *)(code + (uintptr_t)L->co_firstlineno);
    return str_tag(name) ^ (file << 17 | file >> 47) ^ (uintptr_t)first * 0xD6E8FEB86659FD93ull;
}

static inline uint32_t location_id(struct py_cache_slot *cache, uintptr_t code, uintptr_t name, uintptr_t tag,
                                   int offset)
{
    size_t i = (size_t)((code >> 4) ^ (code >> 13) ^ ((uintptr_t)offset * 0x9E3779B1u)) & (PY_CACHE_SLOTS - 1);
    struct py_cache_slot *s = &cache[i];
    if (TL_LIKELY(s->code == code && s->offset == offset && s->name == name && s->tag == tag && s->id))
        return s->id;
    uint32_t id = resolve_slow(code, name, rd(code, L->co_filename), tag, offset);
    *s = (struct py_cache_slot){code, name, tag, offset, id};
    return id;
}

/* Step k is the memo's frame (see struct py_tls); a step checked by its
 * name is good without it until the next code object is freed. */
static inline bool memo_matches(struct py_tls *t, int k, uintptr_t f, uintptr_t code, uintptr_t ip, uint8_t flags,
                                bool counted, unsigned long frees, int name_at)
{
    const struct py_memo_hot *m = &t->memo[k];
    struct py_memo_cold *c = &t->memo_cold[k];
    if (m->frame != f || m->code != code || m->ip != ip || t->memo_flags[k] != flags)
        return false;
    if (counted && c->frees == frees)
        return true;
    if (c->name != rd(code, name_at) || c->tag != code_tag(code, c->name))
        return false;
    c->frees = frees;
    return true;
}

static inline void memo_store(struct py_tls *t, int k, uintptr_t f, uintptr_t code, uintptr_t ip, uint8_t flags,
                              uintptr_t name, uintptr_t tag, unsigned long frees, uint32_t id)
{
    t->memo[k] = (struct py_memo_hot){f, code, ip};
    t->memo_flags[k] = flags;
    t->memo_cold[k] = (struct py_memo_cold){name, tag, frees, id};
}

int tl_py_read(uintptr_t *out, bool *run_end, int max, bool *same_out)
{
    *same_out = false;
    int st = atomic_load_explicit(&py_state, memory_order_acquire); /* L and the pointers detect() set */
    if (st == PY_UNKNOWN) {
        detect();
        st = atomic_load(&py_state);
    }
    if (st != PY_READY || max <= 0 || interpreter_gone())
        return 0;
    uintptr_t ts = current_tstate ? (uintptr_t)current_tstate() : 0;
    if (!ts)
        ts = (uintptr_t)gil_state_tstate();
    if (!ts)
        return 0; /* a thread the interpreter does not know */
    if (!plausible(ts))
        goto unreadable;
    uintptr_t f;
    if (L->ts_cframe) {
        uintptr_t cf = rd(ts, L->ts_cframe);
        if (!cf)
            return 0;
        if (!plausible(cf))
            goto unreadable;
        f = rd(cf, L->cf_current);
    } else {
        f = rd(ts, L->ts_frame);
    }
    struct py_tls *t = py_tls;
    if (TL_UNLIKELY(!t) && !(t = tl_thread_block((void **)&py_tls, sizeof *t)))
        return 0; /* no memory for the thread's tables: native frames only (counted) */
    const bool legacy = L->version < 0x30b, shims = L->version >= 0x30c;
    const int name_at = L->co_qualname ? L->co_qualname : L->co_name;
    const int flags_at = shims ? L->fr_owner : L->fr_entry; /* -1 before 3.11 */
    /* Frees counted from the moment the wrapper is in, and while it still
     * is (a tool that replaced the slot after us, without calling on, would
     * stop the count); otherwise never trusted. */
    dealloc_slot *slot = atomic_load_explicit(&code_dealloc_slot, memory_order_relaxed);
    const bool counted = slot && atomic_load_explicit(slot, memory_order_relaxed) == code_dealloc_counted;
    const unsigned long frees = atomic_load_explicit(&code_frees, memory_order_relaxed);
    if (counted && t->memo_frees == frees && t->memo_max == max && t->memo_steps > 0 &&
        same_chain(t, f, flags_at, legacy)) {
        *same_out = true; /* out and run_end are left to tl_py_last */
        return t->memo_n;
    }
    bool same = true;
    int n = 0, steps = 0;
    for (; f && n < max; steps++) {
        /* Checked again at every step: see interpreter_gone. */
        if (interpreter_gone())
            goto gone;
        if (!plausible(f) || steps >= MAX_CHAIN)
            goto unreadable;
        const bool m = steps < PY_MEMO;
        const uint8_t flags = flags_at >= 0 ? *(const uint8_t *)(f + (uintptr_t)flags_at) : 0;
        if (shims && flags == FRAME_OWNED_BY_CSTACK) {
            /* The shim an evaluation-loop entry pushes: the run above it is done. */
            if (n)
                run_end[n - 1] = true;
            if (!m || t->memo[steps].frame != f || t->memo_flags[steps] != flags) {
                same = false;
                if (m)
                    memo_store(t, steps, f, 0, 0, flags, 0, 0, 0, 0);
            }
            f = rd(f, L->fr_back);
            continue;
        }
        uintptr_t code = rd(f, L->fr_code);
        uintptr_t ip = legacy ? (uintptr_t)*(const int *)(f + (uintptr_t)L->fr_instr) : rd(f, L->fr_instr);
        bool entry = legacy || (!shims && flags);
        uint32_t id;
        if (m && memo_matches(t, steps, f, code, ip, flags, counted, frees, name_at)) {
            id = t->memo_cold[steps].id;
        } else {
            same = false;
            if (!plausible(code) || rd(code, 8) != code_type)
                goto unreadable;
            long offset = legacy ? (L->version == 0x30a ? (long)(int)ip * 2 : (long)(int)ip)
                                 : (long)(ip - (code + (uintptr_t)L->co_code));
            uintptr_t name = rd(code, name_at), tag = code_tag(code, name);
            /* A frame pushed but not started yet (offset before the first
             * instruction) has no line: left out. */
            id = offset >= 0 && offset < (1l << 30) ? location_id(t->cache, code, name, tag, (int)offset) : 0;
            if (m)
                memo_store(t, steps, f, code, ip, flags, name, tag, frees, id);
        }
        if (id) {
            out[n] = TL_PYFRAME_TAG | id;
            run_end[n] = false;
            n++;
        }
        if (entry && n)
            run_end[n - 1] = true;
        f = rd(f, L->fr_back);
    }
    if (n)
        run_end[n - 1] = true;
    *same_out = same && steps == t->memo_steps && n == t->memo_n;
    t->memo_steps = steps;
    t->memo_n = n;
    t->memo_max = max;
    t->memo_end = f;
    t->memo_frees = frees; /* every step 0 .. steps-1 was checked or written at this count */
    memcpy(t->memo_out, out, (size_t)n * sizeof *out);
    memcpy(t->memo_run_end, run_end, (size_t)n * sizeof *run_end);
    return n;
unreadable:
    atomic_fetch_add_explicit(&chains_unreadable, 1, memory_order_relaxed);
gone:
    if ((t = py_tls))
        t->memo_steps = -1;
    return 0;
}

int tl_py_last(uintptr_t *out, bool *run_end)
{
    const struct py_tls *t = py_tls; /* set: tl_py_read said "same" */
    memcpy(out, t->memo_out, (size_t)t->memo_n * sizeof *out);
    memcpy(run_end, t->memo_run_end, (size_t)t->memo_n * sizeof *run_end);
    return t->memo_n;
}

int tl_py_merge(uintptr_t *frames, int max, const uintptr_t *native, int n, const uintptr_t *py, const bool *run_end,
                int np)
{
    int o = 0, p = 0, i = 0;
    for (; i < n && o < max; i++) {
        if (p < np && native[i] > eval_lo && native[i] <= eval_hi) {
            /* This evaluation-loop frame's run of Python frames. */
            do
                frames[o++] = py[p];
            while (!run_end[p++] && p < np && o < max);
            continue;
        }
        frames[o++] = native[i];
    }
    /* Runs whose evaluation frame the native walk did not reach. */
    while (p < np && o < max)
        frames[o++] = py[p++];
    return o;
}
