/*
 * cmd_attach.c: `tensorleak attach [OPTIONS] PID` and `tensorleak detach
 * PID`: start and stop tracking a process that is already running, by
 * loading libtensorleak.so into it and calling the entry points of
 * include/tensorleak_attach.h in one of its threads (inject.c), in the order
 * that header fixes.
 *
 * Everything is checked before the process is touched, and each refusal says
 * why and what to do: no such process; a process that cannot be traced (of
 * another user without CAP_SYS_PTRACE, Yama's ptrace_scope, already traced,
 * not dumpable); one already tracked (a libtensorleak.so preloaded or loaded
 * from another file); one without libcuda.so.1 yet (unless --wait); a library
 * that someone other than the attaching user or root could have changed.
 * What is loaded is decided by this command's own lookup (cli_find_library,
 * as `run` does) and never by anything of the target's: its environment is
 * read only to refuse a preloaded process.  The options become the settings
 * string the library parses like the environment of `tensorleak run`.
 */
#include "cli.h"

#if defined(__x86_64__)
#include "inject.h"

#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CALL_TIMEOUT_S 60.0 /* one call in the process: dlopen, prepare, commit, ... */
#define ERR_LEN 512
#define PLAN_MAX_PATCHES 65536
#define CAP_SYS_PTRACE_BIT 19

static const char attach_usage[] =
    "usage: tensorleak attach [--wait] [-o|--output PATTERN] [--depth N] [--python-depth N] [--fail-on KINDS]\n"
    "                         [--exitcode N] [--suppressions FILE] [--owners FILE] [--no-default-owners]\n"
    "                         [--budget SPEC] [--budget-enforce] [--interval SECONDS] [--quiet] PID\n"
    "  start tracking the running process PID (docs/attach.md); --wait: until it has loaded libcuda.so.1\n"
    "  (the report goes to ./tensorleak.%p.json unless -o says otherwise)";
static const char detach_usage[] = "usage: tensorleak detach PID\n"
                                   "  stop tracking PID: final report, everything changed put back";
static const char snapshot_usage[] = "usage: tensorleak snapshot PID [LABEL]\n"
                                     "  have the tracked process PID write a report now (attached or preloaded)";

/* ---- the process as /proc shows it ------------------------------------ */

struct proc_status {
    char state;
    unsigned uid[4], gid[4];
    int tracer;
};

static bool read_status(pid_t pid, struct proc_status *st)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return false;
    memset(st, 0, sizeof *st);
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "State:", 6) == 0)
            sscanf(line + 6, " %c", &st->state);
        else if (strncmp(line, "Uid:", 4) == 0)
            sscanf(line + 4, "%u %u %u %u", &st->uid[0], &st->uid[1], &st->uid[2], &st->uid[3]);
        else if (strncmp(line, "Gid:", 4) == 0)
            sscanf(line + 4, "%u %u %u %u", &st->gid[0], &st->gid[1], &st->gid[2], &st->gid[3]);
        else if (strncmp(line, "TracerPid:", 10) == 0)
            st->tracer = atoi(line + 10);
    }
    fclose(f);
    return true;
}

/* Whether this process holds CAP_SYS_PTRACE in its effective set. */
static bool have_cap_sys_ptrace(char *capeff, size_t len)
{
    char line[256];
    FILE *f = fopen("/proc/self/status", "re");
    unsigned long long caps = 0;
    snprintf(capeff, len, "unknown");
    while (f && fgets(line, sizeof line, f)) {
        if (strncmp(line, "CapEff:", 7) == 0) {
            caps = strtoull(line + 7, NULL, 16);
            snprintf(capeff, len, "%016llx", caps);
        }
    }
    if (f)
        fclose(f);
    return (caps >> CAP_SYS_PTRACE_BIT) & 1;
}

/* kernel.yama.ptrace_scope, or -1 without Yama. */
static int yama_scope(void)
{
    FILE *f = fopen("/proc/sys/kernel/yama/ptrace_scope", "re");
    int scope = -1;
    if (f) {
        if (fscanf(f, "%d", &scope) != 1)
            scope = -1;
        fclose(f);
    }
    return scope;
}

