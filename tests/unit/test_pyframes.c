/*
 * Unit tests of pyframes.c without an interpreter in the process:
 * Python frame values (tagged, interned by function, file and line), their
 * symbolization, and the merge's rule for Python frames whose evaluation
 * frame is not on the native stack.  The interpreter cases run for real in
 * tests/python.
 */
#include "record.h"

#include <criterion/criterion.h>
#include <string.h>

Test(pyframes, a_location_interns_to_one_tagged_value_no_address_can_equal)
{
    uintptr_t a = tl_pyloc_intern_strings("serve_request", "/srv/app.py", 42);
    uintptr_t b = tl_pyloc_intern_strings("serve_request", "/srv/app.py", 42);
    uintptr_t c = tl_pyloc_intern_strings("serve_request", "/srv/app.py", 43);
    uintptr_t d = tl_pyloc_intern_strings("serve_request", "/srv/other.py", 42);
    cr_assert_neq(a, 0);
    cr_assert_eq(a, b, "the same location is one frame value");
    cr_assert_neq(a, c);
    cr_assert_neq(a, d);
    cr_assert_neq(c, d);
    cr_assert(tl_is_pyframe(a) && tl_is_pyframe(c) && tl_is_pyframe(d));
    /* User return addresses and kernel addresses are never Python frames. */
    cr_assert(!tl_is_pyframe((uintptr_t)&tl_pyloc_intern_strings));
    cr_assert(!tl_is_pyframe(0x7fffffffe000ull));
    cr_assert(!tl_is_pyframe(0xffffffff81000000ull));
    cr_assert(!tl_is_pyframe(0));
    const char *fn, *file;
    int line;
    cr_assert(tl_pyloc_lookup(c, &fn, &file, &line));
    cr_assert_str_eq(fn, "serve_request");
    cr_assert_str_eq(file, "/srv/app.py");
    cr_assert_eq(line, 43);
    cr_assert(!tl_pyloc_lookup(0x401000, &fn, &file, &line));
    cr_assert(!tl_pyloc_lookup(TL_PYFRAME_TAG | 0xfffffff, &fn, &file, &line), "an id never handed out");
}

Test(pyframes, a_python_frame_symbolizes_to_its_function_file_and_line_without_an_address)
{
    uintptr_t v = tl_pyloc_intern_strings("Model.forward", "/srv/model.py", 7);
    void *session = tl_symbolizer_open();
    struct tl_frame_info f;
    tl_symbolize(session, v, &f);
    cr_assert(f.python);
    cr_assert_str_eq(f.function, "Model.forward");
    cr_assert_str_eq(f.file, "/srv/model.py");
    cr_assert_str_eq(f.module, "/srv/model.py", "module: the .py file, for module globs");
    cr_assert_eq(f.line, 7);
    cr_assert_eq(f.offset, 0);
    cr_assert_eq(f.ninline, 0);
    tl_symbolizer_close(session);
}

Test(pyframes, runs_without_an_evaluation_frame_on_the_native_stack_go_after_it_up_to_the_depth)
{
    /* No interpreter here, so no native frame is in the evaluation loop:
     * every Python frame goes after the native ones, innermost first. */
    uintptr_t native[3] = {0x401000, 0x401100, 0x401200};
    uintptr_t py[3] = {tl_pyloc_intern_strings("a", "x.py", 1), tl_pyloc_intern_strings("b", "x.py", 2),
                       tl_pyloc_intern_strings("c", "x.py", 3)};
    bool run_end[3] = {false, true, true};
    uintptr_t out[8];
    int n = tl_py_merge(out, 8, native, 3, py, run_end, 3);
    cr_assert_eq(n, 6);
    uintptr_t want[6] = {native[0], native[1], native[2], py[0], py[1], py[2]};
    cr_assert_arr_eq(out, want, sizeof want);
    n = tl_py_merge(out, 4, native, 3, py, run_end, 3);
    cr_assert_eq(n, 4, "cut at the depth");
    cr_assert_eq(out[3], py[0]);
}

Test(pyframes, without_an_interpreter_no_python_frames_and_the_check_is_ruled_out)
{
    uintptr_t py[4];
    bool run_end[4], same = true;
    cr_assert_eq(tl_py_read(py, run_end, 4, &same), 0);
    cr_assert(!same);
    cr_assert(!tl_py_maybe(), "one look, then the capture path skips Python");
}

Test(pyframes, a_name_that_is_not_mangled_is_returned_as_is)
{
    const char *s = "serve_request";
    cr_assert_eq(tl_demangle(s), s);
    cr_assert_null(tl_demangle(NULL));
    /* Not a valid Itanium name: left alone, never a crash. */
    const char *bad = "_ZN3c10";
    cr_assert_eq(tl_demangle(bad), bad);
}
