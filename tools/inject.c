/*
 * inject.c: hijack one thread of a running process to call functions in it,
 * and rewrite its code while every thread is stopped, with plain ptrace.
 *
 * Why plain ptrace and not a debugger's inferior calls: gdb 13 attaches to a
 * process on the machines this was written on, but every inferior call fails
 * with "Couldn't write extended state status: Bad address"; PTRACE_GETREGSET
 * and PTRACE_SETREGSET of NT_X86_XSTATE work there, and that is all a call
 * needs (docs/attach.md).
 *
 * Threads are seized (PTRACE_SEIZE: no signal is sent, nothing the program
 * can see) and stopped with PTRACE_INTERRUPT.  A thread that reports a
 * signal instead keeps it: it is delivered when the thread resumes.  New
 * threads are not traced automatically; every "stop all" rescans
 * /proc/PID/task until a pass finds none it has not stopped, which ends
 * because a stopped thread creates nothing.
 *
 * A call sets the hijacked thread's registers (arguments in rdi..r9, the
 * stack below the saved one's red zone and the bytes pushed there, a return
 * address of 0) and lets it run; its return faults at address 0, which stops
 * it with SIGSEGV, which is then discarded.  orig_rax is -1 during calls, so
 * the kernel does not treat the thread as returning from a syscall; the saved
 * registers put back at the end hold the interrupted syscall's number and its
 * -ERESTART* value, so the kernel restarts it when the thread resumes (as it
 * does after a stop by a debugger).
 */
#include "inject.h"

#include <dirent.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef PTRACE_EVENT_STOP
#define PTRACE_EVENT_STOP 128
#endif

#define STOP_TIMEOUT_S 10.0    /* a thread answers PTRACE_INTERRUPT within */
#define XSTATE_MAX 16384       /* NT_X86_XSTATE; 2688 bytes with AVX-512 */
#define SCRATCH_MAX (64 * 1024) /* bytes pushed below the red zone, at most */
#define RED_ZONE 128
#define PATCH_TRIES 200         /* stop-all attempts while a thread is inside a patch */
#define CHOOSE_TRIES 10         /* stop-all attempts while no thread is safe to hijack */

enum thread_state { T_RUNNING, T_STOPPED, T_GONE };

struct thread {
    pid_t tid;
    enum thread_state state;
    int pending_sig; /* a signal it reported while we stopped it: delivered on resume */
};

struct inject {
    pid_t pid;
    int mem_fd;
    struct thread *threads;
    size_t count, cap;
    struct thread *hijacked;      /* NULL until chosen */
    struct user_regs_struct saved; /* its registers when chosen */
    unsigned char xstate[XSTATE_MAX];
    size_t xstate_len;
    uint64_t scratch;              /* lowest address pushed so far */
    sigset_t held; /* blocked from begin to the injector's exit */
    bool ending; /* cleaning up: a held signal no longer cuts waits short */
    char err[512];
};

