#!/usr/bin/env bash
# The suite under AddressSanitizer + UndefinedBehaviorSanitizer (issue 3, item 8): configures
# a separate build folder with -DSEEDSTORE_SANITIZE=ON (no CUDA, no benchmarks), builds it and
# runs the CTest tiers that need no GPU. Any ASan/UBSan/LSan report fails the run; leaks inside
# third-party libraries (OpenMPI, HDF5, Python) are suppressed by tests/sanitizers/lsan.supp,
# never ours.
# Usage: tools/sanitize.sh [LABEL_REGEX] [extra ctest args]
#   default LABEL_REGEX: 'kat|unit|cli|golden'; 'kat|unit|cli|golden|mpi|jax' for all CPU tiers.
#   BUILD=<dir> chooses the build folder (default build-asan). Not part of .ci/run (CI time).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=${BUILD:-build-asan}
LABELS=${1:-kat|unit|cli|golden}
shift $(( $# > 0 ? 1 : 0 ))
mkdir -p "$BUILD"
# The Python cross-checks need the venv; reuse the normal build's one when present.
if [ ! -e "$BUILD/venv" ]; then
  if [ -d build/venv ]; then ln -s "$ROOT/build/venv" "$BUILD/venv"; else bash tools/setup.sh "$BUILD"; fi
fi
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSEEDSTORE_SANITIZE=ON \
      -DSEEDSTORE_CUDA=OFF -DSEEDSTORE_BENCH=OFF >/dev/null
cmake --build "$BUILD" -j2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# ASan/LSan reports go to files, so a finding in a CLI child whose failure a test expects (a
# nonzero exit) is not lost: any report fails the run. (UBSan ignores log_path in this
# combined runtime; it prints to stderr and halts with exit 1.)
LOGS=$ROOT/$BUILD/sanitizer-logs
rm -rf "$LOGS"; mkdir -p "$LOGS"
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export ASAN_OPTIONS=detect_leaks=1:log_path=$LOGS/asan
export LSAN_OPTIONS=suppressions=$ROOT/tests/sanitizers/lsan.supp:print_suppressions=0
rc=0
ctest --test-dir "$BUILD" -L "$LABELS" --output-on-failure "$@" || rc=$?
if compgen -G "$LOGS/*" >/dev/null; then
  echo "sanitize: sanitizer reports in $LOGS:" >&2
  for f in "$LOGS"/*; do echo "== $f" >&2; cat "$f" >&2; done
  rc=1
fi
exit $rc
