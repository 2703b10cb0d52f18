#include "io/open.h"

namespace seedstore {

Result<std::unique_ptr<Catalog>> OpenCatalog(const std::string& path) {
  const bool json = path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0;
  if (json) {
    SEEDSTORE_ASSIGN_OR_RETURN(ModelSpec spec, ModelSpec::Load(path));
    SEEDSTORE_ASSIGN_OR_RETURN(std::unique_ptr<SpecCatalog> c, SpecCatalog::Create(spec, path));
    return std::unique_ptr<Catalog>(std::move(c));
  }
  return Unsupported("'" + path + "': not a spec file (.json); store files are not supported yet");
}

}  // namespace seedstore
