#include "store/verify.h"

#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "store/spec.h"

namespace seedstore {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string RankList(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i) s += ", ";
    if (i == 8 && ranks.size() > 10) {
      s += "... (" + std::to_string(ranks.size()) + " ranks)";
      break;
    }
    s += std::to_string(ranks[i]);
  }
  return s;
}

std::string Ranks(const std::vector<int>& ranks) {
  return (ranks.size() == 1 ? "rank " : "ranks ") + RankList(ranks);
}

nlohmann::json JsonRanks(const std::vector<int>& r) { return nlohmann::json(r); }

void AppendU64(std::string* s, uint64_t v) { s->append(reinterpret_cast<const char*>(&v), 8); }

}  // namespace

const char* ReplicaVerdictName(ReplicaVerdict v) {
  switch (v) {
    case ReplicaVerdict::kAgree:
      return "agree";
    case ReplicaVerdict::kIncomplete:
      return "incomplete";
    case ReplicaVerdict::kMismatch:
      return "mismatch";
    case ReplicaVerdict::kTie:
      return "tie";
  }
  return "?";
}

const char* CompositionVerdictName(CompositionVerdict v) {
  switch (v) {
    case CompositionVerdict::kOk:
      return "ok";
    case CompositionVerdict::kMismatch:
      return "mismatch";
    case CompositionVerdict::kNotChecked:
      return "not_checked";
    case CompositionVerdict::kUndetermined:
      return "undetermined";
  }
  return "?";
}

bool TensorReport::ok() const {
  return replicas == ReplicaVerdict::kAgree &&
         (composition == CompositionVerdict::kOk ||
          composition == CompositionVerdict::kNotChecked) &&
         problems.empty();
}

bool VerifyReport::ok() const {
  for (const auto& t : tensors)
    if (!t.ok()) return false;
  return true;
}

size_t VerifyReport::CountReplicaProblems() const {
  size_t n = 0;
  for (const auto& t : tensors)
    n += t.replicas == ReplicaVerdict::kMismatch || t.replicas == ReplicaVerdict::kTie;
  return n;
}

size_t VerifyReport::CountCompositionProblems() const {
  size_t n = 0;
  for (const auto& t : tensors) n += t.composition == CompositionVerdict::kMismatch;
  return n;
}

size_t VerifyReport::CountFailures() const {
  size_t n = 0;
  for (const auto& t : tensors) {
    bool f = false;
    for (const auto& g : t.problems) f |= !g.failed.empty();
    n += f;
  }
  return n;
}

Status VerifyReport::ToStatus() const {
  if (ok()) return Status::Ok();
  std::string first;
  int shown = 0;
  for (const auto& t : tensors) {
    if (t.ok()) continue;
    if (shown == 3) {
      first += ", ...";
      break;
    }
    first += (shown ? ", '" : "'") + t.name + "'";
    ++shown;
  }
  const std::string msg =
      std::to_string(CountReplicaProblems()) + " tensor(s) whose replicas disagree, " +
      std::to_string(CountCompositionProblems()) + " whose shards do not compose to the tensor, " +
      std::to_string(CountFailures()) + " not fingerprinted, over " + std::to_string(world) +
      " ranks (" + first + ")";
  if (!CountReplicaProblems() && !CountCompositionProblems())
    for (const auto& t : tensors)
      for (const auto& g : t.problems)
        if (!g.failed.empty())
          return Status(g.failed_codes[0], msg + ": '" + t.name + "' " + DescribeRegion(g.region) +
                                               ": rank " + std::to_string(g.failed[0]) +
                                               " could not fingerprint it (see its stderr)");
  return Mismatch(msg);  // disagreement (or an off-spec shard) outranks a failure
}

namespace {

std::string ReplicaCell(const TensorReport& t) {
  if (t.replicas == ReplicaVerdict::kAgree) return t.max_replicas > 1 ? "agree" : "-";
  if (t.replicas == ReplicaVerdict::kTie) return "TIE";
  if (t.replicas == ReplicaVerdict::kIncomplete) {
    std::vector<int> failed;
    for (const auto& g : t.problems) failed.insert(failed.end(), g.failed.begin(), g.failed.end());
    std::sort(failed.begin(), failed.end());
    return "FAILED: " + Ranks(failed);
  }
  std::vector<int> dev;
  for (const auto& g : t.problems) dev.insert(dev.end(), g.deviating.begin(), g.deviating.end());
  std::sort(dev.begin(), dev.end());
  return "MISMATCH: " + Ranks(dev);
}

std::string CompositionCell(const TensorReport& t) {
  switch (t.composition) {
    case CompositionVerdict::kOk:
      return "ok (" + t.reference + ")";
    case CompositionVerdict::kMismatch:
      return "MISMATCH (" + t.reference + ")";
    case CompositionVerdict::kNotChecked:
      return "not checked";
    case CompositionVerdict::kUndetermined:
      return "undetermined";
  }
  return "?";
}

}  // namespace

