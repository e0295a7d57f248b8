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
#include "model.h"
#include "report_fields.h"

#include "tl_version.h"

#include <arpa/inet.h>
#include <stddef.h>
#include <errno.h>
#include <getopt.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
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
    put_escaped(out, live_process(p));
    fputc('"', out);
    if (TL_HAS(&p->model, REPORT, rank))
        fprintf(out, ",rank=\"%lld\"", p->model.rank);
}

/* Whether row i of a process repeats an earlier row's label set (two
 * pools given one name): Prometheus refuses a scrape with a duplicate
 * series, so only the first is shown. */
static const char *pool_framework(const struct tl_pool *q)
{
    return live_text(q->framework.name, "");
}

static bool pool_repeats(const struct live_proc *p, size_t i)
{
    const struct tl_pool *q = &p->model.pools[i];
    for (size_t k = 0; k < i; k++) {
        const struct tl_pool *o = &p->model.pools[k];
        if (o->device == q->device && !strcmp(live_text(o->name, "unknown"), live_text(q->name, "unknown")) &&
            !strcmp(live_text(o->kind, "unknown"), live_text(q->kind, "unknown")) &&
            !strcmp(pool_framework(o), pool_framework(q)))
            return true;
    }
    return false;
}

static bool owner_device_repeats(const struct live_proc *p, size_t i)
{
    const struct tl_owner_device *w = &p->model.owner_devices[i];
    for (size_t k = 0; k < i; k++) {
        const struct tl_owner_device *o = &p->model.owner_devices[k];
        if (o->device == w->device && !strcmp(live_text(o->name, "unknown"), live_text(w->name, "unknown")) &&
            !strcmp(live_text(o->cls, "unknown"), live_text(w->cls, "unknown")))
            return true;
    }
    return false;
}

static bool growth_repeats(const struct live_proc *p, size_t i)
{
    for (size_t k = 0; k < i; k++)
        if (!strcmp(live_growth_scope(&p->model.growth[k]), live_growth_scope(&p->model.growth[i])) &&
            !strcmp(live_text(p->doc.growth[k].site, "unknown"), live_text(p->doc.growth[i].site, "unknown")))
            return true;
    return false;
}

/* A metric's figure: a field of the rows its series come from (the
 * process's summary, live state or marks, or one of its devices, pools,
 * owners, growth rows, budgets or IPC devices), named as the field tables
 * name it, and how it is written.  A figure the file does not give has no
 * series (never 0), unless `always`: a figure every file the library
 * writes holds (a hand-made file without it reads 0). */
enum figure_format { FIG_PLAIN, FIG_TIME, FIG_RATIO };
struct figure {
    const char *field;
    enum figure_format format;
    bool always;
};

struct metric;
/* The series of a metric for one process: one per row of its kind. */
typedef void series_fn(FILE *out, const struct metric *m, const struct live_proc *p);
struct metric {
    const char *name, *type, *help;
    series_fn *series;
    struct figure figure;
    const char *word; /* pools: what `top`'s detail view calls it (live_pool_words); NULL: not shown there */
};

static const struct tl_field *field_of(const struct tl_table *t, const char *name)
{
    for (size_t i = 0; i < t->nfields; i++)
        if (!strcmp(t->fields[i].name, name))
            return &t->fields[i];
    return NULL;
}

static bool figure_known(const struct figure *f, const struct tl_table *t, const void *row)
{
    return f->always || live_has(t, row, f->field);
}

