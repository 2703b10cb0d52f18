// HDF5 helpers shared by the io/ files that write seedstore files (internal to io/).
#pragma once
#include <cstdint>
#include <string>

#include "store/status.h"

namespace seedstore {

/// Writes scalar string attribute `name` = `value` on HDF5 object `obj`: fixed-length UTF-8,
/// NUL-padded (at least one byte), so that it lies in the object header, which HDF5 checksums.
/// A variable-length string would lie in the global heap, which has no checksum: one flipped
/// bit there can crash libhdf5 while reading it (tests/golden/test_flip_sweep.cc). Errors
/// (kIo) name the attribute.
Status WriteStringAttr(int64_t obj, const char* name, const std::string& value);

/// Reads scalar string attribute `name` of `obj`, fixed-length (NUL-padded or -terminated) or
/// variable-length (as files written before fixed-length strings, or by other tools, hold).
/// Errors name `where` and the attribute: missing-attribute, not a string (kCorrupt), HDF5's.
Result<std::string> ReadStringAttr(int64_t obj, const char* name, const std::string& where);

/// The root attribute that marks a distributed save's master (docs/FORMAT.md 10), and its value.
constexpr const char* kRoleAttr = "seedstore.role";
constexpr const char* kMasterRole = "distributed-master";

}  // namespace seedstore
