#!/usr/bin/env python3
"""Overhead benchmark of tensorleak (BENCHMARKS.md): one table, every row
measured in the same run, medians of repetitions run round-robin so that
machine noise hits all rows alike.

    python3 bench/run.py [--build DIR] [--short] [--reps N] [--check]

Rows:
  * CPU ns per alloc+free pair (cudaMalloc/cudaFree on the simulated runtime)
    with no tool, tensorleak TENSORLEAK_DEPTH=0 and depth 32, at call-chain
    depth D = 10 and 40 and T = 1 and 2 threads; overhead = the median of the
    per-repetition differences to the no-tool run of the same repetition.
  * The same churn shape on host malloc/free, bare and under heaptrack (the
    in-process cost, and the total CPU including heaptrack's interpreter).
  * T = 2 throughput (pairs per wall second) over T = 1.
  * The tracker alone (bench/tracker_churn: the tracker's entry points
    linked in and called directly, no driver call, D = 40): CPU ns per pair
    and T = 2 over T = 1 at depth 0 and 32, i.e. tensorleak's own scaling
    without the simulated driver's global lock in the way.
  * Python (bench/py_churn.py): CPU ns per cudaMalloc+cudaFree pair called
    through ctypes from a Python loop 30 Python frames deep, with no tool and
    under tensorleak depth 0 and 32 (Python frames merged into the stacks),
    next to the native depth-32 overhead at D = 40.
  * Tracker bytes per live allocation: RSS growth over L live allocations
    from one call site under tensorleak minus the same without it (so the
    simulated driver's own bookkeeping cancels and stacks are negligible).
  * Exit report time for L live allocations from C = 10k call sites: from
    main's return to the process's end, minus the same without the tool.

--check (the meson 'bench' suite) fails only on broken output or a gross
regression measured as a ratio: depth-32 overhead at D = 40 above 3x the
issue's 250 ns budget scaled to this run (relative to the no-tool row).
"""
import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--build', default=os.path.join(ROOT, 'build'), help='meson build directory')
    ap.add_argument('--short', action='store_true', help='fewer pairs and live allocations (CI)')
    ap.add_argument('--reps', type=int, default=5, help='repetitions per row (median), default 5')
    ap.add_argument('--check', action='store_true', help='exit 1 on broken output or a gross regression')
    ap.add_argument('--json', help='also write every raw measurement to this file')
    return ap.parse_args()


