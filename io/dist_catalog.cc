#include "io/dist_catalog.h"

#include <hdf5.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "io/atomic_file.h"
#include "io/chunk_grid.h"
#include "io/h5_handle.h"
#include "io/master_seal.h"
#include "io/parallel.h"
#include "io/path.h"
#include "io/rank_files.h"
#include "store/json_text.h"

namespace seedstore {

namespace {

using json = nlohmann::json;

bool FileExists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

// Region `local` of tensor k of rank file `s` (a file from before piece records, whose
// fingerprints are in its own frame) read and hashed as region `global` of tensor `t`.
Result<Fingerprint> ReadAndFingerprint(const H5Store& s, int k, const Region& local,
                                       const TensorRecord& t, const Region& global, CpuOptions o) {
  std::vector<unsigned char> tmp(local.Count() * DTypeSize(t.dtype));
  SEEDSTORE_RETURN_IF_ERROR(s.Read(k, local, tmp.data(), o));
  return FingerprintOf(t, global, tmp.data(), o);
}

// The part of `box` (global indices) that box piece `p` serves, as a region of its rank
// file's tensor (the stored box's local indices); lo/hi get the part in global indices.
// False when the box does not meet the piece.
bool PiecePart(const DistCatalog::Piece& p, const Region& box, Region* local, uint64_t* lo,
               uint64_t* hi) {
  const Region g = p.region(), sb = p.stored();
  std::vector<uint64_t> ls(box.rank), lp(box.rank);
  for (int d = 0; d < box.rank; ++d) {
    lo[d] = std::max(box.start[d], g.start[d]);
    hi[d] = std::min(box.stop[d], g.stop[d]);
    if (hi[d] <= lo[d]) return false;
    ls[d] = lo[d] - sb.start[d];
    lp[d] = hi[d] - sb.start[d];
  }
  *local = BoxRegion(LocalShape(sb), ls, lp);
  return true;
}

// bad-index of save `path`: "<kDistIndexPath>: <m>".
Status BadDistIndex(const std::string& path, const std::string& m) {
  return DistError("bad-index", Code::kCorrupt, path, -1, "",
                   std::string(kDistIndexPath) + ": " + m);
}

// Reads /distributed/index of the open master `file` of save `path`, its checksum verified
// (bad-index: missing, unreadable, no seedstore.xxh3, checksum mismatch).
Result<std::string> ReadDistIndexText(hid_t file, const std::string& path) {
  auto bad = [&](const std::string& m) { return BadDistIndex(path, m); };
  std::string text;
  Hid d(H5Dopen2(file, kDistIndexPath, H5P_DEFAULT), H5Dclose);
  if (d.get() < 0) return bad("missing");
  Hid space(H5Dget_space(d.get()), H5Sclose);
  const hssize_t n = H5Sget_simple_extent_npoints(space.get());
  if (n < 0) return bad("unreadable");
  text.resize(n);
  if (H5Dread(d.get(), H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, text.data()) < 0)
    return bad("unreadable");
  uint64_t h = 0;
  Hid a(H5Aopen(d.get(), "seedstore.xxh3", H5P_DEFAULT), H5Aclose);
  if (a.get() < 0 || H5Aread(a.get(), H5T_NATIVE_UINT64, &h) < 0) return bad("no seedstore.xxh3");
  if (h != Checksum64(text.data(), text.size())) return bad("checksum mismatch");
  return text;
}

// The pieces the index lists for dense tensor `rec` of the save at `path`: each piece's rank,
// region, stored box (holding the region), recorded fingerprint and cells; together they must
// cover the tensor (bad-index otherwise). Ranks beyond the world, and cells in an index of a
// version without them, are left to the caller (DistCatalog::Open, which knows both only
// after the parse). Throws what json::at throws on a missing field.
Result<std::vector<DistCatalog::Piece>> ParsePieces(const json& pieces, const TensorRecord& rec,
                                                    const std::string& path) {
  using Piece = DistCatalog::Piece;
  auto bad = [&](const std::string& m) { return BadDistIndex(path, m); };
  const std::string& name = rec.name;
  std::vector<Piece> ps;
  uint64_t covered = 0;
  // Each field looked up once (an index of 740,000 pieces has 20 million of them).
  auto field = [](const json& o, const char* key) -> const json* {
    const auto it = o.find(key);
    return it == o.end() ? nullptr : &*it;
  };
  for (const auto& p : pieces) {
    const int rank = p.at("rank");
    if (rank < 0) return bad("piece rank out of range");
    auto reg = RegionFromJson(p.at("region"), rec.shape);
    if (!reg.ok()) return bad("tensor '" + name + "': " + reg.status().message());
    Piece piece(rank, *reg);
    if (const json* st = field(p, "stored")) {
      auto sb = RegionFromJson(*st, rec.shape);
      if (!sb.ok()) return bad("tensor '" + name + "': stored: " + sb.status().message());
      if (reg->flat || sb->flat || !BoxWithin(*reg, *sb))
        return bad("tensor '" + name + "': stored box " + DescribeRegion(*sb) +
                   " does not hold the piece " + DescribeRegion(*reg));
      piece.set_stored(*sb);
    }
    if (const json* fp = field(p, "fingerprint")) {
      auto f = fp->is_string() ? ParseFingerprintHex(fp->get_ref<const std::string&>())
                               : Result<Fingerprint>(InvalidArgument("not a string"));
      if (!f.ok())
        return bad("tensor '" + name + "' piece " + std::to_string(ps.size()) +
                   ": fingerprint: " + f.status().message());
      piece.fingerprint = *f;
    }
    if (const json* c = field(p, "cells")) {  // docs/FORMAT.md 11
      const Region stored = piece.stored();
      const size_t crank = stored.flat ? 1 : static_cast<size_t>(stored.rank);
      const json* set = c->is_object() ? field(*c, "set") : nullptr;
      const json* first = c->is_object() ? field(*c, "first") : nullptr;
      const json* chunk = c->is_object() ? field(*c, "chunk") : nullptr;
      bool ok = set && set->is_number_unsigned() && set->get<uint64_t>() <= 1u << 30 && first &&
                first->is_number_unsigned() && chunk && chunk->is_array() && chunk->size() == crank;
      PieceCells pc;
      if (ok) {
        pc.set = set->get<int>();
        pc.first = first->get<uint64_t>();
        const std::vector<uint64_t> local = LocalShape(stored);
        for (size_t d = 0; ok && d < crank; ++d) {
          const json& x = (*chunk)[d];
          ok = x.is_number_unsigned() && x.get<uint64_t>() >= 1 && x.get<uint64_t>() <= local[d];
          if (ok) pc.chunk.push_back(x.get<uint64_t>());
        }
      }
      if (!ok)
        return bad("tensor '" + name + "' piece " + std::to_string(ps.size()) +
                   ": 'cells' needs a version " + std::to_string(kCellsFormatVersion) +
                   " index and 'set', 'first' and a 'chunk' shape that fits the piece");
      piece.set_cells(pc);
    }
    covered += piece.Count();
    ps.push_back(std::move(piece));
  }
  if (covered != rec.NumElements()) return bad("pieces of '" + name + "' do not cover it");
  return ps;
}

// One element of the index's "tensors": its record, pieces (ParsePieces) and storage totals.
struct IndexedTensor {
  TensorRecord rec;
  std::vector<DistCatalog::Piece> pieces;
  std::optional<DistCatalog::StoredTotals> storage;
};
Result<IndexedTensor> ParseIndexedTensor(const json& t, const H5Store& master,
                                         const std::string& path) {
  auto bad = [&](const std::string& m) { return BadDistIndex(path, m); };
  IndexedTensor out;
  try {
    const std::string name = t.at("name");
    if (name.empty()) return bad("a tensor has an empty name");
    if (t.at("kind") == "lazy") {
      const int k = master.Find(name);
      if (k < 0) return bad("lazy tensor '" + name + "' is not in the master store");
      out.rec = master.tensors()[k];
      return out;
    }
    TensorRecord& rec = out.rec;
    rec.name = name;
    rec.shape = t.at("shape").get<std::vector<uint64_t>>();
    SEEDSTORE_ASSIGN_OR_RETURN(rec.dtype, ParseDType(t.at("dtype").get<std::string>()));
    if (Status vs = ValidateShape(rec.shape, rec.dtype, "tensor '" + name + "' shape"); !vs.ok())
      return bad(vs.message());
    SEEDSTORE_ASSIGN_OR_RETURN(Fingerprint fp,
                               ParseFingerprintHex(t.at("fingerprint").get<std::string>()));
    rec.fingerprint = fp;
    SEEDSTORE_ASSIGN_OR_RETURN(out.pieces, ParsePieces(t.at("pieces"), rec, path));
    if (t.contains("chunks") || t.contains("stored_bytes")) {
      if (!t.contains("chunks") || !t.contains("stored_bytes") ||
          !t["chunks"].is_number_unsigned() || !t["stored_bytes"].is_number_unsigned())
        return bad("tensor '" + name +
                   "': 'chunks' and 'stored_bytes' must both be unsigned integers");
      out.storage =
          DistCatalog::StoredTotals{t["chunks"].get<uint64_t>(), t["stored_bytes"].get<uint64_t>()};
    }
    return out;
  } catch (const std::exception& e) {
    return bad(e.what());
  }
}

}  // namespace

DistCatalog::~DistCatalog() = default;

DistCatalog::Piece::Piece(int r, const Region& region)
    : rank(r), dims_(static_cast<uint8_t>(region.rank)), flat_(region.flat) {
  c_.assign(region.shape, region.shape + region.rank);
  AppendRegionCoords(region, &c_);
}

Region DistCatalog::Piece::At(size_t off, bool flat) const {
  Region r;
  r.rank = dims_;
  r.flat = flat;
  std::copy(c_.begin(), c_.begin() + dims_, r.shape);
  const uint64_t* c = c_.data() + off;
  if (flat) {
    r.begin = c[0];
    r.end = c[1];
  } else {
    std::copy(c, c + dims_, r.start);
    std::copy(c + dims_, c + 2 * dims_, r.stop);
  }
  return r;
}

Region DistCatalog::Piece::region() const { return At(dims_, flat_); }

uint64_t DistCatalog::Piece::Count() const {
  const uint64_t* c = c_.data() + dims_;
  if (flat_) return c[1] - c[0];
  uint64_t n = 1;
  for (int d = 0; d < dims_; ++d) n *= c[dims_ + d] - c[d];
  return n;
}

Region DistCatalog::Piece::stored() const {
  if (!padded()) return region();
  return At(dims_ + (flat_ ? 2 : 2 * dims_), stored_flat_);
}

void DistCatalog::Piece::set_stored(const Region& s) {
  const size_t at = dims_ + (flat_ ? 2 : 2 * dims_);
  const std::vector<uint64_t> chunk(c_.end() - chunk_len_, c_.end());  // goes back after
  c_.resize(at);
  stored_len_ = 0;
  if (!SameRegion(s, region())) {
    AppendRegionCoords(s, &c_);
    stored_len_ = static_cast<uint8_t>(c_.size() - at);
    stored_flat_ = s.flat;
  }
  c_.insert(c_.end(), chunk.begin(), chunk.end());
}

bool DistCatalog::Piece::BoxHolds(const uint64_t* x) const {
  if (flat_) return false;
  const uint64_t* c = c_.data() + dims_;
  for (int d = 0; d < dims_; ++d)
    if (x[d] < c[d] || x[d] >= c[dims_ + d]) return false;
  return true;
}

std::optional<PieceCells> DistCatalog::Piece::cells() const {
  if (!has_cells()) return std::nullopt;
  const auto chunk = c_.end() - chunk_len_;
  return PieceCells{cell_set_, first_cell_, std::vector<uint64_t>(chunk, c_.end())};
}

void DistCatalog::Piece::set_cells(const std::optional<PieceCells>& c) {
  c_.resize(c_.size() - chunk_len_);
  chunk_len_ = 0;
  cell_set_ = -1;
  first_cell_ = 0;
  if (!c) return;
  cell_set_ = c->set;
  first_cell_ = c->first;
  c_.insert(c_.end(), c->chunk.begin(), c->chunk.end());
  chunk_len_ = static_cast<uint8_t>(c->chunk.size());
}

Result<std::unique_ptr<DistCatalog>> DistCatalog::Open(const std::string& path,
                                                       bool check_rank_files) {
  std::unique_ptr<DistCatalog> c(new DistCatalog());
  c->path_ = path;
  // The seal, before HDF5 reads the master (H5Store::Open checks a sealed one too); a master
  // that starts with neither the seal nor HDF5's signature is damaged.
  SEEDSTORE_RETURN_IF_ERROR(CheckMasterSeal(path, /*is_master=*/true, nullptr));
  SEEDSTORE_ASSIGN_OR_RETURN(c->master_, H5Store::Open(path));
  auto bad = [&](const std::string& m) { return BadDistIndex(path, m); };
  SEEDSTORE_ASSIGN_OR_RETURN(const std::string text,
                             ReadDistIndexText(c->master_->h5_file(), path));
  // The tensors are taken one at a time as the parser reaches them, each checked alone, so the
  // index of a save of 740,000 pieces is never held as one JSON document; what needs the
  // index's version, world and layout -- which may come after them -- is checked once the
  // parse is done. The first tensor that fails names the error (after the header's).
  Status tensors_st;
  std::set<std::string> names;
  int max_rank = -1;     // the highest rank a piece names
  std::string cells_at;  // the first piece with cells (a version 2 index only)
  auto take = [&](size_t, json&& t) {
    if (!tensors_st.ok()) return;
    auto x = ParseIndexedTensor(t, *c->master_, path);
    tensors_st = x.status();
    if (!x.ok()) return;
    if (!names.insert(x->rec.name).second) {
      tensors_st = bad("tensor '" + x->rec.name + "' is listed twice");
      return;
    }
    for (size_t k = 0; k < x->pieces.size(); ++k) {
      max_rank = std::max(max_rank, x->pieces[k].rank);
      if (x->pieces[k].has_cells() && cells_at.empty())
        cells_at = "tensor '" + x->rec.name + "' piece " + std::to_string(k);
    }
    c->records_.push_back(std::move(x->rec));
    c->pieces_.push_back(std::move(x->pieces));
    c->storage_.push_back(x->storage);
  };
  const JsonElementSink sink{{"tensors"}, take};
  try {
    std::string err;
    const json j = ParseJson(text, &err, &sink);
    if (j.is_discarded()) return bad(err);
    if (j.at("format") != "seedstore-distributed" ||
        (j.at("version") != kStoreFormatVersion && j.at("version") != kCellsFormatVersion))
      return bad("not a version " + std::to_string(kStoreFormatVersion) + " or " +
                 std::to_string(kCellsFormatVersion) + " distributed index");
    c->version_ = j.at("version").get<int>();
    SEEDSTORE_ASSIGN_OR_RETURN(c->layout_, Layout::FromJson(j.at("layout")));
    // Rank files lie next to the master itself, wherever symbolic links to it are.
    SEEDSTORE_ASSIGN_OR_RETURN(const std::string master_file, ResolveSymlinks(path));
    const std::string dir = DirPrefix(master_file);
    for (const auto& f : j.at("rank_files")) {
      const std::string name = f.get<std::string>();
      if (name.find('/') != std::string::npos) return bad("rank file with a '/'");
      c->rank_files_.push_back(dir + name);
    }
    if (static_cast<int>(c->rank_files_.size()) != j.at("world").get<int>() ||
        c->layout_.world_size() != c->world())
      return bad("world size differs from the rank files / layout");
    c->rank_stores_.resize(c->rank_files_.size());
    c->last_used_.resize(c->rank_files_.size());
    struct rlimit lim;
    c->max_open_ = 4096;
    if (::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY)
      c->max_open_ = std::clamp<size_t>(static_cast<size_t>(lim.rlim_cur / 2), 1, 4096);
    if (j.contains("flat_mappings")) {  // absent: "runs" (docs/FORMAT.md 9)
      const json& fm = j["flat_mappings"];
      if (fm != "boxes" && fm != "runs")
        return bad("field 'flat_mappings' is " + JsonPreview(fm) + ", not \"boxes\" or \"runs\"");
      c->flat_boxes_ = fm == "boxes";
    }
    if (!j.at("tensors").is_array()) return bad("field 'tensors' is not an array");
    SEEDSTORE_RETURN_IF_ERROR(tensors_st);
    if (max_rank >= c->world()) return bad("piece rank out of range");
    if (!cells_at.empty() && c->version_ != kCellsFormatVersion)
      return bad(cells_at + ": 'cells' needs a version " + std::to_string(kCellsFormatVersion) +
                 " index and 'set', 'first' and a 'chunk' shape that fits the piece");
    // The pieces are the layout's distinct shards, in order (as Reshard writes them): so they
    // are disjoint and cover the tensor, and every reader agrees on who holds what.
    for (size_t i = 0; i < c->records_.size(); ++i) {
      if (c->records_[i].lazy) continue;
      const std::string& name = c->records_[i].name;
      const std::vector<Piece>& ps = c->pieces_[i];
      SEEDSTORE_ASSIGN_OR_RETURN(std::vector<Shard> want,
                                 c->layout_.DistinctShards(name, c->records_[i].shape));
      want.erase(std::remove_if(want.begin(), want.end(), [](const Shard& s) { return s.empty(); }),
                 want.end());
      if (want.size() != ps.size())
        return bad("tensor '" + name + "' has " + std::to_string(ps.size()) +
                   " pieces; its layout gives " + std::to_string(want.size()));
      for (size_t k = 0; k < ps.size(); ++k)
        if (ps[k].rank != want[k].replicas[0] || !SameRegion(ps[k].region(), want[k].region))
          return bad("tensor '" + name + "' piece " + std::to_string(k) + " (rank " +
                     std::to_string(ps[k].rank) + ", " + DescribeRegion(ps[k].region()) +
                     ") is not its layout's (rank " + std::to_string(want[k].replicas[0]) + ", " +
                     DescribeRegion(want[k].region) + ")");
    }
  } catch (const std::exception& e) {
    return bad(e.what());
  }
  c->by_rank_.resize(c->rank_files_.size());
  for (size_t i = 0; i < c->pieces_.size(); ++i)
    for (size_t p = 0; p < c->pieces_[i].size(); ++p)
      c->by_rank_[c->pieces_[i][p].rank].push_back(
          PieceAt{static_cast<uint32_t>(i), static_cast<uint32_t>(p)});
  for (int r = 0; check_rank_files && r < c->world(); ++r)
    SEEDSTORE_RETURN_IF_ERROR(RankFileReachable(path, r, c->rank_files_[r], ""));
  return c;
}

Result<Fingerprint> DistCatalog::PaddingFingerprint(size_t i, size_t p, CpuOptions o,
                                                    bool from_owners) const {
  const Piece& piece = pieces_.at(i).at(p);
  const Region g = piece.region(), sb = piece.stored();
  Fingerprint f;
  if (SameRegion(g, sb)) return f;
  SEEDSTORE_ASSIGN_OR_RETURN(auto sk, PieceStore(i, p));
  const H5Store* s = sk.first.get();  // held by sk
  const size_t k = sk.second;
  std::vector<uint64_t> chunk = s->stored(k).chunk;
  if (chunk.empty()) chunk = LocalShape(sb);
  const std::vector<uint64_t> lshape = LocalShape(sb);
  const size_t es = DTypeSize(records_[i].dtype);
  for (const Region& slab : BoxDifference(sb, g)) {
    const GridTiles tiles(slab, sb.start, chunk);
    const int threads = ThreadCount(o.threads, tiles.Count());
    std::vector<Fingerprint> parts(threads);
    std::vector<std::vector<unsigned char>> bufs(threads);
    SEEDSTORE_RETURN_IF_ERROR(
        ParallelFor(tiles.Count(), threads, false, [&](uint64_t q, int th) -> Status {
          const Region tile = tiles.Tile(q);
          bufs[th].resize(tile.Count() * es);
          if (from_owners) {
            SEEDSTORE_RETURN_IF_ERROR(Read(i, tile, bufs[th].data(), CpuOptions{1}));
          } else {
            std::vector<uint64_t> ls(g.rank), lp(g.rank);
            for (int e = 0; e < g.rank; ++e) {
              ls[e] = tile.start[e] - sb.start[e];
              lp[e] = tile.stop[e] - sb.start[e];
            }
            Status st = s->Read(k, BoxRegion(lshape, ls, lp), bufs[th].data(), CpuOptions{1});
            if (!st.ok())
              return DistError("rank-file-corrupt", st.code(), path_, piece.rank,
                               rank_files_[piece.rank], st.message());
          }
          parts[th].Add(FingerprintOf(records_[i], tile, bufs[th].data(), CpuOptions{1}));
          return Status::Ok();
        }));
    for (const Fingerprint& x : parts) f.Add(x);
  }
  return f;
}

Result<std::vector<uint64_t>> DistCatalog::PieceGrid(size_t i, size_t p) const {
  const Piece& piece = pieces_.at(i).at(p);
  std::vector<uint64_t> none;
  const Region sb = piece.stored();
  if (sb.flat || sb.rank == 0) return none;
  SEEDSTORE_ASSIGN_OR_RETURN(auto sk, PieceStore(i, p));
  const TensorRecord& pr = sk.first->tensors()[sk.second];
  const std::vector<uint64_t>& c = sk.first->stored(sk.second).chunk;
  if (c.empty() || sk.first->chunk_info(sk.second).empty() || !pr.piece ||
      pr.fp_seed() != records_[i].fp_seed())
    return none;
  for (int d = 0; d < sb.rank; ++d)
    if (sb.start[d] % c[d] != 0 || (sb.stop[d] % c[d] != 0 && sb.stop[d] != sb.shape[d]))
      return none;
  return c;
}

Result<Fingerprint> DistCatalog::ProveCells(size_t i, size_t p, CpuOptions o) const {
  const Piece& me = pieces_.at(i).at(p);
  SEEDSTORE_ASSIGN_OR_RETURN(auto sk, PieceStore(i, p));
  SEEDSTORE_ASSIGN_OR_RETURN(Fingerprint f, sk.first->ProveStored(sk.second, o));
  const std::vector<uint64_t>& c = sk.first->stored(sk.second).chunk;
  const std::vector<ChunkInfo>& info = sk.first->chunk_info(sk.second);
  const Region my = me.region(), my_stored = me.stored();
  const int rank = my_stored.rank;
  // The chunk index, in piece q's grid, of the cell starting at global index x.
  auto index_in = [&](const Piece& q, const uint64_t* x) {
    const Region qs = q.stored();
    uint64_t j = 0;
    for (int d = 0; d < rank; ++d)
      j = j * ((qs.stop[d] - qs.start[d] + c[d] - 1) / c[d]) + (x[d] - qs.start[d]) / c[d];
    return j;
  };
  uint64_t count[kMaxRank], cells = 1;
  for (int d = 0; d < rank; ++d) {
    count[d] = (my_stored.stop[d] - my_stored.start[d] + c[d] - 1) / c[d];
    cells *= count[d];
  }
  for (uint64_t j = 0; j < cells; ++j) {
    uint64_t x[kMaxRank], q = j;
    bool mine = true;
    for (int d = rank - 1; d >= 0; --d) {
      x[d] = my_stored.start[d] + (q % count[d]) * c[d];
      q /= count[d];
      mine &= my.start[d] <= x[d] && x[d] < my.stop[d];
    }
    if (mine) continue;
    // A cell of p's padding: the owner of its first element stores it too.
    size_t owner = pieces_[i].size();
    for (size_t k = 0; k < pieces_[i].size() && owner == pieces_[i].size(); ++k)
      if (pieces_[i][k].BoxHolds(x)) owner = k;
    auto mismatch = [&](const std::string& why) {
      return DistError("padding-mismatch", Code::kMismatch, path_, me.rank, rank_files_[me.rank],
                       "tensor '" + records_[i].name + "' piece " + DescribeRegion(my) +
                           " stored as " + DescribeRegion(my_stored) + ": chunk " +
                           std::to_string(j) + " " + why);
    };
    if (owner == pieces_[i].size()) return mismatch("starts where no piece is");
    SEEDSTORE_ASSIGN_OR_RETURN(auto ok, PieceStore(i, owner));
    const std::vector<ChunkInfo>& oinfo = ok.first->chunk_info(ok.second);
    const uint64_t oj = index_in(pieces_[i][owner], x);
    if (ok.first->stored(ok.second).chunk != c || oj >= oinfo.size())
      return mismatch("is not stored alike by the piece owning its first element");
    if (oinfo[oj].fingerprint != info[j].fingerprint)
      return mismatch("differs from the owning piece's (rank " +
                      std::to_string(pieces_[i][owner].rank) + " chunk " + std::to_string(oj) +
                      ")");
    f.Sub(info[j].fingerprint);
  }
  return f;
}

size_t DistCatalog::open_rank_files() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const auto& s : rank_stores_) n += s != nullptr;
  return n;
}

