/*
 * option_rules.h: the rules a TENSORLEAK_* value must meet, one place for
 * the library (options.c, which reads the variables) and `tensorleak run`
 * (tools/cmd_run.c, which refuses a bad option before the program starts),
 * so that both accept exactly the same inputs.  libc only: the CLI compiles
 * option_rules.c itself.
 *
 * Each tl_option_* check stores the value and returns true, or returns
 * false and puts what was expected in `why` (no variable or option name:
 * each caller says which it read).
 */
#ifndef TL_OPTION_RULES_H
#define TL_OPTION_RULES_H

#include <stdbool.h>
#include <stddef.h>

/* The kinds TENSORLEAK_FAIL_ON / --fail-on name, as gate bits. */
enum tl_fail_kind {
    TL_FAIL_LEAK = 1u << 0,
    TL_FAIL_GROWTH = 1u << 1,
    TL_FAIL_INVALID_FREE = 1u << 2,
    TL_FAIL_OOM = 1u << 3,
};

/* Frames kept per stack (TENSORLEAK_DEPTH, TENSORLEAK_PYTHON_DEPTH). */
#define TL_MAX_DEPTH 128

/* Room for any `why` the checks write. */
#define TL_OPTION_WHY 160

/* A decimal integer in [min, max]: digits, a leading '-' at most; no
 * blanks, '+' or suffix.  0 on success, -1 otherwise. */
int tl_parse_int(const char *s, long min, long max, long *out);
/* A --fail-on list; 0 on success, -1 otherwise (tl_option_fail_on says why). */
int tl_parse_fail_on(const char *s, unsigned *out);

/* TENSORLEAK_DEPTH, TENSORLEAK_PYTHON_DEPTH: 0 to TL_MAX_DEPTH frames. */
bool tl_option_depth(const char *v, int *out, char why[TL_OPTION_WHY]);
/* TENSORLEAK_EXITCODE: 1 to 255; 0 would make a failed gate read as a pass. */
bool tl_option_exitcode(const char *v, int *out, char why[TL_OPTION_WHY]);
/* TENSORLEAK_FAIL_ON: a comma list of leak, growth, invalid-free, oom, each
 * spelled exactly, or none alone. */
bool tl_option_fail_on(const char *v, unsigned *out, char why[TL_OPTION_WHY]);
/* TENSORLEAK_INTERVAL: seconds, at most a year; 0 is off (the default). */
bool tl_option_interval(const char *v, double *out, char why[TL_OPTION_WHY]);

#endif
