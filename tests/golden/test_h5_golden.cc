// Golden store files (tests/golden/errors/): a good store that must keep reading back exactly,
// and broken variants -- truncated, flipped byte in a chunk, wrong magic, wrong version, not
// HDF5, missing attribute, dataset shape not matching its record, unknown filter, bad index
// checksum -- that must each fail with their own named error (docs/FORMAT.md "Errors"), in the
// library and through `seedstore verify`.
//
// The files are checked in. All but chunk_info_sum.h5 were written before chunk-info tables
// existed (docs/FORMAT.md 4.3), so they also pin that such files still read and verify; the
// generator writes current files. They are produced by the DISABLED_Regenerate test below:
//   seedstore_golden_tests --gtest_also_run_disabled_tests --gtest_filter='*Regenerate*'
// and the same generator also runs into a temporary folder on every test run, so a format
// change that breaks either the checked-in files or the generator is caught.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/h5store.h"
#include "tests/store_test_util.h"

namespace seedstore {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// The checked-in files: $SEEDSTORE_SOURCE_DIR/tests/golden/errors, else next to this source.
std::string GoldenDir() {
  if (const char* s = std::getenv("SEEDSTORE_SOURCE_DIR"))
    return std::string(s) + "/tests/golden/errors";
  return (fs::path(__FILE__).parent_path() / "errors").string();
}

// The CLI: $SEEDSTORE_BIN, else ../tools/seedstore beside this test binary's folder.
std::string CliPath() {
  if (const char* b = std::getenv("SEEDSTORE_BIN")) return b;
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  const fs::path p = self.parent_path().parent_path() / "tools" / "seedstore";
  return fs::exists(p) ? p.string() : "";
}

// The good store's dense tensor: w[i][j] = i * 1000 + j + 0.25 (float32), shape [64, 32].
constexpr uint64_t kRows = 64, kCols = 32;
float WValue(uint64_t i, uint64_t j) { return static_cast<float>(i * 1000 + j) + 0.25f; }

TensorSpec LazySpec() {
  TensorSpec t;
  t.name = "lazy.weight";
  t.shape = {8, 8};
  t.dtype = DType::kBF16;
  t.init.dist = Dist::kNormal;
  t.init.scale = 0.02;
  return t;
}

Status WriteGood(const std::string& path) {
  WriteOptions wo;
  wo.chunk_bytes = 1024;  // 8 chunks of [16, 16], a 4 x 2 grid: chunk 3 is at [16, 16]
  wo.threads = 1;
  SEEDSTORE_ASSIGN_OR_RETURN(auto w, StoreWriter::Create(path, 42, Generator::kThreefry, wo));
  SEEDSTORE_RETURN_IF_ERROR(w->AddLazy(LazySpec()));
  SEEDSTORE_RETURN_IF_ERROR(
      w->AddDense("w", {kRows, kCols}, DType::kF32, [](const Region& b, void* out) {
        auto* f = static_cast<float*>(out);
        for (uint64_t i = b.start[0]; i < b.stop[0]; ++i)
          for (uint64_t j = b.start[1]; j < b.stop[1]; ++j) *f++ = WValue(i, j);
        return Status::Ok();
      }));
  return w->Commit();
}

// ---- tampering with the HDF5 C API ------------------------------------------------------------

using File = testutil::H5File;
using testutil::RewriteIndex;

void SetStringAttr(hid_t obj, const char* name, const std::string& v) {
  if (H5Aexists(obj, name) > 0) H5Adelete(obj, name);
  hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, H5T_VARIABLE);
  hid_t s = H5Screate(H5S_SCALAR);
  hid_t a = H5Acreate2(obj, name, t, s, H5P_DEFAULT, H5P_DEFAULT);
  const char* p = v.c_str();
  H5Awrite(a, t, &p);
  H5Aclose(a);
  H5Sclose(s);
  H5Tclose(t);
}

