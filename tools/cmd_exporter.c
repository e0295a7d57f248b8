/*
 * cmd_exporter.c — `tensorleak exporter`: the live state of every tracked
 * process as Prometheus text exposition (format 0.0.4), over HTTP
 * (libmicrohttpd; GET /metrics, 404 elsewhere) or as a file for
 * node_exporter's textfile collector (--textfile DIR: DIR/tensorleak.prom,
 * written atomically).
 *
 * Metric and label names are a contract: add, never rename (docs/live.md).
 * Labels: pid, process (the executable's name, never its arguments),
 * device, rank where set.  A figure tensorleak does not know is absent,
 * never 0.  Each scrape reads the live directory afresh.
 *
 * The HTTP server must keep answering scrapes while clients that never
 * finish a request hold connections (slowloris): see "Admission" below.
 */
#include "cli.h"
#include "live_read.h"

#include "tl_version.h"

#include <arpa/inet.h>
#include <stddef.h>
#include <errno.h>
#include <getopt.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* Neither DCGM exporter's 9400 nor node_exporter's 9100. */
#define EXPORTER_DEFAULT_PORT 9478

static void put_escaped(FILE *out, const char *s)
{
    for (; *s; s++) {
        if (*s == '\\' || *s == '"')
            fputc('\\', out), fputc(*s, out);
        else if (*s == '\n')
            fputs("\\n", out);
        else
            fputc(*s, out);
    }
}

/* The labels every series of a process carries. */
static void proc_labels(FILE *out, const struct live_proc *p)
{
    fprintf(out, "pid=\"%d\",process=\"", p->pid);
    put_escaped(out, p->process);
    fputc('"', out);
    if (p->has_rank)
        fprintf(out, ",rank=\"%ld\"", p->rank);
}

/* Whether row i of a process repeats an earlier row's label set (two
 * pools given one name): Prometheus refuses a scrape with a duplicate
 * series, so only the first is shown. */
static bool pool_repeats(const struct live_proc *p, size_t i)
{
    for (size_t k = 0; k < i; k++)
        if (p->pools[k].device == p->pools[i].device && !strcmp(p->pools[k].name, p->pools[i].name) &&
            !strcmp(p->pools[k].kind, p->pools[i].kind) && !strcmp(p->pools[k].framework, p->pools[i].framework))
            return true;
    return false;
}

static bool owner_device_repeats(const struct live_proc *p, size_t i)
{
    const struct live_owner *w = &p->owner_devices[i];
    for (size_t k = 0; k < i; k++)
        if (p->owner_devices[k].device == w->device && !strcmp(p->owner_devices[k].name, w->name) &&
            !strcmp(p->owner_devices[k].cls, w->cls))
            return true;
    return false;
}

static bool growth_repeats(const struct live_proc *p, size_t i)
{
    for (size_t k = 0; k < i; k++)
        if (!strcmp(p->growth[k].scope, p->growth[i].scope) && !strcmp(p->growth[k].site, p->growth[i].site))
            return true;
    return false;
}

/* A metric's figure: a member of the row its series come from (the
 * process, or one of its devices, pools, owners, growth rows, budgets or
 * IPC devices), how it is written, and the member that says it is known
 * (a figure tensorleak does not know has no series, never 0). */
enum figure_type { FIG_U64, FIG_I64, FIG_ULONG, FIG_BOOL, FIG_TIME, FIG_RATIO };
struct figure {
    size_t offset;
    enum figure_type type;
    size_t known; /* offset + 1 of a bool, 0: always known */
};
#define FIGURE(T, member, type) {offsetof(T, member), FIG_##type, 0}
#define FIGURE_IF(T, member, type, flag) {offsetof(T, member), FIG_##type, offsetof(T, flag) + 1}

struct metric;
/* The series of a metric for one process: one per row of its kind. */
typedef void series_fn(FILE *out, const struct metric *m, const struct live_proc *p);
struct metric {
    const char *name, *type, *help;
    series_fn *series;
    struct figure figure;
};

static bool figure_known(const struct figure *f, const void *row)
{
    return !f->known || *(const bool *)((const char *)row + f->known - 1);
}

