#include "io/collective.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "io/device.h"
#include "io/gpu_select.h"
#include "io/interop.h"
#include "kernels/materialize.h"

namespace seedstore {
namespace {

// The kernels library may not be built yet (an interface target): the CUDA paths then
// report kUnsupported.
constexpr const char* kNoKernels = "seedstore was built without the CUDA kernels";
KernelStatus KMaterializeFingerprintCuda(const SamplerParams& p, const Region& r, uint64_t seed,
                                         Fingerprint* out) {
#if SEEDSTORE_IO_HAS_KERNELS
  return MaterializeFingerprintCuda(p, r, nullptr, seed, nullptr, out);
#else
  (void)p, (void)r, (void)seed, (void)out;
  return {KernelCode::kUnsupported, kNoKernels};
#endif
}
KernelStatus KFingerprintCuda(DType dtype, const Region& r, const void* d_data, uint64_t seed,
                              Fingerprint* out) {
#if SEEDSTORE_IO_HAS_KERNELS
  return FingerprintCuda(dtype, r, d_data, seed, nullptr, out);
#else
  (void)dtype, (void)r, (void)d_data, (void)seed, (void)out;
  return {KernelCode::kUnsupported, kNoKernels};
#endif
}

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

class SelfCollective final : public Collective {
 public:
  explicit SelfCollective(CollectiveOptions o) { options_ = o; }
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const char* backend() const override { return "self"; }
  Status AllGather(const void* send, size_t bytes, void* recv, const char*) override {
    if (bytes) std::memmove(recv, send, bytes);
    return Status::Ok();
  }
  Status AllReduceSum(uint64_t*, size_t, const char*) override { return Status::Ok(); }
  Status Barrier(const char*) override { return Status::Ok(); }
  Status Broadcast(void*, size_t, int root, const char* what) override {
    SEEDSTORE_RETURN_IF_ERROR(CheckBroadcastRoot(root, 1, what));
    return Status::Ok();
  }
  [[noreturn]] void Abort(int exit_code) override {
    std::fflush(stdout);
    std::fflush(stderr);
    std::_Exit(exit_code);
  }
};

const char* Env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

}  // namespace

std::unique_ptr<Collective> CreateSelfCollective(CollectiveOptions o) {
  return std::make_unique<SelfCollective>(o);
}

bool LaunchedUnderMpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK",
                        "MPI_LOCALNRANKS", "MV2_COMM_WORLD_SIZE"})
    if (Env(v)) return true;
  return false;
}

Result<std::unique_ptr<Collective>> OpenCollective(std::string_view backend, CollectiveOptions o) {
  if (backend == "self") return CreateSelfCollective(o);
  if (backend == "mpi") return CreateMpiCollective(o);
  if (backend == "auto") {
    if (LaunchedUnderMpi()) return CreateMpiCollective(o);
    return CreateSelfCollective(o);
  }
  if (backend == "nccl") {
    SEEDSTORE_ASSIGN_OR_RETURN(std::unique_ptr<Collective> boot, OpenCollective("auto", o));
    return CreateNcclCollective(std::move(boot), o);
  }
  return InvalidArgument("--backend '" + std::string(backend) +
                         "': expected auto, mpi, nccl or self");
}

int DefaultThreadsPerRank() {
  const int hw = std::max(1u, std::thread::hardware_concurrency());
  const int local = std::max(1, CurrentNodeLocalRank().size);  // MPI's answer, or the launcher's
  return std::max(1, hw / local);
}

Result<Simulate> ParseSimulate(std::string_view s) {
  if (s == "none") return Simulate::kNone;
  if (s == "unseeded") return Simulate::kUnseeded;
  if (s == "layout-rng") return Simulate::kLayoutRng;
  if (s == "flip") return Simulate::kFlip;
  if (s == "hang") return Simulate::kHang;
  if (s == "die") return Simulate::kDie;
  if (s == "kill") return Simulate::kKill;
  return InvalidArgument("--simulate '" + std::string(s) +
                         "': expected none, unseeded, layout-rng, flip, hang, die or kill");
}

void SimulateFault(Simulate s, int simulate_rank, int rank, const char* step) {
  if (rank != simulate_rank) return;
  const char* what = s == Simulate::kHang   ? "hang: sleeping forever"
                     : s == Simulate::kDie  ? "die: exiting with status 3"
                     : s == Simulate::kKill ? "kill: raising SIGKILL"
                                            : nullptr;
  if (!what) return;
  std::fprintf(stderr, "seedstore: rank %d: --simulate %s (at step '%s')\n", rank, what, step);
  std::fflush(stderr);
  if (s == Simulate::kHang)
    for (;;) ::sleep(1000);
  if (s == Simulate::kKill) ::raise(SIGKILL);
  std::_Exit(3);
}

