#include "io/reshard_proof.h"

#include <vector>

#include "io/dist_catalog.h"
#include "io/parallel.h"
#include "io/store_reader.h"
#include "store/layout.h"

namespace seedstore {

namespace {

// The proof's read-back of one written piece -- global box or flat range `r` of tensor i of the
// output `out` (a store or a distributed save) -- as its fingerprint with global indices. A box
// is read back one stored chunk at a time (the cells of the stored chunk grid that meet r),
// through the catalog's Read (which decodes every chunk and checks its checksum), on o.threads
// threads that each reuse one buffer; a flat range or a contiguous tensor is read whole.
Result<Fingerprint> ReadBackFingerprint(const Catalog& out, size_t i, const Region& r, CpuOptions o) {
  const TensorRecord& t = out.tensors()[i];
  std::vector<uint64_t> chunk;
  Region grid = r;  // the chunk grid starts at grid.start
  if (!r.flat && r.rank > 0 && r.Count() > 0) {
    if (const auto* s = dynamic_cast<const H5Store*>(&out)) {
      chunk = s->stored(i).chunk;
      grid = WholeTensor(t.shape);
    } else if (const auto* d = dynamic_cast<const DistCatalog*>(&out)) {
      for (size_t p = 0; p < d->pieces(i).size(); ++p) {
        if (!SameRegion(d->pieces(i)[p].region, r)) continue;
        SEEDSTORE_ASSIGN_OR_RETURN(auto sk, d->PieceStore(i, p));
        chunk = sk.first->stored(sk.second).chunk;
        grid = d->pieces(i)[p].stored;
        break;
      }
    }
  }
  if (chunk.empty()) return out.FingerprintRegion(i, r, o);
  const GridTiles tiles(r, grid.start, chunk);
  const int threads = ThreadCount(o.threads, tiles.Count());
  std::vector<Fingerprint> parts(threads);
  std::vector<std::vector<unsigned char>> bufs(threads);
  const size_t es = DTypeSize(t.dtype);
  SEEDSTORE_RETURN_IF_ERROR(ParallelFor(tiles.Count(), threads, false, [&](uint64_t q, int th) -> Status {
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

// The proof of one written piece -- global box or flat range `r` of dense tensor i of the
// output `out` (a store or a distributed save) -- as its share of the tensor's fingerprint
// (global indices). By default from the stored chunks (H5Store::ProveStored: every chunk's
// stored bytes checked against the chunk-info table, whose fingerprints are the global
// tensor's): with `cells` (every piece of the tensor stores whole cells of one chunk grid),
// the cells whose first element r holds (DistCatalog::ProveCells); else less what a padded

}  // namespace

// piece stores beyond r (decoded: DistCatalog::PaddingFingerprint). With `full`, or for a
// piece without a table in the global frame, decoded and fingerprinted (ReadBackFingerprint).
Result<Fingerprint> ProvePiece(const Catalog& out, size_t i, const Region& r, CpuOptions o, bool full,
                               bool cells) {
  if (!full) {
    if (const auto* s = dynamic_cast<const H5Store*>(&out)) {
      if (!s->chunk_info(i).empty() && !s->tensors()[i].piece) return s->ProveStored(i, o);
    } else if (const auto* d = dynamic_cast<const DistCatalog*>(&out)) {
      for (size_t p = 0; p < d->pieces(i).size(); ++p) {
        if (!SameRegion(d->pieces(i)[p].region, r)) continue;
        if (cells) return d->ProveCells(i, p, o);
        SEEDSTORE_ASSIGN_OR_RETURN(auto sk, d->PieceStore(i, p));
        const TensorRecord& pr = sk.first->tensors()[sk.second];
        if (sk.first->chunk_info(sk.second).empty() || !pr.piece ||
            !SameRegion(*pr.piece, d->pieces(i)[p].stored))
          break;
        SEEDSTORE_ASSIGN_OR_RETURN(Fingerprint f, sk.first->ProveStored(sk.second, o));
        SEEDSTORE_ASSIGN_OR_RETURN(Fingerprint pad, d->PaddingFingerprint(i, p, o));
        f.Sub(pad);
        return f;
      }
    }
  }
  return ReadBackFingerprint(out, i, r, o);
}

}  // namespace seedstore
