#!/usr/bin/env bash
# tests/gpu/run.sh [--dry-run]: tensorleak's real-GPU verification kit.
#
# On a machine with an NVIDIA GPU (the device tool's H200: CUDA toolkit, PyTorch,
# transformers, JAX, CuPy, compute-sanitizer, no internet), in at most TL_GPU_BUDGET
# seconds (390; with the machine's start that is one device call of about 8 minutes):
#   1. takes tensorleak from .gpu-carry/ (tests/gpu/prepare-carry.sh) or builds it
#      (meson+ninja, else a plain cc line), and reports missing shared libraries first;
#   2. builds the CUDA samples of tests/gpu, each .cu with static and shared cudart;
#   3. runs, in this order (step names for TL_GPU_STEPS in brackets): each sample plain,
#      under LD_PRELOAD and under `tensorleak run` [samples]; the PyTorch loops under
#      three allocator modes, torch_snapshot.py's two snapshots,
#      `tensorleak attach` to a loop started without it [torch]; GPT-2, JAX,
#      CuPy, cuda.bindings and numba-cuda loops under `tensorleak run`, the bridges on,
#      GPT-2 once more with `tensorleak exporter` running [frameworks]; compute-sanitizer
#      --leak-check full [sanitizer]; the overhead benchmark, ABBA [bench];
#   4. holds every report against the ground truth the programs print (compare.py),
#      writes $OUT/gpu-results.md (+ .json, run.log, env.json, logs.tar.gz), prints
#      the table last and exits 1 on any mismatch.
# --dry-run (CI, no GPU): checks its own syntax, runs compare.py's self-test and the
# loops' skip path, compiles and links the samples with nvcc when nvcc exists, runs the
# driver-API samples and a framework loop on the simulated GPU, skips what needs a GPU.
#
# Environment: TL_SOURCE_ROOT, TL_BUILD_ROOT (meson dirs; default: this checkout and
# its build/), OUT (results; default a new /tmp folder), TL_GPU_BUDGET (seconds),
# TL_GPU_STEPS (steps to run, default "samples torch frameworks sanitizer bench"; the
# others are recorded as skipped on request), TL_BENCH_PAIRS (ABBA pairs per overhead
# row, 2), NVCC_ARCH (default sm_90), PYTHON (default python3), TL_GPU_FORCE=1 (run the
# full kit although no GPU was seen), TL_GPU_KEEP=1 (keep the work folder).
set -u -o pipefail

DRY=0
case "${1:-}" in
--dry-run) DRY=1 ;;
"") ;;
-h | --help)
    sed -n '2,29p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
*)
    echo "usage: $0 [--dry-run]" >&2
    exit 2
    ;;
esac

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SRC=${TL_SOURCE_ROOT:-$(cd "$HERE/../.." && pwd)}
BUILD=${TL_BUILD_ROOT:-$SRC/build}
KIT=$SRC/tests/gpu
PY=${PYTHON:-python3}
START=$(date +%s)
BUDGET=${TL_GPU_BUDGET:-390}
NVCC_ARCH=${NVCC_ARCH:-sm_90}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/tl-gpu-kit.XXXXXX")
LOGS=$WORK/logs
REP=$WORK/reports
BIN=$WORK/bin
RECORDS=$WORK/records.tsv
CARRY=$SRC/.gpu-carry
mkdir -p "$LOGS" "$REP" "$BIN"
: >"$RECORDS"
export PYTHONPYCACHEPREFIX=$WORK/pycache # never write __pycache__ into the checkout
cleanup() { [ "${TL_GPU_KEEP:-0}" = 1 ] || rm -rf "$WORK"; }
trap cleanup EXIT

