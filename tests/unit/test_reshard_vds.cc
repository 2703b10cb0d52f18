// A distributed save's master and its virtual datasets, in one process: names with '/' and '%'
// mapped as patterns; masters and rank files not rewritten as stores; a rank file of another
// save refused; verify checks the master's datasets (what h5py reads) against the index and
// names every way they differ, continuing past problems; damaged mappings named, not decoded.
#include "tests/reshard_test_util.h"

namespace seedstore {
namespace {

using namespace reshardtest;  // NOLINT

// Escaped names hold '%' (a '/' is "%2F", FORMAT.md 4), and HDF5 reads a mapping's source file
// and dataset names as patterns ("%b": a block number, "%%": one '%'). Names in JAX's style
// ("params/dense/kernel"), and a '%' in the save's own path, are saved, verified (the mappings
// compared as patterns) and read by h5py.
TEST(ReshardVds, NamesWithSlashesAndPercentsAreMappedAsPatterns) {
  static RawFixture f = MakeRawSource(R"({"seedstore": 1, "seed": 5, "tensors": [
     {"name": "params/dense/kernel", "shape": [6, 4], "dtype": "float32", "init": {"dist": "normal"}},
     {"name": "w%b", "shape": [7], "dtype": "uint32", "init": {"dist": "bits"}},
     {"name": "100%", "shape": [3, 3], "dtype": "bfloat16", "init": {"dist": "normal"}},
     {"name": "..", "shape": [5], "dtype": "float32", "init": {"dist": "normal"}}]})",
                                      "rv_pct_source.h5", 64);
  const std::string layout =
      Write("rv_pct_layout.json", R"({"mesh": {"axes": ["data"], "shape": [2]},
 "placements": [{"match": "*", "spec": ["data"]}, {"match": "..", "flat": ["data"]}]})");
  for (const std::string name : {"rv_pct.h5", "rv_%b_%%.h5"}) {
    SCOPED_TRACE(name);
    const std::string out = TempDir() + "/" + name;
    auto r = ReshardHere(f.source, layout, out);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(VerifyProblems(out), std::vector<std::string>{});
    auto d = DistCatalog::Open(out);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    for (size_t i = 0; i < (*d)->tensors().size(); ++i) {
      const TensorRecord& t = (*d)->tensors()[i];
      std::vector<unsigned char> got(t.NumElements() * DTypeSize(t.dtype));
      ASSERT_TRUE((*d)->Read(i, WholeTensor(t.shape), got.data()).ok()) << t.name;
      EXPECT_EQ(got, f.values.at(t.name)) << t.name;
    }
    const std::string py = PythonWithH5py();
    if (py.empty()) {
      std::printf(
          "[ SKIPPED ] h5py read of %s: no python with h5py + hdf5plugin (SEEDSTORE_PYTHON)\n",
          name.c_str());
      continue;
    }
    Proc p = H5pyCompare(py, f.source, out);
    EXPECT_EQ(p.code, 0) << p.out << p.err;
    EXPECT_NE(p.out.find("h5py-ok 4"), std::string::npos) << p.out << p.err;
  }
}

// A master is an HDF5 store holding only the save's lazy tensors and scalars: rewriting it as
// one (import --update, ReplaceWithDense) once dropped every dense tensor and orphaned the rank
// files, exit 0. Both are refused before anything is written; the save stays byte-identical.
TEST(ReshardVds, AMasterIsNotRewrittenAsAStore) {
  const std::string out = VdsSave("rv_update.h5");
  auto d = DistCatalog::Open(out);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  std::vector<std::string> files = (*d)->rank_files();
  d->reset();
  files.push_back(out);
  std::map<std::string, std::string> before;
  for (const std::string& f : files) before[f] = ranktest::ReadAll(f);
  // A safetensors file of the save's own tensors (dense ones, and "lz", lazy in the save).
  auto src = OpenCatalog(GetVds().source);
  ASSERT_TRUE(src.ok());
  const std::string st = TempDir() + "/rv_update.safetensors";
  ExportOptions eo;
  auto n = ExportSafetensors(**src, st, eo);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  ASSERT_EQ(*n, 6);
  ImportOptions io;
  io.update = true;
  auto r = ImportSafetensors(st, out, io);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << r.status().ToString();
  EXPECT_NE(r.status().message().find("is a distributed save's master"), std::string::npos)
      << r.status().ToString();
  std::vector<unsigned char> ones(16, 0);
  Status s = ReplaceWithDense(out, {{"lz", [&](const Region&, void* o) {
                                       std::memcpy(o, ones.data(), ones.size());
                                       return Status::Ok();
                                     }}});
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  for (const std::string& f : files)
    EXPECT_TRUE(ranktest::ReadAll(f) == before[f]) << f << " changed";
  EXPECT_EQ(VerifyProblems(out), std::vector<std::string>{});
}

