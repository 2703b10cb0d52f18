// Fixtures and helpers of the distributed-save and `seedstore reshard` tests, shared by the unit
// tier (one process: the library, the CLI without mpirun) and the mpi tier (under mpirun):
// source stores, layouts, reshard runs, and editors of saves (chunks, chunk info, index, the
// master's virtual datasets) that tests corrupt on purpose.
#pragma once
#include <hdf5.h>
#include <xxhash.h>
#include <atomic>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <thread>
#include "io/dist_store.h"
#include "io/export.h"
#include "io/h5store.h"
#include "io/interop.h"
#include "io/open.h"
#include "store/spec.h"
#include "tests/rank_test_util.h"
#include "tests/store_test_util.h"

namespace seedstore::reshardtest {

using ranktest::Mpirun;
using ranktest::Proc;
using ranktest::Shell;
using ranktest::TempDir;
using ranktest::Write;

using ranktest::Bin;

// The small mpi-tier model plus a scalar and an uneven 3-d tensor; "bias" stays lazy.
inline const char* kSpec = R"({"seedstore": 1, "seed": 7, "generator": "threefry",
 "tensors": [
   {"name": "embed", "shape": [64, 32], "dtype": "bfloat16", "init": {"dist": "normal", "scale": 0.02}},
   {"name": "layers.0.wq", "shape": [32, 32], "dtype": "float32", "init": {"dist": "normal"}},
   {"name": "layers.0.w1", "shape": [33, 17], "dtype": "float32", "init": {"dist": "uniform"}},
   {"name": "flat.norm", "shape": [37], "dtype": "float32", "init": {"dist": "truncated_normal"}},
   {"name": "cube", "shape": [5, 7, 9], "dtype": "int32", "init": {"dist": "constant", "value": 3}},
   {"name": "scale", "shape": [], "dtype": "float64", "init": {"dist": "normal"}},
   {"name": "bias", "shape": [32], "dtype": "float16", "init": {"dist": "normal"}}]})";

// 2-d mesh (data x tensor); flat and nested shardings; uneven splits when dp = 3.
inline std::string LayoutFile(int dp, int tp) {
  const std::string name = "rs_mesh" + std::to_string(dp) + "x" + std::to_string(tp) + ".json";
  return Write(name, R"({"mesh": {"axes": ["data", "tensor"], "shape": [)" + std::to_string(dp) +
                         ", " + std::to_string(tp) + R"J(]},
 "placements": [
   {"match": "embed", "spec": [["data", "tensor"], null]},
   {"match": "layers.*.wq", "spec": [null, "tensor"]},
   {"match": "layers.*.w1", "dtensor": ["Shard(1)", "Shard(0)"]},
   {"match": "cube", "spec": ["tensor", null, "data"]},
   {"match": "flat.*", "flat": ["data"]}]})J");
}

struct Fixture {
  ModelSpec spec;
  std::string source;  // dense store (bias lazy)
  std::string d4;      // distributed save over 4 ranks
};

// Whole tensor bytes from the spec.
inline std::vector<unsigned char> Expected(const ModelSpec& spec, const std::string& name) {
  const TensorSpec& t = spec.tensors[spec.Find(name)];
  auto lazy = LazyTensor::Resolve(t, spec.seed);
  EXPECT_TRUE(lazy.ok());
  std::vector<unsigned char> buf(lazy->RegionBytes(WholeTensor(t.shape)));
  EXPECT_TRUE(lazy->Materialize(WholeTensor(t.shape), buf.data(), CpuOptions{1}).ok());
  return buf;
}

