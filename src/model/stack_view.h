/*
 * stack_view.h: the rows a stack is shown in to a person, Python first.
 *
 * A stack that holds Python frames is shown from the innermost Python frame
 * out: the native frames between the CUDA call and it (libffi, _ctypes and
 * the interpreter, or libtorch's allocator and dispatcher) fold into one row
 * that names their libraries, innermost first, so the library that made the
 * call stays in sight; native frames between two Python frames fold the same
 * way; the interpreter's frames below the outermost Python frame are left
 * out.  A stack without Python frames, or any stack when every frame is
 * asked for, is shown frame by frame as recorded.
 *
 * Only what a person reads changes: reports keep every frame, and grouping,
 * suppressions, owners and growth work on the whole stack.  The library's
 * text report and every renderer of the CLI take their rows from here, so
 * they fold alike (compiled into both, as suppressions.c is).
 */
#ifndef TENSORLEAK_STACK_VIEW_H
#define TENSORLEAK_STACK_VIEW_H

#include <stdbool.h>
#include <stddef.h>

/* What the view needs of a frame: whether it is Python's, the module (path
 * or file name; NULL when unknown) of a native one, and its source file
 * (NULL when unknown; only tl_stack_user_frame reads it). */
struct tl_view_frame {
    bool python;
    const char *module;
    const char *file;
};

/* A row: one frame (count == 1, fold false), or `count` native frames from
 * index `first` on, folded into one row (fold true). */
struct tl_view_row {
    size_t first;
    size_t count;
    bool fold;
};

/* The rows of the n frames (innermost first) into rows[], at most n; returns
 * how many.  all: every frame as recorded. */
size_t tl_stack_view(const struct tl_view_frame *frames, size_t n, bool all, struct tl_view_row *rows);

/* Which of the n frames (innermost first) is the user's, the line a person
 * fixes a leak at: the innermost Python frame of the program (not of the
 * interpreter's library, an installed package or "<string>"), else the
 * innermost frame with a source file outside the C and C++ libraries, the
 * CUDA driver and runtime, tensorleak and its client header (an inlined
 * tensorleak_pool_alloc) and /usr/, else the innermost frame with a source
 * file; n when no frame has one.  Every renderer that names a site by one
 * line asks here (SARIF, HTML, the live file that top and the exporter
 * read), so they name the same line. */
size_t tl_stack_user_frame(const struct tl_view_frame *frames, size_t n);

/* "7 native frames: libcudart, libffi, _ctypes, libpython3.11": the folded
 * row's words, its modules' short names in first-seen order, at most
 * `size` bytes (cut with "..." when the names do not fit). */
void tl_stack_view_fold_words(const struct tl_view_frame *frames, const struct tl_view_row *row, char *buf,
                              size_t size);

#endif