// Nor is one of its rank files: import --update onto a rank file rewrote it alone, after
// which the save failed to verify and read (rank-file-corrupt: its fingerprint is not the one
// the index records). Refused before anything is written, naming the file, its rank and the
// save, the update pointing at the save; a file so named with no master beside it is an
// ordinary store and is updated.
TEST(ReshardVds, ARankFileIsNotRewrittenAsAStore) {
  const std::string out = VdsSave("rv_rank_update.h5");
  auto d = DistCatalog::Open(out);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  std::vector<std::string> files = (*d)->rank_files();
  d->reset();
  ASSERT_GE(files.size(), 2u);
  const std::string rank1 = files[1];
  std::string save;
  uint32_t id = 0;
  int rank = -1;
  ASSERT_TRUE(ParseRankFileName(rank1, &save, &id, &rank)) << rank1;
  ASSERT_EQ(rank, 1);
  files.push_back(out);
  std::map<std::string, std::string> before;
  for (const std::string& f : files) before[f] = ranktest::ReadAll(f);
  // The rank file's own tensors, as safetensors: the same names, shapes and pieces.
  auto src = OpenCatalog(rank1);
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  const std::string st = TempDir() + "/rv_rank_update.safetensors";
  auto n = ExportSafetensors(**src, st, ExportOptions{});
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  ASSERT_GT(*n, 0);
  size_t dense = 0;  // a dense tensor of the rank file, replaced by zeros below
  while (dense < (*src)->tensors().size() && (*src)->tensors()[dense].lazy) ++dense;
  ASSERT_LT(dense, (*src)->tensors().size());
  const TensorRecord t = (*src)->tensors()[dense];
  src->reset();
  ImportOptions io;
  io.update = true;
  auto r = ImportSafetensors(st, rank1, io);
  ASSERT_FALSE(r.ok()) << "the rank file was rewritten";
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << r.status().ToString();
  const std::string said = r.status().message();
  EXPECT_NE(
      said.find("file '" + rank1 + "' is rank 1's file of the distributed save '" + out + "'"),
      std::string::npos)
      << said;
  EXPECT_NE(said.find("update the save instead"), std::string::npos) << said;
  EXPECT_NE(said.find("seedstore reshard " + out + " --consolidate"), std::string::npos) << said;
  Status s = ReplaceWithDense(rank1, {{t.name, [&](const Region& box, void* o) {
                                         std::memset(o, 0, box.Count() * DTypeSize(t.dtype));
                                         return Status::Ok();
                                       }}});
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("is rank 1's file of the distributed save"), std::string::npos)
      << s.ToString();
  for (const std::string& f : files)
    EXPECT_TRUE(ranktest::ReadAll(f) == before[f]) << f << " changed";
  EXPECT_EQ(VerifyProblems(out), std::vector<std::string>{});
  // The same file, by the same name, in a folder without its master: an ordinary store.
  const std::string lone_dir = TempDir() + "/rv_rank_lone";
  ASSERT_EQ(std::system(("mkdir -p " + lone_dir).c_str()), 0);
  const std::string lone = lone_dir + "/" + rank1.substr(rank1.rfind('/') + 1);
  std::ofstream(lone, std::ios::binary) << before[rank1];
  auto u = ImportSafetensors(st, lone, io);
  EXPECT_TRUE(u.ok()) << u.status().ToString();
}

