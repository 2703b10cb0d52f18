#!/usr/bin/env bash
# Installs what seedstore needs on a fresh Debian 12 machine, idempotently:
#   - Debian packages (compilers, CMake, HDF5, zstd, xxHash, OpenMPI, GoogleTest, JSON, CLI11)
#   - a Python virtual environment in $BUILD/venv with the cross-check packages
# Usage: tools/setup.sh [BUILD_DIR]   (default: build)
set -euo pipefail
BUILD=${1:-build}
pkgs=(build-essential cmake pkg-config git libhdf5-dev hdf5-tools libzstd-dev libxxhash-dev
      openmpi-bin libopenmpi-dev libgtest-dev googletest nlohmann-json3-dev libcli11-dev
      python3 python3-venv python3-dev)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
mkdir -p "$BUILD"
VENV="$BUILD/venv"
stamp="$VENV/.seedstore-pip-v4"
if [ ! -f "$stamp" ]; then
  echo "setup: creating Python environment in $VENV"
  PY=python3
  command -v python3.11 >/dev/null && PY=python3.11
  [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip
  "$VENV/bin/pip" install -q "jax[cpu]" numpy ml_dtypes h5py hdf5plugin safetensors pytest
  # torch from PyPI is its CUDA build (about 4 GB with its nvidia-* wheels, ~1.5 min here); its
  # CPU side (gloo, DTensor, DCP) is what the tests use. Measured in docs/PERF.md.
  "$VENV/bin/pip" install -q torch
  # The Python package (python/, built by the same CMake) binds the library with nanobind;
  # scikit-build-core is what `pip install .` builds it with.
  "$VENV/bin/pip" install -q nanobind scikit-build-core
  touch "$stamp"
fi