Result<std::pair<std::shared_ptr<const H5Store>, size_t>> DistCatalog::PieceStore(size_t i,
                                                                                  size_t p) const {
  SEEDSTORE_ASSIGN_OR_RETURN(std::shared_ptr<const H5Store> s,
                             RankStore(pieces_.at(i).at(p).rank, records_[i].name));
  const size_t k = static_cast<size_t>(s->Find(records_[i].name));  // checked at open
  return std::make_pair(std::move(s), k);
}

std::vector<StoredPart> DistCatalog::StoredParts(size_t i) const {
  std::vector<StoredPart> parts;
  for (size_t p = 0; p < pieces_.at(i).size(); ++p) {
    const Piece& piece = pieces_[i][p];
    if (!piece.flat()) parts.push_back({piece.region(), piece.stored(), static_cast<int>(p)});
  }
  return parts;
}

Result<std::pair<std::shared_ptr<const H5Store>, size_t>> DistCatalog::PartStore(size_t i,
                                                                                 int piece) const {
  return PieceStore(i, static_cast<size_t>(piece));
}

Status DistCatalog::PartError(size_t i, int piece, const Status& st) const {
  const int rank = pieces_.at(i).at(static_cast<size_t>(piece)).rank;
  return DistError("rank-file-corrupt", st.code(), origin(), rank, rank_files_[rank], st.message());
}

