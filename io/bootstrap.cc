// io/bootstrap.h: the Bootstrap base, and the store transport (exchanges over a key-value
// store reached through callbacks).
#include "io/bootstrap.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace seedstore {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string Seconds(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", s);
  return b;
}

std::string RankList(const std::vector<int>& r) {
  std::string s;
  for (size_t i = 0; i < r.size() && i < 16; ++i) s += (i ? ", " : "") + std::to_string(r[i]);
  if (r.size() > 16) s += ", ... (" + std::to_string(r.size()) + " ranks)";
  return s;
}

// The outcome rank 0 publishes: 'O' and every block as (u64 little-endian length, bytes), or
// 'E' and the error message.
std::string PackBlocks(const std::vector<std::string>& blocks) {
  std::string out = "O";
  for (const std::string& b : blocks) {
    uint64_t n = b.size();
    for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
    out += b;
  }
  return out;
}

Result<std::vector<std::string>> UnpackBlocks(const std::string& v, const char* what) {
  const auto bad = [&] {
    return IoError(std::string("step '") + what + "': rank 0's outcome is malformed (" +
                   std::to_string(v.size()) + " bytes): another program wrote the key?");
  };
  if (v.empty()) return bad();
  if (v[0] == 'E') return IoError(v.substr(1) + " (reported by rank 0)");
  if (v[0] != 'O') return bad();
  std::vector<std::string> blocks;
  size_t at = 1;
  while (at < v.size()) {
    if (v.size() - at < 8) return bad();
    uint64_t n = 0;
    for (int i = 0; i < 8; ++i)
      n |= static_cast<uint64_t>(static_cast<unsigned char>(v[at + i])) << (8 * i);
    at += 8;
    if (v.size() - at < n) return bad();
    blocks.push_back(v.substr(at, n));
    at += n;
  }
  return blocks;
}

class CallbackBootstrap final : public Bootstrap {
 public:
  CallbackBootstrap(int rank, int size, std::string prefix, BootstrapCallbacks cb)
      : rank_(rank), size_(size), prefix_(std::move(prefix)), cb_(std::move(cb)) {}

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* transport() const override { return "store"; }

  Result<std::vector<std::string>> GatherAll(std::string_view mine, const char* what,
                                             double timeout_s) override {
    SEEDSTORE_RETURN_IF_ERROR(Usable(what));
    Result<std::vector<std::string>> r = GatherAllOnce(mine, what, timeout_s);
    if (!r.ok() && r.status().code() == Code::kIo) broken_ = true;
    return r;
  }

  Result<std::string> Broadcast(std::string_view bytes, int root, const char* what,
                                double timeout_s) override {
    SEEDSTORE_RETURN_IF_ERROR(CheckBroadcastRoot(root, size_, what));
    SEEDSTORE_RETURN_IF_ERROR(Usable(what));
    const std::string key = NextKey(what);
    if (rank_ == root) {
      Status st = Put(key, bytes);
      if (!st.ok()) {
        broken_ = true;
        return st;
      }
      return std::string(bytes);
    }
    Result<std::string> v = Get(key, root, timeout_s);
    if (!v.ok()) {
      broken_ = true;
      return IoError("step '" + std::string(what) + "': " + v.status().message() +
                     " (seen by rank " + std::to_string(rank_) + ")");
    }
    return v;
  }

 private:
  Status Usable(const char* what) const {
    if (!broken_) return Status::Ok();
    return IoError(std::string(what) +
                   ": the store bootstrap is unusable after an earlier failure");
  }

  std::string NextKey(const char* what) { return std::string(what) + "/" + std::to_string(seq_++); }

  Status Put(const std::string& key, std::string_view bytes) {
    Status st = cb_.put(prefix_ + key, bytes);
    if (!st.ok()) return IoError("store: put '" + prefix_ + key + "': " + st.message());
    return st;
  }