inline const Fixture& Get() {
  static Fixture f = [] {
    Fixture x;
    auto spec = ModelSpec::Parse(kSpec, "rs_spec");
    EXPECT_TRUE(spec.ok()) << spec.status().ToString();
    x.spec = *spec;
    x.source = TempDir() + "/rs_source.h5";
    auto w = StoreWriter::Create(x.source, x.spec.seed, x.spec.generator);
    EXPECT_TRUE(w.ok());
    for (const TensorSpec& t : x.spec.tensors) {
      auto lazy = LazyTensor::Resolve(t, x.spec.seed);
      if (t.name == "bias") {
        EXPECT_TRUE((*w)->AddLazy(t).ok());
        continue;
      }
      LazyTensor l = *lazy;
      Status st = (*w)->AddDense(t.name, t.shape, t.dtype, [l](const Region& b, void* out) {
        return l.Materialize(b, out, CpuOptions{1});
      });
      EXPECT_TRUE(st.ok()) << st.ToString();
    }
    EXPECT_TRUE((*w)->Commit().ok());
    x.d4 = TempDir() + "/rs_d4.h5";
    if (!Bin().empty()) {
      Proc p = Shell(Bin() + " reshard " + x.source + " --layout " + LayoutFile(2, 2) + " -o " +
                     x.d4 + " --threads 1 -q");
      EXPECT_EQ(p.code, 0) << p.out << p.err;
    }
    return x;
  }();
  return f;
}

// Every tensor of the catalog at `path` equals the spec's, read back whole and by pieces.
inline void ExpectSameAsSource(const std::string& path, bool bias_lazy = true) {
  const Fixture& f = Get();
  auto cat = OpenCatalog(path);
  ASSERT_TRUE(cat.ok()) << cat.status().ToString();
  ASSERT_EQ((*cat)->tensors().size(), f.spec.tensors.size());
  for (size_t i = 0; i < f.spec.tensors.size(); ++i) {
    const TensorRecord& t = (*cat)->tensors()[i];
    SCOPED_TRACE(path + " tensor " + t.name);
    EXPECT_EQ(t.lazy != nullptr, bias_lazy && t.name == "bias");  // lazy stays lazy
    const auto want = Expected(f.spec, t.name);
    std::vector<unsigned char> got(want.size());
    ASSERT_TRUE((*cat)->Read(i, WholeTensor(t.shape), got.data(), CpuOptions{1}).ok());
    EXPECT_EQ(got, want);
    // Fingerprints computed where the data lies (per chunk, per piece) equal those of the
    // bytes read; for the box and flat range below too.
    auto expect_fingerprint = [&](const Region& r, const std::vector<unsigned char>& bytes) {
      for (int threads : {1, 2}) {
        auto fp = (*cat)->FingerprintRegion(i, r, CpuOptions{threads});
        ASSERT_TRUE(fp.ok()) << fp.status().ToString();
        EXPECT_EQ(*fp, FingerprintOf(t, r, bytes.data())) << DescribeRegion(r);
      }
    };
    expect_fingerprint(WholeTensor(t.shape), want);
    // A box and a flat range that straddle pieces.
    if (t.shape.size() >= 2) {
      Region b = WholeTensor(t.shape);
      b.start[0] = 1;
      b.stop[0] = t.shape[0] - 1;
      b.start[1] = 1;
      std::vector<unsigned char> part(b.Count() * DTypeSize(t.dtype));
      ASSERT_TRUE((*cat)->Read(i, b, part.data(), CpuOptions{1}).ok());
      std::vector<unsigned char> exp;
      const size_t es = DTypeSize(t.dtype);
      const uint64_t runs = b.Count() / b.RunLength();
      for (uint64_t q = 0; q < runs; ++q) {
        const uint64_t base = b.RunBase(q);
        exp.insert(exp.end(), want.begin() + base * es, want.begin() + (base + b.RunLength()) * es);
      }
      EXPECT_EQ(part, exp);
      expect_fingerprint(b, exp);
    }
    if (t.NumElements() > 3) {
      Region r = WholeTensor(t.shape);
      r.flat = true;
      r.begin = 1;
      r.end = t.NumElements() - 2;
      std::vector<unsigned char> part(r.Count() * DTypeSize(t.dtype));
      ASSERT_TRUE((*cat)->Read(i, r, part.data(), CpuOptions{1}).ok());
      const size_t es = DTypeSize(t.dtype);
      EXPECT_EQ(part, std::vector<unsigned char>(want.begin() + es, want.end() - 2 * es));
      expect_fingerprint(r, part);
    }
  }
}

inline Proc Reshard(const std::string& src, const std::string& args) {
  return Shell(Bin() + " reshard " + src + " --threads 1 " + args);
}