// A rank file of another save with the same layout has the same names, shapes and pieces, and
// its chunks verify: unchecked, reads would serve its values, and a reshard in place
// (--consolidate onto the save) would replace the save by them. The index records each
// piece's fingerprint, checked against the rank file's record when it is opened.
TEST(ReshardVds, ARankFileOfAnotherSaveIsRefusedBeforeAnythingIsWritten) {
  std::string spec = kVdsSpec;  // the same tensors, other values
  spec.replace(spec.find("\"seed\": 3"), 9, "\"seed\": 4");
  static RawFixture other = MakeRawSource(spec.c_str(), "rv_other_source.h5", 4096);
  std::vector<std::string> mine, theirs;
  const std::string a = VdsSave("rv_swap_a.h5", &mine);
  const std::string b = TempDir() + "/rv_swap_b.h5";
  ASSERT_TRUE(
      ReshardHere(other.source, VdsLayout(), b, false, false, {}, kStoreFormatVersion).ok());
  auto db = DistCatalog::Open(b);
  ASSERT_TRUE(db.ok());
  const std::string from = (*db)->rank_files()[1];
  db->reset();
  const std::string to = TempDir() + "/" + mine[1], keep = TempDir() + "/rv_swap_keep.h5";
  std::filesystem::copy_file(to, keep, std::filesystem::copy_options::overwrite_existing);
  std::filesystem::copy_file(from, to, std::filesystem::copy_options::overwrite_existing);
  std::map<std::string, std::string> before;
  for (const std::string& f : mine) before[f] = ranktest::ReadAll(TempDir() + "/" + f);
  before["master"] = ranktest::ReadAll(a);
  const std::string want = "has fingerprint ";
  const std::string why = "the file is not this save's";
  // Reading "w" (its piece 1 is in rank 1's file) is refused, naming the rank file.
  auto d = DistCatalog::Open(a);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  const int w = (*d)->Find("w");
  ASSERT_GE(w, 0);
  std::vector<unsigned char> got(10 * 8 * 4);
  Status r = (*d)->Read(w, WholeTensor({10, 8}), got.data());
  EXPECT_EQ(r.code(), Code::kCorrupt) << r.ToString();
  EXPECT_NE(r.message().find("rank-file-corrupt"), std::string::npos) << r.ToString();
  EXPECT_NE(r.message().find(mine[1]), std::string::npos) << r.ToString();
  EXPECT_NE(r.message().find(why), std::string::npos) << r.ToString();
  d->reset();
  // A reshard of it -- in place, consolidated or not -- fails before it replaces anything.
  for (bool consolidate : {true, false}) {
    auto rs = ReshardHere(a, consolidate ? "" : VdsLayout(), a, consolidate);
    ASSERT_FALSE(rs.ok());
    EXPECT_NE(rs.status().message().find(why), std::string::npos) << rs.status().ToString();
  }
  for (const std::string& f : mine)
    EXPECT_TRUE(ranktest::ReadAll(TempDir() + "/" + f) == before[f]) << f << " changed";
  EXPECT_TRUE(ranktest::ReadAll(a) == before["master"]) << "the master changed";
  // verify names it; with the save's own rank file back, all is well again.
  const std::vector<std::string> problems = VerifyProblems(a);
  ASSERT_FALSE(problems.empty());
  EXPECT_NE(problems[0].find(want), std::string::npos) << problems[0];
  std::filesystem::copy_file(keep, to, std::filesystem::copy_options::overwrite_existing);
  EXPECT_EQ(VerifyProblems(a), std::vector<std::string>{});
}

