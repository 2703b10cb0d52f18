// The files of a distributed save (docs/FORMAT.md 10) as names: rank r's file
// "<P>.<8 hex>.rank<r>.h5", the errors that name a save's files, and telling whether a path is a
// save's master. Below both the store (io/store_reader.h, io/store_rewrite.h) and the
// distributed save (io/dist_catalog.h, io/reshard.h): it depends on neither.
#pragma once
#include <cstdint>
#include <string>

#include "store/status.h"

namespace seedstore {

/// The root attribute that marks a distributed save's master (docs/FORMAT.md 10), and its value.
constexpr const char* kRoleAttr = "seedstore.role";
constexpr const char* kMasterRole = "distributed-master";
/// A distributed save's index (docs/FORMAT.md 10).
constexpr const char* kDistIndexPath = "/distributed/index";

/// Rank r's file name of a distributed save at `path` with save id `id`.
std::string RankFileName(const std::string& path, uint32_t id, int rank);

/// Whether `path` is named as a rank file is (RankFileName: "<P>.<8 hex>.rank<r>.h5", r in
/// decimal without leading zeros, at most 9 digits); then sets *save (P, in the same folder),
/// *id and *rank.
bool ParseRankFileName(const std::string& path, std::string* save, uint32_t* id, int* rank);

/// Whether open HDF5 file `file` is a distributed save's master: its root attribute
/// seedstore.role is kMasterRole (or unreadable), or, for masters written before that
/// attribute, /distributed/index exists -- or HDF5 cannot tell whether /distributed exists
/// (damaged links). Such a file is never taken for an ordinary store holding only its lazy
/// tensors. Call holding LockH5().
bool FileIsDistributedMaster(int64_t file, const std::string& where);

/// Whether `path` is an HDF5 file that is a distributed-save master: its root carries the
/// attribute seedstore.role = "distributed-master" (docs/FORMAT.md 10), or, for masters
/// written before that attribute, /distributed/index exists -- or HDF5 cannot tell whether
/// /distributed exists (damaged links): such a file is not taken for an ordinary store holding
/// only its lazy tensors, DistCatalog::Open names what is wrong with it. A file that starts
/// with a master's seal, intact or damaged (CheckMasterSeal, io/master_seal.h), is one without
/// HDF5 reading a byte of it.
bool IsDistributedSave(const std::string& path);

/// A named error of distributed save `path`: "<name>: distributed save '<path>'[ rank R file
/// '<file>']: <msg>" with `code` (rank < 0: no rank file named).
Status DistError(const char* name, Code code, const std::string& path, int rank,
                 const std::string& file, const std::string& msg);

/// Why rank file `f` of save `save` cannot be reached, or OK: rank-file-missing (NOT_FOUND)
/// when nothing is there or a symbolic link points nowhere, rank-file-unreadable (IO_ERROR) when
/// the path cannot be resolved (a symbolic link loop, a directory that may not be searched).
/// `reading` prefixes the message.
Status RankFileReachable(const std::string& save, int rank, const std::string& f,
                         const std::string& reading);

}  // namespace seedstore