inline void ExpectProven(const Proc& p, size_t tensors) {
  ASSERT_EQ(p.code, 0) << p.out << p.err;
  auto j = nlohmann::json::parse(p.out);
  EXPECT_TRUE(j["ok"].get<bool>());
  ASSERT_EQ(j["tensors"].size(), tensors);
  for (const auto& t : j["tensors"]) {
    EXPECT_EQ(t["source"], t["output"]) << t.dump();
    EXPECT_TRUE(t["ok"].get<bool>());
  }
}

// The bytes of every rank file of a distributed save, by rank.
inline std::vector<std::string> RankFileBytes(const std::string& save) {
  std::vector<std::string> out;
  auto d = DistCatalog::Open(save);
  EXPECT_TRUE(d.ok()) << d.status().ToString();
  if (!d.ok()) return out;
  for (const std::string& f : (*d)->rank_files()) {
    std::ifstream in(f, std::ios::binary);
    out.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return out;
}

// The python with h5py + hdf5plugin + ml_dtypes (SEEDSTORE_PYTHON), or "".
inline std::string PythonWithH5py() {
  const char* py = std::getenv("SEEDSTORE_PYTHON");
  if (!py || Shell(std::string(py) + " -c 'import h5py, hdf5plugin, ml_dtypes'").code != 0)
    return "";
  return py;
}

// h5py, run from another folder, compares each virtual dataset of the distributed save `dist`
// with the dataset of the same name in the store `src`; prints "h5py-ok <tensors compared>"
// (tensors without elements have no virtual dataset).
inline Proc H5pyCompare(const std::string& py, const std::string& src, const std::string& dist) {
  const std::string script = Write("rs_check.py", R"(import json, sys, h5py, hdf5plugin, numpy as np
src, dist = sys.argv[1], sys.argv[2]
with h5py.File(src, "r") as a, h5py.File(dist, "r") as b:
    index = json.loads(bytes(b["distributed/index"][()]))
    n = 0
    for rec in index["tensors"]:
        if rec["kind"] != "dense" or 0 in rec["shape"]:
            continue
        esc = rec["name"].replace("%", "%25").replace("/", "%2F")
        if set(esc) == {"."}:
            esc = esc.replace(".", "%2E")
        v = b["tensors"][esc]
        assert v.is_virtual == (rec["shape"] != []), rec["name"]
        assert v.attrs["seedstore.dtype"] == rec["dtype"].encode()  # fixed-length: bytes
        x, y = a["tensors"][esc][()], v[()]
        assert x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y), rec["name"]
        n += 1
    print("h5py-ok", n)
)");
  return Shell("cd / && " + py + " " + script + " " + src + " " + dist);
}

// ---- Raw chunk copies ---------------------------------------------------------------------
//
// A store with small chunks (chunk_bytes 256): a bf16 [40, 24] -> chunks [10, 12] (no edges);
// b f32 [37, 23] -> [10, 6] and c int8 [37, 23] -> [19, 12] (edge chunks in both dims);
// u f32 [3, 16] (one chunk; uneven and empty shards), e f32 [0, 5] (no elements), s f32
// scalar, lz lazy. The expected chunk counts below are worked out by hand from the rule in
// io/dist_store.h (Reshard, "Raw chunk copies").
inline const char* kRawSpec = R"({"seedstore": 1, "seed": 11, "tensors": [
   {"name": "a", "shape": [40, 24], "dtype": "bfloat16", "init": {"dist": "normal"}},
   {"name": "b", "shape": [37, 23], "dtype": "float32", "init": {"dist": "uniform"}},
   {"name": "c", "shape": [37, 23], "dtype": "int8", "init": {"dist": "constant", "value": 0}},
   {"name": "u", "shape": [3, 16], "dtype": "float32", "init": {"dist": "normal"}},
   {"name": "e", "shape": [0, 5], "dtype": "float32", "init": {"dist": "zeros"}},
   {"name": "s", "shape": [], "dtype": "float32", "init": {"dist": "normal"}},
   {"name": "lz", "shape": [8], "dtype": "float32", "init": {"dist": "normal"}}]})";

// Rows split over `dp` ranks (torch.chunk: uneven, and empty shards when dp > rows).
inline std::string RowsLayout(int dp) {
  return Write("rr_rows" + std::to_string(dp) + ".json",
               R"({"mesh": {"axes": ["data"], "shape": [)" + std::to_string(dp) + R"(]},
 "placements": [{"match": "[abcu]", "spec": ["data", null]}]})");
}

