#!/usr/bin/env bash
# Installs what tensorleak builds and tests with, from Debian/Ubuntu packages.
# Run as root (or through sudo).  The CUDA toolkit is optional: with
# /usr/local/cuda/include/cuda.h the hooks compile against NVIDIA's headers,
# without it against our own declarations.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends \
  gcc clang pkg-config meson ninja-build python3 \
  libunwind-dev uthash-dev libcriterion-dev libjansson-dev libdw-dev libelf-dev \
  heaptrack binutils >/dev/null
