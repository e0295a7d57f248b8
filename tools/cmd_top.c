/*
 * cmd_top.c — `tensorleak top`: every tracked process of the user (of every
 * user for root, from each per-user live directory) from the live state
 * files, refreshed every second in an ncurses view; `--once` prints the
 * table once, `--json` prints it for scripts.
 *
 * One row per process (figures process-wide, over its devices), one line
 * per device: its total and free memory as the driver last told a tracked
 * process, what tracked processes hold, and the rest (other processes,
 * contexts) as "not tracked".  What is not known reads "unknown".
 */
#include "cli.h"
#include "live_read.h"
#include "report_fields.h"

#include <curses.h>
#include <getopt.h>
#include <jansson.h>
#include <locale.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum sort_key { SORT_RESERVED, SORT_ALLOCATED, SORT_GAP, SORT_GROWTH, SORT_PID, SORT_NAME };
static const char *const sort_names[] = {"reserved", "allocated", "gap", "growth", "pid", "name"};

static void size_str(char *out, size_t len, uint64_t b)
{
    static const char units[] = "BKMGT";
    double v = (double)b;
    int u = 0;
    while (v >= 1024.0 && u < 4)
        v /= 1024.0, u++;
    if (u == 0)
        snprintf(out, len, "%lluB", (unsigned long long)b);
    else
        snprintf(out, len, v >= 100 ? "%.0f%c" : "%.1f%c", v, units[u]);
}

static uint64_t top_growth(const struct live_proc *p, long long *since)
{
    uint64_t best = 0;
    *since = -1;
    for (size_t i = 0; i < p->model.growth_count; i++)
        if (p->model.growth[i].bytes_per_mark > best) {
            best = p->model.growth[i].bytes_per_mark;
            *since = p->doc.growth[i].since_mark;
        }
    return best;
}

static enum sort_key sort_by;

static int compare(const void *a, const void *b)
{
    const struct live_proc *x = a, *y = b;
    long long s;
    uint64_t vx = 0, vy = 0;
    const struct tl_summary *sx = &x->model.summary, *sy = &y->model.summary;
    switch (sort_by) {
    case SORT_RESERVED: vx = sx->reserved_bytes, vy = sy->reserved_bytes; break;
    case SORT_ALLOCATED: vx = sx->allocated_bytes, vy = sy->allocated_bytes; break;
    case SORT_GAP: vx = sx->reserved_bytes - sx->allocated_bytes, vy = sy->reserved_bytes - sy->allocated_bytes; break;
    case SORT_GROWTH: vx = top_growth(x, &s), vy = top_growth(y, &s); break;
    case SORT_NAME: {
        int c = strcmp(live_process(x), live_process(y));
        if (c)
            return c;
        break;
    }
    case SORT_PID: break;
    }
    if (vx != vy)
        return vx < vy ? 1 : -1;
    return (x->pid > y->pid) - (x->pid < y->pid);
}

static void devices_of(const struct live_proc *p, char *out, size_t len)
{
    size_t o = 0;
    out[0] = 0;
    for (size_t d = 0; d < p->model.device_count && o + 4 < len; d++)
        o += (size_t)snprintf(out + o, len - o, "%s%lld", d ? "+" : "", p->model.devices[d].device);
    if (!p->model.device_count)
        snprintf(out, len, "-");
}

static void budget_str(const struct live_proc *p, char *out, size_t len)
{
    double worst = -1;
    bool over = false;
    for (size_t i = 0; i < p->doc.nbudgets; i++) {
        double use = p->doc.budgets[i].bytes ? (double)p->doc.budgets[i].used_bytes / (double)p->doc.budgets[i].bytes : 0;
        if (use > worst)
            worst = use;
        over |= p->doc.budgets[i].exceeded;
    }
    if (worst < 0)
        snprintf(out, len, "-");
    else
        snprintf(out, len, "%.0f%%%s", worst * 100.0, over ? "!" : "");
}

/* The column header and one row per process; `wide` adds the columns that
 * do not fit in 80. */
