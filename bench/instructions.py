#!/usr/bin/env python3
"""Instructions per allocation pair (BENCHMARKS.md, "Instructions per pair"):
the hot path's cost as callgrind counts it, which does not swing with the
machine's load as CPU time does.

    python3 bench/instructions.py [--build DIR] [--json FILE]
                                  [--check BASELINE.json] [--write-baseline FILE]

The shape: cuMemAlloc+cuMemFree pairs (bench/churn `driver`) from the bottom
of a 40-deep call chain, one call site, 64 sizes from 4 KiB to just under
20 KiB.  Each tool runs the shape at 20k and 60k pairs; the figure is the
slope, (I(60k) - I(20k)) / 40k, so start-up, the warm-up and the exit report
cancel.  Only the working thread counts (callgrind's --toggle-collect on
churn's run_worker): tensorleak's watcher thread does its per-second work
whatever the pairs cost.

Rows: no tool; tensorleak TENSORLEAK_DEPTH=0 and 32 (preloaded); host
malloc+free of the same shape with no tool and with heaptrack's in-process
library linked into the program (bench/churn_heaptrack: valgrind cannot run
heaptrack's wrapper script, and a library linked in costs what a preloaded
one does).  "extra" is a tool's figure minus its no-tool figure.

--attached adds the rows of an attached process: the same churn, started
without the preload, attaches to itself before its workers start (churn's
`attach LIBRARY`: tensorleak_attach_prepare, the plan's bytes written into
its own code, tensorleak_attach_commit, as `tensorleak attach` does from
outside), so its pairs reach the tracker through the patched entry points'
trampolines; the same slope at depth 0 and 32, printed beside the
preload's.  Valgrind runs these with --smc-check=all: the patched code is
in a file-backed mapping, which valgrind's default check does not watch for
writes, so a translation made before the patch could otherwise outlive it.

--check BASELINE fails (exit 1) when tensorleak's extra instructions at
depth 0 or depth 32 exceed the baseline's by more than 10 %: a change that
makes the hot path dearer must say so by updating the baseline (and
BENCHMARKS.md).  Counts depend on the compiler and the build options: the
baseline is for the default build (debugoptimized) on this project's CI
image; --write-baseline records a new one.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
LOW, HIGH = 20000, 60000
SHAPE = ['depth', 40, 'sites', 1, 'sizes', 64]
TOLERANCE = 0.10


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--build', default=os.path.join(ROOT, 'build'), help='meson build directory')
    ap.add_argument('--json', help='write the figures to this file')
    ap.add_argument('--attached', action='store_true', help='also measure an attached process (depth 0 and 32)')
    ap.add_argument('--check', metavar='BASELINE', help='fail if an extra figure exceeds the baseline by > 10%%')
    ap.add_argument('--write-baseline', metavar='FILE', help='record the extra figures as the new baseline')
    return ap.parse_args()


class Runner:
    def __init__(self, build):
        self.churn = os.environ.get('TL_CHURN', os.path.join(build, 'bench', 'churn'))
        self.churn_ht = os.environ.get('TL_CHURN_HEAPTRACK', os.path.join(build, 'bench', 'churn_heaptrack'))
        self.lib = os.environ.get('TL_LIB', os.path.join(build, 'src', 'libtensorleak.so'))
        self.sim = os.environ.get('TL_SIM', os.path.join(build, 'sim'))
        self.valgrind = shutil.which('valgrind')
        for p in (self.churn, self.lib):
            if not os.path.exists(p):
                sys.exit(f'instructions.py: {p} not found (build first: ninja -C {build})')
        if not self.valgrind:
            sys.exit('instructions.py: valgrind not found (apt-get install valgrind)')
        self.tmp = tempfile.mkdtemp(prefix='tl-instr-')

    def env(self, tool):
        e = {k: v for k, v in os.environ.items() if not k.startswith('TENSORLEAK_') and k != 'LD_PRELOAD'}
        e['LD_LIBRARY_PATH'] = self.sim + (':' + e['LD_LIBRARY_PATH'] if e.get('LD_LIBRARY_PATH') else '')
        e['SIMCUDA_MEMORY'] = '64G'
        if tool.startswith('tl') or tool.startswith('at'):
            if tool.startswith('tl'):
                e['LD_PRELOAD'] = self.lib
            e['TENSORLEAK_DEPTH'] = tool[2:]
            e['TENSORLEAK_QUIET'] = '1'
            e['TENSORLEAK_OUTPUT'] = os.path.join(self.tmp, 'report-%p.json')
        if tool == 'heaptrack':
            e['DUMP_HEAPTRACK_OUTPUT'] = os.path.join(self.tmp, 'heaptrack.raw')
        return e

    def count(self, tool, pairs):
        """Instructions the working thread executed for `pairs` pairs."""
        api = 'host' if tool in ('host', 'heaptrack') else 'driver'
        prog = self.churn_ht if tool == 'heaptrack' else self.churn
        out = os.path.join(self.tmp, 'callgrind.out')
        attached = tool.startswith('at')
        cmd = ([self.valgrind, '--tool=callgrind', '--toggle-collect=run_worker', f'--callgrind-out-file={out}']
               + (['--smc-check=all'] if attached else [])
               + [prog, api, 'pairs', str(pairs)] + [str(a) for a in SHAPE]
               + (['attach', self.lib] if attached else []))
        p = subprocess.run(cmd, env=self.env(tool), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if p.returncode != 0 or (attached and 'churn: attached' not in p.stderr):
            raise RuntimeError(f'{" ".join(cmd)}: exit {p.returncode}\n{p.stdout}\n{p.stderr[-4000:]}')
        total = None
        with open(out) as f:
            for line in f:
                if line.startswith('totals:') or line.startswith('summary:'):
                    total = int(line.split()[1])
        if total is None:
            raise RuntimeError(f'{out}: no totals line')
        for name in os.listdir(self.tmp):
            os.unlink(os.path.join(self.tmp, name))
        return total

    def slope(self, tool):
        return (self.count(tool, HIGH) - self.count(tool, LOW)) / (HIGH - LOW)


def main():
    args = parse_args()
    r = Runner(args.build)
    tools = ['bare', 'tl0', 'tl32', 'host'] + (['at0', 'at32'] if args.attached else [])
    if os.path.exists(r.churn_ht):
        tools.append('heaptrack')
    fig = {t: r.slope(t) for t in tools}
    shutil.rmtree(r.tmp, ignore_errors=True)
    extra = {'tl0': fig['tl0'] - fig['bare'], 'tl32': fig['tl32'] - fig['bare']}
    for t in ('at0', 'at32'):
        if t in fig:
            extra[t] = fig[t] - fig['bare']
    if 'heaptrack' in fig:
        extra['heaptrack'] = fig['heaptrack'] - fig['host']

    print(f'Instructions per pair (callgrind, slope {LOW}..{HIGH} pairs, working thread only;')
    print('cuMemAlloc+cuMemFree from a 40-deep chain, one call site, 64 sizes 4-20 KiB)')
    print(f'  no tool (the simulated driver)      {fig["bare"]:8.0f}')
    print(f'  tensorleak depth 0                  {fig["tl0"]:8.0f}   extra {extra["tl0"]:6.0f}')
    print(f'  tensorleak depth 32                 {fig["tl32"]:8.0f}   extra {extra["tl32"]:6.0f}')
    for d in ('0', '32'):
        if 'at' + d in fig:
            print(f'  tensorleak depth {d:<2} attached         {fig["at" + d]:8.0f}   extra {extra["at" + d]:6.0f}'
                  f'   (preloaded {extra["tl" + d]:.0f})')
    print(f'  malloc+free, no tool                {fig["host"]:8.0f}')
    if 'heaptrack' in extra:
        print(f'  heaptrack (linked in)               {fig["heaptrack"]:8.0f}   extra {extra["heaptrack"]:6.0f}')
        print(f'  heaptrack extra / tensorleak depth-32 extra: {extra["heaptrack"] / extra["tl32"]:.2f}x')
    else:
        print('  (heaptrack not found: apt-get install heaptrack for its row)')

    if args.json:
        with open(args.json, 'w') as f:
            json.dump({'figures': fig, 'extra': extra}, f, indent=1)
    if args.write_baseline:
        with open(args.write_baseline, 'w') as f:
            json.dump({'tl0': round(extra['tl0']), 'tl32': round(extra['tl32'])}, f, indent=1)
            f.write('\n')
    if args.check:
        with open(args.check) as f:
            base = json.load(f)
        bad = []
        for k in ('tl0', 'tl32'):
            limit = base[k] * (1 + TOLERANCE)
            print(f'check: {k} extra {extra[k]:.0f} against baseline {base[k]} (fails above {limit:.0f})')
            if not extra[k] <= limit:
                bad.append(f'{k}: {extra[k]:.0f} extra instructions per pair, more than 10 % over the baseline {base[k]}')
        for m in bad:
            print('check FAILED: ' + m)
        return 1 if bad else 0
    return 0


if __name__ == '__main__':
    sys.exit(main())
