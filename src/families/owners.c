/*
 * owners.c — who holds the memory.
 *
 * Without this, a real PyTorch program would show gigabytes of "leaks" at
 * exit: its caching allocator never returns cached segments, nor do NCCL,
 * cuBLAS workspaces or CUDA graphs.  Owner rules name the owner of memory by
 * a glob on a stack frame's module, function (mangled and demangled) or
 * file, with a class: `cache` (kept for reuse), `workspace`, `library`,
 * `user`.  A live allocation belongs to the first frame, innermost first,
 * that a rule matches; otherwise to `user`.  At exit, cache, library and
 * workspace memory is *held* (reported apart, with totals); user memory is
 * leaked.  Growth detection still applies to every owner.
 *
 *   owner:NAME:CLASS:KINDS:PATTERN     (KINDS: * or device,async,host_pinned,...)
 *
 * Rules come from TENSORLEAK_OWNERS (first, so a user rule overrides a
 * default) and the defaults shipped in data/owners.rules, compiled into the
 * library (TENSORLEAK_DEFAULT_OWNERS=0 turns them off; options.c reads it).
 *
 * Each owner's peak is a running one, kept like the process's
 * peak_live_bytes: every row entering or leaving the live table is charged
 * to its owner inside the table's critical section (tl_owner_count_row,
 * called by tl_count_row).  A row's owner is its call site's, decided once
 * per call site before the site's first row enters the table
 * (tl_owner_prepare), from the names dladdr gives (what budgets use); a
 * segment an annotated pool holds is that pool's ("annotated pools").
 */
#include "counts.h"
#include "record.h"
#include "report_gather.h"

#include <dlfcn.h>
#include <link.h>
#include <errno.h>
#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "owners_default.h"

#include <uthash.h>

enum owner_class { CLASS_CACHE, CLASS_WORKSPACE, CLASS_LIBRARY, CLASS_USER };
static const char *const class_names[] = {"cache", "workspace", "library", "user"};

struct rule {
    int owner;        /* index into owners[] */
    unsigned kinds;   /* bit per tl_kind */
    char *pattern;
};

struct owner {
    char name[64];
    enum owner_class cls;
    long long peak_bytes; /* the highest a report showed (under owners_lock) */
};

#define MAX_OWNERS 128
static struct rule *rules;
static size_t nrules;
static struct owner owners[MAX_OWNERS]; /* [0] = user (unmatched) */
static int nowners;
static int pools_owner = -1; /* "annotated pools": the segments they hold */
/* "CUDA graph memory" (the default rules' owner of graph memory): the
 * allocation nodes a device's graph memory holds. */
static int graph_owner = -1;
static pthread_mutex_t owners_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t static_lock = PTHREAD_MUTEX_INITIALIZER; /* static_frames below */

/* Running totals per owner index o: tl_owner_figures[o + 1] (tracker.c),
 * kept by counts.h. */
_Static_assert(TL_MAX_OWNERS == MAX_OWNERS, "one owner limit");

static int find_or_add_owner(const char *name, enum owner_class cls)
{
    for (int i = 0; i < nowners; i++)
        if (!strcmp(owners[i].name, name) && owners[i].cls == cls)
            return i;
    if (nowners >= MAX_OWNERS)
        return -1;
    snprintf(owners[nowners].name, sizeof owners[nowners].name, "%s", name);
    owners[nowners].cls = cls;
    return nowners++;
}

/* Whether a rule's word names row `k` (kinds.h): its report name, but a
 * kind reported under a name it shares with another (stream-ordered
 * blocks, reported as "device") by its own older name ("async"), so that
 * "device" and "async" stay apart in rules. */
static bool rule_names_kind(const char *word, size_t n, int k)
{
    const char *name = tl_kind_rows[k].old_name ? tl_kind_rows[k].old_name : tl_kind_rows[k].name;
    return strlen(name) == n && !strncmp(name, word, n);
}