static int format_header(char *out, size_t len, bool wide)
{
    return snprintf(out, len, "%-7s %-12s %-3s %7s %7s %7s %7s %7s %8s %-5s%s", "PID", "NAME", "GPU", "RESERVD", "ALLOC",
                    "GAP", "HELD", "USER", "GROW/MK", "FRAG", wide ? "  SINCE   LARGEST  BUDGET" : "");
}

static void format_row(char *out, size_t len, const struct live_proc *p, bool wide)
{
    char gpu[16], res[16], alloc[16], gap[16], held[16], user[16], grow[16], frag[16], since_s[16], largest[16], budget[16];
    const struct tl_summary *sum = &p->model.summary;
    devices_of(p, gpu, sizeof gpu);
    size_str(res, sizeof res, sum->reserved_bytes);
    size_str(alloc, sizeof alloc, sum->allocated_bytes);
    size_str(gap, sizeof gap, sum->reserved_bytes >= sum->allocated_bytes ? sum->reserved_bytes - sum->allocated_bytes : 0);
    size_str(held, sizeof held, (uint64_t)live_held_by_owners(p));
    if (tl_seen_has(&p->doc.classes.seen, LIVE_CLASS_USER))
        size_str(user, sizeof user, (uint64_t)p->doc.classes.bytes[LIVE_CLASS_USER]);
    else
        snprintf(user, sizeof user, "unknown");
    long long since;
    uint64_t g = top_growth(p, &since);
    if (g > 0) {
        size_str(grow, sizeof grow, g);
        snprintf(since_s, sizeof since_s, "mark %lld", since);
    } else {
        snprintf(grow, sizeof grow, "-");
        snprintf(since_s, sizeof since_s, "-");
    }
    if (tl_summary_has(sum, fragmentation))
        snprintf(frag, sizeof frag, "%.2f", sum->fragmentation);
    else
        snprintf(frag, sizeof frag, "unkn");
    if (tl_summary_has(sum, largest_free_block))
        size_str(largest, sizeof largest, sum->largest_free_block);
    else
        snprintf(largest, sizeof largest, "unknown");
    budget_str(p, budget, sizeof budget);
    char name[16];
    snprintf(name, sizeof name, "%.12s", live_process(p));
    int n = snprintf(out, len, "%-7d %-12s %-3.3s %7s %7s %7s %7s %7s %8s %-5s", p->pid, name, gpu, res, alloc, gap, held,
                     user, grow, frag);
    if (wide && n > 0 && (size_t)n < len)
        snprintf(out + n, len - (size_t)n, "%s  %-8s %8s  %s", p->stale ? "?" : " ", since_s, largest, budget);
}

/* Per device: total and free as last read (the newest reading among the
 * processes), held by tracked processes, and the rest. */
static int format_devices(char lines[][160], int max, const struct live_set *s)
{
    int n = 0;
    for (int dev = 0; dev < LIVE_MAX_DEVICES && n < max; dev++) {
        bool seen = false, has_total = false, has_free = false;
        uint64_t total = 0, free_b = 0, held = 0;
        double newest = -1;
        for (size_t i = 0; i < s->n; i++)
            for (size_t d = 0; d < s->procs[i].model.device_count; d++) {
                const struct tl_device *r = &s->procs[i].model.devices[d];
                bool r_total = tl_seen_has(&r->seen, TL_F_DEVICE_total);
                if (r->device != dev)
                    continue;
                seen = true;
                held += r->reserved_bytes;
                if (s->procs[i].doc.live.update_time > newest && (r_total || TL_HAS(r, DEVICE, free))) {
                    newest = s->procs[i].doc.live.update_time;
                    has_total = r_total, total = r->total;
                    has_free = TL_HAS(r, DEVICE, free), free_b = r->free;
                }
            }
        if (!seen)
            continue;
        char t[16] = "unknown", f[16] = "unknown", h[16], o[16] = "unknown";
        if (has_total)
            size_str(t, sizeof t, total);
        if (has_free)
            size_str(f, sizeof f, free_b);
        size_str(h, sizeof h, held);
        if (has_total && has_free && total >= free_b + held)
            size_str(o, sizeof o, total - free_b - held);
        snprintf(lines[n++], 160, "GPU %d: total %s, free %s, held by tracked processes %s, not tracked %s", dev, t, f, h, o);
    }
    return n;
}

