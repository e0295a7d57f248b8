/*
 * symbolize.c — addresses to module+offset, function, file:line.
 *
 * Runs only when a report is written, never on the allocation path.  elfutils'
 * libdwfl reads /proc/self/maps for the modules, the ELF symbol tables for
 * function names (static functions too, unlike dladdr), and DWARF line tables
 * for file:line where debug info exists (also from separate debuginfo files
 * through the standard search path).
 */
#include "tl_internal.h"

#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char *debuginfo_path;

static const Dwfl_Callbacks callbacks = {
    .find_elf = dwfl_linux_proc_find_elf,
    .find_debuginfo = dwfl_standard_find_debuginfo,
    .debuginfo_path = &debuginfo_path,
};

void *tl_symbolizer_open(void)
{
    Dwfl *dwfl = dwfl_begin(&callbacks);
    if (!dwfl)
        return NULL;
    dwfl_report_begin(dwfl);
    if (dwfl_linux_proc_report(dwfl, getpid()) != 0) {
        dwfl_end(dwfl);
        return NULL;
    }
    dwfl_report_end(dwfl, NULL, NULL);
    return dwfl;
}

void tl_symbolize(void *session, uintptr_t address, struct tl_frame_info *out)
{
    memset(out, 0, sizeof *out);
    out->address = address;
    Dwfl *dwfl = session;
    if (!dwfl)
        return;
    /* Stacks hold return addresses: the call is the instruction before. */
    Dwarf_Addr pc = address ? address - 1 : 0;
    Dwfl_Module *mod = dwfl_addrmodule(dwfl, pc);
    if (!mod)
        return;
    Dwarf_Addr start = 0;
    const char *mainfile = NULL;
    const char *name = dwfl_module_info(mod, NULL, &start, NULL, NULL, NULL, &mainfile, NULL);
    out->module = mainfile ? mainfile : name;
    out->offset = address - (uintptr_t)start;
    out->function = dwfl_module_addrname(mod, pc);
    /* Only trust a line whose compilation unit really covers pc: for code
     * without debug info (crt1's _start) libdwfl can answer with the nearest
     * line of a neighbouring unit. */
    Dwarf_Addr bias = 0;
    Dwarf_Die *cu = dwfl_module_addrdie(mod, pc, &bias);
    Dwfl_Line *line = cu && dwarf_haspc(cu, pc - bias) > 0 ? dwfl_module_getsrc(mod, pc) : NULL;
    if (line) {
        int lineno = 0;
        const char *file = dwfl_lineinfo(line, NULL, &lineno, NULL, NULL, NULL);
        if (file) {
            out->file = file;
            out->line = lineno;
        }
    }
}

void tl_symbolizer_close(void *session)
{
    if (session)
        dwfl_end(session);
}
