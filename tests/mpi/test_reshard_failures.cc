// Distributed saves that go wrong under mpirun (I5): a missing or corrupt rank file is named; a
// failed save leaves no pieces; a folder that cannot hold the save is named; a second writer is
// refused and the save stays intact; verify checks every rank file.
#include "tests/reshard_test_util.h"

namespace seedstore {
namespace {

using namespace reshardtest;  // NOLINT

TEST(Reshard, MissingOrCorruptRankFileIsNamed) {
  SEEDSTORE_NEED_BIN();
  const Fixture& f = Get();
  const std::string out = TempDir() + "/rs_fault.h5";
  ASSERT_EQ(Reshard(f.d4, "--layout " + LayoutFile(2, 2) + " -o " + out + " -q").code, 0);
  auto d = DistCatalog::Open(out);
  ASSERT_TRUE(d.ok());
  const std::vector<std::string> files = (*d)->rank_files();
  d->reset();
  // Corrupt one chunk byte region of rank 1's file: reading names the rank and file.
  const std::string keep = ranktest::ReadAll(files[1]);
  {
    std::string bad = keep;
    for (size_t k = bad.size() / 3; k < bad.size() / 3 + 4096 && k < bad.size(); ++k)
      bad[k] ^= 0x5a;
    std::ofstream(files[1], std::ios::binary) << bad;
  }
  auto c = OpenCatalog(out);
  bool named = false;
  if (!c.ok()) {
    named = c.status().message().find("rank 1") != std::string::npos;
  } else {
    for (size_t i = 0; i < (*c)->tensors().size(); ++i) {
      const TensorRecord& t = (*c)->tensors()[i];
      std::vector<unsigned char> buf(t.NumBytes());
      Status st = (*c)->Read(i, WholeTensor(t.shape), buf.data(), CpuOptions{1});
      if (!st.ok()) {
        EXPECT_EQ(st.message().rfind(
                      "rank-file-corrupt: distributed save '" + out + "' rank 1 file '", 0),
                  0u)
            << st.ToString();
        named = true;
      }
    }
  }
  EXPECT_TRUE(named);
  if (c.ok()) c->reset();  // HDF5 would keep serving the open (corrupt) file
  Proc p = Reshard(out, "--consolidate -o " + TempDir() + "/rs_fault_c.h5");
  EXPECT_NE(p.code, 0);
  EXPECT_NE(p.err.find("rank 1"), std::string::npos) << p.err;
  std::ofstream(files[1], std::ios::binary) << keep;
  ExpectSameAsSource(out);
  // Missing: named at open, NOT_FOUND (exit 3 from the CLI).
  ASSERT_EQ(std::rename(files[2].c_str(), (files[2] + ".away").c_str()), 0);
  auto m = OpenCatalog(out);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), Code::kNotFound);
  EXPECT_EQ(m.status().message(), "rank-file-missing: distributed save '" + out +
                                      "' rank 2 file '" + files[2] + "': the file does not exist");
  p = Reshard(out, "--consolidate -o " + TempDir() + "/rs_fault_c.h5");
  EXPECT_EQ(p.code, 3) << p.err;
  EXPECT_NE(p.err.find("rank-file-missing"), std::string::npos) << p.err;
  // A symbolic link to nothing is said so, with its target; a symbolic link loop is not taken
  // for a missing file (it was "the file does not exist").
  ASSERT_EQ(::symlink((files[2] + ".gone").c_str(), files[2].c_str()), 0);
  m = OpenCatalog(out);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), Code::kNotFound);
  EXPECT_NE(
      m.status().message().find("rank 2 file '" + files[2] + "': the file is a symbolic link to '" +
                                files[2] + ".gone', which does not exist"),
      std::string::npos)
      << m.status().ToString();
  ASSERT_EQ(::unlink(files[2].c_str()), 0);
  ASSERT_EQ(::symlink(files[2].c_str(), files[2].c_str()), 0);  // a link to itself: ELOOP
  m = OpenCatalog(out);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), Code::kIo);
  EXPECT_NE(m.status().message().find(
                "rank-file-unreadable: distributed save '" + out + "' rank 2 file '" + files[2] +
                "': cannot reach the file: Too many levels of symbolic links"),
            std::string::npos)
      << m.status().ToString();
  Proc v = Shell(Bin() + " verify " + out);
  EXPECT_EQ(v.code, 5) << v.out << v.err;
  EXPECT_NE(v.out.find("FAIL (file): IO_ERROR: rank-file-unreadable"), std::string::npos) << v.out;
  EXPECT_NE(v.out.find("symbolic links"), std::string::npos) << v.out;
  ASSERT_EQ(::unlink(files[2].c_str()), 0);
  ASSERT_EQ(std::rename((files[2] + ".away").c_str(), files[2].c_str()), 0);
  ExpectSameAsSource(out);
}

