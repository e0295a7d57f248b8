/*
 * live.c — the live state file: the current figures of this process for
 * `tensorleak top` and `tensorleak exporter`, rewritten by the watcher
 * thread (snapshot.c) every TENSORLEAK_LIVE_INTERVAL seconds (default 1).
 *
 * The file is a projection of the report model: assemble.c gathers the
 * figures exactly as for a snapshot, under the same locks;
 * tl_report_build_live builds the model without call sites, stacks or pool
 * layouts (nothing symbolized once a second).  What only the live file has
 * is filled here into its own tables (live_model.h): marks so far, a growth
 * row's site (the user's frame, stack_view.h) and streak, live bytes per
 * owner class, IPC mappings per device, budgets and the process's identity.
 * live_to_json writes the two, the report's fields its tables mark live
 * (TL_FIELD_LIVE: never the command line, whose arguments can hold secrets)
 * and these after them (docs/live.schema.json).  The allocation path never
 * sees any of this.
 *
 * The file DIR/PID-NS.json (NS: the pid namespace, live_read.h) is written to
 * DIR/.PID-NS.tmp (O_EXCL|O_NOFOLLOW, 0600) and renamed over the previous
 * one, so a reader sees a whole document or the one before; DIR is checked
 * on every write (owned by us, 0700).  It is removed from an exit handler
 * registered before the first file exists, which waits for an update in
 * progress (at most 1 s) and removes the temporary file, so a write still in
 * flight renames nothing, then the file (see remove_entry); a fatal signal that tensorleak
 * handles removes it the same way.  A process that dies without
 * exit handlers otherwise (SIGKILL, _exit) leaves it for the readers, who tell a dead
 * process from a live one (live_read.c).  Any failure is one warning and the
 * feature stays off.
 *
 * Interval reports (TENSORLEAK_INTERVAL) are bounded here too: this process
 * removes its oldest beyond TENSORLEAK_KEEP (default 100), never another
 * kind of report, never a file that is no longer the one it wrote.
 */
#include "model.h"
#include "report_gather.h"
#include "stack_view.h"
#include "tl_version.h"
#include "live_read.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <uthash.h>

#define LIVE_GROWTH_ROWS 64
#define LIVE_POOL_ROWS 256

static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_bool live_off;     /* after a failure, under secure execution */
static atomic_bool stopped;      /* the process is exiting */
static double next_due;          /* CLOCK_MONOTONIC; 0 = now */
static bool exit_handler_set;

/* What the exit handler removes: written by the watcher before it creates
 * the first file of process `exit_pid` (and never again for that pid), read
 * by the exit handler only when exit_pid is its own pid. */
static atomic_int exit_pid;
static char exit_file[PATH_MAX + 80], exit_tmp[PATH_MAX + 80];

/* Identity, read once per process. */
static struct {
    int pid;
    char process[64];
    char pid_ns[64];
    char stem[48]; /* the entry's name without ".json" (live_entry_stem) */
    unsigned long long start_ticks;
    double start_time;
} self;

