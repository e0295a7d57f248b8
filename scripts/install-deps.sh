#!/usr/bin/env bash
# Installs what tensorleak builds and tests with, from Debian/Ubuntu packages.
# Run as root (or through sudo).  The CUDA toolkit is optional: with
# /usr/local/cuda/include/cuda.h the hooks compile against NVIDIA's headers,
# without it against our own declarations.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends \
  gcc g++ clang pkg-config meson ninja-build python3 python3-venv python3-pytest python3-pytest-repeat \
  libunwind-dev uthash-dev libcriterion-dev libjansson-dev libdw-dev libelf-dev libzydis-dev \
  heaptrack valgrind binutils scdoc python3-jsonschema \
  libncurses-dev libmicrohttpd-dev prometheus tmux >/dev/null
# The python suites run on the python3 first on PATH, which meson finds; where
# that is not Debian's (pyenv, a venv), Debian's pytest does not serve it.
# cuda-bindings (NVIDIA's, from PyPI) drives the simulated driver in a test of
# Python frames; it needs no GPU to import.  jsonschema validates every report
# the suites write against docs/report.schema.json.
# numba-cuda, cuda-bindings and cuda-core (pinned: the versions the clients
# suite was verified with) run on the simulated driver in tests/clients.
if ! python3 -c 'import pytest, pytest_repeat, cuda.bindings.driver, jsonschema, numba.cuda, cuda.core' 2>/dev/null; then
  PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check pytest pytest-repeat cuda-bindings==13.5.0 cuda-core==1.2.2 numba-cuda==0.30.4 jsonschema \
    || echo "install-deps: pytest/cuda-bindings/jsonschema not installed for $(command -v python3); the tests that need them will be skipped"
fi
# PyTorch from PyPI (pinned: the version tests/torch was verified with; the
# default wheel is the CUDA 13.2 build) runs on the simulated CUDA stack in
# tests/torch.  It is 3.0 GB in 21 wheels (torch and NVIDIA's CUDA libraries,
# all NEEDED by libtorch_cuda.so), 5.2 GB installed, 1.5 to 4 minutes; under
# CI=true those tests fail rather than skip without it.
if ! python3 -c 'import sys, torch; sys.exit(torch.__version__.split("+")[0] != "2.15.0")' 2>/dev/null; then
  PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check torch==2.15.0 \
    || echo "install-deps: torch not installed for $(command -v python3); tests/torch will be skipped (failed under CI=true)"
fi
# Optional: headless Chromium renders the HTML report in a test (skipped
# without it).  Pass --no-browser to leave it out.
if [ "${1:-}" != "--no-browser" ]; then
  apt-get install -y -qq --no-install-recommends chromium >/dev/null || echo "install-deps: chromium not installed; its test will be skipped"
fi
