// Distributed saves and `seedstore reshard`: N=4 -> M=2, M=3 (uneven) and
// consolidated, bit-exact against the source for every tensor; under mpirun -np 2; h5py reads
// the master's virtual datasets; a missing or corrupted rank file is named; a second writer is
// refused and the existing save stays intact; verify checks the master's own datasets (what
// h5py reads) against the index (ReshardVds).
#include <hdf5.h>

#include <xxhash.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <thread>

#include "io/dist_store.h"
#include "io/export.h"
#include "io/interop.h"
#include "io/h5store.h"
#include "io/open.h"
#include "store/spec.h"
#include "tests/mpi/mpi_test_util.h"
#include "tests/store_test_util.h"

namespace seedstore {
namespace {

using mpitest::Mpirun;
using mpitest::Proc;
using mpitest::Shell;
using mpitest::TempDir;
using mpitest::Write;

using mpitest::Bin;


// The small mpi-tier model plus a scalar and an uneven 3-d tensor; "bias" stays lazy.
const char* kSpec = R"({"seedstore": 1, "seed": 7, "generator": "threefry",
 "tensors": [
   {"name": "embed", "shape": [64, 32], "dtype": "bfloat16", "init": {"dist": "normal", "scale": 0.02}},
   {"name": "layers.0.wq", "shape": [32, 32], "dtype": "float32", "init": {"dist": "normal"}},
   {"name": "layers.0.w1", "shape": [33, 17], "dtype": "float32", "init": {"dist": "uniform"}},
   {"name": "flat.norm", "shape": [37], "dtype": "float32", "init": {"dist": "truncated_normal"}},
   {"name": "cube", "shape": [5, 7, 9], "dtype": "int32", "init": {"dist": "constant", "value": 3}},
   {"name": "scale", "shape": [], "dtype": "float64", "init": {"dist": "normal"}},
   {"name": "bias", "shape": [32], "dtype": "float16", "init": {"dist": "normal"}}]})";

// 2-d mesh (data x tensor); flat and nested shardings; uneven splits when dp = 3.
std::string LayoutFile(int dp, int tp) {
  const std::string name = "rs_mesh" + std::to_string(dp) + "x" + std::to_string(tp) + ".json";
  return Write(name, R"({"mesh": {"axes": ["data", "tensor"], "shape": [)" + std::to_string(dp) +
                         ", " + std::to_string(tp) + R"J(]},
 "placements": [
   {"match": "embed", "spec": [["data", "tensor"], null]},
   {"match": "layers.*.wq", "spec": [null, "tensor"]},
   {"match": "layers.*.w1", "dtensor": ["Shard(1)", "Shard(0)"]},
   {"match": "cube", "spec": ["tensor", null, "data"]},
   {"match": "flat.*", "flat": ["data"]}]})J");
}

struct Fixture {
  ModelSpec spec;
  std::string source;  // dense store (bias lazy)
  std::string d4;      // distributed save over 4 ranks
};

// Whole tensor bytes from the spec.
std::vector<unsigned char> Expected(const ModelSpec& spec, const std::string& name) {
  const TensorSpec& t = spec.tensors[spec.Find(name)];
  auto lazy = LazyTensor::Resolve(t, spec.seed);
  EXPECT_TRUE(lazy.ok());
  std::vector<unsigned char> buf(lazy->RegionBytes(WholeTensor(t.shape)));
  EXPECT_TRUE(lazy->Materialize(WholeTensor(t.shape), buf.data(), CpuOptions{1}).ok());
  return buf;
}

const Fixture& Get() {
  static Fixture f = [] {
    Fixture x;
    auto spec = ModelSpec::Parse(kSpec, "rs_spec");
    EXPECT_TRUE(spec.ok()) << spec.status().ToString();
    x.spec = *spec;
    x.source = TempDir() + "/rs_source.h5";
    auto w = StoreWriter::Create(x.source, x.spec.seed, x.spec.generator);
    EXPECT_TRUE(w.ok());
    for (const TensorSpec& t : x.spec.tensors) {
      auto lazy = LazyTensor::Resolve(t, x.spec.seed);
      if (t.name == "bias") {
        EXPECT_TRUE((*w)->AddLazy(t).ok());
        continue;
      }
      LazyTensor l = *lazy;
      Status st = (*w)->AddDense(t.name, t.shape, t.dtype, [l](const Region& b, void* out) {
        return l.Materialize(b, out, CpuOptions{1});
      });
      EXPECT_TRUE(st.ok()) << st.ToString();
    }
    EXPECT_TRUE((*w)->Commit().ok());
    x.d4 = TempDir() + "/rs_d4.h5";
    if (!Bin().empty()) {
      Proc p = Shell(Bin() + " reshard " + x.source + " --layout " + LayoutFile(2, 2) + " -o " +
                     x.d4 + " --threads 1 -q");
      EXPECT_EQ(p.code, 0) << p.out << p.err;
    }
    return x;
  }();
  return f;
}

// Every tensor of the catalog at `path` equals the spec's, read back whole and by pieces.
void ExpectSameAsSource(const std::string& path, bool bias_lazy = true) {
  const Fixture& f = Get();
  auto cat = OpenCatalog(path);
  ASSERT_TRUE(cat.ok()) << cat.status().ToString();
  ASSERT_EQ((*cat)->tensors().size(), f.spec.tensors.size());
  for (size_t i = 0; i < f.spec.tensors.size(); ++i) {
    const TensorRecord& t = (*cat)->tensors()[i];
    SCOPED_TRACE(path + " tensor " + t.name);
    EXPECT_EQ(t.lazy.has_value(), bias_lazy && t.name == "bias");  // lazy stays lazy
    const auto want = Expected(f.spec, t.name);
    std::vector<unsigned char> got(want.size());
    ASSERT_TRUE((*cat)->Read(i, WholeTensor(t.shape), got.data(), CpuOptions{1}).ok());
    EXPECT_EQ(got, want);
    // Fingerprints computed where the data lies (per chunk, per piece) equal those of the
    // bytes read; for the box and flat range below too.
    auto expect_fingerprint = [&](const Region& r, const std::vector<unsigned char>& bytes) {
      for (int threads : {1, 2}) {
        auto fp = (*cat)->FingerprintRegion(i, r, CpuOptions{threads});
        ASSERT_TRUE(fp.ok()) << fp.status().ToString();
        EXPECT_EQ(*fp, FingerprintOf(t, r, bytes.data())) << DescribeRegion(r);
      }
    };
    expect_fingerprint(WholeTensor(t.shape), want);
    // A box and a flat range that straddle pieces.
    if (t.shape.size() >= 2) {
      Region b = WholeTensor(t.shape);
      b.start[0] = 1;
      b.stop[0] = t.shape[0] - 1;
      b.start[1] = 1;
      std::vector<unsigned char> part(b.Count() * DTypeSize(t.dtype));
      ASSERT_TRUE((*cat)->Read(i, b, part.data(), CpuOptions{1}).ok());
      std::vector<unsigned char> exp;
      const size_t es = DTypeSize(t.dtype);
      const uint64_t runs = b.Count() / b.RunLength();
      for (uint64_t q = 0; q < runs; ++q) {
        const uint64_t base = b.RunBase(q);
        exp.insert(exp.end(), want.begin() + base * es, want.begin() + (base + b.RunLength()) * es);
      }
      EXPECT_EQ(part, exp);
      expect_fingerprint(b, exp);
    }
    if (t.NumElements() > 3) {
      Region r = WholeTensor(t.shape);
      r.flat = true;
      r.begin = 1;
      r.end = t.NumElements() - 2;
      std::vector<unsigned char> part(r.Count() * DTypeSize(t.dtype));
      ASSERT_TRUE((*cat)->Read(i, r, part.data(), CpuOptions{1}).ok());
      const size_t es = DTypeSize(t.dtype);
      EXPECT_EQ(part, std::vector<unsigned char>(want.begin() + es, want.end() - 2 * es));
      expect_fingerprint(r, part);
    }
  }
}

Proc Reshard(const std::string& src, const std::string& args) {
  return Shell(Bin() + " reshard " + src + " --threads 1 " + args);
}

void ExpectProven(const Proc& p, size_t tensors) {
  ASSERT_EQ(p.code, 0) << p.out << p.err;
  auto j = nlohmann::json::parse(p.out);
  EXPECT_TRUE(j["ok"].get<bool>());
  ASSERT_EQ(j["tensors"].size(), tensors);
  for (const auto& t : j["tensors"]) {
    EXPECT_EQ(t["source"], t["output"]) << t.dump();
    EXPECT_TRUE(t["ok"].get<bool>());
  }
}

// FSDP-style flat shards of multi-dimensional tensors (uneven over 3 ranks): the fingerprint
// of any box -- whose rows cross the flat pieces' boundaries -- and of any flat range equals
// that of the bytes read.
TEST(Reshard, FingerprintsOfBoxesOverFlatPiecesAreThoseOfTheirBytes) {
  const std::string spec = Write("rs_fsdp.json", R"({"seedstore": 1, "seed": 3, "tensors": [
   {"name": "w", "shape": [7, 13], "dtype": "bfloat16", "init": {"dist": "normal"}},
   {"name": "c", "shape": [3, 5, 11], "dtype": "float32", "init": {"dist": "uniform"}}]})");
  const std::string layout = Write("rs_fsdp_layout.json", R"({"mesh": {"axes": ["data"], "shape": [3]},
   "placements": [{"match": "*", "flat": ["data"]}]})");
  const std::string st = TempDir() + "/rs_fsdp.safetensors", src = TempDir() + "/rs_fsdp_src.h5",
                    out = TempDir() + "/rs_fsdp_save.h5";
  ASSERT_EQ(Shell(Bin() + " export " + spec + " -o " + st).code, 0);
  ASSERT_EQ(Shell(Bin() + " import " + st + " -o " + src + " --chunk-bytes 64").code, 0);
  const Proc p = Reshard(src, "--layout " + layout + " -o " + out);
  ASSERT_EQ(p.code, 0) << p.out << p.err;
  auto d = DistCatalog::Open(out);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  std::mt19937_64 rng(9);
  for (size_t i = 0; i < (*d)->tensors().size(); ++i) {
    const TensorRecord& t = (*d)->tensors()[i];
    ASSERT_EQ((*d)->pieces(i).size(), 3u);
    ASSERT_TRUE((*d)->pieces(i)[0].region.flat);
    const size_t es = DTypeSize(t.dtype);
    for (int q = 0; q < 60; ++q) {
      Region r = WholeTensor(t.shape);
      if (q % 2) {
        const uint64_t n = t.NumElements(), a = rng() % (n + 1), b = rng() % (n + 1);
        r = FlatRegion(t.shape, std::min(a, b), std::max(a, b));
      } else {
        for (size_t k = 0; k < t.shape.size(); ++k) {
          const uint64_t x = rng() % (t.shape[k] + 1), y = rng() % (t.shape[k] + 1);
          r.start[k] = std::min(x, y);
          r.stop[k] = std::max(x, y);
        }
      }
      std::vector<unsigned char> got(r.Count() * es);
      ASSERT_TRUE((*d)->Read(i, r, got.data(), CpuOptions{1}).ok());
      auto fp = (*d)->FingerprintRegion(i, r, CpuOptions{2});
      ASSERT_TRUE(fp.ok()) << fp.status().ToString();
      ASSERT_EQ(*fp, FingerprintOf(t, r, got.data())) << t.name << " " << DescribeRegion(r);
    }
  }
}

TEST(Reshard, ReportMismatchIsExitSeven) {
  ReshardReport rep;
  rep.path = "x.h5";
  ReshardRow a, b;
  a.name = "a";
  a.source = a.output = Fingerprint{1, 2};
  b.name = "b";
  b.source = Fingerprint{1, 2};
  b.output = Fingerprint{1, 3};
  rep.rows = {a, b};
  EXPECT_FALSE(rep.ok());
  EXPECT_EQ(rep.ToStatus().code(), Code::kMismatch);  // the CLI exits 1 + 6 = 7
  EXPECT_EQ(rep.ToStatus().message(), "reshard: 1 tensor(s) of 'x.h5' differ from the source: 'b'");
  EXPECT_NE(rep.Table().find("MISMATCH (output 00000000000000010000000000000003)"), std::string::npos)
      << rep.Table();
  EXPECT_NE(rep.Table().find("2 tensors: 1 proven equal to the source, 1 mismatch(es)"),
            std::string::npos);
}

TEST(Reshard, FourRanksIsBitExact) {
  SEEDSTORE_NEED_BIN();
  const Fixture& f = Get();
  ExpectSameAsSource(f.source);
  ExpectSameAsSource(f.d4);
  auto d = DistCatalog::Open(f.d4);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ((*d)->world(), 4);
  EXPECT_FALSE(mpitest::ReadAll(f.d4 + ".lock").size() > 0);  // the lock is gone
}

TEST(Reshard, FourToTwoThreeAndConsolidatedAreBitExactAndProven) {
  SEEDSTORE_NEED_BIN();
  const Fixture& f = Get();
  const size_t n = f.spec.tensors.size();
  struct Case {
    std::string out, args;
  };
  for (const Case& c : {Case{"rs_d2.h5", "--layout " + LayoutFile(1, 2)},
                        Case{"rs_d3.h5", "--layout " + LayoutFile(3, 1)},
                        Case{"rs_c.h5", "--consolidate"}}) {
    const std::string out = TempDir() + "/" + c.out;
    Proc p = Reshard(f.d4, c.args + " -o " + out + " --json");
    ExpectProven(p, n);
    ExpectSameAsSource(out);
  }
  // The consolidated file is an ordinary store that `verify` accepts.
  Proc v = Shell(Bin() + " verify " + TempDir() + "/rs_c.h5");
  EXPECT_EQ(v.code, 0) << v.out << v.err;
  // The table form names every tensor and proves it.
  Proc t = Reshard(TempDir() + "/rs_d3.h5", "--layout " + LayoutFile(1, 2) + " -o " + TempDir() +
                                                "/rs_d3to2.h5");
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
  ExpectProven(Shell(Mpirun(2) + " " + Bin() + " reshard " + out + " --threads 1 --consolidate -o " +
                     c + " --json"),
               f.spec.tensors.size());
  ExpectSameAsSource(c);
}

