// Tampered chunk-info tables and chunks (I5): a changed fingerprint or table shape fails open,
// swapped fingerprints are found by verify, a changed stored hash or a flipped stored byte is
// chunk-corrupt, named.
#include "tests/unit/chunk_info_test_util.h"

namespace seedstore {
namespace {

using namespace chunkinfotest;  // NOLINT

TEST(ChunkInfo, ChangedFingerprintFailsOpen) {
  for (int lane : {1, 2}) {
    for (uint64_t which : {uint64_t{0}, uint64_t{5}}) {
      Tampered t;
      ASSERT_NO_FATAL_FAILURE(t.Write());
      std::vector<uint64_t> rows = ReadTable(t.path, Tampered::kName);
      ASSERT_EQ(rows.size(), 3 * t.num);
      rows[3 * which + lane] += 1;
      ASSERT_NO_FATAL_FAILURE(WriteTable(t.path, Tampered::kName, rows));
      const std::string m = OpenError(t.path);
      EXPECT_TRUE(StartsWith(m, "fingerprint-mismatch: ")) << m;
      EXPECT_TRUE(Has(m, "tensor 'blk/w%'")) << m;
      EXPECT_TRUE(Has(m, "/chunkinfo/blk%2Fw%25")) << m;
      EXPECT_TRUE(Has(m, t.path)) << m;
    }
  }
  // A row changed in place, the table's own hash left: the table is named, not the chunk.
  {
    Tampered t;
    ASSERT_NO_FATAL_FAILURE(t.Write());
    std::vector<uint64_t> rows = ReadTable(t.path, Tampered::kName);
    rows[3 * 5 + 1] += 1;
    ASSERT_NO_FATAL_FAILURE(WriteTable(t.path, Tampered::kName, rows, /*keep_hash=*/false));
    const std::string m = OpenError(t.path);
    EXPECT_TRUE(StartsWith(m, "table-corrupt: ")) << m;
    EXPECT_TRUE(
        Has(m, "tensor 'blk/w%': chunk-info table /chunkinfo/blk%2Fw%25 does not match its hash"))
        << m;
  }
  // The scalar's one-row table too.
  Tampered t;
  ASSERT_NO_FATAL_FAILURE(t.Write());
  std::vector<uint64_t> rows = ReadTable(t.path, "s");
  ASSERT_EQ(rows.size(), 3u);
  rows[1] ^= 1;
  ASSERT_NO_FATAL_FAILURE(WriteTable(t.path, "s", rows));
  const std::string m = OpenError(t.path);
  EXPECT_TRUE(StartsWith(m, "fingerprint-mismatch: ")) << m;
  EXPECT_TRUE(Has(m, "tensor 's'")) << m;
  EXPECT_TRUE(Has(m, "/chunkinfo/s")) << m;
}

TEST(ChunkInfo, SwappedFingerprintsFoundByVerifyOnly) {
  Tampered t;
  ASSERT_NO_FATAL_FAILURE(t.Write());
  std::vector<uint64_t> rows = ReadTable(t.path, Tampered::kName);
  const uint64_t a = 2, b = t.num - 1;  // b: the last (edge) chunk
  ASSERT_NE(rows[3 * a + 1], rows[3 * b + 1]);
  std::swap(rows[3 * a + 1], rows[3 * b + 1]);
  std::swap(rows[3 * a + 2], rows[3 * b + 2]);
  ASSERT_NO_FATAL_FAILURE(WriteTable(t.path, Tampered::kName, rows));
  auto st = OpenOk(t.path);  // the sum is unchanged
  ASSERT_TRUE(st);
  std::vector<uint8_t> got(t.data.size());
  ASSERT_TRUE(st->Read(0, WholeTensor(t.shape), got.data()).ok());
  EXPECT_EQ(got, t.data);
  auto rep = st->Verify(CpuOptions{2});
  ASSERT_EQ(rep.problems.size(), 2u);
  std::vector<int64_t> at;
  for (const auto& p : rep.problems) {
    at.push_back(p.chunk);
    EXPECT_EQ(p.tensor, Tampered::kName);
    EXPECT_EQ(p.status.code(), Code::kCorrupt);
    EXPECT_TRUE(StartsWith(p.status.message(), "fingerprint-mismatch: ")) << p.status.message();
    EXPECT_TRUE(NamesChunk(p.status.message(), p.chunk)) << p.status.message();
    EXPECT_TRUE(Has(p.status.message(), "tensor 'blk/w%'")) << p.status.message();
  }
  std::sort(at.begin(), at.end());
  EXPECT_EQ(at, (std::vector<int64_t>{static_cast<int64_t>(a), static_cast<int64_t>(b)}));
  // The stored bytes are intact and the table adds up: ProveStored vouches for bytes and table
  // only (documented), and ReadStoredChunk hands out the table's fingerprint.
  auto p = st->ProveStored(0);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(*p, *st->tensors()[0].fingerprint);
  StoredChunk c;
  ASSERT_TRUE(st->ReadStoredChunk(0, a, &c, false).ok());
  EXPECT_EQ(*c.fingerprint, (Fingerprint{rows[3 * a + 1], rows[3 * a + 2]}));
}

TEST(ChunkInfo, WrongTableShapeFailsOpen) {
  const std::vector<std::function<std::vector<hsize_t>(uint64_t)>> shapes = {
      [](uint64_t n) {
        return std::vector<hsize_t>{n, 2};
      },
      [](uint64_t n) {
        return std::vector<hsize_t>{n + 1, 3};
      },
      [](uint64_t n) {
        return std::vector<hsize_t>{n - 1, 3};
      },
      [](uint64_t n) { return std::vector<hsize_t>{3 * n}; },
      [](uint64_t n) {
        return std::vector<hsize_t>{n, 3, 1};
      },
      [](uint64_t n) {
        return std::vector<hsize_t>{3, n};
      },
  };
  for (size_t k = 0; k < shapes.size(); ++k) {
    SCOPED_TRACE("shape " + std::to_string(k));
    Tampered t;
    ASSERT_NO_FATAL_FAILURE(t.Write());
    std::vector<uint64_t> rows = ReadTable(t.path, Tampered::kName);
    ASSERT_NO_FATAL_FAILURE(ReplaceTable(t.path, Tampered::kName, shapes[k](t.num), rows));
    const std::string m = OpenError(t.path);
    EXPECT_TRUE(StartsWith(m, "shape-mismatch: ")) << m;
    EXPECT_TRUE(Has(m, "tensor 'blk/w%'")) << m;
    EXPECT_TRUE(Has(m, "/chunkinfo/blk%2Fw%25")) << m;
    std::string dims = "[";
    dims += std::to_string(t.num);
    dims += ", 3]";
    EXPECT_TRUE(Has(m, dims)) << m;
  }
  // The scalar's table must be [1, 3].
  Tampered t;
  ASSERT_NO_FATAL_FAILURE(t.Write());
  ASSERT_NO_FATAL_FAILURE(ReplaceTable(t.path, "s", {2, 3}, ReadTable(t.path, "s")));
  const std::string m = OpenError(t.path);
  EXPECT_TRUE(StartsWith(m, "shape-mismatch: ")) << m;
  EXPECT_TRUE(Has(m, "/chunkinfo/s")) << m;
}

TEST(ChunkInfo, ChangedStoredHashIsChunkCorrupt) {
  for (uint64_t j : {uint64_t{0}, uint64_t{3}}) {
    SCOPED_TRACE("chunk " + std::to_string(j));
    Tampered t;
    ASSERT_NO_FATAL_FAILURE(t.Write());
    if (j == 3) j = t.num - 1;  // the last, edge chunk
    std::vector<uint64_t> rows = ReadTable(t.path, Tampered::kName);
    rows[3 * j] ^= 0x8000000000000000ull;
    ASSERT_NO_FATAL_FAILURE(WriteTable(t.path, Tampered::kName, rows));
    auto st = OpenOk(t.path);  // fingerprints are intact
    ASSERT_TRUE(st);
    // The content is intact: normal reads do not consult the table.
    std::vector<uint8_t> got(t.data.size());
    ASSERT_TRUE(st->Read(0, WholeTensor(t.shape), got.data()).ok());
    EXPECT_EQ(got, t.data);
    auto rep = st->Verify(CpuOptions{2});
    ASSERT_EQ(rep.problems.size(), 1u);
    EXPECT_EQ(rep.problems[0].chunk, static_cast<int64_t>(j));
    EXPECT_EQ(rep.problems[0].tensor, Tampered::kName);
    EXPECT_EQ(rep.problems[0].status.code(), Code::kCorrupt);
    EXPECT_TRUE(StartsWith(rep.problems[0].status.message(), "chunk-corrupt: "))
        << rep.problems[0].status.message();
    EXPECT_TRUE(Has(rep.problems[0].status.message(), "stored bytes hash mismatch"));
    EXPECT_TRUE(NamesChunk(rep.problems[0].status.message(), j))
        << rep.problems[0].status.message();
    for (bool decode : {false, true}) {
      StoredChunk c;
      Status s = st->ReadStoredChunk(0, j, &c, decode);
      EXPECT_EQ(s.code(), Code::kCorrupt) << decode;
      EXPECT_TRUE(StartsWith(s.message(), "chunk-corrupt: ")) << s.message();
      EXPECT_TRUE(Has(s.message(), "stored bytes hash mismatch")) << s.message();
      EXPECT_TRUE(Has(s.message(), "tensor 'blk/w%'")) << s.message();
      EXPECT_TRUE(NamesChunk(s.message(), j)) << s.message();
      // Other chunks are fine.
      EXPECT_TRUE(st->ReadStoredChunk(0, j == 0 ? 1 : 0, &c, decode).ok());
    }
    for (int threads : {1, 2}) {
      auto p = st->ProveStored(0, CpuOptions{threads});
      ASSERT_FALSE(p.ok());
      EXPECT_EQ(p.status().code(), Code::kCorrupt);
      EXPECT_TRUE(StartsWith(p.status().message(), "chunk-corrupt: ")) << p.status().message();
      EXPECT_TRUE(NamesChunk(p.status().message(), j)) << p.status().message();
    }
    auto ps = st->ProveStored(1);  // the scalar is untouched
    ASSERT_TRUE(ps.ok());
    EXPECT_EQ(*ps, *st->tensors()[1].fingerprint);
  }
  // The contiguous scalar's stored hash.
  Tampered t;
  ASSERT_NO_FATAL_FAILURE(t.Write());
  std::vector<uint64_t> rows = ReadTable(t.path, "s");
  rows[0] += 1;
  ASSERT_NO_FATAL_FAILURE(WriteTable(t.path, "s", rows));
  auto st = OpenOk(t.path);
  ASSERT_TRUE(st);
  auto p = st->ProveStored(1);
  ASSERT_FALSE(p.ok());
  EXPECT_TRUE(StartsWith(p.status().message(), "chunk-corrupt: ")) << p.status().message();
  EXPECT_TRUE(NamesChunk(p.status().message(), 0)) << p.status().message();
  auto rep = st->Verify();
  ASSERT_EQ(rep.problems.size(), 1u);
  EXPECT_EQ(rep.problems[0].tensor, "s");
  EXPECT_EQ(rep.problems[0].chunk, 0);
  std::vector<uint8_t> got(8);
  ASSERT_TRUE(st->Read(1, WholeTensor({}), got.data()).ok());
  EXPECT_EQ(got, t.scalar);
}

TEST(ChunkInfo, FlippedStoredByteIsChunkCorrupt) {
  Tampered t;
  ASSERT_NO_FATAL_FAILURE(t.Write());
  const uint64_t j = 5;
  const Region box = ChunkBox(t.shape, t.chunk, j);
  ASSERT_TRUE(FlipChunkByte(t.path, Tampered::kName, {box.start[0], box.start[1]}));
  auto st = OpenOk(t.path);
  ASSERT_TRUE(st);
  for (int threads : {1, 2}) {
    auto p = st->ProveStored(0, CpuOptions{threads});
    ASSERT_FALSE(p.ok());
    EXPECT_EQ(p.status().code(), Code::kCorrupt);
    EXPECT_TRUE(StartsWith(p.status().message(), "chunk-corrupt: ")) << p.status().message();
    EXPECT_TRUE(Has(p.status().message(), "stored bytes hash mismatch")) << p.status().message();
    EXPECT_TRUE(NamesChunk(p.status().message(), j)) << p.status().message();
  }
  for (bool decode : {false, true}) {
    StoredChunk c;
    Status s = st->ReadStoredChunk(0, j, &c, decode);
    EXPECT_EQ(s.code(), Code::kCorrupt);
    EXPECT_TRUE(StartsWith(s.message(), "chunk-corrupt: ")) << s.message();
    EXPECT_TRUE(NamesChunk(s.message(), j)) << s.message();
    EXPECT_TRUE(st->ReadStoredChunk(0, j + 1, &c, decode).ok());
  }
  std::vector<uint8_t> got(t.data.size());
  Status r = st->Read(0, WholeTensor(t.shape), got.data());
  EXPECT_EQ(r.code(), Code::kCorrupt);
  EXPECT_TRUE(NamesChunk(r.message(), j)) << r.message();
  auto rep = st->Verify();
  ASSERT_EQ(rep.problems.size(), 1u);
  EXPECT_EQ(rep.problems[0].chunk, static_cast<int64_t>(j));
  EXPECT_TRUE(StartsWith(rep.problems[0].status.message(), "chunk-corrupt: "));
}

}  // namespace
}  // namespace seedstore
