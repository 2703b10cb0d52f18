// Inspect: what a checkpoint holds, tensor by tensor -- name, shape, dtype, lazy or dense,
// bytes in memory and on disk, fingerprint -- and the totals, for any source OpenCatalog opens
// (a spec, a store, a distributed save, safetensors files). `seedstore inspect` prints it.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "store/catalog.h"

namespace seedstore {

/// One listed tensor: how it is kept (store/catalog.h). `record` points into the catalog given
/// to Inspect and is valid while it lives.
struct InspectRow : TensorStorage {
  const TensorRecord* record = nullptr;
};

struct InspectReport {
  std::string source;  // as given to Inspect
  StorageKind kind = StorageKind::kOther;
  std::vector<InspectRow> rows;                // the matching tensors, in catalog order
  uint64_t parameters = 0;                     // elements of the listed tensors
  uint64_t lazy = 0, dense = 0;                // listed tensors of each kind
  uint64_t bytes_on_disk = 0;                  // sum of the rows'
  std::optional<int> rank;                     // Catalog::shard_rank: one rank's file
  uint64_t file_bytes = 0;                     // kStore: the file's size
  uint64_t seed = 0;                           // kStore, kDistributed: the root seed
  Generator generator = Generator::kThreefry;  // kStore, kDistributed: the default generator
  size_t files = 0;                            // kSafetensors: the number of files
  int world = 0;                               // kDistributed: the number of rank files

  /// {"source", "tensors": [row...], "parameters", "lazy", "dense"} plus "rank" when set, and
  /// "file_bytes", "seed", "generator" (kStore), "files" (kSafetensors) or "world", "seed",
  /// "generator" (kDistributed). A row is {"name", "shape", "dtype", "kind": "dense"|"lazy",
  /// "bytes", "bytes_on_disk", "fingerprint": 32 hex digits or null} plus, dense in a store,
  /// "chunk", "chunks", "chunk_info" and, for a piece, "piece": {"shape", "region"}; dense in
  /// a distributed save, "pieces" and "chunks"; lazy, "init", "generator" and "key" [k0, k1].
  nlohmann::json ToJson() const;
};

/// Lists the tensors of `c` whose names match `glob` (GlobMatch). `source` names the catalog
/// in the report; what each row says of storage is the catalog's (Catalog::Storage). Errors: a
/// glob that matches no tensor (CheckGlobMatches, kInvalidArgument); Catalog::Storage's (a
/// listed tensor of a store whose objects are damaged -- the others list as usual; a
/// distributed save whose storage cannot be counted).
Result<InspectReport> Inspect(const Catalog& c, const std::string& source,
                              const std::string& glob = "*");

}  // namespace seedstore