static int parse_kinds(const char *s, size_t len, unsigned *out)
{
    if (len == 1 && *s == '*') {
        *out = ~0u;
        return 0;
    }
    unsigned bits = 0;
    while (len > 0) {
        const char *comma = memchr(s, ',', len);
        size_t n = comma ? (size_t)(comma - s) : len;
        bool ok = false;
        for (int k = 0; k < TL_KIND_COUNT; k++)
            if (rule_names_kind(s, n, k)) {
                bits |= 1u << k;
                ok = true;
            }
        if (!ok)
            return -1;
        s += n + (comma ? 1 : 0);
        len -= n + (comma ? 1 : 0);
    }
    *out = bits;
    return bits ? 0 : -1;
}

/* Parses one rules text.  Returns the number of malformed lines; each is
 * named (at most 5 per file). */
static int tl_owner_rules_parse(const char *text, size_t len, const char *origin)
{
    int bad = 0;
    unsigned lineno = 0;
    const char *end = text + len;
    for (const char *line = text; line < end;) {
        const char *nl = memchr(line, '\n', (size_t)(end - line));
        const char *stop = nl ? nl : end;
        lineno++;
        const char *s = line, *e = stop;
        while (s < e && (*s == ' ' || *s == '\t'))
            s++;
        while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r'))
            e--;
        line = nl ? nl + 1 : end;
        if (s == e || *s == '#')
            continue;
        const char *why = NULL;
        const char *f[4];
        size_t flen[4];
        const char *p = s;
        for (int i = 0; i < 4 && !why; i++) {
            const char *colon = memchr(p, ':', (size_t)(e - p));
            if (!colon) {
                why = "expected owner:NAME:CLASS:KINDS:PATTERN";
                break;
            }
            f[i] = p;
            flen[i] = (size_t)(colon - p);
            p = colon + 1;
        }
        int cls = -1;
        unsigned kinds = 0;
        if (!why && !(flen[0] == 5 && !strncmp(f[0], "owner", 5)))
            why = "a rule starts with 'owner:'";
        if (!why && (flen[1] == 0 || flen[1] >= sizeof owners[0].name))
            why = "owner name empty or longer than 63 bytes";
        for (int c = 0; !why && c < 4 && cls < 0; c++)
            if (strlen(class_names[c]) == flen[2] && !strncmp(class_names[c], f[2], flen[2]))
                cls = c;
        if (!why && cls < 0)
            why = "class must be cache, workspace, library or user";
        if (!why && parse_kinds(f[3], flen[3], &kinds) != 0)
            why = "kinds must be * or a comma list of device, async, host_pinned, managed, vmm_handle, vmm_mapping, vmm_reservation, pool_block, host_registered, array, ipc_mapping";
        if (!why && p == e)
            why = "empty pattern";
        if (why) {
            if (++bad <= 5)
                tl_warn(NULL, "%s:%u: %s; line ignored", origin, lineno, why);
            continue;
        }
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)flen[1], f[1]);
        int owner = find_or_add_owner(name, (enum owner_class)cls);
        struct rule *nr = realloc(rules, (nrules + 1) * sizeof *rules);
        char *pat = strndup(p, (size_t)(e - p));
        if (owner < 0 || !nr || !pat) {
            free(pat);
            if (nr)
                rules = nr;
            tl_note_dropped("too many owner rules");
            continue;
        }
        rules = nr;
        rules[nrules++] = (struct rule){owner, kinds, pat};
    }
    if (bad > 5)
        tl_warn(NULL, "%s: %d more malformed line(s) ignored", origin, bad - 5);
    return bad;
}

/* A forked child starts with an empty live table (preload.c): its owners
 * hold nothing yet.  Call sites and their owners survive the fork. */
void tl_owners_after_fork(void)
{
    pthread_mutex_init(&owners_lock, NULL);
    pthread_mutex_init(&static_lock, NULL);
    memset(tl_owner_figures, 0, sizeof tl_owner_figures);
    for (int o = 0; o < nowners; o++)
        owners[o].peak_bytes = 0;
}

