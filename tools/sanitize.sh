#!/usr/bin/env bash
# The suite under AddressSanitizer + UndefinedBehaviorSanitizer: configures
# a separate build folder with -DSEEDSTORE_SANITIZE=ON (no CUDA, no benchmarks), builds it and
# runs the CTest tiers that need no GPU. Any ASan/UBSan/LSan report fails the run; leaks inside
# third-party libraries (OpenMPI and its runtime) are suppressed by tests/sanitizers/lsan.supp,
# never ours (its header says how that was checked; LSAN_AUDIT=1 re-checks it).
# Usage: tools/sanitize.sh [LABEL_REGEX] [extra ctest args]
#   TSAN=1: ThreadSanitizer instead (-DSEEDSTORE_TSAN=ON, folder build-tsan, default labels
#     'unit|mpi': the tiers whose code runs threads -- readers and writers with o.threads,
#     in-process worlds, catalogs shared by reading threads). Suppressions: tests/sanitizers/
#     tsan.supp (OpenMPI only).
#   default LABEL_REGEX: 'kat|unit|cli|golden'; 'kat|unit|cli|golden|mpi|jax' for all CPU tiers.
#   BUILD=<dir> chooses the build folder (default build-asan). Not part of .ci/run (CI time).
#   LSAN_AUDIT=1: run with the suppressions OFF and check, with tools/lsan_audit.py, that every
#     leak lsan.supp would hide was allocated inside a third-party library (test failures from
#     the unsuppressed leaks are expected then; the audit's verdict is the exit status).
# Python tiers (py.* tests in golden, jax, mpi): the Python interpreter and the packages it
# loads (jax, h5py, numpy ...) are not instrumented and no seedstore shared object is loaded
# into Python; the tests start the seedstore binary (ASan + UBSan) as child processes, whose
# reports land in $BUILD/sanitizer-logs like every other. The script says so when it runs them.
# The latest runs' results: docs/ARCHITECTURE.md, "Testing".
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
TSAN=${TSAN:-0}
if [ "$TSAN" = 1 ]; then
  BUILD=${BUILD:-build-tsan}; SANITIZE_FLAG=-DSEEDSTORE_TSAN=ON; LABELS=${1:-unit|mpi}
else
  BUILD=${BUILD:-build-asan}; SANITIZE_FLAG=-DSEEDSTORE_SANITIZE=ON; LABELS=${1:-kat|unit|cli|golden}