static double clock_s(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Field 22 of /proc/PID/stat: start time in clock ticks after boot.  The
 * readers compare it to tell this process from a later one with its pid. */
static unsigned long long start_ticks_of(const char *stat_path)
{
    char buf[1024];
    int fd = open(stat_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = 0;
    const char *p = strrchr(buf, ')'); /* the name may hold spaces */
    for (int field = 2; p && field < 22; field++)
        p = strchr(p + 1, ' ');
    return p ? strtoull(p + 1, NULL, 10) : 0;
}

static void read_identity(void)
{
    self.pid = getpid();
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n > 0 ? n : 0] = 0;
    const char *base = strrchr(exe, '/');
    /* The name as the live file holds it: cut to its field. */
    snprintf(self.process, sizeof self.process, "%.*s", (int)sizeof self.process - 1,
             base ? base + 1 : n > 0 ? exe : "unknown");
    n = readlink("/proc/self/ns/pid", self.pid_ns, sizeof self.pid_ns - 1);
    self.pid_ns[n > 0 ? n : 0] = 0;
    live_entry_stem(self.stem, sizeof self.stem, self.pid, live_ns_inode(self.pid_ns));
    self.start_ticks = start_ticks_of("/proc/self/stat");
    double uptime = 0;
    FILE *f = fopen("/proc/uptime", "re");
    if (f) {
        if (fscanf(f, "%lf", &uptime) != 1)
            uptime = 0;
        fclose(f);
    }
    long hz = sysconf(_SC_CLK_TCK);
    self.start_time = uptime > 0 && hz > 0 ? clock_s(CLOCK_REALTIME) - (uptime - (double)self.start_ticks / (double)hz) : 0;
}

static void turn_off(const char *dir, const char *what, int err)
{
    static atomic_bool once;
    tl_warn(&once, "cannot publish the live state in %s (%s%s%s); live state is off", dir, what, err ? ": " : "",
            err ? strerror(err) : "");
    atomic_store(&live_off, true);
}

/* Opens `dir` if it is a directory of ours that no one else may use: the
 * descriptor, or -1 with why not (`*err` the errno, or 0). */
static int open_own_dir(const char *dir, const char **why, int *err)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        *why = "open";
        *err = errno;
        return -1;
    }
    struct stat st;
    *err = 0;
    *why = fstat(fd, &st) != 0 ? "fstat failed" : live_refusal(&st, geteuid(), true);
    if (*why) {
        close(fd);
        return -1;
    }
    return fd;
}

/* /tmp is everyone's: another local user may create /tmp/tensorleak-UID
 * first.  A directory of our own beside it then: one a process of ours made
 * already (/tmp/tensorleak-UID.XXXXXX, ours, 0700: the readers look there
 * too), else a new one, whose random name nobody can take first (mkdtemp,
 * 0700).  Its descriptor and path, or -1. */
static int open_tmp_fallback(char *out, size_t len)
{
    char pattern[64];
    snprintf(pattern, sizeof pattern, LIVE_TMP_FALLBACK_GLOB, (unsigned)geteuid());
    glob_t g;
    const char *why;
    int err, fd = -1;
    if (glob(pattern, GLOB_NOSORT, NULL, &g) == 0) {
        for (size_t i = 0; fd < 0 && i < g.gl_pathc; i++)
            if ((fd = open_own_dir(g.gl_pathv[i], &why, &err)) >= 0)
                snprintf(out, len, "%s", g.gl_pathv[i]);
        globfree(&g);
    }
    if (fd >= 0)
        return fd;
    snprintf(out, len, LIVE_TMP_FALLBACK_TEMPLATE, (unsigned)geteuid());
    if (!mkdtemp(out))
        return -1;
    if ((fd = open_own_dir(out, &why, &err)) < 0)
        rmdir(out); /* empty and ours: nothing is left behind in /tmp */
    return fd;
}

/* Whether `dir` was refused for what it is (another user's, open to others,
 * a link or a file in its place), the case the fallback is for; not for
 * this process's own shortage (descriptors, memory), where a new directory
 * would be refused alike. */
static bool refused_for_what_it_is(int err)
{
    return err == 0 || err == EACCES || err == ELOOP || err == ENOTDIR;
}

/* Opens the live directory, creating it 0700; refuses one that is not ours
 * or is open to others, except the default in /tmp, which falls back to a
 * directory of our own (open_tmp_fallback).  Its path is chosen at the
 * first update and kept (the exit handler removes the files from there).
 * The descriptor, or -1 (warned). */
static char chosen[PATH_MAX];
static bool settled; /* a file may be there: never another directory */

static int open_dir(char *dir, size_t len)
{
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    if (!chosen[0] && live_dir_path(chosen, sizeof chosen, tl_opt.live_dir, xdg, (unsigned)geteuid()) != 0) {
        chosen[0] = 0;
        turn_off("the live directory", "path too long", 0);
        return -1;
    }
    snprintf(dir, len, "%s", chosen);
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        turn_off(dir, "mkdir", errno);
        return -1;
    }
    const char *why;
    int err, fd = open_own_dir(dir, &why, &err);
    if (fd < 0 && !settled && refused_for_what_it_is(err) && live_dir_is_tmp_default(tl_opt.live_dir, xdg)) {
        char fallback[PATH_MAX];
        if ((fd = open_tmp_fallback(fallback, sizeof fallback)) >= 0) {
            static atomic_bool once;
            tl_warn(&once, "%s is not this user's to use (%s%s%s): the live state goes to %s, where tensorleak top and "
                           "exporter look too; remove %s, or set XDG_RUNTIME_DIR or TENSORLEAK_LIVE_DIR",
                    dir, why, err ? ": " : "", err ? strerror(err) : "", fallback, dir);
            snprintf(chosen, sizeof chosen, "%s", fallback);
            snprintf(dir, len, "%s", fallback);
        }
    }
    if (fd < 0) {
        turn_off(dir, why, err);
        return -1;
    }
    settled = true;
    return fd;
}

