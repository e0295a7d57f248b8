/*
 * live_read.c — reads the live state files (live_read.h) for `tensorleak
 * top` and `tensorleak exporter`.
 *
 * The directory may be shared (a volume with a sidecar) and its files are
 * input from other processes: each is opened without following links,
 * refused unless it is a regular file owned by the directory's owner with
 * no group/other bits, read up to LIVE_FILE_MAX, and every field is
 * type-checked; a field of the wrong type is absent (unknown), a document
 * that is not a live state is refused.  Strings lose their control bytes
 * (a terminal must never receive escapes from a file).
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
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

const char *const live_class_names[4] = {"user", "cache", "library", "workspace"};

static void get_str(json_t *o, const char *key, char *out, size_t len, const char *dflt)
{
    json_t *v = json_object_get(o, key);
    tl_copy_terminal_safe(out, len, json_is_string(v) ? json_string_value(v) : dflt);
}

/* An integer field that is a byte count: absent, negative or not an
 * integer reads as unknown. */
static bool get_u64(json_t *o, const char *key, uint64_t *out)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return false;
    *out = (uint64_t)json_integer_value(v);
    return true;
}

static bool get_i64(json_t *o, const char *key, int64_t *out)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_integer(v))
        return false;
    *out = (int64_t)json_integer_value(v);
    return true;
}

static bool get_num(json_t *o, const char *key, double *out)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_number(v) || !isfinite(json_number_value(v)))
        return false;
    *out = json_number_value(v);
    return true;
}

static bool get_frac(json_t *o, const char *key, double *out)
{
    return get_num(o, key, out) && *out >= 0.0 && *out <= 1.0;
}

static int get_int(json_t *o, const char *key, int dflt)
{
    json_t *v = json_object_get(o, key);
    return json_is_integer(v) && json_integer_value(v) >= INT_MIN && json_integer_value(v) <= INT_MAX
               ? (int)json_integer_value(v)
               : dflt;
}

/* Rows of an array of objects: at most LIVE_MAX_ROWS; a non-object
 * element is skipped. */
static void *rows_of(json_t *arr, size_t each, size_t *n)
{
    *n = 0;
    size_t cap = json_is_array(arr) ? json_array_size(arr) : 0;
    if (cap > LIVE_MAX_ROWS)
        cap = LIVE_MAX_ROWS;
    return calloc(cap + 1, each);
}

static void parse_devices(json_t *arr, struct live_proc *p)
{
    size_t i;
    json_t *d;
    json_array_foreach(arr, i, d) {
        if (!json_is_object(d) || p->ndevices == LIVE_MAX_DEVICES)
            continue;
        struct live_device *r = &p->devices[p->ndevices];
        memset(r, 0, sizeof *r);
        r->device = get_int(d, "device", -1);
        if (r->device < 0 || r->device >= LIVE_MAX_DEVICES)
            continue;
        get_str(d, "uuid", r->uuid, sizeof r->uuid, "");
        if (strncmp(r->uuid, "GPU-", 4) != 0 || strspn(r->uuid + 4, "0123456789abcdef-") != strlen(r->uuid + 4))
            r->uuid[0] = 0; /* not a UUID as the library writes one: no label */
        r->has_free = get_u64(d, "free", &r->free);
        r->has_total = get_u64(d, "total", &r->total);
        get_u64(d, "reserved_bytes", &r->reserved);
        get_u64(d, "allocated_bytes", &r->allocated);
        r->gap = r->reserved >= r->allocated ? r->reserved - r->allocated : 0;
        r->has_largest = get_u64(d, "largest_free_block", &r->largest);
        r->has_frag = get_frac(d, "fragmentation", &r->frag);
        p->ndevices++;
    }
}

/* Owner rows: "owners" (process-wide) or, `by_device`, "owners_by_device"
 * (a device, or null for host memory; a row with any other device is
 * dropped). */
static struct live_owner *parse_owners(json_t *arr, bool by_device, size_t *n)
{
    struct live_owner *rows = rows_of(arr, sizeof *rows, n);
    size_t i;
    json_t *o;
    json_array_foreach(arr, i, o) {
        if (!rows || !json_is_object(o) || *n == LIVE_MAX_ROWS)
            continue;
        struct live_owner *w = &rows[*n];
        get_str(o, "name", w->name, sizeof w->name, "unknown");
        get_str(o, "class", w->cls, sizeof w->cls, "unknown");
        json_t *dev = json_object_get(o, "device");
        bool host = !by_device || json_is_null(dev);
        w->device = host ? -1 : get_int(o, "device", -1);
        if (!host && (w->device < 0 || w->device >= LIVE_MAX_DEVICES))
            continue;
        if (get_i64(o, "live_bytes", &w->live_bytes))
            (*n)++;
    }
    return rows;
}

