// Layout model: every placement notation on hand-checked examples, and every error path
// asserted by code and message (house style H7, tier "unit").
#include <gtest/gtest.h>

#include <unistd.h>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "store/layout.h"

namespace seedstore {
namespace {

using nlohmann::json;
using Shape = std::vector<uint64_t>;

Layout MustParse(const std::string& text) {
  Result<Layout> r = Layout::Parse(text, "test");
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(r).value() : Layout();
}

Shard MustShard(const Layout& l, const std::string& name, const Shape& shape, int rank) {
  Result<Shard> r = l.ShardOf(name, shape, rank);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(r).value() : Shard();
}

std::string Desc(const Layout& l, const std::string& name, const Shape& shape, int rank) {
  return DescribeRegion(MustShard(l, name, shape, rank).region);
}

/// Regions of every rank, e.g. {"[0:3]", "[3:6]", ...}.
std::vector<std::string> AllRegions(const Layout& l, const std::string& name, const Shape& shape) {
  std::vector<std::string> out;
  for (int r = 0; r < l.world_size(); ++r) out.push_back(Desc(l, name, shape, r));
  return out;
}

/// Expects a parse error of kInvalidArgument whose message contains `needle`.
void ExpectParseError(const std::string& text, const std::string& needle) {
  Result<Layout> r = Layout::Parse(text, "bad.json");
  ASSERT_FALSE(r.ok()) << "parsed: " << text;
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << r.status().ToString();
  EXPECT_NE(r.status().message().find(needle), std::string::npos)
      << "message: " << r.status().message() << "\nexpected to contain: " << needle;
  EXPECT_EQ(r.status().message().rfind("bad.json: ", 0), 0u) << r.status().message();
}

void ExpectShardError(const Layout& l, const std::string& name, const Shape& shape, int rank,
                      const std::string& needle) {
  Result<Shard> r = l.ShardOf(name, shape, rank);
  ASSERT_FALSE(r.ok()) << "got " << DescribeRegion(r->region);
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << r.status().ToString();
  EXPECT_NE(r.status().message().find(needle), std::string::npos)
      << "message: " << r.status().message() << "\nexpected to contain: " << needle;
}

const char* kMesh224 = R"j("mesh": {"axes": ["data", "pipeline", "tensor"], "shape": [2, 4, 1]})j";

std::string WithMesh(const std::string& rest) {
  return std::string("{") + kMesh224 + (rest.empty() ? "" : ", " + rest) + "}";
}

// ---- mesh ---------------------------------------------------------------------------------

TEST(Mesh, RowMajorCoordinates) {
  Result<Mesh> m = Mesh::Create({"data", "pipeline", "tensor"}, {2, 4, 1});
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->world_size(), 8);
  EXPECT_EQ(*m->Coords(0), (std::vector<int>{0, 0, 0}));
  EXPECT_EQ(*m->Coords(5), (std::vector<int>{1, 1, 0}));
  EXPECT_EQ(*m->Coords(7), (std::vector<int>{1, 3, 0}));
  EXPECT_EQ(m->RankAt({1, 2, 0}), 6);
  EXPECT_EQ(m->AxisIndex("pipeline"), 1);
  EXPECT_EQ(m->AxisIndex("model"), -1);
  EXPECT_FALSE(m->has_explicit_devices());
}

TEST(Mesh, ExplicitDevices) {
  // Position p (row-major) holds rank devices[p], as jax.sharding.Mesh(devices.reshape(...)).
  Result<Mesh> m = Mesh::Create({"data", "tensor"}, {2, 2}, {3, 1, 0, 2});
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_TRUE(m->has_explicit_devices());
  EXPECT_EQ(*m->Coords(3), (std::vector<int>{0, 0}));
  EXPECT_EQ(*m->Coords(1), (std::vector<int>{0, 1}));
  EXPECT_EQ(*m->Coords(0), (std::vector<int>{1, 0}));
  EXPECT_EQ(*m->Coords(2), (std::vector<int>{1, 1}));
  EXPECT_EQ(m->RankAt({1, 0}), 0);
}

TEST(Mesh, NoAxesIsOneRank) {
  Layout l = MustParse(R"j({"mesh": {"axes": [], "shape": []}})j");
  EXPECT_EQ(l.world_size(), 1);
  EXPECT_EQ(Desc(l, "w", {3, 4}, 0), "[0:3, 0:4]");
}

TEST(Mesh, CreateErrors) {
  auto expect = [](Result<Mesh> r, const std::string& needle) {
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
  };
  expect(Mesh::Create({"a", "b"}, {2}), "'axes' has 2 names but 'shape' has 1 sizes");
  expect(Mesh::Create({"a", "a"}, {2, 2}), "mesh.axes[1]: axis name 'a' repeated");
  expect(Mesh::Create({""}, {2}), "mesh.axes[0]: empty axis name");
  expect(Mesh::Create({"a"}, {0}), "mesh.shape[0]: size of axis 'a' must be positive, got 0");
  expect(Mesh::Create({"a", "b", "c"}, {65536, 65536, 2}), "world size exceeds");
  expect(Mesh::Create({"a"}, {3}, {0, 1}), "mesh.devices: has 2 entries, expected the mesh's 3");
  expect(Mesh::Create({"a"}, {3}, {0, 1, 1}), "mesh.devices[2]: rank 1 listed twice");
  expect(Mesh::Create({"a"}, {3}, {0, 1, 3}), "mesh.devices[2]: rank 3 outside 0..2");
}

// ---- PartitionSpec --------------------------------------------------------------------------

TEST(PartitionSpec, BriefExample) {
  Layout l = MustParse(WithMesh(R"j("placements": [
      {"match": "act", "spec": [["data", "pipeline"], null, "tensor"]}])j"));
  // rank 5 = (data 1, pipeline 1, tensor 0): combined index 1*4 + 1 = 5 of 8.
  Shard s = MustShard(l, "act", {16, 3, 8}, 5);
  EXPECT_EQ(DescribeRegion(s.region), "[10:12, 0:3, 0:8]");
  EXPECT_EQ(s.replicas, (std::vector<int>{5}));
  EXPECT_EQ(s.replica_index, 0);
  EXPECT_FALSE(s.empty());
  EXPECT_EQ(s.region.Count(), 2u * 3 * 8);
  EXPECT_EQ(s.region.shape[0], 16u);
  EXPECT_EQ(s.region.shape[2], 8u);
}

TEST(PartitionSpec, UnnamedAxesReplicate) {
  Layout l = MustParse(R"j({"mesh": {"axes": ["data", "tensor"], "shape": [2, 2]},
      "placements": [{"match": "*", "spec": [null, "tensor"]}]})j");
  EXPECT_EQ(AllRegions(l, "w", {4, 6}),
            (std::vector<std::string>{"[0:4, 0:3]", "[0:4, 3:6]", "[0:4, 0:3]", "[0:4, 3:6]"}));
  Shard s = MustShard(l, "w", {4, 6}, 2);
  EXPECT_EQ(s.replicas, (std::vector<int>{0, 2}));
  EXPECT_EQ(s.replica_index, 1);
}

