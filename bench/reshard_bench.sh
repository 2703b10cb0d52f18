#!/usr/bin/env bash
# Reshard throughput against plainly copying the same bytes (docs/PERF.md, "Reshard").
# Usage: bench/reshard_bench.sh [SEEDSTORE_BIN] [MIB_PER_TENSOR (64)] [TENSORS (4)] [REPEAT (3)]
#   FLAT_RANKS=N (default 0: off) adds a case of many small pieces: the GPT-2 small preset as a
#   dense store (148 tensors, 497 MB of f32) resharded flat over N ranks (256: 37,888 pieces),
#   into version 2 rank files (the default) and into version 1 (docs/FORMAT.md 9, 11).
# Builds a dense bf16 store (normal init, 1 MiB chunks [512, 1024]), saves it over 4 ranks,
# then times each case REPEAT times, interleaved with `cp` of that case's input files (the same
# bytes) and with `cp` + `sync FILES` (the copy made durable, as every store write is), and
# prints medians: wall time, tensor data / time, the ratios to both copies, the chunks
# copied as stored vs encoded, the write / proof split that the reshard reports itself, and
# the CPU seconds (user + sys, all processes) of the reshard.
set -euo pipefail
BIN=${1:-build/tools/seedstore}
MIB=${2:-64}
NT=${3:-4}
REPEAT=${4:-3}
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
layout 2 1 >l2.json
"$BIN" init --spec spec.json -o lazy.h5 >/dev/null
"$BIN" export lazy.h5 -o all.safetensors >/dev/null
"$BIN" import all.safetensors -o src.h5 >/dev/null
rm all.safetensors
"$BIN" reshard src.h5 --layout l4.json -o d4.h5 -q
data=$((MIB * NT * 1024 * 1024))
mpi=()
if command -v mpirun >/dev/null; then
  mpi=(env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -np 2 --oversubscribe)
fi
now() { date +%s.%N; }
median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
# One JSON field of the reshard report (numbers only).
field() { grep -o "\"$1\": *[0-9.e+-]*" "$2" | head -1 | sed 's/.*: *//'; }
echo "data: $NT x [$rows, $cols] bf16 = $((data / 1048576)) MiB; src.h5 $(du -m src.h5 | cut -f1) MiB on disk;" \
  "$(nproc) cores; medians of $REPEAT runs; cp = cp of the case's input files"
printf '%-40s %8s %9s %8s %6s %9s %6s %15s %8s %8s %7s\n' case time MB/s "cp" ratio "cp+sync" ratio "chunks cp/enc" write_s prove_s cpu-s
case_() {  # label, inputs (quoted glob), reshard args...
  local label=$1 inputs=$2
  shift 2
  local k t0 t1 tr=() tc=() ts=() ws=() ps=() cpu=()
  for k in $(seq "$REPEAT"); do
    rm -rf out.h5* cpdir && mkdir cpdir && sync
    t0=$(now); /usr/bin/time -f '%U %S' -o cpu.txt "$@" -o out.h5 --json >rep.json; t1=$(now)
    tr+=("$(echo "$t1 - $t0" | bc -l)")
    cpu+=("$(awk '{ print $1 + $2 }' cpu.txt)")
    ws+=("$(field write_s rep.json)"); ps+=("$(field prove_s rep.json)")
    sync
    # shellcheck disable=SC2086
    t0=$(now); cp $inputs cpdir/; t1=$(now)
    tc+=("$(echo "$t1 - $t0" | bc -l)")
    rm -rf cpdir && mkdir cpdir && sync
    # shellcheck disable=SC2086
    t0=$(now); cp $inputs cpdir/ && sync cpdir/*; t1=$(now)
    ts+=("$(echo "$t1 - $t0" | bc -l)")
  done
  local mr mc ms
  mr=$(printf '%s\n' "${tr[@]}" | median)
  mc=$(printf '%s\n' "${tc[@]}" | median)
  ms=$(printf '%s\n' "${ts[@]}" | median)
  awk -v l="$label" -v r="$mr" -v c="$mc" -v s="$ms" -v d="$data" -v cc="$(field chunks_copied rep.json)" \
    -v ce="$(field chunks_encoded rep.json)" -v w="$(printf '%s\n' "${ws[@]}" | median)" \
    -v p="$(printf '%s\n' "${ps[@]}" | median)" -v u="$(printf '%s\n' "${cpu[@]}" | median)" \
    'BEGIN { printf "%-40s %7.3fs %9.1f %7.3fs %5.2fx %8.3fs %5.2fx %7d/%-7d %8.3f %8.3f %6.2fs\n", l, r, d / r / 1e6, c, c / r, s, s / r, cc, ce, w, p, u }'
}
case_ "store -> 4 ranks (aligned)" "src.h5" "$BIN" reshard src.h5 --layout l4.json
case_ "store -> 4 ranks (aligned), --full-proof" "src.h5" "$BIN" reshard src.h5 --layout l4.json --full-proof
case_ "4 -> 4 ranks, same layout" "d4.h5*" "$BIN" reshard d4.h5 --layout l4.json
case_ "4 -> 2 ranks (N -> N/2, aligned)" "d4.h5*" "$BIN" reshard d4.h5 --layout l2.json
case_ "4 -> 3 ranks, uneven (mixed)" "d4.h5*" "$BIN" reshard d4.h5 --layout l3.json
if [ ${#mpi[@]} -gt 0 ]; then
  case_ "4 -> 3 ranks, uneven (mpirun -np 2)" "d4.h5*" "${mpi[@]}" "$BIN" reshard d4.h5 --layout l3.json
fi
case_ "4 ranks -> one store (--consolidate)" "d4.h5*" "$BIN" reshard d4.h5 --consolidate
if [ "${FLAT_RANKS:-0}" -gt 0 ]; then
  "$BIN" init --preset gpt2 -o gpt2_lazy.h5 >/dev/null
  "$BIN" export gpt2_lazy.h5 -o gpt2.safetensors >/dev/null
  "$BIN" import gpt2.safetensors -o gpt2.h5 >/dev/null
  rm gpt2.safetensors
  echo "{\"mesh\": {\"axes\": [\"data\"], \"shape\": [$FLAT_RANKS]}, \"placements\": [{\"match\": \"*\", \"flat\": [\"data\"]}]}" >lflat.json
  params=$("$BIN" inspect gpt2.h5 --json | grep -o '"parameters": *[0-9]*' | sed 's/.*: *//')
  data=$((params * 4))  # f32
  case_ "gpt2 store -> $FLAT_RANKS ranks, flat (small pieces)" "gpt2.h5" "$BIN" reshard gpt2.h5 --layout lflat.json
  case_ "gpt2 store -> $FLAT_RANKS ranks, flat, --rank-file-version 1" "gpt2.h5" "$BIN" reshard gpt2.h5 --layout lflat.json --rank-file-version 1
fi