fi
shift $(( $# > 0 ? 1 : 0 ))
mkdir -p "$BUILD"
# The Python cross-checks need the venv; reuse the normal build's one when present.
if [ ! -e "$BUILD/venv" ]; then
  if [ -d build/venv ]; then ln -s "$ROOT/build/venv" "$BUILD/venv"; else bash tools/setup.sh "$BUILD"; fi
fi
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$SANITIZE_FLAG" \
      -DSEEDSTORE_CUDA=OFF -DSEEDSTORE_BENCH=OFF >/dev/null
# Only what the chosen tiers run: the CLI, the test-only shim and the tiers' test binaries.
TARGETS=(seedstore seedstore_slow_create)
for l in kat unit jax cli golden mpi; do
  if [[ $l =~ ^($LABELS)$ ]]; then TARGETS+=("seedstore_${l}_tests"); fi
done
cmake --build "$BUILD" -j2 --target "${TARGETS[@]}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# ASan/LSan reports go to files, so a finding in a CLI child whose failure a test expects (a
# nonzero exit) is not lost: any report fails the run. (UBSan ignores log_path in this
# combined runtime; it prints to stderr and halts with exit 1.)
LOGS=$(cd "$BUILD" && pwd)/sanitizer-logs
SUPP=$ROOT/tests/sanitizers/lsan.supp
rm -rf "$LOGS"; mkdir -p "$LOGS"
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export ASAN_OPTIONS=detect_leaks=1:log_path=$LOGS/asan
# OpenMPI and PMIx unload their components (mca_*.so) at MPI_Finalize, before LSan looks at the heap:
# their frames would print as "<unknown module>" and no suppression could name them. Keep them.
export OMPI_MCA_mca_base_component_disable_dlclose=1 PMIX_MCA_mca_base_component_disable_dlclose=1
if [ "${LSAN_AUDIT:-0}" = 1 ]; then
  # Full stacks (DWARF unwinding through libraries built without frame pointers): slower.
  export ASAN_OPTIONS=$ASAN_OPTIONS:fast_unwind_on_malloc=0
  export LSAN_OPTIONS=print_suppressions=0
  echo "sanitize: LSAN_AUDIT=1: suppressions OFF; leak reports are expected, the audit decides"
else
  export LSAN_OPTIONS=suppressions=$SUPP:print_suppressions=0
fi
if ctest --test-dir "$BUILD" -L "$LABELS" -N | grep -q ' py\.'; then
  echo "sanitize: py.* tests run in un-instrumented Python; the seedstore processes they start" \
       "run under ASan+UBSan (reports: $LOGS)"
fi
rc=0
t0=$(date +%s)
if [ "$TSAN" = 1 ]; then
  export TSAN_OPTIONS=halt_on_error=0:report_signal_unsafe=0:log_path=$LOGS/tsan:suppressions=$ROOT/tests/sanitizers/tsan.supp
  ctest --test-dir "$BUILD" -L "$LABELS" --output-on-failure "$@" || rc=$?
  echo "sanitize: TSAN labels '$LABELS': ctest exit $rc in $(( $(date +%s) - t0 )) s"
  if compgen -G "$LOGS/*" >/dev/null; then
    echo "sanitize: ThreadSanitizer reports in $LOGS:" >&2
    for f in "$LOGS"/*; do echo "== $f" >&2; cat "$f" >&2; done
    rc=1
  fi
  exit $rc
fi
# LSan matches a suppression against the stack recorded at malloc time. OpenMPI's libraries are
# built without frame pointers, so the default fast unwinder stops inside them and the stack
# would not show which library allocated: the mpi tier runs with the slow (DWARF) unwinder.
SLOW='^(Cli[.]FullDisk|FlipSweep[.]CommandLine|DamagedMetadata[.])'
ctest --test-dir "$BUILD" -L "$LABELS" -LE '^mpi$' -E "$SLOW" --output-on-failure "$@" || rc=$?
# The full-disk and damaged-metadata tests with full stacks: HDF5's leaks when H5Fcreate fails
# on a full disk, or when it decodes damaged metadata, are suppressed by their frame names
# (lsan.supp), which the fast unwinder does not record.
if [[ cli =~ $LABELS || golden =~ $LABELS ]]; then
  ASAN_OPTIONS=$ASAN_OPTIONS:fast_unwind_on_malloc=0 \
    ctest --test-dir "$BUILD" -L "$LABELS" -R "$SLOW" --output-on-failure "$@" || rc=$?
fi
# use_tls=0 only for the tests that start the mpi test binary itself under mpirun (MpiLive,
# MpiLocalRank): in those processes, 3 or 4 to a 2-core machine, LSan (gcc 12's runtime)
# crashed at exit scanning a bogus dynamic-TLS range ("Tracer caught signal 11", "DTLS 10 at
# 0x400e-..."); the seedstore CLI under mpirun does not. Not scanning TLS as roots can only
# add leak reports, never hide one -- and it does add false ones wherever HDF5 keeps per-thread
# state (H5E__get_stack, H5TS_cancel_count_inc), so the rest of the tier scans TLS as usual.
if [[ mpi =~ $LABELS ]]; then
  echo "sanitize: ReshardVds.ManyRankFilesOpenUnderALowDescriptorLimit skips its 'ulimit -n 5'" \
       "case here (reported as skipped): UBSan's vptr check needs two free descriptors (pipe)" \
       "and reports every virtual call of a process that has none as 'invalid vptr'"
  ASAN_OPTIONS=$ASAN_OPTIONS:fast_unwind_on_malloc=0 \
    ctest --test-dir "$BUILD" -L '^mpi$' -E '^(MpiLive|MpiLocalRank)[.]' --output-on-failure "$@" || rc=$?
  ASAN_OPTIONS=$ASAN_OPTIONS:fast_unwind_on_malloc=0 LSAN_OPTIONS=$LSAN_OPTIONS:use_tls=0 \
    ctest --test-dir "$BUILD" -L '^mpi$' -R '^(MpiLive|MpiLocalRank)[.]' --output-on-failure "$@" || rc=$?
fi
echo "sanitize: labels '$LABELS': ctest exit $rc in $(( $(date +%s) - t0 )) s"
if [ "${LSAN_AUDIT:-0}" = 1 ]; then
  shopt -s nullglob
  reports=("$LOGS"/*)
  [ ${#reports[@]} -gt 0 ] || { echo "sanitize: audit: no leak reports at all"; exit 0; }
  exec python3 tools/lsan_audit.py "$SUPP" "$ROOT" "$(cd "$BUILD" && pwd)" "${reports[@]}"
fi
if compgen -G "$LOGS/*" >/dev/null; then
  echo "sanitize: sanitizer reports in $LOGS:" >&2
  for f in "$LOGS"/*; do echo "== $f" >&2; cat "$f" >&2; done
  rc=1
fi
exit $rc
