// HDF5 helpers shared by the io/ files that write seedstore files (internal to io/; io/dist_store.h
// includes it for RankFileName and ParseRankFileName).
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

/// Rank r's file name of a distributed save at `path` with save id `id` (defined in
/// io/dist_store.cc).
std::string RankFileName(const std::string& path, uint32_t id, int rank);

/// Whether `path` is named as a rank file is (RankFileName: "<P>.<8 hex>.rank<r>.h5", r in
/// decimal without leading zeros, at most 9 digits); then sets *save (P, in the same folder),
/// *id and *rank. Defined in io/dist_store.cc.
bool ParseRankFileName(const std::string& path, std::string* save, uint32_t* id, int* rank);

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
/// (in io/h5store.cc: hold H5Guard).
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
Result<std::vector<uint64_t>> ReadU64ArrayAttr(int64_t obj, const char* name, const std::string& where);

/// Whether HDF5 type `type` stores dtype `d` bit for bit as seedstore reads it (docs/FORMAT.md
/// 4.2 and the dtype-mismatch row of section 7: class, size, little-endian order, sign, full
/// precision at offset 0, a float's IEEE fields and bias): the check H5Store::Open makes.
bool H5TypeStores(int64_t type, DType d);

/// Holds the lock every HDF5 call of this process goes through (the serial library is not
/// reentrant; recursive) and silences HDF5's error printing in this thread. Calls that read a
/// store's chunks spread work over threads that take this lock too: do not make them holding it.
std::unique_lock<std::recursive_mutex> LockH5();

/// The root attribute that marks a distributed save's master (docs/FORMAT.md 10), and its value.
constexpr const char* kRoleAttr = "seedstore.role";
constexpr const char* kMasterRole = "distributed-master";
/// A distributed save's index (docs/FORMAT.md 10).
constexpr const char* kDistIndexPath = "/distributed/index";

/// Whether open HDF5 file `file` is a distributed save's master: its root attribute
/// seedstore.role is kMasterRole (or unreadable), or, for masters written before that
/// attribute, /distributed/index exists -- or HDF5 cannot tell whether /distributed exists
/// (damaged links). Such a file is never taken for an ordinary store holding only its lazy
/// tensors. Call holding LockH5().
bool FileIsDistributedMaster(int64_t file, const std::string& where);

}  // namespace seedstore
