#include "io/save_buffers.h"

#include "io/commit_protocol.h"

namespace seedstore {

Result<ReshardReport> SaveBuffers(Exchange& comm, const std::vector<ParamBuffer>& params,
                                  const Layout& layout, const std::string& path,
                                  const DistSaveOptions& o) {
  if (layout.world_size() != comm.size())
    return InvalidArgument("save: the layout has " + std::to_string(layout.world_size()) +
                           " ranks but the job has " + std::to_string(comm.size()));
  if (o.consolidate) return InvalidArgument("save: buffers cannot be consolidated; reshard later");
  auto cat = BufferCatalog::Create(params, layout, comm.rank(), o);
  SEEDSTORE_RETURN_IF_ERROR(Agree(comm, cat.status(), "save: buffers"));
  return Reshard(comm, **cat, layout, path, o);
}

}  // namespace seedstore