// The int8 tensor gets varied values (a constant would compress to a few bytes everywhere).
inline std::vector<unsigned char> RawValues(const TensorSpec& t, uint64_t seed) {
  auto l = LazyTensor::Resolve(t, seed);
  EXPECT_TRUE(l.ok());
  std::vector<unsigned char> v(l->RegionBytes(WholeTensor(t.shape)));
  EXPECT_TRUE(l->Materialize(WholeTensor(t.shape), v.data(), CpuOptions{1}).ok());
  if (t.dtype == DType::kI8)
    for (size_t k = 0; k < v.size(); ++k) v[k] = static_cast<unsigned char>(k * 2654435761u >> 13);
  return v;
}

struct RawFixture {
  ModelSpec spec;
  std::string source;
  std::map<std::string, std::vector<unsigned char>> values;  // dense tensors, whole
};

// A dense store at TempDir()/<file> of the spec's tensors (RawValues; "lz" stays lazy),
// chunked by `chunk_bytes`, the tensors matching `uncompressed` with codec none.
inline RawFixture MakeRawSource(const char* spec_text, const std::string& file,
                                uint64_t chunk_bytes,
                                const std::vector<std::string>& uncompressed = {}) {
  RawFixture x;
  auto spec = ModelSpec::Parse(spec_text, file);
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  x.spec = *spec;
  x.source = TempDir() + "/" + file;
  WriteOptions wo;
  wo.chunk_bytes = chunk_bytes;
  wo.threads = 2;
  wo.uncompressed = uncompressed;
  auto w = StoreWriter::Create(x.source, x.spec.seed, x.spec.generator, wo);
  EXPECT_TRUE(w.ok());
  for (const TensorSpec& t : x.spec.tensors) {
    if (t.name == "lz") {
      EXPECT_TRUE((*w)->AddLazy(t).ok());
      continue;
    }
    const auto v = RawValues(t, x.spec.seed);
    x.values[t.name] = v;
    const size_t es = DTypeSize(t.dtype);
    const std::vector<uint64_t> shape = t.shape;
    const auto* data = &x.values[t.name];
    Status st =
        (*w)->AddDense(t.name, t.shape, t.dtype, [data, shape, es](const Region& b, void* out) {
          auto* o = static_cast<unsigned char*>(out);
          if (b.rank == 0) {
            std::memcpy(o, data->data(), es);
            return Status::Ok();
          }
          const uint64_t runs = b.Count() / b.RunLength();
          for (uint64_t q = 0; q < runs; ++q, o += b.RunLength() * es)
            std::memcpy(o, data->data() + b.RunBase(q) * es, b.RunLength() * es);
          return Status::Ok();
        });
    EXPECT_TRUE(st.ok()) << st.ToString();
  }
  EXPECT_TRUE((*w)->Commit().ok());
  return x;
}

inline const RawFixture& GetRaw() {
  static RawFixture f = MakeRawSource(kRawSpec, "rr_source.h5", 256);
  return f;
}

// Reshards `src` in process (one writer process, 2 threads), writing the tensors matching
// `uncompressed` with codec none.
inline Result<ReshardReport> ReshardHere(const std::string& src, const std::string& layout,
                                         const std::string& out, bool consolidate = false,
                                         bool full_proof = false,
                                         const std::vector<std::string>& uncompressed = {},
                                         int rank_file_version = kCellsFormatVersion) {
  auto comm = CreateSelfCollective();
  SEEDSTORE_ASSIGN_OR_RETURN(auto cat, OpenCatalog(src));
  Layout l;
  if (!layout.empty()) {
    SEEDSTORE_ASSIGN_OR_RETURN(l, Layout::Load(layout));
  }
  DistSaveOptions o;
  o.consolidate = consolidate;
  o.full_proof = full_proof;
  o.cpu.threads = o.write.threads = 2;
  o.write.uncompressed = uncompressed;
  o.rank_file_version = rank_file_version;
  return Reshard(*comm, *cat, l, out, o);
}

