// Chunk-info tables (/chunkinfo/<escaped>: XXH3-64 of each chunk's stored bytes and the chunk's
// fingerprint) and piece records (invariant I4: the pieces' fingerprints, taken in the global
// tensor's frame, add up to the global tensor's). Expected fingerprints are recomputed here
// element by element with libxxhash (docs/FORMAT.md), independently of the library's
// fingerprinter, region splitting and chunk grid; stored bytes are read back with the HDF5 C
// API; tables are tampered with the HDF5 C API.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/h5store.h"
#include "tests/store_test_util.h"

#include <xxhash.h>

namespace seedstore {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Shape = std::vector<uint64_t>;

using testutil::Numel;
using testutil::RandomBytes;
using testutil::FlipChunkByte;
using testutil::RewriteIndex;
using File = testutil::H5File;

// A temporary folder for this file's stores.
struct TempDir : testutil::TempDir {
  TempDir() : testutil::TempDir("seedstore-chunkinfo") {}
};

uint64_t BoxElementFlat(const Shape& shape, const Region& box, uint64_t q) {
  const int rank = static_cast<int>(shape.size());
  std::vector<uint64_t> idx(rank);
  for (int d = rank - 1; d >= 0; --d) {
    const uint64_t ext = box.stop[d] - box.start[d];
    idx[d] = box.start[d] + q % ext;
    q /= ext;
  }
  uint64_t flat = 0;
  for (int d = 0; d < rank; ++d) flat = flat * shape[d] + idx[d];
  return flat;
}

// The elements of `box` (row-major) of a whole row-major tensor.
std::vector<uint8_t> Extract(const std::vector<uint8_t>& whole, const Shape& shape, const Region& box,
                             size_t es) {
  std::vector<uint8_t> out(box.Count() * es);
  for (uint64_t q = 0; q < box.Count(); ++q)
    std::memcpy(out.data() + q * es, whole.data() + BoxElementFlat(shape, box, q) * es, es);
  return out;
}

BoxSource FromWhole(const std::vector<uint8_t>* whole, Shape shape, size_t es) {
  return [whole, shape, es](const Region& box, void* out) {
    const std::vector<uint8_t> v = Extract(*whole, shape, box, es);
    if (!v.empty()) std::memcpy(out, v.data(), v.size());
    return Status::Ok();
  };
}

// Per element: XXH3_128bits_withSeed(LE64(index) || LE64(value bits), seed), lanes summed.
Fingerprint ElementFp(uint64_t index, const uint8_t* value, size_t es, uint64_t seed) {
  uint64_t v = 0;
  for (size_t b = 0; b < es; ++b) v |= static_cast<uint64_t>(value[b]) << (8 * b);
  unsigned char rec[16];
  for (int b = 0; b < 8; ++b) {
    rec[b] = static_cast<unsigned char>(index >> (8 * b));
    rec[8 + b] = static_cast<unsigned char>(v >> (8 * b));
  }
  const XXH128_hash_t h = XXH3_128bits_withSeed(rec, 16, seed);
  return Fingerprint{h.low64, h.high64};
}

// How a tensor's own elements sit in its fingerprint frame: seed, and global flat index of
// each local row-major flat index.
struct Frame {
  Shape local;          // the tensor's own shape
  size_t es = 1;
  uint64_t seed = 0;
  std::function<uint64_t(uint64_t)> global;  // local flat -> frame flat
};

Frame PlainFrame(const std::string& name, DType dt, const Shape& shape) {
  return Frame{shape, static_cast<size_t>(DTypeSize(dt)), FingerprintSeed(name, dt, shape),
               [](uint64_t k) { return k; }};
}

// The frame of a piece `p` (global indices) of a global tensor called `name`.
Frame PieceFrame(const std::string& name, DType dt, const Region& p) {
  const Shape gshape(p.shape, p.shape + p.rank);
  Frame f;
  f.es = DTypeSize(dt);
  f.seed = FingerprintSeed(name, dt, gshape);
  if (p.flat) {
    f.local = {p.end - p.begin};
    const uint64_t b = p.begin;
    f.global = [b](uint64_t k) { return b + k; };
  } else {
    for (int d = 0; d < p.rank; ++d) f.local.push_back(p.stop[d] - p.start[d]);
    f.global = [gshape, p](uint64_t k) { return BoxElementFlat(gshape, p, k); };
  }
  return f;
}

// Expected fingerprint of local region `r` (box or flat range of the tensor's own indices)
// whose elements are in `local_whole` (the whole local tensor, row-major).
Fingerprint ExpectedFp(const Frame& f, const Region& r, const std::vector<uint8_t>& local_whole) {
  Fingerprint sum;
  auto add = [&](uint64_t k) { sum.Add(ElementFp(f.global(k), local_whole.data() + k * f.es, f.es, f.seed)); };
  if (r.flat) {
    for (uint64_t k = r.begin; k < r.end; ++k) add(k);
  } else {
    for (uint64_t q = 0; q < r.Count(); ++q) add(BoxElementFlat(f.local, r, q));
  }
  return sum;
}

// Box of chunk j (row-major chunk grid) clipped to the tensor.
Region ChunkBox(const Shape& shape, const Shape& chunk, uint64_t j) {
  Region r = WholeTensor(shape);
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    const uint64_t n = (shape[d] + chunk[d] - 1) / chunk[d];
    const uint64_t c = j % n;
    j /= n;
    r.start[d] = c * chunk[d];
    r.stop[d] = std::min(shape[d], r.start[d] + chunk[d]);
  }
  return r;
}

