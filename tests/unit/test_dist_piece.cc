// DistCatalog::Piece keeps a piece's coordinates in one small array: whatever is set, in
// whatever order, reads back exactly -- boxes of 0 to kMaxRank dims, flat ranges, coordinates
// beyond 2^32, padded stored boxes and cells.
#include <gtest/gtest.h>

#include <random>

#include "io/dist_catalog.h"

namespace seedstore {
namespace {

void ExpectSame(const Region& got, const Region& want) {
  EXPECT_TRUE(SameRegion(got, want)) << DescribeRegion(got) << " vs " << DescribeRegion(want);
}

// A random region of a random shape of `rank` dims (dims up to 2^40, so indices pass 2^32),
// and a box around it when `padded` (a box piece only).
struct Case {
  Region region, stored;
};
Case RandomCase(std::mt19937_64& rng, int rank, bool flat, bool padded) {
  auto below = [&](uint64_t n) { return n == 0 ? 0 : rng() % n; };
  Case c;
  Region& r = c.region;
  r.rank = rank;
  uint64_t count = 1;
  for (int d = 0; d < rank; ++d) {
    r.shape[d] = 1 + below(rng() % 2 ? 7 : (uint64_t{1} << (40 / std::max(rank, 1))));
    count *= r.shape[d];
    r.start[d] = below(r.shape[d]);
    r.stop[d] = r.start[d] + 1 + below(r.shape[d] - r.start[d]);
  }
  if (flat) {
    r.flat = true;
    r.begin = below(count);
    r.end = r.begin + below(count - r.begin + 1);
  }
  c.stored = r;
  if (padded)
    for (int d = 0; d < rank; ++d) {
      c.stored.start[d] = below(r.start[d] + 1);
      c.stored.stop[d] = r.stop[d] + below(r.shape[d] - r.stop[d] + 1);
    }
  return c;
}

TEST(DistPiece, EveryPartReadsBackWhateverTheOrderItWasSetIn) {
  std::mt19937_64 rng(20261207);
  for (int iter = 0; iter < 4000; ++iter) {
    const int rank = static_cast<int>(rng() % (kMaxRank + 1));
    const bool flat = rank > 0 && rng() % 3 == 0;
    const bool padded = !flat && rank > 0 && rng() % 2;
    const Case c = RandomCase(rng, rank, flat, padded);
    std::optional<PieceCells> cells;
    if (rng() % 2) {
      cells = PieceCells{static_cast<int>(rng() % (1u << 30)), rng() >> 1, {}};
      for (int d = 0; d < (flat ? 1 : rank); ++d) cells->chunk.push_back(1 + rng() % 1000);
    }
    std::optional<Fingerprint> fp;
    if (rng() % 2) fp = Fingerprint{rng(), rng()};
    const int who = static_cast<int>(rng() % 4096);
    SCOPED_TRACE("iteration " + std::to_string(iter) + ": " + DescribeRegion(c.region) +
                 " stored " + DescribeRegion(c.stored));

    DistCatalog::Piece p(who, c.region);
    ExpectSame(p.region(), c.region);
    ExpectSame(p.stored(), c.region);
    EXPECT_FALSE(p.padded());
    EXPECT_FALSE(p.has_cells());
    EXPECT_FALSE(p.cells().has_value());
    const bool cells_first = rng() % 2;
    if (cells_first) p.set_cells(cells);
    p.set_stored(c.stored);
    if (!cells_first) p.set_cells(cells);
    p.fingerprint = fp;

    EXPECT_EQ(p.rank, who);
    EXPECT_EQ(p.flat(), flat);
    ExpectSame(p.region(), c.region);
    ExpectSame(p.stored(), c.stored);
    EXPECT_EQ(p.padded(), !SameRegion(c.stored, c.region));
    EXPECT_EQ(p.Count(), c.region.Count());
    EXPECT_EQ(p.has_cells(), cells.has_value());
    EXPECT_EQ(p.cells(), cells);
    EXPECT_EQ(p.fingerprint, fp);
    // BoxHolds: a point inside the region (its start, when it has elements), and a random one.
    for (int k = 0; k < 2; ++k) {
      uint64_t x[kMaxRank];
      for (int d = 0; d < rank; ++d) x[d] = k == 0 ? c.region.start[d] : rng() % c.region.shape[d];
      bool want = !flat;
      for (int d = 0; want && d < rank; ++d)
        want = c.region.start[d] <= x[d] && x[d] < c.region.stop[d];
      EXPECT_EQ(p.BoxHolds(x), want) << "point " << k;
    }

    // Setting them again replaces them: back to an unpadded piece without cells.
    p.set_stored(c.region);
    p.set_cells(std::nullopt);
    EXPECT_FALSE(p.padded());
    EXPECT_FALSE(p.has_cells());
    ExpectSame(p.region(), c.region);
    ExpectSame(p.stored(), c.region);
    // A copy is the same piece.
    p.set_cells(cells);
    const DistCatalog::Piece copy = p;
    ExpectSame(copy.region(), c.region);
    EXPECT_EQ(copy.cells(), cells);
  }
}

TEST(DistPiece, HoldsAFlatPieceWithCellsInAFewDozenBytes) {
  // What a save of 740,352 pieces holds per piece (plus one small heap array).
  EXPECT_LE(sizeof(DistCatalog::Piece), 96u);
  EXPECT_LT(sizeof(DistCatalog::Piece), sizeof(Region) / 4);
}

}  // namespace
}  // namespace seedstore