class Bench:
    def __init__(self, args):
        b = args.build
        self.churn = os.environ.get('TL_CHURN', os.path.join(b, 'bench', 'churn'))
        self.tracker_churn = os.environ.get('TL_TRACKER_CHURN', os.path.join(b, 'bench', 'tracker_churn'))
        self.lib = os.environ.get('TL_LIB', os.path.join(b, 'src', 'libtensorleak.so'))
        self.sim = os.environ.get('TL_SIM', os.path.join(b, 'sim'))
        for p in (self.churn, self.tracker_churn, self.lib):
            if not os.path.exists(p):
                sys.exit(f'run.py: {p} not found (build first: ninja -C {b})')
        self.heaptrack = shutil.which('heaptrack')
        self.tmp = tempfile.mkdtemp(prefix='tl-bench-')
        self.raw = []

    def env(self, tool):
        e = dict(os.environ)
        e['LD_LIBRARY_PATH'] = self.sim + (':' + e['LD_LIBRARY_PATH'] if e.get('LD_LIBRARY_PATH') else '')
        e['SIMCUDA_MEMORY'] = '64G'
        for k in [k for k in e if k.startswith('TENSORLEAK_')]:
            del e[k]
        e.pop('LD_PRELOAD', None)
        if tool.startswith('trk'):  # tracker_churn: the tracker linked in, no preload
            e['TENSORLEAK_DEPTH'] = tool[3:]
        elif tool.startswith('tl'):
            e['LD_PRELOAD'] = self.lib
            e['TENSORLEAK_DEPTH'] = tool[2:]
            e['TENSORLEAK_QUIET'] = '1'
            e['TENSORLEAK_OUTPUT'] = os.path.join(self.tmp, 'report-%p.json')
        return e

    def run(self, tool, argv):
        """Runs churn under `tool` (bare, tl0, tl32, heaptrack); returns its
        JSON line plus 'total_cpu_ns' (every process, heaptrack's interpreter
        included) and 'end_mono_ns' (when the process was reaped)."""
        if argv and argv[0] == 'python':
            cmd = [sys.executable, os.path.join(HERE, 'py_churn.py')] + [str(a) for a in argv[1:]]
        else:
            cmd = [self.tracker_churn if tool.startswith('trk') else self.churn] + [str(a) for a in argv]
        if tool == 'heaptrack':
            cmd = [self.heaptrack, '-o', os.path.join(self.tmp, 'ht')] + cmd
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        p = subprocess.run(cmd, env=self.env(tool), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        end = time.monotonic_ns()
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        lines = [l for l in p.stdout.splitlines() if l.startswith('{')]
        if p.returncode != 0 or len(lines) != 1:
            raise RuntimeError(f'{tool} {" ".join(cmd)}: exit {p.returncode}\n{p.stdout}\n{p.stderr}')
        out = json.loads(lines[0])
        out['total_cpu_ns'] = ((r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)) * 1e9
        out['end_mono_ns'] = end
        out['tool'] = tool
        self.raw.append(out)
        for f in os.listdir(self.tmp):
            os.unlink(os.path.join(self.tmp, f))
        return out


def med(xs):
    return statistics.median(xs) if xs else float('nan')


def main():
    args = parse_args()
    b = Bench(args)
    reps = max(args.reps, 1)
    pairs = 20000 if args.short else 200000
    live = 100000 if args.short else 1000000
    sites = 16
    warm = 1000
    shapes = [(d, t) for d in (10, 40) for t in (1, 2)]
    tools = ['bare', 'tl0', 'tl32']
    htools = ['host'] + (['heaptrack'] if b.heaptrack else [])

    res = {}  # (tool, d, t) -> list of results, one per repetition
    mem = {'bare': [], 'tl32': []}
    exit_t = {'bare': [], 'tl32': []}
    ht_quarter = {'host': [], 'heaptrack': []}  # D=40 T=1 at pairs/4: the slope cancels startup
    trk = {}  # (tool, t) -> results: the tracker alone, D=40
    py = {}  # tool -> results: the Python loop, 30 Python frames
    py_pairs = pairs // 2
    for rep in range(reps):
        for tool in tools:
            py.setdefault(tool, []).append(b.run(tool, ['python', 'pairs', py_pairs, 'depth', 30]))
        for t in (1, 2):
            for tool in ('trk0', 'trk32'):
                trk.setdefault((tool, t), []).append(
                    b.run(tool, ['tracker', 'pairs', pairs * 2, 'depth', 40, 'threads', t, 'sites', sites]))
        for d, t in shapes:
            for tool in tools:
                res.setdefault((tool, d, t), []).append(
                    b.run(tool, ['cuda', 'pairs', pairs, 'depth', d, 'threads', t, 'sites', sites]))
            for tool in htools:
                res.setdefault((tool, d, t), []).append(
                    b.run('bare' if tool == 'host' else tool,
                          ['host', 'pairs', pairs, 'depth', d, 'threads', t, 'sites', sites]))
        for tool in (ht_quarter if b.heaptrack else []):
            ht_quarter[tool].append(b.run('bare' if tool == 'host' else tool,
                                          ['host', 'pairs', pairs // 4, 'depth', 40, 'sites', sites]))
        for tool in mem:
            r = b.run(tool, ['cuda', 'live', live, 'depth', 10, 'sites', 1])
            mem[tool].append((r['rss_kb'] - r['rss_before_kb']) * 1024)
            r = b.run(tool, ['cuda', 'live', live, 'depth', 10, 'sites', 10000])
            exit_t[tool].append(r['end_mono_ns'] - r['main_end_mono_ns'])

    def per_pair(tool, d, t):
        return [r['cpu_ns_per_pair'] for r in res[(tool, d, t)]]

    def overhead(tool, base, d, t, key='cpu_ns_per_pair'):
        a, z = res[(tool, d, t)], res[(base, d, t)]
        return med([x[key] - y[key] for x, y in zip(a, z)])

    def total_slope(tool):
        # Total CPU of every process (heaptrack's interpreter and its
        # start-up included) at N and N/4 pairs: the difference per pair.
        full, quarter = res[(tool, 40, 1)], ht_quarter[tool]
        return med([(x['total_cpu_ns'] - y['total_cpu_ns']) / (pairs - pairs // 4) for x, y in zip(full, quarter)])

    def tput(tool, d, t):
        return med([r['pairs_per_s'] for r in res[(tool, d, t)]])

    print(f'tensorleak overhead benchmark: {pairs} pairs/thread, {sites} call sites, '
          f'{reps} repetitions (medians), nproc={os.cpu_count()}')
    print()
    hdr = f'{"row":44} {"D=10 T=1":>10} {"D=10 T=2":>10} {"D=40 T=1":>10} {"D=40 T=2":>10}'
    print('CPU ns per alloc+free pair')
    print(hdr)
    print('-' * len(hdr))

    def row(name, fn):
        vals = [fn(d, t) for d, t in shapes]
        print(f'{name:44} ' + ' '.join(f'{v:10.1f}' for v in vals))
        return vals

    table = {}
    table['bare'] = row('cudaMalloc+cudaFree, no tool', lambda d, t: med(per_pair('bare', d, t)))
    table['tl0'] = row('  tensorleak depth 0', lambda d, t: med(per_pair('tl0', d, t)))
    table['tl32'] = row('  tensorleak depth 32', lambda d, t: med(per_pair('tl32', d, t)))
    table['tl0_over'] = row('  overhead, depth 0          (target <= 40)', lambda d, t: overhead('tl0', 'bare', d, t))
    table['tl32_over'] = row('  overhead, depth 32   (D=40 target <= 250)', lambda d, t: overhead('tl32', 'bare', d, t))
    row('malloc+free, no tool', lambda d, t: med(per_pair('host', d, t)))
    if b.heaptrack:
        row('  heaptrack', lambda d, t: med(per_pair('heaptrack', d, t)))
        table['ht_over'] = row('  overhead, heaptrack in process', lambda d, t: overhead('heaptrack', 'host', d, t))
        ht_total = total_slope('heaptrack') - total_slope('host')
        print(f'{"  overhead, heaptrack incl. interpreter":44} {"":10} {"":10} {ht_total:10.1f}')
        row('heaptrack in process / tensorleak depth 32',
            lambda d, t: overhead('heaptrack', 'host', d, t) / max(overhead('tl32', 'bare', d, t), 1e-9))
        print(f'{"heaptrack incl. interp. / tensorleak d32":44} {"":10} {"":10} '
              f'{ht_total / max(overhead("tl32", "bare", 40, 1), 1e-9):10.1f}')
    else:
        print('(heaptrack not found: apt-get install heaptrack for the comparison rows)')
    print()
    print('Throughput, T=2 over T=1 (pairs per wall second; target >= 1.6 under tensorleak;')
    print("the no-tool row is the simulated driver's own scaling: one global lock per call)")
    for tool, name in (('bare', 'no tool'), ('tl0', 'tensorleak depth 0'), ('tl32', 'tensorleak depth 32')):
        print(f'  {name:24} D=10: {tput(tool, 10, 2) / tput(tool, 10, 1):5.2f}x   '
              f'D=40: {tput(tool, 40, 2) / tput(tool, 40, 1):5.2f}x')
    print()
    print('The tracker alone (tracker_churn: tl_track_alloc + tl_track_free of addresses of its')
    print('own, no driver call, D=40): whether tensorleak itself scales across threads')
    for tool, name in (('trk0', 'depth 0'), ('trk32', 'depth 32')):
        c1 = med([r['cpu_ns_per_pair'] for r in trk[(tool, 1)]])
        c2 = med([r['cpu_ns_per_pair'] for r in trk[(tool, 2)]])
        sc = med([r['pairs_per_s'] for r in trk[(tool, 2)]]) / med([r['pairs_per_s'] for r in trk[(tool, 1)]])
        table[tool] = [c1, c2, sc]
        print(f'  {name:24} CPU ns/pair T=1 {c1:7.1f}   T=2 {c2:7.1f}   throughput T=2/T=1 {sc:5.2f}x')
    print()
    pyv = sys.version_info
    print(f'Python loop, 30 Python frames, ctypes.CDLL (CPython {pyv.major}.{pyv.minor}; '
          f'{py_pairs} pairs): CPU ns per pair')
    py_bare = med([r['cpu_ns_per_pair'] for r in py['bare']])
    py_over = {}
    for tool in ('tl0', 'tl32'):
        py_over[tool] = med([x['cpu_ns_per_pair'] - y['cpu_ns_per_pair'] for x, y in zip(py[tool], py['bare'])])
    print(f'  no tool {py_bare:7.1f}   overhead depth 0 {py_over["tl0"]:7.1f}   overhead depth 32 {py_over["tl32"]:7.1f}')
    nat32 = overhead('tl32', 'bare', 40, 1)
    print(f'  depth-32 overhead / native depth-32 overhead at D=40 ({nat32:.1f}): '
          f'{py_over["tl32"] / max(nat32, 1e-9):5.1f}x   (target <= 2x; and < 1000 ns per pair)')
    table['py'] = [py_bare, py_over['tl0'], py_over['tl32']]
    print()
    bpl = med([x - y for x, y in zip(mem['tl32'], mem['bare'])]) / live
    ext = med([x - y for x, y in zip(exit_t['tl32'], exit_t['bare'])]) / 1e9
    print(f'Tracker memory per live allocation (L={live}, RSS delta vs no tool): {bpl:6.1f} B   (target <= 96)')
    print(f'Exit report, L={live} live from C=10000 call sites:              {ext:6.2f} s   (target < 2)')

    if args.json:
        with open(args.json, 'w') as f:
            json.dump(b.raw, f)
    shutil.rmtree(b.tmp, ignore_errors=True)

    if args.check:
        bad = []
        # Gross regression, as a ratio to this run's own no-tool cost: the
        # budget is 250 ns on a ~240 ns no-tool pair (D=40) on the machine of
        # BENCHMARKS.md, so the alarm is at 3x that ratio.
        base = med(per_pair('bare', 40, 1))
        ratio = overhead('tl32', 'bare', 40, 1) / base
        limit = 3 * 250 / 240
        print(f'check: depth-32 overhead / no-tool pair at D=40 = {ratio:.2f} (fails above {limit:.2f})')
        if not ratio < limit:
            bad.append('depth-32 overhead is a gross regression')
        if not (0 < bpl < 1000):
            bad.append(f'bytes per live allocation {bpl} out of any sane range')
        for k, v in table.items():
            if any(x != x for x in v):
                bad.append(f'row {k} has no value')
        for m in bad:
            print('check FAILED: ' + m)
        return 1 if bad else 0
    return 0


if __name__ == '__main__':
    sys.exit(main())
