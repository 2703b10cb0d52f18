// Opening any model source as a Catalog: a JSON spec file, or a seedstore store file.
#pragma once
#include <memory>
#include <string>

#include "store/catalog.h"

namespace seedstore {

/// Opens `path`: a spec (".json") or a seedstore HDF5 store. Errors name the file.
Result<std::unique_ptr<Catalog>> OpenCatalog(const std::string& path);

}  // namespace seedstore
