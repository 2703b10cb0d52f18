// Diff: whether two checkpoints hold the same weights, tensor by tensor, by layout-independent
// fingerprints -- whatever each one is (a spec, a store, a distributed save under any layout,
// safetensors files) and without moving dense bytes between them.
//
// Tensors are paired by name. A pair is compared by
//   - spec: both lazy with the same init rule, key, generator, dtype and shape (identical
//     without generating anything);
//   - fingerprint: of the whole tensor, or -- when a side is one rank's file (a safetensors
//     shard file, a distributed save's rank file: TensorRecord::piece) -- of that piece and the
//     same region of the other side; two pieces of other regions are compared on their overlap
//     (a flat FSDP range against a TP box too: on the global boxes they share). Fingerprints
//     are taken in the global tensor's frame, so a piece's equals that of the same elements of
//     the whole tensor (I4).
// Pieces of disjoint regions are "other-shards": not compared, no difference. A tensor that a
// distributed save's rank file lacks is "not-compared" (the file holds only its rank's dense
// pieces).
#pragma once
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "io/device.h"
#include "store/catalog.h"

namespace seedstore {

enum class DiffVerdict {
  kIdentical,
  kValues,
  kShape,
  kDType,
  kShard,
  kOnlyA,
  kOnlyB,
  kNotCompared
};
/// "identical", "values-differ", "shape-differs", "dtype-differs", "other-shards",
/// "only-in-a", "only-in-b", "not-compared".
const char* DiffVerdictName(DiffVerdict v);

/// One tensor name's result. `a`/`b` point into the catalogs given to Diff (null where that
/// side lacks the tensor) and are valid while those catalogs live.
struct DiffRow {
  std::string name;
  DiffVerdict verdict = DiffVerdict::kIdentical;
  const TensorRecord* a = nullptr;
  const TensorRecord* b = nullptr;
  std::optional<Fingerprint> fa, fb;  // the fingerprints compared, where any were computed
  bool by_spec = false;               // both lazy with the same resolved spec
  std::optional<Region> shard;        // a side is a rank's file: the region compared
  bool empty_shard = false;           // ... and that piece is empty (FORMAT.md 4.1)
  bool overlap = false;               // two pieces of other regions: `shard` is their overlap
  std::vector<Region> overlap_boxes;  // a box piece against a flat piece: their common boxes

  /// The region compared, as text: the shard, or the overlap's boxes joined by " + ".
  std::string ShardText() const;
  /// How the verdict was reached: "spec", "empty shard", "overlap", "fingerprint",
  /// "absent from a rank file", "disjoint shards" or "shape/dtype/name".
  const char* By() const;
};

struct DiffOptions {
  std::string tensors = "*";     // glob of tensor names to compare
  bool recorded = false;         // trust fingerprints the sources record for whole tensors
  Device device = Device::kCpu;  // resolved (ResolveDevice): where lazy shards are hashed
  int threads = 0;               // CPU threads (0: default)
  std::function<void(uint64_t bytes)> progress;  // called as tensor bytes are done
};

struct DiffReport {
  std::vector<DiffRow> rows;  // a's tensors in a's order, then those only in b
  int count[8] = {};          // rows per DiffVerdict
  int compared = 0;           // rows neither other-shards nor not-compared
  int differing = 0;          // compared rows that are not identical
  int by_spec = 0;            // identical by spec
  int shards = 0;             // compared as a rank file's piece (or an overlap)
  int overlaps = 0;           // compared on the overlap of two pieces of other regions

  int Count(DiffVerdict v) const { return count[static_cast<int>(v)]; }
  bool Identical() const { return differing == 0; }
  /// {"identical", "compared", "recorded", "counts", "tensors": [{name, result, by, shard,
  /// a, b}]}; a and b are {shape, dtype, kind, fingerprint} or null.
  nlohmann::json ToJson(bool recorded) const;
};

/// The bytes Diff reads or generates at most (the progress callback's total).
uint64_t DiffWorkBytes(const Catalog& a, const Catalog& b, const std::string& glob);

/// Compares `a` with `b` as described above. Errors: a glob that matches no tensor of either
/// side (kInvalidArgument), and any read or generation failure, with the source named.
Result<DiffReport> Diff(const Catalog& a, const Catalog& b, const DiffOptions& o = {});

}  // namespace seedstore