STEPS=" ${TL_GPU_STEPS:-samples torch frameworks sanitizer bench} "
want() { case $STEPS in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
say() { printf '%s\n' "$*"; }
elapsed() { echo $(($(date +%s) - START)); }
left() { echo $((BUDGET - $(date +%s) + START)); }
now() { date +%s.%N; }

# ------------------------------------------------------------------ toolchain
CUDA_HOME=${CUDA_HOME:-}
NVCC=$(command -v nvcc 2>/dev/null || true)
for d in "$CUDA_HOME" /usr/local/cuda /opt/cuda; do
    [ -z "$NVCC" ] && [ -n "$d" ] && [ -x "$d/bin/nvcc" ] && NVCC=$d/bin/nvcc
done
if [ -n "$NVCC" ] && [ -z "$CUDA_HOME" ]; then CUDA_HOME=$(cd "$(dirname "$NVCC")/.." && pwd); fi
CUDA_INC=${CUDA_HOME:+$CUDA_HOME/include}
STUBS=""
for d in "$CUDA_HOME/lib64/stubs" "$CUDA_HOME/targets/x86_64-linux/lib/stubs"; do
    [ -z "$STUBS" ] && [ -f "$d/libcuda.so" ] && STUBS=$d
done
JOBS=$(nproc 2>/dev/null || echo 2)

# build_samples: every .cu twice (static and shared cudart), every .c once (driver API).
# Writes one build record per binary; returns non-zero if any failed.
CU_SAMPLES="leaky clean async_pool graph families"
C_SAMPLES="driver_api vmm sleep_wake ipc vmm_share"
build_one() { # name mode
    local name=$1 mode=$2 log=$LOGS/build-$1-$2.log t0 rc
    t0=$(now)
    if [ "$mode" = none ]; then
        timeout -k 5 240 "$NVCC" -g -O1 -cudart none -Xcompiler -fno-omit-frame-pointer,-Wall \
            -I"$KIT" -o "$BIN/$name.$mode" "$KIT/$name.c" ${STUBS:+-L"$STUBS"} -lcuda -ldl >"$log" 2>&1
    else
        timeout -k 5 240 "$NVCC" -std=c++17 -g -O1 -arch="$NVCC_ARCH" -cudart "$mode" \
            -Xcompiler -fno-omit-frame-pointer,-Wall -I"$KIT" -o "$BIN/$name.$mode" "$KIT/$name.cu" -ldl \
            >"$log" 2>&1
    fi
    rc=$?
    printf 'build\t%s\t%s\tnvcc\t%d\t%s\t%s\t%s\t\t\n' "$name" "$mode" "$rc" \
        "$(awk -v a="$t0" -v b="$(now)" 'BEGIN{printf "%.2f", b-a}')" "$log" "$log" >>"$RECORDS"
    return $rc
}
build_samples() {
    local pids=() n=0 fail=0 name mode p
    for name in $CU_SAMPLES; do
        for mode in static shared; do
            build_one "$name" "$mode" &
            pids+=($!)
        done
    done
    for name in $C_SAMPLES; do
        build_one "$name" none &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || fail=1; done
    # A static build must not need libcudart.so, a shared one must.
    for name in $CU_SAMPLES; do
        for mode in static shared; do
            [ -f "$BIN/$name.$mode" ] || continue
            n=$(readelf -d "$BIN/$name.$mode" 2>/dev/null | grep -c 'NEEDED.*libcudart' || true)
            if { [ "$mode" = static ] && [ "$n" != 0 ]; } || { [ "$mode" = shared ] && [ "$n" = 0 ]; }; then
                say "FAIL  $name.$mode: libcudart NEEDED entries: $n (cudart $mode)"
                fail=1
            fi
        done
    done
    return $fail
}
report_builds() {
    awk -F'\t' '$1=="build"{printf "%-5s nvcc %-12s %-7s %5ss  %s\n", ($5==0?"ok":"FAIL"), $2, $3, $6, ($5==0?"":$7)}' "$RECORDS"
    awk -F'\t' '$1=="build" && $5!=0 {print $7}' "$RECORDS" | while read -r log; do
        sed 's/^/      | /' "$log" | tail -n 15
    done
}

# rec KIND NAME BUILD TOOL EXTRA TIMEOUT REQUIRED -- CMD...: run one program, log, record.
rec() {
    local kind=$1 name=$2 build=$3 tool=$4 extra=$5 tmo=$6 req=$7
    shift 8
    local tag="$kind-$name-$build-$tool${extra:+-$(printf '%s' "$extra" | tr -c 'A-Za-z0-9' '_')}"
    local out=$LOGS/$tag.out err=$LOGS/$tag.err dir=$REP/$tag rc t0 t1 l
    l=$(left)
    if [ "$l" -lt 20 ]; then
        printf 'skip\t%s\t%s\t%s\t0\t0\tout of time (%ss left)\t\t\t%s\n' "$name" "$build" "$tool" "$l" "$req" >>"$RECORDS"
        say "SKIP  $tag: out of time"
        return 0
    fi
    [ "$tmo" -gt $((l - 10)) ] && tmo=$((l - 10))
    mkdir -p "$dir"
    # extra: "" (the allocator's defaults), VAR=VALUE settings, or a PYTORCH_CUDA_ALLOC_CONF
    local pre=(env -u PYTORCH_CUDA_ALLOC_CONF) sets=()
    case $extra in
    "") ;;
    *=*) read -r -a sets <<<"$extra" && pre+=("${sets[@]}") ;;
    *) pre+=("PYTORCH_CUDA_ALLOC_CONF=$extra") ;;
    esac
    t0=$(now)
    case $tool in
    none) timeout -k 5 "$tmo" "${pre[@]}" "$@" >"$out" 2>"$err" ;;
    preload)
        timeout -k 5 "$tmo" "${pre[@]}" LD_PRELOAD="$TL_LIB" TENSORLEAK_OUTPUT="$dir/tl.%p.%n.json" \
            "$@" >"$out" 2>"$err"
        ;;
    cli) timeout -k 5 "$tmo" "${pre[@]}" "$TL_CLI" run ${CLI_SIM:+"$CLI_SIM"} -o "$dir/tl.%p.%n.json" -- "$@" >"$out" 2>"$err" ;;
    cli-default) # the default report names, in the report folder: no report may replace another
        (cd "$dir" && timeout -k 5 "$tmo" "${pre[@]}" "$TL_CLI" run ${CLI_SIM:+"$CLI_SIM"} -- "$@") >"$out" 2>"$err" ;;
    sanitizer) timeout -k 5 "$tmo" "${pre[@]}" "$SAN" --leak-check full "$@" --reset >"$out" 2>"$err" ;;
    esac
    rc=$?
    t1=$(now)
    local secs
    secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.3f", b-a}')
    printf '%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n' "$kind" "$name" "$build" "$tool" "$rc" "$secs" \
        "$out" "$err" "$dir" "$extra" >>"$RECORDS"
    printf '%-5s %-45s rc=%-3d %7ss\n' "$([ "$rc" = 0 ] && echo ran || echo EXIT)" "$tag" "$rc" "$secs"
}
# start_exporter LIVE_DIR: `tensorleak exporter` on a free port over LIVE_DIR, for the
# rows whose setting is TL_EXPORTER=1 (serve_loop.py then reads /metrics at its moments);
# sets TL_EXPORTER_URL ("" when it did not start) and EXPORTER_PID.
TL_EXPORTER_URL="" EXPORTER_PID=""
start_exporter() {
    local live=$1 port="" i
    mkdir -p "$live" && chmod 700 "$live"
    "$TL_CLI" exporter --listen 127.0.0.1:0 --dir "$live" 2>"$LOGS/exporter.err" &
    EXPORTER_PID=$!
    for i in $(seq 1 100); do
        port=$(sed -n 's/.*on port \([0-9]*\).*/\1/p' "$LOGS/exporter.err" | head -n 1)
        [ -n "$port" ] && break
        sleep 0.1
    done
    TL_EXPORTER_URL=${port:+http://127.0.0.1:$port/metrics}
}
stop_exporter() {
    [ -n "$EXPORTER_PID" ] && kill "$EXPORTER_PID" 2>/dev/null && wait "$EXPORTER_PID" 2>/dev/null
    EXPORTER_PID=""
}
# Its rows run with TENSORLEAK_LIVE_DIR=$WORK/live and TENSORLEAK_LIVE_INTERVAL=0.2, so
# that serve_loop.py's moments wait a few tenths of a second for their live update.

skip_rec() { # name build tool why required
    printf 'skip\t%s\t%s\t%s\t0\t0\t%s\t\t\t%s\n' "$1" "$2" "$3" "$4" "$5" >>"$RECORDS"
    say "SKIP  $1 $2 $3: $4"
}
# attach_row: torch_loop.py --leak, paced, started without tensorleak: once untracked (its
# exit status), once with `tensorleak attach --interval 1` while it serves (it waits for the
# attach after its warm-up, so libcuda.so.1 is loaded and torch holds its entry points).
# compare.py's "attach" rows: the torch pool, growth at the leaking line, no invalid free,
# the exit status of the untracked run, and the entry points the attach refused.
attach_row() {
    local args=(--leak --requests 20 --pace 0.25) dir=$REP/attach-torch_loop-native-attach
    local out=$LOGS/attach-torch_loop-native-attach.out err=$LOGS/attach-torch_loop-native-attach.err
    local pid rc t0 t1 i
    rec attach torch_loop native none "" 120 required -- "$PY" "$KIT/torch_loop.py" "${args[@]}"
    if [ "$(left)" -lt 60 ]; then
        skip_rec torch_loop native attach "out of time ($(left)s left)" required
        return 0
    fi
    mkdir -p "$dir"
    t0=$(now)
    # No timeout wrapper: the pid attached to must be python's own; the loop ends by
    # itself (at most 60 s of waiting, then 20 requests).
    env -u PYTORCH_CUDA_ALLOC_CONF "$PY" "$KIT/torch_loop.py" "${args[@]}" --wait-attach 60 >"$out" 2>"$err" &
    pid=$!
    for i in $(seq 1 1200); do
        grep -q '^TL_READY' "$out" 2>/dev/null && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    timeout -k 5 60 "$TL_CLI" attach --interval 1 -o "$dir/tl.%p.%n.json" "$pid" >"$dir/attach.out" 2>"$dir/attach.err"
    echo $? >"$dir/attach.rc"
    wait "$pid"
    rc=$?
    t1=$(now)
    printf '%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n' attach torch_loop native attach "$rc" \
        "$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.3f", b-a}')" "$out" "$err" "$dir" "" >>"$RECORDS"
    printf '%-5s %-45s rc=%-3d\n' "$([ "$rc" = 0 ] && echo ran || echo EXIT)" attach-torch_loop-native-attach "$rc"
}
# tsnap_row [PYTHONPATH-PREFIX]: torch_snapshot.py under `tensorleak run` (the bridge on)
# pickles torch.cuda.memory._snapshot() and writes a tensorleak snapshot at the same
# moment into its report folder; the snapshot is then converted there with
# `tensorleak report --format torch-snapshot` (compare.py holds one against the other).
tsnap_row() {
    local dir=$REP/tsnap-torch_snapshot-native-cli
    PYTHONPATH=${1:-}$SRC/python${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 \
        rec tsnap torch_snapshot native cli "" 120 required -- "$PY" "$KIT/torch_snapshot.py" --out "$dir"
    if [ -f "$dir/tensorleak.json" ]; then
        timeout -k 5 60 "$TL_CLI" report "$dir/tensorleak.json" --format torch-snapshot -o "$dir/tensorleak.pickle" \
            >"$dir/convert.log" 2>&1
    fi
}

# The tree's commit: the carried MANIFEST's first (the build that runs), else HEAD, but
# only of a checkout whose root is this tree: a copy of the tree inside another checkout
# (the device tool's) must not report that checkout's HEAD.
tree_commit() {
    local c top
    if [ -f "$CARRY/lib/libtensorleak.so" ] && [ -f "$CARRY/MANIFEST" ]; then
        c=$(sed -n 's/^commit \([0-9a-f]\{7\}\)[0-9a-f]*$/\1/p' "$CARRY/MANIFEST" | head -n 1)
        if [ -n "$c" ]; then
            head -n 1 "$CARRY/MANIFEST" | grep -q '+local changes' && c="$c+local changes"
            echo "$c (carried MANIFEST)"
            return
        fi
    fi
    top=$(git -C "$SRC" rev-parse --show-toplevel 2>/dev/null)
    if [ -n "$top" ] && [ "$(cd "$top" && pwd -P)" = "$(cd "$SRC" && pwd -P)" ]; then
        c=$(git -C "$SRC" rev-parse --short=7 HEAD 2>/dev/null)
        git -C "$SRC" status --porcelain --untracked-files=no 2>/dev/null | grep -q . && c="$c+local changes"
        echo "$c (git checkout)"
        return
    fi
    echo "unknown (no carried MANIFEST; ${top:+the enclosing checkout $top is not this tree}${top:-not a git checkout})"
}

# ------------------------------------------------------------------- dry run
if [ "$DRY" = 1 ]; then
    pass=0 fail=0 skip=0
    ok() { say "ok    $*"; pass=$((pass + 1)); }
    bad() { say "FAIL  $*"; fail=$((fail + 1)); }
    skp() { say "SKIP  $*"; skip=$((skip + 1)); }
    say "gpu-kit dry run: source $SRC, build $BUILD"
    for f in "$KIT/run.sh" "$KIT/prepare-carry.sh"; do
        if bash -n "$f" 2>"$LOGS/bashn.log"; then ok "bash -n ${f#"$SRC"/}"; else
            bad "bash -n ${f#"$SRC"/}: $(cat "$LOGS/bashn.log")"
        fi
    done
    for f in "$KIT"/*.py; do
        if "$PY" -m py_compile "$f" 2>"$LOGS/pyc.log"; then ok "py_compile ${f#"$SRC"/}"; else
            bad "py_compile ${f#"$SRC"/}: $(cat "$LOGS/pyc.log")"
        fi
    done
    # The commit line: the carried MANIFEST's commit first; a tree copied inside another
    # checkout (as the device tool does) must not report that checkout's HEAD.
    mkdir -p "$WORK/cc/.gpu-carry/lib" "$WORK/cc/outer/tree"
    : >"$WORK/cc/.gpu-carry/lib/libtensorleak.so"
    printf 'tensorleak abc1234+local changes built now\ncommit abc1234def5678abc1234def5678abc1234def56\n' \
        >"$WORK/cc/.gpu-carry/MANIFEST"
    git -C "$WORK/cc/outer" init -q 2>/dev/null &&
        git -C "$WORK/cc/outer" -c user.name=kit -c user.email=kit@localhost commit -q --allow-empty -m outer
    c1=$(CARRY=$WORK/cc/.gpu-carry SRC=$WORK/cc/outer/tree tree_commit)
    c2=$(CARRY=$WORK/cc/none SRC=$WORK/cc/outer/tree tree_commit)
    if [ "$c1" = "abc1234+local changes (carried MANIFEST)" ] && [ "${c2%% *}" = unknown ]; then
        ok "commit line: the carried MANIFEST's, not the enclosing checkout's HEAD"
    else
        bad "commit line: with a carried MANIFEST '$c1', inside another checkout without one '$c2'"
    fi
    if out=$("$PY" "$KIT/compare.py" selftest 2>&1); then ok "$out"; else
        bad "compare.py selftest:"
        say "$out" | tail -n 20
    fi
    # The framework loops: one whose framework does not import here (CI has none) must
    # print TL_SKIP and exit 0, and compare.py must call its row skipped, not failed;
    # one whose framework imports runs a few small requests on the CPU (figures null).
    : >"$WORK/fw-records.tsv"
    for loop in gpt2 jax cupy driver numba; do
        rec fw "$loop" leak none "" 240 required -- "$PY" "$KIT/serve_loop.py" "$loop" --leak --device cpu \
            --requests 2 --check-at 1 --prompt 8 --decode 1 >/dev/null
        f=$LOGS/fw-$loop-leak-none
        if grep -q '^TL_SKIP ' "$f.out" && tail -n 1 "$RECORDS" | awk -F'\t' '$5 != 0 {exit 1}'; then
            tail -n 1 "$RECORDS" >>"$WORK/fw-records.tsv"
            ok "serve_loop.py $loop: $(sed -n 's/^TL_SKIP {"why": "\(.*\)"}$/\1/p' "$f.out"): skipped, exit 0"
        elif grep -q '^TL_GROUND_TRUTH ' "$f.out" && tail -n 1 "$RECORDS" | awk -F'\t' '$5 != 0 {exit 1}'; then
            ok "serve_loop.py $loop: 2 requests on the CPU"
        else
            bad "serve_loop.py $loop on the CPU: $(tail -n 3 "$f.err")"
        fi
    done
    sed -i '/^fw\t/d' "$RECORDS"
    if [ -s "$WORK/fw-records.tsv" ]; then
        if "$PY" "$KIT/compare.py" evaluate --records "$WORK/fw-records.tsv" --env <(echo '{"tensorleak_lib": "x"}') \
            >"$LOGS/fw-compare.md" 2>&1 && [ "$(grep -c '| skipped |$' "$LOGS/fw-compare.md")" = "$(wc -l <"$WORK/fw-records.tsv")" ]; then
            ok "compare.py: the loops whose framework is absent are skipped rows, no mismatch"
        else
            bad "compare.py on skipped framework loops:"
            sed 's/^/      | /' "$LOGS/fw-compare.md" | tail -n 12
        fi
    fi
    if [ -z "$NVCC" ]; then
        skp "nvcc not found: CUDA samples not compiled"
    else
        say "      $("$NVCC" --version | tail -n 2 | head -n 1), arch $NVCC_ARCH, jobs $JOBS"
        [ -n "$STUBS" ] || say "      (no stubs/libcuda.so: the driver-API samples link against the system libcuda)"
        if build_samples; then ok "compile and link the samples (.cu: cudart static and shared; .c: driver API)"; else
            bad "compile and link the samples"
        fi
        report_builds
        if [ -f "$SRC/include/tensorleak.h" ]; then
            printf '#include "tensorleak.h"\nint main(void){tensorleak_mark("x");return tensorleak_snapshot("y")<0;}\n' \
                >"$WORK/hdr.cu"
            if "$NVCC" -I"$SRC/include" -o "$WORK/hdr" "$WORK/hdr.cu" >"$LOGS/hdr.log" 2>&1; then
                ok "include/tensorleak.h compiles and links as CUDA C++ with no link flag"
            else
                bad "include/tensorleak.h in a .cu file (nvcc, C++):"
                sed 's/^/      | /' "$LOGS/hdr.log" | tail -n 10
            fi
        else
            skp "include/tensorleak.h not there yet: C++ header check"
        fi
    fi
    lib=$BUILD/src/libtensorleak.so
    if [ -f "$lib" ]; then
        miss=$(ldd "$lib" 2>&1 | awk '/not found/{print $1}' | tr '\n' ' ')
        if [ -n "$miss" ]; then bad "ldd $lib: missing $miss"; else ok "ldd ${lib#"$SRC"/}: all shared libraries found"; fi
        for sym in tensorleak_mark tensorleak_snapshot; do
            if nm -D --defined-only "$lib" 2>/dev/null | awk '{print $NF}' | grep -qx "$sym"; then
                ok "${lib##*/} exports $sym (samples and ctypes find it with dlsym)"
            else
                say "WARN  ${lib##*/} does not export $sym yet: the GPU kit's growth and snapshot checks would fail"
            fi
        done
    else
        skp "$lib not built: ldd and export checks"
    fi
    # The driver-API samples also run on the simulated driver (tests/sim): the whole
    # chain (ground truth, tensorleak's reports, compare.py) end to end, without a GPU.
    SIMDIR=$(dirname "$(find "$BUILD" -name libcuda.so.1 -path '*sim*' 2>/dev/null | head -n 1)" 2>/dev/null)
    if [ -f "$lib" ] && [ -f "$SIMDIR/libcuda.so.1" ] && [ -x "$BIN/driver_api.none" ]; then
        TL_LIB=$lib TL_CLI=$BUILD/tools/tensorleak CLI_SIM=--sim
        [ -x "$TL_CLI" ] || TL_CLI=""
        for name in $C_SAMPLES; do
            for tool in none preload ${TL_CLI:+cli}; do
                LD_LIBRARY_PATH=$SIMDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} \
                    rec sample "$name" none "$tool" "" 60 required -- "$BIN/$name.none" >/dev/null
            done
        done
        grep -v '^build' "$RECORDS" >"$WORK/sim-records.tsv"
        if "$PY" "$KIT/compare.py" evaluate --records "$WORK/sim-records.tsv" \
            --env <(printf '{"tensorleak_lib": "%s", "tensorleak_source": "simulated driver %s"}' "$lib" "$SIMDIR") \
            >"$LOGS/sim-compare.md" 2>&1; then
            ok "$C_SAMPLES on the simulated driver under tensorleak (LD_PRELOAD${TL_CLI:+, tensorleak run --sim}): reports match the ground truth"
        else
            bad "$C_SAMPLES on the simulated driver: reports differ from the ground truth:"
            sed -n '/^## Mismatches/,/^## Samples/p' "$LOGS/sim-compare.md" | grep '^- ' | sed 's/^/      /'
        fi
        sed -n '/^| sample/,/^$/p' "$LOGS/sim-compare.md" | sed 's/^/      /'
    else
        skp "simulated stack or libtensorleak.so not built: driver-API samples on the simulated driver"
    fi
    # A framework row end to end: serve_loop.py's plain PyTorch loop on the stand-in torch
    # of tests/bridge (a caching allocator over the simulated runtime, PyTorch's statistics
    # and snapshot shapes) under `tensorleak run --sim`, the bridge on, evaluated by
    # compare.py as on the GPU: pool figures, growth by request 6, the user's line.
    FAKE=$SRC/tests/bridge/fake
    if [ -f "$lib" ] && [ -x "$BUILD/tools/tensorleak" ] && [ -f "$SIMDIR/libcudart.so.13" ] && [ -d "$FAKE/torch" ]; then
        TL_CLI=$BUILD/tools/tensorleak CLI_SIM=--sim
        : >"$RECORDS"
        start_exporter "$WORK/live"
        for mode in leak clean; do
            # the leak with PyTorch's history on, set as the GPU rows set it (rec's VAR=VALUE);
            # both with the exporter running, /metrics read at each moment (TL_EXPORTER=1)
            TL_EXPORTER=1 TENSORLEAK_LIVE_DIR=$WORK/live TENSORLEAK_LIVE_INTERVAL=0.2 TL_EXPORTER_URL=$TL_EXPORTER_URL \
                FAKE_CUDART=$SIMDIR/libcudart.so.13 PYTHONPATH=$FAKE:$SRC/python${PYTHONPATH:+:$PYTHONPATH} \
                rec fw kv "$mode" cli "$([ $mode = leak ] && echo TENSORLEAK_TORCH_HISTORY=1)" 60 required -- \
                "$PY" "$KIT/serve_loop.py" kv "--$mode" --requests 8 --check-at 6 >/dev/null
            # cuda.bindings (where installed) reaches the simulated libcuda.so.1 itself
            LD_LIBRARY_PATH=$SIMDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} PYTHONPATH=$SRC/python${PYTHONPATH:+:$PYTHONPATH} \
                rec fw driver "$mode" cli "" 60 required -- "$PY" "$KIT/serve_loop.py" driver "--$mode" \
                --requests 8 --check-at 6 >/dev/null
        done
        stop_exporter
        if "$PY" "$KIT/compare.py" evaluate --records "$RECORDS" --env <(echo '{"tensorleak_lib": "x"}') \
            >"$LOGS/kv-compare.md" 2>&1 && grep -q '"history": true' "$LOGS/fw-kv-leak-cli-TENSORLEAK_TORCH_HISTORY_1.out" &&
            [ "$(grep -o '"exporter": {"device_free": [0-9]' "$LOGS"/fw-kv-*.out | wc -l)" = 4 ]; then
            ok "serve_loop.py kv (stand-in torch) and driver (cuda.bindings$(grep -q 'cuda.bindings .*| skipped |' "$LOGS/kv-compare.md" && echo ': not installed, skipped')) under tensorleak run --sim: pool rows equal the allocator's figures, growth by request 6, the user's line; the exporter's /metrics at each moment equal the allocator's figures"
        else
            bad "serve_loop.py kv and driver under tensorleak run --sim:"
            sed -n '/^## Mismatches/,/^## Samples/p' "$LOGS/kv-compare.md" | grep '^- ' | sed 's/^/      /'
            tail -n 5 "$LOGS"/fw-kv-*.err | sed 's/^/      | /'
        fi
        sed -n '/^| loop | setting/,/^$/p' "$LOGS/kv-compare.md" | sed 's/^/      /'
        # The torch_snapshot row on the stand-in torch: its snapshot and tensorleak's,
        # converted, through compare.py as on the GPU (memory_viz only where it imports).
        : >"$RECORDS"
        FAKE_CUDART=$SIMDIR/libcudart.so.13 tsnap_row "$FAKE:" >/dev/null
        if "$PY" "$KIT/compare.py" evaluate --records "$RECORDS" --env <(echo '{"tensorleak_lib": "x"}') \
            >"$LOGS/tsnap-compare.md" 2>&1 && grep -q '^| native | .* | ok |$' "$LOGS/tsnap-compare.md"; then
            ok "torch_snapshot.py (stand-in torch) under tensorleak run --sim, converted with --format torch-snapshot: plain opcodes, the 'torch cuda:0' segments and active blocks are the stand-in's snapshot's, the plain allocations at their addresses and line, total = reserved_bytes$(grep -q 'skipped (no _memory_viz)' "$LOGS/tsnap-compare.md" && echo '; memory_viz views skipped: torch.cuda._memory_viz does not import here')"
        else
            bad "torch_snapshot.py under tensorleak run --sim:"
            sed -n '/^## Mismatches/,/^## Samples/p' "$LOGS/tsnap-compare.md" | grep '^- ' | sed 's/^/      /'
            tail -n 5 "$LOGS"/tsnap-*.err "$REP"/tsnap-*/convert.log 2>/dev/null | sed 's/^/      | /'
        fi
        sed -n "/^| run | 'torch cuda:0'/,/^\$/p" "$LOGS/tsnap-compare.md" | sed 's/^/      /'
    else
        skp "tensorleak, the simulated runtime or tests/bridge/fake not there: framework and torch_snapshot rows on the simulated GPU"
    fi
    skp "needs a GPU: running the samples under tensorleak (LD_PRELOAD and tensorleak run), PyTorch allocator modes, compute-sanitizer, overhead"
    say "gpu-kit dry run: $pass passed, $fail failed, $skip skipped ($(elapsed) s)"
    [ "$fail" = 0 ]
    exit $?
