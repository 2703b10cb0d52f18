// What an HDF5 store reader refuses or names (I5): corrupt chunks on read and verify, bool
// bytes other than 0 or 1, integers of partial precision, links to other files; the file read
// is the one checked, also after the path is replaced, and descriptors are not leaked.
#include "tests/unit/h5store_test_util.h"

namespace seedstore {
namespace {

using namespace h5storetest;  // NOLINT

TEST(H5Store, CorruptChunkIsNamedOnReadAndVerify) {
  TempDir dir;
  const std::string path = dir / "c.h5";
  std::vector<uint8_t> data = RandomBytes(256 * 64 * 4, 5);
  WriteOptions wo;
  wo.chunk_bytes = 4096;
  {
    auto w = StoreWriter::Create(path, 0, Generator::kThreefry, wo);
    ASSERT_TRUE((*w)->AddDense("w", {256, 64}, DType::kF32, FromWhole(&data, {256, 64}, 4)).ok());
    ASSERT_TRUE((*w)->Commit().ok());
  }
  std::vector<uint64_t> chunk;
  {
    auto st0 = H5Store::Open(path);
    ASSERT_TRUE(st0.ok());
    chunk = (*st0)->stored(0).chunk;
    ASSERT_EQ(chunk.size(), 2u);
  }
  const uint64_t per_row = (64 + chunk[1] - 1) / chunk[1];
  ASSERT_TRUE(
      FlipChunkByte(path, "w", {5 / per_row * chunk[0], 5 % per_row * chunk[1]}));  // chunk 5
  auto st = H5Store::Open(path);
  ASSERT_TRUE(st.ok());
  std::vector<uint8_t> out(data.size());
  Status s = (*st)->Read(0, WholeTensor({256, 64}), out.data());
  EXPECT_EQ(s.code(), Code::kCorrupt);
  EXPECT_NE(s.message().find("chunk-corrupt"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("tensor 'w' chunk 5"), std::string::npos) << s.message();
  auto f = (*st)->FingerprintRegion(0, WholeTensor({256, 64}));
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("tensor 'w' chunk 5"), std::string::npos)
      << f.status().ToString();
  // A box that avoids the chunk still reads.
  Region ok = WholeTensor({256, 64});
  ok.stop[0] = 16;
  EXPECT_TRUE((*st)->Read(0, ok, out.data()).ok());
  EXPECT_TRUE((*st)->FingerprintRegion(0, ok).ok());
  auto rep = (*st)->Verify();
  ASSERT_EQ(rep.problems.size(), 1u);
  EXPECT_EQ(rep.problems[0].chunk, 5);
}

// A bool is stored as byte 0 or 1: the writer refuses any other byte, naming the element;
// verify names a chunk holding one (a file from elsewhere -- made here by copying the chunks
// of a uint8 tensor as stored, which the writer takes as they are).
TEST(H5Store, VerifyNamesBoolBytesOtherThanZeroOrOne) {
  TempDir dir;
  const std::string path = dir / "bools.h5", u8 = dir / "u8.h5";
  std::vector<uint8_t> v(300, 0);
  for (size_t k = 0; k < v.size(); k += 3) v[k] = 1;
  v[257] = 2;
  WriteOptions wo;
  wo.chunk_bytes = 128;
  {
    auto w = StoreWriter::Create(dir / "refused.h5", 7, Generator::kThreefry, wo);
    ASSERT_TRUE(w.ok());
    const Status st = (*w)->AddDense("b", {300}, DType::kBool, FromWhole(&v, {300}, 1));
    EXPECT_EQ(st.code(), Code::kInvalidArgument);
    EXPECT_NE(st.message().find(
                  "tensor 'b': bool element [257] holds byte 2; a bool is stored as 0 or 1"),
              std::string::npos)
        << st.ToString();
    std::vector<uint8_t> m(6 * 50, 1);
    m[4 * 50 + 7] = 255;  // element [4, 7]
    const Status st2 = (*w)->AddDense("m", {6, 50}, DType::kBool, FromWhole(&m, {6, 50}, 1));
    EXPECT_NE(st2.message().find("tensor 'm': bool element [4, 7] holds byte 255"),
              std::string::npos)
        << st2.ToString();
  }
  {
    auto w = StoreWriter::Create(u8, 7, Generator::kThreefry, wo);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->AddDense("b", {300}, DType::kU8, FromWhole(&v, {300}, 1)).ok());
    ASSERT_TRUE((*w)->Commit().ok());
  }
  auto src = H5Store::Open(u8);
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  {
    DenseChunking copy;
    copy.chunk = (*src)->stored(0).chunk;
    copy.raw = [&](uint64_t j, const Region&, StoredChunk* out) -> Result<bool> {
      SEEDSTORE_RETURN_IF_ERROR((*src)->ReadStoredChunk(0, j, out, true));
      return true;
    };
    auto w = StoreWriter::Create(path, 7, Generator::kThreefry, wo);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->AddDense("b", {300}, DType::kBool, FromWhole(&v, {300}, 1), {}, copy).ok());
    ASSERT_TRUE((*w)->Commit().ok());
  }
  auto st = H5Store::Open(path);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  ASSERT_EQ((*st)->stored(0).chunk.size(), 1u);
  const uint64_t c = (*st)->stored(0).chunk[0], j = 257 / c;
  ASSERT_GT((*st)->stored(0).num_chunks, 1u);
  const H5Store::VerifyReport rep = (*st)->Verify(CpuOptions{1});
  ASSERT_EQ(rep.problems.size(), 1u);
  EXPECT_EQ(rep.problems[0].chunk, static_cast<int64_t>(j));
  EXPECT_EQ(rep.problems[0].status.message().rfind(
                "chunk-corrupt: file '" + path + "' tensor 'b' chunk " + std::to_string(j) +
                    " at offset [" + std::to_string(j * c) + "]: bool element " +
                    std::to_string(257 - j * c) + " of the chunk holds byte 2",
                0),
            0u)
      << rep.problems[0].status.ToString();
}