bool TestFaultPoint(int rank, const char* step) {
  static const char* spec = std::getenv("SEEDSTORE_TEST_FAULT");
  if (!spec) return false;
  const std::string s = spec;
  const size_t a = s.find(':'), b = a == std::string::npos ? a : s.find(':', a + 1);
  if (b == std::string::npos || s.substr(0, a) != std::to_string(rank) ||
      s.substr(a + 1, b - a - 1) != step)
    return false;
  const std::string action = s.substr(b + 1);
  std::fprintf(stderr, "seedstore: rank %d: test fault %s at step '%s' (pid %d)\n", rank,
               action.c_str(), step, static_cast<int>(::getpid()));
  std::fflush(stderr);
  if (action == "stop") {
    ::raise(SIGSTOP);
  } else if (action.rfind("stopafter=", 0) == 0) {  // whatever the process is doing then
    const double s = std::atof(action.c_str() + 10);
    std::thread([s] {
      std::this_thread::sleep_for(std::chrono::duration<double>(s));
      ::raise(SIGSTOP);
    }).detach();
  } else if (action == "kill") {
    ::raise(SIGKILL);
  } else if (action == "exit") {
    std::_Exit(3);
  } else if (action.rfind("sleep=", 0) == 0) {
    std::this_thread::sleep_for(std::chrono::duration<double>(std::atof(action.c_str() + 6)));
  } else if (action == "fail") {
    return true;
  }
  return false;
}

namespace {

// Fingerprint of a region of a lazy tensor, on the CPU or (when asked and built) the GPU.
Result<Fingerprint> LazyFingerprint(const LazyTensor& l, const Region& r, bool cuda,
                                    const CpuOptions& cpu) {
  if (!cuda) return l.FingerprintRegion(r, cpu);
  SEEDSTORE_RETURN_IF_ERROR(l.CheckRegion(r));
  Fingerprint fp;
  KernelStatus ks = KMaterializeFingerprintCuda(l.params, r, l.fp_seed, &fp);
  if (!ks.ok())
    return Status(ks.code == KernelCode::kUnsupported ? Code::kUnsupported : Code::kIo,
                  "tensor '" + l.spec.name + "': " + ks.message);
  return fp;
}

// Whether --device means CUDA; on CUDA this thread is bound to the node-local GPU
// (io/device.h: local rank % visible GPUs), so the ranks of a node spread over its GPUs.
Result<bool> UseCuda(const std::string& device) {
  SEEDSTORE_ASSIGN_OR_RETURN(const Device d, ResolveDevice(device));
  return d == Device::kCuda;
}

// One rank's shard of tensor i of the catalog, possibly corrupted on purpose (Simulate).
Status FingerprintLocal(const Catalog& cat, size_t i, const Region& region, int rank, bool cuda,
                        const VerifyOptions& o, bool flip_here, LocalShard* out) {
  const TensorRecord& rec = cat.tensors()[i];
  const bool lazy = rec.lazy != nullptr;
  const Simulate sim = o.simulate;
  // The simulations hold the shard whole: one too large for memory is refused by name.
  if (flip_here || (lazy && sim == Simulate::kLayoutRng))
    SEEDSTORE_RETURN_IF_ERROR(
        CheckFitsInMemory(region.Count() * DTypeSize(rec.dtype),
                          "tensor " + Quoted(rec.name) + " shard " + DescribeRegion(region)));
  if (flip_here) {
    std::vector<unsigned char> buf(region.Count() * DTypeSize(rec.dtype));
    SEEDSTORE_RETURN_IF_ERROR(cat.Read(i, region, buf.data(), o.cpu));
    if (!buf.empty()) buf[(region.Count() / 2) * DTypeSize(rec.dtype)] ^= 1;
    out->actual = FingerprintOf(rec, region, buf.data(), o.cpu);
    if (lazy) {
      SEEDSTORE_ASSIGN_OR_RETURN(out->expected, LazyFingerprint(*rec.lazy, region, cuda, o.cpu));
    }
    return Status::Ok();
  }
  if (lazy && sim == Simulate::kUnseeded) {
    LazyTensor l = *rec.lazy;
    l.params.key.k1 += static_cast<uint32_t>(rank);  // as if seeded with seed + rank
    SEEDSTORE_ASSIGN_OR_RETURN(out->actual, LazyFingerprint(l, region, cuda, o.cpu));
    SEEDSTORE_ASSIGN_OR_RETURN(out->expected, LazyFingerprint(*rec.lazy, region, cuda, o.cpu));
    return Status::Ok();
  }
  if (lazy && sim == Simulate::kLayoutRng) {
    // The old non-partitionable RNG: the rank draws normal(key, local_shape), so element j of
    // every shard gets the value of global element j -- a valid sample, not a slice.
    TensorSpec local = rec.lazy->spec;
    local.shape = LocalShape(region);
    local.key.kind = KeySpec::Kind::kRaw;
    local.key.raw = rec.lazy->key;
    SEEDSTORE_ASSIGN_OR_RETURN(LazyTensor l, LazyTensor::Resolve(local, 0));
    std::vector<unsigned char> buf(region.Count() * DTypeSize(rec.dtype));
    SEEDSTORE_RETURN_IF_ERROR(l.Materialize(WholeTensor(local.shape), buf.data(), o.cpu));
    out->actual = FingerprintOf(rec, region, buf.data(), o.cpu);
    SEEDSTORE_ASSIGN_OR_RETURN(out->expected, LazyFingerprint(*rec.lazy, region, cuda, o.cpu));
    return Status::Ok();
  }
  if (lazy) {
    SEEDSTORE_ASSIGN_OR_RETURN(out->actual, LazyFingerprint(*rec.lazy, region, cuda, o.cpu));
    out->expected = out->actual;
    return Status::Ok();
  }
  SEEDSTORE_ASSIGN_OR_RETURN(out->actual, cat.FingerprintRegion(i, region, o.cpu));
  return Status::Ok();
}

}  // namespace

