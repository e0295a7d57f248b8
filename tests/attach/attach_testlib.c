/* attach_testlib: a library with the ABI of include/tensorleak_attach.h for
 * the injector's tests.  Its plan patches the target program's answer()
 * into `return 43;` (6 bytes: mov eax, 43; ret).  Every call is recorded in
 * the file TENSORLEAK_OUTPUT names (prepare with the settings it got), so
 * tests see the sequence and the settings.  An output path whose name
 * starts with "fail-prepare" or "fail-commit" makes that step fail;
 * "slow-prepare" makes prepare sleep 5 s first. */
#include "tensorleak_attach.h"

#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static struct tensorleak_patch patch;
static struct tensorleak_attach_plan plan = { TENSORLEAK_ATTACH_ABI, 1, &patch };
static char log_path[4096];
static enum { IDLE, PREPARED, ATTACHED } state;

static void record(const char *what, const char *detail)
{
    FILE *f = log_path[0] ? fopen(log_path, "a") : NULL;
    if (!f)
        return;
    fprintf(f, "%s\n%s", what, detail ? detail : "");
    fclose(f);
}

static bool failing(const char *step)
{
    const char *base = strrchr(log_path, '/');
    return base && strncmp(base + 1, step, strlen(step)) == 0;
}

const struct tensorleak_attach_plan *tensorleak_attach_prepare(const char *settings, char *err, size_t errlen)
{
    if (state == ATTACHED) {
        snprintf(err, errlen, "already attached");
        return NULL;
    }
    const char *out = strstr(settings, "TENSORLEAK_OUTPUT=");
    if (out) {
        out += strlen("TENSORLEAK_OUTPUT=");
        snprintf(log_path, sizeof log_path, "%.*s", (int)strcspn(out, "\n"), out);
    }
    record("prepare", settings);
    if (failing("slow-prepare"))
        sleep(5);
    if (failing("fail-prepare")) {
        snprintf(err, errlen, "test library: prepare refused");
        return NULL;
    }
    unsigned char *fn = dlsym(RTLD_DEFAULT, "answer");
    if (!fn) {
        snprintf(err, errlen, "test library: no answer() in the program");
        return NULL;
    }
    static const unsigned char return_43[] = { 0xb8, 43, 0, 0, 0, 0xc3 };
    patch.address = (uint64_t)(uintptr_t)fn;
    patch.length = sizeof return_43;
    memcpy(patch.original, fn, sizeof return_43);
    memcpy(patch.replacement, return_43, sizeof return_43);
    state = PREPARED;
    return &plan;
}

int tensorleak_attach_commit(char *err, size_t errlen)
{
    record("commit", NULL);
    if (failing("fail-commit")) {
        snprintf(err, errlen, "test library: commit refused");
        return 1;
    }
    state = ATTACHED;
    return 0;
}

const struct tensorleak_attach_plan *tensorleak_detach_prepare(char *err, size_t errlen)
{
    record("detach_prepare", NULL);
    if (state != ATTACHED) {
        snprintf(err, errlen, "not attached");
        return NULL;
    }
    return &plan;
}

int tensorleak_detach_finish(char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    record("detach_finish", NULL);
    state = IDLE;
    return 0;
}