// The bytes of every rank file of a distributed save, by rank.
std::vector<std::string> RankFileBytes(const std::string& save) {
  std::vector<std::string> out;
  auto d = DistCatalog::Open(save);
  EXPECT_TRUE(d.ok()) << d.status().ToString();
  if (!d.ok()) return out;
  for (const std::string& f : (*d)->rank_files()) {
    std::ifstream in(f, std::ios::binary);
    out.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return out;
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
    Proc p = Shell(c.launcher + Bin() + " reshard " + f.source + " --threads " + c.threads + " --layout " +
                   layout + " -o " + out + " --json");
    ExpectProven(p, f.spec.tensors.size());
    auto j = nlohmann::json::parse(p.out);
    EXPECT_EQ(j["world"], 37);
    EXPECT_EQ(j["chunks_copied"], 0);
    ExpectSameAsSource(out);
    const std::vector<std::string> files = RankFileBytes(out);
    ASSERT_EQ(files.size(), 37u);
    if (first.empty()) first = files;
    for (size_t r = 0; r < files.size(); ++r)
      EXPECT_TRUE(files[r] == first[r]) << "rank file " << r << " differs from " << "rs_many1.h5's";
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
        ASSERT_TRUE(ps->first->Read(ps->second, WholeTensor(pr.shape), got.data(), CpuOptions{1}).ok());
        ASSERT_TRUE((*src)->Read(i, piece.stored, want.data(), CpuOptions{1}).ok());
        EXPECT_EQ(got, want) << t.name << " piece " << DescribeRegion(piece.stored) << " of rank " << piece.rank;
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

TEST(Reshard, ReadsOpenOnlyTheRankFilesTheyNeed) {
  SEEDSTORE_NEED_BIN();
  const Fixture& f = Get();
  auto d = DistCatalog::Open(f.d4);
  ASSERT_TRUE(d.ok());
  const int k = (*d)->Find("embed");  // spec [["data", "tensor"], null]: 16 rows per rank
  ASSERT_GE(k, 0);
  Region r = WholeTensor({64, 32});
  r.start[0] = 17;
  r.stop[0] = 30;  // inside rank 1's rows [16, 32)
  std::vector<unsigned char> buf(r.Count() * 2);
  ASSERT_TRUE((*d)->Read(k, r, buf.data(), CpuOptions{1}).ok());
  EXPECT_EQ((*d)->open_rank_files(), 1u);
  r.start[0] = 0;
  r.stop[0] = 40;  // ranks 0, 1, 2
  buf.resize(r.Count() * 2);
  ASSERT_TRUE((*d)->Read(k, r, buf.data(), CpuOptions{1}).ok());
  EXPECT_EQ((*d)->open_rank_files(), 3u);
}

// Reads keep at most max_open_rank_files() rank files open (the least recently used closed
// first), whatever the world; a rank file one reading thread holds stays valid while others
// close it here. Four threads read and fingerprint every tensor whole with a cap of 2.
TEST(Reshard, ReadsKeepAtMostTheCapOfRankFilesOpen) {
  SEEDSTORE_NEED_BIN();
  const Fixture& f = Get();
  auto d = DistCatalog::Open(f.d4);
  ASSERT_TRUE(d.ok());
  EXPECT_GE((*d)->max_open_rank_files(), 1u);  // half the open-file limit
  (*d)->set_max_open_rank_files(2);
  const DistCatalog& cat = **d;
  std::vector<std::vector<unsigned char>> want;
  for (const TensorRecord& t : cat.tensors()) want.push_back(Expected(f.spec, t.name));
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int th = 0; th < 4; ++th)
    threads.emplace_back([&, th] {
      for (int rep = 0; rep < 3; ++rep)
        for (size_t k = 0; k < cat.tensors().size(); ++k) {
          const size_t i = (k + th) % cat.tensors().size();
          const TensorRecord& t = cat.tensors()[i];
          std::vector<unsigned char> got(want[i].size());
          if (!cat.Read(i, WholeTensor(t.shape), got.data(), CpuOptions{1}).ok() || got != want[i]) ++wrong;
          auto fp = cat.FingerprintRegion(i, WholeTensor(t.shape), CpuOptions{1});
          if (!fp.ok() || *fp != FingerprintOf(t, WholeTensor(t.shape), want[i].data())) ++wrong;
        }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_LE(cat.open_rank_files(), 2u);
  EXPECT_GT(cat.open_rank_files(), 0u);
}

// A save of more ranks than the process may open files: under `ulimit -n 100` (soft and
// hard, so seedstore cannot raise it) a 120-rank save is consolidated, verified and diffed.
// Before the cap, every rank file read stayed open and the 90th or so failed (EMFILE).
TEST(Reshard, ASaveOfMoreRanksThanTheOpenFileLimitIsRead) {
  SEEDSTORE_NEED_BIN();
  const Fixture& f = Get();
  const std::string layout = Write("rs_flat120.json", R"({"mesh": {"axes": ["data"], "shape": [120]},
 "placements": [{"match": "*", "flat": ["data"]}]})");
  const std::string d120 = TempDir() + "/rs_d120.h5", c = TempDir() + "/rs_d120_c.h5";
  Proc w = Reshard(f.source, "--layout " + layout + " -o " + d120 + " -q");
  ASSERT_EQ(w.code, 0) << w.out << w.err;
  const std::string limited = "ulimit -n 100 && ";
  Proc r = Shell(limited + Bin() + " reshard " + d120 + " --threads 1 --consolidate -o " + c + " -q");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  ExpectSameAsSource(c);
  Proc v = Shell(limited + Bin() + " verify " + d120);
  EXPECT_EQ(v.code, 0) << v.out << v.err;
  Proc df = Shell(limited + Bin() + " diff " + d120 + " " + f.source);
  EXPECT_EQ(df.code, 0) << df.out << df.err;
}

// The python with h5py + hdf5plugin + ml_dtypes (SEEDSTORE_PYTHON), or "".
std::string PythonWithH5py() {
  const char* py = std::getenv("SEEDSTORE_PYTHON");
  if (!py || Shell(std::string(py) + " -c 'import h5py, hdf5plugin, ml_dtypes'").code != 0) return "";
  return py;
}

// h5py, run from another folder, compares each virtual dataset of the distributed save `dist`
// with the dataset of the same name in the store `src`; prints "h5py-ok <tensors compared>"
// (tensors without elements have no virtual dataset).
Proc H5pyCompare(const std::string& py, const std::string& src, const std::string& dist) {
  const std::string script = Write("rs_check.py", R"(import json, sys, h5py, hdf5plugin, numpy as np
src, dist = sys.argv[1], sys.argv[2]
with h5py.File(src, "r") as a, h5py.File(dist, "r") as b:
    index = json.loads(bytes(b["distributed/index"][()]))
    n = 0
    for rec in index["tensors"]:
        if rec["kind"] != "dense" or 0 in rec["shape"]:
            continue
        esc = rec["name"].replace("%", "%25").replace("/", "%2F")
        if set(esc) == {"."}:
            esc = esc.replace(".", "%2E")
        v = b["tensors"][esc]
        assert v.is_virtual == (rec["shape"] != []), rec["name"]
        assert v.attrs["seedstore.dtype"] == rec["dtype"].encode()  # fixed-length: bytes
        x, y = a["tensors"][esc][()], v[()]
        assert x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y), rec["name"]
        n += 1
    print("h5py-ok", n)
)");
  return Shell("cd / && " + py + " " + script + " " + src + " " + dist);
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

TEST(Reshard, MissingOrCorruptRankFileIsNamed) {
  SEEDSTORE_NEED_BIN();
  const Fixture& f = Get();
  const std::string out = TempDir() + "/rs_fault.h5";
  ASSERT_EQ(Reshard(f.d4, "--layout " + LayoutFile(2, 2) + " -o " + out + " -q").code, 0);
  auto d = DistCatalog::Open(out);
  ASSERT_TRUE(d.ok());
  const std::vector<std::string> files = (*d)->rank_files();
  d->reset();
  // Corrupt one chunk byte region of rank 1's file: reading names the rank and file.
  const std::string keep = mpitest::ReadAll(files[1]);
  {
    std::string bad = keep;
    for (size_t k = bad.size() / 3; k < bad.size() / 3 + 4096 && k < bad.size(); ++k) bad[k] ^= 0x5a;
    std::ofstream(files[1], std::ios::binary) << bad;
  }
  auto c = OpenCatalog(out);
  bool named = false;
  if (!c.ok()) {
    named = c.status().message().find("rank 1") != std::string::npos;
  } else {
    for (size_t i = 0; i < (*c)->tensors().size(); ++i) {
      const TensorRecord& t = (*c)->tensors()[i];
      std::vector<unsigned char> buf(t.NumBytes());
      Status st = (*c)->Read(i, WholeTensor(t.shape), buf.data(), CpuOptions{1});
      if (!st.ok()) {
        EXPECT_EQ(st.message().rfind("rank-file-corrupt: distributed save '" + out + "' rank 1 file '", 0), 0u)
            << st.ToString();
        named = true;
      }
    }
  }
  EXPECT_TRUE(named);
  if (c.ok()) c->reset();  // HDF5 would keep serving the open (corrupt) file
  Proc p = Reshard(out, "--consolidate -o " + TempDir() + "/rs_fault_c.h5");
  EXPECT_NE(p.code, 0);
  EXPECT_NE(p.err.find("rank 1"), std::string::npos) << p.err;
  std::ofstream(files[1], std::ios::binary) << keep;
  ExpectSameAsSource(out);
  // Missing: named at open, NOT_FOUND (exit 3 from the CLI).
  ASSERT_EQ(std::rename(files[2].c_str(), (files[2] + ".away").c_str()), 0);
  auto m = OpenCatalog(out);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), Code::kNotFound);
  EXPECT_EQ(m.status().message(), "rank-file-missing: distributed save '" + out + "' rank 2 file '" +
                                      files[2] + "': the file does not exist");
  p = Reshard(out, "--consolidate -o " + TempDir() + "/rs_fault_c.h5");
  EXPECT_EQ(p.code, 3) << p.err;
  EXPECT_NE(p.err.find("rank-file-missing"), std::string::npos) << p.err;
  // A symbolic link to nothing is said so, with its target; a symbolic link loop is not taken
  // for a missing file (it was "the file does not exist").
  ASSERT_EQ(::symlink((files[2] + ".gone").c_str(), files[2].c_str()), 0);
  m = OpenCatalog(out);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), Code::kNotFound);
  EXPECT_NE(m.status().message().find("rank 2 file '" + files[2] + "': the file is a symbolic link to '" +
                                      files[2] + ".gone', which does not exist"),
            std::string::npos)
      << m.status().ToString();
  ASSERT_EQ(::unlink(files[2].c_str()), 0);
  ASSERT_EQ(::symlink(files[2].c_str(), files[2].c_str()), 0);  // a link to itself: ELOOP
  m = OpenCatalog(out);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), Code::kIo);
  EXPECT_NE(m.status().message().find("rank-file-unreadable: distributed save '" + out + "' rank 2 file '" +
                                      files[2] + "': cannot reach the file: Too many levels of symbolic links"),
            std::string::npos)
      << m.status().ToString();
  Proc v = Shell(Bin() + " verify " + out);
  EXPECT_EQ(v.code, 5) << v.out << v.err;
  EXPECT_NE(v.out.find("FAIL (file): IO_ERROR: rank-file-unreadable"), std::string::npos) << v.out;
  EXPECT_NE(v.out.find("symbolic links"), std::string::npos) << v.out;
  ASSERT_EQ(::unlink(files[2].c_str()), 0);
  ASSERT_EQ(std::rename((files[2] + ".away").c_str(), files[2].c_str()), 0);
  ExpectSameAsSource(out);
}

TEST(Reshard, AFailedSaveLeavesNoPiecesBehind) {
  SEEDSTORE_NEED_BIN();
  const Fixture& f = Get();
  const std::string out = TempDir() + "/rs_isdir.h5";
  ASSERT_EQ(mkdir(out.c_str(), 0755), 0);  // the master cannot be renamed over a folder
  Proc p = Reshard(f.d4, "--layout " + LayoutFile(3, 1) + " -o " + out);
  EXPECT_NE(p.code, 0);
  EXPECT_NE(p.err.find(out), std::string::npos) << p.err;
  EXPECT_EQ(std::stoi(Shell("ls " + out + ".* 2>/dev/null | wc -l").out), 0);  // no rank files, no lock
}

// A folder that does not exist, or cannot be written, is said so -- not taken for a lock
// another writer holds (it was: "writer-locked ... Remove the lock file only if ...").
TEST(Reshard, AFolderThatCannotHoldTheSaveIsNamedNotBlamedOnALock) {
  SEEDSTORE_NEED_BIN();
  const Fixture& f = Get();
  const std::string out = TempDir() + "/rs_no_such_folder/model.h5";
  for (const std::string& mode : {"--layout " + LayoutFile(3, 1), std::string("--consolidate")}) {
    Proc p = Reshard(f.d4, mode + " -o " + out);
    EXPECT_EQ(p.code, 5) << p.err;
    EXPECT_NE(p.err.find("cannot save to '" + out + "': cannot create its lock file '" + out +
                         ".lock': No such file or directory"),
              std::string::npos)
        << p.err;
    EXPECT_EQ(p.err.find("writer-locked"), std::string::npos) << p.err;
  }
}

TEST(Reshard, SecondWriterIsRefusedAndTheSaveIsIntact) {
  SEEDSTORE_NEED_BIN();
  const Fixture& f = Get();
  const std::string out = TempDir() + "/rs_lock.h5";
  ASSERT_EQ(Reshard(f.d4, "--layout " + LayoutFile(1, 2) + " -o " + out + " -q").code, 0);
  {
    // A writer in progress holds the lock (this test process, as a live writer does).
    testutil::HeldWriterLock held(out + ".lock", "pid 12345 on otherhost");
    ASSERT_TRUE(held.ok());
    for (const std::string& mode : {"--layout " + LayoutFile(3, 1), std::string("--consolidate")}) {
      Proc p = Reshard(f.d4, mode + " -o " + out);
      EXPECT_EQ(p.code, 5) << p.out << p.err;  // kIo
      EXPECT_NE(p.err.find("writer-locked: '" + out + "' is being written by another writer (pid 12345 "
                           "on otherhost"),
                std::string::npos)
          << p.err;
      EXPECT_EQ(mpitest::ReadAll(out + ".lock"), "pid 12345 on otherhost\n");  // not taken over
    }
    auto d = DistCatalog::Open(out);
    ASSERT_TRUE(d.ok());
    EXPECT_EQ((*d)->world(), 2);  // still the first save
    ExpectSameAsSource(out);
  }
  // Released, its file left (as a killed writer leaves it): the next writer takes it over,
  // saying so, and removes it when done.
  Proc taken = Reshard(f.d4, "--layout " + LayoutFile(1, 2) + " -o " + out + " -q");
  EXPECT_EQ(taken.code, 0) << taken.err;
  EXPECT_NE(taken.err.find("seedstore: note: '" + out + ".lock' was left by a writer that no longer runs (pid 12345 "
                           "on otherhost): its save was interrupted"),
            std::string::npos)
      << taken.err;
  EXPECT_FALSE(std::filesystem::exists(out + ".lock"));
  ExpectSameAsSource(out);
  // Two real writers at once: exactly one wins, the other is refused, the result is whole.
  Proc both = Shell("(" + Bin() + " reshard " + f.d4 + " --threads 1 -q --layout " +
                    LayoutFile(3, 1) + " -o " + out + " & " + Bin() + " reshard " + f.d4 +
                    " --threads 1 -q --layout " + LayoutFile(2, 2) + " -o " + out +
                    "; wait) 2>&1; echo done");
  ExpectSameAsSource(out);
  // Replacing a save removes the old save's rank files.
  auto d2 = DistCatalog::Open(out);
  ASSERT_TRUE(d2.ok());
  Proc ls = Shell("ls " + out + ".*.rank*.h5 | wc -l");
  EXPECT_EQ(std::stoi(ls.out), (*d2)->world()) << both.out;
  // Consolidating in place leaves one store and no rank files.
  d2->reset();
  ASSERT_EQ(Reshard(out, "--consolidate -o " + out + " -q").code, 0);
  ExpectSameAsSource(out);
  EXPECT_FALSE(IsDistributedSave(out));
  EXPECT_EQ(std::stoi(Shell("ls " + out + ".*.rank*.h5 2>/dev/null | wc -l").out), 0);
}


