// Collectives: one small interface over MPI (CPU, under mpirun, across nodes), NCCL (GPU
// buffers; its unique id bootstrapped over MPI, over a key-value store (io/bootstrap.h), or
// given by the caller), a store (CPU, no MPI: under torchrun) and a world of one -- and the
// cross-rank verification entry points built on it (store/verify.h has the decision logic).
//
// Fault handling. MPI cannot time out a collective, so with a timeout every operation is
// started non-blocking (MPI_Iallgather, MPI_Iallreduce, MPI_Ibcast, MPI_Ibarrier) and polled
// against a deadline; every rank also posts a 4-byte "arrived" message to rank 0 (and rank 0
// one to rank 1), and while it waits sends a heartbeat every min(0.1, timeout / 10) s to rank
// 0 (rank 0 to rank 1). On a timeout rank 0 names the ranks it has not heard from for half the
// timeout -- stalled before the step, or in it (a SIGSTOP mid-step) -- and not those that wait,
// alive, in an earlier step for the stalled one (when every missing rank is alive: those);
// rank 1 names rank 0 likewise when rank 0 is the one missing or silent. Rank 1's deadline is
// later than rank 0's and the others' later still, so the rank that names the culprit reports
// before anyone ends the job. A rank that itself did not run for a while (stopped, then
// continued) listens afresh before it blames anyone. A timed-out collective returns
// kIo and leaves the communicator unusable (a started MPI operation cannot be cancelled): the
// caller prints its message and calls Abort(), which ends the whole job (MPI_Abort) instead of
// hanging. A rank that dies is normally reaped by mpirun at once; the deadline is the backstop.
// Buffers after a timeout: the arrival and heartbeat messages use the backend's own storage,
// kept (reachable, never freed) until exit once the object is broken (io/mpi_deadline.h); the
// caller's send/receive buffers of the collective that timed out are not copied, so after a
// kIo MPI may still write into them until the process exits -- keep them alive (or Abort).
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "gen/materialize_cpu.h"
#include "io/bootstrap.h"
#include "io/nccl_comm.h"
#include "store/catalog.h"
#include "store/layout.h"
#include "store/verify.h"

namespace seedstore {

struct CollectiveOptions {
  /// Seconds one collective step may take on any rank before the job is declared hung
  /// (counted from when this rank enters the step). <= 0: wait forever (plain blocking calls).
  double timeout_s = 600;
};

/// A world of ranks that can exchange host bytes. Every rank must make the same calls in the
/// same order. Errors: kIo (with the library's message, file:line, and for timeouts the step
/// and -- on rank 0 -- the ranks that did not arrive); after a kIo the object is unusable.
class Collective : public Exchange {
 public:
  /// "self", "mpi", "store" or "nccl".
  virtual const char* backend() const = 0;
  /// Copies root's `bytes` bytes of `data` into `data` on every rank.
  virtual Status Broadcast(void* data, size_t bytes, int root, const char* what) = 0;
  /// Ends every process of the job with `exit_code` (MPI_Abort); never returns. Use it after
  /// a kIo from a collective: the world cannot be shut down cleanly any more.
  [[noreturn]] virtual void Abort(int exit_code) = 0;
  /// Whether a collective failed (kIo: timeout or library error) and left this object
  /// unusable; then the job can only be ended with Abort().
  virtual bool broken() const { return false; }
  /// Seconds spent inside collective calls so far (waiting included).
  double comm_seconds() const { return comm_s_; }
  double timeout() const { return options_.timeout_s; }
  void set_timeout(double s) { options_.timeout_s = s; }

