/*
 * format_html.c: one or more reports as a single self-contained HTML page
 * (`tensorleak report FILE... --format html`): inline CSS and SVG, no
 * network, no fonts, and a few lines of JavaScript that only record the
 * rendered width of every drawn memory range (data-rendered-width), so a
 * headless browser can check the drawing. The page reads without it.
 *
 * Per report, in the order given (snapshots of one run read as a sequence):
 *   verdicts   plain sentences on leaks, live, reserved vs allocated,
 *              fragmentation, growth, invalid frees, out-of-memory, the gate
 *   sites      top leaking (or, in a snapshot, live) call sites, stacks in <details>
 *   memory map per pool, one SVG bar per segment drawn to one scale: allocated
 *              blocks, free holes between them, the pool's largest hole
 *              marked. Needs pools[].layout; without it, a bar of allocated
 *              vs free in proportion. Plus each device: this process, others, free.
 *   timeline   marks[] as line charts (live and reserved; device free), with
 *              the growing call sites
 *   owners     the owners table (data/owners.rules attribution): live, peak,
 *              held at exit vs leaked per owner, and a bar of both in each
 *              owner's colour; call sites are tagged with their owner, and
 *              the device bar splits this process's memory by owner
 *   invalid frees and the out-of-memory event; budget crossings (verdicts,
 *              and reports of reason "budget" marked on the sequence chart).
 *
 * Every drawn range carries data-bytes (and data-offset inside a segment);
 * widths are user units of a viewBox 960 wide, so bytes map to width by
 * one factor per pool.
 */
#include "cli.h"
#include "model.h"
#include "report_fields.h"
#include "sizes.h"
#include "stack_view.h"

#include "tl_version.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define MAP_WIDTH 960.0
#define SITES_SHOWN 20
#define FRAMES_SHOWN 64

/* Text in an element or a quoted attribute. */
static void put_text(FILE *out, const char *s)
{
    if (!s)
        return;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        switch (c) {
        case '&': fputs("&amp;", out); break;
        case '<': fputs("&lt;", out); break;
        case '>': fputs("&gt;", out); break;
        case '"': fputs("&quot;", out); break;
        case '\'': fputs("&#39;", out); break;
        default:
            if (c < 0x20 && c != '\n' && c != '\t')
                fputc('?', out);
            else
                fputc(c, out);
        }
    }
}

static const char *human(uint64_t bytes, char buf[SIZE_HUMAN_MAX])
{
    return size_human(bytes, buf);
}

static double percent(uint64_t part, uint64_t whole)
{
    return whole ? 100.0 * (double)part / (double)whole : 0.0;
}

/* ---- owner colours -------------------------------------------------- *
 * One colour per owner name across every report of the page (first
 * appearance order); "user" (memory no owner rule matched) is always red. */
/* Unlike the page's own colours: blue blocks, purple reserve, orange largest hole. */
static const char *const palette[] = { "#2a9d8f", "#4e79a7", "#edc948", "#59a14f",
                                       "#9c755f", "#76b7b2", "#b07aa1", "#f28e2b" };
#define USER_COLOUR "#d0452f"
static const char **owner_names;
static size_t owner_name_count, owner_name_cap;

static void remember_owner(const char *name)
{
    if (!name || strcmp(name, "user") == 0)
        return;
    for (size_t i = 0; i < owner_name_count; i++)
        if (strcmp(owner_names[i], name) == 0)
            return;
    if (owner_name_count == owner_name_cap) {
        size_t cap = owner_name_cap ? 2 * owner_name_cap : 16;
        const char **grown = realloc(owner_names, cap * sizeof(*grown));
        if (!grown)
            return;
        owner_names = grown;
        owner_name_cap = cap;
    }
    owner_names[owner_name_count++] = name;
}

static const char *owner_colour(const char *name)
{
    if (!name || strcmp(name, "user") == 0)
        return USER_COLOUR;
    for (size_t i = 0; i < owner_name_count; i++)
        if (strcmp(owner_names[i], name) == 0)
            return palette[i % (sizeof(palette) / sizeof(palette[0]))];
    return "#9aa3ad";
}

/* Whether the report says who owns its memory (newer writers). */
static bool has_owners(const struct tl_report *r)
{
    if (r->owner_count > 0)
        return true;
    for (size_t i = 0; i < r->leak_count; i++)
        if (r->leaks[i].owner)
            return true;
    for (size_t i = 0; i < r->held_count; i++)
        if (r->held[i].owner)
            return true;
    return false;
}

static bool same_owner(const char *a, const char *b)
{
    return a && b && strcmp(a, b) == 0;
}

/* Device memory kinds, as budgets count them (src/families/budget.c). */
static bool device_kind(const char *kind)
{
    return !kind || strcmp(kind, "device") == 0 || strcmp(kind, "async") == 0 ||
           strcmp(kind, "managed") == 0 || strcmp(kind, "vmm_handle") == 0;
}

/* The page's style sheet, the hatching pattern every SVG uses for free
 * space, and the script that records the rendered width of every drawn range
 * (for the browser tests): files in tools/html/, embedded at build time. */
#include "html_report_css.h"
#include "html_defs_svg.h"
#include "html_report_js.h"

static bool is_snapshot(const struct tl_report *r)
{
    return r->reason && strcmp(r->reason, "exit") != 0;
}

/* ---- stacks and call sites ------------------------------------------- */

static void put_frame_location(FILE *out, const struct tl_frame *f)
{
    if (!f->file || !*f->file)
        return;
    fputs(" <span class=\"file\">", out);
    put_text(out, f->file);
    if (f->line > 0)
        fprintf(out, ":%lld", f->line);
    fputs("</span>", out);
}

static void put_frame(FILE *out, const struct tl_frame *f)
{
    fputs("<li><code>", out);
    put_text(out, f->function && *f->function ? f->function : "??");
    fputs("</code>", out);
    put_frame_location(out, f);
    if (f->python) {
        fputs(" <span class=\"mod\">[python]</span>", out);
    } else if (f->module && *f->module) {
        fputs(" <span class=\"mod\">(", out);
        put_text(out, report_basename(f->module));
        if (f->offset && *f->offset) {
            fputc('+', out);
            put_text(out, f->offset);
        }
        fputs(")</span>", out);
    }
    fputs("</li>", out);
}

/* The rows of the text report (Python first, format_stack_rows); a folded
 * native run is a <details> that opens on click to its frames. */
static void put_stack(FILE *out, const struct tl_stack *stack)
{
    if (stack->count == 0) {
        fputs("<p class=\"meta\">No stack (TENSORLEAK_DEPTH=0).</p>", out);
        return;
    }
    struct tl_view_row *rows;
    size_t nrows = format_stack_rows(stack, &rows);
    bool folded = false;
    for (size_t r = 0; rows && r < nrows; r++)
        folded |= rows[r].fold;
    if (!folded) { /* every frame as recorded */
        free(rows);
        fputs("<ol class=\"stack\" start=\"0\">", out);
        for (size_t i = 0; i < stack->count && i < FRAMES_SHOWN; i++)
            put_frame(out, &stack->frames[i]);
        if (stack->count > FRAMES_SHOWN)
            fprintf(out, "<li>… %zu more frames</li>", stack->count - FRAMES_SHOWN);
        fputs("</ol>", out);
        return;
    }
    fputs("<ol class=\"stack\">", out);
    for (size_t r = 0; r < nrows; r++) {
        if (!rows[r].fold) {
            fprintf(out, "<li value=\"%zu\" class=\"frame\">", rows[r].first);
            /* put_frame's own <li> would nest: write its content here. */
            const struct tl_frame *f = &stack->frames[rows[r].first];
            fputs("<code>", out);
            put_text(out, f->function && *f->function ? f->function : "??");
            fputs("</code>", out);
            put_frame_location(out, f);
            fputs(" <span class=\"mod\">[python]</span></li>", out);
            continue;
        }
        char words[256];
        format_fold_words(stack, &rows[r], words, sizeof words);
        fputs("<li class=\"fold\"><details><summary>… ", out);
        put_text(out, words);
        fprintf(out, "</summary><ol class=\"stack\" start=\"%zu\">", rows[r].first);
        for (size_t i = rows[r].first; i < rows[r].first + rows[r].count; i++)
            put_frame(out, &stack->frames[i]);
        fputs("</ol></details></li>", out);
    }
    fputs("</ol>", out);
    free(rows);
}

