#include "io/chunk_grid.h"

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include <cstring>

namespace seedstore {

// Writer's chunk-shape rule: start from the whole shape and halve (rounding up) the largest
// dim, outermost first among equals, until the chunk holds at most `target` bytes.
std::vector<uint64_t> ChooseChunk(const std::vector<uint64_t>& shape, int es, uint64_t target) {
  if (shape.empty()) return {};
  for (uint64_t s : shape)
    if (s == 0) return {};
  std::vector<uint64_t> c = shape;
  auto bytes = [&] {
    unsigned __int128 n = es;
    for (uint64_t x : c) n *= x;
    return n;
  };
  // HDF5 limits a chunk to < 4 GiB and each chunk dim to < 2^32.
  for (auto& x : c) x = std::min<uint64_t>(x, 0xFFFFFFFFull);
  target = std::clamp<uint64_t>(target, 1, 1ull << 31);
  while (bytes() > target) {
    size_t best = 0;
    for (size_t d = 1; d < c.size(); ++d)
      if (c[d] > c[best]) best = d;
    if (c[best] == 1) break;
    c[best] = (c[best] + 1) / 2;
  }
  return c;
}

// The intersection as a box of each buffer: CopyBox with the offsets of i_start in both.
void CopyIntersection(const uint8_t* src, const uint64_t* s_start, const uint64_t* s_ext,
                      uint8_t* dst, const uint64_t* d_start, const uint64_t* d_ext,
                      const uint64_t* i_start, const uint64_t* i_stop, int rank, size_t es) {
  uint64_t soff[kMaxRank], doff[kMaxRank], ext[kMaxRank];
  for (int k = 0; k < rank; ++k) {
    if (i_stop[k] <= i_start[k]) return;
    soff[k] = i_start[k] - s_start[k];
    doff[k] = i_start[k] - d_start[k];
    ext[k] = i_stop[k] - i_start[k];
  }
  CopyBox(src, s_ext, soff, dst, d_ext, doff, ext, rank, es);
}

// HDF5's shuffle filter: byte j of element i goes to j * n + i; trailing bytes copied.
void Shuffle(const uint8_t* in, uint8_t* out, size_t nbytes, size_t es) {
  const size_t n = nbytes / es;
  if (es == 2) {
    for (size_t i = 0; i < n; ++i) {
      out[i] = in[2 * i];
      out[n + i] = in[2 * i + 1];
    }
  } else if (es == 4) {
    for (size_t i = 0; i < n; ++i) {
      out[i] = in[4 * i];
      out[n + i] = in[4 * i + 1];
      out[2 * n + i] = in[4 * i + 2];
      out[3 * n + i] = in[4 * i + 3];
    }
  } else {
    for (size_t j = 0; j < es; ++j)
      for (size_t i = 0; i < n; ++i) out[j * n + i] = in[i * es + j];
  }
  std::memcpy(out + n * es, in + n * es, nbytes - n * es);
}

namespace {

// memcpy for a run of decoded bytes into the caller's buffer. Long runs use non-temporal
// stores on x86-64 (SSE2, always present): the destination is usually far larger than the
// caches and not read again soon, and streaming stores skip reading each line before writing
// it. Callers end with StreamFence() before the data may be read by another thread.
void CopyOut(uint8_t* dst, const uint8_t* src, size_t n) {
#if defined(__x86_64__)
  if (n >= 1024) {
    const size_t head = (16 - (reinterpret_cast<uintptr_t>(dst) & 15)) & 15;
    std::memcpy(dst, src, head);
    dst += head, src += head, n -= head;
    size_t k = 0;
    for (; k + 64 <= n; k += 64) {
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + k));
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + k + 16));
      const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + k + 32));
      const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + k + 48));
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + k), a);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + k + 16), b);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + k + 32), c);
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + k + 48), d);
    }
    std::memcpy(dst + k, src + k, n - k);
    return;
  }
#endif
  std::memcpy(dst, src, n);
}

void StreamFence() {
#if defined(__x86_64__)
  _mm_sfence();
#endif
}

// Copies decoded chunk elements [e0, e1) (row-major over the chunk's extents `cext`, chunk
// origin `cs`), held at `src`, to their places in the sink.
void ScatterElems(const uint8_t* src, uint64_t e0, uint64_t e1, int rank, const uint64_t* cs,
                  const uint64_t* cext, size_t es, const ChunkSink& k) {
  if (rank == 0) {
    std::memcpy(k.dst, src, es);
    return;
  }
  const int last = rank - 1;
  const uint64_t row_len = cext[last];
  // Columns of a row inside the intersection, chunk-relative.
  const uint64_t c_lo = k.is[last] - cs[last], c_hi = k.ie[last] - cs[last];
  for (uint64_t r = e0 / row_len; r * row_len < e1; ++r) {
    // The row's coordinates in the leading dims; skip rows outside the intersection.
    uint64_t doff = 0, q = r, idx[kMaxRank];
    bool inside = true;
    for (int d = last - 1; d >= 0; --d) {
      idx[d] = cs[d] + q % cext[d];
      q /= cext[d];
      inside = inside && idx[d] >= k.is[d] && idx[d] < k.ie[d];
    }
    if (!inside) continue;
    for (int d = 0; d < last; ++d) doff = doff * k.d_ext[d] + (idx[d] - k.d_start[d]);
    const uint64_t a = std::max(std::max(r * row_len, e0) - r * row_len, c_lo);
    const uint64_t b = std::min(std::min((r + 1) * row_len, e1) - r * row_len, c_hi);
    if (a >= b) continue;
    doff = doff * k.d_ext[last] + (cs[last] + a - k.d_start[last]);
    CopyOut(k.dst + doff * es, src + (r * row_len + a - e0) * es, (b - a) * es);
  }
}