// Every dense tensor of the catalog at `path` holds the source's bytes (f's); every file of it
// (master or store, and each rank file) passes H5Store::Verify.
inline void ExpectRawSameAsSource(const std::string& path, const RawFixture& f = GetRaw()) {
  auto cat = OpenCatalog(path);
  ASSERT_TRUE(cat.ok()) << cat.status().ToString();
  for (size_t i = 0; i < (*cat)->tensors().size(); ++i) {
    const TensorRecord& t = (*cat)->tensors()[i];
    SCOPED_TRACE(path + " tensor " + t.name);
    EXPECT_EQ(t.lazy != nullptr, t.name == "lz");
    if (t.lazy) continue;
    std::vector<unsigned char> got(t.NumBytes());
    ASSERT_TRUE((*cat)->Read(i, WholeTensor(t.shape), got.data(), CpuOptions{1}).ok());
    EXPECT_EQ(got, f.values.at(t.name));
  }
  std::vector<std::string> files = {path};
  if (auto d = DistCatalog::Open(path); d.ok()) files = (*d)->rank_files();
  for (const std::string& file : files) {
    auto s = H5Store::Open(file);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    const auto rep = (*s)->Verify(CpuOptions{1});
    for (const auto& p : rep.problems) ADD_FAILURE() << file << ": " << p.status.ToString();
  }
}

// Per tensor: {chunks copied, chunks encoded}.
inline std::map<std::string, std::pair<uint64_t, uint64_t>> Counts(const ReshardReport& r) {
  std::map<std::string, std::pair<uint64_t, uint64_t>> m;
  for (const auto& row : r.rows)
    if (!row.lazy) m[row.name] = {row.chunks_copied, row.chunks_encoded};
  return m;
}

// The path of rank r's file of the distributed save at `save` ("" when it does not open).
inline std::string RankFileOf(const std::string& save, int r) {
  auto d = DistCatalog::Open(save);
  return d.ok() ? (*d)->rank_files().at(r) : "";
}

// Finds the stored bytes of chunk j of tensor `name` in `file` and flips one byte in their
// middle (the chunk must be unique in the file).
inline void CorruptChunk(const std::string& file, const std::string& name, uint64_t j) {
  std::string bytes;
  {
    auto s = H5Store::Open(file);
    ASSERT_TRUE(s.ok());
    StoredChunk c;
    ASSERT_TRUE((*s)->ReadStoredChunk((*s)->Find(name), j, &c).ok());
    bytes.assign(c.bytes.begin(), c.bytes.end());
  }
  std::string all = ranktest::ReadAll(file);
  const size_t at = all.find(bytes);
  ASSERT_NE(at, std::string::npos);
  ASSERT_EQ(all.find(bytes, at + 1), std::string::npos);
  all[at + bytes.size() / 2] ^= 0x20;
  std::ofstream(file, std::ios::binary | std::ios::trunc) << all;
}

// Edits row `row` of the chunk-info table of tensor `name` in store `file` (HDF5 C API).
// Edits row `row` of tensor `name`'s chunk-info table in `file`; with `keep_hash`, the table's
// own hash (seedstore.xxh3, docs/FORMAT.md 4.3) is updated to match, as a writer that got the
// row wrong would have written it; else it is left (table-corrupt at open).
inline void EditChunkInfo(const std::string& file, const std::string& name, uint64_t row,
                          const std::function<void(uint64_t*)>& edit, bool keep_hash = true) {
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  hid_t d = H5Dopen2(f, ("/chunkinfo/" + EscapeH5Name(name)).c_str(), H5P_DEFAULT);
  ASSERT_GE(d, 0);
  hid_t sp = H5Dget_space(d);
  std::vector<uint64_t> rows(static_cast<size_t>(H5Sget_simple_extent_npoints(sp)));
  H5Dread(d, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows.data());
  edit(&rows[3 * row]);
  H5Dwrite(d, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows.data());
  if (keep_hash) {
    EXPECT_TRUE(testutil::SetTableHash(d, rows));
  }
  H5Sclose(sp);
  H5Dclose(d);
  H5Fclose(f);
}

