/*
 * options.c — every TENSORLEAK_* setting, read once at start, and the rank
 * variables, read when a report names its rank.
 *
 * The variables are read from `environ` directly (as mimalloc does): getenv
 * is not safe that early in a preloaded process, and under secure execution
 * (setuid) we ignore them all, as secure_getenv would.  A bad value prints one
 * line naming the variable and the value, and the default stays.
 */
#include "tl_internal.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <unistd.h>

extern char **environ;

struct tl_options tl_opt;

static void set_defaults(void)
{
    memset(&tl_opt, 0, sizeof tl_opt);
    strcpy(tl_opt.output, "tensorleak.%p.json");
    tl_opt.depth = 32;
    tl_opt.python_depth = 32;
    tl_opt.addresses = 256;
    tl_opt.exitcode = 23;
    tl_opt.signal = SIGUSR1;
    tl_opt.growth_marks = 3;
    tl_opt.follow_fork = true;
    tl_opt.default_owners = true;
    tl_opt.live = true;
    tl_opt.live_interval = 1.0;
    tl_opt.keep = 100;
}

int tl_parse_bool(const char *s, bool *out)
{
    static const char *const yes[] = {"1", "true", "yes", "on"};
    static const char *const no[] = {"0", "false", "no", "off"};
    for (size_t i = 0; i < 4; i++) {
        if (strcasecmp(s, yes[i]) == 0) { *out = true; return 0; }
        if (strcasecmp(s, no[i]) == 0) { *out = false; return 0; }
    }
    return -1;
}

int tl_parse_size(const char *s, uint64_t *out)
{
    if (!*s || !isdigit((unsigned char)*s))
        return -1;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno)
        return -1;
    unsigned shift = 0;
    switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    case 't': case 'T': shift = 40; end++; break;
    default: break;
    }
    if (shift && (*end == 'i' || *end == 'I'))
        end++;
    if (shift && (*end == 'b' || *end == 'B'))
        end++;
    if (*end)
        return -1;
    if (shift && v > (ULLONG_MAX >> shift))
        return -1;
    *out = (uint64_t)v << shift;
    return 0;
}

int tl_parse_int(const char *s, long min, long max, long *out)
{
    /* strtol would skip leading blanks and accept "+5": ask for digits. */
    if (!*s || !(isdigit((unsigned char)*s) || (*s == '-' && isdigit((unsigned char)s[1]))))
        return -1;
    errno = 0;
    char *end;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

int tl_parse_fail_on(const char *s, unsigned *out)
{
    unsigned bits = 0;
    char buf[256];
    if (strlen(s) >= sizeof buf || !*s)
        return -1;
    strcpy(buf, s);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        while (*tok == ' ') tok++;
        if (strcmp(tok, "leak") == 0) bits |= TL_FAIL_LEAK;
        else if (strcmp(tok, "growth") == 0) bits |= TL_FAIL_GROWTH;
        else if (strcmp(tok, "invalid-free") == 0) bits |= TL_FAIL_INVALID_FREE;
        else if (strcmp(tok, "oom") == 0) bits |= TL_FAIL_OOM;
        else if (strcmp(tok, "none") == 0) bits |= 0;
        else if (strcmp(tok, "all") == 0) bits |= TL_FAIL_LEAK | TL_FAIL_GROWTH | TL_FAIL_INVALID_FREE | TL_FAIL_OOM;
        else return -1;
    }
    *out = bits;
    return 0;
}

int tl_parse_signal(const char *s, int *out)
{
    static const struct { const char *name; int sig; } names[] = {
        {"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"HUP", SIGHUP}, {"PROF", SIGPROF},
        {"WINCH", SIGWINCH}, {"URG", SIGURG}, {"PWR", SIGPWR},
    };
    if (strcasecmp(s, "none") == 0 || strcmp(s, "0") == 0) { *out = 0; return 0; }
    long n;
    if (tl_parse_int(s, 1, SIGRTMAX, &n) == 0) {
        if (n == SIGKILL || n == SIGSTOP || n == SIGSEGV || n == SIGBUS || n == SIGFPE || n == SIGILL)
            return -1;
        *out = (int)n;
        return 0;
    }
    const char *p = strncasecmp(s, "SIG", 3) == 0 ? s + 3 : s;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcasecmp(p, names[i].name) == 0) { *out = names[i].sig; return 0; }
    if (strncasecmp(p, "RTMIN+", 6) == 0 && tl_parse_int(p + 6, 0, SIGRTMAX - SIGRTMIN, &n) == 0) {
        *out = SIGRTMIN + (int)n;
        return 0;
    }
    return -1;
}

