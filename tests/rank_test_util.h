// Helpers of multi-rank tests, in-process (a world of threads, unit tier) or under mpirun (mpi
// tier): run commands (mpirun included), temp files, an in-process world.
#pragma once
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "io/collective.h"
#include "io/thread_world.h"
#include "store/catalog.h"
#include "store/verify.h"
#include "tests/store_test_util.h"

#include <xxhash.h>

namespace seedstore::ranktest {

struct Proc {
  int code = -1;
  std::string out, err;
  double seconds = 0;
};

// This process's folder, removed when it exits (SEEDSTORE_KEEP_TMP=1 keeps it).
inline std::string TempDir() {
  static const testutil::TempDir dir("seedstore-mpi");
  return dir.path();
}

inline std::string Write(const std::string& name, const std::string& text) {
  const std::string path = TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

inline std::string ReadAll(const std::string& path) {
  std::ifstream f(path);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

/// Runs a shell command line, capturing stdout and stderr separately.
/// Seals the distributed save's master at `path` anew (docs/FORMAT.md 10: "seedstore-seal1",
/// then XXH3-64 and count of the bytes after the 512-byte user block, little-endian) after a
/// test edited it -- as a writer that wrote those very bytes would have sealed them, so that
/// what verify checks beyond the seal is reached. No-op for a file without a seal. Written
/// from the format document, not from the writer's code.
inline void ResealMaster(const std::string& path) {
  std::string all = ReadAll(path);
  if (all.size() < 512 || all.compare(0, 16, std::string("seedstore-seal1\0", 16)) != 0) return;
  const uint64_t h = XXH3_64bits(all.data() + 512, all.size() - 512), n = all.size() - 512;
  for (int b = 0; b < 8; ++b) {
    all[16 + b] = static_cast<char>(h >> (8 * b));
    all[24 + b] = static_cast<char>(n >> (8 * b));
  }
  std::ofstream(path, std::ios::binary | std::ios::trunc) << all;
}

inline Proc Shell(const std::string& cmd) {
  static int n = 0;
  const std::string base = TempDir() + "/proc" + std::to_string(n++);
  const std::string line = "(" + cmd + ") >" + base + ".out 2>" + base + ".err";
  const auto t0 = std::chrono::steady_clock::now();
  const int st = std::system(line.c_str());
  Proc r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  r.out = ReadAll(base + ".out");
  r.err = ReadAll(base + ".err");
  return r;
}

/// This test executable's own path, for launcher tests that start it again as rank bodies.
inline std::string SelfExe() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, n) : "";
}

/// The mpirun command prefix for `np` ranks, or "" when no mpirun is on PATH. OpenMPI gets
/// --oversubscribe (more ranks than cores) and, through the environment, permission to run
/// as root (CI containers).
inline std::string Mpirun(int np) {
  static const int kind = [] {
    if (std::system("command -v mpirun >/dev/null 2>&1") != 0) return 0;
    return std::system("mpirun --version 2>&1 | grep -q 'Open MPI'") == 0 ? 2 : 1;
  }();
  if (kind == 0) return "";
  std::string s =
      "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -np " + std::to_string(np);
  if (kind == 2) s += " --oversubscribe";
  return s;
}

#define SEEDSTORE_NEED_MPIRUN()                                                        \
  do {                                                                                 \
    if (::seedstore::ranktest::Mpirun(1).empty())                                      \
      GTEST_SKIP() << "mpirun not found on PATH: multi-rank tests need OpenMPI/MPICH"; \
  } while (0)

/// The shipped CLI under test: $SEEDSTORE_BIN (ctest sets it), "" when unset.
inline std::string Bin() {
  const char* b = std::getenv("SEEDSTORE_BIN");
  return b ? b : "";
}

/// Skips (visibly) a test that runs the CLI under mpirun when either is missing.
#define SEEDSTORE_NEED_BIN()                                      \
  do {                                                            \
    SEEDSTORE_NEED_MPIRUN();                                      \
    if (::seedstore::ranktest::Bin().empty())                     \
      GTEST_SKIP() << "SEEDSTORE_BIN is not set (ctest sets it)"; \
  } while (0)

/// An in-process world: `n` threads, each with an Exchange over shared memory.
using ThreadWorld = ::seedstore::ThreadWorld;

}  // namespace seedstore::ranktest

