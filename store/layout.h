// Layouts: a device mesh plus per-tensor placements, and the shard (region of global
// indices) each rank holds. Normative description with worked examples: docs/LAYOUT.md.
//
// Three placement notations are understood:
//   * JAX PartitionSpec ("spec"): one entry per tensor dim -- null, a mesh axis name, or a
//     list of axis names that together shard that dim (combined index row-major over them);
//   * PyTorch DTensor placements ("dtensor"): one "Shard(d)" / "Replicate()" per mesh axis;
//     several mesh axes sharding one dim nest (earlier mesh axis chunks first);
//   * FSDP1 / ZeRO flat ranges ("flat"): the row-major flattened tensor, padded to a multiple
//     of the group size, split into equal contiguous ranges over the listed mesh axes.
// Uneven splits follow torch.chunk: n elements over k pieces use chunk c = ceil(n / k) and
// piece i = [min(i*c, n), min((i+1)*c, n)), so trailing pieces may be short or empty. With
// "strict", JAX's divisibility rule is enforced instead. An empty piece sits where its
// framework reports it: at offset n = the dim's (or flat tensor's) full size -- for DTensor
// also when an earlier mesh axis already split the dim (torch's
// compute_local_shape_and_global_offset), for a spec JAX's [0:0] of a size-0 dim.
//
// A layout never changes element values (invariant I1): it only decides which global indices
// a rank holds. Shards of distinct regions are disjoint and cover the tensor exactly once,
// which is what lets their fingerprints add up to the whole tensor's (I4).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "gen/region.h"
#include "store/status.h"

namespace seedstore {

/// A named device mesh: axes with sizes, and the rank at each mesh position.
///
/// Mesh positions are numbered row-major over the axes (last axis fastest). By default rank r
/// sits at position r; an explicit device array (as in jax.sharding.Mesh) puts rank
/// devices[p] at position p. A mesh with no axes has exactly one rank.
class Mesh {
 public:
  /// A one-rank mesh with no axes.
  Mesh() = default;

  /// Builds a mesh. `devices`, when not empty, lists the rank at each row-major position and
  /// must be a permutation of 0..world-1.
  /// Errors (kInvalidArgument, message prefixed "layout: "): `axes` and `shape` of different
  /// lengths; an empty or repeated axis name; a size < 1; a world size above INT_MAX;
  /// `devices` of the wrong length, with an out-of-range or repeated rank.
  static Result<Mesh> Create(std::vector<std::string> axes, std::vector<int> shape,
                             std::vector<int> devices = {});

  /// Product of the axis sizes (1 for a mesh without axes).
  int world_size() const { return world_; }
  /// Number of mesh axes.
  int num_axes() const { return static_cast<int>(axes_.size()); }
  /// Axis names, in mesh order.
  const std::vector<std::string>& axes() const { return axes_; }
  /// Axis sizes, in mesh order.
  const std::vector<int>& shape() const { return shape_; }
  /// Rank at each row-major mesh position (the identity unless given explicitly).
  const std::vector<int>& devices() const { return devices_; }
  /// Whether the device array was given explicitly (and is not the identity).
  bool has_explicit_devices() const { return explicit_devices_; }
  /// Index of the named axis, or -1 when the mesh has no such axis.
  int AxisIndex(std::string_view name) const;

  /// Mesh coordinates (one per axis) of `rank`.
  /// Errors: kInvalidArgument "layout: rank R outside the mesh of N ranks".
  Result<std::vector<int>> Coords(int rank) const;
  /// Rank at the given mesh coordinates. Precondition: one in-range coordinate per axis.
  int RankAt(const std::vector<int>& coords) const;

 private:
  std::vector<std::string> axes_;
  std::vector<int> shape_;
  std::vector<int> devices_{0};
  std::vector<int> position_of_{0};  // inverse of devices_
  int world_ = 1;
  bool explicit_devices_ = false;
};

/// How one matched tensor is spread over the mesh.
struct Placement {
  enum class Kind { kReplicated, kSpec, kDTensor, kFlat };
  /// One entry of DTensor placements: Shard(dim) (dim may be negative, counted from the end
  /// as in PyTorch) or Replicate().
  struct DTensorEntry {
    bool shard = false;
    int dim = 0;
  };

  Kind kind = Kind::kReplicated;
  /// kSpec: per tensor dim, the mesh axes (indices) sharding it, outermost first; an empty
  /// list means unsharded. May be shorter than the tensor's rank (trailing dims unsharded).
  std::vector<std::vector<int>> spec;
  /// kDTensor: exactly one entry per mesh axis.
  std::vector<DTensorEntry> dtensor;
  /// kFlat: the mesh axes forming the flat-sharding group, row-major (may be empty: G = 1).
  std::vector<int> flat_axes;
  /// Per-rule override of the layout's strict (divisibility) mode; unset = inherit.
  std::optional<bool> strict;
};

/// A placement applied to every tensor whose name matches `match` (fnmatch glob, no special
/// meaning for '.' or '/').
struct PlacementRule {
  std::string match;
  Placement placement;
};

/// The part of a tensor one rank holds, and who else holds the very same part.
struct Shard {
  /// The rank's region: an N-d box for replicated/spec/dtensor placements, a flat range
  /// [begin, end) of row-major indices for flat placements. `region.shape` is the global
  /// shape. Scalars (rank-0 tensors) are always the whole one-element box.
  Region region;
  /// Every rank whose region is identical to this one, sorted ascending; includes the rank
  /// the shard was asked for. Ranks holding distinct regions hold disjoint index sets,
  /// unless both regions are empty.
  std::vector<int> replicas;
  /// Position of the asked rank in `replicas` (0 = the canonical owner, e.g. the one that
  /// writes or fingerprints the region).
  int replica_index = 0;
  /// Whether the region holds no element.
  bool empty() const { return region.Count() == 0; }
};

/// A mesh plus placement rules: which global indices of which tensor each rank holds.
///
/// JSON form (every field other than "mesh" optional; unknown fields are errors):
///   {"mesh": {"axes": ["data", "tensor"], "shape": [2, 4], "devices": [...]},
///    "strict": false,
///    "placements": [{"match": "act", "spec": [["data", "tensor"], null]},
///                   {"match": "layers.*.w", "dtensor": ["Shard(0)", "Shard(1)"]},
///                   {"match": "flat.*", "flat": ["data"], "strict": true}]}
/// Rules are tried in order and the first match wins; unmatched tensors are replicated.
class Layout {
 public:
  /// One rank, everything replicated.
  Layout() = default;

