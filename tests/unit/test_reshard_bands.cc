// Pieces larger than the source window (32 MiB) whose chunks are encoded are read from the
// source a band of whole chunk rows at a time (BandSource, io/rank_file_writer.cc): a flat piece
// across 2-d source chunks and a box piece written in another pipeline hold the source's bytes
// and verify, and a corrupt source chunk under a band is named with nothing replaced.
#include <gtest/gtest.h>

#include "tests/reshard_test_util.h"

namespace seedstore {
namespace {

using namespace reshardtest;  // NOLINT

// f32 [2304, 4099] (37.8 MB, random bits) in 1 MiB chunks, and a small bf16 tensor.
struct BandFixture {
  std::string source;
  std::vector<uint8_t> big, small;
};

const BandFixture& GetBands() {
  static const BandFixture f = [] {
    BandFixture x;
    x.source = TempDir() + "/bands_source.h5";
    x.big = testutil::RandomBytes(uint64_t{2304} * 4099 * 4, 41);
    x.small = testutil::RandomBytes(uint64_t{7} * 5 * 2, 42);
    WriteOptions wo;
    wo.threads = 2;
    auto w = StoreWriter::Create(x.source, 3, Generator::kThreefry, wo);
    EXPECT_TRUE(w.ok());
    EXPECT_TRUE((*w)->AddDense("big", {2304, 4099}, DType::kF32, (const void*)x.big.data()).ok());
    EXPECT_TRUE((*w)->AddDense("small", {7, 5}, DType::kBF16, (const void*)x.small.data()).ok());
    EXPECT_TRUE((*w)->Commit().ok());
    return x;
  }();
  return f;
}

std::string OneRankLayout(const std::string& name, const std::string& placement) {
  return Write(name, R"({"mesh": {"axes": ["data"], "shape": [1]},
 "placements": [{"match": "*", )" +
                         placement + "}]}");
}

void ExpectSourceBytes(const std::string& save, const BandFixture& f) {
  auto cat = OpenCatalog(save);
  ASSERT_TRUE(cat.ok()) << cat.status().ToString();
  std::vector<uint8_t> got(f.big.size());
  ASSERT_TRUE((*cat)->Read((*cat)->Find("big"), WholeTensor({2304, 4099}), got.data()).ok());
  EXPECT_TRUE(got == f.big);
  got.assign(f.small.size(), 0);
  ASSERT_TRUE((*cat)->Read((*cat)->Find("small"), WholeTensor({7, 5}), got.data()).ok());
  EXPECT_TRUE(got == f.small);
  auto r0 = H5Store::Open(RankFileOf(save, 0));
  ASSERT_TRUE(r0.ok());
  const auto rep = (*r0)->Verify(CpuOptions{2});
  for (const auto& p : rep.problems) ADD_FAILURE() << p.status.ToString();
}

TEST(ReshardBands, AFlatPieceAcross2dSourceChunksHoldsTheSourceBytes) {
  const BandFixture& f = GetBands();
  const std::string out = TempDir() + "/bands_flat.h5";
  auto r = ReshardHere(f.source, OneRankLayout("bands_flat.json", R"("flat": ["data"])"), out);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->ok()) << r->Table();
  EXPECT_EQ(r->chunks_copied, 0u);  // a flat piece never lines up with 2-d chunks
  ExpectSourceBytes(out, f);
}

TEST(ReshardBands, ABoxPieceInAnotherPipelineHoldsTheSourceBytes) {
  const BandFixture& f = GetBands();
  const std::string out = TempDir() + "/bands_box.h5";
  // The same chunk grid, but codec none: every chunk is encoded anew, read by bands.
  auto r = ReshardHere(f.source, OneRankLayout("bands_box.json", R"("spec": ["data", null])"), out,
                       false, false, {"big"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->ok()) << r->Table();
  EXPECT_EQ(Counts(*r)["big"].first, 0u);
  ExpectSourceBytes(out, f);
}

TEST(ReshardBands, ACorruptSourceChunkUnderABandIsNamedAndNothingIsReplaced) {
  const BandFixture& f = GetBands();
  const std::string src = TempDir() + "/bands_bad_source.h5";
  ASSERT_EQ(Shell("cp " + f.source + " " + src).code, 0);
  const std::string layout = OneRankLayout("bands_bad.json", R"("flat": ["data"])");
  const std::string out = TempDir() + "/bands_bad_out.h5";
  ASSERT_TRUE(ReshardHere(src, layout, out).ok());
  const std::string before = Shell("md5sum < " + out).out;
  CorruptChunk(src, "big", 20);
  auto r = ReshardHere(src, layout, out);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kCorrupt);
  EXPECT_NE(r.status().message().find("chunk-corrupt: file '" + src + "' tensor 'big' chunk 20"),
            std::string::npos)
      << r.status().ToString();
  EXPECT_EQ(Shell("md5sum < " + out).out, before);
  ExpectSourceBytes(out, f);
}

}  // namespace
}  // namespace seedstore
