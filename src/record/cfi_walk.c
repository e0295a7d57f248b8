/*
 * cfi_walk.c — a stack walk from the .eh_frame call-frame tables, with a
 * per-thread cache of each return address's rule.
 *
 * Why: code built without frame pointers (libpython, libffi, CPython
 * extensions, libtorch, vendor libraries) defeats stack.c's frame-pointer
 * walk, and libunwind then costs 10-20 ns a frame plus ~80 ns a call on
 * every allocation (BENCHMARKS.md, "Python frames").  The rule that finds a
 * frame's caller (CFA = rsp or rbp + offset; the return address and rbp
 * saved at fixed offsets from the CFA) depends only on the instruction
 * address, so it is decoded from the module's .eh_frame once and cached; a
 * walk is then a few loads a frame.
 *
 * Only the common shape is decoded: CFA from rsp or rbp plus a constant,
 * rbp and the return address saved at constant offsets (or rbp unchanged).
 * Anything else (expressions, signal frames, an address without an FDE)
 * fails the walk, and the caller falls back to libunwind.  The walk is not
 * trusted on its own: stack.c confirms each distinct walked stack against
 * libunwind once, as it does for frame-pointer walks, so a decoding mistake
 * costs speed, never a wrong stack.  Reads stay within the thread's stack
 * and the module's mapped .eh_frame_hdr/.eh_frame.
 */
#include "tl_internal.h"

#include <link.h>
#include <string.h>

enum { REG_RBP = 6, REG_RSP = 7, REG_RA = 16 };

/* 16 bytes, four to a cache line: the walk's cost is mostly these loads.
 * The return address is always at CFA - 8 in the rules kept (x86-64's call
 * pushes it there); any other rule is RULE_FAIL. */
struct cfi_rule {
    uintptr_t pc;     /* the looked-up address (return address - 1); 0 = empty */
    int32_t cfa_off;
    int16_t rbp_off;  /* rbp saved at CFA + rbp_off; 0 = unchanged */
    uint8_t gen;      /* low bits of the flush generation it was decoded in */
    uint8_t state;    /* RULE_OK_RSP / RULE_OK_RBP (the CFA's register), RULE_END (outermost frame), RULE_FAIL */
};
enum { RULE_OK_RSP = 1, RULE_OK_RBP, RULE_END, RULE_FAIL };
_Static_assert(sizeof(struct cfi_rule) == 16, "four rules to a cache line");

#define RULE_SLOTS 1024
static atomic_uint generation = 1;

void tl_cfi_flush(void)
{
    atomic_fetch_add(&generation, 1);
}

/* ---- reading .eh_frame ---------------------------------------------------- */
struct reader {
    const uint8_t *p, *end;
    bool bad;
};

static uint64_t uleb(struct reader *r)
{
    uint64_t v = 0;
    for (int shift = 0; r->p < r->end && shift < 64; shift += 7) {
        uint8_t b = *r->p++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return v;
    }
    r->bad = true;
    return 0;
}

static int64_t sleb(struct reader *r)
{
    int64_t v = 0;
    int shift = 0;
    uint8_t b = 0x80;
    while (r->p < r->end && shift < 64 && (b & 0x80)) {
        b = *r->p++;
        v |= (int64_t)(b & 0x7f) << shift;
        shift += 7;
    }
    if (b & 0x80) {
        r->bad = true;
        return 0;
    }
    if (shift < 64 && (b & 0x40))
        v |= -((int64_t)1 << shift);
    return v;
}

static uint64_t fixed(struct reader *r, int size)
{
    if (r->end - r->p < size) {
        r->bad = true;
        return 0;
    }
    uint64_t v = 0;
    memcpy(&v, r->p, (size_t)size);
    r->p += size;
    return v;
}

