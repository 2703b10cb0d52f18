#include "io/dist_catalog.h"

#include <hdf5.h>

#include <algorithm>
#include <future>
#include <map>
#include <mutex>

#include "io/atomic_file.h"
#include "io/h5_handle.h"
#include "io/h5_object_parser.h"
#include "io/master_vds.h"
#include "io/path.h"
#include "io/rank_files.h"

namespace seedstore {

namespace {

// What a dataspace selects: a box (when the selection is exactly the box its bounds span), or
// `points` elements within `box`.
struct Selection {
  Region box;  // box.shape: the dataspace's extent
  uint64_t points = 0;
  bool is_box = false;
};

// The selection of `space`. A mapping's source space may select "all" without an extent (HDF5
// keeps no source extent; the first writer, before padded pieces, mapped every box piece from
// its whole dataset so): it is then the whole of `source`'s shape (the rank file's dataset,
// whose shape is checked there).
Selection SelectionOf(hid_t space, const Region* source = nullptr) {
  Selection s;
  const int n = H5Sget_simple_extent_ndims(space);
  if (n < 0 || n > kMaxRank) return s;
  if (H5Sget_select_type(space) == H5S_SEL_ALL && n == 0 && source) {
    s.box = WholeRegion(source->rank, source->shape);
    s.points = s.box.Count();
    s.is_box = true;
    return s;
  }
  hsize_t dims[kMaxRank], lo[kMaxRank], hi[kMaxRank];
  if (H5Sget_simple_extent_dims(space, dims, nullptr) < 0) return s;
  s.box.rank = n;
  for (int d = 0; d < n; ++d) s.box.shape[d] = dims[d];
  const hssize_t np = H5Sget_select_npoints(space);
  s.points = np > 0 ? static_cast<uint64_t>(np) : 0;
  if (np > 0 && H5Sget_select_bounds(space, lo, hi) >= 0) {
    for (int d = 0; d < n; ++d) {
      s.box.start[d] = lo[d];
      s.box.stop[d] = hi[d] + 1;
    }
    s.is_box = s.box.Count() == s.points;
  }
  return s;
}

std::string ShapeOf(const Region& r) {
  std::string s = "[";
  for (int d = 0; d < r.rank; ++d) s += (d ? ", " : "") + std::to_string(r.shape[d]);
  return s + "]";
}

std::string DescribeSelection(const Selection& s) {
  if (s.is_box) return DescribeRegion(s.box);
  if (s.points == 0) return "nothing";
  return std::to_string(s.points) + " elements within " + DescribeRegion(s.box);
}

// Whether two boxes have the same rank, start and stop (their extents aside: HDF5 keeps no
// source dataspace extent in a virtual dataset's mappings).
bool SameBox(const Region& a, const Region& b) {
  if (a.flat || b.flat || a.rank != b.rank) return false;
  for (int d = 0; d < a.rank; ++d)
    if (a.start[d] != b.start[d] || a.stop[d] != b.stop[d]) return false;
  return true;
}

// "[2:4, 0:8] from [0:2, 0:8] of '/tensors/x' in 'F'", for mapping messages.
std::string DescribeMapping(const Selection& to, const Selection& from, const std::string& file,
                            const std::string& dset) {
  return DescribeSelection(to) + " from " + DescribeSelection(from) + " of '" + dset + "' in '" +
         file + "'";
}

// HDF5's two-call string getters (H5Pget_virtual_filename / _dsetname).
std::string VirtualString(ssize_t (*get)(hid_t, size_t, char*, size_t), hid_t dcpl, size_t k) {
  const ssize_t n = get(dcpl, k, nullptr, 0);
  if (n < 0) return "?";
  std::string s(static_cast<size_t>(n) + 1, '\0');
  get(dcpl, k, s.data(), s.size());
  s.resize(static_cast<size_t>(n));
  return s;
}

const char* LayoutName(H5D_layout_t l) {
  switch (l) {
    case H5D_COMPACT:
      return "compact";
    case H5D_CONTIGUOUS:
      return "contiguous";
    case H5D_CHUNKED:
      return "chunked";
    case H5D_VIRTUAL:
      return "virtual";
    default:
      return "unknown-layout";
  }
}

}  // namespace

H5Store::VerifyReport DistCatalog::Verify(CpuOptions o,
                                          std::function<void(uint64_t)> progress) const {
  H5Store::VerifyReport rep = master_->Verify(o, progress);  // the lazy tensors
  std::vector<Fingerprint> lazy = std::move(rep.fingerprints);
  std::vector<bool> lazy_complete = std::move(rep.complete);
  rep.tensors = records_.size();
  rep.fingerprints.assign(records_.size(), Fingerprint{});
  std::vector<bool> bad(records_.size(), false);  // not every piece could be read and hashed
  std::vector<StoredTotals> counted(records_.size());
  // Rank by rank, each file opened for its turn and closed after it (the cache keeps only
  // those that padding checks read from). The next file is opened on a thread of its own
  // meanwhile: its open is HDF5 work, while this file's chunks, located at its open, are read,
  // decoded and hashed with no HDF5 call.
  auto open_rank = [this](int r) {
    return std::async(std::launch::async,
                      [this, r] { return OpenRank(r, "", H5Store::OpenFor::kOnePass); });
  };
  // The master's datasets are checked against the index on a thread of their own meanwhile
  // (HDF5 work, a dataset at a time: at 740,352 pieces, 1.4 million virtual mappings).
  std::future<MasterCheck> master_check =
      std::async(std::launch::async, [this] { return CheckMasterDatasets(); });
  std::future<Result<std::unique_ptr<H5Store>>> next;
  if (world() > 0) next = open_rank(0);
  for (int r = 0; r < world(); ++r) {
    auto s = next.get();
    if (r + 1 < world()) next = open_rank(r + 1);
    if (!s.ok()) {
      // Name what the file's loss leaves unchecked: its tensors get no fingerprint.
      std::vector<std::string> affected;
      for (const PieceAt& at : by_rank_[r]) {  // in tensor order
        if (!affected.empty() && affected.back() == records_[at.i].name) continue;
        affected.push_back(records_[at.i].name);
        bad[at.i] = true;
      }
      std::string names;
      for (size_t k = 0; k < affected.size() && k < 4; ++k)
        names += (k ? ", '" : "'") + affected[k] + "'";
      if (affected.size() > 4) names += ", ...";
      rep.problems.push_back(
          {"", -1,
           Status(s.status().code(), s.status().message() + " (its pieces of " +
                                         std::to_string(affected.size()) +
                                         " tensor(s) were not checked" +
                                         (affected.empty() ? "" : ": " + names) + ")")});
      continue;
    }
    H5Store::VerifyReport rr = (*s)->Verify(o, progress);
    rep.chunks += rr.chunks;
    rep.bytes += rr.bytes;
    for (auto& p : rr.problems) {
      const int i = Find(p.tensor);
      if (i >= 0) bad[i] = true;
      rep.problems.push_back(std::move(p));
    }
    size_t hint = 0;
    for (const PieceAt& at : by_rank_[r]) {
      const size_t i = at.i, q = at.p;
      const Piece& p = pieces_[i][q];
      const size_t k =
          static_cast<size_t>(FindRecord(**s, records_[i].name, &hint));  // checked by OpenRank
      counted[i].chunks += (*s)->stored(k).num_chunks;
      counted[i].stored_bytes += (*s)->stored(k).stored_bytes;
      if ((*s)->tensors()[k].piece) {
        rep.fingerprints[i].Add(rr.fingerprints[k]);  // already in the global frame
        if (!p.padded()) continue;
        // A padded piece: less its padding, which must hold what the pieces owning those
        // elements hold (a later reshard may copy it).
        auto pad = PaddingFingerprint(i, q, o);
        Status st = pad.status();
        Fingerprint owners;
        if (st.ok()) {
          auto f = PaddingFingerprint(i, q, o, /*from_owners=*/true);
          st = f.status();
          if (f.ok()) owners = *f;
        }
        if (st.ok() && *pad != owners)
          st = DistError("padding-mismatch", Code::kMismatch, path_, r, rank_files_[r],
                         "tensor '" + records_[i].name + "' piece " + DescribeRegion(p.region()) +
                             " stored as " + DescribeRegion(p.stored()) +
                             ": its padding differs from the pieces that own those elements");
        if (!st.ok()) {
          rep.problems.push_back({records_[i].name, -1, st});
          bad[i] = true;
        } else {
          rep.fingerprints[i].Sub(*pad);
        }
        continue;
      }
      // A rank file from before piece records: its fingerprints are in its own frame.
      auto f = FingerprintRegion(i, p.region(), o);
      if (!f.ok()) {
        rep.problems.push_back({records_[i].name, -1, f.status()});
        bad[i] = true;
      } else {
        rep.fingerprints[i].Add(*f);
      }
    }
  }
  MasterCheck mc = master_check.get();
  CompareMasterScalars(bad, &mc);
  for (auto& ps : mc.tensor)
    for (auto& p : ps) rep.problems.push_back(std::move(p));
  for (auto& p : mc.other) rep.problems.push_back(std::move(p));
  rep.complete.assign(records_.size(), false);
  for (size_t i = 0; i < records_.size(); ++i) {
    const TensorRecord& t = records_[i];
    if (t.lazy) {
      const int k = master_->Find(t.name);
      if (k >= 0) {
        rep.fingerprints[i] = lazy[k];
        rep.complete[i] = lazy_complete[k];
      }
      continue;
    }
    rep.complete[i] = !bad[i];
    if (!bad[i] && storage_[i] &&
        (storage_[i]->chunks != counted[i].chunks ||
         storage_[i]->stored_bytes != counted[i].stored_bytes))
      rep.problems.push_back(
          {t.name, -1,
           DistError("bad-index", Code::kCorrupt, path_, -1, "",
                     std::string(kDistIndexPath) + ": tensor '" + t.name + "' is recorded as " +
                         std::to_string(storage_[i]->chunks) + " chunks, " +
                         std::to_string(storage_[i]->stored_bytes) +
                         " bytes stored; its rank files hold " + std::to_string(counted[i].chunks) +
                         " chunks, " + std::to_string(counted[i].stored_bytes) + " bytes")});
    if (!bad[i] && t.fingerprint && *t.fingerprint != rep.fingerprints[i])
      rep.problems.push_back(
          {t.name, -1,
           StoreStatus(StoreError::kFingerprintMismatch,
                       "distributed save '" + path_ + "' tensor '" + t.name +
                           "': its pieces' fingerprints add up to " +
                           FingerprintHex(rep.fingerprints[i]) + ", the index says " +
                           FingerprintHex(*t.fingerprint))});
  }
  rep.FinishOk(records_);
  return rep;
}

namespace {

// The problems of dataset `d`'s attributes (seedstore.name, .dtype, .fingerprint) against
// tensor `t`'s record, each prefixed by `where`.
std::vector<std::string> AttributeProblems(hid_t d, const TensorRecord& t,
                                           const std::string& where) {
  std::vector<std::string> out;
  auto name = ReadStringAttr(d, "seedstore.name", where);
  if (!name.ok()) out.push_back(name.status().message());
  else if (*name != t.name) out.push_back(where + "seedstore.name is '" + *name + "'");
  auto dt = ReadStringAttr(d, "seedstore.dtype", where);
  if (!dt.ok()) out.push_back(dt.status().message());
  else if (*dt != DTypeName(t.dtype))
    out.push_back(where + "seedstore.dtype is '" + *dt + "', the index says '" +
                  DTypeName(t.dtype) + "'");
  auto fp = ReadU64ArrayAttr(d, "seedstore.fingerprint", where);
  if (!fp.ok()) {
    out.push_back(fp.status().message());
  } else if (fp->size() != 2 || !t.fingerprint || (*fp)[0] != t.fingerprint->lane0 ||
             (*fp)[1] != t.fingerprint->lane1) {
    std::string got;
    if (fp->size() == 2) got = FingerprintHex(Fingerprint{(*fp)[0], (*fp)[1]});
    else got = std::to_string(fp->size()) + " words";
    out.push_back(where + "seedstore.fingerprint is " + got + ", the index says " +
                  (t.fingerprint ? FingerprintHex(*t.fingerprint) : std::string("none")));
  }
  return out;
}

// How the mappings of a virtual dataset (creation list `dcpl`) differ, in order, from
// those the writer makes (`w`, from the tensor's `pieces`; rank r's source file is the base
// name of rank_files[r]): none when they agree; else their count, when it differs, and what
// differs first and how many more do.
std::vector<std::string> MappingProblems(hid_t dcpl, const MasterDataset& w,
                                         const std::vector<DistCatalog::Piece>& pieces,
                                         const std::vector<std::string>& rank_files) {
  size_t n = 0;
  if (H5Pget_virtual_count(dcpl, &n) < 0) return {"its mappings cannot be read"};
  std::vector<std::string> out;
  if (n != w.mappings.size())
    out.push_back("has " + std::to_string(n) + " mappings, the index's pieces give " +
                  std::to_string(w.mappings.size()));
  size_t differ = 0;
  std::string first;
  for (size_t k = 0; k < std::min(n, w.mappings.size()); ++k) {
    const VdsMapping& m = w.mappings[k];
    Hid vs(H5Pget_virtual_vspace(dcpl, k), H5Sclose);
    Hid ss(H5Pget_virtual_srcspace(dcpl, k), H5Sclose);
    const Selection to = SelectionOf(vs.get()), from = SelectionOf(ss.get(), &m.from);
    const std::string file = VirtualString(H5Pget_virtual_filename, dcpl, k);
    const std::string src = VirtualString(H5Pget_virtual_dsetname, dcpl, k);
    // Compared (and shown) as the patterns HDF5 keeps: a lone `%b` must not pass for `%%b`.
    const std::string want_file = VdsSourceName(BaseName(rank_files[m.rank])),
                      want_src = VdsSourceName(m.source);
    if (vs.get() >= 0 && ss.get() >= 0 && to.is_box && from.is_box && SameBox(to.box, m.to) &&
        SameBox(from.box, m.from) && file == want_file && src == want_src)
      continue;
    if (differ++ == 0) {
      const DistCatalog::Piece& p = pieces[m.piece];
      first = "mapping " + std::to_string(k) + " maps " + DescribeMapping(to, from, file, src) +
              "; the index says " +
              DescribeMapping({m.to, m.to.Count(), true}, {m.from, m.from.Count(), true}, want_file,
                              want_src) +
              " (piece " + std::to_string(m.piece) + ", " + DescribeRegion(p.region()) +
              " of rank " + std::to_string(p.rank) +
              (p.padded() ? " stored as " + DescribeRegion(p.stored()) : "") + ")";
    }
  }
  if (differ)
    out.push_back(first +
                  (differ > 1 ? " (" + std::to_string(differ - 1) + " more mappings differ)" : ""));
  return out;
}

// The names of the links in group `group` of file `f`, in name order; false when it is no group.
bool LinksOf(hid_t f, const char* group, std::vector<std::string>* links) {
  Hid g(H5Gopen2(f, group, H5P_DEFAULT), H5Gclose);
  if (g.get() < 0) return false;
  hsize_t at = 0;
  H5Literate(
      g.get(), H5_INDEX_NAME, H5_ITER_INC, &at,
      [](hid_t, const char* name, const H5L_info_t*, void* out) -> herr_t {
        static_cast<std::vector<std::string>*>(out)->push_back(name);
        return 0;
      },
      links);
  return true;
}

}  // namespace

H5Store::Problem DistCatalog::VdsProblem(const std::string& tensor, const std::string& what) const {
  return {tensor, -1, DistError("vds-mismatch", Code::kCorrupt, path_, -1, "", "master " + what)};
}

DistCatalog::MasterCheck DistCatalog::CheckMasterDatasets() const {
  MasterCheck check;
  check.tensor.resize(records_.size());
  std::vector<MasterDataset> want(records_.size());  // kinds only; mappings one tensor at a time
  for (size_t i = 0; i < records_.size(); ++i)
    want[i] = MasterDatasetOf(records_[i], pieces_[i],
                              (flat_boxes_ ? FlatMappings::kBoxes : FlatMappings::kRuns),
                              /*with_mappings=*/false);
  const Result<std::string> resolved = ResolveSymlinks(path_);
  const std::string master_file = resolved.ok() ? *resolved : path_;
  const hid_t f = master_->h5_file();
  auto problem_in = [&](std::vector<H5Store::Problem>& to, const std::string& tensor,
                        const std::string& what) { to.push_back(VdsProblem(tensor, what)); };
  // Link name under /tensors -> tensor (dense or lazy): every link must be an expected dataset.
  std::map<std::string, size_t> by_link;
  for (size_t i = 0; i < records_.size(); ++i) by_link[EscapeH5Name(records_[i].name)] = i;
  bool have_group;
  {
    H5Guard g;
    have_group = H5Lexists(f, "/tensors", H5P_DEFAULT) > 0;
  }
  for (size_t i = 0; i < records_.size(); ++i) {
    const TensorRecord& t = records_[i];
    if (want[i].kind == MasterDataset::kNone) continue;
    auto problem = [&](const std::string& tensor, const std::string& what) {
      problem_in(check.tensor[i], tensor, what);
    };
    const MasterDataset w =
        MasterDatasetOf(t, pieces_[i], (flat_boxes_ ? FlatMappings::kBoxes : FlatMappings::kRuns));
    const std::string dset = "/tensors/" + EscapeH5Name(t.name);
    const std::string where = "tensor '" + t.name + "' " + dset + ": ";
    const std::string expected =
        w.kind == MasterDataset::kScalar
            ? "a scalar dataset holding the value"
            : "a virtual dataset of its " + std::to_string(pieces_[i].size()) + " pieces";
    H5Guard g;  // this dataset's checks
    if (!have_group || H5Lexists(f, dset.c_str(), H5P_DEFAULT) <= 0) {
      problem(t.name, where + "missing (the index's tensor needs " + expected + ")");
      continue;
    }
    H5L_info_t li;
    if (H5Lget_info(f, dset.c_str(), &li, H5P_DEFAULT) < 0 || li.type != H5L_TYPE_HARD) {
      problem(t.name, where + "is a soft or external link, not " + expected + " of the master");
      continue;
    }
    // Opening a dataset decodes its layout: a virtual one's mappings only once they are known
    // intact (VdsHeapIntact). A dataset of another layout is not virtual; that is named below.
    H5O_info_t oi;
    if (H5Oget_info_by_name2(f, dset.c_str(), &oi, H5O_INFO_BASIC, H5P_DEFAULT) < 0 ||
        oi.type != H5O_TYPE_DATASET) {
      problem(t.name, where + "is not a dataset (the index's tensor needs " + expected + ")");
      continue;
    }
    if (const std::string why = SafeToOpen(master_file, f, dset); !why.empty()) {
      problem(t.name, where + "cannot be opened safely: " + why);
      continue;
    }
    Hid d(H5Dopen2(f, dset.c_str(), H5P_DEFAULT), H5Dclose);
    if (d.get() < 0) {
      problem(t.name, where + "cannot be opened (the index's tensor needs " + expected + ")");
      continue;
    }
    // Attributes (docs/FORMAT.md 4.2), against the index.
    for (const std::string& m : AttributeProblems(d.get(), t, where)) problem(t.name, m);
    // Shape and type.
    Hid space(H5Dget_space(d.get()), H5Sclose);
    const Selection all = SelectionOf(space.get());
    const std::vector<uint64_t> dshape(all.box.shape, all.box.shape + all.box.rank);
    const bool shape_ok =
        space.get() >= 0 && H5Sget_simple_extent_type(space.get()) != H5S_NULL && dshape == t.shape;
    if (!shape_ok)
      problem(t.name, where + "its shape is " + ShapeOf(all.box) + ", the index says " +
                          ShapeOf(WholeTensor(t.shape)));
    Hid type(H5Dget_type(d.get()), H5Tclose);
    const bool type_ok = type.get() >= 0 && H5TypeStores(type.get(), t.dtype);
    if (!type_ok) problem(t.name, where + "its HDF5 type does not store " + DTypeName(t.dtype));
    Hid dcpl(H5Dget_create_plist(d.get()), H5Pclose);
    const H5D_layout_t layout = H5Pget_layout(dcpl.get());
    if (w.kind == MasterDataset::kScalar) {
      if (layout == H5D_VIRTUAL) {
        problem(t.name, where + "is a virtual dataset, not " + expected);
        continue;
      }
      if (shape_ok && type_ok) check.scalars.push_back(i);
      continue;
    }
    if (layout != H5D_VIRTUAL) {
      problem(t.name,
              where + "is a " + std::string(LayoutName(layout)) + " dataset, not " + expected);
      continue;
    }
    // The mappings, in order, against those the writer makes from the index's pieces.
    for (const std::string& m : MappingProblems(dcpl.get(), w, pieces_[i], rank_files_))
      problem(t.name, where + m);
  }
  // Every dataset under /tensors must be one of those above.
  if (!have_group) return check;
  std::vector<std::string> links;
  bool is_group;
  {
    H5Guard g;
    is_group = LinksOf(f, "/tensors", &links);
  }
  if (!is_group) {
    problem_in(check.other, "", "/tensors: is not a group");
    return check;
  }
  for (const std::string& l : links) {
    const auto it = by_link.find(l);
    if (it != by_link.end() && want[it->second].kind != MasterDataset::kNone) continue;
    if (it == by_link.end()) {
      problem_in(check.other, "", "/tensors/" + l + ": no dense tensor of the index has this name");
    } else {
      const TensorRecord& t = records_[it->second];
      problem_in(check.other, t.name,
                 "tensor '" + t.name + "' /tensors/" + l +
                     ": exists, but the master holds no dataset for this tensor: " +
                     want[it->second].why_none);
    }
  }
  return check;
}

void DistCatalog::CompareMasterScalars(const std::vector<bool>& bad, MasterCheck* check) const {
  for (const size_t i : check->scalars) {
    if (bad[i]) continue;
    const TensorRecord& t = records_[i];
    // The value as its piece holds it (read through the rank files, before taking the HDF5
    // lock: reads take it themselves, maybe on other threads).
    std::vector<unsigned char> want(DTypeSize(t.dtype));
    if (!Read(i, WholeTensor(t.shape), want.data(), CpuOptions{1}).ok()) continue;
    const std::string dset = "/tensors/" + EscapeH5Name(t.name);
    const std::string where = "tensor '" + t.name + "' " + dset + ": ";
    std::string what;
    {
      H5Guard g;
      Hid d(H5Dopen2(master_->h5_file(), dset.c_str(), H5P_DEFAULT), H5Dclose);
      Hid type(d.get() >= 0 ? H5Dget_type(d.get()) : -1, H5Tclose);
      std::vector<unsigned char> got(want.size());
      if (d.get() < 0 || type.get() < 0 ||
          H5Dread(d.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, got.data()) < 0)
        what = where + "its value cannot be read";
      else if (got != want)
        what = where + "its value differs from the one its piece holds (rank " +
               std::to_string(pieces_[i][0].rank) + " file '" +
               BaseName(rank_files_[pieces_[i][0].rank]) + "')";
    }
    if (!what.empty()) check->tensor[i].push_back(VdsProblem(t.name, what));
  }
}

}  // namespace seedstore