std::string VerifyReport::Table(bool problems_only) const {
  size_t w = 6;
  for (const auto& t : tensors)
    if (!problems_only || !t.ok()) w = std::max(w, TextWidth(t.name));
  w = std::min<size_t>(w, 60);
  std::ostringstream os;
  char line[512];
  std::snprintf(line, sizeof line, "%s  %7s  %-24s  %-20s  %s\n", PadRight("TENSOR", w).c_str(),
                "SHARDS", "REPLICAS", "COMPOSITION", "FINGERPRINT");
  os << line;
  for (const auto& t : tensors) {
    if (problems_only && t.ok()) continue;
    const std::string shards = std::to_string(t.num_groups) + "x" + std::to_string(t.max_replicas);
    std::snprintf(line, sizeof line, "%s  %7s  %-24s  %-20s  %s\n", PadRight(t.name, w).c_str(),
                  shards.c_str(), ReplicaCell(t).c_str(), CompositionCell(t).c_str(),
                  t.composition == CompositionVerdict::kUndetermined
                      ? "-"
                      : FingerprintHex(t.composed).c_str());
    os << line;
  }
  bool header = false;
  for (const auto& t : tensors) {
    if (t.ok()) continue;
    if (!header) {
      os << "\nproblems:\n";
      header = true;
    }
    for (const auto& g : t.problems) {
      const std::string where = "  '" + t.name + "' " + DescribeRegion(g.region) + " (held by " +
                                Ranks(g.replicas) + "): ";
      if (!g.failed.empty()) {
        os << where << Ranks(g.failed) << " could not fingerprint the shard (";
        for (size_t k = 0; k < g.failed.size() && k < 4; ++k)
          os << (k ? ", " : "") << (g.failed.size() > 1 ? std::to_string(g.failed[k]) + ": " : "")
             << CodeName(g.failed_codes[k]);
        os << (g.failed.size() > 4 ? ", ..." : "") << "; see its stderr)\n";
      }
      if (g.tie) {
        os << where << "replicas disagree and the vote is a TIE:";
        for (const auto& [fp, rs] : g.votes)
          os << " {" << RankList(rs) << "} " << FingerprintHex(fp);
        os << "\n";
      } else if (!g.deviating.empty()) {
        os << where << "replicas disagree: " << Ranks(g.deviating)
           << (g.deviating.size() == 1 ? " deviates" : " deviate") << " from the majority {"
           << RankList(g.votes.front().second) << "} " << FingerprintHex(*g.consensus) << "\n";
      }
      if (!g.off_spec.empty())
        os << where << Ranks(g.off_spec) << (g.off_spec.size() == 1 ? " holds" : " hold")
           << " a shard that differs from the spec\n";
    }
    if (t.composition == CompositionVerdict::kMismatch)
      os << "  '" << t.name << "': shards do not compose to the tensor: sum of distinct shards "
         << FingerprintHex(t.composed) << " != " << t.reference << " "
         << FingerprintHex(*t.expected) << "\n";
  }
  size_t ok = 0, unchecked = 0;
  for (const auto& t : tensors) {
    ok += t.ok();
    unchecked += t.composition == CompositionVerdict::kNotChecked;
  }
  os << "\n"
     << tensors.size() << " tensors over " << world << " ranks: " << ok << " ok, "
     << CountReplicaProblems() << " replica disagreement(s), " << CountCompositionProblems()
     << " composition mismatch(es), " << CountFailures() << " not fingerprinted";
  if (unchecked) os << "; composition not checked for " << unchecked << " (no reference)";
  os << "\n";
  return os.str();
}

