// HDF5 helpers shared by the io/ files that read and write seedstore files, declared without
// <hdf5.h> (ids as int64_t; io/h5_handle.h has the HDF5-typed ones and the handle type).
// Implemented in io/h5_handle.cc (lock, errors, closing) and io/h5_util.cc (attributes, types).
#pragma once
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "gen/dtype.h"
#include "store/status.h"

namespace seedstore {

/// Writes scalar string attribute `name` = `value` on HDF5 object `obj`: fixed-length UTF-8,
/// NUL-padded (at least one byte), so that it lies in the object header, which HDF5 checksums.
/// A variable-length string would lie in the global heap, which has no checksum: one flipped
/// bit there can crash libhdf5 while reading it (tests/golden/test_flip_sweep.cc). Errors
/// (kIo) name the attribute.
Status WriteStringAttr(int64_t obj, const char* name, const std::string& value);

/// This thread's HDF5 error stack as one line, then cleared; a system call's failure that
/// HDF5's file driver reports (e.g. "No space left on device") leads it.
std::string H5ErrorText();

/// Closes HDF5 file `file`, open for writing, whose bytes will never be read (an uncommitted
/// writer's temporary, removed next): HDF5's close still flushes its metadata and truncates the
/// file to its end of allocation, and when that fails -- the disk that failed a write is full
/// or failing -- HDF5 1.10 leaves the file half-closed and crashes at exit or at the next
/// close. So the file's descriptor (sec2 driver) is first pointed at an anonymous in-memory
/// file (memfd; sparse, so the truncation costs nothing), where the flush cannot fail, and
/// flushed there once (which also recovers HDF5's cache from an earlier failed H5Fflush, after
/// which H5Fclose failed the same way). Then closed; falls back to a plain close where that
/// cannot be done. Like every HDF5 call, it must not run concurrently with other HDF5 calls
/// (hold LockH5 or H5Guard, io/h5_handle.h).
void AbandonH5File(int64_t file);

/// `v` as 16 lowercase hex digits (checksums in messages).
std::string Hex64(uint64_t v);

/// A new creation property list of class `cls` -- H5P_FILE_CREATE (for the root group),
/// H5P_GROUP_CREATE or H5P_DATASET_CREATE -- whose objects record no times: HDF5 otherwise
/// stamps each object header with the times it was made and changed, and two writes of the same
/// tensors would differ in those bytes. The caller closes it (H5Pclose); < 0 on failure.
int64_t UntimedCreationList(int64_t cls);

/// Reads scalar string attribute `name` of `obj`, fixed-length (NUL-padded or -terminated) or
/// variable-length (as version-1 files without fixed-length strings, docs/FORMAT.md 9, and
/// other tools write).
/// Errors name `where` and the attribute: missing-attribute, not a string (kCorrupt), HDF5's.
Result<std::string> ReadStringAttr(int64_t obj, const char* name, const std::string& where);

/// Reads integer attribute `name` of `obj` as uint64 words (a scalar or a 1-d array of at most
/// 1024). Errors name `where`: missing-attribute, not an integer (kCorrupt), HDF5's.
Result<std::vector<uint64_t>> ReadU64ArrayAttr(int64_t obj, const char* name,
                                               const std::string& where);

/// Whether HDF5 type `type` stores dtype `d` bit for bit as seedstore reads it (docs/FORMAT.md
/// 4.2 and the dtype-mismatch row of section 7: class, size, little-endian order, sign, full
/// precision at offset 0, a float's IEEE fields and bias): the check H5Store::Open makes.
bool H5TypeStores(int64_t type, DType d);

/// Holds the lock every HDF5 call of this process goes through (the serial library is not
/// reentrant; recursive) and silences HDF5's error printing in this thread. Calls that read a
/// store's chunks spread work over threads that take this lock too: do not make them holding it.
std::unique_lock<std::recursive_mutex> LockH5();

/// Whether a file starts with the HDF5 signature (at offset 0, 512, 1024, ...).
bool LooksLikeHdf5(const std::string& path);

}  // namespace seedstore
