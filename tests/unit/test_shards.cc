// Property tests: for random shapes, meshes and every placement notation, the distinct shards
// of a layout materialize to exactly the whole tensor (byte for byte, each element once), and
// their fingerprints add up to the whole tensor's (invariants I1, I4). Plus: a shard far out
// in a tensor of more than 2^32 elements is generated without touching the rest.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gen/materialize_cpu.h"
#include "store/layout.h"

namespace seedstore {
namespace {

using Shape = std::vector<uint64_t>;

/// Deterministic across standard libraries: only the raw mt19937_64 stream is used.
class Rng {
 public:
  explicit Rng(uint64_t seed) : g_(seed) {}
  uint64_t Below(uint64_t n) { return g_() % n; }
  bool Coin() { return Below(2) == 1; }
  template <class T>
  void Shuffle(std::vector<T>* v) {
    for (size_t i = v->size(); i > 1; --i) std::swap((*v)[i - 1], (*v)[Below(i)]);
  }

 private:
  std::mt19937_64 g_;
};

SamplerParams RandomSampler(Rng& rng) {
  SamplerParams p;
  p.generator = rng.Coin() ? Generator::kThreefry : Generator::kPhilox;
  p.key = Key{static_cast<uint32_t>(rng.Below(1ull << 32)),
              static_cast<uint32_t>(rng.Below(1ull << 32))};
  static const DType kFloat[] = {DType::kBF16, DType::kF32, DType::kF64};
  switch (rng.Below(3)) {
    case 0:
      p.dist = Dist::kBits;
      p.dtype = DType::kU8;
      break;
    case 1:  // uniform [0, 1)
      p.dist = Dist::kUniform;
      p.dtype = kFloat[rng.Below(3)];
      p.lo_f = 0.0f;
      p.range_f = 1.0f;
      p.clip_hi_f = std::nextafter(1.0f, 0.0f);
      p.lo_d = 0.0;
      p.range_d = 1.0;
      p.clip_hi_d = std::nextafter(1.0, 0.0);
      break;
    default:  // standard normal
      p.dist = Dist::kNormal;
      p.dtype = kFloat[rng.Below(3)];
      p.lo_f = std::nextafter(-1.0f, 0.0f);
      p.range_f = 2.0f;
      p.lo_d = std::nextafter(-1.0, 0.0);
      p.range_d = 1.0 - p.lo_d;
      break;
  }
  return p;
}

Shape RandomShape(Rng& rng) {
  static const uint64_t kDims[] = {0, 1, 1, 2, 3, 4, 5, 7, 8, 11, 13, 16, 17};
  for (;;) {
    Shape s(rng.Below(5));  // rank 0..4
    uint64_t n = 1;
    for (auto& d : s) {
      d = kDims[rng.Below(sizeof(kDims) / sizeof(kDims[0]))];
      if (d == 0 && rng.Below(3) != 0) d = 1 + rng.Below(6);  // keep 0-size dims rarer
      n *= d;
    }
    if (n <= 6000) return s;
  }
}

/// A random mesh of 1..16 ranks (0..3 axes), sometimes with a shuffled device array.
Mesh RandomMesh(Rng& rng) {
  static const char* kNames[] = {"data", "fsdp", "tensor"};
  for (;;) {
    const int naxes = static_cast<int>(rng.Below(4));
    std::vector<std::string> axes;
    std::vector<int> shape;
    int world = 1;
    for (int a = 0; a < naxes; ++a) {
      axes.push_back(kNames[a]);
      shape.push_back(1 + static_cast<int>(rng.Below(5)));
      world *= shape.back();
    }
    if (world > 16) continue;
    std::vector<int> devices;
    if (rng.Coin()) {
      devices.resize(world);
      std::iota(devices.begin(), devices.end(), 0);
      rng.Shuffle(&devices);
    }
    Result<Mesh> m = Mesh::Create(axes, shape, devices);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    return *m;
  }
}

Placement RandomPlacement(Rng& rng, const Mesh& mesh, int ndim) {
  Placement p;
  std::vector<int> axes(mesh.num_axes());
  std::iota(axes.begin(), axes.end(), 0);
  rng.Shuffle(&axes);
  switch (rng.Below(4)) {
    case 0:
      p.kind = Placement::Kind::kReplicated;
      break;
    case 1: {  // PartitionSpec: each axis to some dim (or unused), possibly several per dim
      p.kind = Placement::Kind::kSpec;
      p.spec.resize(ndim == 0 ? 0 : rng.Below(ndim + 1));
      if (!p.spec.empty())
        for (int a : axes)
          if (rng.Below(4) != 0) p.spec[rng.Below(p.spec.size())].push_back(a);
      break;
    }
    case 2:  // DTensor: per mesh axis Shard(d) (d maybe negative) or Replicate()
      p.kind = Placement::Kind::kDTensor;
      p.dtensor.resize(mesh.num_axes());
      for (auto& e : p.dtensor) {
        if (ndim == 0 || rng.Below(4) == 0) continue;
        e.shard = true;
        e.dim = static_cast<int>(rng.Below(ndim));
        if (rng.Coin()) e.dim -= ndim;
      }
      break;
    default:  // flat over a random ordered subset of the axes
      p.kind = Placement::Kind::kFlat;
      for (int a : axes)
        if (rng.Below(4) != 0) p.flat_axes.push_back(a);
      break;
  }
  return p;
}

std::vector<unsigned char> Materialize(const SamplerParams& p, const Region& r, int threads = 0) {
  std::vector<unsigned char> buf(r.Count() * DTypeSize(p.dtype) + 1);
  MaterializeCpu(p, r, buf.data(), CpuOptions{threads});
  buf.pop_back();
  return buf;
}

/// Global row-major flat index of every element of the region, in the region's own order
/// (computed independently of Region::RunBase with an odometer over the box).
std::vector<uint64_t> GlobalIndices(const Region& r) {
  std::vector<uint64_t> out;
  if (r.flat) {
    for (uint64_t i = r.begin; i < r.end; ++i) out.push_back(i);
    return out;
  }
  if (r.Count() == 0) return out;
  std::vector<uint64_t> idx(r.start, r.start + r.rank);
  for (;;) {
    uint64_t flat = 0;
    for (int d = 0; d < r.rank; ++d) flat = flat * r.shape[d] + idx[d];
    out.push_back(flat);
    int d = r.rank - 1;
    for (; d >= 0; --d) {
      if (++idx[d] < r.stop[d]) break;
      idx[d] = r.start[d];
    }
    if (d < 0) return out;
  }
}

std::string Describe(const Layout& l, const Shape& shape, const SamplerParams& p) {
  std::string s = l.ToJson().dump() + " shape [";
  for (size_t d = 0; d < shape.size(); ++d) s += (d ? ", " : "") + std::to_string(shape[d]);
  return s + "] gen " + std::to_string(static_cast<int>(p.generator)) + " dist " +
         std::to_string(static_cast<int>(p.dist)) + " dtype " +
         std::to_string(static_cast<int>(p.dtype));
}

TEST(ShardProperties, UnionOfDistinctShardsIsTheWholeTensor) {
  Rng rng(0x5eed5702e);
  int kinds_seen[4] = {};
  int uneven_seen = 0, empty_seen = 0, replicas_checked = 0;
  uint64_t elements = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    const Shape shape = RandomShape(rng);
    const int ndim = static_cast<int>(shape.size());
    Mesh mesh = RandomMesh(rng);
    PlacementRule rule{"t.*", RandomPlacement(rng, mesh, ndim)};
    Result<Layout> made = Layout::Create(mesh, {rule}, false);
    ASSERT_TRUE(made.ok()) << made.status().ToString();
    // Go through the JSON form, so the parser is exercised on every notation as well.
    Result<Layout> layout = Layout::FromJson(made->ToJson());
    ASSERT_TRUE(layout.ok()) << layout.status().ToString() << "\n" << made->ToJson().dump();
    ASSERT_EQ(layout->ToJson(), made->ToJson());
    const SamplerParams p = RandomSampler(rng);
    const std::string what = Describe(*layout, shape, p);
    SCOPED_TRACE(what);
    ++kinds_seen[static_cast<int>(rule.placement.kind)];

    const Region whole = WholeRegion(ndim, shape.data());
    const uint64_t n = whole.Count();
    elements += n;
    const size_t es = DTypeSize(p.dtype);
    const std::vector<unsigned char> all = Materialize(p, whole);
    const uint64_t fp_seed = rng.Below(1ull << 63);
    const Fingerprint whole_fp = FingerprintCpu(p.dtype, whole, all.data(), fp_seed);

    Result<std::vector<Shard>> distinct = layout->DistinctShards("t.x", shape);
    ASSERT_TRUE(distinct.ok()) << distinct.status().ToString();
    std::vector<int> covered(n, 0);
    std::vector<int> owner_of_rank(layout->world_size(), -1);
    Fingerprint sum;
    uint64_t first_count = ~0ull;
    for (size_t k = 0; k < distinct->size(); ++k) {
      const Shard& s = (*distinct)[k];
      ASSERT_FALSE(s.replicas.empty());
      ASSERT_TRUE(std::is_sorted(s.replicas.begin(), s.replicas.end()));
      for (int r : s.replicas) {
        ASSERT_EQ(owner_of_rank[r], -1) << "rank " << r << " in two distinct shards";
        owner_of_rank[r] = static_cast<int>(k);
      }
      if (s.empty()) ++empty_seen;
      if (first_count != ~0ull && s.region.Count() != first_count) ++uneven_seen;
      first_count = s.region.Count();
      // The shard's bytes equal the whole tensor's bytes at the same global indices.
      const std::vector<unsigned char> bytes = Materialize(p, s.region);
      const std::vector<uint64_t> gi = GlobalIndices(s.region);
      ASSERT_EQ(gi.size(), s.region.Count()) << DescribeRegion(s.region);
      for (size_t e = 0; e < gi.size(); ++e) {
        ASSERT_LT(gi[e], n);
        ++covered[gi[e]];
        ASSERT_EQ(std::memcmp(&bytes[e * es], &all[gi[e] * es], es), 0)
            << "element " << gi[e] << " of " << DescribeRegion(s.region);
      }
      const Fingerprint fp = FingerprintCpu(p.dtype, s.region, bytes.data(), fp_seed);
      ASSERT_EQ(fp, MaterializeFingerprintCpu(p, s.region, nullptr, fp_seed));
      sum.Add(fp);
    }
    for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(covered[i], 1) << "element " << i;
    EXPECT_EQ(sum, whole_fp);

    // Every rank's own shard agrees with the distinct list; replicas hold identical bytes
    // (materialized here with a different thread count).
    for (int rank = 0; rank < layout->world_size(); ++rank) {
      ASSERT_GE(owner_of_rank[rank], 0) << "rank " << rank << " missing";
      Result<Shard> s = layout->ShardOf("t.x", shape, rank);
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      const Shard& d = (*distinct)[owner_of_rank[rank]];
      ASSERT_TRUE(SameRegion(s->region, d.region))
          << "rank " << rank << ": " << DescribeRegion(s->region) << " vs "
          << DescribeRegion(d.region);
      ASSERT_EQ(s->replicas, d.replicas);
      ASSERT_EQ(s->replicas[s->replica_index], rank);
      if (s->replica_index > 0 && !s->empty()) {
        ASSERT_EQ(Materialize(p, s->region, 1), Materialize(p, d.region, 3));
        ++replicas_checked;
      }
    }
    // Non-matching names are replicated: one distinct shard, the whole tensor.
    Result<std::vector<Shard>> other = layout->DistinctShards("u", shape);
    ASSERT_TRUE(other.ok());
    ASSERT_EQ(other->size(), 1u);
    ASSERT_EQ(static_cast<int>((*other)[0].replicas.size()), layout->world_size());
  }
  for (int k = 0; k < 4; ++k) EXPECT_GT(kinds_seen[k], 300) << "placement kind " << k;
  EXPECT_GT(uneven_seen, 300);
  EXPECT_GT(empty_seen, 100);
  EXPECT_GT(replicas_checked, 1000);
  EXPECT_GT(elements, 300000u);
  std::printf("kinds %d/%d/%d/%d, uneven %d, empty %d, replicas %d, elements %llu\n", kinds_seen[0],
              kinds_seen[1], kinds_seen[2], kinds_seen[3], uneven_seen, empty_seen,
              replicas_checked, static_cast<unsigned long long>(elements));
}

TEST(ShardProperties, StrictAcceptsExactlyTheDivisibleShapes) {
  Rng rng(77);
  for (int trial = 0; trial < 300; ++trial) {
    const Shape shape = RandomShape(rng);
    Mesh mesh = RandomMesh(rng);
    PlacementRule rule{"*", RandomPlacement(rng, mesh, static_cast<int>(shape.size()))};
    Result<Layout> lax = Layout::Create(mesh, {rule}, false);
    Result<Layout> strict = Layout::Create(mesh, {rule}, true);
    ASSERT_TRUE(lax.ok() && strict.ok());
    Result<std::vector<Shard>> d = lax->DistinctShards("x", shape);
    ASSERT_TRUE(d.ok());
    // Divisible <=> every distinct shard has the same element count (scalars: always).
    bool equal = true;
    for (const auto& s : *d) equal &= s.region.Count() == (*d)[0].region.Count();
    Result<Shard> s = strict->ShardOf("x", shape, 0);
    // With a 0-size dim every count is 0 while another dim may still be uneven: skip.
    if (WholeRegion(static_cast<int>(shape.size()), shape.data()).Count() == 0) continue;
    EXPECT_EQ(s.ok(), equal) << lax->ToJson().dump() << " " << s.status().ToString();
    if (!s.ok()) {
      EXPECT_EQ(s.status().code(), Code::kInvalidArgument);
      EXPECT_NE(s.status().message().find("is not divisible by"), std::string::npos);
    }
  }
}

template <Generator G, Dist X, DType D>
void CheckAgainstSampleElement(const SamplerParams& p, const Region& r) {
  const std::vector<unsigned char> bytes = Materialize(p, r, 2);
  const std::vector<uint64_t> gi = GlobalIndices(r);
  ASSERT_EQ(gi.size() * sizeof(StorageT<D>), bytes.size());
  Fingerprint expect;
  for (size_t e = 0; e < gi.size(); ++e) {
    const StorageT<D> v = SampleElement<G, X, D>(p, gi[e]);
    ASSERT_EQ(std::memcmp(&bytes[e * sizeof(v)], &v, sizeof(v)), 0) << "index " << gi[e];
    expect.Add(HashElement(gi[e], ValueBits(v), 99));
  }
  EXPECT_EQ(MaterializeFingerprintCpu(p, r, nullptr, 99), expect);
}

TEST(ShardProperties, FarShardOfHugeTensorIsCheap) {
  // 65536 x 65537 x 3 = 12,884,705,280 elements (> 2^32): nothing but the asked piece is made.
  const Shape shape{65536, 65537, 3};
  const uint64_t n = 65536ull * 65537 * 3;
  const auto t0 = std::chrono::steady_clock::now();

  // FSDP over 16 ranks: rank 11 holds flat [11c, 12c) with c = n / 16 (n divides evenly).
  Result<Shard> s = Layout::Fsdp(16).ShardOf("w", shape, 11);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_TRUE(s->region.flat);
  ASSERT_EQ(s->region.begin, 11 * (n / 16));
  ASSERT_EQ(s->region.end, 12 * (n / 16));
  ASSERT_GT(s->region.begin, 1ull << 33);
  // A small piece in the middle and one at the very end of the rank's range.
  for (uint64_t at :
       {s->region.begin + (s->region.end - s->region.begin) / 2, s->region.end - 4000}) {
    Region piece = s->region;
    piece.begin = at;
    piece.end = at + 4000;
    SamplerParams p;
    p.key = Key{7, 42};
    p.dtype = DType::kF32;
    p.dist = Dist::kNormal;
    p.generator = Generator::kThreefry;
    p.lo_f = std::nextafter(-1.0f, 0.0f);
    p.range_f = 2.0f;
    CheckAgainstSampleElement<Generator::kThreefry, Dist::kNormal, DType::kF32>(p, piece);
    p.generator = Generator::kPhilox;
    p.dtype = DType::kBF16;
    CheckAgainstSampleElement<Generator::kPhilox, Dist::kNormal, DType::kBF16>(p, piece);
  }

  // The same tensor as a 4 x 4 PartitionSpec box: rank 11 = (2, 3) holds
  // [32768:49152, 49155:65537, 0:3]; generate a 3 x 5 x 3 sub-box at its far corner.
  Result<Layout> ps = Layout::Parse(R"j({"mesh": {"axes": ["data", "tensor"], "shape": [4, 4]},
      "placements": [{"match": "*", "spec": ["data", "tensor"]}]})j");
  ASSERT_TRUE(ps.ok()) << ps.status().ToString();
  Result<Shard> b = ps->ShardOf("w", shape, 11);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(DescribeRegion(b->region), "[32768:49152, 49155:65537, 0:3]");
  Region sub = b->region;
  sub.start[0] = sub.stop[0] - 3;
  sub.start[1] = sub.stop[1] - 5;
  SamplerParams p;
  p.key = Key{1, 2};
  p.generator = Generator::kPhilox;
  p.dist = Dist::kUniform;
  p.dtype = DType::kF64;
  p.lo_d = 0.0;
  p.range_d = 1.0;
  p.clip_hi_d = std::nextafter(1.0, 0.0);
  CheckAgainstSampleElement<Generator::kPhilox, Dist::kUniform, DType::kF64>(p, sub);
  p.generator = Generator::kThreefry;
  p.dist = Dist::kBits;
  p.dtype = DType::kU8;
  CheckAgainstSampleElement<Generator::kThreefry, Dist::kBits, DType::kU8>(p, sub);

  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(secs, 2.0) << "generating a few thousand elements must not touch the whole tensor";
}

