#include "io/gpu_select.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>

namespace seedstore {
namespace {

// A non-negative decimal integer (leading digits; "2(x3)" of Slurm reads as 2), else -1.
int ParseCount(const char* s) {
  if (s == nullptr || *s < '0' || *s > '9') return -1;
  long v = 0;
  for (; *s >= '0' && *s <= '9'; ++s) {
    v = v * 10 + (*s - '0');
    if (v > 1 << 24) return -1;
  }
  return static_cast<int>(v);
}

std::mutex g_mu;
std::optional<NodeLocalRank> g_recorded;

void PutU32(unsigned char* p, uint32_t v) {
  for (int k = 0; k < 4; ++k) p[k] = static_cast<unsigned char>(v >> (8 * k));
}
uint32_t GetU32(const unsigned char* p) {
  uint32_t v = 0;
  for (int k = 0; k < 4; ++k) v |= static_cast<uint32_t>(p[k]) << (8 * k);
  return v;
}

std::string RankList(const std::vector<int>& r) {
  std::string s;
  const size_t shown = std::min<size_t>(r.size(), 8);
  for (size_t i = 0; i < shown; ++i) {
    if (i) s += i + 1 == r.size() ? " and " : ", ";
    s += std::to_string(r[i]);
  }
  if (r.size() > shown) s += ", ... (" + std::to_string(r.size()) + " ranks)";
  return s;
}

}  // namespace

NodeLocalRank LocalRankFromEnv(const std::function<const char*(const char*)>& getenv) {
  static const char* const kVars[][2] = {
      {"OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
      {"MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
      {"MV2_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_SIZE"},
      {"SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"},
  };
  for (const auto& v : kVars) {
    const int rank = ParseCount(getenv(v[0]));
    if (rank < 0) continue;
    const int size = ParseCount(getenv(v[1]));
    NodeLocalRank r;
    r.rank = rank;
    r.size = size > rank ? size : rank + 1;  // missing or inconsistent: at least rank + 1
    r.source = v[0];
    return r;
  }
  return NodeLocalRank{};
}

void SetNodeLocalRank(const NodeLocalRank& r) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_recorded = r;
}

NodeLocalRank CurrentNodeLocalRank() {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (g_recorded) return *g_recorded;
  }
  return LocalRankFromEnv([](const char* name) { return std::getenv(name); });
}

Result<int> DeviceForLocalRank(int local_rank, int device_count) {
  if (device_count <= 0) return Unsupported("no CUDA device to select");
  if (local_rank < 0)
    return InvalidArgument("node-local rank " + std::to_string(local_rank) + " is negative");
  return local_rank % device_count;
}

std::array<unsigned char, kGpuClaimBytes> PackGpuClaim(const GpuClaim& c) {
  std::array<unsigned char, kGpuClaimBytes> b{};
  PutU32(b.data(), static_cast<uint32_t>(c.rank));
  PutU32(b.data() + 4, static_cast<uint32_t>(c.device));
  PutU32(b.data() + 8, static_cast<uint32_t>(c.device_count));
  std::memcpy(b.data() + 12, c.uuid.data(), 16);
  std::memcpy(b.data() + 28, c.host.data(), std::min(c.host.size(), kClaimHostBytes - 1));
  return b;
}

GpuClaim UnpackGpuClaim(const unsigned char* b) {
  GpuClaim c;
  c.rank = static_cast<int>(GetU32(b));
  c.device = static_cast<int>(GetU32(b + 4));
  c.device_count = static_cast<int>(GetU32(b + 8));
  std::memcpy(c.uuid.data(), b + 12, 16);
  const char* h = reinterpret_cast<const char*>(b + 28);
  c.host.assign(h, strnlen(h, kClaimHostBytes - 1));
  return c;
}

std::string GpuUuidString(const std::array<uint8_t, 16>& u) {
  char s[48];
  std::snprintf(s, sizeof s,
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
                u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
                u[14], u[15]);
  return s;
}

Status CheckOneRankPerGpu(const std::vector<GpuClaim>& claims) {
  std::vector<int> none;
  for (const GpuClaim& c : claims)
    if (c.device < 0) none.push_back(c.rank);
  if (!none.empty()) {
    std::sort(none.begin(), none.end());
    const GpuClaim* first = nullptr;
    for (const GpuClaim& c : claims)
      if (c.rank == none[0]) first = &c;
    return Unsupported("NCCL backend: rank" + std::string(none.size() > 1 ? "s " : " ") +
                       RankList(none) + " (host '" + first->host +
                       "') found no usable CUDA device");
  }
  std::map<std::array<uint8_t, 16>, std::vector<const GpuClaim*>> by_gpu;
  for (const GpuClaim& c : claims) by_gpu[c.uuid].push_back(&c);
  std::vector<std::vector<const GpuClaim*>> shared;
  for (auto& [uuid, v] : by_gpu)
    if (v.size() > 1) {
      std::sort(v.begin(), v.end(),
                [](const GpuClaim* a, const GpuClaim* b) { return a->rank < b->rank; });
      shared.push_back(v);
    }
  if (shared.empty()) return Status::Ok();
  std::sort(shared.begin(), shared.end(),
            [](const auto& a, const auto& b) { return a[0]->rank < b[0]->rank; });
  std::string m = "NCCL backend: ";
  const size_t shown = std::min<size_t>(shared.size(), 4);
  for (size_t g = 0; g < shown; ++g) {
    const auto& v = shared[g];
    std::vector<int> ranks;
    for (const GpuClaim* c : v) ranks.push_back(c->rank);
    if (g) m += "; ";
    m += "ranks " + RankList(ranks) + " would share GPU " + std::to_string(v[0]->device) + " (" +
         GpuUuidString(v[0]->uuid) + ") on host '" + v[0]->host + "'";
  }
  if (shared.size() > shown)
    m += "; and " + std::to_string(shared.size() - shown) + " more shared GPU(s)";
  const GpuClaim& first = *shared[0][0];
  m += ": NCCL needs one GPU per rank (ranks on host '" + first.host + "' see " +
       std::to_string(first.device_count) +
       " GPU(s)); start at most that many ranks per node, or use --backend mpi";
  return InvalidArgument(m);
}

}  // namespace seedstore
