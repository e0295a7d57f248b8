/*
 * host_prog.c — programs whose behaviour must be the same with and without
 * libtensorleak.so preloaded (tests/host/host_test.py runs each both ways).
 *
 *   idle           prints its descriptors, signal masks and thread count, no CUDA
 *   daemon         cudaMalloc, then closes every descriptor above 2, opens
 *                  files of its own, allocates more through code without
 *                  frame pointers and checks its files and descriptors
 *   daemon-seccomp the same under a seccomp filter that refuses
 *                  process_vm_readv with EPERM (as some sandboxes do)
 *   fsize          cudaMalloc, a snapshot report, then a write past
 *                  RLIMIT_FSIZE (the driver sets the limit): dies of SIGXFSZ
 *   nofile [MS]    cudaMalloc under the RLIMIT_NOFILE the driver set; prints
 *                  its error code and how many descriptors are left to open,
 *                  holding them all MS milliseconds (default 0) before it
 *                  closes them
 *
 * Prints "ok" and exits 0 when every check holds; otherwise names the first
 * difference on stderr and exits 1.
 */
#include "cudart_compat.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "tensorleak.h"

#define MiB (1u << 20)

static void die(const char *what)
{
    fprintf(stderr, "host_prog: %s\n", what);
    exit(1);
}

static void *allocate(size_t bytes)
{
    void *p = NULL;
    cudaError_t rc = cudaMalloc(&p, bytes);
    if (rc != cudaSuccess) {
        fprintf(stderr, "host_prog: cudaMalloc returned %d\n", (int)rc);
        exit(1);
    }
    return p;
}

/* The open descriptors, ascending, as "0 1 2 ...". */
static void list_fds(char *out, size_t len)
{
    int fds[256], n = 0;
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        die("opendir /proc/self/fd");
    int own = dirfd(d);
    for (struct dirent *e; (e = readdir(d)) && n < 256;)
        if (e->d_name[0] != '.' && atoi(e->d_name) != own)
            fds[n++] = atoi(e->d_name);
    closedir(d);
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && fds[j - 1] > fds[j]; j--) {
            int t = fds[j];
            fds[j] = fds[j - 1];
            fds[j - 1] = t;
        }
    size_t o = 0;
    out[0] = 0;
    for (int i = 0; i < n && o < len; i++)
        o += (size_t)snprintf(out + o, len - o, "%s%d", i ? " " : "", fds[i]);
}

static int idle(void)
{
    char fds[1024];
    list_fds(fds, sizeof fds);
    printf("fds %s\n", fds);
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        die("/proc/self/status");
    char line[256];
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "SigIgn:", 7) || !strncmp(line, "SigCgt:", 7) || !strncmp(line, "SigBlk:", 7) ||
            !strncmp(line, "Threads:", 8))
            fputs(line, stdout);
    fclose(f);
    return 0;
}

/* Allocations from code built without frame pointers (this file is
 * compiled with -fomit-frame-pointer): recursion makes distinct stacks, so
 * each is unwound by libunwind on first sight. */
__attribute__((noinline)) static void *deep(int n)
{
    if (n == 0)
        return allocate(MiB);
    void *volatile p = deep(n - 1);
    __asm__ volatile("" ::: "memory");
    return p;
}

static void expect_file(int fd, const char *path, const char *want, off_t offset)
{
    char buf[256];
    off_t at = lseek(fd, 0, SEEK_CUR);
    if (at != offset) {
        fprintf(stderr, "host_prog: %s: offset %lld, want %lld\n", path, (long long)at, (long long)offset);
        exit(1);
    }
    int rd = open(path, O_RDONLY);
    ssize_t n = rd < 0 ? -1 : read(rd, buf, sizeof buf - 1);
    if (rd >= 0)
        close(rd);
    if (n < 0)
        die("reading back a file");
    buf[n] = 0;
    if (strcmp(buf, want) != 0) {
        fprintf(stderr, "host_prog: %s holds \"%s\", want \"%s\"\n", path, buf, want);
        exit(1);
    }
}