unsigned tl_options_rejected;

static void bad(const char *name, const char *value, const char *why)
{
    tl_options_rejected++;
    tl_warn(NULL, "ignoring %s='%.200s' (%s); using the default", name, value, why);
}

/* The option table: one row per variable, applied in order. */
typedef void (*apply_fn)(const char *name, const char *value);

static void apply_output(const char *name, const char *v)
{
    if (!*v) { bad(name, v, "empty pattern"); return; }
    if (strlen(v) >= sizeof tl_opt.output) { bad(name, v, "too long"); return; }
    char probe[4096];
    if (tl_expand_pattern(v, 1, probe, sizeof probe) != 0) { bad(name, v, "bad % sequence or too long"); return; }
    strcpy(tl_opt.output, v);
    /* Decided once, here: a forked child's pattern gets ".%p" appended,
     * which must not turn "no reports" into files named /dev/null.PID. */
    tl_opt.output_null = tl_is_null_device(probe);
}

static void apply_depth(const char *name, const char *v)
{
    long n;
    if (tl_parse_int(v, 0, TL_MAX_DEPTH, &n) != 0) { bad(name, v, "expected 0.." "128"); return; }
    tl_opt.depth = (int)n;
}

static void apply_python_depth(const char *name, const char *v)
{
    long n;
    if (tl_parse_int(v, 0, TL_MAX_DEPTH, &n) != 0) { bad(name, v, "expected 0.." "128"); return; }
    tl_opt.python_depth = (int)n;
}

static void apply_addresses(const char *name, const char *v)
{
    long n;
    if (tl_parse_int(v, 0, 1000000, &n) != 0) { bad(name, v, "expected 0..1000000"); return; }
    tl_opt.addresses = (int)n;
}

static void apply_fail_on(const char *name, const char *v)
{
    unsigned bits;
    if (tl_parse_fail_on(v, &bits) != 0) { bad(name, v, "expected a comma list of leak, growth, invalid-free, oom, none"); return; }
    tl_opt.fail_on = bits;
}

static void apply_exitcode(const char *name, const char *v)
{
    long n;
    if (tl_parse_int(v, 1, 255, &n) != 0) { bad(name, v, "expected 1..255"); return; }
    tl_opt.exitcode = (int)n;
}

static void apply_suppressions(const char *name, const char *v)
{
    if (strlen(v) >= sizeof tl_opt.suppressions) { bad(name, v, "too long"); return; }
    strcpy(tl_opt.suppressions, v);
}

static void apply_signal(const char *name, const char *v)
{
    int sig;
    if (tl_parse_signal(v, &sig) != 0) { bad(name, v, "expected a signal name or number, or none"); return; }
    tl_opt.signal = sig;
}

static void apply_mark_signal(const char *name, const char *v)
{
    int sig;
    if (tl_parse_signal(v, &sig) != 0) { bad(name, v, "expected a signal name or number, or none"); return; }
    tl_opt.mark_signal = sig;
}

/* A boolean variable into *out; a bad value warns and leaves *out as it was. */
static void apply_bool(const char *name, const char *v, bool *out)
{
    if (tl_parse_bool(v, out) != 0)
        bad(name, v, "expected 1/0, true/false, yes/no, on/off");
}

static void apply_quiet(const char *name, const char *v)
{
    apply_bool(name, v, &tl_opt.quiet);
}

static void apply_follow_fork(const char *name, const char *v)
{
    apply_bool(name, v, &tl_opt.follow_fork);
}

static void apply_default_owners(const char *name, const char *v)
{
    apply_bool(name, v, &tl_opt.default_owners);
}

