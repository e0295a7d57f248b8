/* A frame that keeps data in %rbp, as code built without frame pointers
 * may: call_with_rbp points %rbp at a two-word record on main's stack,
 * {0, a count that changes every iteration}, and calls the allocating
 * function, which leaves %rbp alone.  The frame-pointer walk from the hook
 * then takes the record for a frame: its frames end in the count, so they
 * differ at every one of the 200 allocations, and no verdict kept on one
 * walk ever matches the next.  The call-frame-table walk does not read
 * %rbp here and is the same every time: libunwind must run once for the
 * stack, not once per allocation (test_pyframes.py reads the counters and
 * the stack of the last block, left allocated). */
#include "cudart_compat.h"

#include <stdint.h>

/* fn(n) with %rbp = record; %rbp saved and restored, described by its CFI
 * so that libunwind and the call-frame-table walk unwind it. */
void *call_with_rbp(void *(*fn)(size_t), size_t n, uintptr_t *record);
__asm__(".text\n"
        ".globl call_with_rbp\n"
        ".type call_with_rbp, @function\n"
        "call_with_rbp:\n"
        "  .cfi_startproc\n"
        "  pushq %rbp\n"
        "  .cfi_def_cfa_offset 16\n"
        "  .cfi_offset %rbp, -16\n"
        "  movq %rdx, %rbp\n"
        "  movq %rdi, %rax\n"
        "  movq %rsi, %rdi\n"
        "  call *%rax\n"
        "  popq %rbp\n"
        "  .cfi_def_cfa_offset 8\n"
        "  ret\n"
        "  .cfi_endproc\n"
        ".size call_with_rbp, .-call_with_rbp\n");

__attribute__((noinline)) static void *allocate(size_t n)
{
    void *p = 0;
    cudaMalloc(&p, n);
    __asm__ volatile("" ::: "memory");
    return p;
}

int main(void)
{
    volatile uintptr_t record[2];
    for (int i = 0; i < 200; i++) {
        record[0] = 0;     /* the walk stops after the record */
        record[1] = i + 1; /* taken for a return address */
        void *p = call_with_rbp(allocate, 4096, (uintptr_t *)record);
        if (i < 199)
            cudaFree(p); /* the last one is left: the report shows its stack */
    }
    return 0;
}