/* " VALUE\n" after a series' labels. */
static void put_value(FILE *out, const struct figure *f, const void *row)
{
    const char *at = (const char *)row + f->offset;
    switch (f->type) {
    case FIG_U64: fprintf(out, " %llu\n", (unsigned long long)*(const uint64_t *)at); break;
    case FIG_I64: fprintf(out, " %lld\n", (long long)*(const int64_t *)at); break;
    case FIG_ULONG: fprintf(out, " %lu\n", *(const unsigned long *)at); break;
    case FIG_BOOL: fputs(*(const bool *)at ? " 1\n" : " 0\n", out); break;
    case FIG_TIME: fprintf(out, " %.3f\n", *(const double *)at); break;
    case FIG_RATIO: fprintf(out, " %.6g\n", *(const double *)at); break;
    }
}

static void sample_start(FILE *out, const struct metric *m, const struct live_proc *p)
{
    fprintf(out, "%s{", m->name);
    proc_labels(out, p);
}

/* A label of a series, after the labels before it. */
static void put_label(FILE *out, const char *key, const char *value)
{
    fprintf(out, ",%s=\"", key);
    put_escaped(out, value);
    fputc('"', out);
}

static void info_series(FILE *out, const struct metric *m, const struct live_proc *p)
{
    sample_start(out, m, p);
    put_label(out, "version", p->version);
    fputs("} 1\n", out);
}

static void process_series(FILE *out, const struct metric *m, const struct live_proc *p)
{
    if (!figure_known(&m->figure, p))
        return;
    sample_start(out, m, p);
    fputc('}', out);
    put_value(out, &m->figure, p);
}

static void device_series(FILE *out, const struct metric *m, const struct live_proc *p)
{
    for (size_t d = 0; d < p->ndevices; d++) {
        const struct live_device *r = &p->devices[d];
        if (!figure_known(&m->figure, r))
            continue;
        sample_start(out, m, p);
        fprintf(out, ",device=\"%d\"", r->device);
        if (r->uuid[0]) /* joins DCGM's UUID label */
            fprintf(out, ",gpu_uuid=\"%s\"", r->uuid);
        fputc('}', out);
        put_value(out, &m->figure, r);
    }
}

static void pool_series(FILE *out, const struct metric *m, const struct live_proc *p)
{
    for (size_t i = 0; i < p->npools; i++) {
        const struct live_pool *q = &p->pools[i];
        if (pool_repeats(p, i) || !figure_known(&m->figure, q))
            continue;
        sample_start(out, m, p);
        fprintf(out, ",device=\"%d\"", q->device);
        put_label(out, "pool", q->name);
        put_label(out, "kind", q->kind);
        put_label(out, "framework", q->framework);
        fputc('}', out);
        put_value(out, &m->figure, q);
    }
}

/* One series per device, owner and class; a file that does not say where
 * the owners' memory is (an older library's) gives the process-wide rows
 * without a device label. */
static void owner_series(FILE *out, const struct metric *m, const struct live_proc *p)
{
    bool per_device = p->has_owner_devices;
    size_t n = per_device ? p->nowner_devices : p->nowners;
    for (size_t i = 0; i < n; i++) {
        const struct live_owner *w = per_device ? &p->owner_devices[i] : &p->owners[i];
        if (per_device && owner_device_repeats(p, i))
            continue;
        sample_start(out, m, p);
        if (per_device && w->device < 0)
            fputs(",device=\"host\"", out);
        else if (per_device)
            fprintf(out, ",device=\"%d\"", w->device);
        put_label(out, "owner", w->name);
        put_label(out, "class", w->cls);
        fputc('}', out);
        put_value(out, &m->figure, w);
    }
}

static void growth_series(FILE *out, const struct metric *m, const struct live_proc *p)
{
    for (size_t i = 0; i < p->ngrowth; i++) {
        if (growth_repeats(p, i))
            continue;
        sample_start(out, m, p);
        put_label(out, "scope", p->growth[i].scope);
        put_label(out, "site", p->growth[i].site);
        fputc('}', out);
        put_value(out, &m->figure, &p->growth[i]);
    }
}

static void budget_series(FILE *out, const struct metric *m, const struct live_proc *p)
{
    for (size_t i = 0; i < p->nbudgets; i++) {
        const struct live_budget *b = &p->budgets[i];
        sample_start(out, m, p);
        fprintf(out, ",device=\"%d\"", b->device);
        put_label(out, "class", b->cls);
        fputc('}', out);
        put_value(out, &m->figure, b);
    }
}

