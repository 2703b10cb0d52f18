#include "io/master_vds.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "gen/checksum.h"
#include "io/chunk_grid.h"
#include "io/h5_handle.h"
#include "io/path.h"
#include "io/rank_files.h"
#include "io/store_format.h"
#include "store/json_text.h"

namespace seedstore {

namespace {

using json = nlohmann::json;

// A box of `shape` (rank `n`) from start `st` with extents `cnt`.
Region BoxOf(int n, const uint64_t* shape, const uint64_t* st, const uint64_t* cnt) {
  Region r;
  r.rank = n;
  for (int d = 0; d < n; ++d) {
    r.shape[d] = shape[d];
    r.start[d] = st[d];
    r.stop[d] = st[d] + cnt[d];
  }
  return r;
}

// A dataspace of box `b`'s shape with the box selected (a hyperslab).
hid_t BoxSpace(const Region& b) {
  std::vector<hsize_t> dims(b.shape, b.shape + b.rank), st(b.start, b.start + b.rank), cnt(b.rank);
  for (int d = 0; d < b.rank; ++d) cnt[d] = b.stop[d] - b.start[d];
  const hid_t s = H5Screate_simple(b.rank, dims.data(), nullptr);
  if (s >= 0 &&
      H5Sselect_hyperslab(s, H5S_SELECT_SET, st.data(), nullptr, cnt.data(), nullptr) < 0) {
    H5Sclose(s);
    return -1;
  }
  return s;
}

// The mappings of piece `p` (index k) of tensor `t`, whose chunks are cells (docs/FORMAT.md
// 11, item 5): per chunk of its stored box, in chunk-grid order, the chunk's part of the
// piece's region from the same elements of its cell -- one block (a box piece), or per box of
// the cell's flat range, in row-major order, one run of the cell (a flat piece).
void AddCellMappings(const TensorRecord& t, const DistCatalog::Piece& p, size_t k,
                     std::vector<VdsMapping>* out) {
  const int rank = static_cast<int>(t.shape.size());
  const uint64_t* gshape = t.shape.data();
  const PieceCells c = *p.cells();
  const std::string source = std::string(kCellsGroup) + "/" + std::to_string(c.set);
  const Region g = p.region(), sb = p.stored();
  const Grid grid = Grid::Make(LocalShape(sb), c.chunk);
  const int crank = grid.rank;
  uint64_t sdims[kMaxRank + 1], sst[kMaxRank + 1], cnt[kMaxRank + 1];
  for (uint64_t j = 0; j < grid.num; ++j) {
    const Region box = grid.Box(j);  // local to the stored box, clipped to it
    sdims[0] = c.first + j + 1;
    sst[0] = c.first + j;
    cnt[0] = 1;
    for (int d = 0; d < crank; ++d) sdims[d + 1] = c.chunk[d];
    if (g.flat) {
      const uint64_t b0 = g.begin + box.start[0], b1 = g.begin + box.stop[0];
      uint64_t ls = 0;
      for (const Region& b : FlatRangeToBoxes(t.shape, b0, b1)) {
        uint64_t bc[kMaxRank];
        for (int d = 0; d < rank; ++d) bc[d] = b.stop[d] - b.start[d];
        sst[1] = ls;
        cnt[1] = b.Count();
        out->push_back(
            {p.rank, k, BoxOf(rank, gshape, b.start, bc), BoxOf(2, sdims, sst, cnt), source});
        ls += b.Count();
      }
      continue;
    }
    uint64_t to_start[kMaxRank], to_cnt[kMaxRank];
    bool empty = false;
    for (int d = 0; d < rank; ++d) {
      const uint64_t lo = std::max(sb.start[d] + box.start[d], g.start[d]);
      const uint64_t hi = std::min(sb.start[d] + box.stop[d], g.stop[d]);
      empty |= lo >= hi;
      to_start[d] = lo;
      to_cnt[d] = hi > lo ? hi - lo : 0;
      sst[d + 1] = lo - sb.start[d] - box.start[d];
      cnt[d + 1] = to_cnt[d];
    }
    if (empty) continue;  // padding only
    out->push_back({p.rank, k, BoxOf(rank, gshape, to_start, to_cnt),
                    BoxOf(rank + 1, sdims, sst, cnt), source});
  }
}

}  // namespace

// A virtual dataset's source file and dataset names are patterns to HDF5: `%b` stands for a
// block number and `%%` for one `%` (H5Pset_virtual). Escaped tensor names hold `%` (`/` is
// written `%2F`, docs/FORMAT.md 4), and so may a save's path: every `%` is doubled.
std::string VdsSourceName(const std::string& name) {
  std::string out;
  out.reserve(name.size());
  for (char c : name) {
    out += c;
    if (c == '%') out += '%';
  }
  return out;
}

// What the master holds for dense tensor `t` (lazy: nothing) whose non-empty pieces are
// `pieces`, in index order. A box piece maps its region (owned box) from where that lies in its
// (maybe padded) stored box; a flat piece maps, in order, each box of its range (`style`
// kBoxes) or each innermost run (kRuns) from the same elements of its 1-d dataset. Without
// `with_mappings`, only the kind (and why_none) is set.
MasterDataset MasterDatasetOf(const TensorRecord& t, const std::vector<DistCatalog::Piece>& pieces,
                              FlatMappings style, bool with_mappings) {
  MasterDataset m;
  const int rank = static_cast<int>(t.shape.size());
  if (t.lazy) {
    m.why_none = "it is lazy";
    return m;
  }
  if (t.NumElements() == 0) {
    m.why_none = "it has no elements";
    return m;
  }
  if (rank == 0) {
    m.kind = MasterDataset::kScalar;
    return m;
  }
  uint64_t flat_runs = 0;
  for (const DistCatalog::Piece& p : pieces)
    if (p.flat()) flat_runs += p.Count() / t.shape.back() + 2;
  if (style == FlatMappings::kRuns && flat_runs > kMaxFlatRuns) {
    m.why_none =
        "its flat pieces would need more than " + std::to_string(kMaxFlatRuns) + " mappings";
    return m;
  }
  m.kind = MasterDataset::kVirtual;
  if (!with_mappings) return m;
  const uint64_t* gshape = t.shape.data();
  const std::string own = "/tensors/" + EscapeH5Name(t.name);
  for (size_t k = 0; k < pieces.size(); ++k) {
    const DistCatalog::Piece& p = pieces[k];
    const Region g = p.region();
    if (p.has_cells()) {
      AddCellMappings(t, p, k, &m.mappings);
      continue;
    }
    if (!g.flat) {
      const Region sb = p.stored();
      uint64_t cnt[kMaxRank], sdims[kMaxRank], sst[kMaxRank];
      for (int d = 0; d < rank; ++d) {
        cnt[d] = g.stop[d] - g.start[d];
        sdims[d] = sb.stop[d] - sb.start[d];
        sst[d] = g.start[d] - sb.start[d];
      }
      m.mappings.push_back(
          {p.rank, k, BoxOf(rank, gshape, g.start, cnt), BoxOf(rank, sdims, sst, cnt), own});
      continue;
    }
    const uint64_t local_n = g.end - g.begin;
    if (style == FlatMappings::kBoxes) {
      uint64_t ls = 0;  // boxes in row-major order: each is the next run of the 1-d dataset
      for (const Region& b : FlatRangeToBoxes(t.shape, g.begin, g.end)) {
        uint64_t cnt[kMaxRank];
        for (int d = 0; d < rank; ++d) cnt[d] = b.stop[d] - b.start[d];
        const uint64_t lc = b.Count();
        m.mappings.push_back(
            {p.rank, k, BoxOf(rank, gshape, b.start, cnt), BoxOf(1, &local_n, &ls, &lc), own});
        ls += lc;
      }
      continue;
    }
    const uint64_t inner = t.shape.back();
    for (uint64_t g0 = g.begin; g0 < g.end;) {
      const uint64_t g1 = std::min(g.end, (g0 / inner + 1) * inner);
      uint64_t st[kMaxRank], cnt[kMaxRank];
      uint64_t q = g0;
      for (int d = rank - 1; d >= 0; --d) {
        st[d] = q % t.shape[d];
        q /= t.shape[d];
        cnt[d] = 1;
      }
      cnt[rank - 1] = g1 - g0;
      const uint64_t ls = g0 - g.begin, lc = g1 - g0;
      m.mappings.push_back(
          {p.rank, k, BoxOf(rank, gshape, st, cnt), BoxOf(1, &local_n, &ls, &lc), own});
      g0 = g1;
    }
  }
  return m;
}

// Adds the index and the virtual datasets to the (closed, committed) master file at `file`.
namespace {

// The text of the master's /distributed/index (docs/FORMAT.md 10, 11): the save's id, world,
// layout and rank files, and every tensor -- a dense one with its fingerprint, its chunk and
// byte counts and its pieces (rank, region, stored box when padded, recorded fingerprint,
// cells). Written out directly rather than built as one JSON document: a save of 740,000
// pieces has a 180 MB index, whose document would take several times that. The text is what
// nlohmann's compact dump of that document gives (keys in sorted order).
std::string MasterIndexText(const Catalog& src, const Plan& plan, const Layout& layout, uint32_t id,
                            const std::string& path, const std::vector<Fingerprint>& fps,
                            const std::vector<uint64_t>& counts, const PieceReports& reports,
                            int version) {
  const auto& ts = src.tensors();
  json files = json::array();
  for (int r = 0; r < layout.world_size(); ++r)
    files.push_back(BaseName(RankFileName(path, id, r)));
  char idhex[16];
  std::snprintf(idhex, sizeof idhex, "%08x", id);
  std::string out = "{\"flat_mappings\":\"boxes\",\"format\":\"seedstore-distributed\",\"layout\":";
  out += layout.ToJson().dump();
  out += ",\"rank_files\":" + files.dump() + ",\"save_id\":\"" + idhex + "\",\"tensors\":[";
  for (size_t i = 0; i < ts.size(); ++i) {
    if (i) out += ',';
    const std::string name = json(ts[i].name).dump();
    if (ts[i].lazy) {
      out += "{\"kind\":\"lazy\",\"name\":" + name + "}";
      continue;
    }
    out += "{\"chunks\":" + std::to_string(counts[kCounts * i] + counts[kCounts * i + 1]) +
           ",\"dtype\":\"" + DTypeName(ts[i].dtype) + "\",\"fingerprint\":\"" +
           FingerprintHex(fps[i]) + "\",\"kind\":\"dense\",\"name\":" + name + ",\"pieces\":[";
    for (size_t k = 0; k < plan.pieces[i].size(); ++k) {
      const DistCatalog::Piece& p = plan.pieces[i][k];
      const size_t q = plan.first_piece[i] + k;
      if (k) out += ',';
      out += '{';
      if (const std::optional<PieceCells> c = reports.cells(q)) {
        out += "\"cells\":{\"chunk\":[";
        AppendJsonIntegers(out, c->chunk.data(), c->chunk.size());
        out +=
            "],\"first\":" + std::to_string(c->first) + ",\"set\":" + std::to_string(c->set) + "},";
      }
      out += "\"fingerprint\":\"" + FingerprintHex(reports.fingerprint(q)) +
             "\",\"rank\":" + std::to_string(p.rank) + ",\"region\":";
      AppendRegionJson(out, p.region());
      if (p.padded()) {
        out += ",\"stored\":";
        AppendRegionJson(out, p.stored());
      }
      out += '}';
    }
    out += "],\"shape\":[";
    AppendJsonIntegers(out, ts[i].shape.data(), ts[i].shape.size());
    out += "],\"stored_bytes\":" + std::to_string(counts[kCounts * i + 2]) + "}";
  }
  out += "],\"version\":" + std::to_string(version) +
         ",\"world\":" + std::to_string(layout.world_size()) + "}";
  return out;
}

}  // namespace

Status AddDistributedObjects(const std::string& file, const Catalog& src, const Plan& plan,
                             const Layout& layout, uint32_t id, const std::string& path,
                             const std::vector<Fingerprint>& fps,
                             const std::vector<uint64_t>& counts, const PieceReports& reports,
                             int version) {
  const auto& ts = src.tensors();
  const std::string text =
      MasterIndexText(src, plan, layout, id, path, fps, counts, reports, version);

  Hid fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V110, H5F_LIBVER_LATEST);
  // No sieve buffer (as StoreWriter::Create): the index and the scalars are written, and a
  // full disk fails, at their H5Dwrite, not at an H5Dclose whose failure goes unseen.
  H5Pset_sieve_buf_size(fapl.get(), 0);
  // Closed below: kept when every object is written and flushed, else abandoned (the master
  // is an uncommitted temporary: AbandonH5File), never left half-closed by a failed flush.
  const hid_t fid = H5Fopen(file.c_str(), H5F_ACC_RDWR, fapl.get());
  if (fid < 0) return IoError("cannot reopen master '" + file + "' to add its index");
  const Status st = [&]() -> Status {
    SEEDSTORE_RETURN_IF_ERROR(WriteStringAttr(fid, kRoleAttr, kMasterRole));
    Hid gcpl(UntimedCreationList(H5P_GROUP_CREATE), H5Pclose);
    Hid untimed(UntimedCreationList(H5P_DATASET_CREATE), H5Pclose);
    {
      Hid g(H5Gcreate2(fid, "/distributed", H5P_DEFAULT, gcpl.get(), H5P_DEFAULT), H5Gclose);
      hsize_t n = text.size();
      Hid space(H5Screate_simple(1, &n, nullptr), H5Sclose);
      Hid d(H5Dcreate2(fid, kDistIndexPath, H5T_STD_U8LE, space.get(), H5P_DEFAULT, untimed.get(),
                       H5P_DEFAULT),
            H5Dclose);
      if (g.get() < 0 || d.get() < 0)
        return IoError("cannot create " + std::string(kDistIndexPath) + " in '" + file +
                       "': " + H5ErrorText());
      if (H5Dwrite(d.get(), H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, text.data()) < 0)
        return IoError("cannot write " + std::string(kDistIndexPath) + " to '" + file +
                       "': " + H5ErrorText());
      const uint64_t h = Checksum64(text.data(), text.size());
      Hid as(H5Screate(H5S_SCALAR), H5Sclose);
      Hid a(
          H5Acreate2(d.get(), "seedstore.xxh3", H5T_STD_U64LE, as.get(), H5P_DEFAULT, H5P_DEFAULT),
          H5Aclose);
      H5Awrite(a.get(), H5T_NATIVE_UINT64, &h);
    }
    // /tensors/<escaped> of each dense tensor, as MasterDatasetOf says.
    for (size_t i = 0; i < ts.size(); ++i) {
      const TensorRecord& t = ts[i];
      const MasterDataset want =
          MasterDatasetOf(t, PlannedPieces(plan, i, &reports), FlatMappings::kBoxes);
      if (want.kind == MasterDataset::kNone) continue;
      const int rank = static_cast<int>(t.shape.size());
      const std::string dset = "/tensors/" + EscapeH5Name(t.name);
      // File type: the one the rank files store the dtype as.
      Hid ftype = StorageType(t.dtype);
      auto add_attrs = [&](hid_t d) -> Status {
        SEEDSTORE_RETURN_IF_ERROR(WriteStringAttr(d, "seedstore.name", t.name));
        SEEDSTORE_RETURN_IF_ERROR(WriteStringAttr(d, "seedstore.dtype", DTypeName(t.dtype)));
        hsize_t two = 2;
        Hid as(H5Screate_simple(1, &two, nullptr), H5Sclose);
        Hid a(H5Acreate2(d, "seedstore.fingerprint", H5T_STD_U64LE, as.get(), H5P_DEFAULT,
                         H5P_DEFAULT),
              H5Aclose);
        const uint64_t lanes[2] = {fps[i].lane0, fps[i].lane1};
        if (a.get() < 0 || H5Awrite(a.get(), H5T_NATIVE_UINT64, lanes) < 0)
          return IoError("cannot write the attributes of '" + t.name + "' in the master");
        return Status::Ok();
      };
      if (want.kind == MasterDataset::kScalar) {
        std::vector<unsigned char> v(DTypeSize(t.dtype));
        SEEDSTORE_RETURN_IF_ERROR(src.Read(i, WholeTensor(t.shape), v.data(), CpuOptions{1}));
        Hid space(H5Screate(H5S_SCALAR), H5Sclose);
        Hid d(H5Dcreate2(fid, dset.c_str(), ftype.get(), space.get(), H5P_DEFAULT, untimed.get(),
                         H5P_DEFAULT),
              H5Dclose);
        if (d.get() < 0 ||
            H5Dwrite(d.get(), ftype.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) < 0)
          return IoError("cannot write the scalar '" + t.name + "' to the master");
        SEEDSTORE_RETURN_IF_ERROR(add_attrs(d.get()));
        continue;
      }
      Hid dcpl(UntimedCreationList(H5P_DATASET_CREATE), H5Pclose);
      bool failed = dcpl.get() < 0;
      for (const VdsMapping& mp : want.mappings) {
        const std::string src_file = BaseName(RankFileName(path, id, mp.rank));
        Hid vs(BoxSpace(mp.to), H5Sclose);
        Hid ss(BoxSpace(mp.from), H5Sclose);
        failed |= vs.get() < 0 || ss.get() < 0 ||
                  H5Pset_virtual(dcpl.get(), vs.get(), VdsSourceName(src_file).c_str(),
                                 VdsSourceName(mp.source).c_str(), ss.get()) < 0;
      }
      if (failed) return IoError("cannot map the pieces of '" + t.name + "' (H5Pset_virtual)");
      std::vector<hsize_t> gdims(t.shape.begin(), t.shape.end());
      Hid space(H5Screate_simple(rank, gdims.data(), nullptr), H5Sclose);
      Hid d(H5Dcreate2(fid, dset.c_str(), ftype.get(), space.get(), H5P_DEFAULT, dcpl.get(),
                       H5P_DEFAULT),
            H5Dclose);
      if (d.get() < 0) return IoError("cannot create the virtual dataset of '" + t.name + "'");
      SEEDSTORE_RETURN_IF_ERROR(add_attrs(d.get()));
    }
    return H5Fflush(fid, H5F_SCOPE_GLOBAL) < 0
               ? IoError("cannot flush master '" + file + "': " + H5ErrorText())
               : Status::Ok();
  }();
  if (!st.ok()) {
    AbandonH5File(fid);
    return st;
  }
  return H5Fclose(fid) < 0 ? IoError("cannot close master '" + file + "': " + H5ErrorText())
                           : Status::Ok();
}

}  // namespace seedstore
