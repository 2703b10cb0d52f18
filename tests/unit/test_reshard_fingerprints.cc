// Fingerprints of distributed saves in one process (I4): boxes over flat pieces hash as their
// bytes; rank files hold pieces whose fingerprints sum to the tensor's; a report mismatch is
// exit code 7.
#include "tests/reshard_test_util.h"

namespace seedstore {
namespace {

using namespace reshardtest;  // NOLINT

// FSDP-style flat shards of multi-dimensional tensors (uneven over 3 ranks): the fingerprint
// of any box -- whose rows cross the flat pieces' boundaries -- and of any flat range equals
// that of the bytes read.
TEST(Reshard, FingerprintsOfBoxesOverFlatPiecesAreThoseOfTheirBytes) {
  const std::string spec = Write("rs_fsdp.json", R"({"seedstore": 1, "seed": 3, "tensors": [
   {"name": "w", "shape": [7, 13], "dtype": "bfloat16", "init": {"dist": "normal"}},
   {"name": "c", "shape": [3, 5, 11], "dtype": "float32", "init": {"dist": "uniform"}}]})");
  const std::string layout =
      Write("rs_fsdp_layout.json", R"({"mesh": {"axes": ["data"], "shape": [3]},
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
    ASSERT_TRUE((*d)->pieces(i)[0].region().flat);
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
  EXPECT_NE(rep.Table().find("MISMATCH (output 00000000000000010000000000000003)"),
            std::string::npos)
      << rep.Table();
  EXPECT_NE(rep.Table().find("2 tensors: 1 proven equal to the source, 1 mismatch(es)"),
            std::string::npos);
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
        EXPECT_TRUE(SameRegion(*pr.piece, (*d)->pieces(i)[p].stored()))
            << DescribeRegion(*pr.piece) << " vs " << DescribeRegion((*d)->pieces(i)[p].stored());
        EXPECT_EQ(sk->first->chunk_info(sk->second).size(),
                  sk->first->stored(sk->second).num_chunks);
        auto proven = sk->first->ProveStored(sk->second, CpuOptions{1});
        ASSERT_TRUE(proven.ok()) << proven.status().ToString();
        EXPECT_EQ(*proven, *pr.fingerprint);
        auto pad = (*d)->PaddingFingerprint(i, p, CpuOptions{1});
        ASSERT_TRUE(pad.ok()) << pad.status().ToString();
        if (SameRegion((*d)->pieces(i)[p].stored(), (*d)->pieces(i)[p].region())) {
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
      Proc p = Reshard(f.source, "--layout " + RowsLayout(2) + " -o " + TempDir() +
                                     "/rr_cli_proof.h5 --json" + flag);
      ASSERT_EQ(p.code, 0) << p.out << p.err;
      auto j = nlohmann::json::parse(p.out);
      EXPECT_EQ(j["proof"], *flag ? "decoded" : "stored-chunks");
      EXPECT_TRUE(j["ok"].get<bool>());
    }
  }
}

}  // namespace
}  // namespace seedstore
