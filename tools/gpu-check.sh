#!/usr/bin/env bash
# gpu-check.sh -- one prepared run for a lent GPU machine (H200: 16 CPU cores, nvcc, jax and
# torch installed, no internet; the repository is the current directory). In < 8 minutes:
#   1. configure + build (Release, -j16) the gpu tests and the GPU benchmark;
#   2. ctest -L gpu (standalone: the gpu tests, and the NCCL backend's one-rank test against
#      the machine's libnccl.so.2; its init-timeout case in a run of its own);
#   3. seedstore_gpu_bench (materialize / fingerprint throughput, copy bandwidth, Llama-3-8B);
#   4. jax.random.normal (jitted, warmed up) and torch.randn on the same GPU and sizes;
#   5. per-kernel floor = max(bytes / measured bandwidth, SASS ops per element / chip rate)
#      and the achieved fraction; the targets (docs/PERF.md, "GPU") marked PASS/FAIL;
#   6. (the Python step, on by default) the Python package (_seedstore, CUDA + NCCL) built in
#      the same CMake build; tests/pkg/test_py_cuda.py and test_py_nccl.py (DLPack into torch
#      CUDA tensors on the current stream; NCCL bootstrapped from a TCPStore) with pytest; and
#      the DLPack timing: Catalog.materialize into a torch CUDA tensor against
#      seedstore_gpu_bench's materialize at the same size, generator and dtype (medians). A
#      failure there is a row of the report, never the loss of the rest.
# $OUT (default ./gpu-check-out) receives five files, within the device tool's limit of 8:
# gpu-check.log, table.md, report.json, bench.json and gpu-check-files.tgz (configure, build
# and test logs, SASS, PTX, the peers' timings); intermediate files live in $BUILD/check.
# Usage: tools/gpu-check.sh [--prepare] [--dry-run] [--quick] [--build-only] [--python | --no-python]
#   --prepare  here, before the run: copy GoogleTest's sources (/usr/src/googletest, Debian's
#              googletest package), NCCL's header (/usr/local/cuda/include/nccl.h, with any
#              nccl*.h it includes) and xxHash's header (/usr/include/xxhash.h, for gen/'s
#              checksum loops) into .gpu-deps/ (ignored by git) for the call to carry:
#              the GPU machine has CUDA but no GoogleTest, HDF5, ... (/work/.library/device).
#              Then: run(command="tools/gpu-check.sh", carry=[".gpu-deps"], timeout_s=540).
#   --dry-run  no GPU needed: check tools, configure, parse an existing SASS dump if any, and
#              run the report generator on synthetic numbers (for CI / machines without GPU).
#   --quick    small sizes (smoke test of the script itself on a GPU).
#   --build-only  stop after the build (works without a GPU).
#   --python   the Python step only, with the benchmark it is compared with: builds _seedstore
#              and seedstore_gpu_bench, skips the gpu tests, SASS and the jax/torch peers.
#   --no-python  leave the Python step out of the full run.
#   --tiers=LABELS  after the gpu tier, also run these CTest tiers (a regex, e.g. 'kat|unit|cli')
#              on the GPU machine, where `--device auto` resolves to CUDA: the CPU tiers'
#              expected bytes and fingerprints then check the CUDA paths (I2). CMake build only;
#              the Python-venv tests (py.*) are left out.
# SEEDSTORE_GPU_CHECK_STANDALONE=1 skips CMake and builds with nvcc/g++ alone. The gpu tests
# run with SEEDSTORE_REQUIRE_GPU=1: a test that finds no GPU (or no NCCL) fails instead of
# skipping. The table's "tests" rows say PASS only for tests that ran and passed: the NCCL
# backend (one rank, tests/gpu/test_nccl_comm.cc) is NOT RUN when no libnccl.so.2 is found.
set -uo pipefail

DRY=0
QUICK=0
BUILD_ONLY=0
PREPARE=0
TIERS=""
PYSTEP=1    # the Python step (6.)
PY_ONLY=0   # --python: that step and the benchmark only
for a in "$@"; do
  case "$a" in
    --prepare) PREPARE=1 ;;
    --dry-run) DRY=1 ;;
    --quick) QUICK=1 ;;
    --build-only) BUILD_ONLY=1 ;;
    --tiers=*) TIERS=${a#--tiers=} ;;
    --python) PY_ONLY=1; PYSTEP=1 ;;
    --no-python) PYSTEP=0 ;;
    *) echo "usage: $0 [--prepare] [--dry-run] [--quick] [--build-only] [--tiers=LABELS] [--python | --no-python]" >&2; exit 1 ;;
  esac