// BoxDifference (gen/region.h; padded pieces of distributed saves): the boxes are disjoint,
// lie in outer, miss inner, and with inner cover every element of outer exactly once.
TEST(BoxDifference, CoversOuterMinusInnerExactlyOnce) {
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 300; ++trial) {
    const int rank = 1 + trial % 3;
    std::vector<uint64_t> shape(rank), os(rank), oe(rank), is(rank), ie(rank);
    for (int d = 0; d < rank; ++d) {
      shape[d] = 1 + rng() % 7;
      os[d] = rng() % shape[d];
      oe[d] = os[d] + 1 + rng() % (shape[d] - os[d]);
      is[d] = os[d] + rng() % (oe[d] - os[d]);
      ie[d] = is[d] + 1 + rng() % (oe[d] - is[d]);
      if (trial % 7 == 0) is[d] = os[d], ie[d] = oe[d];  // the same box: nothing left
    }
    const Region outer = BoxRegion(shape, os, oe), inner = BoxRegion(shape, is, ie);
    const std::vector<Region> parts = BoxDifference(outer, inner);
    if (trial % 7 == 0) {
      EXPECT_TRUE(parts.empty());
    }
    uint64_t total = inner.Count();
    for (const Region& p : parts) {
      EXPECT_GT(p.Count(), 0u);
      total += p.Count();
    }
    EXPECT_EQ(total, outer.Count()) << DescribeRegion(outer) << " - " << DescribeRegion(inner);
    auto in = [](const Region& r, const std::vector<uint64_t>& x) {
      for (int d = 0; d < r.rank; ++d)
        if (x[d] < r.start[d] || x[d] >= r.stop[d]) return false;
      return true;
    };
    std::vector<uint64_t> x(rank);
    for (uint64_t q = 0; q < outer.Count(); ++q) {
      uint64_t t = q;
      for (int d = rank - 1; d >= 0; --d) {
        x[d] = os[d] + t % (oe[d] - os[d]);
        t /= oe[d] - os[d];
      }
      int hits = in(inner, x);
      for (const Region& p : parts) hits += in(p, x);
      ASSERT_EQ(hits, 1) << DescribeRegion(outer) << " - " << DescribeRegion(inner);
    }
  }
}

