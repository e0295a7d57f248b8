/*
 * report_load.c: a report file -> struct tl_report: the file parsed with
 * jansson, its failures said as "tensorleak: PATH: reason", then read by
 * report_from_json (src/report_read.c).
 */
#include "cli.h"
#include "report.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

struct loader {
    const char *path;
    bool failed;
};

static void fail(struct loader *ld, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void fail(struct loader *ld, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (!ld->failed)
        cli_error("%s: %s", ld->path, msg);
    ld->failed = true;
}

/* jansson's messages may quote raw input bytes: keep stderr printable ASCII. */
static void sanitize(char *text)
{
    for (unsigned char *p = (unsigned char *)text; *p; p++) {
        if (*p < 0x20 || *p >= 0x7f)
            *p = '?';
    }
}

static json_t *parse_file(struct loader *ld, const char *path)
{
    FILE *fp;
    if (strcmp(path, "-") == 0) {
        fp = stdin;
    } else {
        fp = fopen(path, "rb");
        if (!fp) {
            fail(ld, "cannot open: %s", strerror(errno));
            return NULL;
        }
    }
    struct stat st;
    if (fstat(fileno(fp), &st) == 0) {
        if (S_ISDIR(st.st_mode)) {
            fail(ld, "is a directory, not a report");
            goto out;
        }
        if (S_ISREG(st.st_mode) && st.st_size == 0) {
            fail(ld, "empty file, not a tensorleak report");
            goto out;
        }
    }
    json_error_t err;
    json_t *root = json_loadf(fp, 0, &err);
    if (!root) {
        sanitize(err.text);
        if (err.position == 0 || (err.line == -1 && err.column == -1))
            fail(ld, "not a JSON report: %s", err.text);
        else if (strstr(err.text, "premature end of input") || strstr(err.text, "end of file"))
            fail(ld, "truncated JSON (input ends at line %d, column %d: %s)", err.line,
                 err.column, err.text);
        else if (strstr(err.text, "unable to decode byte"))
            fail(ld, "not valid UTF-8 at line %d, column %d: %s", err.line, err.column, err.text);
        else
            fail(ld, "invalid JSON at line %d, column %d: %s", err.line, err.column, err.text);
    }
    if (fp != stdin)
        fclose(fp);
    return root;
out:
    if (fp != stdin)
        fclose(fp);
    return NULL;
}

bool report_load(const char *path, struct tl_report *out)
{
    memset(out, 0, sizeof(*out));
    out->path = path;
    struct loader ld = {.path = strcmp(path, "-") == 0 ? "<stdin>" : path, .failed = false};
    json_t *root = parse_file(&ld, path);
    if (!root)
        return false;
    char error[512];
    bool ok = report_from_json(root, path, REPORT_DEMANGLE, out, error, sizeof error);
    json_decref(root);
    if (!ok)
        cli_error("%s: %s", ld.path, error);
    return ok;
}
