/*
 * private_fds.c — the descriptors of tensorleak's private libraries
 * (private_deps.c): none held between calls, and none inherited by a
 * program's exec.
 *
 * libunwind's memory check.  Before libunwind reads a word it is not sure of
 * (every unw_step, with Debian's conservative checks; a frame found by its
 * heuristics), it checks that the page is readable: its global init
 * (libunwind 1.6, src/x86_64/Ginit.c, tdep_init_mem_validate) opens a pipe,
 * and write_validate drains the pipe with read() and writes one byte of the
 * page into it with syscall(SYS_write, ...), which fails with EFAULT on
 * unreadable memory; when the read fails (EBADF, or 0 at end of file) it
 * closes both ends and opens a new pipe.  Those two descriptors sit in the
 * program's table: a daemon that closes every descriptor it did not open
 * and then opens its own files had a byte of memory written into one of
 * them, its other file read from, and its descriptor closed and replaced
 * with a pipe.
 *
 * So libunwind's own imports of pipe2, read, close and syscall (its GOT
 * slots, found from its dynamic relocations) are pointed here, and nothing
 * else changes, neither in the program nor in libunwind: pipe2 hands back two
 * numbers no descriptor can have (above the kernel's highest fs.nr_open), a
 * read from the fake read end finds the pipe empty (EAGAIN, what a drained
 * non-blocking pipe says), a write of one byte to the fake write end reads
 * that byte from our own address space with process_vm_readv (EFAULT when it
 * cannot: the answer write() gave), and a close of a fake end succeeds.
 * Every other call, and every call on a real descriptor, goes to the
 * function of that name our own references resolve to: the one libunwind's
 * would (both look in the global scope first), also where libunwind was
 * loaded lazily before us and its slot still points into its PLT.
 *
 * Where process_vm_readv is refused (a seccomp policy: ENOSYS or EPERM), a
 * FUTEX_WAIT with a zero timeout reads the word instead: it returns EAGAIN
 * or ETIMEDOUT on readable memory and EFAULT otherwise, and never blocks.
 *
 * Close-on-exec.  libdw, libelf, jansson and libunwind open files without
 * O_CLOEXEC (the modules libdw symbolizes, for the length of a report): a
 * thread of the program that forks and execs meanwhile would hand them to
 * the new program.  Their imports of open, fopen and dup get the flag added.
 *
 * Installed once, right after the libraries are loaded and before their
 * first call (private_deps.c).  If libunwind's four slots cannot all be
 * found or written, its pipe stays; tl_private_fds_warn says so once, at the
 * first CUDA call.
 */
#include "tl_internal.h"

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <linux/futex.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__)
#define SLOT_JUMP R_X86_64_JUMP_SLOT
#define SLOT_DATA R_X86_64_GLOB_DAT
#elif defined(__aarch64__)
#define SLOT_JUMP R_AARCH64_JUMP_SLOT
#define SLOT_DATA R_AARCH64_GLOB_DAT
#endif

/* The kernel caps descriptors below fs.nr_open, itself at most
 * INT_MAX & -BITS_PER_LONG (0x7fffffc0 on 64-bit): these are never real. */
#define FAKE_READ_END (INT_MAX - 1)
#define FAKE_WRITE_END INT_MAX

static atomic_bool vm_readv_refused;
static char failure[160]; /* why the slots were left alone; "" when patched */

static int fake_pipe2(int fds[2], int flags)
{
    (void)flags;
    fds[0] = FAKE_READ_END;
    fds[1] = FAKE_WRITE_END;
    return 0;
}

static ssize_t fake_read(int fd, void *buf, size_t n)
{
    if (fd == FAKE_READ_END) {
        errno = EAGAIN;
        return -1;
    }
    return read(fd, buf, n);
}

static int fake_close(int fd)
{
    if (fd == FAKE_READ_END || fd == FAKE_WRITE_END)
        return 0;
    return close(fd);
}

/* Whether the byte at `addr` is readable, without a descriptor and without
 * a fault. */
static bool readable(const void *addr)
{
    if (!atomic_load_explicit(&vm_readv_refused, memory_order_relaxed)) {
        char byte;
        struct iovec local = {&byte, 1}, remote = {(void *)addr, 1};
        ssize_t n = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
        if (n == 1)
            return true;
        if (n < 0 && errno != ENOSYS && errno != EPERM)
            return false;
        atomic_store_explicit(&vm_readv_refused, true, memory_order_relaxed);
    }
    /* The aligned word holding the byte: a futex word must be aligned, and
     * it lies in the same page. */
    const uint32_t *word = (const uint32_t *)((uintptr_t)addr & ~(uintptr_t)3);
    struct timespec zero = {0, 0};
    long rc = syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, 0u, &zero, NULL, 0);
    return rc == 0 || errno != EFAULT;
}

