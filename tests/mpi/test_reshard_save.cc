// Distributed saves written under mpirun (save-ranks, reshard): N=4 -> M=2, M=3 (uneven) and
// consolidated, bit-exact against the source for every tensor and proven; writers in parallel;
// chunks copied as stored and padding agreed by every writer; h5py reads the master's virtual
// datasets.
#include "tests/reshard_test_util.h"

namespace seedstore {
namespace {

using namespace reshardtest;  // NOLINT

TEST(Reshard, FourRanksIsBitExact) {
  SEEDSTORE_NEED_BIN();
  const Fixture& f = Get();
  ExpectSameAsSource(f.source);
  ExpectSameAsSource(f.d4);
  auto d = DistCatalog::Open(f.d4);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ((*d)->world(), 4);
  EXPECT_FALSE(ranktest::ReadAll(f.d4 + ".lock").size() > 0);  // the lock is gone
}

TEST(Reshard, FourToTwoThreeAndConsolidatedAreBitExactAndProven) {
  SEEDSTORE_NEED_BIN();
  const Fixture& f = Get();
  const size_t n = f.spec.tensors.size();
  struct Case {
    std::string out, args;
  };
  for (const Case& c :
       {Case{"rs_d2.h5", "--layout " + LayoutFile(1, 2)},
        Case{"rs_d3.h5", "--layout " + LayoutFile(3, 1)}, Case{"rs_c.h5", "--consolidate"}}) {
    const std::string out = TempDir() + "/" + c.out;
    Proc p = Reshard(f.d4, c.args + " -o " + out + " --json");
    ExpectProven(p, n);
    ExpectSameAsSource(out);
  }
  // The consolidated file is an ordinary store that `verify` accepts.
  Proc v = Shell(Bin() + " verify " + TempDir() + "/rs_c.h5");
  EXPECT_EQ(v.code, 0) << v.out << v.err;
  // The table form names every tensor and proves it.
  Proc t = Reshard(TempDir() + "/rs_d3.h5",
                   "--layout " + LayoutFile(1, 2) + " -o " + TempDir() + "/rs_d3to2.h5");
  EXPECT_EQ(t.code, 0) << t.out << t.err;
  EXPECT_NE(t.out.find("7 tensors: 7 proven equal to the source, 0 mismatch(es)"),
            std::string::npos)
      << t.out;
  ExpectSameAsSource(TempDir() + "/rs_d3to2.h5");
}

TEST(Reshard, UnderMpirunTwoWritersInParallel) {
  SEEDSTORE_NEED_BIN();
  SEEDSTORE_NEED_MPIRUN();
  const Fixture& f = Get();
  const std::string out = TempDir() + "/rs_mpi3.h5";
  Proc p = Shell(Mpirun(2) + " " + Bin() + " reshard " + f.d4 + " --threads 1 --layout " +
                 LayoutFile(3, 1) + " -o " + out + " --json");
  ExpectProven(p, f.spec.tensors.size());
  auto j = nlohmann::json::parse(p.out);
  EXPECT_EQ(j["writers"], 2);
  EXPECT_EQ(j["world"], 3);
  ExpectSameAsSource(out);
  const std::string c = TempDir() + "/rs_mpi_c.h5";
  ExpectProven(Shell(Mpirun(2) + " " + Bin() + " reshard " + out +
                     " --threads 1 --consolidate -o " + c + " --json"),
               f.spec.tensors.size());
  ExpectSameAsSource(c);
}

// Many small pieces sharing each source chunk -- every tensor of the fixture is one chunk --
// over 37 ranks: flat pieces of 1-56 elements, column and row splits with empty pieces, a
// split innermost dim. A writer reads such neighbours once as their covering box and cuts the
// pieces from it (WriteRankFiles; at most 8 rank files open at once, so 37 ranks make several
// groups); each process writes a contiguous block of ranks (13, 12, 12 under mpirun -np 3).
// Every byte read back equals the source's, the proof holds and verify passes; and each rank
// file is byte for byte the same whatever the threads and processes that wrote it.
TEST(Reshard, ManySmallPiecesSharingSourceChunksAreBitExact) {
  SEEDSTORE_NEED_BIN();
  const Fixture& f = Get();
  const std::string layout = Write("rs_many37.json", R"({"mesh": {"axes": ["data"], "shape": [37]},
 "placements": [
   {"match": "embed", "flat": ["data"]},
   {"match": "layers.*.wq", "spec": [null, "data"]},
   {"match": "layers.*.w1", "spec": ["data", null]},
   {"match": "cube", "spec": [null, null, "data"]},
   {"match": "flat.*", "flat": ["data"]}]})");
  struct Case {
    std::string out, launcher, threads;
  };
  std::vector<std::string> first;  // the first case's rank files
  for (const Case& c : {Case{"rs_many1.h5", "", "1"}, Case{"rs_many2.h5", "", "2"},
                        Case{"rs_many3.h5", Mpirun(3) + " ", "1"}}) {
    SCOPED_TRACE(c.out);
    const std::string out = TempDir() + "/" + c.out;
    Proc p = Shell(c.launcher + Bin() + " reshard " + f.source + " --threads " + c.threads +
                   " --layout " + layout + " -o " + out + " --json");
    ExpectProven(p, f.spec.tensors.size());
    auto j = nlohmann::json::parse(p.out);
    EXPECT_EQ(j["world"], 37);
    EXPECT_EQ(j["chunks_copied"], 0);
    ExpectSameAsSource(out);
    const std::vector<std::string> files = RankFileBytes(out);
    ASSERT_EQ(files.size(), 37u);
    if (first.empty()) first = files;
    for (size_t r = 0; r < files.size(); ++r)
      EXPECT_TRUE(files[r] == first[r]) << "rank file " << r << " differs from "
                                        << "rs_many1.h5's";
    auto d = DistCatalog::Open(out);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    const H5Store::VerifyReport rep = (*d)->Verify(CpuOptions{1});
    EXPECT_TRUE(rep.problems.empty()) << rep.problems[0].status.ToString();
    // Each piece is the source's bytes of its region (read through the rank file's store).
    auto src = H5Store::Open(f.source);
    ASSERT_TRUE(src.ok());
    for (size_t i = 0; i < (*d)->tensors().size(); ++i) {
      const TensorRecord& t = (*d)->tensors()[i];
      for (size_t q = 0; q < (*d)->pieces(i).size(); ++q) {
        const DistCatalog::Piece& piece = (*d)->pieces(i)[q];
        auto ps = (*d)->PieceStore(i, q);
        ASSERT_TRUE(ps.ok()) << ps.status().ToString();
        const TensorRecord& pr = ps->first->tensors()[ps->second];
        std::vector<unsigned char> got(pr.NumBytes()), want(pr.NumBytes());
        ASSERT_TRUE(
            ps->first->Read(ps->second, WholeTensor(pr.shape), got.data(), CpuOptions{1}).ok());
        ASSERT_TRUE((*src)->Read(i, piece.stored(), want.data(), CpuOptions{1}).ok());
        EXPECT_EQ(got, want) << t.name << " piece " << DescribeRegion(piece.stored()) << " of rank "
                             << piece.rank;
      }
    }
  }
}

TEST(Reshard, UnderMpirunFourWritersAndVerifyRanksOfTheSave) {
  SEEDSTORE_NEED_BIN();
  SEEDSTORE_NEED_MPIRUN();
  const Fixture& f = Get();
  const std::string out = TempDir() + "/rs_mpi4.h5";
  // 4 processes, 3 layout ranks: process 3 writes no file but still takes part in the proof.
  Proc p = Shell(Mpirun(4) + " " + Bin() + " reshard " + f.d4 + " --threads 1 --layout " +
                 LayoutFile(3, 1) + " -o " + out + " --json");
  ExpectProven(p, f.spec.tensors.size());
  ExpectSameAsSource(out);
  // The save is a catalog like any other: verify-ranks under its own layout agrees.
  Proc v = Shell(Mpirun(3) + " " + Bin() + " verify-ranks " + out + " --threads 1 --layout " +
                 LayoutFile(3, 1));
  EXPECT_EQ(v.code, 0) << v.out << v.err;
  EXPECT_NE(v.out.find("7 tensors over 3 ranks: 7 ok"), std::string::npos) << v.out;
}

TEST(Reshard, SaveRanksEachRankWritesItsOwnShards) {
  SEEDSTORE_NEED_BIN();
  SEEDSTORE_NEED_MPIRUN();
  const Fixture& f = Get();
  for (int np : {1, 2, 4}) {
    const std::string out = TempDir() + "/rs_save" + std::to_string(np) + ".h5";
    const std::string layout = np == 4 ? LayoutFile(2, 2) : LayoutFile(1, np);
    Proc p = Shell(Mpirun(np) + " " + Bin() + " save-ranks " + f.source + " --threads 1 --layout " +
                   layout + " -o " + out);
    ASSERT_EQ(p.code, 0) << np << p.out << p.err;
    EXPECT_NE(p.out.find("7 tensors: 7 proven equal to the source, 0 mismatch(es)"),
              std::string::npos)
        << p.out;
    ExpectSameAsSource(out, /*bias_lazy=*/false);  // a job's buffers are all dense
    // The composed buffer fingerprints equal the source's recorded ones.
    auto src = OpenCatalog(f.source);
    auto d = DistCatalog::Open(out);
    ASSERT_TRUE(d.ok() && src.ok());
    EXPECT_EQ((*d)->world(), np);
    // The save records the source's root seed (not 0), as reshard does,
    // in the master and in every rank file.
    EXPECT_EQ((*d)->root_seed(), f.spec.seed);
    for (const std::string& rank_file : (*d)->rank_files()) {
      auto r = H5Store::Open(rank_file);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      EXPECT_EQ((*r)->root_seed(), f.spec.seed) << rank_file;
    }
    for (size_t i = 0; i < (*src)->tensors().size(); ++i)
      EXPECT_EQ(FingerprintHex(*(*d)->tensors()[i].fingerprint),
                FingerprintHex(*(*src)->tensors()[i].fingerprint));
  }
  // The job's size must be the layout's.
  Proc bad = Shell(Bin() + " save-ranks " + f.source + " --layout " + LayoutFile(2, 2) + " -o " +
                   TempDir() + "/rs_bad.h5");
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("the layout has 4 ranks but the job has 1"), std::string::npos) << bad.err;
}

