// seedstore._seedstore: the Python binding of the C++ library (store/, io/). Thin by design:
// every computation -- specs, layouts, catalogs, materializing, fingerprints, verification --
// is the library's; this file defines the module's functions and classes, converting their
// arguments into library types (py_values.h: dicts as JSON text, DLPack arrays, boxes;
// py_comm.h: communicators), releasing the GIL around the work, and turning a Status into the
// exception of its code (seedstore.InvalidArgumentError, ... all subclasses of seedstore.Error,
// each with the CLI's code name and exit code).
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
#include "python/src/py_comm.h"
#include "python/src/py_values.h"
#include "store/catalog.h"
#include "store/layout.h"
#include "store/spec.h"
#include "store/verify.h"

namespace nb = nanobind;
using namespace nb::literals;
using namespace seedstore;
using namespace seedstore::py;

// The module: one short definition per function and class, in the order of the package's
// layers (errors; fingerprints and boxes; specs and layouts; catalogs; verification and saves;
// communicators). Long because it is the list of bindings; each entry's work is the library's.
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
