// The commit protocol of a distributed save (docs/FORMAT.md 10, "Writing"; internal to
// io/). Save `id` at `path` stages its master (or consolidated store) complete, sealed and
// durable as "<path>.<id>.new", hard-links it as the gate "<path>.<id>.commit", proves it, and
// rank 0 commits by renaming the gate over `path`. A rank that gives up first vetoes: it
// creates "<path>.<id>.veto" and removes the gate. Whichever comes first wins, and afterwards
// every rank can tell which did: committed iff `path` is the staged file (same inode).
#pragma once
#include <cstdint>
#include <string>

#include "io/atomic_file.h"
#include "io/collective.h"
#include "store/status.h"

namespace seedstore {

/// The commit protocol's files of save `id` at `path`: "<path>.<8 hex>.<kind>", kind "new" (the
/// staged master or store), "commit" (its gate) or "veto".
std::string ProtocolName(const std::string& path, uint32_t id, const char* kind);

/// Removes the pieces of every save at `path` but save `keep` (of all saves when keep < 0):
/// the files "<path>.<8 hex>.rank<r>.h5" in its folder -- the replaced save's, and those an
/// interrupted save left (a rank killed or hung mid-save) -- plus the stale temporaries of any
/// such piece (the rule of io/atomic_file.h: their writer is gone), and the commit-protocol
/// files of other saves (ProtocolName). Only the writer holding the lock calls it, after its
/// own commit is durable (CommitStaged), so no live save at `path` owns them.
/// A piece another distributed save's master in the folder names is kept: a master renamed
/// (`mv P Q`) keeps reading its rank files by their old names, and removing them lost Q.
void RemoveOtherPieces(const std::string& path, int64_t keep);

/// fsync of `path` (a file or, with `dir`, a folder): kIo naming it and the system's reason
/// when it cannot be opened or the fsync fails. The caller's rename or write has happened either
/// way (a failed fsync leaves nothing to undo), but it is not known to be durable: nothing that
/// relies on its durability may follow (RemoveOtherPieces after a commit).
Status SyncPath(const std::string& path, bool dir);

/// Rank 0's commit point: unless a rank has vetoed, renames the gate over `path` (inside a
/// signal_cleanup bracket, so that a signal cannot remove the staged file between the rename
/// and releasing `registered`), then makes the rename durable (fsync of the folder; the staged
/// file is durable already). *committed: the rename happened. *durable: the folder's fsync
/// after it succeeded (OK), or why not (kIo naming the folder): the commit happened but may not
/// survive a crash, so the previous save's files must be kept (the next save's collection
/// removes them). Test-only: SEEDSTORE_TEST_FAULT "0:sync-commit:fail" (TestFaultPoint) makes
/// that fsync fail as with EIO.
Status CommitStaged(const std::string& path, uint32_t id, signal_cleanup::Scope* registered,
                    bool* committed, Status* durable);

/// A rank that gives up (a timeout, an error) before it knows the outcome: forbids the commit
/// from now on -- the veto file makes rank 0's check fail, removing the gate makes its rename
/// fail -- and tells whether rank 0 committed before that (then `path` is made durable here
/// too). Final either way: after it, the outcome can no longer change.
bool VetoCommit(const std::string& path, uint32_t id);

/// Every rank learns whether any rank failed; the failing rank keeps its own message, the
/// others get kIo naming `what`.
Status Agree(Exchange& comm, const Status& mine, const char* what);

}  // namespace seedstore
