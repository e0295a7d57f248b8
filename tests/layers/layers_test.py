#!/usr/bin/env python3
"""The layers stay one-way: scripts/include-cycles.py --check on the tree,
with the circles still allowed (cross_layer_allowed.txt), and on small trees
made here, so the check itself is seen to fail where it must.

    layers_test.py SOURCE_ROOT CASE        exit 0 pass, 1 fail"""
import atexit
import os
import shutil
import subprocess
import sys
import tempfile

SOURCE = sys.argv[1]
SCRIPT = os.path.join(SOURCE, "scripts", "include-cycles.py")
ALLOWED = os.path.join(SOURCE, "tests", "layers", "cross_layer_allowed.txt")


def check(root, allowed=None):
    cmd = [sys.executable, SCRIPT, "--check"] + (["--allow", allowed] if allowed else []) + [root]
    return subprocess.run(cmd, capture_output=True, text=True)


def tree(files):
    root = tempfile.mkdtemp(prefix="tl-layers-")
    atexit.register(shutil.rmtree, root, True)
    for path, text in files.items():
        os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
        with open(os.path.join(root, path), "w") as f:
            f.write(text)
    return root


# low/a.c defines low_fn; high/b.c defines high_fn and calls low_fn.
ONE_WAY = {
    "src/low/a.h": "int low_fn(int x);\n",
    "src/low/a.c": '#include "a.h"\nint low_fn(int x) { return x + 1; }\n',
    "src/high/b.c": '#include "a.h"\nint high_fn(void) { return low_fn(1); }\n',
}
# ... and low_fn calls back up into high/.
BACK_UP = dict(ONE_WAY)
BACK_UP["src/low/a.c"] = '#include "a.h"\nint high_fn(void);\nint low_fn(int x) { return x ? x + 1 : high_fn(); }\n'


def main():
    case = sys.argv[2]
    if case == "tree":
        r = check(SOURCE, ALLOWED)
        if r.returncode != 0:
            print(r.stdout + r.stderr)
            print("FAIL: a circle of files crosses src/'s layers beyond the allowed list")
            return 1
        return 0
    if case == "sim":
        # sim/ is one folder in layers of files (sim/README.md, "Layout"):
        # no file of it may depend, through any chain, on itself.
        r = subprocess.run([sys.executable, SCRIPT, SOURCE], capture_output=True, text=True)
        line = next((l for l in r.stdout.splitlines() if l.startswith("sim/:")), None)
        if line is None or not line.endswith("largest circle 0 files"):
            print(r.stdout + r.stderr)
            print(f"FAIL: sim/ has a circle of files: {line}")
            return 1
        return 0
    if case == "detects":
        ok = check(tree(ONE_WAY))
        back = check(tree(BACK_UP))
        if ok.returncode != 0:
            print(ok.stdout + ok.stderr + "\nFAIL: a one-way tree was refused")
            return 1
        if back.returncode != 1 or "src/low/a.c" not in back.stdout or "src/high/b.c" not in back.stdout:
            print(back.stdout + back.stderr + "\nFAIL: a call back up a layer was not found")
            return 1
        root = tree(BACK_UP)
        allowed = os.path.join(root, "allowed.txt")
        with open(allowed, "w") as f:
            f.write("src/high/b.c\nsrc/low/a.c\nsrc/high src/low\n")
        if check(root, allowed).returncode != 0:
            print("FAIL: the allowed circle was refused")
            return 1
        with open(allowed, "a") as f:
            f.write("src/low/gone.c\n")
        stale = check(root, allowed)
        if stale.returncode != 1 or "no longer needed" not in stale.stdout:
            print(stale.stdout + "\nFAIL: a stale allowance was not reported")
            return 1
        return 0
    print(f"unknown case {case}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