// ---- A "training job" that builds its parameter shards, rightly or wrongly ----------------

namespace seedstore::ranktest {

/// How a job initializes its shards.
enum class Init {
  kSeeded,     // from the spec: each shard a slice of the spec's tensor (correct)
  kUnseeded,   // rank r uses root seed + r (each rank a different model)
  kLayoutRng,  // each rank draws its shard as a whole tensor of the local shape
};

/// The shards of every tensor of `spec` that `rank` holds under `layout`, initialized as
/// `init` says; when flip_rank == rank, one bit of tensor `flip_tensor` is flipped.
struct JobShards {
  std::vector<std::vector<unsigned char>> storage;
  std::vector<ParamBuffer> params;
};

inline JobShards BuildJob(const ModelSpec& spec, const Layout& layout, int rank, Init init,
                          int flip_rank = -1, const std::string& flip_tensor = "") {
  JobShards job;
  ModelSpec s = spec;
  if (init == Init::kUnseeded) s.seed += rank;
  for (const TensorSpec& t : s.tensors) {
    auto sh = layout.ShardOf(t.name, t.shape, rank);
    EXPECT_TRUE(sh.ok()) << sh.status().ToString();
    auto lazy = LazyTensor::Resolve(t, s.seed);
    EXPECT_TRUE(lazy.ok()) << lazy.status().ToString();
    std::vector<unsigned char> buf(lazy->RegionBytes(sh->region));
    if (init == Init::kLayoutRng) {
      TensorSpec local = t;
      local.shape.clear();
      if (sh->region.flat) {
        local.shape.push_back(sh->region.end - sh->region.begin);
      } else {
        for (int d = 0; d < sh->region.rank; ++d)
          local.shape.push_back(sh->region.stop[d] - sh->region.start[d]);
      }
      local.key.kind = KeySpec::Kind::kRaw;
      local.key.raw = lazy->key;
      auto l2 = LazyTensor::Resolve(local, 0);
      EXPECT_TRUE(l2->Materialize(WholeTensor(local.shape), buf.data(), CpuOptions{1}).ok());
    } else {
      EXPECT_TRUE(lazy->Materialize(sh->region, buf.data(), CpuOptions{1}).ok());
    }
    if (rank == flip_rank && t.name == flip_tensor && !buf.empty()) buf[buf.size() / 2] ^= 0x10;
    job.storage.push_back(std::move(buf));
  }
  for (size_t i = 0; i < s.tensors.size(); ++i) {
    const TensorSpec& t = s.tensors[i];
    job.params.push_back(
        ParamBuffer{t.name, t.shape, t.dtype, job.storage[i].data(), job.storage[i].size(), false});
  }
  return job;
}

/// A small model with every placement kind's worth of shapes (uneven splits included).
inline const char* kSmallSpec = R"({"seedstore": 1, "seed": 7, "generator": "threefry",
 "tensors": [
   {"name": "embed", "shape": [64, 32], "dtype": "bfloat16", "init": {"dist": "normal", "scale": 0.02}},
   {"name": "layers.0.wq", "shape": [32, 32], "dtype": "float32", "init": {"dist": "normal"}},
   {"name": "layers.0.w1", "shape": [33, 17], "dtype": "float32", "init": {"dist": "uniform"}},
   {"name": "flat.norm", "shape": [37], "dtype": "float32", "init": {"dist": "truncated_normal"}},
   {"name": "bias", "shape": [32], "dtype": "float16", "init": {"dist": "normal"}}]})";

/// A 2-d mesh (data x tensor) layout for `world` ranks: tensor = 2 when world is even.
inline std::string MeshLayout(int world) {
  const int tp = world % 2 == 0 ? 2 : 1, dp = world / tp;
  return R"({"mesh": {"axes": ["data", "tensor"], "shape": [)" + std::to_string(dp) + ", " +
         std::to_string(tp) + R"J(]},
 "placements": [
   {"match": "embed", "spec": [["data", "tensor"], null]},
   {"match": "layers.*.wq", "spec": [null, "tensor"]},
   {"match": "layers.*.w1", "dtensor": ["Shard(1)", "Shard(0)"]},
   {"match": "flat.*", "flat": ["data"]}]})J";
}

}  // namespace seedstore::ranktest
