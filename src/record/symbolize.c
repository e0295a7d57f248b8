/*
 * symbolize.c — addresses to module+offset, function, file:line.
 *
 * Runs only when a report is written, never on the allocation path.  elfutils'
 * libdwfl reads /proc/self/maps for the modules, the ELF symbol tables for
 * function names (static functions too, unlike dladdr), and DWARF line tables
 * for file:line where debug info exists (also from separate debuginfo files
 * through the standard search path).
 */
#include "tl_internal.h"

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwelf.h>
#include <elfutils/libdwfl.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char *debuginfo_path;

/* Is the file open on `fd` the debug file of `mod` (same GNU build ID)?
 * Without a build ID to compare, the debuglink name is all there is. */
static bool same_build_id(Dwfl_Module *mod, int fd)
{
    const unsigned char *want;
    GElf_Addr vaddr;
    int want_len = dwfl_module_build_id(mod, &want, &vaddr);
    if (want_len <= 0)
        return true;
    Elf *elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
    if (!elf)
        return false;
    const void *have;
    ssize_t have_len = dwelf_elf_gnu_build_id(elf, &have);
    bool same = have_len == want_len && memcmp(have, want, (size_t)want_len) == 0;
    elf_end(elf);
    return same;
}

/* Separate debug info from the local disk only: /usr/lib/debug/.build-id,
 * then the .gnu_debuglink places (beside the file, its .debug/, and under
 * /usr/lib/debug).  dwfl_standard_find_debuginfo searches the same, but ends
 * in a debuginfod query when nothing is found: elfutils 0.188 then loads
 * libdebuginfod, libcurl and a TLS library into the host program, even with
 * DEBUGINFOD_URLS unset, and a report racing exit() crashed in OpenSSL's
 * cleanup.  A report must not change what the program has loaded, nor reach
 * the network. */
static int find_debuginfo_local(Dwfl_Module *mod, void **userdata, const char *modname, GElf_Addr base,
                                const char *file_name, const char *debuglink_file, GElf_Word debuglink_crc,
                                char **debuginfo_file_name)
{
    int fd = dwfl_build_id_find_debuginfo(mod, userdata, modname, base, file_name, debuglink_file, debuglink_crc,
                                          debuginfo_file_name);
    if (fd >= 0 || !debuglink_file || !file_name || file_name[0] != '/' || strchr(debuglink_file, '/'))
        return fd;
    const char *slash = strrchr(file_name, '/');
    int dirlen = (int)(slash - file_name);
    static const char *const places[] = {"%.*s/%s", "%.*s/.debug/%s", "/usr/lib/debug%.*s/%s"};
    for (size_t i = 0; i < sizeof places / sizeof places[0]; i++) {
        char path[4096];
        if (snprintf(path, sizeof path, places[i], dirlen, file_name, debuglink_file) >= (int)sizeof path)
            continue;
        if (strcmp(path, file_name) == 0)
            continue; /* the debuglink names the file itself */
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        if (same_build_id(mod, fd)) {
            *debuginfo_file_name = strdup(path);
            return fd;
        }
        close(fd);
    }
    return -1;
}

static const Dwfl_Callbacks callbacks = {
    .find_elf = dwfl_linux_proc_find_elf,
    .find_debuginfo = find_debuginfo_local,
    .debuginfo_path = &debuginfo_path,
};

void *tl_symbolizer_open(void)
{
    Dwfl *dwfl = dwfl_begin(&callbacks);
    if (!dwfl)
        return NULL;
    dwfl_report_begin(dwfl);
    if (dwfl_linux_proc_report(dwfl, getpid()) != 0) {
        dwfl_end(dwfl);
        return NULL;
    }
    dwfl_report_end(dwfl, NULL, NULL);
    return dwfl;
}

static void inlined_chain(Dwarf_Die *cu, Dwarf_Addr pc, struct tl_frame_info *out);

/* ---- C++ names ----------------------------------------------------------
 * Demangled with the process's own __cxa_demangle (libstdc++ or libc++abi,
 * loaded by whichever C++ library the mangled frames come from): the
 * library links no C++ runtime of its own.  Report time only. */
#include <dlfcn.h>
#include <uthash.h>

struct demangled {
    UT_hash_handle hh;
    char *shown;
    char raw[];
};
static struct demangled *demangled_names;
static pthread_mutex_t demangle_lock = PTHREAD_MUTEX_INITIALIZER;

static _Atomic(tl_demangle_fn) cxa;

/* The global scope has it in a C++ program; a C++ runtime that only a
 * library's own scope sees (CPython loads extension modules RTLD_LOCAL, so
 * torch's libstdc++ is not global) is found by its soname, if loaded. */