static const char cap_fix[] =
    "run tensorleak as the process's user, or give it CAP_SYS_PTRACE (sudo; in a container: docker run "
    "--cap-add=SYS_PTRACE, Kubernetes: securityContext.capabilities.add: [\"SYS_PTRACE\"])";

/* Says which setting denies tracing PID, when one surely does (before
 * trying), or, with AFTER_EPERM, which one most likely did. */
static bool explain_denial(const char *command, pid_t pid, const struct proc_status *st, bool after_eperm)
{
    char capeff[32];
    bool cap = have_cap_sys_ptrace(capeff, sizeof capeff);
    int scope = yama_scope();
    /* PTRACE_SEIZE compares the caller's real ids with all of the target's. */
    uid_t me = getuid();
    gid_t group = getgid();
    bool same_user = st->uid[0] == me && st->uid[1] == me && st->uid[2] == me && st->gid[0] == group &&
                     st->gid[1] == group && st->gid[2] == group;
    if (!cap && !same_user) {
        cli_error("%s: %d: process of uid %u (gid %u), and tracing another user's process needs CAP_SYS_PTRACE, "
                  "which this process lacks (CapEff %s): %s",
                  command, (int)pid, st->uid[1], st->gid[1], capeff, cap_fix);
        return true;
    }
    if (scope == 3) {
        cli_error("%s: %d: kernel.yama.ptrace_scope is 3: no process may trace another until the next reboot "
                  "(it cannot be lowered); run the program under `tensorleak run` instead",
                  command, (int)pid);
        return true;
    }
    if (!after_eperm)
        return false;
    if (scope == 2 && !cap) {
        cli_error("%s: %d: kernel.yama.ptrace_scope is 2: only a process with CAP_SYS_PTRACE may trace "
                  "(CapEff %s): %s",
                  command, (int)pid, capeff, cap_fix);
    } else if (scope == 1 && !cap) {
        cli_error("%s: %d: kernel.yama.ptrace_scope is 1: only a parent may trace its children; run "
                  "`sudo sysctl kernel.yama.ptrace_scope=0`, or %s",
                  command, (int)pid, cap_fix);
    } else {
        cli_error("%s: %d: not permitted to trace it: it is not dumpable (setuid or setgid, or "
                  "prctl(PR_SET_DUMPABLE, 0)), or a security module (SELinux, AppArmor) or a seccomp filter "
                  "denies ptrace (CapEff %s, ptrace_scope %d)",
                  command, (int)pid, capeff, scope);
    }
    return true;
}

/* The checks every command does first: the process is there, can be
 * traced, is not stopped or traced by another.  False (said) otherwise. */
static bool check_process(const char *command, pid_t pid, struct proc_status *st)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d", (int)pid);
    if (access(path, F_OK) != 0 || !read_status(pid, st)) {
        cli_error("%s: %d: no such process", command, (int)pid);
        return false;
    }
    if (st->state == 'Z' || st->state == 'X') {
        cli_error("%s: %d: the process has exited", command, (int)pid);
        return false;
    }
    if (pid == getpid()) {
        cli_error("%s: %d: that is this command itself", command, (int)pid);
        return false;
    }
    if (explain_denial(command, pid, st, false))
        return false;
    if (st->tracer) {
        cli_error("%s: %d: already traced by process %d (a debugger?); detach it first", command, (int)pid,
                  st->tracer);
        return false;
    }
    if (st->state == 'T' || st->state == 't') {
        cli_error("%s: %d: the process is stopped; continue it first (kill -CONT %d)", command, (int)pid,
                  (int)pid);
        return false;
    }
    return true;
}

static bool parse_pid(const char *command, const char *text, pid_t *pid)
{
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (!isdigit((unsigned char)*text) || *end || errno || v <= 0 || v > 0x3fffffff) {
        cli_error("%s: invalid process id '%s'", command, text);
        return false;
    }
    *pid = (pid_t)v;
    return true;
}

/* ---- the library to load ------------------------------------------------- */

/* Whether PATH (file or directory) could only have been changed by this
 * user or root: owned by one of them, not writable by group or others. */
