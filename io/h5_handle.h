// HDF5 handles, the process's HDF5 lock and HDF5 errors, for the io/ files that call HDF5
// (internal to io/: it includes <hdf5.h>). Every HDF5 call of the process holds the lock
// (H5Guard, or LockH5 in io/h5_util.h): the serial library is not reentrant.
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "gen/dtype.h"
#include "io/h5_util.h"
#include "store/status.h"

namespace seedstore {

/// The lock every HDF5 call of this process goes through (recursive): the serial library is
/// not reentrant in general, and the chunk codecs (our threads) run outside of it.
std::recursive_mutex& H5Mutex();

/// Holds the HDF5 lock and silences this thread's error printing (and registers the zstd
/// filter, once per process).
struct H5Guard {
  std::lock_guard<std::recursive_mutex> lock{H5Mutex()};
  H5Guard();
};

/// One macro per foreign API (house style H3): adds file:line and HDF5's own message.
#define SEEDSTORE_H5_ERROR(what)                                                              \
  ::seedstore::IoError(std::string(what) + " [" + __FILE__ + ":" + std::to_string(__LINE__) + \
                       "]: " + ::seedstore::H5ErrorText())

/// HDF5 failed to read metadata of a file open for reading, doing `what` ("file 'm.h5' tensor
/// 'w': opening /tensors/w"). HDF5 checksums its object headers and B-tree nodes and checks the
/// structure of its heaps, so a damaged byte there fails the call: metadata-corrupt, with HDF5's
/// outermost and innermost reasons. A system call's failure (HDF5's file driver reports the
/// system's message) is kIo instead: the file may be intact.
Status H5ReadFailure(const std::string& what);

/// An owned HDF5 identifier, closed by its close function (H5Dclose, H5Sclose, ...) when the
/// handle goes; movable, not copyable. The only HDF5 handle type of io/. Close it, like any
/// HDF5 call, holding the HDF5 lock.
class Hid {
 public:
  Hid() = default;
  Hid(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  Hid(Hid&& o) noexcept : id_(o.id_), close_(o.close_) { o.id_ = -1; }
  Hid& operator=(Hid&& o) noexcept {
    Reset();
    id_ = o.id_;
    close_ = o.close_;
    o.id_ = -1;
    return *this;
  }
  Hid(const Hid&) = delete;
  Hid& operator=(const Hid&) = delete;
  ~Hid() { Reset(); }
  void Reset() {
    if (id_ >= 0 && close_) close_(id_);
    id_ = -1;
  }
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }
  hid_t release() {
    hid_t t = id_;
    id_ = -1;
    return t;
  }

 private:
  hid_t id_ = -1;
  herr_t (*close_)(hid_t) = nullptr;
};

/// A Hid that several threads hold (std::shared_ptr): closed, under the HDF5 lock, when the
/// last holder lets go, whichever thread that is.
std::shared_ptr<const Hid> ShareHid(Hid h);

/// A dataset access property list giving a dataset no raw-data chunk cache (made once; HDF5
/// copies it into each dataset it opens).
hid_t NoChunkCache();

/// The HDF5 file type of a dtype (bfloat16 as uint16, bool as uint8: see seedstore.dtype).
Hid StorageType(DType d);

/// Whether an HDF5 type stores `d` bit for bit as seedstore reads it: class, size, byte order
/// and sign, and every bit in use -- an IEEE float's sign, exponent and mantissa fields and
/// bias (a 2-byte float with 8 exponent bits is not float16), an integer's full precision at
/// offset 0 (a 16-bit integer inside 4 bytes is not an int32). Call holding the HDF5 lock
/// (H5TypeStores takes it).
bool TypeMatches(hid_t t, DType d);

/// Whether link `path` ("/group/name") exists in file `f`, each of its groups looked up in
/// turn; where it does, it and its groups must be hard links: objects stored in this file.
/// Chunks are read at the addresses HDF5 reports, from this file's descriptor, so an external
/// link (whose chunks lie in another file) or a soft link would be read wrong; both are refused
/// (bad-layout). Metadata-corrupt (or kIo) naming `where` when HDF5 cannot read a group's links.
Result<bool> StoredLinkExists(hid_t f, const std::string& path, const std::string& where);

/// Writes uint64 attribute `name` = `v` on `obj`: a scalar (v has one word) or a 1-d array.
Status WriteU64Attr(hid_t obj, const char* name, const std::vector<uint64_t>& v, bool scalar);
/// Writes scalar int32 attribute `name` = `v` on `obj`.
Status WriteI32Attr(hid_t obj, const char* name, int32_t v);
/// Opens an attribute; missing-attribute when absent. `where` names the object.
Result<Hid> OpenAttr(hid_t obj, const char* name, const std::string& where);
/// Reads integer attribute `name` of `obj` as uint64 words (ReadU64ArrayAttr without the lock).
Result<std::vector<uint64_t>> ReadU64Attr(hid_t obj, const char* name, const std::string& where);

}  // namespace seedstore
