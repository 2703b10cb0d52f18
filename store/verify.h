// Cross-rank verification (invariants I1, I4): do the ranks of a job hold one model, and do
// their shards compose to the tensors they should?
//
// Every rank fingerprints the shard of every tensor it holds (the region Layout::ShardOf gives
// it). The ranks then exchange these fingerprints -- 16 bytes plus one flag byte per tensor
// per rank, i.e. O(#tensors x ranks x 17) bytes in one all-gather, plus an all-reduce of
// 3 x u64 per tensor -- and every rank reaches the same verdict. Two things are checked:
//
//  (a) Replica agreement. Ranks holding the same region (Shard::replicas) must hold the same
//      fingerprint. When they do not, the value held by strictly more replicas than any other
//      value is the consensus (plurality vote) and every other replica is named as deviating;
//      when two or more values share the highest count, the group is reported as a tie and no
//      rank is blamed.
//  (b) Composition. The consensus fingerprints of the tensor's distinct regions are summed
//      (I4: disjoint pieces add up; each region counted once however many replicas hold it)
//      and compared with a reference:
//        * "recorded": the whole-tensor fingerprint the catalog records, when it has one;
//        * "spec": otherwise, when every owner (replica_index 0) knows the expected
//          fingerprint of its region (a lazy spec: generated and hashed, never materialized),
//          the all-reduced sum of those expected fingerprints;
//        * otherwise the tensor is "not checked" and only its composed fingerprint is
//          reported (compare it across runs or layouts: it does not depend on the layout).
//      When a replica group ties, the composition is "undetermined".
//      A shard whose fingerprint differs from its expected one is flagged "off-spec" with its
//      rank, which locates a composition failure (e.g. a layout-dependent RNG: every shard is
//      a valid sample, replicas agree, yet the shards are not slices of the spec's tensor).
//
// This file holds the logic and needs no MPI: the exchange goes through the small `Exchange`
// interface that io/collective.h implements (MPI, NCCL, or a world of one).
#pragma once
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "gen/dtype.h"
#include "gen/fingerprint.h"
#include "store/layout.h"
#include "store/status.h"