/* "CUDA IPC: 4.0M of other processes' memory in 1 mapping(s) (gpu 0: 4.0M)",
 * or "" when nothing is mapped: their memory, counted by the exporters. */
static void ipc_line(const struct live_proc *p, char *out, size_t len)
{
    char a[16];
    out[0] = 0;
    if (!live_has_ipc(p) || !p->model.summary.ipc_mappings)
        return;
    size_str(a, sizeof a, p->model.summary.ipc_mapped_bytes);
    int n = snprintf(out, len, "CUDA IPC: %s of other processes' memory in %llu mapping(s)", a,
                     (unsigned long long)p->model.summary.ipc_mappings);
    for (size_t k = 0; k < p->doc.ipc.ndevices && n > 0 && (size_t)n < len; k++) {
        size_str(a, sizeof a, p->doc.ipc.devices[k].mapped_bytes);
        n += snprintf(out + n, len - (size_t)n, "%sgpu %lld: %s", k ? ", " : " (", p->doc.ipc.devices[k].device, a);
    }
    if (p->doc.ipc.ndevices && n > 0 && (size_t)n + 1 < len)
        strcat(out, ")");
}

static void print_once(const struct live_set *s)
{
    char line[256], dev[LIVE_MAX_DEVICES][160];
    int nd = format_devices(dev, LIVE_MAX_DEVICES, s);
    for (int i = 0; i < nd; i++)
        printf("%s\n", dev[i]);
    format_header(line, sizeof line, true);
    printf("%s\n", line);
    for (size_t i = 0; i < s->n; i++) {
        format_row(line, sizeof line, &s->procs[i], true);
        printf("%s\n", line);
    }
    for (size_t i = 0; i < s->n; i++) {
        ipc_line(&s->procs[i], line, sizeof line);
        if (line[0])
            printf("%d %s\n", s->procs[i].pid, line);
    }
}

/* Each process as the model's writer writes it (live_to_json): its live
 * file as read, a figure the reader refused left out, and whether it is
 * stale, the reader's judgement. */
static void print_json(const struct live_set *s)
{
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < s->n; i++) {
        json_t *o = live_to_json(&s->procs[i].model, &s->procs[i].doc);
        if (o && json_object_set_new(o, "stale", json_boolean(s->procs[i].stale)) != 0) {
            json_decref(o);
            o = NULL;
        }
        if (!o || json_array_append_new(arr, o) != 0) {
            json_decref(arr);
            arr = NULL;
        }
    }
    if (!arr) {
        cli_error("top: out of memory");
        return;
    }
    json_dumpf(arr, stdout, JSON_INDENT(1));
    fputc('\n', stdout);
    json_decref(arr);
}

/* ---- the interactive view ------------------------------------------------ */

/* One owner row of the detail view: `where` is "" (process-wide), "host"
 * or "gpu N". */
static void owner_line(char *line, size_t len, const char *where, const char *name, const char *cls, uint64_t bytes)
{
    char a[16];
    size_str(a, sizeof a, bytes);
    snprintf(line, len, "  %-6s %-30.30s %-10s %s", where, live_text(name, "unknown"), live_text(cls, "unknown"), a);
}

