#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds everything, runs every CTest tier
# (kat, unit, jax, cli, golden, mpi, gpu; gpu and mpi tests skip visibly where no GPU / no
# mpirun exists), then the shipped binary's own known-answer self test.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
bash tools/setup.sh "$BUILD"
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" -j2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
"$BUILD/tools/seedstore" selftest
ctest --test-dir "$BUILD" --output-on-failure -j2 "$@"
