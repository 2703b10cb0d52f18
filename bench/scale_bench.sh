#!/usr/bin/env bash
# Reshard and verify cost as the rank count grows (docs/PERF.md "Reshard", "Many ranks"): the
# first LAYERS decoder layers of Llama-3-70B (its preset's shapes, bf16, generated), imported as
# a dense store, then resharded FSDP-flat over each rank count of RANKS by one process (which
# writes every rank's file, as `mpirun -np R` would in parallel), proof included, and the result
# verified. Runs alternate the rank counts; prints per count the medians, seconds per GB and the
# ratio of time per byte to the first count, and `cp` + `sync` of the source beside them.
#
#   bench/scale_bench.sh BIN [LAYERS=1] [RUNS=3] [RANKS="8 1024"]
#
# NP=<n>: the reshards run under `mpirun -np n` (n processes sharing the rank files, as fewer
# real processes than ranks would), for every rank count alike; verify stays one process.
#
# One layer is 9 tensors, 1.70 GB of bf16 (0.85 B parameters); over 1,024 ranks 9,216 pieces of
# 184 KB on average, the same average piece as the whole model over 1,024 ranks (~740,000
# pieces, 141 GB).
set -euo pipefail
BIN=$(realpath "$1")
LAYERS=${2:-1}
RUNS=${3:-3}
RANKS=${4:-"8 1024"}
NP=${NP:-1}
LAUNCH=()
if [ "$NP" -gt 1 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  LAUNCH=(mpirun -np "$NP" --oversubscribe)
fi
[ "$LAYERS" -ge 1 ] && [ "$LAYERS" -le 10 ] || { echo "LAYERS: 1..10" >&2; exit 2; }
W=$(mktemp -d "${TMPDIR:-/tmp}/scale_bench.XXXXXX")
trap 'rm -rf "$W"' EXIT
cd "$W"
"$BIN" init --preset llama-3-70b --no-fingerprints -o l70.h5 >/dev/null
"$BIN" export l70.h5 --tensors "model.layers.[0-$((LAYERS - 1))].*" -o sub.safetensors >/dev/null
"$BIN" import sub.safetensors -o src.h5 >/dev/null
BYTES=$(stat -c %s sub.safetensors)
rm sub.safetensors
for r in $RANKS; do
  echo "{\"mesh\": {\"axes\": [\"data\"], \"shape\": [$r]}, \"placements\": [{\"match\": \"*\", \"flat\": [\"data\"]}]}" >"l$r.json"
done
now() { date +%s.%N; }
: >times.txt
for run in $(seq "$RUNS"); do
  t0=$(now); cp src.h5 copy.h5; sync; t1=$(now); rm -f copy.h5
  echo "copy $(echo "$t1 - $t0" | bc)" >>times.txt
  for r in $RANKS; do
    rm -f "o$r.h5" o"$r".h5.*
    sync
    t0=$(now); "${LAUNCH[@]}" "$BIN" reshard src.h5 --layout "l$r.json" -o "o$r.h5" -q; t1=$(now)
    "$BIN" verify "o$r.h5" >/dev/null; t2=$(now)
    echo "reshard$r $(echo "$t1 - $t0" | bc)" >>times.txt
    echo "verify$r $(echo "$t2 - $t1" | bc)" >>times.txt
    echo "files$r $(ls o"$r".h5* | wc -l) $(du -cb o"$r".h5* | tail -1 | cut -f1)" >>times.txt
    rm -f "o$r.h5" o"$r".h5.*
  done
done
python3 - "$BYTES" "$RANKS" times.txt "$NP" <<'EOF'
import statistics, sys
data_bytes, ranks = int(sys.argv[1]), sys.argv[2].split()
t = {}
for line in open(sys.argv[3]):
    k, *v = line.split()
    t.setdefault(k, []).append([float(x) for x in v])
med = lambda k: statistics.median(x[0] for x in t[k])
gb = data_bytes / 1e9
copy = med("copy")
print(f"processes per reshard: {sys.argv[4]}; "
      f"source: {gb:.2f} GB of bf16 data; cp + sync of the store: {copy:.2f} s "
      f"(runs {len(t['copy'])}; medians below)")
print("| ranks | files, bytes | reshard s | s per GB | per byte vs first | vs cp + sync | verify s |")
print("|---:|---:|---:|---:|---:|---:|---:|")
first = None
for r in ranks:
    rs, vs = med(f"reshard{r}"), med(f"verify{r}")
    first = first or rs
    files, size = t[f"files{r}"][0]
    print(f"| {r} | {int(files)}, {int(size):,} | {rs:.2f} | {rs / gb:.2f} | {rs / first:.2f}x | "
          f"{copy / rs:.2f}x | {vs:.2f} |")
print("raw:", {k: [x[0] for x in v] for k, v in t.items()})
EOF