Result<VerifyReport> VerifyCatalog(Exchange& comm, const Catalog& catalog, const Layout& layout,
                                   const VerifyOptions& o) {
  const double t0 = Now();
  const auto& recs = catalog.tensors();
  const int me = comm.rank();
  TestFaultPoint(me, "verify");
  std::vector<LocalShard> shards(recs.size());
  for (size_t i = 0; i < recs.size(); ++i) {
    shards[i].name = recs[i].name;
    shards[i].shape = recs[i].shape;
    shards[i].dtype = recs[i].dtype;
    shards[i].recorded = recs[i].fingerprint;
  }
  SEEDSTORE_RETURN_IF_ERROR(CheckSameInputs(comm, layout, shards));
  for (const TensorRecord& t : recs)
    SEEDSTORE_RETURN_IF_ERROR(CheckWholeTensor(catalog, t, "verify-ranks"));
  SEEDSTORE_ASSIGN_OR_RETURN(const bool cuda, UseCuda(o.device));
  bool flip_pending = o.simulate == Simulate::kFlip && me == o.simulate_rank;
  for (size_t i = 0; i < recs.size(); ++i) {
    SEEDSTORE_ASSIGN_OR_RETURN(Shard sh, layout.ShardOf(recs[i].name, recs[i].shape, me));
    bool flip_here = false;
    if (flip_pending && sh.region.Count() > 0 &&
        (o.simulate_tensor.empty() || o.simulate_tensor == recs[i].name)) {
      flip_here = true;
      flip_pending = false;
    }
    Status st = FingerprintLocal(catalog, i, sh.region, me, cuda, o, flip_here, &shards[i]);
    if (!st.ok()) {
      // Reported by every rank as "could not fingerprint"; the reason is only known here.
      shards[i].has_actual = false;
      shards[i].error = st.ToString();
      shards[i].error_code = st.code();
      std::fprintf(stderr, "seedstore: rank %d: tensor '%s' %s: %s\n", me, recs[i].name.c_str(),
                   DescribeRegion(sh.region).c_str(), st.ToString().c_str());
    }
  }
  const double t1 = Now();
  SimulateFault(o.simulate, o.simulate_rank, me, "exchange");
  SEEDSTORE_ASSIGN_OR_RETURN(VerifyReport rep, ExchangeAndDecide(comm, layout, shards));
  rep.timing.fingerprint_s = t1 - t0;
  rep.timing.total_s = Now() - t0;
  return rep;
}

Result<VerifyReport> VerifyBuffers(Exchange& comm, const std::vector<ParamBuffer>& params,
                                   const Layout& layout, const Catalog* reference,
                                   const VerifyOptions& o) {
  return VerifyHostedBuffers(comm, {params}, layout, reference, o);
}

