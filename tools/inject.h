/*
 * inject.h: calling functions inside another running process with plain
 * ptrace, and changing its code while every thread is stopped (x86-64 Linux).
 *
 * The sequence a caller follows (tools/cmd_attach.c):
 *   inject_begin      seize every thread, stop them all, choose one to hijack
 *                     (one blocked in a syscall if any; never one inside the
 *                     dynamic loader, nor one running inside the C library,
 *                     which may hold malloc's lock), save its registers and
 *                     extended state, resume the others
 *   inject_call ...   run a function in the hijacked thread while the others
 *                     run; it returns into an invalid address, whose fault
 *                     stops the thread again
 *   inject_patch      stop every thread, make sure none is inside the bytes to
 *                     change, write them through /proc/PID/mem, resume them
 *   inject_end        restore the hijacked thread (its interrupted syscall is
 *                     restarted as if nothing happened) and detach from all
 * Every failure leaves an error in `err` and the caller goes to inject_end,
 * which always runs: no thread is left stopped or traced.  SIGINT, SIGTERM
 * and SIGHUP are held between begin and end, so that an impatient user
 * cannot leave the target with a hijacked thread (see docs/attach.md).
 */
#ifndef TENSORLEAK_INJECT_H
#define TENSORLEAK_INJECT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "tensorleak_attach.h"

struct inject;

/* One mapping of /proc/PID/maps. */
struct inject_map {
    uint64_t start, end, offset;
    char perms[5];
    uint64_t inode;
    char path[4096]; /* empty for anonymous mappings */
};

/* inject_symbols.c */
/* Reads /proc/PID/maps; false (errno set) when it cannot. */
bool inject_maps_read(pid_t pid, struct inject_map **maps, size_t *count);
/* The first mapping whose file's base name is NAME or starts with NAME
 * followed by '.' (NAME "libc.so" matches libc.so.6), or NULL. */
const struct inject_map *inject_maps_find(const struct inject_map *maps, size_t count, const char *name);
/* The address of the defined function symbol NAME of the file mapped at MAP
 * (opened through /proc/PID/root and checked to be the one mapped: its first
 * page equals the process's), its default version preferred.  False and a
 * message in ERR when there is none or the file cannot be read. */
bool inject_symbol(pid_t pid, const struct inject_map *maps, size_t count, const struct inject_map *map,
                   const char *name, uint64_t *address, char *err, size_t errlen);

/* inject.c */
/* Seizes and stops every thread of PID, chooses and saves the thread to
 * hijack, resumes the others.  NULL and a message in ERR on failure (the
 * process is left as it was). */
struct inject *inject_begin(pid_t pid, char *err, size_t errlen);
/* Copies LEN bytes into the hijacked thread's stack, below its red zone;
 * their address in *REMOTE.  Valid until inject_end. */
bool inject_push(struct inject *in, const void *data, size_t len, uint64_t *remote);
/* Calls FN(ARGS...) (at most 6 integer arguments) in the hijacked thread
 * and waits at most TIMEOUT_S seconds for it to return.  Its return value in
 * *RESULT. */
bool inject_call(struct inject *in, uint64_t fn, const uint64_t *args, int nargs, double timeout_s,
                 uint64_t *result);
bool inject_read(struct inject *in, uint64_t address, void *buf, size_t len);
/* Stops every thread (also ones started since), checks that none's
 * instruction pointer is inside a patch and that each patch's bytes are
 * still FROM (original or replacement), writes TO, resumes the threads.  A
 * thread inside a patch: resume, wait a little, try again (a few times).
 * All or nothing: a failed write puts back what was written. */
bool inject_patch(struct inject *in, const struct tensorleak_patch *patches, size_t count, bool to_replacement);
/* The message of the last failure. */
const char *inject_error(const struct inject *in);
/* Restores the hijacked thread, detaches from every thread, frees IN.
 * False (message in ERR) when the hijacked thread could not be restored. */
bool inject_end(struct inject *in, char *err, size_t errlen);

#endif