/* " VALUE\n" after a series' labels: the field as its table types it. */
static void put_value(FILE *out, const struct figure *f, const struct tl_table *t, const void *row)
{
    const struct tl_field *field = field_of(t, f->field);
    const char *at = (const char *)row + field->offset;
    switch (field->type) {
    case TL_FIELD_U64: fprintf(out, " %llu\n", (unsigned long long)*(const uint64_t *)at); break;
    case TL_FIELD_INT: fprintf(out, " %lld\n", *(const long long *)at); break;
    case TL_FIELD_BOOL: fputs(*(const bool *)at ? " 1\n" : " 0\n", out); break;
    case TL_FIELD_REAL: fprintf(out, f->format == FIG_TIME ? " %.3f\n" : " %.6g\n", *(const double *)at); break;
    default: fputs(" NaN\n", out); break; /* no metric names a field of another type */
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
    put_label(out, "version", live_text(p->model.version, "unknown"));
    fputs("} 1\n", out);
}

/* One series of the process: field m->figure of `row`, a row of `t`. */
static void one_series(FILE *out, const struct metric *m, const struct live_proc *p, const struct tl_table *t,
                       const void *row)
{
    if (!figure_known(&m->figure, t, row))
        return;
    sample_start(out, m, p);
    fputc('}', out);
    put_value(out, &m->figure, t, row);
}

static void state_series(FILE *out, const struct metric *m, const struct live_proc *p)
{
    one_series(out, m, p, &live_state_table, &p->doc.live);
}

static void summary_series(FILE *out, const struct metric *m, const struct live_proc *p)
{
    one_series(out, m, p, &tl_summary_table, &p->model.summary);
}

static void marks_series(FILE *out, const struct metric *m, const struct live_proc *p)
{
    one_series(out, m, p, &live_marks_table, &p->doc.marks);
}

/* Absent, not 0, where the file does not say. */
static void ipc_summary_series(FILE *out, const struct metric *m, const struct live_proc *p)
{
    if (live_has_ipc(p))
        summary_series(out, m, p);
}

static void device_series(FILE *out, const struct metric *m, const struct live_proc *p)
{
    const struct tl_table *t = report_field_table(&tl_report_table, "devices");
    for (size_t d = 0; d < p->model.device_count; d++) {
        const struct tl_device *r = &p->model.devices[d];
        if (!figure_known(&m->figure, t, r))
            continue;
        sample_start(out, m, p);
        fprintf(out, ",device=\"%lld\"", r->device);
        if (r->uuid) /* joins DCGM's UUID label */
            fprintf(out, ",gpu_uuid=\"%s\"", r->uuid);
        fputc('}', out);
        put_value(out, &m->figure, t, r);
    }
}

static void pool_series(FILE *out, const struct metric *m, const struct live_proc *p)
{
    const struct tl_table *t = report_field_table(&tl_report_table, "pools");
    for (size_t i = 0; i < p->model.pool_count; i++) {
        const struct tl_pool *q = &p->model.pools[i];
        if (pool_repeats(p, i) || !figure_known(&m->figure, t, q))
            continue;
        sample_start(out, m, p);
        fprintf(out, ",device=\"%lld\"", q->device);
        put_label(out, "pool", live_text(q->name, "unknown"));
        put_label(out, "kind", live_text(q->kind, "unknown"));
        put_label(out, "framework", pool_framework(q));
        fputc('}', out);
        put_value(out, &m->figure, t, q);
    }
}

/* One series per device, owner and class; a file that does not say where
 * the owners' memory is (an older library's) gives the process-wide rows
 * without a device label. */
static void owner_series(FILE *out, const struct metric *m, const struct live_proc *p)
{
    if (!live_has_owner_devices(p)) {
        const struct tl_table *t = report_field_table(&tl_report_table, "owners");
        for (size_t i = 0; i < p->model.owner_count; i++) {
            const struct tl_owner *w = &p->model.owners[i];
            sample_start(out, m, p);
            put_label(out, "owner", live_text(w->name, "unknown"));
            put_label(out, "class", live_text(w->cls, "unknown"));
            fputc('}', out);
            put_value(out, &m->figure, t, w);
        }
        return;
    }
    const struct tl_table *t = report_field_table(&tl_report_table, "owners_by_device");
    for (size_t i = 0; i < p->model.owner_device_count; i++) {
        const struct tl_owner_device *w = &p->model.owner_devices[i];
        if (owner_device_repeats(p, i))
            continue;
        sample_start(out, m, p);
        if (w->device < 0)
            fputs(",device=\"host\"", out);
        else
            fprintf(out, ",device=\"%lld\"", w->device);
        put_label(out, "owner", live_text(w->name, "unknown"));
        put_label(out, "class", live_text(w->cls, "unknown"));
        fputc('}', out);
        put_value(out, &m->figure, t, w);
    }
}

static void growth_series(FILE *out, const struct metric *m, const struct live_proc *p)
{
    const struct tl_table *t = report_field_table(&tl_report_table, "growth");
    for (size_t i = 0; i < p->model.growth_count; i++) {
        if (growth_repeats(p, i))
            continue;
        sample_start(out, m, p);
        put_label(out, "scope", live_growth_scope(&p->model.growth[i]));
        put_label(out, "site", live_text(p->doc.growth[i].site, "unknown"));
        fputc('}', out);
        put_value(out, &m->figure, t, &p->model.growth[i]);
    }
}

static void budget_series(FILE *out, const struct metric *m, const struct live_proc *p)
{
    for (size_t i = 0; i < p->doc.nbudgets; i++) {
        const struct live_budget_row *b = &p->doc.budgets[i];
        sample_start(out, m, p);
        fprintf(out, ",device=\"%lld\"", b->device);
        put_label(out, "class", live_text(b->cls, "device"));
        fputc('}', out);
        put_value(out, &m->figure, &live_budget_table, b);
    }
}

static void ipc_device_series(FILE *out, const struct metric *m, const struct live_proc *p)
{
    for (size_t i = 0; live_has_ipc(p) && i < p->doc.ipc.ndevices; i++) {
        sample_start(out, m, p);
        fprintf(out, ",device=\"%lld\"}", p->doc.ipc.devices[i].device);
        put_value(out, &m->figure, &live_ipc_table, &p->doc.ipc.devices[i]);
    }
}

#define ALWAYS(series, field, format) series, {field, FIG_##format, true}, NULL
#define KNOWN(series, field, format) series, {field, FIG_##format, false}, NULL
/* A pool's figure that `top`'s detail view shows too, as `word`. */
#define ALWAYS_AS(word, series, field, format) series, {field, FIG_##format, true}, word
#define KNOWN_AS(word, series, field, format) series, {field, FIG_##format, false}, word

/* Every metric, in the order of the exposition: its name, type and help
 * (a contract: add, never rename; docs/live.md) and the field it shows. */
static const struct metric metrics[] = {
    {"tensorleak_process_info", "gauge", "A process tracked by tensorleak (always 1); its labels name it.", info_series,
     {0}, NULL},
    {"tensorleak_live_update_timestamp_seconds", "gauge", "When the process last wrote its live state (Unix time).",
     ALWAYS(state_series, "update_time", TIME)},
    {"tensorleak_device_reserved_bytes", "gauge",
     "Device memory the process holds from the driver (pools' reserves included).",
     ALWAYS(device_series, "reserved_bytes", PLAIN)},
    {"tensorleak_device_allocated_bytes", "gauge", "Of the reserved bytes, what the program's allocations use.",
     ALWAYS(device_series, "allocated_bytes", PLAIN)},
    {"tensorleak_device_gap_bytes", "gauge", "Reserved minus allocated: held by caches, free inside them.",
     ALWAYS(device_series, "gap_bytes", PLAIN)},
    {"tensorleak_device_free_bytes", "gauge", "Free device memory as the driver last said (cuMemGetInfo).",
     KNOWN(device_series, "free", PLAIN)},
    {"tensorleak_device_total_bytes", "gauge", "Total device memory as the driver last said (cuMemGetInfo).",
     KNOWN(device_series, "total", PLAIN)},
    {"tensorleak_owner_live_bytes", "gauge",
     "Live bytes of each owner and its class on a device (device=\"host\": pinned and registered host memory).",
     ALWAYS(owner_series, "live_bytes", PLAIN)},
    {"tensorleak_peak_live_bytes", "gauge", "The most live bytes the process ever held.",
     ALWAYS(summary_series, "peak_live_bytes", PLAIN)},
    {"tensorleak_pool_reserved_bytes", "gauge", "Bytes a pool holds.",
     ALWAYS_AS("reserved", pool_series, "reserved_bytes", PLAIN)},
    {"tensorleak_pool_allocated_bytes", "gauge", "Bytes of a pool in use.",
     ALWAYS_AS("allocated", pool_series, "allocated_bytes", PLAIN)},
    {"tensorleak_pool_largest_free_block_bytes", "gauge", "A pool's largest free block; absent when unknown.",
     KNOWN(pool_series, "largest_free_block", PLAIN)},
    {"tensorleak_pool_fragmentation_ratio", "gauge",
     "1 - largest free block / free bytes of a pool; absent when unknown.",
     KNOWN_AS("frag", pool_series, "fragmentation", RATIO)},
    {"tensorleak_growth_bytes_per_mark", "gauge", "Bytes a flagged growth row gains per mark (request).",
     ALWAYS(growth_series, "bytes_per_mark", PLAIN)},
    {"tensorleak_marks_total", "counter", "Marks (requests) the process has made.",
     ALWAYS(marks_series, "count", PLAIN)},
    {"tensorleak_budget_bytes", "gauge", "A memory budget (TENSORLEAK_BUDGET) per device and class.",
     ALWAYS(budget_series, "bytes", PLAIN)},
    {"tensorleak_budget_exceeded", "gauge", "1 while the budget is crossed, else 0.",
     ALWAYS(budget_series, "exceeded", PLAIN)},
    {"tensorleak_ipc_mapped_bytes", "gauge",
     "Other processes' device memory mapped here (CUDA IPC), per importing device; the exporting process counts it.",
     ALWAYS(ipc_device_series, "mapped_bytes", PLAIN)},
    {"tensorleak_ipc_mappings", "gauge", "Open CUDA IPC mappings of other processes' memory.",
     ALWAYS(ipc_summary_series, "ipc_mappings", PLAIN)},
};

void live_pool_words(char *out, size_t len, const struct tl_pool *q, live_size_fn *size)
{
    const struct tl_table *t = report_field_table(&tl_report_table, "pools");
    size_t n = 0;
    out[0] = 0;
    for (size_t i = 0; i < sizeof metrics / sizeof metrics[0] && n < len; i++) {
        const struct metric *m = &metrics[i];
        if (m->series != pool_series || !m->word)
            continue;
        const struct tl_field *f = field_of(t, m->figure.field);
        const char *at = (const char *)q + f->offset;
        char v[32] = "unknown";
        bool known = figure_known(&m->figure, t, q);
        if (known && f->type == TL_FIELD_REAL)
            snprintf(v, sizeof v, "%.2f", *(const double *)at);
        else if (known)
            size(v, sizeof v, *(const uint64_t *)at);
        int w = snprintf(out + n, len - n, "%s%s %s", n ? " " : "", m->word, v);
        n += w > 0 ? (size_t)w : 0;
    }
}

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
 * request is being answered is never displaced, nor one whose complete
 * header waits unread in its socket: that wait is this server's (its
 * threads not yet run), not the client's, and a loaded machine can accept
 * dozens of a peer's connections before it reads one that came first.
 * For the same reason the listening socket defers accepting a connection
 * until its first bytes arrive (TCP_DEFER_ACCEPT, about DEFER_ACCEPT_S at
 * most): a client descheduled between its connect and its request is not
 * charged for that time, and an idle connection holds no slot meanwhile.
 *
 * A connection is closed by shutdown(2) of its socket, which libmicrohttpd
 * sees as the peer's end and closes itself.  libmicrohttpd tells us a
 * connection is closed (MHD_CONNECTION_NOTIFY_CLOSED) before it closes the
 * socket, and that callback takes `admission.lock`, so a socket shut down
 * under the lock is never a later connection's that reused the number.
 */