Result<VerifyReport> VerifyHostedBuffers(Exchange& comm,
                                         const std::vector<std::vector<ParamBuffer>>& hosted,
                                         const Layout& layout, const Catalog* reference,
                                         const VerifyOptions& o) {
  const double t0 = Now();
  if (hosted.empty()) return InvalidArgument("verify: this process holds no rank of the layout");
  const std::vector<ParamBuffer>& params = hosted[0];
  const int k = static_cast<int>(hosted.size());
  for (int j = 1; j < k; ++j)
    if (hosted[j].size() != params.size())
      return InvalidArgument(
          "verify: the ranks of one process pass different tensors (local rank " +
          std::to_string(j) + ": " + std::to_string(hosted[j].size()) + " vs " +
          std::to_string(params.size()) + ")");
  std::vector<LocalShard> shards(params.size());
  std::vector<int> ref_index(params.size(), -1);
  for (size_t i = 0; i < params.size(); ++i) {
    const ParamBuffer& p = params[i];
    shards[i].name = p.name;
    shards[i].shape = p.shape;
    shards[i].dtype = p.dtype;
    SEEDSTORE_RETURN_IF_ERROR(ValidateShape(p.shape, p.dtype, "tensor '" + p.name + "' shape"));
    if (reference) {
      const int j = reference->Find(p.name);
      if (j >= 0) {
        const TensorRecord& rec = reference->tensors()[j];
        if (rec.shape != p.shape || rec.dtype != p.dtype)
          return InvalidArgument("tensor '" + p.name + "': the buffer's shape/dtype differ from " +
                                 reference->origin() + "'s");
        ref_index[i] = j;
        shards[i].recorded = rec.fingerprint;
      }
    }
  }
  SEEDSTORE_RETURN_IF_ERROR(CheckSameInputs(comm, layout, shards, k));
  // Inputs agree on every rank from here on, so a local error must not leave the others
  // waiting: it is reported through the exchange (has_actual = false).
  std::vector<std::vector<LocalShard>> mine(k, shards);
  for (int j = 0; j < k; ++j) {
    const int me = comm.rank() * k + j;
    for (size_t i = 0; i < params.size(); ++i) {
      const ParamBuffer& p = hosted[j][i];
      LocalShard& s = mine[j][i];
      s.name = p.name;  // ExchangeAndDecideHosted checks every local rank lists the same tensors
      s.shape = p.shape;
      s.dtype = p.dtype;
      SEEDSTORE_ASSIGN_OR_RETURN(Shard sh, layout.ShardOf(p.name, p.shape, me));
      const uint64_t want = sh.region.Count() * DTypeSize(p.dtype);
      Status st;
      if (p.bytes != want) {
        st = InvalidArgument("buffer holds " + std::to_string(p.bytes) + " bytes, the shard " +
                             DescribeRegion(sh.region) + " needs " + std::to_string(want));
      } else if (p.data == nullptr && want > 0) {
        st = InvalidArgument("null buffer");
      } else if (p.on_device) {
        KernelStatus ks = KFingerprintCuda(p.dtype, sh.region, p.data,
                                           FingerprintSeed(p.name, p.dtype, p.shape), &s.actual);
        if (!ks.ok())
          st = Status(ks.code == KernelCode::kUnsupported ? Code::kUnsupported : Code::kIo,
                      ks.message);
      } else {
        s.actual = FingerprintCpu(p.dtype, sh.region, p.data,
                                  FingerprintSeed(p.name, p.dtype, p.shape), o.cpu);
      }
      if (st.ok() && ref_index[i] >= 0) {
        auto e = reference->FingerprintRegion(ref_index[i], sh.region, o.cpu);
        if (e.ok()) s.expected = *e;
        else st = e.status().WithContext("reference " + reference->origin());
      }
      if (!st.ok()) {
        s.has_actual = false;
        s.error = st.ToString();
        s.error_code = st.code();
        std::fprintf(stderr, "seedstore: rank %d: tensor '%s' %s: %s\n", me, p.name.c_str(),
                     DescribeRegion(sh.region).c_str(), st.ToString().c_str());
      }
    }
  }
  const double t1 = Now();
  SEEDSTORE_ASSIGN_OR_RETURN(VerifyReport rep, ExchangeAndDecideHosted(comm, layout, mine));
  rep.timing.fingerprint_s = t1 - t0;
  rep.timing.total_s = Now() - t0;
  return rep;
}

}  // namespace seedstore