Result<std::optional<Fingerprint>> DistCatalog::ProveStoredPiece(size_t i, const Region& r,
                                                                 bool cells, CpuOptions o,
                                                                 size_t hint) const {
  const size_t n = pieces_.at(i).size();
  for (size_t q = 0; q < n; ++q) {
    const size_t p = hint < n ? (hint + q) % n : q;  // from the hint on
    if (!SameRegion(pieces_[i][p].region(), r)) continue;
    if (cells) {
      SEEDSTORE_ASSIGN_OR_RETURN(Fingerprint f, ProveCells(i, p, o));
      return std::optional<Fingerprint>(f);
    }
    SEEDSTORE_ASSIGN_OR_RETURN(auto sk, PieceStore(i, p));
    const TensorRecord& pr = sk.first->tensors()[sk.second];
    if (sk.first->chunk_info(sk.second).empty() || !pr.piece ||
        !SameRegion(*pr.piece, pieces_[i][p].stored()))
      return std::optional<Fingerprint>();
    SEEDSTORE_ASSIGN_OR_RETURN(Fingerprint f, sk.first->ProveStored(sk.second, o));
    SEEDSTORE_ASSIGN_OR_RETURN(Fingerprint pad, PaddingFingerprint(i, p, o));
    f.Sub(pad);
    return std::optional<Fingerprint>(f);
  }
  return std::optional<Fingerprint>();
}