#define HEADER_DEADLINE_S 5.0
#define DEFER_ACCEPT_S 1
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
    bool header_unread;     /* within one admit(): its complete header waits unread */
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
        if (a == except || a->closing || a->answering || a->header_unread ||
            (peer && memcmp(a->peer, peer, 16) != 0))
            continue;
        if (!best || a->waiting_since < best->waiting_since)
            best = a;
    }
    return best;
}

/* Whether a complete request header (its blank line) waits in `a`'s
 * socket, not yet read by libmicrohttpd.  Only the first HEADER_PEEK bytes
 * are looked at: a scraper's header is a few hundred. */
#define HEADER_PEEK 4096
static bool header_waits_unread(const struct admitted *a)
{
    int unread = 0;
    if (ioctl(a->fd, FIONREAD, &unread) != 0 || unread < 4)
        return false;
    char buf[HEADER_PEEK];
    ssize_t n = recv(a->fd, buf, sizeof buf, MSG_PEEK | MSG_DONTWAIT);
    return n >= 4 && memmem(buf, (size_t)n, "\r\n\r\n", 4) != NULL;
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
        const unsigned char *of = peer > PEER_LIMIT ? fresh->peer : NULL;
        struct admitted *old;
        while ((old = longest_waiting(of, fresh)) && header_waits_unread(old))
            old->header_unread = true;
        for (size_t i = 0; i < admission.n; i++)
            admission.conns[i]->header_unread = false;
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

/* Asks the kernel to hand over a connection once its first bytes arrive
 * (or DEFER_ACCEPT_S after its connect); false with errno where it cannot. */
static bool defer_accept(struct MHD_Daemon *d)
{
#ifdef TCP_DEFER_ACCEPT
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_LISTEN_FD);
    int seconds = DEFER_ACCEPT_S;
    if (!info) {
        errno = EBADF;
        return false;
    }
    return setsockopt(info->listen_fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &seconds, sizeof seconds) == 0;
#else
    (void)d;
    errno = ENOPROTOOPT;
    return false;
#endif
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
    /* Before the port is announced: a client that connects on reading it
     * must find the listening socket as it stays (connections accepted
     * before the option is set are admitted idle, and the first to be
     * displaced). */
    if (!defer_accept(d))
        fprintf(stderr, "tensorleak exporter: connections are admitted before their first bytes arrive: %s\n",
                strerror(errno));
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