TEST(PartitionSpec, ShortSpecLeavesTrailingDimsUnsharded) {
  Layout l = MustParse(R"j({"mesh": {"axes": ["x"], "shape": [2]},
      "placements": [{"match": "*", "spec": ["x"]}]})j");
  EXPECT_EQ(Desc(l, "w", {4, 5, 6}, 1), "[2:4, 0:5, 0:6]");
  // An empty spec (or all nulls) replicates.
  Layout r = MustParse(R"j({"mesh": {"axes": ["x"], "shape": [2]},
      "placements": [{"match": "*", "spec": []}]})j");
  EXPECT_EQ(MustShard(r, "w", {4}, 1).replicas, (std::vector<int>{0, 1}));
}

TEST(PartitionSpec, CombinedAxesOrderMatters) {
  // ("pipeline", "data"): combined index = pipeline * 2 + data.
  Layout l = MustParse(WithMesh(R"j("placements": [
      {"match": "*", "spec": [["pipeline", "data"]]}])j"));
  // rank 1 = (data 0, pipeline 1) -> index 2; rank 4 = (data 1, pipeline 0) -> index 1.
  EXPECT_EQ(Desc(l, "v", {8}, 1), "[2:3]");
  EXPECT_EQ(Desc(l, "v", {8}, 4), "[1:2]");
}

TEST(PartitionSpec, UnevenFollowsTorchChunk) {
  Layout l = MustParse(R"j({"mesh": {"axes": ["data", "pipeline"], "shape": [2, 2]},
      "placements": [{"match": "*", "spec": [["data", "pipeline"]]}]})j");
  // 10 over 4: chunk ceil(10/4) = 3.
  EXPECT_EQ(AllRegions(l, "v", {10}),
            (std::vector<std::string>{"[0:3]", "[3:6]", "[6:9]", "[9:10]"}));
  // 5 over 4: chunk 2 -> torch.chunk gives 3 pieces; the 4th rank is empty.
  EXPECT_EQ(AllRegions(l, "v", {5}),
            (std::vector<std::string>{"[0:2]", "[2:4]", "[4:5]", "[5:5]"}));
  EXPECT_TRUE(MustShard(l, "v", {5}, 3).empty());
  // 2 over 4: two empty ranks hold the same (empty) region, so they are each other's replicas.
  EXPECT_EQ(AllRegions(l, "v", {2}),
            (std::vector<std::string>{"[0:1]", "[1:2]", "[2:2]", "[2:2]"}));
  Shard e = MustShard(l, "v", {2}, 3);
  EXPECT_TRUE(e.empty());
  EXPECT_EQ(e.replicas, (std::vector<int>{2, 3}));
  EXPECT_EQ(e.replica_index, 1);
  // A 0-size dim: everyone empty.
  EXPECT_EQ(AllRegions(l, "v", {0, 3}),
            (std::vector<std::string>{"[0:0, 0:3]", "[0:0, 0:3]", "[0:0, 0:3]", "[0:0, 0:3]"}));
}

