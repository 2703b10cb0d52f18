// Verification logic (store/verify.h, io/collective.h VerifyBuffers) in an in-process world of
// threads: majority vote, ties, composition against recorded and spec references, and the
// users' failure modes. The same scenarios run under real mpirun in test_verify_mpi.cc.
#include <mutex>
#include <nlohmann/json.hpp>

#include "kernels/materialize.h"

#include "tests/rank_test_util.h"

namespace seedstore {
namespace {

using ranktest::BuildJob;
using ranktest::Init;
using ranktest::ThreadWorld;

Fingerprint Fp(uint64_t a) { return Fingerprint{a, ~a}; }

// Decide on hand-made fingerprints and flags (FailureFlags, kFlagHasActual) for one
// replicated tensor over as many ranks as `fps` holds.
VerifyReport DecideOne(const std::vector<uint64_t>& values, const std::vector<uint8_t>& flags,
                       std::optional<Fingerprint> recorded = {}) {
  const int world = static_cast<int>(values.size());
  Layout layout = Layout::Replicated(world);
  LocalShard s;
  s.name = "w";
  s.shape = {4};
  s.recorded = recorded;
  std::vector<std::vector<Fingerprint>> fps(world, std::vector<Fingerprint>(1));
  std::vector<std::vector<uint8_t>> fl(world, std::vector<uint8_t>(1));
  for (int r = 0; r < world; ++r) {
    fps[r][0] = Fp(values[r]);
    fl[r][0] = flags[r];
  }
  auto rep = Decide(layout, {s}, fps, fl, {Fingerprint{}}, {0});
  EXPECT_TRUE(rep.ok()) << rep.status().ToString();
  return rep.ok() ? *rep : VerifyReport{};
}

// ... every rank with a value.
VerifyReport DecideReplicated(const std::vector<uint64_t>& values,
                              std::optional<Fingerprint> recorded = {}) {
  return DecideOne(values, std::vector<uint8_t>(values.size(), kFlagHasActual), recorded);
}

TEST(VerifyDecide, AllAgree) {
  VerifyReport r = DecideReplicated({5, 5, 5, 5});
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(r.tensors[0].replicas, ReplicaVerdict::kAgree);
  EXPECT_EQ(r.tensors[0].composition, CompositionVerdict::kNotChecked);
  EXPECT_EQ(r.tensors[0].composed, Fp(5));  // one region, counted once
  EXPECT_TRUE(r.ToStatus().ok());
}

TEST(VerifyDecide, MajorityNamesTheDeviatingRank) {
  VerifyReport r = DecideReplicated({5, 5, 5, 9});
  ASSERT_FALSE(r.ok());
  const TensorReport& t = r.tensors[0];
  EXPECT_EQ(t.replicas, ReplicaVerdict::kMismatch);
  ASSERT_EQ(t.problems.size(), 1u);
  EXPECT_EQ(t.problems[0].deviating, std::vector<int>{3});
  EXPECT_EQ(*t.problems[0].consensus, Fp(5));
  EXPECT_FALSE(t.problems[0].tie);
  EXPECT_EQ(t.composition, CompositionVerdict::kNotChecked);
  EXPECT_EQ(r.ToStatus().code(), Code::kMismatch);
  EXPECT_NE(r.Table().find("rank 3 deviates from the majority {0, 1, 2}"), std::string::npos)
      << r.Table();
}

TEST(VerifyDecide, PluralityWithSeveralDeviants) {
  VerifyReport r = DecideReplicated({7, 5, 5, 9});
  EXPECT_EQ(r.tensors[0].problems[0].deviating, (std::vector<int>{0, 3}));
  EXPECT_EQ(*r.tensors[0].problems[0].consensus, Fp(5));
}

TEST(VerifyDecide, TwoReplicasThatDifferAreATie) {
  VerifyReport r = DecideReplicated({5, 9});
  const TensorReport& t = r.tensors[0];
  EXPECT_EQ(t.replicas, ReplicaVerdict::kTie);
  EXPECT_TRUE(t.problems[0].tie);
  EXPECT_TRUE(t.problems[0].deviating.empty());  // nobody is blamed on a tie
  EXPECT_FALSE(t.problems[0].consensus.has_value());
  EXPECT_EQ(t.composition, CompositionVerdict::kUndetermined);
  EXPECT_NE(r.Table().find("TIE"), std::string::npos);
  const auto j = r.ToJson();
  EXPECT_EQ(j["tensors"][0]["replicas"], "tie");
  EXPECT_EQ(j["tensors"][0]["problems"][0]["votes"].size(), 2u);
}

TEST(VerifyDecide, TwoTwoSplitIsATie) {
  VerifyReport r = DecideReplicated({5, 9, 5, 9});
  EXPECT_EQ(r.tensors[0].replicas, ReplicaVerdict::kTie);
  EXPECT_EQ(r.tensors[0].problems[0].votes[0].second, (std::vector<int>{0, 2}));
  EXPECT_EQ(r.tensors[0].problems[0].votes[1].second, (std::vector<int>{1, 3}));
}

TEST(VerifyDecide, RecordedReference) {
  EXPECT_EQ(DecideReplicated({5, 5, 5}, Fp(5)).tensors[0].composition, CompositionVerdict::kOk);
  VerifyReport bad = DecideReplicated({5, 5, 5}, Fp(6));
  EXPECT_EQ(bad.tensors[0].composition, CompositionVerdict::kMismatch);
  EXPECT_EQ(bad.tensors[0].reference, "recorded");
  EXPECT_NE(bad.Table().find("shards do not compose to the tensor"), std::string::npos);
}

TEST(VerifyDecide, FailedRankIsReportedNotBlamedForDisagreement) {
  const VerifyReport r =
      DecideOne({5, 5, 5}, {kFlagHasActual, FailureFlags(Code::kCorrupt), kFlagHasActual});
  ASSERT_EQ(r.tensors.size(), 1u);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.tensors[0].problems[0].failed, std::vector<int>{1});
  EXPECT_EQ(r.tensors[0].problems[0].failed_codes, std::vector<Code>{Code::kCorrupt});
  // The two that answered agree, but agreement is not established for the group.
  EXPECT_EQ(r.tensors[0].replicas, ReplicaVerdict::kIncomplete);
  EXPECT_EQ(r.tensors[0].composed, Fp(5));
  EXPECT_EQ(r.CountFailures(), 1u);
  EXPECT_EQ(r.CountReplicaProblems(), 0u);
  // Nothing disagrees, so the job's status is the failure's own code (exit 4 for corrupt).
  const Status st = r.ToStatus();
  EXPECT_EQ(st.code(), Code::kCorrupt) << st.ToString();
  EXPECT_NE(st.message().find("rank 1 could not fingerprint"), std::string::npos) << st.ToString();
  const std::string table = r.Table();
  EXPECT_NE(table.find("FAILED: rank 1"), std::string::npos) << table;
  EXPECT_NE(table.find("rank 1 could not fingerprint the shard (CORRUPT"), std::string::npos)
      << table;
  EXPECT_EQ(table.find("agree "), std::string::npos) << table;
  const auto j = r.ToJson();
  EXPECT_EQ(j["tensors"][0]["replicas"], "incomplete");
  EXPECT_EQ(j["tensors"][0]["problems"][0]["failed_codes"][0], "CORRUPT");
}

TEST(VerifyDecide, DisagreementOutranksAFailureInTheStatus) {
  const VerifyReport r = DecideOne({5, 5, 5, 9}, {FailureFlags(Code::kNotFound), kFlagHasActual,
                                                  kFlagHasActual, kFlagHasActual});
  ASSERT_EQ(r.tensors.size(), 1u);
  EXPECT_EQ(r.tensors[0].replicas, ReplicaVerdict::kMismatch);
  EXPECT_EQ(r.tensors[0].problems[0].deviating, std::vector<int>{3});
  EXPECT_EQ(r.tensors[0].problems[0].failed, std::vector<int>{0});
  EXPECT_EQ(r.ToStatus().code(), Code::kMismatch);
}

TEST(VerifyDecide, AnUnknownFailureCodeReadsAsInternal) {
  // 0 (no code: a caller that cleared has_actual without a reason) and 63 (out of range).
  for (uint8_t flag : {uint8_t{0}, uint8_t{63 << kFlagCodeShift}}) {
    const VerifyReport r = DecideOne({5, 5}, {kFlagHasActual, flag});
    ASSERT_EQ(r.tensors.size(), 1u);
    EXPECT_EQ(r.tensors[0].problems[0].failed_codes, std::vector<Code>{Code::kInternal});
    EXPECT_EQ(r.ToStatus().code(), Code::kInternal);
  }
}

TEST(VerifyDecide, EveryReplicaFailedLeavesCompositionUndetermined) {
  const VerifyReport r =
      DecideOne({0, 0}, {FailureFlags(Code::kIo), FailureFlags(Code::kIo)}, Fp(5));
  ASSERT_EQ(r.tensors.size(), 1u);
  EXPECT_EQ(r.tensors[0].replicas, ReplicaVerdict::kIncomplete);
  EXPECT_EQ(r.tensors[0].composition, CompositionVerdict::kUndetermined);
  EXPECT_EQ(r.ToStatus().code(), Code::kIo);
}

// ---- The live-job API over an in-process world -------------------------------------------

struct WorldResult {
  std::vector<Result<VerifyReport>> reports;
};

WorldResult RunJob(int world, const std::string& layout_json, Init init, bool with_reference,
                   int flip_rank = -1, const std::string& flip_tensor = "") {
  auto spec = ModelSpec::Parse(ranktest::kSmallSpec, "small");
  EXPECT_TRUE(spec.ok());
  auto layout = Layout::Parse(layout_json, "layout");
  EXPECT_TRUE(layout.ok()) << layout.status().ToString();
  auto ref = SpecCatalog::Create(*spec, "small.json");
  EXPECT_TRUE(ref.ok());
  WorldResult out;
  for (int r = 0; r < world; ++r) out.reports.emplace_back(Internal("not run"));
  std::mutex mu;
  ThreadWorld w(world);
  w.Run([&](Exchange& ex) {
    ranktest::JobShards job = BuildJob(*spec, *layout, ex.rank(), init, flip_rank, flip_tensor);
    VerifyOptions o;
    o.cpu.threads = 1;
    auto rep = VerifyBuffers(ex, job.params, *layout, with_reference ? ref->get() : nullptr, o);
    std::lock_guard<std::mutex> lock(mu);
    out.reports[ex.rank()] = std::move(rep);
  });
  return out;
}

TEST(VerifyLive, SeededJobAgreesAndComposesAtEveryWorldSize) {
  auto spec = ModelSpec::Parse(ranktest::kSmallSpec, "small");
  auto ref = SpecCatalog::Create(*spec, "small.json");
  for (int world : {1, 2, 3, 4, 8}) {
    for (bool with_ref : {false, true}) {
      WorldResult res = RunJob(world, ranktest::MeshLayout(world), Init::kSeeded, with_ref);
      for (int r = 0; r < world; ++r) {
        ASSERT_TRUE(res.reports[r].ok()) << res.reports[r].status().ToString();
        const VerifyReport& rep = *res.reports[r];
        EXPECT_TRUE(rep.ok()) << "world " << world << "\n" << rep.Table();
        for (size_t i = 0; i < rep.tensors.size(); ++i) {
          // I4: the composed fingerprint is the whole tensor's, whatever the world size.
          EXPECT_EQ(rep.tensors[i].composed,
                    *(*ref)->FingerprintRegion(i, WholeTensor(spec->tensors[i].shape)))
              << rep.tensors[i].name << " world " << world;
          EXPECT_EQ(rep.tensors[i].composition,
                    with_ref ? CompositionVerdict::kOk : CompositionVerdict::kNotChecked);
        }
      }
    }
  }
}

TEST(VerifyLive, UnseededReplicasAreDetectedAndNamed) {
  // FSDP NO_SHARD: every tensor replicated on every rank; rank r seeded with seed + r.
  const std::string replicated = Layout::Replicated(4).ToJson().dump();
  WorldResult res = RunJob(4, replicated, Init::kUnseeded, /*with_reference=*/false);
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(res.reports[r].ok());
    const VerifyReport& rep = *res.reports[r];
    EXPECT_FALSE(rep.ok());
    EXPECT_EQ(rep.CountReplicaProblems(), rep.tensors.size());
    for (const auto& t : rep.tensors) {
      EXPECT_EQ(t.replicas, ReplicaVerdict::kTie) << t.name;  // four different models
      ASSERT_EQ(t.problems.size(), 1u);
      EXPECT_EQ(t.problems[0].votes.size(), 4u);
    }
  }
  // With the spec as reference, the ranks whose model is not the spec's are named.
  res = RunJob(4, replicated, Init::kUnseeded, /*with_reference=*/true);
  const VerifyReport& rep = *res.reports[0];
  for (const auto& t : rep.tensors) EXPECT_EQ(t.problems[0].off_spec, (std::vector<int>{1, 2, 3}));
}

