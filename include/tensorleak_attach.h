/* The interface between `tensorleak attach` (the injector, in the CLI) and the
 * library it loads into a running process.  Both sides are built from this one
 * header; `abi` lets the injector refuse a library of another version.
 *
 * Sequence (the injector calls each function in one hijacked thread of the
 * target, other threads running unless said otherwise):
 *   1. dlopen(library, RTLD_NOW | RTLD_LOCAL)
 *   2. plan = tensorleak_attach_prepare(settings, err, errlen)
 *        settings: "TENSORLEAK_NAME=value\n" lines, the same names and
 *        validation as the environment of `tensorleak run`.  Builds the
 *        trampolines and returns the bytes to write; NULL and a message in err
 *        on failure (nothing changed).
 *   3. all threads stopped; no thread's instruction pointer inside any
 *      [address, address + length); the injector writes each `replacement`
 *      through /proc/PID/mem; threads resumed.
 *   4. tensorleak_attach_commit(err, errlen): tracking, live file, watcher,
 *      before-attach figures.  0 on success.
 * Detach:
 *   1. plan = tensorleak_detach_prepare(err, errlen)
 *   2. all threads stopped, same check; `original` written back; resumed.
 *   3. tensorleak_detach_finish(err, errlen): final report (reason "detach"),
 *      live file removed, hooks forward only.  The library stays loaded, so a
 *      second attach finds it and starts again at step 2. */
#ifndef TENSORLEAK_ATTACH_H
#define TENSORLEAK_ATTACH_H

#include <stddef.h>
#include <stdint.h>

#define TENSORLEAK_ATTACH_ABI 1
#define TENSORLEAK_PATCH_MAX_BYTES 32

struct tensorleak_patch {
	uint64_t address;
	uint32_t length;
	uint8_t original[TENSORLEAK_PATCH_MAX_BYTES];
	uint8_t replacement[TENSORLEAK_PATCH_MAX_BYTES];
};

struct tensorleak_attach_plan {
	uint32_t abi;
	uint32_t count;
	const struct tensorleak_patch *patches;
};

const struct tensorleak_attach_plan *tensorleak_attach_prepare(const char *settings,
							       char *err, size_t errlen);
int tensorleak_attach_commit(char *err, size_t errlen);
const struct tensorleak_attach_plan *tensorleak_detach_prepare(char *err, size_t errlen);
int tensorleak_detach_finish(char *err, size_t errlen);

#endif
