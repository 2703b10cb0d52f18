#include "io/reshard_proof.h"

#include <vector>

#include "io/chunk_grid.h"
#include "io/parallel.h"
#include "io/store_reader.h"
#include "io/stored_chunks.h"
#include "store/layout.h"

namespace seedstore {

namespace {

// The proof's read-back of one written piece -- global box or flat range `r` of tensor i of the
// output `out` (a store or a distributed save) -- as its fingerprint with global indices. A box
// is read back one stored chunk at a time (the cells of the chunk grid of the stored part that
// holds it, Catalog::stored_chunks), through the catalog's Read (which decodes every chunk and
// checks its checksum), on o.threads threads that each reuse one buffer; a flat range or a
// contiguous tensor is read whole.
Result<Fingerprint> ReadBackFingerprint(const Catalog& out, size_t i, const Region& r,
                                        CpuOptions o) {
  const TensorRecord& t = out.tensors()[i];
  std::vector<uint64_t> chunk;
  Region grid = r;  // the chunk grid starts at grid.start
  const StoredChunks* sc = out.stored_chunks();
  if (sc && !r.flat && r.rank > 0 && r.Count() > 0) {
    for (const StoredPart& part : sc->StoredParts(i)) {
      if (!BoxWithin(r, part.owned)) continue;  // parts are disjoint: the one holding r
      SEEDSTORE_ASSIGN_OR_RETURN(auto sk, sc->PartStore(i, part.piece));
      chunk = sk.first->stored(sk.second).chunk;
      grid = part.stored;
      break;
    }
  }
  if (chunk.empty()) return out.FingerprintRegion(i, r, o);
  const GridTiles tiles(r, grid.start, chunk);
  const int threads = ThreadCount(o.threads, tiles.Count());
  std::vector<Fingerprint> parts(threads);
  std::vector<std::vector<unsigned char>> bufs(threads);
  const size_t es = DTypeSize(t.dtype);
  SEEDSTORE_RETURN_IF_ERROR(
      ParallelFor(tiles.Count(), threads, false, [&](uint64_t q, int th) -> Status {
        const Region tile = tiles.Tile(q);
        bufs[th].resize(tile.Count() * es);
        SEEDSTORE_RETURN_IF_ERROR(out.Read(i, tile, bufs[th].data(), CpuOptions{1}));
        parts[th].Add(FingerprintOf(t, tile, bufs[th].data(), CpuOptions{1}));
        return Status::Ok();
      }));
  Fingerprint f;
  for (const Fingerprint& p : parts) f.Add(p);
  return f;
}

}  // namespace

Result<Fingerprint> ProvePiece(const Catalog& out, size_t i, const Region& r, CpuOptions o,
                               bool full, bool cells, size_t hint) {
  if (const StoredChunks* sc = out.stored_chunks(); sc && !full) {
    SEEDSTORE_ASSIGN_OR_RETURN(std::optional<Fingerprint> f,
                               sc->ProveStoredPiece(i, r, cells, o, hint));
    if (f) return *f;
  }
  return ReadBackFingerprint(out, i, r, o);
}

}  // namespace seedstore