// ---- Raw chunk copies ---------------------------------------------------------------------
//
// A store with small chunks (chunk_bytes 256): a bf16 [40, 24] -> chunks [10, 12] (no edges);
// b f32 [37, 23] -> [10, 6] and c int8 [37, 23] -> [19, 12] (edge chunks in both dims);
// u f32 [3, 16] (one chunk; uneven and empty shards), e f32 [0, 5] (no elements), s f32
// scalar, lz lazy. The expected chunk counts below are worked out by hand from the rule in
// io/dist_store.h (Reshard, "Raw chunk copies").
const char* kRawSpec = R"({"seedstore": 1, "seed": 11, "tensors": [
   {"name": "a", "shape": [40, 24], "dtype": "bfloat16", "init": {"dist": "normal"}},
   {"name": "b", "shape": [37, 23], "dtype": "float32", "init": {"dist": "uniform"}},
   {"name": "c", "shape": [37, 23], "dtype": "int8", "init": {"dist": "constant", "value": 0}},
   {"name": "u", "shape": [3, 16], "dtype": "float32", "init": {"dist": "normal"}},
   {"name": "e", "shape": [0, 5], "dtype": "float32", "init": {"dist": "zeros"}},
   {"name": "s", "shape": [], "dtype": "float32", "init": {"dist": "normal"}},
   {"name": "lz", "shape": [8], "dtype": "float32", "init": {"dist": "normal"}}]})";

// Rows split over `dp` ranks (torch.chunk: uneven, and empty shards when dp > rows).
std::string RowsLayout(int dp) {
  return Write("rr_rows" + std::to_string(dp) + ".json",
               R"({"mesh": {"axes": ["data"], "shape": [)" + std::to_string(dp) + R"(]},
 "placements": [{"match": "[abcu]", "spec": ["data", null]}]})");
}

// The int8 tensor gets varied values (a constant would compress to a few bytes everywhere).
std::vector<unsigned char> RawValues(const TensorSpec& t, uint64_t seed) {
  auto l = LazyTensor::Resolve(t, seed);
  EXPECT_TRUE(l.ok());
  std::vector<unsigned char> v(l->RegionBytes(WholeTensor(t.shape)));
  EXPECT_TRUE(l->Materialize(WholeTensor(t.shape), v.data(), CpuOptions{1}).ok());
  if (t.dtype == DType::kI8)
    for (size_t k = 0; k < v.size(); ++k) v[k] = static_cast<unsigned char>(k * 2654435761u >> 13);
  return v;
}

struct RawFixture {
  ModelSpec spec;
  std::string source;
  std::map<std::string, std::vector<unsigned char>> values;  // dense tensors, whole
};

// A dense store at TempDir()/<file> of the spec's tensors (RawValues; "lz" stays lazy),
// chunked by `chunk_bytes`.
RawFixture MakeRawSource(const char* spec_text, const std::string& file, uint64_t chunk_bytes) {
  RawFixture x;
  auto spec = ModelSpec::Parse(spec_text, file);
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  x.spec = *spec;
  x.source = TempDir() + "/" + file;
  WriteOptions wo;
  wo.chunk_bytes = chunk_bytes;
  wo.threads = 2;
  auto w = StoreWriter::Create(x.source, x.spec.seed, x.spec.generator, wo);
  EXPECT_TRUE(w.ok());
  for (const TensorSpec& t : x.spec.tensors) {
    if (t.name == "lz") {
      EXPECT_TRUE((*w)->AddLazy(t).ok());
      continue;
    }
    const auto v = RawValues(t, x.spec.seed);
    x.values[t.name] = v;
    const size_t es = DTypeSize(t.dtype);
    const std::vector<uint64_t> shape = t.shape;
    const auto* data = &x.values[t.name];
    Status st = (*w)->AddDense(t.name, t.shape, t.dtype, [data, shape, es](const Region& b, void* out) {
      auto* o = static_cast<unsigned char*>(out);
      if (b.rank == 0) {
        std::memcpy(o, data->data(), es);
        return Status::Ok();
      }
      const uint64_t runs = b.Count() / b.RunLength();
      for (uint64_t q = 0; q < runs; ++q, o += b.RunLength() * es)
        std::memcpy(o, data->data() + b.RunBase(q) * es, b.RunLength() * es);
      return Status::Ok();
    });
    EXPECT_TRUE(st.ok()) << st.ToString();
  }
  EXPECT_TRUE((*w)->Commit().ok());
  return x;
}

const RawFixture& GetRaw() {
  static RawFixture f = MakeRawSource(kRawSpec, "rr_source.h5", 256);
  return f;
}

// Reshards `src` in process (one writer process, 2 threads).
Result<ReshardReport> ReshardHere(const std::string& src, const std::string& layout,
                                  const std::string& out, bool consolidate = false,
                                  bool full_proof = false) {
  auto comm = CreateSelfCollective();
  SEEDSTORE_ASSIGN_OR_RETURN(auto cat, OpenCatalog(src));
  Layout l;
  if (!layout.empty()) {
    SEEDSTORE_ASSIGN_OR_RETURN(l, Layout::Load(layout));
  }
  DistSaveOptions o;
  o.consolidate = consolidate;
  o.full_proof = full_proof;
  o.cpu.threads = o.write.threads = 2;
  return Reshard(*comm, *cat, l, out, o);
}

// Every dense tensor of the catalog at `path` holds the source's bytes (f's); every file of it
// (master or store, and each rank file) passes H5Store::Verify.
void ExpectRawSameAsSource(const std::string& path, const RawFixture& f = GetRaw()) {
  auto cat = OpenCatalog(path);
  ASSERT_TRUE(cat.ok()) << cat.status().ToString();
  for (size_t i = 0; i < (*cat)->tensors().size(); ++i) {
    const TensorRecord& t = (*cat)->tensors()[i];
    SCOPED_TRACE(path + " tensor " + t.name);
    EXPECT_EQ(t.lazy.has_value(), t.name == "lz");
    if (t.lazy) continue;
    std::vector<unsigned char> got(t.NumBytes());
    ASSERT_TRUE((*cat)->Read(i, WholeTensor(t.shape), got.data(), CpuOptions{1}).ok());
    EXPECT_EQ(got, f.values.at(t.name));
  }
  std::vector<std::string> files = {path};
  if (auto d = DistCatalog::Open(path); d.ok()) files = (*d)->rank_files();
  for (const std::string& file : files) {
    auto s = H5Store::Open(file);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    const auto rep = (*s)->Verify(CpuOptions{1});
    for (const auto& p : rep.problems) ADD_FAILURE() << file << ": " << p.status.ToString();
  }
}

// Per tensor: {chunks copied, chunks encoded}.
std::map<std::string, std::pair<uint64_t, uint64_t>> Counts(const ReshardReport& r) {
  std::map<std::string, std::pair<uint64_t, uint64_t>> m;
  for (const auto& row : r.rows)
    if (!row.lazy) m[row.name] = {row.chunks_copied, row.chunks_encoded};
  return m;
}

// The path of rank r's file of the distributed save at `save` ("" when it does not open).
std::string RankFileOf(const std::string& save, int r) {
  auto d = DistCatalog::Open(save);
  return d.ok() ? (*d)->rank_files().at(r) : "";
}

// Finds the stored bytes of chunk j of tensor `name` in `file` and flips one byte in their
// middle (the chunk must be unique in the file).
void CorruptChunk(const std::string& file, const std::string& name, uint64_t j) {
  std::string bytes;
  {
    auto s = H5Store::Open(file);
    ASSERT_TRUE(s.ok());
    StoredChunk c;
    ASSERT_TRUE((*s)->ReadStoredChunk((*s)->Find(name), j, &c).ok());
    bytes.assign(c.bytes.begin(), c.bytes.end());
  }
  std::string all = mpitest::ReadAll(file);
  const size_t at = all.find(bytes);
  ASSERT_NE(at, std::string::npos);
  ASSERT_EQ(all.find(bytes, at + 1), std::string::npos);
  all[at + bytes.size() / 2] ^= 0x20;
  std::ofstream(file, std::ios::binary | std::ios::trunc) << all;
}

TEST(ReshardRaw, AlignedChunksAreCopiedMisalignedReencodedBytesIdentical) {
  const RawFixture& f = GetRaw();
  // 2 ranks: rows [0, 19) / [19, 37) of b and c (mixed), [0, 20) / [20, 40) of a (aligned).
  // b's [0, 19) is off its 10-row chunk grid: padded to [0, 20) (5% more) its chunks are
  // copied; [19, 37) would need 50% more ([10, 37)), so it is re-encoded.
  const std::string d2 = TempDir() + "/rr_d2.h5";
  auto r2 = ReshardHere(f.source, RowsLayout(2), d2);
  ASSERT_TRUE(r2.ok()) << r2.status().ToString();
  EXPECT_TRUE(r2->ok()) << r2->Table();
  using P = std::pair<uint64_t, uint64_t>;
  std::map<std::string, P> want2 = {{"a", P{8, 0}}, {"b", P{8, 1}}, {"c", P{2, 1}},
                                    {"u", P{0, 2}}, {"e", P{0, 0}}, {"s", P{0, 1}}};
  EXPECT_EQ(Counts(*r2), want2);
  EXPECT_EQ(r2->chunks_copied, 18u);
  EXPECT_EQ(r2->chunks_encoded, 5u);
  EXPECT_NE(r2->Table().find("(chunks: 18 copied as stored, 5 encoded)"), std::string::npos)
      << r2->Table();
  {
    auto d = DistCatalog::Open(d2);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    const auto& pb = (*d)->pieces((*d)->Find("b"));
    ASSERT_EQ(pb.size(), 2u);
    EXPECT_EQ(DescribeRegion(pb[0].region), "[0:19, 0:23]");
    EXPECT_EQ(DescribeRegion(pb[0].stored), "[0:20, 0:23]");
    EXPECT_EQ(DescribeRegion(pb[1].stored), "[19:37, 0:23]");
    // Piece 1 is off the grid, so b's proof cannot go by cells (PieceGrid empty).
    auto g0 = (*d)->PieceGrid((*d)->Find("b"), 0), g1 = (*d)->PieceGrid((*d)->Find("b"), 1);
    ASSERT_TRUE(g0.ok() && g1.ok());
    EXPECT_EQ(*g0, (std::vector<uint64_t>{10, 6}));
    EXPECT_TRUE(g1->empty());
  }
  ExpectRawSameAsSource(d2);
  // A copied chunk keeps its stored bytes and checksum: rank 1's first chunk of a is the
  // source's chunk at [20, 0] (number 4).
  {
    auto src = H5Store::Open(f.source);
    auto d = DistCatalog::Open(d2);
    ASSERT_TRUE(src.ok() && d.ok());
    auto r1 = H5Store::Open((*d)->rank_files()[1]);
    ASSERT_TRUE(r1.ok());
    StoredChunk x, y;
    ASSERT_TRUE((*src)->ReadStoredChunk((*src)->Find("a"), 4, &x).ok());
    ASSERT_TRUE((*r1)->ReadStoredChunk((*r1)->Find("a"), 0, &y).ok());
    EXPECT_EQ(x.bytes, y.bytes);
    EXPECT_EQ(x.checksum, y.checksum);
    EXPECT_EQ((*r1)->stored((*r1)->Find("a")).chunk, (std::vector<uint64_t>{10, 12}));
  }
  // 4 ranks: b's rows [0, 10) [10, 20) [20, 30) are aligned, [30, 37) is narrower than a chunk;
  // c's pieces are all narrower than its 19-row chunks; u has 3 one-row shards and one empty.
  const std::string d4 = TempDir() + "/rr_d4.h5";
  auto r4 = ReshardHere(f.source, RowsLayout(4), d4);
  ASSERT_TRUE(r4.ok()) << r4.status().ToString();
  EXPECT_TRUE(r4->ok()) << r4->Table();
  std::map<std::string, P> want4 = {{"a", P{8, 0}}, {"b", P{12, 1}}, {"c", P{0, 4}},
                                    {"u", P{0, 3}}, {"e", P{0, 0}}, {"s", P{0, 1}}};
  EXPECT_EQ(Counts(*r4), want4);
  ExpectRawSameAsSource(d4);
  // Consolidating the 4-rank save copies from the rank files wherever their chunks line up
  // with the first piece's: a all; b rows 0-29 (the last piece has other chunks); c chunked
  // [10, 23] like its first piece, the last piece again differs; u's one-row pieces.
  const std::string c4 = TempDir() + "/rr_c4.h5";
  auto rc = ReshardHere(d4, "", c4, /*consolidate=*/true);
  ASSERT_TRUE(rc.ok()) << rc.status().ToString();
  EXPECT_TRUE(rc->ok()) << rc->Table();
  std::map<std::string, P> wantc = {{"a", P{8, 0}}, {"b", P{12, 4}}, {"c", P{3, 1}},
                                    {"u", P{3, 0}}, {"e", P{0, 1}}, {"s", P{0, 1}}};
  EXPECT_EQ(Counts(*rc), wantc);
  ExpectRawSameAsSource(c4);
  // 4 -> 2 ranks: N -> N/k along a chunk-aligned dim.
  const std::string d42 = TempDir() + "/rr_d42.h5";
  auto r42 = ReshardHere(d4, RowsLayout(2), d42);
  ASSERT_TRUE(r42.ok()) << r42.status().ToString();
  EXPECT_TRUE(r42->ok()) << r42->Table();
  EXPECT_EQ(Counts(*r42)["a"], (P{8, 0}));
  ExpectRawSameAsSource(d42);
  // h5py (HDF5's own filter pipeline) reads the copied chunks through the virtual datasets.
  if (const std::string py = PythonWithH5py(); !py.empty()) {
    for (const std::string& d : {d2, d4, d42}) {
      Proc p = H5pyCompare(py, f.source, d);
      EXPECT_EQ(p.code, 0) << d << p.out << p.err;
      EXPECT_NE(p.out.find("h5py-ok 5"), std::string::npos) << d << p.out << p.err;
    }
  }
  // `seedstore verify` accepts the consolidated store; the CLI's JSON carries the counts.
  if (!Bin().empty()) {
    Proc v = Shell(Bin() + " verify " + c4);
    EXPECT_EQ(v.code, 0) << v.out << v.err;
    Proc p = Reshard(f.source, "--layout " + RowsLayout(2) + " -o " + TempDir() + "/rr_cli2.h5 --json");
    ASSERT_EQ(p.code, 0) << p.out << p.err;
    auto j = nlohmann::json::parse(p.out);
    EXPECT_EQ(j["chunks_copied"], 18);
    EXPECT_EQ(j["chunks_encoded"], 5);
    EXPECT_EQ(j["tensors"][1]["name"], "b");
    EXPECT_EQ(j["tensors"][1]["chunks_copied"], 8);
    EXPECT_EQ(j["tensors"][1]["chunks_encoded"], 1);
  }
}