TEST(Reshard, H5pyReadsTheVirtualDatasets) {
  SEEDSTORE_NEED_BIN();
  const std::string py = PythonWithH5py();
  if (py.empty()) GTEST_SKIP() << "no python with h5py + hdf5plugin (SEEDSTORE_PYTHON)";
  const Fixture& f = Get();
  const std::string out = TempDir() + "/rs_py3.h5";
  ASSERT_EQ(Reshard(f.d4, "--layout " + LayoutFile(3, 1) + " -o " + out + " -q").code, 0);
  Proc p = H5pyCompare(py, f.source, out);
  EXPECT_EQ(p.code, 0) << p.out << p.err;
  EXPECT_NE(p.out.find("h5py-ok 6"), std::string::npos) << p.out << p.err;
}

TEST(ReshardRaw, UnderMpirunTheSameChunksAreCopied) {
  SEEDSTORE_NEED_BIN();
  SEEDSTORE_NEED_MPIRUN();
  const RawFixture& f = GetRaw();
  const std::string out = TempDir() + "/rr_mpi4.h5";
  Proc p = Shell(Mpirun(2) + " " + Bin() + " reshard " + f.source + " --threads 1 --layout " +
                 RowsLayout(4) + " -o " + out + " --json");
  ASSERT_EQ(p.code, 0) << p.out << p.err;
  auto j = nlohmann::json::parse(p.out);
  EXPECT_TRUE(j["ok"].get<bool>());
  EXPECT_EQ(j["writers"], 2);
  EXPECT_EQ(j["chunks_copied"], 8 + 12);
  EXPECT_EQ(j["chunks_encoded"], 1 + 4 + 3 + 1);
  ExpectRawSameAsSource(out);
  // The same save written by one process with 2 threads: each rank file byte for byte the
  // same (copied and re-encoded chunks in index order, no times recorded).
  const std::string here = TempDir() + "/rr_here4.h5";
  auto r = ReshardHere(f.source, RowsLayout(4), here);
  ASSERT_TRUE(r.ok() && r->ok());
  const std::vector<std::string> a = RankFileBytes(out), b = RankFileBytes(here);
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 4u);
  for (int k = 0; k < 4; ++k) EXPECT_TRUE(a[k] == b[k]) << "rank file " << k << " differs";
}