// ---- DTensor --------------------------------------------------------------------------------

TEST(DTensor, ShardAndReplicate) {
  Layout l = MustParse(R"j({"mesh": {"axes": ["dp", "tp"], "shape": [2, 2]},
      "placements": [{"match": "w", "dtensor": ["Replicate()", "Shard(1)"]},
                     {"match": "v", "dtensor": ["Shard(0)", "Shard(-1)"]}]})j");
  EXPECT_EQ(AllRegions(l, "w", {4, 6}),
            (std::vector<std::string>{"[0:4, 0:3]", "[0:4, 3:6]", "[0:4, 0:3]", "[0:4, 3:6]"}));
  EXPECT_EQ(MustShard(l, "w", {4, 6}, 1).replicas, (std::vector<int>{1, 3}));
  EXPECT_EQ(AllRegions(l, "v", {4, 6}),
            (std::vector<std::string>{"[0:2, 0:3]", "[0:2, 3:6]", "[2:4, 0:3]", "[2:4, 3:6]"}));
}

TEST(DTensor, BriefExample) {
  Layout l = MustParse(WithMesh(R"j("placements": [
      {"match": "layers.*.w", "dtensor": ["Shard(0)", "Replicate()", "Shard(1)"]}])j"));
  Shard s = MustShard(l, "layers.3.w", {8, 6}, 5);
  EXPECT_EQ(DescribeRegion(s.region), "[4:8, 0:6]");
  EXPECT_EQ(s.replicas, (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(s.replica_index, 1);
}

TEST(DTensor, NestingDiffersFromCombinedSpecWhenUneven) {
  const std::string mesh = R"j("mesh": {"axes": ["a", "b"], "shape": [2, 2]})j";
  Layout dt = MustParse("{" + mesh + R"j(, "placements": [
      {"match": "*", "dtensor": ["Shard(0)", "Shard(0)"]}]})j");
  Layout ps = MustParse("{" + mesh + R"j(, "placements": [
      {"match": "*", "spec": [["a", "b"]]}]})j");
  // DTensor: 10 -> a: [0,5) [5,10) -> b chunks each: [0,3) [3,5) | [5,8) [8,10).
  EXPECT_EQ(AllRegions(dt, "v", {10}),
            (std::vector<std::string>{"[0:3]", "[3:5]", "[5:8]", "[8:10]"}));
  // PartitionSpec (a, b): one chunking of 10 into 4: [0,3) [3,6) [6,9) [9,10).
  EXPECT_EQ(AllRegions(ps, "v", {10}),
            (std::vector<std::string>{"[0:3]", "[3:6]", "[6:9]", "[9:10]"}));
  // Evenly divisible: the two agree.
  EXPECT_EQ(AllRegions(dt, "v", {8}), AllRegions(ps, "v", {8}));
  // Nesting with empty pieces: 3 -> a: [0,2) [2,3) -> b: [0,1) [1,2) | [2,3) [3,3).
  EXPECT_EQ(AllRegions(dt, "v", {3}),
            (std::vector<std::string>{"[0:1]", "[1:2]", "[2:3]", "[3:3]"}));
  // An empty piece sits at the dim's full size, as torch's compute_local_shape_and_global_offset
  // reports it (not at the end of the parent piece): [2, 2] -> a: [0,1) | [1,2) -> b: [0,1)
  // [2,2) | [1,2) [2,2). tests/py/test_torch_dtensor_offsets.py compares with torch itself.
  EXPECT_EQ(AllRegions(dt, "v", {2, 2}),
            (std::vector<std::string>{"[0:1, 0:2]", "[2:2, 0:2]", "[1:2, 0:2]", "[2:2, 0:2]"}));
  // Later mesh axis first in the nesting order when it is listed first in the mesh.
  Layout rev = MustParse(R"j({"mesh": {"axes": ["b", "a"], "shape": [2, 2]}, "placements": [
      {"match": "*", "dtensor": ["Shard(0)", "Shard(0)"]}]})j");
  EXPECT_EQ(Desc(rev, "v", {10}, 2), "[5:8]");
}

// ---- FSDP / ZeRO flat -----------------------------------------------------------------------

TEST(Flat, EvenAndPadded) {
  Layout l = Layout::Fsdp(4);
  // 15 elements padded to 16, ranges of 4; the last range is clipped to 15.
  EXPECT_EQ(AllRegions(l, "w", {3, 5}),
            (std::vector<std::string>{"flat[0:4]", "flat[4:8]", "flat[8:12]", "flat[12:15]"}));
  // 5 elements padded to 8, ranges of 2: the last rank's range lies wholly in the padding.
  EXPECT_EQ(AllRegions(l, "b", {5}),
            (std::vector<std::string>{"flat[0:2]", "flat[2:4]", "flat[4:5]", "flat[5:5]"}));
  Shard s = MustShard(l, "b", {5}, 3);
  EXPECT_TRUE(s.empty());
  EXPECT_TRUE(s.region.flat);
  EXPECT_EQ(s.region.rank, 1);
  EXPECT_EQ(s.region.shape[0], 5u);
  // 15 over 8: ranges of 2, last one [14, 15).
  EXPECT_EQ(Desc(Layout::Fsdp(8), "w", {3, 5}, 7), "flat[14:15]");
  EXPECT_EQ(Desc(Layout::Fsdp(8), "w", {3, 5}, 6), "flat[12:14]");
}

