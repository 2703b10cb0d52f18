#include "io/chunk_copy.h"

#include <algorithm>

#include "io/store_reader.h"

namespace seedstore {

ChunkMatcher::ChunkMatcher(const Catalog& src, size_t i, const WriteOptions& w)
    : src_(src), chunks_(src.stored_chunks()), i_(i), w_(w) {
  if (chunks_) parts_ = chunks_->StoredParts(i);
}

Result<Region> ChunkMatcher::Pad(const Region& g, double max_padding) {
  if (g.flat || g.rank == 0 || g.Count() == 0) return g;
  SEEDSTORE_ASSIGN_OR_RETURN(const Stored* s, Holding(g.start));
  if (!s) return g;
  Region p = g;
  const Region& sb = s->part->stored;
  for (int d = 0; d < g.rank; ++d) {
    const uint64_t c = s->chunk[d], o = sb.start[d];
    p.start[d] = o + (g.start[d] - o) / c * c;
    p.stop[d] = std::min(g.shape[d], o + (g.stop[d] - o + c - 1) / c * c);
  }
  if (SameRegion(p, g) ||
      static_cast<double>(p.Count() - g.Count()) > max_padding * static_cast<double>(g.Count()))
    return g;
  return p;
}

Result<DenseChunking> ChunkMatcher::For(const Region& g) {
  DenseChunking c;
  if (g.flat || g.rank == 0 || g.Count() == 0) return c;
  SEEDSTORE_ASSIGN_OR_RETURN(const Stored* s, Holding(g.start));
  if (!s) return c;
  for (int d = 0; d < g.rank; ++d)
    if ((g.start[d] - s->part->stored.start[d]) % s->chunk[d] != 0 ||
        s->chunk[d] > g.stop[d] - g.start[d])
      return c;
  c.chunk = s->chunk;
  c.raw = [this, g, chunk = s->chunk](uint64_t, const Region& local, StoredChunk* out) {
    return Copy(g, chunk, local, out);
  };
  return c;
}

Result<const ChunkMatcher::Stored*> ChunkMatcher::Holding(const uint64_t* at) {
  const TensorRecord& t = src_.tensors()[i_];
  for (const Part& p : parts_) {
    bool in = true;
    for (int d = 0; d < p.owned.rank; ++d)
      in &= p.owned.start[d] <= at[d] && at[d] < p.owned.stop[d];
    if (!in) continue;
    std::lock_guard<std::mutex> l(mu_);
    auto it = stored_.find(&p);
    if (it == stored_.end()) {
      Stored s;
      s.part = &p;
      SEEDSTORE_ASSIGN_OR_RETURN(auto sk, chunks_->PartStore(i_, p.piece));
      const H5Store* store = sk.first.get();
      s.k = sk.second;
      const StoredTensor& st = store->stored(s.k);
      if (StoreWriter::CopiesChunksOf(st, t.name, t.dtype, w_)) s.chunk = st.chunk;
      const TensorRecord& sr = store->tensors()[s.k];
      s.global_frame =
          sr.fp_seed() == t.fp_seed() && (sr.piece ? SameRegion(*sr.piece, p.stored) : p.piece < 0);
      it = stored_.emplace(&p, std::move(s)).first;
    }
    return it->second.chunk.empty() ? nullptr : &it->second;
  }
  return static_cast<const Stored*>(nullptr);
}

Result<bool> ChunkMatcher::Copy(const Region& g, const std::vector<uint64_t>& chunk,
                                const Region& local, StoredChunk* out) {
  uint64_t at[kMaxRank];
  for (int d = 0; d < g.rank; ++d) at[d] = g.start[d] + local.start[d];
  SEEDSTORE_ASSIGN_OR_RETURN(const Stored* s, Holding(at));
  if (!s || s->chunk != chunk) return false;
  const Region& pb = s->part->stored;
  uint64_t j = 0;
  for (int d = 0; d < g.rank; ++d) {
    const uint64_t c = chunk[d], rel = at[d] - pb.start[d];
    if (rel % c != 0 || std::min(at[d] + c, pb.stop[d]) != std::min(at[d] + c, g.stop[d]))
      return false;
    j = j * ((pb.stop[d] - pb.start[d] + c - 1) / c) + rel / c;
  }
  // The source chunk's recorded fingerprint carries over when the stored part's frame is
  // the global tensor's (a store's tensor, or a rank file's piece recorded as such): then the
  // chunk is not decoded, its stored bytes are checked against the chunk-info table.
  SEEDSTORE_ASSIGN_OR_RETURN(auto sk, chunks_->PartStore(i_, s->part->piece));  // held while read
  Status st = sk.first->ReadStoredChunk(s->k, j, out, /*decode=*/!s->global_frame);
  if (st.ok()) return true;
  return chunks_->PartError(i_, s->part->piece, st);
}

// Pads the plan's box pieces to the chunk grid of the source's stored parts where that lets
// their chunks be copied (ChunkMatcher::Pad). Deterministic: every process computes the same.
Status PadPieces(const Catalog& src, const WriteOptions& wo, double max_padding, Plan* plan) {
  if (!(max_padding > 0)) return Status::Ok();
  for (size_t i = 0; i < plan->pieces.size(); ++i) {
    if (plan->pieces[i].empty()) continue;
    ChunkMatcher m(src, i, wo);
    for (DistCatalog::Piece& p : plan->pieces[i]) {
      SEEDSTORE_ASSIGN_OR_RETURN(const Region stored, m.Pad(p.region(), max_padding));
      p.set_stored(stored);
    }
  }
  return Status::Ok();
}

}  // namespace seedstore