static void parse_ipc(json_t *root, json_t *sum, struct live_proc *p)
{
    json_t *arr = json_object_get(json_object_get(root, "ipc"), "devices"), *o;
    p->has_ipc = json_is_array(arr) && get_u64(sum, "ipc_mapped_bytes", &p->ipc_mapped_bytes) &&
                 get_u64(sum, "ipc_mappings", &p->ipc_mappings);
    if (!p->has_ipc)
        return;
    size_t i;
    json_array_foreach(arr, i, o) {
        if (!json_is_object(o) || p->nipc == LIVE_MAX_DEVICES)
            continue;
        struct live_ipc_device *r = &p->ipc[p->nipc];
        r->device = get_int(o, "device", -1);
        if (r->device >= 0 && r->device < LIVE_MAX_DEVICES && get_u64(o, "mapped_bytes", &r->mapped_bytes) &&
            get_u64(o, "mappings", &r->mappings))
            p->nipc++;
    }
}

static int parse_rows(json_t *root, struct live_proc *p)
{
    json_t *arr, *o;
    size_t i;
    if (!(p->owners = parse_owners(json_object_get(root, "owners"), false, &p->nowners)))
        return -1;
    arr = json_object_get(root, "owners_by_device");
    p->has_owner_devices = json_is_array(arr);
    if (!(p->owner_devices = parse_owners(arr, true, &p->nowner_devices)))
        return -1;
    arr = json_object_get(root, "pools");
    if (!(p->pools = rows_of(arr, sizeof *p->pools, &p->npools)))
        return -1;
    json_array_foreach(arr, i, o) {
        if (!json_is_object(o) || p->npools == LIVE_MAX_ROWS)
            continue;
        struct live_pool *q = &p->pools[p->npools];
        get_str(o, "name", q->name, sizeof q->name, "unknown");
        get_str(o, "kind", q->kind, sizeof q->kind, "unknown");
        json_t *fw = json_object_get(o, "framework");
        /* A framework pool's "framework" is {name, version} (bridge.c) or a name. */
        get_str(json_is_object(fw) ? fw : o, json_is_object(fw) ? "name" : "framework", q->framework, sizeof q->framework,
                "");
        q->device = get_int(o, "device", -1);
        if (!get_u64(o, "reserved_bytes", &q->reserved) || !get_u64(o, "allocated_bytes", &q->allocated))
            continue;
        q->has_largest = get_u64(o, "largest_free_block", &q->largest);
        q->has_frag = get_frac(o, "fragmentation", &q->frag);
        p->npools++;
    }
    arr = json_object_get(root, "growth");
    if (!(p->growth = rows_of(arr, sizeof *p->growth, &p->ngrowth)))
        return -1;
    json_array_foreach(arr, i, o) {
        if (!json_is_object(o) || p->ngrowth == LIVE_MAX_ROWS || json_is_true(json_object_get(o, "suppressed")))
            continue;
        struct live_growth *g = &p->growth[p->ngrowth];
        get_str(o, "scope", g->scope, sizeof g->scope, "call_site");
        get_str(o, "kind", g->kind, sizeof g->kind, "");
        get_str(o, "site", g->site, sizeof g->site, "unknown");
        g->marks = get_int(o, "marks", 0);
        g->since_mark = get_int(o, "since_mark", 0);
        if (get_i64(o, "bytes_per_mark", &g->bytes_per_mark))
            p->ngrowth++;
    }
    arr = json_object_get(root, "budgets");
    if (!(p->budgets = rows_of(arr, sizeof *p->budgets, &p->nbudgets)))
        return -1;
    json_array_foreach(arr, i, o) {
        if (!json_is_object(o) || p->nbudgets == LIVE_MAX_ROWS)
            continue;
        struct live_budget *b = &p->budgets[p->nbudgets];
        b->device = get_int(o, "device", -1);
        get_str(o, "class", b->cls, sizeof b->cls, "device");
        b->exceeded = json_is_true(json_object_get(o, "exceeded"));
        if (b->device >= 0 && get_u64(o, "bytes", &b->bytes) && get_i64(o, "used_bytes", &b->used))
            p->nbudgets++;
    }
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
    json_t *live = json_object_get(root, "live"), *sum = json_object_get(root, "summary");
    int pid = get_int(root, "pid", 0);
    if (!json_is_object(root) || !json_is_string(json_object_get(root, "kind")) ||
        strcmp(json_string_value(json_object_get(root, "kind")), "live") != 0 || !json_is_object(live) || pid <= 0 ||
        !get_num(live, "update_time", &p->update_time)) {
        snprintf(why, whylen, "not a tensorleak live state");
        json_decref(root);
        return -1;
    }
    p->pid = pid;
    get_str(live, "process", p->process, sizeof p->process, "unknown");
    get_str(root, "version", p->version, sizeof p->version, "unknown");
    get_str(root, "host", p->host, sizeof p->host, "");
    json_t *rank = json_object_get(root, "rank");
    p->has_rank = json_is_integer(rank);
    p->rank = p->has_rank ? (long)json_integer_value(rank) : 0;
    get_str(live, "pid_namespace", p->pid_ns, sizeof p->pid_ns, "");
    uint64_t ticks = 0;
    p->start_ticks = get_u64(live, "start_ticks", &ticks) ? ticks : 0;
    if (!get_num(live, "start_time", &p->start_time))
        p->start_time = 0;
    if (!get_num(live, "interval", &p->interval) || p->interval <= 0)
        p->interval = 1.0;
    if (json_is_object(sum)) {
        get_i64(sum, "live_bytes", &p->live_bytes);
        get_i64(sum, "peak_live_bytes", &p->peak_live_bytes);
        get_i64(sum, "held_bytes", &p->held_bytes);
        get_u64(sum, "reserved_bytes", &p->reserved);
        get_u64(sum, "allocated_bytes", &p->allocated);
        p->has_largest = get_u64(sum, "largest_free_block", &p->largest);
        p->has_frag = get_frac(sum, "fragmentation", &p->frag);
    }
    json_t *classes = json_object_get(root, "owner_classes");
    for (int c = 0; c < 4; c++)
        p->has_class[c] = get_i64(classes, live_class_names[c], &p->class_bytes[c]);
    json_t *marks = json_object_get(root, "marks");
    uint64_t count = 0;
    if (get_u64(marks, "count", &count))
        p->marks = (unsigned long)count;
    get_str(marks, "last_label", p->last_label, sizeof p->last_label, "");
    parse_devices(json_object_get(root, "devices"), p);
    parse_ipc(root, sum, p);
    int rc = parse_rows(root, p);
    json_decref(root);
    if (rc != 0) {
        live_proc_free(p);
        snprintf(why, whylen, "out of memory");
    }
    return rc;
}