void SetIntAttr(hid_t obj, const char* name, int32_t v) {
  if (H5Aexists(obj, name) > 0) H5Adelete(obj, name);
  hid_t s = H5Screate(H5S_SCALAR);
  hid_t a = H5Acreate2(obj, name, H5T_STD_I32LE, s, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(a, H5T_NATIVE_INT32, &v);
  H5Aclose(a);
  H5Sclose(s);
}

// Replaces /tensors/w by the same data, attributes and chunks compressed with deflate (id 1).
// Re-creates /tensors/w with the same values and attributes as an HDF5 dataset of type
// `type`, chunked with deflate (`deflate`) or contiguous -- what a third-party writer might
// produce; seedstore must refuse each, naming what is wrong.
void ReplaceW(const std::string& path, hid_t type, bool deflate) {
  File f(path);
  hid_t d = H5Dopen2(f.id, "/tensors/w", H5P_DEFAULT);
  std::vector<float> data(kRows * kCols);
  H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data());
  uint64_t fp[2];
  hid_t a = H5Aopen(d, "seedstore.fingerprint", H5P_DEFAULT);
  H5Aread(a, H5T_NATIVE_UINT64, fp);
  H5Aclose(a);
  H5Dclose(d);
  H5Ldelete(f.id, "/tensors/w", H5P_DEFAULT);
  const hsize_t dims[2] = {kRows, kCols}, chunk[2] = {8, kCols};
  hid_t space = H5Screate_simple(2, dims, nullptr);
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  if (deflate) {
    H5Pset_chunk(dcpl, 2, chunk);
    H5Pset_deflate(dcpl, 6);
  }
  d = H5Dcreate2(f.id, "/tensors/w", type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data());
  SetStringAttr(d, "seedstore.name", "w");
  SetStringAttr(d, "seedstore.dtype", "float32");
  const hsize_t two = 2;
  hid_t s2 = H5Screate_simple(1, &two, nullptr);
  a = H5Acreate2(d, "seedstore.fingerprint", H5T_STD_U64LE, s2, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(a, H5T_NATIVE_UINT64, fp);
  H5Aclose(a);
  H5Sclose(s2);
  H5Dclose(d);
  H5Pclose(dcpl);
  H5Sclose(space);
}

struct Case {
  const char* file;
  const char* error;  // StoreError name, or "" for the good file
  Code code;
  const char* detail;  // another substring the message must hold
  enum When {
    kOpen,
    kTensor,
    kChunk
  } when;  // fails in Open; damages tensor 'w' (Open
           // succeeds, H5Store::Damage); or a chunk of it
};

const Case kCases[] = {
    {"good.h5", "", Code::kOk, "", Case::kChunk},
    {"truncated.h5", "truncated", Code::kCorrupt, "truncated", Case::kOpen},
    {"flipped_chunk_byte.h5", "chunk-corrupt", Code::kCorrupt, "tensor 'w' chunk 3", Case::kChunk},
    {"bad_magic.h5", "bad-magic", Code::kCorrupt, "'not-seedstore'", Case::kOpen},
    {"not_hdf5.h5", "not-hdf5", Code::kCorrupt, "no superblock signature", Case::kOpen},
    {"bad_version.h5", "unsupported-version", Code::kUnsupported, "format version 99", Case::kOpen},
    {"missing_attribute.h5", "missing-attribute", Code::kCorrupt, "'seedstore.dtype'",
     Case::kTensor},
    {"shape_mismatch.h5", "shape-mismatch", Code::kCorrupt,
     "[64, 32] differs from the record's [32, 64]", Case::kTensor},
    {"unknown_filter.h5", "unknown-filter", Code::kUnsupported, "filter id 1 (deflate)",
     Case::kTensor},
    {"bad_index_checksum.h5", "bad-index", Code::kCorrupt, "checksum mismatch", Case::kOpen},
    {"chunk_info_sum.h5", "fingerprint-mismatch", Code::kCorrupt, "/chunkinfo/w", Case::kTensor},
    // A 4-byte float whose exponent bias is not IEEE's: the same class, size and order.
    {"float_fields.h5", "dtype-mismatch", Code::kCorrupt, "HDF5 type does not store float32",
     Case::kTensor},
    {"table_corrupt.h5", "table-corrupt", Code::kCorrupt,
     "checksum table /checksums/w does not match its hash", Case::kTensor},
    {"not_chunked.h5", "bad-layout", Code::kCorrupt,
     "tensor 'w': a tensor of 2048 elements stored without chunks", Case::kTensor},
};

Status Generate(const std::string& dir) {
  fs::create_directories(dir);
  auto p = [&](const char* f) { return dir + "/" + f; };
  for (const Case& c : kCases) {
    fs::remove(p(c.file));
    if (std::string(c.file) != "not_hdf5.h5") SEEDSTORE_RETURN_IF_ERROR(WriteGood(p(c.file)));
  }
  RegisterZstdFilter();
  fs::resize_file(p("truncated.h5"), fs::file_size(p("truncated.h5")) * 6 / 10);
  if (!testutil::FlipChunkByte(p("flipped_chunk_byte.h5"), "w", {16, 16}, 0x01))
    return Internal("cannot flip a byte of chunk [16, 16]");
  {
    File f(p("bad_magic.h5"));
    SetStringAttr(f.id, "seedstore.format", "not-seedstore");
  }
  std::ofstream(p("not_hdf5.h5")) << "{\"seedstore\": 1, \"this is\": \"not an HDF5 file\"}\n";
  {
    File f(p("bad_version.h5"));
    SetIntAttr(f.id, "seedstore.version", 99);
  }
  {
    File f(p("missing_attribute.h5"));
    hid_t d = H5Dopen2(f.id, "/tensors/w", H5P_DEFAULT);
    H5Adelete(d, "seedstore.dtype");
    H5Dclose(d);
  }
  RewriteIndex(
      p("shape_mismatch.h5"),
      [](json& j) {
        for (auto& t : j["tensors"])
          if (t["name"] == "w") t["shape"] = {kCols, kRows};
      },
      true);
  ReplaceW(p("unknown_filter.h5"), H5T_IEEE_F32LE, true);
  {
    hid_t t = H5Tcopy(H5T_IEEE_F32LE);
    H5Tset_ebias(t, 100);
    ReplaceW(p("float_fields.h5"), t, false);
    H5Tclose(t);
  }
  ReplaceW(p("not_chunked.h5"), H5T_IEEE_F32LE, false);
  RewriteIndex(
      p("bad_index_checksum.h5"), [](json&) {}, false);
  {  // chunk 3's fingerprint in the chunk-info table no longer adds up to the record's
    File f(p("chunk_info_sum.h5"));
    hid_t d = H5Dopen2(f.id, "/chunkinfo/w", H5P_DEFAULT);
    std::vector<uint64_t> rows(8 * 3);
    H5Dread(d, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows.data());
    rows[3 * 3 + 1] ^= 1;
    H5Dwrite(d, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows.data());
    testutil::SetTableHash(d, rows);  // a writer's bug, not damage: the table's own hash agrees
    H5Dclose(d);
  }
  {  // an entry of the checksum table flipped, its hash left: the chunks are intact
    File f(p("table_corrupt.h5"));
    hid_t d = H5Dopen2(f.id, "/checksums/w", H5P_DEFAULT);
    std::vector<uint64_t> sums(8);
    H5Dread(d, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, sums.data());
    sums[5] ^= 1ull << 40;
    H5Dwrite(d, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, sums.data());
    H5Dclose(d);
  }
  return Status::Ok();
}

std::string RunCli(const std::string& args, int* rc) {
  const std::string bin = CliPath();
  if (bin.empty()) return "";
  std::string out;
  FILE* f = popen(("'" + bin + "' " + args + " 2>&1").c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  const int st = pclose(f);
  *rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return out;
}

void CheckGood(const std::string& path) {
  auto st = H5Store::Open(path);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  ASSERT_EQ((*st)->tensors().size(), 2u);
  // Dense values exactly as written.
  std::vector<float> w(kRows * kCols);
  ASSERT_TRUE((*st)->Read(1, WholeTensor({kRows, kCols}), w.data()).ok());
  for (uint64_t i = 0; i < kRows; ++i)
    for (uint64_t j = 0; j < kCols; ++j) ASSERT_EQ(w[i * kCols + j], WValue(i, j));
  // The lazy tensor equals a fresh resolution of its spec under root seed 42.
  auto lazy = LazyTensor::Resolve(LazySpec(), 42);
  ASSERT_TRUE(lazy.ok());
  std::vector<uint16_t> a(64), b(64);
  ASSERT_TRUE((*st)->Read(0, WholeTensor({8, 8}), a.data()).ok());
  ASSERT_TRUE(lazy->Materialize(WholeTensor({8, 8}), b.data()).ok());
  EXPECT_EQ(a, b);
  EXPECT_EQ(*(*st)->tensors()[0].fingerprint, *lazy->FingerprintWhole());
  auto rep = (*st)->Verify();
  EXPECT_TRUE(rep.problems.empty());
}

void CheckCase(const std::string& dir, const Case& c) {
  SCOPED_TRACE(std::string(c.file));
  const std::string path = dir + "/" + c.file;
  ASSERT_TRUE(fs::exists(path)) << path;
  if (c.code == Code::kOk) {
    CheckGood(path);
    return;
  }
  auto st = H5Store::Open(path);
  Status s;
  if (c.when == Case::kOpen) {
    ASSERT_FALSE(st.ok());
    s = st.status();
  } else {
    ASSERT_TRUE(st.ok()) << st.status().ToString();
    std::vector<float> w(kRows * kCols);
    s = (*st)->Read(1, WholeTensor({kRows, kCols}), w.data());
    EXPECT_EQ((*st)->Damage(1).ToString(), c.when == Case::kTensor ? s.ToString() : "OK");
    auto rep = (*st)->Verify();
    ASSERT_EQ(rep.problems.size(), 1u);
    EXPECT_EQ(rep.problems[0].tensor, "w");
    EXPECT_EQ(rep.problems[0].chunk, c.when == Case::kTensor ? -1 : 3);
    // The other tensor (lazy) reads and verifies: the damage is w's alone.
    EXPECT_TRUE((*st)->Damage(0).ok());
    EXPECT_TRUE(rep.ok[0]);
    std::vector<uint16_t> a(64);
    EXPECT_TRUE((*st)->Read(0, WholeTensor({8, 8}), a.data()).ok());
  }
  EXPECT_EQ(s.code(), c.code) << s.ToString();
  EXPECT_EQ(s.message().rfind(std::string(c.error) + ": ", 0), 0u) << s.message();
  EXPECT_NE(s.message().find(c.detail), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(c.file), std::string::npos)
      << "message must name the file: " << s.message();
  // The CLI: non-zero exit (1 + code) with the named error.
  int rc = 0;
  const std::string out = RunCli("verify '" + path + "'", &rc);
  if (!CliPath().empty()) {
    EXPECT_EQ(rc, 1 + static_cast<int>(c.code)) << out;
    EXPECT_NE(out.find(c.error), std::string::npos) << out;
  }
}

TEST(H5Golden, CheckedInFiles) {
  for (const Case& c : kCases) CheckCase(GoldenDir(), c);
}

TEST(H5Golden, GeneratorStillProducesEachError) {
  char tmpl[] = "/tmp/seedstore-golden-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  ASSERT_TRUE(Generate(dir).ok());
  for (const Case& c : kCases) CheckCase(dir, c);
  fs::remove_all(dir);
}

TEST(H5Golden, DISABLED_Regenerate) { ASSERT_TRUE(Generate(GoldenDir()).ok()); }

}  // namespace
}  // namespace seedstore
