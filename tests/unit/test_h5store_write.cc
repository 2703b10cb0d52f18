// Writing HDF5 stores: commits in item order, byte-identical files whatever the thread count,
// lazy and dense tensors mixed and replaced, an uncommitted writer leaves the previous file
// (I5), writer errors, names that are not HDF5 link names.
#include "tests/unit/h5store_test_util.h"

namespace seedstore {
namespace {

using namespace h5storetest;  // NOLINT

// ParallelForInOrder: commits run in item order, one at a time, each in the slot its work used
// and that no other item held meanwhile; work runs ahead of the commits (a thread goes on in
// its second slot); after an error in work or commit, nothing later is committed.
TEST(ParallelForInOrder, CommitsInItemOrderWithSlotsHeldUntilCommitted) {
  for (int threads : {1, 2, 3, 8}) {
    SCOPED_TRACE(threads);
    const uint64_t n = 400;
    const int slots = InOrderSlots(threads);
    EXPECT_EQ(slots, threads > 1 ? 2 * threads : 1);
    std::vector<std::atomic<int64_t>> owner(slots);  // the item a slot holds, -1: none
    for (auto& o : owner) o = -1;
    std::vector<int> slot_of(n, -1);
    std::vector<uint64_t> order;
    std::atomic<int> committing{0}, max_ahead{0};
    std::atomic<uint64_t> done_work{0};
    auto work = [&](uint64_t j, int slot) -> Status {
      if (slot < 0 || slot >= slots) return Internal("slot out of range");
      int64_t none = -1;
      if (!owner[slot].compare_exchange_strong(none, static_cast<int64_t>(j)))
        return Internal("slot " + std::to_string(slot) + " reused before its commit");
      slot_of[j] = slot;
      // Uneven work, so that items finish out of order.
      std::this_thread::sleep_for(
          std::chrono::microseconds((j * 7919) % 13 == 0 ? 2000 : (j % 5) * 50));
      ++done_work;
      return Status::Ok();
    };
    auto commit = [&](uint64_t j, int slot) -> Status {
      if (committing.fetch_add(1) != 0) return Internal("two commits at once");
      if (owner[slot].load() != static_cast<int64_t>(j) || slot_of[j] != slot)
        return Internal("commit of item " + std::to_string(j) + " in another slot");
      order.push_back(j);
      max_ahead = std::max<int>(max_ahead, static_cast<int>(done_work.load() - order.size()));
      owner[slot] = -1;
      committing.fetch_sub(1);
      return Status::Ok();
    };
    const Status st = ParallelForInOrder(n, threads, work, commit);
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_EQ(order.size(), n);
    for (uint64_t j = 0; j < n; ++j) ASSERT_EQ(order[j], j);
    if (threads > 1) {
      EXPECT_GT(max_ahead.load(), 0);  // work ran ahead of the commits
    }
    EXPECT_LE(max_ahead.load(), slots);

    // An error in work (item 97) or in commit (item 131): it is returned, nothing after that
    // item is committed, and every item before it that is committed came in order.
    for (bool in_commit : {false, true}) {
      const uint64_t bad = in_commit ? 131 : 97;
      std::vector<uint64_t> got;
      std::mutex mu;
      const Status e = ParallelForInOrder(
          n, threads,
          [&](uint64_t j, int) -> Status {
            std::this_thread::sleep_for(std::chrono::microseconds((j % 3) * 40));
            if (!in_commit && j == bad) throw std::runtime_error("work failed");
            return Status::Ok();
          },
          [&](uint64_t j, int) -> Status {
            std::lock_guard<std::mutex> l(mu);
            got.push_back(j);
            return in_commit && j == bad ? Status(Code::kIo, "commit failed") : Status::Ok();
          });
      EXPECT_EQ(e.code(), in_commit ? Code::kIo : Code::kInternal) << e.ToString();
      EXPECT_NE(e.message().find(in_commit ? "commit failed" : "work failed"), std::string::npos);
      for (size_t k = 0; k < got.size(); ++k) EXPECT_EQ(got[k], k);
      EXPECT_LE(got.size(), in_commit ? bad + 1 : bad);
      if (threads == 1) {
        EXPECT_EQ(got.size(), in_commit ? bad + 1 : bad);
      }
    }
  }
}

// A store's bytes are a function of what is written and the write options, never of the
// thread count or of when it was written: chunks lie in the file in index order whatever
// order the threads finish them in, and no HDF5 object records a time. Dense tensors of many
// chunks (edge chunks, every other chunk copied as stored from another store, chunks finishing
// out of order), lazy ones, a scalar, an empty tensor and a bool tensor; written with 1, 2, 3
// and 8 threads, and again a second later.
TEST(H5Store, FilesAreByteIdenticalWhateverTheThreadCount) {
  TempDir dir;
  auto Name = [](size_t k) {
    std::string n = "t";
    return n += std::to_string(k);
  };
  WriteOptions base;
  base.chunk_bytes = 4096;
  const Shape shape{37, 211}, chunk{8, 32};  // 5 x 7 chunks, edges in both dims
  std::vector<std::vector<uint8_t>> data;
  const DType dts[] = {DType::kBF16, DType::kF32, DType::kBool, DType::kI64};
  for (DType dt : dts) {
    std::vector<uint8_t> v = RandomBytes(Numel(shape) * DTypeSize(dt), 17 + data.size());
    if (dt == DType::kBool)
      for (auto& b : v) b &= 1;
    data.push_back(std::move(v));
  }
  // The store whose chunks are copied.
  {
    auto w = StoreWriter::Create(dir / "from.h5", 3, Generator::kThreefry, base);
    ASSERT_TRUE(w.ok());
    DenseChunking ch;
    ch.chunk = chunk;
    for (size_t k = 0; k < data.size(); ++k)
      ASSERT_TRUE((*w)->AddDense(Name(k), shape, dts[k], data[k].data(), {}, ch).ok());
    ASSERT_TRUE((*w)->Commit().ok());
  }
  auto from = H5Store::Open(dir / "from.h5");
  ASSERT_TRUE(from.ok());
  ASSERT_EQ((*from)->stored(0).num_chunks, 35u);
  TensorSpec lazy;
  lazy.name = "lazy";
  lazy.shape = {5, 7};
  lazy.dtype = DType::kF32;
  lazy.init.dist = Dist::kNormal;
  const std::vector<uint8_t> scalar = RandomBytes(8, 5);
  auto write = [&](const std::string& path, int threads) {
    WriteOptions o = base;
    o.threads = threads;
    auto w = StoreWriter::Create(path, 3, Generator::kThreefry, o);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->AddLazy(lazy).ok());
    for (size_t k = 0; k < data.size(); ++k) {
      DenseChunking ch;
      ch.chunk = chunk;
      ch.raw = [&, k](uint64_t j, const Region&, StoredChunk* out) -> Result<bool> {
        // Chunks take uneven times, so that threads finish them out of order.
        std::this_thread::sleep_for(std::chrono::microseconds((j * 40503) % 7 * 300));
        if (j % 2 == 1) return false;
        SEEDSTORE_RETURN_IF_ERROR((*from)->ReadStoredChunk(k, j, out));
        return true;
      };
      const BoxSource src = FromWhole(&data[k], shape, DTypeSize(dts[k]));
      ASSERT_TRUE((*w)->AddDense(Name(k), shape, dts[k], src, {}, ch).ok());
    }
    ASSERT_TRUE((*w)->AddDense("scalar", Shape{}, DType::kF64, scalar.data()).ok());
    ASSERT_TRUE(
        (*w)->AddDense("empty", Shape{3, 0}, DType::kF32, static_cast<const void*>(nullptr)).ok());
    ASSERT_TRUE((*w)->Commit().ok());
    uint64_t half = 0;  // chunks 0, 2, 4, ... of each tensor are copied as stored
    for (size_t k = 0; k < data.size(); ++k) half += ((*from)->stored(k).num_chunks + 1) / 2;
    EXPECT_EQ((*w)->chunk_counts().copied, half);
    EXPECT_EQ(half, 4u * 18u);
  };
  auto bytes = [](const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    return std::vector<char>(std::istreambuf_iterator<char>(f), {});
  };
  write(dir / "t1.h5", 1);
  const std::vector<char> want = bytes(dir / "t1.h5");
  ASSERT_GT(want.size(), 100000u);
  for (int threads : {2, 3, 8}) {
    const std::string p = dir / ("t" + std::to_string(threads) + ".h5");
    write(p, threads);
    EXPECT_TRUE(bytes(p) == want) << threads << " threads: the file's bytes differ from 1 thread's";
  }
  sleep(1);  // HDF5 times have a resolution of one second
  write(dir / "later.h5", 2);
  EXPECT_TRUE(bytes(dir / "later.h5") == want) << "written a second later, the bytes differ";
  // No object records a time (H5Pset_obj_track_times off throughout).
  testutil::H5File f(dir / "t2.h5", H5F_ACC_RDONLY);
  ASSERT_GE(f.id, 0);
  int objects = 0;
  auto visit = [](hid_t, const char* name, const H5O_info_t* info, void* op) -> herr_t {
    ++*static_cast<int*>(op);
    if (info->atime || info->mtime || info->ctime || info->btime) {
      ADD_FAILURE() << "object '" << name << "' records a time";
    }
    return 0;
  };
  ASSERT_GE(H5Ovisit2(f.id, H5_INDEX_NAME, H5_ITER_NATIVE, visit, &objects, H5O_INFO_TIME), 0);
  EXPECT_GE(objects, 1 + 4 + 3 * 6 + 1);  // root, groups, 6 dense tensors' 3 objects, index
  auto r = H5Store::Open(dir / "t8.h5");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE((*r)->Verify().problems.empty());
  for (size_t k = 0; k < data.size(); ++k) {
    std::vector<uint8_t> got(data[k].size());
    ASSERT_TRUE((*r)->Read((*r)->Find(Name(k)), WholeTensor(shape), got.data()).ok());
    EXPECT_EQ(got, data[k]) << k;
  }
}

TEST(H5Store, LazyAndDenseMixAndReplace) {
  TempDir dir;
  const std::string path = dir / "mix.h5";
  ModelSpec m;
  m.seed = 1234;
  m.tensors = {Spec("a.weight", {64, 48}, DType::kBF16, Dist::kNormal, 0.02),
               Spec("b.bias", {48}, DType::kF32, Dist::kZeros),
               Spec("c/odd%name", {5, 5}, DType::kF16, Dist::kUniform)};
  auto spec_cat = SpecCatalog::Create(m, "mem");
  ASSERT_TRUE(spec_cat.ok());
  std::vector<uint8_t> dense = RandomBytes(30 * 4, 9);
  {
    auto w = StoreWriter::Create(path, m.seed);
    ASSERT_TRUE(w.ok());
    for (const auto& t : m.tensors) ASSERT_TRUE((*w)->AddLazy(t).ok());
    ASSERT_TRUE(
        (*w)->AddDense("d.trained", {5, 6}, DType::kF32, FromWhole(&dense, {5, 6}, 4)).ok());
    ASSERT_TRUE((*w)->Commit().ok());
  }
  auto cat = OpenCatalog(path);
  ASSERT_TRUE(cat.ok()) << cat.status().ToString();
  ASSERT_EQ((*cat)->tensors().size(), 4u);
  for (size_t i = 0; i < 3; ++i) {
    const TensorRecord& t = (*cat)->tensors()[i];
    ASSERT_TRUE(t.lazy != nullptr);
    std::vector<uint8_t> a(t.NumBytes()), b(t.NumBytes());
    ASSERT_TRUE((*cat)->Read(i, WholeTensor(t.shape), a.data()).ok());
    ASSERT_TRUE((*spec_cat)->Read(i, WholeTensor(t.shape), b.data()).ok());
    EXPECT_EQ(a, b) << t.name;
    ASSERT_TRUE(t.fingerprint.has_value());
    EXPECT_EQ(*t.fingerprint, *(*spec_cat)->FingerprintRegion(i, WholeTensor(t.shape)));
  }
  // Replace the lazy a.weight by "trained" values: lazy + 1 ulp.
  const TensorRecord a = (*cat)->tensors()[0];
  std::vector<uint8_t> trained(a.NumBytes());
  ASSERT_TRUE((*cat)->Read(0, WholeTensor(a.shape), trained.data()).ok());
  for (size_t k = 0; k < trained.size(); k += 2) trained[k] ^= 1;
  cat->reset();
  ASSERT_TRUE(ReplaceWithDense(path, {{"a.weight", FromWhole(&trained, a.shape, 2)}}).ok());
  auto st = H5Store::Open(path);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  const auto& ts = (*st)->tensors();
  ASSERT_EQ(ts.size(), 4u);
  EXPECT_FALSE(ts[0].lazy != nullptr);
  EXPECT_TRUE(ts[1].lazy != nullptr);
  EXPECT_TRUE((*st)->stored(3).dense);
  std::vector<uint8_t> got(a.NumBytes());
  ASSERT_TRUE((*st)->Read(0, WholeTensor(a.shape), got.data()).ok());
  EXPECT_EQ(got, trained);
  std::vector<uint8_t> d2(dense.size());
  ASSERT_TRUE((*st)->Read(3, WholeTensor({5, 6}), d2.data()).ok());
  EXPECT_EQ(d2, dense);
  auto rep = (*st)->Verify();
  EXPECT_TRUE(rep.problems.empty());
  EXPECT_EQ(rep.fingerprints[2], *(*spec_cat)->FingerprintRegion(2, WholeTensor({5, 5})));
}

TEST(H5Store, UncommittedWriterLeavesPreviousFile) {
  TempDir dir;
  const std::string path = dir / "a.h5";
  std::vector<uint8_t> one = RandomBytes(400, 1), two = RandomBytes(400, 2);
  {
    auto w = StoreWriter::Create(path, 0);
    ASSERT_TRUE((*w)->AddDense("x", {100}, DType::kF32, FromWhole(&one, {100}, 4)).ok());
    ASSERT_TRUE((*w)->Commit().ok());
  }
  {
    auto w = StoreWriter::Create(path, 0);
    ASSERT_TRUE((*w)->AddDense("x", {100}, DType::kF32, FromWhole(&two, {100}, 4)).ok());
    // destroyed without Commit
  }
  auto st = H5Store::Open(path);
  ASSERT_TRUE(st.ok());
  std::vector<uint8_t> got(400);
  ASSERT_TRUE((*st)->Read(0, WholeTensor({100}), got.data()).ok());
  EXPECT_EQ(got, one);
  int files = 0;
  for (auto& e : fs::directory_iterator(dir.path())) files += e.is_regular_file();
  EXPECT_EQ(files, 1);  // no temporary left behind
}

TEST(H5Store, WriterErrors) {
  TempDir dir;
  auto w = StoreWriter::Create(dir / "e.h5", 0);
  ASSERT_TRUE(w.ok());
  std::vector<uint8_t> v(16);
  ASSERT_TRUE((*w)->AddDense("x", {4}, DType::kF32, FromWhole(&v, {4}, 4)).ok());
  EXPECT_EQ((*w)->AddDense("x", {4}, DType::kF32, FromWhole(&v, {4}, 4)).code(),
            Code::kInvalidArgument);
  Status bad = (*w)->AddDense("y", {4}, DType::kF32,
                              [](const Region&, void*) { return IoError("source failed"); });
  EXPECT_EQ(bad.code(), Code::kIo);
  EXPECT_NE(bad.message().find("tensor 'y'"), std::string::npos);
  EXPECT_EQ(H5Store::Open(dir / "missing.h5").status().code(), Code::kNotFound);
}

TEST(H5Store, EscapedNames) {
  EXPECT_EQ(EscapeH5Name("a/b%c.d"), "a%2Fb%25c.d");
  EXPECT_EQ(EscapeH5Name(".."), "%2E%2E");
  EXPECT_EQ(EscapeH5Name("a.b"), "a.b");
}

}  // namespace
}  // namespace seedstore