static void apply_interval(const char *name, const char *v)
{
    char *end;
    errno = 0;
    double d = strtod(v, &end);
    if (!*v || *end || errno || !(d >= 0.0) || d > 86400.0 * 365) { bad(name, v, "expected seconds >= 0"); return; }
    tl_opt.interval = d;
}

static void apply_growth_marks(const char *name, const char *v)
{
    long n;
    if (tl_parse_int(v, 2, 1000000, &n) != 0) { bad(name, v, "expected 2..1000000"); return; }
    tl_opt.growth_marks = (int)n;
}

static void apply_live(const char *name, const char *v)
{
    bool b;
    if (tl_parse_bool(v, &b) != 0) { bad(name, v, "expected 1/0, true/false, yes/no, on/off"); return; }
    tl_opt.live = b;
}

static void apply_live_dir(const char *name, const char *v)
{
    if (!*v || strlen(v) >= sizeof tl_opt.live_dir) { bad(name, v, "empty or too long"); return; }
    strcpy(tl_opt.live_dir, v);
}

static void apply_live_interval(const char *name, const char *v)
{
    char *end;
    errno = 0;
    double d = strtod(v, &end);
    if (!*v || *end || errno || !(d >= 0.01) || d > 3600.0) { bad(name, v, "expected seconds, 0.01..3600"); return; }
    tl_opt.live_interval = d;
}

static void apply_keep(const char *name, const char *v)
{
    long n;
    if (tl_parse_int(v, 0, 1000000, &n) != 0) { bad(name, v, "expected 0..1000000 (0 = keep all)"); return; }
    tl_opt.keep = (int)n;
}

/* TENSORLEAK_FRAMES: "python" (the default) shows the innermost Python
 * frame first with native runs folded, "all" every frame as recorded. */
static void apply_frames(const char *name, const char *v)
{
    if (strcmp(v, "all") == 0)
        tl_opt.frames_all = true;
    else if (strcmp(v, "python") == 0)
        tl_opt.frames_all = false;
    else
        bad(name, v, "expected python or all");
}

/* TENSORLEAK_OWNERS: the path only; owners.c reads the file, and says so
 * when it cannot.  Empty is none. */
static void apply_owners(const char *name, const char *v)
{
    if (strlen(v) >= sizeof tl_opt.owners) { bad(name, v, "too long"); return; }
    strcpy(tl_opt.owners, v);
}

/* TENSORLEAK_BUDGET: a bad value sets no budget at all, not part of one. */
static void apply_budget(const char *name, const char *v)
{
    (void)name;
    if (tl_budget_parse(v, &tl_opt.budget) != 0)
        tl_warn(NULL, "ignoring TENSORLEAK_BUDGET='%.200s' (expected SIZE and/or CLASS:SIZE with CLASS one of cache, "
                      "workspace, library, user, comma-separated); no budget", v);
}

static void apply_budget_enforce(const char *name, const char *v)
{
    (void)name;
    if (tl_parse_bool(v, &tl_opt.budget_enforce) != 0)
        tl_warn(NULL, "ignoring TENSORLEAK_BUDGET_ENFORCE='%.200s' (expected 1/0, true/false, yes/no, on/off); not enforcing", v);
}

/* TENSORLEAK_PYTHON: empty is off, as unset is; a bad value keeps the
 * bridge off.  Its warning is the bridge's (bridge.c), said only where a
 * bridge could start, in a Python program: a C program is not told about a
 * switch it has no use for. */
static void apply_python(const char *name, const char *v)
{
    (void)name;
    if (*v && tl_parse_bool(v, &tl_opt.python) != 0)
        snprintf(tl_opt.python_rejected, sizeof tl_opt.python_rejected, "%s", v);
}