TEST(VerifyLive, FlippedElementNamesRankAndTensor) {
  const std::string replicated = Layout::Replicated(4).ToJson().dump();
  WorldResult res = RunJob(4, replicated, Init::kSeeded, false, /*flip_rank=*/2, "layers.0.wq");
  const VerifyReport& rep = *res.reports[1];
  ASSERT_EQ(rep.CountReplicaProblems(), 1u);
  for (const auto& t : rep.tensors) {
    if (t.name != "layers.0.wq") {
      EXPECT_TRUE(t.ok()) << t.name;
      continue;
    }
    EXPECT_EQ(t.replicas, ReplicaVerdict::kMismatch);
    EXPECT_EQ(t.problems[0].deviating, std::vector<int>{2});
  }
  EXPECT_NE(rep.ToStatus().message().find("'layers.0.wq'"), std::string::npos);
}

TEST(VerifyLive, FlipInAShardedTensorIsAnOffSpecShard) {
  WorldResult res = RunJob(4, ranktest::MeshLayout(4), Init::kSeeded, true, 3, "embed");
  const VerifyReport& rep = *res.reports[0];
  for (const auto& t : rep.tensors) {
    if (t.name != "embed") continue;
    EXPECT_EQ(t.composition, CompositionVerdict::kMismatch);
    ASSERT_EQ(t.problems.size(), 1u);
    EXPECT_EQ(t.problems[0].off_spec, std::vector<int>{3});
  }
}

