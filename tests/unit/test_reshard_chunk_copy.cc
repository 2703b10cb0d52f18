// Resharding in one process by copying stored chunks: aligned chunks copied as stored,
// misaligned ones re-encoded, the bytes identical; stored bytes checked against the chunk info;
// a corrupt source chunk named with nothing replaced; a save through a symbolic link; a rank
// file alone refused; the index records each tensor's storage (inspect opens no rank file).
#include "tests/reshard_test_util.h"

namespace seedstore {
namespace {

using namespace reshardtest;  // NOLINT

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
    EXPECT_EQ(DescribeRegion(pb[0].region()), "[0:19, 0:23]");
    EXPECT_EQ(DescribeRegion(pb[0].stored()), "[0:20, 0:23]");
    EXPECT_EQ(DescribeRegion(pb[1].stored()), "[19:37, 0:23]");
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
                                    {"u", P{0, 3}}, {"e", P{0, 0}},  {"s", P{0, 1}}};
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
                                    {"u", P{3, 0}}, {"e", P{0, 1}},  {"s", P{0, 1}}};
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
    Proc p =
        Reshard(f.source, "--layout " + RowsLayout(2) + " -o " + TempDir() + "/rr_cli2.h5 --json");
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
    EXPECT_EQ(rs.status().message().rfind(
                  "chunk-corrupt: file '" + src + "' tensor 'b' chunk 2 at offset [0, 12]: ", 0),
              0u)
        << rs.status().ToString();
    EXPECT_EQ(Shell("md5sum < " + cout).out, before);
    auto st = H5Store::Open(cout);
    ASSERT_TRUE(st.ok());
    EXPECT_TRUE((*st)->Verify().problems.empty());
  }
  auto r = ReshardHere(src, RowsLayout(4), out);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kCorrupt);
  EXPECT_EQ(r.status().message().rfind(
                "chunk-corrupt: file '" + src + "' tensor 'b' chunk 2 at offset [0, 12]: ", 0),
            0u)
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
  EXPECT_EQ(rc.status().message().rfind("rank-file-corrupt: distributed save '" + dsrc +
                                            "' rank 1 file '" + rank1 + "': chunk-corrupt: file '" +
                                            rank1 + "' tensor 'a' chunk 3 at offset [10, 12]: ",
                                        0),
            0u)
      << rc.status().ToString();
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
  EXPECT_EQ(r.status().message().rfind(
                "chunk-corrupt: file '" + src +
                    "' tensor 'b' chunk 2 at offset [0, 12]: stored bytes hash mismatch",
                0),
            0u)
      << r.status().ToString();
  // The same row damaged in place (the table's hash not updated): the table is named (the
  // tensor's damage, found at open, fails its reads).
  const std::string dmg = TempDir() + "/rr_info_damaged.h5";
  ASSERT_EQ(Shell("cp " + f.source + " " + dmg).code, 0);
  EditChunkInfo(
      dmg, "b", 2, [](uint64_t* row) { row[0] ^= 1; }, /*keep_hash=*/false);
  auto rd = ReshardHere(dmg, RowsLayout(2), TempDir() + "/rr_info_damaged_out.h5");
  ASSERT_FALSE(rd.ok());
  EXPECT_EQ(rd.status().code(), Code::kCorrupt);
  EXPECT_NE(rd.status().message().find(
                "table-corrupt: file '" + dmg +
                "' tensor 'b': chunk-info table /chunkinfo/b does not match its hash"),
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
  EXPECT_NE(r.status().message().find("reshard the save's master"), std::string::npos)
      << r.status().ToString();
}

// The index records each dense tensor's chunks and bytes on disk over its pieces, so
// `inspect` of a save opens none of its rank files; a save without them (written before) is
// counted from the rank files, one open at a time; verify checks the recorded numbers.
// Reads and verify leave no dataset of a rank file open beyond H5Store::kOpenDatasets.
TEST(ReshardRaw, TheIndexRecordsEachTensorsStorageAndInspectOpensNoRankFile) {
  const RawFixture& f = GetRaw();
  const std::string d3 = TempDir() + "/rr_storage3.h5";
  ASSERT_TRUE(ReshardHere(f.source, RowsLayout(3), d3).ok());
  std::vector<DistCatalog::StoredTotals> recorded;
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
      DistCatalog::StoredTotals sum;
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
    EXPECT_NE(rep.problems[0].status.message().find("bytes stored; its rank files hold"),
              std::string::npos)
        << rep.problems[0].status.ToString();
  }
  ASSERT_NO_FATAL_FAILURE(EditIndex(d3, [](nlohmann::json& j) {
    for (auto& t : j["tensors"])
      if (t["name"] == "a") t["chunks"] = -3;
  }));
  auto bad = DistCatalog::Open(d3);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(
      bad.status().message().find("'chunks' and 'stored_bytes' must both be unsigned integers"),
      std::string::npos)
      << bad.status().ToString();
}

}  // namespace
}  // namespace seedstore