// A save written through a symbolic link goes where the link points -- master, rank files
// and lock -- and reads back, verifies and reshards through the link. Replacing a save keeps
// its permissions, rank files included.
TEST(ReshardRaw, ASaveThroughASymbolicLinkLandsWhereItPoints) {
  const RawFixture& f = GetRaw();
  const std::string vol = TempDir() + "/rr_vol";
  ASSERT_EQ(Shell("rm -rf " + vol + " && mkdir -p " + vol).code, 0);
  const std::string link = TempDir() + "/rr_link.h5";
  std::remove(link.c_str());
  ASSERT_EQ(Shell("ln -s rr_vol/save.h5 " + link).code, 0);  // relative, dangling at first
  auto r = ReshardHere(f.source, RowsLayout(2), link);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->ok()) << r->Table();
  EXPECT_EQ(Shell("test -L " + link).code, 0);
  EXPECT_EQ(std::stoi(Shell("ls " + vol + " | grep -c 'save.h5.*rank'").out), 2);
  EXPECT_EQ(Shell("ls " + TempDir() + " | grep -c '^rr_link.h5.'").out, "0\n");
  ExpectRawSameAsSource(link);
  // Saved again through the link, the save made private first: the old pieces go, the link
  // stays, and the new master and rank files keep the old master's permissions.
  ASSERT_EQ(Shell("chmod 600 " + vol + "/save.h5").code, 0);
  r = ReshardHere(link, RowsLayout(4), link);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->ok()) << r->Table();
  EXPECT_EQ(std::stoi(Shell("ls " + vol + " | grep -c 'save.h5.*rank'").out), 4);
  EXPECT_EQ(Shell("stat -c %a " + vol + "/save.h5* | sort -u").out, "600\n");
  ExpectRawSameAsSource(link);
  Proc v = Shell(Bin() + " verify " + link);
  EXPECT_EQ(v.code, 0) << v.out << v.err;
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

TEST(ReshardRaw, ACorruptSourceChunkIsNamedAndNothingIsReplaced) {
  const RawFixture& f = GetRaw();
  // The raw copy checks each source chunk's stored bytes against its chunk-info hash (or, for
  // a source without tables, decodes it and checks its checksum) before writing it, so a
  // corrupt chunk fails the save -- named -- and the save already at the path stays.
  const std::string src = TempDir() + "/rr_bad_source.h5";
  ASSERT_EQ(Shell("cp " + f.source + " " + src).code, 0);
  const std::string out = TempDir() + "/rr_bad_out.h5";
  {
    auto r = ReshardHere(src, RowsLayout(2), out);
    ASSERT_TRUE(r.ok() && r->ok());
    EXPECT_EQ(Counts(*r)["b"].first, 8u);  // b's chunks 0-7 (rows [0, 20), padded) are copied
  }
  // A store consolidated into a store takes the same checked copy: the good consolidated
  // file already at the path survives a corrupt source.
  const std::string cout = TempDir() + "/rr_bad_store_c.h5";
  ASSERT_TRUE(ReshardHere(src, "", cout, /*consolidate=*/true).ok());
  const std::string before = Shell("md5sum < " + cout).out;
  CorruptChunk(src, "b", 2);
  {
    auto rs = ReshardHere(src, "", cout, /*consolidate=*/true);
    ASSERT_FALSE(rs.ok());
    EXPECT_EQ(rs.status().message().rfind("chunk-corrupt: file '" + src + "' tensor 'b' chunk 2 at offset [0, 12]: ", 0), 0u)
        << rs.status().ToString();
    EXPECT_EQ(Shell("md5sum < " + cout).out, before);
    auto st = H5Store::Open(cout);
    ASSERT_TRUE(st.ok());
    EXPECT_TRUE((*st)->Verify().problems.empty());
  }
  auto r = ReshardHere(src, RowsLayout(4), out);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kCorrupt);
  EXPECT_EQ(r.status().message().rfind("chunk-corrupt: file '" + src + "' tensor 'b' chunk 2 at offset [0, 12]: ", 0), 0u)
      << r.status().ToString();
  auto d = DistCatalog::Open(out);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ((*d)->world(), 2);  // still the first save
  ExpectRawSameAsSource(out);
  // From a distributed save: the rank file and the chunk are named.
  const std::string dsrc = TempDir() + "/rr_bad_dist.h5";
  ASSERT_TRUE(ReshardHere(f.source, RowsLayout(2), dsrc).ok());
  const std::string rank1 = RankFileOf(dsrc, 1);
  ASSERT_FALSE(rank1.empty());
  CorruptChunk(rank1, "a", 3);
  auto rc = ReshardHere(dsrc, "", TempDir() + "/rr_bad_c.h5", /*consolidate=*/true);
  ASSERT_FALSE(rc.ok());
  EXPECT_EQ(rc.status().message().rfind("rank-file-corrupt: distributed save '" + dsrc + "' rank 1 file '" +
                                            rank1 + "': chunk-corrupt: file '" + rank1 +
                                            "' tensor 'a' chunk 3 at offset [10, 12]: ",
                                        0),
            0u)
      << rc.status().ToString();
}

// Edits row `row` of the chunk-info table of tensor `name` in store `file` (HDF5 C API).
// Edits row `row` of tensor `name`'s chunk-info table in `file`; with `keep_hash`, the table's
// own hash (seedstore.xxh3, docs/FORMAT.md 4.3) is updated to match, as a writer that got the
// row wrong would have written it; else it is left (table-corrupt at open).
void EditChunkInfo(const std::string& file, const std::string& name, uint64_t row,
                   const std::function<void(uint64_t*)>& edit, bool keep_hash = true) {
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  hid_t d = H5Dopen2(f, ("/chunkinfo/" + EscapeH5Name(name)).c_str(), H5P_DEFAULT);
  ASSERT_GE(d, 0);
  hid_t sp = H5Dget_space(d);
  std::vector<uint64_t> rows(static_cast<size_t>(H5Sget_simple_extent_npoints(sp)));
  H5Dread(d, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows.data());
  edit(&rows[3 * row]);
  H5Dwrite(d, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows.data());
  if (keep_hash) {
    EXPECT_TRUE(testutil::SetTableHash(d, rows));
  }
  H5Sclose(sp);
  H5Dclose(d);
  H5Fclose(f);
}

TEST(ReshardRaw, RankFilesHoldPiecesWhoseFingerprintsSumToTheTensor) {
  const RawFixture& f = GetRaw();
  auto src = H5Store::Open(f.source);
  ASSERT_TRUE(src.ok());
  for (int ranks : {2, 3, 4}) {
    const std::string out = TempDir() + "/rr_pieces" + std::to_string(ranks) + ".h5";
    auto r = ReshardHere(f.source, RowsLayout(ranks), out);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE(r->ok()) << r->Table();
    EXPECT_FALSE(r->full_proof);
    EXPECT_NE(r->Table().find("(stored chunks vs chunk-info)"), std::string::npos) << r->Table();
    auto d = DistCatalog::Open(out);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    for (size_t i = 0; i < (*d)->tensors().size(); ++i) {
      const TensorRecord& t = (*d)->tensors()[i];
      if (t.lazy) continue;
      SCOPED_TRACE(out + " tensor " + t.name);
      // Each rank file records its tensor as the index's piece (its stored box), with a
      // chunk-info table; the pieces' recorded fingerprints (global frame) less what padded
      // pieces store beyond their regions add up to the source's (invariant I4).
      Fingerprint sum;
      for (size_t p = 0; p < (*d)->pieces(i).size(); ++p) {
        auto sk = (*d)->PieceStore(i, p);
        ASSERT_TRUE(sk.ok()) << sk.status().ToString();
        const TensorRecord& pr = sk->first->tensors()[sk->second];
        ASSERT_TRUE(pr.piece.has_value());
        EXPECT_TRUE(SameRegion(*pr.piece, (*d)->pieces(i)[p].stored))
            << DescribeRegion(*pr.piece) << " vs " << DescribeRegion((*d)->pieces(i)[p].stored);
        EXPECT_EQ(sk->first->chunk_info(sk->second).size(), sk->first->stored(sk->second).num_chunks);
        auto proven = sk->first->ProveStored(sk->second, CpuOptions{1});
        ASSERT_TRUE(proven.ok()) << proven.status().ToString();
        EXPECT_EQ(*proven, *pr.fingerprint);
        auto pad = (*d)->PaddingFingerprint(i, p, CpuOptions{1});
        ASSERT_TRUE(pad.ok()) << pad.status().ToString();
        if (SameRegion((*d)->pieces(i)[p].stored, (*d)->pieces(i)[p].region)) {
          EXPECT_EQ(*pad, Fingerprint{});
        }
        sum.Add(*pr.fingerprint);
        sum.Sub(*pad);
      }
      EXPECT_EQ(sum, *(*src)->tensors()[(*src)->Find(t.name)].fingerprint);
    }
    ExpectRawSameAsSource(out);  // every rank file also passes Verify (global-frame fingerprints)
    // The decoding proof agrees, row for row.
    auto full = ReshardHere(f.source, RowsLayout(ranks), out, false, /*full_proof=*/true);
    ASSERT_TRUE(full.ok()) << full.status().ToString();
    EXPECT_TRUE(full->ok()) << full->Table();
    EXPECT_NE(full->Table().find("(every chunk decoded)"), std::string::npos) << full->Table();
    ASSERT_EQ(full->rows.size(), r->rows.size());
    for (size_t k = 0; k < r->rows.size(); ++k) EXPECT_EQ(full->rows[k].output, r->rows[k].output);
  }
  // A copied chunk keeps its chunk-info row: rank 1's first chunk of a is the source's chunk 4.
  const std::string d2 = TempDir() + "/rr_pieces2.h5";
  auto d = DistCatalog::Open(d2);
  ASSERT_TRUE(d.ok());
  auto r1 = H5Store::Open((*d)->rank_files()[1]);
  ASSERT_TRUE(r1.ok());
  const ChunkInfo& x = (*src)->chunk_info((*src)->Find("a"))[4];
  const ChunkInfo& y = (*r1)->chunk_info((*r1)->Find("a"))[0];
  EXPECT_EQ(x.stored_hash, y.stored_hash);
  EXPECT_EQ(x.fingerprint, y.fingerprint);
  // The CLI's JSON says which proof ran.
  if (!Bin().empty()) {
    for (const char* flag : {"", " --full-proof"}) {
      Proc p = Reshard(f.source, "--layout " + RowsLayout(2) + " -o " + TempDir() + "/rr_cli_proof.h5 --json" + flag);
      ASSERT_EQ(p.code, 0) << p.out << p.err;
      auto j = nlohmann::json::parse(p.out);
      EXPECT_EQ(j["proof"], *flag ? "decoded" : "stored-chunks");
      EXPECT_TRUE(j["ok"].get<bool>());
    }
  }
}

TEST(ReshardRaw, CopiesCheckStoredBytesAgainstTheChunkInfo) {
  const RawFixture& f = GetRaw();
  // A stored-bytes hash that does not match: the copy is refused, naming the chunk.
  const std::string src = TempDir() + "/rr_info_bad.h5";
  ASSERT_EQ(Shell("cp " + f.source + " " + src).code, 0);
  EditChunkInfo(src, "b", 2, [](uint64_t* row) { row[0] ^= 1; });
  auto r = ReshardHere(src, RowsLayout(2), TempDir() + "/rr_info_bad_out.h5");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kCorrupt);
  EXPECT_EQ(r.status().message().rfind("chunk-corrupt: file '" + src + "' tensor 'b' chunk 2 at offset [0, 12]: stored bytes hash mismatch", 0), 0u)
      << r.status().ToString();
  // The same row damaged in place (the table's hash not updated): the table is named (the
  // tensor's damage, found at open, fails its reads).
  const std::string dmg = TempDir() + "/rr_info_damaged.h5";
  ASSERT_EQ(Shell("cp " + f.source + " " + dmg).code, 0);
  EditChunkInfo(dmg, "b", 2, [](uint64_t* row) { row[0] ^= 1; }, /*keep_hash=*/false);
  auto rd = ReshardHere(dmg, RowsLayout(2), TempDir() + "/rr_info_damaged_out.h5");
  ASSERT_FALSE(rd.ok());
  EXPECT_EQ(rd.status().code(), Code::kCorrupt);
  EXPECT_NE(rd.status().message().find("table-corrupt: file '" + dmg + "' tensor 'b': chunk-info table /chunkinfo/b does not match its hash"),
            std::string::npos)
      << rd.status().ToString();
  // A source without chunk-info tables (a store from before they existed): chunks are decoded
  // and checked while copied, the output gets its tables and proves the same.
  const std::string old = TempDir() + "/rr_info_none.h5";
  ASSERT_EQ(Shell("cp " + f.source + " " + old).code, 0);
  {
    hid_t h = H5Fopen(old.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(h, 0);
    ASSERT_GE(H5Ldelete(h, "/chunkinfo", H5P_DEFAULT), 0);
    H5Fclose(h);
  }
  auto o = H5Store::Open(old);
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_TRUE((*o)->chunk_info((*o)->Find("a")).empty());
  for (bool full : {false, true}) {
    const std::string out = TempDir() + "/rr_info_none_out.h5";
    auto ro = ReshardHere(old, RowsLayout(2), out, false, full);
    ASSERT_TRUE(ro.ok()) << ro.status().ToString();
    EXPECT_TRUE(ro->ok()) << ro->Table();
    EXPECT_EQ(ro->chunks_copied, 18u);
    ExpectRawSameAsSource(out);
    auto d = DistCatalog::Open(out);
    ASSERT_TRUE(d.ok());
    auto r0 = H5Store::Open((*d)->rank_files()[0]);
    ASSERT_TRUE(r0.ok());
    EXPECT_FALSE((*r0)->chunk_info((*r0)->Find("a")).empty());
  }
}

