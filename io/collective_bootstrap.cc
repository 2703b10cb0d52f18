// The bootstrap backend of io/collective.h: a Collective over a Bootstrap (io/bootstrap.h),
// every step one GatherAll (or Broadcast, or Barrier) of the bootstrap. For CPU checks without
// MPI and for bootstrapping NCCL; over a store each step costs size() puts and gets at rank 0.
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "io/bootstrap.h"
#include "io/collective.h"

namespace seedstore {
namespace {

class BootstrapCollective final : public Collective {
 public:
  BootstrapCollective(std::unique_ptr<Bootstrap> b, CollectiveOptions o) : b_(std::move(b)) {
    options_ = o;
  }

  int rank() const override { return b_->rank(); }
  int size() const override { return b_->size(); }
  const char* backend() const override { return b_->transport(); }
  bool broken() const override { return broken_; }

  Status AllGather(const void* send, size_t bytes, void* recv, const char* what) override {
    SEEDSTORE_RETURN_IF_ERROR(Usable(what));
    const double t0 = Now();
    Result<std::vector<std::string>> all = b_->GatherAll(
        std::string_view(static_cast<const char*>(send), bytes), what, options_.timeout_s);
    comm_s_ += Now() - t0;
    if (!all.ok()) return Fail(all.status());
    if (all->size() != static_cast<size_t>(size()))
      return Fail(IoError(std::string("step '") + what + "': " + std::to_string(all->size()) +
                          " ranks answered, this rank expects " + std::to_string(size())));
    for (size_t r = 0; r < all->size(); ++r) {
      if ((*all)[r].size() != bytes)
        return Fail(IoError(std::string("step '") + what + "': rank " + std::to_string(r) +
                            " sent " + std::to_string((*all)[r].size()) + " bytes, this rank " +
                            std::to_string(bytes) + ": the ranks make different calls"));
      if (bytes) std::memcpy(static_cast<char*>(recv) + r * bytes, (*all)[r].data(), bytes);
    }
    return Status::Ok();
  }

  Status AllReduceSum(uint64_t* data, size_t n, const char* what) override {
    std::vector<uint64_t> all(n * static_cast<size_t>(size()));
    SEEDSTORE_RETURN_IF_ERROR(AllGather(data, n * 8, all.data(), what));
    for (size_t i = 0; i < n; ++i) {
      uint64_t s = 0;  // unsigned: mod 2^64, as fingerprints need
      for (int r = 0; r < size(); ++r) s += all[static_cast<size_t>(r) * n + i];
      data[i] = s;
    }
    return Status::Ok();
  }

  Status Barrier(const char* what) override {
    SEEDSTORE_RETURN_IF_ERROR(Usable(what));
    const double t0 = Now();
    Status st = b_->Barrier(what, options_.timeout_s);
    comm_s_ += Now() - t0;
    return st.ok() ? st : Fail(st);
  }

  Status Broadcast(void* data, size_t bytes, int root, const char* what) override {
    SEEDSTORE_RETURN_IF_ERROR(Usable(what));
    const double t0 = Now();
    Result<std::string> v = b_->Broadcast(std::string_view(static_cast<const char*>(data), bytes),
                                          root, what, options_.timeout_s);
    comm_s_ += Now() - t0;
    if (!v.ok()) return v.status().code() == Code::kIo ? Fail(v.status()) : v.status();
    if (v->size() != bytes)
      return Fail(IoError(std::string("step '") + what + "': root " + std::to_string(root) +
                          " sent " + std::to_string(v->size()) + " bytes, this rank expects " +
                          std::to_string(bytes)));
    if (bytes) std::memcpy(data, v->data(), bytes);
    return Status::Ok();
  }

  [[noreturn]] void Abort(int exit_code) override {
    b_->Abort(exit_code);
    std::_Exit(exit_code);  // not reached
  }

 private:
  static double Now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  Status Usable(const char* what) const {
    if (!broken_) return Status::Ok();
    return IoError(std::string(what) +
                   ": the bootstrap communicator is unusable after an earlier failure");
  }
  // After a failed step the ranks' step counters may differ: the object is done.
  Status Fail(Status st) {
    broken_ = true;
    return st;
  }

  std::unique_ptr<Bootstrap> b_;
  bool broken_ = false;
};

}  // namespace

Result<std::unique_ptr<Collective>> CreateBootstrapCollective(std::unique_ptr<Bootstrap> bootstrap,
                                                              CollectiveOptions o) {
  if (!bootstrap) return InvalidArgument("bootstrap backend: no bootstrap");
  // Every rank's world size first, so that ranks started with different sizes are named
  // instead of waiting for ranks that do not exist.
  const std::string mine = std::to_string(bootstrap->size());
  SEEDSTORE_ASSIGN_OR_RETURN(std::vector<std::string> sizes,
                             bootstrap->GatherAll(mine, "bootstrap setup", o.timeout_s));
  for (size_t r = 0; r < sizes.size(); ++r)
    if (sizes[r] != mine)
      return InvalidArgument("bootstrap backend: world size mismatch: rank " + std::to_string(r) +
                             " was started with world size " + sizes[r] + ", rank " +
                             std::to_string(bootstrap->rank()) + " with " + mine);
  auto c = std::make_unique<BootstrapCollective>(std::move(bootstrap), o);
  return std::unique_ptr<Collective>(std::move(c));
}

}  // namespace seedstore
