// Diff (io/diff.h) as a library call: random lazy models against themselves, against dense
// copies of their values, and against models that differ in one seeded way each; the verdict
// of every row, the counts, the JSON form and the progress callback.
#include "io/diff.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "io/h5store.h"
#include "io/open.h"
#include "store/spec.h"
#include "tests/store_test_util.h"

namespace seedstore {
namespace {

struct RandomModel {
  nlohmann::json spec;
  std::vector<std::vector<uint64_t>> shapes;
};

// n tensors of random rank (0-3), prime and unit extents included, random dtype and init.
RandomModel MakeModel(std::mt19937_64& g, int n, uint64_t seed) {
  static const char* kDTypes[] = {"float32", "bfloat16", "float16", "float64"};
  static const uint64_t kExtents[] = {1, 2, 3, 7, 13, 31, 64};
  RandomModel m;
  m.spec = {{"seedstore", 1}, {"seed", seed}, {"tensors", nlohmann::json::array()}};
  for (int i = 0; i < n; ++i) {
    std::vector<uint64_t> shape(g() % 4);
    for (auto& d : shape) d = kExtents[g() % 7];
    nlohmann::json init =
        (g() % 2) ? nlohmann::json{{"dist", "normal"}, {"scale", 0.02}}
                  : nlohmann::json{{"dist", "uniform"}, {"minval", -1.0}, {"maxval", 2.0}};
    std::string name = "t";  // (not "t" + to_string(i): GCC 12 warns falsely, -Wrestrict)
    name += std::to_string(i);
    m.spec["tensors"].push_back(
        {{"name", name}, {"shape", shape}, {"dtype", kDTypes[g() % 4]}, {"init", init}});
    m.shapes.push_back(shape);
  }
  return m;
}

std::unique_ptr<SpecCatalog> Lazy(const nlohmann::json& spec) {
  auto s = ModelSpec::FromJson(spec, "<test>");
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  auto c = SpecCatalog::Create(*s, "<test>");
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return std::move(*c);
}

// A one-file store holding every tensor of `c` densely, with the values `c` reads.
std::string DenseCopy(const Catalog& c, const std::string& path) {
  auto w = StoreWriter::Create(path, /*root_seed=*/0);
  EXPECT_TRUE(w.ok()) << w.status().ToString();
  for (size_t i = 0; i < c.tensors().size(); ++i) {
    const TensorRecord& t = c.tensors()[i];
    std::vector<uint8_t> buf(t.NumBytes());
    EXPECT_TRUE(c.Read(i, WholeTensor(t.shape), buf.data()).ok());
    EXPECT_TRUE(
        (*w)->AddDense(t.name, t.shape, t.dtype, static_cast<const void*>(buf.data())).ok());
  }
  EXPECT_TRUE((*w)->Commit().ok());
  return path;
}

TEST(Diff, RandomModelsAgainstThemselvesTheirDenseCopiesAndOneChange) {
  testutil::TempDir dir("seedstore-diff");
  std::mt19937_64 g(20261204);
  int changed_rows = 0;
  for (int trial = 0; trial < 12; ++trial) {
    const int n = 1 + static_cast<int>(g() % 6);
    RandomModel m = MakeModel(g, n, g() % 1000);
    auto a = Lazy(m.spec);
    // Lazy against the same spec: identical by spec, nothing generated.
    auto same = Diff(*a, *Lazy(m.spec));
    ASSERT_TRUE(same.ok()) << same.status().ToString();
    EXPECT_TRUE(same->Identical());
    EXPECT_EQ(same->by_spec, n);
    EXPECT_EQ(same->compared, n);
    // Lazy against a dense copy: identical by fingerprint, in both orders.
    auto dense = OpenCatalog(DenseCopy(*a, dir / ("dense" + std::to_string(trial) + ".h5")));
    ASSERT_TRUE(dense.ok()) << dense.status().ToString();
    uint64_t progressed = 0;
    DiffOptions o;
    o.progress = [&](uint64_t b) { progressed += b; };
    for (bool swap : {false, true}) {
      auto d = swap ? Diff(**dense, *a, o) : Diff(*a, **dense, o);
      ASSERT_TRUE(d.ok()) << d.status().ToString();
      EXPECT_TRUE(d->Identical());
      EXPECT_EQ(d->by_spec, 0);
      EXPECT_EQ(d->Count(DiffVerdict::kIdentical), n);
      for (const DiffRow& r : d->rows) {
        ASSERT_TRUE(r.fa && r.fb) << r.name;
        EXPECT_EQ(*r.fa, *r.fb) << r.name;
        EXPECT_STREQ(r.By(), "fingerprint");
      }
    }
    EXPECT_EQ(progressed, 2 * DiffWorkBytes(*a, **dense, "*"));
    // One seeded change: another key, shape, dtype or name for one tensor.
    nlohmann::json other = m.spec;
    const int k = static_cast<int>(g() % n);
    nlohmann::json& t = other["tensors"][k];
    const int kind = static_cast<int>(g() % 4);
    DiffVerdict want = DiffVerdict::kValues;
    if (kind == 0) {  // other values (a 0-d tensor too: its one element)
      if (t["init"]["dist"] == "normal") t["init"]["scale"] = 0.021;
      else t["init"]["maxval"] = 2.5;
    } else if (kind == 1) {
      t["shape"].push_back(5);
      want = DiffVerdict::kShape;
    } else if (kind == 2) {
      t["dtype"] = t["dtype"] == "float32" ? "float64" : "float32";
      want = DiffVerdict::kDType;
    } else {
      t["name"] = "renamed";
      want = DiffVerdict::kOnlyA;
    }
    auto b = Lazy(other);
    auto d = Diff(*a, *b);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    EXPECT_FALSE(d->Identical());
    int differing = 0;
    for (const DiffRow& r : d->rows) {
      if (r.name == m.spec["tensors"][k]["name"].get<std::string>()) {
        EXPECT_EQ(r.verdict, want) << r.name << " " << DiffVerdictName(r.verdict);
      } else if (r.name == "renamed") {
        EXPECT_EQ(r.verdict, DiffVerdict::kOnlyB);
      } else {
        EXPECT_EQ(r.verdict, DiffVerdict::kIdentical) << r.name;
      }
      differing += r.verdict != DiffVerdict::kIdentical;
    }
    EXPECT_EQ(d->differing, differing);
    changed_rows += differing;
    const nlohmann::json j = d->ToJson(false);
    EXPECT_EQ(j["identical"], false);
    EXPECT_EQ(j["compared"], d->compared);
    EXPECT_EQ(j["tensors"].size(), d->rows.size());
    EXPECT_EQ(j["counts"][DiffVerdictName(want)], d->Count(want));
  }
  EXPECT_GE(changed_rows, 12);
}

TEST(Diff, AGlobThatMatchesNothingIsNamedAndAGlobSelects) {
  std::mt19937_64 g(7);
  RandomModel m = MakeModel(g, 4, 1);
  auto a = Lazy(m.spec);
  DiffOptions o;
  o.tensors = "nope*";
  auto d = Diff(*a, *a, o);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), Code::kInvalidArgument);
  EXPECT_NE(d.status().message().find("'nope*'"), std::string::npos) << d.status().ToString();
  o.tensors = "t1";
  auto one = Diff(*a, *a, o);
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  ASSERT_EQ(one->rows.size(), 1u);
  EXPECT_EQ(one->rows[0].name, "t1");
  EXPECT_EQ(DiffWorkBytes(*a, *a, "t1"), 2 * a->tensors()[1].NumBytes());
}

}  // namespace
}  // namespace seedstore
