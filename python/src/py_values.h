// Python values <-> library types for the binding (seedstore._seedstore, seedstore_py.cc):
// library errors as Python exceptions, boxes, DLPack arrays, catalogs, parameter lists and
// tensor records.
#pragma once
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "io/dist_store.h"
#include "store/catalog.h"
#include "store/spec.h"

namespace seedstore::py {

namespace nb = nanobind;

// A failed Status on its way to Python; translated into the exception class of its code.
struct StatusError {
  Status status;
};

/// Raises `st` in Python as the exception class of its code (RegisterErrors).
[[noreturn]] void Throw(const Status& st);
/// Throw(st) unless it is ok.
void Check(const Status& st);
/// r's value, or Throw(r.status()).
template <class T>
T Take(Result<T> r) {
  if (!r.ok()) Throw(r.status());
  return std::move(r).value();
}

/// Defines seedstore.Error and its subclasses, one per Code (each with the CLI's `code` name and
/// `exit_code`), and translates StatusError into them.
void RegisterErrors(nb::module_& m);

/// A shape from Python ints; a negative dim is refused, naming `what` and the dim.
std::vector<uint64_t> ToShape(const std::vector<int64_t>& v, const std::string& what);

/// A box from Python: None (whole tensor); a Region; "0:2,:,5:9" (ParseBox); a sequence with
/// one entry per leading dim, each a slice with step 1 (Python bounds: negative counts from the
/// end, clipped) or a (start, stop) pair; dims not listed are whole. `flat` (begin, end)
/// instead gives a flat range. Errors name `what` and the dim.
Region ToRegion(nb::handle box, std::optional<std::pair<uint64_t, uint64_t>> flat,
                const std::vector<uint64_t>& shape, const std::string& what);

/// The shape an output array for region r must have: the box's extents, (end - begin,) for a
/// flat range, () for a scalar.
std::vector<uint64_t> LocalShapeOf(const Region& r);

// A caller's array, checked: element type, C-contiguity, and (for outputs) writability.
struct ArrayView {
  void* data = nullptr;
  bool on_device = false;  // CUDA device (or managed) memory
  int device_id = 0;
  DType dtype = DType::kF32;
  std::vector<uint64_t> shape;
};

/// `obj` as an ArrayView: a DLPack or buffer-protocol array of a seedstore element type,
/// C-contiguous, on the CPU or a CUDA device, writable when `writable`. Errors name `what`.
ArrayView ViewArray(nb::handle obj, bool writable, const std::string& what);

/// Refuses `v` unless it has `dtype` and `shape`, naming `what`.
void CheckMatches(const ArrayView& v, DType dtype, const std::vector<uint64_t>& shape,
                  const std::string& what);

/// A CUDA stream handle from Python (an int), or null.
void* StreamPtr(std::optional<uintptr_t> s);

// Catalog wrapper owning any library Catalog.
struct PyCatalog {
  std::shared_ptr<Catalog> c;

  size_t Index(const std::string& name) const {
    const int i = c->Find(name);
    if (i < 0) Throw(NotFound("source " + Quoted(c->origin()) + " has no tensor " + Quoted(name)));
    return static_cast<size_t>(i);
  }
};

using ParamList = std::vector<std::tuple<std::string, std::vector<int64_t>, nb::object>>;

/// (name, global shape, local shard array) triples as the library's ParamBuffers; the arrays
/// must stay alive while the buffers are used. `what` names the operation in errors.
std::vector<ParamBuffer> ToParamBuffers(const ParamList& params, const std::string& what);

/// A JSON value as the Python value json.loads makes of it.
nb::object JsonToPython(const nlohmann::json& j);

/// A tensor record as a dict: name, shape, dtype, lazy, init, generator, fingerprint, piece.
nb::dict TensorInfo(const TensorRecord& t);

}  // namespace seedstore::py
