#!/bin/sh
# install_sim.sh LIBDIR LIB...: meson install step (tools/meson.build) that
# copies the simulated libcuda.so.1 / libcudart.so.13 / libnvidia-ml.so.1
# into <prefix>/LIBDIR/tensorleak/sim/, where an installed `tensorleak run
# --sim` and `tensorleak sim` look for them (tools/exec_env.c). sim/meson.build builds them with
# install: false; this step keeps them out of the system library directory.
set -eu
libdir=$1
shift
cd "${MESON_BUILD_ROOT:-.}"
case $libdir in
/*) dest="${DESTDIR:-}$libdir/tensorleak/sim" ;;
*) dest="$MESON_INSTALL_DESTDIR_PREFIX/$libdir/tensorleak/sim" ;;
esac
mkdir -p "$dest"
for lib in "$@"; do
    name=$(basename "$lib")
    install -m 755 "$lib" "$dest/$name"
    echo "Installing $lib to $dest"
    # The unversioned link programs may link or dlopen (libcudart.so -> libcudart.so.13).
    base=${name%%.so.*}
    [ "$base" != "$name" ] && ln -sf "$name" "$dest/$base.so"
done