#if defined(__x86_64__)
#define THIS_AUDIT_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define THIS_AUDIT_ARCH AUDIT_ARCH_AARCH64
#endif

static void refuse_process_vm_readv(void)
{
#ifdef THIS_AUDIT_ARCH
    struct sock_filter code[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, THIS_AUDIT_ARCH, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_process_vm_readv, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {sizeof code / sizeof code[0], code};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
        die("seccomp");
#else
    die("no seccomp filter for this architecture");
#endif
}

static int daemon_mode(void)
{
    allocate(MiB);
    /* What a daemon does: nothing it did not open stays open. */
    if (syscall(SYS_close_range, 3u, ~0u, 0u) != 0)
        die("close_range");
    int a = open("a.txt", O_RDWR | O_CREAT | O_TRUNC, 0600);
    int b = open("b.txt", O_RDWR | O_CREAT | O_TRUNC, 0600);
    int c = open("c.txt", O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (a != 3 || b != 4 || c != 5) {
        fprintf(stderr, "host_prog: own files at %d %d %d, want 3 4 5\n", a, b, c);
        return 1;
    }
    if (write(a, "alpha", 5) != 5 || write(b, "bravo", 5) != 5 || write(c, "charlie", 7) != 7)
        die("write");
    lseek(b, 2, SEEK_SET);
    for (int i = 1; i <= 24; i++)
        deep(i);
    tensorleak_snapshot("daemon");
    for (int i = 25; i <= 32; i++)
        deep(i);
    expect_file(a, "a.txt", "alpha", 5);
    expect_file(b, "b.txt", "bravo", 2);
    expect_file(c, "c.txt", "charlie", 7);
    char fds[1024];
    list_fds(fds, sizeof fds);
    if (strcmp(fds, "0 1 2 3 4 5") != 0) {
        fprintf(stderr, "host_prog: descriptors %s, want 0 1 2 3 4 5\n", fds);
        return 1;
    }
    puts("ok");
    return 0;
}

static int fsize(void)
{
    allocate(MiB);
    tensorleak_snapshot("before the write");
    /* The driver set RLIMIT_FSIZE to 4096: the program's own write past it
     * must kill it with SIGXFSZ, as it would without tensorleak. */
    int fd = open("big.bin", O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0)
        die("open big.bin");
    static char block[4096];
    ssize_t w = write(fd, block, sizeof block); /* up to the limit */
    if (w == (ssize_t)sizeof block)
        w = write(fd, block, 1); /* at the limit: the signal */
    fprintf(stderr, "host_prog: write past RLIMIT_FSIZE returned %zd (%s)\n", w, w < 0 ? strerror(errno) : "");
    return 0;
}

/* After its first CUDA call, how many more descriptors the program can
 * open under its RLIMIT_NOFILE: tensorleak must hold none of them. */
static int nofile(long hold_ms)
{
    void *p = NULL;
    printf("cudaMalloc %d\n", (int)cudaMalloc(&p, MiB));
    int fds[1024], n = 0;
    while (n < 1024 && (fds[n] = open("/dev/null", O_RDONLY)) >= 0)
        n++;
    if (n < 1024 && errno != EMFILE)
        die("open /dev/null");
    printf("free %d\n", n);
    fflush(stdout);
    struct timespec hold = {hold_ms / 1000, hold_ms % 1000 * 1000000};
    while (nanosleep(&hold, &hold) != 0 && errno == EINTR)
        ;
    while (n > 0)
        close(fds[--n]);
    return 0;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "idle"))
        return idle();
    if (!strcmp(mode, "daemon"))
        return daemon_mode();
    if (!strcmp(mode, "daemon-seccomp")) {
        refuse_process_vm_readv();
        return daemon_mode();
    }
    if (!strcmp(mode, "fsize"))
        return fsize();
    if (!strcmp(mode, "nofile"))
        return nofile(argc > 2 ? atol(argv[2]) : 0);
    fprintf(stderr, "usage: host_prog idle|daemon|daemon-seccomp|fsize|nofile [MS]\n");
    return 2;
}
