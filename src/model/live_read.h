/*
 * live_read.h — the live state files: where they are (shared by the
 * publisher in libtensorleak.so and the readers), and the reader that
 * `tensorleak top` and `tensorleak exporter` use (live_read.c).
 *
 * One file per tracked process, DIR/PID-NS.json (NS: its pid namespace,
 * live_entry_stem), rewritten whole (temp file DIR/.PID-NS.tmp + rename) by
 * the process's watcher thread at most every TENSORLEAK_LIVE_INTERVAL
 * seconds.  DIR is TENSORLEAK_LIVE_DIR when set,
 * else $XDG_RUNTIME_DIR/tensorleak, else /tmp/tensorleak-UID; it is created
 * 0700, the files 0600, and both sides refuse a directory or file owned by
 * someone else or open to group or others (a file planted in a shared
 * directory must never pass for a process's figures).
 */
#ifndef TL_LIVE_READ_H
#define TL_LIVE_READ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/types.h>

/* The live directory for `uid`: `override` (TENSORLEAK_LIVE_DIR) when set,
 * else XDG/tensorleak when `xdg` is an absolute path, else
 * /tmp/tensorleak-UID.  0, or -1 when it does not fit in `len`. */
static inline int live_dir_path(char *out, size_t len, const char *override, const char *xdg, unsigned uid)
{
    int n;
    if (override && *override)
        n = snprintf(out, len, "%s", override);
    else if (xdg && xdg[0] == '/')
        n = snprintf(out, len, "%s/tensorleak", xdg);
    else
        n = snprintf(out, len, "/tmp/tensorleak-%u", uid);
    return n < 0 || (size_t)n >= len ? -1 : 0;
}

/* Whether the live directory is the per-user default in the shared /tmp
 * (neither TENSORLEAK_LIVE_DIR nor XDG_RUNTIME_DIR says otherwise).  Any
 * local user can create /tmp/tensorleak-UID before its user does; the
 * publisher then uses a directory of its own, mkdtemp's
 * /tmp/tensorleak-UID.XXXXXX, and the readers look in those too. */
static inline bool live_dir_is_tmp_default(const char *override, const char *xdg)
{
    return !(override && *override) && !(xdg && xdg[0] == '/');
}
#define LIVE_TMP_FALLBACK_TEMPLATE "/tmp/tensorleak-%u.XXXXXX"
#define LIVE_TMP_FALLBACK_GLOB "/tmp/tensorleak-%u.??????"

/* The inode number of a pid namespace from its /proc/PID/ns/pid link text
 * ("pid:[4026531836]"); 0 when the text is not one. */
static inline unsigned long long live_ns_inode(const char *link)
{
    unsigned long long ino = 0;
    char end = 0;
    return link && sscanf(link, "pid:[%llu%c", &ino, &end) == 2 && end == ']' ? ino : 0;
}

/* What names a process's entry: "PID-NS", with NS its pid namespace's inode
 * number, or "PID" when the namespace is unknown (ns 0: no /proc).  A pid is
 * unique only within its pid namespace: two containers that share the
 * directory each have a process 1, and each must have a file of its own that
 * the other never writes, replaces or removes.  0, or -1 when it does not fit. */
static inline int live_entry_stem(char *out, size_t len, int pid, unsigned long long ns)
{
    int n = ns ? snprintf(out, len, "%d-%llu", pid, ns) : snprintf(out, len, "%d", pid);
    return n < 0 || (size_t)n >= len ? -1 : 0;
}

/* Why the live directory or a file in it must not be used (NULL: it may):
 * not owned by `uid`, or open to group or others. */
static inline const char *live_refusal(const struct stat *st, uid_t uid, bool want_dir)
{
    if (want_dir ? !S_ISDIR(st->st_mode) : !S_ISREG(st->st_mode))
        return want_dir ? "not a directory" : "not a regular file";
    if (st->st_uid != uid)
        return "owned by another user";
    if (st->st_mode & 077)
        return "open to group or others";
    return NULL;
}

#define LIVE_FILE_MAX (4u << 20) /* bigger files are refused unread */
#define LIVE_MAX_DEVICES 16
#define LIVE_MAX_ROWS 256        /* pools, owners, growth rows, budgets: each */

/* One process's live state, every field type-checked; `has_*` false means
 * the file did not say (unknown, shown as such, never as 0). */