// Unshuffles elements [e0, e1) of an HDF5-shuffled buffer of n elements into `out`.
void UnshuffleRange(const uint8_t* in, uint64_t n, uint64_t e0, uint64_t e1, size_t es,
                    uint8_t* out) {
  const uint64_t m = e1 - e0;
  if (es == 2) {
    const uint8_t *a = in + e0, *b = in + n + e0;
    for (uint64_t i = 0; i < m; ++i) {
      out[2 * i] = a[i];
      out[2 * i + 1] = b[i];
    }
  } else if (es == 4) {
    const uint8_t *a = in + e0, *b = in + n + e0, *c = in + 2 * n + e0, *d = in + 3 * n + e0;
    for (uint64_t i = 0; i < m; ++i) {
      out[4 * i] = a[i];
      out[4 * i + 1] = b[i];
      out[4 * i + 2] = c[i];
      out[4 * i + 3] = d[i];
    }
  } else {
    for (size_t j = 0; j < es; ++j)
      for (uint64_t i = 0; i < m; ++i) out[i * es + j] = in[j * n + e0 + i];
  }
}

}  // namespace

// HDF5's unshuffle of a whole buffer (trailing bytes copied).
void Unshuffle(const uint8_t* in, uint8_t* out, size_t nbytes, size_t es) {
  const size_t n = nbytes / es;
  UnshuffleRange(in, n, 0, n, es, out);
  std::memcpy(out + n * es, in + n * es, nbytes - n * es);
}

// The last decoding pass, fused: unshuffles (when `shuffled`) the decoded chunk at `src`
// (`bytes` bytes, row-major over extents `cext`) one L1-sized block at a time, hashes each
// block with streaming XXH3-64 (gen/checksum.h; equal to the one-shot hash of the whole
// chunk) and scatters it into the sink while it is in L1. Returns the chunk's XXH3-64.
uint64_t EmitChunk(const uint8_t* src, size_t bytes, size_t es, bool shuffled, int rank,
                   const uint64_t* cs, const uint64_t* cext, const ChunkSink& k, ChunkScratch& s) {
  s.hash.Reset();
  const uint64_t n = bytes / es, step = sizeof(s.block) / es;
  for (uint64_t e0 = 0; e0 < n; e0 += step) {
    const uint64_t e1 = std::min(n, e0 + step);
    const uint8_t* blk = src + e0 * es;
    if (shuffled) {
      UnshuffleRange(src, n, e0, e1, es, s.block);
      blk = s.block;
    }
    s.hash.Update(blk, (e1 - e0) * es);
    ScatterElems(blk, e0, e1, rank, cs, cext, es, k);
  }
  StreamFence();
  return s.hash.Digest();
}

// Copies a box of extent `ext` out of a row-major buffer of extent `sext`, where the box
// starts at `soff`, into a row-major buffer of extent `dext` at `doff` (null offsets: 0).
void CopyBox(const unsigned char* src, const uint64_t* sext, const uint64_t* soff,
             unsigned char* dst, const uint64_t* dext, const uint64_t* doff, const uint64_t* ext,
             int rank, size_t es) {
  if (rank == 0) {
    std::memcpy(dst, src, es);
    return;
  }
  uint64_t rows = 1;
  for (int d = 0; d < rank - 1; ++d) rows *= ext[d];
  const size_t row_bytes = ext[rank - 1] * es;
  if (row_bytes == 0) return;
  uint64_t idx[kMaxRank] = {};
  for (uint64_t q = 0; q < rows; ++q) {
    uint64_t so = 0, dof = 0;
    for (int d = 0; d < rank; ++d) {
      const uint64_t i = d < rank - 1 ? idx[d] : 0;
      so = so * sext[d] + (soff ? soff[d] : 0) + i;
      dof = dof * dext[d] + (doff ? doff[d] : 0) + i;
    }
    std::memcpy(dst + dof * es, src + so * es, row_bytes);
    for (int d = rank - 2; d >= 0; --d) {
      if (++idx[d] < ext[d]) break;
      idx[d] = 0;
    }
  }
}

}  // namespace seedstore
