// Rewriting a store in place: dense values replace named tensors (ReplaceWithDense), and the
// check that a file may be rewritten as a one-file store at all (not a distributed save's master
// or one of its rank files).
#pragma once
#include <functional>
#include <map>
#include <string>

#include "io/store_format.h"
#include "io/store_reader.h"

namespace seedstore {

/// Rewrites the store at `path` with the named tensors replaced by dense values from their
/// sources (typically trained values replacing lazy ones); every other tensor is copied as is,
/// and a piece (a rank file's tensor) stays the same piece. Atomic. `progress`, when set, gets
/// the bytes of each chunk written. Errors: kNotFound for a name the store lacks; a
/// distributed save's master or rank file is refused (kInvalidArgument, CheckRewritableAsStore:
/// rewriting the master as a store would drop its dense tensors, a rank file alone would break
/// the save); shapes come from the store's records.
Status ReplaceWithDense(const std::string& path, const std::map<std::string, BoxSource>& values,
                        WriteOptions options = {}, std::function<void(uint64_t)> progress = {});

/// The refusal ReplaceWithDense gives for a distributed save's master at `path`, for callers
/// that check before they read anything.
Status RewriteOfMasterRefused(const std::string& path);

/// Whether the store `store`, opened from `path`, may be rewritten in place as a one-file store
/// (ReplaceWithDense, import --update), checked before anything is written. kInvalidArgument
/// naming the file for a distributed save's master (RewriteOfMasterRefused) and for a rank file
/// of a save: named as one (ParseRankFileName) with its save's master next to it -- rewritten
/// alone, the file no longer matches the fingerprints the save's index records for its pieces,
/// and the save fails to verify and read; the message says to update the save instead. A file
/// so named without a master beside it is an ordinary store.
Status CheckRewritableAsStore(const H5Store& store, const std::string& path);

}  // namespace seedstore