TEST(Reshard, AFailedSaveLeavesNoPiecesBehind) {
  SEEDSTORE_NEED_BIN();
  const Fixture& f = Get();
  const std::string out = TempDir() + "/rs_isdir.h5";
  ASSERT_EQ(mkdir(out.c_str(), 0755), 0);  // the master cannot be renamed over a folder
  Proc p = Reshard(f.d4, "--layout " + LayoutFile(3, 1) + " -o " + out);
  EXPECT_NE(p.code, 0);
  EXPECT_NE(p.err.find(out), std::string::npos) << p.err;
  EXPECT_EQ(std::stoi(Shell("ls " + out + ".* 2>/dev/null | wc -l").out),
            0);  // no rank files, no lock
}

// A folder that does not exist, or cannot be written, is said so -- not taken for a lock
// another writer holds (it was: "writer-locked ... Remove the lock file only if ...").
TEST(Reshard, AFolderThatCannotHoldTheSaveIsNamedNotBlamedOnALock) {
  SEEDSTORE_NEED_BIN();
  const Fixture& f = Get();
  const std::string out = TempDir() + "/rs_no_such_folder/model.h5";
  for (const std::string& mode : {"--layout " + LayoutFile(3, 1), std::string("--consolidate")}) {
    Proc p = Reshard(f.d4, mode + " -o " + out);
    EXPECT_EQ(p.code, 5) << p.err;
    EXPECT_NE(p.err.find("cannot save to '" + out + "': cannot create its lock file '" + out +
                         ".lock': No such file or directory"),
              std::string::npos)
        << p.err;
    EXPECT_EQ(p.err.find("writer-locked"), std::string::npos) << p.err;
  }
}

TEST(Reshard, SecondWriterIsRefusedAndTheSaveIsIntact) {
  SEEDSTORE_NEED_BIN();
  const Fixture& f = Get();
  const std::string out = TempDir() + "/rs_lock.h5";
  ASSERT_EQ(Reshard(f.d4, "--layout " + LayoutFile(1, 2) + " -o " + out + " -q").code, 0);
  {
    // A writer in progress holds the lock (this test process, as a live writer does).
    testutil::HeldWriterLock held(out + ".lock", "pid 12345 on otherhost");
    ASSERT_TRUE(held.ok());
    for (const std::string& mode : {"--layout " + LayoutFile(3, 1), std::string("--consolidate")}) {
      Proc p = Reshard(f.d4, mode + " -o " + out);
      EXPECT_EQ(p.code, 5) << p.out << p.err;  // kIo
      EXPECT_NE(p.err.find("writer-locked: '" + out +
                           "' is being written by another writer (pid 12345 "
                           "on otherhost"),
                std::string::npos)
          << p.err;
      EXPECT_EQ(ranktest::ReadAll(out + ".lock"), "pid 12345 on otherhost\n");  // not taken over
    }
    auto d = DistCatalog::Open(out);
    ASSERT_TRUE(d.ok());
    EXPECT_EQ((*d)->world(), 2);  // still the first save
    ExpectSameAsSource(out);
  }
  // Released, its file left (as a killed writer leaves it): the next writer takes it over,
  // saying so, and removes it when done.
  Proc taken = Reshard(f.d4, "--layout " + LayoutFile(1, 2) + " -o " + out + " -q");
  EXPECT_EQ(taken.code, 0) << taken.err;
  EXPECT_NE(taken.err.find("seedstore: note: '" + out +
                           ".lock' was left by a writer that no longer runs (pid 12345 "
                           "on otherhost): its save was interrupted"),
            std::string::npos)
      << taken.err;
  EXPECT_FALSE(std::filesystem::exists(out + ".lock"));
  ExpectSameAsSource(out);
  // Two real writers at once: exactly one wins, the other is refused, the result is whole.
  Proc both =
      Shell("(" + Bin() + " reshard " + f.d4 + " --threads 1 -q --layout " + LayoutFile(3, 1) +
            " -o " + out + " & " + Bin() + " reshard " + f.d4 + " --threads 1 -q --layout " +
            LayoutFile(2, 2) + " -o " + out + "; wait) 2>&1; echo done");
  ExpectSameAsSource(out);
  // Replacing a save removes the old save's rank files.
  auto d2 = DistCatalog::Open(out);
  ASSERT_TRUE(d2.ok());
  Proc ls = Shell("ls " + out + ".*.rank*.h5 | wc -l");
  EXPECT_EQ(std::stoi(ls.out), (*d2)->world()) << both.out;
  // Consolidating in place leaves one store and no rank files.
  d2->reset();
  ASSERT_EQ(Reshard(out, "--consolidate -o " + out + " -q").code, 0);
  ExpectSameAsSource(out);
  EXPECT_FALSE(IsDistributedSave(out));
  EXPECT_EQ(std::stoi(Shell("ls " + out + ".*.rank*.h5 2>/dev/null | wc -l").out), 0);
}