fi

# ------------------------------------------------------------------ full run
if [ -z "${OUT:-}" ]; then OUT=$(mktemp -d /tmp/tl-gpu-out.XXXXXX); fi
mkdir -p "$OUT"
exec > >(tee "$OUT/run.log") 2>&1
TEE_PID=$!

# tensorleak: prebuilt carry, else meson+ninja, else a plain cc line.
TL_LIB="" TL_CLI="" TL_SOURCE="" TL_ERROR="" DEPS=""
cc_fallback() { # dest: libtensorleak.so and tensorleak from src/*/*.c and tools/*.c
    local dest=$1 ver cflags libs common
    mkdir -p "$dest/gen"
    ver=$(sed -n "s/^ *version *: *'\([^']*\)'.*/\1/p" "$SRC/meson.build" | head -n 1)
    printf '#define TL_VERSION "%s"\n' "${ver:-0.0.0}" >"$dest/gen/tl_version.h"
    if pkg-config --exists libunwind libdw jansson 2>/dev/null; then
        cflags=$(pkg-config --cflags libunwind libdw jansson)
        libs=$(pkg-config --libs libunwind libdw jansson)
    else
        cflags="" libs="-lunwind -ldw -lelf -ljansson"
    fi
    [ -d "$CARRY/include" ] && cflags="$cflags -I$CARRY/include" # uthash.h, if carried
    common="-std=gnu11 -O2 -g -D_GNU_SOURCE -fno-omit-frame-pointer -Wl,-z,defs -I$dest/gen -I$SRC -I$SRC/include -I$SRC/src $cflags"
    if [ -n "$CUDA_INC" ] && [ -f "$CUDA_INC/cuda.h" ] && [ -f "$CUDA_INC/cuda_runtime_api.h" ]; then
        common="$common -DTL_HAVE_CUDA_H -I$CUDA_INC"
    fi
    # The library: every layer of src/ (src/*/*.c and src/*/*.S, the shared
    # model in src/model/ included).  The CLI: tools/*.c and the model.
    local layer
    for layer in "$SRC"/src/*/; do
        common="$common -I$layer"
    done
    # shellcheck disable=SC2086,SC2046
    ${CC:-cc} $common -fPIC -shared -o "$dest/libtensorleak.so" "$SRC"/src/*/*.c \
        $(ls "$SRC"/src/*/*.S 2>/dev/null) $libs -ldl -lpthread -lm || return 1
    # shellcheck disable=SC2086
    ${CC:-cc} $common -DTL_LIBDIR='"lib"' -o "$dest/tensorleak" "$SRC"/tools/*.c "$SRC"/src/model/*.c $libs -ldl -lpthread -lm
}
setup_tensorleak() {
    if [ -f "$CARRY/lib/libtensorleak.so" ]; then
        TL_LIB=$CARRY/lib/libtensorleak.so TL_CLI=$CARRY/bin/tensorleak
        TL_SOURCE="prebuilt .gpu-carry ($(head -n 1 "$CARRY/MANIFEST" 2>/dev/null || echo 'no MANIFEST'))"
        return
    fi
    local b=$WORK/tlbuild
    if command -v meson >/dev/null && command -v ninja >/dev/null; then
        if timeout -k 5 150 meson setup "$b" "$SRC" -Dtests=false >"$LOGS/tl-build.log" 2>&1 &&
            timeout -k 5 150 ninja -C "$b" >>"$LOGS/tl-build.log" 2>&1 && [ -f "$b/src/libtensorleak.so" ]; then
            TL_LIB=$b/src/libtensorleak.so TL_CLI=$b/tools/tensorleak TL_SOURCE="built here with meson+ninja"
            return
        fi
        say "meson build failed or made no src/libtensorleak.so (tail of the log):"
        tail -n 15 "$LOGS/tl-build.log"
    else
        say "meson or ninja missing: plain cc build"
    fi
    if timeout -k 5 150 bash -c "$(declare -f cc_fallback); SRC='$SRC' CARRY='$CARRY' CUDA_INC='$CUDA_INC' cc_fallback '$WORK/ccbuild'" \
        >>"$LOGS/tl-build.log" 2>&1; then
        TL_LIB=$WORK/ccbuild/libtensorleak.so TL_CLI=$WORK/ccbuild/tensorleak TL_SOURCE="built here with cc (meson fallback)"
        export TENSORLEAK_LIBRARY=$TL_LIB # that flat layout is neither the build tree nor an install
    else
        TL_ERROR="build failed; run tests/gpu/prepare-carry.sh before the session and carry .gpu-carry"
        say "cc build failed (tail of the log):"
        tail -n 15 "$LOGS/tl-build.log"
    fi
}
MISSING=""
missing_of() { # sonames ldd cannot find for $1, or finds only in a version too old
    ldd "$1" 2>&1 | awk '/=> not found/ {print $1}
        /version `.*not found/ {s = $2; sub(/:$/, "", s); n = split(s, p, "/"); print p[n]}' | sort -u
}
check_libs() { # put carried copies of what the system lacks on LD_LIBRARY_PATH
    local f so pass added
    mkdir -p "$WORK/deps"
    for pass in 1 2 3 4; do # a carried library can need another carried one
        added=0
        for f in "$TL_LIB" "$TL_CLI"; do
            [ -f "$f" ] || continue
            for so in $(missing_of "$f"); do
                if [ -f "$CARRY/deps/$so" ] && [ ! -e "$WORK/deps/$so" ]; then
                    ln -s "$CARRY/deps/$so" "$WORK/deps/$so"
                    added=1
                fi
            done
        done
        if [ "$added" = 1 ] && [ -z "$DEPS" ]; then
            DEPS=$WORK/deps
            export LD_LIBRARY_PATH=$DEPS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
        fi
        [ "$added" = 1 ] || break
    done
    for f in "$TL_LIB" "$TL_CLI"; do
        [ -f "$f" ] || continue
        for so in $(missing_of "$f"); do MISSING="$MISSING ${f##*/}:$so"; done
    done
}

