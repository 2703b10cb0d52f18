#include "io/rank_file_writer.h"

#include <sys/resource.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>

#include "io/chunk_copy.h"
#include "io/chunk_grid.h"
#include "io/store_writer.h"

namespace seedstore {

namespace {

// The most bytes of the source read at once for one piece, or for pieces that share it.
constexpr uint64_t kWindowBytes = uint64_t{32} << 20;

// The source of a large piece `g` of tensor i (local coordinates), read a band at a time:
// band k is rows [k * rows, (k + 1) * rows) of the piece's local shape along dim 0 with all of
// its other dims, `rows` a multiple of the piece's chunk rows so that no chunk straddles two
// bands. The writer's threads ask for the piece's chunks about in order; each band is read
// from the source once and kept while the next is read. So a source chunk that many of the
// piece's chunks cut -- a flat piece's chunks of whole rows across 2-d source chunks -- is
// decoded once per band, not once per chunk of the piece.
class BandSource {
 public:
  BandSource(const Catalog& src, size_t i, const Region& g, uint64_t rows)
      : src_(src), i_(i), g_(g), local_(LocalShape(g)), rows_(rows) {
    es_ = DTypeSize(src.tensors()[i].dtype);
    row_elems_ = 1;
    for (size_t d = 1; d < local_.size(); ++d) row_elems_ *= local_[d];
  }

  Status Read(const Region& local, void* out) {
    if (local.Count() == 0) return Status::Ok();
    const uint64_t k = local.start[0] / rows_;
    if ((local.stop[0] - 1) / rows_ != k) return Direct(local, out);  // not on the band grid
    std::lock_guard<std::mutex> l(mu_);
    Band* b = bands_[0].k == k ? &bands_[0] : bands_[1].k == k ? &bands_[1] : nullptr;
    if (!b) {  // replace the band read longest ago
      b = bands_[0].used <= bands_[1].used ? &bands_[0] : &bands_[1];
      SEEDSTORE_RETURN_IF_ERROR(Load(k, b));
    }
    b->used = ++clock_;
    uint64_t bext[kMaxRank], off[kMaxRank], ext[kMaxRank];
    for (int d = 0; d < local.rank; ++d) {
      bext[d] = d == 0 ? b->rows : local_[d];
      off[d] = local.start[d] - (d == 0 ? k * rows_ : 0);
      ext[d] = local.stop[d] - local.start[d];
    }
    CopyBox(b->bytes.data(), bext, off, static_cast<unsigned char*>(out), ext, nullptr, ext,
            local.rank, es_);
    return Status::Ok();
  }

 private:
  struct Band {
    uint64_t k = ~uint64_t{0}, rows = 0, used = 0;
    std::vector<unsigned char> bytes;
  };

  // The global region of local rows [r0, r1).
  Region Rows(uint64_t r0, uint64_t r1) const {
    if (g_.flat) return FlatRegion(src_.tensors()[i_].shape, g_.begin + r0, g_.begin + r1);
    Region r = g_;
    r.start[0] = g_.start[0] + r0;
    r.stop[0] = g_.start[0] + r1;
    return r;
  }

  Status Load(uint64_t k, Band* b) {
    const uint64_t r0 = k * rows_, r1 = std::min(local_[0], r0 + rows_);
    b->k = ~uint64_t{0};
    b->rows = r1 - r0;
    b->bytes.resize(b->rows * row_elems_ * es_);
    SEEDSTORE_RETURN_IF_ERROR(src_.Read(i_, Rows(r0, r1), b->bytes.data(), CpuOptions{1}));
    b->k = k;
    return Status::Ok();
  }

  // A box off the band grid: read from the source as it is.
  Status Direct(const Region& local, void* out) const {
    if (g_.flat) return src_.Read(i_, Rows(local.start[0], local.stop[0]), out, CpuOptions{1});
    Region glob = g_;
    for (int d = 0; d < g_.rank; ++d) {
      glob.start[d] = g_.start[d] + local.start[d];
      glob.stop[d] = g_.start[d] + local.stop[d];
    }
    return src_.Read(i_, glob, out, CpuOptions{1});
  }