/* A DW_EH_PE-encoded pointer (absptr/udata/sdata 2, 4, 8; pcrel or datarel). */
static uintptr_t encoded(struct reader *r, uint8_t enc, uintptr_t datarel)
{
    if (enc == 0xff)
        return 0;
    uintptr_t at = (uintptr_t)r->p;
    uint64_t v;
    switch (enc & 0x0f) {
    case 0x00: v = fixed(r, 8); break;
    case 0x02: v = fixed(r, 2); break;
    case 0x03: v = fixed(r, 4); break;
    case 0x04: v = fixed(r, 8); break;
    case 0x0a: v = (uint64_t)(int64_t)(int16_t)fixed(r, 2); break;
    case 0x0b: v = (uint64_t)(int64_t)(int32_t)fixed(r, 4); break;
    case 0x0c: v = fixed(r, 8); break;
    case 0x01: v = uleb(r); break;
    case 0x09: v = (uint64_t)sleb(r); break;
    default: r->bad = true; return 0;
    }
    switch (enc & 0x70) {
    case 0x00: break;
    case 0x10: v += at; break;
    case 0x30: v += datarel; break;
    default: r->bad = true; return 0;
    }
    if (enc & 0x80)
        r->bad = true; /* indirect: not in .eh_frame of ordinary code */
    return (uintptr_t)v;
}

struct find_ctx {
    uintptr_t pc;
    const uint8_t *hdr; /* the module's .eh_frame_hdr */
    uintptr_t hdr_end;
};

static int find_module(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    struct find_ctx *c = arg;
    const ElfW(Phdr) *eh = NULL;
    bool inside = false;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t s = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type == PT_LOAD && c->pc >= s && c->pc < s + ph->p_memsz)
            inside = true;
        else if (ph->p_type == PT_GNU_EH_FRAME)
            eh = ph;
    }
    if (!inside)
        return 0;
    if (eh) {
        c->hdr = (const uint8_t *)(info->dlpi_addr + eh->p_vaddr);
        c->hdr_end = (uintptr_t)c->hdr + eh->p_memsz;
    }
    return 1;
}

/* The FDE covering pc, through .eh_frame_hdr's sorted table. */
static const uint8_t *find_fde(uintptr_t pc)
{
    struct find_ctx c = {pc, NULL, 0};
    dl_iterate_phdr(find_module, &c);
    if (!c.hdr || c.hdr[0] != 1)
        return NULL;
    uintptr_t base = (uintptr_t)c.hdr;
    struct reader r = {c.hdr + 4, (const uint8_t *)c.hdr_end, false};
    uint8_t ptr_enc = c.hdr[1], count_enc = c.hdr[2], table_enc = c.hdr[3];
    encoded(&r, ptr_enc, base);
    uintptr_t count = encoded(&r, count_enc, base);
    if (r.bad || table_enc != 0x3b) /* datarel sdata4: what every linker writes */
        return NULL;
    const int32_t *table = (const int32_t *)r.p;
    if ((uintptr_t)(table + 2 * count) > c.hdr_end)
        return NULL;
    size_t lo = 0, hi = count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (base + (intptr_t)table[2 * mid] <= pc)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return NULL;
    return (const uint8_t *)(base + (intptr_t)table[2 * (lo - 1) + 1]);
}

struct cfa_state {
    uint8_t cfa_reg;
    int64_t cfa_off;
    int64_t rbp_off; /* 0: unchanged */
    int64_t ra_off;
    bool ra_known;
};

/* Runs call-frame instructions up to pc (loc: the address reached so far).
 * Returns false on anything outside the decoded subset that matters. */
