#!/usr/bin/env bash
# Cost per piece at the piece count of a whole model over many ranks (docs/PERF.md, "Many
# ranks"): Llama-3-70B has 723 tensors, so FSDP-flat over 1,024 ranks is 740,352 pieces. Here
# TENSORS tensors of 4,096 bf16 each (5.9 MB in all, so that the bytes cost nothing and every
# second is per piece or per file) are imported as a dense store and resharded flat over RANKS
# ranks by one process (proof included); then the save is inspected, verified and one tensor
# exported from it. Prints each step's wall seconds and peak RSS, and the master's size.
#
#   bench/piece_count_bench.sh BIN [TENSORS=723] [RANKS=1024]
set -euo pipefail
BIN=$(realpath "$1")
TENSORS=${2:-723}
RANKS=${3:-1024}
W=$(mktemp -d "${TMPDIR:-/tmp}/piece_count_bench.XXXXXX")
trap 'rm -rf "$W"' EXIT
cd "$W"
python3 - "$TENSORS" "$RANKS" <<'PY'
import json, sys
n, r = int(sys.argv[1]), int(sys.argv[2])
t = [{"name": f"t{i:04d}.weight", "shape": [4096], "dtype": "bfloat16",
      "init": {"dist": "normal", "scale": 0.02}} for i in range(n)]
json.dump({"seedstore": 1, "seed": 5, "generator": "threefry", "tensors": t}, open("spec.json", "w"))
json.dump({"mesh": {"axes": ["data"], "shape": [r]},
           "placements": [{"match": "*", "flat": ["data"]}]}, open("layout.json", "w"))
PY
"$BIN" export spec.json -o s.safetensors >/dev/null
"$BIN" import s.safetensors -o src.h5 >/dev/null
mkdir out
step() {
  local name=$1
  shift
  /usr/bin/time -f "$name %e s %M KB" "$@" >/dev/null 2>time.txt || { cat time.txt; exit 1; }
  tail -1 time.txt
}
step reshard "$BIN" reshard src.h5 --layout layout.json -o out/o.h5 -q
echo "pieces $((TENSORS * RANKS)), master $(stat -c %s out/o.h5) bytes, $(ls out | wc -l) files"
step inspect "$BIN" inspect out/o.h5
step verify "$BIN" verify out/o.h5
step export-one "$BIN" export out/o.h5 --tensors t0000.weight -o one.safetensors
