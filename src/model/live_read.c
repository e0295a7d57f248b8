/*
 * live_read.c — reads the live state files (live_read.h) for `tensorleak
 * top` and `tensorleak exporter`.
 *
 * The directory may be shared (a volume with a sidecar) and its files are
 * input from other processes: each is opened without following links,
 * refused unless it is a regular file owned by the directory's owner with
 * no group/other bits, read up to LIVE_FILE_MAX, and parsed by the report
 * model's reader (report_read_into, walking the same field tables as a
 * report; what only the live file has walks its own, live_fields.c).  It
 * reads field by field and row by row: a field of the wrong type is absent
 * (unknown), a row without the figures it is shown for is dropped, a
 * document that is not a live state is refused.  Strings lose their
 * control bytes (a terminal must never receive escapes from a file).
 *
 * A process that died without removing its entry (SIGKILL) is dropped:
 * when it ran in our pid namespace, its pid is gone, a zombie, or another
 * process (start time differs), and its file is removed; otherwise its entry
 * is older than two of its intervals and a second.  A process of another pid
 * namespace cannot be looked up from here (its pid is not ours, /proc shows
 * another process or none), so its age is all we know: a live process whose
 * watcher stalls (a long report, a stopped process) looks the same.  Its
 * file is hidden then, and removed only once silent for ten intervals and at
 * least a minute, and only if it is still the file read; a live process
 * whose file went writes it again at its next update.
 */
#include "live_read.h"
#include "terminal_safe.h"

#include <dirent.h>
#include <errno.h>
#include <ctype.h>
#include <glob.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>


/* Forgets field `name` of `elem`: unknown from here on. */
static void forget(const struct tl_table *t, void *elem, const char *name)
{
    struct tl_seen *seen = (struct tl_seen *)((char *)elem + t->seen_offset);
    for (size_t i = 0; i < t->nfields; i++)
        if (!strcmp(t->fields[i].name, name))
            seen->present &= ~(1ull << i), seen->null &= ~(1ull << i);
}

/* A ratio outside [0, 1] is no ratio the library writes: unknown. */
static void ratio_or_unknown(const struct tl_table *t, void *elem, const char *name, double v)
{
    if (!(v >= 0.0 && v <= 1.0))
        forget(t, elem, name);
}

/* Every string of the tree, as it may reach a terminal: control bytes as
 * '?' (terminal_safe.h), cut to LIVE_TEXT_MAX bytes. */
static void make_terminal_safe(json_t *v)
{
    const char *key;
    json_t *e;
    size_t i;
    if (json_is_string(v)) {
        char text[LIVE_TEXT_MAX];
        const char *s = json_string_value(v);
        size_t n = tl_copy_terminal_safe(text, sizeof text, s);
        if (n != json_string_length(v) || strcmp(text, s) != 0)
            json_string_setn_nocheck(v, text, n);
    } else if (json_is_object(v)) {
        json_object_foreach(v, key, e) make_terminal_safe(e);
    } else if (json_is_array(v)) {
        json_array_foreach(v, i, e) make_terminal_safe(e);
    }
}

/* The object elements of `arr` (at most `max`) read into rows of `t`, each
 * field by field (one of the wrong type is unknown); a row `keep` refuses
 * is dropped.  NULL only when out of memory. */
typedef bool keep_fn(struct live_proc *p, void *row, json_t *raw);
static void *read_rows(struct live_proc *p, json_t *arr, const struct tl_table *t, size_t max, keep_fn *keep,
                       size_t *n)
{
    *n = 0;
    size_t cap = json_is_array(arr) ? json_array_size(arr) : 0;
    char *rows = report_alloc(&p->model, (cap < max ? cap : max) * t->size + t->size);
    size_t i;
    json_t *o;
    char why[160];
    if (!rows)
        return NULL;
    json_array_foreach(arr, i, o) {
        char *row = rows + *n * t->size;
        if (*n == max || !json_is_object(o))
            continue;
        memset(row, 0, t->size);
        report_read_into(&p->model, o, t, row, why, sizeof why);
        if (!keep || keep(p, row, o))
            (*n)++;
    }
    memset(rows + *n * t->size, 0, t->size);
    return rows;
}

static const struct tl_table *table_of(const char *name)
{
    return report_field_table(&tl_report_table, name);
}