void tl_owners_load(void)
{
    pthread_mutex_lock(&owners_lock);
    nowners = 0;
    find_or_add_owner("user", CLASS_USER);
    const char *user_file = tl_opt.owners;
    if (*user_file) {
        FILE *fp = tl_options_open_file("TENSORLEAK_OWNERS", user_file, "no user owner rules");
        if (fp) {
            char *buf = NULL;
            size_t cap = 0;
            ssize_t n = getdelim(&buf, &cap, '\0', fp); /* the whole file */
            if (n > 0)
                tl_owner_rules_parse(buf, (size_t)n, user_file);
            free(buf);
            fclose(fp);
        }
    }
    if (tl_opt.default_owners)
        tl_owner_rules_parse(tl_default_owner_rules, sizeof tl_default_owner_rules - 1, "default owner rules");
    /* Last, so the rule owners keep their order in reports. */
    pools_owner = find_or_add_owner("annotated pools", CLASS_CACHE);
    graph_owner = find_or_add_owner("CUDA graph memory", CLASS_CACHE);
    pthread_mutex_unlock(&owners_lock);
    atomic_store_explicit(&tl_held_row_owner, tl_owner_of_held_row, memory_order_release);
    tl_demangler(); /* a C++ program's, found at start */
}

/* ---- matching ------------------------------------------------------------ */

typedef tl_demangle_fn demangle_fn;

static bool glob(const char *pattern, const char *s)
{
    if (!s)
        return false;
    if (fnmatch(pattern, s, 0) == 0)
        return true;
    const char *base = strrchr(s, '/');
    return base && fnmatch(pattern, base + 1, 0) == 0;
}

/* A mangled C++ name demangled (malloc'd, the caller frees), or NULL. */
static char *demangled(demangle_fn demangle, const char *fn)
{
    if (!demangle || !fn || fn[0] != '_' || fn[1] != 'Z')
        return NULL;
    int status = -1;
    char *dem = demangle(fn, NULL, NULL, &status);
    if (status != 0) {
        free(dem);
        return NULL;
    }
    return dem;
}

/* Owner index of a call site: first frame (innermost first) any rule
 * matches, rules in order; 0 (user) when none does. */
static int owner_of(struct tl_gather *m, struct tl_callsite *cs, demangle_fn demangle)
{
    for (int i = 0; i < cs->nframes; i++) {
        const struct tl_frame_info *f = tl_report_frame(m, cs->frames[i]);
        /* Inlined callees count as frames: PyTorch's allocator is mostly
         * inlined into its callers. */
        struct tl_inline_frame shown[TL_MAX_INLINE + 1];
        int k = tl_frame_expand(f, shown);
        for (int j = 0; j < k; j++) {
            const char *fn = shown[j].function;
            char *dem = demangled(demangle, fn);
            for (size_t r = 0; r < nrules; r++) {
                if (!(rules[r].kinds & (1u << cs->kind)))
                    continue;
                const char *pat = rules[r].pattern;
                if (glob(pat, f->module) || glob(pat, fn) || glob(pat, dem) || glob(pat, shown[j].symbol) ||
                    glob(pat, shown[j].file)) {
                    free(dem);
                    return rules[r].owner;
                }
            }
            free(dem);
        }
    }
    return 0;
}

/* owner_of's answers by call-site id (the owner index + 1; 0 = not asked
 * yet), so that a report, or the live state rewritten every second, does not
 * symbolize every frame of every site again: that decompresses debug
 * sections each time.  A site's frames and the rules never change; the
 * libraries mapped at its addresses may (dlopen, dlclose), so the answers
 * are kept while glibc's counts of loads and unloads stay the same, and in
 * the process that found them (a forked child numbers its sites anew).
 * Under owners_lock. */
static struct {
    uint8_t *owner;
    size_t cap;
    unsigned long long adds, subs;
    pid_t pid;
} site_owners;

/* Forgets the answers when the loaded libraries changed (counts: glibc's
 * loads and unloads, tl_module_loads, read before owners_lock is taken)
 * or the process is a child that did not find them. */
static void site_owners_check(const unsigned long long counts[2])
{
    pid_t pid = getpid();
    if (counts[0] != site_owners.adds || counts[1] != site_owners.subs || pid != site_owners.pid) {
        if (site_owners.owner)
            memset(site_owners.owner, 0, site_owners.cap);
        site_owners.adds = counts[0];
        site_owners.subs = counts[1];
        site_owners.pid = pid;
    }
}

