#include "io/h5_handle.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "io/store_format.h"
#include "io/zstd_filter.h"

namespace seedstore {

// All HDF5 calls of this process go through one lock: the serial library is not reentrant in
// general, and we want the chunk codecs (our threads) to run outside of it.
std::recursive_mutex& H5Mutex() {
  static std::recursive_mutex m;
  return m;
}

namespace {

herr_t WalkError(unsigned, const H5E_error2_t* e, void* data) {
  auto* s = static_cast<std::string*>(data);
  if (!s->empty()) *s += "; ";
  *s += e->func_name ? e->func_name : "?";
  *s += ": ";
  *s += e->desc ? e->desc : "";
  return 0;
}

void InitH5() {
  static std::once_flag once;
  std::call_once(once, [] {
    H5open();
    RegisterZstdFilter();
  });
  // The error stack (and its automatic printing) is per thread in thread-safe builds.
  thread_local bool quiet = [] {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    return true;
  }();
  (void)quiet;
}

}  // namespace

H5Guard::H5Guard() { InitH5(); }

// The HDF5 error stack of this thread as one line, then cleared. A system call's failure that
// HDF5's file driver reports ("... error message = 'No space left on device' ...") leads it.
std::string H5ErrorText() {
  std::string s;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, WalkError, &s);
  H5Eclear2(H5E_DEFAULT);
  if (s.empty()) return "unknown HDF5 error";
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  const std::string key = "error message = '";
  if (const size_t at = s.find(key); at != std::string::npos)
    if (const size_t end = s.find('\'', at + key.size()); end != std::string::npos)
      return s.substr(at + key.size(), end - at - key.size()) + ": " + s;
  return s;
}

// HDF5 failed to read metadata of a file open for reading, doing `what` ("file 'm.h5' tensor
// 'w': opening /tensors/w"). HDF5 checksums its object headers and B-tree nodes and checks the
// structure of its heaps, so a damaged byte there fails the call: metadata-corrupt, with HDF5's
// outermost and innermost reasons. A system call's failure (HDF5's file driver reports the
// system's message) is kIo instead: the file may be intact.
Status H5ReadFailure(const std::string& what) {
  const std::string e = H5ErrorText();
  if (e.find("error message = '") != std::string::npos) return IoError(what + ": " + e);
  const size_t first = e.find("; "), last = e.rfind("; ");
  const std::string shown =
      first == std::string::npos
          ? e
          : e.substr(0, first) + (first == last ? "" : "; ...") + e.substr(last);
  return StoreStatus(StoreError::kMetadataCorrupt, what + ": HDF5 cannot read it (" + shown + ")");
}

std::unique_lock<std::recursive_mutex> LockH5() {
  std::unique_lock<std::recursive_mutex> l(H5Mutex());
  InitH5();
  return l;
}

void AbandonH5File(int64_t file) {
  if (file < 0) return;
#if defined(__linux__)
  Hid fapl(H5Fget_access_plist(file), H5Pclose);
  void* handle = nullptr;
  if (fapl.ok() && H5Pget_driver(fapl.get()) == H5FD_SEC2 &&
      H5Fget_vfd_handle(file, fapl.get(), &handle) >= 0 && handle != nullptr) {
    const int fd = *static_cast<int*>(handle);
    const int mem = ::memfd_create("seedstore-abandoned", MFD_CLOEXEC);
    if (mem >= 0 &&
        ::dup2(mem, fd) >=
            0) {  // HDF5's descriptor now names the memfd (close-on-exec kept off: HDF5's own)
      // A flush that failed before (H5Fflush of a full disk) leaves HDF5 1.10's metadata cache
      // with dirty entries and its flush list still on ("slist not empty"), and every later
      // flush -- H5Fclose's included -- then fails at its start ("slist already enabled?"):
      // the close fails, which frees the file but leaves its id, closed again at exit (SIGSEGV
      // in H5F__close_cb). This flush writes those entries to the memfd, where writing cannot
      // fail, and so turns the list off again; it reports that start as failed, but the
      // close after it succeeds. Never retry H5Fclose instead: a failed one already freed it.
      H5Fflush(file, H5F_SCOPE_LOCAL);
    }
    if (mem >= 0) ::close(mem);
  }
  H5ErrorText();
#endif
  H5Fclose(file);
  H5ErrorText();
}

int64_t UntimedCreationList(int64_t cls) {
  const hid_t p = H5Pcreate(cls);
  if (p >= 0 && H5Pset_obj_track_times(p, false) < 0) {
    H5Pclose(p);
    return -1;
  }
  return p;
}

// A dataset access property list giving a dataset no raw-data chunk cache (made once; HDF5
// copies it into each dataset it opens).
std::shared_ptr<const Hid> ShareHid(Hid h) {
  return std::shared_ptr<const Hid>(new Hid(std::move(h)), [](const Hid* p) {
    H5Guard g;
    delete p;
  });
}

hid_t NoChunkCache() {
  static const hid_t dapl = [] {
    const hid_t p = H5Pcreate(H5P_DATASET_ACCESS);
    H5Pset_chunk_cache(p, 0, 0, H5D_CHUNK_CACHE_W0_DEFAULT);
    return p;
  }();
  return dapl;
}

}  // namespace seedstore