/* syscall(2) forwards up to six word-sized arguments: reading six is what
 * glibc's own syscall does. */
static long fake_syscall(long nr, ...)
{
    va_list ap;
    va_start(ap, nr);
    long a[6];
    for (int i = 0; i < 6; i++)
        a[i] = va_arg(ap, long);
    va_end(ap);
    if (nr == SYS_write && (int)a[0] == FAKE_WRITE_END) {
        int saved = errno; /* libunwind loops while errno is EINTR */
        if (!readable((const void *)a[1])) {
            errno = EFAULT;
            return -1;
        }
        errno = saved == EINTR ? 0 : saved;
        return 1;
    }
    return syscall(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
}

#ifdef SLOT_JUMP

/* One import to redirect: its name and our function; `slot` is found. */
struct import_patch {
    const char *name;
    void *replacement;
    void **slot;
};

/* glibc relocates the pointers of the in-memory dynamic section on most
 * targets; a value below the load address is still the file's. */
static uintptr_t dyn_ptr(uintptr_t base, ElfW(Addr) p)
{
    return (uintptr_t)p < base ? base + (uintptr_t)p : (uintptr_t)p;
}

static void scan_relocations(uintptr_t base, const ElfW(Sym) *symtab, const char *strtab, const ElfW(Rela) *r,
                             size_t bytes, struct import_patch *patches, size_t npatches)
{
    for (size_t i = 0; r && i < bytes / sizeof *r; i++) {
        unsigned long type = ELF64_R_TYPE(r[i].r_info);
        if (type != SLOT_JUMP && type != SLOT_DATA)
            continue;
        const char *name = strtab + symtab[ELF64_R_SYM(r[i].r_info)].st_name;
        for (size_t k = 0; k < npatches; k++)
            if (!patches[k].slot && strcmp(name, patches[k].name) == 0)
                patches[k].slot = (void **)(base + r[i].r_offset);
    }
}

struct relro {
    uintptr_t base, lo, hi;
};

static int find_relro(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    struct relro *r = arg;
    if (info->dlpi_addr != r->base)
        return 0;
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_GNU_RELRO) {
            r->lo = r->base + info->dlpi_phdr[i].p_vaddr;
            r->hi = r->lo + info->dlpi_phdr[i].p_memsz;
        }
    return 1;
}

/* Writes one slot; a slot in the object's read-only-after-relocation range
 * is made writable for the store and read-only again. */
static bool write_slot(void **slot, void *value, const struct relro *relro)
{
    uintptr_t at = (uintptr_t)slot;
    if (at < relro->lo || at >= relro->hi) {
        __atomic_store_n(slot, value, __ATOMIC_RELEASE);
        return true;
    }
    long page = sysconf(_SC_PAGESIZE);
    void *start = (void *)(at & ~(uintptr_t)(page - 1));
    if (mprotect(start, (size_t)page, PROT_READ | PROT_WRITE) != 0)
        return false;
    __atomic_store_n(slot, value, __ATOMIC_RELEASE);
    mprotect(start, (size_t)page, PROT_READ);
    return true;
}

/* Finds the slots of `patches` in the module holding `function`; false
 * (with why) when the module or its tables cannot be read. */
static bool find_slots(void *function, struct import_patch *patches, size_t npatches, struct relro *relro, char *why,
                       size_t whylen)
{
    Dl_info info;
    struct link_map *lm = NULL;
    if (!function || !dladdr1(function, &info, (void **)&lm, RTLD_DL_LINKMAP) || !lm) {
        snprintf(why, whylen, "its module was not found");
        return false;
    }
    uintptr_t base = lm->l_addr;
    const ElfW(Sym) *symtab = NULL;
    const char *strtab = NULL;
    const ElfW(Rela) *jmprel = NULL, *rela = NULL;
    size_t jmprel_bytes = 0, rela_bytes = 0;
    for (const ElfW(Dyn) *d = lm->l_ld; d && d->d_tag != DT_NULL; d++) {
        switch (d->d_tag) {
        case DT_SYMTAB: symtab = (const ElfW(Sym) *)dyn_ptr(base, d->d_un.d_ptr); break;
        case DT_STRTAB: strtab = (const char *)dyn_ptr(base, d->d_un.d_ptr); break;
        case DT_JMPREL: jmprel = (const ElfW(Rela) *)dyn_ptr(base, d->d_un.d_ptr); break;
        case DT_PLTRELSZ: jmprel_bytes = d->d_un.d_val; break;
        case DT_RELA: rela = (const ElfW(Rela) *)dyn_ptr(base, d->d_un.d_ptr); break;
        case DT_RELASZ: rela_bytes = d->d_un.d_val; break;
        default: break;
        }
    }
    if (!symtab || !strtab) {
        snprintf(why, whylen, "it has no dynamic symbol table");
        return false;
    }
    scan_relocations(base, symtab, strtab, jmprel, jmprel_bytes, patches, npatches);
    scan_relocations(base, symtab, strtab, rela, rela_bytes, patches, npatches);
    *relro = (struct relro){.base = base};
    dl_iterate_phdr(find_relro, relro);
    return true;
}