int64_t live_held_by_owners(const struct live_proc *p)
{
    int64_t held = 0;
    for (int c = 1; c < 4; c++)
        held += p->has_class[c] ? p->class_bytes[c] : 0;
    return held;
}

void live_proc_free(struct live_proc *p)
{
    free(p->owners);
    free(p->owner_devices);
    free(p->pools);
    free(p->growth);
    free(p->budgets);
    p->owners = NULL;
    p->owner_devices = NULL;
    p->pools = NULL;
    p->growth = NULL;
    p->budgets = NULL;
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
    double age = now - p->update_time;
    bool silent = age > 2.0 * p->interval + 1.0;
    if (!same_pid_namespace(p->pid_ns)) {
        if (age > 10.0 * p->interval && age > 60.0)
            return ENTRY_DEAD;
        return silent ? ENTRY_SILENT : ENTRY_LIVE;
    }
    unsigned long long now_ticks = 0;
    if (!proc_alive(p->pid, &now_ticks))
        return ENTRY_DEAD;
    if (p->start_ticks && now_ticks && p->start_ticks != now_ticks)
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
        } else if (rc == 0 && ns && live_ns_inode(p.pid_ns) != ns) {
            live_proc_free(&p);
            snprintf(err, sizeof err, "its pid namespace is not its name's");
        }
        if (rc != 0 || err[0]) {
            refuse(out, e->d_name, err);
            continue;
        }
        unsigned long long ticks;
        if (me == 0 && st.st_uid != 0 && same_pid_namespace(p.pid_ns) && proc_alive(p.pid, &ticks) &&
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
