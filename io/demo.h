// The steps of `seedstore demo` (tools/cmd_demo.cc prints them): a lazily described model's
// shards under two layouts, every tensor's fingerprint under each as the sum of its distinct
// shards' (I4: both equal the whole tensor's), the lazy model saved as a store, a few tensors
// replaced by train-like updates (dense), and those verified after reopening.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "gen/materialize_cpu.h"
#include "io/h5store.h"
#include "store/catalog.h"
#include "store/layout.h"

namespace seedstore {

struct NamedLayout {
  std::string name;
  Layout layout;
};

/// The demo's two layouts of a Llama-style model (Hugging Face names), 8 ranks each:
/// "FSDP=8 (flat)" -- every tensor flat-sharded over fsdp=8 (FSDP1/ZeRO ranges) -- and
/// "FSDP=4 x TP=2" -- q/k/v, gate and up projections column-parallel (spec [tp, fsdp]), o and
/// down projections row-parallel ([fsdp, tp]), embeddings and lm_head as DTensor
/// [Shard(1), Shard(0)], norms replicated; any other tensor replicated.
Result<std::vector<NamedLayout>> DemoLayouts();

/// The fingerprint of tensor `i` of `c` as the sum of the fingerprints of its distinct shards
/// under `layout` (replicas counted once). By I4 it equals the whole tensor's, whatever the
/// layout. Errors: Layout::DistinctShards's (the tensor does not fit the layout) and
/// Catalog::FingerprintRegion's.
Result<Fingerprint> LayoutFingerprint(const Catalog& c, size_t i, const Layout& layout,
                                      CpuOptions o = {});

/// What MaterializeRank did: the bytes generated and the shards (one per tensor, empty ones
/// included).
struct RankShards {
  uint64_t bytes = 0;
  int shards = 0;
};

/// Materializes, on the CPU, the shard of every tensor of `c` that `rank` holds under
/// `layout` (one buffer at a time, reused). Errors: kInvalidArgument "rank R is outside the
/// mesh (N ranks)"; Layout::ShardOf's and Catalog::Read's.
Result<RankShards> MaterializeRank(const Catalog& c, const Layout& layout, int rank,
                                   CpuOptions o = {});

/// The tensors the demo replaces by trained values (names of the llama presets).
const std::vector<std::string>& DemoUpdatedTensors();

/// A train-like update of lazy tensor `i` of `c` as a source of dense values: each element
/// w + 0.001 * n, n drawn from normal() with the key fold_in(key of w, 1) (same generator and
/// flavour), the sum rounded to the tensor's dtype (bfloat16 or float32). The source reads `c`
/// while it is used: `c` must outlive it. Errors (kInvalidArgument, naming the tensor): a
/// dense tensor (no init spec to draw the noise from), a dtype other than bfloat16 or float32.
Result<BoxSource> TrainLikeUpdate(const Catalog& c, size_t i);

/// Writes the lazy model `spec` as a store at `path` (atomically), with `fingerprints[i]`
/// recorded for tensor i (none computed). Precondition: one fingerprint per tensor.
/// Errors: StoreWriter's.
Status SaveLazyStore(const std::string& path, const ModelSpec& spec,
                     const std::vector<Fingerprint>& fingerprints);

/// Replaces the tensors `names` of the store at `path` by TrainLikeUpdate of the same tensors
/// of `c` (the store's lazy model), atomically (ReplaceWithDense). Errors: kNotFound "demo:
/// tensor 'n' is not in the model" for a name `c` lacks; TrainLikeUpdate's; ReplaceWithDense's.
Status UpdateToDense(const std::string& path, const Catalog& c,
                     const std::vector<std::string>& names);

/// Reads dense tensor `name` of `store` whole -- every chunk's checksum is checked on the
/// read -- and recomputes its fingerprint, which must equal the recorded one; returns it.
/// Errors: kNotFound "demo: tensor 'n' is not in the store"; kInternal "demo: 'n' is still lazy
/// after the update"; kMismatch "demo: tensor 'n': recorded fingerprint does not match its data";
/// the read's (a corrupt chunk, named).
Result<Fingerprint> VerifyDense(const H5Store& store, const std::string& name);

}  // namespace seedstore