static void put_site_name(FILE *out, const struct tl_stack *stack)
{
    const struct tl_frame *f = sarif_user_frame(stack);
    if (!f && stack->count > 0)
        f = &stack->frames[0];
    if (!f) {
        fputs("<code>unknown site</code>", out);
        return;
    }
    fputs("<code>", out);
    put_text(out, f->function && *f->function ? f->function : "??");
    fputs("</code>", out);
    if (f->file && *f->file) {
        fputs(" <span class=\"meta\">", out);
        put_text(out, report_basename(f->file));
        if (f->line > 0)
            fprintf(out, ":%lld", f->line);
        fputs("</span>", out);
    }
}

static void put_sites(FILE *out, const struct tl_leak *sites, size_t count, const char *cls)
{
    char a[SIZE_HUMAN_MAX];
    for (size_t i = 0; i < count && i < SITES_SHOWN; i++) {
        const struct tl_leak *l = &sites[i];
        fprintf(out, "<details class=\"site %s\" data-bytes-site=\"%" PRIu64 "\"><summary>"
                "<span class=\"bytes\">%s</span> in %" PRIu64 " allocation(s) "
                "<span class=\"tag\">", cls, l->bytes, TL_NULL(l, SITE, bytes) ? "unknown size" : human(l->bytes, a), l->count);
        put_text(out, report_leak_kind(l));
        fputs("</span>", out);
        if (TL_HAS(l, SITE, rank))
            fprintf(out, "<span class=\"tag\">rank %lld</span>", l->rank);
        if (l->owner) {
            fprintf(out, "<span class=\"tag owner\" style=\"border-left-color:%s\" data-owner=\"",
                    owner_colour(l->owner));
            put_text(out, l->owner);
            fputs("\">", out);
            put_text(out, l->owner);
            if (l->owner_class) {
                fputs(" · ", out);
                put_text(out, l->owner_class);
            }
            fputs("</span>", out);
        }
        if (l->suppressed) {
            fputs("<span class=\"tag supp\">suppressed", out);
            if (l->suppression) {
                fputs(": ", out);
                put_text(out, l->suppression);
            }
            fputs("</span>", out);
        }
        fputs(" — ", out);
        put_site_name(out, &l->stack);
        fputs("</summary>", out);
        put_stack(out, &l->stack);
        fputs("</details>\n", out);
    }
    if (count > SITES_SHOWN)
        fprintf(out, "<p class=\"meta\">… and %zu more call sites (tensorleak report FILE lists "
                "them all).</p>\n", count - SITES_SHOWN);
}

/* ---- verdicts -------------------------------------------------------- */

