// seedstore._seedstore: the Python binding of the C++ library (store/, io/). Thin by design:
// every computation -- specs, layouts, catalogs, materializing, fingerprints, verification --
// is the library's; this file converts Python values (dicts as JSON text, DLPack arrays, boxes)
// into library types, releases the GIL around the work, and turns a Status into the exception
// of its code (seedstore.InvalidArgumentError, ... all subclasses of seedstore.Error, each with
// the CLI's code name and exit code).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "io/bootstrap.h"
#include "io/collective.h"
#include "io/device.h"
#include "io/dist_store.h"
#include "io/open.h"
#include "kernels/materialize.h"
#include "store/catalog.h"
#include "store/layout.h"
#include "store/spec.h"
#include "store/verify.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace seedstore {
namespace {

// ---- Errors --------------------------------------------------------------------------------

// A failed Status on its way to Python; translated into the exception class of its code.
struct StatusError {
  Status status;
};

PyObject* g_error_classes[8] = {};  // by Code value; [0] is the base class seedstore.Error

[[noreturn]] void Throw(const Status& st) { throw StatusError{st}; }
void Check(const Status& st) {
  if (!st.ok()) Throw(st);
}
template <class T>
T Take(Result<T> r) {
  if (!r.ok()) Throw(r.status());
  return std::move(r).value();
}

void RegisterErrors(nb::module_& m) {
  static const char* kNames[8] = {
      "Error",   "InvalidArgumentError", "NotFoundError", "CorruptError",
      "IoError", "UnsupportedError",     "MismatchError", "InternalError"};
  PyObject* base = PyErr_NewExceptionWithDoc(
      "seedstore.Error",
      "A seedstore library error. `code` is the CLI's code name (e.g. 'INVALID_ARGUMENT'), "
      "`exit_code` the CLI's exit status for it; the message names the field, file, tensor or "
      "chunk.",
      PyExc_RuntimeError, nullptr);
  g_error_classes[0] = base;
  m.attr("Error") = nb::handle(base);
  for (int c = 1; c < 8; ++c) {
    const std::string qual = std::string("seedstore.") + kNames[c];
    PyObject* cls = PyErr_NewException(qual.c_str(), base, nullptr);
    nb::handle h(cls);
    h.attr("code") = CodeName(static_cast<Code>(c));
    h.attr("exit_code") = c + 1;
    g_error_classes[c] = cls;
    m.attr(kNames[c]) = h;
  }
  nb::handle(base).attr("code") = "UNKNOWN";
  nb::handle(base).attr("exit_code") = 8;
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const StatusError& e) {
      const int c = static_cast<int>(e.status.code());
      PyObject* cls = g_error_classes[(c >= 1 && c <= 7) ? c : 7];
      PyErr_SetString(cls, e.status.ToString().c_str());
    }
  });
}

// ---- Python values -> library types --------------------------------------------------------

std::vector<uint64_t> ToShape(const std::vector<int64_t>& v, const std::string& what) {
  std::vector<uint64_t> s;
  for (size_t d = 0; d < v.size(); ++d) {
    if (v[d] < 0)
      Throw(InvalidArgument(what + ": dim " + std::to_string(d) + " is negative (" +
                            std::to_string(v[d]) + ")"));
    s.push_back(static_cast<uint64_t>(v[d]));
  }
  return s;
}

// A box from Python: None (whole tensor); a Region; "0:2,:,5:9" (ParseBox); a sequence with one
// entry per leading dim, each a slice with step 1 (Python bounds: negative counts from the
// end, clipped) or a (start, stop) pair; dims not listed are whole. `flat` (begin, end) instead
// gives a flat range. Errors name `what` and the dim.
Region ToRegion(nb::handle box, std::optional<std::pair<uint64_t, uint64_t>> flat,
                const std::vector<uint64_t>& shape, const std::string& what) {
  if (flat) {
    if (!box.is_none()) Throw(InvalidArgument(what + ": give either box or flat, not both"));
    uint64_t n = 1;
    for (uint64_t d : shape) n *= d;
    if (flat->first > flat->second || flat->second > n)
      Throw(InvalidArgument(what + ": flat range [" + std::to_string(flat->first) + ":" +
                            std::to_string(flat->second) + "] is outside the tensor's " +
                            std::to_string(n) + " elements"));
    return FlatRegion(shape, flat->first, flat->second);
  }
  if (box.is_none()) return WholeTensor(shape);
  if (nb::isinstance<Region>(box)) return nb::cast<Region>(box);
  if (nb::isinstance<nb::str>(box)) {
    Result<Region> r = ParseBox(nb::cast<std::string>(box), shape);
    if (!r.ok()) Throw(r.status().WithContext(what));
    return *r;
  }
  if (!nb::isinstance<nb::sequence>(box))
    Throw(InvalidArgument(what +
                          ": box must be None, a string 'a:b,...', a Region or a sequence of "
                          "slices or (start, stop) pairs, not " +
                          nb::cast<std::string>(nb::str(box.type()))));
  nb::sequence seq = nb::borrow<nb::sequence>(box);
  const size_t n = nb::len(seq);
  if (n > shape.size())
    Throw(InvalidArgument(what + ": box has " + std::to_string(n) + " dims, the tensor " +
                          std::to_string(shape.size()) + " (shape " + ShapeText(shape) + ")"));
  Region r = WholeTensor(shape);
  for (size_t d = 0; d < n; ++d) {
    nb::handle e = seq[d];
    const std::string dim = what + ": box dim " + std::to_string(d);
    if (PySlice_Check(e.ptr())) {
      Py_ssize_t start, stop, step;
      if (PySlice_Unpack(e.ptr(), &start, &stop, &step) < 0) throw nb::python_error();
      if (step != 1)
        Throw(InvalidArgument(dim + ": slice step must be 1, not " + std::to_string(step)));
      if (shape[d] > static_cast<uint64_t>(PY_SSIZE_T_MAX))
        Throw(InvalidArgument(dim + ": a dim this large takes (start, stop) pairs, not slices"));
      PySlice_AdjustIndices(static_cast<Py_ssize_t>(shape[d]), &start, &stop, step);
      r.start[d] = static_cast<uint64_t>(start);
      r.stop[d] = static_cast<uint64_t>(std::max(start, stop));
    } else if (nb::isinstance<nb::sequence>(e) && !nb::isinstance<nb::str>(e) && nb::len(e) == 2) {
      uint64_t a, b;
      if (!nb::try_cast(e[0], a) || !nb::try_cast(e[1], b))
        Throw(InvalidArgument(dim + ": (start, stop) must be two non-negative integers"));
      if (a > b || b > shape[d])
        Throw(InvalidArgument(dim + ": [" + std::to_string(a) + ":" + std::to_string(b) +
                              "] is outside [0:" + std::to_string(shape[d]) + "]"));
      r.start[d] = a;
      r.stop[d] = b;
    } else {
      Throw(InvalidArgument(dim + ": expected a slice or a (start, stop) pair, not " +
                            nb::cast<std::string>(nb::repr(e))));
    }
  }
  return r;
}

