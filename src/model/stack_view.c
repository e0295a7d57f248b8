/*
 * stack_view.c: the rows a stack is shown in to a person (stack_view.h).
 */
#include "stack_view.h"

#include <fnmatch.h>
#include <stdio.h>
#include <string.h>

size_t tl_stack_view(const struct tl_view_frame *frames, size_t n, bool all, struct tl_view_row *rows)
{
    size_t innermost = n, outermost = n;
    for (size_t i = 0; i < n; i++)
        if (frames[i].python) {
            if (innermost == n)
                innermost = i;
            outermost = i;
        }
    size_t count = 0;
    if (all || innermost == n) {
        for (size_t i = 0; i < n; i++)
            rows[count++] = (struct tl_view_row){ i, 1, false };
        return count;
    }
    /* The innermost Python frame, then the native frames it reached the
     * CUDA call through; then outwards, each native run before the Python
     * frame that called it; nothing past the outermost Python frame. */
    rows[count++] = (struct tl_view_row){ innermost, 1, false };
    if (innermost > 0)
        rows[count++] = (struct tl_view_row){ 0, innermost, true };
    size_t run = innermost + 1;
    for (size_t i = innermost + 1; i <= outermost; i++) {
        if (!frames[i].python)
            continue;
        if (i > run)
            rows[count++] = (struct tl_view_row){ run, i - run, true };
        rows[count++] = (struct tl_view_row){ i, 1, false };
        run = i + 1;
    }
    return count;
}

/* "libffi" of ".../libffi.so.8.1.2", "_ctypes" of
 * "_ctypes.cpython-311-x86_64-linux-gnu.so", "libpython3.11" of
 * "libpython3.11.so.1.0"; the executable's name as it is. */
static size_t short_name(const char *module, const char **start)
{
    if (!module || !*module) {
        *start = "??";
        return 2;
    }
    const char *base = strrchr(module, '/');
    base = base ? base + 1 : module;
    size_t len = strlen(base);
    const char *so = strstr(base, ".so");
    if (so && (so[3] == '\0' || so[3] == '.'))
        len = (size_t)(so - base);
    const char *tag = strstr(base, ".cpython-");
    if (tag && (size_t)(tag - base) < len)
        len = (size_t)(tag - base);
    *start = base;
    return len ? len : strlen(base);
}

void tl_stack_view_fold_words(const struct tl_view_frame *frames, const struct tl_view_row *row, char *buf,
                              size_t size)
{
    if (size == 0)
        return;
    int n = snprintf(buf, size, "%zu native frame%s:", row->count, row->count == 1 ? "" : "s");
    size_t used = n < 0 ? 0 : (size_t)n < size ? (size_t)n : size - 1;
    for (size_t i = row->first; i < row->first + row->count; i++) {
        const char *name;
        size_t len = short_name(frames[i].module, &name);
        bool seen = false;
        for (size_t j = row->first; j < i && !seen; j++) {
            const char *other;
            size_t other_len = short_name(frames[j].module, &other);
            seen = other_len == len && memcmp(other, name, len) == 0;
        }
        if (seen)
            continue;
        const char *sep = used > (size_t)n ? ", " : " ";
        /* Room for this name and, should a later one not fit, ", ...". */
        if (used + strlen(sep) + len + 5 >= size) {
            snprintf(buf + used, size - used, "%s...", sep);
            return;
        }
        used += (size_t)snprintf(buf + used, size - used, "%s%.*s", sep, (int)len, name);
    }
}

/* Modules whose frames are never the place to fix a leak. */
static const char *const system_modules[] = {
    "libc.so*", "libc-*", "ld-linux*", "ld-*.so*", "libstdc++.so*", "libpthread*",
    "libcuda.so*", "libcudart*", "libtensorleak*",
};

static const char *base_name(const char *path)
{
    const char *slash = path ? strrchr(path, '/') : NULL;
    return slash && slash[1] ? slash + 1 : path;
}

static bool has_file(const struct tl_view_frame *f)
{
    return f->file && *f->file;
}

static bool is_program_python(const struct tl_view_frame *f)
{
    return f->python && has_file(f) && f->file[0] != '<' && !strstr(f->file, "/site-packages/") &&
           !strstr(f->file, "/dist-packages/") && !strstr(f->file, "/lib/python3");
}

static bool is_user_frame(const struct tl_view_frame *f)
{
    if (!has_file(f) || strcmp(base_name(f->file), "tensorleak.h") == 0 || strncmp(f->file, "/usr/", 5) == 0)
        return false;
    const char *module = base_name(f->module);
    for (size_t i = 0; module && i < sizeof system_modules / sizeof system_modules[0]; i++)
        if (fnmatch(system_modules[i], module, 0) == 0)
            return false;
    return true;
}

size_t tl_stack_user_frame(const struct tl_view_frame *frames, size_t n)
{
    bool (*const rules[])(const struct tl_view_frame *) = {is_program_python, is_user_frame, has_file};
    for (size_t r = 0; r < sizeof rules / sizeof rules[0]; r++)
        for (size_t i = 0; i < n; i++)
            if (rules[r](&frames[i]))
                return i;
    return n;
}