struct live_device {
    int device;
    char uuid[48]; /* "GPU-...", "" when unknown */
    bool has_free, has_total, has_largest, has_frag;
    uint64_t free, total, reserved, allocated, largest;
    uint64_t gap; /* reserved - allocated, 0 when allocated is more */
    double frag;
};
struct live_owner {
    char name[64], cls[16];
    int device; /* owners_by_device rows: the device, -1 for host memory; owners rows: -1 */
    int64_t live_bytes;
};
struct live_pool {
    char name[96], kind[24], framework[32];
    int device;
    bool has_largest, has_frag;
    uint64_t reserved, allocated, largest;
    double frag;
};
struct live_growth {
    char scope[16], kind[16], site[256];
    int64_t bytes_per_mark;
    int marks;
    long since_mark;
};
struct live_budget {
    int device;
    char cls[16];
    uint64_t bytes;
    int64_t used;
    bool exceeded;
};
struct live_ipc_device {
    int device;
    uint64_t mapped_bytes, mappings;
};
struct live_proc {
    char file[300];                  /* the entry's path */
    int pid;
    char process[64], version[32], host[64];
    char pid_ns[64];                 /* "pid:[N]": whose pids these are */
    unsigned long long start_ticks;  /* /proc/PID/stat's start time: which process of that pid */
    bool has_rank;
    long rank;
    double start_time, update_time, interval;
    bool stale;                      /* not updated for two intervals while the process lives */
    int64_t live_bytes, peak_live_bytes, held_bytes;
    uint64_t reserved, allocated;
    bool has_largest, has_frag;
    uint64_t largest;
    double frag;
    int64_t class_bytes[4];          /* user, cache, library, workspace */
    bool has_class[4];
    unsigned long marks;
    char last_label[64];
    /* CUDA IPC: other processes' memory mapped here (summary), and per
     * importing device; has_ipc false for files written before they were. */
    bool has_ipc;
    uint64_t ipc_mapped_bytes, ipc_mappings;
    size_t nipc;
    struct live_ipc_device ipc[LIVE_MAX_DEVICES];
    size_t ndevices, nowners, npools, ngrowth, nbudgets;
    struct live_device devices[LIVE_MAX_DEVICES];
    struct live_owner *owners;
    /* Each owner's live bytes per device; has_owner_devices false when the
     * file does not say (an older library, or not attributed). */
    bool has_owner_devices;
    size_t nowner_devices;
    struct live_owner *owner_devices;
    struct live_pool *pools;
    struct live_growth *growth;
    struct live_budget *budgets;
};
extern const char *const live_class_names[4];

struct live_set {
    struct live_proc *procs;
    size_t n;
    size_t refused;      /* entries skipped: bad owner/mode/size/content */
    size_t dead;         /* entries of processes that are gone */
    char first_refusal[256];
};

/* Parses one live document (`text`, `len` bytes); 0, or -1 with `why`
 * filled.  Strings are copied with control bytes replaced by '?'. */
int live_parse(const char *text, size_t len, struct live_proc *p, char *why, size_t whylen);
/* Reads every entry of `dir` (refusing wrong owners, modes, sizes and
 * contents; dropping dead processes, and removing their files when
 * `remove_dead`).  -1 when the directory itself is unusable (`why`). */
int live_read_dir(const char *dir, bool remove_dead, struct live_set *out, char *why, size_t whylen);
/* The directory to read: `override` (--dir) when given, else as the
 * publisher chooses it from the environment. */
int live_default_dir(char *out, size_t len, const char *override);
/* Whether to read every user's live directory: for root, unless --dir or
 * TENSORLEAK_LIVE_DIR names one. */
bool live_all_users(const char *override);
/* Every user's per-user directory (/run/user/UID/tensorleak,
 * /tmp/tensorleak-UID and its fallbacks /tmp/tensorleak-UID.XXXXXX), each
 * owned by the user its name says, each entry of that user's own process; a
 * directory of the wrong owner or mode counts as refused. */
int live_read_all(bool remove_dead, struct live_set *out, char *why, size_t whylen);
/* live_read_dir(dir), or live_read_all when dir is NULL; the reader's own
 * /tmp/tensorleak-UID with its fallbacks (an error only when none can be
 * read). */
int live_read_source(const char *dir, bool remove_dead, struct live_set *out, char *why, size_t whylen);
void live_proc_free(struct live_proc *p);
void live_set_free(struct live_set *s);
/* The whole process, or a device of it: held by caches, libraries and
 * workspaces (the owner classes that hold memory). */
int64_t live_held_by_owners(const struct live_proc *p);

/* The commands that read them (cmd_top.c, cmd_exporter.c). */
int cmd_top(int argc, char **argv);
int cmd_exporter(int argc, char **argv);
/* The Prometheus text exposition of `s` (cmd_exporter.c). */
void exporter_write_metrics(FILE *out, const struct live_set *s);

#endif
