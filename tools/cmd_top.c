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

static int64_t top_growth(const struct live_proc *p, long *since)
{
    int64_t best = 0;
    *since = -1;
    for (size_t i = 0; i < p->ngrowth; i++)
        if (p->growth[i].bytes_per_mark > best) {
            best = p->growth[i].bytes_per_mark;
            *since = p->growth[i].since_mark;
        }
    return best;
}

static enum sort_key sort_by;

static int compare(const void *a, const void *b)
{
    const struct live_proc *x = a, *y = b;
    long s;
    uint64_t vx = 0, vy = 0;
    switch (sort_by) {
    case SORT_RESERVED: vx = x->reserved, vy = y->reserved; break;
    case SORT_ALLOCATED: vx = x->allocated, vy = y->allocated; break;
    case SORT_GAP: vx = x->reserved - x->allocated, vy = y->reserved - y->allocated; break;
    case SORT_GROWTH: vx = (uint64_t)top_growth(x, &s), vy = (uint64_t)top_growth(y, &s); break;
    case SORT_NAME: {
        int c = strcmp(x->process, y->process);
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
    for (size_t d = 0; d < p->ndevices && o + 4 < len; d++)
        o += (size_t)snprintf(out + o, len - o, "%s%d", d ? "+" : "", p->devices[d].device);
    if (!p->ndevices)
        snprintf(out, len, "-");
}

static void budget_str(const struct live_proc *p, char *out, size_t len)
{
    double worst = -1;
    bool over = false;
    for (size_t i = 0; i < p->nbudgets; i++) {
        double use = p->budgets[i].bytes ? (double)p->budgets[i].used / (double)p->budgets[i].bytes : 0;
        if (use > worst)
            worst = use;
        over |= p->budgets[i].exceeded;
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
    devices_of(p, gpu, sizeof gpu);
    size_str(res, sizeof res, p->reserved);
    size_str(alloc, sizeof alloc, p->allocated);
    size_str(gap, sizeof gap, p->reserved >= p->allocated ? p->reserved - p->allocated : 0);
    size_str(held, sizeof held, (uint64_t)live_held_by_owners(p));
    if (p->has_class[0])
        size_str(user, sizeof user, (uint64_t)p->class_bytes[0]);
    else
        snprintf(user, sizeof user, "unknown");
    long since;
    int64_t g = top_growth(p, &since);
    if (g > 0) {
        size_str(grow, sizeof grow, (uint64_t)g);
        snprintf(since_s, sizeof since_s, "mark %ld", since);
    } else {
        snprintf(grow, sizeof grow, "-");
        snprintf(since_s, sizeof since_s, "-");
    }
    if (p->has_frag)
        snprintf(frag, sizeof frag, "%.2f", p->frag);
    else
        snprintf(frag, sizeof frag, "unkn");
    if (p->has_largest)
        size_str(largest, sizeof largest, p->largest);
    else
        snprintf(largest, sizeof largest, "unknown");
    budget_str(p, budget, sizeof budget);
    char name[16];
    snprintf(name, sizeof name, "%.12s", p->process);
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
            for (size_t d = 0; d < s->procs[i].ndevices; d++) {
                const struct live_device *r = &s->procs[i].devices[d];
                if (r->device != dev)
                    continue;
                seen = true;
                held += r->reserved;
                if (s->procs[i].update_time > newest && (r->has_total || r->has_free)) {
                    newest = s->procs[i].update_time;
                    has_total = r->has_total, total = r->total;
                    has_free = r->has_free, free_b = r->free;
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
}

static json_t *opt_u64(bool has, uint64_t v)
{
    return has ? json_integer((json_int_t)v) : json_null();
}

static void print_json(const struct live_set *s)
{
    json_t *arr = json_array();
    for (size_t i = 0; i < s->n; i++) {
        const struct live_proc *p = &s->procs[i];
        json_t *o = json_object();
        json_object_set_new(o, "pid", json_integer(p->pid));
        json_object_set_new(o, "process", json_string(p->process));
        json_object_set_new(o, "rank", p->has_rank ? json_integer(p->rank) : json_null());
        json_object_set_new(o, "stale", json_boolean(p->stale));
        json_object_set_new(o, "update_time", json_real(p->update_time));
        json_object_set_new(o, "reserved_bytes", json_integer((json_int_t)p->reserved));
        json_object_set_new(o, "allocated_bytes", json_integer((json_int_t)p->allocated));
        json_object_set_new(o, "gap_bytes", json_integer((json_int_t)(p->reserved - p->allocated)));
        json_object_set_new(o, "held_by_owners_bytes", json_integer(live_held_by_owners(p)));
        json_object_set_new(o, "user_live_bytes", p->has_class[0] ? json_integer(p->class_bytes[0]) : json_null());
        json_object_set_new(o, "peak_live_bytes", json_integer(p->peak_live_bytes));
        json_object_set_new(o, "largest_free_block", opt_u64(p->has_largest, p->largest));
        json_object_set_new(o, "fragmentation", p->has_frag ? json_real(p->frag) : json_null());
        json_object_set_new(o, "marks", json_integer((json_int_t)p->marks));
        json_t *growth = json_array();
        for (size_t k = 0; k < p->ngrowth; k++) {
            json_t *g = json_object();
            json_object_set_new(g, "scope", json_string(p->growth[k].scope));
            json_object_set_new(g, "site", json_string(p->growth[k].site));
            json_object_set_new(g, "bytes_per_mark", json_integer(p->growth[k].bytes_per_mark));
            json_object_set_new(g, "since_mark", json_integer(p->growth[k].since_mark));
            json_array_append_new(growth, g);
        }
        json_object_set_new(o, "growth", growth);
        json_t *devs = json_array();
        for (size_t d = 0; d < p->ndevices; d++) {
            const struct live_device *r = &p->devices[d];
            json_t *g = json_object();
            json_object_set_new(g, "device", json_integer(r->device));
            json_object_set_new(g, "reserved_bytes", json_integer((json_int_t)r->reserved));
            json_object_set_new(g, "allocated_bytes", json_integer((json_int_t)r->allocated));
            json_object_set_new(g, "free", opt_u64(r->has_free, r->free));
            json_object_set_new(g, "total", opt_u64(r->has_total, r->total));
            json_array_append_new(devs, g);
        }
        json_object_set_new(o, "devices", devs);
        json_t *pools = json_array();
        for (size_t k = 0; k < p->npools; k++) {
            const struct live_pool *q = &p->pools[k];
            json_t *g = json_object();
            json_object_set_new(g, "name", json_string(q->name));
            json_object_set_new(g, "kind", json_string(q->kind));
            json_object_set_new(g, "device", json_integer(q->device));
            json_object_set_new(g, "reserved_bytes", json_integer((json_int_t)q->reserved));
            json_object_set_new(g, "allocated_bytes", json_integer((json_int_t)q->allocated));
            json_object_set_new(g, "largest_free_block", opt_u64(q->has_largest, q->largest));
            json_object_set_new(g, "fragmentation", q->has_frag ? json_real(q->frag) : json_null());
            json_array_append_new(pools, g);
        }
        json_object_set_new(o, "pools", pools);
        json_t *owners = p->has_owner_devices ? json_array() : json_null();
        for (size_t k = 0; k < p->nowner_devices; k++) {
            const struct live_owner *w = &p->owner_devices[k];
            json_t *g = json_object();
            json_object_set_new(g, "device", w->device < 0 ? json_null() : json_integer(w->device));
            json_object_set_new(g, "name", json_string(w->name));
            json_object_set_new(g, "class", json_string(w->cls));
            json_object_set_new(g, "live_bytes", json_integer(w->live_bytes));
            json_array_append_new(owners, g);
        }
        json_object_set_new(o, "owners_by_device", owners);
        json_array_append_new(arr, o);
    }
    json_dumpf(arr, stdout, JSON_INDENT(1));
    fputc('\n', stdout);
    json_decref(arr);
}

/* ---- the interactive view ------------------------------------------------ */

static void draw_detail(const struct live_proc *p, int row, int rows, int cols)
{
    char line[512], a[16], b[16];
    mvprintw(row++, 0, "%.*s", cols, "");
    attron(A_BOLD);
    mvprintw(row++, 0, "%d %.40s: growing call sites (bytes per mark)", p->pid, p->process);
    attroff(A_BOLD);
    for (size_t i = 0; i < p->ngrowth && row < rows - 1; i++) {
        size_str(a, sizeof a, (uint64_t)p->growth[i].bytes_per_mark);
        snprintf(line, sizeof line, "  %7s/mk since mark %ld  %s: %s", a, p->growth[i].since_mark, p->growth[i].scope,
                 p->growth[i].site);
        mvprintw(row++, 0, "%.*s", cols, line);
    }
    if (!p->ngrowth && row < rows - 1)
        mvprintw(row++, 0, "  none");
    if (row < rows - 1)
        mvprintw(row++, 0, "pools:");
    for (size_t i = 0; i < p->npools && row < rows - 1; i++) {
        const struct live_pool *q = &p->pools[i];
        size_str(a, sizeof a, q->reserved);
        size_str(b, sizeof b, q->allocated);
        char frag[16] = "unknown";
        if (q->has_frag)
            snprintf(frag, sizeof frag, "%.2f", q->frag);
        snprintf(line, sizeof line, "  %-28.28s %-14.14s gpu %d reserved %s allocated %s frag %s", q->name, q->kind, q->device,
                 a, b, frag);
        mvprintw(row++, 0, "%.*s", cols, line);
    }
    /* Per device where the file says it (gpu N, or host for pinned host
     * memory), else process-wide. */
    const struct live_owner *owners = p->has_owner_devices ? p->owner_devices : p->owners;
    size_t nowners = p->has_owner_devices ? p->nowner_devices : p->nowners;
    if (row < rows - 1)
        mvprintw(row++, 0, "owners:");
    for (size_t i = 0; i < nowners && row < rows - 1; i++) {
        const struct live_owner *w = &owners[i];
        char where[16] = "";
        if (p->has_owner_devices && w->device < 0)
            snprintf(where, sizeof where, "host");
        else if (p->has_owner_devices)
            snprintf(where, sizeof where, "gpu %d", w->device);
        size_str(a, sizeof a, (uint64_t)(w->live_bytes > 0 ? w->live_bytes : 0));
        snprintf(line, sizeof line, "  %-6s %-30.30s %-10s %s", where, w->name, w->cls, a);
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
    snprintf(line, sizeof line, "live state: %s%s", dir ? dir : "every user's live directory",
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