/* Absent, not 0, where the file does not say. */
static void ipc_device_series(FILE *out, const struct metric *m, const struct live_proc *p)
{
    for (size_t i = 0; p->has_ipc && i < p->nipc; i++) {
        sample_start(out, m, p);
        fprintf(out, ",device=\"%d\"}", p->ipc[i].device);
        put_value(out, &m->figure, &p->ipc[i]);
    }
}

#define PROC(member, type) process_series, FIGURE(struct live_proc, member, type)
#define DEVICE(member, type) device_series, FIGURE(struct live_device, member, type)
#define DEVICE_IF(member, type, flag) device_series, FIGURE_IF(struct live_device, member, type, flag)
#define POOL(member, type) pool_series, FIGURE(struct live_pool, member, type)
#define POOL_IF(member, type, flag) pool_series, FIGURE_IF(struct live_pool, member, type, flag)

/* Every metric, in the order of the exposition: its name, type and help
 * (a contract: add, never rename; docs/live.md) and its figure. */
static const struct metric metrics[] = {
    {"tensorleak_process_info", "gauge", "A process tracked by tensorleak (always 1); its labels name it.", info_series,
     {0}},
    {"tensorleak_live_update_timestamp_seconds", "gauge", "When the process last wrote its live state (Unix time).",
     PROC(update_time, TIME)},
    {"tensorleak_device_reserved_bytes", "gauge",
     "Device memory the process holds from the driver (pools' reserves included).", DEVICE(reserved, U64)},
    {"tensorleak_device_allocated_bytes", "gauge", "Of the reserved bytes, what the program's allocations use.",
     DEVICE(allocated, U64)},
    {"tensorleak_device_gap_bytes", "gauge", "Reserved minus allocated: held by caches, free inside them.",
     DEVICE(gap, U64)},
    {"tensorleak_device_free_bytes", "gauge", "Free device memory as the driver last said (cuMemGetInfo).",
     DEVICE_IF(free, U64, has_free)},
    {"tensorleak_device_total_bytes", "gauge", "Total device memory as the driver last said (cuMemGetInfo).",
     DEVICE_IF(total, U64, has_total)},
    {"tensorleak_owner_live_bytes", "gauge",
     "Live bytes of each owner and its class on a device (device=\"host\": pinned and registered host memory).",
     owner_series, FIGURE(struct live_owner, live_bytes, I64)},
    {"tensorleak_peak_live_bytes", "gauge", "The most live bytes the process ever held.", PROC(peak_live_bytes, I64)},
    {"tensorleak_pool_reserved_bytes", "gauge", "Bytes a pool holds.", POOL(reserved, U64)},
    {"tensorleak_pool_allocated_bytes", "gauge", "Bytes of a pool in use.", POOL(allocated, U64)},
    {"tensorleak_pool_largest_free_block_bytes", "gauge", "A pool's largest free block; absent when unknown.",
     POOL_IF(largest, U64, has_largest)},
    {"tensorleak_pool_fragmentation_ratio", "gauge",
     "1 - largest free block / free bytes of a pool; absent when unknown.", POOL_IF(frag, RATIO, has_frag)},
    {"tensorleak_growth_bytes_per_mark", "gauge", "Bytes a flagged growth row gains per mark (request).",
     growth_series, FIGURE(struct live_growth, bytes_per_mark, I64)},
    {"tensorleak_marks_total", "counter", "Marks (requests) the process has made.", PROC(marks, ULONG)},
    {"tensorleak_budget_bytes", "gauge", "A memory budget (TENSORLEAK_BUDGET) per device and class.", budget_series,
     FIGURE(struct live_budget, bytes, U64)},
    {"tensorleak_budget_exceeded", "gauge", "1 while the budget is crossed, else 0.", budget_series,
     FIGURE(struct live_budget, exceeded, BOOL)},
    {"tensorleak_ipc_mapped_bytes", "gauge",
     "Other processes' device memory mapped here (CUDA IPC), per importing device; the exporting process counts it.",
     ipc_device_series, FIGURE(struct live_ipc_device, mapped_bytes, U64)},
    {"tensorleak_ipc_mappings", "gauge", "Open CUDA IPC mappings of other processes' memory.",
     process_series, FIGURE_IF(struct live_proc, ipc_mappings, U64, has_ipc)},
};

