// Internal to the store reader (io/store_reader.cc, io/store_chunks.cc): finding a chunk in
// the file, and the pool of chunk-decoding buffers every open store shares.
#pragma once
#include <hdf5.h>

#include <cstdint>

#include "io/chunk_grid.h"
#include "io/parallel.h"
#include "io/store_reader.h"

namespace seedstore {

/// Where the chunk at grid origin `off` of chunked dataset `dset` is stored; size 0 when the
/// chunk is missing. Takes the HDF5 lock.
ChunkLoc LocateChunk(int64_t dset, const hsize_t* off);

/// Chunk-decoding buffers (a chunk or two each), kept between reads and shared by every open
/// store: a pool per store would keep two buffers per thread per open store -- 525 MB of them
/// reading a 256-rank save whole.
ScratchPool<ChunkScratch>& ReadScratch();

}  // namespace seedstore