// The unfiltered full-size bytes of chunk `box` (zeros outside the tensor).
std::vector<uint8_t> PaddedChunk(const std::vector<uint8_t>& whole, const Shape& shape, const Shape& chunk,
                                 const Region& box, size_t es) {
  std::vector<uint8_t> out(Numel(chunk) * es, 0);
  const Region full = [&] {
    Region r = box;
    for (size_t d = 0; d < shape.size(); ++d) r.stop[d] = r.start[d] + chunk[d];
    return r;
  }();
  for (uint64_t q = 0; q < full.Count(); ++q) {
    bool in = true;
    uint64_t rem = q, flat = 0;
    std::vector<uint64_t> idx(shape.size());
    for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
      idx[d] = full.start[d] + rem % chunk[d];
      rem /= chunk[d];
      in = in && idx[d] < shape[d];
    }
    if (!in) continue;
    for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + idx[d];
    std::memcpy(out.data() + q * es, whole.data() + flat * es, es);
  }
  return out;
}

// Each chunk's stored bytes, read with the HDF5 C API (H5Dread_chunk), chunk-grid order.
std::vector<std::vector<uint8_t>> RawChunks(const std::string& path, const std::string& name,
                                            const Shape& shape, const Shape& chunk) {
  std::vector<std::vector<uint8_t>> out;
  File f(path, H5F_ACC_RDONLY);
  EXPECT_GE(f.id, 0);
  hid_t d = H5Dopen2(f.id, ("/tensors/" + EscapeH5Name(name)).c_str(), H5P_DEFAULT);
  EXPECT_GE(d, 0);
  uint64_t n = 1;
  for (size_t k = 0; k < shape.size(); ++k) n *= (shape[k] + chunk[k] - 1) / chunk[k];
  for (uint64_t j = 0; j < n; ++j) {
    const Region box = ChunkBox(shape, chunk, j);
    std::vector<hsize_t> off(box.start, box.start + shape.size());
    hsize_t size = 0;
    EXPECT_GE(H5Dget_chunk_storage_size(d, off.data(), &size), 0);
    std::vector<uint8_t> b(size);
    uint32_t mask = 99;
    EXPECT_GE(H5Dread_chunk(d, H5P_DEFAULT, off.data(), &mask, b.data()), 0);
    EXPECT_EQ(mask, 0u);
    out.push_back(std::move(b));
  }
  H5Dclose(d);
  return out;
}

// The chunk-info table as stored: rows of (stored_hash, lane0, lane1).
std::vector<uint64_t> ReadTable(const std::string& path, const std::string& name) {
  File f(path, H5F_ACC_RDONLY);
  hid_t d = H5Dopen2(f.id, ("/chunkinfo/" + EscapeH5Name(name)).c_str(), H5P_DEFAULT);
  EXPECT_GE(d, 0);
  hid_t sp = H5Dget_space(d);
  std::vector<uint64_t> rows(H5Sget_simple_extent_npoints(sp));
  H5Sclose(sp);
  EXPECT_GE(H5Dread(d, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows.data()), 0);
  H5Dclose(d);
  return rows;
}

