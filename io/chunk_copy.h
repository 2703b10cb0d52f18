// Copying stored chunks from a source into a save's rank files without decoding them, and
// padding pieces to the source's chunk grid so that they can be (docs/FORMAT.md 10, "Padded
// pieces"; Reshard in io/reshard.h; internal to io/).
#pragma once
#include <cstddef>
#include <map>
#include <mutex>
#include <vector>

#include "io/save_plan.h"
#include "io/store_format.h"
#include "io/store_writer.h"
#include "io/stored_chunks.h"
#include "store/catalog.h"

namespace seedstore {

/// Finds the stored source chunks that an output piece of dense tensor i can copy as stored.
/// The source's stored parts: the tensor itself (a store) or its box pieces (a distributed
/// save, flat pieces excluded); other catalogs have none. A part owns its piece's region and
/// stores its (possibly padded, docs/FORMAT.md 10) stored box, whose chunk grid starts at the
/// stored box's start. Thread-safe.
class ChunkMatcher {
 public:
  ChunkMatcher(const Catalog& src, size_t i, const WriteOptions& w);

  /// The box an output piece owning the global box `g` stores (docs/FORMAT.md 10, "Padded
  /// pieces"): g itself, or g widened in each dim to the chunk grid of the stored source part
  /// owning g's first element (clipped to the tensor), when g is off that grid and widening
  /// adds at most `max_padding` times g's elements -- then every chunk of the piece can be
  /// copied from a source that stores the same grid.
  Result<Region> Pad(const Region& g, double max_padding);

  /// How the writer chunks the output piece stored as global box `g`: like the source part
  /// owning g's first element when g starts on its chunk grid and spans at least one of its
  /// chunks in every dim (then its aligned chunks can be copied), else the writer's rule.
  Result<DenseChunking> For(const Region& g);

 private:
  using Part = StoredPart;
  struct Stored {
    const Part* part = nullptr;
    size_t k = 0;                 // the tensor's index in its store
    std::vector<uint64_t> chunk;  // its chunk shape
    bool global_frame = false;    // its fingerprints are the global tensor's (TensorRecord::piece)
  };

  // The stored source part owning global index `at`, when its chunks could be copied by this
  // writer (null otherwise).
  Result<const Stored*> Holding(const uint64_t* at);

  // Output chunk `local` (clipped, local indices) of the piece stored as global box `g`, whose
  // chunk shape is `chunk`: copied when a stored source chunk has the same full box [at, at +
  // chunk) and is clipped alike (so its unfiltered bytes, edge padding included, are the same).
  Result<bool> Copy(const Region& g, const std::vector<uint64_t>& chunk, const Region& local,
                    StoredChunk* out);

  const Catalog& src_;
  // The source's stored-chunk access (null: it has none). Its stores are fetched for each use
  // (PartStore): a distributed save keeps only so many rank files open, and holding every one
  // a tensor's pieces touch would defeat that.
  const StoredChunks* chunks_;
  const size_t i_;
  const WriteOptions& w_;
  std::vector<Part> parts_;
  std::mutex mu_;
  std::map<const Part*, Stored> stored_;
};

/// Pads the plan's box pieces to the chunk grid of the source's stored parts where that lets
/// their chunks be copied (ChunkMatcher::Pad). Deterministic: every process computes the same.
Status PadPieces(const Catalog& src, const WriteOptions& wo, double max_padding, Plan* plan);

}  // namespace seedstore
