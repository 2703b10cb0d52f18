// Stored-chunk access (Catalog::stored_chunks): how a catalog that keeps its dense tensors as
// chunks of seedstore stores -- a store (H5Store), a distributed save (DistCatalog) -- lets a
// writer copy those chunks as stored and a proof vouch for them without decoding them
// (Reshard, io/reshard.h).
#pragma once
#include <cstddef>
#include <memory>
#include <optional>
#include <utility>

#include "store/catalog.h"

namespace seedstore {

class H5Store;

/// One box part of a dense tensor kept as a chunked tensor of a seedstore store.
struct StoredPart {
  Region owned;    // global indices: the elements this part holds for readers
  Region stored;   // global indices: the box its store's tensor holds (owned, or padded around it)
  int piece = -1;  // the catalog's index of the part (a distributed save's piece); -1: the
                   // catalog is that store itself
};

class StoredChunks {
 public:
  virtual ~StoredChunks() = default;
  /// The box parts of dense tensor i: the whole tensor (a store), or the box pieces (a
  /// distributed save; flat pieces are none). Empty for a lazy tensor.
  virtual std::vector<StoredPart> StoredParts(size_t i) const = 0;
  /// The store holding part `piece` of dense tensor i (StoredPart::piece) and the tensor's
  /// index there. The store stays open while the caller holds it. Errors name the file
  /// (rank-file-missing, rank-file-corrupt).
  virtual Result<std::pair<std::shared_ptr<const H5Store>, size_t>> PartStore(size_t i,
                                                                              int piece) const = 0;
  /// `st`, an error reading part `piece` of tensor i from its store, as this catalog names it
  /// (a distributed save: rank-file-corrupt naming the save, rank and file). By default `st`.
  virtual Status PartError(size_t i, int piece, const Status& st) const {
    (void)i;
    (void)piece;
    return st;
  }
  /// The fingerprint (global frame) of the written piece -- global box or flat range `r` of
  /// dense tensor i -- proven from its stored chunks without decoding them: every chunk's stored
  /// bytes checked against its chunk-info table, whose fingerprints are summed (H5Store::
  /// ProveStored); `cells`: every piece of the tensor stores whole cells of one chunk grid
  /// (DistCatalog::ProveCells). nullopt when r is no piece whose table is in the global frame:
  /// the caller then decodes it. `hint`: where r is among tensor i's pieces, when the caller
  /// knows (a save proving its own plan: DistCatalog's index lists them in plan order), looked
  /// at first; any other value only costs a search.
  virtual Result<std::optional<Fingerprint>> ProveStoredPiece(size_t i, const Region& r, bool cells,
                                                              CpuOptions o, size_t hint) const = 0;
};

}  // namespace seedstore
