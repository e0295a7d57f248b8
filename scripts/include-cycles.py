#!/usr/bin/env python3
"""Circles of C files that depend on each other, per folder (layer).

A file depends on another when it #includes it, or when it names a function
or global variable that the other defines (not static).  Only names are
read, as text: no build is needed.  A header's prototypes are not uses; its
inline function bodies and macros are.

    scripts/include-cycles.py [ROOT]          one line per folder: files and
                                              the largest circle inside it
    scripts/include-cycles.py --check [--allow LIST] [ROOT]
        exit 1 when a circle joins files of two folders, or when the folders
        depend on each other in a circle (the layers are not one-way).
        LIST names, one a line, the files that a circle across folders may
        still hold and the folder circles still allowed ("a b c" on a line,
        sorted); a file or circle it names that no longer needs it is an
        error too, so the list only shrinks.

ROOT is the source tree (default: this script's parent).  The folders read
are src/*/ (the library's layers), tools/ and sim/; each folder is a layer.
"""
import os
import re
import sys

FOLDERS = ("src", "tools", "sim")
IDENT = re.compile(r"[A-Za-z_]\w*")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
KEYWORDS = {"if", "for", "while", "switch", "return", "sizeof", "do", "else"}


def strip(text):
    """The text without comments, string and character literals."""
    out = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    out = re.sub(r"//[^\n]*", " ", out)
    out = re.sub(r'"(\\.|[^"\\\n])*"', '""', out)
    return re.sub(r"'(\\.|[^'\\\n])*'", "''", out)


def scan(code, is_c):
    """(defined names, used names) of one file's code, comments stripped.

    Defined (C files only; a header defines nothing): functions with a body
    and variables at file scope, neither static.  Used: every name inside
    braces and in macro bodies, and initialisers at file scope; so a
    header's prototypes are not uses, its inline bodies and macros are."""
    defined, uses, lines = set(), [], []
    for line in code.replace("\\\n", " ").split("\n"):
        if line.lstrip().startswith("#"):
            m = re.match(r"\s*#\s*define\s+\w+(\([^)]*\))?(.*)", line)
            if m:
                uses.append(m.group(2))
            lines.append("")
        else:
            lines.append(line)
    depth, stmt, in_function = 0, "", False
    for m in re.finditer(r"[{};]|[^{};]+", "\n".join(lines)):
        tok = m.group(0)
        if depth > 0:
            if tok == "{":
                depth += 1
            elif tok == "}":
                depth -= 1
                if depth == 0:
                    if in_function:
                        stmt, in_function = "", False
                    else:
                        stmt += " {} "
            else:
                uses.append(tok)
            continue
        if tok == "{":
            fn = re.search(r"(\w+)\s*\([^()]*(\([^()]*\)[^()]*)*\)\s*$", stmt)
            if fn and "=" not in stmt and fn.group(1) not in KEYWORDS:
                in_function = True
                if is_c and "static" not in IDENT.findall(stmt):
                    defined.add(fn.group(1))
            depth = 1
        elif tok == ";":
            decl = stmt.split("=")[0].split("{}")[-1].split("[")[0]
            words = IDENT.findall(stmt)
            names = IDENT.findall(decl)
            if is_c and names and "(" not in decl and not {"static", "extern", "typedef"} & set(words):
                defined.add(names[-1])
            if "=" in stmt:
                uses.append(stmt.split("=", 1)[1])
            stmt = ""
        elif tok == "}":
            stmt = ""
        else:
            stmt += tok
    used = re.sub(r"\b(struct|union|enum)\s+\w+", " ", " ".join(uses))
    return defined, set(IDENT.findall(used))


def files_of(root):
    found = []
    for top in FOLDERS:
        base = os.path.join(root, top)
        for d, _, names in os.walk(base):
            for n in sorted(names):
                if n.endswith((".c", ".h")):
                    found.append(os.path.relpath(os.path.join(d, n), root))
    return sorted(found)


def graph(root):
    files = files_of(root)
    info = {}
    for f in files:
        with open(os.path.join(root, f), encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        defined, used = scan(strip(text), f.endswith(".c"))
        info[f] = (defined, used, INCLUDE.findall(text))
    definers = {}
    for f, (defined, _, _) in info.items():
        for name in defined:
            definers.setdefault(name, []).append(f)
    by_base = {}
    for f in files:
        by_base.setdefault(os.path.basename(f), []).append(f)
    edges = {f: set() for f in files}
    for f, (defined, used, includes) in info.items():
        top = f.split(os.sep)[0]
        for name in used - defined:
            where = definers.get(name, [])
            near = [g for g in where if g.split(os.sep)[0] == top]
            if len(near) == 1 and near[0] != f:
                edges[f].add(near[0])
        for inc in includes:
            cands = by_base.get(os.path.basename(inc), [])
            near = [g for g in cands if g.split(os.sep)[0] == top] or cands
            if len(near) == 1 and near[0] != f:
                edges[f].add(near[0])
    return files, edges


def circles(nodes, edges):
    """Strongly connected components of more than one file (Tarjan)."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in nodes:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return sorted(out, key=lambda c: (-len(c), c))


def folder(f):
    return os.path.dirname(f)


def main(argv):
    check = "--check" in argv
    args = [a for a in argv if a != "--check"]
    allowed = set()
    if "--allow" in args:
        i = args.index("--allow")
        with open(args[i + 1], encoding="utf-8") as fh:
            allowed = {l.strip() for l in fh if l.strip() and not l.startswith("#")}
        del args[i:i + 2]
    root = args[0] if args else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    files, edges = graph(root)
    folders = sorted({folder(f) for f in files})
    for d in folders:
        inside = {f for f in files if folder(f) == d}
        comps = circles(inside, edges)
        big = comps[0] if comps else []
        print(f"{d}/: {len(inside)} files, largest circle {len(big)} files"
              + (": " + " ".join(os.path.basename(f) for f in big) if big else ""))
    bad, used = 0, set()
    for comp in circles(set(files), edges):
        if len({folder(f) for f in comp}) > 1:
            print(f"circle across folders ({len(comp)} files): {' '.join(comp)}")
            for f in comp:
                if f in allowed:
                    used.add(f)
                else:
                    bad += 1
                    print(f"  not allowed: {f}")
    fedges = {d: {folder(g) for f in files if folder(f) == d for g in edges[f]} - {d} for d in folders}
    for comp in circles(set(folders), fedges):
        key = " ".join(comp)
        print(f"folders that depend on each other: {key}")
        if key in allowed:
            used.add(key)
            continue
        bad += 1
        for d in comp:
            for f in files:
                if folder(f) != d:
                    continue
                for g in sorted(edges[f]):
                    if folder(g) in comp and folder(g) != d:
                        print(f"  {f} -> {g}")
    for stale in sorted(allowed - used):
        bad += 1
        print(f"allowed but no longer needed (remove it from the list): {stale}")
    return 1 if check and bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