// Replaces the /distributed/index of the master `file` by `edit`'s change of its JSON (with a
// fresh checksum and seal, as a writer would).
inline void EditIndex(const std::string& file, const std::function<void(nlohmann::json&)>& edit) {
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  std::string text = testutil::DatasetText(f, "/distributed/index");
  ASSERT_FALSE(text.empty()) << file;
  nlohmann::json j = nlohmann::json::parse(text);
  // The writer emits the index's text directly (MasterIndexText): it must be exactly the
  // compact dump, keys sorted, of the document it holds.
  EXPECT_EQ(j.dump(), text) << file;
  edit(j);
  text = j.dump();
  ASSERT_GE(H5Ldelete(f, "/distributed/index", H5P_DEFAULT), 0);
  hsize_t n = text.size();
  hid_t sp = H5Screate_simple(1, &n, nullptr);
  hid_t d =
      H5Dcreate2(f, "/distributed/index", H5T_STD_U8LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(d, 0);
  H5Dwrite(d, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, text.data());
  const uint64_t h = XXH3_64bits(text.data(), text.size());
  hid_t as = H5Screate(H5S_SCALAR);
  hid_t a = H5Acreate2(d, "seedstore.xxh3", H5T_STD_U64LE, as, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(a, H5T_NATIVE_UINT64, &h);
  H5Aclose(a);
  H5Sclose(as);
  H5Dclose(d);
  H5Sclose(sp);
  H5Fclose(f);
  ranktest::ResealMaster(file);
}

// Pieces off the source's chunk grid: prime extents, a 3 x 2 mesh, chunks [15, 9] (w) and
// [4, 6, 5] (x, replicated over "tensor"). Every piece is padded to the grid (each by at most
// a quarter; some in both dims), so every chunk is copied as stored; reads of any box, h5py
// through the virtual datasets, verify, the proofs, further reshards and corruption all see
// exactly the source's values.
inline const char* kPadSpec = R"({"seedstore": 1, "seed": 5, "tensors": [
   {"name": "w", "shape": [239, 139], "dtype": "bfloat16", "init": {"dist": "normal"}},
   {"name": "x", "shape": [61, 6, 10], "dtype": "float32", "init": {"dist": "uniform"}}]})";

inline std::string PadLayout(int dp, int tp) {
  return Write("rp_mesh" + std::to_string(dp) + "x" + std::to_string(tp) + ".json",
               R"({"mesh": {"axes": ["data", "tensor"], "shape": [)" + std::to_string(dp) + ", " +
                   std::to_string(tp) + R"(]},
 "placements": [{"match": "w", "spec": ["data", "tensor"]}, {"match": "x", "spec": ["data", null, null]}]})");
}

inline const RawFixture& GetPad() {
  static RawFixture f = MakeRawSource(kPadSpec, "rp_source.h5", 512);
  return f;
}

// ---- The master's datasets against the index (verify: vds-mismatch) -------------------------
//
// h5py users read the master's /tensors/<name> (virtual datasets stitching the rank files, or a
// scalar's plain copy), so verify checks them against /distributed/index. A 2-rank save of: w
// (boxes [0:5] / [5:10] of rows), fl (flat [0, 10) / [10, 20) of a [5, 4]: 3 runs each), long
// (flat pieces of 35,000 rows each: more than 65,536 runs, so no virtual dataset), s (a scalar),
// e (no elements), lz (lazy).
inline const char* kVdsSpec = R"({"seedstore": 1, "seed": 3, "tensors": [
   {"name": "w", "shape": [10, 8], "dtype": "float32", "init": {"dist": "normal"}},
   {"name": "fl", "shape": [5, 4], "dtype": "float32", "init": {"dist": "uniform"}},
   {"name": "long", "shape": [70000, 1], "dtype": "uint8", "init": {"dist": "zeros"}},
   {"name": "s", "shape": [], "dtype": "float64", "init": {"dist": "normal"}},
   {"name": "e", "shape": [0, 3], "dtype": "float32", "init": {"dist": "zeros"}},
   {"name": "lz", "shape": [4], "dtype": "float32", "init": {"dist": "normal"}}]})";

inline std::string VdsLayout() {
  return Write("rv_layout.json", R"({"mesh": {"axes": ["data"], "shape": [2]},
 "placements": [{"match": "w", "spec": ["data", null]}, {"match": "fl", "flat": ["data"]},
                {"match": "long", "flat": ["data"]}]})");
}

inline const RawFixture& GetVds() {
  static RawFixture f = MakeRawSource(kVdsSpec, "rv_source.h5", 4096);
  return f;
}