/* ---- close-on-exec ------------------------------------------------------ */

static int cloexec_open(const char *path, int flags, ...)
{
    mode_t mode = 0;
    if (flags & (O_CREAT | O_TMPFILE)) {
        va_list ap;
        va_start(ap, flags);
        mode = (mode_t)va_arg(ap, int);
        va_end(ap);
    }
    return open(path, flags | O_CLOEXEC, mode);
}

static FILE *cloexec_fopen(const char *path, const char *mode)
{
    char with_e[16];
    if (strchr(mode, 'e') || (size_t)snprintf(with_e, sizeof with_e, "%se", mode) >= sizeof with_e)
        return fopen(path, mode);
    return fopen(path, with_e);
}

static int cloexec_dup(int fd)
{
    return fcntl(fd, F_DUPFD_CLOEXEC, 0);
}

/* A library whose descriptors get close-on-exec; what it does not import
 * is left alone, and a slot that cannot be written stays as it was. */
static void add_cloexec(void *function)
{
    struct import_patch patches[] = {
        {"open", (void *)cloexec_open, NULL},
        {"open64", (void *)cloexec_open, NULL},
        {"fopen", (void *)cloexec_fopen, NULL},
        {"fopen64", (void *)cloexec_fopen, NULL},
        {"dup", (void *)cloexec_dup, NULL},
    };
    struct relro relro;
    char why[64];
    if (!find_slots(function, patches, sizeof patches / sizeof patches[0], &relro, why, sizeof why))
        return;
    for (size_t k = 0; k < sizeof patches / sizeof patches[0]; k++)
        if (patches[k].slot)
            write_slot(patches[k].slot, patches[k].replacement, &relro);
}

/* ---- libunwind's pipe --------------------------------------------------- */

static void replace_unwind_pipe(void *libunwind_function)
{
    /* pipe2 first in the table, written last: until it hands out fake
     * numbers, the others forward every call. */
    struct import_patch patches[] = {
        {"pipe2", (void *)fake_pipe2, NULL},
        {"read", (void *)fake_read, NULL},
        {"close", (void *)fake_close, NULL},
        {"syscall", (void *)fake_syscall, NULL},
    };
    const size_t n = sizeof patches / sizeof patches[0];
    struct relro relro;
    char why[64];
    if (!find_slots(libunwind_function, patches, n, &relro, why, sizeof why)) {
        snprintf(failure, sizeof failure, "libunwind: %s", why);
        return;
    }
    for (size_t k = 0; k < n; k++)
        if (!patches[k].slot) {
            snprintf(failure, sizeof failure, "libunwind does not import %s", patches[k].name);
            return;
        }
    for (size_t k = n; k-- > 0;)
        if (!write_slot(patches[k].slot, patches[k].replacement, &relro)) {
            snprintf(failure, sizeof failure, "libunwind's %s slot cannot be written (%s)", patches[k].name,
                     strerror(errno));
            /* The slots written so far stay: they forward every real
             * descriptor, and pipe2, written last, still makes real ones. */
            return;
        }
    failure[0] = 0;
}

void tl_private_fds_install(void *libunwind_function, void *const *other_functions, size_t nother)
{
    replace_unwind_pipe(libunwind_function);
    add_cloexec(libunwind_function);
    for (size_t i = 0; i < nother; i++)
        add_cloexec(other_functions[i]);
}

#else

void tl_private_fds_install(void *libunwind_function, void *const *other_functions, size_t nother)
{
    (void)libunwind_function;
    (void)other_functions;
    (void)nother;
    snprintf(failure, sizeof failure, "no relocation support for this architecture");
}

#endif

void tl_private_fds_warn(void)
{
    static atomic_bool warned;
    if (failure[0])
        tl_warn(&warned, "%s; libunwind keeps a pipe open for its memory checks", failure);
}