static bool run_cfa(struct reader *r, uintptr_t *loc, uintptr_t pc, uint64_t code_align, int64_t data_align,
                    struct cfa_state *s, const struct cfa_state *initial)
{
    struct cfa_state stack[8];
    int depth = 0;
    while (r->p < r->end && !r->bad) {
        uint8_t op = *r->p++;
        uint8_t hi = op & 0xc0, low = op & 0x3f;
        uint64_t reg;
        int64_t off;
        if (hi == 0x40) {
            *loc += low * code_align;
            if (*loc > pc)
                return true;
            continue;
        }
        if (hi == 0x80) {
            off = (int64_t)uleb(r) * data_align;
            if (low == REG_RBP)
                s->rbp_off = off;
            else if (low == REG_RA)
                s->ra_off = off, s->ra_known = true;
            continue;
        }
        if (hi == 0xc0) {
            if (low == REG_RBP)
                s->rbp_off = initial ? initial->rbp_off : 0;
            else if (low == REG_RA && initial)
                s->ra_off = initial->ra_off, s->ra_known = initial->ra_known;
            continue;
        }
        switch (op) {
        case 0x00: break;                                                    /* nop */
        case 0x02: *loc += fixed(r, 1) * code_align; if (*loc > pc) return true; break;
        case 0x03: *loc += fixed(r, 2) * code_align; if (*loc > pc) return true; break;
        case 0x04: *loc += fixed(r, 4) * code_align; if (*loc > pc) return true; break;
        case 0x05:                                                           /* offset_extended */
        case 0x11:                                                           /* offset_extended_sf */
            reg = uleb(r);
            off = op == 0x05 ? (int64_t)uleb(r) * data_align : sleb(r) * data_align;
            if (reg == REG_RBP)
                s->rbp_off = off;
            else if (reg == REG_RA)
                s->ra_off = off, s->ra_known = true;
            break;
        case 0x06:                                                           /* restore_extended */
            reg = uleb(r);
            if (reg == REG_RBP)
                s->rbp_off = initial ? initial->rbp_off : 0;
            break;
        case 0x07:                                                           /* undefined */
            reg = uleb(r);
            if (reg == REG_RA)
                s->ra_known = false, s->ra_off = 0; /* the outermost frame */
            else if (reg == REG_RBP)
                return false;
            break;
        case 0x08:                                                           /* same_value */
            reg = uleb(r);
            if (reg == REG_RBP)
                s->rbp_off = 0;
            break;
        case 0x09:                                                           /* register */
            reg = uleb(r);
            uleb(r);
            if (reg == REG_RBP || reg == REG_RA)
                return false;
            break;
        case 0x0a:                                                           /* remember_state */
            if (depth == 8)
                return false;
            stack[depth++] = *s;
            break;
        case 0x0b:                                                           /* restore_state */
            if (depth == 0)
                return false;
            *s = stack[--depth]; /* the CFA rule too (DWARF 5, 6.4.2.4) */
            break;
        case 0x0c:                                                           /* def_cfa */
            s->cfa_reg = (uint8_t)uleb(r);
            s->cfa_off = (int64_t)uleb(r);
            break;
        case 0x12:                                                           /* def_cfa_sf */
            s->cfa_reg = (uint8_t)uleb(r);
            s->cfa_off = sleb(r) * data_align;
            break;
        case 0x0d: s->cfa_reg = (uint8_t)uleb(r); break;                      /* def_cfa_register */
        case 0x0e: s->cfa_off = (int64_t)uleb(r); break;                      /* def_cfa_offset */
        case 0x13: s->cfa_off = sleb(r) * data_align; break;                 /* def_cfa_offset_sf */
        case 0x2e: uleb(r); break;                                           /* GNU_args_size */
        case 0x10:                                                           /* expression */
        case 0x16:                                                           /* val_expression */
            reg = uleb(r);
            {
                uint64_t len = uleb(r);
                if (reg == REG_RBP || reg == REG_RA || len > (uint64_t)(r->end - r->p))
                    return false;
                r->p += len;
            }
            break;
        case 0x14:                                                           /* val_offset */
        case 0x15:                                                           /* val_offset_sf */
            reg = uleb(r);
            if (op == 0x14)
                uleb(r);
            else
                sleb(r);
            if (reg == REG_RBP || reg == REG_RA)
                return false;
            break;
        default: return false; /* def_cfa_expression, set_loc, vendor ops */
        }
    }
    return !r->bad;
}

