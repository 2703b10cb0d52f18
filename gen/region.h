// A region of a tensor: an N-d box [start, stop) of global indices, or a flat range
// [begin, end) of row-major flat indices. Trivially copyable, for host and device.
#pragma once
#include <string>
#include <vector>

#include "gen/common.h"

namespace seedstore {

constexpr int kMaxRank = 16;

struct Region {
  int rank = 0;                   // number of dims of the global tensor (0 = scalar)
  uint64_t shape[kMaxRank] = {};  // global shape
  uint64_t start[kMaxRank] = {};  // box start (ignored when flat)
  uint64_t stop[kMaxRank] = {};   // box stop, exclusive (ignored when flat)
  bool flat = false;              // flat range instead of a box
  uint64_t begin = 0, end = 0;    // flat range, row-major global flat indices

  /// Number of elements in the region.
  SEEDSTORE_HD uint64_t Count() const {
    if (flat) return end - begin;
    uint64_t n = 1;
    for (int d = 0; d < rank; ++d) n *= stop[d] - start[d];
    return n;
  }
  /// Length of one contiguous run of global flat indices (innermost box extent).
  SEEDSTORE_HD uint64_t RunLength() const {
    if (flat) return end - begin;
    return rank == 0 ? 1 : stop[rank - 1] - start[rank - 1];
  }
  /// Global flat index of the first element of run q (runs are box rows, row-major).
  SEEDSTORE_HD uint64_t RunBase(uint64_t q) const {
    if (flat) return begin;
    if (rank == 0) return 0;
    uint64_t base = start[rank - 1], stride = shape[rank - 1];
    for (int d = rank - 2; d >= 0; --d) {
      const uint64_t ext = stop[d] - start[d];
      const uint64_t idx = q % ext;
      q /= ext;
      base += (start[d] + idx) * stride;
      stride *= shape[d];
    }
    return base;
  }
};

/// The whole tensor of the given shape, as a box.
inline Region WholeRegion(int rank, const uint64_t* shape) {
  Region r;
  r.rank = rank;
  for (int d = 0; d < rank; ++d) {
    r.shape[d] = shape[d];
    r.stop[d] = shape[d];
  }
  return r;
}

// Host-side helpers (no device code needs them).

/// Human-readable region: "[0:2, 100:104, 0:8]" for a box, "[]" for a scalar,
/// "flat[10:20]" for a flat range.
inline std::string DescribeRegion(const Region& r) {
  if (r.flat) return "flat[" + std::to_string(r.begin) + ":" + std::to_string(r.end) + "]";
  std::string s = "[";
  for (int d = 0; d < r.rank; ++d) {
    if (d) s += ", ";
    s += std::to_string(r.start[d]);
    s += ":";
    s += std::to_string(r.stop[d]);
  }
  return s + "]";
}

/// Appends what places `r` within its shape: [begin, end] for a flat range, else its start
/// then its stop (2 x rank values).
inline void AppendRegionCoords(const Region& r, std::vector<uint64_t>* out) {
  if (r.flat) {
    out->push_back(r.begin);
    out->push_back(r.end);
  } else {
    out->insert(out->end(), r.start, r.start + r.rank);
    out->insert(out->end(), r.stop, r.stop + r.rank);
  }
}

/// Whether two regions are the same: same kind, rank and shape, and the same box or range.
inline bool SameRegion(const Region& a, const Region& b) {
  if (a.flat != b.flat || a.rank != b.rank) return false;
  for (int d = 0; d < a.rank; ++d)
    if (a.shape[d] != b.shape[d]) return false;
  if (a.flat) return a.begin == b.begin && a.end == b.end;
  for (int d = 0; d < a.rank; ++d)
    if (a.start[d] != b.start[d] || a.stop[d] != b.stop[d]) return false;
  return true;
}

/// Whether the region's elements are consecutive global flat indices (one run): a flat range,
/// or a box that is full in every dim after some dim d and one element wide in every dim
/// before d. Its first element is then RunBase(0).
inline bool IsContiguous(const Region& r) {
  if (r.flat || r.rank == 0) return true;
  int d = r.rank - 1;
  while (d > 0 && r.start[d] == 0 && r.stop[d] == r.shape[d]) --d;
  for (int k = 0; k < d; ++k)
    if (r.stop[k] - r.start[k] != 1) return false;
  return true;
}

/// The box [start, stop) of a tensor of `shape` (preconditions: equal ranks, start <= stop <=
/// shape).
inline Region BoxRegion(const std::vector<uint64_t>& shape, const std::vector<uint64_t>& start,
                        const std::vector<uint64_t>& stop) {
  Region r;
  r.rank = static_cast<int>(shape.size());
  for (int d = 0; d < r.rank; ++d) {
    r.shape[d] = shape[d];
    r.start[d] = start[d];
    r.stop[d] = stop[d];
  }
  return r;
}

/// The flat range [b, e) of a tensor of `shape`.
inline Region FlatRegion(const std::vector<uint64_t>& shape, uint64_t b, uint64_t e) {
  Region r;
  r.rank = static_cast<int>(shape.size());
  for (int d = 0; d < r.rank; ++d) r.shape[d] = shape[d];
  r.flat = true;
  r.begin = b;
  r.end = e;
  return r;
}

/// The shape of a region held as a tensor of its own: a box's extents, `[end - begin]` for a
/// flat range.
inline std::vector<uint64_t> LocalShape(const Region& r) {
  if (r.flat) return {r.end - r.begin};
  std::vector<uint64_t> s;
  for (int d = 0; d < r.rank; ++d) s.push_back(r.stop[d] - r.start[d]);
  return s;
}

/// The cells of a chunk grid (cells of shape `chunk`, the grid anchored at `anchor`, which
/// must not lie after `r` in any dim) that meet box `r`, each clipped to `r`, in row-major
/// order of the cells: Count() of them, Tile(q) the q-th. For reading or hashing a box one
/// stored chunk at a time.
class GridTiles {
 public:
  GridTiles(const Region& r, const uint64_t* anchor, const std::vector<uint64_t>& chunk)
      : r_(r), rank_(r.rank) {
    for (int d = 0; d < rank_; ++d) {
      anchor_[d] = anchor[d];
      chunk_[d] = chunk[d];
      first_[d] = (r.start[d] - anchor[d]) / chunk[d];
      count_[d] =
          r.stop[d] > r.start[d] ? (r.stop[d] - 1 - anchor[d]) / chunk[d] + 1 - first_[d] : 0;
      n_ *= count_[d];
    }
  }
  uint64_t Count() const { return n_; }
  Region Tile(uint64_t q) const {
    Region t = r_;
    for (int d = rank_ - 1; d >= 0; --d) {
      const uint64_t at = anchor_[d] + (first_[d] + q % count_[d]) * chunk_[d];
      t.start[d] = at > r_.start[d] ? at : r_.start[d];
      t.stop[d] = at + chunk_[d] < r_.stop[d] ? at + chunk_[d] : r_.stop[d];
      q /= count_[d];
    }
    return t;
  }

 private:
  Region r_;
  int rank_ = 0;
  uint64_t anchor_[kMaxRank] = {}, chunk_[kMaxRank] = {}, first_[kMaxRank] = {},
           count_[kMaxRank] = {};
  uint64_t n_ = 1;
};

/// Box `outer` minus box `inner` (which it must contain) as disjoint, non-empty boxes in the
/// frame of `outer`: in dim d, the slabs below and above `inner`, spanning inner's extent in
/// the dims before d and outer's in the dims after. Empty when they are the same box.
inline std::vector<Region> BoxDifference(const Region& outer, const Region& inner) {
  std::vector<Region> out;
  for (int d = 0; d < outer.rank; ++d) {
    for (int side = 0; side < 2; ++side) {
      Region slab = outer;
      for (int e = 0; e < d; ++e) {
        slab.start[e] = inner.start[e];
        slab.stop[e] = inner.stop[e];
      }
      if (side == 0) {
        slab.stop[d] = inner.start[d];
      } else {
        slab.start[d] = inner.stop[d];
      }
      if (slab.Count() > 0) out.push_back(slab);
    }
  }
  return out;
}

}  // namespace seedstore