TEST(ReshardRaw, ARankFileAloneIsRefused) {
  const RawFixture& f = GetRaw();
  const std::string d2 = TempDir() + "/rr_alone.h5";
  ASSERT_TRUE(ReshardHere(f.source, RowsLayout(2), d2).ok());
  const std::string rank1 = RankFileOf(d2, 1);
  ASSERT_FALSE(rank1.empty());
  auto r = ReshardHere(rank1, RowsLayout(2), TempDir() + "/rr_alone_out.h5");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("is a piece"), std::string::npos) << r.status().ToString();
  EXPECT_NE(r.status().message().find("reshard the save's master"), std::string::npos) << r.status().ToString();
}

TEST(ReshardRaw, VerifyChecksEveryRankFileOfADistributedSave) {
  const RawFixture& f = GetRaw();
  const std::string d3 = TempDir() + "/rr_verify3.h5";
  ASSERT_TRUE(ReshardHere(f.source, RowsLayout(3), d3).ok());
  auto d = DistCatalog::Open(d3);
  ASSERT_TRUE(d.ok());
  auto src = H5Store::Open(f.source);
  ASSERT_TRUE(src.ok());
  // Library: clean, and each tensor's fingerprint (the sum over its pieces) is the source's.
  const auto rep = (*d)->Verify(CpuOptions{1});
  for (const auto& p : rep.problems) ADD_FAILURE() << p.status.ToString();
  ASSERT_EQ(rep.fingerprints.size(), (*d)->tensors().size());
  for (size_t i = 0; i < (*d)->tensors().size(); ++i) {
    const TensorRecord& t = (*d)->tensors()[i];
    EXPECT_EQ(rep.fingerprints[i], *(*src)->tensors()[(*src)->Find(t.name)].fingerprint) << t.name;
  }
  EXPECT_GT(rep.chunks, 0u);
  const std::string rank1 = (*d)->rank_files()[1];
  d->reset();
  // CLI: a corrupt chunk in a rank file is named with that file, tensor and chunk.
  SEEDSTORE_NEED_BIN();
  Proc ok = Shell(Bin() + " verify " + d3 + " --json");
  ASSERT_EQ(ok.code, 0) << ok.out << ok.err;
  EXPECT_TRUE(nlohmann::json::parse(ok.out)["ok"].get<bool>());
  ASSERT_NO_FATAL_FAILURE(CorruptChunk(rank1, "a", 0));  // rows [14, 28): one chunk
  Proc bad = Shell(Bin() + " verify " + d3);
  EXPECT_EQ(bad.code, 1 + static_cast<int>(Code::kCorrupt)) << bad.out << bad.err;
  EXPECT_NE(bad.out.find("FAIL a chunk 0: CORRUPT: chunk-corrupt: file '" + rank1 + "' tensor 'a' chunk 0"),
            std::string::npos)
      << bad.out;
  // --json: the damaged tensor is not ok and has no fingerprint (not every element was hashed);
  // every other tensor is ok with its fingerprint.
  {
    Proc bj = Shell(Bin() + " verify " + d3 + " --json");
    EXPECT_EQ(bj.code, 1 + static_cast<int>(Code::kCorrupt)) << bj.out << bj.err;
    const auto j = nlohmann::json::parse(bj.out);
    EXPECT_FALSE(j["ok"].get<bool>());
    for (const auto& t : j["tensors"]) {
      const bool damaged = t["name"] == "a";
      EXPECT_EQ(t["ok"].get<bool>(), !damaged) << t.dump();
      EXPECT_EQ(t["fingerprint"].is_null(), damaged) << t.dump();
    }
  }
  // inspect shows the save's dense tensors with their pieces and bytes on disk, and a rank
  // file's tensors as pieces.
  Proc in = Shell(Bin() + " inspect " + d3 + " --json");
  ASSERT_EQ(in.code, 0) << in.out << in.err;
  auto ij = nlohmann::json::parse(in.out);
  EXPECT_EQ(ij["world"], 3);
  for (const auto& t : ij["tensors"]) {
    if (t["kind"] == "lazy") continue;
    EXPECT_TRUE(t.contains("pieces")) << t.dump();
    if (t["name"] == "a") {
      EXPECT_EQ(t["pieces"], 3);
    }
    if (t["bytes"].get<uint64_t>() > 0) {
      EXPECT_GT(t["bytes_on_disk"].get<uint64_t>(), 0u) << t.dump();
    }
    if (t["name"] == "e") {
      EXPECT_EQ(t["pieces"], 0);  // no elements: no pieces
    }
  }
  Proc ir = Shell(Bin() + " inspect " + rank1 + " --json");
  ASSERT_EQ(ir.code, 0) << ir.out << ir.err;
  auto rj = nlohmann::json::parse(ir.out);
  ASSERT_FALSE(rj["tensors"].empty());
  for (const auto& t : rj["tensors"]) {
    EXPECT_TRUE(t["chunk_info"].get<bool>()) << t.dump();
    EXPECT_TRUE(t.contains("piece")) << t.dump();
  }
  EXPECT_EQ(rj["tensors"][0]["piece"]["shape"], nlohmann::json({40, 24}));
  // A missing rank file is named too.
  std::vector<std::string> rank1_tensors;
  {
    auto r1 = H5Store::Open(rank1);
    ASSERT_TRUE(r1.ok()) << r1.status().ToString();
    for (const auto& t : (*r1)->tensors()) rank1_tensors.push_back(t.name);
  }
  // verify does not stop at it (a read does, at open): it names the file and the tensors it
  // leaves unchecked, and checks the other rank files. With two gone, both are named.
  // verify's exit code is the rank file's problem's; its line names the file and 'a'.
  auto expect_rank1_named = [&](Code code, const std::string& problem) {
    Proc v = Shell(Bin() + " verify " + d3);
    EXPECT_EQ(v.code, 1 + static_cast<int>(code)) << v.out << v.err;
    EXPECT_NE(v.out.find("FAIL (file): " + std::string(CodeName(code)) + ": " + problem +
                         ": distributed save '" + d3 + "' rank 1"),
              std::string::npos)
        << v.out;
    EXPECT_NE(v.out.find("tensor(s) were not checked: 'a'"), std::string::npos) << v.out;
  };
  ASSERT_EQ(::unlink(rank1.c_str()), 0);
  expect_rank1_named(Code::kNotFound, "rank-file-missing");
  EXPECT_EQ(OpenCatalog(d3).status().code(), Code::kNotFound);  // a reader is refused at once
  {
    auto unchecked = DistCatalog::Open(d3, /*check_rank_files=*/false);  // rank 1 is gone
    ASSERT_TRUE(unchecked.ok()) << unchecked.status().ToString();
    const std::string rank2 = (*unchecked)->rank_files().at(2), moved = rank2 + ".away";
    ASSERT_EQ(std::rename(rank2.c_str(), moved.c_str()), 0);
    Proc two = Shell(Bin() + " verify " + d3 + " --json");
    EXPECT_EQ(two.code, 1 + static_cast<int>(Code::kNotFound)) << two.out << two.err;
    const auto j = nlohmann::json::parse(two.out);
    std::set<std::string> missing;
    for (const auto& p : j["problems"])
      if (p["message"].get<std::string>().rfind("rank-file-missing", 0) == 0) missing.insert(p["message"]);
    EXPECT_EQ(missing.size(), 2u) << two.out;
    ASSERT_EQ(std::rename(moved.c_str(), rank2.c_str()), 0);
  }
  // A rank file that is there but does not open is named with the tensors it leaves
  // unchecked; those have no fingerprint in --json, the tensors with no piece in that file
  // (lazy ones, empty ones) still do, and the other rank files are still checked.
  std::ofstream(rank1, std::ios::binary) << "not an HDF5 file";
  expect_rank1_named(Code::kCorrupt, "rank-file-corrupt");
  Proc gj = Shell(Bin() + " verify " + d3 + " --json");
  EXPECT_EQ(gj.code, 1 + static_cast<int>(Code::kCorrupt)) << gj.out << gj.err;
  const auto j = nlohmann::json::parse(gj.out);
  size_t unchecked = 0, checked = 0;
  for (const auto& t : j["tensors"]) {
    const std::string name = t["name"];
    const bool in_rank1 =
        std::find(rank1_tensors.begin(), rank1_tensors.end(), name) != rank1_tensors.end();
    (in_rank1 ? unchecked : checked) += 1;
    EXPECT_EQ(t["ok"].get<bool>(), !in_rank1) << t.dump();
    EXPECT_EQ(t["fingerprint"].is_null(), in_rank1) << t.dump();
  }
  EXPECT_GT(unchecked, 0u);
  EXPECT_GT(checked, 0u);
}

// Replaces the /distributed/index of the master `file` by `edit`'s change of its JSON (with a
// fresh checksum and seal, as a writer would).
void EditIndex(const std::string& file, const std::function<void(nlohmann::json&)>& edit) {
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  std::string text;
  {
    hid_t d = H5Dopen2(f, "/distributed/index", H5P_DEFAULT);
    ASSERT_GE(d, 0);
    hid_t sp = H5Dget_space(d);
    text.resize(static_cast<size_t>(H5Sget_simple_extent_npoints(sp)));
    H5Dread(d, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, text.data());
    H5Sclose(sp);
    H5Dclose(d);
  }
  nlohmann::json j = nlohmann::json::parse(text);
  edit(j);
  text = j.dump();
  ASSERT_GE(H5Ldelete(f, "/distributed/index", H5P_DEFAULT), 0);
  hsize_t n = text.size();
  hid_t sp = H5Screate_simple(1, &n, nullptr);
  hid_t d = H5Dcreate2(f, "/distributed/index", H5T_STD_U8LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(d, 0);
  H5Dwrite(d, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, text.data());
  const uint64_t h = XXH3_64bits(text.data(), text.size());
  hid_t as = H5Screate(H5S_SCALAR);
  hid_t a = H5Acreate2(d, "seedstore.xxh3", H5T_STD_U64LE, as, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(a, H5T_NATIVE_UINT64, &h);
  H5Aclose(a);
  H5Sclose(as);
  H5Dclose(d);
  H5Sclose(sp);
  H5Fclose(f);
  mpitest::ResealMaster(file);
}

// The index records each dense tensor's chunks and bytes on disk over its pieces, so
// `inspect` of a save opens none of its rank files; a save without them (written before) is
// counted from the rank files, one open at a time; verify checks the recorded numbers.
// Reads and verify leave no dataset of a rank file open beyond H5Store::kOpenDatasets.
TEST(ReshardRaw, TheIndexRecordsEachTensorsStorageAndInspectOpensNoRankFile) {
  const RawFixture& f = GetRaw();
  const std::string d3 = TempDir() + "/rr_storage3.h5";
  ASSERT_TRUE(ReshardHere(f.source, RowsLayout(3), d3).ok());
  std::vector<DistCatalog::Storage> recorded;
  {
    auto d = DistCatalog::Open(d3);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    auto s = (*d)->StorageOfAll();
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_EQ((*d)->open_rank_files(), 0u);
    recorded = *s;
    // Each equals the sum over the tensor's pieces as their rank files hold them.
    size_t dense = 0;
    for (size_t i = 0; i < (*d)->tensors().size(); ++i) {
      DistCatalog::Storage sum;
      for (size_t p = 0; p < (*d)->pieces(i).size(); ++p) {
        auto sk = (*d)->PieceStore(i, p);
        ASSERT_TRUE(sk.ok()) << sk.status().ToString();
        sum.chunks += sk->first->stored(sk->second).num_chunks;
        sum.stored_bytes += sk->first->stored(sk->second).stored_bytes;
        // The rank store keeps none of its datasets open after Open, a few after reads.
        EXPECT_LE(H5Fget_obj_count(sk->first->h5_file(), H5F_OBJ_DATASET),
                  static_cast<ssize_t>(H5Store::kOpenDatasets));
      }
      EXPECT_EQ(recorded[i].chunks, sum.chunks) << (*d)->tensors()[i].name;
      EXPECT_EQ(recorded[i].stored_bytes, sum.stored_bytes) << (*d)->tensors()[i].name;
      if (!(*d)->pieces(i).empty()) {
        ++dense;
        EXPECT_GT(sum.chunks, 0u);
        EXPECT_GT(sum.stored_bytes, 0u);
      }
    }
    EXPECT_GT(dense, 0u);
    // Verify opens each rank file for its turn only (the one holding the scalar stays open:
    // the master's copy of its value is compared through a read).
    auto d2 = DistCatalog::Open(d3);
    ASSERT_TRUE(d2.ok());
    const auto rep = (*d2)->Verify(CpuOptions{1});
    for (const auto& p : rep.problems) ADD_FAILURE() << p.status.ToString();
    EXPECT_LE((*d2)->open_rank_files(), 1u);
  }
  // A save whose index does not record them: the same numbers, from the rank files.
  const std::string old = TempDir() + "/rr_storage_old.h5";
  ASSERT_TRUE(ReshardHere(f.source, RowsLayout(3), old).ok());
  ASSERT_NO_FATAL_FAILURE(EditIndex(old, [](nlohmann::json& j) {
    for (auto& t : j["tensors"]) {
      t.erase("chunks");
      t.erase("stored_bytes");
    }
  }));
  {
    auto d = DistCatalog::Open(old);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    auto s = (*d)->StorageOfAll();
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_EQ((*d)->open_rank_files(), 0u);  // each was closed after its turn
    ASSERT_EQ(s->size(), recorded.size());
    for (size_t i = 0; i < recorded.size(); ++i) {
      EXPECT_EQ((*s)[i].chunks, recorded[i].chunks);
      EXPECT_EQ((*s)[i].stored_bytes, recorded[i].stored_bytes);
    }
    const auto rep = (*d)->Verify(CpuOptions{1});
    for (const auto& p : rep.problems) ADD_FAILURE() << p.status.ToString();
  }
  // Numbers that are not the rank files' fail verify by name; malformed ones fail Open.
  ASSERT_NO_FATAL_FAILURE(EditIndex(d3, [](nlohmann::json& j) {
    for (auto& t : j["tensors"])
      if (t["name"] == "a") t["stored_bytes"] = t["stored_bytes"].get<uint64_t>() + 1;
  }));
  {
    auto d = DistCatalog::Open(d3);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    const auto rep = (*d)->Verify(CpuOptions{1});
    ASSERT_EQ(rep.problems.size(), 1u);
    EXPECT_EQ(rep.problems[0].tensor, "a");
    EXPECT_NE(rep.problems[0].status.message().find("bad-index"), std::string::npos)
        << rep.problems[0].status.ToString();
    EXPECT_NE(rep.problems[0].status.message().find("bytes stored; its rank files hold"), std::string::npos)
        << rep.problems[0].status.ToString();
  }
  ASSERT_NO_FATAL_FAILURE(EditIndex(d3, [](nlohmann::json& j) {
    for (auto& t : j["tensors"])
      if (t["name"] == "a") t["chunks"] = -3;
  }));
  auto bad = DistCatalog::Open(d3);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'chunks' and 'stored_bytes' must both be unsigned integers"),
            std::string::npos)
      << bad.status().ToString();
}

// Pieces off the source's chunk grid: prime extents, a 3 x 2 mesh, chunks [15, 9] (w) and
// [4, 6, 5] (x, replicated over "tensor"). Every piece is padded to the grid (each by at most
// a quarter; some in both dims), so every chunk is copied as stored; reads of any box, h5py
// through the virtual datasets, verify, the proofs, further reshards and corruption all see
// exactly the source's values.
const char* kPadSpec = R"({"seedstore": 1, "seed": 5, "tensors": [
   {"name": "w", "shape": [239, 139], "dtype": "bfloat16", "init": {"dist": "normal"}},
   {"name": "x", "shape": [61, 6, 10], "dtype": "float32", "init": {"dist": "uniform"}}]})";