  // The bytes under `key`, which rank `owner` puts, waiting up to timeout_s (<= 0: forever).
  Result<std::string> Get(const std::string& key, int owner, double timeout_s) {
    const std::string full = prefix_ + key;
    // Waiting forever is waiting in long slices (a store's own limit may be shorter).
    const double slice = timeout_s > 0 ? timeout_s : 600;
    for (;;) {
      Result<std::optional<std::string>> v = cb_.get(full, slice);
      if (!v.ok()) return IoError("store: get '" + full + "': " + v.status().message());
      if (v->has_value()) return std::move(**v);
      if (timeout_s > 0)
        return IoError("rank " + std::to_string(owner) + " did not put '" + full + "' within " +
                       Seconds(timeout_s) +
                       " s (timeout): hung, dead or far slower than the others");
    }
  }

  bool Has(const std::string& key) { return cb_.has && cb_.has(prefix_ + key); }

  Result<std::vector<std::string>> GatherAllOnce(std::string_view mine, const char* what,
                                                 double timeout_s) {
    const std::string key = NextKey(what);
    const double t0 = Now();
    if (rank_ != 0) {
      SEEDSTORE_RETURN_IF_ERROR(Put(key + "/" + std::to_string(rank_), mine));
      // Later than rank 0's deadline, so that rank 0 names the missing ranks first.
      const double grace = std::min(2.0, 0.5 * timeout_s);
      Result<std::string> all = Get(key + "/all", 0, timeout_s > 0 ? timeout_s + grace : 0);
      if (!all.ok())
        return IoError("step '" + std::string(what) + "': " + all.status().message() +
                       " (seen by rank " + std::to_string(rank_) + ")");
      return UnpackBlocks(*all, what);
    }
    std::vector<std::string> blocks(size_);
    blocks[0] = std::string(mine);
    Status failed;
    for (int r = 1; r < size_ && failed.ok(); ++r) {
      const double left = timeout_s > 0 ? std::max(1e-3, t0 + timeout_s - Now()) : 0;
      Result<std::string> b = Get(key + "/" + std::to_string(r), r, left);
      if (b.ok()) {
        blocks[r] = std::move(*b);
        continue;
      }
      std::string m = "step '" + std::string(what) + "': " + b.status().message();
      std::vector<int> also;
      for (int q = r + 1; q < size_; ++q)
        if (!Has(key + "/" + std::to_string(q))) also.push_back(q);
      if (!also.empty())
        m += "; nor did rank" + std::string(also.size() > 1 ? "s " : " ") + RankList(also);
      failed = Status(b.status().code(), m);
    }
    if (!failed.ok()) {
      (void)Put(key + "/all", "E" + failed.message());  // the others report it too
      return failed;
    }
    SEEDSTORE_RETURN_IF_ERROR(Put(key + "/all", PackBlocks(blocks)));
    return blocks;
  }

  int rank_, size_;
  std::string prefix_;
  BootstrapCallbacks cb_;
  unsigned long long seq_ = 0;
  bool broken_ = false;
};

}  // namespace

void Bootstrap::Abort(int exit_code) {
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(exit_code);
}

Status CheckBroadcastRoot(int root, int size, const char* what) {
  if (root >= 0 && root < size) return Status::Ok();
  return InvalidArgument(std::string(what) + ": broadcast root " + std::to_string(root) +
                         " outside a world of " + std::to_string(size));
}

Status Bootstrap::Barrier(const char* what, double timeout_s) {
  return GatherAll("", what, timeout_s).status();
}

Result<std::unique_ptr<Bootstrap>> CreateCallbackBootstrap(int rank, int size, std::string prefix,
                                                           BootstrapCallbacks callbacks) {
  if (size < 1)
    return InvalidArgument("bootstrap: world size " + std::to_string(size) + " must be >= 1");
  if (rank < 0 || rank >= size)
    return InvalidArgument("bootstrap: rank " + std::to_string(rank) + " is outside [0, " +
                           std::to_string(size) + ") (world size " + std::to_string(size) + ")");
  if (!callbacks.put || !callbacks.get)
    return InvalidArgument("bootstrap: the store needs a put and a get callback");
  return std::unique_ptr<Bootstrap>(
      new CallbackBootstrap(rank, size, std::move(prefix), std::move(callbacks)));
}

}  // namespace seedstore
