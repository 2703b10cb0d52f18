// The seal of a distributed save's master (docs/FORMAT.md 10): the master's first kSealBytes are
// an HDF5 user block holding a magic, then the XXH3-64 and the length of every byte after the
// user block, checked before HDF5 reads a byte of the file. HDF5 does not checksum everything it
// parses: a global heap collection, where a virtual dataset's mappings lie, has no checksum,
// and one flipped bit in an object's size there makes libhdf5 1.10 loop forever opening it.
#pragma once
#include <cstdint>
#include <string>

#include "store/status.h"

namespace seedstore {

/// The size of the master's user block, which holds its seal.
constexpr uint64_t kSealBytes = 512;

/// Seals the master's temporary `file` (written with a kSealBytes user block, closed). kIo
/// naming the file when it cannot be read or written.
Status SealMaster(const std::string& file);

/// Checks the seal of a distributed save's master at `path` before HDF5 reads a byte of it.
/// master-corrupt (kCorrupt, naming the save) when the file starts with the seal and its bytes
/// after the user block do not match it, or when it starts with neither the seal's magic nor
/// HDF5's signature and either `is_master` (the caller knows it is one) or the rest of the seal
/// matches those bytes (a damaged magic). OK for a file that starts with HDF5's signature (a
/// store, or a master from before seals), one shorter than the seal or that cannot be opened
/// (H5Store::Open names why), and -- when not `is_master` -- an HDF5 file with a user block of
/// its own. kIo when reading it fails. *sealed (may be null): the file is a sealed master,
/// intact or damaged.
Status CheckMasterSeal(const std::string& path, bool is_master, bool* sealed);

}  // namespace seedstore
