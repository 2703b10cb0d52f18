// The C++ library walk-through of docs/LIBRARY.md, compiled and run: a job
// describes a model lazily, materializes its rank's shard, checks the ranks agree, saves a
// distributed checkpoint from its buffers, reads a box of it back under no layout at all, and
// writes a one-file store from memory. One process here (CreateSelfCollective); under mpirun
// the same code runs with CreateMpiCollective() on every rank.
#include <gtest/gtest.h>

#include <cstdint>
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
#include "store/catalog.h"
#include "store/layout.h"
#include "store/spec.h"
#include "tests/store_test_util.h"

namespace seedstore {
namespace {

TEST(LibraryExample, TheWalkThroughRuns) {
  testutil::TempDir dir("seedstore-example");
  const std::string ckpt = dir / "ckpt.h5", single = dir / "model.h5";

  // --- docs/LIBRARY.md: begin ---
  // A model, described lazily: seed, init rule, shape, dtype. (`ckpt`, `single`: file paths.)
  const char* json = R"({"seedstore": 1, "seed": 0, "tensors": [
      {"name": "w", "shape": [64, 48], "dtype": "bfloat16",
       "init": {"dist": "normal", "scale": 0.02}}]})";
  auto spec = ModelSpec::Parse(json, "<example>");
  auto model = SpecCatalog::Create(*spec, "<example>");
  auto layout = Layout::Parse(R"({"mesh": {"axes": ["data"], "shape": [1]},
      "placements": [{"match": "*", "spec": ["data", null]}]})");
  auto comm = CreateSelfCollective();  // under mpirun: CreateMpiCollective(), a Result

  // This rank's shard, bit-identical whatever the mesh, rank count or thread count.
  const std::vector<uint64_t> shape = {64, 48};
  auto shard = layout->ShardOf("w", shape, comm->rank());
  std::vector<uint8_t> w(shard->region.Count() * DTypeSize(DType::kBF16));
  Status read = (*model)->Read(0, shard->region, w.data());

  // The ranks agree: replicas equal, shards compose to the model's fingerprint.
  std::vector<ParamBuffer> params = {{"w", shape, DType::kBF16, w.data(), w.size()}};
  auto report = VerifyBuffers(*comm, params, *layout, model->get());
  // report->ok(); report->Table() names any deviating tensor and ranks.

  // A distributed save from the buffers (each rank its own file), proven equal to them.
  auto saved = SaveBuffers(*comm, params, *layout, ckpt);

  // Any box of it, under any layout or none.
  auto back = OpenCatalog(ckpt);
  Region rows = WholeTensor(shape);
  rows.start[0] = 10, rows.stop[0] = 20;
  std::vector<uint8_t> box(rows.Count() * 2);
  Status got = (*back)->Read(0, rows, box.data());

  // One file, from memory: chunked, shuffled, zstd, checksummed, fingerprinted, atomic.
  auto writer = StoreWriter::Create(single, /*root_seed=*/0);
  Status added = (*writer)->AddDense("w", shape, DType::kBF16, static_cast<const void*>(w.data()));
  Status committed = (*writer)->Commit();
  // --- docs/LIBRARY.md: end ---

  ASSERT_TRUE(spec.ok() && model.ok() && layout.ok() && shard.ok()) << spec.status().ToString();
  ASSERT_TRUE(read.ok()) << read.ToString();
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_TRUE(report->ok()) << report->Table();
  ASSERT_TRUE(saved.ok()) << saved.status().ToString();
  ASSERT_TRUE(back.ok() && got.ok()) << back.status().ToString() << got.ToString();
  EXPECT_TRUE(std::equal(box.begin(), box.end(), w.begin() + 10 * 48 * 2));
  ASSERT_TRUE(writer.ok() && added.ok() && committed.ok())
      << added.ToString() << committed.ToString();
  auto store = H5Store::Open(single);
  ASSERT_TRUE(store.ok());
  EXPECT_EQ((*store)->tensors()[0].fingerprint, (*back)->tensors()[0].fingerprint);
  auto lazy_fp = (*model)->FingerprintRegion(0, WholeTensor(shape));  // generated and hashed
  ASSERT_TRUE(lazy_fp.ok());
  EXPECT_EQ((*store)->tensors()[0].fingerprint, *lazy_fp);
}

// docs/LIBRARY.md shows exactly the code between the markers above (less 2 spaces of
// indent).
TEST(LibraryExample, DocsLibraryMdShowsThisCode) {
  const char* root = std::getenv("SEEDSTORE_SOURCE_DIR");
  if (!root) GTEST_SKIP() << "SEEDSTORE_SOURCE_DIR is not set (ctest sets it)";
  auto slurp = [](const std::string& path) {
    std::ifstream f(path);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  const std::string me = slurp(std::string(root) + "/tests/unit/test_library_example.cc");
  const std::string readme = slurp(std::string(root) + "/docs/LIBRARY.md");
  const std::string begin = "  // --- docs/LIBRARY.md: begin ---\n";
  const std::string end = "  // --- docs/LIBRARY.md: end ---";
  const size_t a = me.find(begin), b = me.find(end);
  ASSERT_TRUE(a != std::string::npos && b != std::string::npos && a < b);
  std::string code, line;
  std::istringstream in(me.substr(a + begin.size(), b - a - begin.size()));
  while (std::getline(in, line)) code += (line.rfind("  ", 0) == 0 ? line.substr(2) : line) + "\n";
  EXPECT_NE(readme.find("```cpp\n" + code + "```"), std::string::npos)
      << "docs/LIBRARY.md's ```cpp block differs from this test's code:\n"
      << code;
}

}  // namespace
}  // namespace seedstore