/* The exposition of every process in `s`, metrics in a fixed order. */
void exporter_write_metrics(FILE *out, const struct live_set *s)
{
    for (size_t f = 0; f < sizeof metrics / sizeof metrics[0]; f++) {
        const struct metric *m = &metrics[f];
        fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", m->name, m->help, m->name, m->type);
        for (size_t i = 0; i < s->n; i++)
            m->series(out, m, &s->procs[i]);
    }
}

/* The exposition of the live directory now, as one malloc'd text. */
static char *metrics_now(const char *dir, size_t *len, char *why, size_t whylen)
{
    struct live_set s;
    if (live_read_source(dir, true, &s, why, whylen) != 0)
        return NULL;
    char *text = NULL;
    FILE *out = open_memstream(&text, len);
    if (out) {
        exporter_write_metrics(out, &s);
        if (fclose(out) != 0) {
            free(text);
            text = NULL;
        }
    }
    live_set_free(&s);
    if (!text)
        snprintf(why, whylen, "out of memory");
    return text;
}

/*
 * Admission.  A connection may hold a slot only while it sends requests
 * promptly: it gets HEADER_DEADLINE_S to send a request's complete header,
 * counted from its accept or from the end of its previous answer
 * (keep-alive), however it trickles the bytes.  A peer (IP address) holds at
 * most PEER_LIMIT connections and all peers together `total_limit`; a
 * connection beyond either limit displaces the connection (of that peer,
 * or of any peer for the total) that has waited longest for a header, so a
 * scraper that sends its request at once is answered even while one peer
 * holds every slot with idle or trickling connections.  A connection whose
 * request is being answered is never displaced.
 *
 * A connection is closed by shutdown(2) of its socket, which libmicrohttpd
 * sees as the peer's end and closes itself.  libmicrohttpd tells us a
 * connection is closed (MHD_CONNECTION_NOTIFY_CLOSED) before it closes the
 * socket, and that callback takes `admission.lock`, so a socket shut down
 * under the lock is never a later connection's that reused the number.
 */
#define HEADER_DEADLINE_S 5.0
#define PEER_LIMIT 32
#define TOTAL_LIMIT 256
/* libmicrohttpd's own limit is higher: a displaced connection still counts
 * there until its worker thread has closed it. */
#define CLOSING_SLACK 64
/* Descriptors kept for the listening socket, the worker threads' epoll
 * and wake-up descriptors, stdio and the live files a scrape reads. */
#define RESERVED_FDS 48

struct admitted {
    int fd;
    unsigned char peer[16]; /* IPv4 as ::ffff:a.b.c.d */
    double waiting_since;   /* CLOCK_MONOTONIC; while !answering */
    bool answering;         /* from the complete header to the end of the answer */
    bool closing;           /* shut down by admission: holds no slot */
};

static struct {
    pthread_mutex_t lock;
    struct admitted **conns;
    size_t n, total_limit;
} admission = { .lock = PTHREAD_MUTEX_INITIALIZER };