 protected:
  CollectiveOptions options_;
  double comm_s_ = 0;
};

/// A world of one process: every collective is a copy. Never fails.
std::unique_ptr<Collective> CreateSelfCollective(CollectiveOptions o = {});

/// MPI over MPI_COMM_WORLD (duplicated). Initializes MPI (MPI_THREAD_FUNNELED) unless the
/// caller already did, and then finalizes it on destruction. Errors: kUnsupported when built
/// without MPI; kIo when MPI fails to initialize.
Result<std::unique_ptr<Collective>> CreateMpiCollective(CollectiveOptions o = {});

/// NCCL on this rank's GPU, bootstrapped over `bootstrap` (MPI; a store, CreateBootstrapCollective,
/// under a launcher without MPI; self for a world of one),
/// which the result owns (Abort goes through it): the rank binds its node-local GPU
/// (BindNodeLocalGpu, io/device.h), the ranks all-gather their GPU claims and refuse two ranks
/// on one GPU by name (CheckOneRankPerGpu, io/gpu_select.h: NCCL itself would fail or hang
/// without saying why), rank 0's unique id is broadcast, and the communicator is created from
/// it (the id overload below). The interface takes host pointers: payloads are staged through
/// device memory and moved by NCCL (io/nccl_comm.h also takes device pointers). Deadlines use
/// a non-blocking communicator and ncclCommAbort. Errors (the same on every rank):
/// kUnsupported (built without CUDA/NCCL, or a rank has no GPU), kInvalidArgument (ranks
/// sharing a GPU), kIo.
/// `device` >= 0 binds that CUDA device instead of the node-local one (a launcher without MPI,
/// e.g. torchrun's LOCAL_RANK, knows it).
Result<std::unique_ptr<Collective>> CreateNcclCollective(std::unique_ptr<Collective> bootstrap,
                                                         CollectiveOptions o = {}, int device = -1);

/// A world of ranks over a Bootstrap (io/bootstrap.h): "store" over a key-value store (no MPI;
/// torchrun), or over MPI. Every step is one exchange of the bootstrap (GatherAll; Broadcast;
/// Barrier) with o.timeout_s as its deadline: a rank that stalls or dies is named as the
/// bootstrap's fault contract says, never a hang; after a kIo the object is unusable
/// (broken()). backend() is the bootstrap's transport(). Abort is the bootstrap's. Creating it
/// is itself a step ("bootstrap setup") that every rank must make. Errors: kInvalidArgument (no
/// bootstrap; ranks started with different world sizes, naming both), kIo (a rank did not
/// arrive, naming it; the transport failed).
Result<std::unique_ptr<Collective>> CreateBootstrapCollective(std::unique_ptr<Bootstrap> bootstrap,
                                                              CollectiveOptions o = {});

/// NCCL rank `rank` of `nranks` on CUDA device `device`, from a unique id the caller made
/// (NcclNewUniqueId on one rank) and distributed by its own means; no bootstrap, so Abort
/// aborts the communicator and exits this process only. Errors: as NcclComm::Create.
Result<std::unique_ptr<Collective>> CreateNcclCollective(const NcclUniqueId& id, int nranks,
                                                         int rank, int device,
                                                         CollectiveOptions o = {});

/// Whether this process was started by an MPI launcher (mpirun/mpiexec/srun with PMI/PMIx).
bool LaunchedUnderMpi();

/// "auto" (mpi when LaunchedUnderMpi(), else self), "self", "mpi", "nccl" (bootstrapped over
/// "auto"). Errors: as the factories; kInvalidArgument for an unknown name.
Result<std::unique_ptr<Collective>> OpenCollective(std::string_view backend,
                                                   CollectiveOptions o = {});

/// CPU threads per rank by default: hardware threads / ranks on this node (at least 1).
int DefaultThreadsPerRank();

// ---- Verification --------------------------------------------------------------------------

/// Test and demo hooks that reproduce user failures on purpose (see tests/mpi/).
enum class Simulate {
  kNone,
  kUnseeded,   // every rank r draws its shards from root seed + r: N different models
  kLayoutRng,  // every rank draws its shard as a whole tensor of the local shape from the
               // tensor's key: the old non-partitionable RNG; replicas agree, shards don't
               // compose
  kFlip,       // `simulate_rank` flips the lowest bit of one element of `simulate_tensor`
  kHang,       // `simulate_rank` sleeps forever before the exchange
  kDie,        // `simulate_rank` exits (status 3) before the exchange
  kKill,       // `simulate_rank` is killed (SIGKILL, raised on itself) before the exchange
};
// none, unseeded, layout-rng, flip, hang, die, kill
Result<Simulate> ParseSimulate(std::string_view s);

/// The process faults of Simulate, one implementation for every command that takes
/// --simulate (verify-ranks before its exchange; save-ranks and reshard in the middle of the
/// save, see DistSaveOptions): when `rank` == `simulate_rank` and `s` is kHang, kDie or kKill,
/// prints "seedstore: rank R: --simulate S at step 'STEP': ..." to stderr, then sleeps
/// forever, exits with status 3 (no cleanup, no MPI_Finalize) or raises SIGKILL. Any other
/// case returns at once.
void SimulateFault(Simulate s, int simulate_rank, int rank, const char* step);

/// Test-only fault injection at named steps of a distributed save (tests/py/test_fault_matrix.py).
/// When the environment variable SEEDSTORE_TEST_FAULT is "RANK:STEP:ACTION" and `rank` and
/// `step` match, prints "seedstore: rank R: test fault ACTION at step 'STEP' (pid N)" to stderr,
/// then ACTION: "stop" raises SIGSTOP on this process (it continues when sent SIGCONT),
/// "stopafter=S" raises it S seconds later, from another thread, whatever the process is doing,
/// "kill" raises SIGKILL, "exit" ends it with status 3 (no cleanup), "sleep=S" sleeps S
/// seconds and returns, "fail" returns true: the caller fails the step's operation as if the
/// system had (only where the step says so). Unset, malformed, or another rank or step:
/// returns false at once. The steps of Reshard/SaveBuffers (io/dist_store.h) are "lock",
/// "plan", "source-fingerprints", "rank-files", "master", "prove", "before-rename",
/// "after-rename", "sync-commit" (rank 0's fsync of the folder after the commit; "fail": EIO,
/// CommitStaged in io/commit_protocol.h) and "done"; VerifyCatalog's (verify-ranks) is
/// "verify", at its start; the multi-rank commands' last is "end", after their final barrier,
/// before MPI_Finalize (RunRanks, tools/cli.h).
bool TestFaultPoint(int rank, const char* step);

struct VerifyOptions {
  CpuOptions cpu;
  /// Where lazy shards are generated and hashed: "cpu", "cuda" or "auto" (cuda if available).
  std::string device = "cpu";
  Simulate simulate = Simulate::kNone;
  int simulate_rank = 1;
  std::string simulate_tensor;  // empty: the first tensor this rank holds elements of
};

/// Verifies that the ranks of `comm` (any Exchange: a Collective, or a test's in-process
/// world) hold `catalog` under `layout`: each rank fingerprints
/// its shard of every tensor (lazy ones generated and hashed tile by tile, never materialized
/// whole; dense ones read region by region), then ExchangeAndDecide (store/verify.h). The
/// composition reference is the recorded fingerprint when the catalog has one, else the lazy
/// spec. A shard that cannot be read is reported (that rank prints the error), not fatal.
/// Errors (identical on every rank): kInvalidArgument (ranks opened different catalogs or
/// layouts; layout world size != comm.size(); a tensor is a piece, CheckWholeTensor), kIo
/// (communication, timeout).
Result<VerifyReport> VerifyCatalog(Exchange& comm, const Catalog& catalog, const Layout& layout,
                                   const VerifyOptions& o = {});

/// One parameter of a live job: the caller's buffer holding this rank's shard
/// (Layout::ShardOf(name, shape, rank).region, row-major; a flat range for flat placements).
struct ParamBuffer {
  std::string name;
  std::vector<uint64_t> shape;  // global shape
  DType dtype = DType::kF32;
  const void* data = nullptr;  // host pointer, or device pointer when on_device
  size_t bytes = 0;            // must equal the shard's element count x dtype size
  bool on_device = false;      // CUDA device memory (needs a CUDA build and a GPU)
};

/// The live-job check in one call: fingerprints the caller's shard buffers (host on the CPU,
/// device with the CUDA kernels, nothing copied), exchanges, decides. With `reference` (a spec
/// or a store, e.g. what the job was initialized or loaded from), each rank also computes the
/// expected fingerprint of its region of every tensor the reference has (lazy: generated and
/// hashed; dense: the region read), so off-spec shards are named and composition is checked;
/// without one, replica agreement is checked and composed fingerprints are reported.
/// Errors: kInvalidArgument (a buffer of the wrong size, null data, a tensor whose shape or
/// dtype differs from the reference's, ranks passing different names/shapes/layouts, layout
/// world size != comm.size()), kUnsupported (device buffers without CUDA), kIo.
Result<VerifyReport> VerifyBuffers(Exchange& comm, const std::vector<ParamBuffer>& params,
                                   const Layout& layout, const Catalog* reference = nullptr,
                                   const VerifyOptions& o = {});

/// VerifyBuffers for a process that holds several ranks of the layout (a JAX process driving
/// several devices): member p of `comm` holds ranks p*k .. p*k+k-1, k = hosted.size() (the same
/// on every member), and hosted[j] is rank p*k+j's buffers, the same tensors in the same order
/// on every rank (ExchangeAndDecideHosted). VerifyBuffers is this with k = 1. Errors: as
/// VerifyBuffers; kInvalidArgument also when hosted is empty, its entries list different
/// tensors, or layout.world_size() != comm.size() x k.
Result<VerifyReport> VerifyHostedBuffers(Exchange& comm,
                                         const std::vector<std::vector<ParamBuffer>>& hosted,
                                         const Layout& layout, const Catalog* reference = nullptr,
                                         const VerifyOptions& o = {});

}  // namespace seedstore