TEST(ReshardVds, UntouchedSavesVerifyCleanAndTheirVirtualDatasetsAreTheIndexs) {
  // Box pieces, flat pieces of several runs, a flat tensor with too many runs for a virtual
  // dataset, a scalar, an empty tensor, a lazy one.
  std::vector<std::string> files;
  const std::string v2 = VdsSave("rv_clean.h5", &files);
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(VerifyProblems(v2), std::vector<std::string>{});
  // The mappings, worked out by hand from docs/FORMAT.md 10.
  EditH5(v2, [&](hid_t f) {
    const hid_t lg = H5Dopen2(f, "/tensors/long", H5P_DEFAULT);  // one box per flat piece
    EXPECT_EQ(Mappings(lg).size(), 2u);
    H5Dclose(lg);
    EXPECT_EQ(H5Lexists(f, "/tensors/e", H5P_DEFAULT), 0);   // no elements
    EXPECT_EQ(H5Lexists(f, "/tensors/lz", H5P_DEFAULT), 0);  // lazy
    const hid_t w = H5Dopen2(f, "/tensors/w", H5P_DEFAULT);
    const auto mw = Mappings(w);
    H5Dclose(w);
    ASSERT_EQ(mw.size(), 2u);
    EXPECT_EQ(mw[1].vstart, (std::vector<hsize_t>{5, 0}));
    EXPECT_EQ(mw[1].vcount, (std::vector<hsize_t>{5, 8}));
    EXPECT_EQ(mw[1].sstart, (std::vector<hsize_t>{0, 0}));
    EXPECT_EQ(mw[1].file, files[1]);
    EXPECT_EQ(mw[1].dset, "/tensors/w");
    const hid_t fl = H5Dopen2(f, "/tensors/fl", H5P_DEFAULT);
    const auto mf = Mappings(fl);
    H5Dclose(fl);
    ASSERT_EQ(mf.size(), 4u);  // boxes: rows [0:2], row 2 [0:2] | row 2 [2:4], rows [3:5]
    EXPECT_EQ(mf[0].vcount, (std::vector<hsize_t>{2, 4}));
    EXPECT_EQ(mf[0].scount, (std::vector<hsize_t>{8}));
    EXPECT_EQ(mf[1].vstart, (std::vector<hsize_t>{2, 0}));
    EXPECT_EQ(mf[1].sstart, (std::vector<hsize_t>{8}));
    EXPECT_EQ(mf[2].vstart, (std::vector<hsize_t>{2, 2}));
    EXPECT_EQ(mf[2].vcount, (std::vector<hsize_t>{1, 2}));
    EXPECT_EQ(mf[2].sstart, (std::vector<hsize_t>{0}));
    EXPECT_EQ(mf[2].scount, (std::vector<hsize_t>{2}));
    EXPECT_EQ(mf[2].file, files[1]);
    EXPECT_EQ(mf[3].vstart, (std::vector<hsize_t>{3, 0}));
    EXPECT_EQ(mf[3].sstart, (std::vector<hsize_t>{2}));
    EXPECT_EQ(mf[3].scount, (std::vector<hsize_t>{8}));
  });
  // Uneven rows, empty shards, a scalar and an empty tensor; padded pieces (b's rows [0, 19)
  // stored as [0, 20)); pieces padded in two dims over a 3 x 2 mesh; nested and flat
  // shardings of the small model.
  const std::string r3 = TempDir() + "/rv_rows3.h5", r2 = TempDir() + "/rv_rows2.h5";
  const std::string p6 = TempDir() + "/rv_pad6.h5", m4 = TempDir() + "/rv_model4.h5";
  for (int v : {kCellsFormatVersion, kStoreFormatVersion}) {  // the mappings below: version 1
    ASSERT_TRUE(ReshardHere(GetRaw().source, RowsLayout(3), r3, false, false, {}, v).ok());
    ASSERT_TRUE(ReshardHere(GetRaw().source, RowsLayout(2), r2, false, false, {}, v).ok());
    ASSERT_TRUE(ReshardHere(GetPad().source, PadLayout(3, 2), p6, false, false, {}, v).ok());
    ASSERT_TRUE(ReshardHere(Get().source, LayoutFile(2, 2), m4, false, false, {}, v).ok());
    for (const std::string& p : {r3, r2, p6, m4})
      EXPECT_EQ(VerifyProblems(p), std::vector<std::string>{}) << p << " version " << v;
  }
  auto d2 = DistCatalog::Open(r2);
  ASSERT_TRUE(d2.ok());
  const auto& pb = (*d2)->pieces((*d2)->Find("b"));
  ASSERT_EQ(pb.size(), 2u);
  EXPECT_FALSE(SameRegion(pb[0].region(), pb[0].stored()));  // padded
  auto d6 = DistCatalog::Open(p6);
  ASSERT_TRUE(d6.ok());
  EXPECT_FALSE(SameRegion((*d6)->pieces(0)[3].region(), (*d6)->pieces(0)[3].stored()));
  d2->reset();  // HDF5 opens a file only once for writing
  d6->reset();
  // The padded piece maps its region from where it lies in its stored box.
  EditH5(r2, [&](hid_t f) {
    const hid_t b = H5Dopen2(f, "/tensors/b", H5P_DEFAULT);
    const auto mb = Mappings(b);
    H5Dclose(b);
    ASSERT_EQ(mb.size(), 2u);
    EXPECT_EQ(mb[0].vcount, (std::vector<hsize_t>{19, 23}));
    EXPECT_EQ(mb[0].sstart, (std::vector<hsize_t>{0, 0}));
    EXPECT_EQ(mb[0].scount, (std::vector<hsize_t>{19, 23}));  // of the stored [20, 23]
  });
}