static bool keep_device(struct live_proc *p, void *row, json_t *raw)
{
    (void)p, (void)raw;
    struct tl_device *d = row;
    const struct tl_table *t = table_of("devices");
    if (!live_has(t, d, "device") || d->device < 0 || d->device >= LIVE_MAX_DEVICES)
        return false;
    if (d->uuid && (strncmp(d->uuid, "GPU-", 4) != 0 || strspn(d->uuid + 4, "0123456789abcdef-") != strlen(d->uuid + 4)))
        d->uuid = NULL; /* not a UUID as the library writes one: no label */
    ratio_or_unknown(t, d, "fragmentation", d->fragmentation);
    d->gap_bytes = d->reserved_bytes >= d->allocated_bytes ? d->reserved_bytes - d->allocated_bytes : 0;
    if (t->derive) { /* the table's derived figures, where it has any */
        char why[16];
        t->derive(&p->model, d, why, sizeof why);
    }
    return true;
}

static bool keep_owner(struct live_proc *p, void *row, json_t *raw)
{
    (void)p, (void)raw;
    return live_has(table_of("owners"), row, "live_bytes");
}

/* A row of "owners_by_device": a device, or null for host memory (-1). */
static bool keep_owner_device(struct live_proc *p, void *row, json_t *raw)
{
    (void)p;
    struct tl_owner_device *w = row;
    json_t *dev = json_object_get(raw, "device");
    if (json_is_null(dev))
        w->device = -1;
    else if (!live_has(table_of("owners_by_device"), w, "device") || w->device < 0 || w->device >= LIVE_MAX_DEVICES)
        return false;
    return live_has(table_of("owners_by_device"), w, "live_bytes");
}

static bool keep_pool(struct live_proc *p, void *row, json_t *raw)
{
    (void)p;
    struct tl_pool *q = row;
    const struct tl_table *t = table_of("pools");
    json_t *framework = json_object_get(raw, "framework");
    /* A framework pool's "framework" is {name, version} (bridge.c), or
     * its name alone in a file written before it was. */
    if (json_is_string(framework))
        q->framework.name = json_string_value(framework);
    if (!live_has(t, q, "device"))
        q->device = -1;
    ratio_or_unknown(t, q, "fragmentation", q->fragmentation);
    return live_has(t, q, "reserved_bytes") && live_has(t, q, "allocated_bytes");
}

/* A growth row and what only the live file says of it (its site's line and
 * streak), side by side; a suppressed row is not shown. */
static bool keep_growth(struct live_proc *p, void *row, json_t *raw)
{
    struct tl_growth *g = row;
    if (g->suppressed || !live_has(table_of("growth"), g, "bytes_per_mark"))
        return false;
    struct live_growth_line *line = &p->doc.growth[p->doc.ngrowth++];
    char why[160];
    report_read_into(&p->model, raw, &live_growth_line_table, line, why, sizeof why);
    return true;
}

static bool keep_budget(struct live_proc *p, void *row, json_t *raw)
{
    (void)p, (void)raw;
    const struct live_budget_row *b = row;
    return b->device >= 0 && live_has(&live_budget_table, b, "device") && live_has(&live_budget_table, b, "bytes") &&
           live_has(&live_budget_table, b, "used_bytes");
}

static bool keep_ipc(struct live_proc *p, void *row, json_t *raw)
{
    (void)p, (void)raw;
    const struct live_ipc_row *r = row;
    return live_has(&live_ipc_table, r, "device") && r->device >= 0 && r->device < LIVE_MAX_DEVICES &&
           live_has(&live_ipc_table, r, "mapped_bytes") && live_has(&live_ipc_table, r, "mappings");
}

/* A list of the report the live file carries, row by row: present in the
 * model when the file has it as an array. */
static bool read_list(struct live_proc *p, json_t *root, unsigned bit, size_t max, keep_fn *keep)
{
    const struct tl_field *f = &tl_report_table.fields[bit];
    json_t *arr = json_object_get(root, f->name);
    char *at = (char *)&p->model + f->offset;
    if (!(*(void **)at = read_rows(p, arr, f->table, max, keep, (size_t *)((char *)&p->model + f->count_offset))))
        return false;
    p->model.seen.present |= json_is_array(arr) ? 1ull << bit : 0;
    return true;
}

