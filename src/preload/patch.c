/*
 * patch.c — moving the first instructions of a driver entry point aside, so
 * that a 5-byte `jmp rel32` can take their place (x86-64).
 *
 * A running program holds the driver's entry points already (NVIDIA's
 * runtime fetched them with cuGetProcAddress, PyTorch through
 * cudaGetDriverEntryPointByVersion), so no symbol interposition reaches it;
 * what every path still runs is the entry's own code.  For each entry we
 * build, in memory within ±2 GiB of the driver:
 *
 *   stub:        jmp *[rip+0]; .quad hook       (the hook may be far away)
 *   trampoline:  the whole instructions the patch covers, moved; jmp entry+len
 *
 * and the patch is `jmp rel32` to the stub, the rest of the covered bytes
 * int3 (never run: no thread is inside them when they are written, and no
 * branch lands there, as checked below).  The hook's real function is the
 * trampoline, never the entry, which would loop back into the hook.
 *
 * An instruction is moved as it is, except: a RIP-relative memory operand
 * gets its displacement recomputed for the new address (refused if it no
 * longer fits 32 bits), and an unconditional relative jump (a tail call, as
 * short entry points often are) becomes a `jmp rel32` to the same target and
 * ends the trampoline.  Refused, with the reason: a call, a conditional
 * branch or a return among the covered bytes, a function shorter than the
 * patch, a branch (from anywhere in the function) into the covered bytes
 * after their first, bytes the decoder does not know.
 */
#include "tl_internal.h"
#include "patch.h"

#include <stdio.h>

#if defined(__x86_64__)

#include <Zydis/Zydis.h>
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define JMP_REL32_LEN 5
#define STUB_LEN 14
/* Moved instructions grow only when a short jump becomes a rel32 one. */
#define TRAMPOLINE_MAX (TENSORLEAK_PATCH_MAX_BYTES + 16)

static bool fits_rel32(int64_t v)
{
    return v >= INT32_MIN && v <= INT32_MAX;
}

static void put_jmp_rel32(uint8_t *at, uint64_t at_addr, uint64_t target)
{
    int32_t rel = (int32_t)(int64_t)(target - (at_addr + JMP_REL32_LEN));
    at[0] = 0xe9;
    memcpy(at + 1, &rel, 4);
}

