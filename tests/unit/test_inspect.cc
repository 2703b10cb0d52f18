// Inspect (io/inspect.h) as a library call: random models as a spec, as a store holding some
// tensors lazily and some densely, and as safetensors; the rows, the totals against counts
// made here (element counts, file sizes on disk), the glob, the JSON form, the errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "io/export.h"
#include "io/h5store.h"
#include "io/inspect.h"
#include "io/open.h"
#include "store/spec.h"
#include "tests/store_test_util.h"

namespace seedstore {
namespace {

// n tensors of random rank (0-3): unit, prime and empty extents; random float dtype.
ModelSpec RandomSpec(std::mt19937_64& g, int n) {
  static const char* kDTypes[] = {"float32", "bfloat16", "float16", "float64"};
  static const uint64_t kExtents[] = {0, 1, 2, 3, 7, 13, 31, 64};
  nlohmann::json spec = {
      {"seedstore", 1}, {"seed", g() % 1000}, {"tensors", nlohmann::json::array()}};
  for (int i = 0; i < n; ++i) {
    std::vector<uint64_t> shape(g() % 4);
    for (auto& d : shape) d = kExtents[g() % 8];
    std::string name = (g() % 2) ? "layers." : "head.";
    name += std::to_string(i);
    spec["tensors"].push_back({{"name", name},
                               {"shape", shape},
                               {"dtype", kDTypes[g() % 4]},
                               {"init", {{"dist", "normal"}, {"scale", 0.02}}}});
  }
  auto m = ModelSpec::FromJson(spec, "<test>");
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return *m;
}

uint64_t Elements(const std::vector<uint64_t>& s) {
  uint64_t n = 1;
  for (uint64_t d : s) n *= d;
  return n;
}

// Checks what every report holds: rows in catalog order for exactly the matching names, the
// per-kind counts and parameter total, and the JSON form's fields.
void CheckReport(const InspectReport& r, const Catalog& c, const std::string& glob) {
  size_t k = 0;
  uint64_t params = 0, lazy = 0, dense = 0, disk = 0;
  for (const TensorRecord& t : c.tensors()) {
    if (!GlobMatch(glob, t.name)) continue;
    ASSERT_LT(k, r.rows.size());
    const InspectRow& row = r.rows[k++];
    EXPECT_EQ(row.record, &t);
    params += Elements(t.shape);
    (row.dense ? dense : lazy) += 1;
    disk += row.bytes_on_disk;
  }
  EXPECT_EQ(k, r.rows.size());
  EXPECT_EQ(r.parameters, params);
  EXPECT_EQ(r.lazy, lazy);
  EXPECT_EQ(r.dense, dense);
  EXPECT_EQ(r.bytes_on_disk, disk);
  const nlohmann::json j = r.ToJson();
  EXPECT_EQ(j["parameters"], params);
  EXPECT_EQ(j["lazy"], lazy);
  EXPECT_EQ(j["dense"], dense);
  ASSERT_EQ(j["tensors"].size(), r.rows.size());
  for (size_t i = 0; i < r.rows.size(); ++i) {
    const nlohmann::json& row = j["tensors"][i];
    const TensorRecord& t = *r.rows[i].record;
    EXPECT_EQ(row["name"], t.name);
    EXPECT_EQ(row["shape"], t.shape);
    EXPECT_EQ(row["dtype"], DTypeName(t.dtype));
    EXPECT_EQ(row["kind"], r.rows[i].dense ? "dense" : "lazy");
    EXPECT_EQ(row["bytes"], Elements(t.shape) * DTypeSize(t.dtype));
    EXPECT_EQ(row["bytes_on_disk"], r.rows[i].bytes_on_disk);
    if (t.fingerprint) {
      EXPECT_EQ(row["fingerprint"], FingerprintHex(*t.fingerprint));
    } else {
      EXPECT_TRUE(row["fingerprint"].is_null());
    }
    EXPECT_EQ(row.contains("init"), !r.rows[i].dense);
  }
}

TEST(Inspect, RandomModelsAsSpecStoreAndSafetensors) {
  testutil::TempDir dir("seedstore-inspect");
  std::mt19937_64 g(20261204);
  for (int trial = 0; trial < 8; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    const int n = 1 + static_cast<int>(g() % 7);
    const ModelSpec spec = RandomSpec(g, n);
    auto lazy = SpecCatalog::Create(spec, "<test>");
    ASSERT_TRUE(lazy.ok()) << lazy.status().ToString();
    const std::string glob = (g() % 2) ? "*" : "layers.*";
    const bool any = std::any_of(spec.tensors.begin(), spec.tensors.end(),
                                 [&](const TensorSpec& t) { return GlobMatch(glob, t.name); });
    // The spec: every tensor lazy, nothing on disk.
    auto r = Inspect(**lazy, "spec.json", glob);
    if (!any) {
      ASSERT_FALSE(r.ok());
      EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
      EXPECT_NE(r.status().message().find("layers.*"), std::string::npos) << r.status().message();
      continue;
    }
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->kind, StorageKind::kOther);
    EXPECT_EQ(r->dense, 0u);
    EXPECT_EQ(r->bytes_on_disk, 0u);
    EXPECT_EQ(r->ToJson()["source"], "spec.json");
    EXPECT_FALSE(r->ToJson().contains("seed"));
    CheckReport(*r, **lazy, glob);
    // A store: a random subset of the tensors dense (with the values the spec gives).
    const std::string path = dir / ("m" + std::to_string(trial) + ".h5");
    auto w = StoreWriter::Create(path, spec.seed);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    std::set<std::string> dense_names;
    for (size_t i = 0; i < spec.tensors.size(); ++i) {
      const TensorRecord& t = (*lazy)->tensors()[i];
      if (g() % 2) {
        std::vector<uint8_t> buf(t.NumBytes());
        ASSERT_TRUE((*lazy)->Read(i, WholeTensor(t.shape), buf.data()).ok());
        ASSERT_TRUE(
            (*w)->AddDense(t.name, t.shape, t.dtype, static_cast<const void*>(buf.data())).ok());
        dense_names.insert(t.name);
      } else {
        ASSERT_TRUE((*w)->AddLazy(spec.tensors[i]).ok());
      }
    }
    ASSERT_TRUE((*w)->Commit().ok());
    auto store = OpenCatalog(path);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    auto s = Inspect(**store, path, glob);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_EQ(s->kind, StorageKind::kStore);
    EXPECT_EQ(s->file_bytes, std::filesystem::file_size(path));
    EXPECT_EQ(s->seed, spec.seed);
    EXPECT_EQ(s->generator, Generator::kThreefry);
    EXPECT_FALSE(s->rank.has_value());
    CheckReport(*s, **store, glob);
    for (const InspectRow& row : s->rows) {
      EXPECT_EQ(row.dense, dense_names.count(row.record->name) == 1) << row.record->name;
      // A dense tensor with elements has chunks on disk; a lazy one has none.
      if (row.dense && row.record->NumElements() > 0) {
        EXPECT_GT(row.bytes_on_disk, 0u) << row.record->name;
        EXPECT_GE(row.chunks, 1u) << row.record->name;
      }
      if (!row.dense) {
        EXPECT_EQ(row.chunks, 0u);
      }
      ASSERT_TRUE(row.record->fingerprint.has_value());  // a store records every fingerprint
    }
    const nlohmann::json sj = s->ToJson();
    EXPECT_EQ(sj["file_bytes"], s->file_bytes);
    EXPECT_EQ(sj["generator"], "threefry");
    // Safetensors: every tensor dense, its raw bytes on disk.
    const std::string st_path = dir / ("m" + std::to_string(trial) + ".safetensors");
    ASSERT_TRUE(ExportSafetensors(**lazy, st_path, ExportOptions{}).ok());
    auto st = OpenCatalog(st_path);
    ASSERT_TRUE(st.ok()) << st.status().ToString();
    auto sr = Inspect(**st, st_path, glob);
    ASSERT_TRUE(sr.ok()) << sr.status().ToString();
    EXPECT_EQ(sr->kind, StorageKind::kSafetensors);
    EXPECT_EQ(sr->files, 1u);
    EXPECT_EQ(sr->ToJson()["files"], 1);
    EXPECT_EQ(sr->lazy, 0u);
    CheckReport(*sr, **st, glob);
    for (const InspectRow& row : sr->rows) EXPECT_EQ(row.bytes_on_disk, row.record->NumBytes());
  }
}

TEST(Inspect, GlobThatMatchesNothingIsNamed) {
  std::mt19937_64 g(5);
  auto c = SpecCatalog::Create(RandomSpec(g, 3), "<test>");
  ASSERT_TRUE(c.ok());
  auto r = Inspect(**c, "x", "no.such.*");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("no.such.*"), std::string::npos) << r.status().message();
}

TEST(Inspect, OneScalarTensor) {
  ModelSpec m;
  TensorSpec t;
  t.name = "s";
  t.init.dist = Dist::kOnes;
  m.tensors.push_back(t);
  auto c = SpecCatalog::Create(m, "<test>");
  ASSERT_TRUE(c.ok());
  auto r = Inspect(**c, "one");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->rows.size(), 1u);
  EXPECT_EQ(r->parameters, 1u);
  EXPECT_EQ(r->ToJson()["tensors"][0]["shape"], nlohmann::json::array());
}

}  // namespace
}  // namespace seedstore
