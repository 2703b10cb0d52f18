// Distributed saves: one ordinary seedstore store per rank holding that
// rank's distinct shards of the dense tensors, plus a master store that keeps the lazy tensors
// as lazy records, an index of every dense tensor's pieces, and one HDF5 virtual dataset per
// dense tensor stitching the pieces so any HDF5 reader (h5py included) sees the global tensor.
// Normative description: docs/FORMAT.md, "Distributed saves". Summary, for a save at P:
//
//   P                     master: an ordinary store (lazy tensors) + /distributed/index (JSON)
//                         + /tensors/<escaped> virtual datasets of the dense tensors
//   P.<id>.rank<r>.h5     rank r's file: ordinary store; its distinct shard of each dense
//                         tensor as a dense tensor of the same name and the local shape of the
//                         shard's stored box (the shard, or padded to the source's chunk grid so
//                         its chunks are copied, not re-encoded; readers ignore the padding),
//                         recorded as a piece (TensorRecord::piece: fingerprints in the global
//                         tensor's frame, so the pieces of any layout add up to the tensor's,
//                         padding taken out)
//   P.lock                the writer lock: rank 0 of the writer holds an OFD write lock on it
//                         while it saves (the kernel drops it when the writer ends, however it
//                         ends); holds "pid <pid> on <host>" of that rank 0
//   P.<id>.new|commit|veto  the commit protocol's files of save <id> (staged master, its gate,
//                         a veto), present while it commits or left by an interrupted save
//
// <id> is 8 hex digits, new for every save, so writing a save never touches the files of the
// save it replaces until the new master has been renamed over P (the commit point, after the
// proof); then the old rank files are removed. Every file is written atomically
// (io/atomic_file.h). The protocol, as states and who may remove what: docs/FORMAT.md 10.
#pragma once  //
// The files that implement it, one concept each (docs/ARCHITECTURE.md, "io/ file map"):
// io/rank_files.h (names), io/master_seal.h, io/dist_catalog.h (reading, verify) and
// io/reshard.h (writing and proving); this header gathers them.
#pragma once
#include "io/collective.h"
#include "io/dist_catalog.h"
#include "io/h5_util.h"
#include "io/h5store.h"
#include "io/master_seal.h"
#include "io/rank_files.h"
#include "io/reshard.h"
#include "store/catalog.h"
#include "store/layout.h"
#include "store/verify.h"
