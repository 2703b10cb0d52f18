// The NCCL backend of io/collective.h with one rank (NCCL cannot put two
// ranks on one GPU, so the multi-rank tiers use MPI): the collectives' results, and the
// live-job check VerifyBuffers over NCCL, clean and with one flipped element. Bootstrapped over
// "auto" (a world of one outside mpirun), or from a unique id made here. A fake two-rank
// bootstrap whose "rank 1" reports this GPU (or none) shows the refusal by name, before NCCL
// is asked to create a communicator that could never complete. Skips with a message without a
// GPU or an NCCL build. (tests/gpu/test_nccl_comm.cc tests the communicator itself.)
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "io/collective.h"
#include "io/gpu_select.h"
#include "io/nccl_comm.h"
#include "kernels/materialize.h"
#include "store/catalog.h"
#include "store/spec.h"
#include "tests/gpu/gpu_test_util.h"

namespace seedstore {
namespace {

constexpr const char* kSpec = R"({"seedstore": 1, "seed": 11, "generator": "philox",
 "tensors": [
   {"name": "embed", "shape": [64, 32], "dtype": "bfloat16", "init": {"dist": "normal", "scale": 0.02}},
   {"name": "norm", "shape": [37], "dtype": "float32", "init": {"dist": "ones"}}]})";

std::unique_ptr<Collective> OpenNcclOrSkip() {
  auto c = OpenCollective("nccl", CollectiveOptions{60});
  if (!c.ok() && c.status().code() == Code::kUnsupported) return nullptr;
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? std::move(*c) : nullptr;
}

#define SEEDSTORE_NEED_NCCL(c)                                                      \
  if (!(c)) {                                                                       \
    auto _s = OpenCollective("nccl");                                               \
    if (!_s.ok() && _s.status().code() == Code::kUnsupported)                       \
      SEEDSTORE_GPU_UNAVAILABLE("NCCL backend NOT run: " << _s.status().message()); \
    FAIL() << "NCCL backend failed to open";                                        \
  }

TEST(NcclCollective, OneRankCollectives) {
  std::unique_ptr<Collective> c = OpenNcclOrSkip();
  SEEDSTORE_NEED_NCCL(c);
  EXPECT_STREQ(c->backend(), "nccl");
  ASSERT_EQ(c->size(), 1);
  ASSERT_EQ(c->rank(), 0);
  const char send[5] = {'a', 'b', 'c', 'd', 'e'};
  char recv[5] = {};
  ASSERT_TRUE(c->AllGather(send, sizeof send, recv, "test allgather").ok());
  EXPECT_EQ(std::memcmp(send, recv, sizeof send), 0);
  uint64_t v[3] = {1, 0xFFFFFFFFFFFFFFFFull, 1ull << 40};
  ASSERT_TRUE(c->AllReduceSum(v, 3, "test allreduce").ok());
  EXPECT_EQ(v[0], 1u);
  EXPECT_EQ(v[1], 0xFFFFFFFFFFFFFFFFull);
  EXPECT_EQ(v[2], 1ull << 40);
  std::vector<uint8_t> big(3 << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 131 + 7);
  const std::vector<uint8_t> want = big;
  ASSERT_TRUE(c->Broadcast(big.data(), big.size(), 0, "test broadcast").ok());
  EXPECT_EQ(big, want);
  EXPECT_FALSE(c->Broadcast(big.data(), 1, 1, "bad root").ok());
  ASSERT_TRUE(c->Barrier("test barrier").ok());
  EXPECT_GT(c->comm_seconds(), 0.0);
}

TEST(NcclCollective, VerifyBuffersCleanAndFlipped) {
  std::unique_ptr<Collective> c = OpenNcclOrSkip();
  SEEDSTORE_NEED_NCCL(c);
  auto spec = ModelSpec::Parse(kSpec, "nccl.json");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  auto ref = SpecCatalog::Create(*spec, "nccl.json");
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();
  const Layout layout = Layout::Replicated(1);
  std::vector<std::vector<uint8_t>> data;
  std::vector<ParamBuffer> params;
  for (size_t i = 0; i < (*ref)->tensors().size(); ++i) {
    const TensorRecord& t = (*ref)->tensors()[i];
    data.emplace_back(t.NumBytes());
    ASSERT_TRUE((*ref)->Read(i, WholeTensor(t.shape), data.back().data()).ok());
  }
  for (size_t i = 0; i < data.size(); ++i) {
    const TensorRecord& t = (*ref)->tensors()[i];
    params.push_back({t.name, t.shape, t.dtype, data[i].data(), data[i].size(), false});
  }
  auto ok = VerifyBuffers(*c, params, layout, ref->get());
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_TRUE(ok->ok()) << ok->Table();
  data[0][6] ^= 0x01;  // one element of "embed"
  auto bad = VerifyBuffers(*c, params, layout, ref->get());
  ASSERT_TRUE(bad.ok()) << bad.status().ToString();
  EXPECT_FALSE(bad->ok());
  EXPECT_NE(bad->Table(true).find("embed"), std::string::npos) << bad->Table(true);
  EXPECT_EQ(bad->Table(true).find("norm"), std::string::npos) << bad->Table(true);
}

