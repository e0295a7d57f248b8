/* Unit tests of the Python-first stack view (src/model/stack_view.c): which rows
 * a person is shown, and the words of a folded native run. */
#include "stack_view.h"

#include <criterion/criterion.h>
#include <string.h>

#define PY(m) { true, m }
#define NAT(m) { false, m }

/* The shape of a ctypes call: cudart, libffi, _ctypes and the interpreter,
 * then two Python frames with the interpreter between them, then the
 * interpreter's own start-up frames below <module>. */
static const struct tl_view_frame ctypes_call[] = {
    NAT("/opt/sim/libcudart.so.13"),
    NAT("/usr/lib/x86_64-linux-gnu/libffi.so.8.1.2"),
    NAT("/usr/lib/x86_64-linux-gnu/libffi.so.8.1.2"),
    NAT("/usr/lib/python3.11/lib-dynload/_ctypes.cpython-311-x86_64-linux-gnu.so"),
    NAT("/usr/lib/libpython3.11.so.1.0"),
    PY(NULL),                                 /* 5: cuda_malloc */
    NAT("/usr/lib/libpython3.11.so.1.0"),
    NAT("/usr/lib/libpython3.11.so.1.0"),
    PY(NULL),                                 /* 8: serve */
    PY(NULL),                                 /* 9: <module> */
    NAT("/usr/lib/libpython3.11.so.1.0"),
    NAT("/usr/bin/python3.11"),
    NAT("/lib/x86_64-linux-gnu/libc.so.6"),
};
#define N (sizeof ctypes_call / sizeof ctypes_call[0])

Test(stack_view, the_innermost_python_frame_comes_first_and_native_runs_fold)
{
    struct tl_view_row rows[N];
    size_t n = tl_stack_view(ctypes_call, N, false, rows);
    cr_assert_eq(n, 5);
    cr_assert(rows[0].first == 5 && rows[0].count == 1 && !rows[0].fold);
    cr_assert(rows[1].first == 0 && rows[1].count == 5 && rows[1].fold);
    cr_assert(rows[2].first == 6 && rows[2].count == 2 && rows[2].fold);
    cr_assert(rows[3].first == 8 && rows[3].count == 1 && !rows[3].fold);
    cr_assert(rows[4].first == 9 && rows[4].count == 1 && !rows[4].fold);
}

Test(stack_view, every_frame_when_all_are_asked_for_or_none_is_python)
{
    struct tl_view_row rows[N];
    cr_assert_eq(tl_stack_view(ctypes_call, N, true, rows), N);
    for (size_t i = 0; i < N; i++)
        cr_assert(rows[i].first == i && rows[i].count == 1 && !rows[i].fold);
    static const struct tl_view_frame native[] = { NAT("a.so"), NAT("b.so"), NAT(NULL) };
    cr_assert_eq(tl_stack_view(native, 3, false, rows), 3);
    cr_assert(rows[2].first == 2 && !rows[2].fold);
    cr_assert_eq(tl_stack_view(native, 0, false, rows), 0);
}

Test(stack_view, a_python_frame_at_the_top_has_no_fold_before_it)
{
    static const struct tl_view_frame f[] = { PY(NULL), NAT("libpython3.12.so"), PY(NULL) };
    struct tl_view_row rows[3];
    cr_assert_eq(tl_stack_view(f, 3, false, rows), 3);
    cr_assert(rows[0].first == 0 && !rows[0].fold);
    cr_assert(rows[1].first == 1 && rows[1].count == 1 && rows[1].fold);
    cr_assert(rows[2].first == 2 && !rows[2].fold);
}

Test(stack_view, a_fold_names_each_library_once_innermost_first)
{
    struct tl_view_row rows[N];
    tl_stack_view(ctypes_call, N, false, rows);
    char words[256];
    tl_stack_view_fold_words(ctypes_call, &rows[1], words, sizeof words);
    cr_assert_str_eq(words, "5 native frames: libcudart, libffi, _ctypes, libpython3.11");
    tl_stack_view_fold_words(ctypes_call, &rows[2], words, sizeof words);
    cr_assert_str_eq(words, "2 native frames: libpython3.11");
    static const struct tl_view_frame one[] = { NAT(NULL), PY(NULL) };
    struct tl_view_row r = { 0, 1, true };
    tl_stack_view_fold_words(one, &r, words, sizeof words);
    cr_assert_str_eq(words, "1 native frame: ??");
}

Test(stack_view, fold_words_that_do_not_fit_end_in_an_ellipsis)
{
    struct tl_view_row rows[N];
    tl_stack_view(ctypes_call, N, false, rows);
    char words[32];
    tl_stack_view_fold_words(ctypes_call, &rows[1], words, sizeof words);
    cr_assert_str_eq(words, "5 native frames: libcudart, ...");
    cr_assert_lt(strlen(words), sizeof words);
}

/* The user's frame, which SARIF, HTML and the live file (top, the exporter)
 * all name a site by.  The live file used to take the innermost Python
 * frame, or else the innermost native frame with a file, so it named an
 * installed package's line, or the client header's inlined
 * tensorleak_pool_alloc, where SARIF and HTML named the program's. */
Test(stack_view, the_users_frame_is_the_programs_python_line_else_its_own_native_code)
{
    static const struct tl_view_frame python[] = {
        { false, "/opt/sim/libcudart.so.13", "runtime.c" },
        { true, NULL, "/usr/lib/python3/dist-packages/torch/cuda/memory.py" },
        { true, NULL, "/srv/app/.venv/lib/python3.12/site-packages/model/cache.py" },
        { true, NULL, "<string>" },
        { true, NULL, "/srv/app/serve.py" },
    };
    cr_assert_eq(tl_stack_user_frame(python, 5), 4);
    static const struct tl_view_frame native[] = {
        { false, "/usr/lib/x86_64-linux-gnu/libc.so.6", "malloc.c" },
        { false, "/srv/app/server", "/srv/app/include/tensorleak.h" },
        { false, "/srv/app/server", "/usr/include/c++/12/bits/stl_vector.h" },
        { false, "/srv/app/server", "../src/pool.c" },
    };
    cr_assert_eq(tl_stack_user_frame(native, 4), 3);
    /* No frame of the program's: the innermost with a file; none: n. */
    cr_assert_eq(tl_stack_user_frame(native, 3), 0);
    static const struct tl_view_frame bare[] = { NAT("libcuda.so.1"), PY(NULL), { false, "a.so", "" } };
    cr_assert_eq(tl_stack_user_frame(bare, 3), 3);
    cr_assert_eq(tl_stack_user_frame(bare, 0), 0);
}