std::string PadLayout(int dp, int tp) {
  return Write("rp_mesh" + std::to_string(dp) + "x" + std::to_string(tp) + ".json",
               R"({"mesh": {"axes": ["data", "tensor"], "shape": [)" + std::to_string(dp) + ", " +
                   std::to_string(tp) + R"(]},
 "placements": [{"match": "w", "spec": ["data", "tensor"]}, {"match": "x", "spec": ["data", null, null]}]})");
}

const RawFixture& GetPad() {
  static RawFixture f = MakeRawSource(kPadSpec, "rp_source.h5", 512);
  return f;
}

// DistSaveOptions::max_padding (--max-padding): b's rows [19, 37) need 50% more to reach its
// 10-row grid ([10, 37)): stored alone by default (0.25), padded at 0.5; at 0 nothing is padded,
// b's rows [0, 19) included (the behaviour before padded pieces: 4 chunks copied, 5 encoded).
TEST(ReshardPadded, MaxPaddingBoundsThePadding) {
  const RawFixture& f = GetRaw();
  using P = std::pair<uint64_t, uint64_t>;
  auto run = [&](double max_padding, const std::string& out) -> Result<ReshardReport> {
    auto comm = CreateSelfCollective();
    SEEDSTORE_ASSIGN_OR_RETURN(auto cat, OpenCatalog(f.source));
    SEEDSTORE_ASSIGN_OR_RETURN(Layout l, Layout::Load(RowsLayout(2)));
    DistSaveOptions o;
    o.max_padding = max_padding;
    o.cpu.threads = o.write.threads = 2;
    return Reshard(*comm, *cat, l, out, o);
  };
  struct Case {
    double max_padding;
    P counts;
    const char* stored0;
    const char* stored1;
  };
  for (const Case& c : {Case{0.5, P{20, 0}, "[0:20, 0:23]", "[10:37, 0:23]"},
                        Case{0.25, P{8, 1}, "[0:20, 0:23]", "[19:37, 0:23]"},
                        Case{0.0, P{4, 5}, "[0:19, 0:23]", "[19:37, 0:23]"}}) {
    SCOPED_TRACE("max_padding " + std::to_string(c.max_padding));
    const std::string out = TempDir() + "/rp_max.h5";
    auto r = run(c.max_padding, out);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE(r->ok()) << r->Table();
    EXPECT_EQ(Counts(*r)["b"], c.counts);
    auto d = DistCatalog::Open(out);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    const auto& pb = (*d)->pieces((*d)->Find("b"));
    EXPECT_EQ(DescribeRegion(pb[0].stored), c.stored0);
    EXPECT_EQ(DescribeRegion(pb[1].stored), c.stored1);
    ExpectRawSameAsSource(out);
  }
  auto bad = run(-0.1, TempDir() + "/rp_max_bad.h5");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  if (!Bin().empty()) {
    Proc p = Reshard(f.source, "--layout " + RowsLayout(2) + " -o " + TempDir() + "/rp_max_cli.h5 --max-padding 0.5 --json");
    ASSERT_EQ(p.code, 0) << p.out << p.err;
    auto j = nlohmann::json::parse(p.out);
    EXPECT_EQ(j["tensors"][1]["name"], "b");
    EXPECT_EQ(j["tensors"][1]["chunks_copied"], 20);
    EXPECT_EQ(j["tensors"][1]["chunks_encoded"], 0);
    Proc neg = Reshard(f.source, "--layout " + RowsLayout(2) + " -o " + TempDir() + "/rp_max_cli2.h5 --max-padding -1");
    EXPECT_NE(neg.code, 0);
    EXPECT_NE((neg.out + neg.err).find("max-padding"), std::string::npos) << neg.out << neg.err;
  }
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
      EXPECT_TRUE(SameRegion((*a)->pieces(i)[k].stored, (*b)->pieces(i)[k].stored))
          << DescribeRegion((*a)->pieces(i)[k].stored) << " vs " << DescribeRegion((*b)->pieces(i)[k].stored);
  }
  ExpectRawSameAsSource(out, f);
}

TEST(ReshardPadded, PiecesOffTheChunkGridArePaddedAndEveryChunkIsCopied) {
  const RawFixture& f = GetPad();
  auto src = H5Store::Open(f.source);
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  ASSERT_EQ((*src)->stored(0).chunk, (std::vector<uint64_t>{15, 9}));
  ASSERT_EQ((*src)->stored(1).chunk, (std::vector<uint64_t>{4, 6, 5}));
  const std::string d6 = TempDir() + "/rp_d6.h5";
  auto r = ReshardHere(f.source, PadLayout(3, 2), d6);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->ok()) << r->Table();
  EXPECT_EQ(r->chunks_encoded, 0u) << r->Table();
  auto d = DistCatalog::Open(d6);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  uint64_t stored_chunks = 0;
  int padded_twice = 0;
  for (size_t i = 0; i < 2; ++i) {
    const std::vector<uint64_t>& c = (*src)->stored(i).chunk;
    const TensorRecord& t = (*d)->tensors()[i];
    for (const auto& p : (*d)->pieces(i)) {
      SCOPED_TRACE(t.name + " piece " + DescribeRegion(p.region) + " stored " + DescribeRegion(p.stored));
      uint64_t n = 1;
      int dims_padded = 0;
      for (int k = 0; k < p.region.rank; ++k) {
        EXPECT_LE(p.stored.start[k], p.region.start[k]);
        EXPECT_GE(p.stored.stop[k], p.region.stop[k]);
        EXPECT_EQ(p.stored.start[k] % c[k], 0u);
        EXPECT_TRUE(p.stored.stop[k] % c[k] == 0 || p.stored.stop[k] == t.shape[k]);
        EXPECT_LT(p.region.start[k] - p.stored.start[k], c[k]);
        EXPECT_LT(p.stored.stop[k] - p.region.stop[k], c[k]);
        dims_padded += p.stored.start[k] < p.region.start[k];
        n *= (p.stored.stop[k] - p.stored.start[k] + c[k] - 1) / c[k];
      }
      EXPECT_LE(p.stored.Count() - p.region.Count(), p.region.Count() / 4);
      EXPECT_FALSE(SameRegion(p.stored, p.region));
      padded_twice += dims_padded == 2;
      stored_chunks += n;
    }
  }
  EXPECT_EQ(r->chunks_copied, stored_chunks);
  EXPECT_EQ(padded_twice, 2);
  // Rank 3 (data 1, tensor 1) owns w[80:160, 70:139] and stores [75:165, 63:139].
  const auto& pw = (*d)->pieces(0);
  ASSERT_EQ(pw.size(), 6u);
  EXPECT_EQ(pw[3].rank, 3);
  EXPECT_EQ(DescribeRegion(pw[3].region), "[80:160, 70:139]");
  EXPECT_EQ(DescribeRegion(pw[3].stored), "[75:165, 63:139]");
  ExpectRawSameAsSource(d6, f);
  // Every piece stores whole cells of the source's grid, so the proof goes by cells: each
  // piece's cells whose first element it owns add up to the tensor (no decoding).
  for (size_t i = 0; i < 2; ++i) {
    Fingerprint sum;
    for (size_t p = 0; p < (*d)->pieces(i).size(); ++p) {
      auto g = (*d)->PieceGrid(i, p);
      ASSERT_TRUE(g.ok()) << g.status().ToString();
      EXPECT_EQ(*g, (*src)->stored(i).chunk);
      auto c = (*d)->ProveCells(i, p, CpuOptions{1});
      ASSERT_TRUE(c.ok()) << c.status().ToString();
      sum.Add(*c);
    }
    EXPECT_EQ(sum, *(*src)->tensors()[i].fingerprint);
  }
  // Any box, by the catalog's reader: random boxes (many crossing pieces), single elements,
  // the corners.
  std::mt19937_64 rng(42);
  for (size_t i = 0; i < 2; ++i) {
    const TensorRecord& t = (*d)->tensors()[i];
    const size_t es = DTypeSize(t.dtype);
    for (int q = 0; q < 150; ++q) {
      std::vector<uint64_t> a(t.shape.size()), b(t.shape.size());
      for (size_t k = 0; k < t.shape.size(); ++k) {
        const uint64_t x = rng() % t.shape[k], y = rng() % t.shape[k];
        a[k] = q % 3 == 0 ? x : std::min(x, y);
        b[k] = q % 3 == 0 ? x + 1 : std::max(x, y) + 1;
        if (q == 1) a[k] = 0, b[k] = 1;
        if (q == 2) a[k] = t.shape[k] - 1, b[k] = t.shape[k];
      }
      const Region box = BoxRegion(t.shape, a, b);
      std::vector<unsigned char> got(box.Count() * es), want;
      ASSERT_TRUE((*d)->Read(i, box, got.data(), CpuOptions{1}).ok()) << DescribeRegion(box);
      const std::vector<unsigned char>& all = f.values.at(t.name);
      for (uint64_t run = 0; run < box.Count() / box.RunLength(); ++run)
        want.insert(want.end(), all.begin() + box.RunBase(run) * es,
                    all.begin() + (box.RunBase(run) + box.RunLength()) * es);
      ASSERT_EQ(got, want) << t.name << " " << DescribeRegion(box);
      auto fp = (*d)->FingerprintRegion(i, box, CpuOptions{2});
      ASSERT_TRUE(fp.ok()) << fp.status().ToString();
      ASSERT_EQ(*fp, FingerprintOf(t, box, got.data())) << t.name << " " << DescribeRegion(box);  // padding never counted
    }
  }
  // verify: every rank file, and the pieces' fingerprints (padding taken out) add up.
  const auto rep = (*d)->Verify(CpuOptions{1});
  for (const auto& p : rep.problems) ADD_FAILURE() << p.status.ToString();
  for (size_t i = 0; i < 2; ++i) EXPECT_EQ(rep.fingerprints[i], *(*src)->tensors()[i].fingerprint);
  // The decoding proof agrees.
  auto full = ReshardHere(f.source, PadLayout(3, 2), TempDir() + "/rp_d6_full.h5", false, true);
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  EXPECT_TRUE(full->ok()) << full->Table();
  // h5py reads the global tensors through the virtual datasets (owned boxes only).
  if (const std::string py = PythonWithH5py(); !py.empty()) {
    Proc p = H5pyCompare(py, f.source, d6);
    EXPECT_EQ(p.code, 0) << p.out << p.err;
    EXPECT_NE(p.out.find("h5py-ok 2"), std::string::npos) << p.out << p.err;
  }
  // From the padded save: to 2 ranks (rows [0, 120) / [120, 239), on the grid) and
  // consolidated, every chunk copied from the padded pieces.
  const std::string d2 = TempDir() + "/rp_d2.h5", c1 = TempDir() + "/rp_c1.h5";
  auto r2 = ReshardHere(d6, PadLayout(2, 1), d2);
  ASSERT_TRUE(r2.ok()) << r2.status().ToString();
  EXPECT_TRUE(r2->ok()) << r2->Table();
  EXPECT_EQ(Counts(*r2)["w"], (std::pair<uint64_t, uint64_t>{16 * 16, 0}));
  ExpectRawSameAsSource(d2, f);
  auto rc = ReshardHere(d6, "", c1, /*consolidate=*/true);
  ASSERT_TRUE(rc.ok()) << rc.status().ToString();
  EXPECT_TRUE(rc->ok()) << rc->Table();
  EXPECT_EQ(rc->chunks_encoded, 0u) << rc->Table();
  ExpectRawSameAsSource(c1, f);
  // A tampered index: a stored box that does not hold its piece, or one the rank file does
  // not store.
  const std::string t1 = TempDir() + "/rp_tamper.h5";
  ASSERT_EQ(Shell("cp " + d6 + " " + t1).code, 0);
  ASSERT_NO_FATAL_FAILURE(EditIndex(t1, [](nlohmann::json& j) {
    j["tensors"][0]["pieces"][3]["stored"]["start"][0] = 81;
  }));
  auto bad = DistCatalog::Open(t1);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kCorrupt);
  EXPECT_NE(bad.status().message().find("bad-index: distributed save '" + t1 + "'"), std::string::npos)
      << bad.status().ToString();
  EXPECT_NE(bad.status().message().find("stored box [81:165, 63:139] does not hold the piece [80:160, 70:139]"),
            std::string::npos)
      << bad.status().ToString();
  // A shape no tensor can have (17 dims; more elements than 2^64; a dim of 2^63), checksum
  // recomputed.
  for (const auto& [shape, needle] : std::vector<std::pair<nlohmann::json, std::string>>{
           {std::vector<uint64_t>(17, 1), "rank 17 exceeds 16"},
           {{uint64_t{1} << 62, uint64_t{1} << 62, 4}, "shape overflows"},
           {{uint64_t{1} << 63, 0}, "dim 0 is 9223372036854775808, more than the limit 2^63 - 1"}}) {
    ASSERT_EQ(Shell("cp " + d6 + " " + t1).code, 0);
    ASSERT_NO_FATAL_FAILURE(EditIndex(t1, [&, s = shape](nlohmann::json& j) { j["tensors"][0]["shape"] = s; }));
    auto odd = DistCatalog::Open(t1);
    ASSERT_FALSE(odd.ok());
    EXPECT_NE(odd.status().message().find("bad-index: distributed save '" + t1 + "'"), std::string::npos)
        << odd.status().ToString();
    EXPECT_NE(odd.status().message().find(needle), std::string::npos) << odd.status().ToString();
  }
  // Pieces that still add up to the tensor but are not its layout's (two ranks' regions
  // swapped: a reader would take rank 1's bytes for rank 0's), and a tensor listed twice.
  for (const auto& [edit, needle] :
       std::vector<std::pair<std::function<void(nlohmann::json&)>, std::string>>{
           {[](nlohmann::json& j) {
              std::swap(j["tensors"][0]["pieces"][0]["region"], j["tensors"][0]["pieces"][1]["region"]);
              j["tensors"][0]["pieces"][0].erase("stored");
              j["tensors"][0]["pieces"][1].erase("stored");
            },
            "tensor 'w' piece 0 (rank 0, [0:80, 70:139]) is not its layout's (rank 0, [0:80, 0:70])"},
           {[](nlohmann::json& j) { j["tensors"].push_back(j["tensors"][0]); }, "tensor 'w' is listed twice"}}) {
    ASSERT_EQ(Shell("cp " + d6 + " " + t1).code, 0);
    ASSERT_NO_FATAL_FAILURE(EditIndex(t1, edit));
    auto odd = DistCatalog::Open(t1);
    ASSERT_FALSE(odd.ok());
    EXPECT_NE(odd.status().message().find("bad-index: distributed save '" + t1 + "'"), std::string::npos)
        << odd.status().ToString();
    EXPECT_NE(odd.status().message().find(needle), std::string::npos) << odd.status().ToString();
  }
  ASSERT_EQ(Shell("cp " + d6 + " " + t1).code, 0);
  ASSERT_NO_FATAL_FAILURE(EditIndex(t1, [](nlohmann::json& j) {
    j["tensors"][0]["pieces"][3]["stored"]["start"][0] = 60;
  }));
  auto other = DistCatalog::Open(t1);
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  std::vector<unsigned char> buf(2 * 239 * 139);
  Status st = (*other)->Read(0, WholeTensor({239, 139}), buf.data(), CpuOptions{1});
  EXPECT_EQ(st.code(), Code::kCorrupt) << st.ToString();
  EXPECT_NE(st.message().find("rank-file-corrupt"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("piece [60:165, 63:139] is missing or has another shape"), std::string::npos)
      << st.ToString();
  const std::string rank3 = (*d)->rank_files()[3];
  d->reset();
  // Padding that differs from what its owners hold (a self-consistent rank file: checksums,
  // chunk-info and record all match its bytes) is named by verify.
  {
    const std::string saved = TempDir() + "/rp_rank3.h5";
    ASSERT_EQ(Shell("cp " + rank3 + " " + saved).code, 0);
    const Region sb = BoxRegion({239, 139}, {75, 63}, {165, 139});
    std::vector<unsigned char> v;
    const std::vector<unsigned char>& all = f.values.at("w");
    for (uint64_t run = 0; run < sb.Count() / sb.RunLength(); ++run)
      v.insert(v.end(), all.begin() + sb.RunBase(run) * 2, all.begin() + (sb.RunBase(run) + sb.RunLength()) * 2);
    v[0] ^= 1;  // element [75, 63]: padding (rank 0 owns it)
    WriteOptions wo;
    wo.chunk_bytes = 512;
    auto w = StoreWriter::Create(rank3, f.spec.seed, f.spec.generator, wo);
    ASSERT_TRUE(w.ok());
    DenseChunking ch;
    ch.chunk = {15, 9};
    ch.piece = sb;
    const std::vector<uint64_t> ext = LocalShape(sb);
    ASSERT_TRUE((*w)->AddDense("w", ext, DType::kBF16, [&](const Region& b, void* out) {
                  auto* o = static_cast<unsigned char*>(out);
                  for (uint64_t run = 0; run < b.Count() / b.RunLength(); ++run, o += b.RunLength() * 2)
                    std::memcpy(o, v.data() + b.RunBase(run) * 2, b.RunLength() * 2);
                  return Status::Ok();
                }, {}, ch).ok());
    ASSERT_TRUE((*w)->Commit().ok());
    // ... and an index that records the new piece's fingerprint (else the rank file is refused
    // at open as not this save's, before its padding is looked at).
    const std::string master = mpitest::ReadAll(d6);
    {
      auto r3 = H5Store::Open(rank3);
      ASSERT_TRUE(r3.ok()) << r3.status().ToString();
      const std::string fp = FingerprintHex(*(*r3)->tensors()[0].fingerprint);
      ASSERT_NO_FATAL_FAILURE(EditIndex(d6, [&](nlohmann::json& j) {
        for (auto& t : j["tensors"])
          if (t["name"] == "w")
            for (auto& p : t["pieces"])
              if (p["rank"] == 3) p["fingerprint"] = fp;
      }));
    }
    auto dp = DistCatalog::Open(d6);
    ASSERT_TRUE(dp.ok()) << dp.status().ToString();
    const auto pr = (*dp)->Verify(CpuOptions{1});
    ASSERT_EQ(pr.problems.size(), 1u);
    EXPECT_EQ(pr.problems[0].status.code(), Code::kMismatch);
    EXPECT_EQ(pr.problems[0].status.message(),
              "padding-mismatch: distributed save '" + d6 + "' rank 3 file '" + rank3 +
                  "': tensor 'w' piece [80:160, 70:139] stored as [75:165, 63:139]: its padding "
                  "differs from the pieces that own those elements");
    ExpectRawSameAsSource(d6, f);  // what readers see is still the source's
    // The proof by cells finds it without decoding: rank 3's chunk 0 is rank 0's chunk 47
    // (cell [75:90, 63:72]).
    auto pc = (*dp)->ProveCells(0, 3, CpuOptions{1});
    ASSERT_FALSE(pc.ok());
    EXPECT_EQ(pc.status().message(),
              "padding-mismatch: distributed save '" + d6 + "' rank 3 file '" + rank3 +
                  "': tensor 'w' piece [80:160, 70:139] stored as [75:165, 63:139]: chunk 0 "
                  "differs from the owning piece's (rank 0 chunk 47)");
    dp->reset();
    ASSERT_EQ(Shell("cp " + saved + " " + rank3).code, 0);
    std::ofstream(d6, std::ios::binary | std::ios::trunc) << master;
  }
  // Corrupt chunks of a padded piece. Chunk 0 of rank 3's w (rows [75, 90), cols [63, 72): its
  // own elements and padding) is named by verify and by a read of an element it serves; chunk
  // 10 (rows [90, 105), cols [72, 81), its own) by a reshard that copies it, and the store
  // already at that reshard's path stays.
  ASSERT_NO_FATAL_FAILURE(CorruptChunk(rank3, "w", 0));
  auto dc = DistCatalog::Open(d6);
  ASSERT_TRUE(dc.ok()) << dc.status().ToString();
  const auto vr = (*dc)->Verify(CpuOptions{1});
  ASSERT_FALSE(vr.problems.empty());
  EXPECT_NE(vr.problems[0].status.message().find("chunk-corrupt: file '" + rank3 + "' tensor 'w' chunk 0"),
            std::string::npos)
      << vr.problems[0].status.ToString();
  std::vector<unsigned char> one(2);
  st = (*dc)->Read(0, BoxRegion({239, 139}, {85, 70}, {86, 71}), one.data(), CpuOptions{1});
  EXPECT_NE(st.message().find("rank-file-corrupt: distributed save '" + d6 + "' rank 3 file '" + rank3 +
                              "': chunk-corrupt"),
            std::string::npos)
      << st.ToString();
  dc->reset();
  ASSERT_NO_FATAL_FAILURE(CorruptChunk(rank3, "w", 10));
  const std::string before = Shell("md5sum < " + c1).out;
  auto rbad = ReshardHere(d6, "", c1, /*consolidate=*/true);
  ASSERT_FALSE(rbad.ok());
  EXPECT_NE(rbad.status().message().find("chunk-corrupt: file '" + rank3 + "' tensor 'w' chunk 10"),
            std::string::npos)
      << rbad.status().ToString();
  EXPECT_EQ(Shell("md5sum < " + c1).out, before);
}


