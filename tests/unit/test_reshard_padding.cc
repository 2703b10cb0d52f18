// Padded pieces of a distributed save, in one process: --max-padding bounds the padding;
// pieces off the source's chunk grid are padded so that every chunk is copied as stored.
#include "tests/reshard_test_util.h"

namespace seedstore {
namespace {

using namespace reshardtest;  // NOLINT

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
    EXPECT_EQ(DescribeRegion(pb[0].stored()), c.stored0);
    EXPECT_EQ(DescribeRegion(pb[1].stored()), c.stored1);
    ExpectRawSameAsSource(out);
  }
  auto bad = run(-0.1, TempDir() + "/rp_max_bad.h5");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  if (!Bin().empty()) {
    Proc p = Reshard(f.source, "--layout " + RowsLayout(2) + " -o " + TempDir() +
                                   "/rp_max_cli.h5 --max-padding 0.5 --json");
    ASSERT_EQ(p.code, 0) << p.out << p.err;
    auto j = nlohmann::json::parse(p.out);
    EXPECT_EQ(j["tensors"][1]["name"], "b");
    EXPECT_EQ(j["tensors"][1]["chunks_copied"], 20);
    EXPECT_EQ(j["tensors"][1]["chunks_encoded"], 0);
    Proc neg = Reshard(f.source, "--layout " + RowsLayout(2) + " -o " + TempDir() +
                                     "/rp_max_cli2.h5 --max-padding -1");
    EXPECT_NE(neg.code, 0);
    EXPECT_NE((neg.out + neg.err).find("max-padding"), std::string::npos) << neg.out << neg.err;
  }
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
      SCOPED_TRACE(t.name + " piece " + DescribeRegion(p.region()) + " stored " +
                   DescribeRegion(p.stored()));
      uint64_t n = 1;
      int dims_padded = 0;
      for (int k = 0; k < p.region().rank; ++k) {
        EXPECT_LE(p.stored().start[k], p.region().start[k]);
        EXPECT_GE(p.stored().stop[k], p.region().stop[k]);
        EXPECT_EQ(p.stored().start[k] % c[k], 0u);
        EXPECT_TRUE(p.stored().stop[k] % c[k] == 0 || p.stored().stop[k] == t.shape[k]);
        EXPECT_LT(p.region().start[k] - p.stored().start[k], c[k]);
        EXPECT_LT(p.stored().stop[k] - p.region().stop[k], c[k]);
        dims_padded += p.stored().start[k] < p.region().start[k];
        n *= (p.stored().stop[k] - p.stored().start[k] + c[k] - 1) / c[k];
      }
      EXPECT_LE(p.stored().Count() - p.region().Count(), p.region().Count() / 4);
      EXPECT_FALSE(SameRegion(p.stored(), p.region()));
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
  EXPECT_EQ(DescribeRegion(pw[3].region()), "[80:160, 70:139]");
  EXPECT_EQ(DescribeRegion(pw[3].stored()), "[75:165, 63:139]");
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
      // By region, whatever the hint (the piece's own index, another piece's, none): by cells,
      // the share above; by stored chunks less the padding (decoded), the region's own
      // fingerprint.
      const Region& r = (*d)->pieces(i)[p].region();
      auto own = (*d)->FingerprintRegion(i, r, CpuOptions{1});
      ASSERT_TRUE(own.ok()) << own.status().ToString();
      const size_t n = (*d)->pieces(i).size();
      for (const bool cells : {true, false})
        for (const size_t hint : {p, (p + 1) % n, n, SIZE_MAX}) {
          auto h = (*d)->ProveStoredPiece(i, r, cells, CpuOptions{1}, hint);
          ASSERT_TRUE(h.ok()) << h.status().ToString();
          ASSERT_TRUE(h->has_value()) << "cells " << cells << " hint " << hint;
          EXPECT_EQ(**h, cells ? *c : *own) << "cells " << cells << " hint " << hint;
        }
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
      ASSERT_EQ(*fp, FingerprintOf(t, box, got.data()))
          << t.name << " " << DescribeRegion(box);  // padding never counted
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
  ASSERT_NO_FATAL_FAILURE(EditIndex(
      t1, [](nlohmann::json& j) { j["tensors"][0]["pieces"][3]["stored"]["start"][0] = 81; }));
  auto bad = DistCatalog::Open(t1);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kCorrupt);
  EXPECT_NE(bad.status().message().find("bad-index: distributed save '" + t1 + "'"),
            std::string::npos)
      << bad.status().ToString();
  EXPECT_NE(bad.status().message().find(
                "stored box [81:165, 63:139] does not hold the piece [80:160, 70:139]"),
            std::string::npos)
      << bad.status().ToString();
  // A shape no tensor can have (17 dims; more elements than 2^64; a dim of 2^63), checksum
  // recomputed.
  for (const auto& [shape, needle] : std::vector<std::pair<nlohmann::json, std::string>>{
           {std::vector<uint64_t>(17, 1), "rank 17 exceeds 16"},
           {{uint64_t{1} << 62, uint64_t{1} << 62, 4}, "shape overflows"},
           {{uint64_t{1} << 63, 0},
            "dim 0 is 9223372036854775808, more than the limit 2^63 - 1"}}) {
    ASSERT_EQ(Shell("cp " + d6 + " " + t1).code, 0);
    ASSERT_NO_FATAL_FAILURE(
        EditIndex(t1, [&, s = shape](nlohmann::json& j) { j["tensors"][0]["shape"] = s; }));
    auto odd = DistCatalog::Open(t1);
    ASSERT_FALSE(odd.ok());
    EXPECT_NE(odd.status().message().find("bad-index: distributed save '" + t1 + "'"),
              std::string::npos)
        << odd.status().ToString();
    EXPECT_NE(odd.status().message().find(needle), std::string::npos) << odd.status().ToString();
  }
  const std::string kBadCells =
      "tensor 'w' piece 0: 'cells' needs a version 2 index and 'set', 'first' and a 'chunk' shape "
      "that fits the piece";
  // Pieces that still add up to the tensor but are not its layout's (two ranks' regions
  // swapped: a reader would take rank 1's bytes for rank 0's), and a tensor listed twice.
  for (const auto& [edit, needle] :
       std::vector<std::pair<std::function<void(nlohmann::json&)>, std::string>>{
           {[](nlohmann::json& j) {
              std::swap(j["tensors"][0]["pieces"][0]["region"],
                        j["tensors"][0]["pieces"][1]["region"]);
              j["tensors"][0]["pieces"][0].erase("stored");
              j["tensors"][0]["pieces"][1].erase("stored");
            },
            "tensor 'w' piece 0 (rank 0, [0:80, 70:139]) is not its layout's (rank 0, [0:80, "
            "0:70])"},
           {[](nlohmann::json& j) { j["tensors"].push_back(j["tensors"][0]); },
            "tensor 'w' is listed twice"},
           // Checked once the whole index is parsed (its world and version may follow the
           // tensors): a rank beyond the world, cells in an index of version 1.
           {[](nlohmann::json& j) { j["tensors"][0]["pieces"][2]["rank"] = 6; },
            "piece rank out of range"},
           {[](nlohmann::json& j) { j["version"] = 1; },
            "tensor 'w' piece 0: 'cells' needs a version 2 index"},
           // A piece's fingerprint and cells, malformed field by field.
           {[](nlohmann::json& j) { j["tensors"][0]["pieces"][1]["fingerprint"] = 7; },
            "tensor 'w' piece 1: fingerprint: not a string"},
           {[](nlohmann::json& j) {
              j["tensors"][0]["pieces"][1]["fingerprint"] = std::string(32, 'G');
            },
            "tensor 'w' piece 1: fingerprint: fingerprint 'GGGGGGGGGGGGGGGGGGGGGGGGGGGGGGGG': "
            "not lowercase hex"},
           {[](nlohmann::json& j) { j["tensors"][0]["pieces"][0]["cells"] = 3; }, kBadCells},
           {[](nlohmann::json& j) { j["tensors"][0]["pieces"][0]["cells"]["set"] = "0"; },
            kBadCells},
           {[](nlohmann::json& j) {
              j["tensors"][0]["pieces"][0]["cells"]["set"] = (uint64_t{1} << 30) + 1;
            },
            kBadCells},
           {[](nlohmann::json& j) { j["tensors"][0]["pieces"][0]["cells"].erase("first"); },
            kBadCells},
           {[](nlohmann::json& j) { j["tensors"][0]["pieces"][0]["cells"]["chunk"] = 4; },
            kBadCells},
           {[](nlohmann::json& j) { j["tensors"][0]["pieces"][0]["cells"]["chunk"][1] = 0; },
            kBadCells},
           {[](nlohmann::json& j) {
              j["tensors"][0]["pieces"][0]["cells"]["chunk"][0] = 1000;  // beyond the piece
            },
            kBadCells},
           {[](nlohmann::json& j) { j["tensors"][0]["pieces"][0]["cells"]["chunk"].push_back(1); },
            kBadCells}}) {
    ASSERT_EQ(Shell("cp " + d6 + " " + t1).code, 0);
    ASSERT_NO_FATAL_FAILURE(EditIndex(t1, edit));
    auto odd = DistCatalog::Open(t1);
    ASSERT_FALSE(odd.ok());
    EXPECT_NE(odd.status().message().find("bad-index: distributed save '" + t1 + "'"),
              std::string::npos)
        << odd.status().ToString();
    EXPECT_NE(odd.status().message().find(needle), std::string::npos) << odd.status().ToString();
  }
  ASSERT_EQ(Shell("cp " + d6 + " " + t1).code, 0);
  ASSERT_NO_FATAL_FAILURE(EditIndex(
      t1, [](nlohmann::json& j) { j["tensors"][0]["pieces"][3]["stored"]["start"][0] = 60; }));
  auto other = DistCatalog::Open(t1);
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  std::vector<unsigned char> buf(2 * 239 * 139);
  Status st = (*other)->Read(0, WholeTensor({239, 139}), buf.data(), CpuOptions{1});
  EXPECT_EQ(st.code(), Code::kCorrupt) << st.ToString();
  EXPECT_NE(st.message().find("rank-file-corrupt"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("piece [60:165, 63:139] is missing or has another shape"),
            std::string::npos)
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
      v.insert(v.end(), all.begin() + sb.RunBase(run) * 2,
               all.begin() + (sb.RunBase(run) + sb.RunLength()) * 2);
    v[0] ^= 1;  // element [75, 63]: padding (rank 0 owns it)
    WriteOptions wo;
    wo.chunk_bytes = 512;
    wo.cells = true;  // a version 2 rank file, as the save's others
    auto w = StoreWriter::Create(rank3, f.spec.seed, f.spec.generator, wo);
    ASSERT_TRUE(w.ok());
    DenseChunking ch;
    ch.chunk = {15, 9};
    ch.piece = sb;
    const std::vector<uint64_t> ext = LocalShape(sb);
    ASSERT_TRUE((*w)->AddDense(
                        "w", ext, DType::kBF16,
                        [&](const Region& b, void* out) {
                          auto* o = static_cast<unsigned char*>(out);
                          for (uint64_t run = 0; run < b.Count() / b.RunLength();
                               ++run, o += b.RunLength() * 2)
                            std::memcpy(o, v.data() + b.RunBase(run) * 2, b.RunLength() * 2);
                          return Status::Ok();
                        },
                        {}, ch)
                    .ok());
    ASSERT_TRUE((*w)->Commit().ok());
    // ... and an index that records the new piece's fingerprint (else the rank file is refused
    // at open as not this save's, before its padding is looked at).
    const std::string master = ranktest::ReadAll(d6);
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
  EXPECT_NE(vr.problems[0].status.message().find("chunk-corrupt: file '" + rank3 +
                                                 "' tensor 'w' chunk 0"),
            std::string::npos)
      << vr.problems[0].status.ToString();
  std::vector<unsigned char> one(2);
  st = (*dc)->Read(0, BoxRegion({239, 139}, {85, 70}, {86, 71}), one.data(), CpuOptions{1});
  EXPECT_NE(st.message().find("rank-file-corrupt: distributed save '" + d6 + "' rank 3 file '" +
                              rank3 + "': chunk-corrupt"),
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

}  // namespace
}  // namespace seedstore