TEST(ReshardPadded, UnderMpirunTheWritersAgreeOnThePadding) {
  SEEDSTORE_NEED_BIN();
  const RawFixture& f = GetPad();
  const std::string out = TempDir() + "/rp_mpi6.h5", here = TempDir() + "/rp_here6.h5";
  // Two processes write the 6 rank files (3 each) and prove them by cells; the index and
  // every rank file are the ones one process writes.
  Proc p = Shell(Mpirun(2) + " " + Bin() + " reshard " + f.source + " --threads 1 --layout " +
                 PadLayout(3, 2) + " -o " + out + " --json");
  ASSERT_EQ(p.code, 0) << p.out << p.err;
  auto j = nlohmann::json::parse(p.out);
  EXPECT_TRUE(j["ok"].get<bool>());
  EXPECT_EQ(j["writers"], 2);
  EXPECT_EQ(j["chunks_encoded"], 0);
  auto r = ReshardHere(f.source, PadLayout(3, 2), here);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(j["chunks_copied"], r->chunks_copied);
  auto a = DistCatalog::Open(out), b = DistCatalog::Open(here);
  ASSERT_TRUE(a.ok() && b.ok());
  for (size_t i = 0; i < 2; ++i) {
    ASSERT_EQ((*a)->pieces(i).size(), (*b)->pieces(i).size());
    for (size_t k = 0; k < (*a)->pieces(i).size(); ++k)
      EXPECT_TRUE(SameRegion((*a)->pieces(i)[k].stored(), (*b)->pieces(i)[k].stored()))
          << DescribeRegion((*a)->pieces(i)[k].stored()) << " vs "
          << DescribeRegion((*b)->pieces(i)[k].stored());
  }
  ExpectRawSameAsSource(out, f);
}

}  // namespace
}  // namespace seedstore
