// ThreadWorld: an in-process world of n ranks, each a thread holding an Exchange over shared
// memory -- one process acting for many ranks (tests of the cross-rank logic; verify-ranks'
// cost at 1,024 simulated ranks, bench/verify_ranks_scale.cc). Header-only.
#pragma once
#include <barrier>
#include <cstdint>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "store/verify.h"

namespace seedstore {

class ThreadWorld {
 public:
  explicit ThreadWorld(int n) : n_(n), sync_(n), slots_(n) {}

  /// Rank r's end of the world. Every collective must be called by all n members (it waits
  /// for them), and never fails.
  class Member final : public Exchange {
   public:
    Member(ThreadWorld* w, int r) : w_(w), r_(r) {}
    int rank() const override { return r_; }
    int size() const override { return w_->n_; }
    Status AllGather(const void* send, size_t bytes, void* recv, const char*) override {
      w_->slots_[r_].assign(static_cast<const char*>(send), static_cast<const char*>(send) + bytes);
      w_->sync_.arrive_and_wait();
      for (int k = 0; k < w_->n_; ++k)
        std::memcpy(static_cast<char*>(recv) + k * bytes, w_->slots_[k].data(), bytes);
      w_->sync_.arrive_and_wait();
      return Status::Ok();
    }
    Status AllReduceSum(uint64_t* data, size_t n, const char* what) override {
      std::vector<uint64_t> all(n * w_->n_);
      SEEDSTORE_RETURN_IF_ERROR(AllGather(data, n * 8, all.data(), what));
      for (size_t i = 0; i < n; ++i) {
        uint64_t s = 0;
        for (int k = 0; k < w_->n_; ++k) s += all[k * n + i];
        data[i] = s;
      }
      return Status::Ok();
    }
    Status Barrier(const char*) override {
      w_->sync_.arrive_and_wait();
      return Status::Ok();
    }

   private:
    ThreadWorld* w_;
    int r_;
  };

  /// Runs fn(member) for every rank, each in its own thread, and waits for them all.
  void Run(const std::function<void(Exchange&)>& fn) {
    std::vector<std::thread> ts;
    for (int r = 0; r < n_; ++r)
      ts.emplace_back([this, r, &fn] {
        Member m(this, r);
        fn(m);
      });
    for (auto& t : ts) t.join();
  }

 private:
  int n_;
  std::barrier<> sync_;
  std::vector<std::vector<char>> slots_;
};

}  // namespace seedstore