// Version 2 (docs/FORMAT.md 11): rank 1's file packs its pieces into cell sets by dtype,
// chunk shape and pipeline -- w's piece [5:10, 0:8] (one chunk, set 0), fl's flat [10, 20)
// (set 1) and long's flat rows (set 2) -- and the master maps each chunk from its cell.
TEST(ReshardVds, CellsAreMappedChunkByChunkAndH5pyReadsThem) {
  std::vector<std::string> files;
  const std::string v2 = VdsSave("rv_cells.h5", &files, kCellsFormatVersion);
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(VerifyProblems(v2), std::vector<std::string>{});
  {
    auto d = DistCatalog::Open(v2);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    const auto& pw = (*d)->pieces((*d)->Find("w"));
    ASSERT_EQ(pw.size(), 2u);
    ASSERT_TRUE(pw[1].cells().has_value());
    EXPECT_EQ(*pw[1].cells(), (PieceCells{0, 0, {5, 8}}));
    auto r1 = H5Store::Open(TempDir() + "/" + files[1]);
    ASSERT_TRUE(r1.ok()) << r1.status().ToString();
    EXPECT_EQ((*r1)->format_version(), kCellsFormatVersion);
    const StoredTensor& sw = (*r1)->stored((*r1)->Find("w"));
    EXPECT_EQ(sw.dataset, "/cells/0");
    EXPECT_EQ(sw.cell_set, 0);
    const StoredTensor& sf = (*r1)->stored((*r1)->Find("fl"));
    EXPECT_EQ(sf.dataset, "/cells/1");
    EXPECT_EQ(sf.chunk, (std::vector<uint64_t>{10}));
    // The scalar keeps a dataset of its own (rank 0's).
    auto r0 = H5Store::Open(TempDir() + "/" + files[0]);
    ASSERT_TRUE(r0.ok()) << r0.status().ToString();
    ASSERT_GE((*r0)->Find("s"), 0);
    EXPECT_EQ((*r0)->stored((*r0)->Find("s")).cell_set, -1);
    EXPECT_EQ((*r0)->stored((*r0)->Find("s")).dataset, "/tensors/s");
  }
  EditH5(v2, [&](hid_t f) {
    const hid_t w = H5Dopen2(f, "/tensors/w", H5P_DEFAULT);
    const auto mw = Mappings(w);
    H5Dclose(w);
    ASSERT_EQ(mw.size(), 2u);
    EXPECT_EQ(mw[1].vstart, (std::vector<hsize_t>{5, 0}));
    EXPECT_EQ(mw[1].vcount, (std::vector<hsize_t>{5, 8}));
    EXPECT_EQ(mw[1].sstart, (std::vector<hsize_t>{0, 0, 0}));
    EXPECT_EQ(mw[1].scount, (std::vector<hsize_t>{1, 5, 8}));
    EXPECT_EQ(mw[1].file, files[1]);
    EXPECT_EQ(mw[1].dset, "/cells/0");
    const hid_t fl = H5Dopen2(f, "/tensors/fl", H5P_DEFAULT);
    const auto mf = Mappings(fl);
    H5Dclose(fl);
    ASSERT_EQ(mf.size(), 4u);  // per cell, its flat range's boxes: row 2 [2:4], rows [3:5]
    EXPECT_EQ(mf[2].vstart, (std::vector<hsize_t>{2, 2}));
    EXPECT_EQ(mf[2].sstart, (std::vector<hsize_t>{0, 0}));
    EXPECT_EQ(mf[2].scount, (std::vector<hsize_t>{1, 2}));
    EXPECT_EQ(mf[2].dset, "/cells/1");
    EXPECT_EQ(mf[3].vstart, (std::vector<hsize_t>{3, 0}));
    EXPECT_EQ(mf[3].sstart, (std::vector<hsize_t>{0, 2}));
    EXPECT_EQ(mf[3].scount, (std::vector<hsize_t>{1, 8}));
  });
  ExpectH5pyReadsVds(v2);
  // An index whose cells are not where the rank file keeps them is named, not read.
  ASSERT_NO_FATAL_FAILURE(EditIndex(v2, [](nlohmann::json& j) {
    for (auto& t : j["tensors"])
      if (t["name"] == "w") t["pieces"][1]["cells"]["first"] = 1;
  }));
  auto d = DistCatalog::Open(v2);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  std::vector<unsigned char> got(10 * 8 * 4);
  const Status r = (*d)->Read((*d)->Find("w"), WholeTensor({10, 8}), got.data());
  EXPECT_EQ(r.code(), Code::kCorrupt) << r.ToString();
  EXPECT_NE(r.message().find("rank-file-corrupt: distributed save '" + v2 + "' rank 1"),
            std::string::npos)
      << r.ToString();
  EXPECT_NE(r.message().find("is stored in cells 0.. of set 0 (chunks [5, 8]), the index says "
                             "cells 1.. of set 0"),
            std::string::npos)
      << r.ToString();
}