static bool safe_owner(const char *command, const char *what, const char *path)
{
    struct stat sb;
    if (stat(path, &sb) != 0) {
        cli_error("%s: %s %s: %s", command, what, path, strerror(errno));
        return false;
    }
    if (sb.st_uid != geteuid() && sb.st_uid != 0) {
        cli_error("%s: %s %s is owned by uid %u, neither you nor root: refusing to load it into a process",
                  command, what, path, (unsigned)sb.st_uid);
        return false;
    }
    if (sb.st_mode & (S_IWGRP | S_IWOTH)) {
        cli_error("%s: %s %s is writable by %s: refusing to load it into a process (chmod go-w)", command, what,
                  path, sb.st_mode & S_IWOTH ? "everyone" : "its group");
        return false;
    }
    return true;
}

/* Finds the library as `run` does and checks that it, and its directory,
 * are safe to load, and that the process sees the same file at that path. */
static bool find_safe_library(const char *command, pid_t pid, char library[PATH_MAX])
{
    if (!cli_find_library(command, library) || !safe_owner(command, "library", library))
        return false;
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", library);
    char *slash = strrchr(dir, '/');
    if (slash)
        slash[slash == dir ? 1 : 0] = '\0';
    if (!safe_owner(command, "the library's directory", dir))
        return false;
    char theirs[PATH_MAX + 64];
    struct stat mine_sb, theirs_sb;
    snprintf(theirs, sizeof theirs, "/proc/%d/root%s", (int)pid, library);
    if (stat(library, &mine_sb) != 0 || stat(theirs, &theirs_sb) != 0 || mine_sb.st_dev != theirs_sb.st_dev ||
        mine_sb.st_ino != theirs_sb.st_ino) {
        cli_error("%s: %d: the process does not see %s at that path (another mount namespace, a container?); "
                  "make the library visible to it at the same path",
                  command, (int)pid, library);
        return false;
    }
    return true;
}

/* The mapping of LIBRARY in the process (same path, same inode), or NULL. */
static const struct inject_map *library_mapping(const struct inject_map *maps, size_t count, const char *library)
{
    struct stat sb;
    if (stat(library, &sb) != 0)
        return NULL;
    for (size_t i = 0; i < count; i++) {
        if (strcmp(maps[i].path, library) == 0 && maps[i].inode == (uint64_t)sb.st_ino)
            return &maps[i];
    }
    return NULL;
}

/* Refuses a process tracked from its start: LIBRARY (or any
 * libtensorleak.so) named by the LD_PRELOAD it was started with, or another
 * libtensorleak.so file loaded. */
static bool check_not_tracked(const char *command, pid_t pid, const struct inject_map *maps, size_t count,
                              const char *library)
{
    const char *base = strrchr(library, '/') ? strrchr(library, '/') + 1 : library;
    const char *names[] = { "libtensorleak.so", base };
    struct stat sb;
    bool have = stat(library, &sb) == 0;
    for (size_t i = 0; i < count; i++) {
        const char *b = strrchr(maps[i].path, '/');
        if (!b || (strcmp(b + 1, names[0]) != 0 && strcmp(b + 1, names[1]) != 0))
            continue;
        if (!have || maps[i].inode != (uint64_t)sb.st_ino || strcmp(maps[i].path, library) != 0) {
            cli_error("%s: %d: already tracked: it has %s loaded (not %s); to attach or detach with that one, "
                      "set TENSORLEAK_LIBRARY=%s",
                      command, (int)pid, maps[i].path, library, maps[i].path);
            return false;
        }
    }
    /* The environment it started with: read to refuse, never to load. */
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/environ", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return true;
    char *entry = NULL;
    size_t cap = 0;
    bool preloaded = false;
    while (!preloaded && getdelim(&entry, &cap, '\0', f) > 0) {
        if (strncmp(entry, "LD_PRELOAD=", 11) != 0)
            continue;
        for (char *tok = strtok(entry + 11, ": "); tok; tok = strtok(NULL, ": ")) {
            const char *b = strrchr(tok, '/') ? strrchr(tok, '/') + 1 : tok;
            if (strcmp(b, names[0]) == 0 || strcmp(b, names[1]) == 0) {
                bool loaded = false;
                for (size_t i = 0; i < count; i++) {
                    const char *mb = strrchr(maps[i].path, '/');
                    loaded |= mb && strcmp(mb + 1, b) == 0;
                }
                preloaded = loaded;
            }
        }
    }
    free(entry);
    fclose(f);
    if (preloaded) {
        cli_error("%s: %d: already tracked: it was started with %s in LD_PRELOAD (its report comes at exit; "
                  "`kill -USR1 %d` or `tensorleak top` show it now)",
                  command, (int)pid, base, (int)pid);
        return false;
    }
    return true;
}

