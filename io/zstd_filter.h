// The zstd filter of a store's chunks (HDF5 filter 32015, the HDF5 Zstandard plugin's encoding:
// one zstd frame per chunk with its content size, cd_values[0] = level): registered with HDF5
// for the datasets HDF5 itself filters, and the per-thread codec the chunk threads use.
#pragma once
#include <cstddef>

struct ZSTD_DCtx_s;

namespace seedstore {

/// Registers the zstd filter (id 32015, the HDF5 Zstandard plugin's encoding) with the HDF5
/// library in this process; idempotent. Called by Open/Create.
void RegisterZstdFilter();

/// Compresses `n` bytes at `src` into one zstd frame with its content size at `dst` (capacity
/// `cap`: ZSTD_compressBound(n) is enough) at `level`, with this thread's context. Returns the
/// frame's size, or a zstd error code (ZSTD_isError). At level 1 the match finder is tuned for
/// shuffled weights (io/zstd_filter.cc); any zstd decoder reads the frames.
size_t CompressChunk(void* dst, size_t cap, const void* src, size_t n, int level);

/// This thread's zstd decompression context (ZSTD_DCtx), kept for the thread's life.
ZSTD_DCtx_s* ThreadZstdDCtx();

/// The name of HDF5 filter `id` for messages ("deflate", "zstd", ...; "unknown").
const char* FilterName(int id);

}  // namespace seedstore
