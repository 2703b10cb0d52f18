// FingerprintBoxOfFlatPiece (store/catalog.h): the fingerprint of a global box read out of a
// flat piece -- what `seedstore diff` uses where a flat (FSDP-style) shard of one layout meets a
// box (TP/DTensor-style) shard of another -- equals the whole tensor's fingerprint of that box,
// bit for bit: random shapes, pieces, boxes, dtypes and slab sizes (so slabs split and runs are
// gathered), a 0-d tensor, empty boxes, flat indices across 2^32, and named errors.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "store/catalog.h"
#include "store/spec.h"

namespace seedstore {
namespace {

using Shape = std::vector<uint64_t>;

// One lazy tensor `w` of `shape` and `dtype`, as a spec catalog (the ground truth).
std::unique_ptr<SpecCatalog> Lazy(const Shape& shape, const std::string& dtype, uint64_t seed) {
  std::string dims;
  for (uint64_t d : shape) {
    if (!dims.empty()) dims += ",";
    dims += std::to_string(d);
  }
  const std::string text = R"({"seedstore": 1, "seed": )" + std::to_string(seed) +
                           R"(, "tensors": [{"name": "w", "shape": [)" + dims + R"(], "dtype": ")" +
                           dtype + R"(", "init": {"dist": "normal", "scale": 0.5}}]})";
  auto spec = ModelSpec::Parse(text, "test spec");
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  auto c = SpecCatalog::Create(*spec, "test spec");
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return std::move(*c);
}

// The flat range [b, e) of tensor 0 of `whole`, as a rank's file holds it: a 1-d tensor of
// e - b elements recorded as that piece, read from `whole`.
class FlatPieceCatalog : public Catalog {
 public:
  FlatPieceCatalog(const Catalog& whole, uint64_t b, uint64_t e) : whole_(whole) {
    const TensorRecord& g = whole.tensors()[0];
    TensorRecord t;
    t.name = g.name;
    t.shape = {e - b};
    t.dtype = g.dtype;
    t.piece = FlatRegion(g.shape, b, e);
    records_.push_back(t);
  }
  const std::vector<TensorRecord>& tensors() const override { return records_; }
  std::string origin() const override { return "flat piece"; }
  Status Read(size_t i, const Region& r, void* out, CpuOptions o) const override {
    EXPECT_EQ(i, 0u);
    EXPECT_FALSE(r.flat);
    const uint64_t b = records_[0].piece->begin;
    return whole_.Read(0, FlatRegion(whole_.tensors()[0].shape, b + r.start[0], b + r.stop[0]), out,
                       o);
  }

 private:
  const Catalog& whole_;
  std::vector<TensorRecord> records_;
};

std::string Hex(const Fingerprint& f) { return FingerprintHex(f); }

TEST(FlatPiece, BoxesOfRandomPiecesMatchTheWholeTensor) {
  std::mt19937_64 rng(20261204);
  auto below = [&](uint64_t n) { return rng() % n; };
  const char* dtypes[] = {"float32", "bfloat16", "float16", "float64"};
  int checked = 0, split = 0;
  for (int trial = 0; trial < 120; ++trial) {
    const int rank = 1 + static_cast<int>(below(4));
    Shape shape(rank);
    uint64_t n = 1;
    for (auto& d : shape) n *= (d = 1 + below(rank == 1 ? 97 : 9));
    auto whole = Lazy(shape, dtypes[trial % 4], 1000 + trial);
    const uint64_t b = below(n), e = b + 1 + below(n - b);
    FlatPieceCatalog piece(*whole, b, e);
    const size_t es = DTypeSize(whole->tensors()[0].dtype);
    // Every box of the piece's row-major decomposition, then random sub-boxes of each.
    std::vector<Region> boxes = FlatRangeToBoxes(shape, b, e);
    Fingerprint sum;
    for (size_t k = 0, m = boxes.size(); k < m; ++k) {
      Region q = boxes[k];
      for (int d = 0; d < rank; ++d) {
        const uint64_t lo = q.start[d] + below(q.stop[d] - q.start[d]);
        q.start[d] = lo;
        q.stop[d] = lo + 1 + below(boxes[k].stop[d] - lo);
      }
      boxes.push_back(q);
    }
    for (size_t k = 0; k < boxes.size(); ++k) {
      const Region& q = boxes[k];
      auto want = whole->FingerprintRegion(0, q);
      ASSERT_TRUE(want.ok()) << want.status().ToString();
      const uint64_t slab = es * (1 + below(q.Count() + 2));  // often smaller than the box
      auto got = FingerprintBoxOfFlatPiece(piece, 0, q, {}, slab);
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      EXPECT_EQ(Hex(*got), Hex(*want)) << "trial " << trial << " box " << DescribeRegion(q)
                                       << " of piece flat[" << b << ":" << e << "] slab " << slab;
      auto whole_slab = FingerprintBoxOfFlatPiece(piece, 0, q);
      ASSERT_TRUE(whole_slab.ok());
      EXPECT_EQ(Hex(*whole_slab), Hex(*want));
      if (k < FlatRangeToBoxes(shape, b, e).size()) sum.Add(*got);
      split += slab < q.Count() * es;
      ++checked;
    }
    // The decomposition's boxes add up to the piece: the whole tensor's fingerprint of [b, e).
    auto range = whole->FingerprintRegion(0, FlatRegion(shape, b, e));
    ASSERT_TRUE(range.ok());
    EXPECT_EQ(Hex(sum), Hex(*range)) << "trial " << trial;
  }
  EXPECT_GT(checked, 300);
  EXPECT_GT(split, 100);  // slabs were split and their runs gathered
}

