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

#include "live_model.h"
#include "report_fields.h"

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

#define LIVE_TEXT_MAX 256       /* a string longer is cut */

/* One process's live state: the report model (its fields the live file
 * carries, every one type-checked: one of the wrong type is unknown, a row
 * without its figures dropped) and what only the live file has
 * (live_model.h), read with the same tables.  Strings are the model's
 * (model.source), control bytes replaced by '?'. */
struct live_proc {
    char file[300];             /* the entry's path */
    int pid;
    bool stale;                 /* not updated for two intervals while the process lives */
    struct tl_report model;
    struct live_doc doc;        /* doc.growth[i]: model.growth[i]'s own part */
};

/* Whether the file says which memory of other processes is mapped here
 * (CUDA IPC): a file written before it did does not. */
static inline bool live_has_ipc(const struct live_proc *p)
{
    return tl_seen_has(&p->doc.seen, LIVE_F_DOC_ipc);
}
/* Whether it says where the owners' memory is ("owners_by_device"): an
 * older library's file does not. */
static inline bool live_has_owner_devices(const struct live_proc *p)
{
    return TL_HAS(&p->model, REPORT, owners_by_device);
}

/* A string of the file, or what the readers show when it has none. */
static inline const char *live_text(const char *s, const char *dflt)
{
    return s ? s : dflt;
}
static inline const char *live_process(const struct live_proc *p)
{
    return live_text(p->doc.live.process, "unknown");
}
/* A growth row's scope: "call_site" when the row names none. */
static inline const char *live_growth_scope(const struct tl_growth *g)
{
    return live_text(g->scope, "call_site");
}

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
/* A pool's figures as `top`'s detail view words them, from the exporter's
 * metrics that name a word, in their order: "reserved 8.0M allocated 4.0M
 * frag 0.50", "unknown" where the file does not say (cmd_exporter.c). */
typedef void live_size_fn(char *out, size_t len, uint64_t bytes);
void live_pool_words(char *out, size_t len, const struct tl_pool *q, live_size_fn *size);

#endif