/* The report's own fields the live file carries (TL_FIELD_LIVE), read into
 * the model field by field; its lists row by row. */
static int read_model(struct live_proc *p, json_t *root)
{
    struct tl_report *r = &p->model;
    char why[160];
    json_t *scalars = json_object();
    if (!scalars)
        return -1;
    for (size_t i = 0; i < tl_report_table.nfields; i++) {
        const struct tl_field *f = &tl_report_table.fields[i];
        json_t *v = json_object_get(root, f->name);
        if (!(f->flags & TL_FIELD_LIVE) || !v)
            continue;
        if (f->type == TL_FIELD_OBJECT && json_is_object(v)) {
            report_read_into(r, v, f->table, (char *)r + f->offset, why, sizeof why);
            r->seen.present |= 1ull << i;
        } else if (f->type != TL_FIELD_OBJECT && f->type != TL_FIELD_LIST) {
            json_object_set(scalars, f->name, v);
        }
    }
    report_read_into(r, scalars, &tl_report_table, r, why, sizeof why);
    json_decref(scalars);
    ratio_or_unknown(&tl_summary_table, &r->summary, "fragmentation", r->summary.fragmentation);
    json_t *growth = json_object_get(root, "growth");
    size_t ngrowth = json_is_array(growth) ? json_array_size(growth) : 0;
    p->doc.growth = report_alloc(r, ((ngrowth < LIVE_MAX_ROWS ? ngrowth : LIVE_MAX_ROWS) + 1) * sizeof *p->doc.growth);
    if (!p->doc.growth || !read_list(p, root, TL_F_REPORT_devices, LIVE_MAX_DEVICES, keep_device) ||
        !read_list(p, root, TL_F_REPORT_owners, LIVE_MAX_ROWS, keep_owner) ||
        !read_list(p, root, TL_F_REPORT_owners_by_device, LIVE_MAX_ROWS, keep_owner_device) ||
        !read_list(p, root, TL_F_REPORT_pools, LIVE_MAX_ROWS, keep_pool) ||
        !read_list(p, root, TL_F_REPORT_growth, LIVE_MAX_ROWS, keep_growth))
        return -1;
    p->doc.seen.present |= json_is_array(growth) ? LIVE_BIT(DOC, growth) : 0;
    return 0;
}

/* What only the live file has: an object of it read into `elem` with its
 * table, present in the document when the file has it. */
static void read_part(struct live_proc *p, json_t *root, unsigned bit, void *elem)
{
    const struct tl_field *f = &live_doc_table.fields[bit];
    json_t *v = json_object_get(root, f->name);
    char why[160];
    if (!json_is_object(v))
        return;
    report_read_into(&p->model, v, f->table, elem, why, sizeof why);
    p->doc.seen.present |= 1ull << bit;
}

static int read_live_parts(struct live_proc *p, json_t *root)
{
    struct live_doc *d = &p->doc;
    d->kind = "live";
    d->seen.present |= LIVE_BIT(DOC, kind);
    read_part(p, root, LIVE_F_DOC_live, &d->live);
    if (!live_has(&live_state_table, &d->live, "interval") || d->live.interval <= 0)
        d->live.interval = 1.0;
    if (!live_has(&live_state_table, &d->live, "start_time"))
        d->live.start_time = 0;
    read_part(p, root, LIVE_F_DOC_marks, &d->marks);
    read_part(p, root, LIVE_F_DOC_owner_classes, &d->classes);
    json_t *ipc = json_object_get(json_object_get(root, "ipc"), "devices");
    const struct tl_summary *sum = &p->model.summary;
    if (json_is_array(ipc) && tl_summary_has(sum, ipc_mapped_bytes) && tl_summary_has(sum, ipc_mappings)) {
        if (!(d->ipc.devices = read_rows(p, ipc, &live_ipc_table, LIVE_MAX_DEVICES, keep_ipc, &d->ipc.ndevices)))
            return -1;
        d->ipc.seen.present = LIVE_ALL(IPC);
        d->seen.present |= LIVE_BIT(DOC, ipc);
    }
    json_t *budgets = json_object_get(root, "budgets");
    if (!(d->budgets = read_rows(p, budgets, &live_budget_table, LIVE_MAX_ROWS, keep_budget, &d->nbudgets)))
        return -1;
    d->seen.present |= json_is_array(budgets) ? LIVE_BIT(DOC, budgets) : 0;
    return 0;
}