/* The frame a person would look at first, as one line: the Python line
 * when the stack has one, else the first frame with a source file, else the
 * first frame.  Remembered by call-site id, since a growing site stays in the
 * rows for many updates and symbolizing its stack anew each second would
 * decompress debug sections each time; forgotten when libraries are loaded
 * or unloaded (the same addresses may then be other code) and in a forked
 * child.  Only the watcher thread uses it (under the report lock). */
struct site_line {
    UT_hash_handle hh;
    uint32_t id;
    char text[];
};
static struct site_line *site_lines;
static unsigned long long site_loads[2];

static void forget_site_lines(void)
{
    struct site_line *e, *tmp;
    HASH_ITER(hh, site_lines, e, tmp) {
        HASH_DEL(site_lines, e);
        free(e);
    }
}

static const char *site_of(struct tl_gather *m, const struct tl_callsite *cs)
{
    struct site_line *e;
    HASH_FIND(hh, site_lines, &cs->id, sizeof cs->id, e);
    if (e)
        return e->text;
    /* Inlined callees count as frames of their own, as the report lists
     * them; the line is the user's frame's (stack_view.h), as SARIF and
     * HTML name it. */
    size_t cap = (size_t)cs->nframes * (TL_MAX_INLINE + 1) + 1, n = 0;
    struct tl_view_frame *view = malloc(cap * sizeof *view);
    struct tl_inline_frame *line = malloc(cap * sizeof *line);
    if (!view || !line) {
        free(view);
        free(line);
        return "unknown";
    }
    for (int i = 0; i < cs->nframes; i++) {
        const struct tl_frame_info *f = tl_report_frame(m, cs->frames[i]);
        int k = tl_frame_expand(f, &line[n]);
        for (int j = 0; j < k; j++, n++)
            view[n] = (struct tl_view_frame){f->python, f->module, line[n].file};
    }
    size_t user = tl_stack_user_frame(view, n);
    char text[512];
    if (user < n) {
        snprintf(text, sizeof text, "%s %s:%d", line[user].function ? line[user].function : "??", line[user].file,
                 line[user].line);
    } else if (cs->nframes > 0) {
        const struct tl_frame_info *first = tl_report_frame(m, cs->frames[0]);
        const char *base = first->module ? strrchr(first->module, '/') : NULL;
        snprintf(text, sizeof text, "%s (%s+0x%lx)", first->function ? first->function : "??",
                 base ? base + 1 : first->module ? first->module : "?", (unsigned long)first->offset);
    } else
        snprintf(text, sizeof text, "unknown");
    free(view);
    free(line);
    size_t len = strlen(text) + 1;
    if (!(e = malloc(sizeof *e + len)))
        return "unknown";
    e->id = cs->id;
    memcpy(e->text, text, len);
    HASH_ADD(hh, site_lines, id, sizeof e->id, e);
    return e->text;
}

/* The live file's own part of each growth row of `r` (row i of the model
 * is row i of what was gathered, tl_report_build_live): one line for its
 * site (a call site's from its stack; "unknown" for a pool's, owner's or
 * Python line's) and its streak, spanning `marks` marks up to the last. */
