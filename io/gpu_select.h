// Which GPU a rank uses: the pure selection logic, without CUDA, MPI or NCCL (unit-tested on
// the CPU in tests/unit/test_gpu_select.cc).
//
// Every rank of a node binds GPU (node-local rank % visible GPUs). The node-local rank comes
// from MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) when the MPI backend is up (it records it
// here with SetNodeLocalRank), else from the launcher's environment
// (OMPI_COMM_WORLD_LOCAL_RANK, ...), else it is 0 of 1. More ranks than GPUs on a node share
// GPUs: fine for MPI-only work (each rank only hashes or materializes on its GPU). NCCL
// cannot run two ranks of one communicator on one GPU (it fails or hangs without naming
// them), so the NCCL backend gathers every rank's GpuClaim and CheckOneRankPerGpu refuses
// shared GPUs by name. GPUs are compared by UUID, so ranks that each see a different GPU as
// device 0 (CUDA_VISIBLE_DEVICES per rank) are not mistaken for sharing.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "store/status.h"

namespace seedstore {

/// A process's rank among the processes of its node, and their number.
struct NodeLocalRank {
  int rank = 0;
  int size = 1;
  /// Where it came from: "MPI_Comm_split_type", the environment variable's name, or "default".
  std::string source = "default";
};

/// The node-local rank the launcher's environment states: OpenMPI
/// (OMPI_COMM_WORLD_LOCAL_RANK / _LOCAL_SIZE), MPICH/Hydra (MPI_LOCALRANKID / MPI_LOCALNRANKS),
/// MVAPICH (MV2_COMM_WORLD_LOCAL_RANK / _LOCAL_SIZE), Slurm (SLURM_LOCALID /
/// SLURM_NTASKS_PER_NODE), first found wins; {0, 1, "default"} when none is set or the value
/// is not a non-negative integer. `getenv` is injectable for tests.
NodeLocalRank LocalRankFromEnv(const std::function<const char*(const char*)>& getenv);

/// Records the node-local rank computed by the MPI backend (MPI_Comm_split_type); later
/// calls of CurrentNodeLocalRank() return it. Thread-safe.
void SetNodeLocalRank(const NodeLocalRank& r);
/// The recorded MPI answer if any, else LocalRankFromEnv(std::getenv). Thread-safe.
NodeLocalRank CurrentNodeLocalRank();

/// The GPU of node-local rank `local_rank` among `device_count` visible GPUs:
/// local_rank % device_count. Errors: kUnsupported (no GPU), kInvalidArgument (negative rank).
Result<int> DeviceForLocalRank(int local_rank, int device_count);

/// One rank's GPU, as the NCCL backend gathers them before creating its communicator.
struct GpuClaim {
  int rank = 0;
  int device = 0;        // CUDA device index as this rank sees it; < 0: the rank has no GPU
  int device_count = 0;  // GPUs this rank sees
  std::string host;      // gethostname(), at most kClaimHostBytes - 1 bytes kept
  std::array<uint8_t, 16> uuid{};  // cudaDeviceProp::uuid
};
constexpr size_t kClaimHostBytes = 64;
/// Fixed-size wire form of a GpuClaim for an all-gather of bytes.
constexpr size_t kGpuClaimBytes = 12 + 16 + kClaimHostBytes;
std::array<unsigned char, kGpuClaimBytes> PackGpuClaim(const GpuClaim& c);
GpuClaim UnpackGpuClaim(const unsigned char* bytes);

/// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as nvidia-smi -L prints it.
std::string GpuUuidString(const std::array<uint8_t, 16>& uuid);

/// Ok when every rank has a GPU and no two claims name the same GPU (same UUID). A rank
/// without one (device < 0): kUnsupported naming the ranks. Else kInvalidArgument naming, for
/// every shared GPU, the ranks, the device index, the host and the UUID, and what to do:
///   "NCCL backend: ranks 0 and 1 would share GPU 0 (GPU-...) on host 'n1': NCCL needs one
///    GPU per rank (ranks on host 'n1' see 1 GPU(s)); start at most that many ranks per
///    node, or use --backend mpi"
Status CheckOneRankPerGpu(const std::vector<GpuClaim>& claims);

}  // namespace seedstore
