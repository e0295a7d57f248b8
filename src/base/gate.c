/*
 * gate.c — which process is ours to track, told apart at no cost per hook.
 *
 * Our threads (the watcher, the Python bridge) make a program that had one
 * thread a multithreaded one.  A child made by glibc's fork() runs our fork
 * handlers, and fork() first waits for the watcher's unit of work
 * (snapshot.c).  A child made any other way (a raw clone(SIGCHLD), clone3,
 * _Fork) runs no handler: it starts with every lock our threads held at
 * that instant held forever (the loader's lock, our table and report locks,
 * the libc locks a report holds).  Such a child must take no lock of ours
 * and call nothing that takes one: each hook forwards to the real function
 * and nothing is tracked or written (the documented behaviour).
 *
 * So tl_active and tl_used live on a page of their own marked
 * MADV_WIPEONFORK (Linux 4.14): the kernel gives every child made without
 * CLONE_VM a zero-filled copy.  There the hooks find tl_used false, ask
 * tl_ensure_init, which finds `armed` false too and answers "forward only";
 * everything else finds tl_active false.  The fork handler of preload.c
 * puts the three back in a child that fork() made (tl_gate_after_fork).
 * Where madvise refuses (an older kernel, a page size above 4 KiB), the
 * flags are not wiped: tl_gate_foreign then asks getpid(), on the paths
 * that would wait on the loader's lock (tl_ensure_init, owners.c's
 * decision), and a raw-clone child may still wait on a table lock a report
 * held at the clone.
 */
#include "tl_internal.h"

#include <sys/mman.h>
#include <unistd.h>

#ifndef MADV_WIPEONFORK
#define MADV_WIPEONFORK 18
#endif

struct tl_flags_page tl_flags;
atomic_bool tl_exit_began;
_Static_assert(sizeof tl_flags == 4096, "the gate is one page");

static bool wiped;      /* the page is MADV_WIPEONFORK */
static pid_t armed_pid; /* the tracked process, for the getpid() fallback */
/* tl_active at the last fork, for the child (the page it reads is wiped). */
static bool active_at_fork;

void tl_set_active(bool on)
{
    atomic_store(&tl_active, on);
    TL_SLOW_PATH_FOLLOW(TL_SLOW_INACTIVE, !atomic_load(&tl_active));
}

void tl_gate_arm(void)
{
    if (!wiped && (long)sysconf(_SC_PAGESIZE) == (long)sizeof tl_flags)
        wiped = madvise(&tl_flags, sizeof tl_flags, MADV_WIPEONFORK) == 0;
    armed_pid = getpid();
    atomic_store(&tl_flags.armed, true);
}

bool tl_gate_foreign(void)
{
    if (wiped)
        return !atomic_load_explicit(&tl_flags.armed, memory_order_relaxed);
    return getpid() != armed_pid;
}

void tl_gate_before_fork(void)
{
    active_at_fork = atomic_load(&tl_active);
}

void tl_gate_after_fork(bool follow)
{
    armed_pid = getpid();
    atomic_store(&tl_flags.armed, true);
    atomic_store(&tl_used, false);
    tl_set_active(follow && active_at_fork);
}

bool tl_gate_wiped(void)
{
    return wiped;
}
