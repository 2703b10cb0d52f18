// The NCCL communicator (io/nccl_comm.h) with one rank, created from a unique id made here --
// no MPI, no store, so tools/gpu-check.sh's standalone build on the GPU machine compiles and
// runs it too. Every collective of the interface (all-gather, all-reduce of fingerprint lanes,
// broadcast, barrier) on host and on device buffers, checked exactly; sizes that grow the
// staging buffer; empty steps; bad arguments; the unusable state after Abort; the refusal of
// two ranks on one GPU, named with the real GPU's UUID; and an init that times out because
// its second rank never comes.
// Without an NCCL build or a GPU every test is skipped with a visible "NCCL backend NOT run"
// or "no CUDA device" message (they fail instead under SEEDSTORE_REQUIRE_GPU=1).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "gen/materialize_cpu.h"
#include "io/gpu_select.h"
#include "io/nccl_comm.h"
#include "kernels/materialize.h"
#include "tests/gpu/gpu_test_util.h"

namespace seedstore {
namespace {

#define REQUIRE_NCCL_AND_GPU()                                                                    \
  do {                                                                                            \
    if (!NcclBuilt()) SEEDSTORE_GPU_UNAVAILABLE("NCCL backend NOT run: " << NcclVersionString()); \
    std::string why_;                                                                             \
    if (!CudaAvailable(&why_))                                                                    \
      SEEDSTORE_GPU_UNAVAILABLE("NCCL backend NOT run: no CUDA device: " << why_);                \
  } while (0)

#define ASSERT_OK(expr)                                     \
  do {                                                      \
    const Status s_ = (expr);                               \
    ASSERT_TRUE(s_.ok()) << #expr << ": " << s_.ToString(); \
  } while (0)

std::unique_ptr<NcclComm> OneRank(double timeout_s = 60) {
  Result<NcclUniqueId> id = NcclNewUniqueId();
  EXPECT_TRUE(id.ok()) << id.status().ToString();
  if (!id.ok()) return nullptr;
  Result<std::unique_ptr<NcclComm>> c = NcclComm::Create(*id, 1, 0, 0, timeout_s);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? std::move(*c) : nullptr;
}

std::vector<unsigned char> Pattern(size_t n, uint32_t seed) {
  std::vector<unsigned char> v(n);
  std::mt19937 rng(seed);
  for (auto& b : v) b = static_cast<unsigned char>(rng());
  return v;
}

TEST(NcclComm, VersionIsReported) {
  REQUIRE_NCCL_AND_GPU();
  std::printf("[ NOTE ] NCCL %s\n", NcclVersionString().c_str());
  std::unique_ptr<NcclComm> c = OneRank();
  ASSERT_TRUE(c);
  EXPECT_EQ(c->rank(), 0);
  EXPECT_EQ(c->size(), 1);
  EXPECT_EQ(c->device(), 0);
  EXPECT_FALSE(c->broken());
}

TEST(NcclComm, OneRankHostCollectivesAreExact) {
  REQUIRE_NCCL_AND_GPU();
  std::unique_ptr<NcclComm> c = OneRank();
  ASSERT_TRUE(c);
  // All-gather: odd sizes, then sizes that grow the staging buffer (1 B .. 5 MiB + 3).
  for (size_t n : {size_t{1}, size_t{5}, size_t{4099}, size_t{3} << 20, (size_t{5} << 20) + 3}) {
    const std::vector<unsigned char> send = Pattern(n, static_cast<uint32_t>(n));
    std::vector<unsigned char> recv(n, 0xEE);
    ASSERT_OK(c->AllGather(send.data(), n, recv.data(), Memory::kHost, "host all-gather"));
    ASSERT_EQ(recv, send) << n << " bytes";
  }
  // All-reduce of fingerprint lanes: sums mod 2^64 (one rank: the values themselves, all 64
  // bits intact -- no float or signed path).
  std::vector<uint64_t> lanes = {
      0, 1, 0xFFFFFFFFFFFFFFFFull, 0x8000000000000000ull, 0x0123456789ABCDEFull, 1ull << 40};
  const std::vector<uint64_t> want = lanes;
  ASSERT_OK(c->AllReduceSum(lanes.data(), lanes.size(), Memory::kHost, "host all-reduce"));
  EXPECT_EQ(lanes, want);
  // Broadcast from root 0, larger than anything before (the staging buffer grows again).
  std::vector<unsigned char> big = Pattern(7 << 20, 99);
  const std::vector<unsigned char> big_want = big;
  ASSERT_OK(c->Broadcast(big.data(), big.size(), 0, Memory::kHost, "host broadcast"));
  EXPECT_EQ(big, big_want);
  ASSERT_OK(c->Barrier("barrier"));
  // Empty steps move nothing and succeed; bad arguments are refused without touching NCCL.
  ASSERT_OK(c->AllGather(nullptr, 0, nullptr, Memory::kHost, "empty all-gather"));
  ASSERT_OK(c->AllReduceSum(nullptr, 0, Memory::kHost, "empty all-reduce"));
  ASSERT_OK(c->Broadcast(nullptr, 0, 0, Memory::kHost, "empty broadcast"));
  const Status root = c->Broadcast(big.data(), 1, 1, Memory::kHost, "bad root");
  EXPECT_EQ(root.code(), Code::kInvalidArgument);
  EXPECT_NE(root.message().find("bad root: broadcast root 1 outside a world of 1"),
            std::string::npos)
      << root.ToString();
  EXPECT_EQ(c->AllGather(nullptr, 4, big.data(), Memory::kHost, "null").code(),
            Code::kInvalidArgument);
  EXPECT_FALSE(c->broken());
  EXPECT_GT(c->comm_seconds(), 0.0);
}

TEST(NcclComm, OneRankDeviceCollectivesAreExact) {
  REQUIRE_NCCL_AND_GPU();
  std::unique_ptr<NcclComm> c = OneRank();
  ASSERT_TRUE(c);
  const size_t n = (1 << 20) + 7;
  const std::vector<unsigned char> src = Pattern(n, 5);
  DeviceBuffer send, recv;
  ASSERT_KOK(DeviceBuffer::Allocate(n, &send));
  ASSERT_KOK(DeviceBuffer::Allocate(n, &recv));
  ASSERT_KOK(send.CopyFromHost(src.data(), n));
  ASSERT_KOK(recv.Fill(0xEE));
  // Out of place, then in place (send = recv + rank * bytes).
  ASSERT_OK(c->AllGather(send.data(), n, recv.data(), Memory::kDevice, "device all-gather"));
  std::vector<unsigned char> got(n);
  ASSERT_KOK(recv.CopyToHost(got.data(), n));
  EXPECT_EQ(got, src);
  ASSERT_OK(c->AllGather(recv.data(), n, recv.data(), Memory::kDevice, "in-place all-gather"));
  ASSERT_KOK(recv.CopyToHost(got.data(), n));
  EXPECT_EQ(got, src);
  // All-reduce in place on device memory.
  std::vector<uint64_t> lanes(1000);
  std::iota(lanes.begin(), lanes.end(), 0xFFFFFFFFFFFFFF00ull);  // wraps past 2^64
  DeviceBuffer d_lanes;
  ASSERT_KOK(DeviceBuffer::Allocate(lanes.size() * 8, &d_lanes));
  ASSERT_KOK(d_lanes.CopyFromHost(lanes.data(), lanes.size() * 8));
  ASSERT_OK(c->AllReduceSum(static_cast<uint64_t*>(d_lanes.data()), lanes.size(), Memory::kDevice,
                            "device all-reduce"));
  std::vector<uint64_t> lanes_got(lanes.size());
  ASSERT_KOK(d_lanes.CopyToHost(lanes_got.data(), lanes.size() * 8));
  EXPECT_EQ(lanes_got, lanes);
  // Broadcast in place.
  ASSERT_OK(c->Broadcast(send.data(), n, 0, Memory::kDevice, "device broadcast"));
  ASSERT_KOK(send.CopyToHost(got.data(), n));
  EXPECT_EQ(got, src);
  ASSERT_OK(c->Barrier("barrier"));
}

// The live-job shape: a shard fingerprinted on the GPU into a device accumulator, the
// accumulator all-reduced by NCCL on the device, equal to the CPU's fingerprint.
TEST(NcclComm, DeviceFingerprintAllReducedEqualsCpu) {
  REQUIRE_NCCL_AND_GPU();
  std::unique_ptr<NcclComm> c = OneRank();
  ASSERT_TRUE(c);
  const Region r = gpu_test::Box({64, 300}, {3, 17}, {61, 290});
  const size_t count = r.Count();
  std::vector<unsigned char> bytes = Pattern(count * 2, 77);  // bf16-sized elements
  const uint64_t seed = 0x5EEDF00Dull;
  const Fingerprint want = FingerprintCpu(DType::kBF16, r, bytes.data(), seed, CpuOptions{1});
  DeviceBuffer data, acc;
  ASSERT_KOK(DeviceBuffer::Allocate(bytes.size(), &data));
  ASSERT_KOK(data.CopyFromHost(bytes.data(), bytes.size()));
  ASSERT_KOK(DeviceBuffer::Allocate(16, &acc));
  ASSERT_KOK(acc.Fill(0));
  auto* d_acc = static_cast<uint64_t*>(acc.data());
  ASSERT_KOK(FingerprintCudaAsync(DType::kBF16, r, data.data(), seed, nullptr, d_acc));
  ASSERT_OK(c->AllReduceSum(d_acc, 2, Memory::kDevice, "fingerprint all-reduce"));
  uint64_t h[2] = {0, 0};
  ASSERT_KOK(acc.CopyToHost(h, 16));
  EXPECT_TRUE((Fingerprint{h[0], h[1]} == want))
      << std::hex << h[0] << " " << h[1] << " vs " << want.lane0 << " " << want.lane1;
}

TEST(NcclComm, CreateRefusesBadArgumentsBeforeNccl) {
  REQUIRE_NCCL_AND_GPU();
  Result<NcclUniqueId> id = NcclNewUniqueId();
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  auto r = NcclComm::Create(*id, 1, 1, 0, 10);
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("rank 1 outside a world of 1"), std::string::npos)
      << r.status().ToString();
  std::string why;
  const int n = CudaDeviceCount(&why);
  r = NcclComm::Create(*id, 1, 0, n, 10);
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("CUDA device " + std::to_string(n) + " does not exist"),
            std::string::npos)
      << r.status().ToString();
}