/* ---- the settings string --------------------------------------------------- */

/* "NAME=value\n" lines: the options, the Python bridge on (as under `run`),
 * and the report in the attaching user's directory unless -o says where
 * (a relative pattern is made absolute: the process's working directory is
 * not the user's). */
static char *settings_text(const char *command, const struct cli_settings *s)
{
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd)) {
        cli_error("%s: cannot get the current directory: %s", command, strerror(errno));
        return NULL;
    }
    size_t len = 1 + strlen(cwd) + 64 + strlen("TENSORLEAK_PYTHON=1\n");
    for (size_t i = 0; i < s->count; i++)
        len += strlen(s->name[i]) + strlen(s->value[i]) + strlen(cwd) + 4;
    char *text = calloc(1, len);
    if (!text)
        return NULL;
    bool output = false;
    for (size_t i = 0; i < s->count; i++) {
        const char *v = s->value[i];
        if (strchr(v, '\n')) {
            cli_error("%s: %s: a value cannot hold a line break", command, s->name[i]);
            free(text);
            return NULL;
        }
        bool is_output = strcmp(s->name[i], "TENSORLEAK_OUTPUT") == 0;
        output |= is_output;
        size_t at = strlen(text);
        snprintf(text + at, len - at, "%s=%s%s%s\n", s->name[i], is_output && v[0] != '/' ? cwd : "",
                 is_output && v[0] != '/' ? "/" : "", v);
    }
    size_t at = strlen(text);
    if (!output)
        at += (size_t)snprintf(text + at, len - at, "TENSORLEAK_OUTPUT=%s/tensorleak.%%p.json\n", cwd);
    snprintf(text + at, len - at, "TENSORLEAK_PYTHON=1\n");
    return text;
}

/* ---- calls into the process ------------------------------------------------ */

struct session {
    const char *command;
    pid_t pid;
    struct inject *in;
    uint64_t err_buf; /* ERR_LEN bytes in the process */
};

static bool push_string(struct session *s, const char *text, uint64_t *remote)
{
    return inject_push(s->in, text, strlen(text) + 1, remote);
}

/* The library's message in the process's err buffer. */
static void remote_message(struct session *s, char *out, size_t len)
{
    char buf[ERR_LEN];
    if (!inject_read(s->in, s->err_buf, buf, sizeof buf)) {
        snprintf(out, len, "(no message)");
        return;
    }
    buf[sizeof buf - 1] = '\0';
    for (char *p = buf; *p; p++) {
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            *p = '?';
    }
    snprintf(out, len, "%s", buf[0] ? buf : "(no message)");
}

/* Reads and checks the plan at PLAN: this ABI, a sane number of patches,
 * each inside executable code, none overlapping.  The patches in *OUT. */