TEST(Flat, GroupOverSeveralAxes) {
  Layout l =
      MustParse(WithMesh(R"j("placements": [{"match": "flat.*", "flat": ["data", "pipeline"]}])j"));
  // 100 elements over G = 8: ranges of 13; rank 5 has group index 5.
  EXPECT_EQ(Desc(l, "flat.x", {10, 10}, 5), "flat[65:78]");
  EXPECT_EQ(Desc(l, "flat.x", {10, 10}, 7), "flat[91:100]");
  // Group order follows the listed axes: ("pipeline", "data") -> index pipeline * 2 + data.
  Layout rev =
      MustParse(WithMesh(R"j("placements": [{"match": "*", "flat": ["pipeline", "data"]}])j"));
  EXPECT_EQ(Desc(rev, "x", {16}, 1), "flat[4:6]");  // rank 1 = (0, 1, 0) -> index 2
}

TEST(Flat, Hsdp) {
  Layout l = Layout::Hsdp(2, 3);
  EXPECT_EQ(l.world_size(), 6);
  Shard s = MustShard(l, "w", {10}, 4);  // (replicate 1, shard 1)
  EXPECT_EQ(DescribeRegion(s.region), "flat[4:8]");
  EXPECT_EQ(s.replicas, (std::vector<int>{1, 4}));
  EXPECT_EQ(s.replica_index, 1);
}

TEST(Flat, EmptyGroupIsWholeRange) {
  Layout l = MustParse(R"j({"mesh": {"axes": ["x"], "shape": [3]},
      "placements": [{"match": "*", "flat": []}]})j");
  Shard s = MustShard(l, "w", {2, 3}, 1);
  EXPECT_EQ(DescribeRegion(s.region), "flat[0:6]");
  EXPECT_EQ(s.replicas, (std::vector<int>{0, 1, 2}));
}

// ---- explicit devices, matching, scalars ----------------------------------------------------

TEST(Layout, ExplicitDevicesMoveShards) {
  Layout l = MustParse(R"j({"mesh": {"axes": ["data", "tensor"], "shape": [2, 2],
      "devices": [3, 1, 0, 2]}, "placements": [{"match": "*", "spec": ["data", "tensor"]}]})j");
  EXPECT_EQ(AllRegions(l, "w", {4, 4}),
            (std::vector<std::string>{"[2:4, 0:2]", "[0:2, 2:4]", "[2:4, 2:4]", "[0:2, 0:2]"}));
  Result<std::vector<Shard>> d = l.DistinctShards("w", {4, 4});
  ASSERT_TRUE(d.ok());
  ASSERT_EQ(d->size(), 4u);
  EXPECT_EQ(DescribeRegion((*d)[0].region), "[2:4, 0:2]");  // owner rank 0 first
}

TEST(Layout, FirstMatchWinsAndUnmatchedReplicated) {
  Layout l = MustParse(R"j({"mesh": {"axes": ["x"], "shape": [2]}, "placements": [
      {"match": "layers.*.w", "spec": ["x"]},
      {"match": "layers.*", "spec": [null, "x"]}]})j");
  EXPECT_EQ(l.MatchRule("layers.3.w"), 0);
  EXPECT_EQ(l.MatchRule("layers.3.wq"), 1);
  EXPECT_EQ(l.MatchRule("embed"), -1);
  EXPECT_EQ(Desc(l, "layers.3.w", {4, 4}, 1), "[2:4, 0:4]");
  EXPECT_EQ(Desc(l, "layers.3.wq", {4, 4}, 1), "[0:4, 2:4]");
  Shard s = MustShard(l, "embed", {4, 4}, 1);
  EXPECT_EQ(DescribeRegion(s.region), "[0:4, 0:4]");
  EXPECT_EQ(s.replicas, (std::vector<int>{0, 1}));
}

TEST(Layout, ScalarsAreReplicatedEverywhere) {
  for (const Layout& l : {Layout::Fsdp(4), Layout::Replicated(4),
                          MustParse(R"j({"mesh": {"axes": ["x"], "shape": [4]},
                      "placements": [{"match": "*", "spec": []}]})j")}) {
    Shard s = MustShard(l, "step", {}, 2);
    EXPECT_EQ(DescribeRegion(s.region), "[]");
    EXPECT_FALSE(s.region.flat);
    EXPECT_EQ(s.region.Count(), 1u);
    EXPECT_EQ(s.replicas, (std::vector<int>{0, 1, 2, 3}));
    EXPECT_EQ(s.replica_index, 2);
  }
}

