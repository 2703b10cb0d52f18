// Reads of tensors cut into many pieces (a piece per rank file of a large world): such a tensor
// is read a piece per thread (DistCatalog::ReadBox). Whole tensors and random boxes and flat
// ranges, on one thread and on several, hold exactly the source's bytes, for box pieces (rows
// over 16 ranks: uneven, empty ones) and flat pieces (over 24 ranks); a damaged piece fails the
// read naming its rank file, whichever thread reads it, and leaves other tensors readable.
#include <gtest/gtest.h>

#include <random>

#include "tests/random_model_test_util.h"
#include "tests/reshard_test_util.h"

namespace seedstore {
namespace {

using namespace reshardtest;  // NOLINT
using ranktest::RandomRegion;
using ranktest::Slice;

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
          ASSERT_EQ(got, Slice(f.values.at(t.name), reg, DTypeSize(t.dtype)));
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