// Overwrites the table's values in place (same shape).
// Writes `rows` over tensor `name`'s chunk-info table; with `keep_hash` its seedstore.xxh3 too,
// as a writer that got the rows wrong would have (else the table is table-corrupt at open).
void WriteTable(const std::string& path, const std::string& name, const std::vector<uint64_t>& rows,
                bool keep_hash = true) {
  File f(path, H5F_ACC_RDWR);
  ASSERT_GE(f.id, 0);
  hid_t d = H5Dopen2(f.id, ("/chunkinfo/" + EscapeH5Name(name)).c_str(), H5P_DEFAULT);
  ASSERT_GE(d, 0);
  EXPECT_GE(H5Dwrite(d, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows.data()), 0);
  if (keep_hash) {
    EXPECT_TRUE(testutil::SetTableHash(d, rows));
  }
  H5Dclose(d);
}

// Replaces the table by one of shape `dims` holding `rows` (padded/truncated).
void ReplaceTable(const std::string& path, const std::string& name, std::vector<hsize_t> dims,
                  std::vector<uint64_t> rows) {
  File f(path, H5F_ACC_RDWR);
  ASSERT_GE(f.id, 0);
  const std::string p = "/chunkinfo/" + EscapeH5Name(name);
  ASSERT_GE(H5Ldelete(f.id, p.c_str(), H5P_DEFAULT), 0);
  hsize_t n = 1;
  for (hsize_t x : dims) n *= x;
  rows.resize(n, 0);
  hid_t space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
  hid_t d = H5Dcreate2(f.id, p.c_str(), H5T_STD_U64LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(d, 0);
  EXPECT_GE(H5Dwrite(d, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows.data()), 0);
  H5Dclose(d);
  H5Sclose(space);
}

void DeleteLink(const std::string& path, const std::string& link) {
  File f(path, H5F_ACC_RDWR);
  ASSERT_GE(f.id, 0);
  ASSERT_GE(H5Ldelete(f.id, link.c_str(), H5P_DEFAULT), 0);
}

// "<prefix><k>.h5" (built piecewise: GCC 12 warns falsely on "lit" + std::string temporaries).
std::string Numbered(const char* prefix, uint64_t k) {
  std::string s = prefix;
  s += std::to_string(k);
  s += ".h5";
  return s;
}

bool Has(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }
bool StartsWith(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }
// The message names chunk j ("chunk 5 at offset ..." or "chunk 0: ...").
bool NamesChunk(const std::string& m, uint64_t j) {
  const std::string c = "chunk " + std::to_string(j);
  return Has(m, c + " ") || Has(m, c + ":");
}

// The message of the error H5Store::Open must give for `path`, or record for a damaged tensor
// (testutil::OpenOrDamage), with status `code` ("" when it opened intact, which fails the test).
std::string OpenError(const std::string& path, Code code = Code::kCorrupt) {
  const Status st = testutil::OpenOrDamage(path);
  EXPECT_FALSE(st.ok()) << path << " opened";
  if (st.ok()) return "";
  EXPECT_EQ(st.code(), code) << st.ToString();
  return st.message();
}

std::unique_ptr<H5Store> OpenOk(const std::string& path) {
  auto st = H5Store::Open(path);
  EXPECT_TRUE(st.ok()) << st.status().ToString();
  if (!st.ok()) return nullptr;
  return std::move(*st);
}

// Everything the chunk-info table of tensor i says, against the data (`local_whole`, the
// tensor's own row-major elements), its frame and the stored bytes `raw` (RawChunks; empty
// for contiguous tensors). Byte-exact.
void CheckTable(const H5Store& st, size_t i, const std::vector<uint8_t>& local_whole, const Frame& fr,
                const std::vector<std::vector<uint8_t>>& raw) {
  const TensorRecord& t = st.tensors()[i];
  SCOPED_TRACE("tensor '" + t.name + "'");
  const StoredTensor& s = st.stored(i);
  const std::vector<ChunkInfo>& info = st.chunk_info(i);
  ASSERT_TRUE(s.dense);
  ASSERT_TRUE(t.fingerprint.has_value());
  ASSERT_EQ(t.shape, fr.local);
  ASSERT_EQ(info.size(), s.num_chunks);
  const size_t es = DTypeSize(t.dtype);
  ASSERT_EQ(local_whole.size(), Numel(t.shape) * es);
  Fingerprint sum;
  if (s.chunk.empty()) {  // contiguous: one "chunk", the raw data
    ASSERT_EQ(s.num_chunks, 1u);
    EXPECT_EQ(info[0].stored_hash, XXH3_64bits(local_whole.data(), local_whole.size()));
    EXPECT_EQ(info[0].fingerprint, ExpectedFp(fr, WholeTensor(t.shape), local_whole));
    StoredChunk sc;
    EXPECT_EQ(st.ReadStoredChunk(i, 0, &sc).code(), Code::kInvalidArgument);
    EXPECT_EQ(st.ReadStoredChunk(i, 0, &sc, false).code(), Code::kInvalidArgument);
    sum.Add(info[0].fingerprint);
  } else {
    ASSERT_EQ(raw.size(), s.num_chunks);
    for (uint64_t j = 0; j < s.num_chunks; ++j) {
      SCOPED_TRACE("chunk " + std::to_string(j));
      const Region box = ChunkBox(t.shape, s.chunk, j);
      const std::vector<uint8_t> want = Extract(local_whole, t.shape, box, es);
      const uint64_t want_sum = XXH3_64bits(PaddedChunk(local_whole, t.shape, s.chunk, box, es).data(),
                                            Numel(s.chunk) * es);
      const Fingerprint want_fp = ExpectedFp(fr, box, local_whole);
      EXPECT_EQ(info[j].stored_hash, XXH3_64bits(raw[j].data(), raw[j].size()));
      EXPECT_EQ(info[j].fingerprint, want_fp);
      StoredChunk a;
      Status sa = st.ReadStoredChunk(i, j, &a, true);
      ASSERT_TRUE(sa.ok()) << sa.ToString();
      EXPECT_EQ(a.bytes, raw[j]);
      EXPECT_EQ(XXH3_64bits(a.bytes.data(), a.bytes.size()), info[j].stored_hash);
      EXPECT_EQ(a.stored_hash, info[j].stored_hash);
      EXPECT_EQ(a.filter_mask, 0u);
      EXPECT_EQ(a.checksum, want_sum);
      EXPECT_EQ(a.data, want);
      EXPECT_FALSE(a.fingerprint.has_value());  // decoded data: the caller fingerprints it
      // The library's own fingerprinter over the decoded chunk, in the record's frame.
      EXPECT_EQ(FingerprintOf(t, box, a.data.data()), info[j].fingerprint);
      if (!t.piece) {
        EXPECT_EQ(FingerprintCpu(t.dtype, box, a.data.data(), fr.seed), info[j].fingerprint);
      }
      StoredChunk b;
      b.data = {1, 2, 3};  // must be cleared
      Status sb = st.ReadStoredChunk(i, j, &b, false);
      ASSERT_TRUE(sb.ok()) << sb.ToString();
      EXPECT_EQ(b.bytes, raw[j]);
      EXPECT_TRUE(b.data.empty());
      EXPECT_EQ(b.stored_hash, info[j].stored_hash);
      EXPECT_EQ(b.filter_mask, 0u);
      EXPECT_EQ(b.checksum, want_sum);
      ASSERT_TRUE(b.fingerprint.has_value());
      EXPECT_EQ(*b.fingerprint, info[j].fingerprint);
      sum.Add(info[j].fingerprint);
    }
    StoredChunk c;
    EXPECT_EQ(st.ReadStoredChunk(i, s.num_chunks, &c).code(), Code::kInvalidArgument);
  }
  EXPECT_EQ(sum, *t.fingerprint);
  EXPECT_EQ(*t.fingerprint, ExpectedFp(fr, WholeTensor(t.shape), local_whole));
  // stored_bytes (docs/FORMAT.md 4.1): the stored chunk bytes plus 32 per chunk.
  uint64_t bytes = s.chunk.empty() ? local_whole.size() : 0;
  for (const auto& r : raw) bytes += r.size();
  EXPECT_EQ(s.stored_bytes, bytes + 32 * s.num_chunks);
  for (int threads : {1, 2}) {
    auto p = st.ProveStored(i, CpuOptions{threads});
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    EXPECT_EQ(*p, *t.fingerprint);
  }
}

struct Written {
  std::string name;
  Shape shape;
  DType dtype;
  std::vector<uint8_t> data;
};

// ---- a. the tables match the data ----------------------------------------------------------

TEST(ChunkInfo, TableMatchesEveryChunk) {
  TempDir dir;
  const DType dtypes[] = {DType::kBF16, DType::kF32, DType::kF64, DType::kU8, DType::kI64};
  const std::vector<Shape> shapes = {{37, 53}, {}, {3, 0, 2}, {1}, {0}, {1000}, {5, 7, 11}, {2, 1, 3}};
  struct Config {
    uint64_t chunk_bytes;
    bool shuffle;
    int level;
  };
  std::mt19937_64 g(11);
  for (const Config cfg : {Config{96, true, 1}, Config{1000, false, 5}, Config{1u << 20, true, 3}}) {
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
          ASSERT_TRUE((*w)->AddDense(x.name, x.shape, dt, FromWhole(&x.data, x.shape, DTypeSize(dt))).ok());
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
    for (size_t i = 0; i < ws.size(); ++i) EXPECT_EQ(rep.fingerprints[i], *st->tensors()[i].fingerprint);
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

// ---- b./c. tampering -------------------------------------------------------------------------

// A store with one chunked tensor "blk/w%" ([37, 53] f32, 512-byte chunks) and one f64 scalar "s".
struct Tampered {
  TempDir dir;
  std::string path;
  std::vector<uint8_t> data, scalar;
  Shape shape{37, 53};
  Shape chunk;
  uint64_t num = 0;
  static constexpr const char* kName = "blk/w%";
  void Write() {
    path = dir / "t.h5";
    data = RandomBytes(Numel(shape) * 4, 77);
    scalar = RandomBytes(8, 78);
    WriteOptions wo;
    wo.chunk_bytes = 512;
    wo.threads = 2;
    auto w = StoreWriter::Create(path, 0, Generator::kThreefry, wo);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->AddDense(kName, shape, DType::kF32, FromWhole(&data, shape, 4)).ok());
    ASSERT_TRUE((*w)->AddDense("s", {}, DType::kF64, FromWhole(&scalar, {}, 8)).ok());
    ASSERT_TRUE((*w)->Commit().ok());
    auto st = OpenOk(path);
    ASSERT_TRUE(st);
    chunk = st->stored(0).chunk;
    num = st->stored(0).num_chunks;
    ASSERT_GE(num, 8u);
  }
};

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
    EXPECT_TRUE(Has(m, "tensor 'blk/w%': chunk-info table /chunkinfo/blk%2Fw%25 does not match its hash")) << m;
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
      [](uint64_t n) { return std::vector<hsize_t>{n, 2}; },
      [](uint64_t n) { return std::vector<hsize_t>{n + 1, 3}; },
      [](uint64_t n) { return std::vector<hsize_t>{n - 1, 3}; },
      [](uint64_t n) { return std::vector<hsize_t>{3 * n}; },
      [](uint64_t n) { return std::vector<hsize_t>{n, 3, 1}; },
      [](uint64_t n) { return std::vector<hsize_t>{3, n}; },
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
    EXPECT_TRUE(StartsWith(rep.problems[0].status.message(), "chunk-corrupt: ")) << rep.problems[0].status.message();
    EXPECT_TRUE(Has(rep.problems[0].status.message(), "stored bytes hash mismatch"));
    EXPECT_TRUE(NamesChunk(rep.problems[0].status.message(), j)) << rep.problems[0].status.message();
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

// ---- d. files without tables ----------------------------------------------------------------

TEST(ChunkInfo, FilesWithoutTablesStillWork) {
  for (bool whole_group : {true, false}) {
    SCOPED_TRACE(whole_group ? "no /chunkinfo" : "no /chunkinfo/blk%2Fw%25");
    Tampered t;
    ASSERT_NO_FATAL_FAILURE(t.Write());
    const std::vector<std::vector<uint8_t>> raw = RawChunks(t.path, Tampered::kName, t.shape, t.chunk);
    ASSERT_NO_FATAL_FAILURE(
        DeleteLink(t.path, whole_group ? "/chunkinfo" : "/chunkinfo/" + EscapeH5Name(Tampered::kName)));
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
        EXPECT_EQ(FingerprintCpu(DType::kF32, box, c.data.data(), fr.seed), ExpectedFp(fr, box, t.data));
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

// ---- e. piece records (invariant I4) --------------------------------------------------------

constexpr uint64_t kRows = 37, kCols = 53;

// The lazy normal bf16 [37, 53] tensor "layers.0.w", materialized.
std::vector<uint8_t> GlobalLazy(Fingerprint* whole_fp) {
  TensorSpec t;
  t.name = "layers.0.w";
  t.shape = {kRows, kCols};
  t.dtype = DType::kBF16;
  t.init.dist = Dist::kNormal;
  t.init.scale = 0.02;
  auto l = LazyTensor::Resolve(t, 1234);
  EXPECT_TRUE(l.ok());
  std::vector<uint8_t> v(kRows * kCols * 2);
  EXPECT_TRUE(l->Materialize(WholeTensor(t.shape), v.data()).ok());
  auto f = l->FingerprintWhole();
  EXPECT_TRUE(f.ok());
  *whole_fp = *f;
  return v;
}

// Writes piece `p` of the global tensor (`global` data) as tensor `name` of a new store.
void WritePiece(const std::string& path, const std::string& name, DType dt, const Region& p,
                const std::vector<uint8_t>& local, uint64_t chunk_bytes) {
  WriteOptions wo;
  wo.chunk_bytes = chunk_bytes;
  wo.threads = 2;
  auto w = StoreWriter::Create(path, 1234, Generator::kThreefry, wo);
  ASSERT_TRUE(w.ok());
  DenseChunking ch;
  ch.piece = p;
  const Shape ls = LocalShape(p);
  Status s = (*w)->AddDense(name, ls, dt, FromWhole(&local, ls, DTypeSize(dt)), {}, ch);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_TRUE((*w)->Commit().ok());
}

// The elements of a piece of the global row-major tensor, in the piece's own row-major order.
std::vector<uint8_t> PieceData(const std::vector<uint8_t>& global, const Shape& gshape, const Region& p,
                               size_t es) {
  if (!p.flat) return Extract(global, gshape, p, es);
  return std::vector<uint8_t>(global.begin() + p.begin * es, global.begin() + p.end * es);
}

// Opens the piece store and checks everything about piece `p` of `name`; returns its fingerprint.
Fingerprint CheckPiece(const std::string& path, const std::string& name, DType dt, const Region& p,
                       const std::vector<uint8_t>& global, std::mt19937_64& g) {
  SCOPED_TRACE("piece " + DescribeRegion(p));
  const Shape gshape(p.shape, p.shape + p.rank);
  const size_t es = DTypeSize(dt);
  const std::vector<uint8_t> local = PieceData(global, gshape, p, es);
  const Frame fr = PieceFrame(name, dt, p);
  Shape chunk;
  {
    auto st = OpenOk(path);
    if (!st) return {};
    chunk = st->stored(0).chunk;
  }
  std::vector<std::vector<uint8_t>> raw;
  if (!chunk.empty()) raw = RawChunks(path, name, fr.local, chunk);
  auto st = OpenOk(path);
  if (!st) return {};
  const TensorRecord& t = st->tensors()[0];
  EXPECT_EQ(t.name, name);
  EXPECT_EQ(t.shape, LocalShape(p));
  EXPECT_TRUE(t.piece.has_value());
  if (!t.piece) return {};
  EXPECT_TRUE(SameRegion(*t.piece, p)) << DescribeRegion(*t.piece);
  EXPECT_EQ(t.fp_seed(), FingerprintSeed(name, dt, gshape));
  // The record's fingerprint: the global region over the global data, global seed.
  const Fingerprint want = FingerprintCpu(dt, p, local.data(), FingerprintSeed(name, dt, gshape));
  EXPECT_EQ(*t.fingerprint, want);
  EXPECT_EQ(*t.fingerprint, ExpectedFp(fr, WholeTensor(fr.local), local));
  CheckTable(*st, 0, local, fr, raw);
  auto rep = st->Verify(CpuOptions{2});
  EXPECT_TRUE(rep.problems.empty()) << rep.problems[0].status.ToString();
  EXPECT_EQ(rep.fingerprints[0], want);
  std::vector<uint8_t> got(local.size());
  EXPECT_TRUE(st->Read(0, WholeTensor(fr.local), got.data()).ok());
  EXPECT_EQ(got, local);
  // Local sub-boxes and local flat ranges fingerprint as the global elements they hold.
  const uint64_t n = Numel(fr.local);
  for (int rep2 = 0; rep2 < 12; ++rep2) {
    Region box = WholeTensor(fr.local);
    for (size_t d = 0; d < fr.local.size(); ++d) {
      uint64_t a = g() % (fr.local[d] + 1), b = g() % (fr.local[d] + 1);
      if (rep2 == 0) a = 0, b = fr.local[d];
      box.start[d] = std::min(a, b);
      box.stop[d] = std::max(a, b);
    }
    auto f = st->FingerprintRegion(0, box);
    EXPECT_TRUE(f.ok()) << f.status().ToString();
    if (f.ok()) {
      EXPECT_EQ(*f, ExpectedFp(fr, box, local)) << DescribeRegion(box);
    }
    if (!p.flat && f.ok()) {  // the corresponding global box, by the library's fingerprinter
      Region gb = p;
      for (int d = 0; d < p.rank; ++d) {
        gb.start[d] = p.start[d] + box.start[d];
        gb.stop[d] = p.start[d] + box.stop[d];
      }
      EXPECT_EQ(*f, FingerprintCpu(dt, gb, Extract(global, gshape, gb, es).data(), fr.seed));
    }
    uint64_t a = g() % (n + 1), b = g() % (n + 1);
    if (a > b) std::swap(a, b);
    if (rep2 == 1) a = 0, b = n;
    const Region fl = FlatRegion(fr.local, a, b);
    auto ff = st->FingerprintRegion(0, fl);
    EXPECT_TRUE(ff.ok()) << ff.status().ToString();
    if (ff.ok()) {
      EXPECT_EQ(*ff, ExpectedFp(fr, fl, local)) << DescribeRegion(fl);
    }
  }
  return *t.fingerprint;
}

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
  for (const Region& p : {BoxRegion(gshape, {0, 0}, {kRows, kCols}), BoxRegion(gshape, {3, 7}, {30, 41}),
                          BoxRegion(gshape, {36, 52}, {37, 53})}) {
    const std::string path = dir / Numbered("q", k++);
    ASSERT_NO_FATAL_FAILURE(WritePiece(path, name, DType::kBF16, p, PieceData(global, gshape, p, 2), 100));
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
  const Fingerprint whole = FingerprintCpu(dt, WholeTensor(gshape), global.data(), FingerprintSeed(name, dt, gshape));
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
    ASSERT_NO_FATAL_FAILURE(WritePiece(path, name, DType::kBF16, p, PieceData(global, gshape, p, 2), 50));
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
    ASSERT_NO_FATAL_FAILURE(WritePiece(path, name, DType::kBF16, p, PieceData(global, gshape, p, 2), 1u << 20));
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
    const Fingerprint want = FingerprintCpu(DType::kBF16, p, local.data(), FingerprintSeed(name, DType::kBF16, gshape));
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
    ASSERT_NO_FATAL_FAILURE(WritePiece(src_path, name, DType::kBF16, p, PieceData(global, gshape, p, 2), 128));
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
      ASSERT_TRUE((*w)->CopiesChunksOf(src->stored(0), DType::kBF16));
      DenseChunking ch;
      ch.piece = p;
      ch.chunk = src->stored(0).chunk;
      const H5Store* s = src.get();
      ch.raw = [s](uint64_t j, const Region&, StoredChunk* out) -> Result<bool> {
        Status st = s->ReadStoredChunk(0, j, out, false);
        if (!st.ok()) return st;
        return true;
      };
      Status st = (*w)->AddDense(name, LocalShape(p), DType::kBF16,
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

// ReplaceWithDense on a rank file: the replaced piece should stay a piece (its fingerprint in
// the global frame), the untouched one is copied as is.
TEST(PieceRecord, ReplaceWithDenseKeepsPieces) {
  TempDir dir;
  Fingerprint whole;
  const std::vector<uint8_t> global = GlobalLazy(&whole);
  const Shape gshape = {kRows, kCols};
  const Region p = BoxRegion(gshape, {10, 20}, {37, 53});
  const Shape ls = LocalShape(p);
  const std::vector<uint8_t> local = PieceData(global, gshape, p, 2);
  const std::string path = dir / "rank.h5";
  {
    auto w = StoreWriter::Create(path, 1234);
    ASSERT_TRUE(w.ok());
    DenseChunking ch;
    ch.piece = p;
    ASSERT_TRUE((*w)->AddDense("a", ls, DType::kBF16, FromWhole(&local, ls, 2), {}, ch).ok());
    ASSERT_TRUE((*w)->AddDense("b", ls, DType::kBF16, FromWhole(&local, ls, 2), {}, ch).ok());
    ASSERT_TRUE((*w)->Commit().ok());
  }
  std::vector<uint8_t> trained = local;
  for (size_t k = 0; k < trained.size(); k += 2) trained[k] ^= 1;
  ASSERT_TRUE(ReplaceWithDense(path, {{"a", FromWhole(&trained, ls, 2)}}).ok());
  auto st = OpenOk(path);
  ASSERT_TRUE(st);
  const TensorRecord& b = st->tensors()[1];
  ASSERT_TRUE(b.piece.has_value());
  EXPECT_TRUE(SameRegion(*b.piece, p));
  EXPECT_EQ(*b.fingerprint, FingerprintCpu(DType::kBF16, p, local.data(), FingerprintSeed("b", DType::kBF16, gshape)));
  const TensorRecord& a = st->tensors()[0];
  EXPECT_TRUE(a.piece.has_value()) << "ReplaceWithDense dropped the piece of 'a'";
  EXPECT_EQ(*a.fingerprint, FingerprintCpu(DType::kBF16, p, trained.data(), FingerprintSeed("a", DType::kBF16, gshape)));
  EXPECT_TRUE(st->Verify().problems.empty());
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
       [](json& pc) { pc["region"]["stop"] = {37, 52}; }, "does not have the tensor's shape"},
      {"box outside the global shape",
       [](json& pc) { pc["region"] = {{"start", {11, 20}}, {"stop", {38, 53}}}; }, "bad box"},
      {"box of another rank", [](json& pc) { pc["region"] = {{"start", {10}}, {"stop", {37}}}; }, "bad box"},
      {"flat range past the end",
       [](json& pc) { pc["region"] = {{"flat", {37 * 53 - 100, 37 * 53 + 791}}}; }, "bad flat range"},
      {"flat range for a 2-D record", [](json& pc) { pc["region"] = {{"flat", {0, 891}}}; },
       "does not have the tensor's shape"},
      {"no region", [](json& pc) { pc.erase("region"); }, "'piece' needs 'shape' and 'region'"},
      {"global shape not integers", [](json& pc) { pc["shape"] = {37, "x"}; }, "'piece' needs"},
      {"smaller global shape", [](json& pc) { pc["shape"] = {30, 53}; }, "bad box"},
  };
  for (size_t k = 0; k < edits.size(); ++k) {
    SCOPED_TRACE(edits[k].what);
    const std::string path = dir / Numbered("e", k);
    ASSERT_NO_FATAL_FAILURE(WritePiece(path, "w", DType::kBF16, BoxRegion(gshape, {10, 20}, {37, 53}), data, 256));
    ASSERT_TRUE(RewriteIndex(path, [&](json& j) { edits[k].edit(j["tensors"][0]["piece"]); }));
    const std::string m = OpenError(path);
    EXPECT_TRUE(StartsWith(m, "bad-index: ")) << m;
    EXPECT_TRUE(Has(m, edits[k].detail)) << m;
  }
  // Moving a piece (same shape, another region) changes its frame: Open cannot tell (the table
  // still adds up to the record), Verify recomputes in the new frame and finds the mismatch.
  const std::string path = dir / "moved.h5";
  ASSERT_NO_FATAL_FAILURE(WritePiece(path, "w", DType::kBF16, BoxRegion(gshape, {10, 20}, {37, 53}), data, 256));
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
  ASSERT_NO_FATAL_FAILURE(WritePiece(path2, "w", DType::kBF16, BoxRegion(gshape, {10, 20}, {37, 53}), data, 256));
  ASSERT_TRUE(RewriteIndex(path2, [](json& j) { j["tensors"][0].erase("piece"); }));
  auto st2 = OpenOk(path2);
  ASSERT_TRUE(st2);
  EXPECT_FALSE(st2->tensors()[0].piece.has_value());
  auto rep2 = st2->Verify();
  EXPECT_EQ(rep2.problems.size(), st2->stored(0).num_chunks);
}

// ---- f. invalid pieces ----------------------------------------------------------------------

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
    Status s = (*w)->AddDense(name, bad[k].shape, DType::kF32, FromWhole(&v, bad[k].shape, 4), {}, ch);
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