TEST(Layout, ReplicatedHelper) {
  Layout l = Layout::Replicated(3);
  EXPECT_EQ(l.world_size(), 3);
  Shard s = MustShard(l, "anything", {7}, 1);
  EXPECT_EQ(DescribeRegion(s.region), "[0:7]");
  EXPECT_EQ(s.replicas, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(Layout().world_size(), 1);
}

TEST(Layout, HugeShapes) {
  // More than 2^32 elements and dims >= 2^32: no overflow anywhere.
  Layout l = Layout::Fsdp(16);
  const Shape shape{65536, 65537, 3};
  const uint64_t n = 65536ull * 65537 * 3, c = n / 16;
  Shard s = MustShard(l, "w", shape, 11);
  EXPECT_EQ(s.region.begin, 11 * c);
  EXPECT_EQ(s.region.end, 12 * c);
  // Element count near 2^64: the padded size would overflow; ranges are still exact.
  const uint64_t big = ~0ull;  // 2^64 - 1 = 3 * 5 * 17 * 257 * 641 * 65537 * 6700417
  Shard last = MustShard(Layout::Fsdp(2), "w", {big}, 1);
  EXPECT_EQ(last.region.begin, big / 2 + 1);
  EXPECT_EQ(last.region.end, big);
  Layout ps = MustParse(R"j({"mesh": {"axes": ["x"], "shape": [3]},
      "placements": [{"match": "*", "spec": ["x"]}]})j");
  EXPECT_EQ(Desc(ps, "w", {1ull << 40, 1}, 2),
            "[" + std::to_string(2 * ((1ull << 40) / 3 + 1)) + ":1099511627776, 0:1]");
}

TEST(ChunkRange, MatchesTorchChunk) {
  uint64_t b, e;
  ChunkRange(7, 3, 2, &b, &e);
  EXPECT_EQ(b, 6u);
  EXPECT_EQ(e, 7u);
  ChunkRange(7, 4, 3, &b, &e);  // chunk 2: [6, 7)
  EXPECT_EQ(b, 6u);
  EXPECT_EQ(e, 7u);
  ChunkRange(3, 5, 4, &b, &e);  // chunk 1: [3, 3) -- clipped, empty
  EXPECT_EQ(b, 3u);
  EXPECT_EQ(e, 3u);
  ChunkRange(0, 5, 0, &b, &e);
  EXPECT_EQ(b, 0u);
  EXPECT_EQ(e, 0u);
}

TEST(DescribeRegion, Forms) {
  const uint64_t shape[3] = {2, 200, 8};
  Region r = WholeRegion(3, shape);
  r.start[1] = 100;
  r.stop[1] = 104;
  EXPECT_EQ(DescribeRegion(r), "[0:2, 100:104, 0:8]");
  Region f;
  f.flat = true;
  f.begin = 10;
  f.end = 20;
  EXPECT_EQ(DescribeRegion(f), "flat[10:20]");
  EXPECT_EQ(DescribeRegion(Region{}), "[]");
  EXPECT_TRUE(SameRegion(r, r));
  EXPECT_FALSE(SameRegion(r, WholeRegion(3, shape)));
  EXPECT_FALSE(SameRegion(r, f));
}

// ---- strict mode ----------------------------------------------------------------------------

TEST(Strict, TopLevelEnforcesDivisibility) {
  Layout l = MustParse(R"j({"mesh": {"axes": ["data", "pipeline"], "shape": [2, 2]},
      "strict": true, "placements": [{"match": "act", "spec": [["data", "pipeline"]]},
                                     {"match": "lax", "spec": ["data"], "strict": false}]})j");
  EXPECT_TRUE(l.strict());
  EXPECT_EQ(Desc(l, "act", {8}, 3), "[6:8]");
  ExpectShardError(l, "act", {10}, 0,
                   "tensor 'act' of shape [10]: dim 0 of size 10 is not divisible by 4 = mesh "
                   "axes 'data'(2) x 'pipeline'(2) (strict mode)");
  EXPECT_EQ(Desc(l, "lax", {3}, 2), "[2:3]");  // per-rule override
  // Unmatched tensors are replicated: nothing to divide.
  EXPECT_EQ(Desc(l, "other", {3}, 2), "[0:3]");
}

TEST(Strict, PerRuleDTensorAndFlat) {
  Layout l = MustParse(R"j({"mesh": {"axes": ["a", "b"], "shape": [2, 3]}, "placements": [
      {"match": "d", "dtensor": ["Shard(1)", "Shard(1)"], "strict": true},
      {"match": "f", "flat": ["b"], "strict": true},
      {"match": "u", "flat": ["b"]}]})j");
  EXPECT_EQ(Desc(l, "d", {1, 12}, 5), "[0:1, 10:12]");
  ExpectShardError(l, "d", {1, 9}, 0,
                   "dim 1 of size 9 is not divisible by 6 = mesh axes 'a'(2) x 'b'(3)");
  EXPECT_EQ(Desc(l, "f", {2, 3}, 1), "flat[2:4]");
  ExpectShardError(l, "f", {2, 5}, 0,
                   "tensor 'f' of shape [2, 5]: element count of size 10 is not divisible by "
                   "3 = mesh axes 'b'(3)");
  EXPECT_EQ(Desc(l, "u", {2, 5}, 2), "flat[8:10]");
}