static int site_owner(struct tl_gather *m, struct tl_callsite *cs, demangle_fn demangle)
{
    if (cs->id < site_owners.cap && site_owners.owner[cs->id])
        return site_owners.owner[cs->id] - 1;
    int o = owner_of(m, cs, demangle);
    if (cs->id >= site_owners.cap) {
        size_t cap = site_owners.cap ? site_owners.cap : 1024;
        while (cap <= cs->id)
            cap *= 2;
        uint8_t *grown = realloc(site_owners.owner, cap);
        if (!grown)
            return o; /* not remembered: asked again next time */
        memset(grown + site_owners.cap, 0, cap - site_owners.cap);
        site_owners.owner = grown;
        site_owners.cap = cap;
    }
    site_owners.owner[cs->id] = (uint8_t)(o + 1);
    return o;
}

/* The owner of a held row: stream-ordered rows held are allocation nodes in
 * a device's graph memory, the others segments an annotated pool holds
 * (pools.c: only those are held). */
static int held_owner(const struct tl_callsite *cs)
{
    return cs->kind == TL_KIND_ASYNC ? graph_owner : pools_owner;
}

static bool holds(enum owner_class c)
{
    return c == CLASS_CACHE || c == CLASS_LIBRARY || c == CLASS_WORKSPACE;
}

/* Each owner's live memory per device (host memory apart), attributed as
 * tl_owners_collect attributes the sites: a pool's segments to "annotated
 * pools", other rows to their call site's owner; address space adds counts,
 * never bytes.  Fills m->owner_devices, by device (host last), then in
 * owner order.  Under owners_lock. */
static void owners_by_device(struct tl_gather *m, demangle_fn demangle)
{
    enum { SLOTS = TL_MAX_DEVICES + 1 }; /* the last: host memory */
    long long *bytes = calloc((size_t)nowners * SLOTS, sizeof *bytes);
    long long *count = calloc((size_t)nowners * SLOTS, sizeof *count);
    size_t rows = 0;
    for (size_t i = 0; bytes && count && i < m->nsite_devices; i++) {
        const struct tl_site_device *e = &m->site_devices[i];
        struct tl_callsite *cs = tl_callsite_by_id(e->site);
        if (!cs)
            continue;
        /* Held rows as tl_owners_collect attributes them. */
        int o = e->held ? held_owner(cs) : nrules ? site_owner(m, cs, demangle) : 0;
        if (o < 0)
            continue;
        size_t k = (size_t)o * SLOTS + (size_t)(e->device < 0 ? TL_MAX_DEVICES : e->device);
        rows += count[k] == 0;
        if (!tl_is_address_space(cs->kind))
            bytes[k] += e->bytes;
        count[k] += e->count;
    }
    m->owner_devices = rows && bytes && count ? calloc(rows, sizeof *m->owner_devices) : NULL;
    m->owner_devices_unknown = !bytes || !count || (rows && !m->owner_devices);
    for (int d = 0; m->owner_devices && d < SLOTS; d++)
        for (int o = 0; o < nowners; o++) {
            size_t k = (size_t)o * SLOTS + (size_t)d;
            if (!count[k])
                continue;
            struct tl_owner_device_row *row = &m->owner_devices[m->nowner_devices++];
            memcpy(row->name, owners[o].name, sizeof row->name);
            row->cls = class_names[owners[o].cls];
            row->device = d == TL_MAX_DEVICES ? -1 : d;
            row->live_bytes = bytes[k];
            row->live_count = count[k];
        }
    free(bytes);
    free(count);
}

/* Attributes every site of the report to its owner; at any report, sites of
 * holding owners move from `sites` to `held`.  Fills m->owners. */