TEST(ReshardVds, VerifyNamesEveryWayTheMasterDiffersFromTheIndex) {
  struct Case {
    std::string name;
    std::function<void(hid_t, const std::vector<std::string>&)> tamper;
    std::vector<std::string>
        want;  // each problem's message, after "vds-mismatch: distributed save 'P': master "
  };
  std::vector<Case> cases = {
      {"wrong_file",  // (a) mapping 1 of w reads rank 0's file
       [](hid_t f, const std::vector<std::string>& files) {
         RewriteVds(f, "/tensors/w", [&](std::vector<TestMapping>& m) { m[1].file = files[0]; });
       },
       {"tensor 'w' /tensors/w: mapping 1 maps [5:10, 0:8] from [0:5, 0:8] of '/tensors/w' in "
        "'F0'; the index says [5:10, 0:8] from [0:5, 0:8] of '/tensors/w' in 'F1' (piece 1, "
        "[5:10, 0:8] of rank 1)"}},
      {"swapped_boxes",  // (a) w's two pieces mapped to each other's rows
       [](hid_t f, const std::vector<std::string>&) {
         RewriteVds(f, "/tensors/w",
                    [](std::vector<TestMapping>& m) { std::swap(m[0].vstart, m[1].vstart); });
       },
       {"tensor 'w' /tensors/w: mapping 0 maps [5:10, 0:8] from [0:5, 0:8] of '/tensors/w' in "
        "'F0'; the index says [0:5, 0:8] from [0:5, 0:8] of '/tensors/w' in 'F0' (piece 0, "
        "[0:5, 0:8] of rank 0) (1 more mappings differ)"}},
      {"flat_run_dropped",  // (a) fl without its last run
       [](hid_t f, const std::vector<std::string>&) {
         RewriteVds(f, "/tensors/fl", [](std::vector<TestMapping>& m) { m.pop_back(); });
       },
       {"tensor 'fl' /tensors/fl: has 3 mappings, the index's pieces give 4"}},
      {"flat_run_shifted",  // (a) fl's box 3 read from the wrong place of rank 1's piece
       [](hid_t f, const std::vector<std::string>&) {
         RewriteVds(f, "/tensors/fl", [](std::vector<TestMapping>& m) { m[3].sstart[0] = 1; });
       },
       {"tensor 'fl' /tensors/fl: mapping 3 maps [3:5, 0:4] from [1:9] of '/tensors/fl' in 'F1'; "
        "the index says [3:5, 0:4] from [2:10] of '/tensors/fl' in 'F1' (piece 1, flat[10:20] of "
        "rank 1)"}},
      {"wrong_type",
       [](hid_t f, const std::vector<std::string>&) {
         RewriteVds(
             f, "/tensors/w", [](std::vector<TestMapping>&) {}, H5T_STD_I32LE);
       },
       {"tensor 'w' /tensors/w: its HDF5 type does not store float32"}},
      {"deleted",  // (b)
       [](hid_t f, const std::vector<std::string>&) {
         ASSERT_GE(H5Ldelete(f, "/tensors/w", H5P_DEFAULT), 0);
       },
       {"tensor 'w' /tensors/w: missing (the index's tensor needs a virtual dataset of its 2 "
        "pieces)"}},
      {"scalar_deleted",  // (b)
       [](hid_t f, const std::vector<std::string>&) {
         ASSERT_GE(H5Ldelete(f, "/tensors/s", H5P_DEFAULT), 0);
       },
       {"tensor 's' /tensors/s: missing (the index's tensor needs a scalar dataset holding the "
        "value)"}},
      {"extra",  // (c)
       [](hid_t f, const std::vector<std::string>&) { AddPlainDataset(f, "/tensors/ghost"); },
       {"/tensors/ghost: no dense tensor of the index has this name"}},
      {"extra_empty",  // (c) a dataset for the tensor without elements
       [](hid_t f, const std::vector<std::string>&) { AddPlainDataset(f, "/tensors/e"); },
       {"tensor 'e' /tensors/e: exists, but the master holds no dataset for this tensor: it has no "
        "elements"}},
      {"extra_lazy",  // (c)
       [](hid_t f, const std::vector<std::string>&) { AddPlainDataset(f, "/tensors/lz"); },
       {"tensor 'lz' /tensors/lz: exists, but the master holds no dataset for this tensor: it is "
        "lazy"}},
      {"long_deleted",  // (b) a flat tensor of 70,000 rows: 2 mappings (one box per piece)
       [](hid_t f, const std::vector<std::string>&) {
         ASSERT_GE(H5Ldelete(f, "/tensors/long", H5P_DEFAULT), 0);
       },
       {"tensor 'long' /tensors/long: missing (the index's tensor needs a virtual dataset of its 2 "
        "pieces)"}},
      {"plain_instead_of_virtual",
       [](hid_t f, const std::vector<std::string>&) {
         const hid_t d = H5Dopen2(f, "/tensors/w", H5P_DEFAULT);
         std::vector<float> v(80);
         ASSERT_GE(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), 0);
         const hid_t sp = H5Dget_space(d);
         const hid_t nd = H5Dcreate2(f, "/tensors/plain", H5T_IEEE_F32LE, sp, H5P_DEFAULT,
                                     H5P_DEFAULT, H5P_DEFAULT);
         H5Dwrite(nd, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
         CopyAttrs(d, nd);
         H5Dclose(nd);
         H5Sclose(sp);
         H5Dclose(d);
         ASSERT_GE(H5Ldelete(f, "/tensors/w", H5P_DEFAULT), 0);
         ASSERT_GE(H5Lmove(f, "/tensors/plain", f, "/tensors/w", H5P_DEFAULT, H5P_DEFAULT), 0);
       },
       {"tensor 'w' /tensors/w: is a contiguous dataset, not a virtual dataset of its 2 pieces"}},
      {"fingerprint",  // (d)
       [](hid_t f, const std::vector<std::string>&) {
         const hid_t d = H5Dopen2(f, "/tensors/w", H5P_DEFAULT);
         const hid_t a = H5Aopen(d, "seedstore.fingerprint", H5P_DEFAULT);
         const uint64_t lanes[2] = {1, 2};
         EXPECT_GE(H5Awrite(a, H5T_NATIVE_UINT64, lanes), 0);
         H5Aclose(a);
         H5Dclose(d);
       },
       {"tensor 'w' /tensors/w: seedstore.fingerprint is 00000000000000010000000000000002, the "
        "index says FP_w"}},
      {"scalar_value",  // (e)
       [](hid_t f, const std::vector<std::string>&) {
         const hid_t d = H5Dopen2(f, "/tensors/s", H5P_DEFAULT);
         const double v = 0.5;
         ASSERT_GE(H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, &v), 0);
         H5Dclose(d);
       },
       {"tensor 's' /tensors/s: its value differs from the one its piece holds (rank 0 file "
        "'F0')"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<std::string> files;
    const std::string p = VdsSave("rv_" + c.name + ".h5", &files);
    ASSERT_EQ(files.size(), 2u);
    std::string fp_w;
    {
      auto d = DistCatalog::Open(p);
      ASSERT_TRUE(d.ok());
      fp_w = FingerprintHex(*(*d)->tensors()[(*d)->Find("w")].fingerprint);
    }
    ASSERT_NO_FATAL_FAILURE(EditH5(p, [&](hid_t f) { c.tamper(f, files); }));
    std::vector<std::string> want;
    for (std::string w : c.want) {
      for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
               {"'F0'", "'" + files[0] + "'"}, {"'F1'", "'" + files[1] + "'"}, {"FP_w", fp_w}})
        for (size_t at; (at = w.find(from)) != std::string::npos;) w.replace(at, from.size(), to);
      want.push_back("vds-mismatch: distributed save '" + p + "': master " + w);
    }
    EXPECT_EQ(VerifyProblems(p), want);
    // The CLI fails, naming it.
    if (Bin().empty()) continue;
    Proc v = Shell(Bin() + " verify " + p);
    EXPECT_EQ(v.code, 1 + static_cast<int>(Code::kCorrupt)) << v.out << v.err;
    EXPECT_NE((v.out + v.err).find(want[0]), std::string::npos) << v.out << v.err;
  }
}