void *tl_patch_arena_near(const void *anchor, size_t size)
{
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t base = (uintptr_t)anchor & ~(uintptr_t)(page - 1);
    /* Below the driver first (the usual free space under the libraries),
     * then above it, in 1 MiB steps, never further than 1 GiB so that every
     * entry of a driver up to 1 GiB of text stays within rel32 reach. */
    const uintptr_t step = 1u << 20, reach = (uintptr_t)1 << 30;
    for (uintptr_t off = step; off < reach; off += step) {
        for (int dir = 0; dir < 2; dir++) {
            uintptr_t at = dir == 0 ? base - off : base + off;
            if (dir == 0 && base < off)
                continue;
            void *p = mmap((void *)at, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
            if (p == MAP_FAILED)
                continue;
            if (p == (void *)at)
                return p;
            munmap(p, size); /* a kernel without MAP_FIXED_NOREPLACE took it as a hint */
        }
    }
    return NULL;
}

static bool decoder_ready(ZydisDecoder *d)
{
    return ZYAN_SUCCESS(ZydisDecoderInit(d, ZYDIS_MACHINE_MODE_LONG_64, ZYDIS_STACK_WIDTH_64));
}

/* The target of a relative branch `in` at `ip`. */
static uint64_t branch_target(const ZydisDecodedInstruction *in, uint64_t ip)
{
    return ip + in->length + (uint64_t)in->raw.imm[0].value.s;
}

static bool is_rip_relative_memory(const ZydisDecodedInstruction *in)
{
    return (in->attributes & ZYDIS_ATTRIB_HAS_MODRM) && in->raw.modrm.mod == 0 && in->raw.modrm.rm == 5 &&
           in->raw.disp.size == 32;
}

/* The size of the function at `entry` as its symbol says; 0 if unknown. */
static size_t function_size(const void *entry)
{
    Dl_info info;
    const ElfW(Sym) *sym = NULL;
    if (!dladdr1(entry, &info, (void **)&sym, RTLD_DL_SYMENT) || !sym || info.dli_saddr != entry)
        return 0;
    return sym->st_size;
}

/* Does any relative branch in the function land in (entry, entry + len)?
 * A linear sweep of the symbol's bytes: the driver's text is code only. */
static bool branch_into(const ZydisDecoder *d, const uint8_t *entry, size_t fsize, uint32_t len)
{
    uint64_t lo = (uint64_t)(uintptr_t)entry, hi = lo + len;
    for (size_t off = 0; off < fsize;) {
        ZydisDecodedInstruction in;
        if (!ZYAN_SUCCESS(ZydisDecoderDecodeInstruction(d, NULL, entry + off, fsize - off, &in))) {
            off++; /* padding or data: resynchronise on the next byte */
            continue;
        }
        if ((in.attributes & ZYDIS_ATTRIB_IS_RELATIVE) && in.raw.imm[0].is_relative) {
            uint64_t t = branch_target(&in, lo + off);
            if (t > lo && t < hi)
                return true;
        }
        off += in.length;
    }
    return false;
}

bool tl_patch_build(void *entry, void *hook, uint8_t *slot, struct tensorleak_patch *out, void **trampoline,
                    char *why, size_t whylen)
{
    ZydisDecoder d;
    if (!decoder_ready(&d)) {
        snprintf(why, whylen, "the instruction decoder could not start");
        return false;
    }
    const uint8_t *code = entry;
    uint64_t ip0 = (uint64_t)(uintptr_t)entry;
    size_t fsize = function_size(entry);
    if (fsize && fsize < JMP_REL32_LEN) {
        snprintf(why, whylen, "the function is %zu bytes, shorter than the %d-byte patch", fsize, JMP_REL32_LEN);
        return false;
    }
    uint8_t *stub = slot, *tramp = slot + STUB_LEN;
    uint64_t tramp_addr = (uint64_t)(uintptr_t)tramp;
    size_t emitted = 0;
    uint32_t len = 0;
    bool ended = false; /* an unconditional jump: nothing falls through */
    while (len < JMP_REL32_LEN) {
        ZydisDecodedInstruction in;
        size_t avail = fsize ? fsize - len : TENSORLEAK_PATCH_MAX_BYTES - len;
        if (!ZYAN_SUCCESS(ZydisDecoderDecodeInstruction(&d, NULL, code + len, avail, &in))) {
            snprintf(why, whylen, "undecodable instruction at +%u", len);
            return false;
        }
        uint64_t ip = ip0 + len, new_ip = tramp_addr + emitted;
        if (len + in.length > TENSORLEAK_PATCH_MAX_BYTES || emitted + in.length + JMP_REL32_LEN > TRAMPOLINE_MAX) {
            snprintf(why, whylen, "instructions too long to move");
            return false;
        }
        if (in.meta.category == ZYDIS_CATEGORY_RET) {
            snprintf(why, whylen, "returns at +%u, inside the %d bytes the patch replaces", len, JMP_REL32_LEN);
            return false;
        }
        if ((in.attributes & ZYDIS_ATTRIB_IS_RELATIVE) && in.raw.imm[0].is_relative) {
            uint64_t t = branch_target(&in, ip);
            if (in.meta.category != ZYDIS_CATEGORY_UNCOND_BR) {
                snprintf(why, whylen, "%s at +%u, inside the bytes the patch replaces",
                         in.meta.category == ZYDIS_CATEGORY_CALL ? "a call" : "a branch", len);
                return false;
            }
            if (t >= ip0 && t < ip0 + len + in.length) {
                snprintf(why, whylen, "a jump at +%u into the bytes the patch replaces", len);
                return false;
            }
            if (!fits_rel32((int64_t)(t - (new_ip + JMP_REL32_LEN)))) {
                snprintf(why, whylen, "the jump at +%u is out of reach from the trampoline", len);
                return false;
            }
            put_jmp_rel32(tramp + emitted, new_ip, t);
            emitted += JMP_REL32_LEN;
            len += in.length;
            ended = true;
            break;
        }
        memcpy(tramp + emitted, code + len, in.length);
        if (is_rip_relative_memory(&in)) {
            int64_t target = (int64_t)(ip + in.length) + in.raw.disp.value;
            int64_t disp = target - (int64_t)(new_ip + in.length);
            if (!fits_rel32(disp)) {
                snprintf(why, whylen, "a RIP-relative operand at +%u is out of reach from the trampoline", len);
                return false;
            }
            int32_t d32 = (int32_t)disp;
            memcpy(tramp + emitted + in.raw.disp.offset, &d32, 4);
        } else if (in.attributes & ZYDIS_ATTRIB_IS_RELATIVE) {
            snprintf(why, whylen, "a relative operand at +%u the trampoline cannot rewrite", len);
            return false;
        }
        emitted += in.length;
        len += in.length;
        if (in.meta.category == ZYDIS_CATEGORY_UNCOND_BR) { /* an indirect jump: nothing falls through */
            ended = len >= JMP_REL32_LEN;
            if (!ended) {
                snprintf(why, whylen, "the function ends at +%u, inside the %d bytes the patch replaces", len,
                         JMP_REL32_LEN);
                return false;
            }
        }
    }
    if (fsize && len > fsize) {
        snprintf(why, whylen, "the function is %zu bytes, shorter than the %u bytes the patch covers", fsize, len);
        return false;
    }
    if (fsize && branch_into(&d, code, fsize, len)) {
        snprintf(why, whylen, "a branch in the function lands inside the bytes the patch replaces");
        return false;
    }
    if (!ended) {
        if (!fits_rel32((int64_t)(ip0 + len - (tramp_addr + emitted + JMP_REL32_LEN)))) {
            snprintf(why, whylen, "the trampoline is out of reach of the function");
            return false;
        }
        put_jmp_rel32(tramp + emitted, tramp_addr + emitted, ip0 + len);
    }
    /* jmp *[rip+0]; .quad hook */
    static const uint8_t jmp_abs[6] = {0xff, 0x25, 0, 0, 0, 0};
    memcpy(stub, jmp_abs, sizeof jmp_abs);
    uint64_t hook_addr = (uint64_t)(uintptr_t)hook;
    memcpy(stub + sizeof jmp_abs, &hook_addr, 8);
    uint64_t stub_addr = (uint64_t)(uintptr_t)stub;
    if (!fits_rel32((int64_t)(stub_addr - (ip0 + JMP_REL32_LEN)))) {
        snprintf(why, whylen, "the stub is out of reach of the function");
        return false;
    }
    memset(out, 0, sizeof *out);
    out->address = ip0;
    out->length = len;
    memcpy(out->original, code, len);
    memset(out->replacement, 0xcc, len);
    put_jmp_rel32(out->replacement, ip0, stub_addr);
    *trampoline = tramp;
    return true;
}

#else

void *tl_patch_arena_near(const void *anchor, size_t size)
{
    (void)anchor, (void)size;
    return NULL;
}

bool tl_patch_build(void *entry, void *hook, uint8_t *slot, struct tensorleak_patch *out, void **trampoline,
                    char *why, size_t whylen)
{
    (void)entry, (void)hook, (void)slot, (void)out, (void)trampoline;
    snprintf(why, whylen, "entry points are patched on x86-64 only");
    return false;
}

#endif