// ---- JSON round trip and loading ------------------------------------------------------------

TEST(Json, RoundTrip) {
  const std::string text = R"j({"mesh": {"axes": ["data", "pipeline", "tensor"],
      "shape": [2, 2, 2], "devices": [7, 6, 5, 4, 3, 2, 1, 0]}, "strict": true,
      "placements": [{"match": "act", "spec": [["data", "pipeline"], null, "tensor"]},
                     {"match": "layers.*.w", "dtensor": ["Shard(0)", "Replicate()", "Shard(1)"],
                      "strict": false},
                     {"match": "flat.*", "flat": ["data", "pipeline"]}]})j";
  Layout a = MustParse(text);
  json j = a.ToJson();
  EXPECT_EQ(j, json::parse(text));
  Result<Layout> b = Layout::FromJson(j);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->ToJson(), j);
  for (int r = 0; r < 8; ++r) {
    EXPECT_EQ(Desc(a, "act", {8, 2, 4}, r), Desc(*b, "act", {8, 2, 4}, r));
    EXPECT_EQ(Desc(a, "layers.1.w", {4, 5}, r), Desc(*b, "layers.1.w", {4, 5}, r));
  }
  // Convenience constructors round-trip as well.
  for (const Layout& l : {Layout::Fsdp(3), Layout::Hsdp(2, 2), Layout::Replicated(2)}) {
    Result<Layout> c = Layout::FromJson(l.ToJson());
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_EQ(c->ToJson(), l.ToJson());
  }
}

TEST(Json, LoadFile) {
  char path[] = "/tmp/seedstore_layout_XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  { std::ofstream(path) << WithMesh(R"j("placements": [{"match": "*", "flat": ["data"]}])j"); }
  Result<Layout> l = Layout::Load(path);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->world_size(), 8);
  { std::ofstream(path) << WithMesh(R"j("placements": [{"match": "*", "flat": ["model"]}])j"); }
  Result<Layout> bad = Layout::Load(path);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(bad.status().message(),
            "file '" + std::string(path) +
                "': layout: placements[0].flat[0]: unknown mesh axis 'model' (mesh axes: data, "
                "pipeline, tensor)");
  { std::ofstream(path) << "{\"mesh\": "; }
  bad = Layout::Load(path);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("file '" + std::string(path) + "': layout: malformed JSON"),
            std::string::npos)
      << bad.status().message();
  std::remove(path);
  Result<Layout> missing = Layout::Load("/nonexistent/layout.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
  EXPECT_NE(missing.status().message().find("file '/nonexistent/layout.json': cannot open"),
            std::string::npos)
      << missing.status().message();
}

// ---- bad input ------------------------------------------------------------------------------

TEST(Errors, MalformedJson) {
  ExpectParseError("{\"mesh\": [1, 2", "layout: malformed JSON");
  ExpectParseError("", "layout: malformed JSON");
  ExpectParseError("[1, 2]", "layout: expected a JSON object, got array");
}

TEST(Errors, UnknownFields) {
  ExpectParseError(WithMesh(R"j("placement": [])j"),
                   "layout: top level: unknown field 'placement' (allowed: mesh, placements, "
                   "strict)");
  ExpectParseError(R"j({"mesh": {"axes": ["x"], "shape": [2], "device": [0, 1]}})j",
                   "layout: mesh: unknown field 'device'");
  ExpectParseError(WithMesh(R"j("placements": [{"match": "*", "spec": [], "stric": true}])j"),
                   "layout: placements[0]: unknown field 'stric'");
}