done
if [ "$PREPARE" = 1 ]; then
  [ -d /usr/src/googletest/googletest/src ] || { echo "gpu-check: /usr/src/googletest missing (apt-get install googletest)"; exit 1; }
  rm -rf .gpu-deps && mkdir -p .gpu-deps && cp -r /usr/src/googletest .gpu-deps/
  # xxHash's header: gen/'s per-ISA loops compile it (gen/checksum_kernels.inc); the GPU
  # machine may have no libxxhash-dev. The one the CPU build uses, so the bits are the same.
  [ -f /usr/include/xxhash.h ] || { echo "gpu-check: /usr/include/xxhash.h missing (apt-get install libxxhash-dev)"; exit 1; }
  mkdir -p .gpu-deps/xxhash && cp /usr/include/xxhash.h .gpu-deps/xxhash/
  # NCCL's header (the GPU machine has libnccl.so.2 through PyTorch's wheels, maybe no header).
  # nccl.h includes CUDA's own headers (cuda_runtime.h, cuda_fp16.h, ...), which the GPU
  # machine's toolkit has; NCCL headers it includes (nccl*.h) are copied with it.
  NCCL_INC=${NCCL_INCLUDE_DIR:-/usr/local/cuda/include}
  if [ -f "$NCCL_INC/nccl.h" ]; then
    mkdir -p .gpu-deps/nccl/include
    todo=(nccl.h)
    while [ ${#todo[@]} -gt 0 ]; do
      h=${todo[0]}; todo=("${todo[@]:1}")
      [ -f ".gpu-deps/nccl/include/$h" ] && continue
      mkdir -p ".gpu-deps/nccl/include/$(dirname "$h")" && cp "$NCCL_INC/$h" ".gpu-deps/nccl/include/$h"
      for inc in $(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]\([^>"]*\)[>"].*/\1/p' "$NCCL_INC/$h"); do
        case "$inc" in
          nccl*) [ -f "$NCCL_INC/$inc" ] && todo+=("$inc") ;;
          *) echo "gpu-check: nccl: $h includes <$inc> (from the CUDA toolkit or libc there; not copied)" ;;
        esac
      done
    done
    echo "gpu-check: NCCL header: $(cd .gpu-deps/nccl/include && find . -type f | sed 's|^\./||' | tr '\n' ' ')($(sed -n 's/^#define NCCL_VERSION_CODE //p' "$NCCL_INC/nccl.h"))"
  else
    echo "gpu-check: note: $NCCL_INC/nccl.h not found: the NCCL test will build only where the GPU machine has nccl.h"
  fi
  # A prefix with the Debian packages the GPU machine lacks for the full CMake build (xxHash
  # as a static library with its pkg-config file, CLI11, GoogleTest): CMAKE_PREFIX_PATH and
  # PKG_CONFIG_PATH point at it there. HDF5, zstd, nlohmann-json and OpenMPI are on the image.
  P=.gpu-deps/prefix; A=lib/x86_64-linux-gnu
  mkdir -p "$P/include" "$P/$A/pkgconfig" "$P/$A/cmake" "$P/share/cmake"
  cp /usr/include/xxhash.h /usr/include/xxh3.h /usr/include/xxh_x86dispatch.h "$P/include/"
  cp /usr/$A/libxxhash.a "$P/$A/"
  sed 's|^prefix=.*|prefix=${pcfiledir}/../../..|' /usr/$A/pkgconfig/libxxhash.pc > "$P/$A/pkgconfig/libxxhash.pc"
  cp -r /usr/include/CLI "$P/include/" && cp -r /usr/share/cmake/CLI11 "$P/share/cmake/"
  cp -r /usr/include/gtest /usr/include/gmock "$P/include/"
  cp /usr/$A/libgtest.a /usr/$A/libgtest_main.a /usr/$A/libgmock.a /usr/$A/libgmock_main.a "$P/$A/"
  cp -r /usr/$A/cmake/GTest "$P/$A/cmake/"
  sed -i 's|"/usr/lib/x86_64-linux-gnu/cmake/GTest"|"${CMAKE_CURRENT_LIST_DIR}"|' "$P/$A/cmake/GTest/GTestTargets.cmake"
  git check-ignore -q .gpu-deps || echo "/.gpu-deps/" >> "$(git rev-parse --git-dir)/info/exclude"
  echo "gpu-check: .gpu-deps ready ($(du -sh .gpu-deps | cut -f1)); carry it: carry=[\".gpu-deps\"]"
  exit 0
fi

ROOT=$(pwd)
OUT=${OUT:-$ROOT/gpu-check-out}
mkdir -p "$OUT"
BUILD=${SEEDSTORE_GPU_BUILD:-$ROOT/build-gpu}
W="$BUILD/check"  # every file but the log, the table, the reports and the tarball
rm -rf "$W" && mkdir -p "$W"
JOBS=${JOBS:-16}
LOG="$OUT/gpu-check.log"
rm -f "$LOG"
exec > >(tee -a "$LOG") 2>&1
T0=$(date +%s)
stamp() { echo "[gpu-check +$(( $(date +%s) - T0 ))s] $*"; }
PY=${PYTHON:-python3}
export PATH=/usr/local/cuda/bin:$PATH
STATUS=0

stamp "start $(date -u +%Y-%m-%dT%H:%M:%SZ) in $ROOT, out $OUT, build $BUILD"
{ git -C "$ROOT" log -1 --oneline 2>/dev/null || true; } | sed 's/^/commit: /'
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv | tee "$W/nvidia-smi.csv"
command -v nvcc >/dev/null && nvcc --version | tail -1
for tool in cmake nvcc cuobjdump "$PY"; do
  command -v "$tool" >/dev/null || echo "gpu-check: note: '$tool' not found"
done

# ---- 1. build ----------------------------------------------------------------------------
BENCH=""
TESTS=""
NCCL_TESTS=""    # the standalone NCCL test binary (the CMake build has it inside $TESTS)
NCCL_NOTE=""     # why the NCCL test was not built, or which libnccl it links
build_cmake() {
  stamp "configure (cmake, Release)"
  local prefix="$ROOT/.gpu-deps/prefix"
  [ -d "$prefix" ] && export PKG_CONFIG_PATH="$prefix/lib/x86_64-linux-gnu/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  # The Python package builds against the Python that holds torch (step 6); NCCL against the
  # library torch loads and the header --prepare carried (as the standalone NCCL test does).
  local pyexe nlib ninc nccl_args=()
  pyexe=$(command -v "$PY" || true)
  if nlib=$(find_nccl_lib) && ninc=$(find_nccl_header "$nlib"); then
    nccl_args=(-DSEEDSTORE_NCCL_INCLUDE_DIR="$ninc" -DSEEDSTORE_NCCL_LIBRARY="$nlib")
  fi
  cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release ${prefix:+-DCMAKE_PREFIX_PATH=$prefix} \
        ${CMAKE_CUDA_ARCHITECTURES:+-DCMAKE_CUDA_ARCHITECTURES=$CMAKE_CUDA_ARCHITECTURES} \
        ${pyexe:+-DPython_EXECUTABLE=$pyexe} "${nccl_args[@]}" \
        > "$W/configure.log" 2>&1 || { tail -20 "$W/configure.log"; return 1; }
  grep -q "CUDA kernels ON" "$W/configure.log" || { echo "gpu-check: CMake did not enable CUDA"; return 1; }
  local targets=(seedstore_gpu_tests seedstore_gpu_bench)
  [ "$PY_ONLY" = 1 ] && targets=(seedstore_gpu_bench)
  [ -n "$TIERS" ] && targets=(all)
  stamp "build ${targets[*]} (-j$JOBS)"
  # Make's -k: a target that fails to build (a test file the machine's compiler rejects) costs
  # only its own rows; the GPU targets this script needs are built and checked one by one.
  if ! timeout 300 cmake --build "$BUILD" -j"$JOBS" --target "${targets[@]}" -- -k \
        > "$W/build.log" 2>&1; then
    echo "gpu-check: some targets failed to build (build.log):"; grep -E "error" "$W/build.log" | head -10
    BUILD_ALL_NOTE="$(grep -c 'error' "$W/build.log") error lines in build.log"
    local need=(seedstore_gpu_bench); [ "$PY_ONLY" = 1 ] || need+=(seedstore_gpu_tests)
    timeout 200 cmake --build "$BUILD" -j"$JOBS" --target "${need[@]}" >> "$W/build.log" 2>&1 \
      || { grep -E "error" "$W/build.log" | tail -10; return 1; }
  fi
  BENCH="$BUILD/kernels/seedstore_gpu_bench"
  [ "$PY_ONLY" = 1 ] || TESTS="$BUILD/tests/seedstore_gpu_tests"
  [ "$PYSTEP" = 1 ] && build_python
  return 0
}
# The Python package in the CMake build (step 6): a failure is recorded in PY_NOTE, not fatal.
PY_BUILT=0
PY_NOTE=""
build_python() {
  if ! grep -q "seedstore: Python package ON" "$W/configure.log"; then
    PY_NOTE="CMake found no Python with nanobind and its headers ($PY): $(grep -m1 -i "Could NOT find Python\|nanobind" "$W/configure.log" || echo 'see configure.log')"
    echo "gpu-check: Python package NOT built: $PY_NOTE"; return 1
  fi
  stamp "build the Python package (_seedstore, -j$JOBS; $(grep -m1 -o 'NCCL backend [A-Z]*' "$W/configure.log"))"
  if timeout 300 cmake --build "$BUILD" -j"$JOBS" --target _seedstore > "$W/py-build.log" 2>&1; then
    PY_BUILT=1
  else
    PY_NOTE="the _seedstore build failed (py-build.log)"
    echo "gpu-check: $PY_NOTE"; grep -E "error" "$W/py-build.log" | head -20; return 1
  fi
}
# Fallback when the full project cannot be configured here (the GPU machine has CUDA, CMake
# and Python but none of HDF5, GoogleTest, nlohmann-json, CLI11, zstd, xxHash, MPI): build the
# kernels, the benchmark and the gpu tests that need only gen/ and kernels/ (test_cuda_kernels,
# test_kernel_emulation) with nvcc and g++, against GoogleTest compiled from source:
# .gpu-deps/googletest (carried, see --prepare), else /usr/src/googletest, else an installed
# libgtest. And the NCCL test (test_nccl_comm: io/nccl_comm.cc, io/gpu_select.cc and
# store/status.cc need no HDF5, MPI or JSON) as its own binary, against nccl.h from
# .gpu-deps/nccl (see --prepare) or the machine, and the machine's libnccl.so.2 (find_nccl_lib)
# linked by full path with an rpath; without one it is NOT built and the table says NOT RUN.
# SEEDSTORE_NCCL_LIB=/path/libnccl.so.2 picks one; SEEDSTORE_NCCL_LIB=none finds none.

# Directories that may hold libnccl.so.2, in order: the NCCL wheel of PyTorch's Python
# (nvidia.nccl, as PyTorch loads it), the system's library folders, CUDA's, ldconfig's cache.
nccl_lib_dirs() {
  "$PY" - <<'PYEOF' 2>/dev/null
import glob, os, site, sys
dirs = []
try:
    import nvidia.nccl as m
    for p in list(getattr(m, "__path__", [])) + ([os.path.dirname(m.__file__)] if getattr(m, "__file__", None) else []):
        dirs.append(os.path.join(p, "lib"))
except Exception:
    pass
for sp in site.getsitepackages() + [site.getusersitepackages()] + sys.path:
    dirs += [os.path.dirname(f) for f in glob.glob(os.path.join(sp, "nvidia", "**", "libnccl.so.2"), recursive=True)]
print("\n".join(dict.fromkeys(dirs)))
PYEOF
  printf '%s\n' /lib /usr/lib/x86_64-linux-gnu /lib/x86_64-linux-gnu /usr/local/cuda/lib64 /usr/local/cuda/lib
  ldconfig -p 2>/dev/null | sed -n 's/.*libnccl\.so\.2 .*=> \(.*\)\/libnccl\.so\.2$/\1/p'
}
find_nccl_lib() {
  local d
  case "${SEEDSTORE_NCCL_LIB:-}" in  # override: a path, or "none" (to check the NOT RUN path)
    none) return 1 ;;
    ?*) [ -f "$SEEDSTORE_NCCL_LIB" ] && { echo "$SEEDSTORE_NCCL_LIB"; return 0; }; return 1 ;;
  esac
  while read -r d; do
    [ -n "$d" ] && [ -f "$d/libnccl.so.2" ] && { echo "$d/libnccl.so.2"; return 0; }
  done < <(nccl_lib_dirs)
  return 1
}
find_nccl_header() {
  local d
  for d in "$ROOT/.gpu-deps/nccl/include" /usr/local/cuda/include /usr/include; do
    [ -f "$d/nccl.h" ] && { echo "$d"; return 0; }
  done
  local w  # the NCCL wheel ships include/nccl.h beside lib/
  w=$(dirname "$(dirname "${1:-/nonexistent/x}")")/include
  [ -f "$w/nccl.h" ] && { echo "$w"; return 0; }
  return 1
}
build_standalone() {
  stamp "standalone build with nvcc (no CMake dependencies)"
  local sb="$BUILD/standalone"; mkdir -p "$sb"
  local fl=(-std=c++20 -O3 --fmad=false --prec-div=true --prec-sqrt=true --ftz=false
            -Xcompiler=-ffp-contract=off -I"$ROOT" -DSEEDSTORE_HAVE_CUDA_KERNELS=1
            -gencode=arch=compute_90,code=sm_90 -gencode=arch=compute_90,code=compute_90)
  local pids=() cuobj=()
  for f in kernels/materialize.cu kernels/fingerprint.cu kernels/staging.cu bench/gpu_bench.cu; do
    local o="$sb/$(basename "$f").o"
    nvcc "${fl[@]}" -c "$ROOT/$f" -o "$o" > "$o.log" 2>&1 & pids+=($!)
    [ "$f" = bench/gpu_bench.cu ] || cuobj+=("$o")
  done
  local extra=()
  for f in "$ROOT"/gen/*.cc; do  # the CPU reference path (gen/CMakeLists.txt's flags)
    local o="$sb/$(basename "$f").o" fl2=()
    case "$f" in *avx2*) fl2=(-mavx2 -mfma -mbmi -mbmi2) ;; *avx512*) fl2=(-mavx512f -mavx512vl -mavx512bw -mavx512dq -mavx2 -mfma -mbmi -mbmi2 -mprefer-vector-width=512) ;; esac
    g++ -std=c++20 -O2 -ffp-contract=off -fno-math-errno -fno-trapping-math "${fl2[@]}" -I"$ROOT" \
        -I"$ROOT/.gpu-deps/xxhash" -c "$f" -o "$o" > "$o.log" 2>&1 & pids+=($!)
    extra+=("$o")
  done
  local gt="" gtinc=() gtlib=()
  for d in "$ROOT/.gpu-deps/googletest/googletest" /usr/src/googletest/googletest; do
    [ -f "$d/src/gtest-all.cc" ] && { gt=$d; break; }
  done
  if [ -n "$gt" ]; then
    gtinc=(-I"$gt/include" -I"$gt")
    g++ -std=c++20 -O1 "${gtinc[@]}" -c "$gt/src/gtest-all.cc" -o "$sb/gtest-all.o" > "$sb/gtest.log" 2>&1 & pids+=($!)
    g++ -std=c++20 -O1 "${gtinc[@]}" -c "$gt/src/gtest_main.cc" -o "$sb/gtest_main.o" >> "$sb/gtest.log" 2>&1 & pids+=($!)
    gtlib=("$sb/gtest-all.o" "$sb/gtest_main.o")
  elif [ -f /usr/include/gtest/gtest.h ] || [ -f /usr/local/include/gtest/gtest.h ]; then
    gtlib=(-lgtest_main -lgtest)
  fi
  local failed=0
  for p in "${pids[@]}"; do wait "$p" || failed=1; done
  if [ "$failed" = 1 ]; then grep -h -E "error" "$sb"/*.log | head -20; return 1; fi
  nvcc -o "$sb/seedstore_gpu_bench" "$sb/gpu_bench.cu.o" "${cuobj[@]}" || return 1
  BENCH="$sb/seedstore_gpu_bench"
  if [ ${#gtlib[@]} -gt 0 ]; then
    g++ -std=c++20 -O2 -ffp-contract=off -I"$ROOT" "${gtinc[@]}" -I/usr/local/cuda/include -DSEEDSTORE_HAVE_CUDA_KERNELS=1 \
        "$ROOT"/tests/gpu/test_cuda_kernels.cc "$ROOT"/tests/gpu/test_kernel_emulation.cc \
        "${cuobj[@]}" "${extra[@]}" "${gtlib[@]}" \
        -L/usr/local/cuda/lib64 -lcudart -pthread -o "$sb/seedstore_gpu_tests" > "$sb/tests-link.log" 2>&1 \
        && TESTS="$sb/seedstore_gpu_tests" \
        || { echo "gpu-check: building the gpu tests FAILED"; grep -E "error" "$sb/tests-link.log" | head -20; }
  else
    echo "gpu-check: GoogleTest not found (no .gpu-deps, see --prepare): gpu tests NOT built"
  fi
  # The NCCL test: its own binary, so that a missing libnccl costs only this row.
  local nlib ninc
  if [ ${#gtlib[@]} -eq 0 ]; then
    NCCL_NOTE="GoogleTest not found"
  elif ! nlib=$(find_nccl_lib); then
    NCCL_NOTE="libnccl.so.2 not found (nvidia.nccl, /lib, /usr/lib/x86_64-linux-gnu, /usr/local/cuda/lib64, ldconfig -p)"
  elif ! ninc=$(find_nccl_header "$nlib"); then
    NCCL_NOTE="nccl.h not found (.gpu-deps/nccl: run --prepare here; /usr/local/cuda/include)"
  else
    stamp "NCCL test against $ninc/nccl.h and $nlib"
    if g++ -std=c++20 -O2 -ffp-contract=off -Wall -Wextra -I"$ROOT" "${gtinc[@]}" -I"$ninc" -I/usr/local/cuda/include \
          -DSEEDSTORE_HAVE_CUDA_KERNELS=1 -DSEEDSTORE_HAVE_NCCL=1 \
          "$ROOT"/tests/gpu/test_nccl_comm.cc "$ROOT"/io/nccl_comm.cc "$ROOT"/io/gpu_select.cc "$ROOT"/store/status.cc \
          "${cuobj[@]}" "${extra[@]}" "${gtlib[@]}" "$nlib" -Wl,-rpath,"$(dirname "$nlib")" \
          -L/usr/local/cuda/lib64 -lcudart -pthread -o "$sb/seedstore_gpu_nccl_tests" > "$sb/nccl-link.log" 2>&1; then
      NCCL_TESTS="$sb/seedstore_gpu_nccl_tests"
      NCCL_NOTE="$nlib"
      grep -q "warning" "$sb/nccl-link.log" && { echo "gpu-check: NCCL test build warnings:"; grep -A3 "warning" "$sb/nccl-link.log" | head -20; }
    else
      NCCL_NOTE="build failed (see nccl-link.log)"
      echo "gpu-check: building the NCCL test FAILED"; grep -E "error" "$sb/nccl-link.log" | head -20
      return 1
    fi
  fi
  [ -z "$NCCL_TESTS" ] && echo "gpu-check: NCCL test NOT built: $NCCL_NOTE"
  return 0
}

if [ "$DRY" = 1 ]; then
  stamp "dry run: syntax-checked; skipping the build"
else
  if [ "${SEEDSTORE_GPU_CHECK_STANDALONE:-0}" = 1 ]; then
    build_standalone || { echo "gpu-check: BUILD FAILED"; exit 2; }
  else
    build_cmake || { echo "gpu-check: CMake build failed; trying the standalone build"; build_standalone || { echo "gpu-check: BUILD FAILED"; exit 2; }; }
  fi
  stamp "build done: bench=$BENCH tests=$TESTS nccl_tests=${NCCL_TESTS:-none${NCCL_NOTE:+ ($NCCL_NOTE)}}"
  [ "$BUILD_ONLY" = 1 ] && exit 0
fi

# ---- 2. tests ----------------------------------------------------------------------------
# Each row of tests.json: name, result (PASS / FAIL / NOT RUN), detail. PASS only for a test
# binary that ran, exited 0 and skipped nothing.
TESTROWS="$W/tests.tsv"
: > "$TESTROWS"
row() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >> "$TESTROWS"; }
[ -n "${BUILD_ALL_NOTE:-}" ] && { row "build of every target" FAIL "$BUILD_ALL_NOTE"; STATUS=1; }
# Runs test binary $2 with gtest filter $3 into log $4 (timeout $5 s); echoes PASS/FAIL.
run_gtest() {
  local rc
  timeout "$5" "$2" --gtest_filter="$3" --gtest_brief=0 > "$4" 2>&1
  rc=$?
  tail -25 "$4" >&2
  if [ $rc -ne 0 ] || grep -q "SKIPPED\|NOT run\|no CUDA device" "$4"; then
    echo "gpu-check: $1 FAILED (rc $rc)" >&2; echo FAIL
  else
    echo PASS
  fi
}
if [ "$DRY" = 0 ] && [ "$PY_ONLY" = 1 ]; then
  export SEEDSTORE_REQUIRE_GPU=1
  stamp "--python: the gpu tests are left out"
elif [ "$DRY" = 0 ]; then
  export SEEDSTORE_REQUIRE_GPU=1  # a gpu test without a GPU fails here instead of skipping
  export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
  if [ -n "$TESTS" ] && [ -x "$TESTS" ]; then
    stamp "gpu tests"
    if [ -f "$BUILD/CTestTestfile.cmake" ] && [[ "$TESTS" == "$BUILD/tests/"* ]]; then
      (cd "$BUILD" && ctest -L gpu --output-on-failure --timeout 300 -j4) > "$W/ctest.log" 2>&1
      rc=$?
      tail -25 "$W/ctest.log"
      [ $rc -ne 0 ] && { echo "gpu-check: GPU TESTS FAILED (rc $rc)"; STATUS=1; }
      if grep -q "no CUDA device\|NOT run" "$W/ctest.log"; then
        echo "gpu-check: some gpu tests did not run on the GPU:"; grep -m5 "no CUDA device\|NOT run" "$W/ctest.log"; STATUS=1
      fi
      k=$(grep -E "Test +#[0-9]+: " "$W/ctest.log" | grep -v "Nccl\|WithoutCuda" || true)  # that one is for builds without CUDA
      n=$(grep -E "Test +#[0-9]+: Nccl" "$W/ctest.log" || true)
      kres=PASS; { [ -z "$k" ] || echo "$k" | grep -qv "Passed"; } && kres=FAIL
      row "gpu tests: kernels (ctest -L gpu)" "$kres" "$(echo "$k" | grep -c Passed) passed of $(echo "$k" | grep -c .)"
      if [ -z "$n" ]; then row "NCCL backend, one rank" "NOT RUN" "no NCCL test in the CMake build"
      elif echo "$n" | grep -qv "Passed"; then
        if grep -q "NCCL backend NOT run" "$W/ctest.log"; then row "NCCL backend, one rank" "NOT RUN" "$(grep -m1 -o 'NCCL backend NOT run.*' "$W/ctest.log")"
        else row "NCCL backend, one rank" "FAIL" "$(echo "$n" | grep -vc Passed) of $(echo "$n" | grep -c .) failed"; fi
      else row "NCCL backend, one rank" "PASS" "$(echo "$n" | grep -c Passed) tests (CMake build)"; fi
    else
      r=$(run_gtest "gpu tests" "$TESTS" "-CudaErrors.WithoutCudaEveryLauncherSaysSo" "$W/ctest.log" 300)  # that test is for builds without CUDA
      row "gpu tests: kernels" "$r" "$(grep -c '^\[       OK \]' "$W/ctest.log") passed; test_cuda_kernels + test_kernel_emulation"
      [ "$r" = PASS ] || STATUS=1
    fi
    if [ -n "$TIERS" ]; then
      stamp "tiers $TIERS on the GPU machine (--device auto = cuda)"
      (cd "$BUILD" && ctest -L "$TIERS" -E '^py[.]' --output-on-failure --timeout 300 -j8) > "$W/ctest-tiers.log" 2>&1
      rc=$?
      grep -E "tests passed|Failed|\*\*\*" "$W/ctest-tiers.log" | tail -30
      cp "$W/ctest-tiers.log" "$OUT/" 2>/dev/null
      t=$(grep -o "[0-9]*% tests passed, [0-9]* tests failed out of [0-9]*" "$W/ctest-tiers.log" || echo "no summary")
      if [ $rc -eq 0 ]; then row "tiers $TIERS on the GPU machine" PASS "$t"; else row "tiers $TIERS on the GPU machine" FAIL "$t"; STATUS=1; fi
    fi
  else
    echo "gpu-check: no gpu test binary"; STATUS=1
    row "gpu tests: kernels" "NOT RUN" "no test binary (see the build log)"
  fi
  if [ -n "$NCCL_TESTS" ] && [ -x "$NCCL_TESTS" ]; then
    stamp "NCCL tests (one rank; $NCCL_NOTE)"
    r1=$(run_gtest "NCCL tests" "$NCCL_TESTS" "-NcclCommDeadline.*" "$W/nccl-tests.log" 180)
    # The init-timeout test in its own run: should NCCL's abort of a pending init hang,
    # only this row is lost.
    r2=$(run_gtest "NCCL deadline test" "$NCCL_TESTS" "NcclCommDeadline.*" "$W/nccl-deadline.log" 60)
    ver=$(grep -m1 -o "NCCL [0-9][^ ]* (header [^)]*)" "$W/nccl-tests.log" || true)
    row "NCCL backend, one rank (host + device buffers, refusals)" "$r1" "$(grep -c '^\[       OK \]' "$W/nccl-tests.log") passed; ${ver:-NCCL version unknown}; $NCCL_NOTE"
    row "NCCL init with a missing rank times out" "$r2" "$(grep -m1 -o 'did not complete within [^:]*' "$W/nccl-deadline.log" || echo 'see nccl-deadline.log')"
    [ "$r1" = PASS ] && [ "$r2" = PASS ] || STATUS=1
  elif [ -n "$NCCL_NOTE" ]; then
    row "NCCL backend, one rank" "NOT RUN" "$NCCL_NOTE"
    STATUS=1
  fi
else
  row "gpu tests: kernels" "NOT RUN" "dry run"
  row "NCCL backend, one rank" "NOT RUN" "dry run"
fi

# ---- 3. SASS of the kernels ---------------------------------------------------------------
if [ "$DRY" = 0 ] && [ -n "$BENCH" ] && [ "$PY_ONLY" = 0 ]; then
  if command -v cuobjdump >/dev/null; then
    cuobjdump -sass "$BENCH" > "$W/sass.txt" 2>/dev/null || echo "gpu-check: cuobjdump failed"
  else
    echo "gpu-check: cuobjdump not found: the ops floor falls back to PTX instruction counts"
    nvcc -std=c++20 -O3 --fmad=false -I"$ROOT" -arch=compute_90 -ptx "$ROOT/kernels/materialize.cu" -o "$W/materialize.ptx" 2>/dev/null
    nvcc -std=c++20 -O3 --fmad=false -I"$ROOT" -arch=compute_90 -ptx "$ROOT/kernels/fingerprint.cu" -o "$W/fingerprint.ptx" 2>/dev/null
  fi
fi

# ---- 4. benchmarks --------------------------------------------------------------------------
ELEMS=$((1 << 30))
[ "$QUICK" = 1 ] && ELEMS=$((1 << 24))
if [ "$DRY" = 0 ] && [ -n "$BENCH" ]; then
  stamp "seedstore_gpu_bench ($ELEMS elements)"
  timeout 240 "$BENCH" --json "$W/bench.json" --elements "$ELEMS" $([ "$QUICK" = 1 ] && echo --quick) \
    || { echo "gpu-check: BENCH FAILED"; STATUS=1; }
fi
if [ "$DRY" = 0 ] && [ -n "$BENCH" ] && [ "$PY_ONLY" = 0 ]; then
  stamp "jax.random.normal and torch.randn"
  XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 150 "$PY" - "$ELEMS" "$W/peers_jax.json" jax <<'EOF' || echo "gpu-check: jax timing failed"
import json, sys, time
n, out, which = int(sys.argv[1]), sys.argv[2], sys.argv[3]
res = []
import jax, jax.numpy as jnp
dev = jax.devices()[0]
print("jax", jax.__version__, dev, "threefry_partitionable =", jax.config.jax_threefry_partitionable)
for dt in ("bfloat16", "float32"):
    f = jax.jit(lambda k, dt=dt: jax.random.normal(k, (n,), dtype=getattr(jnp, dt)))
    k = jax.random.key(0)
    f(k).block_until_ready(); f(k).block_until_ready()
    ts = []
    for r in range(7):
        k = jax.random.key(r + 1)
        t = time.perf_counter(); f(k).block_until_ready(); ts.append(time.perf_counter() - t)
    ts.sort()
    res.append({"name": f"jax.random.normal {dt}", "elements": n, "bytes": n * (2 if dt == "bfloat16" else 4), "seconds": ts[len(ts) // 2]})
    print(res[-1])
json.dump(res, open(out, "w"))
EOF
  timeout 120 "$PY" - "$ELEMS" "$W/peers_torch.json" <<'EOF' || echo "gpu-check: torch timing failed"
import json, sys
n, out = int(sys.argv[1]), sys.argv[2]
import torch
print("torch", torch.__version__, torch.cuda.get_device_name(0))
res = []
for dt in (torch.bfloat16, torch.float32):
    x = torch.empty(n, dtype=dt, device="cuda")
    for _ in range(2): torch.randn(n, dtype=dt, device="cuda", out=x)
    torch.cuda.synchronize()
    ts = []
    for _ in range(7):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); torch.randn(n, dtype=dt, device="cuda", out=x); b.record(); b.synchronize()
        ts.append(a.elapsed_time(b) * 1e-3)
    ts.sort()
    name = "bfloat16" if dt == torch.bfloat16 else "float32"
    res.append({"name": f"torch.randn {name}", "elements": n, "bytes": n * x.element_size(), "seconds": ts[len(ts) // 2]})
    print(res[-1])
    del x
json.dump(res, open(out, "w"))
EOF
fi

# ---- 6. the Python package ------------------------------------------------------------------
# Rows for its tests and the DLPack timing ($W/py_timing.json, read by the report). Every
# command has its own timeout; nothing here ends the script.
if [ "$PYSTEP" = 1 ] && [ "$DRY" = 0 ]; then
  if [ "$PY_BUILT" != 1 ]; then
    note=${PY_NOTE:-"no CMake build (the standalone build has no Python package)"}
    row "Python package: test_py_cuda + test_py_nccl" "NOT RUN" "$note"
    row "Python package: DLPack timing" "NOT RUN" "$note"
    STATUS=1
  else
    export PYTHONPATH="$BUILD/python:$ROOT/tests/pkg${PYTHONPATH:+:$PYTHONPATH}"
    if "$PY" -c "import pytest" 2>/dev/null; then
      stamp "Python package tests (pytest tests/pkg/test_py_cuda.py test_py_nccl.py)"
      (cd "$ROOT" && SEEDSTORE_REQUIRE_GPU=1 PYTHONUNBUFFERED=1 timeout 300 "$PY" -m pytest -q -rs -p no:cacheprovider \
          tests/pkg/test_py_cuda.py tests/pkg/test_py_nccl.py) > "$W/py-tests.log" 2>&1
      rc=$?
      tail -15 "$W/py-tests.log"
      summary=$(grep -E "[0-9]+ (passed|failed|error)" "$W/py-tests.log" | tail -1)
      skips=$(grep -c "^SKIPPED" "$W/py-tests.log")
      if [ $rc -eq 0 ]; then row "Python package: test_py_cuda + test_py_nccl" PASS "${summary:-?}; $skips skipped (two-rank NCCL needs 2 GPUs)"
      else row "Python package: test_py_cuda + test_py_nccl" FAIL "rc $rc: ${summary:-see py-tests.log}"; STATUS=1; fi
      cp "$W/py-tests.log" "$OUT/" 2>/dev/null
    else
      row "Python package: test_py_cuda + test_py_nccl" "NOT RUN" "pytest is not installed for $PY (carry its wheel: /work/.library/device/README.md)"
      STATUS=1
    fi
    stamp "DLPack timing: Catalog.materialize into torch CUDA tensors ($ELEMS elements)"
    timeout 180 "$PY" - "$ELEMS" "$W/py_timing.json" > "$W/py-timing.log" 2>&1 <<'EOF'
import json, statistics, sys, time
import torch
import seedstore
n, out = int(sys.argv[1]), sys.argv[2]
res = []
for g in ("threefry", "philox"):
    for dt, tdt, short in (("bfloat16", torch.bfloat16, "bf16"), ("float32", torch.float32, "f32")):
        cat = seedstore.open({"seedstore": 1, "seed": 0, "generator": g, "tensors": [
            {"name": "t", "shape": [n], "dtype": dt, "init": {"dist": "normal"}}]})
        x = torch.empty(n, dtype=tdt, device="cuda")
        for _ in range(2):
            cat.materialize("t", x)
        torch.cuda.synchronize()
        ev, wall = [], []
        for _ in range(7):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            t = time.perf_counter()
            a.record()
            cat.materialize("t", x)  # enqueued on torch's current stream (DLPack, in place)
            b.record()
            b.synchronize()
            wall.append(time.perf_counter() - t)
            ev.append(a.elapsed_time(b) * 1e-3)
        res.append({"name": f"{g} normal {short}", "elements": n, "bytes": n * x.element_size(),
                    "seconds": statistics.median(ev), "wall_seconds": statistics.median(wall)})
        print(res[-1], flush=True)
        del x
json.dump(res, open(out, "w"))
EOF
    rc=$?
    cat "$W/py-timing.log"
    if [ $rc -eq 0 ] && [ -f "$W/py_timing.json" ]; then row "Python package: DLPack timing" PASS "4 cases, medians of 7 (table below)"
    else row "Python package: DLPack timing" FAIL "rc $rc (py-timing.log)"; STATUS=1; fi
  fi
elif [ "$PYSTEP" = 1 ]; then
  row "Python package: test_py_cuda + test_py_nccl" "NOT RUN" "dry run"
fi

# ---- 5. report: floors, fractions, targets ----------------------------------------------------
stamp "report"
"$PY" - "$W" "$DRY" <<'EOF' || { echo "gpu-check: report failed"; STATUS=1; }
import json, os, re, sys
out, dry = sys.argv[1], sys.argv[2] == "1"

def load(p, default):
    try:
        return json.load(open(os.path.join(out, p)))
    except Exception:
        return default

# Test rows (written by the script's step 2): PASS only for tests that ran and passed.
tests = []
try:
    for line in open(os.path.join(out, "tests.tsv")):
        name, result, detail = (line.rstrip("\n").split("\t") + ["", ""])[:3]
        tests.append({"name": name, "result": result, "detail": detail})
except OSError:
    pass
test_lines = ["\n| tests | result | detail |", "|---|---|---|"] + [f"| {t['name']} | {t['result']} | {t['detail']} |" for t in tests]

if dry:  # synthetic numbers: exercises the parser and the arithmetic, nothing is measured
    bench = {"device": "DRY RUN (synthetic)", "sms": 132, "sm_clock_khz": 1980000, "records": [
        {"name": "d2d copy (cudaMemcpy, read+write bytes)", "kind": "copy", "kernel": "", "elements": 1 << 30, "bytes": 8 << 30, "seconds": 2.0e-3 * 1.0},
        {"name": "write (cudaMemset)", "kind": "write", "kernel": "", "elements": 1 << 30, "bytes": 4 << 30, "seconds": 1.0e-3},
        {"name": "philox normal bf16", "kind": "materialize", "kernel": "MaterializeKernel:1:2:2:1:0", "elements": 1 << 30, "bytes": 2 << 30, "seconds": 1e-3},
        {"name": "fingerprint bf16", "kind": "fingerprint", "kernel": "FingerprintKernel:unsigned short", "elements": 1 << 30, "bytes": 2 << 30, "seconds": 1e-3},
        {"name": "llama3-8b materialize bf16 (philox)", "kind": "model", "kernel": "", "elements": 8030261248, "bytes": 16060522496, "seconds": 0.1, "peak_bytes": 16060522496 + (2 << 20), "output_bytes": 16060522496},
        {"name": "llama3-8b fingerprint bf16 (all tensors)", "kind": "model_fingerprint", "kernel": "", "elements": 8030261248, "bytes": 16060522496, "seconds": 0.04}]}
    peers = [{"name": "jax.random.normal bfloat16", "elements": 1 << 30, "bytes": 2 << 30, "seconds": 3e-3}]
    pytiming = [{"name": "philox normal bf16", "elements": 1 << 30, "bytes": 2 << 30, "seconds": 1.02e-3, "wall_seconds": 1.1e-3}]
else:
    bench = load("bench.json", None)
    if bench is None:  # the tests' rows still make a table
        print("no bench.json: no benchmark to report")
        print("\n".join(test_lines))
        open(os.path.join(out, "table.md"), "w").write("no bench.json: the benchmark did not run\n" + "\n".join(test_lines) + "\n")
        json.dump({"tests": tests, "python": load("py_timing.json", [])}, open(os.path.join(out, "report.json"), "w"), indent=1)
        sys.exit(1)
    peers = load("peers_jax.json", []) + load("peers_torch.json", [])
    pytiming = load("py_timing.json", [])

recs = bench["records"]
sms, clock = bench["sms"], bench["sm_clock_khz"] * 1e3
copy = next((r for r in recs if r["kind"] == "copy"), None)
bw = copy["bytes"] / copy["seconds"] if copy else None

# ---- SASS (or PTX) operation counts of each kernel's grid-stride loop body ----
sass_path = os.path.join(out, "sass.txt")
funcs = {}
if dry and not os.path.exists(sass_path):  # synthetic dump in cuobjdump's format
    open(sass_path, "w").write("""
        Function : _ZN9seedstore11cuda_detail17MaterializeKernelILNS_9GeneratorE1ELNS_4DistE2ELNS_5DTypeE2ELb1ELb0EEEvNS_13SamplerParamsENS_6RunMapEPNS_9StorageOfIXT1_EE4typeEbmPm
        .headerflags    @"EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                   /* 0x00000a00ff017b82 */
        /*0010*/                   S2R R0, SR_TID.X ;                       /* 0x0000000000007919 */
.L_x_1:
        /*0020*/                   IMAD.WIDE.U32 R2, R0, 0x10, R4 ;         /* 0x0000001000027825 */
        /*0030*/                   LOP3.LUT R3, R3, R5, RZ, 0x3c, !PT ;     /* 0x0000000503037212 */
        /*0040*/                   FFMA R6, R6, R7, R8 ;                    /* 0x0000000706067223 */
        /*0050*/                   MUFU.LG2 R9, R9 ;                        /* 0x0000000900097308 */
        /*0060*/                   F2F.BF16.F32 R9, R9 ;                    /* 0x0000000900097304 */
        /*0070*/                   STG.E.128 desc[UR4][R2.64], R8 ;         /* 0x0000000802007986 */
        /*0080*/               @P0 BRA `(.L_x_1) ;                          /* 0xfffffffc00e40947 */
        /*0090*/                   EXIT ;                                   /* 0x000000000000794d */
        /*00a0*/                   BRA 0xa0;                                /* 0xfffffffc00fc7947 */
        Function : _ZN9seedstore11cuda_detail47_GLOBAL__N__c674995e_14_fingerprint_cu_ddcc38b817FingerprintKernelItEEvNS_6RunMapEPKT_bmPm
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0010*/                   IMAD.HI.U32 R2, R3, R4, RZ ;
        /*0020*/                   IADD3 R2, P0, R2, R5, RZ ;
        /*0030*/               @P0 BRA 0x10 ;
        /*0040*/                   EXIT ;
""")
if os.path.exists(sass_path):
    cur, labels, pending = None, {}, []
    for line in open(sass_path, errors="replace"):
        m = re.search(r"Function : (\S+)", line)
        if m:
            cur = m.group(1); funcs[cur] = []; pending = []; continue
        m = re.match(r"\s*(\.L_x_\d+):", line)
        if m:
            pending.append(m.group(1)); continue
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
        if m and cur:
            addr = int(m.group(1), 16)
            for lab in pending: labels[(cur, lab)] = addr
            pending = []
            funcs[cur].append((addr, m.group(2).strip()))
    # resolve label branch targets to addresses
    for name, body in funcs.items():
        fixed = []
        for addr, ins in body:
            m = re.search(r"`\((\.L_x_\d+)\)", ins)
            if m and (name, m.group(1)) in labels:
                ins = ins.replace(m.group(0), hex(labels[(name, m.group(1))]))
            fixed.append((addr, ins))
        funcs[name] = fixed
ops_source = "sass" if funcs else None
if not funcs:  # no cuobjdump: PTX instruction counts (virtual ISA; approximate), issue rate only
    def finish(name, body, labels):
        out_body = []
        for idx, ins in body:
            m = re.search(r"\bbra(?:\.uni)?\s+(\$L__\w+)", ins)
            if m and m.group(1) in labels:
                ins = "BRA 0x%x" % labels[m.group(1)]
            out_body.append((idx, ins))
        funcs[name] = out_body
    for ptx in ("materialize.ptx", "fingerprint.ptx"):
        path = os.path.join(out, ptx)
        if not os.path.exists(path): continue
        cur, labels, body = None, {}, []
        for line in open(path, errors="replace"):
            m = re.match(r"\s*(?:\.visible\s+)?\.entry\s+(\S+?)\(", line)
            if m:
                if cur: finish(cur, body, labels)
                cur, labels, body = m.group(1), {}, []; continue
            if cur is None: continue
            m = re.match(r"\s*(\$L__\w+):", line)
            if m:
                labels[m.group(1)] = len(body); continue
            t = line.strip()
            if not t or t.startswith(("//", ".", "{", "}", ")")): continue
            body.append((len(body), t.rstrip(";")))
        if cur: finish(cur, body, labels)
    ops_source = "ptx" if funcs else None
# Per-SM per-clock thread-op throughput on sm_90 (CUDA C++ Programming Guide, "Arithmetic
# Instructions"): FP32 128, INT32 add/logic/shift/compare 64, IMAD 64, FP64 64, MUFU and
# conversions 16; issue 4 warps x 32 = 128 instructions per clock per SM.
CLASSES = [("mufu", re.compile(r"^MUFU"), 16), ("conv", re.compile(r"^(I2F|F2I|F2F|I2I|FRND)"), 16),
           ("fp64", re.compile(r"^D(ADD|MUL|FMA|SETP|MNMX)"), 64),
           ("imad", re.compile(r"^IMAD|^IMUL"), 64),
           ("fp32", re.compile(r"^(FADD|FMUL|FFMA|HFMA2|HADD2|HMUL2)"), 128),
           ("alu", re.compile(r"^(IADD3|LOP3|SHF|ISETP|SEL|PRMT|LEA|FSETP|FMNMX|FSEL|IMNMX|VIMNMX|POPC|FLO|BREV|IABS|PLOP3|P2R|R2P|LOP|IADD|UIADD3|ULOP3|USHF|UMOV|MOV)"), 64)]
def strip_pred(op):
    return re.sub(r"^@!?U?P\w+\s+", "", op)
def loop_counts(body):
    # Outermost backward branch = the grid-stride loop; count its body.
    best = None
    for addr, ins in body:
        m = re.search(r"\bBRA(?:\.\S+)?\s.*?0x([0-9a-f]+)\s*$", ins)
        if m:
            tgt = int(m.group(1), 16)
            if tgt < addr and (best is None or addr - tgt > best[1] - best[0]):
                best = (tgt, addr)
    sel = [ins for a, ins in body if best is None or best[0] <= a <= best[1]]
    counts = {"total": 0}
    for ins in sel:
        op = strip_pred(ins).split()[0] if ins.split() else ""
        if op in ("NOP",): continue
        counts["total"] += 1
        for name, rx, _ in CLASSES:
            if rx.match(op):
                counts[name] = counts.get(name, 0) + 1; break
    counts["loop_found"] = best is not None
    return counts
def find_kernel(kid):
    if not funcs or not kid: return None
    if kid.startswith("MaterializeKernel:"):
        g, x, d, a, h = kid.split(":")[1:]
        rx = re.compile(rf"MaterializeKernelILNS_9GeneratorE{g}ELNS_4DistE{x}ELNS_5DTypeE{d}ELb{a}ELb{h}E")
    else:
        t = {"unsigned short": "t", "unsigned int": "j", "unsigned char": "h", "unsigned long": "m"}[kid.split(":")[1]]
        rx = re.compile(rf"FingerprintKernelI{t}E")
    for name, body in funcs.items():
        if rx.search(name): return loop_counts(body)
    return None
VEC = {"MaterializeKernel": {"0": 4, "1": 2, "2": 8, "3": 8}, "FingerprintKernel": {"unsigned short": 8, "unsigned int": 4}}
def per_iter_elems(kid):
    if kid.startswith("MaterializeKernel:"): return VEC["MaterializeKernel"].get(kid.split(":")[3], 1)
    return VEC["FingerprintKernel"].get(kid.split(":")[1], 1)

rows = []
def fmt(x, unit=""):
    return "-" if x is None else (f"{x:.3g}{unit}")
print(f"\nGPU: {bench['device']}, {sms} SMs @ {clock/1e6:.0f} MHz; measured d2d copy {fmt(bw and bw/1e9)} GB/s (read+write)")
hdr = f"| kernel | time ms | Gelem/s | GB/s | {(ops_source or 'no').upper()} ops/elem | floor ms (bytes / ops) | achieved of floor |"
lines = [hdr, "|---|---|---|---|---|---|---|"]
for r in recs + [dict(p, kind="peer", kernel="") for p in peers]:
    t = r["seconds"]; eps = r["elements"] / t; gbs = r["bytes"] / t / 1e9
    floor_b = r["bytes"] / bw if bw and r["kind"] not in ("copy", "write") else None
    ops = find_kernel(r.get("kernel", ""))
    floor_o = None; ope = None
    if ops and ops["total"]:
        v = per_iter_elems(r["kernel"])
        ope = ops["total"] / v
        cyc = max([ops["total"] / 128] + [ops.get(n, 0) / rate for n, _, rate in CLASSES])  # per iteration per thread-lane
        floor_o = r["elements"] / v * cyc / (sms * clock)
    floor = max([f for f in (floor_b, floor_o) if f is not None], default=None)
    frac = floor / t if floor else None
    r["floor_s"], r["fraction"], r["ops_per_elem"] = floor, frac, ope
    lines.append(f"| {r['name']} | {t*1e3:.3f} | {eps/1e9:.2f} | {gbs:.1f} | {fmt(ope)} | {fmt(floor and floor*1e3)} ({fmt(floor_b and floor_b*1e3)} / {fmt(floor_o and floor_o*1e3)}) | {fmt(frac)} |")
for r in recs:
    if r["kind"] == "model":
        lines.append(f"\n{r['name']}: {r['seconds']*1e3:.1f} ms, outputs {r['output_bytes']/1e9:.3f} GB, device memory used {r['peak_bytes']/1e9:.3f} GB (outputs + {(r['peak_bytes']-r['output_bytes'])/2**20:.1f} MiB)")
table = "\n".join(lines)
print(table)

# ---- targets (docs/PERF.md, "GPU") ----
def get(name):
    return next((r for r in recs + peers if r["name"] == name), None)
checks = []
tf, jx = get("threefry normal bf16"), get("jax.random.normal bfloat16")
if tf and jx: checks.append(("threefry normal bf16 >= 1.5x jax.random.normal", jx["seconds"] / tf["seconds"] >= 1.5, f"{jx['seconds']/tf['seconds']:.2f}x"))
tf, jx = get("threefry normal f32"), get("jax.random.normal float32")
if tf and jx: checks.append(("threefry normal f32 >= 1.5x jax.random.normal", jx["seconds"] / tf["seconds"] >= 1.5, f"{jx['seconds']/tf['seconds']:.2f}x"))
for r in recs:
    if r["kind"] in ("materialize", "fingerprint", "fused") and r.get("fraction"):
        checks.append((f"{r['name']} >= 0.8 of floor", r["fraction"] >= 0.8, f"{r['fraction']:.2f}"))
fp = next((r for r in recs if r["kind"] == "model_fingerprint"), None)
if fp: checks.append(("fingerprint Llama-3-8B < 50 ms", fp["seconds"] < 0.05, f"{fp['seconds']*1e3:.1f} ms"))
for r in recs:
    if r["kind"] == "model":
        checks.append((f"{r['name']} < 0.2 s", r["seconds"] < 0.2, f"{r['seconds']*1e3:.1f} ms"))
        extra = r["peak_bytes"] - r["output_bytes"]
        checks.append((f"{r['name']} peak memory = outputs + O(1) (< 64 MiB extra)", extra < (64 << 20), f"+{extra/2**20:.1f} MiB"))
tl = ["\n| target | result | value |", "|---|---|---|"] + [f"| {n} | {'PASS' if ok else 'FAIL'} | {v} |" for n, ok, v in checks]
# The Python package's DLPack path against the C++ benchmark's kernel, same case and size.
py_lines = []
if pytiming:
    py_lines = ["\n| Python DLPack materialize (torch CUDA tensor) | C++ seedstore_gpu_bench ms | Python ms (CUDA events) | Python wall ms | Python / C++ |",
                "|---|---|---|---|---|"]
    for p in pytiming:
        c = next((r for r in recs if r["name"] == p["name"] and r["elements"] == p["elements"]), None)
        p["cpp_seconds"] = c["seconds"] if c else None
        p["ratio"] = p["seconds"] / c["seconds"] if c else None
        py_lines.append(f"| {p['name']} ({p['elements']} elements) | {fmt(c and c['seconds']*1e3)} | {p['seconds']*1e3:.3f} | {p['wall_seconds']*1e3:.3f} | {fmt(p['ratio'])} |")
tl += py_lines + test_lines
print("\n".join(tl))
note = "DRY RUN: synthetic numbers, nothing measured\n\n" if dry else ""
open(os.path.join(out, "table.md"), "w").write(note + f"GPU: {bench['device']}\n\n" + table + "\n" + "\n".join(tl) + "\n")
json.dump({"bench": bench, "peers": peers, "python": pytiming, "checks": checks, "tests": tests}, open(os.path.join(out, "report.json"), "w"), indent=1, default=str)
EOF
for f in table.md report.json bench.json; do [ -f "$W/$f" ] && cp "$W/$f" "$OUT/"; done
tar czf "$OUT/gpu-check-files.tgz" -C "$W" . 2>/dev/null || echo "gpu-check: tar of $W failed"
stamp "done (status $STATUS); results in $OUT: $(ls "$OUT" | tr '\n' ' ')"
exit $STATUS
