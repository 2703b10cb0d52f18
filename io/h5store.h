// The seedstore HDF5 store: one file holding lazy tensors (init spec + key + fingerprint, a few
// bytes each) and dense tensors (chunked, byte-shuffled, zstd, per-chunk XXH3-64 checksums).
// Normative description: docs/FORMAT.md. Summary:
//
//   /                       attrs seedstore.format = "seedstore", seedstore.version = 1
//   /seedstore/index        uint8 JSON text (zstd): every tensor record, lazy and dense
//   /tensors/<escaped>      dense data: chunked dataset, filters [shuffle(2)], zstd(32015)
//   /checksums/<escaped>    uint64 XXH3-64 of each chunk's unfiltered bytes (chunk-grid order)
//   /chunkinfo/<escaped>    uint64 [chunks, 3]: XXH3-64 of each chunk's stored (filtered)
//                           bytes, and the chunk's fingerprint (its share of the tensor's)
//
// Chunks are compressed and decompressed in our own threads, written with H5Dwrite_chunk and
// read with pread at their file addresses (H5Dread_chunk for files with a user block); the
// zstd encoding is the HDF5 Zstandard plugin's (one frame per chunk with its content size;
// cd_values[0] = level), so h5py + hdf5plugin read our files unchanged. An open store keeps
// reading the file it opened when another writer replaces its path.
//
// Writes are atomic (invariant I5): a StoreWriter writes a temporary file next to the
// destination and renames it over the destination on Commit(); until then the previous file is
// untouched. Every read of a dense chunk checks its checksum.
//
// Errors are named: the message of every format error starts with one of the names of
// StoreError (e.g. "chunk-corrupt: tensor 'w' chunk 3 ..."), listed in docs/FORMAT.md.
//
// The files that implement it, one concept each (docs/ARCHITECTURE.md, "io/ file map"):
// io/store_format.h (names, errors, options), io/store_reader.h (H5Store),
// io/store_writer.h (StoreWriter), io/store_rewrite.h (ReplaceWithDense), io/zstd_filter.h,
// io/parallel.h (ParallelFor) and io/h5_util.h; this header gathers them.
#pragma once
#include "io/h5_util.h"
#include "io/parallel.h"
#include "io/store_format.h"
#include "io/store_reader.h"
#include "io/store_rewrite.h"
#include "io/store_writer.h"
#include "io/zstd_filter.h"
#include "store/catalog.h"
#include "store/layout.h"
