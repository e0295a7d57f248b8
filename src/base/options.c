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
    char why[TL_OPTION_WHY];
    if (!tl_option_depth(v, &tl_opt.depth, why))
        bad(name, v, why);
}

static void apply_python_depth(const char *name, const char *v)
{
    char why[TL_OPTION_WHY];
    if (!tl_option_depth(v, &tl_opt.python_depth, why))
        bad(name, v, why);
}

static void apply_addresses(const char *name, const char *v)
{
    long n;
    if (tl_parse_int(v, 0, 1000000, &n) != 0) { bad(name, v, "expected 0..1000000"); return; }
    tl_opt.addresses = (int)n;
}

static void apply_fail_on(const char *name, const char *v)
{
    char why[TL_OPTION_WHY];
    if (!tl_option_fail_on(v, &tl_opt.fail_on, why))
        bad(name, v, why);
}

static void apply_exitcode(const char *name, const char *v)
{
    char why[TL_OPTION_WHY];
    if (!tl_option_exitcode(v, &tl_opt.exitcode, why))
        bad(name, v, why);
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
    char why[TL_OPTION_WHY];
    if (!tl_option_interval(v, &tl_opt.interval, why))
        bad(name, v, why);
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

const char *const tl_budget_class_names[TL_BUDGET_CLASSES] = {"cache", "workspace", "library", "user"};

int tl_budget_parse(const char *v, struct tl_budget_spec *out)
{
    struct tl_budget_spec spec = {0};
    char buf[256];
    if (strlen(v) >= sizeof buf || !*v)
        return -1;
    strcpy(buf, v);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *colon = strchr(tok, ':');
        uint64_t bytes;
        if (!colon) {
            if (tl_parse_size(tok, &bytes) != 0 || bytes == 0)
                return -1;
            spec.total = bytes;
            continue;
        }
        *colon = 0;
        if (tl_parse_size(colon + 1, &bytes) != 0 || bytes == 0)
            return -1;
        int c = -1;
        for (int i = 0; i < TL_BUDGET_CLASSES; i++)
            if (!strcmp(tok, tl_budget_class_names[i]))
                c = i;
        if (c < 0)
            return -1;
        spec.per_class[c] = bytes;
    }
    *out = spec;
    return 0;
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

/* The option table: one row per variable, applied in order, with its
 * default as the variable would spell it (NULL: empty, none).  Defaults go
 * through the same apply function as a set variable, so a default is what
 * `TENSORLEAK_X=<default>` gives; tl_opt is zeroed first. */
static const struct {
    const char *name;
    const char *default_value;
    apply_fn apply;
} table[] = {
    {"TENSORLEAK_OUTPUT", "tensorleak.%p.json", apply_output},
    {"TENSORLEAK_DEPTH", "32", apply_depth},
    {"TENSORLEAK_PYTHON_DEPTH", "32", apply_python_depth},
    {"TENSORLEAK_FRAMES", "python", apply_frames},
    {"TENSORLEAK_ADDRESSES", "256", apply_addresses},
    {"TENSORLEAK_FAIL_ON", "none", apply_fail_on},
    {"TENSORLEAK_EXITCODE", "23", apply_exitcode},
    {"TENSORLEAK_SUPPRESSIONS", NULL, apply_suppressions},
    {"TENSORLEAK_SIGNAL", "USR1", apply_signal},
    {"TENSORLEAK_MARK_SIGNAL", "none", apply_mark_signal},
    {"TENSORLEAK_QUIET", "0", apply_quiet},
    {"TENSORLEAK_INTERVAL", "0", apply_interval},
    {"TENSORLEAK_GROWTH_MARKS", "3", apply_growth_marks},
    {"TENSORLEAK_FOLLOW_FORK", "1", apply_follow_fork},
    {"TENSORLEAK_DEFAULT_OWNERS", "1", apply_default_owners},
    {"TENSORLEAK_LIVE", "1", apply_live},
    {"TENSORLEAK_LIVE_DIR", NULL, apply_live_dir},
    {"TENSORLEAK_LIVE_INTERVAL", "1", apply_live_interval},
    {"TENSORLEAK_KEEP", "100", apply_keep},
    {"TENSORLEAK_OWNERS", NULL, apply_owners},
    {"TENSORLEAK_BUDGET", NULL, apply_budget},
    {"TENSORLEAK_BUDGET_ENFORCE", "0", apply_budget_enforce},
    {"TENSORLEAK_PYTHON", "0", apply_python},
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

/* Every row's default, as if each variable were set to it. */
static void set_defaults(void)
{
    memset(&tl_opt, 0, sizeof tl_opt);
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (table[i].default_value)
            table[i].apply(table[i].name, table[i].default_value);
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