TEST(Errors, MissingOrMistypedFields) {
  ExpectParseError(R"j({"placements": []})j", "layout: missing field 'mesh'");
  ExpectParseError(R"j({"mesh": {"shape": [2]}})j", "layout: mesh: missing field 'axes'");
  ExpectParseError(R"j({"mesh": {"axes": ["x"]}})j", "layout: mesh: missing field 'shape'");
  ExpectParseError(R"j({"mesh": {"axes": ["x"], "shape": ["2"]}})j",
                   "layout: mesh.shape[0]: expected an integer, got string \"2\"");
  ExpectParseError(R"j({"mesh": {"axes": ["x"], "shape": [2.5]}})j",
                   "layout: mesh.shape[0]: expected an integer, got number 2.5");
  ExpectParseError(R"j({"mesh": {"axes": [1], "shape": [2]}})j",
                   "layout: mesh.axes[0]: expected a string, got number 1");
  ExpectParseError(WithMesh(R"j("strict": 1)j"), "layout: strict: expected true or false");
  ExpectParseError(WithMesh(R"j("placements": {"match": "*"})j"),
                   "layout: placements: expected a list of rules, got object");
  ExpectParseError(WithMesh(R"j("placements": [{"spec": []}])j"),
                   "layout: placements[0]: missing field 'match'");
  ExpectParseError(WithMesh(R"j("placements": [{"match": 3, "spec": []}])j"),
                   "layout: placements[0].match: expected a string, got number 3");
  ExpectParseError(WithMesh(R"j("placements": [{"match": "*"}])j"),
                   "layout: placements[0]: needs one of 'spec', 'dtensor' or 'flat'");
  ExpectParseError(WithMesh(R"j("placements": [{"match": "*", "spec": [], "flat": []}])j"),
                   "layout: placements[0]: has more than one of 'spec', 'dtensor' and 'flat'");
  ExpectParseError(WithMesh(R"j("placements": [{"match": "*", "spec": "data"}])j"),
                   "layout: placements[0].spec: expected a list (one entry per tensor dim)");
  ExpectParseError(WithMesh(R"j("placements": [{"match": "*", "spec": [3]}])j"),
                   "layout: placements[0].spec[0]: expected an axis name or a list of axis names");
  ExpectParseError(WithMesh(R"j("placements": [{"match": "*", "flat": [], "strict": "yes"}])j"),
                   "layout: placements[0].strict: expected true or false, got string");
}

TEST(Errors, UnknownAxis) {
  ExpectParseError(WithMesh(R"j("placements": [{"match": "*", "spec": [null, "model"]}])j"),
                   "layout: placements[0].spec[1]: unknown mesh axis 'model' (mesh axes: data, "
                   "pipeline, tensor)");
  ExpectParseError(WithMesh(R"j("placements": [{"match": "*", "spec": [["data", "modle"]]}])j"),
                   "layout: placements[0].spec[0][1]: unknown mesh axis 'modle'");
  ExpectParseError(WithMesh(R"j("placements": [{"match": "*", "flat": ["x"]}])j"),
                   "layout: placements[0].flat[0]: unknown mesh axis 'x'");
}

TEST(Errors, AxisUsedTwice) {
  ExpectParseError(
      WithMesh(R"j("placements": [{"match": "a", "spec": []}, {"match": "b", "spec": []},
      {"match": "c", "spec": ["tensor", null, "tensor"]}])j"),
      "layout: placements[2].spec: mesh axis 'tensor' used twice");
  ExpectParseError(WithMesh(R"j("placements": [{"match": "*", "spec": [["data", "data"]]}])j"),
                   "layout: placements[0].spec: mesh axis 'data' used twice");
  ExpectParseError(
      WithMesh(R"j("placements": [{"match": "*", "flat": ["pipeline", "pipeline"]}])j"),
      "layout: placements[0].flat: mesh axis 'pipeline' used twice");
}

TEST(Errors, DTensorEntries) {
  ExpectParseError(
      WithMesh(R"j("placements": [{"match": "*", "dtensor": ["Shard(0)", "Replicate()"]}])j"),
      "layout: placements[0].dtensor: has 2 entries, expected one per mesh axis (3)");
  ExpectParseError(
      WithMesh(
          R"j("placements": [{"match": "*", "dtensor": ["Shard(0)", "Partial()", "Replicate()"]}])j"),
      "layout: placements[0].dtensor[1]: expected \"Shard(d)\", \"Shard(dim=d)\" or "
      "\"Replicate()\", got 'Partial()'");
  ExpectParseError(
      WithMesh(
          R"j("placements": [{"match": "*", "dtensor": ["Shard(x)", "Replicate()", "Replicate()"]}])j"),
      "layout: placements[0].dtensor[0]: expected \"Shard(d)\", \"Shard(dim=d)\" or "
      "\"Replicate()\", got 'Shard(x)'");
  ExpectParseError(WithMesh(R"j("placements": [{"match": "*", "dtensor": "Shard(0)"}])j"),
                   "layout: placements[0].dtensor: expected a list (one entry per mesh axis)");
  // PyTorch's repr "Shard(dim=1)" and blanks between tokens are read as Python would; a
  // token split by blanks, a sign other than '-', or trailing text is not.
  auto layout = Layout::Parse(WithMesh(R"j("placements": [{"match": "*",
      "dtensor": ["Shard(dim=1)", " Replicate( ) ", "Shard(\t-1 )"]}])j"));
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  auto want = Layout::Parse(WithMesh(R"j("placements": [{"match": "*",
      "dtensor": ["Shard(1)", "Replicate()", "Shard(-1)"]}])j"));
  ASSERT_TRUE(want.ok());
  EXPECT_EQ(layout->ToJson(), want->ToJson());
  for (const char* bad : {"Sha rd(0)", "Shard(+1)", "Shard(0)x", "Shard(dim 0)", "Shard(- 1)",
                          "Replicate(0)", "Shard()", "Shard(1234567)"})
    ExpectParseError(WithMesh(std::string(R"j("placements": [{"match": "*", "dtensor": [")j") +
                              bad + R"j(", "Replicate()", "Replicate()"]}])j"),
                     std::string("got '") + bad + "'");
}