// A piece across flat index 2^32 of a [2^22 + 16, 1024] bfloat16 tensor (4.3 G elements; only
// the piece is generated): boxes of 8 rows that straddle 2^32 = row 4194304, column 0.
TEST(FlatPiece, IndicesAcross2To32) {
  const Shape shape = {(uint64_t{1} << 22) + 16, 1024};
  auto whole = Lazy(shape, "bfloat16", 5);
  const uint64_t two32 = uint64_t{1} << 32;
  FlatPieceCatalog piece(*whole, two32 - 3000, two32 + 5000);
  const uint64_t r0 = (two32 - 3000) / 1024;  // 4194301, from column 72
  for (const Region& q :
       {BoxRegion(shape, {r0, 100}, {r0 + 8, 900}), BoxRegion(shape, {r0 + 3, 0}, {r0 + 4, 1024}),
        BoxRegion(shape, {r0 + 2, 1023}, {r0 + 7, 1024}),
        BoxRegion(shape, {r0, 72}, {r0 + 1, 73})}) {
    auto want = whole->FingerprintRegion(0, q);
    ASSERT_TRUE(want.ok()) << want.status().ToString();
    for (uint64_t slab : {uint64_t{2}, uint64_t{2048}, uint64_t{1} << 26}) {
      auto got = FingerprintBoxOfFlatPiece(piece, 0, q, {}, slab);
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      EXPECT_EQ(Hex(*got), Hex(*want)) << DescribeRegion(q) << " slab " << slab;
    }
  }
}

TEST(FlatPiece, ScalarAndEmptyBoxes) {
  auto scalar = Lazy({}, "float32", 9);
  FlatPieceCatalog one(*scalar, 0, 1);
  auto want = scalar->FingerprintRegion(0, WholeTensor({}));
  auto got = FingerprintBoxOfFlatPiece(one, 0, WholeTensor({}));
  ASSERT_TRUE(want.ok() && got.ok()) << got.status().ToString();
  EXPECT_EQ(Hex(*got), Hex(*want));
  EXPECT_NE(Hex(*got), Hex(Fingerprint{}));
  auto w = Lazy({6, 7}, "bfloat16", 9);
  FlatPieceCatalog p(*w, 3, 30);
  auto empty = FingerprintBoxOfFlatPiece(p, 0, BoxRegion({6, 7}, {1, 2}, {1, 5}));
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(Hex(*empty), Hex(Fingerprint{}));
}

TEST(FlatPiece, WhatIsNotInsideThePieceIsNamed) {
  auto w = Lazy({6, 7}, "bfloat16", 9);
  FlatPieceCatalog p(*w, 3, 30);  // rows 0 (from column 3) .. 4 (to column 2)
  for (const Region& q : {BoxRegion({6, 7}, {0, 2}, {1, 4}), BoxRegion({6, 7}, {3, 0}, {5, 7}),
                          BoxRegion({6, 7}, {0, 0}, {7, 7}), BoxRegion({6, 8}, {1, 0}, {2, 7}),
                          FlatRegion({6, 7}, 4, 9)}) {
    auto f = FingerprintBoxOfFlatPiece(p, 0, q);
    ASSERT_FALSE(f.ok()) << DescribeRegion(q);
    EXPECT_EQ(f.status().code(), Code::kInvalidArgument);
    EXPECT_NE(f.status().message().find("'flat piece' tensor 'w'"), std::string::npos)
        << f.status().ToString();
  }
  // A tensor that is no flat piece: the whole tensor, or a box piece.
  auto f = FingerprintBoxOfFlatPiece(*w, 0, BoxRegion({6, 7}, {1, 0}, {2, 7}));
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("is not a flat piece"), std::string::npos)
      << f.status().ToString();
}

}  // namespace
}  // namespace seedstore