tl_demangle_fn tl_demangler(void)
{
    tl_demangle_fn fn = atomic_load_explicit(&cxa, memory_order_acquire);
    if (fn)
        return fn;
    /* Looked up only on the program's threads (tl_may_take_loader_lock):
     * at start, when the watcher starts, at each new call site's owner
     * (owners.c) and in their reports; the watcher uses what they found.
     * Looked again only once a library was loaded since the last look. */
    if (!tl_may_take_loader_lock())
        return NULL;
    static atomic_ullong looked_at_adds; /* glibc's load count + 1 at the last look; 0 never */
    unsigned long long counts[2];
    tl_module_loads(counts);
    if (atomic_exchange(&looked_at_adds, counts[0] + 1) == counts[0] + 1)
        return NULL;
    fn = (tl_demangle_fn)tl_real_dlsym(RTLD_DEFAULT, "__cxa_demangle");
    static const char *const runtimes[] = {"libstdc++.so.6", "libc++abi.so.1", "libc++.so.1"};
    for (size_t i = 0; !fn && i < sizeof runtimes / sizeof runtimes[0]; i++) {
        /* A reference on a library that stays loaded: it is kept, so the
         * pointer stays valid even if its other users dlclose it. */
        void *h = dlopen(runtimes[i], RTLD_NOLOAD | RTLD_LAZY | RTLD_LOCAL);
        if (h)
            fn = (tl_demangle_fn)tl_real_dlsym(h, "__cxa_demangle");
    }
    if (fn)
        atomic_store_explicit(&cxa, fn, memory_order_release);
    /* NULL: no C++ runtime loaded yet; asked again next time. */
    return fn;
}

const char *tl_demangle(const char *name)
{
    if (!name || name[0] != '_' || name[1] != 'Z')
        return name;
    tl_demangle_fn fn = tl_demangler();
    if (!fn)
        return name;
    pthread_mutex_lock(&demangle_lock);
    struct demangled *e;
    size_t len = strlen(name);
    HASH_FIND(hh, demangled_names, name, len, e);
    if (!e && (e = malloc(sizeof *e + len + 1))) {
        memcpy(e->raw, name, len + 1);
        int status = -1;
        e->shown = fn(name, NULL, NULL, &status);
        if (status != 0) {
            free(e->shown);
            e->shown = NULL;
        }
        HASH_ADD(hh, demangled_names, raw, len, e);
    }
    pthread_mutex_unlock(&demangle_lock);
    return e && e->shown ? e->shown : name;
}

/* function <- its demangled form, *symbol <- the raw name when they differ. */
static void demangle_into(const char **function, const char **symbol)
{
    const char *shown = tl_demangle(*function);
    *symbol = shown != *function ? *function : NULL;
    *function = shown;
}

void tl_symbolize(void *session, uintptr_t address, struct tl_frame_info *out)
{
    memset(out, 0, sizeof *out);
    out->address = address;
    if (tl_is_pyframe(address)) {
        /* module: the .py file, so module globs (owner rules, suppressions)
         * match Python packages by path. */
        out->python = true;
        if (tl_pyloc_lookup(address, &out->function, &out->file, &out->line))
            out->module = out->file ? out->file : "python";
        return;
    }
    Dwfl *dwfl = session;
    if (!dwfl)
        return;
    /* Stacks hold return addresses: the call is the instruction before. */
    Dwarf_Addr pc = address ? address - 1 : 0;
    Dwfl_Module *mod = dwfl_addrmodule(dwfl, pc);
    if (!mod)
        return;
    Dwarf_Addr start = 0;
    const char *mainfile = NULL;
    const char *name = dwfl_module_info(mod, NULL, &start, NULL, NULL, NULL, &mainfile, NULL);
    out->module = mainfile ? mainfile : name;
    out->offset = address - (uintptr_t)start;
    out->function = dwfl_module_addrname(mod, pc);
    /* Only trust a line whose compilation unit really covers pc: for code
     * without debug info (crt1's _start) libdwfl can answer with the nearest
     * line of a neighbouring unit. */
    Dwarf_Addr bias = 0;
    Dwarf_Die *cu = dwfl_module_addrdie(mod, pc, &bias);
    Dwfl_Line *line = cu && dwarf_haspc(cu, pc - bias) > 0 ? dwfl_module_getsrc(mod, pc) : NULL;
    if (line) {
        int lineno = 0;
        const char *file = dwfl_lineinfo(line, NULL, &lineno, NULL, NULL, NULL);
        if (file) {
            out->file = file;
            out->line = lineno;
        }
    }
    if (line)
        inlined_chain(cu, pc - bias, out);
    demangle_into(&out->function, &out->symbol);
    for (int i = 0; i < out->ninline; i++)
        demangle_into(&out->inl[i].function, &out->inl[i].symbol);
}

static const char *die_name(Dwarf_Die *die)
{
    /* The linkage (mangled) name when there is one: C++ owner and
     * suppression rules match qualified names, demangled on the way. */
    Dwarf_Attribute attr;
    const char *name = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_linkage_name, &attr));
    if (!name)
        name = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_MIPS_linkage_name, &attr));
    if (!name)
        name = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_name, &attr));
    return name;
}