TEST(ReshardRaw, VerifyChecksEveryRankFileOfADistributedSave) {
  const RawFixture& f = GetRaw();
  const std::string d3 = TempDir() + "/rr_verify3.h5";
  ASSERT_TRUE(ReshardHere(f.source, RowsLayout(3), d3).ok());
  auto d = DistCatalog::Open(d3);
  ASSERT_TRUE(d.ok());
  auto src = H5Store::Open(f.source);
  ASSERT_TRUE(src.ok());
  // Library: clean, and each tensor's fingerprint (the sum over its pieces) is the source's.
  const auto rep = (*d)->Verify(CpuOptions{1});
  for (const auto& p : rep.problems) ADD_FAILURE() << p.status.ToString();
  ASSERT_EQ(rep.fingerprints.size(), (*d)->tensors().size());
  for (size_t i = 0; i < (*d)->tensors().size(); ++i) {
    const TensorRecord& t = (*d)->tensors()[i];
    EXPECT_EQ(rep.fingerprints[i], *(*src)->tensors()[(*src)->Find(t.name)].fingerprint) << t.name;
  }
  EXPECT_GT(rep.chunks, 0u);
  const std::string rank1 = (*d)->rank_files()[1];
  d->reset();
  // CLI: a corrupt chunk in a rank file is named with that file, tensor and chunk.
  SEEDSTORE_NEED_BIN();
  Proc ok = Shell(Bin() + " verify " + d3 + " --json");
  ASSERT_EQ(ok.code, 0) << ok.out << ok.err;
  EXPECT_TRUE(nlohmann::json::parse(ok.out)["ok"].get<bool>());
  ASSERT_NO_FATAL_FAILURE(CorruptChunk(rank1, "a", 0));  // rows [14, 28): one chunk
  Proc bad = Shell(Bin() + " verify " + d3);
  EXPECT_EQ(bad.code, 1 + static_cast<int>(Code::kCorrupt)) << bad.out << bad.err;
  EXPECT_NE(bad.out.find("FAIL a chunk 0: CORRUPT: chunk-corrupt: file '" + rank1 +
                         "' tensor 'a' chunk 0"),
            std::string::npos)
      << bad.out;
  // --json: the damaged tensor is not ok and has no fingerprint (not every element was hashed);
  // every other tensor is ok with its fingerprint.
  {
    Proc bj = Shell(Bin() + " verify " + d3 + " --json");
    EXPECT_EQ(bj.code, 1 + static_cast<int>(Code::kCorrupt)) << bj.out << bj.err;
    const auto j = nlohmann::json::parse(bj.out);
    EXPECT_FALSE(j["ok"].get<bool>());
    for (const auto& t : j["tensors"]) {
      const bool damaged = t["name"] == "a";
      EXPECT_EQ(t["ok"].get<bool>(), !damaged) << t.dump();
      EXPECT_EQ(t["fingerprint"].is_null(), damaged) << t.dump();
    }
  }
  // inspect shows the save's dense tensors with their pieces and bytes on disk, and a rank
  // file's tensors as pieces.
  Proc in = Shell(Bin() + " inspect " + d3 + " --json");
  ASSERT_EQ(in.code, 0) << in.out << in.err;
  auto ij = nlohmann::json::parse(in.out);
  EXPECT_EQ(ij["world"], 3);
  for (const auto& t : ij["tensors"]) {
    if (t["kind"] == "lazy") continue;
    EXPECT_TRUE(t.contains("pieces")) << t.dump();
    if (t["name"] == "a") {
      EXPECT_EQ(t["pieces"], 3);
    }
    if (t["bytes"].get<uint64_t>() > 0) {
      EXPECT_GT(t["bytes_on_disk"].get<uint64_t>(), 0u) << t.dump();
    }
    if (t["name"] == "e") {
      EXPECT_EQ(t["pieces"], 0);  // no elements: no pieces
    }
  }
  Proc ir = Shell(Bin() + " inspect " + rank1 + " --json");
  ASSERT_EQ(ir.code, 0) << ir.out << ir.err;
  auto rj = nlohmann::json::parse(ir.out);
  ASSERT_FALSE(rj["tensors"].empty());
  for (const auto& t : rj["tensors"]) {
    EXPECT_TRUE(t["chunk_info"].get<bool>()) << t.dump();
    EXPECT_TRUE(t.contains("piece")) << t.dump();
  }
  EXPECT_EQ(rj["tensors"][0]["piece"]["shape"], nlohmann::json({40, 24}));
  // A missing rank file is named too.
  std::vector<std::string> rank1_tensors;
  {
    auto r1 = H5Store::Open(rank1);
    ASSERT_TRUE(r1.ok()) << r1.status().ToString();
    for (const auto& t : (*r1)->tensors()) rank1_tensors.push_back(t.name);
  }
  // verify does not stop at it (a read does, at open): it names the file and the tensors it
  // leaves unchecked, and checks the other rank files. With two gone, both are named.
  // verify's exit code is the rank file's problem's; its line names the file and 'a'.
  auto expect_rank1_named = [&](Code code, const std::string& problem) {
    Proc v = Shell(Bin() + " verify " + d3);
    EXPECT_EQ(v.code, 1 + static_cast<int>(code)) << v.out << v.err;
    EXPECT_NE(v.out.find("FAIL (file): " + std::string(CodeName(code)) + ": " + problem +
                         ": distributed save '" + d3 + "' rank 1"),
              std::string::npos)
        << v.out;
    EXPECT_NE(v.out.find("tensor(s) were not checked: 'a'"), std::string::npos) << v.out;
  };
  ASSERT_EQ(::unlink(rank1.c_str()), 0);
  expect_rank1_named(Code::kNotFound, "rank-file-missing");
  EXPECT_EQ(OpenCatalog(d3).status().code(), Code::kNotFound);  // a reader is refused at once
  {
    auto unchecked = DistCatalog::Open(d3, /*check_rank_files=*/false);  // rank 1 is gone
    ASSERT_TRUE(unchecked.ok()) << unchecked.status().ToString();
    const std::string rank2 = (*unchecked)->rank_files().at(2), moved = rank2 + ".away";
    ASSERT_EQ(std::rename(rank2.c_str(), moved.c_str()), 0);
    Proc two = Shell(Bin() + " verify " + d3 + " --json");
    EXPECT_EQ(two.code, 1 + static_cast<int>(Code::kNotFound)) << two.out << two.err;
    const auto j = nlohmann::json::parse(two.out);
    std::set<std::string> missing;
    for (const auto& p : j["problems"])
      if (p["message"].get<std::string>().rfind("rank-file-missing", 0) == 0)
        missing.insert(p["message"]);
    EXPECT_EQ(missing.size(), 2u) << two.out;
    ASSERT_EQ(std::rename(moved.c_str(), rank2.c_str()), 0);
  }
  // A rank file that is there but does not open is named with the tensors it leaves
  // unchecked; those have no fingerprint in --json, the tensors with no piece in that file
  // (lazy ones, empty ones) still do, and the other rank files are still checked.
  std::ofstream(rank1, std::ios::binary) << "not an HDF5 file";
  expect_rank1_named(Code::kCorrupt, "rank-file-corrupt");
  Proc gj = Shell(Bin() + " verify " + d3 + " --json");
  EXPECT_EQ(gj.code, 1 + static_cast<int>(Code::kCorrupt)) << gj.out << gj.err;
  const auto j = nlohmann::json::parse(gj.out);
  size_t unchecked = 0, checked = 0;
  for (const auto& t : j["tensors"]) {
    const std::string name = t["name"];
    const bool in_rank1 =
        std::find(rank1_tensors.begin(), rank1_tensors.end(), name) != rank1_tensors.end();
    (in_rank1 ? unchecked : checked) += 1;
    EXPECT_EQ(t["ok"].get<bool>(), !in_rank1) << t.dump();
    EXPECT_EQ(t["fingerprint"].is_null(), in_rank1) << t.dump();
  }
  EXPECT_GT(unchecked, 0u);
  EXPECT_GT(checked, 0u);
}

}  // namespace
}  // namespace seedstore
