// Files written by seedstore before chunk-info tables and piece records existed (main at
// 18feb76, 2026-11-30; docs/FORMAT.md 9, "Additions within version 1"), checked in under
// tests/golden/v1-2026-11-30/: a dense store (dense.h5: spec.json's tensors, imported from
// safetensors) and a distributed save of it over layout.json's 4 ranks (save.h5 + 4 rank files,
// written by `seedstore reshard dense.h5 --layout layout.json -o save.h5`). Today's build must
// read them exactly, verify them, and reshard from them -- decoding their chunks, whose
// fingerprints are in the rank files' own frames -- into saves with piece records.
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

std::string Dir() {
  if (const char* s = std::getenv("SEEDSTORE_SOURCE_DIR")) return std::string(s) + "/tests/golden/v1-2026-11-30";
  return (fs::path(__FILE__).parent_path() / "v1-2026-11-30").string();
}

std::string ReadText(const std::string& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

ModelSpec Spec() {
  auto m = ModelSpec::Parse(ReadText(Dir() + "/spec.json"), "spec.json");
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return *m;
}

// Every tensor of `cat` equals the spec's, byte for byte, and its fingerprint is the spec's.
void ExpectSpecValues(const Catalog& cat) {
  const ModelSpec spec = Spec();
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

}  // namespace
}  // namespace seedstore
