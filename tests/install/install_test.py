#!/usr/bin/env python3
"""Installed-tree test: `meson install --destdir TMP`, then TMP's CLI alone.

Asserts that the install has the library, the CLI, the header, tensorleak.pc,
the man page (when scdoc was found) and the simulated driver and runtime; that
`tensorleak --version` prints the meson project version; that `run` preloads
the *installed* library; and that `run --sim -- leaky_inference 2` reports
exactly 2 leaked allocations from the installed tree.
Exit status: 0 pass, 1 fail, 77 skip.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile


def fail(msg):
    print(f"FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def under(root, prefix, path):
    """DESTDIR + an install path (meson options may be prefix-relative)."""
    full = path if os.path.isabs(path) else os.path.join(prefix, path)
    return os.path.join(root, full.lstrip("/"))


def main():
    p = argparse.ArgumentParser()
    for opt in ("meson", "build-root", "prefix", "bindir", "libdir", "includedir", "mandir",
                "man", "version", "sample"):
        p.add_argument("--" + opt, required=True)
    a = p.parse_args()
    if not os.path.exists(a.sample):
        print(f"skip: {a.sample} not built")
        return 77
    dest = tempfile.mkdtemp(prefix="tensorleak-install-")
    try:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("TENSORLEAK_") and k not in ("LD_PRELOAD", "LD_LIBRARY_PATH",
                                                                 "DESTDIR")}
        r = subprocess.run([a.meson, "install", "-C", a.build_root, "--destdir", dest,
                            "--no-rebuild", "--quiet"], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=240)
        if r.returncode != 0:
            fail(f"meson install failed ({r.returncode}):\n{r.stdout.decode(errors='replace')}")
        cli = under(dest, a.prefix, os.path.join(a.bindir, "tensorleak"))
        lib = under(dest, a.prefix, os.path.join(a.libdir, "libtensorleak.so"))
        want = [cli, lib,
                under(dest, a.prefix, os.path.join(a.includedir, "tensorleak.h")),
                under(dest, a.prefix, os.path.join(a.libdir, "pkgconfig", "tensorleak.pc")),
                under(dest, a.prefix, os.path.join(a.libdir, "tensorleak", "sim", "libcuda.so.1")),
                under(dest, a.prefix, os.path.join(a.libdir, "tensorleak", "sim",
                                                   "libcudart.so.13")),
                under(dest, a.prefix, os.path.join(a.libdir, "tensorleak", "sim",
                                                   "libnvidia-ml.so.1"))]
        if a.man == "yes":
            want.append(under(dest, a.prefix, os.path.join(a.mandir, "man1", "tensorleak.1")))
        else:
            print("note: scdoc not found at configure time: no man page expected")
        for path in want:
            if not os.path.exists(path):
                fail(f"not installed: {path}")

        # Nothing from the build tree may be used: run from an unrelated cwd.
        work = os.path.join(dest, "work")
        os.makedirs(work)
        r = subprocess.run([cli, "--version"], env=env, cwd=work, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE)
        if (r.returncode, r.stdout.decode()) != (0, f"tensorleak {a.version}\n"):
            fail(f"--version: {r.returncode} {r.stdout!r} {r.stderr!r}")
        r = subprocess.run([cli, "run", "--", "sh", "-c", 'echo "$LD_PRELOAD"'], env=env,
                           cwd=work, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        preload = r.stdout.decode().strip().split(":")
        if os.path.realpath(lib) not in [os.path.realpath(x) for x in preload if x]:
            fail(f"installed run preloads {preload!r}, not {lib}")

        r = subprocess.run([cli, "run", "--sim", "--quiet", "-o", "report.%p.json", "--",
                            a.sample, "2"], env=env, cwd=work, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=120)
        if r.returncode != 0:
            fail(f"run --sim exited {r.returncode}: {r.stderr.decode(errors='replace')}")
        reports = [f for f in os.listdir(work) if f.startswith("report.")]
        if len(reports) != 1:
            fail(f"expected one report in {work}, found {reports}")
        with open(os.path.join(work, reports[0])) as f:
            report = json.load(f)
        got = (report["summary"]["leaked_allocations"], len(report["leaks"]), report["version"])
        if got != (2, 1, a.version):
            fail(f"(leaked allocations, leak sites, version) = {got}, expected (2, 1, {a.version!r})")
        r = subprocess.run([cli, "check", reports[0]], env=env, cwd=work, stdout=subprocess.PIPE)
        if r.returncode != 1:
            fail(f"installed check of a leaking report exited {r.returncode}, expected 1")
        print(f"installed tree {dest}: run --sim reported 2 leaked allocations")
        return 0
    finally:
        shutil.rmtree(dest, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