// Flat pieces are mapped one box of their range at a time (docs/FORMAT.md 10, flat_mappings
// "boxes"): h5py reads every such virtual dataset exactly, 70,000-row flat pieces included
// (one mapping each; as runs they had none). A master whose index says nothing (a save from
// before) is held to the run mappings it was written with.
TEST(ReshardVds, FlatPiecesAreMappedByBoxesAndH5pyReadsThem) {
  const std::string v2 = VdsSave("rv_boxes.h5");
  EXPECT_EQ(VerifyProblems(v2), std::vector<std::string>{});
  ExpectH5pyReadsVds(v2);
  ASSERT_NO_FATAL_FAILURE(EditIndex(v2, [](nlohmann::json& j) {
    ASSERT_EQ(j["flat_mappings"], "boxes");
    j.erase("flat_mappings");
  }));
  const std::string old = ::testing::PrintToString(VerifyProblems(v2));
  EXPECT_NE(old.find("tensor 'fl' /tensors/fl: has 4 mappings, the index's pieces give 6"),
            std::string::npos)
      << old;
  EXPECT_NE(
      old.find("tensor 'long' /tensors/long: exists, but the master holds no dataset for this "
               "tensor: its flat pieces would need more than 65536 mappings"),
      std::string::npos)
      << old;
  EXPECT_EQ(old.find("tensor 'w'"), std::string::npos) << old;  // box pieces map as before
  ASSERT_NO_FATAL_FAILURE(
      EditIndex(v2, [](nlohmann::json& j) { j["flat_mappings"] = "diagonal"; }));
  auto bad = DistCatalog::Open(v2);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("field 'flat_mappings' is \"diagonal\""), std::string::npos)
      << bad.status().ToString();
}