int live_parse(const char *text, size_t len, struct live_proc *p, char *why, size_t whylen)
{
    memset(p, 0, sizeof *p);
    json_error_t err;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);
    if (!root) {
        snprintf(why, whylen, "not JSON (%s)", err.text);
        return -1;
    }
    json_t *live = json_object_get(root, "live"), *pid = json_object_get(root, "pid"),
           *update = json_object_get(live, "update_time");
    if (!json_is_object(root) || !json_is_string(json_object_get(root, "kind")) ||
        strcmp(json_string_value(json_object_get(root, "kind")), "live") != 0 || !json_is_object(live) ||
        !json_is_integer(pid) || json_integer_value(pid) <= 0 || json_integer_value(pid) > INT_MAX ||
        !json_is_number(update)) {
        snprintf(why, whylen, "not a tensorleak live state");
        json_decref(root);
        return -1;
    }
    make_terminal_safe(root);
    p->model.source = root; /* the model's strings are the tree's */
    if (read_model(p, root) != 0 || read_live_parts(p, root) != 0) {
        live_proc_free(p);
        snprintf(why, whylen, "out of memory");
        return -1;
    }
    p->pid = (int)p->model.pid;
    return 0;
}

int64_t live_held_by_owners(const struct live_proc *p)
{
    int64_t held = 0;
    for (unsigned c = 0; c < LIVE_CLASSES; c++)
        if (c != LIVE_CLASS_USER)
        held += tl_seen_has(&p->doc.classes.seen, c) ? p->doc.classes.bytes[c] : 0;
    return held;
}

void live_proc_free(struct live_proc *p)
{
    report_free(&p->model);
    memset(&p->doc, 0, sizeof p->doc);
}

void live_set_free(struct live_set *s)
{
    for (size_t i = 0; i < s->n; i++)
        live_proc_free(&s->procs[i]);
    free(s->procs);
    memset(s, 0, sizeof *s);
}

int live_default_dir(char *out, size_t len, const char *override)
{
    const char *env = getenv("TENSORLEAK_LIVE_DIR");
    return live_dir_path(out, len, override && *override ? override : env, getenv("XDG_RUNTIME_DIR"),
                         (unsigned)geteuid());
}

static void refuse(struct live_set *s, const char *name, const char *why)
{
    if (!s->refused++)
        snprintf(s->first_refusal, sizeof s->first_refusal, "%.120s: %.120s", name, why);
}