static bool read_plan(struct session *s, uint64_t plan_at, struct tensorleak_patch **out, size_t *count, char *err,
                      size_t errlen)
{
    struct tensorleak_attach_plan plan;
    if (!inject_read(s->in, plan_at, &plan, sizeof plan)) {
        snprintf(err, errlen, "cannot read the library's plan: %s", inject_error(s->in));
        return false;
    }
    if (plan.abi != TENSORLEAK_ATTACH_ABI) {
        snprintf(err, errlen, "the library speaks attach ABI %u, this command %d: use the tensorleak that came with it",
                 plan.abi, TENSORLEAK_ATTACH_ABI);
        return false;
    }
    if (plan.count > PLAN_MAX_PATCHES || (plan.count && !plan.patches)) {
        snprintf(err, errlen, "the library's plan is malformed (%u patches)", plan.count);
        return false;
    }
    struct tensorleak_patch *p = calloc(plan.count ? plan.count : 1, sizeof *p);
    struct inject_map *maps = NULL;
    size_t nmaps = 0;
    bool ok = p && inject_maps_read(s->pid, &maps, &nmaps);
    if (ok && plan.count && !inject_read(s->in, (uint64_t)(uintptr_t)plan.patches, p, plan.count * sizeof *p))
        ok = false;
    if (!ok)
        snprintf(err, errlen, "cannot read the library's plan");
    for (size_t k = 0; ok && k < plan.count; k++) {
        bool exec = false;
        for (size_t i = 0; i < nmaps; i++) {
            exec |= maps[i].perms[2] == 'x' && p[k].address >= maps[i].start &&
                    p[k].address + p[k].length <= maps[i].end;
        }
        if (p[k].length == 0 || p[k].length > TENSORLEAK_PATCH_MAX_BYTES || !exec) {
            snprintf(err, errlen, "the library's plan is malformed: patch %zu (%u bytes at 0x%llx) is not inside "
                     "executable code", k, p[k].length, (unsigned long long)p[k].address);
            ok = false;
        }
        for (size_t j = 0; ok && j < k; j++) {
            if (p[j].address < p[k].address + p[k].length && p[k].address < p[j].address + p[j].length) {
                snprintf(err, errlen, "the library's plan is malformed: patches %zu and %zu overlap", j, k);
                ok = false;
            }
        }
    }
    free(maps);
    if (!ok) {
        free(p);
        return false;
    }
    *out = p;
    *count = plan.count;
    return true;
}

/* The library's four entry points in the process. */
struct entry_points {
    uint64_t attach_prepare, attach_commit, detach_prepare, detach_finish;
};

static bool find_entry_points(struct session *s, const char *library, struct entry_points *ep, char *err,
                              size_t errlen)
{
    struct inject_map *maps;
    size_t count;
    if (!inject_maps_read(s->pid, &maps, &count)) {
        snprintf(err, errlen, "cannot read its maps: %s", strerror(errno));
        return false;
    }
    const struct inject_map *lib = library_mapping(maps, count, library);
    bool ok = lib != NULL;
    if (!ok)
        snprintf(err, errlen, "%s is not loaded in it", library);
    const char *names[] = { "tensorleak_attach_prepare", "tensorleak_attach_commit", "tensorleak_detach_prepare",
                            "tensorleak_detach_finish" };
    uint64_t *slots[] = { &ep->attach_prepare, &ep->attach_commit, &ep->detach_prepare, &ep->detach_finish };
    for (size_t i = 0; ok && i < 4; i++) {
        if (!inject_symbol(s->pid, maps, count, lib, names[i], slots[i], err, errlen)) {
            snprintf(err, errlen, "%s does not export %s: it cannot attach (a build without attach support?)",
                     library, names[i]);
            ok = false;
        }
    }
    free(maps);
    return ok;
}

/* Calls a function returning a plan pointer (NULL: failure, message in the
 * err buffer), then writes its patches; they stay in *PATCHES (free them). */
static bool run_plan(struct session *s, uint64_t fn, const uint64_t *args, int nargs, bool to_replacement,
                     struct tensorleak_patch **patches, size_t *count, char *err, size_t errlen)
{
    uint64_t plan_at;
    if (!inject_call(s->in, fn, args, nargs, CALL_TIMEOUT_S, &plan_at)) {
        snprintf(err, errlen, "%s", inject_error(s->in));
        return false;
    }
    if (!plan_at) {
        remote_message(s, err, errlen);
        return false;
    }
    if (!read_plan(s, plan_at, patches, count, err, errlen))
        return false;
    if (inject_patch(s->in, *patches, *count, to_replacement))
        return true;
    snprintf(err, errlen, "%s; nothing was changed", inject_error(s->in));
    free(*patches);
    *patches = NULL;
    return false;
}

/* Ends the session; reports ERR (when set) and a restore failure. */
static int finish(struct session *s, const char *err)
{
    char restore_err[ERR_LEN];
    bool restored = inject_end(s->in, restore_err, sizeof restore_err);
    if (err && *err)
        cli_error("%s: %d: %s", s->command, (int)s->pid, err);
    if (!restored)
        cli_error("%s: %d: could not restore the hijacked thread: %s", s->command, (int)s->pid, restore_err);
    return err && *err ? CLI_EXIT_FAIL : restored ? CLI_EXIT_OK : CLI_EXIT_FAIL;
}

