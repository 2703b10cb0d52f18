// Helpers of the chunk-info and piece-record tests (test_chunk_info*.cc, test_piece_record.cc).
// Expected fingerprints are recomputed here element by element with libxxhash (docs/FORMAT.md),
// independently of the library's fingerprinter, region splitting and chunk grid; stored bytes
// are read back, and tables tampered with, through the HDF5 C API.
#pragma once
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>
#include <xxhash.h>
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>
#include "io/h5store.h"
#include "tests/store_test_util.h"

namespace seedstore::chunkinfotest {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Shape = std::vector<uint64_t>;

using testutil::FlipChunkByte;
using testutil::Numel;
using testutil::RandomBytes;
using testutil::RewriteIndex;
using File = testutil::H5File;

// A temporary folder for this file's stores.
struct TempDir : testutil::TempDir {
  TempDir() : testutil::TempDir("seedstore-chunkinfo") {}
};

inline uint64_t BoxElementFlat(const Shape& shape, const Region& box, uint64_t q) {
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
inline std::vector<uint8_t> Extract(const std::vector<uint8_t>& whole, const Shape& shape,
                                    const Region& box, size_t es) {
  std::vector<uint8_t> out(box.Count() * es);
  for (uint64_t q = 0; q < box.Count(); ++q)
    std::memcpy(out.data() + q * es, whole.data() + BoxElementFlat(shape, box, q) * es, es);
  return out;
}

inline BoxSource FromWhole(const std::vector<uint8_t>* whole, Shape shape, size_t es) {
  return [whole, shape, es](const Region& box, void* out) {
    const std::vector<uint8_t> v = Extract(*whole, shape, box, es);
    if (!v.empty()) std::memcpy(out, v.data(), v.size());
    return Status::Ok();
  };
}

// Per element: XXH3_128bits_withSeed(LE64(index) || LE64(value bits), seed), lanes summed.
inline Fingerprint ElementFp(uint64_t index, const uint8_t* value, size_t es, uint64_t seed) {
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
  Shape local;  // the tensor's own shape
  size_t es = 1;
  uint64_t seed = 0;
  std::function<uint64_t(uint64_t)> global;  // local flat -> frame flat
};

inline Frame PlainFrame(const std::string& name, DType dt, const Shape& shape) {
  return Frame{shape, static_cast<size_t>(DTypeSize(dt)), FingerprintSeed(name, dt, shape),
               [](uint64_t k) { return k; }};
}

// The frame of a piece `p` (global indices) of a global tensor called `name`.
inline Frame PieceFrame(const std::string& name, DType dt, const Region& p) {
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
inline Fingerprint ExpectedFp(const Frame& f, const Region& r,
                              const std::vector<uint8_t>& local_whole) {
  Fingerprint sum;
  auto add = [&](uint64_t k) {
    sum.Add(ElementFp(f.global(k), local_whole.data() + k * f.es, f.es, f.seed));
  };
  if (r.flat) {
    for (uint64_t k = r.begin; k < r.end; ++k) add(k);
  } else {
    for (uint64_t q = 0; q < r.Count(); ++q) add(BoxElementFlat(f.local, r, q));
  }
  return sum;
}

// Box of chunk j (row-major chunk grid) clipped to the tensor.
inline Region ChunkBox(const Shape& shape, const Shape& chunk, uint64_t j) {
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
inline std::vector<uint8_t> PaddedChunk(const std::vector<uint8_t>& whole, const Shape& shape,
                                        const Shape& chunk, const Region& box, size_t es) {
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
inline std::vector<std::vector<uint8_t>> RawChunks(const std::string& path, const std::string& name,
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
inline std::vector<uint64_t> ReadTable(const std::string& path, const std::string& name) {
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
inline void WriteTable(const std::string& path, const std::string& name,
                       const std::vector<uint64_t>& rows, bool keep_hash = true) {
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
inline void ReplaceTable(const std::string& path, const std::string& name,
                         std::vector<hsize_t> dims, std::vector<uint64_t> rows) {
  File f(path, H5F_ACC_RDWR);
  ASSERT_GE(f.id, 0);
  const std::string p = "/chunkinfo/" + EscapeH5Name(name);
  ASSERT_GE(H5Ldelete(f.id, p.c_str(), H5P_DEFAULT), 0);
  hsize_t n = 1;
  for (hsize_t x : dims) n *= x;
  rows.resize(n, 0);
  hid_t space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
  hid_t d =
      H5Dcreate2(f.id, p.c_str(), H5T_STD_U64LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(d, 0);
  EXPECT_GE(H5Dwrite(d, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows.data()), 0);
  H5Dclose(d);
  H5Sclose(space);
}

inline void DeleteLink(const std::string& path, const std::string& link) {
  File f(path, H5F_ACC_RDWR);
  ASSERT_GE(f.id, 0);
  ASSERT_GE(H5Ldelete(f.id, link.c_str(), H5P_DEFAULT), 0);
}

// "<prefix><k>.h5" (built piecewise: GCC 12 warns falsely on "lit" + std::string temporaries).
inline std::string Numbered(const char* prefix, uint64_t k) {
  std::string s = prefix;
  s += std::to_string(k);
  s += ".h5";
  return s;
}

inline bool Has(const std::string& s, const std::string& sub) {
  return s.find(sub) != std::string::npos;
}
inline bool StartsWith(const std::string& s, const std::string& p) {
  return s.compare(0, p.size(), p) == 0;
}
// The message names chunk j ("chunk 5 at offset ..." or "chunk 0: ...").
inline bool NamesChunk(const std::string& m, uint64_t j) {
  const std::string c = "chunk " + std::to_string(j);
  return Has(m, c + " ") || Has(m, c + ":");
}

// The message of the error H5Store::Open must give for `path`, or record for a damaged tensor
// (testutil::OpenOrDamage), with status `code` ("" when it opened intact, which fails the test).
inline std::string OpenError(const std::string& path, Code code = Code::kCorrupt) {
  const Status st = testutil::OpenOrDamage(path);
  EXPECT_FALSE(st.ok()) << path << " opened";
  if (st.ok()) return "";
  EXPECT_EQ(st.code(), code) << st.ToString();
  return st.message();
}

inline std::unique_ptr<H5Store> OpenOk(const std::string& path) {
  auto st = H5Store::Open(path);
  EXPECT_TRUE(st.ok()) << st.status().ToString();
  if (!st.ok()) return nullptr;
  return std::move(*st);
}

// Everything the chunk-info table of tensor i says, against the data (`local_whole`, the
// tensor's own row-major elements), its frame and the stored bytes `raw` (RawChunks; empty
// for contiguous tensors). Byte-exact.
inline void CheckTable(const H5Store& st, size_t i, const std::vector<uint8_t>& local_whole,
                       const Frame& fr, const std::vector<std::vector<uint8_t>>& raw) {
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
      const uint64_t want_sum = XXH3_64bits(
          PaddedChunk(local_whole, t.shape, s.chunk, box, es).data(), Numel(s.chunk) * es);
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

constexpr uint64_t kRows = 37, kCols = 53;

// The lazy normal bf16 [37, 53] tensor "layers.0.w", materialized.
inline std::vector<uint8_t> GlobalLazy(Fingerprint* whole_fp) {
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
inline void WritePiece(const std::string& path, const std::string& name, DType dt, const Region& p,
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
inline std::vector<uint8_t> PieceData(const std::vector<uint8_t>& global, const Shape& gshape,
                                      const Region& p, size_t es) {
  if (!p.flat) return Extract(global, gshape, p, es);
  return std::vector<uint8_t>(global.begin() + p.begin * es, global.begin() + p.end * es);
}

// Opens the piece store and checks everything about piece `p` of `name`; returns its fingerprint.
inline Fingerprint CheckPiece(const std::string& path, const std::string& name, DType dt,
                              const Region& p, const std::vector<uint8_t>& global,
                              std::mt19937_64& g) {
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

}  // namespace seedstore::chunkinfotest
