// io/device.h's entry points for callers that own device memory (the Python package's CUDA
// path): ReadIntoDevice writes any region of a lazy or dense tensor into a caller's device
// buffer on the caller's stream, FingerprintDeviceBuffer hashes a device buffer in a tensor's
// frame -- both byte-equal to the CPU path (I2). Bad regions are refused before any CUDA
// call, so that part runs everywhere; the rest skips visibly without a GPU.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "io/device.h"
#include "io/h5store.h"
#include "io/open.h"
#include "store/catalog.h"
#include "store/spec.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/store_test_util.h"

namespace seedstore {
namespace {

std::unique_ptr<Catalog> LazyModel() {
  auto spec = ModelSpec::Parse(R"({"seedstore": 1, "seed": 5, "tensors": [
      {"name": "a", "shape": [67, 129], "dtype": "bfloat16", "init": {"dist": "normal", "scale": 0.02}},
      {"name": "b", "shape": [100003], "dtype": "float32", "init": {"dist": "uniform"}},
      {"name": "c", "shape": [], "dtype": "float64", "init": {"dist": "normal"}}]})",
                               "<t>");
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  auto c = SpecCatalog::Create(*spec, "<t>");
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return std::move(c).value();
}

TEST(ReadIntoDevice, RegionOutsideTheTensorIsRefusedBeforeAnyCudaCall) {
  auto c = LazyModel();
  Region r = WholeTensor({67, 129});
  r.stop[0] = 68;
  const Status st = ReadIntoDevice(*c, 0, r, nullptr);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("tensor 'a'"), std::string::npos) << st.message();
}

TEST(ReadIntoDevice, LazyAndDenseRegionsEqualTheCpuPath) {
  std::string why;
  if (!CudaAvailable(&why)) SEEDSTORE_GPU_UNAVAILABLE("no CUDA device: " << why);
  auto lazy = LazyModel();
  testutil::TempDir dir("seedstore-rid");
  {  // the same tensors dense in a store: read on the host and staged
    auto w = StoreWriter::Create(dir / "d.h5", 0);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    for (size_t i = 0; i < lazy->tensors().size(); ++i) {
      const TensorRecord& t = lazy->tensors()[i];
      std::vector<uint8_t> all(t.NumBytes());
      ASSERT_TRUE(lazy->Read(i, WholeTensor(t.shape), all.data()).ok());
      ASSERT_TRUE(
          (*w)->AddDense(t.name, t.shape, t.dtype, static_cast<const void*>(all.data())).ok());
    }
    ASSERT_TRUE((*w)->Commit().ok());
  }
  auto dense = OpenCatalog(dir / "d.h5");
  ASSERT_TRUE(dense.ok()) << dense.status().ToString();
  std::mt19937_64 rng(20261204);
  for (int trial = 0; trial < 60; ++trial) {
    const Catalog& c = (trial % 2) ? **dense : *lazy;
    const size_t i = rng() % c.tensors().size();
    const TensorRecord& t = c.tensors()[i];
    Region r = WholeTensor(t.shape);
    if (t.shape.size() == 1 && trial % 3 == 0) {
      const uint64_t b = rng() % (t.shape[0] + 1), e = b + rng() % (t.shape[0] - b + 1);
      r = FlatRegion(t.shape, b, e);
    } else {
      for (size_t d = 0; d < t.shape.size(); ++d) {
        r.start[d] = rng() % (t.shape[d] + 1);
        r.stop[d] = r.start[d] + rng() % (t.shape[d] - r.start[d] + 1);
      }
    }
    const size_t bytes = r.Count() * DTypeSize(t.dtype);
    DeviceBuffer d;
    ASSERT_KOK(DeviceBuffer::Allocate(bytes, &d));
    const Status st = ReadIntoDevice(c, i, r, d.data(), nullptr);
    ASSERT_TRUE(st.ok()) << st.ToString();
    std::vector<uint8_t> got(bytes), want(bytes);
    if (bytes) ASSERT_KOK(d.CopyToHost(got.data(), bytes));
    ASSERT_TRUE(c.Read(i, r, want.data()).ok());
    ASSERT_EQ(got, want) << t.name << " " << DescribeRegion(r) << " trial " << trial;
    auto f = FingerprintDeviceBuffer(t, r, d.data(), nullptr);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    EXPECT_EQ(*f, FingerprintOf(t, r, want.data())) << t.name << " " << DescribeRegion(r);
  }
}

}  // namespace
}  // namespace seedstore