TEST(VerifyLive, LayoutDependentRngReplicasAgreeButShardsDoNotCompose) {
  WorldResult res = RunJob(4, ranktest::MeshLayout(4), Init::kLayoutRng, true);
  const VerifyReport& rep = *res.reports[0];
  EXPECT_EQ(rep.CountReplicaProblems(), 0u) << rep.Table();
  for (const auto& t : rep.tensors) {
    EXPECT_EQ(t.replicas, ReplicaVerdict::kAgree) << t.name;
    // "bias" is replicated: its one shard is the whole tensor, so it is right by accident.
    EXPECT_EQ(t.composition,
              t.name == "bias" ? CompositionVerdict::kOk : CompositionVerdict::kMismatch)
        << t.name;
  }
  EXPECT_NE(rep.Table().find("shards do not compose to the tensor"), std::string::npos);
}

TEST(VerifyLive, RanksWithDifferentInputsAreNamed) {
  auto spec = ModelSpec::Parse(ranktest::kSmallSpec, "small");
  Layout layout = Layout::Replicated(3);
  std::vector<Status> st(3);
  ThreadWorld w(3);
  w.Run([&](Exchange& ex) {
    ModelSpec s = *spec;
    if (ex.rank() == 2) s.tensors[1].name = "layers.0.wk";
    ranktest::JobShards job = BuildJob(s, layout, ex.rank(), Init::kSeeded);
    st[ex.rank()] = VerifyBuffers(ex, job.params, layout).status();
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(st[r].code(), Code::kInvalidArgument);
    EXPECT_NE(st[r].message().find("rank 2 passed a different"), std::string::npos)
        << st[r].message();
  }
}

TEST(VerifyLive, WrongBufferSizeIsReportedWithoutHangingTheOthers) {
  auto spec = ModelSpec::Parse(ranktest::kSmallSpec, "small");
  Layout layout = Layout::Replicated(2);
  std::vector<Result<VerifyReport>> reps(2, Internal("not run"));
  ThreadWorld w(2);
  w.Run([&](Exchange& ex) {
    ranktest::JobShards job = BuildJob(*spec, layout, ex.rank(), Init::kSeeded);
    if (ex.rank() == 1) job.params[0].bytes -= 2;
    reps[ex.rank()] = VerifyBuffers(ex, job.params, layout);
  });
  ASSERT_TRUE(reps[0].ok());
  EXPECT_EQ(reps[0]->CountFailures(), 1u);
  EXPECT_EQ(reps[0]->tensors[0].problems[0].failed, std::vector<int>{1});
}

TEST(VerifyLive, LayoutWorldMustMatch) {
  auto spec = ModelSpec::Parse(ranktest::kSmallSpec, "small");
  Layout layout = Layout::Replicated(4);
  ThreadWorld w(2);
  std::vector<Status> st(2);
  w.Run([&](Exchange& ex) {
    ranktest::JobShards job = BuildJob(*spec, Layout::Replicated(2), ex.rank(), Init::kSeeded);
    st[ex.rank()] = VerifyBuffers(ex, job.params, layout).status();
  });
  EXPECT_EQ(st[0].code(), Code::kInvalidArgument);
  EXPECT_NE(st[0].message().find("the mesh has 4 ranks but the job has 2"), std::string::npos);
}

TEST(VerifyLive, DeviceBuffersWithoutCudaAreUnsupportedPerRank) {
  if (CudaAvailable()) GTEST_SKIP() << "a GPU is present: tests/gpu covers device buffers";
  auto spec = ModelSpec::Parse(ranktest::kSmallSpec, "small");
  Layout layout = Layout::Replicated(1);
  ranktest::JobShards job = BuildJob(*spec, layout, 0, Init::kSeeded);
  job.params[0].on_device = true;
  ThreadWorld w(1);
  w.Run([&](Exchange& ex) {
    auto rep = VerifyBuffers(ex, job.params, layout);
    ASSERT_TRUE(rep.ok());
    EXPECT_EQ(rep->CountFailures(), 1u);
  });
}

}  // namespace
}  // namespace seedstore