/* Decodes the rule at pc from its FDE and CIE. */
static void decode(uintptr_t pc, struct cfi_rule *out)
{
    out->pc = pc;
    out->state = RULE_FAIL;
    const uint8_t *fde = find_fde(pc);
    if (!fde)
        return;
    uint32_t flen;
    memcpy(&flen, fde, 4);
    if (flen == 0 || flen == 0xffffffffu)
        return;
    struct reader f = {fde + 4, fde + 4 + flen, false};
    int32_t cie_ptr = (int32_t)fixed(&f, 4);
    if (cie_ptr == 0)
        return; /* a CIE, not an FDE */
    const uint8_t *cie = fde + 4 - cie_ptr;
    uint32_t clen;
    memcpy(&clen, cie, 4);
    if (clen == 0 || clen == 0xffffffffu)
        return;
    struct reader c = {cie + 4, cie + 4 + clen, false};
    if (fixed(&c, 4) != 0)
        return;
    uint8_t version = (uint8_t)fixed(&c, 1);
    const char *aug = (const char *)c.p;
    size_t auglen = strnlen(aug, (size_t)(c.end - c.p));
    c.p += auglen + 1;
    if (strstr(aug, "eh") || strchr(aug, 'S'))
        return; /* old GCC layout or a signal frame: libunwind's job */
    uint64_t code_align = uleb(&c);
    int64_t data_align = sleb(&c);
    uint64_t ra_reg = version == 1 ? fixed(&c, 1) : uleb(&c);
    uint8_t fde_enc = 0;
    if (aug[0] == 'z') {
        uint64_t alen = uleb(&c);
        const uint8_t *aend = c.p + alen;
        for (const char *a = aug + 1; *a && !c.bad; a++) {
            if (*a == 'R')
                fde_enc = (uint8_t)fixed(&c, 1);
            else if (*a == 'L')
                fixed(&c, 1);
            else if (*a == 'P') {
                uint8_t penc = (uint8_t)fixed(&c, 1);
                encoded(&c, penc & 0x7f, 0);
            } else
                break;
        }
        if (aend > c.end)
            return;
        c.p = aend;
    }
    if (c.bad || ra_reg != REG_RA)
        return;
    uintptr_t start = encoded(&f, fde_enc, 0);
    uintptr_t range = encoded(&f, fde_enc & 0x0f, 0);
    if (f.bad || pc < start || pc >= start + range)
        return;
    if (aug[0] == 'z') {
        uint64_t alen = uleb(&f);
        if (alen > (uint64_t)(f.end - f.p))
            return;
        f.p += alen;
    }
    struct cfa_state s = {REG_RSP, 8, 0, -8, false}, initial;
    uintptr_t loc = start;
    if (!run_cfa(&c, &loc, UINTPTR_MAX, code_align, data_align, &s, NULL))
        return;
    initial = s;
    loc = start;
    if (!run_cfa(&f, &loc, pc, code_align, data_align, &s, &initial))
        return;
    if (!s.ra_known) {
        out->state = RULE_END;
        return;
    }
    if ((s.cfa_reg != REG_RSP && s.cfa_reg != REG_RBP) || s.cfa_off < 0 || s.cfa_off > (1 << 20) ||
        s.rbp_off < -32768 || s.rbp_off > 32767 || s.ra_off != -8)
        return;
    out->cfa_off = (int32_t)s.cfa_off;
    out->rbp_off = (int16_t)s.rbp_off;
    out->state = s.cfa_reg == REG_RSP ? RULE_OK_RSP : RULE_OK_RBP;
}