// The shape an output array for region r must have: the box's extents, (end - begin,) for a
// flat range, () for a scalar.
std::vector<uint64_t> LocalShapeOf(const Region& r) {
  if (r.flat) return {r.end - r.begin};
  std::vector<uint64_t> s;
  for (int d = 0; d < r.rank; ++d) s.push_back(r.stop[d] - r.start[d]);
  return s;
}

// DLPack element types <-> DType.
std::optional<DType> FromDl(nb::dlpack::dtype t) {
  using C = nb::dlpack::dtype_code;
  if (t.lanes != 1) return std::nullopt;
  const auto code = static_cast<C>(t.code);
  switch (code) {
    case C::Float:
      if (t.bits == 32) return DType::kF32;
      if (t.bits == 64) return DType::kF64;
      if (t.bits == 16) return DType::kF16;
      break;
    case C::Bfloat:
      if (t.bits == 16) return DType::kBF16;
      break;
    case C::UInt:
      if (t.bits == 8) return DType::kU8;
      if (t.bits == 16) return DType::kU16;
      if (t.bits == 32) return DType::kU32;
      if (t.bits == 64) return DType::kU64;
      break;
    case C::Int:
      if (t.bits == 8) return DType::kI8;
      if (t.bits == 16) return DType::kI16;
      if (t.bits == 32) return DType::kI32;
      if (t.bits == 64) return DType::kI64;
      break;
    case C::Bool:
      if (t.bits == 8) return DType::kBool;
      break;
    default:
      break;
  }
  return std::nullopt;
}

std::string DlName(nb::dlpack::dtype t) {
  static const char* kCodes[] = {"int", "uint", "float", "?", "bfloat", "complex", "bool"};
  const std::string c = t.code < 7 ? kCodes[t.code] : "code" + std::to_string(t.code);
  return c + std::to_string(t.bits) + (t.lanes != 1 ? "x" + std::to_string(t.lanes) : "");
}

constexpr int32_t kDlCpu = 1, kDlCuda = 2, kDlCudaHost = 3, kDlCudaManaged = 13;

// A caller's array, checked: element type, C-contiguity, and (for outputs) writability.
struct ArrayView {
  void* data = nullptr;
  bool on_device = false;  // CUDA device (or managed) memory
  int device_id = 0;
  DType dtype = DType::kF32;
  std::vector<uint64_t> shape;
};