void tl_owners_collect(struct tl_gather *m)
{
    unsigned long long loads[2];
    tl_module_loads(loads);
    pthread_mutex_lock(&owners_lock);
    if (nowners == 0) {
        pthread_mutex_unlock(&owners_lock);
        return;
    }
    site_owners_check(loads);
    demangle_fn demangle = tl_demangler();
    long long bytes[MAX_OWNERS] = {0}, count[MAX_OWNERS] = {0};
    size_t keep = 0;
    struct tl_site *moved = calloc(m->nsites + m->nheld + 1, sizeof *moved);
    size_t nmoved = 0;
    for (size_t i = 0; i < m->nsites; i++) {
        struct tl_site s = m->sites[i];
        int o = nrules ? site_owner(m, s.cs, demangle) : 0;
        s.owner = owners[o].name;
        s.owner_class = class_names[owners[o].cls];
        if (!tl_is_address_space(s.cs->kind))
            bytes[o] += s.bytes;
        count[o] += s.count;
        if (holds(owners[o].cls) && moved)
            moved[nmoved++] = s;
        else
            m->sites[keep++] = s;
    }
    m->nsites = keep;
    for (size_t i = 0; i < m->nheld; i++) {
        int o = held_owner(m->held[i].cs);
        if (o < 0)
            continue;
        m->held[i].owner = owners[o].name;
        m->held[i].owner_class = class_names[CLASS_CACHE];
        bytes[o] += m->held[i].bytes;
        count[o] += m->held[i].count;
    }
    if (nmoved) {
        struct tl_site *held = realloc(m->held, (m->nheld + nmoved + 1) * sizeof *held);
        if (held) {
            memcpy(held + m->nheld, moved, nmoved * sizeof *moved);
            for (size_t i = 0; i < nmoved; i++)
                if (!tl_is_address_space(moved[i].cs->kind))
                    m->held_bytes += moved[i].bytes;
            m->held = held;
            m->nheld += nmoved;
        }
    }
    free(moved);
    m->owners = calloc((size_t)nowners, sizeof *m->owners);
    for (int o = 0; m->owners && o < nowners; o++) {
        /* The running peak; where this report attributes more to the owner
         * than allocation time did (a rule on a source file, which only a
         * report can read), the report's own figure bounds it from below. */
        long long peak = atomic_load_explicit(&tl_owner_figures[o + 1].peak, memory_order_relaxed);
        if (peak > owners[o].peak_bytes)
            owners[o].peak_bytes = peak;
        if (bytes[o] > owners[o].peak_bytes)
            owners[o].peak_bytes = bytes[o];
        if (count[o] == 0 && owners[o].peak_bytes == 0 && o != 0)
            continue;
        struct tl_owner_row *row = &m->owners[m->nowners++];
        memcpy(row->name, owners[o].name, sizeof row->name);
        row->cls = class_names[owners[o].cls];
        row->live_bytes = bytes[o];
        row->live_count = count[o];
        row->peak_bytes = owners[o].peak_bytes;
    }
    owners_by_device(m, demangle);
    pthread_mutex_unlock(&owners_lock);
}

/* ---- owner at allocation time (running peaks, budgets) ------------------ *
 * Reports symbolize with libdwfl; the hot path cannot.  A call site's owner
 * is computed once, when it first allocates, from dladdr (module path,
 * exported symbol name), which is what the default rules match, and kept in
 * the call site (tl_callsite.owner); a static function's name comes from the symbol table where a
 * module rule would otherwise decide (below).  A rule on a source file
 * applies in reports but not here.  Nothing here holds a lock of ours while
 * dladdr or the symbolizer runs: a thread inside dlopen holds the loader's
 * lock and may allocate from a library constructor meanwhile. */
/* The first rule for `kind` matching a module path or a function name
 * (raw, demangled), or -1; *by_module tells whether only the module matched. */
static long first_rule(uint8_t kind, const char *module, const char *fn, demangle_fn demangle, bool *by_module)
{
    char *dem = demangled(demangle, fn);
    long found = -1;
    for (size_t r = 0; r < nrules && found < 0; r++) {
        if (!(rules[r].kinds & (1u << kind)))
            continue;
        const char *pat = rules[r].pattern;
        bool by_name = glob(pat, fn) || glob(pat, dem);
        if (by_name || glob(pat, module)) {
            found = (long)r;
            *by_module = !by_name;
        }
    }
    free(dem);
    return found;
}

/* A frame's raw name from the symbol table (static functions are not in
 * the dynamic one that dladdr reads): a symbolizer session, opened only for
 * such a frame (see below), and remembered by return address, since the same
 * frame recurs in many call sites.  NULL when the table has none.  The
 * table is under static_lock, taken only around its look-ups; a thread that
 * finds it busy (a signal handler interrupting a look-up) asks the symbol
 * table without remembering. */