TEST(Errors, MeshSizesAndDevices) {
  ExpectParseError(R"j({"mesh": {"axes": ["x", "y"], "shape": [2, 0]}})j",
                   "layout: mesh.shape[1]: size of axis 'y' must be positive, got 0");
  ExpectParseError(R"j({"mesh": {"axes": ["x"], "shape": [-2]}})j",
                   "layout: mesh.shape[0]: size of axis 'x' must be positive, got -2");
  ExpectParseError(R"j({"mesh": {"axes": ["x"], "shape": [2], "devices": [0, 0]}})j",
                   "layout: mesh.devices[1]: rank 0 listed twice (also at position 0; devices "
                   "must be a permutation of the ranks)");
  ExpectParseError(R"j({"mesh": {"axes": ["x"], "shape": [2], "devices": [0, 2]}})j",
                   "layout: mesh.devices[1]: rank 2 outside 0..1");
  ExpectParseError(R"j({"mesh": {"axes": ["x"], "shape": [2], "devices": [1, 0, 2]}})j",
                   "layout: mesh.devices: has 3 entries, expected the mesh's 2 ranks");
  ExpectParseError(R"j({"mesh": {"axes": ["x"], "shape": [2], "devices": [[0, 1]]}})j",
                   "layout: mesh.devices[0]: expected an integer, got array");
  ExpectParseError(R"j({"mesh": {"axes": ["x", "y"], "shape": [2]}})j",
                   "layout: mesh: 'axes' has 2 names but 'shape' has 1 sizes");
}

TEST(Errors, RankDependentChecksAtShardOf) {
  Layout l = MustParse(WithMesh(R"j("placements": [
      {"match": "s", "spec": ["data", null, "tensor"]},
      {"match": "d", "dtensor": ["Shard(2)", "Replicate()", "Replicate()"]},
      {"match": "n", "dtensor": ["Shard(-3)", "Replicate()", "Replicate()"]}])j"));
  ExpectShardError(l, "s", {4, 4}, 0,
                   "layout: placements[0] (match 's') on tensor 's' of shape [4, 4]: spec has 3 "
                   "entries, more than the tensor's rank 2");
  ExpectShardError(l, "d", {4, 4}, 0,
                   "layout: placements[1] (match 'd') on tensor 'd' of shape [4, 4]: "
                   "dtensor[0] Shard(2) out of range for rank 2");
  ExpectShardError(l, "n", {4, 4}, 0, "dtensor[0] Shard(-3) out of range for rank 2");
  ExpectShardError(l, "d", {}, 0, "Shard(2) out of range for rank 0");
  EXPECT_EQ(Desc(l, "d", {4, 4, 8}, 4), "[0:4, 0:4, 4:8]");
  EXPECT_EQ(Desc(l, "n", {4, 4, 8}, 4), "[2:4, 0:4, 0:8]");
}

TEST(Errors, RankOutsideMesh) {
  Layout l = MustParse(WithMesh(""));
  ExpectShardError(l, "w", {4}, 8, "layout: rank 8 outside the mesh of 8 ranks");
  ExpectShardError(l, "w", {4}, -1, "layout: rank -1 outside the mesh of 8 ranks");
}

TEST(Errors, ShapeLimits) {
  Layout l = Layout::Fsdp(2);
  ExpectShardError(l, "w", {1ull << 32, 1ull << 32, 2}, 0,
                   "layout: tensor 'w' of shape [4294967296, 4294967296, 2]: element count "
                   "exceeds 2^64 - 1");
  ExpectShardError(l, "w", Shape(17, 1), 0, "rank 17 exceeds the maximum of 16 dims");
  // Overflowing element count is rejected even when unsharded (replicated).
  ExpectShardError(Layout::Replicated(1), "w", {1ull << 63, 2}, 0, "element count exceeds");
}

TEST(Errors, CreateValidatesRules) {
  Mesh mesh = Mesh::Create({"a", "b"}, {2, 2}).value();
  PlacementRule r;
  r.match = "*";
  r.placement.kind = Placement::Kind::kSpec;
  r.placement.spec = {{0}, {2}};
  Result<Layout> l = Layout::Create(mesh, {r});
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.status().message().find("placements[0].spec: mesh axis index 2 out of range"),
            std::string::npos)
      << l.status().message();
  r.placement.spec = {{1}, {1}};
  l = Layout::Create(mesh, {r});
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.status().message().find("placements[0].spec: mesh axis 'b' used twice"),
            std::string::npos);
  r.placement.spec = {{1, 0}};
  l = Layout::Create(mesh, {r});
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(Desc(*l, "x", {4}, 1), "[2:3]");  // index b * 2 + a = 1 * 2 + 0
}

}  // namespace
}  // namespace seedstore