ArrayView ViewArray(nb::handle obj, bool writable, const std::string& what) {
  nb::ndarray<> a;
  if (writable) {
    if (!nb::try_cast(obj, a, /*convert=*/false)) {
      nb::ndarray<nb::ro> ro;
      if (nb::try_cast(obj, ro, false))
        Throw(InvalidArgument(what + " is read-only: give a writable array"));
      Throw(InvalidArgument(what + " is not an array (DLPack or buffer protocol): " +
                            nb::cast<std::string>(nb::str(obj.type()))));
    }
  } else {
    nb::ndarray<nb::ro> ro;
    if (!nb::try_cast(obj, ro, false))
      Throw(InvalidArgument(what + " is not an array (DLPack or buffer protocol): " +
                            nb::cast<std::string>(nb::str(obj.type()))));
    a = nb::ndarray<>(ro.handle());
  }
  ArrayView v;
  const auto dt = FromDl(a.dtype());
  if (!dt)
    Throw(InvalidArgument(what + " has element type " + DlName(a.dtype()) +
                          ", which seedstore does not store"));
  v.dtype = *dt;
  const int32_t dev = a.device_type();
  if (dev == kDlCuda || dev == kDlCudaManaged) {
    v.on_device = true;
  } else if (dev != kDlCpu && dev != kDlCudaHost) {
    Throw(InvalidArgument(what + " lives on DLPack device type " + std::to_string(dev) +
                          ": seedstore takes CPU and CUDA arrays"));
  }
  v.device_id = a.device_id();
  int64_t expect = 1;
  bool empty = false;
  for (size_t d = 0; d < a.ndim(); ++d) empty = empty || a.shape(d) == 0;
  for (size_t d = a.ndim(); d-- > 0 && !empty;) {
    const int64_t ext = a.shape(d);
    if (ext > 1 && a.stride(d) != expect)
      Throw(InvalidArgument(what + " is not C-contiguous (dim " + std::to_string(d) +
                            " has stride " + std::to_string(a.stride(d)) + ", row-major needs " +
                            std::to_string(expect) + "): give a contiguous array"));
    expect *= ext;
  }
  for (size_t d = 0; d < a.ndim(); ++d) v.shape.push_back(static_cast<uint64_t>(a.shape(d)));
  v.data = a.data();
  return v;
}

void CheckMatches(const ArrayView& v, DType dtype, const std::vector<uint64_t>& shape,
                  const std::string& what) {
  if (v.dtype != dtype)
    Throw(InvalidArgument(what + " has dtype " + DTypeName(v.dtype) + ", the tensor is " +
                          DTypeName(dtype)));
  if (v.shape != shape)
    Throw(InvalidArgument(what + " has shape " + ShapeText(v.shape) + ", the region needs " +
                          ShapeText(shape)));
}

void* StreamPtr(std::optional<uintptr_t> s) { return s ? reinterpret_cast<void*>(*s) : nullptr; }

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

// (name, global shape, local shard array) triples as the library's ParamBuffers; the arrays
// must stay alive while the buffers are used. `what` names the operation in errors.
std::vector<ParamBuffer> ToParamBuffers(const ParamList& params, const std::string& what) {
  std::vector<ParamBuffer> bufs;
  for (const auto& [name, shape, array] : params) {
    const std::string w = what + " " + Quoted(name) + ": local shard";
    ArrayView v = ViewArray(array, /*writable=*/false, w);
    ParamBuffer p;
    p.name = name;
    p.shape = ToShape(shape, w + " global shape");
    p.dtype = v.dtype;
    p.data = v.data;
    uint64_t n = 1;
    for (uint64_t x : v.shape) n *= x;
    p.bytes = n * DTypeSize(v.dtype);
    p.on_device = v.on_device;
    bufs.push_back(std::move(p));
  }
  return bufs;
}

nb::object JsonToPython(const nlohmann::json& j) {
  return nb::module_::import_("json").attr("loads")(j.dump());
}

nb::dict TensorInfo(const TensorRecord& t) {
  nb::dict d;
  d["name"] = t.name;
  nb::list shape;
  for (uint64_t s : t.shape) shape.append(s);
  d["shape"] = nb::tuple(shape);
  d["dtype"] = DTypeName(t.dtype);
  d["lazy"] = t.lazy.has_value();
  if (t.lazy) {
    d["init"] = JsonToPython(t.lazy->spec.init.ToJson());
    d["generator"] = GeneratorName(t.lazy->spec.generator);
  } else {
    d["init"] = nb::none();
    d["generator"] = nb::none();
  }
  d["fingerprint"] = t.fingerprint ? nb::cast(FingerprintHex(*t.fingerprint)) : nb::none();
  d["piece"] = t.piece ? nb::cast(*t.piece) : nb::none();
  return d;
}

// torch.distributed (or any Python object with rank(), size(), all_gather(bytes) -> bytes of
// size() * len, barrier()) as the library's Exchange. The sum all-reduce is an all-gather and a
// sum here, mod 2^64, so that no backend's signed-integer overflow is involved.
class PyExchange : public Exchange {
 public:
  explicit PyExchange(nb::object o) : o_(std::move(o)) {
    nb::gil_scoped_acquire g;
    rank_ = nb::cast<int>(o_.attr("rank")());
    size_ = nb::cast<int>(o_.attr("size")());
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Status AllGather(const void* send, size_t bytes, void* recv, const char* what) override {
    nb::gil_scoped_acquire g;
    try {
      nb::bytes in(static_cast<const char*>(send), bytes);
      nb::object out = o_.attr("all_gather")(in);
      nb::bytes b = nb::cast<nb::bytes>(out);
      if (b.size() != bytes * static_cast<size_t>(size_))
        return IoError(std::string(what) + ": all_gather returned " + std::to_string(b.size()) +
                       " bytes, expected " + std::to_string(bytes * size_));
      std::memcpy(recv, b.c_str(), b.size());
      return Status::Ok();
    } catch (const std::exception& e) {
      return IoError(std::string(what) + ": " + e.what());
    }
  }
  Status AllReduceSum(uint64_t* data, size_t n, const char* what) override {
    std::vector<uint64_t> all(n * size_);
    SEEDSTORE_RETURN_IF_ERROR(AllGather(data, n * 8, all.data(), what));
    for (size_t i = 0; i < n; ++i) {
      uint64_t s = 0;
      for (int r = 0; r < size_; ++r) s += all[r * n + i];
      data[i] = s;
    }
    return Status::Ok();
  }
  Status Barrier(const char* what) override {
    nb::gil_scoped_acquire g;
    try {
      o_.attr("barrier")();
      return Status::Ok();
    } catch (const std::exception& e) {
      return IoError(std::string(what) + ": " + e.what());
    }
  }

 private:
  nb::object o_;
  int rank_ = 0, size_ = 1;
};

// A communicator of the library (io/collective.h) made by seedstore.init_distributed: the
// "store" backend, or NCCL bootstrapped over it, on a key-value store reached through Python
// callables (seedstore/distributed.py adapts torch.distributed stores to them).
struct PyStoreFns;
struct PyComm {
  std::unique_ptr<Collective> c;
  int device = -1;                  // the CUDA device of an NCCL communicator
  std::shared_ptr<PyStoreFns> fns;  // the store callables c's bootstrap calls (for the GC)

