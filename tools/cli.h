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

/* cmd_run.c */
int cmd_run(int argc, char **argv);
/* cmd_report.c */
int cmd_report(int argc, char **argv);
/* cmd_check.c */
int cmd_check(int argc, char **argv);
/* cmd_diff.c */
int cmd_diff(int argc, char **argv);
/* cmd_merge.c */
int cmd_merge(int argc, char **argv);

/* format_text.c */
void format_text(FILE *out, const struct tl_report *report, const char *report_name);
/* One "    #N 0xADDR in FUNC FILE:LINE (MODULE+OFF)" line. */
void format_frame(FILE *out, size_t index, const struct tl_frame *frame);
/* A stack as a person reads it (tools/stack_view.h: the innermost Python
 * frame first, native runs folded into one line naming their libraries,
 * every frame when format_frames_all), or a line saying there is none. */
void format_stack(FILE *out, const struct tl_stack *stack);
/* `tensorleak report --frames all`: every frame as recorded. */
extern bool format_frames_all;
/* The rows of a stack (stack_view.h) in *rows (malloc'd, the caller frees;
 * NULL when out of memory or empty) and their count. */
struct tl_view_row;
size_t format_stack_rows(const struct tl_stack *stack, struct tl_view_row **rows);
/* A folded row's words: "7 native frames: libffi, _ctypes, libpython3.11". */
void format_fold_words(const struct tl_stack *stack, const struct tl_view_row *row, char *buf, size_t size);

/* format_folded.c */
void format_folded(FILE *out, const struct tl_report *report);

/* format_sarif.c */
/* One SARIF 2.1.0 log with the results of every report, in order. */
bool format_sarif(FILE *out, const struct tl_report *reports, size_t count);
/* Absolute paths under DIR become relative URIs (default: the current directory). */
void sarif_set_source_root(const char *dir);
/* Whether a frame is the program's own code with a file (not libc, CUDA, tensorleak). */
bool sarif_is_user_frame(const struct tl_frame *frame);
/* The first user frame with a file, else the first frame with a file, else NULL. */
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
