// Index arithmetic shared by the CUDA kernels and their host-side tests: division by
// run-time-invariant divisors without a hardware divide, and the map from a region's
// box-linear position to a global flat index. No CUDA syntax; callable on host and device.
#pragma once
#include "gen/region.h"

namespace seedstore {

/// Unsigned 64-bit division by an invariant divisor d >= 1 (Granlund & Montgomery 1994,
/// figure 4.1): q = (t + ((n - t) >> sh1)) >> sh2 with t = mulhi(m, n). Exact for all n.
struct FastDivU64 {
  uint64_t d = 1, m = 1;
  uint32_t sh1 = 0, sh2 = 0;

  /// Host only (uses a 128-bit division). Precondition: d >= 1.
  static FastDivU64 Make(uint64_t d) {
    FastDivU64 f;
    f.d = d;
    int l = 0;  // ceil(log2(d))
    while (l < 64 && (uint64_t{1} << l) < d) ++l;
    const uint64_t t = (l == 64 ? uint64_t{0} : (uint64_t{1} << l)) - d;  // 2^l - d mod 2^64
    f.m = static_cast<uint64_t>((static_cast<unsigned __int128>(t) << 64) / d) + 1;
    f.sh1 = l < 1 ? l : 1;
    f.sh2 = l > 1 ? l - 1 : 0;
    return f;
  }
  SEEDSTORE_HD uint64_t Div(uint64_t n) const {
    uint64_t lo, hi;
    Mul64To128(m, n, &lo, &hi);
    return (hi + ((n - hi) >> sh1)) >> sh2;
  }
};

/// A region with its dims canonicalized (full inner dims and unit dims merged), so that a
/// contiguous tensor, a flat range or a row-contiguous shard is a single run. Built on the
/// host by MakeRunMap; passed by value to kernels.
struct RunMap {
  uint64_t count = 0;       // elements in the region
  uint64_t run_len = 1;     // elements per run (innermost merged extent)
  uint64_t last_start = 0;  // global flat offset of the innermost merged dim's start
  int rank = 1;             // merged dims (>= 1)
  FastDivU64 run_div;       // divides by run_len
  // Outer merged dims d = 0 .. rank-2 (outermost first).
  uint64_t start[kMaxRank] = {}, ext[kMaxRank] = {}, stride[kMaxRank] = {};
  FastDivU64 ext_div[kMaxRank];

  /// Global flat index of the first element of run q.
  SEEDSTORE_HD uint64_t RunBase(uint64_t q) const {
    uint64_t base = last_start;
    for (int d = rank - 2; d >= 1; --d) {
      const uint64_t nq = ext_div[d].Div(q);
      base += (start[d] + (q - nq * ext[d])) * stride[d];
      q = nq;
    }
    if (rank >= 2) base += (start[0] + q) * stride[0];
    return base;
  }
  /// Global flat index of box-linear position a (< count); *room = elements left in its run.
  SEEDSTORE_HD uint64_t Locate(uint64_t a, uint64_t* room) const {
    const uint64_t q = run_div.Div(a);
    const uint64_t off = a - q * run_len;
    *room = run_len - off;
    return RunBase(q) + off;
  }
  /// Whether every run starts at a global index that is a multiple of `align` and has a
  /// length that is a multiple of `vec` (so vec-element chunks never straddle runs).
  bool RunsAligned(uint64_t align, uint64_t vec) const {
    if (last_start % align != 0) return false;
    for (int d = 0; d + 1 < rank; ++d)
      if (stride[d] % align != 0) return false;
    return rank == 1 || run_len % vec == 0;
  }
};

/// Canonical run map of a valid region (see ValidateRegion). Host only.
inline RunMap MakeRunMap(const Region& r) {
  RunMap m;
  m.count = r.Count();
  if (r.flat || r.rank == 0) {
    m.last_start = r.flat ? r.begin : 0;
    m.run_len = r.flat ? (r.end - r.begin) : 1;
  } else {
    // Merge from the innermost dim outwards: a dim merges into the (merged) dim inside it
    // when that one is full (start 0, extent = shape) or when the dim itself has extent 1.
    uint64_t shp[kMaxRank], st[kMaxRank], ex[kMaxRank];
    int n = 0;  // merged dims, innermost first
    shp[0] = r.shape[r.rank - 1];
    st[0] = r.start[r.rank - 1];
    ex[0] = r.stop[r.rank - 1] - r.start[r.rank - 1];
    n = 1;
    for (int d = r.rank - 2; d >= 0; --d) {
      const uint64_t s = r.shape[d], a = r.start[d], e = r.stop[d] - r.start[d];
      uint64_t& cs = shp[n - 1];
      uint64_t& ca = st[n - 1];
      uint64_t& ce = ex[n - 1];
      if (ca == 0 && ce == cs) {  // inner full: contiguous blocks of cs elements
        ca = a * cs;
        ce = e * cs;
        cs = s * cs;
      } else if (e == 1) {  // unit outer dim: a constant offset
        ca = a * cs + ca;
        cs = s * cs;
      } else {
        shp[n] = s;
        st[n] = a;
        ex[n] = e;
        ++n;
      }
    }
    m.rank = n;
    m.run_len = ex[0];
    m.last_start = st[0];
    uint64_t stride = shp[0];
    for (int k = 1; k < n; ++k) {  // k-th merged dim from the inside -> outer index n-1-k
      const int d = n - 1 - k;
      m.start[d] = st[k];
      m.ext[d] = ex[k];
      m.stride[d] = stride;
      m.ext_div[d] = FastDivU64::Make(ex[k] == 0 ? 1 : ex[k]);
      stride *= shp[k];
    }
  }
  m.run_div = FastDivU64::Make(m.run_len == 0 ? 1 : m.run_len);
  return m;
}

/// Empty string when r is a well-formed region, else what is wrong with it.
inline const char* RegionError(const Region& r) {
  if (r.flat) return r.begin <= r.end ? "" : "flat range has begin > end";
  if (r.rank < 0 || r.rank > kMaxRank) return "region rank out of range [0, 16]";
  for (int d = 0; d < r.rank; ++d) {
    if (r.start[d] > r.stop[d]) return "box has start > stop";
    if (r.stop[d] > r.shape[d]) return "box extends past the tensor's shape";
  }
  return "";
}

}  // namespace seedstore