nlohmann::json VerifyReport::ToJson(bool problems_only) const {
  nlohmann::json j;
  j["world"] = world;
  j["ok"] = ok();
  nlohmann::json ts = nlohmann::json::array();
  for (const auto& t : tensors) {
    if (problems_only && t.ok()) continue;
    nlohmann::json jt;
    jt["name"] = t.name;
    jt["ok"] = t.ok();
    jt["shards"] = t.num_groups;
    jt["max_replicas"] = t.max_replicas;
    jt["replicas"] = ReplicaVerdictName(t.replicas);
    jt["composition"] = CompositionVerdictName(t.composition);
    jt["reference"] = t.reference.empty() ? nlohmann::json() : nlohmann::json(t.reference);
    jt["composed"] = t.composition == CompositionVerdict::kUndetermined
                         ? nlohmann::json()
                         : nlohmann::json(FingerprintHex(t.composed));
    jt["expected"] = t.expected ? nlohmann::json(FingerprintHex(*t.expected)) : nlohmann::json();
    nlohmann::json gs = nlohmann::json::array();
    for (const auto& g : t.problems) {
      nlohmann::json jg;
      jg["region"] = DescribeRegion(g.region);
      jg["replicas"] = JsonRanks(g.replicas);
      jg["tie"] = g.tie;
      jg["consensus"] =
          g.consensus ? nlohmann::json(FingerprintHex(*g.consensus)) : nlohmann::json();
      jg["deviating"] = JsonRanks(g.deviating);
      jg["off_spec"] = JsonRanks(g.off_spec);
      jg["failed"] = JsonRanks(g.failed);
      nlohmann::json codes = nlohmann::json::array();
      for (Code c : g.failed_codes) codes.push_back(CodeName(c));
      jg["failed_codes"] = codes;
      nlohmann::json vs = nlohmann::json::array();
      for (const auto& [fp, rs] : g.votes)
        vs.push_back({{"fingerprint", FingerprintHex(fp)}, {"ranks", JsonRanks(rs)}});
      jg["votes"] = vs;
      gs.push_back(jg);
    }
    jt["problems"] = gs;
    ts.push_back(jt);
  }
  j["tensors"] = ts;
  j["summary"] = {{"tensors", tensors.size()},
                  {"replica_problems", CountReplicaProblems()},
                  {"composition_problems", CountCompositionProblems()},
                  {"failures", CountFailures()}};
  j["timing"] = {{"fingerprint_s", timing.fingerprint_s},
                 {"wait_s", timing.wait_s},
                 {"exchange_s", timing.exchange_s},
                 {"total_s", timing.total_s},
                 {"bytes_exchanged", bytes_exchanged}};
  return j;
}

Fingerprint InputDigest(const Layout& layout, const std::vector<LocalShard>& shards) {
  std::string s = "seedstore-verify-v1";
  s.push_back('\0');
  s += layout.ToJson().dump();
  s.push_back('\0');
  AppendU64(&s, shards.size());
  for (const auto& t : shards) {
    AppendU64(&s, t.name.size());
    s += t.name;
    AppendU64(&s, static_cast<uint64_t>(t.dtype));
    AppendU64(&s, t.shape.size());
    for (uint64_t d : t.shape) AppendU64(&s, d);
    AppendU64(&s, t.recorded.has_value());
    if (t.recorded) {
      AppendU64(&s, t.recorded->lane0);
      AppendU64(&s, t.recorded->lane1);
    }
  }
  const XXH128_hash_t h = XXH3_128bits(s.data(), s.size());
  return Fingerprint{h.low64, h.high64};
}

Status CheckSameInputs(Exchange& ex, const Layout& layout, const std::vector<LocalShard>& shards,
                       int hosted) {
  const Fingerprint mine = InputDigest(layout, shards);
  std::vector<Fingerprint> all(ex.size());
  SEEDSTORE_RETURN_IF_ERROR(ex.AllGather(&mine, sizeof mine, all.data(), "input digests"));
  std::vector<int> differ;
  for (int r = 1; r < ex.size(); ++r)
    if (all[r] != all[0]) differ.push_back(r);
  if (!differ.empty())
    return InvalidArgument(
        (hosted == 1 ? Ranks(differ)
                     : (differ.size() == 1 ? "process " : "processes ") + RankList(differ)) +
        " passed a different catalog or layout than " + (hosted == 1 ? "rank 0 " : "process 0 ") +
        "(tensor names, dtypes, shapes, recorded fingerprints or layout " +
        "differ; input digest " + FingerprintHex(all[differ[0]]) + " vs " + FingerprintHex(all[0]) +
        ")");
  if (layout.world_size() != ex.size() * hosted)
    return InvalidArgument("layout: the mesh has " + std::to_string(layout.world_size()) +
                           " ranks but the job has " + std::to_string(ex.size() * hosted) +
                           (hosted == 1 ? std::string()
                                        : " (" + std::to_string(ex.size()) + " processes x " +
                                              std::to_string(hosted) + ")"));
  return Status::Ok();
}