static void draw_detail(const struct live_proc *p, int row, int rows, int cols)
{
    char line[512], a[16];
    mvprintw(row++, 0, "%.*s", cols, "");
    attron(A_BOLD);
    mvprintw(row++, 0, "%d %.40s: growing call sites (bytes per mark)", p->pid, live_process(p));
    attroff(A_BOLD);
    for (size_t i = 0; i < p->model.growth_count && row < rows - 1; i++) {
        size_str(a, sizeof a, p->model.growth[i].bytes_per_mark);
        snprintf(line, sizeof line, "  %7s/mk since mark %lld  %s: %s", a, p->doc.growth[i].since_mark,
                 live_growth_scope(&p->model.growth[i]), live_text(p->doc.growth[i].site, "unknown"));
        mvprintw(row++, 0, "%.*s", cols, line);
    }
    if (!p->model.growth_count && row < rows - 1)
        mvprintw(row++, 0, "  none");
    if (row < rows - 1)
        mvprintw(row++, 0, "pools:");
    for (size_t i = 0; i < p->model.pool_count && row < rows - 1; i++) {
        const struct tl_pool *q = &p->model.pools[i];
        char figures[256];
        live_pool_words(figures, sizeof figures, q, size_str);
        snprintf(line, sizeof line, "  %-28.28s %-14.14s gpu %lld %s", live_text(q->name, "unknown"),
                 live_text(q->kind, "unknown"), q->device, figures);
        mvprintw(row++, 0, "%.*s", cols, line);
    }
    ipc_line(p, line, sizeof line);
    if (line[0] && row < rows - 1)
        mvprintw(row++, 0, "%.*s", cols, line);
    /* Per device where the file says it (gpu N, or host for pinned host
     * memory), else process-wide. */
    if (row < rows - 1)
        mvprintw(row++, 0, "owners:");
    size_t nowners = live_has_owner_devices(p) ? p->model.owner_device_count : p->model.owner_count;
    for (size_t i = 0; i < nowners && row < rows - 1; i++) {
        if (live_has_owner_devices(p)) {
            const struct tl_owner_device *w = &p->model.owner_devices[i];
            char where[32] = "host";
            if (w->device >= 0)
                snprintf(where, sizeof where, "gpu %lld", w->device);
            owner_line(line, sizeof line, where, w->name, w->cls, w->live_bytes);
        } else {
            const struct tl_owner *w = &p->model.owners[i];
            owner_line(line, sizeof line, "", w->name, w->cls, w->live_bytes);
        }
        mvprintw(row++, 0, "%.*s", cols, line);
    }
}

static void draw(const struct live_set *s, const char *dir, size_t selected, bool detail, const char *error)
{
    int rows, cols;
    getmaxyx(stdscr, rows, cols);
    erase();
    char line[512], dev[LIVE_MAX_DEVICES][160];
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    char when[16];
    strftime(when, sizeof when, "%H:%M:%S", &tm);
    snprintf(line, sizeof line, "tensorleak top  %s  %zu process(es)  sort: %s  [r a g w p n] sort  [up/down enter] details  [q] quit",
             when, s->n, sort_names[sort_by]);
    mvprintw(0, 0, "%.*s", cols, line);
    int row = 1;
    if (error)
        mvprintw(row++, 0, "%.*s", cols, error);
    int nd = format_devices(dev, LIVE_MAX_DEVICES, s);
    for (int i = 0; i < nd && row < rows - 2; i++)
        mvprintw(row++, 0, "%.*s", cols, dev[i]);
    bool wide = cols >= 110;
    format_header(line, sizeof line, wide);
    attron(A_REVERSE);
    mvprintw(row++, 0, "%-*.*s", cols, cols, line);
    attroff(A_REVERSE);
    int list_rows = detail ? 4 : rows - row - 1;
    size_t first = selected >= (size_t)list_rows && list_rows > 0 ? selected - (size_t)list_rows + 1 : 0;
    for (size_t i = first; i < s->n && row < rows - 1 && (int)(i - first) < list_rows; i++) {
        format_row(line, sizeof line, &s->procs[i], wide);
        if (i == selected)
            attron(A_BOLD | A_UNDERLINE);
        mvprintw(row++, 0, "%.*s", cols, line);
        if (i == selected)
            attroff(A_BOLD | A_UNDERLINE);
    }
    if (!s->n)
        mvprintw(row++, 0, "%.*s", cols, "no tracked process (run one under tensorleak)");
    if (detail && selected < s->n)
        draw_detail(&s->procs[selected], row, rows, cols);
    snprintf(line, sizeof line, "live state: %.*s%s", (int)sizeof line / 2, dir ? dir : "every user's live directory",
             s->refused ? " (entries refused: see --once)" : "");
    mvprintw(rows - 1, 0, "%.*s", cols, line);
    refresh();
}