// A fresh save of GetVds() at TempDir()/<name>, of rank files of format `version`; their base
// names in *files. Version 1 by default: the checks of the master's mappings below are worked
// out for a dataset per piece (docs/FORMAT.md 10); version 2's cells have their own test.
inline std::string VdsSave(const std::string& name, std::vector<std::string>* files = nullptr,
                           int version = kStoreFormatVersion) {
  const std::string out = TempDir() + "/" + name;
  auto r = ReshardHere(GetVds().source, VdsLayout(), out, false, false, {}, version);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (files) {
    auto d = DistCatalog::Open(out);
    EXPECT_TRUE(d.ok());
    files->clear();
    if (d.ok())
      for (const std::string& f : (*d)->rank_files()) files->push_back(f.substr(f.rfind('/') + 1));
  }
  return out;
}

// h5py reads every global tensor of `save`, a save of GetVds(), through its master exactly (w,
// fl, long and s: the tensors with a dataset there); skipped visibly without h5py.
inline void ExpectH5pyReadsVds(const std::string& save) {
  const std::string py = PythonWithH5py();
  if (py.empty()) {
    std::printf("SKIPPED h5py part: no python with h5py + hdf5plugin (SEEDSTORE_PYTHON)\n");
    return;
  }
  Proc p = H5pyCompare(py, GetVds().source, save);
  EXPECT_EQ(p.code, 0) << p.out << p.err;
  EXPECT_NE(p.out.find("h5py-ok 4"), std::string::npos) << p.out << p.err;
}

// The messages of the problems DistCatalog::Verify finds in the save at `path`.
inline std::vector<std::string> VerifyProblems(const std::string& path) {
  auto d = DistCatalog::Open(path);
  if (!d.ok()) return {"open: " + d.status().ToString()};
  std::vector<std::string> out;
  for (const auto& p : (*d)->Verify(CpuOptions{1}).problems) {
    EXPECT_EQ(p.status.code(), Code::kCorrupt) << p.status.ToString();
    out.push_back(p.status.message());
  }
  return out;
}

// Opens HDF5 file `file` for writing, runs `edit` on it, closes it; a master is sealed anew
// (as a writer that made those objects would have), so that verify's checks of them are reached.
inline void EditH5(const std::string& file, const std::function<void(hid_t)>& edit) {
  const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0) << file;
  edit(f);
  ASSERT_GE(H5Fclose(f), 0);
  ranktest::ResealMaster(file);
}

// One mapping of a virtual dataset, as plain numbers (bounds of its two box selections; HDF5
// does not keep the source dataspace's extent: sdims is what it reports, the selection's end).
struct TestMapping {
  std::vector<hsize_t> vstart, vcount, sdims, sstart, scount;
  std::string file, dset;
};

inline std::vector<hsize_t> Dims(hid_t space) {
  std::vector<hsize_t> d(static_cast<size_t>(std::max(H5Sget_simple_extent_ndims(space), 0)));
  H5Sget_simple_extent_dims(space, d.data(), nullptr);
  return d;
}

// The box a dataspace selects: start and count.
inline void Box(hid_t space, std::vector<hsize_t>* start, std::vector<hsize_t>* count) {
  const size_t n = Dims(space).size();
  std::vector<hsize_t> lo(n), hi(n);
  EXPECT_GE(H5Sget_select_bounds(space, lo.data(), hi.data()), 0);
  *start = lo;
  count->resize(n);
  for (size_t d = 0; d < n; ++d) (*count)[d] = hi[d] - lo[d] + 1;
}

inline std::vector<TestMapping> Mappings(hid_t dset) {
  std::vector<TestMapping> out;
  const hid_t dcpl = H5Dget_create_plist(dset);
  size_t n = 0;
  EXPECT_GE(H5Pget_virtual_count(dcpl, &n), 0);
  for (size_t k = 0; k < n; ++k) {
    TestMapping m;
    const hid_t vs = H5Pget_virtual_vspace(dcpl, k), ss = H5Pget_virtual_srcspace(dcpl, k);
    Box(vs, &m.vstart, &m.vcount);
    Box(ss, &m.sstart, &m.scount);
    m.sdims = Dims(ss);
    char buf[4096];
    H5Pget_virtual_filename(dcpl, k, buf, sizeof buf);
    m.file = buf;
    H5Pget_virtual_dsetname(dcpl, k, buf, sizeof buf);
    m.dset = buf;
    H5Sclose(vs);
    H5Sclose(ss);
    out.push_back(m);
  }
  H5Pclose(dcpl);
  return out;
}

