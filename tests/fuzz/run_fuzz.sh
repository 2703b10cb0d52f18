#!/usr/bin/env bash
# Bounded libFuzzer run of tests/fuzz/fuzz_parsers.cc under ASan + UBSan (clang).
# Usage: tests/fuzz/run_fuzz.sh [SECONDS_PER_TARGET=30] [BUILD_DIR=build-fuzz]
# Exit status: non-zero when a target crashes (the reproducer is left in BUILD_DIR/).
set -euo pipefail
SECS=${1:-30}
OUT=${2:-build-fuzz}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$OUT"
SRCS=("$ROOT"/store/spec.cc "$ROOT"/store/layout.cc "$ROOT"/store/status.cc "$ROOT"/store/json_text.cc
      "$ROOT"/io/safetensors.cc "$ROOT"/io/atomic_file.cc "$ROOT"/io/parallel.cc "$ROOT"/gen/materialize_cpu.cc
      "$ROOT"/tests/fuzz/fuzz_parsers.cc)
# The CPU generator's per-instruction-set files (chunk checksums, as the safetensors reader
# uses them), with the flags gen/CMakeLists.txt gives them.
MATH="-fno-math-errno -fno-trapping-math"
ISA_SRCS=("generic:$MATH" "avx2:$MATH -mavx2 -mfma -mbmi -mbmi2"
          "avx512:$MATH -mavx512f -mavx512vl -mavx512bw -mavx512dq -mavx2 -mfma -mbmi -mbmi2 -mprefer-vector-width=512")
if [ ! -x "$OUT/fuzz_parsers" ] ||
   [ -n "$(find "${SRCS[@]}" "$ROOT"/gen -newer "$OUT/fuzz_parsers" 2>/dev/null)" ]; then
  echo "fuzz: building $OUT/fuzz_parsers (clang, -fsanitize=fuzzer,address,undefined)"
  FLAGS=(-std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
         -ffp-contract=off -I"$ROOT")
  OBJS=()
  for isa in "${ISA_SRCS[@]}"; do
    name=${isa%%:*}
    # shellcheck disable=SC2086 # the flags are words
    clang++ "${FLAGS[@]}" ${isa#*:} -c "$ROOT/gen/materialize_cpu_$name.cc" -o "$OUT/isa_$name.o"
    OBJS+=("$OUT/isa_$name.o")
  done
  clang++ "${FLAGS[@]}" "${SRCS[@]}" "${OBJS[@]}" -o "$OUT/fuzz_parsers" -lxxhash -lpthread
fi
# Seed corpora.
C="$OUT/corpus"
mkdir -p "$C"/{spec,layout,box,misc,sink,index,safetensors}
cat > "$C/spec/1.json" <<'J'
{"seedstore": 1, "seed": 3, "generator": "threefry", "tensors": [
 {"name": "a", "shape": [4, 5], "dtype": "bfloat16", "init": {"dist": "normal", "scale": 0.02}},
 {"name": "b", "shape": [3], "dtype": "float32", "init": {"dist": "truncated_normal", "lower": -1, "upper": 2}, "key": {"seed": 4, "x64": true}},
 {"name": "c", "shape": [], "dtype": "uint8", "init": {"dist": "bits"}, "key": {"raw": [1, 2]}, "generator": "philox"},
 {"name": "d", "shape": [2], "dtype": "int8", "init": {"dist": "constant", "value": -3}}]}
J
cat > "$C/layout/1.json" <<'J'
{"mesh": {"axes": ["data", "tensor"], "shape": [2, 2], "devices": [3, 1, 0, 2]}, "strict": false,
 "placements": [{"match": "w.*", "spec": [["data", "tensor"], null]},
                {"match": "x", "dtensor": ["Shard(0)", "Shard(-1)"]}, {"match": "*", "flat": ["data"], "strict": true}]}
J
printf '0:2,1:3' > "$C/box/1"; printf ':,:' > "$C/box/2"
printf 'bfloat16' > "$C/misc/1"; printf '{"dist":"uniform","minval":-1,"maxval":1}' > "$C/misc/2"
printf '0123456789abcdef0123456789abcdef' > "$C/misc/3"
printf '{"start": [0, 1], "stop": [3, 4]}' > "$C/misc/4"; printf '{"flat": [2, 9]}' > "$C/misc/5"
printf '{"t": [1, {"a": [2]}, "s", [null]], "u": {"t": [3]}}' > "$C/sink/1"
printf '[1, [2], {"t": [3]}, "x"]' > "$C/sink/2"
printf '{"a": {"b": 1, "b": [2]}, "t": [{"c": 1e308}, -0.5, true, null]}' > "$C/sink/3"
printf '{"t": [1, 2], "u": 18446744073709551615, "v": -9223372036854775808, "w": 1e999}' > "$C/sink/4"
printf '{"metadata": {"total_size": 24}, "weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors", "c": "model-00001-of-00002.safetensors"}}' > "$C/index/1"
python3 - "$C/safetensors/1" <<'P'
import json, struct, sys
h = json.dumps({"__metadata__": {"seedstore.shards": json.dumps({"a": {"global_shape": [4], "flat": [0, 2]}})},
                "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                "b": {"dtype": "BF16", "shape": [1, 2], "data_offsets": [8, 12]}}).encode()
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + bytes(12))
P
status=0
# Known reproducers first (tests/fuzz/regressions/<target>_*): each must run clean.
for r in "$ROOT"/tests/fuzz/regressions/*; do
  [ -f "$r" ] || continue
  t=$(basename "$r"); t=${t%%_*}
  if ! SEEDSTORE_FUZZ_TARGET=$t "$OUT/fuzz_parsers" "$r" >"$OUT/regression.log" 2>&1; then
    echo "fuzz: regression $(basename "$r") FAILED (target $t)"; status=1
  fi
done
for t in spec layout box misc sink index safetensors; do
  echo "fuzz: $t for ${SECS}s"
  mkdir -p "$OUT/work-$t"
  if ! SEEDSTORE_FUZZ_TARGET=$t "$OUT/fuzz_parsers" "$OUT/work-$t" "$C/$t" -max_total_time="$SECS" \
       -max_len=4096 -artifact_prefix="$OUT/crash-$t-" -print_final_stats=1 2>"$OUT/$t.log"; then
    echo "fuzz: $t FAILED (see $OUT/$t.log and $OUT/crash-$t-*)"; status=1
  fi
  grep -E "stat::number_of_executed_units|cov:" "$OUT/$t.log" | tail -2 || true
done
exit $status