static int run_view(const char *dir)
{
    if (!isatty(STDOUT_FILENO) || !isatty(STDIN_FILENO)) {
        cli_error("top: not a terminal; use --once or --json");
        return CLI_EXIT_USAGE;
    }
    setlocale(LC_ALL, "");
    initscr();
    cbreak();
    noecho();
    keypad(stdscr, TRUE);
    curs_set(0);
    timeout(1000); /* the refresh: getch returns ERR after a second */
    size_t selected = 0;
    bool detail = false;
    int selected_pid = -1;
    for (;;) {
        struct live_set s;
        char why[512];
        const char *error = NULL;
        if (live_read_source(dir, true, &s, why, sizeof why) != 0)
            error = why;
        qsort(s.procs, s.n, sizeof *s.procs, compare);
        /* The selection follows its process across refreshes. */
        for (size_t i = 0; i < s.n; i++)
            if (s.procs[i].pid == selected_pid)
                selected = i;
        if (selected >= s.n)
            selected = s.n ? s.n - 1 : 0;
        draw(&s, dir, selected, detail, error);
        int ch = getch();
        bool quit = false;
        switch (ch) {
        case 'q': case 'Q': quit = true; break;
        case 'r': sort_by = SORT_RESERVED; break;
        case 'a': sort_by = SORT_ALLOCATED; break;
        case 'g': sort_by = SORT_GAP; break;
        case 'w': sort_by = SORT_GROWTH; break;
        case 'p': sort_by = SORT_PID; break;
        case 'n': sort_by = SORT_NAME; break;
        case KEY_UP: case 'k': if (selected > 0) selected--; break;
        case KEY_DOWN: case 'j': if (selected + 1 < s.n) selected++; break;
        case '\n': case KEY_ENTER: detail = !detail; break;
        case 27: detail = false; break;
        default: break; /* ERR (the second passed), KEY_RESIZE: redraw */
        }
        selected_pid = selected < s.n ? s.procs[selected].pid : -1;
        live_set_free(&s);
        if (quit)
            break;
    }
    endwin();
    return CLI_EXIT_OK;
}

static const char top_usage[] = "usage: tensorleak top [--once | --json] [--sort KEY] [--dir LIVE_DIR]\n"
                                 "  KEY: reserved, allocated, gap, growth, pid, name\n";

int cmd_top(int argc, char **argv)
{
    static const struct option opts[] = {
        {"once", no_argument, NULL, '1'}, {"json", no_argument, NULL, 'j'}, {"dir", required_argument, NULL, 'd'},
        {"sort", required_argument, NULL, 's'}, {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0},
    };
    bool once = false, as_json = false;
    const char *dir_arg = NULL;
    opterr = 0;
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (c) {
        case '1': once = true; break;
        case 'j': as_json = true; break;
        case 'd': dir_arg = optarg; break;
        case 's': {
            size_t k = 0;
            while (k < sizeof sort_names / sizeof sort_names[0] && strcmp(optarg, sort_names[k]) != 0)
                k++;
            if (k == sizeof sort_names / sizeof sort_names[0]) {
                cli_error("top: unknown sort key '%s'\n%s", optarg, top_usage);
                return CLI_EXIT_USAGE;
            }
            sort_by = (enum sort_key)k;
            break;
        }
        case 'h': fputs(top_usage, stdout); return CLI_EXIT_OK;
        default: return cli_option_error("top", c, argv);
        }
    }
    if (optind < argc) {
        cli_error("top: unexpected argument '%s'\n%s", argv[optind], top_usage);
        return CLI_EXIT_USAGE;
    }
    char dir[4096];
    if (live_default_dir(dir, sizeof dir, dir_arg) != 0) {
        cli_error("top: the live directory's path is too long");
        return CLI_EXIT_USAGE;
    }
    /* Root sees every user's tracked processes (dir NULL), unless told a directory. */
    const char *source = live_all_users(dir_arg) ? NULL : dir;
    if (!once && !as_json)
        return run_view(source);
    struct live_set s;
    char why[512];
    if (live_read_source(source, true, &s, why, sizeof why) != 0) {
        cli_error("top: %s", why);
        return CLI_EXIT_USAGE;
    }
    qsort(s.procs, s.n, sizeof *s.procs, compare);
    if (as_json)
        print_json(&s);
    else
        print_once(&s);
    if (s.refused)
        cli_error("top: %zu entr%s refused (first: %s)", s.refused, s.refused == 1 ? "y" : "ies", s.first_refusal);
    live_set_free(&s);
    return CLI_EXIT_OK;
}
