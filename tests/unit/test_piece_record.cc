// Piece records (invariant I4): the fingerprints of a tensor's pieces -- boxes, 3-d, flat
// ranges, flat indices beyond 2^32, a scalar's -- taken in the global tensor's frame add up to
// the global tensor's; pieces survive copies and ReplaceWithDense; open checks piece records and
// refuses invalid ones.
#include "tests/unit/chunk_info_test_util.h"

namespace seedstore {
namespace {

using namespace chunkinfotest;  // NOLINT

TEST(PieceRecord, BoxPiecesAddUpToTheGlobalTensor) {
  TempDir dir;
  Fingerprint whole;
  const std::vector<uint8_t> global = GlobalLazy(&whole);
  const Shape gshape = {kRows, kCols};
  const std::string name = "layers.0.w";
  EXPECT_EQ(whole, FingerprintCpu(DType::kBF16, WholeTensor(gshape), global.data(),
                                  FingerprintSeed(name, DType::kBF16, gshape)));
  std::mt19937_64 g(5);
  const std::vector<std::pair<uint64_t, uint64_t>> rows = {{0, 10}, {10, 37}, {37, 37}};
  const std::vector<std::pair<uint64_t, uint64_t>> cols = {{0, 20}, {20, 53}};
  Fingerprint sum;
  int k = 0;
  for (auto [r0, r1] : rows)
    for (auto [c0, c1] : cols) {
      const Region p = BoxRegion(gshape, {r0, c0}, {r1, c1});
      const std::string path = dir / Numbered("p", k++);
      ASSERT_NO_FATAL_FAILURE(
          WritePiece(path, name, DType::kBF16, p, PieceData(global, gshape, p, 2), 64 + 32 * k));
      sum.Add(CheckPiece(path, name, DType::kBF16, p, global, g));
    }
  EXPECT_EQ(sum, whole);
  // A piece that is the whole tensor has the whole tensor's fingerprint; an interior box too.
  for (const Region& p :
       {BoxRegion(gshape, {0, 0}, {kRows, kCols}), BoxRegion(gshape, {3, 7}, {30, 41}),
        BoxRegion(gshape, {36, 52}, {37, 53})}) {
    const std::string path = dir / Numbered("q", k++);
    ASSERT_NO_FATAL_FAILURE(
        WritePiece(path, name, DType::kBF16, p, PieceData(global, gshape, p, 2), 100));
    const Fingerprint f = CheckPiece(path, name, DType::kBF16, p, global, g);
    if (p.Count() == kRows * kCols) {
      EXPECT_EQ(f, whole);
    }
  }
}

TEST(PieceRecord, ThreeDimPiecesOfRandomData) {
  TempDir dir;
  const Shape gshape = {5, 7, 11};
  const std::string name = "x";
  const DType dt = DType::kI64;
  const std::vector<uint8_t> global = RandomBytes(Numel(gshape) * 8, 9);
  const Fingerprint whole =
      FingerprintCpu(dt, WholeTensor(gshape), global.data(), FingerprintSeed(name, dt, gshape));
  std::mt19937_64 g(6);
  Fingerprint sum;
  int k = 0;
  for (auto [a0, a1] : std::vector<std::pair<uint64_t, uint64_t>>{{0, 2}, {2, 5}})
    for (auto [b0, b1] : std::vector<std::pair<uint64_t, uint64_t>>{{0, 0}, {0, 7}})
      for (auto [c0, c1] : std::vector<std::pair<uint64_t, uint64_t>>{{0, 4}, {4, 8}, {8, 11}}) {
        const Region p = BoxRegion(gshape, {a0, b0, c0}, {a1, b1, c1});
        const std::string path = dir / Numbered("p", k++);
        ASSERT_NO_FATAL_FAILURE(WritePiece(path, name, dt, p, PieceData(global, gshape, p, 8), 80));
        sum.Add(CheckPiece(path, name, dt, p, global, g));
      }
  EXPECT_EQ(sum, whole);
}

TEST(PieceRecord, FlatPiecesAddUpToTheGlobalTensor) {
  TempDir dir;
  Fingerprint whole;
  const std::vector<uint8_t> global = GlobalLazy(&whole);
  const Shape gshape = {kRows, kCols};
  const std::string name = "layers.0.w";
  const uint64_t n = kRows * kCols;
  // Uneven, empty, straddling rows (53*3 + 7), one element, and the tail.
  const std::vector<uint64_t> cuts = {0, 0, 3 * kCols + 7, 3 * kCols + 8, 1000, 1000, n - 1, n, n};
  std::mt19937_64 g(7);
  Fingerprint sum;
  for (size_t k = 0; k + 1 < cuts.size(); ++k) {
    const Region p = FlatRegion(gshape, cuts[k], cuts[k + 1]);
    const std::string path = dir / Numbered("f", k);
    ASSERT_NO_FATAL_FAILURE(
        WritePiece(path, name, DType::kBF16, p, PieceData(global, gshape, p, 2), 50));
    sum.Add(CheckPiece(path, name, DType::kBF16, p, global, g));
  }
  EXPECT_EQ(sum, whole);
  // torch.chunk-style flat split over 4 ranks (the last one short).
  Fingerprint sum4;
  for (uint64_t r = 0; r < 4; ++r) {
    uint64_t b, e;
    ChunkRange(n, 4, r, &b, &e);
    const Region p = FlatRegion(gshape, b, e);
    const std::string path = dir / Numbered("c", r);
    ASSERT_NO_FATAL_FAILURE(
        WritePiece(path, name, DType::kBF16, p, PieceData(global, gshape, p, 2), 1u << 20));
    sum4.Add(CheckPiece(path, name, DType::kBF16, p, global, g));
  }
  EXPECT_EQ(sum4, whole);
}

// Global flat indices >= 2^32, without the global tensor ever existing: [70000, 70000] f32 is
// 4.9e9 elements.
TEST(PieceRecord, FlatIndicesBeyond32Bits) {
  TempDir dir;
  const Shape gshape = {70000, 70000};
  const std::string name = "huge";
  const DType dt = DType::kF32;
  const uint64_t seed = FingerprintSeed(name, dt, gshape);
  const uint64_t b = (1ull << 32) - 5, e = (1ull << 32) + 7;
  const std::vector<uint8_t> local = RandomBytes(12 * 4, 31);
  Fingerprint manual;
  for (uint64_t k = 0; k < 12; ++k) manual.Add(ElementFp(b + k, local.data() + 4 * k, 4, seed));
  {
    const Region p = FlatRegion(gshape, b, e);
    const std::string path = dir / "flat.h5";
    ASSERT_NO_FATAL_FAILURE(WritePiece(path, name, dt, p, local, 16));
    auto st = OpenOk(path);
    ASSERT_TRUE(st);
    const TensorRecord& t = st->tensors()[0];
    ASSERT_TRUE(t.piece.has_value());
    EXPECT_TRUE(SameRegion(*t.piece, p));
    EXPECT_EQ(t.shape, Shape{12});
    EXPECT_EQ(*t.fingerprint, FingerprintCpu(dt, p, local.data(), seed));
    EXPECT_EQ(*t.fingerprint, manual);
    const Shape chunk = st->stored(0).chunk;
    ASSERT_EQ(chunk.size(), 1u);
    EXPECT_GE(st->stored(0).num_chunks, 3u);  // several chunks of at most 16 bytes
    const Frame fr = PieceFrame(name, dt, p);
    st.reset();
    const auto raw = RawChunks(path, name, {12}, chunk);
    st = OpenOk(path);
    ASSERT_TRUE(st);
    CheckTable(*st, 0, local, fr, raw);
    auto rep = st->Verify();
    EXPECT_TRUE(rep.problems.empty()) << rep.problems[0].status.ToString();
    EXPECT_EQ(rep.fingerprints[0], manual);
    // Elements 3..8 are global [2^32 - 2, 2^32 + 4).
    Fingerprint mid;
    for (uint64_t k = 3; k < 9; ++k) mid.Add(ElementFp(b + k, local.data() + 4 * k, 4, seed));
    auto f = st->FingerprintRegion(0, BoxRegion({12}, {3}, {9}));
    ASSERT_TRUE(f.ok());
    EXPECT_EQ(*f, mid);
    auto ff = st->FingerprintRegion(0, FlatRegion({12}, 3, 9));
    ASSERT_TRUE(ff.ok());
    EXPECT_EQ(*ff, mid);
  }
  {
    // A box piece whose rows cross flat index 2^32: row 61356 starts at 4294920000.
    const Region p = BoxRegion(gshape, {61356, 47290}, {61358, 47300});
    const std::vector<uint8_t> box = RandomBytes(20 * 4, 32);
    Fingerprint want;
    for (uint64_t q = 0; q < 20; ++q)
      want.Add(ElementFp((61356 + q / 10) * 70000 + 47290 + q % 10, box.data() + 4 * q, 4, seed));
    const std::string path = dir / "box.h5";
    ASSERT_NO_FATAL_FAILURE(WritePiece(path, name, dt, p, box, 24));
    auto st = OpenOk(path);
    ASSERT_TRUE(st);
    const TensorRecord& t = st->tensors()[0];
    ASSERT_TRUE(t.piece.has_value());
    EXPECT_TRUE(SameRegion(*t.piece, p));
    EXPECT_EQ(*t.fingerprint, want);
    EXPECT_EQ(*t.fingerprint, FingerprintCpu(dt, p, box.data(), seed));
    auto rep = st->Verify();
    EXPECT_TRUE(rep.problems.empty()) << rep.problems[0].status.ToString();
    auto pr = st->ProveStored(0);
    ASSERT_TRUE(pr.ok());
    EXPECT_EQ(*pr, want);
    // Local flat [4, 13): row 0 cols 4..9 (global flat 2^32 - 2 .. 2^32 + 3) and row 1 cols 0..2.
    Fingerprint part;
    for (uint64_t q = 4; q < 13; ++q)
      part.Add(ElementFp((61356 + q / 10) * 70000 + 47290 + q % 10, box.data() + 4 * q, 4, seed));
    auto ff = st->FingerprintRegion(0, FlatRegion({2, 10}, 4, 13));
    ASSERT_TRUE(ff.ok());
    EXPECT_EQ(*ff, part);
  }
}

// A piece store without its chunk-info table (as files from before): ProveStored decodes and
// still fingerprints in the global frame.
TEST(PieceRecord, PieceWithoutTableProvesInGlobalFrame) {
  TempDir dir;
  Fingerprint whole;
  const std::vector<uint8_t> global = GlobalLazy(&whole);
  const Shape gshape = {kRows, kCols};
  const std::string name = "layers.0.w";
  for (const Region& p : {BoxRegion(gshape, {10, 20}, {37, 53}), FlatRegion(gshape, 100, 777)}) {
    const std::string path = dir / (p.flat ? "f.h5" : "b.h5");
    const std::vector<uint8_t> local = PieceData(global, gshape, p, 2);
    ASSERT_NO_FATAL_FAILURE(WritePiece(path, name, DType::kBF16, p, local, 200));
    ASSERT_NO_FATAL_FAILURE(DeleteLink(path, "/chunkinfo"));
    auto st = OpenOk(path);
    ASSERT_TRUE(st);
    EXPECT_TRUE(st->chunk_info(0).empty());
    const Fingerprint want =
        FingerprintCpu(DType::kBF16, p, local.data(), FingerprintSeed(name, DType::kBF16, gshape));
    EXPECT_EQ(*st->tensors()[0].fingerprint, want);
    auto pr = st->ProveStored(0, CpuOptions{2});
    ASSERT_TRUE(pr.ok()) << pr.status().ToString();
    EXPECT_EQ(*pr, want);
    auto rep = st->Verify();
    EXPECT_TRUE(rep.problems.empty()) << rep.problems[0].status.ToString();
    EXPECT_EQ(rep.fingerprints[0], want);
  }
}

// Pieces of a scalar (rank-0) global tensor: the whole one-element box, and flat [0, 1).
TEST(PieceRecord, PiecesOfAScalar) {
  TempDir dir;
  const std::string name = "scale";
  const DType dt = DType::kF32;
  const std::vector<uint8_t> v = RandomBytes(4, 41);
  const Fingerprint want = ElementFp(0, v.data(), 4, FingerprintSeed(name, dt, {}));
  EXPECT_EQ(want, FingerprintCpu(dt, WholeTensor({}), v.data(), FingerprintSeed(name, dt, {})));
  std::mt19937_64 g(1);
  for (const Region& p : {BoxRegion({}, {}, {}), FlatRegion({}, 0, 1), FlatRegion({}, 1, 1)}) {
    const std::string path = dir / Numbered(p.flat ? "f" : "b", p.end);
    ASSERT_NO_FATAL_FAILURE(WritePiece(path, name, dt, p, PieceData(v, {}, p, 4), 64));
    const Fingerprint f = CheckPiece(path, name, dt, p, v, g);
    EXPECT_EQ(f, p.Count() == 1 ? want : Fingerprint{});
  }
}

// CopyFrom keeps a piece record and its table; chunks copied as stored (ReadStoredChunk without
// decoding, the table's fingerprint vouched for by the raw callback) make the same record.
TEST(PieceRecord, CopiesKeepThePieceAndItsTable) {
  TempDir dir;
  Fingerprint whole;
  const std::vector<uint8_t> global = GlobalLazy(&whole);
  const Shape gshape = {kRows, kCols};
  const std::string name = "layers.0.w";
  std::mt19937_64 g(8);
  for (const Region& p : {BoxRegion(gshape, {10, 20}, {37, 53}), FlatRegion(gshape, 150, 1200)}) {
    SCOPED_TRACE(DescribeRegion(p));
    const std::string src_path = dir / Numbered(p.flat ? "sf" : "sb", 0);
    ASSERT_NO_FATAL_FAILURE(
        WritePiece(src_path, name, DType::kBF16, p, PieceData(global, gshape, p, 2), 128));
    auto src = OpenOk(src_path);
    ASSERT_TRUE(src);
    const Fingerprint fp = *src->tensors()[0].fingerprint;
    WriteOptions wo;
    wo.chunk_bytes = 128;
    wo.threads = 2;
    // CopyFrom.
    const std::string copy_path = dir / Numbered(p.flat ? "cf" : "cb", 0);
    {
      auto w = StoreWriter::Create(copy_path, 1234, Generator::kThreefry, wo);
      ASSERT_TRUE(w.ok());
      ASSERT_TRUE((*w)->CopyFrom(*src, 0).ok());
      ASSERT_TRUE((*w)->Commit().ok());
    }
    EXPECT_EQ(ReadTable(copy_path, name), ReadTable(src_path, name));
    EXPECT_EQ(CheckPiece(copy_path, name, DType::kBF16, p, global, g), fp);
    // AddDense with every chunk copied as stored, fingerprints from the table.
    const std::string raw_path = dir / Numbered(p.flat ? "rf" : "rb", 0);
    {
      auto w = StoreWriter::Create(raw_path, 1234, Generator::kThreefry, wo);
      ASSERT_TRUE(w.ok());
      ASSERT_TRUE((*w)->CopiesChunksOf(src->stored(0), name, DType::kBF16));
      DenseChunking ch;
      ch.piece = p;
      ch.chunk = src->stored(0).chunk;
      const H5Store* s = src.get();
      ch.raw = [s](uint64_t j, const Region&, StoredChunk* out) -> Result<bool> {
        Status st = s->ReadStoredChunk(0, j, out, false);
        if (!st.ok()) return st;
        return true;
      };
      Status st = (*w)->AddDense(
          name, LocalShape(p), DType::kBF16,
          [](const Region&, void*) { return Internal("not called"); }, {}, ch);
      ASSERT_TRUE(st.ok()) << st.ToString();
      EXPECT_EQ((*w)->chunk_counts().copied, src->stored(0).num_chunks);
      EXPECT_EQ((*w)->chunk_counts().encoded, 0u);
      ASSERT_TRUE((*w)->Commit().ok());
    }
    EXPECT_EQ(ReadTable(raw_path, name), ReadTable(src_path, name));
    EXPECT_EQ(CheckPiece(raw_path, name, DType::kBF16, p, global, g), fp);
  }
}

// ReplaceWithDense on a rank file of either version: the replaced piece should stay a piece
// (its fingerprint in the global frame), the untouched one is copied as is -- a version 2
// file's cells chunk by chunk (docs/FORMAT.md 11) -- and the file keeps its version.
TEST(PieceRecord, ReplaceWithDenseKeepsPieces) {
  for (bool cells : {false, true}) {
    SCOPED_TRACE(cells ? "version 2" : "version 1");
    TempDir dir;
    Fingerprint whole;
    const std::vector<uint8_t> global = GlobalLazy(&whole);
    const Shape gshape = {kRows, kCols};
    const Region p = BoxRegion(gshape, {10, 20}, {37, 53});
    const Shape ls = LocalShape(p);
    const std::vector<uint8_t> local = PieceData(global, gshape, p, 2);
    const std::string path = dir / "rank.h5";
    WriteOptions wo;
    wo.cells = cells;
    wo.chunk_bytes = 512;  // several chunks per piece
    {
      auto w = StoreWriter::Create(path, 1234, Generator::kThreefry, wo);
      ASSERT_TRUE(w.ok());
      DenseChunking ch;
      ch.piece = p;
      ASSERT_TRUE((*w)->AddDense("a", ls, DType::kBF16, FromWhole(&local, ls, 2), {}, ch).ok());
      ASSERT_TRUE((*w)->AddDense("b", ls, DType::kBF16, FromWhole(&local, ls, 2), {}, ch).ok());
      ASSERT_TRUE((*w)->Commit().ok());
    }
    std::vector<uint8_t> trained = local;
    for (size_t k = 0; k < trained.size(); k += 2) trained[k] ^= 1;
    ASSERT_TRUE(ReplaceWithDense(path, {{"a", FromWhole(&trained, ls, 2)}}, wo).ok());
    auto st = OpenOk(path);
    ASSERT_TRUE(st);
    EXPECT_EQ(st->format_version(), cells ? kCellsFormatVersion : kStoreFormatVersion);
    EXPECT_EQ(st->stored(1).cell_set >= 0, cells);
    EXPECT_GT(st->stored(1).num_chunks, 1u);
    const TensorRecord& b = st->tensors()[1];
    ASSERT_TRUE(b.piece.has_value());
    EXPECT_TRUE(SameRegion(*b.piece, p));
    EXPECT_EQ(*b.fingerprint, FingerprintCpu(DType::kBF16, p, local.data(),
                                             FingerprintSeed("b", DType::kBF16, gshape)));
    std::vector<uint8_t> back(local.size());
    ASSERT_TRUE(st->Read(1, WholeTensor(ls), back.data()).ok());
    EXPECT_TRUE(back == local);
    const TensorRecord& a = st->tensors()[0];
    EXPECT_TRUE(a.piece.has_value()) << "ReplaceWithDense dropped the piece of 'a'";
    EXPECT_EQ(*a.fingerprint, FingerprintCpu(DType::kBF16, p, trained.data(),
                                             FingerprintSeed("a", DType::kBF16, gshape)));
    EXPECT_TRUE(st->Verify().problems.empty());
  }
}

// A reader checks a piece record's region against the record's shape and the global shape
// (docs/FORMAT.md 4.1: bad-index), and the table against the record.
TEST(PieceRecord, OpenChecksPieceRecords) {
  TempDir dir;
  const Shape gshape = {kRows, kCols};
  const std::vector<uint8_t> data = RandomBytes(27 * 33 * 2, 12);
  struct Edit {
    const char* what;
    std::function<void(json&)> edit;
    const char* detail;
  };
  const std::vector<Edit> edits = {
      {"box extents differ from the shape",
       [](json& pc) {
         pc["region"]["stop"] = {37, 52};
       },
       "does not have the tensor's shape"},
      {"box outside the global shape",
       [](json& pc) {
         pc["region"] = {{"start", {11, 20}}, {"stop", {38, 53}}};
       },
       "bad box"},
      {"box of another rank",
       [](json& pc) {
         pc["region"] = {{"start", {10}}, {"stop", {37}}};
       },
       "bad box"},
      {"flat range past the end",
       [](json& pc) {
         pc["region"] = {{"flat", {37 * 53 - 100, 37 * 53 + 791}}};
       },
       "bad flat range"},
      {"flat range for a 2-D record",
       [](json& pc) {
         pc["region"] = {{"flat", {0, 891}}};
       },
       "does not have the tensor's shape"},
      {"no region", [](json& pc) { pc.erase("region"); }, "'piece' needs 'shape' and 'region'"},
      {"global shape not integers",
       [](json& pc) {
         pc["shape"] = {37, "x"};
       },
       "'piece' needs"},
      {"smaller global shape",
       [](json& pc) {
         pc["shape"] = {30, 53};
       },
       "bad box"},
  };
  for (size_t k = 0; k < edits.size(); ++k) {
    SCOPED_TRACE(edits[k].what);
    const std::string path = dir / Numbered("e", k);
    ASSERT_NO_FATAL_FAILURE(
        WritePiece(path, "w", DType::kBF16, BoxRegion(gshape, {10, 20}, {37, 53}), data, 256));
    ASSERT_TRUE(RewriteIndex(path, [&](json& j) { edits[k].edit(j["tensors"][0]["piece"]); }));
    const std::string m = OpenError(path);
    EXPECT_TRUE(StartsWith(m, "bad-index: ")) << m;
    EXPECT_TRUE(Has(m, edits[k].detail)) << m;
  }
  // Moving a piece (same shape, another region) changes its frame: Open cannot tell (the table
  // still adds up to the record), Verify recomputes in the new frame and finds the mismatch.
  const std::string path = dir / "moved.h5";
  ASSERT_NO_FATAL_FAILURE(
      WritePiece(path, "w", DType::kBF16, BoxRegion(gshape, {10, 20}, {37, 53}), data, 256));
  ASSERT_TRUE(RewriteIndex(path, [](json& j) {
    j["tensors"][0]["piece"]["region"] = {{"start", {0, 20}}, {"stop", {27, 53}}};
  }));
  auto st = OpenOk(path);
  ASSERT_TRUE(st);
  auto rep = st->Verify();
  ASSERT_FALSE(rep.problems.empty());
  for (const auto& p : rep.problems)
    EXPECT_TRUE(StartsWith(p.status.message(), "fingerprint-mismatch: ")) << p.status.message();
  // Dropping the piece (a reader before piece records): every chunk fingerprint is wrong.
  const std::string path2 = dir / "unpieced.h5";
  ASSERT_NO_FATAL_FAILURE(
      WritePiece(path2, "w", DType::kBF16, BoxRegion(gshape, {10, 20}, {37, 53}), data, 256));
  ASSERT_TRUE(RewriteIndex(path2, [](json& j) { j["tensors"][0].erase("piece"); }));
  auto st2 = OpenOk(path2);
  ASSERT_TRUE(st2);
  EXPECT_FALSE(st2->tensors()[0].piece.has_value());
  auto rep2 = st2->Verify();
  EXPECT_EQ(rep2.problems.size(), st2->stored(0).num_chunks);
}

TEST(PieceRecord, InvalidPiecesAreRejected) {
  TempDir dir;
  const std::string path = dir / "bad.h5";
  auto w = StoreWriter::Create(path, 0);
  ASSERT_TRUE(w.ok());
  const Shape gshape = {37, 53};
  std::vector<uint8_t> v = RandomBytes(37 * 53 * 4, 3);
  struct Bad {
    const char* what;
    Shape shape;
    Region piece;
  };
  Region reversed = BoxRegion(gshape, {5, 0}, {3, 10});
  const std::vector<Bad> bad = {
      {"extents differ", {10, 21}, BoxRegion(gshape, {0, 0}, {10, 20})},
      {"extents transposed", {20, 10}, BoxRegion(gshape, {0, 0}, {10, 20})},
      {"rank differs", {200}, BoxRegion(gshape, {0, 0}, {10, 20})},
      {"box past the rows", {10, 20}, BoxRegion(gshape, {30, 0}, {40, 20})},
      {"box past the cols", {10, 20}, BoxRegion(gshape, {0, 40}, {10, 60})},
      {"box start > stop", {0, 10}, reversed},
      {"flat past the end", {10}, FlatRegion(gshape, 37 * 53 - 5, 37 * 53 + 5)},
      {"flat begin > end", {0}, FlatRegion(gshape, 10, 5)},
      {"flat length differs", {11}, FlatRegion(gshape, 0, 10)},
      {"flat as 2-D", {2, 5}, FlatRegion(gshape, 0, 10)},
  };
  for (size_t k = 0; k < bad.size(); ++k) {
    SCOPED_TRACE(bad[k].what);
    DenseChunking ch;
    ch.piece = bad[k].piece;
    const std::string name = "bad" + std::to_string(k);
    Status s =
        (*w)->AddDense(name, bad[k].shape, DType::kF32, FromWhole(&v, bad[k].shape, 4), {}, ch);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
    EXPECT_TRUE(Has(s.message(), "tensor '" + name + "'")) << s.message();
    EXPECT_TRUE(Has(s.message(), "piece")) << s.message();
  }
  // The writer is still usable and the rejected tensors left nothing behind.
  DenseChunking ok;
  ok.piece = BoxRegion(gshape, {0, 0}, {10, 20});
  Status s = (*w)->AddDense("good", {10, 20}, DType::kF32, FromWhole(&v, {10, 20}, 4), {}, ok);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_TRUE((*w)->Commit().ok());
  auto st = OpenOk(path);
  ASSERT_TRUE(st);
  ASSERT_EQ(st->tensors().size(), 1u);
  EXPECT_EQ(st->tensors()[0].name, "good");
  EXPECT_TRUE(st->Verify().problems.empty());
}

}  // namespace
}  // namespace seedstore