  /// Builds and validates a layout. Errors (kInvalidArgument), named by rule index, e.g.
  /// "layout: placements[2].spec: mesh axis 'tensor' used twice": a mesh axis index out of
  /// range or used twice within one rule; a DTensor list whose length is not the number of
  /// mesh axes.
  static Result<Layout> Create(Mesh mesh, std::vector<PlacementRule> rules, bool strict = false);

  /// Parses the JSON form above. Errors (kInvalidArgument) name the field and value: unknown
  /// or missing fields, wrong JSON types, unknown mesh axes, an axis used twice in one
  /// placement, a malformed "Shard(d)"/"Replicate()" string, a DTensor list of the wrong
  /// length, non-positive mesh sizes, a device array that is not a permutation, a rule with
  /// zero or several of "spec"/"dtensor"/"flat". Checks that need a tensor's rank (a spec
  /// longer than the rank, Shard(d) out of range) happen in ShardOf.
  static Result<Layout> FromJson(const nlohmann::json& j);

  /// Parses JSON text. Errors: as FromJson, plus malformed JSON (kInvalidArgument, with the
  /// parser's line and column); every message is prefixed with "<origin>: ".
  static Result<Layout> Parse(std::string_view text, std::string_view origin = "<string>");

  /// Reads and parses a JSON file. Errors: kNotFound when the file cannot be opened, kIo on
  /// a read failure, otherwise as Parse; every message is prefixed with "file '<path>': ".
  static Result<Layout> Load(const std::string& path);

  /// `world` ranks on one axis "data", every tensor replicated. Precondition: world >= 1.
  static Layout Replicated(int world);
  /// FSDP1 / ZeRO-3: `world` ranks on one axis "data", every tensor flat-sharded over it.
  /// Precondition: world >= 1.
  static Layout Fsdp(int world);
  /// HSDP: mesh ("replicate", "shard") of replicate x shard ranks; every tensor flat-sharded
  /// over "shard" and replicated over "replicate". Preconditions: both >= 1.
  static Layout Hsdp(int replicate, int shard);

  /// The canonical JSON form; FromJson(ToJson()) gives an equal layout.
  nlohmann::json ToJson() const;

  /// Number of ranks in the mesh.
  int world_size() const { return mesh_.world_size(); }
  const Mesh& mesh() const { return mesh_; }
  const std::vector<PlacementRule>& rules() const { return rules_; }
  /// The layout-wide strict mode (rules may override it).
  bool strict() const { return strict_; }

  /// Index of the first rule matching `tensor_name`, or -1 (replicated).
  int MatchRule(const std::string& tensor_name) const;

  /// The shard of `tensor_name` (global `shape`) held by `rank`. Time O(world * rank(shape)).
  /// Errors (kInvalidArgument): rank outside the mesh; more than kMaxRank dims; a shape whose
  /// element count exceeds 2^64 - 1; a spec longer than the tensor's rank; Shard(d) out of
  /// range; in strict mode, a sharded dim (or, for flat, the element count) not divisible by
  /// the product of its mesh axes' sizes -- the message names tensor, dim, size and axes.
  Result<Shard> ShardOf(const std::string& tensor_name, const std::vector<uint64_t>& shape,
                        int rank) const;

  /// One Shard per distinct region of the tensor, ordered by owner (replicas[0]); each has
  /// replica_index 0. Together their regions cover every element exactly once (empty regions
  /// included, contributing nothing). Errors: as ShardOf.
  Result<std::vector<Shard>> DistinctShards(const std::string& tensor_name,
                                            const std::vector<uint64_t>& shape) const;

 private:
  Mesh mesh_;
  std::vector<PlacementRule> rules_;
  bool strict_ = false;
};

// DescribeRegion, SameRegion, BoxRegion, FlatRegion, LocalShape: gen/region.h.
/// A region as JSON: {"start": [...], "stop": [...]} or {"flat": [b, e]} (docs/FORMAT.md 10).
nlohmann::json RegionToJson(const Region& r);
/// Appends RegionToJson(r) as compact JSON text (what its dump() gives).
void AppendRegionJson(std::string& out, const Region& r);
/// The inverse, for a tensor of `shape`; kCorrupt ("bad flat range", "bad box ...") when the
/// JSON is malformed or the region does not lie in the tensor. Never throws.
Result<Region> RegionFromJson(const nlohmann::json& j, const std::vector<uint64_t>& shape);

/// torch.chunk's piece `i` of `n` items split `k` ways: [min(i*c, n), min((i+1)*c, n)) with
/// c = ceil(n / k). Exact for every uint64 n. Preconditions: k >= 1, 0 <= i < k.
void ChunkRange(uint64_t n, uint64_t k, uint64_t i, uint64_t* begin, uint64_t* end);

}  // namespace seedstore
