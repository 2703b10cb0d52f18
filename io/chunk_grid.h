// The chunk grid of a dense tensor and the byte-level work on its chunks that is not zstd: the
// writer's chunk-shape rule, copying boxes between row-major buffers, HDF5's shuffle and its
// inverse, and the fused last decoding pass (unshuffle, checksum, scatter) every chunk read
// ends with (internal to io/).
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "gen/checksum.h"
#include "gen/region.h"

namespace seedstore {

// The chunk grid of a dense tensor. Contiguous datasets (rank 0 or an empty dim) have one
// "chunk": the whole data.
struct Grid {
  int rank = 0;
  std::vector<uint64_t> shape, chunk, count;  // chunk empty: contiguous
  uint64_t num = 1;

  bool chunked() const { return !chunk.empty(); }
  uint64_t ChunkElems() const {
    uint64_t n = 1;
    if (chunked())
      for (uint64_t c : chunk) n *= c;
    else
      for (uint64_t s : shape) n *= s;
    return n;
  }
  void Coords(uint64_t j, uint64_t* c) const {  // chunk-grid coordinates, row-major
    for (int d = rank - 1; d >= 0; --d) {
      c[d] = j % count[d];
      j /= count[d];
    }
  }
  uint64_t Linear(const uint64_t* c) const {
    uint64_t j = 0;
    for (int d = 0; d < rank; ++d) j = j * count[d] + c[d];
    return j;
  }
  // The chunk's box clipped to the tensor.
  Region Box(uint64_t j) const {
    Region r = WholeRegion(rank, shape.data());
    if (!chunked()) return r;
    uint64_t c[kMaxRank];
    Coords(j, c);
    for (int d = 0; d < rank; ++d) {
      r.start[d] = c[d] * chunk[d];
      r.stop[d] = std::min(shape[d], r.start[d] + chunk[d]);
    }
    return r;
  }
  static Grid Make(const std::vector<uint64_t>& shape, std::vector<uint64_t> chunk) {
    Grid g;
    g.rank = static_cast<int>(shape.size());
    g.shape = shape;
    g.chunk = std::move(chunk);
    g.num = 1;
    if (g.chunked()) {
      for (int d = 0; d < g.rank; ++d) {
        g.count.push_back((shape[d] + g.chunk[d] - 1) / g.chunk[d]);
        g.num *= g.count.back();
      }
    }
    return g;
  }
};

/// Whether box `inner` lies in box `outer` (same rank).
inline bool BoxWithin(const Region& inner, const Region& outer) {
  for (int d = 0; d < inner.rank; ++d)
    if (inner.start[d] < outer.start[d] || inner.stop[d] > outer.stop[d]) return false;
  return true;
}

/// Writer's chunk-shape rule: start from the whole shape and halve (rounding up) the largest
/// dim, outermost first among equals, until the chunk holds at most `target` bytes of elements
/// of `es` bytes. Empty (contiguous) for a scalar or a tensor without elements.
std::vector<uint64_t> ChooseChunk(const std::vector<uint64_t>& shape, int es, uint64_t target);

/// Copies the intersection [i_start, i_stop) (tensor coordinates) from a buffer holding the box
/// that starts at `s_start` (row-major, extents s_ext) into a buffer holding the box at
/// `d_start` (extents d_ext).
void CopyIntersection(const uint8_t* src, const uint64_t* s_start, const uint64_t* s_ext,
                      uint8_t* dst, const uint64_t* d_start, const uint64_t* d_ext,
                      const uint64_t* i_start, const uint64_t* i_stop, int rank, size_t es);

/// Copies a box of extent `ext` out of a row-major buffer of extent `sext`, where the box
/// starts at `soff`, into a row-major buffer of extent `dext` at `doff` (null offsets: 0).
void CopyBox(const unsigned char* src, const uint64_t* sext, const uint64_t* soff,
             unsigned char* dst, const uint64_t* dext, const uint64_t* doff, const uint64_t* ext,
             int rank, size_t es);

/// HDF5's shuffle filter: byte j of element i goes to j * n + i; trailing bytes copied.
void Shuffle(const uint8_t* in, uint8_t* out, size_t nbytes, size_t es);
/// HDF5's unshuffle of a whole buffer (trailing bytes copied).
void Unshuffle(const uint8_t* in, uint8_t* out, size_t nbytes, size_t es);

/// Per-thread buffers of the chunk readers, reused between chunks and (H5Store's pool) reads.
struct ChunkScratch {
  std::vector<uint8_t> raw, tmp, chunk;  // stored bytes; intermediate stages; a whole chunk
  alignas(64) uint8_t block[16384];      // one L1-sized block of decoded bytes
  Checksum64Stream hash;
};

/// Where a decoded chunk goes: the elements of the chunk inside the intersection [is, ie)
/// (tensor coordinates) are copied into `dst`, a row-major buffer holding the box that starts
/// at `d_start` with extents `d_ext`.
struct ChunkSink {
  uint8_t* dst;
  const uint64_t* d_start;
  const uint64_t* d_ext;
  const uint64_t* is;
  const uint64_t* ie;
};

/// The last decoding pass, fused: unshuffles (when `shuffled`) the decoded chunk at `src`
/// (`bytes` bytes, row-major over extents `cext`, origin `cs`) one L1-sized block at a time,
/// hashes each block with streaming XXH3-64 (gen/checksum.h; equal to the one-shot hash of the
/// whole chunk) and scatters it into the sink while it is in L1. Returns the chunk's XXH3-64.
uint64_t EmitChunk(const uint8_t* src, size_t bytes, size_t es, bool shuffled, int rank,
                   const uint64_t* cs, const uint64_t* cext, const ChunkSink& k, ChunkScratch& s);

}  // namespace seedstore