// ---- The master's datasets against the index (verify: vds-mismatch) -------------------------
//
// h5py users read the master's /tensors/<name> (virtual datasets stitching the rank files, or a
// scalar's plain copy), so verify checks them against /distributed/index. A 2-rank save of: w
// (boxes [0:5] / [5:10] of rows), fl (flat [0, 10) / [10, 20) of a [5, 4]: 3 runs each), long
// (flat pieces of 35,000 rows each: more than 65,536 runs, so no virtual dataset), s (a scalar),
// e (no elements), lz (lazy).
const char* kVdsSpec = R"({"seedstore": 1, "seed": 3, "tensors": [
   {"name": "w", "shape": [10, 8], "dtype": "float32", "init": {"dist": "normal"}},
   {"name": "fl", "shape": [5, 4], "dtype": "float32", "init": {"dist": "uniform"}},
   {"name": "long", "shape": [70000, 1], "dtype": "uint8", "init": {"dist": "zeros"}},
   {"name": "s", "shape": [], "dtype": "float64", "init": {"dist": "normal"}},
   {"name": "e", "shape": [0, 3], "dtype": "float32", "init": {"dist": "zeros"}},
   {"name": "lz", "shape": [4], "dtype": "float32", "init": {"dist": "normal"}}]})";

std::string VdsLayout() {
  return Write("rv_layout.json", R"({"mesh": {"axes": ["data"], "shape": [2]},
 "placements": [{"match": "w", "spec": ["data", null]}, {"match": "fl", "flat": ["data"]},
                {"match": "long", "flat": ["data"]}]})");
}

const RawFixture& GetVds() {
  static RawFixture f = MakeRawSource(kVdsSpec, "rv_source.h5", 4096);
  return f;
}

// A fresh save of GetVds() at TempDir()/<name>; its rank files' base names in *files.
std::string VdsSave(const std::string& name, std::vector<std::string>* files = nullptr) {
  const std::string out = TempDir() + "/" + name;
  auto r = ReshardHere(GetVds().source, VdsLayout(), out);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (files) {
    auto d = DistCatalog::Open(out);
    EXPECT_TRUE(d.ok());
    files->clear();
    if (d.ok())
      for (const std::string& f : (*d)->rank_files()) files->push_back(f.substr(f.rfind('/') + 1));
  }
  return out;
}

// The messages of the problems DistCatalog::Verify finds in the save at `path`.
std::vector<std::string> VerifyProblems(const std::string& path) {
  auto d = DistCatalog::Open(path);
  if (!d.ok()) return {"open: " + d.status().ToString()};
  std::vector<std::string> out;
  for (const auto& p : (*d)->Verify(CpuOptions{1}).problems) {
    EXPECT_EQ(p.status.code(), Code::kCorrupt) << p.status.ToString();
    out.push_back(p.status.message());
  }
  return out;
}

// Opens HDF5 file `file` for writing, runs `edit` on it, closes it; a master is sealed anew
// (as a writer that made those objects would have), so that verify's checks of them are reached.
void EditH5(const std::string& file, const std::function<void(hid_t)>& edit) {
  const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0) << file;
  edit(f);
  ASSERT_GE(H5Fclose(f), 0);
  mpitest::ResealMaster(file);
}

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
  const std::string layout = Write("rv_pct_layout.json", R"({"mesh": {"axes": ["data"], "shape": [2]},
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
      std::printf("[ SKIPPED ] h5py read of %s: no python with h5py + hdf5plugin (SEEDSTORE_PYTHON)\n",
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
  for (const std::string& f : files) before[f] = mpitest::ReadAll(f);
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
  for (const std::string& f : files) EXPECT_TRUE(mpitest::ReadAll(f) == before[f]) << f << " changed";
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
  for (const std::string& f : files) before[f] = mpitest::ReadAll(f);
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
  EXPECT_NE(said.find("file '" + rank1 + "' is rank 1's file of the distributed save '" + out + "'"),
            std::string::npos)
      << said;
  EXPECT_NE(said.find("update the save instead"), std::string::npos) << said;
  EXPECT_NE(said.find("seedstore reshard " + out + " --consolidate"), std::string::npos) << said;
  Status s = ReplaceWithDense(rank1, {{t.name, [&](const Region& box, void* o) {
                                         std::memset(o, 0, box.Count() * DTypeSize(t.dtype));
                                         return Status::Ok();
                                       }}});
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("is rank 1's file of the distributed save"), std::string::npos) << s.ToString();
  for (const std::string& f : files) EXPECT_TRUE(mpitest::ReadAll(f) == before[f]) << f << " changed";
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
  ASSERT_TRUE(ReshardHere(other.source, VdsLayout(), b).ok());
  auto db = DistCatalog::Open(b);
  ASSERT_TRUE(db.ok());
  const std::string from = (*db)->rank_files()[1];
  db->reset();
  const std::string to = TempDir() + "/" + mine[1], keep = TempDir() + "/rv_swap_keep.h5";
  std::filesystem::copy_file(to, keep, std::filesystem::copy_options::overwrite_existing);
  std::filesystem::copy_file(from, to, std::filesystem::copy_options::overwrite_existing);
  std::map<std::string, std::string> before;
  for (const std::string& f : mine) before[f] = mpitest::ReadAll(TempDir() + "/" + f);
  before["master"] = mpitest::ReadAll(a);
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
    EXPECT_TRUE(mpitest::ReadAll(TempDir() + "/" + f) == before[f]) << f << " changed";
  EXPECT_TRUE(mpitest::ReadAll(a) == before["master"]) << "the master changed";
  // verify names it; with the save's own rank file back, all is well again.
  const std::vector<std::string> problems = VerifyProblems(a);
  ASSERT_FALSE(problems.empty());
  EXPECT_NE(problems[0].find(want), std::string::npos) << problems[0];
  std::filesystem::copy_file(keep, to, std::filesystem::copy_options::overwrite_existing);
  EXPECT_EQ(VerifyProblems(a), std::vector<std::string>{});
}

// A read of a distributed save keeps rank files open (one descriptor each), at most half the
// open-file limit of them (DistCatalog::max_open_rank_files). The CLI raises its soft limit to
// the hard one at start (a 64-rank save read under a soft limit of 32); under a hard limit of
// 32 it keeps 16 open and reopens the others as needed (this failed with EMFILE before the
// cap); a limit too small for even that names the rank file unreadable (IO, exit 5) with the
// limit -- not corrupt. The reads run on the CPU: the CUDA runtime takes descriptors of its
// own, which a limit of 32 leaves no room for.
TEST(ReshardVds, ManyRankFilesOpenUnderALowDescriptorLimit) {
  SEEDSTORE_NEED_BIN();
  static RawFixture f = MakeRawSource(R"({"seedstore": 1, "seed": 6, "tensors": [
     {"name": "w", "shape": [128, 4], "dtype": "float32", "init": {"dist": "normal"}}]})",
                                      "rv_fd_source.h5", 4096);
  const std::string layout = Write("rv_fd_layout.json", R"({"mesh": {"axes": ["data"], "shape": [64]},
 "placements": [{"match": "*", "spec": ["data"]}]})");
  const std::string out = TempDir() + "/rv_fd.h5";
  ASSERT_TRUE(ReshardHere(f.source, layout, out).ok());
  const Proc whole = Shell(Bin() + " fingerprint " + f.source);
  ASSERT_EQ(whole.code, 0) << whole.err;
  const Proc soft = Shell("bash -c 'ulimit -Sn 32 && exec " + Bin() + " fingerprint --device cpu " + out + "'");
  EXPECT_EQ(soft.code, 0) << soft.err;
  EXPECT_EQ(soft.out, whole.out);
  const Proc hard = Shell("bash -c 'ulimit -n 32 && exec " + Bin() + " fingerprint --device cpu " + out + "'");
  EXPECT_EQ(hard.code, 0) << hard.err;
  EXPECT_EQ(hard.out, whole.out);
  const Proc tiny = Shell("bash -c 'ulimit -n 5 && exec " + Bin() + " fingerprint --device cpu " + out + "'");
  EXPECT_EQ(tiny.code, 5) << tiny.out << tiny.err;
  EXPECT_NE(tiny.err.find("Too many open files (this process may open 5 files"), std::string::npos) << tiny.err;
}