static bool growth_lines(struct tl_gather *m, struct tl_report *r, struct live_doc *d, unsigned long marks)
{
    unsigned long long loads[2];
    tl_module_loads(loads);
    if (loads[0] != site_loads[0] || loads[1] != site_loads[1]) {
        forget_site_lines();
        site_loads[0] = loads[0];
        site_loads[1] = loads[1];
    }
    if (r->growth_count > m->ngrowth)
        r->growth_count = m->ngrowth;
    if (r->growth_count > LIVE_GROWTH_ROWS)
        r->growth_count = LIVE_GROWTH_ROWS;
    d->ngrowth = r->growth_count;
    if (d->ngrowth && !(d->growth = report_alloc(r, d->ngrowth * sizeof *d->growth)))
        return false;
    for (size_t i = 0; i < d->ngrowth; i++) {
        const struct tl_growth_row *g = &m->growth[i];
        d->growth[i] = (struct live_growth_line){
            .site = g->cs ? site_of(m, g->cs) : "unknown",
            .since_mark = marks > (unsigned long)g->marks ? (long long)(marks - (unsigned long)g->marks) : 0,
            .seen.present = LIVE_ALL(LINE)};
    }
    return true;
}

/* Other processes' memory mapped here (CUDA IPC), per importing device in
 * ascending order.  A mapping whose size the driver did not say counts as a
 * mapping and in no byte figure, as in the report's summary. */
static bool ipc_devices(const struct tl_gather *m, struct tl_report *r, struct live_ipc *ipc)
{
    uint64_t bytes[TL_MAX_DEVICES] = {0};
    unsigned long long count[TL_MAX_DEVICES] = {0};
    for (long long i = 0; i < m->ipc_mapped_count; i++) {
        int d = m->ipc_mapped[i].device;
        if (d < 0 || d >= TL_MAX_DEVICES)
            continue;
        bytes[d] += m->ipc_mapped[i].bytes;
        ipc->ndevices += !count[d]++;
    }
    ipc->seen.present = LIVE_ALL(IPC);
    if (ipc->ndevices && !(ipc->devices = report_alloc(r, ipc->ndevices * sizeof *ipc->devices)))
        return false;
    for (int d = 0, k = 0; d < TL_MAX_DEVICES; d++)
        if (count[d])
            ipc->devices[k++] = (struct live_ipc_row){d, bytes[d], count[d], .seen.present = LIVE_ALL(IPCDEV)};
    return true;
}

/* Live bytes per owner class, from the owner rows (owners.c); a class is
 * there when an owner of it is. */
static void owner_classes(const struct tl_gather *m, struct live_classes *c)
{
    for (size_t i = 0; i < m->nowners; i++)
        for (unsigned k = 0; k < LIVE_CLASSES; k++)
            if (!strcmp(m->owners[i].cls, live_classes_table.fields[k].name)) {
                c->bytes[k] += m->owners[i].live_bytes;
                c->seen.present |= 1ull << k;
            }
}

/* The budgets (budget.c): each a device's, of one class or of all. */
static bool budgets(struct tl_report *r, struct live_doc *d)
{
    struct tl_budget_row rows[TL_MAX_DEVICES * 5];
    int nb = tl_budget_rows(rows, (int)(sizeof rows / sizeof rows[0]));
    if (nb > 0 && !(d->budgets = report_alloc(r, (size_t)nb * sizeof *d->budgets)))
        return false;
    for (int i = 0; i < nb; i++)
        d->budgets[d->nbudgets++] = (struct live_budget_row){
            rows[i].device, rows[i].cls, rows[i].bytes, rows[i].used, rows[i].exceeded, .seen.present = LIVE_ALL(BUDGET)};
    return true;
}

struct build {
    char *text;
};

/* The model (the report's live fields and the live file's own) as the
 * model's writer writes it. */
