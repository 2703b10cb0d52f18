// The proof of a save's written pieces: each read back from the files as its share of the
// tensor's fingerprint (Reshard in io/reshard.h; internal to io/).
#pragma once
#include <cstddef>

#include "store/catalog.h"

namespace seedstore {

/// The proof of one written piece -- global box or flat range `r` of dense tensor i of the
/// output `out` (a store or a distributed save) -- as its share of the tensor's fingerprint
/// (global indices). By default from the stored chunks (H5Store::ProveStored: every chunk's
/// stored bytes checked against the chunk-info table, whose fingerprints are the global
/// tensor's): with `cells` (every piece of the tensor stores whole cells of one chunk grid),
/// the cells whose first element r holds (DistCatalog::ProveCells); else less what a padded
/// piece stores beyond r (decoded: DistCatalog::PaddingFingerprint). With `full`, or for a
/// piece without a table in the global frame, decoded and fingerprinted chunk by chunk.
/// `hint`: r's index among tensor i's pieces when the caller knows it
/// (StoredChunks::ProveStoredPiece).
Result<Fingerprint> ProvePiece(const Catalog& out, size_t i, const Region& r, CpuOptions o,
                               bool full, bool cells, size_t hint);

}  // namespace seedstore