// One mapping of a virtual dataset, as plain numbers (bounds of its two box selections; HDF5
// does not keep the source dataspace's extent: sdims is what it reports, the selection's end).
struct TestMapping {
  std::vector<hsize_t> vstart, vcount, sdims, sstart, scount;
  std::string file, dset;
};

std::vector<hsize_t> Dims(hid_t space) {
  std::vector<hsize_t> d(static_cast<size_t>(std::max(H5Sget_simple_extent_ndims(space), 0)));
  H5Sget_simple_extent_dims(space, d.data(), nullptr);
  return d;
}

// The box a dataspace selects: start and count.
void Box(hid_t space, std::vector<hsize_t>* start, std::vector<hsize_t>* count) {
  const size_t n = Dims(space).size();
  std::vector<hsize_t> lo(n), hi(n);
  EXPECT_GE(H5Sget_select_bounds(space, lo.data(), hi.data()), 0);
  *start = lo;
  count->resize(n);
  for (size_t d = 0; d < n; ++d) (*count)[d] = hi[d] - lo[d] + 1;
}

std::vector<TestMapping> Mappings(hid_t dset) {
  std::vector<TestMapping> out;
  const hid_t dcpl = H5Dget_create_plist(dset);
  size_t n = 0;
  EXPECT_GE(H5Pget_virtual_count(dcpl, &n), 0);
  for (size_t k = 0; k < n; ++k) {
    TestMapping m;
    const hid_t vs = H5Pget_virtual_vspace(dcpl, k), ss = H5Pget_virtual_srcspace(dcpl, k);
    Box(vs, &m.vstart, &m.vcount);
    Box(ss, &m.sstart, &m.scount);
    m.sdims = Dims(ss);
    char buf[4096];
    H5Pget_virtual_filename(dcpl, k, buf, sizeof buf);
    m.file = buf;
    H5Pget_virtual_dsetname(dcpl, k, buf, sizeof buf);
    m.dset = buf;
    H5Sclose(vs);
    H5Sclose(ss);
    out.push_back(m);
  }
  H5Pclose(dcpl);
  return out;
}

// Copies every attribute of `from` onto `to` (raw bytes; fixed-size types only).
void CopyAttrs(hid_t from, hid_t to) {
  H5O_info_t info;
  ASSERT_GE(H5Oget_info(from, &info), 0);
  for (hsize_t k = 0; k < info.num_attrs; ++k) {
    const hid_t a = H5Aopen_by_idx(from, ".", H5_INDEX_NAME, H5_ITER_INC, k, H5P_DEFAULT, H5P_DEFAULT);
    char name[256];
    H5Aget_name(a, sizeof name, name);
    const hid_t ty = H5Aget_type(a), sp = H5Aget_space(a);
    std::vector<unsigned char> v(H5Tget_size(ty) * static_cast<size_t>(H5Sget_simple_extent_npoints(sp)));
    H5Aread(a, ty, v.data());
    const hid_t b = H5Acreate2(to, name, ty, sp, H5P_DEFAULT, H5P_DEFAULT);
    EXPECT_GE(H5Awrite(b, ty, v.data()), 0);
    H5Aclose(b);
    H5Sclose(sp);
    H5Tclose(ty);
    H5Aclose(a);
  }
}

// Replaces the virtual dataset at `path` of the open master `f` by one whose mappings are
// `edit`'s change of its own (same shape and attributes; HDF5 type `type` when >= 0).
void RewriteVds(hid_t f, const std::string& path, const std::function<void(std::vector<TestMapping>&)>& edit,
                hid_t type = -1) {
  const hid_t d = H5Dopen2(f, path.c_str(), H5P_DEFAULT);
  ASSERT_GE(d, 0) << path;
  std::vector<TestMapping> ms = Mappings(d);
  ASSERT_FALSE(ms.empty());
  edit(ms);
  const hid_t space = H5Dget_space(d);
  const hid_t ty = type >= 0 ? H5Tcopy(type) : H5Dget_type(d);
  const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  for (const TestMapping& m : ms) {
    const hid_t vs = H5Scopy(space);
    H5Sselect_hyperslab(vs, H5S_SELECT_SET, m.vstart.data(), nullptr, m.vcount.data(), nullptr);
    std::vector<hsize_t> sdims = m.sdims;  // HDF5 keeps no source extent: room for the selection
    for (size_t k = 0; k < sdims.size(); ++k) sdims[k] = std::max(sdims[k], m.sstart[k] + m.scount[k]);
    const hid_t ss = H5Screate_simple(static_cast<int>(sdims.size()), sdims.data(), nullptr);
    H5Sselect_hyperslab(ss, H5S_SELECT_SET, m.sstart.data(), nullptr, m.scount.data(), nullptr);
    EXPECT_GE(H5Pset_virtual(dcpl, vs, m.file.c_str(), m.dset.c_str(), ss), 0);
    H5Sclose(vs);
    H5Sclose(ss);
  }
  const hid_t nd = H5Dcreate2(f, "/tensors/rewritten", ty, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  ASSERT_GE(nd, 0);
  CopyAttrs(d, nd);
  H5Dclose(nd);
  H5Pclose(dcpl);
  H5Tclose(ty);
  H5Sclose(space);
  H5Dclose(d);
  ASSERT_GE(H5Ldelete(f, path.c_str(), H5P_DEFAULT), 0);
  ASSERT_GE(H5Lmove(f, "/tensors/rewritten", f, path.c_str(), H5P_DEFAULT, H5P_DEFAULT), 0);
}

// A small plain dataset at `path` of the open file `f`.
void AddPlainDataset(hid_t f, const std::string& path) {
  hsize_t n = 3;
  const hid_t sp = H5Screate_simple(1, &n, nullptr);
  const hid_t d = H5Dcreate2(f, path.c_str(), H5T_IEEE_F32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(d, 0) << path;
  const float v[3] = {1, 2, 3};
  EXPECT_GE(H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v), 0);
  H5Dclose(d);
  H5Sclose(sp);
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
    EXPECT_EQ(H5Lexists(f, "/tensors/e", H5P_DEFAULT), 0);     // no elements
    EXPECT_EQ(H5Lexists(f, "/tensors/lz", H5P_DEFAULT), 0);    // lazy
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
  ASSERT_TRUE(ReshardHere(GetRaw().source, RowsLayout(3), r3).ok());
  ASSERT_TRUE(ReshardHere(GetRaw().source, RowsLayout(2), r2).ok());
  ASSERT_TRUE(ReshardHere(GetPad().source, PadLayout(3, 2), p6).ok());
  ASSERT_TRUE(ReshardHere(Get().source, LayoutFile(2, 2), m4).ok());
  for (const std::string& p : {r3, r2, p6, m4}) EXPECT_EQ(VerifyProblems(p), std::vector<std::string>{}) << p;
  auto d2 = DistCatalog::Open(r2);
  ASSERT_TRUE(d2.ok());
  const auto& pb = (*d2)->pieces((*d2)->Find("b"));
  ASSERT_EQ(pb.size(), 2u);
  EXPECT_FALSE(SameRegion(pb[0].region, pb[0].stored));  // padded
  auto d6 = DistCatalog::Open(p6);
  ASSERT_TRUE(d6.ok());
  EXPECT_FALSE(SameRegion((*d6)->pieces(0)[3].region, (*d6)->pieces(0)[3].stored));
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

TEST(ReshardVds, VerifyNamesEveryWayTheMasterDiffersFromTheIndex) {
  struct Case {
    std::string name;
    std::function<void(hid_t, const std::vector<std::string>&)> tamper;
    std::vector<std::string> want;  // each problem's message, after "vds-mismatch: distributed save 'P': master "
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
         RewriteVds(f, "/tensors/w", [](std::vector<TestMapping>& m) { std::swap(m[0].vstart, m[1].vstart); });
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
         RewriteVds(f, "/tensors/w", [](std::vector<TestMapping>&) {}, H5T_STD_I32LE);
       },
       {"tensor 'w' /tensors/w: its HDF5 type does not store float32"}},
      {"deleted",  // (b)
       [](hid_t f, const std::vector<std::string>&) { ASSERT_GE(H5Ldelete(f, "/tensors/w", H5P_DEFAULT), 0); },
       {"tensor 'w' /tensors/w: missing (the index's tensor needs a virtual dataset of its 2 pieces)"}},
      {"scalar_deleted",  // (b)
       [](hid_t f, const std::vector<std::string>&) { ASSERT_GE(H5Ldelete(f, "/tensors/s", H5P_DEFAULT), 0); },
       {"tensor 's' /tensors/s: missing (the index's tensor needs a scalar dataset holding the value)"}},
      {"extra",  // (c)
       [](hid_t f, const std::vector<std::string>&) { AddPlainDataset(f, "/tensors/ghost"); },
       {"/tensors/ghost: no dense tensor of the index has this name"}},
      {"extra_empty",  // (c) a dataset for the tensor without elements
       [](hid_t f, const std::vector<std::string>&) { AddPlainDataset(f, "/tensors/e"); },
       {"tensor 'e' /tensors/e: exists, but the master holds no dataset for this tensor: it has no elements"}},
      {"extra_lazy",  // (c)
       [](hid_t f, const std::vector<std::string>&) { AddPlainDataset(f, "/tensors/lz"); },
       {"tensor 'lz' /tensors/lz: exists, but the master holds no dataset for this tensor: it is lazy"}},
      {"long_deleted",  // (b) a flat tensor of 70,000 rows: 2 mappings (one box per piece)
       [](hid_t f, const std::vector<std::string>&) { ASSERT_GE(H5Ldelete(f, "/tensors/long", H5P_DEFAULT), 0); },
       {"tensor 'long' /tensors/long: missing (the index's tensor needs a virtual dataset of its 2 pieces)"}},
      {"plain_instead_of_virtual",
       [](hid_t f, const std::vector<std::string>&) {
         const hid_t d = H5Dopen2(f, "/tensors/w", H5P_DEFAULT);
         std::vector<float> v(80);
         ASSERT_GE(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), 0);
         const hid_t sp = H5Dget_space(d);
         const hid_t nd = H5Dcreate2(f, "/tensors/plain", H5T_IEEE_F32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
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
       {"tensor 'w' /tensors/w: seedstore.fingerprint is 00000000000000010000000000000002, the index says FP_w"}},
      {"scalar_value",  // (e)
       [](hid_t f, const std::vector<std::string>&) {
         const hid_t d = H5Dopen2(f, "/tensors/s", H5P_DEFAULT);
         const double v = 0.5;
         ASSERT_GE(H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, &v), 0);
         H5Dclose(d);
       },
       {"tensor 's' /tensors/s: its value differs from the one its piece holds (rank 0 file 'F0')"}},
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
  const std::string py = PythonWithH5py();
  if (py.empty()) {
    std::printf("SKIPPED h5py part: no python with h5py + hdf5plugin (SEEDSTORE_PYTHON)\n");
  } else {
    Proc p = H5pyCompare(py, GetVds().source, v2);
    EXPECT_EQ(p.code, 0) << p.out << p.err;
    EXPECT_NE(p.out.find("h5py-ok 4"), std::string::npos) << p.out << p.err;  // w, fl, long, s
  }
  ASSERT_NO_FATAL_FAILURE(EditIndex(v2, [](nlohmann::json& j) {
    ASSERT_EQ(j["flat_mappings"], "boxes");
    j.erase("flat_mappings");
  }));
  const std::string old = ::testing::PrintToString(VerifyProblems(v2));
  EXPECT_NE(old.find("tensor 'fl' /tensors/fl: has 4 mappings, the index's pieces give 6"), std::string::npos)
      << old;
  EXPECT_NE(old.find("tensor 'long' /tensors/long: exists, but the master holds no dataset for this "
                     "tensor: its flat pieces would need more than 65536 mappings"),
            std::string::npos)
      << old;
  EXPECT_EQ(old.find("tensor 'w'"), std::string::npos) << old;  // box pieces map as before
  ASSERT_NO_FATAL_FAILURE(EditIndex(v2, [](nlohmann::json& j) { j["flat_mappings"] = "diagonal"; }));
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
  EXPECT_NE(problems[0].find("/tensors/w: no dense tensor of the index has this name"), std::string::npos)
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
  EXPECT_NE(got[2].find("master tensor 's' /tensors/s: its value differs"), std::string::npos) << got[2];
  EXPECT_NE(got[3].find("master /tensors/ghost: no dense tensor"), std::string::npos) << got[3];
}


// HDF5 1.10 decodes a virtual dataset's mappings (in the global heap, without a checksum of its
// own) before checking their checksum, and can crash on damaged ones: verify checks the heap
// object's checksum first and names the damage instead.
TEST(ReshardVds, DamagedMappingsAreNamedNotDecoded) {
  std::vector<std::string> files;
  const std::string p = VdsSave("rv_heap.h5", &files);
  std::string all = mpitest::ReadAll(p);
  const std::string entry = files[1] + std::string(1, '\0') + "/tensors/w" + std::string(1, '\0');
  const size_t at = all.find(entry);
  ASSERT_NE(at, std::string::npos);
  ASSERT_EQ(all.find(entry, at + 1), std::string::npos);
  all[at + entry.size()] ^= 0x40;  // the first byte of the mapping's source selection
  std::ofstream(p, std::ios::binary | std::ios::trunc) << all;
  // The master's seal refuses it at open (docs/FORMAT.md 10) ...
  const std::vector<std::string> sealed = VerifyProblems(p);
  ASSERT_EQ(sealed.size(), 1u) << ::testing::PrintToString(sealed);
  EXPECT_NE(sealed[0].find("master-corrupt: distributed save '" + p + "': its bytes do not match its seal"),
            std::string::npos)
      << sealed[0];
  // ... and sealed anew (a master an unsealed writer wrote so), verify names the damage.
  mpitest::ResealMaster(p);
  EXPECT_EQ(VerifyProblems(p), std::vector<std::string>{"vds-mismatch: distributed save '" + p +
                                                        "': master tensor 'w' /tensors/w: cannot be opened safely: "
                                                        "its mappings' checksum differs (damaged)"});
}

}  // namespace
}  // namespace seedstore