int DistCatalog::FindRecord(const H5Store& s, const std::string& name, size_t* hint) {
  const auto& ts = s.tensors();
  int k = *hint < ts.size() && ts[*hint].name == name ? static_cast<int>(*hint) : s.Find(name);
  if (k >= 0) *hint = static_cast<size_t>(k) + 1;
  return k;
}

void DistCatalog::set_max_open_rank_files(size_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  max_open_ = std::max<size_t>(n, 1);
}

void DistCatalog::CloseRankFile(int rank) const {
  std::lock_guard<std::mutex> lock(mu_);
  rank_stores_.at(static_cast<size_t>(rank)).reset();
}

Result<std::shared_ptr<const H5Store>> DistCatalog::RankStore(int rank,
                                                              const std::string& tensor) const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    last_used_[rank] = ++use_clock_;
    if (rank_stores_[rank]) return rank_stores_[rank];
  }
  // Opened outside the lock, so that threads reading other rank files go on meanwhile; a file
  // that two threads open at once is kept once.
  SEEDSTORE_ASSIGN_OR_RETURN(
      std::unique_ptr<H5Store> s,
      OpenRank(rank, tensor, read_once_ ? H5Store::OpenFor::kOnePass : H5Store::OpenFor::kReads));
  std::lock_guard<std::mutex> lock(mu_);
  if (rank_stores_[rank]) return rank_stores_[rank];
  // Close the least recently used beyond the cap (a reader still holding it keeps it alive
  // until it is done). O(world) per open, against an HDF5 file open of ~1 ms.
  size_t open = 0;
  for (const auto& r : rank_stores_) open += r != nullptr;
  while (open >= max_open_) {
    int lru = -1;
    for (int r = 0; r < static_cast<int>(rank_stores_.size()); ++r)
      if (rank_stores_[r] && (lru < 0 || last_used_[r] < last_used_[lru])) lru = r;
    rank_stores_[lru].reset();
    --open;
  }
  rank_stores_[rank] = std::move(s);
  return rank_stores_[rank];
}