// Copies every attribute of `from` onto `to` (raw bytes; fixed-size types only).
inline void CopyAttrs(hid_t from, hid_t to) {
  H5O_info_t info;
  ASSERT_GE(H5Oget_info(from, &info), 0);
  for (hsize_t k = 0; k < info.num_attrs; ++k) {
    const hid_t a =
        H5Aopen_by_idx(from, ".", H5_INDEX_NAME, H5_ITER_INC, k, H5P_DEFAULT, H5P_DEFAULT);
    char name[256];
    H5Aget_name(a, sizeof name, name);
    const hid_t ty = H5Aget_type(a), sp = H5Aget_space(a);
    std::vector<unsigned char> v(H5Tget_size(ty) *
                                 static_cast<size_t>(H5Sget_simple_extent_npoints(sp)));
    H5Aread(a, ty, v.data());
    const hid_t b = H5Acreate2(to, name, ty, sp, H5P_DEFAULT, H5P_DEFAULT);
    EXPECT_GE(H5Awrite(b, ty, v.data()), 0);
    H5Aclose(b);
    H5Sclose(sp);
    H5Tclose(ty);
    H5Aclose(a);
  }
}

// Replaces the virtual dataset at `path` of the open master `f` by one whose mappings are
// `edit`'s change of its own (same shape and attributes; HDF5 type `type` when >= 0).
inline void RewriteVds(hid_t f, const std::string& path,
                       const std::function<void(std::vector<TestMapping>&)>& edit,
                       hid_t type = -1) {
  const hid_t d = H5Dopen2(f, path.c_str(), H5P_DEFAULT);
  ASSERT_GE(d, 0) << path;
  std::vector<TestMapping> ms = Mappings(d);
  ASSERT_FALSE(ms.empty());
  edit(ms);
  const hid_t space = H5Dget_space(d);
  const hid_t ty = type >= 0 ? H5Tcopy(type) : H5Dget_type(d);
  const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  for (const TestMapping& m : ms) {
    const hid_t vs = H5Scopy(space);
    H5Sselect_hyperslab(vs, H5S_SELECT_SET, m.vstart.data(), nullptr, m.vcount.data(), nullptr);
    std::vector<hsize_t> sdims = m.sdims;  // HDF5 keeps no source extent: room for the selection
    for (size_t k = 0; k < sdims.size(); ++k)
      sdims[k] = std::max(sdims[k], m.sstart[k] + m.scount[k]);
    const hid_t ss = H5Screate_simple(static_cast<int>(sdims.size()), sdims.data(), nullptr);
    H5Sselect_hyperslab(ss, H5S_SELECT_SET, m.sstart.data(), nullptr, m.scount.data(), nullptr);
    EXPECT_GE(H5Pset_virtual(dcpl, vs, m.file.c_str(), m.dset.c_str(), ss), 0);
    H5Sclose(vs);
    H5Sclose(ss);
  }
  const hid_t nd = H5Dcreate2(f, "/tensors/rewritten", ty, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  ASSERT_GE(nd, 0);
  CopyAttrs(d, nd);
  H5Dclose(nd);
  H5Pclose(dcpl);
  H5Tclose(ty);
  H5Sclose(space);
  H5Dclose(d);
  ASSERT_GE(H5Ldelete(f, path.c_str(), H5P_DEFAULT), 0);
  ASSERT_GE(H5Lmove(f, "/tensors/rewritten", f, path.c_str(), H5P_DEFAULT, H5P_DEFAULT), 0);
}

// A small plain dataset at `path` of the open file `f`.
inline void AddPlainDataset(hid_t f, const std::string& path) {
  hsize_t n = 3;
  const hid_t sp = H5Screate_simple(1, &n, nullptr);
  const hid_t d =
      H5Dcreate2(f, path.c_str(), H5T_IEEE_F32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(d, 0) << path;
  const float v[3] = {1, 2, 3};
  EXPECT_GE(H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v), 0);
  H5Dclose(d);
  H5Sclose(sp);
}

}  // namespace seedstore::reshardtest