Result<VerifyReport> Decide(const Layout& layout, const std::vector<LocalShard>& shards,
                            const std::vector<std::vector<Fingerprint>>& fps,
                            const std::vector<std::vector<uint8_t>>& flags,
                            const std::vector<Fingerprint>& expected_sum,
                            const std::vector<uint64_t>& expected_count) {
  VerifyReport rep;
  rep.world = layout.world_size();
  rep.tensors.reserve(shards.size());
  for (size_t i = 0; i < shards.size(); ++i) {
    const LocalShard& s = shards[i];
    SEEDSTORE_ASSIGN_OR_RETURN(std::vector<Shard> groups, layout.DistinctShards(s.name, s.shape));
    TensorReport t;
    t.name = s.name;
    t.num_groups = groups.size();
    bool undetermined = false;
    for (const Shard& g : groups) {
      t.max_replicas = std::max(t.max_replicas, g.replicas.size());
      GroupReport gr;
      gr.region = g.region;
      gr.replicas = g.replicas;
      // Votes: distinct values, first-seen order by rank, then sorted by count (stable).
      for (int r : g.replicas) {
        const uint8_t f = flags[r][i];
        if (!(f & kFlagHasActual)) {
          const int c = f >> kFlagCodeShift;
          gr.failed.push_back(r);
          gr.failed_codes.push_back(c > 0 && c <= static_cast<int>(Code::kInternal)
                                        ? static_cast<Code>(c)
                                        : Code::kInternal);
          continue;
        }
        if (f & kFlagOffSpec) gr.off_spec.push_back(r);
        const Fingerprint& fp = fps[r][i];
        auto it = std::find_if(gr.votes.begin(), gr.votes.end(),
                               [&](const auto& v) { return v.first == fp; });
        if (it == gr.votes.end()) gr.votes.push_back({fp, {r}});
        else it->second.push_back(r);
      }
      std::stable_sort(gr.votes.begin(), gr.votes.end(), [](const auto& a, const auto& b) {
        return a.second.size() > b.second.size();
      });
      if (!gr.votes.empty()) {
        if (gr.votes.size() >= 2 && gr.votes[0].second.size() == gr.votes[1].second.size()) {
          gr.tie = true;
        } else {
          gr.consensus = gr.votes[0].first;
          for (size_t v = 1; v < gr.votes.size(); ++v)
            gr.deviating.insert(gr.deviating.end(), gr.votes[v].second.begin(),
                                gr.votes[v].second.end());
          std::sort(gr.deviating.begin(), gr.deviating.end());
        }
      }
      const ReplicaVerdict v = gr.tie                  ? ReplicaVerdict::kTie
                               : !gr.deviating.empty() ? ReplicaVerdict::kMismatch
                               : !gr.failed.empty()    ? ReplicaVerdict::kIncomplete
                                                       : ReplicaVerdict::kAgree;
      t.replicas = std::max(t.replicas, v);  // enum order is severity order
      if (gr.consensus) t.composed.Add(*gr.consensus);
      else undetermined = true;
      if (gr.tie || !gr.deviating.empty() || !gr.off_spec.empty() || !gr.failed.empty())
        t.problems.push_back(std::move(gr));
    }
    if (s.recorded) {
      t.reference = "recorded";
      t.expected = *s.recorded;
    } else if (expected_count[i] == groups.size()) {
      t.reference = "spec";
      t.expected = expected_sum[i];
    }
    if (undetermined) t.composition = CompositionVerdict::kUndetermined;
    else if (!t.expected) t.composition = CompositionVerdict::kNotChecked;
    else
      t.composition =
          t.composed == *t.expected ? CompositionVerdict::kOk : CompositionVerdict::kMismatch;
    rep.tensors.push_back(std::move(t));
  }
  return rep;
}

Result<VerifyReport> ExchangeAndDecide(Exchange& ex, const Layout& layout,
                                       const std::vector<LocalShard>& shards) {
  return ExchangeAndDecideHosted(ex, layout, {shards});
}