/* Reads an opened entry whole, at most LIVE_FILE_MAX bytes.  NULL with `why`. */
static char *read_capped(int fd, const struct stat *st, size_t *len, const char **why)
{
    if (st->st_size > (off_t)LIVE_FILE_MAX) {
        *why = "larger than the size cap";
        return NULL;
    }
    size_t cap = (size_t)st->st_size + 1, n = 0;
    char *buf = malloc(cap);
    if (!buf) {
        *why = "out of memory";
        return NULL;
    }
    /* A file that grows while read stops at the size it had. */
    while (n + 1 < cap) {
        ssize_t r = read(fd, buf + n, cap - 1 - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

/* The start time in ticks of `pid` and whether it is a zombie; false when
 * there is no such process. */
static bool proc_alive(int pid, unsigned long long *ticks)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return kill(pid, 0) == 0 || errno == EPERM;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return false;
    buf[n] = 0;
    const char *p = strrchr(buf, ')');
    if (!p || p[1] != ' ' || p[2] == 'Z' || p[2] == 'X')
        return false;
    for (int field = 2; p && field < 22; field++)
        p = strchr(p + 1, ' ');
    *ticks = p ? strtoull(p + 1, NULL, 10) : 0;
    return true;
}

/* Whether the process that wrote `ns` (its "pid:[N]") can be looked up by
 * its pid here: it ran in our pid namespace, and /proc shows that
 * namespace's pids (a process that unshared its pid namespace but kept the
 * parent's /proc sees other processes under its own pids there: /proc/self
 * then names another pid than getpid()). */
static bool same_pid_namespace(const char *ns)
{
    char mine[64], self_pid[32];
    ssize_t n = readlink("/proc/self/ns/pid", mine, sizeof mine - 1);
    if (n <= 0 || !ns || !*ns)
        return false;
    mine[n] = 0;
    ssize_t k = readlink("/proc/self", self_pid, sizeof self_pid - 1);
    if (k <= 0)
        return false;
    self_pid[k] = 0;
    char mypid[32];
    snprintf(mypid, sizeof mypid, "%d", (int)getpid());
    return strcmp(self_pid, mypid) == 0 && strcmp(mine, ns) == 0;
}

enum verdict {
    ENTRY_LIVE,   /* shown (stale when not updated for two intervals) */
    ENTRY_SILENT, /* another namespace's, not updated for two intervals: hidden, kept */
    ENTRY_DEAD,   /* its process is gone: hidden, its file removed */
};

/* Dead: gone, a zombie or another process with its pid (our namespace), or
 * silent for ten intervals and a minute (elsewhere; two intervals and a
 * second hide it).  Stale: alive but not updated for two intervals and a
 * second (stopped, or its watcher is stuck). */
static enum verdict judge_entry(struct live_proc *p, double now)
{
    double age = now - p->doc.live.update_time;
    bool silent = age > 2.0 * p->doc.live.interval + 1.0;
    if (!same_pid_namespace(p->doc.live.pid_namespace)) {
        if (age > 10.0 * p->doc.live.interval && age > 60.0)
            return ENTRY_DEAD;
        return silent ? ENTRY_SILENT : ENTRY_LIVE;
    }
    unsigned long long now_ticks = 0;
    if (!proc_alive(p->pid, &now_ticks))
        return ENTRY_DEAD;
    if (p->doc.live.start_ticks && now_ticks && p->doc.live.start_ticks != now_ticks)
        return ENTRY_DEAD;
    p->stale = silent;
    return ENTRY_LIVE;
}

/* An entry's name: "PID-NS.json" (live_entry_stem) or, from a process that
 * did not know its pid namespace or a library before namespaces were in
 * the name, "PID.json"; *ns is 0 then. */
static bool entry_name(const char *name, int *pid, unsigned long long *ns)
{
    char *end;
    errno = 0;
    long v = strtol(name, &end, 10);
    if (name[0] < '1' || name[0] > '9' || errno || v <= 0 || v > INT_MAX)
        return false;
    *pid = (int)v;
    *ns = 0;
    if (*end == '-') {
        const char *digits = end + 1;
        if (*digits < '1' || *digits > '9')
            return false;
        unsigned long long n = strtoull(digits, &end, 10);
        if (errno || !n)
            return false;
        *ns = n;
    }
    return strcmp(end, ".json") == 0;
}

/* Removes the entry `name` of a dead process if it is still the file that
 * was read (`st`): a live process that wrote it anew in between keeps it. */
static void remove_entry_read(int dfd, const char *name, const struct stat *st)
{
    struct stat now;
    if (fstatat(dfd, name, &now, AT_SYMLINK_NOFOLLOW) == 0 && now.st_dev == st->st_dev && now.st_ino == st->st_ino)
        unlinkat(dfd, name, 0);
}

/* Whether process `pid` (of this pid namespace) runs as `uid`: root reads
 * every user's directory, where a user's entry must be of that user's own
 * process, not figures planted for someone else's pid. */
static bool process_of(int pid, uid_t uid)
{
    char path[32];
    struct stat st;
    snprintf(path, sizeof path, "/proc/%d", pid);
    return stat(path, &st) == 0 && st.st_uid == uid;
}

/* live_read_dir, with the owner the directory must have: `owner`, or, when
 * it is (uid_t)-1, the reader (any user's for root). */
static int read_dir_owned(const char *dir, uid_t owner, bool remove_dead, struct live_set *out, char *why,
                          size_t whylen)
{
    memset(out, 0, sizeof *out);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0) {
        snprintf(why, whylen, "%s: %s", dir, strerror(errno));
        return -1;
    }
    struct stat dst;
    uid_t me = geteuid();
    if (owner == (uid_t)-1)
        owner = me == 0 ? (uid_t)-2 : me;
    const char *bad = fstat(dfd, &dst) != 0 ? "cannot stat"
                                            : live_refusal(&dst, owner == (uid_t)-2 ? dst.st_uid : owner, true);
    DIR *d = bad ? NULL : fdopendir(dfd);
    if (!d) {
        snprintf(why, whylen, "%s: %s", dir, bad ? bad : strerror(errno));
        close(dfd);
        return -1;
    }
    size_t cap = 0;
    double now;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    now = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
    struct dirent *e;
    /* Bounded: a directory flooded with entries is read up to this many. */
    for (size_t seen = 0; (e = readdir(d)) && seen < 100000; seen++) {
        int pid;
        unsigned long long ns;
        if (!entry_name(e->d_name, &pid, &ns))
            continue;
        int fd = openat(dfd, e->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0) {
            refuse(out, e->d_name, strerror(errno));
            continue;
        }
        struct stat st;
        const char *no = fstat(fd, &st) != 0 ? "cannot stat" : live_refusal(&st, dst.st_uid, false);
        size_t len = 0;
        char *text = no ? NULL : read_capped(fd, &st, &len, &no);
        close(fd);
        if (!text) {
            refuse(out, e->d_name, no);
            continue;
        }
        struct live_proc p;
        char err[160] = "";
        int rc = live_parse(text, len, &p, err, sizeof err);
        free(text);
        if (rc == 0 && p.pid != pid) {
            live_proc_free(&p);
            snprintf(err, sizeof err, "its pid is not its name's");
        } else if (rc == 0 && ns && live_ns_inode(p.doc.live.pid_namespace) != ns) {
            live_proc_free(&p);
            snprintf(err, sizeof err, "its pid namespace is not its name's");
        }
        if (rc != 0 || err[0]) {
            refuse(out, e->d_name, err);
            continue;
        }
        unsigned long long ticks;
        if (me == 0 && st.st_uid != 0 && same_pid_namespace(p.doc.live.pid_namespace) && proc_alive(p.pid, &ticks) &&
            !process_of(p.pid, st.st_uid)) {
            live_proc_free(&p);
            refuse(out, e->d_name, "its process belongs to another user");
            continue;
        }
        enum verdict v = judge_entry(&p, now);
        if (v != ENTRY_LIVE) {
            out->dead++;
            live_proc_free(&p);
            /* The dead process cannot remove it; the directory is ours. */
            if (v == ENTRY_DEAD && remove_dead && st.st_uid == me)
                remove_entry_read(dfd, e->d_name, &st);
            continue;
        }
        snprintf(p.file, sizeof p.file, "%.200s/%.80s", dir, e->d_name);
        if (out->n == cap) {
            size_t ncap = cap ? cap * 2 : 16;
            struct live_proc *grown = realloc(out->procs, ncap * sizeof *grown);
            if (!grown) {
                live_proc_free(&p);
                break;
            }
            out->procs = grown;
            cap = ncap;
        }
        out->procs[out->n++] = p;
    }
    closedir(d);
    return 0;
}

int live_read_dir(const char *dir, bool remove_dead, struct live_set *out, char *why, size_t whylen)
{
    return read_dir_owned(dir, (uid_t)-1, remove_dead, out, why, whylen);
}

bool live_all_users(const char *override)
{
    const char *env = getenv("TENSORLEAK_LIVE_DIR");
    return geteuid() == 0 && !(override && *override) && !(env && *env);
}

/* The uid a per-user live directory's path names: /run/user/UID/tensorleak
 * (XDG_RUNTIME_DIR), /tmp/tensorleak-UID or its fallback
 * /tmp/tensorleak-UID.XXXXXX (live_read.h); -1 for any other path.  *tmp
 * tells the /tmp ones. */
static long uid_of_path(const char *path, bool *tmp)
{
    const char *digits = NULL, *end_text = "";
    *tmp = false;
    if (strncmp(path, "/run/user/", 10) == 0)
        digits = path + 10, end_text = "/tensorleak";
    else if (strncmp(path, "/tmp/tensorleak-", 16) == 0)
        digits = path + 16, *tmp = true;
    if (!digits || !isdigit((unsigned char)*digits))
        return -1;
    char *end;
    errno = 0;
    long uid = strtol(digits, &end, 10);
    bool fallback = *tmp && end[0] == '.' && strlen(end + 1) == 6 && strspn(end + 1, "abcdefghijklmnopqrstuvwxyz"
                                                                                "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                                                "0123456789") == 6;
    return errno || uid < 0 || (strcmp(end, end_text) != 0 && !fallback) ? -1 : uid;
}

static int add_set(struct live_set *all, struct live_set *one)
{
    if (one->n) {
        struct live_proc *grown = realloc(all->procs, (all->n + one->n) * sizeof *grown);
        if (!grown) {
            live_set_free(one);
            return -1;
        }
        all->procs = grown;
        memcpy(all->procs + all->n, one->procs, one->n * sizeof *one->procs);
        all->n += one->n;
    }
    if (one->refused && !all->refused)
        memcpy(all->first_refusal, one->first_refusal, sizeof all->first_refusal);
    all->refused += one->refused;
    all->dead += one->dead;
    free(one->procs);
    return 0;
}

/* Adds the entries of every directory `pattern` matches, each owned by
 * `owner`, or, when `owner` is (uid_t)-1, by the user its name says (a name
 * that says none is skipped); a directory of the wrong owner or mode counts
 * as refused.  The number of directories read, or -1 when out of memory. */
static long read_matching(const char *pattern, uid_t owner, bool remove_dead, struct live_set *out, char *why,
                          size_t whylen)
{
    glob_t g;
    long nread = 0;
    if (glob(pattern, GLOB_NOSORT, NULL, &g) != 0)
        return 0;
    for (size_t i = 0; i < g.gl_pathc; i++) {
        bool tmp;
        long uid = owner == (uid_t)-1 ? uid_of_path(g.gl_pathv[i], &tmp) : (long)owner;
        struct live_set one;
        char err[256];
        if (uid < 0) /* not a per-user directory's name */
            continue;
        if (read_dir_owned(g.gl_pathv[i], (uid_t)uid, remove_dead, &one, err, sizeof err) != 0) {
            if (!out->refused++)
                snprintf(out->first_refusal, sizeof out->first_refusal, "%.250s", err);
            continue;
        }
        if (add_set(out, &one) != 0) {
            globfree(&g);
            snprintf(why, whylen, "out of memory");
            return -1;
        }
        nread++;
    }
    globfree(&g);
    return nread;
}

int live_read_all(bool remove_dead, struct live_set *out, char *why, size_t whylen)
{
    memset(out, 0, sizeof *out);
    static const char *const patterns[] = {"/run/user/*/tensorleak", "/tmp/tensorleak-*"};
    for (size_t k = 0; k < sizeof patterns / sizeof patterns[0]; k++)
        if (read_matching(patterns[k], (uid_t)-1, remove_dead, out, why, whylen) < 0)
            return -1;
    return 0;
}

/* The reader's own /tmp default and its fallbacks (live_read.h): the
 * entries of each usable one; -1 (the default's `why`) only when none is. */
static int read_tmp_default(const char *dir, bool remove_dead, struct live_set *out, char *why, size_t whylen)
{
    int rc = live_read_dir(dir, remove_dead, out, why, whylen);
    if (rc != 0) {
        /* Another user's directory of that name counts as refused. */
        struct stat st;
        memset(out, 0, sizeof *out);
        if (lstat(dir, &st) == 0) {
            out->refused = 1;
            snprintf(out->first_refusal, sizeof out->first_refusal, "%.250s", why);
        }
    }
    char pattern[64];
    snprintf(pattern, sizeof pattern, LIVE_TMP_FALLBACK_GLOB, (unsigned)geteuid());
    char err[256];
    long n = read_matching(pattern, geteuid(), remove_dead, out, err, sizeof err);
    if (n < 0)
        snprintf(why, whylen, "%s", err);
    return n < 0 ? -1 : n > 0 ? 0 : rc;
}

int live_read_source(const char *dir, bool remove_dead, struct live_set *out, char *why, size_t whylen)
{
    if (!dir)
        return live_read_all(remove_dead, out, why, whylen);
    bool tmp;
    /* The default itself, not a fallback named with --dir. */
    if (uid_of_path(dir, &tmp) == (long)geteuid() && tmp && !strchr(dir + 16, '.'))
        return read_tmp_default(dir, remove_dead, out, why, whylen);
    return live_read_dir(dir, remove_dead, out, why, whylen);
}
