// H5Store::Verify checks the chunks of a batch of tensors in one parallel pass: on seeded random
// stores of many small tensors (one chunk or several, lazy ones among them, more tensors than
// one batch holds) the report is the same whatever the thread count, every fingerprint is the
// recorded one, and damaged chunks are named each once, in tensor then chunk order, with only
// their tensors incomplete.
#include <set>

#include "io/chunk_grid.h"
#include "tests/unit/h5store_test_util.h"

namespace seedstore {
namespace {

using namespace h5storetest;  // NOLINT

struct Made {
  std::vector<std::string> names;
  std::vector<bool> lazy;
  std::vector<Shape> shapes;
};

// `tensors` tensors of random shape (rank 0 to 3, dims 1 to 40) and dtype, one in five lazy,
// written with 256-byte chunks.
Made MakeStore(const std::string& path, int tensors, uint64_t seed) {
  std::mt19937_64 g(seed);
  const DType dtypes[] = {DType::kF32, DType::kBF16, DType::kU8, DType::kI64, DType::kF16};
  WriteOptions wo;
  wo.chunk_bytes = 256;
  auto w = StoreWriter::Create(path, seed, Generator::kThreefry, wo);
  EXPECT_TRUE(w.ok()) << w.status().ToString();
  Made m;
  std::vector<std::vector<uint8_t>> keep;
  for (int i = 0; i < tensors; ++i) {
    Shape shape(g() % 4);
    for (auto& d : shape) d = 1 + g() % 40;
    const DType dt = dtypes[g() % 5];
    const std::string name = "t" + std::to_string(i);
    const bool lazy = g() % 5 == 0;
    if (lazy) {
      const DType floats[] = {DType::kF32, DType::kBF16, DType::kF16};
      const Status s = (*w)->AddLazy(Spec(name, shape, floats[g() % 3], Dist::kNormal, 0.02));
      EXPECT_TRUE(s.ok()) << name << ": " << s.ToString();
    } else {
      keep.push_back(RandomBytes(Numel(shape) * DTypeSize(dt), g()));
      const Status s =
          (*w)->AddDense(name, shape, dt, FromWhole(&keep.back(), shape, DTypeSize(dt)));
      EXPECT_TRUE(s.ok()) << name << ": " << s.ToString();
    }
    m.names.push_back(name);
    m.lazy.push_back(lazy);
    m.shapes.push_back(shape);
  }
  EXPECT_TRUE((*w)->Commit().ok());
  return m;
}

std::vector<std::string> Problems(const H5Store::VerifyReport& r) {
  std::vector<std::string> v;
  for (const auto& p : r.problems)
    v.push_back(p.tensor + " " + std::to_string(p.chunk) + " " + p.status.ToString());
  return v;
}

TEST(VerifyBatches, TheReportIsTheSameWhateverTheThreadCount) {
  TempDir dir;
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    const std::string path = dir / ("s" + std::to_string(seed) + ".h5");
    const Made m = MakeStore(path, 150, seed);
    auto s = H5Store::Open(path);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    const auto one = (*s)->Verify(CpuOptions{1});
    EXPECT_TRUE(one.problems.empty()) << testing::PrintToString(Problems(one));
    ASSERT_EQ(one.fingerprints.size(), m.names.size());
    for (size_t i = 0; i < m.names.size(); ++i) {
      EXPECT_TRUE(one.complete[i] && one.ok[i]) << m.names[i];
      EXPECT_EQ(one.fingerprints[i], *(*s)->tensors()[i].fingerprint) << m.names[i];
    }
    for (int threads : {2, 3, 8}) {
      const auto r = (*s)->Verify(CpuOptions{threads});
      EXPECT_EQ(r.fingerprints, one.fingerprints) << threads << " threads";
      EXPECT_EQ(r.complete, one.complete) << threads << " threads";
      EXPECT_EQ(r.chunks, one.chunks) << threads << " threads";
      EXPECT_EQ(r.bytes, one.bytes) << threads << " threads";
      EXPECT_TRUE(r.problems.empty()) << threads << " threads";
    }
  }
}

TEST(VerifyBatches, DamagedChunksAreNamedInTensorThenChunkOrder) {
  TempDir dir;
  for (uint64_t seed = 11; seed <= 13; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    const std::string path = dir / ("d" + std::to_string(seed) + ".h5");
    const Made m = MakeStore(path, 150, seed);
    // Chunks of random dense chunked tensors, some of the same tensor, flipped.
    std::vector<uint64_t> chunked;
    std::vector<std::vector<uint64_t>> grid;  // chunk shape per tensor
    {
      auto s = H5Store::Open(path);
      ASSERT_TRUE(s.ok());
      for (size_t i = 0; i < m.names.size(); ++i) {
        grid.push_back((*s)->stored(i).chunk);
        if (!m.lazy[i] && !m.shapes[i].empty()) chunked.push_back(i);
      }
    }
    std::mt19937_64 g(seed);
    std::set<std::pair<uint64_t, int64_t>> flipped;  // (tensor, chunk)
    for (int k = 0; k < 6; ++k) {
      const uint64_t i = chunked[g() % chunked.size()];
      const Grid gr = Grid::Make(m.shapes[i], grid[i]);
      const uint64_t j = g() % gr.num;
      if (!flipped.insert({i, static_cast<int64_t>(j)}).second) continue;
      uint64_t c[kMaxRank];
      gr.Coords(j, c);
      std::vector<hsize_t> at(m.shapes[i].size());
      for (size_t d = 0; d < at.size(); ++d) at[d] = c[d] * grid[i][d];
      ASSERT_TRUE(FlipChunkByte(path, m.names[i], at)) << m.names[i] << " chunk " << j;
    }
    auto s = H5Store::Open(path);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    const auto one = (*s)->Verify(CpuOptions{1});
    ASSERT_EQ(one.problems.size(), flipped.size()) << testing::PrintToString(Problems(one));
    size_t q = 0;
    for (const auto& [i, j] : flipped) {  // std::set: tensor order, then chunk order
      EXPECT_EQ(one.problems[q].tensor, m.names[i]);
      EXPECT_EQ(one.problems[q].chunk, j) << m.names[i];
      EXPECT_EQ(one.problems[q].status.code(), Code::kCorrupt) << one.problems[q].status.ToString();
      ++q;
    }
    for (size_t i = 0; i < m.names.size(); ++i) {
      const bool damaged =
          std::any_of(flipped.begin(), flipped.end(), [&](const auto& f) { return f.first == i; });
      EXPECT_EQ(one.complete[i], !damaged) << m.names[i];
      if (!damaged) {
        EXPECT_EQ(one.fingerprints[i], *(*s)->tensors()[i].fingerprint) << m.names[i];
      }
    }
    for (int threads : {2, 8}) {
      const auto r = (*s)->Verify(CpuOptions{threads});
      EXPECT_EQ(Problems(r), Problems(one)) << threads << " threads";
      EXPECT_EQ(r.complete, one.complete) << threads << " threads";
    }
  }
}

}  // namespace
}  // namespace seedstore