namespace seedstore {

/// What verification needs from a collective: a world of ranks, an all-gather of equal-sized
/// host byte blocks and an element-wise all-reduce of u64 sums (mod 2^64). Every rank must
/// make the same calls in the same order. A failure (a peer that died or missed the deadline)
/// returns kIo; the exchange is then unusable (see io/collective.h: Collective::Abort).
class Exchange {
 public:
  virtual ~Exchange() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// recv (size() * bytes) gets rank r's `bytes` bytes of `send` at offset r * bytes. `what`
  /// names the step in error messages.
  virtual Status AllGather(const void* send, size_t bytes, void* recv, const char* what) = 0;
  /// data[i] = sum over ranks of data[i], mod 2^64, on every rank.
  virtual Status AllReduceSum(uint64_t* data, size_t n, const char* what) = 0;
  /// Returns once every rank has called it.
  virtual Status Barrier(const char* what) = 0;
};

/// One tensor as one rank sees it: identity, and the fingerprint of the rank's shard.
struct LocalShard {
  std::string name;
  std::vector<uint64_t> shape;
  DType dtype = DType::kF32;
  /// Fingerprint of the rank's region (Layout::ShardOf(name, shape, rank).region).
  Fingerprint actual;
  /// False when the rank could not read or fingerprint its shard: the reason is in `error`
  /// (printed by that rank only) and its code in `error_code` (sent to every rank, so the
  /// job's exit code says what failed, e.g. kCorrupt for a damaged file).
  bool has_actual = true;
  std::string error;
  Code error_code = Code::kInternal;
  /// The fingerprint the rank's region should have (e.g. from the lazy spec), if known.
  std::optional<Fingerprint> expected;
  /// The recorded whole-tensor fingerprint, if the source records one. Must be the same on
  /// every rank (it is part of the input digest).
  std::optional<Fingerprint> recorded;
};

/// A replica group (one distinct region) with a problem.
struct GroupReport {
  Region region;
  std::vector<int> replicas;  // ranks holding the region, ascending
  /// Distinct fingerprints held, most-voted first, each with its ranks.
  std::vector<std::pair<Fingerprint, std::vector<int>>> votes;
  std::optional<Fingerprint> consensus;  // unset on a tie or when no replica has a value
  bool tie = false;
  std::vector<int> deviating;      // replicas whose fingerprint differs from the consensus
  std::vector<int> off_spec;       // replicas whose fingerprint differs from their expected one
  std::vector<int> failed;         // replicas that could not fingerprint their shard
  std::vector<Code> failed_codes;  // why, parallel to `failed` (LocalShard::error_code)
};

/// kIncomplete: no two replicas that hold a value disagree, but some replica could not
/// fingerprint its shard, so agreement is not established. A tie outranks a mismatch, which
/// outranks incomplete.
enum class ReplicaVerdict { kAgree, kIncomplete, kMismatch, kTie };
enum class CompositionVerdict { kOk, kMismatch, kNotChecked, kUndetermined };
const char* ReplicaVerdictName(ReplicaVerdict v);          // "agree", "incomplete", "mismatch",
                                                           // "tie"
const char* CompositionVerdictName(CompositionVerdict v);  // "ok", "mismatch", "not_checked",
                                                           // "undetermined"

/// The verdict on one tensor.
struct TensorReport {
  std::string name;
  size_t num_groups = 0;    // distinct regions
  size_t max_replicas = 0;  // largest replica group
  ReplicaVerdict replicas = ReplicaVerdict::kAgree;
  CompositionVerdict composition = CompositionVerdict::kNotChecked;
  /// "recorded" or "spec" when composition was checked, else empty.
  std::string reference;
  Fingerprint composed;                 // sum of consensus fingerprints (valid unless undetermined)
  std::optional<Fingerprint> expected;  // the reference value
  std::vector<GroupReport> problems;    // groups with deviating, off-spec or failed ranks, or ties
  bool ok() const;
};

/// Seconds spent in each phase on this rank.
struct VerifyTiming {
  double fingerprint_s = 0;  // local fingerprinting
  double wait_s = 0;         // barrier: waiting for the slowest rank to finish fingerprinting
  double exchange_s = 0;     // all-gather and all-reduce of the fingerprints
  double total_s = 0;
};

/// The verdict of every tensor; identical on every rank.
struct VerifyReport {
  int world = 1;
  std::vector<TensorReport> tensors;
  VerifyTiming timing;
  uint64_t bytes_exchanged = 0;  // bytes this rank received in the exchange
  bool ok() const;
  size_t CountReplicaProblems() const;      // tensors with a mismatch or tie
  size_t CountCompositionProblems() const;  // tensors with a composition mismatch
  size_t CountFailures() const;             // tensors some rank could not fingerprint
  /// OK; kMismatch when replicas disagree or shards do not compose (whatever else failed);
  /// otherwise, when some rank could not fingerprint a shard, that failure's code (the first
  /// failing tensor's lowest failing rank: kCorrupt for a damaged file, kNotFound, kIo, ...).
  /// The message is one line naming the first problem tensors.
  Status ToStatus() const;
  /// Human-readable table: one row per tensor (only problem rows when `problems_only`), then
  /// one line per problem naming tensor, region and ranks, then a summary line.
  std::string Table(bool problems_only = false) const;
  /// The report as JSON: "tensors" lists every tensor (only those with a problem when
  /// `problems_only`); "summary" always counts them all.
  nlohmann::json ToJson(bool problems_only = false) const;
};

/// Digest (XXH3-128) of the inputs every rank must agree on: the layout and each tensor's
/// name, dtype, shape and recorded fingerprint.
Fingerprint InputDigest(const Layout& layout, const std::vector<LocalShard>& shards);

/// Checks over `ex` that every rank passes the same inputs (InputDigest) and that the layout's
/// world size equals ex.size() x `hosted` (the layout ranks each member of `ex` holds, see
/// ExchangeAndDecide). Errors (identical on every rank): kInvalidArgument naming the ranks
/// (with hosted > 1: the processes) whose inputs differ from member 0's, or the size
/// mismatch; kIo from the exchange. Call it before the expensive local fingerprinting, so a
/// mismatch is reported at once.
Status CheckSameInputs(Exchange& ex, const Layout& layout, const std::vector<LocalShard>& shards,
                       int hosted = 1);

/// The pure decision: given every rank's fingerprints, decide (a) and (b) above.
/// `fps[r][i]` / `flags[r][i]` are rank r's fingerprint / flags for tensor i: kFlagHasActual,
/// kFlagOffSpec, and -- when kFlagHasActual is clear -- the failure's Code in the bits above
/// kFlagCodeShift (FailureFlags); `expected_sum[i]` is the sum of the owners' expected fingerprints
/// and `expected_count[i]` how many owners contributed one. Errors: as Layout::DistinctShards.
enum : uint8_t { kFlagHasActual = 1, kFlagOffSpec = 2, kFlagCodeShift = 2 };
/// The flag byte of a shard that could not be fingerprinted for reason `c`.
inline uint8_t FailureFlags(Code c) {
  return static_cast<uint8_t>(static_cast<int>(c) << kFlagCodeShift);
}
Result<VerifyReport> Decide(const Layout& layout, const std::vector<LocalShard>& shards,
                            const std::vector<std::vector<Fingerprint>>& fps,
                            const std::vector<std::vector<uint8_t>>& flags,
                            const std::vector<Fingerprint>& expected_sum,
                            const std::vector<uint64_t>& expected_count);

/// Exchanges this rank's shard fingerprints with every rank and decides. `shards` must list
/// the same tensors in the same order on every rank (CheckSameInputs). Time O(#tensors x
/// world) after the exchange; traffic per rank O(#tensors x world x 17 bytes). The report is
/// identical on every rank. Errors: kIo from the exchange; kInvalidArgument from the layout.
/// A disagreement is not an error here: inspect the report (ToStatus()).
Result<VerifyReport> ExchangeAndDecide(Exchange& ex, const Layout& layout,
                                       const std::vector<LocalShard>& shards);

/// The same for a member of `ex` that holds several ranks of the layout (a JAX process driving
/// several devices): member p holds ranks p*k .. p*k+k-1, k = hosted.size() (the same on every
/// member), and hosted[j] is rank p*k+j's shards, the same tensors in the same order on every
/// rank. One all-gather of k blocks per member; the report is the one ExchangeAndDecide over a
/// world of layout.world_size() ranks would give. Errors: kInvalidArgument when hosted is
/// empty, its entries list different tensors, or layout.world_size() != ex.size() x k; as
/// ExchangeAndDecide otherwise.
Result<VerifyReport> ExchangeAndDecideHosted(Exchange& ex, const Layout& layout,
                                             const std::vector<std::vector<LocalShard>>& hosted);

}  // namespace seedstore
