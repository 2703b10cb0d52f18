// Randomized live-job verification (invariants I1, I4): random models and
// layouts (tests/random_model_test_util.h) over an in-process world of the layout's ranks. Each
// rank passes its shard of every tensor, sliced from the whole values, to VerifyBuffers with the
// model's store as reference:
//   * untouched, every tensor agrees and composes, to the store's recorded fingerprint and to
//     the whole tensor's, on every rank (I4: whatever the layout);
//   * with one bit flipped on one rank in one tensor, exactly that tensor is reported, with
//     exactly that rank: deviating (three or more replicas, plurality vote), a tie (two), or
//     a shard that does not compose (no replica); the rank is off-spec in every case.
// Bits are flipped anywhere: sign bits of zeros, NaN payloads, bool bytes, the last element.
//
// SEEDSTORE_VERIFY_CASES (default 40) and SEEDSTORE_VERIFY_SEED (default 1) widen the search; a
// failure names the case's seed.
#include <mutex>
#include <random>

#include "io/collective.h"
#include "io/h5store.h"
#include "tests/random_model_test_util.h"
#include "tests/rank_test_util.h"

namespace seedstore {
namespace {

using ranktest::Model;
using ranktest::TempDir;

struct Flip {
  int rank = -1;  // -1: none
  std::string tensor;
  uint64_t byte = 0;  // in the rank's shard buffer
  int bit = 0;
};

// Runs VerifyBuffers on every rank of an in-process world; returns the reports by rank.
std::vector<Result<VerifyReport>> RunWorld(const Model& m, const Layout& layout, const Catalog& ref,
                                           const Flip& flip, std::mt19937_64& rng) {
  const int world = layout.world_size();
  std::vector<Result<VerifyReport>> out;
  for (int r = 0; r < world; ++r) out.emplace_back(Internal("not run"));
  std::vector<int> threads(world);
  for (int& t : threads) t = 1 + static_cast<int>(rng() % 2);
  std::mutex mu;
  ranktest::ThreadWorld w(world);
  w.Run([&](Exchange& ex) {
    std::vector<std::vector<unsigned char>> storage;
    std::vector<ParamBuffer> params;
    storage.reserve(m.names.size());
    for (const std::string& name : m.names) {
      const std::vector<uint64_t>& shape = m.shapes.at(name);
      auto sh = layout.ShardOf(name, shape, ex.rank());
      EXPECT_TRUE(sh.ok()) << sh.status().ToString();
      const size_t es = DTypeSize(m.dtypes.at(name));
      storage.push_back(ranktest::Slice(m.values.at(name), sh->region, es));
      if (flip.rank == ex.rank() && flip.tensor == name)
        storage.back()[flip.byte] ^= 1u << flip.bit;
      ParamBuffer p;
      p.name = name;
      p.shape = shape;
      p.dtype = m.dtypes.at(name);
      p.data = storage.back().data();
      p.bytes = storage.back().size();
      params.push_back(p);
    }
    VerifyOptions o;
    o.cpu.threads = threads[ex.rank()];
    auto rep = VerifyBuffers(ex, params, layout, &ref, o);
    std::lock_guard<std::mutex> lock(mu);
    out[ex.rank()] = std::move(rep);
  });
  return out;
}

TEST(VerifyRandom, OneFlippedBitNamesExactlyItsTensorAndRankUnderRandomLayouts) {
  const uint64_t cases = ranktest::EnvU64("SEEDSTORE_VERIFY_CASES", 40);
  const uint64_t base = ranktest::EnvU64("SEEDSTORE_VERIFY_SEED", 1);
  std::map<std::string, int> seen;  // how many flips gave each verdict
  for (uint64_t c = 0; c < cases; ++c) {
    const uint64_t seed = base + c;
    SCOPED_TRACE("case seed " + std::to_string(seed) + " (SEEDSTORE_VERIFY_SEED=" +
                 std::to_string(seed) + " SEEDSTORE_VERIFY_CASES=1 reproduces it)");
    std::mt19937_64 rng(seed);
    const Model m = ranktest::RandomModel(rng, seed);
    const std::string store = TempDir() + "/vr" + std::to_string(seed) + ".h5";
    WriteOptions wo;
    wo.chunk_bytes = 256;
    ranktest::WriteModelStore(m, store, wo);
    if (HasFatalFailure()) return;
    auto ref = H5Store::Open(store);
    ASSERT_TRUE(ref.ok()) << ref.status().ToString();
    const std::string lpath = ranktest::RandomLayout(rng, m, "vr" + std::to_string(seed) + ".json");
    auto layout = Layout::Load(lpath);
    ASSERT_TRUE(layout.ok()) << layout.status().ToString();
    SCOPED_TRACE("layout " + lpath);

    // Untouched: every tensor agrees and composes to its recorded and whole fingerprint.
    auto clean = RunWorld(m, *layout, **ref, Flip{}, rng);
    for (int r = 0; r < layout->world_size(); ++r) {
      ASSERT_TRUE(clean[r].ok()) << clean[r].status().ToString();
      EXPECT_TRUE(clean[r]->ok()) << clean[r]->Table();
      ASSERT_EQ(clean[r]->tensors.size(), m.names.size());
      for (size_t i = 0; i < m.names.size(); ++i) {
        const TensorReport& t = clean[r]->tensors[i];
        const TensorRecord& rec = (*ref)->tensors()[i];
        EXPECT_EQ(t.composition, CompositionVerdict::kOk) << t.name;
        EXPECT_EQ(t.composed,
                  FingerprintOf(rec, WholeTensor(rec.shape), m.values.at(t.name).data()))
            << t.name;
      }
    }

    // One bit flipped in one rank's non-empty shard of one tensor.
    std::vector<std::pair<std::string, int>> candidates;  // (tensor, rank) with elements
    for (const std::string& name : m.names)
      for (int r = 0; r < layout->world_size(); ++r)
        if (auto sh = layout->ShardOf(name, m.shapes.at(name), r); sh.ok() && !sh->empty())
          candidates.emplace_back(name, r);
    if (candidates.empty()) continue;  // a model of empty tensors
    const auto& [tensor, rank] = candidates[rng() % candidates.size()];
    const Shard sh = *layout->ShardOf(tensor, m.shapes.at(tensor), rank);
    const size_t bytes = sh.region.Count() * DTypeSize(m.dtypes.at(tensor));
    Flip flip{rank, tensor, rng() % 3 == 0 ? bytes - 1 : rng() % bytes,
              static_cast<int>(rng() % 8)};
    SCOPED_TRACE("flipped bit " + std::to_string(flip.bit) + " of byte " +
                 std::to_string(flip.byte) + " of rank " + std::to_string(rank) + "'s shard of " +
                 tensor + " " + DescribeRegion(sh.region) + ", " +
                 std::to_string(sh.replicas.size()) + " replicas");
    auto bad = RunWorld(m, *layout, **ref, flip, rng);
    for (int r = 0; r < layout->world_size(); ++r) {
      ASSERT_TRUE(bad[r].ok()) << bad[r].status().ToString();
      const VerifyReport& rep = *bad[r];
      EXPECT_FALSE(rep.ok());
      EXPECT_EQ(rep.ToStatus().message(), bad[0]->ToStatus().message())
          << "rank " << r << " vs rank 0";
      for (const TensorReport& t : rep.tensors) {
        if (t.name != tensor) {
          EXPECT_TRUE(t.ok()) << t.name << "\n" << rep.Table();
          continue;
        }
        ASSERT_EQ(t.problems.size(), 1u) << rep.Table();
        const GroupReport& g = t.problems[0];
        EXPECT_EQ(g.replicas, sh.replicas);
        EXPECT_EQ(g.off_spec, std::vector<int>{rank}) << rep.Table();
        EXPECT_TRUE(g.failed.empty());
        if (sh.replicas.size() >= 3) {
          EXPECT_EQ(t.replicas, ReplicaVerdict::kMismatch) << rep.Table();
          EXPECT_EQ(g.deviating, std::vector<int>{rank});
          EXPECT_EQ(t.composition, CompositionVerdict::kOk);  // the consensus is right
          if (r == 0) ++seen["deviating"];
        } else if (sh.replicas.size() == 2) {
          EXPECT_EQ(t.replicas, ReplicaVerdict::kTie) << rep.Table();
          EXPECT_TRUE(g.tie);
          EXPECT_EQ(t.composition, CompositionVerdict::kUndetermined);
          if (r == 0) ++seen["tie"];
        } else {
          EXPECT_EQ(t.replicas, ReplicaVerdict::kAgree) << rep.Table();
          EXPECT_EQ(t.composition, CompositionVerdict::kMismatch);
          if (r == 0) ++seen["does not compose"];
        }
      }
    }
  }
  std::printf("[ verify   ] %llu cases; flips by verdict:", static_cast<unsigned long long>(cases));
  for (const auto& [k, n] : seen) std::printf(" %s %d", k.c_str(), n);
  std::printf("\n");
  if (cases >= 20) {
    EXPECT_EQ(seen.size(), 3u) << "every kind of verdict should have been drawn";
  }
}

}  // namespace
}  // namespace seedstore