  Collective& get() const {
    if (!c) Throw(InvalidArgument("the communicator is closed"));
    return *c;
  }
};

// The Python callables behind a Bootstrap. Released with the GIL held, wherever the last
// reference goes (the library may drop its bootstrap while the GIL is released).
struct PyStoreFns {
  nb::object put, get, has;
  ~PyStoreFns() {
    nb::gil_scoped_acquire g;
    put = nb::object();
    get = nb::object();
    has = nb::object();
  }
};

// The store callables may refer back to the communicator (a store defined in a module that
// holds the communicator): the GC sees them through these slots and can break such cycles.
int PyCommTraverse(PyObject* self, visitproc visit, void* arg) {
  Py_VISIT(Py_TYPE(self));
  if (!nb::inst_ready(self)) return 0;
  PyComm* c = nb::inst_ptr<PyComm>(self);
  if (c->fns) {
    Py_VISIT(c->fns->put.ptr());
    Py_VISIT(c->fns->get.ptr());
    Py_VISIT(c->fns->has.ptr());
  }
  return 0;
}
int PyCommClear(PyObject* self) {
  PyComm* c = nb::inst_ptr<PyComm>(self);
  c->c.reset();
  c->fns.reset();
  return 0;
}
PyType_Slot kPyCommSlots[] = {{Py_tp_traverse, reinterpret_cast<void*>(PyCommTraverse)},
                              {Py_tp_clear, reinterpret_cast<void*>(PyCommClear)},
                              {0, nullptr}};

// A Python exception raised by a store callable, as a library status (kIo, its message).
Status FromPython(const std::exception& e) { return IoError(e.what()); }

BootstrapCallbacks StoreCallbacks(std::shared_ptr<PyStoreFns> fns) {
  BootstrapCallbacks cb;
  cb.put = [fns](const std::string& key, std::string_view bytes) -> Status {
    nb::gil_scoped_acquire g;
    try {
      fns->put(key, nb::bytes(bytes.data(), bytes.size()));
      return Status::Ok();
    } catch (const std::exception& e) {
      return FromPython(e);
    }
  };
  cb.get = [fns](const std::string& key, double timeout_s) -> Result<std::optional<std::string>> {
    nb::gil_scoped_acquire g;
    try {
      nb::object v = fns->get(key, timeout_s);
      if (v.is_none()) return std::optional<std::string>();
      nb::bytes b = nb::cast<nb::bytes>(v);
      return std::optional<std::string>(std::string(b.c_str(), b.size()));
    } catch (const std::exception& e) {
      return FromPython(e);
    }
  };
  if (!fns->has.is_none())
    cb.has = [fns](const std::string& key) -> bool {
      nb::gil_scoped_acquire g;
      try {
        return nb::cast<bool>(fns->has(key));
      } catch (const std::exception&) {
        return false;
      }
    };
  return cb;
}

// The Exchange a verification or save runs over: a communicator, or any Python object with
// rank(), size(), all_gather(bytes), barrier() (PyExchange).
struct ExchangeArg {
  std::optional<PyExchange> py;
  Exchange* ex = nullptr;
  explicit ExchangeArg(nb::object o) {
    if (nb::isinstance<PyComm>(o)) {
      ex = &nb::cast<PyComm&>(o).get();
    } else {
      py.emplace(o);
      ex = &*py;
    }
  }
};

}  // namespace
}  // namespace seedstore

using namespace seedstore;

