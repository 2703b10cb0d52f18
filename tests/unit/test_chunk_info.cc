// Chunk-info tables (/chunkinfo/<escaped>: XXH3-64 of each chunk's stored bytes and the chunk's
// fingerprint) match the data, chunk by chunk, byte-exact; lazy tensors and indexes out of range
// are refused; files without tables still work.
#include "tests/unit/chunk_info_test_util.h"

namespace seedstore {
namespace {

using namespace chunkinfotest;  // NOLINT

TEST(ChunkInfo, TableMatchesEveryChunk) {
  TempDir dir;
  const DType dtypes[] = {DType::kBF16, DType::kF32, DType::kF64, DType::kU8, DType::kI64};
  const std::vector<Shape> shapes = {{37, 53}, {},     {3, 0, 2},  {1},
                                     {0},      {1000}, {5, 7, 11}, {2, 1, 3}};
  struct Config {
    uint64_t chunk_bytes;
    bool shuffle;
    int level;
  };
  std::mt19937_64 g(11);
  for (const Config cfg :
       {Config{96, true, 1}, Config{1000, false, 5}, Config{1u << 20, true, 3}}) {
    const std::string path = dir / Numbered("t", cfg.chunk_bytes);
    WriteOptions wo;
    wo.chunk_bytes = cfg.chunk_bytes;
    wo.shuffle = cfg.shuffle;
    wo.zstd_level = cfg.level;
    wo.threads = 2;
    std::vector<Written> ws;
    {
      auto w = StoreWriter::Create(path, 5, Generator::kThreefry, wo);
      ASSERT_TRUE(w.ok()) << w.status().ToString();
      ws.reserve(64);
      for (DType dt : dtypes)
        for (size_t k = 0; k < shapes.size(); ++k) {
          // Names that need escaping: the table is /chunkinfo/<escaped>.
          ws.push_back({std::string(DTypeName(dt)) + "/t%" + std::to_string(k), shapes[k], dt,
                        RandomBytes(Numel(shapes[k]) * DTypeSize(dt), g())});
          const Written& x = ws.back();
          ASSERT_TRUE(
              (*w)->AddDense(x.name, x.shape, dt, FromWhole(&x.data, x.shape, DTypeSize(dt))).ok());
        }
      ASSERT_TRUE((*w)->Commit().ok());
    }
    // Stored bytes as HDF5 reads them, before the store is opened.
    std::vector<std::vector<std::vector<uint8_t>>> raw(ws.size());
    std::vector<Shape> chunks(ws.size());
    {
      auto st = OpenOk(path);
      ASSERT_TRUE(st);
      for (size_t i = 0; i < ws.size(); ++i) chunks[i] = st->stored(i).chunk;
    }
    for (size_t i = 0; i < ws.size(); ++i)
      if (!chunks[i].empty()) raw[i] = RawChunks(path, ws[i].name, ws[i].shape, chunks[i]);
    auto st = OpenOk(path);
    ASSERT_TRUE(st);
    ASSERT_EQ(st->tensors().size(), ws.size());
    uint64_t many = 0;
    for (size_t i = 0; i < ws.size(); ++i) {
      const Written& x = ws[i];
      ASSERT_EQ(st->tensors()[i].name, x.name);
      EXPECT_FALSE(st->tensors()[i].piece.has_value());
      // Scalars and empty tensors are contiguous, everything else chunked.
      EXPECT_EQ(st->stored(i).chunk.empty(), x.shape.empty() || Numel(x.shape) == 0) << x.name;
      many = std::max(many, st->stored(i).num_chunks);
      CheckTable(*st, i, x.data, PlainFrame(x.name, x.dtype, x.shape), raw[i]);
      if (Numel(x.shape) == 0) {
        EXPECT_EQ(st->chunk_info(i)[0].fingerprint, Fingerprint{});
      }
    }
    if (cfg.chunk_bytes == 96) {
      EXPECT_GE(many, 100u);  // many chunks, many edge chunks
    }
    auto rep = st->Verify(CpuOptions{2});
    EXPECT_TRUE(rep.problems.empty()) << rep.problems[0].status.ToString();
    ASSERT_EQ(rep.fingerprints.size(), ws.size());
    for (size_t i = 0; i < ws.size(); ++i)
      EXPECT_EQ(rep.fingerprints[i], *st->tensors()[i].fingerprint);
  }
}

// ProveStored / ReadStoredChunk on things that are not stored chunks.
TEST(ChunkInfo, RejectsLazyAndOutOfRange) {
  TempDir dir;
  const std::string path = dir / "l.h5";
  {
    auto w = StoreWriter::Create(path, 3);
    TensorSpec t;
    t.name = "lazy";
    t.shape = {4, 4};
    t.init.dist = Dist::kNormal;
    ASSERT_TRUE((*w)->AddLazy(t).ok());
    std::vector<uint8_t> v = RandomBytes(16, 1);
    ASSERT_TRUE((*w)->AddDense("d", {4}, DType::kF32, FromWhole(&v, {4}, 4)).ok());
    ASSERT_TRUE((*w)->Commit().ok());
  }
  auto st = OpenOk(path);
  ASSERT_TRUE(st);
  EXPECT_TRUE(st->chunk_info(0).empty());
  EXPECT_EQ(st->chunk_info(1).size(), 1u);
  StoredChunk c;
  EXPECT_EQ(st->ReadStoredChunk(0, 0, &c).code(), Code::kInvalidArgument);
  EXPECT_EQ(st->ReadStoredChunk(1, 1, &c, false).code(), Code::kInvalidArgument);
  EXPECT_EQ(st->ReadStoredChunk(7, 0, &c).code(), Code::kInvalidArgument);
  EXPECT_EQ(st->ProveStored(0).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(st->ProveStored(7).status().code(), Code::kInvalidArgument);
}

TEST(ChunkInfo, FilesWithoutTablesStillWork) {
  for (bool whole_group : {true, false}) {
    SCOPED_TRACE(whole_group ? "no /chunkinfo" : "no /chunkinfo/blk%2Fw%25");
    Tampered t;
    ASSERT_NO_FATAL_FAILURE(t.Write());
    const std::vector<std::vector<uint8_t>> raw =
        RawChunks(t.path, Tampered::kName, t.shape, t.chunk);
    ASSERT_NO_FATAL_FAILURE(DeleteLink(
        t.path, whole_group ? "/chunkinfo" : "/chunkinfo/" + EscapeH5Name(Tampered::kName)));
    auto st = OpenOk(t.path);
    ASSERT_TRUE(st);
    EXPECT_TRUE(st->chunk_info(0).empty());
    EXPECT_EQ(st->chunk_info(1).empty(), whole_group);
    auto rep = st->Verify(CpuOptions{2});
    EXPECT_TRUE(rep.problems.empty()) << rep.problems[0].status.ToString();
    EXPECT_EQ(rep.fingerprints[0], *st->tensors()[0].fingerprint);
    EXPECT_EQ(rep.fingerprints[1], *st->tensors()[1].fingerprint);
    for (size_t i : {0, 1})
      for (int threads : {1, 2}) {
        auto p = st->ProveStored(i, CpuOptions{threads});  // decodes when there is no table
        ASSERT_TRUE(p.ok()) << p.status().ToString();
        EXPECT_EQ(*p, *st->tensors()[i].fingerprint);
      }
    const Frame fr = PlainFrame(Tampered::kName, DType::kF32, t.shape);
    for (uint64_t j = 0; j < t.num; ++j) {
      const Region box = ChunkBox(t.shape, t.chunk, j);
      for (bool decode : {false, true}) {
        StoredChunk c;
        c.fingerprint = Fingerprint{1, 2};  // must be reset
        ASSERT_TRUE(st->ReadStoredChunk(0, j, &c, decode).ok());
        EXPECT_EQ(c.bytes, raw[j]);
        EXPECT_EQ(c.stored_hash, XXH3_64bits(raw[j].data(), raw[j].size()));
        EXPECT_EQ(c.data, Extract(t.data, t.shape, box, 4)) << j;
        EXPECT_FALSE(c.fingerprint.has_value());
        EXPECT_EQ(FingerprintCpu(DType::kF32, box, c.data.data(), fr.seed),
                  ExpectedFp(fr, box, t.data));
      }
    }
    // Without a table a flipped stored byte is still caught, by the checksum on decoding.
    st.reset();
    ASSERT_TRUE(FlipChunkByte(t.path, Tampered::kName, {0, 0}));
    st = OpenOk(t.path);
    ASSERT_TRUE(st);
    auto p = st->ProveStored(0);
    ASSERT_FALSE(p.ok());
    EXPECT_TRUE(StartsWith(p.status().message(), "chunk-corrupt: ")) << p.status().message();
    EXPECT_TRUE(NamesChunk(p.status().message(), 0)) << p.status().message();
    StoredChunk c;
    Status s = st->ReadStoredChunk(0, 0, &c, false);
    EXPECT_TRUE(StartsWith(s.message(), "chunk-corrupt: ")) << s.message();
  }
}

}  // namespace
}  // namespace seedstore