// A 4-byte integer type with 16 bits of precision at offset 8 is not int32 (h5py reads other
// values than its raw bytes): dtype-mismatch. (A float's fields: tests/golden float_fields.h5.)
TEST(H5Store, PartialPrecisionIntegersAreNotTheDtype) {
  TempDir dir;
  const std::string p = dir / "i.h5";
  std::vector<uint8_t> data = RandomBytes(16 * 4, 3);
  {
    auto w = StoreWriter::Create(p, 0, Generator::kThreefry);
    ASSERT_TRUE((*w)->AddDense("i", {16}, DType::kI32, FromWhole(&data, {16}, 4)).ok());
    ASSERT_TRUE((*w)->Commit().ok());
  }
  {  // Re-create the dataset with the odd type: same chunks, filters and attributes.
    const hid_t f = H5Fopen(p.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    H5Lmove(f, "/tensors/i", f, "/old", H5P_DEFAULT, H5P_DEFAULT);
    const hid_t old = H5Dopen2(f, "/old", H5P_DEFAULT);
    const hid_t dcpl = H5Dget_create_plist(old), sp = H5Dget_space(old);
    const hid_t t = H5Tcopy(H5T_STD_I32LE);
    H5Tset_precision(t, 16);
    H5Tset_offset(t, 8);
    const hid_t d = H5Dcreate2(f, "/tensors/i", t, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    for (int k = 0; k < H5Aget_num_attrs(old); ++k) {
      const hid_t a =
          H5Aopen_by_idx(old, ".", H5_INDEX_NAME, H5_ITER_INC, k, H5P_DEFAULT, H5P_DEFAULT);
      char name[256];
      H5Aget_name(a, sizeof name, name);
      const hid_t at = H5Aget_type(a), as = H5Aget_space(a);
      std::vector<uint8_t> buf(H5Aget_storage_size(a) + 64);
      H5Aread(a, at, buf.data());
      const hid_t b = H5Acreate2(d, name, at, as, H5P_DEFAULT, H5P_DEFAULT);
      H5Awrite(b, at, buf.data());
      H5Aclose(b);
      H5Sclose(as);
      H5Tclose(at);
      H5Aclose(a);
    }
    H5Dclose(d);
    H5Tclose(t);
    H5Sclose(sp);
    H5Pclose(dcpl);
    H5Dclose(old);
    H5Fclose(f);
  }
  const Status st = testutil::OpenOrDamage(p);  // tensor 'i' damaged
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("dtype-mismatch: file '" + p +
                              "' tensor 'i': HDF5 type does not store int32"),
            std::string::npos)
      << st.ToString();
}

TEST(H5Store, LinksToOtherFilesAreRefused) {
  TempDir dir;
  const std::string a = dir / "a.h5", b = dir / "b.h5";
  std::vector<uint8_t> data = RandomBytes(64 * 64 * 4, 9);
  for (const std::string& p : {a, b}) {
    auto w = StoreWriter::Create(p, 0, Generator::kThreefry);
    ASSERT_TRUE((*w)->AddDense("w", {64, 64}, DType::kF32, FromWhole(&data, {64, 64}, 4)).ok());
    ASSERT_TRUE((*w)->Commit().ok());
  }
  struct Case {
    const char* link;  // replaced in a.h5
    bool external;
  };
  for (const Case& c :
       {Case{"/tensors/w", true}, Case{"/checksums", true}, Case{"/tensors/w", false}}) {
    SCOPED_TRACE(std::string(c.link) + (c.external ? " external" : " soft"));
    const std::string t = dir / "t.h5";
    std::filesystem::copy_file(a, t, std::filesystem::copy_options::overwrite_existing);
    {
      const hid_t f = H5Fopen(t.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
      ASSERT_GE(f, 0);
      if (!c.external) H5Lmove(f, c.link, f, "/moved", H5P_DEFAULT, H5P_DEFAULT);
      else H5Ldelete(f, c.link, H5P_DEFAULT);
      ASSERT_GE(c.external
                    ? H5Lcreate_external(b.c_str(), c.link, f, c.link, H5P_DEFAULT, H5P_DEFAULT)
                    : H5Lcreate_soft("/moved", f, c.link, H5P_DEFAULT, H5P_DEFAULT),
                0);
      H5Fclose(f);
    }
    const Status st = testutil::OpenOrDamage(t);  // tensor 'w' damaged (or the open refused)
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.code(), Code::kCorrupt);
    EXPECT_NE(st.message().find(std::string("bad-layout: file '") + t + "' tensor 'w': '" + c.link +
                                "' is " + (c.external ? "an external" : "a soft") + " link"),
              std::string::npos)
        << st.ToString();
  }
}

// Chunks are read at the addresses HDF5 reports, from the store's own file: a dataset (or its
// group) behind an external link lives in another file and was read wrong -- verify passed on
// bytes h5py never sees. Such links, and soft links, are refused, naming the link.
// Open checks every dataset and closes it; reads open the one they need and keep at most
// kOpenDatasets -- none for a tensor of at most kLocatedChunks chunks, whose chunk locations
// Open recorded. The file checked is the file read: a store renamed over the path after Open
// changes nothing for the open store.
TEST(H5Store, DatasetsAreClosedAfterOpenAndTheFileReadIsTheOneChecked) {
  TempDir dir;
  const std::string path = dir / "many.h5", other = dir / "other.h5";
  std::mt19937_64 g(41);
  std::vector<std::vector<uint8_t>> data;
  data.reserve(80);
  WriteOptions wo;
  wo.chunk_bytes = 64;
  for (const std::string& p : {path, other}) {
    auto w = StoreWriter::Create(p, 7, Generator::kThreefry, wo);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    for (int k = 0; k < 40; ++k) {  // t0-t29: 1-3 chunks; t30-t39: 15-45
      const Shape s{static_cast<uint64_t>(k < 30 ? 1 + k % 3 : 15 + k), 5};
      data.push_back(RandomBytes(Numel(s) * 4, g()));
      std::string name = "t";  // not "t" + to_string: GCC 12's -Wrestrict false positive
      name += std::to_string(k);
      ASSERT_TRUE((*w)->AddDense(name, s, DType::kF32, FromWhole(&data.back(), s, 4)).ok());
    }
    ASSERT_TRUE((*w)->Commit().ok());
  }
  auto st = H5Store::Open(path);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(H5Fget_obj_count((*st)->h5_file(), H5F_OBJ_DATASET), 0);
  for (size_t i = 0; i < 40; ++i) {
    EXPECT_EQ((*st)->stored(i).num_chunks <= H5Store::kLocatedChunks, i < 30) << i;
    EXPECT_GE((*st)->stored(i).num_chunks, 1u);
  }
  // Another store replaces the file at the path; the open store still reads its own.
  ASSERT_EQ(std::rename(other.c_str(), path.c_str()), 0);
  for (int pass = 0; pass < 2; ++pass)
    for (size_t i = 0; i < 40; ++i) {
      const TensorRecord& t = (*st)->tensors()[i];
      std::vector<uint8_t> got(t.NumBytes());
      ASSERT_TRUE((*st)->Read(i, WholeTensor(t.shape), got.data(), CpuOptions{2}).ok()) << t.name;
      ASSERT_EQ(got, data[i]) << t.name;
      auto f = (*st)->FingerprintRegion(i, WholeTensor(t.shape), CpuOptions{1});
      ASSERT_TRUE(f.ok());
      EXPECT_EQ(*f, *t.fingerprint);
      StoredChunk c;
      ASSERT_TRUE((*st)->ReadStoredChunk(i, 0, &c, true).ok()) << t.name;
      auto p = (*st)->ProveStored(i, CpuOptions{1});
      ASSERT_TRUE(p.ok()) << p.status().ToString();
      EXPECT_EQ(*p, *t.fingerprint);
      // No dataset opened for the few-chunk tensors in the first pass.
      EXPECT_LE(H5Fget_obj_count((*st)->h5_file(), H5F_OBJ_DATASET),
                pass == 0 && i < 30 ? 0 : static_cast<ssize_t>(H5Store::kOpenDatasets));
    }
  const H5Store::VerifyReport rep = (*st)->Verify(CpuOptions{2});
  EXPECT_TRUE(rep.problems.empty());
  EXPECT_EQ(rep.tensors, 40u);
}

// An open store keeps reading its own file, byte for byte, after another writer atomically
// replaces the path; opening and closing stores leaks no descriptor; stores open by the dozen
// under a tight descriptor limit; with no descriptor left, Open names an I/O error.
TEST(H5Store, OpenStoreReadsItsOwnFileAfterThePathIsReplaced) {
  TempDir dir;
  const std::string path = dir / "a.h5";
  const Shape shape = {257, 131};  // primes: edge chunks in both dimensions
  const uint64_t n = Numel(shape);
  std::vector<uint8_t> one = RandomBytes(n * 2, 11), two = RandomBytes(n * 2, 12);
  auto write = [&](const std::vector<uint8_t>& v) {
    WriteOptions o;
    o.chunk_bytes = 4096;  // many chunks
    auto w = StoreWriter::Create(path, 0, Generator::kThreefry, o);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->AddDense("x", shape, DType::kBF16, FromWhole(&v, shape, 2)).ok());
    ASSERT_TRUE((*w)->Commit().ok());
  };
  write(one);
  auto st = H5Store::Open(path);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  write(two);  // renamed over the path the store was opened from
  std::vector<uint8_t> got(n * 2);
  ASSERT_TRUE((*st)->Read(0, WholeTensor(shape), got.data(), CpuOptions{2}).ok());
  EXPECT_EQ(got, one);
  EXPECT_TRUE((*st)->Verify().problems.empty());
  auto again = H5Store::Open(path);
  ASSERT_TRUE(again.ok());
  ASSERT_TRUE((*again)->Read(0, WholeTensor(shape), got.data()).ok());
  EXPECT_EQ(got, two);

  if (!fs::exists("/proc/self/fd"))
    GTEST_SKIP() << "no /proc/self/fd: descriptor count not checked";
  auto open_fds = [] {
    int k = 0;
    for (auto it = fs::directory_iterator("/proc/self/fd"); it != fs::directory_iterator(); ++it)
      ++k;
    return k;
  };
  const int before = open_fds();
  for (int k = 0; k < 300; ++k) {
    auto s = H5Store::Open(path);
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE((*s)->Read(0, WholeTensor(shape), got.data()).ok());
  }
  EXPECT_EQ(open_fds(), before);

  // Under a tight descriptor limit (100 more than in use), 80 stores open at once.
  struct rlimit lim;
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &lim), 0);
  const struct rlimit saved = lim;
  lim.rlim_cur = static_cast<rlim_t>(before + 100);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &lim), 0);
  std::vector<std::string> paths;  // distinct files (HDF5 shares one descriptor per file)
  for (int k = 0; k < 80; ++k) {
    paths.push_back(dir / ("many-" + std::to_string(k) + ".h5"));
    std::error_code ec;
    fs::copy_file(path, paths.back(), ec);
    ASSERT_FALSE(ec) << ec.message();
  }
  std::vector<std::unique_ptr<H5Store>> held;
  Status failed;
  for (int k = 0; k < 80 && failed.ok(); ++k) {
    auto s = H5Store::Open(paths[k]);
    if (!s.ok()) failed = s.status();
    else held.push_back(std::move(*s));
  }
  const size_t opened = held.size();
  {  // no descriptor left: a named I/O error, not "not an HDF5 file"
    struct rlimit none = lim;
    const int lowest_free = dup(0);  // new descriptors take the lowest free number
    ASSERT_GE(lowest_free, 0);
    close(lowest_free);
    none.rlim_cur = static_cast<rlim_t>(lowest_free);
    ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &none), 0);
    auto s = H5Store::Open(paths[0]);
    ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &lim), 0);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.status().code(), Code::kIo) << s.status().ToString();
    EXPECT_NE(s.status().message().find("cannot open"), std::string::npos) << s.status().ToString();
    EXPECT_NE(s.status().message().find(paths[0]), std::string::npos) << s.status().ToString();
  }
  for (auto& s : held) {
    EXPECT_TRUE(s->Read(0, WholeTensor(shape), got.data()).ok());
    EXPECT_EQ(got, two);
  }
  held.clear();
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &saved), 0);
  EXPECT_TRUE(failed.ok()) << "store " << opened << " of 80: " << failed.ToString();
}

}  // namespace
}  // namespace seedstore