static bool fail(struct inject *in, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool fail(struct inject *in, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(in->err, sizeof in->err, fmt, ap);
    va_end(ap);
    return false;
}

const char *inject_error(const struct inject *in)
{
    return in->err;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Whether the user asked us to stop (a held SIGINT, SIGTERM or SIGHUP). */
static bool interrupted(const struct inject *in)
{
    sigset_t pending;
    if (sigpending(&pending) != 0)
        return false;
    for (int sig = 1; sig < NSIG; sig++) {
        if (sigismember(&in->held, sig) == 1 && sigismember(&pending, sig) == 1)
            return true;
    }
    return false;
}

static struct thread *find_thread(struct inject *in, pid_t tid)
{
    for (size_t i = 0; i < in->count; i++) {
        if (in->threads[i].tid == tid)
            return &in->threads[i];
    }
    return NULL;
}

static struct thread *add_thread(struct inject *in, pid_t tid)
{
    if (in->count == in->cap) {
        size_t cap = in->cap ? in->cap * 2 : 16;
        struct thread *bigger = realloc(in->threads, cap * sizeof *bigger);
        if (!bigger)
            return NULL;
        /* hijacked points into the array */
        if (in->hijacked)
            in->hijacked = bigger + (in->hijacked - in->threads);
        in->threads = bigger;
        in->cap = cap;
    }
    struct thread *t = &in->threads[in->count++];
    *t = (struct thread){ .tid = tid, .state = T_RUNNING };
    return t;
}

/* Records what waitpid said about a traced thread: a stop (with the signal
 * to deliver later, if it was a signal-delivery-stop) or its end. */
static struct thread *record_status(struct inject *in, pid_t tid, int status)
{
    struct thread *t = find_thread(in, tid);
    if (!t)
        return NULL;
    if (WIFEXITED(status) || WIFSIGNALED(status)) {
        t->state = T_GONE;
        return t;
    }
    if (!WIFSTOPPED(status))
        return t;
    int event = status >> 16;
    int sig = WSTOPSIG(status);
    t->state = T_STOPPED;
    /* PTRACE_EVENT_STOP: our interrupt or a group-stop; anything else with
     * no event is a signal the thread was about to take. */
    if (event == 0 && sig != 0)
        t->pending_sig = sig;
    return t;
}

/* Waits for one event of any traced thread until DEADLINE; the thread it
 * concerns, or NULL (error set) on timeout, interruption or failure. */
static struct thread *wait_any(struct inject *in, double deadline, int *status_out)
{
    long pause_ns = 20000;
    for (;;) {
        int status;
        pid_t tid = waitpid(-1, &status, __WALL | WNOHANG);
        if (tid > 0) {
            struct thread *t = record_status(in, tid, status);
            if (!t)
                continue;
            if (status_out)
                *status_out = status;
            return t;
        }
        if (tid < 0 && errno != EINTR) {
            fail(in, "waitpid: %s", strerror(errno));
            return NULL;
        }
        if (!in->ending && interrupted(in)) {
            fail(in, "interrupted");
            return NULL;
        }
        if (now_s() > deadline) {
            fail(in, "timed out");
            return NULL;
        }
        struct timespec ts = { 0, pause_ns };
        nanosleep(&ts, NULL);
        if (pause_ns < 2000000)
            pause_ns *= 2;
    }
}

/* Resumes a stopped thread, delivering the signal it was stopped with. */
static bool resume(struct inject *in, struct thread *t)
{
    if (t->state != T_STOPPED)
        return true;
    if (ptrace(PTRACE_CONT, t->tid, NULL, (void *)(long)t->pending_sig) != 0 && errno != ESRCH)
        return fail(in, "cannot resume thread %d: %s", (int)t->tid, strerror(errno));
    t->pending_sig = 0;
    t->state = T_RUNNING;
    return true;
}

static bool resume_others(struct inject *in)
{
    bool ok = true;
    for (size_t i = 0; i < in->count; i++) {
        if (&in->threads[i] != in->hijacked)
            ok = resume(in, &in->threads[i]) && ok;
    }
    return ok;
}

/* Seizes every thread of /proc/PID/task not traced yet and interrupts every
 * running one; waits until all are stopped; repeats until a pass finds no
 * new thread. */
static bool stop_all(struct inject *in)
{
    double deadline = now_s() + STOP_TIMEOUT_S;
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", (int)in->pid);
    for (;;) {
        DIR *dir = opendir(path);
        if (!dir)
            return fail(in, "the process is gone");
        bool found_new = false;
        struct dirent *de;
        while ((de = readdir(dir)) != NULL) {
            pid_t tid = (pid_t)atoi(de->d_name);
            if (tid <= 0 || find_thread(in, tid))
                continue;
            if (ptrace(PTRACE_SEIZE, tid, NULL, NULL) != 0) {
                if (errno == ESRCH)
                    continue; /* exited meanwhile */
                int e = errno;
                closedir(dir);
                return fail(in, "PTRACE_SEIZE of thread %d: %s", (int)tid, strerror(e));
            }
            if (!add_thread(in, tid)) {
                ptrace(PTRACE_DETACH, tid, NULL, NULL);
                closedir(dir);
                return fail(in, "out of memory");
            }
            found_new = true;
        }
        closedir(dir);
        for (size_t i = 0; i < in->count; i++) {
            struct thread *t = &in->threads[i];
            if (t->state == T_RUNNING && ptrace(PTRACE_INTERRUPT, t->tid, NULL, NULL) != 0 && errno == ESRCH)
                t->state = T_GONE;
        }
        for (;;) {
            bool all = true;
            for (size_t i = 0; i < in->count; i++)
                all &= in->threads[i].state != T_RUNNING;
            if (all)
                break;
            if (!wait_any(in, deadline, NULL))
                return fail(in, "stopping the threads: %s (a thread in uninterruptible sleep?)", in->err);
        }
        if (in->hijacked && in->hijacked->state == T_GONE)
            return fail(in, "the process exited");
        if (!found_new)
            return true;
    }
}

static bool get_regs(struct inject *in, pid_t tid, struct user_regs_struct *regs)
{
    if (ptrace(PTRACE_GETREGS, tid, NULL, regs) != 0)
        return fail(in, "PTRACE_GETREGS of thread %d: %s", (int)tid, strerror(errno));
    return true;
}

/* System calls a thread sits in while it waits for work: it holds no lock of
 * the C library or the loader then. */
static bool idle_syscall(long nr)
{
    static const long idle[] = { SYS_read, SYS_poll, SYS_select, SYS_nanosleep, SYS_clock_nanosleep, SYS_epoll_wait,
                                 SYS_epoll_pwait, SYS_ppoll, SYS_pselect6, SYS_accept, SYS_accept4, SYS_recvfrom,
                                 SYS_recvmsg, SYS_wait4, SYS_waitid, SYS_pause, SYS_rt_sigsuspend,
                                 SYS_rt_sigtimedwait, SYS_msgrcv, SYS_semtimedop, SYS_epoll_pwait2 };
    for (size_t i = 0; i < sizeof idle / sizeof idle[0]; i++) {
        if (nr == idle[i])
            return true;
    }
    return false;
}

static bool in_module(const struct inject_map *maps, size_t count, uint64_t ip, const char *const *names)
{
    for (size_t i = 0; i < count; i++) {
        if (ip < maps[i].start || ip >= maps[i].end)
            continue;
        for (const char *const *n = names; *n; n++) {
            if (inject_maps_find(&maps[i], 1, *n))
                return true;
        }
        return false;
    }
    return false;
}

/* How safe a stopped thread is to run dlopen in: 0 best; -1 never. */
static int hijack_rank(const struct user_regs_struct *r, const struct inject_map *maps, size_t count)
{
    static const char *const loader[] = { "ld-linux-x86-64.so", "ld-linux.so", "ld.so", "ld-musl-x86_64.so", NULL };
    static const char *const libc[] = { "libc.so", "libc-2", "libpthread.so", NULL };
    static const char *const driver[] = { "libcuda.so", "libcudart.so", "libnvidia-ml.so", NULL };
    if (in_module(maps, count, r->rip, loader))
        return -1; /* may hold the loader's lock */
    /* The library's prepare calls into the driver, which may hold its own
     * locks around a call it made itself: last resort. */
    if (in_module(maps, count, r->rip, driver))
        return 4;
    long nr = (long)r->orig_rax;
    if (nr >= 0)
        return idle_syscall(nr) ? 0 : nr == SYS_futex ? 1 : 2;
    if (in_module(maps, count, r->rip, libc))
        return -1; /* may be inside malloc, holding its lock */
    return 3;
}

/* Chooses the thread to hijack among the stopped ones; NULL when none is safe. */
static struct thread *choose(struct inject *in)
{
    struct inject_map *maps;
    size_t count;
    if (!inject_maps_read(in->pid, &maps, &count)) {
        fail(in, "cannot read /proc/%d/maps: %s", (int)in->pid, strerror(errno));
        return NULL;
    }
    struct thread *best = NULL;
    int best_rank = 100;
    for (size_t i = 0; i < in->count; i++) {
        struct thread *t = &in->threads[i];
        struct user_regs_struct r;
        /* A thread stopped with a signal to take would run its handler on
         * top of our call: leave it to its signal. */
        if (t->state != T_STOPPED || t->pending_sig || !get_regs(in, t->tid, &r))
            continue;
        int rank = hijack_rank(&r, maps, count);
        if (rank < 0)
            continue;
        /* The main thread first: its stack grows on demand. */
        if (rank < best_rank || (rank == best_rank && t->tid == in->pid)) {
            best = t;
            best_rank = rank;
        }
    }
    free(maps);
    if (!best)
        fail(in, "no thread is at a safe point (all inside the C library or the loader)");
    return best;
}

static bool hold_signals(struct inject *in)
{
    sigemptyset(&in->held);
    sigaddset(&in->held, SIGINT);
    sigaddset(&in->held, SIGTERM);
    sigaddset(&in->held, SIGHUP);
    sigaddset(&in->held, SIGQUIT);
    return sigprocmask(SIG_BLOCK, &in->held, NULL) == 0;
}

static void detach_all(struct inject *in)
{
    for (size_t i = 0; i < in->count; i++) {
        struct thread *t = &in->threads[i];
        if (t->state == T_GONE)
            continue;
        if (t->state == T_RUNNING) {
            /* PTRACE_DETACH needs a stopped tracee. */
            double deadline = now_s() + STOP_TIMEOUT_S;
            if (ptrace(PTRACE_INTERRUPT, t->tid, NULL, NULL) == 0) {
                while (t->state == T_RUNNING && wait_any(in, deadline, NULL))
                    ;
            }
        }
        if (t->state == T_STOPPED)
            ptrace(PTRACE_DETACH, t->tid, NULL, (void *)(long)t->pending_sig);
        t->state = T_GONE;
    }
}

struct inject *inject_begin(pid_t pid, char *err, size_t errlen)
{
    struct inject *in = calloc(1, sizeof *in);
    if (!in) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    in->pid = pid;
    in->mem_fd = -1;
    if (!hold_signals(in)) {
        snprintf(err, errlen, "sigprocmask: %s", strerror(errno));
        free(in);
        return NULL;
    }
    bool ok = false;
    for (int attempt = 0; attempt < CHOOSE_TRIES; attempt++) {
        if (!stop_all(in))
            break;
        in->hijacked = choose(in);
        if (in->hijacked) {
            ok = true;
            break;
        }
        if (!resume_others(in))
            break;
        struct timespec ts = { 0, 20 * 1000000 };
        nanosleep(&ts, NULL);
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/mem", (int)pid);
    if (ok && (in->mem_fd = open(path, O_RDWR | O_CLOEXEC)) < 0)
        ok = fail(in, "cannot open %s: %s", path, strerror(errno));
    if (ok)
        ok = get_regs(in, in->hijacked->tid, &in->saved);
    if (ok) {
        struct iovec iov = { in->xstate, sizeof in->xstate };
        if (ptrace(PTRACE_GETREGSET, in->hijacked->tid, (void *)NT_X86_XSTATE, &iov) != 0)
            ok = fail(in, "PTRACE_GETREGSET NT_X86_XSTATE: %s", strerror(errno));
        in->xstate_len = iov.iov_len;
    }
    in->scratch = (in->saved.rsp - RED_ZONE) & ~(uint64_t)15;
    if (ok)
        ok = resume_others(in);
    if (!ok) {
        snprintf(err, errlen, "%s", in->err);
        in->hijacked = NULL; /* nothing of it was changed */
        inject_end(in, NULL, 0);
        return NULL;
    }
    return in;
}

bool inject_read(struct inject *in, uint64_t address, void *buf, size_t len)
{
    if (pread(in->mem_fd, buf, len, (off_t)address) != (ssize_t)len)
        return fail(in, "cannot read the process's memory at 0x%llx", (unsigned long long)address);
    return true;
}

static bool write_mem(struct inject *in, uint64_t address, const void *buf, size_t len)
{
    if (pwrite(in->mem_fd, buf, len, (off_t)address) != (ssize_t)len)
        return fail(in, "cannot write the process's memory at 0x%llx: %s", (unsigned long long)address,
                    strerror(errno));
    return true;
}

bool inject_push(struct inject *in, const void *data, size_t len, uint64_t *remote)
{
    uint64_t top = (in->saved.rsp - RED_ZONE) & ~(uint64_t)15;
    uint64_t at = (in->scratch - len) & ~(uint64_t)15;
    if (top - at > SCRATCH_MAX)
        return fail(in, "too much data for the thread's stack");
    if (!write_mem(in, at, data, len))
        return false;
    in->scratch = at;
    *remote = at;
    return true;
}

/* Puts the hijacked thread back to the registers it had when chosen. */
static bool restore_hijacked(struct inject *in)
{
    pid_t tid = in->hijacked->tid;
    struct iovec iov = { in->xstate, in->xstate_len };
    if (ptrace(PTRACE_SETREGS, tid, NULL, &in->saved) != 0)
        return fail(in, "PTRACE_SETREGS of thread %d: %s", (int)tid, strerror(errno));
    if (ptrace(PTRACE_SETREGSET, tid, (void *)NT_X86_XSTATE, &iov) != 0)
        return fail(in, "PTRACE_SETREGSET NT_X86_XSTATE of thread %d: %s", (int)tid, strerror(errno));
    /* The SIGSEGV of the last call's return is not the program's. */
    in->hijacked->pending_sig = 0;
    return true;
}

bool inject_call(struct inject *in, uint64_t fn, const uint64_t *args, int nargs, double timeout_s, uint64_t *result)
{
    struct thread *h = in->hijacked;
    if (nargs > 6 || h->state != T_STOPPED)
        return fail(in, "internal: bad call");
    struct user_regs_struct r = in->saved;
    /* At a function's entry rsp + 8 is 16-aligned: the return address
     * (0: its fault ends the call) at a 16-aligned address less 8. */
    uint64_t sp = (in->scratch & ~(uint64_t)15) - 8;
    uint64_t zero = 0;
    if (!write_mem(in, sp, &zero, sizeof zero))
        return false;
    unsigned long long *slots[6] = { &r.rdi, &r.rsi, &r.rdx, &r.rcx, &r.r8, &r.r9 };
    for (int i = 0; i < nargs; i++)
        *slots[i] = args[i];
    r.rip = fn;
    r.rsp = sp;
    r.rax = 0;
    r.orig_rax = (unsigned long long)-1; /* not in a syscall: no restart */
    if (ptrace(PTRACE_SETREGS, h->tid, NULL, &r) != 0)
        return fail(in, "PTRACE_SETREGS: %s", strerror(errno));
    h->pending_sig = 0;
    if (!resume(in, h))
        return false;
    double deadline = now_s() + timeout_s;
    for (;;) {
        int status;
        struct thread *t = wait_any(in, deadline, &status);
        if (!t) {
            /* Abandon the call: stop the thread where it is; inject_end puts
             * its registers back (its stack above the call is untouched). */
            char why[sizeof in->err];
            snprintf(why, sizeof why, "%s", in->err);
            in->ending = true;
            double stop_deadline = now_s() + STOP_TIMEOUT_S;
            if (h->state == T_RUNNING && ptrace(PTRACE_INTERRUPT, h->tid, NULL, NULL) == 0) {
                while (h->state == T_RUNNING && wait_any(in, stop_deadline, NULL))
                    ;
            }
            if (strcmp(why, "timed out") == 0)
                return fail(in, "the call did not return within %.0f s; it was abandoned", timeout_s);
            return fail(in, "%s during the call, which was abandoned", why);
        }
        if (t->state == T_GONE) {
            if (t == h || t->tid == in->pid)
                return fail(in, "the process exited during the call");
            continue;
        }
        if (t != h) {
            /* Another thread took a signal or a stop: let it go on. */
            if (!resume(in, t))
                return false;
            continue;
        }
        struct user_regs_struct now;
        if (!get_regs(in, h->tid, &now))
            return false;
        if (h->pending_sig == SIGSEGV && now.rip == 0 && now.rsp == sp + 8) {
            h->pending_sig = 0;
            *result = now.rax;
            return true;
        }
        if (h->pending_sig == SIGSEGV || h->pending_sig == SIGBUS || h->pending_sig == SIGILL ||
            h->pending_sig == SIGFPE) {
            int sig = h->pending_sig;
            h->pending_sig = 0; /* ours, not the program's: never delivered */
            return fail(in, "the called function crashed (signal %d at 0x%llx); its call was abandoned", sig,
                        (unsigned long long)now.rip);
        }
        /* A signal for the program (its handler runs on top of the call
         * and returns into it) or our own stale interrupt: go on. */
        if (!resume(in, h))
            return false;
    }
}

/* Whether any stopped thread's next instruction lies inside a patch; a
 * thread in a syscall is also checked at the syscall instruction, which a
 * restart goes back to. */
static bool thread_inside(struct inject *in, const struct tensorleak_patch *p, size_t count, bool *inside)
{
    *inside = false;
    for (size_t i = 0; i < in->count; i++) {
        struct thread *t = &in->threads[i];
        if (t->state != T_STOPPED)
            continue;
        struct user_regs_struct r;
        if (t == in->hijacked)
            r = in->saved;
        else if (!get_regs(in, t->tid, &r))
            return false;
        for (size_t k = 0; k < count; k++) {
            uint64_t ip = r.rip;
            bool hit = ip >= p[k].address && ip < p[k].address + p[k].length;
            if ((long long)r.orig_rax >= 0 && ip - 2 >= p[k].address && ip - 2 < p[k].address + p[k].length)
                hit = true;
            *inside |= hit;
        }
    }
    return true;
}

bool inject_patch(struct inject *in, const struct tensorleak_patch *patches, size_t count, bool to_replacement)
{
    for (int attempt = 0;; attempt++) {
        if (!stop_all(in))
            return false;
        bool inside;
        if (!thread_inside(in, patches, count, &inside)) {
            resume_others(in);
            return false;
        }
        if (!inside)
            break;
        if (!resume_others(in))
            return false;
        if (attempt + 1 == PATCH_TRIES)
            return fail(in, "a thread was inside the code to change at each of %d tries", PATCH_TRIES);
        struct timespec ts = { 0, 2 * 1000000 };
        nanosleep(&ts, NULL);
    }
    bool ok = true;
    size_t done = 0;
    for (size_t k = 0; ok && k < count; k++) {
        const uint8_t *from = to_replacement ? patches[k].original : patches[k].replacement;
        const uint8_t *to = to_replacement ? patches[k].replacement : patches[k].original;
        uint8_t now[TENSORLEAK_PATCH_MAX_BYTES];
        ok = inject_read(in, patches[k].address, now, patches[k].length);
        if (ok && memcmp(now, from, patches[k].length) != 0)
            ok = fail(in, "the code at 0x%llx is not what the library expects (changed by someone else?)",
                      (unsigned long long)patches[k].address);
        if (ok)
            ok = write_mem(in, patches[k].address, to, patches[k].length);
        if (ok)
            done = k + 1;
    }
    if (!ok) {
        for (size_t k = 0; k < done; k++) {
            const uint8_t *from = to_replacement ? patches[k].original : patches[k].replacement;
            pwrite(in->mem_fd, from, patches[k].length, (off_t)patches[k].address);
        }
    }
    return resume_others(in) && ok;
}

bool inject_end(struct inject *in, char *err, size_t errlen)
{
    bool ok = true;
    in->ending = true;
    if (in->hijacked && in->hijacked->state != T_GONE) {
        if (in->hijacked->state == T_RUNNING) {
            /* Only after an abandoned call whose thread would not stop. */
            ok = fail(in, "thread %d could not be stopped to restore it", (int)in->hijacked->tid);
        } else {
            ok = restore_hijacked(in);
        }
    }
    if (!ok && err)
        snprintf(err, errlen, "%s", in->err);
    detach_all(in);
    if (in->mem_fd >= 0)
        close(in->mem_fd);
    free(in->threads);
    free(in);
    return ok;
}
