#include "python/src/py_values.h"

#include <cstring>

namespace seedstore::py {

// ---- Errors --------------------------------------------------------------------------------

static PyObject* g_error_classes[8] = {};  // by Code value; [0] is the base class seedstore.Error

[[noreturn]] void Throw(const Status& st) { throw StatusError{st}; }
void Check(const Status& st) {
  if (!st.ok()) Throw(st);
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

std::vector<uint64_t> LocalShapeOf(const Region& r) {
  if (r.flat) return {r.end - r.begin};
  std::vector<uint64_t> s;
  for (int d = 0; d < r.rank; ++d) s.push_back(r.stop[d] - r.start[d]);
  return s;
}

// DLPack element types <-> DType.
static std::optional<DType> FromDl(nb::dlpack::dtype t) {
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

static std::string DlName(nb::dlpack::dtype t) {
  static const char* kCodes[] = {"int", "uint", "float", "?", "bfloat", "complex", "bool"};
  const std::string c = t.code < 7 ? kCodes[t.code] : "code" + std::to_string(t.code);
  return c + std::to_string(t.bits) + (t.lanes != 1 ? "x" + std::to_string(t.lanes) : "");
}

constexpr int32_t kDlCpu = 1, kDlCuda = 2, kDlCudaHost = 3, kDlCudaManaged = 13;

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
  d["lazy"] = t.lazy != nullptr;
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

}  // namespace seedstore::py