Result<std::unique_ptr<H5Store>> DistCatalog::OpenRank(int rank, const std::string& tensor,
                                                       H5Store::OpenFor use) const {
  const std::string& f = rank_files_[rank];
  const std::string reading = tensor.empty() ? "" : "reading tensor '" + tensor + "': ";
  SEEDSTORE_RETURN_IF_ERROR(RankFileReachable(path_, rank, f, reading));
  auto s = H5Store::Open(f, use);
  if (!s.ok() && !FileExists(f))  // gone meanwhile: another writer replaced the save
    return DistError("rank-file-missing", Code::kNotFound, path_, rank, f,
                     reading +
                         "the file was removed while it was opened (the save replaced by another "
                         "writer? open it again): " +
                         s.status().message());
  if (!s.ok() &&
      s.status().code() == Code::kInvalidArgument)  // a directory, a pipe: the save is damaged
    return DistError("rank-file-corrupt", Code::kCorrupt, path_, rank, f,
                     reading + s.status().message());
  if (!s.ok())  // an I/O failure (e.g. too many open files) is not the file's fault
    return DistError(s.status().code() == Code::kIo ? "rank-file-unreadable" : "rank-file-corrupt",
                     s.status().code(), path_, rank, f, reading + s.status().message());
  // Its format version is the save's (docs/FORMAT.md 11).
  if ((*s)->format_version() != version_)
    return DistError("rank-file-corrupt", Code::kCorrupt, path_, rank, f,
                     reading + "rank file version " + std::to_string((*s)->format_version()) +
                         " in a version " + std::to_string(version_) + " save");
  // Every piece this rank holds must be there with its local shape and dtype.
  size_t hint = 0;
  for (const PieceAt& at : by_rank_[rank]) {
    const size_t i = at.i;
    const Piece& p = pieces_[i][at.p];
    const Region stored = p.stored();
    const int k = FindRecord(**s, records_[i].name, &hint);
    if (k < 0 || (*s)->tensors()[k].lazy || (*s)->tensors()[k].dtype != records_[i].dtype ||
        (*s)->tensors()[k].shape != LocalShape(stored))
      return DistError("rank-file-corrupt", Code::kCorrupt, path_, rank, f,
                       reading + "tensor '" + records_[i].name + "' piece " +
                           DescribeRegion(stored) + " is missing or has another shape or dtype");
    // A padded piece must be recorded as such (its padding is in the global frame).
    const std::optional<Region>& rp = (*s)->tensors()[k].piece;
    if ((rp && !SameRegion(*rp, stored)) || (!rp && p.padded()))
      return DistError("rank-file-corrupt", Code::kCorrupt, path_, rank, f,
                       reading + "tensor '" + records_[i].name + "' is recorded as piece " +
                           (rp ? DescribeRegion(*rp) : std::string("(none)")) +
                           ", the index says " + DescribeRegion(stored));
    // The same piece of this save: its record's fingerprint is the one the index took from
    // the writer (a rank file of another save, or one changed since, holds other values).
    const std::optional<Fingerprint>& rf = (*s)->tensors()[k].fingerprint;
    if (p.fingerprint && (!rf || *rf != *p.fingerprint))
      return DistError(
          "rank-file-corrupt", Code::kCorrupt, path_, rank, f,
          reading + "tensor '" + records_[i].name + "' piece " + DescribeRegion(stored) +
              " has fingerprint " + (rf ? FingerprintHex(*rf) : std::string("(none)")) +
              ", the index says " + FingerprintHex(*p.fingerprint) +
              ": the file is not this save's (another save's rank file, or changed since)");
    // Its cells are where the index maps them from (a damaged record fails its reads).
    const StoredTensor& st = (*s)->stored(k);
    std::optional<PieceCells> held;
    if (st.cell_set >= 0) held = PieceCells{st.cell_set, st.first_cell, st.chunk};
    auto cells_text = [](const std::optional<PieceCells>& c) {
      return c ? "cells " + std::to_string(c->first) + ".. of set " + std::to_string(c->set) +
                     " (chunks " + ShapeText(c->chunk) + ")"
               : std::string("no cells");
    };
    if ((*s)->Damage(k).ok() && held != p.cells())
      return DistError("rank-file-corrupt", Code::kCorrupt, path_, rank, f,
                       reading + "tensor '" + records_[i].name + "' piece " +
                           DescribeRegion(stored) + " is stored in " + cells_text(held) +
                           ", the index says " + cells_text(p.cells()));
  }
  return std::move(*s);
}

