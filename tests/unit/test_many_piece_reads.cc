// Reads of tensors cut into many pieces (a piece per rank file of a large world): such a tensor
// is read a piece per thread (DistCatalog::ReadBox). Whole tensors and random boxes and flat
// ranges, on one thread and on several, hold exactly the source's bytes, for box pieces (rows
// over 16 ranks: uneven, empty ones) and flat pieces (over 24 ranks); a damaged piece fails the
// read naming its rank file, whichever thread reads it, and leaves other tensors readable.
#include <gtest/gtest.h>

#include <random>

#include "tests/reshard_test_util.h"

namespace seedstore {
namespace {

using namespace reshardtest;  // NOLINT

// The source's bytes of region `r` of tensor `name` (row-major, as Read writes them).
std::vector<unsigned char> SourceBytes(const RawFixture& f, const TensorRecord& t,
                                       const Region& r) {
  const std::vector<unsigned char>& all = f.values.at(t.name);
  const size_t es = DTypeSize(t.dtype);
  std::vector<unsigned char> out;
  if (r.Count() == 0) return out;
  if (r.rank == 0) return all;
  const uint64_t runs = r.Count() / r.RunLength();
  for (uint64_t q = 0; q < runs; ++q) {
    const auto* p = all.data() + r.RunBase(q) * es;
    out.insert(out.end(), p, p + r.RunLength() * es);
  }
  return out;
}

Region RandomRegion(const std::vector<uint64_t>& shape, std::mt19937_64& rng) {
  Region r = WholeTensor(shape);
  if (r.rank == 0) return r;
  if (rng() % 2) {
    const uint64_t n = r.Count();
    uint64_t x = rng() % (n + 1), y = rng() % (n + 1);
    if (x > y) std::swap(x, y);
    r.flat = true, r.begin = x, r.end = y;
    return r;
  }
  for (int d = 0; d < r.rank; ++d) {
    uint64_t x = rng() % (shape[d] + 1), y = rng() % (shape[d] + 1);
    if (x > y) std::swap(x, y);
    r.start[d] = x, r.stop[d] = y;
  }
  return r;
}

std::string FlatLayout(int world) {
  return Write("mp_flat" + std::to_string(world) + ".json",
               R"({"mesh": {"axes": ["data"], "shape": [)" + std::to_string(world) + R"(]},
 "placements": [{"match": "*", "flat": ["data"]}]})");
}

TEST(ManyPieceReads, EveryRegionHoldsTheSourcesBytesOnAnyThreadCount) {
  const RawFixture& f = GetRaw();
  std::mt19937_64 rng(20261207);
  for (const std::string& layout : {RowsLayout(16), FlatLayout(24)}) {
    SCOPED_TRACE(layout);
    const std::string out = TempDir() + "/mp_save.h5";
    auto r = ReshardHere(f.source, layout, out);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_TRUE(r->ok()) << r->Table();
    auto cat = OpenCatalog(out);
    ASSERT_TRUE(cat.ok()) << cat.status().ToString();
    for (size_t i = 0; i < (*cat)->tensors().size(); ++i) {
      const TensorRecord& t = (*cat)->tensors()[i];
      if (t.lazy) continue;
      for (int k = 0; k < 40; ++k) {
        const Region reg = k == 0 ? WholeTensor(t.shape) : RandomRegion(t.shape, rng);
        for (const int threads : {1, 2, 4}) {
          SCOPED_TRACE(t.name + " " + DescribeRegion(reg) + " threads " + std::to_string(threads));
          std::vector<unsigned char> got(reg.Count() * DTypeSize(t.dtype), 0xAB);
          const Status st = (*cat)->Read(i, reg, got.data(), CpuOptions{threads});
          ASSERT_TRUE(st.ok()) << st.ToString();
          ASSERT_EQ(got, SourceBytes(f, t, reg));
        }
      }
    }
  }
}

TEST(ManyPieceReads, ADamagedPieceIsNamedWhicheverThreadReadsIt) {
  const RawFixture& f = GetRaw();
  const std::string out = TempDir() + "/mp_damaged.h5";
  auto r = ReshardHere(f.source, FlatLayout(24), out);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->ok()) << r->Table();
  const std::string file = RankFileOf(out, 17);
  CorruptChunk(file, "b", 0);
  auto cat = OpenCatalog(out);
  ASSERT_TRUE(cat.ok()) << cat.status().ToString();
  for (const int threads : {1, 2, 4}) {
    SCOPED_TRACE("threads " + std::to_string(threads));
    const int b = (*cat)->Find("b");
    const TensorRecord& t = (*cat)->tensors()[b];
    std::vector<unsigned char> got(t.NumBytes());
    const Status st = (*cat)->Read(b, WholeTensor(t.shape), got.data(), CpuOptions{threads});
    EXPECT_EQ(st.code(), Code::kCorrupt) << st.ToString();
    EXPECT_NE(st.message().find(file), std::string::npos) << st.ToString();
    EXPECT_NE(st.message().find("checksum"), std::string::npos) << st.ToString();
    const int a = (*cat)->Find("a");
    std::vector<unsigned char> ga((*cat)->tensors()[a].NumBytes());
    ASSERT_TRUE(
        (*cat)
            ->Read(a, WholeTensor((*cat)->tensors()[a].shape), ga.data(), CpuOptions{threads})
            .ok());
    EXPECT_EQ(ga, f.values.at("a"));
  }
}

}  // namespace
}  // namespace seedstore
