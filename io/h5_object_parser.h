// A safety check of HDF5 objects that HDF5 would decode before checking them (internal to io/):
// a virtual dataset's mappings lie in the file's global heap, which has no checksum of its own;
// the heap object ends in a checksum (Jenkins lookup3, as all HDF5 metadata), but HDF5 1.10
// decodes every mapping before it checks it, and a damaged selection crashes it (a flipped bit
// in a rank: a buffer overflow, tests/golden/test_flip_sweep.cc). So before the verifier opens
// a master's dataset, SafeToOpen finds that object in the file's bytes -- the dataset's object
// header (version 2, itself checksummed, or 1), its layout message (version 4, class virtual:
// the heap collection's address and the object's index), the heap collection ("GCOL") -- and
// checks its checksum. Formats: the HDF5 file format specification, sections III.A.2 (object
// header), IV.A.2.i (layout) and III.E (global heap).
#pragma once
#include <hdf5.h>

#include <string>

namespace seedstore {

/// Empty when dataset `dset` of the open HDF5 file `f` (stored at `file`) can be opened safely:
/// its layout is not virtual, or the global heap object holding its mappings is intact; else
/// what is wrong. Call holding the HDF5 lock.
std::string SafeToOpen(const std::string& file, hid_t f, const std::string& dset);

}  // namespace seedstore