// ---- Several ranks per process (a JAX process driving several devices) ----------------------

namespace seedstore {
namespace {

// The reports of an 8-rank job run as `procs` members of `procs` threads, each holding 8/procs
// consecutive ranks (VerifyHostedBuffers), rank `flip_rank` flipping one bit of `flip_tensor`.
std::vector<Result<VerifyReport>> RunHosted(int procs, bool with_reference, int flip_rank = -1,
                                            const std::string& flip_tensor = "") {
  auto spec = ModelSpec::Parse(ranktest::kSmallSpec, "small");
  auto layout = Layout::Parse(ranktest::MeshLayout(8), "layout");
  auto ref = SpecCatalog::Create(*spec, "small.json");
  EXPECT_TRUE(spec.ok() && layout.ok() && ref.ok());
  const int k = 8 / procs;
  std::vector<Result<VerifyReport>> out;
  for (int p = 0; p < procs; ++p) out.emplace_back(Internal("not run"));
  std::mutex mu;
  ThreadWorld w(procs);
  w.Run([&](Exchange& ex) {
    std::vector<ranktest::JobShards> jobs;
    std::vector<std::vector<ParamBuffer>> hosted;
    for (int j = 0; j < k; ++j)
      jobs.push_back(
          BuildJob(*spec, *layout, ex.rank() * k + j, Init::kSeeded, flip_rank, flip_tensor));
    for (const auto& job : jobs) hosted.push_back(job.params);
    VerifyOptions o;
    o.cpu.threads = 1;
    auto rep = VerifyHostedBuffers(ex, hosted, *layout, with_reference ? ref->get() : nullptr, o);
    std::lock_guard<std::mutex> lock(mu);
    out[ex.rank()] = std::move(rep);
  });
  return out;
}

std::string Verdicts(const VerifyReport& r) {
  nlohmann::json j = r.ToJson();
  j.erase("timing");
  return j.dump();
}

TEST(VerifyHosted, SameVerdictAsOneRankPerProcess) {
  for (bool with_ref : {false, true}) {
    for (int flip : {-1, 0, 5}) {
      auto one = RunHosted(8, with_ref, flip, "layers.0.wq");
      ASSERT_TRUE(one[0].ok()) << one[0].status().ToString();
      for (int procs : {1, 2, 4}) {
        auto many = RunHosted(procs, with_ref, flip, "layers.0.wq");
        for (int p = 0; p < procs; ++p) {
          ASSERT_TRUE(many[p].ok()) << many[p].status().ToString();
          EXPECT_EQ(Verdicts(*many[p]), Verdicts(*one[0])) << procs << " processes, flip " << flip;
          EXPECT_EQ(many[p]->world, 8);
        }
      }
      EXPECT_EQ(one[0]->ok(), flip < 0) << one[0]->Table();
    }
  }
}

TEST(VerifyHosted, ProcessesWithDifferentInputsAreNamedAsProcesses) {
  auto spec = ModelSpec::Parse(ranktest::kSmallSpec, "small");
  Layout layout = Layout::Replicated(4);
  std::vector<Status> st(2);
  ThreadWorld w(2);
  w.Run([&](Exchange& ex) {
    ModelSpec s = *spec;
    if (ex.rank() == 1) s.tensors[1].name = "layers.0.wk";
    ranktest::JobShards a = BuildJob(s, layout, 2 * ex.rank(), Init::kSeeded);
    ranktest::JobShards b = BuildJob(s, layout, 2 * ex.rank() + 1, Init::kSeeded);
    st[ex.rank()] = VerifyHostedBuffers(ex, {a.params, b.params}, layout).status();
  });
  for (const Status& s : st) {
    EXPECT_EQ(s.code(), Code::kInvalidArgument);
    EXPECT_NE(s.message().find("process 1 passed a different"), std::string::npos) << s.message();
  }
}

TEST(VerifyHosted, WorldIsProcessesTimesHostedRanks) {
  auto spec = ModelSpec::Parse(ranktest::kSmallSpec, "small");
  Layout layout = Layout::Replicated(8);
  std::vector<Status> st(2);
  ThreadWorld w(2);
  w.Run([&](Exchange& ex) {
    ranktest::JobShards a = BuildJob(*spec, layout, 0, Init::kSeeded);
    st[ex.rank()] = VerifyHostedBuffers(ex, {a.params, a.params, a.params}, layout).status();
  });
  EXPECT_EQ(st[0].code(), Code::kInvalidArgument);
  EXPECT_NE(st[0].message().find("the mesh has 8 ranks but the job has 6 (2 processes x 3)"),
            std::string::npos)
      << st[0].message();
  Status empty = Status::Ok();
  ThreadWorld one(1);
  one.Run([&](Exchange& ex) { empty = VerifyHostedBuffers(ex, {}, layout).status(); });
  EXPECT_EQ(empty.code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace seedstore