Result<VerifyReport> ExchangeAndDecideHosted(Exchange& ex, const Layout& layout,
                                             const std::vector<std::vector<LocalShard>>& hosted) {
  if (hosted.empty()) return InvalidArgument("verify: this process holds no rank of the layout");
  const size_t k = hosted.size();
  const std::vector<LocalShard>& shards = hosted[0];
  const size_t n = shards.size();
  for (size_t j = 1; j < k; ++j) {
    bool same = hosted[j].size() == n;
    for (size_t i = 0; same && i < n; ++i)
      same = hosted[j][i].name == shards[i].name && hosted[j][i].shape == shards[i].shape &&
             hosted[j][i].dtype == shards[i].dtype;
    if (!same)
      return InvalidArgument(
          "verify: the ranks of one process list different tensors (local rank " +
          std::to_string(j) + " vs 0)");
  }
  const int world = ex.size() * static_cast<int>(k);
  if (layout.world_size() != world)
    return InvalidArgument("layout: the mesh has " + std::to_string(layout.world_size()) +
                           " ranks but the job has " + std::to_string(world));
  const int first = ex.rank() * static_cast<int>(k);
  const double t0 = Now();
  SEEDSTORE_RETURN_IF_ERROR(ex.Barrier("waiting for every rank to finish fingerprinting"));
  const double t1 = Now();

  // One block per rank: n fingerprints (16 bytes each), then n flag bytes; a member sends the
  // blocks of its k ranks in rank order.
  const size_t block = n * sizeof(Fingerprint) + n;
  std::vector<unsigned char> send(block * k), recv(block * world);
  // Owners contribute their expected fingerprint to a sum: lane0, lane1, count per tensor.
  std::vector<uint64_t> sums(3 * n, 0);
  for (size_t j = 0; j < k; ++j) {
    unsigned char* b = send.data() + j * block;
    for (size_t i = 0; i < n; ++i) {
      const LocalShard& s = hosted[j][i];
      uint8_t f = FailureFlags(s.error_code);
      Fingerprint fp{};
      if (s.has_actual) {
        f = kFlagHasActual;
        fp = s.actual;
        if (s.expected && *s.expected != s.actual) f |= kFlagOffSpec;
      }
      std::memcpy(b + i * sizeof(Fingerprint), &fp, sizeof fp);
      b[n * sizeof(Fingerprint) + i] = f;
      if (s.expected) {
        SEEDSTORE_ASSIGN_OR_RETURN(Shard sh,
                                   layout.ShardOf(s.name, s.shape, first + static_cast<int>(j)));
        if (sh.replica_index == 0) {
          sums[3 * i] += s.expected->lane0;
          sums[3 * i + 1] += s.expected->lane1;
          sums[3 * i + 2] += 1;
        }
      }
    }
  }
  SEEDSTORE_RETURN_IF_ERROR(
      ex.AllGather(send.data(), send.size(), recv.data(), "shard fingerprints"));
  SEEDSTORE_RETURN_IF_ERROR(ex.AllReduceSum(sums.data(), sums.size(), "expected fingerprints"));
  const double t2 = Now();

  std::vector<std::vector<Fingerprint>> fps(world, std::vector<Fingerprint>(n));
  std::vector<std::vector<uint8_t>> flags(world, std::vector<uint8_t>(n));
  for (int r = 0; r < world; ++r) {
    const unsigned char* b = recv.data() + r * block;
    if (n) std::memcpy(fps[r].data(), b, n * sizeof(Fingerprint));
    if (n) std::memcpy(flags[r].data(), b + n * sizeof(Fingerprint), n);
  }
  std::vector<Fingerprint> expected_sum(n);
  std::vector<uint64_t> expected_count(n);
  for (size_t i = 0; i < n; ++i) {
    expected_sum[i] = Fingerprint{sums[3 * i], sums[3 * i + 1]};
    expected_count[i] = sums[3 * i + 2];
  }
  SEEDSTORE_ASSIGN_OR_RETURN(VerifyReport rep,
                             Decide(layout, shards, fps, flags, expected_sum, expected_count));
  rep.timing.wait_s = t1 - t0;
  rep.timing.exchange_s = t2 - t1;
  rep.bytes_exchanged = recv.size() + sums.size() * 8;
  return rep;
}

}  // namespace seedstore