static void verdict(FILE *out, const char *cls, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void verdict(FILE *out, const char *cls, const char *fmt, ...)
{
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    /* Our own sentences: only sizes and numbers are formatted into them. */
    fprintf(out, "<li class=\"%s\">%s</li>\n", cls, text);
}

/* gate.failed_kinds, when the report has a failed gate: "leak, growth". */
static bool gate_failed(const struct tl_report *r, char *kinds, size_t size)
{
    if (!r->gate.failed)
        return false;
    kinds[0] = '\0';
    for (size_t i = 0; i < r->gate.failed_kind_count; i++) {
        const char *v = r->gate.failed_kinds[i];
        if (strspn(v, "abcdefghijklmnopqrstuvwxyz-") != strlen(v))
            continue;
        if (kinds[0])
            strncat(kinds, ", ", size - strlen(kinds) - 1);
        strncat(kinds, v, size - strlen(kinds) - 1);
    }
    return true;
}

static void put_verdicts(FILE *out, const struct tl_report *r)
{
    const struct tl_summary *s = &r->summary;
    char a[SIZE_HUMAN_MAX], b[SIZE_HUMAN_MAX], c[SIZE_HUMAN_MAX];
    fputs("<ul class=\"verdicts\">\n", out);
    if (!is_snapshot(r)) {
        if (s->leaked_bytes > 0)
            verdict(out, "bad", "<b>Leaked: %s in %" PRIu64 " allocation(s)</b> were never freed. "
                    "The call sites that allocated them are listed below, largest first.",
                    human(s->leaked_bytes, a), s->leaked_allocations);
        else
            verdict(out, "ok", "<b>No leaks:</b> every tracked allocation was freed or is held "
                    "by a declared pool.");
    } else {
        verdict(out, "", "<b>Snapshot</b> taken while the program ran (reason: %s): what is "
                "live now may still be freed, so nothing is called a leak yet.",
                r->reason && strspn(r->reason, "abcdefghijklmnopqrstuvwxyz_") == strlen(r->reason)
                    ? r->reason : "?");
    }
    verdict(out, "", "<b>Live: %s in %" PRIu64 " allocation(s)</b>; the peak was %s.",
            human(s->live_bytes, a), s->live_allocations, human(s->peak_live_bytes, b));
    if (s->reserved_bytes > 0) {
        verdict(out, s->gap_bytes > s->reserved_bytes / 2 ? "warn" : "",
                "<b>Reserved %s, allocated %s:</b> the gap of %s (%.0f%%) is cached by the "
                "process's allocators: free for its own next requests, unavailable to every "
                "other process.",
                human(s->reserved_bytes, a), human(s->allocated_bytes, b), human(s->gap_bytes, c),
                percent(s->gap_bytes, s->reserved_bytes));
        if (s->gap_bytes > 0 && tl_summary_layout_unknown(s)) {
            verdict(out, "", "<b>Fragmentation unknown:</b> part of the %s free lies in pools "
                    "whose layout tensorleak cannot see (driver mempools, caches nobody "
                    "annotated), so its largest free block is unknown.", human(s->gap_bytes, a));
        } else if (s->gap_bytes > 0) {
            const char *cls = s->fragmentation >= 0.6 ? "bad" : s->fragmentation >= 0.25 ? "warn" : "ok";
            if (s->fragmentation >= 0.25)
                verdict(out, cls, "<b>Fragmented (%.2f):</b> the largest free block is %s of %s "
                        "free; a request larger than %s fails even though the total would fit.",
                        s->fragmentation, human(s->largest_free_block, a), human(s->gap_bytes, b),
                        human(s->largest_free_block, c));
            else
                verdict(out, cls, "<b>Little fragmentation (%.2f):</b> the largest free block is "
                        "%s of %s free.", s->fragmentation, human(s->largest_free_block, a),
                        human(s->gap_bytes, b));
        }
    }
    if (s->held_bytes > 0 && has_owners(r))
        verdict(out, "", "<b>Held: %s</b> — memory that pools and cache, library or "
                "workspace owners keep until exit (see Owners), reported as held, not as leaks.",
                human(s->held_bytes, a));
    else if (s->held_bytes > 0)
        verdict(out, "", "<b>Held by pools: %s</b> — segments a caching allocator keeps, "
                "reported as held, not as leaks.", human(s->held_bytes, a));
    if (s->ipc_mapped_bytes > 0 && tl_summary_has(s, ipc_mappings))
        verdict(out, "", "<b>Mapped from other processes: %s in %llu CUDA IPC mapping(s)</b> — their "
                "memory, counted in the exporting process, not here.",
                human(s->ipc_mapped_bytes, a), (unsigned long long)s->ipc_mappings);
    if (r->reason && strcmp(r->reason, "budget") == 0) {
        char which[80] = "a";
        if (r->label && strspn(r->label, "abcdefghijklmnopqrstuvwxyz") == strlen(r->label) &&
            strlen(r->label) < sizeof(which))
            snprintf(which, sizeof(which), "the %.60s", r->label);
        verdict(out, "warn", "<b>Budget crossed:</b> this report was written when %s budget "
                "(TENSORLEAK_BUDGET) was crossed.", which);
    }
    if (s->budget_crossings > 0 || s->budget_refusals > 0)
        verdict(out, s->budget_refusals > 0 ? "bad" : "warn",
                "<b>Budgets: %" PRIu64 " crossing(s), %" PRIu64 " allocation(s) refused</b>%s",
                s->budget_crossings, s->budget_refusals,
                s->budget_refusals > 0 ? " — refused allocations failed with out-of-memory "
                                         "(TENSORLEAK_BUDGET_ENFORCE) as if the device were full."
                                       : " — memory held by the process went over its budget.");
    if (r->growth_count > 0)
        verdict(out, "bad", "<b>Growing: %zu call site(s)</b> allocate more with every mark "
                "(request) and never give it back — a leak that may never reach exit.",
                r->growth_count);
    if (r->invalid_free_count > 0 || s->invalid_frees > 0)
        verdict(out, "bad", "<b>Invalid frees: %" PRIu64 "</b> — frees of addresses that were "
                "not live allocations.",
                s->invalid_frees > r->invalid_free_count ? s->invalid_frees
                                                         : (uint64_t)r->invalid_free_count);
    if (TL_HAS(r, REPORT, oom))
        verdict(out, "bad", "<b>Out of memory:</b> a request of %s on device %lld failed.",
                human(r->oom.bytes, a), r->oom.device);
    char kinds[128];
    if (gate_failed(r, kinds, sizeof(kinds)))
        verdict(out, "bad", "<b>CI gate failed</b> on: %s.", kinds);
    fputs("</ul>\n", out);
}

static void put_summary_table(FILE *out, const struct tl_report *r)
{
    const struct tl_summary *s = &r->summary;
    char a[SIZE_HUMAN_MAX];
    fputs("<table class=\"summary\"><tbody>\n", out);
#define ROW_BYTES(label, v) \
    fprintf(out, "<tr><th>%s</th><td class=\"n\">%s</td><td class=\"n\">%" PRIu64 " B</td></tr>\n", \
            label, human(v, a), (uint64_t)(v))
    ROW_BYTES("leaked", s->leaked_bytes);
    ROW_BYTES("live", s->live_bytes);
    ROW_BYTES("peak live", s->peak_live_bytes);
    ROW_BYTES("reserved", s->reserved_bytes);
    ROW_BYTES("allocated", s->allocated_bytes);
    ROW_BYTES("gap (reserved − allocated)", s->gap_bytes);
    if (tl_summary_layout_unknown(s))
        fputs("<tr><th>largest free block</th><td class=\"n\">unknown</td><td></td></tr>\n", out);
    else
        ROW_BYTES("largest free block", s->largest_free_block);
    ROW_BYTES(has_owners(r) ? "held by pools and owners" : "held by pools", s->held_bytes);
#undef ROW_BYTES
    if (tl_summary_layout_unknown(s))
        fputs("<tr><th>fragmentation</th><td class=\"n\">unknown</td><td></td></tr>\n", out);
    else
        fprintf(out, "<tr><th>fragmentation</th><td class=\"n\">%.2f</td><td></td></tr>\n",
                s->fragmentation);
    fprintf(out, "<tr><th>allocations leaked / live</th><td class=\"n\">%" PRIu64 " / %" PRIu64
            "</td><td></td></tr>\n", s->leaked_allocations, s->live_allocations);
    fprintf(out, "<tr><th>failed allocations (out of memory)</th><td class=\"n\">%" PRIu64
            " (%" PRIu64 ")</td><td></td></tr>\n", s->failed_allocations, s->oom_failures);
    if (s->budget_crossings > 0 || s->budget_refusals > 0)
        fprintf(out, "<tr><th>budget crossings / refused allocations</th><td class=\"n\">%" PRIu64
                " / %" PRIu64 "</td><td></td></tr>\n", s->budget_crossings, s->budget_refusals);
    fputs("</tbody></table>\n", out);
}

/* ---- owners ---------------------------------------------------------- */

struct owner_row {
    const char *name, *cls;
    const struct tl_owner *o;      /* NULL: named only by call sites */
    uint64_t held, leaked;
};

static size_t owner_rows(const struct tl_report *r, struct owner_row *rows, size_t cap)
{
    size_t n = 0;
    for (size_t i = 0; i < r->owner_count && n < cap; i++)
        rows[n++] = (struct owner_row){ r->owners[i].name, r->owners[i].cls, &r->owners[i], 0, 0 };
    const struct tl_leak *lists[2] = { r->held, r->leaks };
    size_t counts[2] = { r->held_count, r->leak_count };
    for (int l = 0; l < 2; l++) {
        for (size_t i = 0; i < counts[l]; i++) {
            const struct tl_leak *e = &lists[l][i];
            if (!e->owner || (l == 1 && e->suppressed))
                continue;
            size_t k = 0;
            /* A range or a mapping names its owner but adds no memory. */
            uint64_t bytes = report_kind_is_address_space(e->kind) ? 0 : e->bytes;
            while (k < n && !same_owner(rows[k].name, e->owner))
                k++;
            if (k == n) {
                if (n == cap)
                    continue;
                rows[n++] = (struct owner_row){ e->owner, e->owner_class, NULL, 0, 0 };
            }
            if (l == 0)
                rows[k].held += bytes;
            else
                rows[k].leaked += bytes;
        }
    }
    return n;
}

static void put_owner_swatch(FILE *out, const char *name)
{
    fprintf(out, "<i style=\"background:%s\"></i>", owner_colour(name));
}

/* The owners' live memory per device (host memory apart), when the report
 * has it: which GPU each owner's memory is on. */
static void put_owner_devices(FILE *out, const struct tl_report *r)
{
    char a[SIZE_HUMAN_MAX];
    if (r->owner_device_count == 0)
        return;
    fputs("<table class=\"owners owner-devices\"><thead><tr><th>device</th><th>owner</th><th>class</th>"
          "<th class=\"n\">live</th><th class=\"n\">allocations</th></tr></thead><tbody>\n", out);
    for (size_t i = 0; i < r->owner_device_count; i++) {
        const struct tl_owner_device *w = &r->owner_devices[i];
        if (w->device < 0)
            fputs("<tr class=\"owner-device\"><td>host</td><td class=\"legend\">", out);
        else
            fprintf(out, "<tr class=\"owner-device\"><td>%lld</td><td class=\"legend\">", w->device);
        put_owner_swatch(out, w->name);
        put_text(out, w->name);
        fputs("</td><td>", out);
        put_text(out, w->cls ? w->cls : "?");
        fprintf(out, "</td><td class=\"n\">%s</td><td class=\"n\">%" PRIu64 "</td></tr>\n", human(w->live_bytes, a),
                w->live_allocations);
    }
    fputs("</tbody></table>\n", out);
}

static void put_owners(FILE *out, const struct tl_report *r)
{
    char a[SIZE_HUMAN_MAX], b[SIZE_HUMAN_MAX], c[SIZE_HUMAN_MAX], d[SIZE_HUMAN_MAX];
    size_t cap = r->owner_count + r->held_count + r->leak_count + 1;
    struct owner_row *rows = calloc(cap, sizeof(*rows));
    if (!rows)
        return;
    size_t n = owner_rows(r, rows, cap);
    bool snapshot = is_snapshot(r);
    fputs("<h3>Owners</h3>\n<p class=\"meta\">Who holds the memory, by the owner rules "
          "(<code>data/owners.rules</code>, <code>TENSORLEAK_OWNERS</code>): the first stack "
          "frame, innermost first, that a rule matches; <i>user</i> is memory no rule matched. "
          "Memory of a cache, library or workspace owner is held, not leaked.</p>\n", out);
    fprintf(out, "<table class=\"owners\"><thead><tr><th>owner</th><th>class</th>"
            "<th class=\"n\">live</th><th class=\"n\">allocations</th><th class=\"n\">peak</th>"
            "<th class=\"n\">held%s</th><th class=\"n\">%s</th></tr></thead><tbody>\n",
            snapshot ? "" : " at exit", snapshot ? "live, not held" : "leaked");
    uint64_t total = 0, held = 0;
    for (size_t i = 0; i < n; i++) {
        const struct owner_row *w = &rows[i];
        total += w->held + w->leaked;
        held += w->held;
        fputs("<tr class=\"owner\" data-owner=\"", out);
        put_text(out, w->name);
        fprintf(out, "\" data-held=\"%" PRIu64 "\" data-leaked=\"%" PRIu64 "\" data-live=\"%" PRIu64
                "\"><td class=\"legend\">", w->held, w->leaked, w->o ? w->o->live_bytes : 0);
        put_owner_swatch(out, w->name);
        put_text(out, w->name);
        fputs("</td><td>", out);
        put_text(out, w->cls ? w->cls : "?");
        fputs("</td>", out);
        if (w->o)
            fprintf(out, "<td class=\"n\">%s</td><td class=\"n\">%" PRIu64 "</td>"
                    "<td class=\"n\">%s</td>", human(w->o->live_bytes, a), w->o->live_allocations,
                    human(w->o->peak_bytes, b));
        else
            fputs("<td class=\"n\">—</td><td class=\"n\">—</td><td class=\"n\">—</td>", out);
        fprintf(out, "<td class=\"n\">%s</td><td class=\"n\">%s</td></tr>\n",
                w->held ? human(w->held, c) : "—", w->leaked ? human(w->leaked, d) : "—");
    }
    fputs("</tbody></table>\n", out);
    if (total > 0) {
        /* Held first (solid), then leaked (faded, red outline), each in its owner's colour. */
        double scale = MAP_WIDTH / (double)total, x = 0;
        fprintf(out, "<figure class=\"owners-bar\"><figcaption>%s by owner: %s held, %s %s"
                "</figcaption>\n<svg class=\"map owners-map\" viewBox=\"-2 0 %.0f 30\" "
                "data-scale=\"%.9g\" role=\"img\" aria-label=\"held and leaked memory by owner\">\n",
                snapshot ? "Held and live" : "Held and leaked", human(held, a),
                human(total - held, b), snapshot ? "live, not held" : "leaked", MAP_WIDTH + 4, scale);
        for (int pass = 0; pass < 2; pass++) {
            for (size_t i = 0; i < n; i++) {
                uint64_t bytes = pass == 0 ? rows[i].held : rows[i].leaked;
                if (bytes == 0)
                    continue;
                fprintf(out, "<rect class=\"owner-part %s\" data-owner=\"", pass ? "leaked" : "held");
                put_text(out, rows[i].name);
                fprintf(out, "\" data-bytes=\"%" PRIu64 "\" x=\"%.3f\" y=\"4\" width=\"%.3f\" "
                        "height=\"22\" style=\"fill:%s\"><title>", bytes, x, (double)bytes * scale,
                        owner_colour(rows[i].name));
                put_text(out, rows[i].name);
                fprintf(out, ": %s %s</title></rect>\n", human(bytes, a),
                        pass ? (snapshot ? "live" : "leaked") : "held");
                x += (double)bytes * scale;
            }
        }
        fputs("</svg>\n<div class=\"legend\">", out);
        for (size_t i = 0; i < n; i++) {
            put_owner_swatch(out, rows[i].name);
            put_text(out, rows[i].name);
        }
        fprintf(out, " — solid: held; faded with a red edge: %s</div>\n",
                snapshot ? "live, not held" : "leaked");
        bool blocks = false;
        for (size_t i = 0; i < r->leak_count; i++)
            blocks |= r->leaks[i].kind && strcmp(r->leaks[i].kind, "pool_block") == 0;
        if (blocks)
            fputs("<p class=\"meta\">Blocks of annotated pools (pool_block) lie inside their "
                  "pool's held segments: those bytes are counted in both.</p>\n", out);
        fputs("</figure>\n", out);
    }
    free(rows);
}

/* ---- memory map ------------------------------------------------------ */

struct hole {
    size_t segment;
    uint64_t offset, bytes;
};

/* The pool's largest hole (the first of equals): segment and offset. */
static bool largest_hole(const struct tl_pool *p, struct hole *best)
{
    bool found = false;
    best->bytes = 0;
    for (size_t i = 0; i < p->layout_count; i++) {
        const struct tl_segment *s = &p->layout[i];
        uint64_t at = 0;
        for (size_t k = 0; k <= s->block_count; k++) {
            uint64_t end = k < s->block_count ? s->blocks[k].offset : s->bytes;
            if (end > at && end - at > best->bytes) {
                *best = (struct hole){ i, at, end - at };
                found = true;
            }
            if (k < s->block_count)
                at = s->blocks[k].offset + s->blocks[k].bytes;
        }
    }
    return found;
}

static void put_range(FILE *out, const char *cls, size_t segment, uint64_t offset,
                      uint64_t bytes, double scale, double y, double h)
{
    char a[SIZE_HUMAN_MAX];
    fprintf(out, "<rect class=\"%s\" data-segment=\"%zu\" data-offset=\"%" PRIu64 "\" "
            "data-bytes=\"%" PRIu64 "\" x=\"%.3f\" y=\"%.1f\" width=\"%.3f\" height=\"%.1f\">"
            "<title>%s %s at +0x%" PRIx64 "</title></rect>\n",
            cls, segment, offset, bytes, (double)offset * scale, y, (double)bytes * scale, h,
            strcmp(cls, "block") == 0 ? "allocated" : "free", human(bytes, a), offset);
}

static void put_pool_layout(FILE *out, const struct tl_pool *p)
{
    char a[SIZE_HUMAN_MAX], b[SIZE_HUMAN_MAX];
    uint64_t widest = 0;
    for (size_t i = 0; i < p->layout_count; i++)
        if (p->layout[i].bytes > widest)
            widest = p->layout[i].bytes;
    double scale = widest ? MAP_WIDTH / (double)widest : 0.0;
    struct hole big;
    bool have_big = largest_hole(p, &big);
    const double row = 86.0, bar = 30.0;
    double height = row * (double)p->layout_count + 4.0;
    fprintf(out, "<svg class=\"map layout\" viewBox=\"-2 0 %.0f %.0f\" "
            "data-scale=\"%.9g\" role=\"img\" aria-label=\"memory map of the pool\">\n",
            MAP_WIDTH + 4, height, scale);
    for (size_t i = 0; i < p->layout_count; i++) {
        const struct tl_segment *s = &p->layout[i];
        double y = row * (double)i + 18.0;
        fprintf(out, "<g class=\"segment-row\"><text x=\"0\" y=\"%.1f\">segment %zu", y - 5, i);
        if (s->base) {
            fputs(" at ", out);
            put_text(out, s->base);
        }
        uint64_t used = 0;
        for (size_t k = 0; k < s->block_count; k++)
            used += s->blocks[k].bytes;
        fprintf(out, ": %s, %zu block(s) allocating %s</text>\n", human(s->bytes, a),
                s->block_count, human(used, b));
        fprintf(out, "<rect class=\"segment\" data-segment=\"%zu\" data-bytes=\"%" PRIu64 "\" "
                "x=\"0\" y=\"%.1f\" width=\"%.3f\" height=\"%.1f\"/>\n",
                i, s->bytes, y, (double)s->bytes * scale, bar);
        uint64_t at = 0;
        for (size_t k = 0; k <= s->block_count; k++) {
            uint64_t end = k < s->block_count ? s->blocks[k].offset : s->bytes;
            if (end > at) {
                bool is_big = have_big && big.segment == i && big.offset == at;
                put_range(out, is_big ? "hole largest" : "hole", i, at, end - at, scale, y + 1,
                          bar - 2);
                if (is_big) {
                    double mid = ((double)at + (double)(end - at) / 2) * scale;
                    fprintf(out, "<path class=\"marker\" d=\"M%.3f %.1f l-6 9 h12 z\"/>"
                            "<text class=\"largest-label\" x=\"%.3f\" y=\"%.1f\" "
                            "text-anchor=\"%s\">largest hole %s</text>\n",
                            mid, y + bar + 1, mid, y + bar + 21,
                            mid < 80 ? "start" : mid > MAP_WIDTH - 80 ? "end" : "middle",
                            human(end - at, a));
                }
            }
            if (k < s->block_count) {
                put_range(out, "block", i, s->blocks[k].offset, s->blocks[k].bytes, scale, y,
                          bar);
                at = s->blocks[k].offset + s->blocks[k].bytes;
            }
        }
        fputs("</g>\n", out);
    }
    fputs("</svg>\n", out);
}

/* No layout in the report: allocated vs free of the reserved total, in proportion. */
static void put_pool_proportions(FILE *out, const struct tl_pool *p)
{
    char a[SIZE_HUMAN_MAX];
    uint64_t total = p->reserved_bytes ? p->reserved_bytes : 1;
    uint64_t alloc = p->allocated_bytes > total ? total : p->allocated_bytes;
    double scale = MAP_WIDTH / (double)total;
    fprintf(out, "<svg class=\"map proportional\" viewBox=\"-2 0 %.0f 40\" data-scale=\"%.9g\" "
            "role=\"img\" aria-label=\"allocated and free share of the pool\">\n",
            MAP_WIDTH + 4, scale);
    fprintf(out, "<rect class=\"allocated\" data-bytes=\"%" PRIu64 "\" x=\"0\" y=\"4\" "
            "width=\"%.3f\" height=\"30\"><title>allocated %s</title></rect>\n",
            alloc, (double)alloc * scale, human(alloc, a));
    fprintf(out, "<rect class=\"free\" data-bytes=\"%" PRIu64 "\" x=\"%.3f\" y=\"4\" "
            "width=\"%.3f\" height=\"30\"><title>free %s</title></rect>\n",
            total - alloc, (double)alloc * scale, (double)(total - alloc) * scale,
            human(total - alloc, a));
    fprintf(out, "<rect class=\"pool-bar\" x=\"0\" y=\"4\" width=\"%.3f\" height=\"30\"/>\n",
            MAP_WIDTH);
    fputs("</svg>\n", out);
}

static void put_pool(FILE *out, const struct tl_pool *p)
{
    char a[SIZE_HUMAN_MAX], b[SIZE_HUMAN_MAX], c[SIZE_HUMAN_MAX], d[SIZE_HUMAN_MAX];
    fputs("<figure class=\"pool\" data-pool=\"", out);
    put_text(out, p->name ? p->name : "");
    fprintf(out, "\" data-reserved=\"%" PRIu64 "\" data-allocated=\"%" PRIu64 "\">"
            "<figcaption><b>", p->reserved_bytes, p->allocated_bytes);
    put_text(out, p->name ? p->name : "(unnamed pool)");
    fputs("</b> (", out);
    put_text(out, p->kind ? p->kind : "pool");
    if (TL_HAS(p, POOL, framework) && p->device < 0)
        fputs(", host", out); /* a framework's pinned host pool */
    else
        fprintf(out, ", device %lld", p->device);
    if (TL_HAS(p, POOL, rank))
        fprintf(out, ", rank %lld", p->rank);
    if (TL_NULL(p, POOL, reserved_bytes)) { /* CuPy's pinned pool publishes no byte counts: nothing to draw */
        fprintf(out, "): %" PRIu64 " free block(s); no byte counts published</figcaption>\n</figure>\n",
                p->free_blocks);
        return;
    }
    if (tl_pool_layout_unknown(p))
        fprintf(out, "): reserved %s, allocated %s, free %s, largest free block unknown, "
                "fragmentation unknown", human(p->reserved_bytes, a), human(p->allocated_bytes, b),
                human(p->free_bytes, c));
    else
        fprintf(out, "): reserved %s, allocated %s, free %s, largest free block %s, "
                "fragmentation %.2f", human(p->reserved_bytes, a), human(p->allocated_bytes, b),
                human(p->free_bytes, c), human(p->largest_free_block, d), p->fragmentation);
    if (p->reading && strcmp(p->reading, "last_good") == 0) {
        fputs(" (the driver's reading of ", out);
        put_text(out, p->reading_time ? p->reading_time : "an earlier time");
        fputs(": it no longer answered)", out);
    }
    if (p->segments)
        fprintf(out, ", %" PRIu64 " segment(s)", p->segments);
    fputs("</figcaption>\n", out);
    if (p->layout_count > 0) {
        put_pool_layout(out, p);
        fputs("<div class=\"legend\"><i style=\"background:var(--block)\"></i>allocated block"
              "<i style=\"background:#fff\"></i>free hole (hatched)"
              "<i style=\"background:#fde6cf;border-color:var(--largest)\"></i>largest hole"
              " — segments drawn to one scale</div>\n", out);
        if (p->layout_truncated)
            fputs("<p class=\"meta\">The report's layout is truncated: some segments or blocks "
                  "of this pool are not drawn.</p>\n", out);
    } else {
        put_pool_proportions(out, p);
        fputs("<div class=\"legend\"><i style=\"background:var(--block)\"></i>allocated"
              "<i style=\"background:#fff\"></i>free — proportions only: this report has no "
              "segment layout for the pool</div>\n", out);
    }
    fputs("</figure>\n", out);
}

/*
 * This process's share of device `d` by owner: device-memory call sites
 * (held and leaked or live) of the owners, when the report says who owns
 * them and `d` is the only device of its process (call sites do not name
 * their device). Returns how many rows got bytes; rows[].held is the sum.
 */
static size_t device_owner_parts(const struct tl_report *r, const struct tl_device *d,
                                 struct owner_row *rows, size_t cap)
{
    if (!has_owners(r))
        return 0;
    for (size_t i = 0; i < r->device_count; i++) {
        const struct tl_device *o = &r->devices[i];
        if (o != d && TL_HAS(o, DEVICE, rank) == TL_HAS(d, DEVICE, rank) && (!TL_HAS(d, DEVICE, rank) || o->rank == d->rank))
            return 0;
    }
    size_t n = owner_rows(r, rows, cap);
    for (size_t i = 0; i < n; i++)
        rows[i].held = rows[i].leaked = 0;
    const struct tl_leak *lists[2] = { r->held, r->leaks };
    size_t counts[2] = { r->held_count, r->leak_count };
    for (int l = 0; l < 2; l++)
        for (size_t i = 0; i < counts[l]; i++) {
            const struct tl_leak *e = &lists[l][i];
            if (!e->owner || !device_kind(e->kind) ||
                (TL_HAS(d, DEVICE, rank) && (!TL_HAS(e, SITE, rank) || e->rank != d->rank)))
                continue;
            for (size_t k = 0; k < n; k++)
                if (same_owner(rows[k].name, e->owner)) {
                    rows[k].held += e->bytes;
                    break;
                }
        }
    return n;
}

static void put_device(FILE *out, const struct tl_report *r, const struct tl_device *d)
{
    char a[SIZE_HUMAN_MAX], b[SIZE_HUMAN_MAX], c[SIZE_HUMAN_MAX], e[SIZE_HUMAN_MAX];
    /* Without the driver's free (at exit it may not answer) the others' and
     * the free share are unknown: no map rather than a wrong one. */
    if (d->total == 0 || !TL_HAS(d, DEVICE, free))
        return;
    uint64_t used = d->total > d->free ? d->total - d->free : 0;
    uint64_t mine = d->reserved_bytes < used ? d->reserved_bytes : used;
    uint64_t others = used - mine;
    double scale = MAP_WIDTH / (double)d->total;
    size_t cap = r->owner_count + r->held_count + r->leak_count + 1;
    struct owner_row *rows = calloc(cap, sizeof(*rows));
    size_t nrows = rows ? device_owner_parts(r, d, rows, cap) : 0;
    fprintf(out, "<figure class=\"device\" data-device=\"%lld\"><figcaption><b>device %lld</b>",
            d->device, d->device);
    if (TL_HAS(d, DEVICE, rank))
        fprintf(out, " (rank %lld)", d->rank);
    fprintf(out, ": total %s, this process %s, others %s, free %s</figcaption>\n",
            human(d->total, a), human(mine, b), human(others, c), human(d->free, e));
    fprintf(out, "<svg class=\"map device-map\" viewBox=\"-2 0 %.0f 30\" data-scale=\"%.9g\" "
            "role=\"img\" aria-label=\"device memory\">\n", MAP_WIDTH + 4, scale);
    double x = 0;
    /* This process: its owners' allocations first, in their colours. */
    uint64_t rest = mine;
    for (size_t i = 0; i < nrows; i++) {
        uint64_t bytes = rows[i].held < rest ? rows[i].held : rest;
        if (bytes == 0)
            continue;
        fputs("<rect class=\"process owner-part\" data-owner=\"", out);
        put_text(out, rows[i].name);
        fprintf(out, "\" data-bytes=\"%" PRIu64 "\" x=\"%.3f\" y=\"4\" width=\"%.3f\" "
                "height=\"22\" style=\"fill:%s\"><title>", bytes, x, (double)bytes * scale,
                owner_colour(rows[i].name));
        put_text(out, rows[i].name);
        fprintf(out, ": %s allocated</title></rect>\n", human(bytes, a));
        x += (double)bytes * scale;
        rest -= bytes;
    }
    const struct {
        const char *cls, *what;
        uint64_t bytes;
    } parts[] = { { "process", nrows ? "this process, reserved but not in a live allocation"
                                     : "this process (reserved)", rest },
                  { "others", "other processes and the driver", others },
                  { "device-free", "free", d->free } };
    for (size_t i = 0; i < 3; i++) {
        fprintf(out, "<rect class=\"%s\" data-bytes=\"%" PRIu64 "\" x=\"%.3f\" y=\"4\" "
                "width=\"%.3f\" height=\"22\"><title>%s: %s</title></rect>\n",
                parts[i].cls, parts[i].bytes, x, (double)parts[i].bytes * scale, parts[i].what,
                human(parts[i].bytes, a));
        x += (double)parts[i].bytes * scale;
    }
    fprintf(out, "<rect class=\"device\" x=\"0\" y=\"4\" width=\"%.3f\" height=\"22\"/></svg>\n",
            MAP_WIDTH);
    if (nrows > 0 && mine > 0 && mine < d->total / 4) {
        /* The same owners at this process's own scale: on a large device its
         * share can be a sliver. */
        double own = MAP_WIDTH / (double)mine;
        fprintf(out, "<figcaption>this process's %s, by owner</figcaption>\n<svg class=\"map "
                "process-map\" viewBox=\"-2 0 %.0f 30\" data-scale=\"%.9g\" role=\"img\" "
                "aria-label=\"this process's device memory by owner\">\n", human(mine, a),
                MAP_WIDTH + 4, own);
        double px = 0;
        uint64_t left = mine;
        for (size_t i = 0; i < nrows; i++) {
            uint64_t bytes = rows[i].held < left ? rows[i].held : left;
            if (bytes == 0)
                continue;
            fputs("<rect class=\"process owner-part\" data-owner=\"", out);
            put_text(out, rows[i].name);
            fprintf(out, "\" data-bytes=\"%" PRIu64 "\" x=\"%.3f\" y=\"4\" width=\"%.3f\" "
                    "height=\"22\" style=\"fill:%s\"><title>", bytes, px, (double)bytes * own,
                    owner_colour(rows[i].name));
            put_text(out, rows[i].name);
            fprintf(out, ": %s allocated</title></rect>\n", human(bytes, b));
            px += (double)bytes * own;
            left -= bytes;
        }
        fprintf(out, "<rect class=\"process\" data-bytes=\"%" PRIu64 "\" x=\"%.3f\" y=\"4\" "
                "width=\"%.3f\" height=\"22\"><title>reserved, not in a live allocation: %s"
                "</title></rect>\n", left, px, (double)left * own, human(left, c));
        fprintf(out, "<rect class=\"device\" x=\"0\" y=\"4\" width=\"%.3f\" height=\"22\"/>"
                "</svg>\n", MAP_WIDTH);
    }
    fputs("<div class=\"legend\">", out);
    for (size_t i = 0; i < nrows; i++) {
        if (rows[i].held == 0)
            continue;
        put_owner_swatch(out, rows[i].name);
        put_text(out, rows[i].name);
    }
    fprintf(out, "<i style=\"background:var(--reserved)\"></i>this process%s"
            "<i style=\"background:var(--other)\"></i>others<i style=\"background:#e7f3e8\"></i>"
            "free</div></figure>\n", nrows ? " (reserved, not allocated)" : "");
    free(rows);
}

/* ---- line charts ----------------------------------------------------- */

struct series {
    const char *name, *cls;
    const uint64_t *values;
    const bool *known; /* NULL: every value is known; else false where unknown */
};

static bool series_known(const struct series *s, size_t i)
{
    return !s->known || s->known[i];
}

/*
 * A line chart of `count` points per series; x labels are 1..count or
 * `xvalues[i]`. events[i], when set, marks point i with a dashed vertical
 * line and that label ("budget: device").  An unknown value has no point:
 * its series' line stops before it and starts again after it.
 */
static void put_chart(FILE *out, const char *cls, const struct series *series, size_t nseries,
                      size_t count, const long long *xvalues, const char *xname,
                      const char *const *events)
{
    char a[SIZE_HUMAN_MAX];
    const double w = 960, h = 230, left = 78, right = 12, top = 12, bottom = 34;
    uint64_t max = 0;
    for (size_t s = 0; s < nseries; s++)
        for (size_t i = 0; i < count; i++)
            if (series_known(&series[s], i) && series[s].values[i] > max)
                max = series[s].values[i];
    if (max == 0)
        max = 1;
    double pw = w - left - right, ph = h - top - bottom;
#define X(i) (count > 1 ? left + pw * (double)(i) / (double)(count - 1) : left + pw / 2)
#define Y(v) (top + ph - ph * (double)(v) / (double)max)
    fprintf(out, "<svg class=\"chart %s\" viewBox=\"0 0 %.0f %.0f\" role=\"img\">\n", cls, w, h);
    for (int g = 0; g <= 4; g++) {
        uint64_t v = (uint64_t)((double)max * g / 4.0);
        fprintf(out, "<line class=\"grid\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\"/>"
                "<text class=\"dim\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
                left, w - right, Y(v), Y(v), left - 6, Y(v) + 4, human(v, a));
    }
    fprintf(out, "<line class=\"axis\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\"/>\n", left,
            w - right, top + ph, top + ph);
    for (size_t i = 0; events && i < count; i++) {
        if (!events[i])
            continue;
        fprintf(out, "<line class=\"event budget\" data-index=\"%zu\" x1=\"%.1f\" x2=\"%.1f\" "
                "y1=\"%.1f\" y2=\"%.1f\"><title>", i, X(i), X(i), top, top + ph);
        put_text(out, events[i]);
        fprintf(out, "</title></line><text class=\"event-label\" x=\"%.1f\" y=\"%.1f\" "
                "text-anchor=\"%s\">", X(i) + (X(i) > w - 140 ? -4 : 4), top + 12,
                X(i) > w - 140 ? "end" : "start");
        put_text(out, events[i]);
        fputs("</text>\n", out);
    }
    size_t step = count > 12 ? (count + 11) / 12 : 1;
    for (size_t i = 0; i < count; i += step)
        fprintf(out, "<text class=\"dim\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s %lld"
                "</text>\n", X(i), h - 12, i == 0 ? xname : "",
                xvalues ? xvalues[i] : (long long)i + 1);
    for (size_t s = 0; s < nseries; s++) {
        /* A polyline per run of known values. */
        size_t i = 0;
        while (i < count) {
            if (!series_known(&series[s], i)) {
                i++;
                continue;
            }
            fprintf(out, "<polyline class=\"series %s\" data-series=\"%s\" points=\"", series[s].cls,
                    series[s].name);
            for (size_t first = i; i < count && series_known(&series[s], i); i++)
                fprintf(out, "%s%.1f,%.1f", i > first ? " " : "", X(i), Y(series[s].values[i]));
            fputs("\"/>\n", out);
        }
        for (i = 0; i < count; i++) {
            if (!series_known(&series[s], i))
                continue;
            fprintf(out, "<circle class=\"point %s\" cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" "
                    "data-value=\"%" PRIu64 "\"><title>%s %lld: %s %s</title></circle>\n",
                    series[s].cls, X(i), Y(series[s].values[i]), series[s].values[i], xname,
                    xvalues ? xvalues[i] : (long long)i + 1, series[s].name,
                    human(series[s].values[i], a));
        }
    }
#undef X
#undef Y
    fputs("</svg>\n<div class=\"legend\">", out);
    for (size_t s = 0; s < nseries; s++)
        fprintf(out, "<i class=\"%s\"></i>%s", series[s].cls,
                series[s].name);
    fputs("</div>\n", out);
}

static void put_growth(FILE *out, const struct tl_report *r)
{
    char a[SIZE_HUMAN_MAX];
    for (size_t i = 0; i < r->growth_count; i++) {
        const struct tl_growth *g = &r->growth[i];
        /* Rows without a call site: a pool's allocated bytes, an
         * owner's reserve, a Python line of a pool; no allocation count. */
        const char *scope = g->scope && strcmp(g->scope, "call_site") != 0 ? g->scope : NULL;
        fprintf(out, "<details class=\"site growth\"><summary><span class=\"bytes\">+%s per mark"
                "</span> over %" PRIu64 " marks ", human(g->bytes_per_mark, a), g->marks);
        if (!scope)
            fprintf(out, "(%lld allocation(s) per mark) ", g->count_per_mark);
        fputs("<span class=\"tag\">", out);
        put_text(out, g->kind ? g->kind : "device");
        fputs("</span>", out);
        if (g->suppressed)
            fputs("<span class=\"tag supp\">suppressed</span>", out);
        fputs(" — ", out);
        if (scope && strcmp(scope, "owner") == 0) {
            fputs("in the reserve of owner ", out);
            put_text(out, g->owner ? g->owner : "?");
            fputs(" (", out);
            put_text(out, g->owner_class ? g->owner_class : "?");
            fputs(")", out);
        } else if (scope) {
            fputs("in pool '", out);
            put_text(out, g->pool ? g->pool : "?");
            fputs(strcmp(scope, "pool") == 0 ? "' (allocated bytes)" : "', ", out);
            if (strcmp(scope, "pool") == 0 && g->stack.count)
                fputs(", growing at ", out);
            if (strcmp(scope, "pool") != 0 || g->stack.count)
                put_site_name(out, &g->stack);
        } else {
            put_site_name(out, &g->stack);
        }
        fputs("</summary>", out);
        if (!scope || g->stack.count) /* a pool or reserve without a line has no stack to miss */
            put_stack(out, &g->stack);
        fputs("</details>\n", out);
    }
}

static void put_timeline(FILE *out, const struct tl_report *r)
{
    size_t n = r->mark_count;
    uint64_t *v = calloc(3 * (n ? n : 1), sizeof(*v));
    long long *seq = calloc(n ? n : 1, sizeof(*seq));
    bool *free_known = calloc(n ? n : 1, sizeof(*free_known));
    if (!v || !seq || !free_known) {
        free(v);
        free(seq);
        free(free_known);
        return;
    }
    size_t free_unknown = 0;
    for (size_t i = 0; i < n; i++) {
        v[i] = r->marks[i].live_bytes;
        v[n + i] = r->marks[i].reserved_bytes;
        v[2 * n + i] = r->marks[i].device_free;
        seq[i] = r->marks[i].seq;
        free_known[i] = TL_HAS(&r->marks[i], MARK, device_free);
        free_unknown += !free_known[i];
    }
    fputs("<h3>Timeline of marks</h3>\n<p class=\"meta\">One point per "
          "<code>tensorleak_mark()</code>", out);
    if (n > 0 && r->marks[0].label) {
        fputs(" (label “", out);
        put_text(out, r->marks[0].label);
        fputs("”)", out);
    }
    fputs(": memory that rises with every request and never comes down is a leak in "
          "progress.</p>\n", out);
    /* Reserved first and wider: where live equals reserved both stay visible. */
    const struct series lr[] = { { "reserved", "reserved", v + n, NULL }, { "live", "live", v, NULL } };
    put_chart(out, "timeline", lr, 2, n, seq, "mark", NULL);
    if (free_unknown < n) {
        fputs("<p class=\"meta\">Free memory on the device, as the driver reported it at each "
              "mark", out);
        if (free_unknown > 0)
            fprintf(out, " (unknown at %zu mark%s, where the driver did not answer: no point)", free_unknown,
                    free_unknown == 1 ? "" : "s");
        fputs(".</p>\n", out);
        const struct series df[] = { { "device free", "device-free-line", v + 2 * n, free_known } };
        put_chart(out, "timeline device-free", df, 1, n, seq, "mark", NULL);
    }
    free(v);
    free(seq);
    free(free_known);
}

/* ---- one report ------------------------------------------------------ */

static void put_oom(FILE *out, const struct tl_report *r)
{
    char a[SIZE_HUMAN_MAX], b[SIZE_HUMAN_MAX], c[SIZE_HUMAN_MAX];
    const struct tl_oom *o = &r->oom;
    fputs("<h3>Out of memory</h3>\n<div class=\"oom\">", out);
    fprintf(out, "<p>A request of <b>%s</b> (", human(o->bytes, a));
    put_text(out, o->kind ? o->kind : "device");
    fprintf(out, ") failed on device %lld.", o->device);
    if (TL_HAS(o, OOM, verdict)) { /* the post-mortem's own figures, read at the failure */
        char why[512];
        report_oom_sentence(o, why, sizeof why);
        fputs(" Why: ", out);
        put_text(out, why);
        fputs(".</p>\n<ul class=\"oom-pools\">\n", out);
        for (size_t i = 0; i < o->pool_count; i++) {
            const struct tl_oom_pool *p = &o->pools[i];
            report_oom_pool_words(p, why, sizeof why);
            fputs("<li>pool <b>", out);
            put_text(out, p->name ? p->name : "?");
            fputs("</b>: ", out);
            put_text(out, why);
            fputs("</li>\n", out);
        }
        fputs("</ul>\n<p>The failing request:</p>", out);
        put_stack(out, &o->stack);
        for (size_t i = 0; i < o->pool_count; i++)
            for (size_t k = 0; k < o->pools[i].pinning_count; k++) {
                const struct tl_pool_site *s = &o->pools[i].pinning[k];
                fprintf(out, "<p>Pinning a fragmented segment of <b>");
                put_text(out, o->pools[i].name ? o->pools[i].name : "?");
                fprintf(out, "</b>: %s in %" PRIu64 " live block(s) from:</p>", human(s->bytes, a), s->count);
                put_stack(out, &s->stack);
            }
        fputs("</div>\n", out);
        return;
    }
    for (size_t i = 0; i < r->pool_count; i++) {
        const struct tl_pool *p = &r->pools[i];
        if (p->device != o->device || p->free_bytes == 0)
            continue;
        fputs(" At that moment pool <b>", out);
        put_text(out, p->name ? p->name : "?");
        if (tl_pool_layout_unknown(p)) {
            fprintf(out, "</b> had %s free, in pieces of unknown size.", human(p->free_bytes, b));
            continue;
        }
        fprintf(out, "</b> had %s free, in pieces of at most %s", human(p->free_bytes, b),
                human(p->largest_free_block, c));
        if (p->largest_free_block < p->free_bytes)
            fputs(": memory was free, but fragmented — a request larger than its largest piece "
                  "needs a new segment from the device.", out);
        else
            fputs(".", out);
    }
    fputs("</p>", out);
    put_stack(out, &o->stack);
    fputs("</div>\n", out);
}

static void put_invalid_frees(FILE *out, const struct tl_report *r)
{
    fputs("<h3>Invalid frees</h3>\n", out);
    for (size_t i = 0; i < r->invalid_free_count; i++) {
        const struct tl_invalid_free *f = &r->invalid_frees[i];
        fputs("<details class=\"site invalid-free\"><summary>free of <code>", out);
        put_text(out, f->address ? f->address : "?");
        fputs("</code> <span class=\"tag\">", out);
        put_text(out, f->kind ? f->kind : "device");
        fputs("</span>", out);
        if (f->suppressed)
            fputs("<span class=\"tag supp\">suppressed</span>", out);
        fputs(" — ", out);
        put_site_name(out, &f->stack);
        fputs("</summary>", out);
        put_stack(out, &f->stack);
        fputs("</details>\n", out);
    }
}

static void put_report(FILE *out, const struct tl_report *r, size_t index, size_t count)
{
    fprintf(out, "<section class=\"report\" id=\"report-%zu\" data-reason=\"", index + 1);
    put_text(out, r->reason ? r->reason : "");
    fputs("\"><h2>", out);
    if (count > 1)
        fprintf(out, "%zu/%zu · ", index + 1, count);
    put_text(out, report_basename(r->path));
    fputs("</h2>\n<p class=\"meta\">", out);
    put_text(out, r->reason ? r->reason : "report");
    if (r->label) {
        fputs(" “", out);
        put_text(out, r->label);
        fputs("”", out);
    }
    if (TL_HAS(r, REPORT, pid))
        fprintf(out, " · pid %lld", r->pid);
    else if (r->rank_count > 0)
        fprintf(out, " · merged from %zu ranks", r->rank_count);
    if (TL_HAS(r, REPORT, rank))
        fprintf(out, " · rank %lld", r->rank);
    if (r->host) {
        fputs(" · ", out);
        put_text(out, r->host);
    }
    if (r->time) {
        fputs(" · ", out);
        put_text(out, r->time);
    }
    if (r->command_count > 0) {
        fputs(" · <code>", out);
        for (size_t k = 0; k < r->command_count; k++) {
            if (k)
                fputc(' ', out);
            put_text(out, r->command[k]);
        }
        fputs("</code>", out);
    }
    fputs("</p>\n", out);
    put_verdicts(out, r);
    put_summary_table(out, r);

    if (r->leak_count > 0) {
        fputs(is_snapshot(r) ? "<h3>Live call sites at this snapshot</h3>\n"
                             : "<h3>Top leaking call sites</h3>\n", out);
        put_sites(out, r->leaks, r->leak_count, is_snapshot(r) ? "live" : "leak");
    }
    if (r->held_count > 0) {
        fputs(has_owners(r) ? "<h3>Held by pools and owners (not leaks)</h3>\n"
                            : "<h3>Held by pools (not leaks)</h3>\n", out);
        put_sites(out, r->held, r->held_count, "held");
    }
    if (has_owners(r)) {
        put_owners(out, r);
        put_owner_devices(out, r);
    }
    if (r->pool_count > 0 || r->device_count > 0) {
        fputs("<h3>Memory map</h3>\n", out);
        for (size_t i = 0; i < r->pool_count; i++)
            put_pool(out, &r->pools[i]);
        for (size_t i = 0; i < r->device_count; i++)
            put_device(out, r, &r->devices[i]);
    }
    if (r->mark_count > 0)
        put_timeline(out, r);
    if (r->growth_count > 0) {
        fputs("<h3>Growing call sites</h3>\n", out);
        put_growth(out, r);
    }
    if (r->invalid_free_count > 0)
        put_invalid_frees(out, r);
    if (TL_HAS(r, REPORT, oom))
        put_oom(out, r);
    fputs("</section>\n", out);
}

/* Several reports: a table and a chart of the totals, in the order given. */
static void put_sequence(FILE *out, const struct tl_report *reports, size_t count)
{
    char a[SIZE_HUMAN_MAX], b[SIZE_HUMAN_MAX], c[SIZE_HUMAN_MAX], d[SIZE_HUMAN_MAX];
    fprintf(out, "<section class=\"sequence\"><h2>Sequence of %zu reports</h2>\n"
            "<table><thead><tr><th>#</th><th>report</th><th>reason</th><th class=\"n\">leaked"
            "</th><th class=\"n\">live</th><th class=\"n\">reserved</th><th class=\"n\">"
            "allocated</th><th class=\"n\">fragmentation</th></tr></thead><tbody>\n", count);
    uint64_t *v = calloc(3 * count, sizeof(*v));
    const char **events = calloc(count, sizeof(*events));
    char (*event_text)[96] = calloc(count, sizeof(*event_text));
    bool any_event = false;
    for (size_t i = 0; i < count; i++) {
        const struct tl_report *r = &reports[i];
        bool budget = r->reason && strcmp(r->reason, "budget") == 0;
        if (budget && events && event_text) {
            snprintf(event_text[i], sizeof(event_text[i]), "budget: %.80s",
                     r->label ? r->label : "?");
            events[i] = event_text[i];
            any_event = true;
        }
        fprintf(out, "<tr%s><td>%zu</td><td><a href=\"#report-%zu\">",
                budget ? " class=\"budget\"" : "", i + 1, i + 1);
        put_text(out, report_basename(r->path));
        fputs("</a></td><td>", out);
        put_text(out, r->reason ? r->reason : "");
        if (r->label) {
            fputs(" “", out);
            put_text(out, r->label);
            fputs("”", out);
        }
        char frag[16];
        if (tl_summary_layout_unknown(&r->summary))
            snprintf(frag, sizeof frag, "unknown");
        else
            snprintf(frag, sizeof frag, "%.2f", r->summary.fragmentation);
        fprintf(out, "</td><td class=\"n\">%s</td><td class=\"n\">%s</td><td class=\"n\">%s</td>"
                "<td class=\"n\">%s</td><td class=\"n\">%s</td></tr>\n",
                human(r->summary.leaked_bytes, a), human(r->summary.live_bytes, b),
                human(r->summary.reserved_bytes, c), human(r->summary.allocated_bytes, d), frag);
        if (v) {
            v[i] = r->summary.live_bytes;
            v[count + i] = r->summary.reserved_bytes;
            v[2 * count + i] = r->summary.allocated_bytes;
        }
    }
    fputs("</tbody></table>\n", out);
    if (v) {
        const struct series s[] = { { "reserved", "reserved", v + count, NULL },
                                    { "allocated", "allocated-line", v + 2 * count, NULL },
                                    { "live", "live", v, NULL } };
        put_chart(out, "sequence-chart", s, 3, count, NULL, "report",
                  any_event ? events : NULL);
        if (any_event)
            fputs("<p class=\"meta\">Dashed red lines: reports written when a budget "
                  "(TENSORLEAK_BUDGET) was crossed.</p>\n", out);
    }
    free(v);
    free(events);
    free(event_text);
    fputs("</section>\n", out);
}

bool format_html(FILE *out, const struct tl_report *reports, size_t count)
{
    fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
          "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
          "<meta name=\"generator\" content=\"tensorleak " TL_VERSION "\">\n"
          "<title>tensorleak report", out);
    if (count == 1) {
        fputs(" — ", out);
        put_text(out, report_basename(reports[0].path));
    }
    fputs("</title>\n", out);
    for (size_t i = 0; i < count; i++) {
        const struct tl_report *r = &reports[i];
        for (size_t k = 0; k < r->owner_count; k++)
            remember_owner(r->owners[k].name);
        for (size_t k = 0; k < r->held_count; k++)
            remember_owner(r->held[k].owner);
        for (size_t k = 0; k < r->leak_count; k++)
            remember_owner(r->leaks[k].owner);
    }
    fputs("<style>\n", out);
    fputs(html_report_css, out);
    fputs("</style>\n", out);
    fputs("</head><body>\n", out);
    fputs(html_defs_svg, out);
    fputs("<main>\n<h1>tensorleak report</h1>\n", out);
    fprintf(out, "<p class=\"meta\">%zu report(s) · GPU memory: leaks, pools, fragmentation, "
            "growth · tensorleak " TL_VERSION "</p>\n", count);
    if (count > 1)
        put_sequence(out, reports, count);
    for (size_t i = 0; i < count; i++)
        put_report(out, &reports[i], i, count);
    fputs("<footer>Generated by tensorleak " TL_VERSION ". Self-contained: no network, "
          "no external files.</footer>\n</main>\n", out);
    fputs("<script>\n", out);
    fputs(html_report_js, out);
    fputs("</script>\n", out);
    fputs("</body></html>\n", out);
    free(owner_names);
    owner_names = NULL;
    owner_name_count = owner_name_cap = 0;
    return true;
}
