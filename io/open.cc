#include "io/open.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "io/dist_store.h"
#include "io/h5store.h"
#include "io/interop.h"

namespace seedstore {

Result<std::unique_ptr<Catalog>> OpenCatalog(const std::string& path) {
  auto ends_with = [&path](const std::string& suffix) {
    return path.size() >= suffix.size() &&
           path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    return InvalidArgument("'" + path +
                           "' is a directory, not a model source (a spec .json, a "
                           "store, a distributed save, a .safetensors file or a "
                           "model.safetensors.index.json)");
  // A pipe or a terminal (`<(...)`, /dev/stdin) can only be a spec: read it once, as one. One
  // named as a safetensors file or a store is refused unread (a FIFO without a writer would
  // block the open).
  if (const std::string kind = NotARegularFile(path); !kind.empty() && !ends_with(".safetensors")) {
    if ((kind != "a pipe (FIFO)" && kind != "a character device") || ends_with(".h5"))
      return InvalidArgument(
          "'" + path + "' is " + kind +
          ": a store, distributed save or safetensors "
          "file is read by seeking; give a regular file (only a spec may come from a pipe)");
    auto spec = ModelSpec::Load(path);
    if (!spec.ok())
      return spec.status().WithContext("'" + path + "' is " + kind +
                                       ": of the model sources only a spec (JSON) "
                                       "can be read from one");
    SEEDSTORE_ASSIGN_OR_RETURN(std::unique_ptr<SpecCatalog> c, SpecCatalog::Create(*spec, path));
    return std::unique_ptr<Catalog>(std::move(c));
  }
  const bool json = ends_with(".json");
  if (json) {  // a spec or an index: one that cannot be read is named as neither
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return OpenFailure("file " + Quoted(path), errno);
    ::close(fd);
  }
  if (IsSafetensorsSource(path)) {  // a .safetensors file or a Hugging Face index
    SEEDSTORE_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsCatalog> c,
                               SafetensorsCatalog::Open(path));
    return std::unique_ptr<Catalog>(std::move(c));
  }
  if (json) {
    SEEDSTORE_ASSIGN_OR_RETURN(ModelSpec spec, ModelSpec::Load(path));
    SEEDSTORE_ASSIGN_OR_RETURN(std::unique_ptr<SpecCatalog> c, SpecCatalog::Create(spec, path));
    return std::unique_ptr<Catalog>(std::move(c));
  }
  if (IsDistributedSave(path)) {  // a distributed save's master (docs/FORMAT.md)
    SEEDSTORE_ASSIGN_OR_RETURN(std::unique_ptr<DistCatalog> d, DistCatalog::Open(path));
    return std::unique_ptr<Catalog>(std::move(d));
  }
  SEEDSTORE_ASSIGN_OR_RETURN(std::unique_ptr<H5Store> s, H5Store::Open(path));
  return std::unique_ptr<Catalog>(std::move(s));
}

}  // namespace seedstore