struct static_frame {
    UT_hash_handle hh;
    uintptr_t frame;
    char *name;
};
static struct static_frame *static_frames;

static const char *static_name(uintptr_t frame)
{
    struct static_frame *e = NULL;
    bool locked = pthread_mutex_trylock(&static_lock) == 0;
    if (locked) {
        HASH_FIND(hh, static_frames, &frame, sizeof frame, e);
        pthread_mutex_unlock(&static_lock);
        if (e)
            return e->name;
    }
    void *session = tl_symbolizer_open();
    if (!session)
        return NULL;
    struct tl_frame_info f;
    tl_symbolize(session, frame, &f);
    const char *raw = f.symbol ? f.symbol : f.function;
    char *name = raw ? strdup(raw) : NULL;
    tl_symbolizer_close(session);
    e = locked ? calloc(1, sizeof *e) : NULL;
    if (!e)
        return name; /* not remembered: leaked, once per such look-up */
    e->frame = frame;
    e->name = name;
    pthread_mutex_lock(&static_lock);
    struct static_frame *had;
    HASH_FIND(hh, static_frames, &frame, sizeof frame, had);
    if (!had)
        HASH_ADD(hh, static_frames, frame, sizeof frame, e);
    pthread_mutex_unlock(&static_lock);
    if (had) { /* another thread remembered it meanwhile */
        free(e->name);
        free(e);
        return had->name;
    }
    return name;
}

static int owner_by_dladdr(struct tl_callsite *cs, demangle_fn demangle)
{
    for (int i = 0; i < cs->nframes; i++) {
        Dl_info info;
        const ElfW(Sym) *sym = NULL;
        uintptr_t pc = cs->frames[i] - 1;
        if (!dladdr1((void *)pc, &info, (void **)&sym, RTLD_DL_SYMENT))
            continue;
        /* dladdr names the nearest exported symbol below the address; it is
         * this frame's function only if the address lies inside it. */
        const char *fn = sym && sym->st_size && pc - (uintptr_t)info.dli_saddr < sym->st_size ? info.dli_sname : NULL;
        bool by_module = false;
        long r = first_rule(cs->kind, info.dli_fname, fn, demangle, &by_module);
        /* A module rule decided a frame whose function dladdr cannot name,
         * while an earlier rule might name it otherwise (PyTorch: the static
         * uncached_allocate in libc10_cuda is user memory, before the module
         * rule that makes libc10_cuda's segments cache): ask the symbol
         * table, once per frame. */
        if (r > 0 && by_module && !fn) {
            const char *real = static_name(cs->frames[i]);
            if (real)
                r = first_rule(cs->kind, info.dli_fname, real, demangle, &by_module);
        }
        if (r >= 0)
            return rules[r].owner;
    }
    return 0;
}

void tl_owner_decide(struct tl_callsite *cs)
{
    /* Two threads may decide at once: both find the same owner.  dladdr and
     * the demangler's look-up take the loader's lock: never in a child
     * nobody told us about (gate.c; where its page is not wiped, the only
     * check on this path), whose copy of that lock one of our threads may
     * have held; its site stays the user's. */
    if (tl_gate_foreign()) {
        atomic_store_explicit(&cs->owner, 1, memory_order_relaxed);
        return;
    }
    /* Nor on the watcher (a report's growth or budget class of a site no
     * row has entered yet): undecided there, the user's for that report,
     * decided by the first program thread that asks. */
    if (!tl_may_take_loader_lock())
        return;
    /* Asked even without rules: a new call site may come from code that
     * loaded a C++ runtime, whose demangler the watcher's reports use but
     * cannot look up themselves. */
    demangle_fn demangle = tl_demangler();
    int o = nrules ? owner_by_dladdr(cs, demangle) : 0;
    atomic_store_explicit(&cs->owner, (uint8_t)(o + 1), memory_order_relaxed);
}

int tl_owner_of_held_row(const struct tl_live *rec)
{
    return tl_pools_is_held(rec) ? pools_owner : rec->owner - 1;
}

int tl_owner_class_of(struct tl_callsite *cs)
{
    if (!cs)
        return CLASS_USER;
    int o = tl_owner_prepare(cs);
    return o >= 0 && o < nowners ? (int)owners[o].cls : CLASS_USER;
}