setup_tensorleak
[ -n "$TL_LIB" ] && [ ! -f "$TL_LIB" ] && { TL_ERROR="$TL_LIB missing after the build"; TL_LIB=""; }
[ -n "$TL_CLI" ] && [ ! -x "$TL_CLI" ] && { say "no CLI at $TL_CLI"; TL_CLI=""; }
check_libs
say "== tensorleak GPU kit, $(date -u +%FT%TZ)"
say "tensorleak: ${TL_SOURCE:-NONE: $TL_ERROR}"
if [ -n "$MISSING" ]; then
    for m in $MISSING; do say "MISSING shared library: $m"; done
else
    say "shared libraries: all found${DEPS:+ (carried: $(ls "$DEPS" | tr '\n' ' '))}"
fi
GPU=$(timeout 30 nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1)
say "GPU: ${GPU:-none seen}"
if [ -z "$GPU" ] && [ "${TL_GPU_FORCE:-0}" != 1 ]; then
    say "no GPU here: run 'tests/gpu/run.sh --dry-run' instead (or TL_GPU_FORCE=1)"
    exit 2
fi
TORCH_V=$(timeout 90 "$PY" -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda)' 2>"$LOGS/torch-import.err")
# The other frameworks' versions, from their package metadata (nothing imported).
FW_V=$(timeout 30 "$PY" -c '
import importlib.metadata as m
out = []
for name in ("transformers", "jax", "jaxlib", "cupy-cuda13x", "cupy-cuda12x", "cupy", "numba-cuda", "cuda-bindings"):
    try:
        out.append("%s %s" % (name, m.version(name)))
    except Exception:
        pass
print(", ".join(out))' 2>/dev/null)
SAN=$(command -v compute-sanitizer || true)
[ -z "$SAN" ] && [ -x "$CUDA_HOME/bin/compute-sanitizer" ] && SAN=$CUDA_HOME/bin/compute-sanitizer
SAN_V=$([ -n "$SAN" ] && "$SAN" --version 2>/dev/null | grep -i version | head -n 1)
NVCC_V=$([ -n "$NVCC" ] && "$NVCC" --version | grep -o 'release [0-9.]*, V[0-9.]*' | head -n 1)
COMMIT=$(tree_commit)
say "nvcc: ${NVCC_V:-none}; PyTorch: ${TORCH_V:-none}; compute-sanitizer: ${SAN_V:-none}; budget ${BUDGET}s"
say "other frameworks: ${FW_V:-none}"

# 1. samples
if ! want samples && ! want sanitizer; then
    :
elif [ -n "$NVCC" ]; then
    say "== building samples ($NVCC_ARCH)"
    build_samples
    report_builds
else
    skip_rec samples - build "nvcc not found" required
fi
TOOLS="none"
[ -n "$TL_LIB" ] && TOOLS="$TOOLS preload"
[ -n "$TL_LIB" ] && [ -n "$TL_CLI" ] && TOOLS="$TOOLS cli"
want samples && say "== samples under: $TOOLS"
BINS=""
for name in $CU_SAMPLES; do for mode in static shared; do BINS="$BINS $name.$mode"; done; done
for name in $C_SAMPLES; do BINS="$BINS $name.none"; done
if ! want samples; then
    skip_rec samples - - "not in TL_GPU_STEPS" optional
else
    for b in $BINS; do
        [ -x "$BIN/$b" ] || continue
        for tool in $TOOLS; do rec sample "${b%.*}" "${b##*.}" "$tool" "" 60 required -- "$BIN/$b"; done
    done
    # leaky snapshots ("end") and exits: under the default pattern both reports must stay
    [ -x "$BIN/leaky.static" ] && [ -n "$TL_CLI" ] && rec sample leaky static cli-default "" 60 required -- "$BIN/leaky.static"
fi

# 2. PyTorch allocator modes
export TENSORLEAK_DEPTH=${TENSORLEAK_DEPTH:-32}
if ! want torch; then
    skip_rec torch - - "not in TL_GPU_STEPS" optional
elif [ -z "$TORCH_V" ]; then
    skip_rec torch - - "PyTorch does not import: $(tail -n 1 "$LOGS/torch-import.err")" required
elif [ -z "$TL_LIB" ]; then
    skip_rec torch - - "no libtensorleak.so" required
else
    say "== PyTorch loops"
    for conf in "" "expandable_segments:True" "backend:cudaMallocAsync"; do
        for mode in leak clean; do
            rec torch "$mode" - preload "$conf" 120 required -- "$PY" "$KIT/torch_loop.py" "--$mode" --requests 20
        done
    done
    [ -n "$TL_CLI" ] && rec torch leak - cli "" 120 required -- "$PY" "$KIT/torch_loop.py" --leak --requests 20
    # `tensorleak attach` to the loop started without tensorleak (a real driver's entry points)
    [ -n "$TL_CLI" ] && attach_row
    # PyTorch's out-of-memory of each verdict (torch_oom.py; tests/torch/test_torch_oom.py on
    # the simulated GPU): compare.py holds the report at the failure against torch's figures
    if [ -n "$TL_CLI" ]; then
        rec torch_oom fragmentation - cli "" 120 required -- "$PY" "$KIT/torch_oom.py" --request-mib 50
        rec torch_oom not_enough_memory - cli "" 120 required -- "$PY" "$KIT/torch_oom.py" --request-mib 2000
    fi
    # tensorleak's torch-snapshot pickle against PyTorch's own snapshot (memory_viz views)
    [ -n "$TL_CLI" ] && tsnap_row
fi

# 3. the frameworks' own allocators, under `tensorleak run`, which
# turns the framework bridges on: GPT-2 on PyTorch's three allocator modes (the native
# leak also with PyTorch's allocation history, which names the leak's Python line), JAX
# with and without preallocation, CuPy's default pool; NVIDIA's cuda.bindings and
# numba-cuda (driver allocations from Python, no pool: growth and the user's line
# only, the first H200 run's native-only stacks).  Each loop prints TL_SKIP when its
# framework does not import: the row is skipped, not failed.  The package's tensorleak.mark
# comes from this tree (python/).
FW_ROWS="gpt2|leak| gpt2|leak|TENSORLEAK_TORCH_HISTORY=1 gpt2|clean|
gpt2|leak|expandable_segments:True gpt2|clean|expandable_segments:True
gpt2|leak|backend:cudaMallocAsync gpt2|clean|backend:cudaMallocAsync gpt2|leak|TL_EXPORTER=1
jax|leak| jax|clean| jax|leak|XLA_PYTHON_CLIENT_PREALLOCATE=false jax|clean|XLA_PYTHON_CLIENT_PREALLOCATE=false
cupy|leak| cupy|clean| driver|leak| driver|clean| numba|leak| numba|clean|"
if ! want frameworks; then
    skip_rec frameworks - - "not in TL_GPU_STEPS" optional
elif [ -z "$TL_CLI" ]; then
    skip_rec frameworks - - "no tensorleak CLI (the bridges are turned on by tensorleak run)" required
else
    say "== framework loops (GPT-2 on PyTorch, JAX, CuPy, cuda.bindings, numba-cuda) under tensorleak run"
    start_exporter "$WORK/live"
    for row in $FW_ROWS; do
        IFS='|' read -r loop mode setting <<<"$row"
        n=8
        # The GPT-2 leak flagged within 6 requests, its clean twin over 50 never
        [ "$mode" = clean ] && [ "$loop" = gpt2 ] && n=50
        # TL_EXPORTER=1: /metrics of the exporter read at each moment (serve_loop.py)
        TENSORLEAK_LIVE_DIR=$WORK/live TENSORLEAK_LIVE_INTERVAL=0.2 TL_EXPORTER_URL=$TL_EXPORTER_URL \
            PYTHONPATH=$SRC/python${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 \
            rec fw "$loop" "$mode" cli "$setting" 120 required -- \
            "$PY" "$KIT/serve_loop.py" "$loop" "--$mode" --requests "$n" --check-at 6
    done
    stop_exporter
fi

# 4. compute-sanitizer on the same binaries
if ! want sanitizer; then
    skip_rec compute-sanitizer - - "not in TL_GPU_STEPS" optional
elif [ -z "$SAN" ]; then
    skip_rec compute-sanitizer - - "not installed" optional
else
    say "== compute-sanitizer --leak-check full"
    refused=0
    for b in $BINS; do
        [ -x "$BIN/$b" ] || continue
        if [ "$refused" = 1 ]; then continue; fi
        if [ "${b%.*}" = ipc ]; then # two processes: the sanitizer's leak check is per process
            skip_rec ipc none sanitizer "two processes (exporter and importer)" optional
            continue
        fi
        if [ "$(left)" -lt 100 ]; then # leave the overhead runs some time
            skip_rec "${b%.*}" "${b##*.}" sanitizer "out of time" optional
            continue
        fi
        rec sample "${b%.*}" "${b##*.}" sanitizer "" 60 optional -- "$BIN/$b"
        f=$LOGS/sample-${b%.*}-${b##*.}-sanitizer
        if grep -qi 'device not supported' "$f.out" "$f.err" 2>/dev/null; then
            refused=1
            skip_rec compute-sanitizer - - "refused the device (gVisor machines do): no further runs" optional
        fi
    done
fi

# 5. overhead: per row, processes with and without tensorleak alternate in
# ABBA order (a drift in clocks or load over the row falls on both sides alike); each
# process warms up (time-based, also ramping the GPU clocks) before its timed passes,
# and compare.py shows the medians with their spread.  Rows: the inference loop under
# the native allocator (cache hits, nothing reaches the driver) and under
# backend:cudaMallocAsync (every tensor a hooked cuMemAllocAsync), and the
# allocation-bound loop with caching off (every tensor a real cudaMalloc + cudaFree).
BENCH_ROWS="infer| infer|backend:cudaMallocAsync alloc|PYTORCH_NO_CUDA_MEMORY_CACHING=1"
BENCH_PAIRS=${TL_BENCH_PAIRS:-2}
if ! want bench; then
    skip_rec bench - - "not in TL_GPU_STEPS" optional
elif [ -n "$TORCH_V" ] && [ -n "$TL_LIB" ]; then
    say "== overhead (ABBA, $BENCH_PAIRS pairs per row)"
    for row in $BENCH_ROWS; do
        work=${row%%|*} conf=${row#*|}
        for i in $(seq 0 $((2 * BENCH_PAIRS - 1))); do
            case $((i % 4)) in 0 | 3) tool=none ;; *) tool=preload ;; esac
            if [ "$(left)" -lt 45 ]; then
                skip_rec "bench-$work" "$i" "$tool" "out of time" optional
                continue
            fi
            TENSORLEAK_QUIET=1 rec bench "$work" "$i" "$tool" "$conf" 60 optional -- \
                "$PY" "$KIT/bench.py" --workload "$work"
        done
    done
fi

# 6. verdict
say "== comparing ($(elapsed) s)"
KIT_DATE=$(date -u +%FT%TZ) KIT_GPU=$GPU KIT_NVCC=$NVCC_V KIT_TORCH=$TORCH_V KIT_FW=$FW_V KIT_SAN=$SAN_V \
    KIT_SOURCE=$TL_SOURCE KIT_LIB=$TL_LIB KIT_ERROR=$TL_ERROR KIT_COMMIT=$COMMIT KIT_MISSING=$MISSING \
    KIT_ELAPSED="$(elapsed) s of $BUDGET s" KIT_ARCH=$NVCC_ARCH "$PY" -c '
import json, os, sys
e = lambda k: os.environ.get("KIT_" + k, "")
gpu = [x.strip() for x in e("GPU").split(",")]
json.dump({"date": e("DATE"), "gpu": gpu[0], "driver": gpu[1] if len(gpu) > 1 else "",
           "cuda": e("NVCC"), "torch": e("TORCH"), "frameworks": e("FW"), "sanitizer": e("SAN"),
           "tensorleak_source": e("SOURCE"), "tensorleak_lib": e("LIB"), "tensorleak_error": e("ERROR"),
           "commit": e("COMMIT"), "missing_libs": e("MISSING").split(), "elapsed": e("ELAPSED"),
           "nvcc_arch": e("ARCH")}, open(sys.argv[1], "w"), indent=1)
' "$WORK/env.json"
timeout -k 5 120 "$PY" "$KIT/compare.py" evaluate --records "$RECORDS" --env "$WORK/env.json" \
    --md "$OUT/gpu-results.md" --json "$OUT/gpu-results.json" >"$LOGS/compare.out" 2>&1
status=$?
cp "$WORK/env.json" "$OUT/env.json"
cp "$RECORDS" "$LOGS/records.tsv"
timeout 60 tar -C "$WORK" -czf "$OUT/logs.tar.gz" logs reports 2>/dev/null
# The device tool brings back files of at most 16 MiB: without the reports, if need be.
if [ "$(stat -c %s "$OUT/logs.tar.gz" 2>/dev/null || echo 0)" -gt $((15 << 20)) ]; then
    say "logs.tar.gz over 15 MiB with every report: packed without the reports/ folder"
    timeout 60 tar -C "$WORK" -czf "$OUT/logs.tar.gz" logs 2>/dev/null
fi
if [ ! -s "$OUT/gpu-results.md" ]; then
    cat "$LOGS/compare.out"
    status=1
else
    cat "$OUT/gpu-results.md"
fi
exec >&- 2>&-
wait "$TEE_PID" 2>/dev/null
exit $status
