// Version-1 files without chunk-info tables and piece records (written at commit 18feb76;
// docs/FORMAT.md 9, "Additions within version 1"), checked in under
// tests/golden/v1-2026-11-30/: a dense store (dense.h5: spec.json's tensors, imported from
// safetensors) and a distributed save of it over layout.json's 4 ranks (save.h5 + 4 rank files,
// written by `seedstore reshard dense.h5 --layout layout.json -o save.h5`). This build must
// read them exactly, verify them, and reshard from them -- decoding their chunks, whose
// fingerprints are in the rank files' own frames -- into saves with piece records. And the
// first distributed save of version 2 rank files (docs/FORMAT.md 11), tests/golden/v2-2026-12-06/.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "io/collective.h"
#include "io/dist_store.h"
#include "io/h5store.h"
#include "io/open.h"
#include "store/spec.h"

namespace seedstore {
namespace {

namespace fs = std::filesystem;

std::string Dir(const std::string& sub = "v1-2026-11-30") {
  if (const char* s = std::getenv("SEEDSTORE_SOURCE_DIR"))
    return std::string(s) + "/tests/golden/" + sub;
  return (fs::path(__FILE__).parent_path() / sub).string();
}

std::string ReadText(const std::string& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

ModelSpec Spec(const std::string& dir) {
  auto m = ModelSpec::Parse(ReadText(dir + "/spec.json"), "spec.json");
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return *m;
}

// Every tensor of `cat` equals the spec's, byte for byte, and its fingerprint is the spec's.
void ExpectSpecValues(const Catalog& cat, const std::string& dir = Dir()) {
  const ModelSpec spec = Spec(dir);
  ASSERT_EQ(cat.tensors().size(), spec.tensors.size());
  for (size_t i = 0; i < spec.tensors.size(); ++i) {
    const TensorSpec& t = spec.tensors[i];
    SCOPED_TRACE(cat.origin() + " tensor " + t.name);
    auto lazy = LazyTensor::Resolve(t, spec.seed);
    ASSERT_TRUE(lazy.ok());
    std::vector<unsigned char> want(lazy->RegionBytes(WholeTensor(t.shape))), got(want.size());
    ASSERT_TRUE(lazy->Materialize(WholeTensor(t.shape), want.data(), CpuOptions{1}).ok());
    const int k = cat.Find(t.name);
    ASSERT_GE(k, 0);
    ASSERT_TRUE(cat.Read(k, WholeTensor(t.shape), got.data(), CpuOptions{1}).ok());
    EXPECT_EQ(got, want);
    ASSERT_TRUE(cat.tensors()[k].fingerprint.has_value());
    EXPECT_EQ(*cat.tensors()[k].fingerprint, *lazy->FingerprintWhole());
  }
}

TEST(V1Files, StoreWithoutChunkInfoReadsAndVerifies) {
  auto s = H5Store::Open(Dir() + "/dense.h5");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ExpectSpecValues(**s);
  for (size_t i = 0; i < (*s)->tensors().size(); ++i) {
    EXPECT_TRUE((*s)->chunk_info(i).empty());
    auto p = (*s)->ProveStored(i, CpuOptions{1});  // no table: decoded
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    EXPECT_EQ(*p, *(*s)->tensors()[i].fingerprint);
  }
  EXPECT_TRUE((*s)->Verify(CpuOptions{1}).problems.empty());
}

TEST(V1Files, DistributedSaveWithoutPieceRecordsReadsAndVerifies) {
  auto d = DistCatalog::Open(Dir() + "/save.h5");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ((*d)->world(), 4);
  ExpectSpecValues(**d);
  // Its rank files record plain tensors (fingerprints in their own frames), without tables.
  for (size_t i = 0; i < (*d)->tensors().size(); ++i)
    for (size_t p = 0; p < (*d)->pieces(i).size(); ++p) {
      auto sk = (*d)->PieceStore(i, p);
      ASSERT_TRUE(sk.ok()) << sk.status().ToString();
      EXPECT_FALSE(sk->first->tensors()[sk->second].piece.has_value());
      EXPECT_TRUE(sk->first->chunk_info(sk->second).empty());
    }
  // Verify: every rank file, and each tensor's pieces (fingerprinted in the global frame) add
  // up to the index's fingerprint.
  const auto rep = (*d)->Verify(CpuOptions{1});
  for (const auto& p : rep.problems) ADD_FAILURE() << p.status.ToString();
  for (size_t i = 0; i < (*d)->tensors().size(); ++i)
    EXPECT_EQ(rep.fingerprints[i], *(*d)->tensors()[i].fingerprint) << (*d)->tensors()[i].name;
}

TEST(V1Files, ReshardFromAnOldSaveWritesPiecesAndProves) {
  char tmpl[] = "/tmp/seedstore-v1-XXXXXX";
  const std::string tmp = mkdtemp(tmpl);
  auto src = DistCatalog::Open(Dir() + "/save.h5");
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  auto layout = Layout::Load(Dir() + "/layout.json");
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  for (bool full : {false, true}) {
    SCOPED_TRACE(full ? "full proof" : "stored-chunk proof");
    auto comm = CreateSelfCollective();
    DistSaveOptions o;
    o.full_proof = full;
    o.cpu.threads = o.write.threads = 2;
    const std::string out = tmp + "/new.h5";
    auto r = Reshard(*comm, **src, *layout, out, o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE(r->ok()) << r->Table();
    EXPECT_GT(r->chunks_copied, 0u);  // aligned chunks are still copied as stored (decoded first)
    auto d = DistCatalog::Open(out);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    ExpectSpecValues(**d);
    for (size_t i = 0; i < (*d)->tensors().size(); ++i)
      for (size_t p = 0; p < (*d)->pieces(i).size(); ++p) {
        auto sk = (*d)->PieceStore(i, p);
        ASSERT_TRUE(sk.ok());
        ASSERT_TRUE(sk->first->tensors()[sk->second].piece.has_value());
        EXPECT_FALSE(sk->first->chunk_info(sk->second).empty());
      }
    EXPECT_TRUE((*d)->Verify(CpuOptions{1}).problems.empty());
  }
  // Consolidated into one store.
  auto comm = CreateSelfCollective();
  DistSaveOptions o;
  o.consolidate = true;
  auto r = Reshard(*comm, **src, Layout{}, tmp + "/one.h5", o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->ok()) << r->Table();
  auto one = H5Store::Open(tmp + "/one.h5");
  ASSERT_TRUE(one.ok());
  ExpectSpecValues(**one);
  EXPECT_TRUE((*one)->Verify(CpuOptions{1}).problems.empty());
  fs::remove_all(tmp);
}

// A distributed save with padded pieces (docs/FORMAT.md 10, "Padded pieces"; written at
// commit 3a93e65+), checked in under tests/golden/v1-2026-12-01-padded/: spec.json's tensors
// imported from safetensors into dense.h5 with --chunk-bytes 256 (w: [6, 8] chunks, e: [7,
// 12]), then `seedstore reshard dense.h5 --layout layout.json -o save.h5` (3 ranks along rows).
// Every piece of w is padded to its grid (the proof goes by cells); e's last piece would need
// 37% more and is stored alone (the proof subtracts the others' padding). This build must
// read it exactly, verify it and reshard from it.
TEST(V1Files, PaddedDistributedSaveReadsVerifiesAndReshards) {
  const std::string dir = Dir("v1-2026-12-01-padded");
  auto d = DistCatalog::Open(dir + "/save.h5");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ((*d)->world(), 3);
  ExpectSpecValues(**d, dir);
  auto describe = [&](size_t i) {
    std::string s;
    for (const auto& p : (*d)->pieces(i))
      s += DescribeRegion(p.region()) + " in " + DescribeRegion(p.stored()) + "; ";
    return s;
  };
  EXPECT_EQ(describe((*d)->Find("w")),
            "[0:32, 0:16] in [0:36, 0:16]; [32:64, 0:16] in [30:66, 0:16]; [64:95, 0:16] in "
            "[60:95, 0:16]; ");
  EXPECT_EQ(describe((*d)->Find("e")),
            "[0:17, 0:12] in [0:21, 0:12]; [17:34, 0:12] in [14:35, 0:12]; [34:50, 0:12] in "
            "[34:50, 0:12]; ");
  // w by cells; e not (its last piece is off the grid).
  Fingerprint w;
  for (size_t p = 0; p < 3; ++p) {
    auto g = (*d)->PieceGrid((*d)->Find("w"), p);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    EXPECT_EQ(*g, (std::vector<uint64_t>{6, 8}));
    auto c = (*d)->ProveCells((*d)->Find("w"), p, CpuOptions{1});
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    w.Add(*c);
  }
  EXPECT_EQ(w, *(*d)->tensors()[(*d)->Find("w")].fingerprint);
  auto g2 = (*d)->PieceGrid((*d)->Find("e"), 2);
  ASSERT_TRUE(g2.ok());
  EXPECT_TRUE(g2->empty());
  const auto rep = (*d)->Verify(CpuOptions{1});
  for (const auto& p : rep.problems) ADD_FAILURE() << p.status.ToString();
  for (size_t i = 0; i < (*d)->tensors().size(); ++i)
    EXPECT_EQ(rep.fingerprints[i], *(*d)->tensors()[i].fingerprint) << (*d)->tensors()[i].name;
  // Reshard it to 2 ranks and consolidate it: proven, exact, copying the padded pieces' chunks.
  char tmpl[] = "/tmp/seedstore-v1p-XXXXXX";
  const std::string tmp = mkdtemp(tmpl);
  const std::string l2 = tmp + "/l2.json";
  std::ofstream(l2) << R"({"mesh": {"axes": ["data"], "shape": [2]},
 "placements": [{"match": "*", "spec": ["data", null]}]})";
  auto layout = Layout::Load(l2);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  for (bool consolidate : {false, true}) {
    SCOPED_TRACE(consolidate ? "consolidated" : "2 ranks");
    auto comm = CreateSelfCollective();
    DistSaveOptions o;
    o.consolidate = consolidate;
    const std::string out = tmp + (consolidate ? "/one.h5" : "/two.h5");
    auto r = Reshard(*comm, **d, consolidate ? Layout{} : *layout, out, o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE(r->ok()) << r->Table();
    EXPECT_GT(r->chunks_copied, 0u);
    auto c = OpenCatalog(out);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    ExpectSpecValues(**c, dir);
  }
  fs::remove_all(tmp);
}

// A save of version 2 rank files (docs/FORMAT.md 11; written at commit 5499f2a), checked in
// under tests/golden/v2-2026-12-06/: spec.json's tensors imported from safetensors with
// --chunk-bytes 256, then `seedstore reshard dense.h5 --layout layout.json -o save.h5` (3 ranks:
// w by rows, padded to its chunk grid; f flat; a scalar; an empty tensor). Later builds must
// read it exactly, verify it and reshard it into either version.
TEST(V2Files, CellSaveReadsVerifiesAndReshardsIntoEitherVersion) {
  const std::string dir = Dir("v2-2026-12-06");
  auto d = DistCatalog::Open(dir + "/save.h5");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ((*d)->world(), 3);
  ExpectSpecValues(**d, dir);
  for (const std::string& f : (*d)->rank_files()) {
    auto s = H5Store::Open(f);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_EQ((*s)->format_version(), kCellsFormatVersion) << f;
  }
  const auto& pw = (*d)->pieces((*d)->Find("w"));
  ASSERT_EQ(pw.size(), 3u);
  for (const auto& p : pw) EXPECT_TRUE(p.cells().has_value()) << DescribeRegion(p.region());
  const auto rep = (*d)->Verify(CpuOptions{1});
  for (const auto& p : rep.problems) ADD_FAILURE() << p.status.ToString();
  for (size_t i = 0; i < (*d)->tensors().size(); ++i)
    EXPECT_EQ(rep.fingerprints[i], *(*d)->tensors()[i].fingerprint) << (*d)->tensors()[i].name;
  char tmpl[] = "/tmp/seedstore-v2f-XXXXXX";
  const std::string tmp = mkdtemp(tmpl);
  const std::string l2 = tmp + "/l2.json";
  std::ofstream(l2) << R"({"mesh": {"axes": ["data"], "shape": [2]},
 "placements": [{"match": "w", "spec": ["data", null]}, {"match": "f", "flat": ["data"]}]})";
  auto layout = Layout::Load(l2);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  for (int version : {kCellsFormatVersion, kStoreFormatVersion}) {
    SCOPED_TRACE("into version " + std::to_string(version));
    auto comm = CreateSelfCollective();
    DistSaveOptions o;
    o.rank_file_version = version;
    const std::string out = tmp + "/two.h5";
    auto r = Reshard(*comm, **d, *layout, out, o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE(r->ok()) << r->Table();
    auto two = DistCatalog::Open(out);
    ASSERT_TRUE(two.ok()) << two.status().ToString();
    ExpectSpecValues(**two, dir);
    EXPECT_TRUE((*two)->Verify(CpuOptions{1}).problems.empty());
  }
  auto comm = CreateSelfCollective();
  DistSaveOptions o;
  o.consolidate = true;
  auto r = Reshard(*comm, **d, Layout{}, tmp + "/one.h5", o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->ok()) << r->Table();
  auto one = H5Store::Open(tmp + "/one.h5");
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  ExpectSpecValues(**one, dir);
  fs::remove_all(tmp);
}

}  // namespace
}  // namespace seedstore
