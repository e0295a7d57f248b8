/*
 * dlsym_trampoline.S — our exported dlsym.
 *
 * glibc resolves dlsym(RTLD_NEXT, name) relative to the object that contains
 * dlsym's *return address*.  A C wrapper that calls the real dlsym puts
 * libtensorleak there, so every other library's RTLD_NEXT chain would start
 * after us: a library chaining `foo` through RTLD_NEXT then finds itself and
 * recurses until it crashes (HAMi-core PR #315).  So this stub asks the C
 * router (tl_dlsym_route) whether the name is one of our driver or runtime
 * hooks; if not, it restores the caller's arguments and stack exactly and
 * *jumps* to the real dlsym, which then sees the original caller.
 *
 *   void *tl_dlsym_route(void *handle, const char *name, void **result)
 *     returns NULL: *result is the answer (one of our hooks, or NULL)
 *     returns fn:   tail-jump to fn (glibc's dlsym) with the original args
 */
#if defined(__x86_64__)
    .text
    .globl dlsym
    .type dlsym, @function
    .p2align 4
dlsym:
    .cfi_startproc
    pushq %rdi
    .cfi_adjust_cfa_offset 8
    pushq %rsi
    .cfi_adjust_cfa_offset 8
    subq $24, %rsp              /* result slot; keeps %rsp 16-byte aligned */
    .cfi_adjust_cfa_offset 24
    movq $0, (%rsp)
    movq %rsp, %rdx
    call tl_dlsym_route
    testq %rax, %rax
    jz 1f
    movq %rax, %r11
    addq $24, %rsp
    .cfi_adjust_cfa_offset -24
    popq %rsi
    .cfi_adjust_cfa_offset -8
    popq %rdi
    .cfi_adjust_cfa_offset -8
    jmp *%r11
1:
    .cfi_adjust_cfa_offset 40
    movq (%rsp), %rax
    addq $40, %rsp
    .cfi_adjust_cfa_offset -40
    ret
    .cfi_endproc
    .size dlsym, .-dlsym
#elif defined(__aarch64__)
    .text
    .globl dlsym
    .type dlsym, %function
    .p2align 4
dlsym:
    .cfi_startproc
    stp x29, x30, [sp, #-48]!
    .cfi_def_cfa_offset 48
    .cfi_offset 29, -48
    .cfi_offset 30, -40
    mov x29, sp
    stp x0, x1, [sp, #16]
    str xzr, [sp, #32]
    add x2, sp, #32
    bl tl_dlsym_route
    mov x16, x0
    ldp x0, x1, [sp, #16]
    cbz x16, 1f
    ldp x29, x30, [sp], #48
    .cfi_def_cfa_offset 0
    br x16
1:
    .cfi_def_cfa_offset 48
    ldr x0, [sp, #32]
    ldp x29, x30, [sp], #48
    .cfi_def_cfa_offset 0
    ret
    .cfi_endproc
    .size dlsym, .-dlsym
#else
#error "dlsym trampoline: unsupported architecture"
#endif
    .section .note.GNU-stack,"",%progbits
