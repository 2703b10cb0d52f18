// Writing tensors of a catalog -- whole, or one rank's shards under a layout -- to safetensors.
#pragma once
#include <functional>
#include <string>

#include "io/device.h"
#include "store/catalog.h"
#include "store/layout.h"

namespace seedstore {

struct ExportOptions {
  std::string tensors_glob = "*";  // which tensors
  const Layout* layout = nullptr;  // null: whole tensors
  int rank = 0;                    // with a layout: whose shards
  CpuOptions cpu;
  Device device = Device::kCpu;  // resolved device that computes lazy tensors
  /// When set, called with each file the export is to write (the index last), once all are
  /// planned and before any is created; an error ends the export with nothing written (the
  /// command line refuses a file that is one of its inputs).
  std::function<Status(const std::string& file)> check_output;
};

/// Writes the selected tensors (or the rank's shards of them) to `path` atomically. With a
/// layout, empty shards are skipped and __metadata__["seedstore.shards"] maps each name to
/// {"global_shape": [...], "start": [...], "stop": [...]} or {"global_shape": [...],
/// "flat": [begin, end]}. A piece of a larger tensor in `c` (TensorRecord::piece: a rank's
/// file as the source) is written as it is, with its seedstore.shards entry, so a rank's file
/// stays one; with a layout a piece is refused (CheckWholeTensor). Returns the number of
/// tensors written. Errors name the tensor; a name CheckSafetensorsName refuses
/// ("__metadata__") fails before anything is written. (ExportSafetensorsFiles, io/interop.h,
/// with no size limit: defined with it in io/interop.cc.)
Result<int> ExportSafetensors(const Catalog& c, const std::string& path, const ExportOptions& o);

}  // namespace seedstore