TEST(NcclComm, AbortLeavesItUnusable) {
  REQUIRE_NCCL_AND_GPU();
  std::unique_ptr<NcclComm> c = OneRank();
  ASSERT_TRUE(c);
  ASSERT_OK(c->Barrier("before abort"));
  c->Abort();
  EXPECT_TRUE(c->broken());
  uint64_t v = 1;
  const Status st = c->AllReduceSum(&v, 1, Memory::kHost, "after abort");
  EXPECT_EQ(st.code(), Code::kIo);
  EXPECT_NE(st.message().find("unusable"), std::string::npos) << st.ToString();
}

// NCCL itself fails (or hangs) when two ranks of a communicator sit on one GPU, without
// saying which; the backend gathers every rank's claim first and refuses by name. Here both
// claims are this process's GPU 0, as two ranks on a one-GPU node would make them.
TEST(NcclComm, TwoRanksOnOneGpuAreRefusedByName) {
  REQUIRE_NCCL_AND_GPU();
  Result<GpuClaim> a = LocalGpuClaim(0, 0), b = LocalGpuClaim(1, 0);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_NE(a->uuid, (std::array<uint8_t, 16>{})) << "the GPU's UUID reads as zero";
  EXPECT_EQ(a->uuid, b->uuid);
  EXPECT_GE(a->device_count, 1);
  const Status st = CheckOneRankPerGpu({*a, *b});
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("ranks 0 and 1 would share GPU 0 (" + GpuUuidString(a->uuid) + ")"),
            std::string::npos)
      << st.ToString();
  std::printf("[ NOTE ] refused as expected: %s\n", st.message().c_str());
  EXPECT_TRUE(CheckOneRankPerGpu({*a}).ok());
}

// A world of two whose rank 1 never joins: the non-blocking init misses its deadline and is
// aborted, instead of hanging (tools/gpu-check.sh runs this test in its own invocation).
TEST(NcclCommDeadline, InitWithAMissingRankTimesOut) {
  REQUIRE_NCCL_AND_GPU();
  Result<NcclUniqueId> id = NcclNewUniqueId();
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  auto r = NcclComm::Create(*id, 2, 0, 0, 3.0);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kIo);
  EXPECT_NE(r.status().message().find("did not complete within 3.0 s"), std::string::npos)
      << r.status().ToString();
}

}  // namespace
}  // namespace seedstore
