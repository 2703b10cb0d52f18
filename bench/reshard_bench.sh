#!/usr/bin/env bash
# Reshard throughput against plainly copying the same bytes (docs/PERF.md, "Reshard").
# Usage: bench/reshard_bench.sh [SEEDSTORE_BIN] [MIB_PER_TENSOR (64)] [TENSORS (4)]
# Builds a dense bf16 store (normal init), saves it over 4 ranks, reshards 4 -> 3 (alone and
# under mpirun -np 2 when mpirun exists) and consolidates; then times `cp` of the same files.
set -euo pipefail
BIN=${1:-build/tools/seedstore}
MIB=${2:-64}
NT=${3:-4}
BIN=$(readlink -f "$BIN")
W=$(mktemp -d /tmp/seedstore-reshard-bench-XXXXXX)
trap 'rm -rf "$W"' EXIT
cd "$W"
cols=4096
rows=$((MIB * 1024 * 1024 / 2 / cols))
{
  echo '{"seedstore": 1, "seed": 1, "tensors": ['
  for i in $(seq 0 $((NT - 1))); do
    [ "$i" -gt 0 ] && echo ','
    echo "{\"name\": \"w$i\", \"shape\": [$rows, $cols], \"dtype\": \"bfloat16\", \"init\": {\"dist\": \"normal\", \"scale\": 0.02}}"
  done
  echo ']}'
} >spec.json
layout() {  # data x tensor mesh
  echo "{\"mesh\": {\"axes\": [\"data\", \"tensor\"], \"shape\": [$1, $2]}, \"placements\": [{\"match\": \"w*\", \"spec\": [\"data\", \"tensor\"]}]}"
}
layout 2 2 >l4.json
layout 3 1 >l3.json
"$BIN" init --spec spec.json -o lazy.h5 >/dev/null
"$BIN" export lazy.h5 -o all.safetensors >/dev/null
"$BIN" import all.safetensors -o src.h5 >/dev/null
rm all.safetensors
data=$((MIB * NT * 1024 * 1024))
now() { date +%s.%N; }
run() {  # label, command...
  local label=$1
  shift
  sync
  local t0 t1
  t0=$(now)
  "$@" >/dev/null
  t1=$(now)
  awk -v l="$label" -v a="$t0" -v b="$t1" -v d="$data" \
    'BEGIN { printf "%-44s %8.3f s  %8.1f MB/s of tensor data\n", l, b - a, d / (b - a) / 1e6 }'
}
echo "data: $NT x [$rows, $cols] bf16 = $((data / 1048576)) MiB; src.h5 $(du -m src.h5 | cut -f1) MiB on disk; $(nproc) cores"
run "reshard store -> 4 ranks (alone)" "$BIN" reshard src.h5 --layout l4.json -o d4.h5 -q
run "reshard 4 -> 3 ranks (alone)" "$BIN" reshard d4.h5 --layout l3.json -o d3.h5 -q
if command -v mpirun >/dev/null; then
  run "reshard 4 -> 3 ranks (mpirun -np 2)" env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    mpirun -np 2 --oversubscribe "$BIN" reshard d4.h5 --layout l3.json -o m3.h5 -q
fi
run "reshard 4 ranks -> one store (--consolidate)" "$BIN" reshard d4.h5 --consolidate -o c.h5 -q
"$BIN" reshard d4.h5 --layout l3.json -o j3.h5 --json | awk '/"write_s"|"prove_s"|"total_s"/' | tr -d ' ,\n'
echo
run "cp src.h5 (same bytes, one file)" cp src.h5 copy.h5
mkdir -p cpdir
run "cp the 4 rank files of d4.h5 (to a folder)" cp d4.h5.*.rank*.h5 cpdir/