static inline const struct cfi_rule *rule_for(struct cfi_rule *cache, uintptr_t pc, uint8_t gen)
{
    struct cfi_rule *r = &cache[(pc ^ (pc >> 10)) & (RULE_SLOTS - 1)];
    if (TL_UNLIKELY(r->pc != pc || r->gen != gen)) {
        decode(pc, r);
        r->gen = gen;
    }
    return r;
}

/* The thread's last walk: where it started and every stack word it read.
 * The walk is a function of those alone (and of the rules, which stay as
 * long as the generation does), so a walk from the same registers that finds
 * the same words at the same places has the same frames: checking that costs
 * a load a word, against a rule lookup and the loads a frame.  A loop that
 * allocates from one place walks the same stack every time. */
struct walk_memo {
    uintptr_t ret, sp, bp, hi;
    int max, n, nreads; /* n 0: none */
    uint8_t gen;
    uintptr_t at[2 * TL_MAX_DEPTH], val[2 * TL_MAX_DEPTH];
    uintptr_t frames[TL_MAX_DEPTH];
};
/* The thread's rules and memo: one block (tl_thread_block). */
struct cfi_thread {
    struct cfi_rule rules[RULE_SLOTS];
    struct walk_memo memo;
};
static __thread TL_TLS_IE struct cfi_thread *cfi_thread;

int tl_cfi_walk(uintptr_t ret, uintptr_t sp, uintptr_t bp, uintptr_t hi, uintptr_t *frames, int max, bool *same)
{
    struct cfi_thread *th = cfi_thread;
    *same = false;
    if (TL_UNLIKELY(!th) && !(th = tl_thread_block((void **)&cfi_thread, sizeof *th)))
        return -1; /* the caller falls back to libunwind */
    struct walk_memo *w = &th->memo;
    uint8_t gen = (uint8_t)atomic_load_explicit(&generation, memory_order_acquire);
    if (w->n > 0 && w->ret == ret && w->sp == sp && w->bp == bp && w->hi == hi && w->max == max && w->gen == gen) {
        int k = 0;
        while (k < w->nreads && *(const uintptr_t *)w->at[k] == w->val[k])
            k++;
        if (k == w->nreads) {
            memcpy(frames, w->frames, (size_t)w->n * sizeof *frames);
            *same = true;
            return w->n;
        }
    }
    w->n = 0;
    w->ret = ret;
    w->sp = sp;
    w->bp = bp;
    w->hi = hi;
    w->max = max;
    w->gen = gen;
    struct cfi_rule *cache = th->rules;
    int n = 0, reads = 0;
    while (n < max) {
        if (ret == 0)
            goto done;
        frames[n++] = ret;
        const struct cfi_rule *r = rule_for(cache, ret - 1, gen);
        if (r->state == RULE_END)
            goto done;
        if (r->state != RULE_OK_RSP && r->state != RULE_OK_RBP)
            return -1;
        uintptr_t cfa = (r->state == RULE_OK_RSP ? sp : bp) + (uintptr_t)(intptr_t)r->cfa_off;
        /* The caller's frame lies above this one, inside the stack. */
        if (cfa <= sp || cfa > hi || (cfa & 7))
            return -1;
        uintptr_t ra_at = cfa - sizeof(uintptr_t);
        if (ra_at < sp)
            return -1;
        if (r->rbp_off) {
            uintptr_t bp_at = cfa + (uintptr_t)(intptr_t)r->rbp_off;
            if (bp_at < sp || bp_at > hi - sizeof(uintptr_t))
                return -1;
            bp = *(const uintptr_t *)bp_at;
            w->at[reads] = bp_at;
            w->val[reads++] = bp;
        }
        ret = *(const uintptr_t *)ra_at;
        w->at[reads] = ra_at;
        w->val[reads++] = ret;
        sp = cfa;
    }
done:
    if (n > 0) {
        memcpy(w->frames, frames, (size_t)n * sizeof *frames);
        w->nreads = reads;
        w->n = n;
    }
    return n;
}
