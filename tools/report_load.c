/*
 * report_load.c: a report file -> struct tl_report: the file parsed with
 * jansson, its failures said as "tensorleak: PATH: reason", then read by
 * report_from_json (src/model/report_read.c).
 */
#include "cli.h"
#include "model.h"
#include "terminal_safe.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/* "tensorleak: PATH: reason", once per file (the first failure). */
#define fail(shown, fmt, ...) cli_error("%s: " fmt, shown, ##__VA_ARGS__)

/* jansson's messages may quote raw input bytes: keep stderr printable ASCII. */
static void sanitize(char *text)
{
    for (unsigned char *p = (unsigned char *)text; *p; p++) {
        if (*p < 0x20 || *p >= 0x7f)
            *p = '?';
    }
}

static json_t *parse_file(const char *shown, const char *path)
{
    FILE *fp;
    if (strcmp(path, "-") == 0) {
        fp = stdin;
    } else {
        fp = fopen(path, "rb");
        if (!fp) {
            fail(shown, "cannot open: %s", strerror(errno));
            return NULL;
        }
    }
    struct stat st;
    if (fstat(fileno(fp), &st) == 0) {
        if (S_ISDIR(st.st_mode)) {
            fail(shown, "is a directory, not a report");
            goto out;
        }
        if (S_ISREG(st.st_mode) && st.st_size == 0) {
            fail(shown, "empty file, not a tensorleak report");
            goto out;
        }
    }
    json_error_t err;
    json_t *root = json_loadf(fp, 0, &err);
    if (!root) {
        sanitize(err.text);
        if (err.position == 0 || (err.line == -1 && err.column == -1))
            fail(shown, "not a JSON report: %s", err.text);
        else if (strstr(err.text, "premature end of input") || strstr(err.text, "end of file"))
            fail(shown, "truncated JSON (input ends at line %d, column %d: %s)", err.line,
                 err.column, err.text);
        else if (strstr(err.text, "unable to decode byte"))
            fail(shown, "not valid UTF-8 at line %d, column %d: %s", err.line, err.column, err.text);
        else
            fail(shown, "invalid JSON at line %d, column %d: %s", err.line, err.column, err.text);
    }
    if (fp != stdin)
        fclose(fp);
    return root;
out:
    if (fp != stdin)
        fclose(fp);
    return NULL;
}

/* libstdc++'s __cxa_demangle, when the machine has it. */
static char *demangle(const char *name)
{
    typedef char *(*demangle_fn)(const char *, char *, size_t *, int *);
    static demangle_fn fn;
    static bool looked;
    if (!looked) {
        looked = true;
        void *h = dlopen("libstdc++.so.6", RTLD_LAZY | RTLD_LOCAL);
        fn = h ? (demangle_fn)dlsym(h, "__cxa_demangle") : NULL;
    }
    int status = -1;
    char *d = fn ? fn(name, NULL, NULL, &status) : NULL;
    if (status != 0) {
        free(d);
        return NULL;
    }
    return d;
}

bool report_load(const char *path, struct tl_report *out)
{
    memset(out, 0, sizeof(*out));
    out->path = path;
    const char *shown = strcmp(path, "-") == 0 ? "<stdin>" : path;
    json_t *root = parse_file(shown, path);
    if (!root)
        return false;
    char error[512];
    bool ok = report_from_json(root, path, demangle, out, error, sizeof error);
    json_decref(root);
    if (!ok) { /* it may quote the report's text */
        tl_copy_terminal_safe(error, sizeof error, error);
        fail(shown, "%s", error);
    }
    return ok;
}
