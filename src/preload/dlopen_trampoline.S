/*
 * dlopen_trampoline.S — our exported dlopen and dlmopen.
 *
 * A libpython loaded after the first captured stack (an embedding server, a
 * plugin host) must make pyframes.c look for the interpreter again, so every
 * dlopen tells it first (tl_dlopen_route).  glibc resolves a relative name
 * along the RPATH/RUNPATH of the object that contains dlopen's *return
 * address*, expands $ORIGIN from it and loads into its namespace: a C wrapper
 * calling the real dlopen would put libtensorleak there and change what the
 * program loads.  So this stub saves the caller's arguments, asks the router,
 * restores them and the stack exactly and *jumps* to the real function,
 * which then sees the original caller (as dlsym_trampoline.S does).
 *
 *   void *tl_dlopen_route(int which, uintptr_t arg2, uintptr_t arg3)
 *     which: 0 dlopen, 1 dlmopen; arg2, arg3: the caller's second and
 *     third arguments (dlopen's mode; dlmopen's file and mode)
 *     returns the real function (NULL: none, and we return NULL)
 */
#if defined(__x86_64__)
    .macro TL_DLOPEN_STUB name, which
    .text
    .globl \name
    .type \name, @function
    .p2align 4
\name:
    .cfi_startproc
    pushq %rdi
    .cfi_adjust_cfa_offset 8
    pushq %rsi
    .cfi_adjust_cfa_offset 8
    pushq %rdx                  /* three pushes: %rsp 16-byte aligned at the call */
    .cfi_adjust_cfa_offset 8
    movl $\which, %edi
    call tl_dlopen_route
    popq %rdx
    .cfi_adjust_cfa_offset -8
    popq %rsi
    .cfi_adjust_cfa_offset -8
    popq %rdi
    .cfi_adjust_cfa_offset -8
    testq %rax, %rax
    jz 1f
    jmp *%rax
1:
    ret
    .cfi_endproc
    .size \name, .-\name
    .endm
#elif defined(__aarch64__)
    .macro TL_DLOPEN_STUB name, which
    .text
    .globl \name
    .type \name, %function
    .p2align 4
\name:
    .cfi_startproc
    stp x29, x30, [sp, #-48]!
    .cfi_def_cfa_offset 48
    .cfi_offset 29, -48
    .cfi_offset 30, -40
    mov x29, sp
    stp x0, x1, [sp, #16]
    str x2, [sp, #32]
    mov w0, #\which
    bl tl_dlopen_route
    mov x16, x0
    ldp x0, x1, [sp, #16]
    ldr x2, [sp, #32]
    ldp x29, x30, [sp], #48
    .cfi_def_cfa_offset 0
    .cfi_restore 29
    .cfi_restore 30
    cbz x16, 1f
    br x16
1:
    mov x0, #0
    ret
    .cfi_endproc
    .size \name, .-\name
    .endm
#else
#error "dlopen trampoline: unsupported architecture"
#endif

    TL_DLOPEN_STUB dlopen, 0
    TL_DLOPEN_STUB dlmopen, 1

    .section .note.GNU-stack,"",%progbits
