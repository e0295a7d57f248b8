/* attach_target: a program that runs untracked and is attached to by
 * tests/attach.  `answer()` is what the test library patches (42 before,
 * 43 while attached).
 *
 *   attach_target read [nocuda]  commands on stdin, one per line:
 *                                a: print "answer N"; load: dlopen
 *                                libcuda.so.1, print "loaded"; q: exit 7
 *   attach_target busy           the same, and a thread calling answer()
 *                                without pause
 *   attach_target threads        the same, and 8 such threads
 *                                regs: print "waiting", read one byte
 *                                raw, say whether registers were kept;
 *                                park: a thread blocks inside answer()'s
 *                                first bytes, print "parked"
 *   attach_target sleep MS       sleep MS ms in one clock_nanosleep (which an
 *                                attach interrupts and must restart), then
 *                                say whether it slept whole, print answer,
 *                                exit 7
 * It prints "ready" once libcuda.so.1 is loaded (or at once with nocuda). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* In assembly, so that its bytes are known.  Its first 6 bytes (what the
 * test library's patch replaces) hold a syscall that normal calls jump
 * over; park() enters there to block in pause(2): a thread stopped inside
 * the code to change, which the injector must wait for or refuse. */
int answer(void);
void park(void);
__asm__(".text\n"
        ".globl answer\n"
        ".type answer, @function\n"
        "answer:\n"
        "    jmp 1f\n"          /* eb 04 */
        "    nop\n"
        "    nop\n"
        "2:  syscall\n"         /* answer + 4 */
        "1:  movl $42, %eax\n"  /* answer + 6 */
        "    ret\n"
        ".size answer, .-answer\n"
        ".globl park\n"
        ".type park, @function\n"
        "park:\n"
        "    movl $34, %eax\n"  /* SYS_pause */
        "    jmp 2b\n"
        ".size park, .-park\n");

static atomic_int parked_tid;

static void *parked(void *arg)
{
    (void)arg;
    atomic_store(&parked_tid, (int)syscall(SYS_gettid));
    park();
    return NULL;
}

/* Whether thread TID sits in pause(2) (its /proc syscall line starts "34 "). */
static bool in_pause(int tid)
{
    char path[64], text[64] = "";
    snprintf(path, sizeof path, "/proc/self/task/%d/syscall", tid);
    FILE *f = fopen(path, "r");
    if (f) {
        if (!fgets(text, sizeof text, f))
            text[0] = '\0';
        fclose(f);
    }
    return strncmp(text, "34 ", 3) == 0;
}

/* Reads one byte from stdin with a raw read(2), holding known values in
 * SSE registers (which the kernel keeps across a syscall) and callee-saved
 * ones across it: 1 when every one is intact afterwards and one byte came.
 * An attach that hijacks this thread runs dlopen in it, which uses the SSE
 * registers; they must come back with its extended state. */
int read_keeps_registers(void);
__asm__(".text\n"
        ".globl read_keeps_registers\n"
        ".type read_keeps_registers, @function\n"
        "read_keeps_registers:\n"
        "    push %rbx\n    push %r12\n    push %r13\n    sub $16, %rsp\n"
        "    movabs $0x1122334455667788, %rax\n"
        "    movq %rax, %xmm0\n    movq %rax, %xmm8\n    movq %rax, %xmm15\n"
        "    mov %rax, %rbx\n    mov %rax, %r12\n    mov %rax, %r13\n"
        "    xor %eax, %eax\n    xor %edi, %edi\n    mov %rsp, %rsi\n    mov $1, %edx\n"
        "    syscall\n"
        "    cmp $1, %rax\n    jne 9f\n"
        "    movabs $0x1122334455667788, %rdx\n"
        "    movq %xmm0, %rax\n    cmp %rdx, %rax\n    jne 9f\n"
        "    movq %xmm8, %rax\n    cmp %rdx, %rax\n    jne 9f\n"
        "    movq %xmm15, %rax\n    cmp %rdx, %rax\n    jne 9f\n"
        "    cmp %rdx, %rbx\n    jne 9f\n    cmp %rdx, %r12\n    jne 9f\n    cmp %rdx, %r13\n    jne 9f\n"
        "    mov $1, %eax\n    jmp 8f\n"
        "9:  xor %eax, %eax\n"
        "8:  add $16, %rsp\n    pop %r13\n    pop %r12\n    pop %rbx\n    ret\n"
        ".size read_keeps_registers, .-read_keeps_registers\n");

static atomic_long calls;
static atomic_long wrong; /* answers neither 42 nor 43: a patch written under a thread */

static void *spin(void *arg)
{
    (void)arg;
    for (;;) {
        int a = answer();
        if (a != 42 && a != 43)
            atomic_fetch_add(&wrong, 1);
        atomic_fetch_add(&calls, 1);
    }
    return NULL;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void load_driver(void)
{
    if (!dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL)) {
        fprintf(stderr, "attach_target: %s\n", dlerror());
        exit(3);
    }
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "read";
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!(argc > 2 && strcmp(argv[2], "nocuda") == 0))
        load_driver();
    int spinners = strcmp(mode, "busy") == 0 ? 1 : strcmp(mode, "threads") == 0 ? 8 : 0;
    for (int i = 0; i < spinners; i++) {
        pthread_t t;
        pthread_create(&t, NULL, spin, NULL);
    }
    puts("ready");
    if (strcmp(mode, "sleep") == 0) {
        long ms = argc > 2 ? atol(argv[2]) : 2000;
        struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L }, rem;
        double t0 = now_ms();
        int rc = clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, &rem);
        double slept = now_ms() - t0;
        printf("slept: %s\n", rc ? "interrupted" : slept >= ms ? "whole" : "short");
        printf("answer %d\n", answer());
        return 7;
    }
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
        if (strcmp(line, "a\n") == 0) {
            printf("answer %d\n", answer());
        } else if (strcmp(line, "load\n") == 0) {
            load_driver();
            puts("loaded");
        } else if (strcmp(line, "calls\n") == 0) {
            long before = atomic_load(&calls);
            struct timespec ts = { 0, 50000000 };
            nanosleep(&ts, NULL);
            printf("spinning %s, wrong %ld\n", atomic_load(&calls) > before || !spinners ? "yes" : "no",
                   atomic_load(&wrong));
        } else if (strcmp(line, "regs\n") == 0) {
            puts("waiting");
            printf("registers %s\n", read_keeps_registers() ? "kept" : "changed");
        } else if (strcmp(line, "park\n") == 0) {
            pthread_t t;
            pthread_create(&t, NULL, parked, NULL);
            while (!atomic_load(&parked_tid) || !in_pause(atomic_load(&parked_tid))) {
                struct timespec ts = { 0, 1000000 };
                nanosleep(&ts, NULL);
            }
            puts("parked");
        } else if (strcmp(line, "q\n") == 0) {
            return 7;
        }
    }
    return 7;
}
