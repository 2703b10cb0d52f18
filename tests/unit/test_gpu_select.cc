// Which GPU a rank uses (io/gpu_select.h), on the CPU: node-local rank from the launcher's
// environment, device = local rank % visible GPUs (ranks beyond the GPU count share), and the
// NCCL backend's refusal of two ranks on one GPU, which names the ranks, the device, the host
// and the UUID -- and does not mistake ranks that each see their own GPU as device 0
// (CUDA_VISIBLE_DEVICES per rank) for sharing.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "io/gpu_select.h"

namespace seedstore {
namespace {

NodeLocalRank FromEnv(std::map<std::string, std::string> env) {
  return LocalRankFromEnv([&env](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

TEST(GpuSelect, LocalRankFromEachLauncher) {
  NodeLocalRank r =
      FromEnv({{"OMPI_COMM_WORLD_LOCAL_RANK", "3"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "8"}});
  EXPECT_EQ(r.rank, 3);
  EXPECT_EQ(r.size, 8);
  EXPECT_EQ(r.source, "OMPI_COMM_WORLD_LOCAL_RANK");
  r = FromEnv({{"MPI_LOCALRANKID", "1"}, {"MPI_LOCALNRANKS", "2"}});
  EXPECT_EQ(r.rank, 1);
  EXPECT_EQ(r.size, 2);
  r = FromEnv({{"MV2_COMM_WORLD_LOCAL_RANK", "5"}, {"MV2_COMM_WORLD_LOCAL_SIZE", "6"}});
  EXPECT_EQ(r.rank, 5);
  EXPECT_EQ(r.size, 6);
  r = FromEnv({{"SLURM_LOCALID", "2"}, {"SLURM_NTASKS_PER_NODE", "4(x3)"}});
  EXPECT_EQ(r.rank, 2);
  EXPECT_EQ(r.size, 4);
  EXPECT_EQ(r.source, "SLURM_LOCALID");
  // OpenMPI wins over Slurm (mpirun inside an allocation sets both).
  r = FromEnv({{"SLURM_LOCALID", "0"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}});
  EXPECT_EQ(r.rank, 1);
  EXPECT_EQ(r.source, "OMPI_COMM_WORLD_LOCAL_RANK");
}

TEST(GpuSelect, LocalRankDefaultsAndBadValues) {
  NodeLocalRank r = FromEnv({});
  EXPECT_EQ(r.rank, 0);
  EXPECT_EQ(r.size, 1);
  EXPECT_EQ(r.source, "default");
  // Unparseable or negative: ignored, the next launcher's variable is tried.
  r = FromEnv(
      {{"OMPI_COMM_WORLD_LOCAL_RANK", "x"}, {"MPI_LOCALRANKID", "-1"}, {"SLURM_LOCALID", "7"}});
  EXPECT_EQ(r.rank, 7);
  EXPECT_EQ(r.size, 8);  // no size given: at least rank + 1
  r = FromEnv({{"OMPI_COMM_WORLD_LOCAL_RANK", "4"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
  EXPECT_EQ(r.size, 5);  // inconsistent size: at least rank + 1
  r = FromEnv({{"OMPI_COMM_WORLD_LOCAL_RANK", ""}});
  EXPECT_EQ(r.source, "default");
}

TEST(GpuSelect, RecordedMpiAnswerWinsOverTheEnvironment) {
  NodeLocalRank mpi;
  mpi.rank = 2;
  mpi.size = 3;
  mpi.source = "MPI_Comm_split_type";
  SetNodeLocalRank(mpi);
  const NodeLocalRank r = CurrentNodeLocalRank();
  EXPECT_EQ(r.rank, 2);
  EXPECT_EQ(r.size, 3);
  EXPECT_EQ(r.source, "MPI_Comm_split_type");
  SetNodeLocalRank(NodeLocalRank{});  // leave a world of one for the other tests
}

TEST(GpuSelect, DeviceIsLocalRankModuloDevices) {
  // 8 ranks on a node with 8 GPUs: one each (not all on GPU 0).
  for (int r = 0; r < 8; ++r) EXPECT_EQ(*DeviceForLocalRank(r, 8), r);
  // 8 ranks on 4 GPUs: two per GPU, round robin.
  EXPECT_EQ(*DeviceForLocalRank(5, 4), 1);
  EXPECT_EQ(*DeviceForLocalRank(7, 4), 3);
  // One visible GPU per rank (CUDA_VISIBLE_DEVICES set per rank): always device 0.
  EXPECT_EQ(*DeviceForLocalRank(6, 1), 0);
  EXPECT_EQ(DeviceForLocalRank(0, 0).status().code(), Code::kUnsupported);
  EXPECT_EQ(DeviceForLocalRank(-1, 2).status().code(), Code::kInvalidArgument);
}

GpuClaim Claim(int rank, int device, int count, const std::string& host, uint8_t id) {
  GpuClaim c;
  c.rank = rank;
  c.device = device;
  c.device_count = count;
  c.host = host;
  c.uuid.fill(0);
  c.uuid[0] = id;
  c.uuid[15] = 0xAB;
  return c;
}

TEST(GpuSelect, ClaimsRoundTripThroughTheirWireForm) {
  GpuClaim c = Claim(12345, 7, 8, "node-17.cluster", 0x5A);
  for (int k = 0; k < 16; ++k) c.uuid[k] = static_cast<uint8_t>(k * 17 + 1);
  const auto b = PackGpuClaim(c);
  const GpuClaim d = UnpackGpuClaim(b.data());
  EXPECT_EQ(d.rank, c.rank);
  EXPECT_EQ(d.device, c.device);
  EXPECT_EQ(d.device_count, c.device_count);
  EXPECT_EQ(d.host, c.host);
  EXPECT_EQ(d.uuid, c.uuid);
  // No GPU (-1) survives; a long host name is cut, never overruns.
  GpuClaim none = Claim(3, -1, 0, std::string(200, 'h'), 0);
  const GpuClaim e = UnpackGpuClaim(PackGpuClaim(none).data());
  EXPECT_EQ(e.device, -1);
  EXPECT_EQ(e.host, std::string(kClaimHostBytes - 1, 'h'));
}

TEST(GpuSelect, UuidPrintsAsNvidiaSmiDoes) {
  std::array<uint8_t, 16> u{};
  for (int k = 0; k < 16; ++k) u[k] = static_cast<uint8_t>(0x10 + k);
  EXPECT_EQ(GpuUuidString(u), "GPU-10111213-1415-1617-1819-1a1b1c1d1e1f");
}

TEST(GpuSelect, OneRankPerGpuAccepted) {
  // 4 ranks, 2 nodes, 2 GPUs each: distinct UUIDs.
  EXPECT_TRUE(CheckOneRankPerGpu({Claim(0, 0, 2, "a", 1), Claim(1, 1, 2, "a", 2),
                                  Claim(2, 0, 2, "b", 3), Claim(3, 1, 2, "b", 4)})
                  .ok());
  // Each rank sees only its own GPU as device 0: same index, different GPUs -- not shared.
  EXPECT_TRUE(CheckOneRankPerGpu({Claim(0, 0, 1, "a", 1), Claim(1, 0, 1, "a", 2)}).ok());
  EXPECT_TRUE(CheckOneRankPerGpu({Claim(0, 0, 1, "a", 1)}).ok());
  EXPECT_TRUE(CheckOneRankPerGpu({}).ok());
}

TEST(GpuSelect, TwoRanksOnOneGpuAreRefusedByName) {
  // 3 ranks on a node with 2 GPUs: ranks 0 and 2 get device 0.
  const Status st = CheckOneRankPerGpu(
      {Claim(0, 0, 2, "n1", 1), Claim(1, 1, 2, "n1", 2), Claim(2, 0, 2, "n1", 1)});
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  const std::string& m = st.message();
  EXPECT_NE(m.find("NCCL backend: ranks 0 and 2 would share GPU 0 "
                   "(GPU-01000000-0000-0000-0000-0000000000ab) on host 'n1'"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("see 2 GPU(s)"), std::string::npos) << m;
  EXPECT_NE(m.find("--backend mpi"), std::string::npos) << m;
  EXPECT_EQ(m.find("rank 1"), std::string::npos) << m;
}

TEST(GpuSelect, EverySharedGpuIsNamed) {
  // 4 ranks on 1 GPU of host a, 2 on 1 GPU of host b (claims in any order).
  const Status st =
      CheckOneRankPerGpu({Claim(5, 0, 1, "b", 9), Claim(0, 0, 1, "a", 1), Claim(3, 0, 1, "a", 1),
                          Claim(1, 0, 1, "a", 1), Claim(4, 0, 1, "b", 9), Claim(2, 0, 1, "a", 1)});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("ranks 0, 1, 2 and 3 would share GPU 0"), std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("ranks 4 and 5 would share GPU 0 (GPU-09"), std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("on host 'b'"), std::string::npos) << st.message();
}

TEST(GpuSelect, RanksWithoutAGpuAreNamed) {
  const Status st = CheckOneRankPerGpu(
      {Claim(0, 0, 1, "a", 1), Claim(1, -1, 0, "b", 0), Claim(2, -1, 0, "b", 0)});
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Code::kUnsupported);
  EXPECT_NE(st.message().find("NCCL backend: ranks 1 and 2 (host 'b') found no usable CUDA device"),
            std::string::npos)
      << st.message();
}

TEST(GpuSelect, ManySharingRanksAreListedShortly) {
  std::vector<GpuClaim> claims;
  for (int r = 0; r < 100; ++r) claims.push_back(Claim(r, 0, 1, "big", 7));
  const Status st = CheckOneRankPerGpu(claims);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("ranks 0, 1, 2, 3, 4, 5, 6, 7, ... (100 ranks) would share GPU 0"),
            std::string::npos)
      << st.message();
  EXPECT_LT(st.message().size(), 400u);
}

}  // namespace
}  // namespace seedstore