  const Catalog& src_;
  const size_t i_;
  const Region g_;
  const std::vector<uint64_t> local_;
  const uint64_t rows_;
  size_t es_ = 1;
  uint64_t row_elems_ = 1, clock_ = 0;
  std::mutex mu_;
  Band bands_[2];
};

}  // namespace

size_t MaxOpenRankFiles(int threads) {
  struct rlimit lim;
  size_t most = 64;
  if (::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY)
    most = std::min<size_t>(most, lim.rlim_cur / 4 / std::max(1, threads));
  return std::max<size_t>(most, 8);
}

Status AddPiece(StoreWriter& w, const Catalog& src, size_t i, const Region& g,
                DenseChunking chunking, bool as_piece, const void* data, uint64_t* counts,
                Fingerprint* fp) {
  const TensorRecord& t = src.tensors()[i];
  const std::vector<uint64_t> shape = t.shape;
  BoxSource source = [&src, i, g, shape](const Region& local, void* out) -> Status {
    if (g.flat) {
      return src.Read(i, FlatRegion(shape, g.begin + local.start[0], g.begin + local.stop[0]), out,
                      CpuOptions{1});
    }
    Region glob = g;
    for (int d = 0; d < g.rank; ++d) {
      glob.start[d] = g.start[d] + local.start[d];
      glob.stop[d] = g.start[d] + local.stop[d];
    }
    return src.Read(i, glob, out, CpuOptions{1});
  };
  if (as_piece) chunking.piece = g;
  const StoreWriter::ChunkCounts before = w.chunk_counts();
  if (!data) data = src.HostData(i, g);  // a live job's own shard buffer
  const size_t es = DTypeSize(t.dtype);
  if (data) {
    SEEDSTORE_RETURN_IF_ERROR(w.AddDense(t.name, LocalShape(g), t.dtype, data, {}, chunking));
  } else if (!chunking.raw && g.rank > 0 && g.Count() * es > kWindowBytes) {
    // Large and encoded: read in bands of whole chunk rows (BandSource), the chunk shape fixed
    // here so that the bands follow it -- unless one row of chunks is itself over the window
    // (very wide rows), which is then read chunk by chunk as below.
    const std::vector<uint64_t> local = LocalShape(g);
    if (chunking.chunk.empty()) chunking.chunk = ChooseChunk(local, es, w.options().chunk_bytes);
    uint64_t row_bytes = es;
    for (size_t d = 1; d < local.size(); ++d) row_bytes *= local[d];
    const uint64_t c0 = chunking.chunk.empty() ? local[0] : chunking.chunk[0];
    if (row_bytes * c0 <= kWindowBytes) {
      const uint64_t rows = kWindowBytes / (row_bytes * c0) * c0;
      auto band = std::make_shared<BandSource>(src, i, g, rows);
      BoxSource banded = [band](const Region& l, void* out) { return band->Read(l, out); };
      SEEDSTORE_RETURN_IF_ERROR(w.AddDense(t.name, local, t.dtype, banded, {}, chunking));
    } else {
      SEEDSTORE_RETURN_IF_ERROR(w.AddDense(t.name, local, t.dtype, source, {}, chunking));
    }
  } else {
    SEEDSTORE_RETURN_IF_ERROR(w.AddDense(t.name, LocalShape(g), t.dtype, source, {}, chunking));
  }
  const StoreWriter::ChunkCounts after = w.chunk_counts();
  counts[0] += after.copied - before.copied;
  counts[1] += after.encoded - before.encoded;
  counts[2] += after.stored_bytes - before.stored_bytes;
  if (fp) *fp = w.last_dense_fingerprint();
  return Status::Ok();
}

namespace {

// The smallest box (or flat range) holding boxes (or flat ranges) a and b of one tensor.
Region Cover(const Region& a, const Region& b) {
  Region c = a;
  if (a.flat) {
    c.begin = std::min(a.begin, b.begin);
    c.end = std::max(a.end, b.end);
    return c;
  }
  for (int d = 0; d < a.rank; ++d) {
    c.start[d] = std::min(a.start[d], b.start[d]);
    c.stop[d] = std::max(a.stop[d], b.stop[d]);
  }
  return c;
}

}  // namespace

// Writes the files of layout ranks `ranks` (files[k] for ranks[k]), tensor by tensor with all
// of them open; per tensor i, adds the chunks copied and encoded and the bytes stored to
// counts[kCounts * i + 0, 1, 2]. The pieces of a tensor that these ranks hold are written in
// plan order; those whose chunks are all encoded (none lines up with a stored source chunk) go
// in runs of neighbours read from the source as one covering box of at most kWindowBytes (and
// at most twice the runs' own elements): so a source chunk that many small pieces share --
// flat pieces over hundreds of ranks -- is read and decoded once per run, not once per piece.
// The fingerprint each piece k of tensor i is recorded with goes to piece_fps[p], p =
// plan.first_piece[i] + k (two words each; other entries are left as they are).
Status WriteRankFiles(const Catalog& src, const Plan& plan, const std::vector<int>& ranks,
                      const std::vector<std::string>& files, const DistSaveOptions& o,
                      uint64_t* bytes, std::vector<uint64_t>& counts, PieceReports& reports) {
  std::vector<std::unique_ptr<StoreWriter>> w(ranks.size());
  auto record = [&](size_t i, size_t k, StoreWriter& sw, const Fingerprint& f) {
    reports.Set(plan.first_piece[i] + k, f, sw.last_dense_cells());
  };
  uint64_t seed;
  Generator gen;
  RootSeedOf(src, &seed, &gen);
  std::map<int, size_t> slot;
  WriteOptions wo = o.write;
  wo.cells = o.rank_file_version == kCellsFormatVersion;
  wo.remove_stale_temporaries = false;
  for (size_t k = 0; k < ranks.size(); ++k) {
    SEEDSTORE_ASSIGN_OR_RETURN(w[k], StoreWriter::Create(files[k], seed, gen, wo));
    slot[ranks[k]] = k;
  }
  const auto& ts = src.tensors();
  std::vector<unsigned char> window, piece;
  for (size_t i = 0; i < ts.size(); ++i) {
    const size_t es = DTypeSize(ts[i].dtype);
    ChunkMatcher matcher(src, i, o.write);
    struct Item {
      size_t k;  // index in plan.pieces[i]
      StoreWriter* w;
      DenseChunking chunking;
      bool shared;  // may be read as part of a covering box
    };
    std::vector<Item> items;
    for (size_t k = 0; k < plan.pieces[i].size(); ++k) {
      const auto it = slot.find(plan.pieces[i][k].rank);
      if (it == slot.end()) continue;
      const Region g = plan.pieces[i][k].stored();
      SEEDSTORE_ASSIGN_OR_RETURN(DenseChunking c, matcher.For(g));
      const bool shared = !c.raw && g.rank > 0 && g.Count() > 0 && g.Count() * es <= kWindowBytes &&
                          !src.HostData(i, g);
      items.push_back({k, w[it->second].get(), std::move(c), shared});
      *bytes += plan.pieces[i][k].Count() * es;
    }
    for (size_t a = 0; a < items.size();) {
      // The run [a, b) and the box it is read as.
      Region cover = plan.pieces[i][items[a].k].stored();
      uint64_t own = cover.Count();
      size_t b = a + 1;
      for (; items[a].shared && b < items.size() && items[b].shared; ++b) {
        const Region g = plan.pieces[i][items[b].k].stored();
        if (g.flat != cover.flat) break;
        const Region c = Cover(cover, g);
        if (c.Count() * es > kWindowBytes || c.Count() > 2 * (own + g.Count())) break;
        cover = c;
        own += g.Count();
      }
      if (b == a + 1) {  // alone: read as it is written, chunk by chunk (or copied as stored)
        Fingerprint f;
        SEEDSTORE_RETURN_IF_ERROR(AddPiece(*items[a].w, src, i, cover, items[a].chunking, true,
                                           nullptr, &counts[kCounts * i], &f));
        record(i, items[a].k, *items[a].w, f);
        ++a;
        continue;
      }
      // Grown, never shrunk: resize() zeroes what it adds, a pass over up to kWindowBytes
      // that the read then overwrites.
      if (window.size() < cover.Count() * es) window.resize(cover.Count() * es);
      SEEDSTORE_RETURN_IF_ERROR(src.Read(i, cover, window.data(), CpuOptions{1}));
      uint64_t cext[kMaxRank];
      for (int d = 0; d < cover.rank; ++d) cext[d] = cover.stop[d] - cover.start[d];
      for (; a < b; ++a) {
        const Region g = plan.pieces[i][items[a].k].stored();
        const unsigned char* data;
        if (g.flat) {
          data = window.data() + (g.begin - cover.begin) * es;
        } else {
          uint64_t off[kMaxRank], ext[kMaxRank];
          for (int d = 0; d < g.rank; ++d) {
            off[d] = g.start[d] - cover.start[d];
            ext[d] = g.stop[d] - g.start[d];
          }
          if (piece.size() < g.Count() * es) piece.resize(g.Count() * es);
          CopyBox(window.data(), cext, off, piece.data(), ext, nullptr, ext, g.rank, es);
          data = piece.data();
        }
        Fingerprint f;
        SEEDSTORE_RETURN_IF_ERROR(AddPiece(*items[a].w, src, i, g, items[a].chunking, true, data,
                                           &counts[kCounts * i], &f));
        record(i, items[a].k, *items[a].w, f);
      }
    }
  }
  return StoreWriter::CommitAll(w);
}

}  // namespace seedstore