static const struct { const char *name; apply_fn apply; } table[] = {
    {"TENSORLEAK_OUTPUT", apply_output},
    {"TENSORLEAK_DEPTH", apply_depth},
    {"TENSORLEAK_PYTHON_DEPTH", apply_python_depth},
    {"TENSORLEAK_FRAMES", apply_frames},
    {"TENSORLEAK_ADDRESSES", apply_addresses},
    {"TENSORLEAK_FAIL_ON", apply_fail_on},
    {"TENSORLEAK_EXITCODE", apply_exitcode},
    {"TENSORLEAK_SUPPRESSIONS", apply_suppressions},
    {"TENSORLEAK_SIGNAL", apply_signal},
    {"TENSORLEAK_MARK_SIGNAL", apply_mark_signal},
    {"TENSORLEAK_QUIET", apply_quiet},
    {"TENSORLEAK_INTERVAL", apply_interval},
    {"TENSORLEAK_GROWTH_MARKS", apply_growth_marks},
    {"TENSORLEAK_FOLLOW_FORK", apply_follow_fork},
    {"TENSORLEAK_DEFAULT_OWNERS", apply_default_owners},
    {"TENSORLEAK_LIVE", apply_live},
    {"TENSORLEAK_LIVE_DIR", apply_live_dir},
    {"TENSORLEAK_LIVE_INTERVAL", apply_live_interval},
    {"TENSORLEAK_KEEP", apply_keep},
    {"TENSORLEAK_OWNERS", apply_owners},
    {"TENSORLEAK_BUDGET", apply_budget},
    {"TENSORLEAK_BUDGET_ENFORCE", apply_budget_enforce},
    {"TENSORLEAK_PYTHON", apply_python},
};

/* Variables read by the other programs, known so that setting them draws no
 * "unknown variable" warning: the preload library `tensorleak run` and the
 * Python package use (the CLI, python/tensorleak), and PyTorch's allocation
 * history (python/tensorleak/bridge.py). */
static const char *const others[] = {"TENSORLEAK_LIBRARY", "TENSORLEAK_TORCH_HISTORY"};

/* The rank variables, in the order they are tried (tl_options_rank). */
static const char *const rank_variables[] = {"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"};

const char *tl_options_rank(void)
{
    for (size_t i = 0; i < sizeof rank_variables / sizeof rank_variables[0]; i++) {
        const char *v = getenv(rank_variables[i]);
        if (v && *v)
            return v;
    }
    return NULL;
}

FILE *tl_options_open_file(const char *variable, const char *path, const char *otherwise)
{
    /* Non-blocking: opening a FIFO for reading would wait for a writer, in
     * every process the variable reaches. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        tl_warn(NULL, "%s: cannot read %s: %s; %s", variable, path, strerror(errno), otherwise);
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        tl_warn(NULL, "%s: %s is not a regular file; %s", variable, path, otherwise);
        return NULL;
    }
    FILE *f = fdopen(fd, "r");
    if (!f) {
        tl_warn(NULL, "%s: cannot read %s: %s; %s", variable, path, strerror(errno), otherwise);
        close(fd);
    }
    return f;
}

static const char *find(char **envp, const char *name)
{
    size_t len = strlen(name);
    for (char **e = envp; e && *e; e++)
        if (strncmp(*e, name, len) == 0 && (*e)[len] == '=')
            return *e + len + 1;
    return NULL;
}

void tl_options_load(char **envp)
{
    set_defaults();
    if (!envp)
        envp = environ;
    if (getauxval(AT_SECURE)) {
        /* setuid/setgid: the environment is the attacker's; never let it pick
         * the files we write. */
        for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
            if (find(envp, table[i].name)) {
                tl_warn(NULL, "secure execution: ignoring all TENSORLEAK_* variables");
                break;
            }
        return;
    }
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        const char *v = find(envp, table[i].name);
        if (v)
            table[i].apply(table[i].name, v);
    }
    /* An unknown TENSORLEAK_ variable is most likely a typo. */
    for (char **e = envp; *e; e++) {
        if (strncmp(*e, "TENSORLEAK_", 11) != 0)
            continue;
        const char *eq = strchr(*e, '=');
        size_t len = eq ? (size_t)(eq - *e) : strlen(*e);
        bool known = false;
        for (size_t i = 0; i < sizeof table / sizeof table[0] && !known; i++)
            known = strlen(table[i].name) == len && strncmp(table[i].name, *e, len) == 0;
        for (size_t i = 0; i < sizeof others / sizeof others[0] && !known; i++)
            known = strlen(others[i]) == len && strncmp(others[i], *e, len) == 0;
        if (!known) {
            tl_options_rejected++;
            tl_warn(NULL, "unknown variable %.*s ignored", (int)len, *e);
        }
    }
}