Result<std::vector<DistCatalog::StoredTotals>> DistCatalog::StorageOfAll() const {
  std::vector<StoredTotals> out(records_.size());
  bool recorded = true;
  for (size_t i = 0; i < records_.size(); ++i) {
    if (storage_[i]) out[i] = *storage_[i];
    else recorded = recorded && pieces_[i].empty();
  }
  if (recorded) return out;
  out.assign(records_.size(), StoredTotals{});
  for (int r = 0; r < world(); ++r) {
    SEEDSTORE_ASSIGN_OR_RETURN(const std::unique_ptr<H5Store> s, OpenRank(r));
    size_t hint = 0;
    for (const PieceAt& at : by_rank_[r]) {
      const size_t i = at.i;
      const size_t k =
          static_cast<size_t>(FindRecord(*s, records_[i].name, &hint));  // checked by OpenRank
      if (const Status& d = s->Damage(k); !d.ok())
        return DistError("rank-file-corrupt", d.code(), path_, r, rank_files_[r], d.message());
      const StoredTensor& st = s->stored(k);
      out[i].chunks += st.num_chunks;
      out[i].stored_bytes += st.stored_bytes;
    }
  }
  return out;
}

Result<StorageSummary> DistCatalog::Storage(const std::vector<size_t>& listed) const {
  SEEDSTORE_ASSIGN_OR_RETURN(const std::vector<StoredTotals> totals, StorageOfAll());
  StorageSummary s;
  s.kind = StorageKind::kDistributed;
  s.world = world();
  for (size_t i : listed) {
    TensorStorage t;
    t.dense = !records_.at(i).lazy;
    if (t.dense) {
      t.bytes_on_disk = totals[i].stored_bytes;
      t.chunks = totals[i].chunks;
      t.pieces = pieces_[i].size();
    }
    s.tensors.push_back(std::move(t));
  }
  return s;
}

