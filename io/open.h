// Opening any model source as a Catalog: a JSON spec, a seedstore store or distributed save,
// safetensors (a file or a Hugging Face index).
#pragma once
#include <memory>
#include <string>

#include "store/catalog.h"

namespace seedstore {

/// Opens `path`: a spec (".json"), a seedstore HDF5 store or distributed save, a
/// ".safetensors" file or a Hugging Face model.safetensors.index.json (read-only, dense).
/// Errors name the file; a directory is kInvalidArgument (the wrong kind of path).
Result<std::unique_ptr<Catalog>> OpenCatalog(const std::string& path);

}  // namespace seedstore