TEST(NcclCollective, FromACallerGivenUniqueId) {
  if (!NcclBuilt()) SEEDSTORE_GPU_UNAVAILABLE("NCCL backend NOT run: " << NcclVersionString());
  std::string why;
  if (!CudaAvailable(&why))
    SEEDSTORE_GPU_UNAVAILABLE("NCCL backend NOT run: no CUDA device: " << why);
  auto id = NcclNewUniqueId();
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  auto c = CreateNcclCollective(*id, 1, 0, 0, CollectiveOptions{60});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_STREQ((*c)->backend(), "nccl");
  uint64_t v[2] = {7, 0xFFFFFFFFFFFFFFFFull};
  ASSERT_TRUE((*c)->AllReduceSum(v, 2, "id all-reduce").ok());
  EXPECT_EQ(v[0], 7u);
  EXPECT_EQ(v[1], 0xFFFFFFFFFFFFFFFFull);
  ASSERT_TRUE((*c)->Barrier("id barrier").ok());
}

// A bootstrap that pretends to be rank 0 of 2: "rank 1" claims the same GPU as this rank, or
// no GPU at all. Only the claim gather may reach it; anything after is a test failure.
class FakeTwoRanks final : public Collective {
 public:
  explicit FakeTwoRanks(bool peer_has_gpu) : peer_has_gpu_(peer_has_gpu) {}
  int rank() const override { return 0; }
  int size() const override { return 2; }
  const char* backend() const override { return "fake"; }
  Status AllGather(const void* send, size_t bytes, void* recv, const char* what) override {
    auto* out = static_cast<unsigned char*>(recv);
    std::memcpy(out, send, bytes);
    GpuClaim peer = UnpackGpuClaim(static_cast<const unsigned char*>(send));
    peer.rank = 1;
    if (!peer_has_gpu_) peer.device = -1, peer.host = "other-host";
    std::memcpy(out + bytes, PackGpuClaim(peer).data(), bytes);
    EXPECT_STREQ(what, "NCCL GPU claims");
    return Status::Ok();
  }
  Status AllReduceSum(uint64_t*, size_t, const char*) override { return Unexpected(); }
  Status Barrier(const char*) override { return Unexpected(); }
  Status Broadcast(void*, size_t, int, const char*) override { return Unexpected(); }
  [[noreturn]] void Abort(int code) override { std::_Exit(code); }

 private:
  Status Unexpected() {
    ADD_FAILURE() << "the bootstrap was used after the GPU claims were refused";
    return IoError("unexpected");
  }
  bool peer_has_gpu_;
};

TEST(NcclCollective, TwoRanksOnOneGpuAreRefusedBeforeNcclInit) {
  if (!NcclBuilt()) SEEDSTORE_GPU_UNAVAILABLE("NCCL backend NOT run: " << NcclVersionString());
  std::string why;
  if (!CudaAvailable(&why))
    SEEDSTORE_GPU_UNAVAILABLE("NCCL backend NOT run: no CUDA device: " << why);
  auto c = CreateNcclCollective(std::make_unique<FakeTwoRanks>(true), CollectiveOptions{10});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), Code::kInvalidArgument);
  EXPECT_NE(c.status().message().find("NCCL backend: ranks 0 and 1 would share GPU 0 (GPU-"),
            std::string::npos)
      << c.status().ToString();
  EXPECT_NE(c.status().message().find("--backend mpi"), std::string::npos) << c.status().ToString();
  std::printf("[ NOTE ] refused as expected: %s\n", c.status().message().c_str());
}

TEST(NcclCollective, ARankWithoutAGpuIsNamedOnEveryRank) {
  if (!NcclBuilt()) SEEDSTORE_GPU_UNAVAILABLE("NCCL backend NOT run: " << NcclVersionString());
  std::string why;
  if (!CudaAvailable(&why))
    SEEDSTORE_GPU_UNAVAILABLE("NCCL backend NOT run: no CUDA device: " << why);
  auto c = CreateNcclCollective(std::make_unique<FakeTwoRanks>(false), CollectiveOptions{10});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), Code::kUnsupported);
  EXPECT_NE(c.status().message().find("rank 1 (host 'other-host') found no usable CUDA device"),
            std::string::npos)
      << c.status().ToString();
}

}  // namespace
}  // namespace seedstore