NB_MODULE(_seedstore, m) {
  m.doc() = "seedstore's C++ library (store/, io/) bound for Python; use the seedstore package.";
  RegisterErrors(m);
  m.attr("cuda_built") = CudaBuilt();
  m.def("cuda_available", [] {
    std::string why;
    const bool ok = CudaAvailable(&why);
    return std::make_pair(ok, why);
  });

  // numpy cannot export ml_dtypes' bfloat16 through DLPack: the package exports the array's
  // uint16 view and retags the capsule's element type (same memory, same flags).
  m.def("_retag_bf16", [](nb::object capsule) {
    struct Managed {
      nb::dlpack::dltensor t;
      void* ctx;
      void (*deleter)(void*);
    };
    struct ManagedVersioned {
      uint32_t major, minor;
      void* ctx;
      void (*deleter)(void*);
      uint64_t flags;
      nb::dlpack::dltensor t;
    };
    const char* name = PyCapsule_GetName(capsule.ptr());
    if (name == nullptr) throw nb::python_error();
    void* p = PyCapsule_GetPointer(capsule.ptr(), name);
    if (p == nullptr) throw nb::python_error();
    nb::dlpack::dtype* dt = nullptr;
    if (std::string(name) == "dltensor") dt = &static_cast<Managed*>(p)->t.dtype;
    else if (std::string(name) == "dltensor_versioned")
      dt = &static_cast<ManagedVersioned*>(p)->t.dtype;
    else Throw(InvalidArgument("not a DLPack capsule: '" + std::string(name) + "'"));
    if (dt->code != static_cast<uint8_t>(nb::dlpack::dtype_code::UInt) || dt->bits != 16 ||
        dt->lanes != 1)
      Throw(InvalidArgument("bfloat16 view: expected a uint16 DLPack tensor"));
    dt->code = static_cast<uint8_t>(nb::dlpack::dtype_code::Bfloat);
    return capsule;
  });

  nb::class_<Fingerprint>(
      m, "Fingerprint",
      "A 128-bit layout-independent fingerprint (docs/FORMAT.md): two u64 lanes; "
      "fingerprints of disjoint pieces add up to their union's.")
      .def(nb::init<>())
      .def(
          "__init__",
          [](Fingerprint* f, uint64_t a, uint64_t b) {
            new (f) Fingerprint{a, b};
          },
          "lane0"_a, "lane1"_a)
      .def_rw("lane0", &Fingerprint::lane0)
      .def_rw("lane1", &Fingerprint::lane1)
      .def_prop_ro("hex", [](const Fingerprint& f) { return FingerprintHex(f); })
      .def_static("from_hex", [](const std::string& s) { return Take(ParseFingerprintHex(s)); })
      .def("__add__",
           [](Fingerprint a, const Fingerprint& b) {
             a.Add(b);
             return a;
           })
      .def("__sub__",
           [](Fingerprint a, const Fingerprint& b) {
             a.Sub(b);
             return a;
           })
      .def("__eq__", [](const Fingerprint& a, const Fingerprint& b) { return a == b; })
      .def("__ne__", [](const Fingerprint& a, const Fingerprint& b) { return a != b; })
      .def("__hash__",
           [](const Fingerprint& f) { return static_cast<Py_hash_t>(f.lane0 ^ (f.lane1 * 31)); })
      .def("__repr__",
           [](const Fingerprint& f) { return "Fingerprint('" + FingerprintHex(f) + "')"; })
      .def("__str__", [](const Fingerprint& f) { return FingerprintHex(f); });

  nb::class_<Region>(m, "Region",
                     "A region of a tensor: an N-d box [start, stop) or a flat range [begin, end).")
      .def_static(
          "box",
          [](const std::vector<int64_t>& shape, const std::vector<int64_t>& start,
             const std::vector<int64_t>& stop) {
            const auto s = ToShape(shape, "Region.box shape");
            if (start.size() != s.size() || stop.size() != s.size())
              Throw(InvalidArgument("Region.box: start, stop and shape need one entry per dim"));
            nb::list l;
            for (size_t d = 0; d < s.size(); ++d) l.append(nb::make_tuple(start[d], stop[d]));
            return ToRegion(l, std::nullopt, s, "Region.box");
          },
          "shape"_a, "start"_a, "stop"_a)
      .def_static(
          "flat_range",
          [](const std::vector<int64_t>& shape, uint64_t b, uint64_t e) {
            return ToRegion(nb::none(), std::make_pair(b, e),
                            ToShape(shape, "Region.flat_range shape"), "Region.flat_range");
          },
          "shape"_a, "begin"_a, "end"_a)
      .def_prop_ro("shape",
                   [](const Region& r) { return std::vector<uint64_t>(r.shape, r.shape + r.rank); })
      .def_prop_ro("start",
                   [](const Region& r) { return std::vector<uint64_t>(r.start, r.start + r.rank); })
      .def_prop_ro("stop",
                   [](const Region& r) { return std::vector<uint64_t>(r.stop, r.stop + r.rank); })
      .def_ro("flat", &Region::flat)
      .def_ro("begin", &Region::begin)
      .def_ro("end", &Region::end)
      .def_prop_ro("count", &Region::Count)
      .def_prop_ro(
          "local_shape", [](const Region& r) { return LocalShapeOf(r); },
          "The shape of an array holding the region: the box's extents, (end - begin,) for a flat "
          "range.")
      .def("__eq__", [](const Region& a, const Region& b) { return SameRegion(a, b); })
      .def("__repr__", [](const Region& r) {
        return "Region(" + DescribeRegion(r) + " of " +
               ShapeText(std::vector<uint64_t>(r.shape, r.shape + r.rank)) + ")";
      });

  nb::class_<Shard>(m, "Shard", "The region a rank holds and the ranks holding the same region.")
      .def_ro("region", &Shard::region)
      .def_ro("replicas", &Shard::replicas)
      .def_ro("replica_index", &Shard::replica_index)
      .def_prop_ro("empty", &Shard::empty);

  nb::class_<ModelSpec>(m, "_Spec")
      .def_static("parse",
                  [](const std::string& text, const std::string& origin) {
                    return Take(ModelSpec::Parse(text, origin));
                  })
      .def_static("load", [](const std::string& path) { return Take(ModelSpec::Load(path)); })
      .def("to_json", [](const ModelSpec& s) { return s.ToJson().dump(); })
      .def_prop_ro("names", [](const ModelSpec& s) {
        std::vector<std::string> n;
        for (const auto& t : s.tensors) n.push_back(t.name);
        return n;
      });

  nb::class_<Layout>(m, "_Layout")
      .def_static("parse",
                  [](const std::string& text, const std::string& origin) {
                    return Take(Layout::Parse(text, origin));
                  })
      .def_static("load", [](const std::string& path) { return Take(Layout::Load(path)); })
      .def_static("replicated",
                  [](int w) {
                    if (w < 1) Throw(InvalidArgument("Layout.replicated: world must be >= 1"));
                    return Layout::Replicated(w);
                  })
      .def_static("fsdp",
                  [](int w) {
                    if (w < 1) Throw(InvalidArgument("Layout.fsdp: world must be >= 1"));
                    return Layout::Fsdp(w);
                  })
      .def_static("hsdp",
                  [](int r, int s) {
                    if (r < 1 || s < 1)
                      Throw(InvalidArgument("Layout.hsdp: replicate and shard must be >= 1"));
                    return Layout::Hsdp(r, s);
                  })
      .def("to_json", [](const Layout& l) { return l.ToJson().dump(); })
      .def_prop_ro("world_size", &Layout::world_size)
      .def(
          "shard",
          [](const Layout& l, const std::string& name, const std::vector<int64_t>& shape,
             int rank) {
            return Take(l.ShardOf(name, ToShape(shape, "tensor " + Quoted(name) + " shape"), rank));
          },
          "name"_a, "shape"_a, "rank"_a)
      .def(
          "distinct_shards",
          [](const Layout& l, const std::string& name, const std::vector<int64_t>& shape) {
            return Take(
                l.DistinctShards(name, ToShape(shape, "tensor " + Quoted(name) + " shape")));
          },
          "name"_a, "shape"_a);

  nb::class_<PyCatalog>(m, "_Catalog")
      .def_static("open",
                  [](const std::string& path) {
                    std::unique_ptr<Catalog> c;
                    {
                      nb::gil_scoped_release r;
                      auto res = OpenCatalog(path);
                      if (!res.ok()) {
                        nb::gil_scoped_acquire g;
                        Throw(res.status());
                      }
                      c = std::move(res).value();
                    }
                    return PyCatalog{std::shared_ptr<Catalog>(std::move(c))};
                  })
      .def_static(
          "from_spec",
          [](const ModelSpec& s, const std::string& origin) {
            return PyCatalog{std::shared_ptr<Catalog>(Take(SpecCatalog::Create(s, origin)))};
          })
      .def_prop_ro("origin", [](const PyCatalog& c) { return c.c->origin(); })
      .def("tensors",
           [](const PyCatalog& c) {
             nb::list l;
             for (const auto& t : c.c->tensors()) l.append(TensorInfo(t));
             return l;
           })
      .def(
          "region",
          [](const PyCatalog& c, const std::string& name, nb::handle box,
             std::optional<std::pair<uint64_t, uint64_t>> flat) {
            const TensorRecord& t = c.c->tensors()[c.Index(name)];
            Region r = ToRegion(box, flat, t.shape, "tensor " + Quoted(name));
            Check(CheckRegionIn(t, r));
            return r;
          },
          "name"_a, "box"_a.none(), "flat"_a.none())
      .def(
          "materialize",
          [](const PyCatalog& c, const std::string& name, nb::handle out, const Region& r,
             int threads, std::optional<uintptr_t> stream) {
            const size_t i = c.Index(name);
            const TensorRecord& t = c.c->tensors()[i];
            Check(CheckRegionIn(t, r));
            const std::string what = "materialize " + Quoted(name) + ": out";
            ArrayView v = ViewArray(out, /*writable=*/true, what);
            CheckMatches(v, t.dtype, LocalShapeOf(r), what);
            Status st;
            {
              nb::gil_scoped_release rel;
              if (v.on_device) {
                st = FromKernel(CudaUseDevice(v.device_id));
                if (st.ok())
                  st = ReadIntoDevice(*c.c, i, r, v.data, StreamPtr(stream), CpuOptions{threads});
              } else {
                st = c.c->Read(i, r, v.data, CpuOptions{threads});
              }
            }
            Check(st);
          },
          "name"_a, "out"_a, "region"_a, "threads"_a = 0, "stream"_a.none() = nb::none())
      // bench/py_bench.py's reference: Catalog::Read of region r into a buffer the C++ side
      // owns (allocated and touched first), `reps` times; the seconds of each.
      .def(
          "_time_read",
          [](const PyCatalog& c, const std::string& name, const Region& r, int threads, int reps) {
            const size_t i = c.Index(name);
            Check(CheckRegionIn(c.c->tensors()[i], r));
            std::vector<unsigned char> buf(r.Count() * DTypeSize(c.c->tensors()[i].dtype), 1);
            std::vector<double> secs;
            nb::gil_scoped_release rel;
            for (int k = 0; k < reps; ++k) {
              const auto t0 = std::chrono::steady_clock::now();
              const Status st = c.c->Read(i, r, buf.data(), CpuOptions{threads});
              secs.push_back(
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
              if (!st.ok()) {
                nb::gil_scoped_acquire g;
                Throw(st);
              }
            }
            return secs;
          },
          "name"_a, "region"_a, "threads"_a = 0, "reps"_a = 1)
      .def(
          "fingerprint",
          [](const PyCatalog& c, const std::string& name, const Region& r, int threads) {
            const size_t i = c.Index(name);
            Check(CheckRegionIn(c.c->tensors()[i], r));
            Result<Fingerprint> f = Fingerprint{};
            {
              nb::gil_scoped_release rel;
              f = c.c->FingerprintRegion(i, r, CpuOptions{threads});
            }
            return Take(std::move(f));
          },
          "name"_a, "region"_a, "threads"_a = 0)
      .def(
          "fingerprint_array",
          [](const PyCatalog& c, nb::handle array, const std::string& name, const Region& r,
             int threads, std::optional<uintptr_t> stream) {
            const TensorRecord& t = c.c->tensors()[c.Index(name)];
            Check(CheckRegionIn(t, r));
            const std::string what = "fingerprint " + Quoted(name) + ": array";
            ArrayView v = ViewArray(array, /*writable=*/false, what);
            CheckMatches(v, t.dtype, LocalShapeOf(r), what);
            nb::gil_scoped_release rel;
            if (v.on_device) {
              Status st = FromKernel(CudaUseDevice(v.device_id));
              if (!st.ok()) {
                nb::gil_scoped_acquire g;
                Throw(st);
              }
              auto f = FingerprintDeviceBuffer(t, r, v.data, StreamPtr(stream));
              nb::gil_scoped_acquire g;
              return Take(std::move(f));
            }
            return FingerprintOf(t, r, v.data, CpuOptions{threads});
          },
          "array"_a, "name"_a, "region"_a, "threads"_a = 0, "stream"_a.none() = nb::none());

  m.def(
      "fingerprint_array",
      [](nb::handle array, const std::string& name, std::optional<std::vector<int64_t>> shape,
         nb::handle box, std::optional<std::pair<uint64_t, uint64_t>> flat, int threads,
         std::optional<uintptr_t> stream) {
        const std::string what = "fingerprint " + Quoted(name) + ": array";
        ArrayView v = ViewArray(array, /*writable=*/false, what);
        TensorRecord t;
        t.name = name;
        t.dtype = v.dtype;
        t.shape = shape ? ToShape(*shape, what + " global shape") : v.shape;
        Check(ValidateShape(t.shape, t.dtype, "tensor " + Quoted(name)));
        const Region r = ToRegion(box, flat, t.shape, "tensor " + Quoted(name));
        Check(CheckRegionIn(t, r));
        CheckMatches(v, t.dtype, LocalShapeOf(r), what);
        nb::gil_scoped_release rel;
        if (v.on_device) {
          Status st = FromKernel(CudaUseDevice(v.device_id));
          auto f = st.ok() ? FingerprintDeviceBuffer(t, r, v.data, StreamPtr(stream))
                           : Result<Fingerprint>(st);
          nb::gil_scoped_acquire g;
          return Take(std::move(f));
        }
        return FingerprintOf(t, r, v.data, CpuOptions{threads});
      },
      "array"_a, "name"_a, "shape"_a.none(), "box"_a.none(), "flat"_a.none(), "threads"_a = 0,
      "stream"_a.none() = nb::none());

  nb::class_<VerifyReport>(m, "_VerifyReport")
      .def_prop_ro("ok", &VerifyReport::ok)
      .def_ro("world", &VerifyReport::world)
      .def_ro("bytes_exchanged", &VerifyReport::bytes_exchanged)
      .def("table", &VerifyReport::Table, "problems_only"_a = false)
      .def(
          "to_json",
          [](const VerifyReport& r, bool problems_only) { return r.ToJson(problems_only).dump(); },
          "problems_only"_a = false)
      .def("raise_if_failed", [](const VerifyReport& r) { Check(r.ToStatus()); });

  // hosted[j]: the local shards of layout rank exchange.rank() * len(hosted) + j, each a
  // (name, global shape, array); one entry per process under torch.distributed, one per local
  // device under JAX (io/collective.h VerifyHostedBuffers). `reference` (a catalog or None)
  // gives expected fingerprints (store/verify.h).
  m.def(
      "verify_buffers",
      [](nb::object exchange, const std::vector<ParamList>& hosted, const Layout& layout,
         std::optional<PyCatalog> reference, int threads) {
        std::vector<std::vector<ParamBuffer>> bufs;
        for (const ParamList& params : hosted) bufs.push_back(ToParamBuffers(params, "verify"));
        ExchangeArg ex(exchange);
        VerifyOptions o;
        o.cpu.threads = threads;
        Result<VerifyReport> rep = VerifyReport{};
        {
          nb::gil_scoped_release rel;
          rep = VerifyHostedBuffers(*ex.ex, bufs, layout, reference ? reference->c.get() : nullptr,
                                    o);
        }
        return Take(std::move(rep));
      },
      "exchange"_a, "hosted"_a, "layout"_a, "reference"_a.none(), "threads"_a = 0);

  // The live-job save (io/dist_store.h SaveBuffers): every rank its shards, host memory, one
  // distributed save at `path`, proven. Returns the proof's table; a failed proof raises.
  m.def(
      "save_buffers",
      [](nb::object exchange, const ParamList& params, const Layout& layout,
         const std::string& path, int threads, const std::vector<std::string>& uncompressed) {
        const std::vector<ParamBuffer> bufs = ToParamBuffers(params, "save");
        for (const ParamBuffer& p : bufs)
          if (p.on_device)
            Throw(Unsupported("save " + Quoted(p.name) +
                              ": the local shard is in CUDA memory; "
                              "the save reads host memory (move the state dict to the CPU)"));
        ExchangeArg ex(exchange);
        DistSaveOptions o;
        o.cpu.threads = threads;
        o.write.uncompressed = uncompressed;
        Result<ReshardReport> rep = ReshardReport{};
        {
          nb::gil_scoped_release rel;
          rep = SaveBuffers(*ex.ex, bufs, layout, path, o);
        }
        ReshardReport r = Take(std::move(rep));
        Check(r.ToStatus());
        return r.Table();
      },
      "exchange"_a, "params"_a, "layout"_a, "path"_a, "threads"_a = 0,
      "uncompressed"_a = std::vector<std::string>{});

  m.attr("nccl_built") = NcclBuilt();
  m.def("nccl_version", &NcclVersionString);

  nb::class_<PyComm>(m, "_Communicator",
                     "A communicator of the library (io/collective.h): the store backend, or NCCL "
                     "bootstrapped over a store. Made by seedstore.init_distributed.",
                     nb::type_slots(kPyCommSlots))
      .def_prop_ro("rank", [](const PyComm& c) { return c.get().rank(); })
      .def_prop_ro("size", [](const PyComm& c) { return c.get().size(); })
      .def_prop_ro("backend", [](const PyComm& c) { return std::string(c.get().backend()); })
      .def_prop_ro("device", [](const PyComm& c) { return c.device; })
      .def_prop_ro("broken", [](const PyComm& c) { return c.get().broken(); })
      .def_prop_ro("comm_seconds", [](const PyComm& c) { return c.get().comm_seconds(); })
      .def_prop_rw(
          "timeout", [](const PyComm& c) { return c.get().timeout(); },
          [](PyComm& c, double s) { c.get().set_timeout(s); })
      .def(
          "all_gather",
          [](PyComm& c, nb::bytes data, const std::string& what) {
            Collective& k = c.get();
            const size_t n = data.size();
            const std::string in(data.c_str(), n);
            std::string out(n * static_cast<size_t>(k.size()), '\0');
            Status st;
            {
              nb::gil_scoped_release rel;
              st = k.AllGather(in.data(), n, out.data(), what.c_str());
            }
            Check(st);
            return nb::bytes(out.data(), out.size());
          },
          "data"_a, "what"_a = "all_gather")
      .def(
          "barrier",
          [](PyComm& c, const std::string& what) {
            Collective& k = c.get();
            Status st;
            {
              nb::gil_scoped_release rel;
              st = k.Barrier(what.c_str());
            }
            Check(st);
          },
          "what"_a = "barrier")
      .def("close", [](PyComm& c) {
        std::unique_ptr<Collective> k = std::move(c.c);
        {
          nb::gil_scoped_release
              rel;  // NCCL's teardown may wait; the store callables re-take the GIL
          k.reset();
        }
        c.fns.reset();
      });

  // rank `rank` of `size` over the store reached through put(key, bytes), get(key, timeout_s)
  // -> bytes or None (not there within the timeout) and has(key) -> bool (or None), keys
  // prefixed with `prefix`; backend "store" or "nccl" (on CUDA device `device`, -1: the
  // node-local one). Blocks until every rank has arrived (io/collective.h
  // CreateBootstrapCollective).
  m.def(
      "_store_communicator",
      [](int rank, int size, const std::string& prefix, nb::object put, nb::object get,
         nb::object has, const std::string& backend, int device, double timeout) {
        if (backend != "store" && backend != "nccl")
          Throw(InvalidArgument("backend '" + backend + "': expected store or nccl"));
        auto fns = std::make_shared<PyStoreFns>();
        fns->put = std::move(put);
        fns->get = std::move(get);
        fns->has = std::move(has);
        std::unique_ptr<Bootstrap> b =
            Take(CreateCallbackBootstrap(rank, size, prefix, StoreCallbacks(fns)));
        const CollectiveOptions o{timeout};
        Result<std::unique_ptr<Collective>> c = std::unique_ptr<Collective>();
        {
          nb::gil_scoped_release rel;
          c = CreateBootstrapCollective(std::move(b), o);
          if (c.ok() && backend == "nccl")
            c = CreateNcclCollective(std::move(c).value(), o, device);
        }
        PyComm out;
        out.c = Take(std::move(c));
        out.fns = std::move(fns);
        if (backend == "nccl") out.device = device;
        return out;
      },
      "rank"_a, "size"_a, "prefix"_a, "put"_a, "get"_a, "has"_a.none(), "backend"_a, "device"_a,
      "timeout"_a);
}
