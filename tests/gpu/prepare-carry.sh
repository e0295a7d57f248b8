#!/usr/bin/env bash
# tests/gpu/prepare-carry.sh [BUILD_DIR]: run HERE, before a GPU session.
#
# The GPU machine has no package registry and may lack libunwind, libdw, jansson
# or uthash, so tensorleak is built on this machine (same x86-64, older glibc) and
# carried: this script builds it (meson build dir BUILD_DIR, default build/), then
# fills .gpu-carry/ (git-ignored) with
#   bin/tensorleak              the CLI
#   lib/libtensorleak.so        the preload library (also at <libdir>/ when meson's
#                               libdir is not lib, where the installed CLI looks)
#   deps/<soname>               every shared library they need outside the C library
#                               (libunwind, libdw, libelf, jansson, lzma, zstd, bz2...)
#   include/                    uthash headers, for a fallback build over there
#   MANIFEST                    commit, date, glibc, checksums, ldd output
# with no rpath: tests/gpu/run.sh puts deps/ on LD_LIBRARY_PATH only for the
# libraries the GPU machine lacks.  Then call the device tool's run with
# carry [".gpu-carry"] and command "bash tests/gpu/run.sh" (tests/gpu/README.md).
set -euo pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
B=${1:-$SRC/build}
case $B in /*) ;; *) B=$PWD/$B ;; esac
CARRY=$SRC/.gpu-carry

if [ ! -f "$B/build.ninja" ]; then
    meson setup "$B" "$SRC"
fi
ninja -C "$B" src/libtensorleak.so tools/tensorleak 2>/dev/null || ninja -C "$B"
LIB=$B/src/libtensorleak.so
CLI=$B/tools/tensorleak
for f in "$LIB" "$CLI"; do
    [ -f "$f" ] || { echo "prepare-carry: $f was not built" >&2; exit 1; }
done

rm -rf "$CARRY"
mkdir -p "$CARRY/bin" "$CARRY/lib" "$CARRY/deps" "$CARRY/include"
cp "$LIB" "$CARRY/lib/"
cp "$CLI" "$CARRY/bin/"
LIBDIR=$(meson introspect --buildoptions "$B" 2>/dev/null |
    python3 -c 'import json,sys; print(next((o["value"] for o in json.load(sys.stdin) if o["name"]=="libdir"), "lib"))' 2>/dev/null ||
    echo lib)
case $LIBDIR in /*) LIBDIR=lib ;; esac # an absolute libdir: the CLI's relative lookup can't use it
if [ "$LIBDIR" != lib ]; then
    mkdir -p "$CARRY/$LIBDIR"
    cp "$LIB" "$CARRY/$LIBDIR/"
fi

# Shared libraries outside glibc and the compiler runtime, which the GPU machine has
# (newer); copying those would shadow its own.
for f in "$LIB" "$CLI"; do
    ldd "$f" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r so path; do
    case $so in
    linux-vdso* | ld-linux* | libc.so* | libm.so* | libdl.so* | libpthread.so* | librt.so* | \
        libresolv.so* | libutil.so* | libgcc_s.so* | libstdc++.so*) continue ;;
    esac
    cp -L "$path" "$CARRY/deps/$so"
done
for h in /usr/include/uthash.h /usr/include/utlist.h /usr/include/utarray.h /usr/include/utstring.h; do
    [ -f "$h" ] && cp "$h" "$CARRY/include/"
done

# No rpath: the layout and LD_LIBRARY_PATH do the finding.
if command -v patchelf >/dev/null; then
    for f in "$CARRY/bin/tensorleak" "$CARRY"/lib/*.so "$CARRY"/deps/*; do
        patchelf --remove-rpath "$f" 2>/dev/null || true
    done
elif command -v chrpath >/dev/null; then
    for f in "$CARRY/bin/tensorleak" "$CARRY"/lib/*.so; do chrpath -d "$f" >/dev/null 2>&1 || true; done
fi

COMMIT=$(git -C "$SRC" rev-parse HEAD 2>/dev/null || echo unknown)
DIRTY=$(git -C "$SRC" status --porcelain --untracked-files=no 2>/dev/null | grep -q . && echo "+local changes" || true)
{
    echo "tensorleak $(git -C "$SRC" rev-parse --short HEAD 2>/dev/null)$DIRTY built $(date -u +%FT%TZ) on $(hostname), $(ldd --version | head -n 1)"
    echo "commit $COMMIT"
    echo "libdir $LIBDIR"
    echo
    (cd "$CARRY" && find . -type f ! -name MANIFEST | sort | xargs sha256sum)
    echo
    for f in "$CARRY/lib/libtensorleak.so" "$CARRY/bin/tensorleak"; do
        echo "ldd ${f#"$CARRY"/} (LD_LIBRARY_PATH=deps):"
        LD_LIBRARY_PATH=$CARRY/deps ldd "$f" | sed 's/^/  /'
    done
} >"$CARRY/MANIFEST"

# Does the carried layout work on its own?  The CLI must find the carried library
# (it preloads it into the child) and keep the child's exit status.
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
seen=$(LD_LIBRARY_PATH=$CARRY/deps TENSORLEAK_QUIET=1 "$CARRY/bin/tensorleak" run -o "$T/r.%p.json" -- \
    /bin/sh -c 'echo "$LD_PRELOAD"' 2>"$T/err") || true
case $seen in
*"$CARRY/"*libtensorleak.so*) echo "prepare-carry: tensorleak run from .gpu-carry preloads $seen: ok" ;;
*) echo "prepare-carry: WARNING: tensorleak run from .gpu-carry did not preload the carried library ('$seen' $(cat "$T/err"))" >&2 ;;
esac
miss=$(LD_LIBRARY_PATH=$CARRY/deps ldd "$CARRY/lib/libtensorleak.so" "$CARRY/bin/tensorleak" | grep 'not found' || true)
[ -z "$miss" ] || { echo "prepare-carry: still missing: $miss" >&2; exit 1; }
SIZE=$(du -sk "$CARRY" | cut -f1)
echo "prepare-carry: .gpu-carry ready ($((SIZE / 1024)) MiB; the device tool carries at most 64 MiB with the tree):"
ls -l "$CARRY"/bin "$CARRY"/lib "$CARRY"/deps | sed 's/^/  /'
[ "$SIZE" -lt 40960 ] || echo "prepare-carry: WARNING: larger than 40 MiB" >&2