static void build_document(struct tl_gather *m, void *arg)
{
    struct build *b = arg;
    struct tl_report r;
    if (!tl_report_build_live(m, &r))
        return;
    if (r.pool_count > LIVE_POOL_ROWS)
        r.pool_count = LIVE_POOL_ROWS;
    const struct tl_mark_row *last = m->nmarks ? &m->marks[m->nmarks - 1] : NULL;
    unsigned long marks = last ? last->seq : 0;
    struct live_doc d = {
        .kind = "live",
        .marks = {marks, last ? last->label : NULL, last ? last->time : 0, .seen.present = LIVE_ALL(MARKS),
                  .seen.null = last ? 0 : LIVE_BIT(MARKS, last_label) | LIVE_BIT(MARKS, last_time)},
        .live = {self.process, self.start_time, self.start_ticks, self.pid_ns, clock_s(CLOCK_REALTIME),
                 tl_opt.live_interval, .seen.present = LIVE_ALL(STATE),
                 .seen.null = self.start_time > 0 ? 0 : LIVE_BIT(STATE, start_time)},
        .seen.present = LIVE_ALL(DOC),
    };
    owner_classes(m, &d.classes);
    if (growth_lines(m, &r, &d, marks) && ipc_devices(m, &r, &d.ipc) && budgets(&r, &d)) {
        json_t *root = live_to_json(&r, &d);
        b->text = root ? json_dumps(root, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
        json_decref(root);
    }
    report_free(&r);
}

/* Runs from exit(): the entry goes with the process, without waiting for
 * the watcher (it may be descheduled for seconds under load, or inside a
 * write that takes as long).  Removing the temporary file first makes a
 * write in flight harmless: the watcher checks `stopped` after it created
 * the temporary file, so either it saw it and publishes nothing, or the
 * temporary file existed before this removal, which leaves its rename
 * nothing to rename (ENOENT) or removes what it renamed. */
static void remove_entry(void)
{
    atomic_store(&stopped, true);
    /* An update in progress sees `stopped` and removes the temporary file it
     * made, unless the process is gone first: the update holds live_lock, so
     * wait for it (a few milliseconds; bounded, since the watcher may be
     * stuck) before the files go. */
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += 1;
    bool locked = pthread_mutex_clocklock(&live_lock, CLOCK_MONOTONIC, &deadline) == 0;
    tl_live_state_remove();
    if (locked)
        pthread_mutex_unlock(&live_lock);
}

void tl_live_state_resume(void)
{
    atomic_store(&stopped, false);
}

void tl_live_state_forget_dir(void)
{
    chosen[0] = 0;
    settled = false;
    atomic_store(&exit_pid, 0); /* names_ready sets this directory's paths */
    atomic_store(&live_off, false);
}

/* Async-signal-safe (atomics, getpid, unlink): also the fatal-signal
 * handler's, whose process runs no exit handler. */
void tl_live_state_remove(void)
{
    atomic_store(&stopped, true);
    if (atomic_load(&exit_pid) != getpid())
        return; /* nothing published by this process (a forked child's parent's) */
    unlink(exit_tmp);
    unlink(exit_file);
}

/* The exit handler is registered before the first file exists (a process
 * whose handler cannot be registered publishes nothing: its file would
 * outlive it).  The first update may finish building its document after
 * the program called exit(): once glibc has run every exit handler (our
 * destructor among them) it refuses new ones, and the process, about to
 * end, publishes nothing and says nothing. */
static bool exit_handler_ready(void)
{
    if (exit_handler_set)
        return true;
    if (atexit(remove_entry) == 0)
        return exit_handler_set = true;
    if (atomic_load(&tl_exit_began))
        atomic_store(&live_off, true);
    else
        turn_off("the live directory", "cannot register the exit handler that removes the file", 0);
    return false;
}

/* This process's paths for the exit handler, set before its first file is
 * created, once per process (the directory never changes, open_dir). */
static void names_ready(const char *dir)
{
    if (atomic_load(&exit_pid) == self.pid)
        return;
    snprintf(exit_file, sizeof exit_file, "%s/%s.json", dir, self.stem);
    snprintf(exit_tmp, sizeof exit_tmp, "%s/.%s.tmp", dir, self.stem);
    atomic_store(&exit_pid, self.pid);
}

static int write_all(int fd, const char *text, size_t len)
{
    for (size_t off = 0; off < len;) {
        ssize_t w = write(fd, text + off, len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return errno;
        off += (size_t)w;
    }
    return 0;
}

static void publish(void)
{
    if (!atomic_load(&tl_active) || atomic_load(&stopped))
        return;
    if (getauxval(AT_SECURE)) { /* the environment picks the directory: not for a setuid program */
        atomic_store(&live_off, true);
        return;
    }
    if (self.pid != getpid())
        read_identity();
    /* The frameworks' figures, fresh: the Python side reads them on its
     * thread (statistics only, microseconds).  A figures-only state never
     * replaces the figures-and-layout state a report waits for (bridge.c
     * keeps the two apart), so this request cannot race with reports. */
    tl_bridge_refresh_live(tl_opt.live_interval);
    struct build b = {0};
    if (tl_report_with_model(build_document, &b) != 0 || !b.text) {
        free(b.text);
        return; /* out of memory now; the next tick tries again */
    }
    char dir[PATH_MAX];
    pthread_mutex_lock(&live_lock);
    int dfd = atomic_load(&stopped) || !exit_handler_ready() ? -1 : open_dir(dir, sizeof dir);
    if (dfd >= 0) {
        names_ready(dir);
        char tmp[64], name[64];
        snprintf(tmp, sizeof tmp, ".%s.tmp", self.stem);
        snprintf(name, sizeof name, "%s.json", self.stem);
        unlinkat(dfd, tmp, 0); /* ours, left by a write that was cut short */
        /* Past RLIMIT_FSIZE the write would raise SIGXFSZ, which the
         * program may leave at its default (it kills): a new file from
         * offset 0 crosses the limit exactly when it is longer. */
        struct rlimit fsize;
        size_t len = strlen(b.text);
        bool too_large = getrlimit(RLIMIT_FSIZE, &fsize) == 0 && fsize.rlim_cur != RLIM_INFINITY && len > fsize.rlim_cur;
        int fd = too_large ? -1 : openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        int err = too_large ? EFBIG : fd < 0 ? errno : 0;
        bool exiting = fd >= 0 && atomic_load(&stopped); /* see remove_entry */
        if (fd >= 0 && !exiting)
            err = write_all(fd, b.text, len);
        if (fd >= 0 && close(fd) != 0 && !err)
            err = errno;
        if (!err && !exiting && renameat(dfd, tmp, dfd, name) != 0)
            err = errno;
        if (err || exiting)
            unlinkat(dfd, tmp, 0);
        /* Exiting, a failure is the exit handler's removal: nothing to say. */
        if (err && !atomic_load(&stopped))
            turn_off(dir, "write", err);
        close(dfd);
    }
    pthread_mutex_unlock(&live_lock);
    free(b.text);
}

double tl_live_state_next_due(void)
{
    return tl_opt.live && !atomic_load(&live_off) ? next_due : -1.0;
}

void tl_live_state_tick(double now)
{
    if (tl_live_state_next_due() < 0 || now < next_due)
        return;
    publish();
    /* From the end of this update: a slow one never makes them pile up. */
    next_due = clock_s(CLOCK_MONOTONIC) + tl_opt.live_interval;
}

/* ---- interval report retention ------------------------------------------ */
struct kept_report {
    char *path;
    dev_t dev;
    ino_t ino;
};
static struct kept_report *kept; /* a ring of the last tl_opt.keep */
static size_t nkept, kept_head;

static void forget_kept(void)
{
    for (size_t i = 0; i < nkept; i++)
        free(kept[(kept_head + i) % (size_t)tl_opt.keep].path);
    free(kept);
    kept = NULL;
    nkept = kept_head = 0;
}

void tl_interval_reports_retain(const char *path)
{
    if (tl_opt.keep <= 0)
        return;
    size_t cap = (size_t)tl_opt.keep;
    struct stat st;
    if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode))
        return; /* nothing was written there (TENSORLEAK_OUTPUT=/dev/null) */
    if (!kept && !(kept = calloc(cap, sizeof *kept)))
        return;
    if (nkept == cap) {
        /* The oldest goes, if the name is still the file we wrote. */
        struct kept_report *old = &kept[kept_head];
        struct stat now;
        if (lstat(old->path, &now) == 0 && S_ISREG(now.st_mode) && now.st_dev == old->dev && now.st_ino == old->ino)
            unlink(old->path);
        free(old->path);
        kept_head = (kept_head + 1) % cap;
        nkept--;
    }
    char *copy = strdup(path);
    if (!copy)
        return;
    kept[(kept_head + nkept) % cap] = (struct kept_report){copy, st.st_dev, st.st_ino};
    nkept++;
}

void tl_live_state_after_fork(void)
{
    pthread_mutex_init(&live_lock, NULL);
    /* The parent's reports and entry stay the parent's; its call-site ids
     * are not the child's. */
    forget_kept();
    forget_site_lines();
    self.pid = 0;
    atomic_store(&exit_pid, 0);
    next_due = 0;
}
