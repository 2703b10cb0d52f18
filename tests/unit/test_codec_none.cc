// Codec none (WriteOptions::uncompressed, `--codec none`): dense tensors chunked with no
// filters. On seeded random tensors (every dtype, ranks 0-3, prime and empty dims, edge chunks
// in every dim) the stored chunk is exactly the unfiltered chunk that zstd would have
// compressed -- same checksum, same fingerprints -- and reads, Verify and damage reports work
// as for shuffle + zstd; a glob picks the tensors; chunks are copied as stored only between
// tensors of the same pipeline.
#include <gtest/gtest.h>

#include <random>

#include "tests/reshard_test_util.h"
#include "tests/unit/h5store_test_util.h"

namespace seedstore {
namespace {

using namespace reshardtest;  // NOLINT

struct RandomTensor {
  std::string name;
  std::vector<uint64_t> shape;
  DType dtype;
  std::vector<uint8_t> bytes;
};

// `n` random tensors: dtype, rank 0-3, dims 0-41 (0 rarely), values random (bool 0 or 1).
std::vector<RandomTensor> RandomTensors(uint64_t seed, int n) {
  const DType dtypes[] = {DType::kF32, DType::kBF16, DType::kF16, DType::kF64, DType::kI8,
                          DType::kU8,  DType::kI32,  DType::kU64, DType::kBool};
  std::mt19937_64 g(seed);
  std::vector<RandomTensor> out;
  for (int k = 0; k < n; ++k) {
    RandomTensor t;
    t.name = (k % 2 ? "w." : "b.") + std::to_string(k);
    t.dtype = dtypes[g() % std::size(dtypes)];
    const int rank = static_cast<int>(g() % 4);
    for (int d = 0; d < rank; ++d) t.shape.push_back(g() % 16 == 0 ? 0 : 1 + g() % 41);
    t.bytes = testutil::RandomBytes(testutil::Numel(t.shape) * DTypeSize(t.dtype), g());
    if (t.dtype == DType::kBool)
      for (auto& b : t.bytes) b &= 1;
    out.push_back(std::move(t));
  }
  return out;
}

std::string WriteStore(const std::string& path, const std::vector<RandomTensor>& ts,
                       uint64_t chunk_bytes, const std::vector<std::string>& uncompressed) {
  WriteOptions wo;
  wo.chunk_bytes = chunk_bytes;
  wo.threads = 2;
  wo.uncompressed = uncompressed;
  auto w = StoreWriter::Create(path, 5, Generator::kThreefry, wo);
  EXPECT_TRUE(w.ok()) << w.status().ToString();
  for (const auto& t : ts) {
    Status st = (*w)->AddDense(t.name, t.shape, t.dtype, static_cast<const void*>(t.bytes.data()));
    EXPECT_TRUE(st.ok()) << st.ToString();
  }
  Status st = (*w)->Commit();
  EXPECT_TRUE(st.ok()) << st.ToString();
  return path;
}

// A random box of `shape` (empty dims give empty boxes).
Region RandomBox(const std::vector<uint64_t>& shape, std::mt19937_64& g) {
  Region r = WholeTensor(shape);
  for (int d = 0; d < r.rank; ++d) {
    if (shape[d] == 0) continue;
    const uint64_t a = g() % shape[d], b = g() % shape[d];
    r.start[d] = std::min(a, b);
    r.stop[d] = std::max(a, b) + 1;
  }
  return r;
}

TEST(CodecNone, StoredChunksAreTheUnfilteredChunksOnRandomTensors) {
  for (uint64_t seed : {1u, 2u, 3u, 4u}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    const auto ts = RandomTensors(seed, 24);
    const uint64_t chunk_bytes = 16 << (seed % 4 * 2);  // 16, 64, 256, 1024: edge chunks
    const std::string zp = TempDir() + "/cn_z" + std::to_string(seed) + ".h5";
    const std::string np = TempDir() + "/cn_n" + std::to_string(seed) + ".h5";
    WriteStore(zp, ts, chunk_bytes, {});
    WriteStore(np, ts, chunk_bytes, {"*"});
    auto z = H5Store::Open(zp), n = H5Store::Open(np);
    ASSERT_TRUE(z.ok() && n.ok()) << n.status().ToString();
    std::mt19937_64 g(seed * 977);
    for (size_t i = 0; i < ts.size(); ++i) {
      const RandomTensor& t = ts[i];
      SCOPED_TRACE(t.name + " " + ShapeText(t.shape) + " " + DTypeName(t.dtype));
      const StoredTensor &zs = (*z)->stored(i), &ns = (*n)->stored(i);
      EXPECT_TRUE(ns.filters.empty());
      EXPECT_EQ(ns.zstd_level, 0);
      EXPECT_EQ(ns.chunk, zs.chunk);
      EXPECT_EQ(zs.filters.empty(), zs.chunk.empty());
      EXPECT_EQ((*n)->tensors()[i].fingerprint, (*z)->tensors()[i].fingerprint);
      const size_t es = DTypeSize(t.dtype);
      uint64_t chunk_elems = 1;
      for (uint64_t c : ns.chunk) chunk_elems *= c;
      for (uint64_t j = 0; !ns.chunk.empty() && j < ns.num_chunks; ++j) {
        StoredChunk a, b;
        ASSERT_TRUE((*z)->ReadStoredChunk(i, j, &a).ok());
        ASSERT_TRUE((*n)->ReadStoredChunk(i, j, &b).ok());
        EXPECT_EQ(b.bytes.size(), chunk_elems * es) << "chunk " << j;  // full size, as is
        EXPECT_EQ(b.checksum, a.checksum) << "chunk " << j;
        EXPECT_EQ(b.data, a.data) << "chunk " << j;
        EXPECT_EQ(b.filter_mask, 0u);
        EXPECT_EQ((*n)->chunk_info(i)[j].fingerprint, (*z)->chunk_info(i)[j].fingerprint);
      }
      for (int q = 0; q < 4; ++q) {
        const Region box = q == 0 ? WholeTensor(t.shape) : RandomBox(t.shape, g);
        std::vector<uint8_t> want(box.Count() * es), got(box.Count() * es, 0xAB);
        h5storetest::Extract(t.bytes, t.shape, box, es, want.data());
        ASSERT_TRUE((*n)->Read(i, box, got.data(), CpuOptions{2}).ok()) << DescribeRegion(box);
        EXPECT_EQ(got, want) << DescribeRegion(box);
      }
    }
    const auto rep = (*n)->Verify(CpuOptions{2});
    for (const auto& p : rep.problems) ADD_FAILURE() << p.status.ToString();
    EXPECT_EQ(rep.fingerprints.size(), ts.size());
  }
}

TEST(CodecNone, AGlobPicksTheTensorsOthersKeepShuffleAndZstd) {
  const auto ts = RandomTensors(9, 12);
  const std::string p = WriteStore(TempDir() + "/cn_glob.h5", ts, 64, {"w.*"});
  auto s = H5Store::Open(p);
  ASSERT_TRUE(s.ok());
  for (size_t i = 0; i < ts.size(); ++i) {
    const StoredTensor& st = (*s)->stored(i);
    if (st.chunk.empty()) continue;  // a scalar or empty tensor: contiguous, never filtered
    SCOPED_TRACE(ts[i].name);
    if (ts[i].name.rfind("w.", 0) == 0) {
      EXPECT_TRUE(st.filters.empty());
    } else {
      EXPECT_EQ(st.filters.back(), kH5FilterZstd);
    }
  }
  WriteOptions wo;
  wo.uncompressed = {"w.*"};
  EXPECT_TRUE(FilterPipeline(wo, "w.1", DType::kF32).empty());
  EXPECT_EQ(FilterPipeline(wo, "b.1", DType::kF32),
            (std::vector<int>{kH5FilterShuffle, kH5FilterZstd}));
  EXPECT_EQ(FilterPipeline(wo, "b.1", DType::kU8), (std::vector<int>{kH5FilterZstd}));
}

TEST(CodecNone, AFlippedByteIsNamedChunkCorrupt) {
  std::vector<RandomTensor> ts(1);
  ts[0] = {"t", {40, 24}, DType::kF32, testutil::RandomBytes(40 * 24 * 4, 3)};
  const std::string p = WriteStore(TempDir() + "/cn_flip.h5", ts, 256, {"*"});
  ASSERT_TRUE(testutil::FlipChunkByte(p, "t", {8, 0}));
  auto s = H5Store::Open(p);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  std::vector<uint8_t> out(40 * 24 * 4);
  Status st = (*s)->Read(0, WholeTensor({40, 24}), out.data(), CpuOptions{1});
  EXPECT_EQ(st.code(), Code::kCorrupt) << st.ToString();
  EXPECT_NE(st.message().find("chunk-corrupt"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("'t'"), std::string::npos) << st.ToString();
  const auto rep = (*s)->Verify(CpuOptions{1});
  ASSERT_EQ(rep.problems.size(), 1u);
  EXPECT_EQ(rep.problems[0].tensor, "t");
}

// Reshards copy chunks as stored only when source and output pipelines agree: codec none to
// codec none copies as many as zstd to zstd; across codecs every chunk is encoded anew (in
// the writer's own chunk shape).
TEST(CodecNone, ChunksAreCopiedAsStoredOnlyBetweenTheSamePipeline) {
  static const RawFixture none = MakeRawSource(kRawSpec, "cn_source.h5", 256, {"*"});
  const RawFixture& zstd = GetRaw();
  struct Case {
    const RawFixture* src;
    std::vector<std::string> out_uncompressed;
    uint64_t copied;
    bool out_filters;
  };
  const Case cases[] = {{&zstd, {}, 18, true},
                        {&none, {"*"}, 18, false},
                        {&none, {}, 0, true},
                        {&zstd, {"*"}, 0, false}};
  int k = 0;
  for (const Case& c : cases) {
    const std::string out = TempDir() + "/cn_d2_" + std::to_string(k++) + ".h5";
    SCOPED_TRACE(out);
    auto r = ReshardHere(c.src->source, RowsLayout(2), out, false, false, c.out_uncompressed);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE(r->ok()) << r->Table();
    EXPECT_EQ(r->chunks_copied, c.copied);
    // Copying keeps the source's chunk shapes (23 chunks); encoding uses the writer's own.
    if (c.copied > 0) {
      EXPECT_EQ(r->chunks_copied + r->chunks_encoded, 23u);
    }
    EXPECT_GT(r->chunks_encoded, 0u);
    ExpectRawSameAsSource(out, *c.src);
    auto rank1 = H5Store::Open(RankFileOf(out, 1));
    ASSERT_TRUE(rank1.ok());
    const StoredTensor& a = (*rank1)->stored((*rank1)->Find("a"));
    EXPECT_EQ(a.filters.empty(), !c.out_filters);
  }
}

}  // namespace
}  // namespace seedstore
