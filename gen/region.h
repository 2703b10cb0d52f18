// A region of a tensor: an N-d box [start, stop) of global indices, or a flat range
// [begin, end) of row-major flat indices. Trivially copyable, for host and device.
#pragma once
#include "gen/common.h"

namespace seedstore {

constexpr int kMaxRank = 16;

struct Region {
  int rank = 0;                  // number of dims of the global tensor (0 = scalar)
  uint64_t shape[kMaxRank] = {};  // global shape
  uint64_t start[kMaxRank] = {};  // box start (ignored when flat)
  uint64_t stop[kMaxRank] = {};   // box stop, exclusive (ignored when flat)
  bool flat = false;             // flat range instead of a box
  uint64_t begin = 0, end = 0;   // flat range, row-major global flat indices

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

}  // namespace seedstore
