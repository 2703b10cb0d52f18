// Rank file versions (docs/FORMAT.md 9, 11): a save of version 1 rank files (a dataset per
// piece) and one of version 2 (pieces packed into cell sets) of the same layout hold the same
// values; resharding either into the other copies every chunk as stored and proves it; a save
// whose rank files' version differs from its index's is refused by name, with nothing replaced;
// versions this build does not know are refused by name.
#include <gtest/gtest.h>

#include <filesystem>

#include "io/h5_handle.h"
#include "tests/reshard_test_util.h"

namespace seedstore {
namespace {

using namespace reshardtest;  // NOLINT

// The format version of every rank file of the save at `path`.
std::vector<int> RankFileVersions(const std::string& path) {
  std::vector<int> v;
  auto d = DistCatalog::Open(path);
  EXPECT_TRUE(d.ok()) << d.status().ToString();
  if (!d.ok()) return v;
  for (const std::string& f : (*d)->rank_files()) {
    auto s = H5Store::Open(f);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    v.push_back(s.ok() ? (*s)->format_version() : -1);
  }
  return v;
}

TEST(RankFileVersions, EachVersionReshardsIntoTheOtherCopyingEveryChunk) {
  const RawFixture& f = GetRaw();
  const std::string layout = RowsLayout(3);
  const std::string v1 = TempDir() + "/rfv_v1.h5", v2 = TempDir() + "/rfv_v2.h5";
  auto a = ReshardHere(f.source, layout, v1, false, false, {}, kStoreFormatVersion);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  auto b = ReshardHere(f.source, layout, v2, false, false, {}, kCellsFormatVersion);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(RankFileVersions(v1), (std::vector<int>{1, 1, 1}));
  EXPECT_EQ(RankFileVersions(v2), (std::vector<int>{2, 2, 2}));
  // The same pieces, chunks and stored bytes: only where they lie differs.
  EXPECT_EQ(Counts(*a), Counts(*b));
  for (const std::string& p : {v1, v2}) {
    ExpectRawSameAsSource(p, f);
    EXPECT_EQ(VerifyProblems(p), std::vector<std::string>{}) << p;
  }
  // Each into the other (and into itself) under the same layout: every chunk copied as stored.
  for (const auto& [from, version] : std::vector<std::pair<std::string, int>>{
           {v1, kCellsFormatVersion}, {v2, kStoreFormatVersion}, {v2, kCellsFormatVersion}}) {
    SCOPED_TRACE(from + " -> version " + std::to_string(version));
    const std::string out = TempDir() + "/rfv_out.h5";
    auto r = ReshardHere(from, layout, out, false, false, {}, version);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE(r->ok()) << r->Table();
    EXPECT_GT(r->chunks_copied, 0u);
    for (const auto& [name, counts] : Counts(*r)) {  // the scalar is stored as is, no chunks
      if (name != "s") {
        EXPECT_EQ(counts.second, 0u) << name << ": " << r->Table();
      }
    }
    EXPECT_EQ(RankFileVersions(out), std::vector<int>(3, version));
    ExpectRawSameAsSource(out, f);
    EXPECT_EQ(VerifyProblems(out), std::vector<std::string>{});
    // The rank files' bytes are those a direct save of that version writes.
    const std::string direct = TempDir() + "/rfv_direct.h5";
    ASSERT_TRUE(ReshardHere(f.source, layout, direct, false, false, {}, version).ok());
    auto dd = DistCatalog::Open(direct);
    auto od = DistCatalog::Open(out);
    ASSERT_TRUE(dd.ok() && od.ok());
    for (int rank = 0; rank < 3; ++rank)
      EXPECT_TRUE(ranktest::ReadAll((*dd)->rank_files()[rank]) ==
                  ranktest::ReadAll((*od)->rank_files()[rank]))
          << "rank " << rank;
    // Consolidated back into one store: the source's values.
    const std::string one = TempDir() + "/rfv_one.h5";
    ASSERT_TRUE(ReshardHere(out, "", one, true).ok());
    auto s = H5Store::Open(one);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_EQ((*s)->format_version(), kStoreFormatVersion);
    EXPECT_TRUE((*s)->Verify(CpuOptions{1}).problems.empty());
  }
}

// Writers emit an index's text directly, record by record (StoreWriter, MasterIndexText): each
// must be exactly nlohmann's compact dump, keys sorted, of the document it holds -- for box,
// flat and padded pieces, lazy, scalar and empty tensors, in rank files of both versions, the
// master and the source store.
TEST(RankFileVersions, EveryIndexIsTheCompactDumpOfItsDocument) {
  auto expect_canonical = [](const std::string& file, const char* dataset) {
    testutil::H5File h(file, H5F_ACC_RDONLY);
    ASSERT_GE(h.id, 0) << file;
    const std::string text = testutil::DatasetText(h.id, dataset);
    ASSERT_FALSE(text.empty()) << file;
    EXPECT_EQ(nlohmann::json::parse(text).dump(), text) << file;
  };
  const std::vector<std::pair<const RawFixture*, std::string>> cases = {
      {&GetRaw(), RowsLayout(3)}, {&GetVds(), VdsLayout()}, {&GetPad(), PadLayout(3, 2)}};
  for (const auto& [f, layout] : cases) {
    expect_canonical(f->source, "/seedstore/index");
    for (const int version : {kStoreFormatVersion, kCellsFormatVersion}) {
      SCOPED_TRACE(layout + " version " + std::to_string(version));
      const std::string out = TempDir() + "/rfv_canonical.h5";
      auto r = ReshardHere(f->source, layout, out, false, false, {}, version);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      ASSERT_TRUE(r->ok()) << r->Table();
      expect_canonical(out, "/distributed/index");
      auto d = DistCatalog::Open(out);
      ASSERT_TRUE(d.ok()) << d.status().ToString();
      for (const std::string& rf : (*d)->rank_files()) expect_canonical(rf, "/seedstore/index");
    }
  }
}

TEST(RankFileVersions, AMixedSaveIsRefusedByNameAndNothingIsReplaced) {
  const RawFixture& f = GetRaw();
  const std::string layout = RowsLayout(3);
  const std::string v1 = TempDir() + "/rfv_mixed_v1.h5", v2 = TempDir() + "/rfv_mixed_v2.h5";
  ASSERT_TRUE(ReshardHere(f.source, layout, v1, false, false, {}, kStoreFormatVersion).ok());
  ASSERT_TRUE(ReshardHere(f.source, layout, v2, false, false, {}, kCellsFormatVersion).ok());
  // Rank 1's file of the version 2 save replaced by the version 1 save's (same pieces, same
  // values, same fingerprints).
  const std::string victim = RankFileOf(v2, 1);
  std::filesystem::copy_file(RankFileOf(v1, 1), victim,
                             std::filesystem::copy_options::overwrite_existing);
  std::map<std::string, std::string> before;
  auto d = DistCatalog::Open(v2);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  for (const std::string& rf : (*d)->rank_files()) before[rf] = ranktest::ReadAll(rf);
  before[v2] = ranktest::ReadAll(v2);
  const std::string want = "rank-file-corrupt: distributed save '" + v2 + "' rank 1 file '" +
                           victim +
                           "': reading tensor 'a': rank file version 1 in a version 2 save";
  std::vector<unsigned char> got(40 * 24 * 2);
  const Status r = (*d)->Read((*d)->Find("a"), WholeTensor({40, 24}), got.data());
  EXPECT_EQ(r.code(), Code::kCorrupt) << r.ToString();
  EXPECT_EQ(r.message(), want);
  d->reset();
  const std::vector<std::string> problems = VerifyProblems(v2);
  ASSERT_FALSE(problems.empty());
  EXPECT_NE(problems[0].find("rank file version 1 in a version 2 save"), std::string::npos)
      << problems[0];
  // The other way round: a version 2 rank file in a version 1 save.
  const std::string victim1 = RankFileOf(v1, 2);
  std::filesystem::copy_file(RankFileOf(v2, 2), victim1,
                             std::filesystem::copy_options::overwrite_existing);
  const std::vector<std::string> p1 = VerifyProblems(v1);
  ASSERT_FALSE(p1.empty());
  EXPECT_NE(p1[0].find("rank file version 2 in a version 1 save"), std::string::npos) << p1[0];
  // A reshard of the mixed save, in place or consolidated, fails before replacing anything.
  for (bool consolidate : {false, true}) {
    auto rs = ReshardHere(v2, consolidate ? "" : layout, v2, consolidate);
    ASSERT_FALSE(rs.ok());
    EXPECT_NE(rs.status().message().find("rank file version 1 in a version 2 save"),
              std::string::npos)
        << rs.status().ToString();
  }
  for (const auto& [file, bytes] : before)
    EXPECT_TRUE(ranktest::ReadAll(file) == bytes) << file << " changed";
}

TEST(RankFileVersions, UnknownVersionsAreRefusedByName) {
  const RawFixture& f = GetRaw();
  const std::string save = TempDir() + "/rfv_unknown.h5";
  ASSERT_TRUE(ReshardHere(f.source, RowsLayout(2), save).ok());
  // A distributed index of version 3.
  const std::string keep = TempDir() + "/rfv_unknown_keep.h5";
  std::filesystem::copy_file(save, keep, std::filesystem::copy_options::overwrite_existing);
  ASSERT_NO_FATAL_FAILURE(EditIndex(save, [](nlohmann::json& j) { j["version"] = 3; }));
  auto d = DistCatalog::Open(save);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("bad-index"), std::string::npos) << d.status().ToString();
  EXPECT_NE(d.status().message().find("not a version 1 or 2 distributed index"), std::string::npos)
      << d.status().ToString();
  std::filesystem::copy_file(keep, save, std::filesystem::copy_options::overwrite_existing);
  // A rank file whose root attribute says version 3.
  const std::string rank0 = RankFileOf(save, 0);
  EditH5(rank0, [](hid_t file) {
    ASSERT_GE(H5Adelete(file, "seedstore.version"), 0);
    ASSERT_TRUE(WriteI32Attr(file, "seedstore.version", 3).ok());
  });
  auto s = H5Store::Open(rank0);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), Code::kUnsupported) << s.status().ToString();
  EXPECT_EQ(s.status().message(), "unsupported-version: file '" + rank0 +
                                      "': format version 3 (this build reads versions 1 and 2)");
  // The writer refuses to write one.
  auto comm = CreateSelfCollective();
  auto cat = OpenCatalog(f.source);
  ASSERT_TRUE(cat.ok());
  auto l = Layout::Load(RowsLayout(2));
  ASSERT_TRUE(l.ok());
  DistSaveOptions o;
  o.rank_file_version = 3;
  auto r = Reshard(*comm, **cat, *l, TempDir() + "/rfv_v3.h5", o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << r.status().ToString();
  EXPECT_NE(r.status().message().find("rank file version 3"), std::string::npos)
      << r.status().ToString();
}

}  // namespace
}  // namespace seedstore
