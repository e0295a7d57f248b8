/*
 * cli.h: internals shared by the files of the tensorleak CLI, grouped by the
 * file that defines them. Exit codes follow SPEC.md: 0 success/pass,
 * 1 check failed, 2 usage error or unusable input.
 */
#ifndef TENSORLEAK_CLI_H
#define TENSORLEAK_CLI_H

#include <stdbool.h>
#include <stdio.h>

#include "suppressions.h"

#define CLI_EXIT_OK 0
#define CLI_EXIT_FAIL 1
#define CLI_EXIT_USAGE 2

struct tl_report;
struct tl_frame;
struct tl_stack;

/* main.c */
void cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Opens OUT for writing ("-" or NULL: stdout); prints the error, NULL on failure. */
FILE *cli_open_output(const char *path);
/* Flushes and closes what cli_open_output returned; false (error printed) on a write error. */
bool cli_close_output(FILE *out, const char *path);

/*
 * Reports a getopt_long() error (optstring starting with ':' and opterr = 0)
 * as "tensorleak: COMMAND: ..." and returns CLI_EXIT_USAGE.
 */
int cli_option_error(const char *command, int opt, char **argv);

/* track_options.c: the tracking options `run` and `attach` share */
#define CLI_SETTINGS_MAX 16
struct cli_settings {
    const char *name[CLI_SETTINGS_MAX]; /* TENSORLEAK_* variable */
    char *value[CLI_SETTINGS_MAX];      /* owned */
    size_t count;
    bool sim;  /* run --sim */
    bool wait; /* attach --wait */
};
/* Parses the options of `run` (ATTACH false) or `attach` from ARGV, stopping
 * at the first operand (optind).  -1: parsed, OUT filled (free it with
 * cli_settings_free); otherwise the exit status to return (help printed:
 * 0; error printed as "COMMAND: ...": 2). */
int cli_settings_parse(const char *command, bool attach, const char *usage, int argc, char **argv,
                       struct cli_settings *out);
void cli_settings_free(struct cli_settings *settings);

/* cmd_run.c */
int cmd_run(int argc, char **argv);
/* cmd_attach.c: `attach` and `detach` */
int cmd_attach(int argc, char **argv);
int cmd_detach(int argc, char **argv);
int cmd_snapshot(int argc, char **argv);
/* cmd_sim.c */
int cmd_sim(int argc, char **argv);

/* exec_env.c: the environment of the command `run` and `sim` exec */
/* The preload library, as an absolute path in OUT: TENSORLEAK_LIBRARY when
 * set, else <exe_dir>/../<libdir>/libtensorleak.so (installed tree), else
 * <exe_dir>/../src/libtensorleak.so (build tree).  False, error printed as
 * "COMMAND: ...", when none is readable. */
bool cli_find_library(const char *command, char *out);
/* Directory of this executable, with a trailing '/'; false when unknown. */
bool cli_exe_dir(char *buf, size_t size);
/* DIR/../<libdir>/REST (libdir may be absolute) into OUT. */
void cli_libdir_path(char *out, size_t size, const char *dir, const char *rest);
/* False (error printed as "COMMAND: ...") when PATH holds ':' or a blank. */
bool cli_path_list_safe(const char *command, const char *what, const char *path);
/* Adds ITEM to the ':' list in variable NAME (first or last) unless there;
 * false when out of memory. */
bool cli_extend_list(const char *name, const char *item, bool prepend);
/* Puts the simulated CUDA stack in the environment: its directory first on
 * LD_LIBRARY_PATH, its libcudart.so.13 preloaded (after what LD_PRELOAD
 * holds).  False, error printed, when it cannot be found or set. */
bool cli_sim_environment(const char *command);
/* cmd_report.c */
int cmd_report(int argc, char **argv);
/* cmd_check.c */
int cmd_check(int argc, char **argv);
/* cmd_diff.c */
int cmd_diff(int argc, char **argv);
/* cmd_merge.c */
int cmd_merge(int argc, char **argv);

/* format_folded.c */
void format_folded(FILE *out, const struct tl_report *report);

/* format_sarif.c */
/* One SARIF 2.1.0 log with the results of every report, in order. */
bool format_sarif(FILE *out, const struct tl_report *reports, size_t count);
/* Absolute paths under DIR become relative URIs (default: the current directory). */
void sarif_set_source_root(const char *dir);
/* The stack's user frame (tl_stack_user_frame, stack_view.h), NULL when no
 * frame has a file. */
const struct tl_frame *sarif_user_frame(const struct tl_stack *stack);

/* format_html.c */
/* One self-contained HTML page showing every report, in order. */
bool format_html(FILE *out, const struct tl_report *reports, size_t count);

/* format_torch_snapshot.c */
/* The report as a pickle in torch.cuda.memory._snapshot()'s layout (plain types only). */
bool format_torch_snapshot(FILE *out, const struct tl_report *report);

/* suppressions_file.c */
/* Reads and parses a suppressions file; errors as "tensorleak: FILE:LINE: reason". */
bool suppressions_load_file(const char *path, struct tl_suppressions *out);
/* Index of the first rule of `kind` matching any frame of `stack`, or -1. */
long suppressions_match_stack(const struct tl_suppressions *set, enum tl_supp_kind kind,
                              const struct tl_stack *stack);

#endif