// IsContiguous (gen/region.h) against the box's flat indices themselves, on random boxes of
// small shapes (full, one-wide and partial dims in every combination, 0-d included).
TEST(IsContiguous, TrueExactlyWhenTheFlatIndicesAreConsecutive) {
  std::mt19937_64 rng(8);
  int yes = 0, no = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const int rank = trial % 5;
    std::vector<uint64_t> shape(rank), a(rank), b(rank);
    for (int d = 0; d < rank; ++d) {
      shape[d] = 1 + rng() % 4;
      a[d] = rng() % shape[d];
      b[d] = a[d] + 1 + rng() % (shape[d] - a[d]);  // non-empty
      if (rng() % 3 == 0) a[d] = 0, b[d] = shape[d];
    }
    const Region r = BoxRegion(shape, a, b);
    bool consecutive = true;
    for (uint64_t q = 0; q + 1 < r.Count() / r.RunLength(); ++q)
      consecutive &= r.RunBase(q) + r.RunLength() == r.RunBase(q + 1);
    ASSERT_EQ(IsContiguous(r), consecutive) << DescribeRegion(r);
    (consecutive ? yes : no)++;
  }
  EXPECT_GT(yes, 300);
  EXPECT_GT(no, 300);
}

// GridTiles (gen/region.h): the tiles cover the box exactly once, each inside one grid cell.
TEST(GridTiles, CoverTheBoxOnceOneCellEach) {
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 300; ++trial) {
    const int rank = 1 + trial % 3;
    std::vector<uint64_t> shape(rank), a(rank), b(rank), chunk(rank);
    uint64_t anchor[kMaxRank] = {};
    for (int d = 0; d < rank; ++d) {
      shape[d] = 1 + rng() % 20;
      anchor[d] = rng() % shape[d];
      a[d] = anchor[d] + rng() % (shape[d] - anchor[d]);
      b[d] = a[d] + rng() % (shape[d] - a[d] + 1);  // empty boxes too
      chunk[d] = 1 + rng() % 6;
    }
    const Region r = BoxRegion(shape, a, b);
    const GridTiles tiles(r, anchor, chunk);
    uint64_t total = 0;
    std::vector<int> hits(r.Count(), 0);
    for (uint64_t q = 0; q < tiles.Count(); ++q) {
      const Region t = tiles.Tile(q);
      ASSERT_GT(t.Count(), 0u) << DescribeRegion(r) << " tile " << q;
      total += t.Count();
      for (int d = 0; d < rank; ++d) {
        ASSERT_GE(t.start[d], r.start[d]);
        ASSERT_LE(t.stop[d], r.stop[d]);
        ASSERT_EQ((t.start[d] - anchor[d]) / chunk[d],
                  (t.stop[d] - 1 - anchor[d]) / chunk[d]);  // one cell
      }
      for (uint64_t e = 0; e < t.Count(); ++e) {  // mark each element in r's row-major order
        uint64_t x = e, idx = 0, stride = 1;
        std::vector<uint64_t> at(rank);
        for (int d = rank - 1; d >= 0; --d) {
          at[d] = t.start[d] + x % (t.stop[d] - t.start[d]);
          x /= t.stop[d] - t.start[d];
        }
        for (int d = rank - 1; d >= 0; --d) {
          idx += (at[d] - r.start[d]) * stride;
          stride *= r.stop[d] - r.start[d];
        }
        ++hits[idx];
      }
    }
    EXPECT_EQ(total, r.Count()) << DescribeRegion(r);
    for (int h : hits) ASSERT_EQ(h, 1) << DescribeRegion(r);
  }
}

}  // namespace
}  // namespace seedstore