Status DistCatalog::ReadBox(size_t i, const Region& box, unsigned char* out, CpuOptions o) const {
  const TensorRecord& t = records_[i];
  const size_t es = DTypeSize(t.dtype);
  const int rank = box.rank;
  if (box.Count() == 0) return Status::Ok();
  // The pieces write disjoint parts of `out`. A tensor of many pieces (one per rank file of a
  // large world) is read a piece per thread, so that one thread's rank file opens (their HDF5
  // calls take turns) overlap another's index parsing, chunk reads and decoding; a tensor of
  // few, large pieces is read piece by piece, each on every thread.
  const std::vector<Piece>& pieces = pieces_[i];
  int threads = ThreadCount(o.threads, pieces.size());
  if (pieces.size() < 4 * static_cast<size_t>(threads)) threads = 1;
  const CpuOptions each = threads > 1 ? CpuOptions{1} : o;
  std::vector<std::vector<unsigned char>> bufs(threads);  // ThreadCount is at least 1
  return ParallelFor(pieces.size(), threads, false, [&](uint64_t q, int th) -> Status {
    const Piece& p = pieces[q];
    const Region g = p.region();
    std::vector<unsigned char>& tmp = bufs[th];
    auto read_local = [&](const Region& local, void* dst) -> Status {
      SEEDSTORE_ASSIGN_OR_RETURN(std::shared_ptr<const H5Store> s, RankStore(p.rank, t.name));
      const int k = s->Find(t.name);
      Status st = s->Read(k, local, dst, each);
      if (!st.ok())
        return DistError("rank-file-corrupt", st.code(), path_, p.rank, rank_files_[p.rank],
                         st.message());
      return Status::Ok();
    };
    if (!g.flat) {
      uint64_t lo[kMaxRank], hi[kMaxRank];
      Region local;
      if (!PiecePart(p, box, &local, lo, hi)) return Status::Ok();
      uint64_t ext[kMaxRank], dext[kMaxRank], off[kMaxRank];
      bool whole = true;
      for (int d = 0; d < rank; ++d) {
        ext[d] = hi[d] - lo[d];
        dext[d] = box.stop[d] - box.start[d];
        off[d] = lo[d] - box.start[d];
        whole &= ext[d] == dext[d];
      }
      if (whole) return read_local(local, out);
      tmp.resize(local.Count() * es);
      SEEDSTORE_RETURN_IF_ERROR(read_local(local, tmp.data()));
      CopyBox(tmp.data(), ext, nullptr, out, dext, off, ext, rank, es);
      return Status::Ok();
    }
    // Flat piece [b, e): read the span of it the box touches once, then copy run by run.
    const uint64_t L = box.RunLength(), runs = box.Count() / L;
    const uint64_t first = box.RunBase(0), last = box.RunBase(runs - 1) + L;
    const uint64_t s0 = std::max(first, g.begin), s1 = std::min(last, g.end);
    if (s1 <= s0) return Status::Ok();
    tmp.resize((s1 - s0) * es);
    SEEDSTORE_RETURN_IF_ERROR(
        read_local(BoxRegion({g.end - g.begin}, {s0 - g.begin}, {s1 - g.begin}), tmp.data()));
    for (uint64_t r = 0; r < runs; ++r) {
      const uint64_t a = box.RunBase(r), b = a + L;
      const uint64_t x0 = std::max(a, s0), x1 = std::min(b, s1);
      if (x1 <= x0) continue;
      std::memcpy(out + (r * L + (x0 - a)) * es, tmp.data() + (x0 - s0) * es, (x1 - x0) * es);
    }
    return Status::Ok();
  });
}

