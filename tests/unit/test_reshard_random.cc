// Randomized resharding (invariants I1, I4, I5): random models (0-d,
// one-element, empty, prime and 4-d shapes, every dtype, dense and lazy), random meshes and
// placements (PartitionSpec with nested axes, DTensor, flat, replicated; uneven and empty
// shards), random chunkings and padding bounds. Each case resharded along a chain
//
//   store -> save under L1 -> save under L2 -> one consolidated store -> safetensors
//   (one file, or several with a Hugging Face index) -> save under L3
//
// must prove every tensor, hold the source's bytes exactly (random boxes and flat ranges read
// back, and their fingerprints equal to those of the bytes), and pass Verify file by file.
//
// SEEDSTORE_RESHARD_CASES (default 12) and SEEDSTORE_RESHARD_SEED (default 1) widen the
// search; a failure names the case's seed, which reproduces it alone with CASES=1.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "io/dist_store.h"
#include "io/h5store.h"
#include "io/interop.h"
#include "io/open.h"
#include "store/spec.h"
#include "tests/random_model_test_util.h"
#include "tests/rank_test_util.h"

namespace seedstore {
namespace {

using nlohmann::json;
using ranktest::Model;
using ranktest::RandomLayout;
using ranktest::RandomModel;
using ranktest::RandomRegion;
using ranktest::Slice;
using ranktest::TempDir;

uint64_t RandomChunkBytes(std::mt19937_64& rng) {
  static const uint64_t c[] = {16, 64, 100, 256, 1000, 4096, 1 << 20};
  return c[rng() % (sizeof c / sizeof *c)];
}

// Every tensor of the catalog at `path` holds the model's values: whole, and random boxes and
// flat ranges, with fingerprints equal to those of the bytes; every HDF5 file passes Verify.
// Lazy tensors are still lazy unless the catalog went through safetensors (`all_dense`).
void ExpectHoldsModel(const std::string& path, const Model& m, std::mt19937_64& rng,
                      bool all_dense = false) {
  auto cat = OpenCatalog(path);
  ASSERT_TRUE(cat.ok()) << cat.status().ToString();
  ASSERT_EQ((*cat)->tensors().size(), m.names.size());
  for (const std::string& name : m.names) {
    const int i = (*cat)->Find(name);
    ASSERT_GE(i, 0) << path << " lacks " << name;
    const TensorRecord& t = (*cat)->tensors()[i];
    SCOPED_TRACE(path + " tensor " + t.name + " " + json(t.shape).dump());
    ASSERT_EQ(t.shape, m.shapes.at(t.name));
    ASSERT_EQ(t.dtype, m.dtypes.at(t.name));
    bool lazy_in_model = false;
    for (const TensorSpec& l : m.lazy) lazy_in_model |= l.name == t.name;
    EXPECT_EQ(t.lazy != nullptr, lazy_in_model && !all_dense);  // lazy stays lazy
    const std::vector<unsigned char>& want = m.values.at(t.name);
    const size_t es = DTypeSize(t.dtype);
    std::vector<Region> regions = {WholeTensor(t.shape)};
    for (int k = 0; k < 6; ++k) regions.push_back(RandomRegion(t.shape, rng));
    for (const Region& r : regions) {
      SCOPED_TRACE(DescribeRegion(r));
      const std::vector<unsigned char> exp = Slice(want, r, es);
      std::vector<unsigned char> got(exp.size(), 0xA5);
      const int threads = 1 + static_cast<int>(rng() % 2);
      Status st = (*cat)->Read(i, r, got.data(), CpuOptions{threads});
      ASSERT_TRUE(st.ok()) << st.ToString();
      EXPECT_TRUE(got == exp);
      auto fp = (*cat)->FingerprintRegion(i, r, CpuOptions{threads});
      ASSERT_TRUE(fp.ok()) << fp.status().ToString();
      EXPECT_EQ(*fp, FingerprintOf(t, r, exp.data()));
    }
  }
  if (IsSafetensorsSource(path)) return;
  std::vector<std::string> files = {path};
  if (auto d = DistCatalog::Open(path); d.ok()) {
    for (const std::string& f : (*d)->rank_files()) files.push_back(f);
  }
  for (const std::string& file : files) {
    auto s = H5Store::Open(file);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    for (const auto& p : (*s)->Verify(CpuOptions{2}).problems)
      ADD_FAILURE() << file << ": " << p.status.ToString();
  }
}

// Reshards `src` to `out` (under `layout`, or consolidated when it is empty) in this process
// with random chunking, padding bound and proof mode; expects every tensor proven. Adds the
// chunks it copied as stored and those it encoded to the counters.
void ReshardAndProve(const std::string& src, const std::string& layout, const std::string& out,
                     std::mt19937_64& rng, uint64_t* copied, uint64_t* encoded) {
  auto comm = CreateSelfCollective();
  auto cat = OpenCatalog(src);
  ASSERT_TRUE(cat.ok()) << cat.status().ToString();
  Layout l;
  if (!layout.empty()) {
    auto parsed = Layout::Load(layout);
    ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
    l = *parsed;
  }
  static const double paddings[] = {0.0, 0.25, 1.0, 100.0};
  DistSaveOptions o;
  o.consolidate = layout.empty();
  o.full_proof = rng() % 2;
  o.max_padding = paddings[rng() % 4];
  o.cpu.threads = o.write.threads = 1 + static_cast<int>(rng() % 2);
  o.write.chunk_bytes = RandomChunkBytes(rng);
  SCOPED_TRACE("reshard " + src + " -> " + out + " (layout " +
               (layout.empty() ? "consolidated" : layout) + ", chunk_bytes " +
               std::to_string(o.write.chunk_bytes) + ", max_padding " +
               std::to_string(o.max_padding) + ")");
  auto rep = Reshard(*comm, **cat, l, out, o);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  EXPECT_TRUE(rep->ok()) << rep->Table();
  EXPECT_EQ(rep->rows.size(), (*cat)->tensors().size());
  *copied += rep->chunks_copied;
  *encoded += rep->chunks_encoded;
}

TEST(ReshardRandom, ChainsOfRandomLayoutsKeepEveryByteAndProveEveryTensor) {
  const uint64_t cases = ranktest::EnvU64("SEEDSTORE_RESHARD_CASES", 12);
  const uint64_t base = ranktest::EnvU64("SEEDSTORE_RESHARD_SEED", 1);
  uint64_t copied = 0, encoded = 0;
  for (uint64_t c = 0; c < cases; ++c) {
    const uint64_t seed = base + c;
    SCOPED_TRACE("case seed " + std::to_string(seed) + " (SEEDSTORE_RESHARD_SEED=" +
                 std::to_string(seed) + " SEEDSTORE_RESHARD_CASES=1 reproduces it)");
    std::mt19937_64 rng(seed);
    const Model m = RandomModel(rng, seed);
    const std::string dir = TempDir() + "/rnd" + std::to_string(seed);
    ASSERT_EQ(std::system(("rm -rf " + dir + " && mkdir -p " + dir).c_str()), 0);
    // The source: one store, randomly chunked.
    const std::string src = dir + "/src.h5";
    {
      WriteOptions wo;
      wo.chunk_bytes = RandomChunkBytes(rng);
      wo.threads = 1 + static_cast<int>(rng() % 2);
      ranktest::WriteModelStore(m, src, wo);
      if (HasFatalFailure()) return;
    }
    ExpectHoldsModel(src, m, rng);
    const std::string l1 = RandomLayout(rng, m, "rnd" + std::to_string(seed) + "_l1.json");
    const std::string l2 = RandomLayout(rng, m, "rnd" + std::to_string(seed) + "_l2.json");
    const std::string l3 = RandomLayout(rng, m, "rnd" + std::to_string(seed) + "_l3.json");
    const std::string s1 = dir + "/s1.h5", s2 = dir + "/s2.h5", one = dir + "/one.h5",
                      s3 = dir + "/s3.h5";
    for (const auto& [from, layout, to] :
         std::vector<std::tuple<std::string, std::string, std::string>>{
             {src, l1, s1}, {s1, l2, s2}, {s2, "", one}}) {
      ReshardAndProve(from, layout, to, rng, &copied, &encoded);
      if (HasFatalFailure()) return;
      ExpectHoldsModel(to, m, rng);
      if (HasFatalFailure()) return;
    }
    // Through safetensors: one file, or files of at most ~2 KB with an index.
    std::string st = dir + "/model.safetensors";
    {
      auto one_cat = OpenCatalog(one);
      ASSERT_TRUE(one_cat.ok()) << one_cat.status().ToString();
      const uint64_t max_file_bytes = rng() % 2 ? 0 : 2048;
      auto files = ExportSafetensorsFiles(**one_cat, st, ExportOptions{}, max_file_bytes);
      ASSERT_TRUE(files.ok()) << files.status().ToString();
      st = files->back();  // the index when there is one
    }
    ExpectHoldsModel(st, m, rng, true);
    if (HasFatalFailure()) return;
    ReshardAndProve(st, l3, s3, rng, &copied, &encoded);
    if (HasFatalFailure()) return;
    ExpectHoldsModel(s3, m, rng, true);
    if (HasFatalFailure()) return;
    if (!HasFailure()) {
      EXPECT_EQ(std::system(("rm -rf " + dir).c_str()), 0);
    }
  }
  // Both ways of writing a chunk were exercised.
  std::printf("[ reshard  ] %llu cases: %llu chunks copied as stored, %llu encoded\n",
              static_cast<unsigned long long>(cases), static_cast<unsigned long long>(copied),
              static_cast<unsigned long long>(encoded));
  if (cases >= 4) {
    EXPECT_GT(copied, 0u);
    EXPECT_GT(encoded, 0u);
  }
}

// Catalogs are read from many threads at once (a loader reading tensors in parallel): a store,
// a distributed save and a safetensors index, each opened once and shared by four threads that
// read random boxes and flat ranges of random tensors, each with 1 or 2 threads of its own,
// and fingerprint them. Every read is exact, every fingerprint that of its bytes. (Also a
// target for ThreadSanitizer: tools/sanitize.sh thread.)
TEST(ConcurrentReads, SharedCatalogsReadExactlyFromFourThreads) {
  for (uint64_t seed = 101; seed < 105; ++seed) {
    SCOPED_TRACE("case seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    const Model m = RandomModel(rng, seed);
    const std::string dir = TempDir() + "/cr" + std::to_string(seed);
    ASSERT_EQ(std::system(("rm -rf " + dir + " && mkdir -p " + dir).c_str()), 0);
    const std::string src = dir + "/src.h5", save = dir + "/save.h5";
    WriteOptions wo;
    wo.chunk_bytes = 256;
    ranktest::WriteModelStore(m, src, wo);
    if (HasFatalFailure()) return;
    uint64_t copied = 0, encoded = 0;
    ReshardAndProve(src, RandomLayout(rng, m, "cr" + std::to_string(seed) + ".json"), save, rng,
                    &copied, &encoded);
    if (HasFatalFailure()) return;
    std::string st;
    {
      auto c = OpenCatalog(src);
      ASSERT_TRUE(c.ok());
      auto files = ExportSafetensorsFiles(**c, dir + "/model.safetensors", ExportOptions{}, 1024);
      ASSERT_TRUE(files.ok()) << files.status().ToString();
      st = files->back();
    }
    for (const std::string& path : {src, save, st}) {
      auto cat = OpenCatalog(path);
      ASSERT_TRUE(cat.ok()) << cat.status().ToString();
      const Catalog& c = **cat;
      std::atomic<int> reads{0};
      std::vector<std::thread> pool;
      for (int th = 0; th < 4; ++th)
        pool.emplace_back([&, th] {
          std::mt19937_64 r(seed * 16 + th);
          for (int k = 0; k < 40; ++k) {
            const size_t i = r() % c.tensors().size();
            const TensorRecord& t = c.tensors()[i];
            const Region reg = RandomRegion(t.shape, r);
            const std::vector<unsigned char> exp =
                Slice(m.values.at(t.name), reg, DTypeSize(t.dtype));
            std::vector<unsigned char> got(exp.size(), 0x5A);
            const CpuOptions o{1 + static_cast<int>(r() % 2)};
            const Status s = c.Read(i, reg, got.data(), o);
            EXPECT_TRUE(s.ok()) << path << " " << t.name << ": " << s.ToString();
            EXPECT_TRUE(got == exp) << path << " " << t.name << " " << DescribeRegion(reg);
            auto fp = c.FingerprintRegion(i, reg, o);
            EXPECT_TRUE(fp.ok() && *fp == FingerprintOf(t, reg, exp.data()))
                << path << " " << t.name;
            ++reads;
          }
        });
      for (auto& th : pool) th.join();
      EXPECT_EQ(reads.load(), 160);
    }
    if (!HasFailure()) {
      EXPECT_EQ(std::system(("rm -rf " + dir).c_str()), 0);
    }
  }
}

}  // namespace
}  // namespace seedstore
