// Communicators for the binding (seedstore._seedstore, seedstore_py.cc): torch.distributed or
// any Python object with rank(), size(), all_gather(bytes), barrier() as the library's
// Exchange, and the library's own communicator over a key-value store reached through Python
// callables.
#pragma once
#include <nanobind/nanobind.h>

#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "io/bootstrap.h"
#include "io/collective.h"
#include "python/src/py_values.h"

namespace seedstore::py {

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

// A communicator of the library (io/collective.h) made by seedstore.init_distributed: the
// "store" backend, or NCCL bootstrapped over it, on a key-value store reached through Python
// callables (seedstore/distributed.py adapts torch.distributed stores to them).
struct PyComm {
  std::unique_ptr<Collective> c;
  int device = -1;                  // the CUDA device of an NCCL communicator
  std::shared_ptr<PyStoreFns> fns;  // the store callables c's bootstrap calls (for the GC)

  Collective& get() const {
    if (!c) Throw(InvalidArgument("the communicator is closed"));
    return *c;
  }
};

/// The type slots of the communicator's Python class: the GC sees the store callables through
/// them (they may refer back to the communicator) and can break such cycles.
extern PyType_Slot kPyCommSlots[];

/// The Bootstrap callbacks over `fns` (the GIL taken around each call; a Python exception
/// becomes kIo with its message).
BootstrapCallbacks StoreCallbacks(std::shared_ptr<PyStoreFns> fns);

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

}  // namespace seedstore::py