Result<Fingerprint> DistCatalog::FingerprintRegion(size_t i, const Region& r, CpuOptions o) const {
  const TensorRecord& t = records_.at(i);
  if (t.lazy) return t.lazy->FingerprintRegion(r, o);
  SEEDSTORE_RETURN_IF_ERROR(CheckRegionIn(t, r).WithContext("distributed save '" + path_ + "'"));
  const size_t es = DTypeSize(t.dtype);
  Fingerprint f;
  for (const Region& box :
       r.flat ? FlatRangeToBoxes(t.shape, r.begin, r.end) : std::vector<Region>{r}) {
    if (box.Count() == 0) continue;
    for (const Piece& p : pieces_[i]) {
      if (!p.flat()) {
        // The rank file hashes its part chunk by chunk, in the global frame (its piece record).
        uint64_t lo[kMaxRank], hi[kMaxRank];
        Region local;
        if (!PiecePart(p, box, &local, lo, hi)) continue;
        SEEDSTORE_ASSIGN_OR_RETURN(std::shared_ptr<const H5Store> s, RankStore(p.rank, t.name));
        const int k = s->Find(t.name);
        auto pf = s->tensors()[k].piece
                      ? s->FingerprintRegion(k, local, o)
                      : ReadAndFingerprint(
                            *s, k, local, t,
                            BoxRegion(t.shape, {lo, lo + box.rank}, {hi, hi + box.rank}), o);
        if (!pf.ok())
          return DistError("rank-file-corrupt", pf.status().code(), path_, p.rank,
                           rank_files_[p.rank], pf.status().message());
        f.Add(*pf);
        continue;
      }
      // A flat piece [b, e): its rank file's tensor is 1-D, element k at global flat index
      // b + k. A contiguous box's part is one range of it, hashed there chunk by chunk; other
      // boxes read the span they touch once and hash it run by run at the global indices.
      const Region g = p.region();
      const uint64_t L = box.RunLength(), runs = box.Count() / L, b = g.begin;
      const uint64_t s0 = std::max(box.RunBase(0), b),
                     s1 = std::min(box.RunBase(runs - 1) + L, g.end);
      if (s1 <= s0) continue;
      SEEDSTORE_ASSIGN_OR_RETURN(std::shared_ptr<const H5Store> s, RankStore(p.rank, t.name));
      const int k = s->Find(t.name);
      const Region local = BoxRegion({g.end - b}, {s0 - b}, {s1 - b});
      auto corrupt = [&](const Status& st) {
        return DistError("rank-file-corrupt", st.code(), path_, p.rank, rank_files_[p.rank],
                         st.message());
      };
      if (IsContiguous(box)) {
        auto pf = s->tensors()[k].piece
                      ? s->FingerprintRegion(k, local, o)
                      : ReadAndFingerprint(*s, k, local, t, FlatRegion(t.shape, s0, s1), o);
        if (!pf.ok()) return corrupt(pf.status());
        f.Add(*pf);
        continue;
      }
      std::vector<unsigned char> tmp(local.Count() * es);
      if (Status st = s->Read(k, local, tmp.data(), o); !st.ok()) return corrupt(st);
      for (uint64_t q = 0; q < runs; ++q) {
        const uint64_t x0 = std::max(box.RunBase(q), s0), x1 = std::min(box.RunBase(q) + L, s1);
        if (x0 < x1)
          f.Add(FingerprintOf(t, FlatRegion(t.shape, x0, x1), tmp.data() + (x0 - s0) * es,
                              CpuOptions{1}));
      }
    }
  }
  return f;
}

Status DistCatalog::Read(size_t i, const Region& r, void* out, CpuOptions o) const {
  const TensorRecord& t = records_.at(i);
  if (t.lazy) return t.lazy->Materialize(r, out, o);
  return ReadByBoxes(t, r, out, [&](const Region& b, void* dst) {
    return ReadBox(i, b, static_cast<unsigned char*>(dst), o);
  });
}

}  // namespace seedstore