/* Where an inlined subroutine was called from (file, line). */
static void call_site(Dwarf_Die *cu, Dwarf_Die *inl, const char **file, int *line)
{
    Dwarf_Attribute attr;
    Dwarf_Word fileidx = 0, lineno = 0;
    Dwarf_Files *files = NULL;
    size_t nfiles = 0;
    *file = NULL;
    *line = 0;
    if (dwarf_formudata(dwarf_attr(inl, DW_AT_call_file, &attr), &fileidx) != 0 ||
        dwarf_formudata(dwarf_attr(inl, DW_AT_call_line, &attr), &lineno) != 0)
        return;
    if (dwarf_getsrcfiles(cu, &files, &nfiles) != 0 || fileidx >= nfiles)
        return;
    *file = dwarf_filesrc(files, fileidx, NULL, NULL);
    *line = (int)lineno;
}

/* Expands the inlined subroutines at pc: the line table's file:line belongs
 * to the innermost one; each call site belongs to the next one out, the
 * last to the real function. */
static void inlined_chain(Dwarf_Die *cu, Dwarf_Addr pc, struct tl_frame_info *out)
{
    Dwarf_Die *scopes = NULL;
    int n = dwarf_getscopes(cu, pc, &scopes);
    if (n <= 0)
        return;
    const char *file = out->file;
    int line = out->line;
    for (int i = 0; i < n && out->ninline < TL_MAX_INLINE; i++) {
        int tag = dwarf_tag(&scopes[i]);
        if (tag == DW_TAG_subprogram)
            break;
        if (tag != DW_TAG_inlined_subroutine)
            continue;
        struct tl_inline_frame *f = &out->inl[out->ninline++];
        f->function = die_name(&scopes[i]);
        f->file = file;
        f->line = line;
        call_site(cu, &scopes[i], &file, &line);
    }
    if (out->ninline) {
        out->file = file;
        out->line = line;
    }
    free(scopes);
}

int tl_frame_expand(const struct tl_frame_info *f, struct tl_inline_frame *out)
{
    int n = 0;
    for (int i = 0; i < f->ninline && i < TL_MAX_INLINE; i++)
        out[n++] = f->inl[i];
    out[n++] = (struct tl_inline_frame){f->function, f->file, f->line, f->symbol};
    return n;
}

void tl_symbolizer_close(void *session)
{
    if (session)
        dwfl_end(session);
}

/* ---- frames of unloaded libraries (modules.c decides when to pin) -------- *
 * If the same addresses are later reused by another library, live
 * symbolization wins: the pinned answer is used only for unmapped addresses. */
#include <uthash.h>

struct pinned {
    UT_hash_handle hh;
    uintptr_t address;
    struct tl_frame_info info;
};
static struct pinned *pinned_frames;
static pthread_mutex_t pinned_lock = PTHREAD_MUTEX_INITIALIZER;

struct pin_ctx {
    uintptr_t lo, hi;
    void *session;
};

static char *dup_or_null(const char *s)
{
    return s ? strdup(s) : NULL;
}

static void pin_site(struct tl_callsite *cs, void *arg)
{
    struct pin_ctx *p = arg;
    for (int i = 0; i < cs->nframes; i++) {
        uintptr_t a = cs->frames[i];
        if (a < p->lo || a >= p->hi)
            continue;
        struct pinned *e;
        HASH_FIND(hh, pinned_frames, &a, sizeof a, e);
        if (e)
            continue;
        if (!p->session && !(p->session = tl_symbolizer_open()))
            return;
        struct tl_frame_info f;
        tl_symbolize(p->session, a, &f);
        e = calloc(1, sizeof *e);
        if (!e)
            return;
        e->address = a;
        e->info = f;
        e->info.function = dup_or_null(f.function);
        e->info.symbol = dup_or_null(f.symbol);
        e->info.file = dup_or_null(f.file);
        for (int k = 0; k < f.ninline; k++) {
            e->info.inl[k].function = dup_or_null(f.inl[k].function);
            e->info.inl[k].symbol = dup_or_null(f.inl[k].symbol);
            e->info.inl[k].file = dup_or_null(f.inl[k].file);
        }
        if (f.module) {
            size_t len = strlen(f.module) + sizeof " (unloaded)";
            char *m = malloc(len);
            if (m)
                snprintf(m, len, "%s (unloaded)", f.module);
            e->info.module = m;
        }
        HASH_ADD(hh, pinned_frames, address, sizeof e->address, e);
    }
}

void tl_pin_frames_in_range(uintptr_t lo, uintptr_t hi)
{
    struct pin_ctx p = {lo, hi, NULL};
    pthread_mutex_lock(&pinned_lock);
    tl_callsite_foreach(pin_site, &p);
    pthread_mutex_unlock(&pinned_lock);
    tl_symbolizer_close(p.session);
}

const struct tl_frame_info *tl_pinned_frame(uintptr_t address)
{
    pthread_mutex_lock(&pinned_lock);
    struct pinned *e;
    HASH_FIND(hh, pinned_frames, &address, sizeof address, e);
    pthread_mutex_unlock(&pinned_lock);
    return e ? &e->info : NULL;
}