// An index that leaves a dense tensor out (a forger's, or a buggy writer's): reads would
// silently lack the tensor, but its virtual dataset is still in the master, which verify names.
TEST(ReshardVds, AnIndexOmittingADenseTensorFailsVerify) {
  const std::string v2 = VdsSave("rv_omitted.h5");
  ASSERT_NO_FATAL_FAILURE(EditIndex(v2, [](nlohmann::json& j) {
    auto& ts = j["tensors"];
    for (size_t k = 0; k < ts.size(); ++k)
      if (ts[k]["name"] == "w") {
        ts.erase(k);
        break;
      }
  }));
  auto d = DistCatalog::Open(v2);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_LT((*d)->Find("w"), 0);
  const std::vector<std::string> problems = VerifyProblems(v2);
  ASSERT_EQ(problems.size(), 1u) << ::testing::PrintToString(problems);
  EXPECT_NE(problems[0].find("vds-mismatch"), std::string::npos) << problems[0];
  EXPECT_NE(problems[0].find("/tensors/w: no dense tensor of the index has this name"),
            std::string::npos)
      << problems[0];
}

TEST(ReshardVds, VerifyContinuesPastProblemsOfTheMasterAndOfTheRankFiles) {
  std::vector<std::string> files;
  const std::string p = VdsSave("rv_many.h5", &files);
  ASSERT_NO_FATAL_FAILURE(EditH5(p, [](hid_t f) {
    ASSERT_GE(H5Ldelete(f, "/tensors/fl", H5P_DEFAULT), 0);
    AddPlainDataset(f, "/tensors/ghost");
    const hid_t d = H5Dopen2(f, "/tensors/s", H5P_DEFAULT);
    const double v = -1;
    ASSERT_GE(H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, &v), 0);
    H5Dclose(d);
  }));
  auto d = DistCatalog::Open(p);
  ASSERT_TRUE(d.ok());
  const std::string rank1 = (*d)->rank_files()[1];
  d->reset();
  ASSERT_NO_FATAL_FAILURE(CorruptChunk(rank1, "w", 0));
  d = DistCatalog::Open(p);
  ASSERT_TRUE(d.ok());
  std::vector<std::string> got;
  for (const auto& pr : (*d)->Verify(CpuOptions{1}).problems) got.push_back(pr.status.message());
  ASSERT_EQ(got.size(), 4u) << ::testing::PrintToString(got);
  EXPECT_EQ(got[0].find("chunk-corrupt: file '" + rank1 + "' tensor 'w' chunk 0"), 0u) << got[0];
  EXPECT_NE(got[1].find("master tensor 'fl' /tensors/fl: missing"), std::string::npos) << got[1];
  EXPECT_NE(got[2].find("master tensor 's' /tensors/s: its value differs"), std::string::npos)
      << got[2];
  EXPECT_NE(got[3].find("master /tensors/ghost: no dense tensor"), std::string::npos) << got[3];
}

// HDF5 1.10 decodes a virtual dataset's mappings (in the global heap, without a checksum of its
// own) before checking their checksum, and can crash on damaged ones: verify checks the heap
// object's checksum first and names the damage instead.
TEST(ReshardVds, DamagedMappingsAreNamedNotDecoded) {
  std::vector<std::string> files;
  const std::string p = VdsSave("rv_heap.h5", &files);
  std::string all = ranktest::ReadAll(p);
  const std::string entry = files[1] + std::string(1, '\0') + "/tensors/w" + std::string(1, '\0');
  const size_t at = all.find(entry);
  ASSERT_NE(at, std::string::npos);
  ASSERT_EQ(all.find(entry, at + 1), std::string::npos);
  all[at + entry.size()] ^= 0x40;  // the first byte of the mapping's source selection
  std::ofstream(p, std::ios::binary | std::ios::trunc) << all;
  // The master's seal refuses it at open (docs/FORMAT.md 10) ...
  const std::vector<std::string> sealed = VerifyProblems(p);
  ASSERT_EQ(sealed.size(), 1u) << ::testing::PrintToString(sealed);
  EXPECT_NE(sealed[0].find("master-corrupt: distributed save '" + p +
                           "': its bytes do not match its seal"),
            std::string::npos)
      << sealed[0];
  // ... and sealed anew (a master an unsealed writer wrote so), verify names the damage.
  ranktest::ResealMaster(p);
  EXPECT_EQ(VerifyProblems(p),
            std::vector<std::string>{"vds-mismatch: distributed save '" + p +
                                     "': master tensor 'w' /tensors/w: cannot be opened safely: "
                                     "its mappings' checksum differs (damaged)"});
}

}  // namespace
}  // namespace seedstore
