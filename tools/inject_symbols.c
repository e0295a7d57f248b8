/*
 * inject_symbols.c: where things are in another process: its mappings
 * (/proc/PID/maps) and the addresses of functions of the files mapped there,
 * read from their ELF symbol tables with libelf.
 *
 * A mapped file is opened through /proc/PID/root, so that a process in
 * another mount namespace (a container) is read with its own files, and its
 * first page is compared with the process's copy before any symbol is
 * trusted: a file replaced on disk since it was mapped is refused.
 */
#include "inject.h"

#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

bool inject_maps_read(pid_t pid, struct inject_map **maps, size_t *count)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/maps", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return false;
    size_t n = 0, cap = 64;
    struct inject_map *list = malloc(cap * sizeof *list);
    char *line = NULL;
    size_t linecap = 0;
    while (list && getline(&line, &linecap, f) > 0) {
        if (n == cap) {
            struct inject_map *bigger = realloc(list, 2 * cap * sizeof *list);
            if (!bigger) {
                free(list);
                list = NULL;
                break;
            }
            list = bigger;
            cap *= 2;
        }
        struct inject_map *m = &list[n];
        unsigned long long start, end, offset, inode;
        int name_at = 0;
        if (sscanf(line, "%llx-%llx %4s %llx %*x:%*x %llu %n", &start, &end, m->perms, &offset, &inode, &name_at) < 5)
            continue;
        m->start = start;
        m->end = end;
        m->offset = offset;
        m->inode = inode;
        line[strcspn(line, "\n")] = '\0';
        snprintf(m->path, sizeof m->path, "%s", name_at > 0 && line[name_at] == '/' ? line + name_at : "");
        n++;
    }
    int saved = errno;
    free(line);
    fclose(f);
    if (!list) {
        errno = saved ? saved : ENOMEM;
        return false;
    }
    *maps = list;
    *count = n;
    return true;
}

const struct inject_map *inject_maps_find(const struct inject_map *maps, size_t count, const char *name)
{
    size_t len = strlen(name);
    for (size_t i = 0; i < count; i++) {
        const char *base = strrchr(maps[i].path, '/');
        if (!base)
            continue;
        base++;
        if (strncmp(base, name, len) == 0 && (base[len] == '\0' || base[len] == '.'))
            return &maps[i];
    }
    return NULL;
}

/* The lowest mapping of MAP's file at file offset 0: where its ELF header is. */
static const struct inject_map *file_head(const struct inject_map *maps, size_t count, const struct inject_map *map)
{
    const struct inject_map *head = NULL;
    for (size_t i = 0; i < count; i++) {
        if (maps[i].offset == 0 && maps[i].inode == map->inode && strcmp(maps[i].path, map->path) == 0 &&
            (!head || maps[i].start < head->start))
            head = &maps[i];
    }
    return head;
}

/* Whether the first page of FD equals the process's copy at ADDRESS. */
static bool same_first_page(pid_t pid, int fd, uint64_t address, uint64_t mapped)
{
    char path[64], file[4096], mem[4096];
    size_t len = mapped < sizeof file ? (size_t)mapped : sizeof file;
    snprintf(path, sizeof path, "/proc/%d/mem", (int)pid);
    int mfd = open(path, O_RDONLY | O_CLOEXEC);
    if (mfd < 0)
        return false;
    ssize_t got = pread(mfd, mem, len, (off_t)address);
    close(mfd);
    ssize_t want = pread(fd, file, len, 0);
    return got > 0 && want == got && memcmp(mem, file, (size_t)got) == 0;
}

bool inject_symbol(pid_t pid, const struct inject_map *maps, size_t count, const struct inject_map *map,
                   const char *name, uint64_t *address, char *err, size_t errlen)
{
    const struct inject_map *head = file_head(maps, count, map);
    char path[4200];
    snprintf(path, sizeof path, "/proc/%d/root%s", (int)pid, map->path);
    int fd = head ? open(path, O_RDONLY | O_CLOEXEC) : -1;
    if (fd < 0) {
        snprintf(err, errlen, "cannot read %s in the process's file system: %s", map->path,
                 head ? strerror(errno) : "its ELF header is not mapped");
        return false;
    }
    if (!same_first_page(pid, fd, head->start, head->end - head->start)) {
        snprintf(err, errlen, "%s on disk is not the file the process mapped (replaced since?)", map->path);
        close(fd);
        return false;
    }
    elf_version(EV_CURRENT);
    Elf *elf = elf_begin(fd, ELF_C_READ, NULL);
    bool found = false;
    uint64_t value = 0, first_vaddr = UINT64_MAX;
    size_t phnum = 0;
    if (elf && elf_getphdrnum(elf, &phnum) == 0) {
        for (size_t i = 0; i < phnum; i++) {
            GElf_Phdr ph;
            if (gelf_getphdr(elf, (int)i, &ph) && ph.p_type == PT_LOAD && ph.p_vaddr < first_vaddr)
                first_vaddr = ph.p_vaddr;
        }
    }
    /* .dynsym first (what the loader resolves), .symtab when stripped of nothing. */
    for (int pass = 0; elf && pass < 2 && !found; pass++) {
        Elf_Scn *scn = NULL, *versym_scn = NULL;
        while ((scn = elf_nextscn(elf, scn)) != NULL) {
            GElf_Shdr sh;
            if (gelf_getshdr(scn, &sh) && sh.sh_type == SHT_GNU_versym)
                versym_scn = scn;
        }
        Elf_Data *versym = pass == 0 && versym_scn ? elf_getdata(versym_scn, NULL) : NULL;
        while ((scn = elf_nextscn(elf, scn)) != NULL) {
            GElf_Shdr sh;
            if (!gelf_getshdr(scn, &sh) || sh.sh_type != (pass == 0 ? SHT_DYNSYM : SHT_SYMTAB) || !sh.sh_entsize)
                continue;
            Elf_Data *data = elf_getdata(scn, NULL);
            size_t n = data ? sh.sh_size / sh.sh_entsize : 0;
            for (size_t k = 0; k < n; k++) {
                GElf_Sym sym;
                if (!gelf_getsym(data, (int)k, &sym) || sym.st_shndx == SHN_UNDEF || sym.st_value == 0 ||
                    GELF_ST_TYPE(sym.st_info) != STT_FUNC)
                    continue;
                const char *sname = elf_strptr(elf, sh.sh_link, sym.st_name);
                if (!sname || strcmp(sname, name) != 0)
                    continue;
                GElf_Versym ver = 0;
                bool hidden = versym && gelf_getversym(versym, (int)k, &ver) && (ver & 0x8000);
                if (!found || !hidden)
                    value = sym.st_value;
                found = true;
                if (!hidden)
                    break;
            }
        }
    }
    if (elf)
        elf_end(elf);
    close(fd);
    if (!found || first_vaddr == UINT64_MAX) {
        snprintf(err, errlen, "%s has no function %s", map->path, name);
        return false;
    }
    /* The load bias: where offset 0 is mapped, less the first segment's
     * page-aligned address (0 for shared objects). */
    *address = head->start - (first_vaddr & ~(uint64_t)0xfff) + value;
    return true;
}