static double monotonic_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void peer_key(const struct sockaddr *sa, unsigned char key[16])
{
    memset(key, 0, 16);
    if (sa && sa->sa_family == AF_INET6) {
        memcpy(key, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
    } else if (sa && sa->sa_family == AF_INET) {
        key[10] = key[11] = 0xff;
        memcpy(key + 12, &((const struct sockaddr_in *)sa)->sin_addr, 4);
    }
}

/* Closes `a` (the caller holds the lock). */
static void close_admitted(struct admitted *a)
{
    a->closing = true;
    shutdown(a->fd, SHUT_RDWR);
}

/* The connection that has waited longest for a header, of `peer` (NULL:
 * any peer), other than `except`; NULL when every one is being answered. */
static struct admitted *longest_waiting(const unsigned char *peer, const struct admitted *except)
{
    struct admitted *best = NULL;
    for (size_t i = 0; i < admission.n; i++) {
        struct admitted *a = admission.conns[i];
        if (a == except || a->closing || a->answering || (peer && memcmp(a->peer, peer, 16) != 0))
            continue;
        if (!best || a->waiting_since < best->waiting_since)
            best = a;
    }
    return best;
}

/* Makes room for `fresh` (just added) within the limits. */
static void admit(struct admitted *fresh)
{
    size_t peer = 0, total = 0;
    for (size_t i = 0; i < admission.n; i++) {
        const struct admitted *a = admission.conns[i];
        if (a->closing)
            continue;
        total++;
        peer += memcmp(a->peer, fresh->peer, 16) == 0;
    }
    if (peer > PEER_LIMIT || total > admission.total_limit) {
        struct admitted *old = longest_waiting(peer > PEER_LIMIT ? fresh->peer : NULL, fresh);
        close_admitted(old ? old : fresh);
    }
}

static void connection_event(void *cls, struct MHD_Connection *conn, void **socket_context,
                             enum MHD_ConnectionNotificationCode code)
{
    (void)cls;
    struct admitted *a = *socket_context;
    pthread_mutex_lock(&admission.lock);
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *fd = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        const union MHD_ConnectionInfo *addr = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        a = calloc(1, sizeof *a);
        struct admitted **grown = a && fd ? realloc(admission.conns, (admission.n + 1) * sizeof *grown) : NULL;
        if (grown) {
            admission.conns = grown;
            a->fd = fd->connect_fd;
            peer_key(addr ? addr->client_addr : NULL, a->peer);
            a->waiting_since = monotonic_now();
            admission.conns[admission.n++] = a;
            *socket_context = a;
            admit(a);
        } else { /* out of memory: not served */
            free(a);
            if (fd)
                shutdown(fd->connect_fd, SHUT_RDWR);
        }
    } else if (a) {
        for (size_t i = 0; i < admission.n; i++) {
            if (admission.conns[i] == a) {
                admission.conns[i] = admission.conns[--admission.n];
                break;
            }
        }
        free(a);
        *socket_context = NULL;
    }
    pthread_mutex_unlock(&admission.lock);
}

static struct admitted *admitted_of(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return info ? info->socket_context : NULL;
}

/* The end of an answer: the connection waits for its next request. */
static void request_completed(void *cls, struct MHD_Connection *conn, void **state,
                              enum MHD_RequestTerminationCode code)
{
    (void)cls, (void)state, (void)code;
    pthread_mutex_lock(&admission.lock);
    struct admitted *a = admitted_of(conn);
    if (a) {
        a->answering = false;
        a->waiting_since = monotonic_now();
    }
    pthread_mutex_unlock(&admission.lock);
}

/* Closes every connection that has waited HEADER_DEADLINE_S for a header. */
static void close_overdue(void)
{
    double now = monotonic_now();
    pthread_mutex_lock(&admission.lock);
    for (size_t i = 0; i < admission.n; i++) {
        struct admitted *a = admission.conns[i];
        if (!a->closing && !a->answering && now - a->waiting_since >= HEADER_DEADLINE_S)
            close_admitted(a);
    }
    pthread_mutex_unlock(&admission.lock);
}

/* libmicrohttpd's messages, at most one a second: a hostile client can make
 * one per connection. */
static void server_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static double last = -1;
    pthread_mutex_lock(&lock);
    double now = monotonic_now();
    if (last < 0 || now - last >= 1.0) {
        last = now;
        fputs("tensorleak exporter: ", stderr);
        vfprintf(stderr, fmt, ap);
        fflush(stderr);
    }
    pthread_mutex_unlock(&lock);
}

/* libmicrohttpd's connection limit: TOTAL_LIMIT plus CLOSING_SLACK, less
 * where the descriptor limit (RLIMIT_NOFILE) does not allow as many. */
static unsigned server_connection_limit(void)
{
    struct rlimit rl;
    rlim_t want = TOTAL_LIMIT + CLOSING_SLACK + RESERVED_FDS;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < want && rl.rlim_max != rl.rlim_cur) {
        rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want ? want : rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= want)
        return TOTAL_LIMIT + CLOSING_SLACK;
    return rl.rlim_cur > RESERVED_FDS + 8 ? (unsigned)(rl.rlim_cur - RESERVED_FDS) : 8;
}

