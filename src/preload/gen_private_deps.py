#!/usr/bin/env python3
"""Writes the stubs through which libtensorleak.so calls its private
dependencies (private_deps.c says why they are not linked).

    gen_private_deps.py LIST ARCH OUT.S OUT.h

LIST is private_deps.txt.  OUT.S defines, for every "func NAME", a hidden
function NAME that jumps through slot i of tl_dep_slots (each slot starts at
tl_dep_unloaded, which returns 0), and for every "data NAME" a hidden
pointer-sized variable NAME.  OUT.h is the table private_deps.c fills them
from: the names to look up and where each answer goes.
"""
import sys

list_path, arch, out_s, out_h = sys.argv[1:5]
if arch not in ("x86_64", "aarch64"):
    sys.exit(f"gen_private_deps.py: no stubs for architecture {arch!r} (x86_64 and aarch64 only)")

funcs, datas = [], []
with open(list_path) as f:
    for n, line in enumerate(f, 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        kind, _, name = line.partition(" ")
        kind, _, only = kind.partition("@")  # "func@x86_64 NAME": that architecture only
        if only and only != arch:
            continue
        name = name.strip().replace("{arch}", arch)
        if kind not in ("func", "data") or not name.replace("_", "").isalnum():
            sys.exit(f"{list_path}:{n}: expected 'func NAME' or 'data NAME', got {line!r}")
        (funcs if kind == "func" else datas).append(name)
if len(set(funcs + datas)) != len(funcs) + len(datas):
    sys.exit(f"{list_path}: a name is listed twice")

head = "/* Generated from private_deps.txt by gen_private_deps.py: do not edit. */\n"
s = [head]
if arch == "x86_64":
    word, fn_type, note = ".quad", "@function", "@progbits"
    unloaded = ["    xorl %eax, %eax", "    ret"]
    jump = lambda i: [f"    jmp *(tl_dep_slots + {8 * i})(%rip)"]
else:
    word, fn_type, note = ".xword", "%function", "%progbits"
    unloaded = ["    mov x0, #0", "    ret"]
    jump = lambda i: [f"    adrp x16, tl_dep_slots + {8 * i}",
                      f"    ldr x16, [x16, #:lo12:tl_dep_slots + {8 * i}]",
                      "    br x16"]
obj_type = fn_type.replace("function", "object")

s += ["    .data", "    .balign 8", "    .globl tl_dep_slots", "    .hidden tl_dep_slots", "tl_dep_slots:"]
s += [f"    {word} tl_dep_unloaded" for _ in funcs]
for name in datas:
    s += [f"    .globl {name}", f"    .hidden {name}", f"    .type {name}, {obj_type}",
          f"    .size {name}, 8", f"{name}:", f"    {word} 0"]
s += ["    .text", "    .p2align 4", f"    .type tl_dep_unloaded, {fn_type}", "tl_dep_unloaded:"]
s += unloaded + ["    .size tl_dep_unloaded, .-tl_dep_unloaded"]
for i, name in enumerate(funcs):
    s += ["    .p2align 4", f"    .globl {name}", f"    .hidden {name}", f"    .type {name}, {fn_type}", f"{name}:"]
    s += jump(i) + [f"    .size {name}, .-{name}"]
s += [f'    .section .note.GNU-stack,"",{note}', ""]
with open(out_s, "w") as f:
    f.write("\n".join(s))

h = [head, "extern void *tl_dep_slots[];"]
h += [f"extern void *{name};" for name in datas]
h += ["static const char *const tl_dep_func_names[] = {"]
h += [f'    "{name}",' for name in funcs] + ["};"]
h += ["static const struct { const char *name; void **var; } tl_dep_data[] = {"]
h += [f'    {{"{name}", &{name}}},' for name in datas] + ["};", ""]
with open(out_h, "w") as f:
    f.write("\n".join(h))
