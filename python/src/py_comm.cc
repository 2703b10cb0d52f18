#include "python/src/py_comm.h"

#include <cstring>
#include <string>
#include <vector>

namespace seedstore::py {

// The store callables may refer back to the communicator (a store defined in a module that
// holds the communicator): the GC sees them through these slots and can break such cycles.
static int PyCommTraverse(PyObject* self, visitproc visit, void* arg) {
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
static int PyCommClear(PyObject* self) {
  PyComm* c = nb::inst_ptr<PyComm>(self);
  c->c.reset();
  c->fns.reset();
  return 0;
}
PyType_Slot kPyCommSlots[] = {{Py_tp_traverse, reinterpret_cast<void*>(PyCommTraverse)},
                              {Py_tp_clear, reinterpret_cast<void*>(PyCommClear)},
                              {0, nullptr}};

// A Python exception raised by a store callable, as a library status (kIo, its message).
static Status FromPython(const std::exception& e) { return IoError(e.what()); }

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

}  // namespace seedstore::py