static enum MHD_Result answer(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                              const char *version, const char *upload, size_t *upload_len, void **state)
{
    (void)version, (void)upload;
    const char *dir = cls;
    static char request_seen;
    bool get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
    if (!*state) { /* the first call: the header is complete */
        *state = &request_seen;
        pthread_mutex_lock(&admission.lock);
        struct admitted *a = admitted_of(conn);
        if (a)
            a->answering = true;
        pthread_mutex_unlock(&admission.lock);
        /* libmicrohttpd closes the connection after an answer queued
         * before the request's end (its body) was read: a GET is answered
         * at the next call, so the connection stays open for the next
         * request (keep-alive, pipelining). */
        if (get)
            return MHD_YES;
    } else if (*upload_len) { /* a GET with a body: not served */
        return MHD_NO;
    }
    struct MHD_Response *r;
    unsigned status;
    if (!get) {
        static const char msg[] = "only GET\n";
        r = MHD_create_response_from_buffer(sizeof msg - 1, (void *)msg, MHD_RESPMEM_PERSISTENT);
        status = MHD_HTTP_METHOD_NOT_ALLOWED;
    } else if (strcmp(url, "/metrics") != 0) {
        static const char msg[] = "not found; the metrics are at /metrics\n";
        r = MHD_create_response_from_buffer(sizeof msg - 1, (void *)msg, MHD_RESPMEM_PERSISTENT);
        status = MHD_HTTP_NOT_FOUND;
    } else {
        size_t len = 0;
        char why[512];
        char *text = metrics_now(dir, &len, why, sizeof why);
        if (text) {
            r = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
            status = MHD_HTTP_OK;
            if (r)
                MHD_add_response_header(r, "Content-Type", "text/plain; version=0.0.4; charset=utf-8");
        } else {
            char *msg = NULL;
            if (asprintf(&msg, "live directory unusable: %s\n", why) < 0)
                msg = NULL;
            r = msg ? MHD_create_response_from_buffer(strlen(msg), msg, MHD_RESPMEM_MUST_FREE) : NULL;
            status = MHD_HTTP_SERVICE_UNAVAILABLE;
        }
    }
    if (!r)
        return MHD_NO;
    enum MHD_Result rc = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return rc;
}

/* HOST:PORT, [V6]:PORT or PORT (loopback). */
static bool parse_listen(const char *s, struct sockaddr_storage *ss, socklen_t *len)
{
    char host[128] = "127.0.0.1";
    const char *port = s;
    const char *colon = strrchr(s, ':');
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (!close || close[1] != ':' || (size_t)(close - s - 1) >= sizeof host)
            return false;
        memcpy(host, s + 1, (size_t)(close - s - 1));
        host[close - s - 1] = 0;
        port = close + 2;
    } else if (colon) {
        if ((size_t)(colon - s) >= sizeof host)
            return false;
        memcpy(host, s, (size_t)(colon - s));
        host[colon - s] = 0;
        port = colon + 1;
    }
    char *end;
    errno = 0;
    long p = strtol(port, &end, 10);
    if (!*port || *end || errno || p < 0 || p > 65535)
        return false;
    memset(ss, 0, sizeof *ss);
    struct sockaddr_in *v4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)ss;
    if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)p);
        *len = sizeof *v4;
        return true;
    }
    if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)p);
        *len = sizeof *v6;
        return true;
    }
    return false;
}

static bool write_textfile(const char *live_dir, const char *dir)
{
    size_t len = 0;
    char why[512];
    char *text = metrics_now(live_dir, &len, why, sizeof why);
    if (!text) {
        cli_error("exporter: %s", why);
        return false;
    }
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s/tensorleak.prom", dir);
    /* node_exporter reads *.prom only: the temp name is not one. */
    snprintf(tmp, sizeof tmp, "%s/.tensorleak.prom.%d", dir, (int)getpid());
    FILE *f = fopen(tmp, "w");
    bool ok = f && fwrite(text, 1, len, f) == len;
    ok = f && fclose(f) == 0 && ok;
    ok = ok && rename(tmp, path) == 0;
    if (!ok) {
        cli_error("exporter: cannot write %s: %s", path, strerror(errno));
        unlink(tmp);
    }
    free(text);
    return ok;
}