static bool begin(struct session *s, const struct proc_status *st)
{
    char err[ERR_LEN];
    s->in = inject_begin(s->pid, err, sizeof err);
    if (!s->in) {
        if (strstr(err, strerror(EPERM)) && explain_denial(s->command, s->pid, st, true))
            return false;
        cli_error("%s: %d: %s; the process was left as it was", s->command, (int)s->pid, err);
        return false;
    }
    static const char zeros[ERR_LEN];
    if (!inject_push(s->in, zeros, sizeof zeros, &s->err_buf)) {
        finish(s, inject_error(s->in));
        return false;
    }
    return true;
}

/* libcuda.so.1 (the driver: libcuda.so.<version> once resolved) is mapped. */
static bool has_driver(pid_t pid, bool *gone)
{
    struct inject_map *maps;
    size_t count;
    *gone = false;
    if (!inject_maps_read(pid, &maps, &count)) {
        *gone = true;
        return false;
    }
    bool found = inject_maps_find(maps, count, "libcuda.so") != NULL;
    free(maps);
    return found;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int cmd_attach(int argc, char **argv)
{
    struct cli_settings settings;
    int rc = cli_settings_parse("attach", true, attach_usage, argc, argv, &settings);
    if (rc >= 0)
        return rc;
    pid_t pid;
    if (optind != argc - 1 || !parse_pid("attach", argv[optind], &pid)) {
        if (optind != argc - 1)
            cli_error("attach: expected one process id\n%s", attach_usage);
        cli_settings_free(&settings);
        return CLI_EXIT_USAGE;
    }
    char *text = settings_text("attach", &settings);
    bool wait = settings.wait;
    cli_settings_free(&settings);
    if (!text)
        return CLI_EXIT_USAGE;

    struct proc_status st;
    char library[PATH_MAX];
    struct inject_map *maps = NULL;
    size_t count = 0;
    rc = CLI_EXIT_FAIL;
    if (!check_process("attach", pid, &st) || !find_safe_library("attach", pid, library))
        goto out;
    for (bool gone; !has_driver(pid, &gone);) {
        if (gone || !wait) {
            if (gone)
                cli_error("attach: %d: the process exited while waiting for libcuda.so.1", (int)pid);
            else
                cli_error("attach: %d: no libcuda.so.1 loaded yet (nothing to track); --wait waits for it", (int)pid);
            goto out;
        }
        struct timespec ts = { 0, 50 * 1000000 };
        nanosleep(&ts, NULL);
    }
    if (!inject_maps_read(pid, &maps, &count)) {
        cli_error("attach: %d: cannot read its maps: %s", (int)pid, strerror(errno));
        goto out;
    }
    if (!check_not_tracked("attach", pid, maps, count, library))
        goto out;

    double t0 = now_s();
    struct session s = { .command = "attach", .pid = pid };
    if (!begin(&s, &st))
        goto out;
    /* Looked up once traced: its memory is compared with the file's. */
    const struct inject_map *libc = inject_maps_find(maps, count, "libc.so");
    uint64_t dlopen_at = 0, dlerror_at = 0;
    char err[ERR_LEN], why[ERR_LEN];
    if (!libc || (!inject_symbol(pid, maps, count, libc, "dlopen", &dlopen_at, why, sizeof why) &&
                  !inject_symbol(pid, maps, count, libc, "__libc_dlopen_mode", &dlopen_at, why, sizeof why))) {
        snprintf(err, sizeof err, "cannot find dlopen in its C library (%.400s)", libc ? why : "no libc.so mapped");
        rc = finish(&s, err);
        goto out;
    }
    uint64_t dlclose_at = 0;
    inject_symbol(pid, maps, count, libc, "dlerror", &dlerror_at, why, sizeof why);
    inject_symbol(pid, maps, count, libc, "dlclose", &dlclose_at, why, sizeof why);
    bool loaded_before = library_mapping(maps, count, library) != NULL;
    uint64_t path_at, settings_at, handle;
    err[0] = '\0';
    if (!push_string(&s, library, &path_at) || !push_string(&s, text, &settings_at)) {
        rc = finish(&s, inject_error(s.in));
        goto out;
    }
    uint64_t dl_args[] = { path_at, RTLD_NOW | RTLD_LOCAL };
    if (!inject_call(s.in, dlopen_at, dl_args, 2, CALL_TIMEOUT_S, &handle)) {
        snprintf(err, sizeof err, "dlopen: %s", inject_error(s.in));
        rc = finish(&s, err);
        goto out;
    }
    if (!handle) {
        uint64_t msg_at = 0;
        char msg[ERR_LEN] = "";
        if (dlerror_at && inject_call(s.in, dlerror_at, NULL, 0, CALL_TIMEOUT_S, &msg_at) && msg_at)
            inject_read(s.in, msg_at, msg, sizeof msg - 1);
        msg[sizeof msg - 1] = '\0';
        snprintf(err, sizeof err, "cannot load %s into it: %.400s", library, msg[0] ? msg : "dlopen failed");
        rc = finish(&s, err);
        goto out;
    }
    struct entry_points ep;
    if (!find_entry_points(&s, library, &ep, err, sizeof err)) {
        /* Not an attach library: unloaded again when this attach loaded it. */
        uint64_t ignored, close_args[] = { handle };
        if (!loaded_before && dlclose_at)
            inject_call(s.in, dlclose_at, close_args, 1, CALL_TIMEOUT_S, &ignored);
        rc = finish(&s, err);
        goto out;
    }
    uint64_t prep_args[] = { settings_at, s.err_buf, ERR_LEN };
    struct tensorleak_patch *patches = NULL;
    size_t npatches = 0;
    if (!run_plan(&s, ep.attach_prepare, prep_args, 3, true, &patches, &npatches, err, sizeof err)) {
        rc = finish(&s, err);
        goto out;
    }
    double patched = now_s();
    uint64_t commit_rc = 0;
    uint64_t commit_args[] = { s.err_buf, ERR_LEN };
    bool called = inject_call(s.in, ep.attach_commit, commit_args, 2, CALL_TIMEOUT_S, &commit_rc);
    if (!called || (int)commit_rc != 0) {
        if (called)
            remote_message(&s, why, sizeof why);
        else
            snprintf(why, sizeof why, "%s", inject_error(s.in));
        /* The code goes back to what it was. */
        if (inject_patch(s.in, patches, npatches, false))
            snprintf(err, sizeof err, "tracking did not start: %.400s; the code was put back", why);
        else
            snprintf(err, sizeof err, "tracking did not start: %.200s; putting the code back failed: %.200s", why,
                     inject_error(s.in));
        free(patches);
        rc = finish(&s, err);
        goto out;
    }
    free(patches);
    rc = finish(&s, NULL);
    if (rc == CLI_EXIT_OK)
        fprintf(stderr, "tensorleak: attach: %d: tracking (attached in %.0f ms, code patched at %.0f ms)\n", (int)pid,
                (now_s() - t0) * 1000, (patched - t0) * 1000);
out:
    free(maps);
    free(text);
    return rc;
}

int cmd_detach(int argc, char **argv)
{
    if (argc == 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
        puts(detach_usage);
        return CLI_EXIT_OK;
    }
    pid_t pid;
    if (argc != 2) {
        cli_error("detach: expected one process id\n%s", detach_usage);
        return CLI_EXIT_USAGE;
    }
    if (!parse_pid("detach", argv[1], &pid))
        return CLI_EXIT_USAGE;
    struct proc_status st;
    char library[PATH_MAX];
    if (!check_process("detach", pid, &st) || !cli_find_library("detach", library))
        return CLI_EXIT_FAIL;
    struct inject_map *maps;
    size_t count;
    if (!inject_maps_read(pid, &maps, &count)) {
        cli_error("detach: %d: cannot read its maps: %s", (int)pid, strerror(errno));
        return CLI_EXIT_FAIL;
    }
    bool loaded = library_mapping(maps, count, library) != NULL;
    free(maps);
    if (!loaded) {
        cli_error("detach: %d: not attached (%s is not loaded in it)", (int)pid, library);
        return CLI_EXIT_FAIL;
    }
    double t0 = now_s();
    struct session s = { .command = "detach", .pid = pid };
    if (!begin(&s, &st))
        return CLI_EXIT_FAIL;
    char err[ERR_LEN];
    struct entry_points ep;
    if (!find_entry_points(&s, library, &ep, err, sizeof err))
        return finish(&s, err);
    uint64_t args[] = { s.err_buf, ERR_LEN };
    struct tensorleak_patch *patches = NULL;
    size_t npatches = 0;
    if (!run_plan(&s, ep.detach_prepare, args, 2, false, &patches, &npatches, err, sizeof err))
        return finish(&s, err);
    free(patches);
    uint64_t finish_rc;
    if (!inject_call(s.in, ep.detach_finish, args, 2, CALL_TIMEOUT_S, &finish_rc)) {
        snprintf(err, sizeof err, "the code is restored, but the final report was not written: %.400s",
                 inject_error(s.in));
        return finish(&s, err);
    }
    if ((int)finish_rc != 0) {
        char why[ERR_LEN];
        remote_message(&s, why, sizeof why);
        snprintf(err, sizeof err, "the code is restored, but: %.400s", why);
        return finish(&s, err);
    }
    int rc = finish(&s, NULL);
    if (rc == CLI_EXIT_OK)
        fprintf(stderr, "tensorleak: detach: %d: detached in %.0f ms\n", (int)pid, (now_s() - t0) * 1000);
    return rc;
}

/* `tensorleak snapshot PID [LABEL]`: a report of the tracked process now,
 * written by the library in one borrowed thread, for a process whose own
 * handling of TENSORLEAK_SIGNAL (SIGUSR1) tensorleak left alone, attached
 * or preloaded alike. */
int cmd_snapshot(int argc, char **argv)
{
    if (argc == 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
        puts(snapshot_usage);
        return CLI_EXIT_OK;
    }
    pid_t pid;
    if (argc != 2 && argc != 3) {
        cli_error("snapshot: expected a process id and at most a label\n%s", snapshot_usage);
        return CLI_EXIT_USAGE;
    }
    if (!parse_pid("snapshot", argv[1], &pid))
        return CLI_EXIT_USAGE;
    const char *label = argc == 3 ? argv[2] : "snapshot";
    struct proc_status st;
    if (!check_process("snapshot", pid, &st))
        return CLI_EXIT_FAIL;
    struct inject_map *maps;
    size_t count;
    if (!inject_maps_read(pid, &maps, &count)) {
        cli_error("snapshot: %d: cannot read its maps: %s", (int)pid, strerror(errno));
        return CLI_EXIT_FAIL;
    }
    const struct inject_map *lib = inject_maps_find(maps, count, "libtensorleak.so");
    uint64_t fn = 0;
    char err[ERR_LEN];
    bool found = lib && inject_symbol(pid, maps, count, lib, "tensorleak_snapshot", &fn, err, sizeof err);
    free(maps);
    if (!found) {
        cli_error("snapshot: %d: not tracked (no libtensorleak.so with tensorleak_snapshot loaded in it)", (int)pid);
        return CLI_EXIT_FAIL;
    }
    struct session s = { .command = "snapshot", .pid = pid };
    if (!begin(&s, &st))
        return CLI_EXIT_FAIL;
    uint64_t label_at, rc;
    if (!push_string(&s, label, &label_at))
        return finish(&s, inject_error(s.in));
    uint64_t args[] = { label_at };
    if (!inject_call(s.in, fn, args, 1, CALL_TIMEOUT_S, &rc)) {
        snprintf(err, sizeof err, "%.400s", inject_error(s.in));
        return finish(&s, err);
    }
    if ((int)rc != 0)
        return finish(&s, "the library wrote no report (tracking is off: detached, or never started)");
    int code = finish(&s, NULL);
    if (code == CLI_EXIT_OK)
        fprintf(stderr, "tensorleak: snapshot: %d: report written where its output pattern says\n", (int)pid);
    return code;
}

#else /* not x86-64 */

int cmd_snapshot(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    cli_error("snapshot: not supported on this architecture (x86-64 only); use kill -USR1");
    return CLI_EXIT_FAIL;
}

int cmd_attach(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    cli_error("attach: not supported on this architecture (x86-64 only); use `tensorleak run`");
    return CLI_EXIT_FAIL;
}

int cmd_detach(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    cli_error("detach: not supported on this architecture (x86-64 only)");
    return CLI_EXIT_FAIL;
}

#endif