static const char exporter_usage[] =
    "usage: tensorleak exporter [--listen HOST:PORT] [--dir LIVE_DIR]\n"
    "       tensorleak exporter --textfile DIR [--once] [--every SECONDS] [--dir LIVE_DIR]\n";

int cmd_exporter(int argc, char **argv)
{
    static const struct option opts[] = {
        {"listen", required_argument, NULL, 'l'}, {"dir", required_argument, NULL, 'd'},
        {"textfile", required_argument, NULL, 't'}, {"once", no_argument, NULL, '1'},
        {"every", required_argument, NULL, 'e'}, {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0},
    };
    char listen_default[32];
    snprintf(listen_default, sizeof listen_default, "127.0.0.1:%d", EXPORTER_DEFAULT_PORT);
    const char *listen = listen_default, *dir_arg = NULL, *textfile = NULL;
    bool once = false;
    double every = 1.0;
    opterr = 0;
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (c) {
        case 'l': listen = optarg; break;
        case 'd': dir_arg = optarg; break;
        case 't': textfile = optarg; break;
        case '1': once = true; break;
        case 'e': {
            char *end;
            every = strtod(optarg, &end);
            if (!*optarg || *end || !(every >= 0.1 && every <= 86400)) {
                cli_error("exporter: --every wants seconds from 0.1 to 86400, not '%s'", optarg);
                return CLI_EXIT_USAGE;
            }
            break;
        }
        case 'h': fputs(exporter_usage, stdout); return CLI_EXIT_OK;
        default: return cli_option_error("exporter", c, argv);
        }
    }
    if (optind < argc) {
        cli_error("exporter: unexpected argument '%s'\n%s", argv[optind], exporter_usage);
        return CLI_EXIT_USAGE;
    }
    char dir[4096];
    if (live_default_dir(dir, sizeof dir, dir_arg) != 0) {
        cli_error("exporter: the live directory's path is too long");
        return CLI_EXIT_USAGE;
    }
    /* Root exports every user's tracked processes (NULL), unless told a directory. */
    const char *source = live_all_users(dir_arg) ? NULL : dir;
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    if (textfile) {
        for (;;) {
            bool ok = write_textfile(source, textfile);
            if (once)
                return ok ? CLI_EXIT_OK : CLI_EXIT_FAIL;
            struct timespec t = {(time_t)every, (long)((every - (double)(time_t)every) * 1e9)};
            if (sigtimedwait(&stop, NULL, &t) > 0)
                return CLI_EXIT_OK;
        }
    }
    struct sockaddr_storage ss;
    socklen_t slen;
    if (!parse_listen(listen, &ss, &slen)) {
        cli_error("exporter: --listen wants HOST:PORT (an IP address and a port), not '%s'", listen);
        return CLI_EXIT_USAGE;
    }
    /* epoll: no FD_SETSIZE bound on descriptor numbers. */
    unsigned flags = MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_ERROR_LOG | (ss.ss_family == AF_INET6 ? MHD_USE_IPv6 : 0);
    unsigned limit = server_connection_limit();
    admission.total_limit = limit > CLOSING_SLACK + 8 ? limit - CLOSING_SLACK : limit / 2;
    struct MHD_Daemon *d = MHD_start_daemon(
        flags, 0, NULL, NULL, answer, (void *)source, MHD_OPTION_EXTERNAL_LOGGER, server_log, NULL,
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
        MHD_OPTION_THREAD_POOL_SIZE, 4U, MHD_OPTION_CONNECTION_LIMIT, limit,
        /* Also bounds a client that stops reading its answer. */
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)HEADER_DEADLINE_S, MHD_OPTION_NOTIFY_CONNECTION, connection_event,
        NULL, MHD_OPTION_NOTIFY_COMPLETED, request_completed, NULL, MHD_OPTION_END);
    if (!d) {
        cli_error("exporter: cannot listen on %s: %s", listen, strerror(errno));
        return CLI_EXIT_FAIL;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    fprintf(stderr, "tensorleak exporter: serving %s on port %u, reading %s\n", listen, info ? info->port : 0,
            source ? source : "every user's live directory");
    fflush(stderr);
    const struct timespec tick = {0, 250 * 1000 * 1000};
    while (sigtimedwait(&stop, NULL, &tick) < 0)
        close_overdue();
    MHD_stop_daemon(d);
    return CLI_EXIT_OK;
}
