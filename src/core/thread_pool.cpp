#include "bitrank/thread_pool.hpp"

#include <algorithm>
#include <exception>

namespace bitrank {
namespace {
thread_local bool in_pool_job = false;
}

ThreadPool::ThreadPool(unsigned threads) {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  for (unsigned i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_work_.notify_all();
  for (auto& t : workers_) t.join();
}

ThreadPool& ThreadPool::global() {
  static ThreadPool pool;
  return pool;
}

void ThreadPool::parallel_for(std::int64_t n, const std::function<void(std::int64_t, std::int64_t)>& fn,
                              std::int64_t grain) {
  if (n <= 0) return;
  grain = std::max<std::int64_t>(grain, 1);
  const std::int64_t max_chunks = (n + grain - 1) / grain;
  if (workers_.empty() || in_pool_job || max_chunks <= 1) {
    fn(0, n);
    return;
  }
  const std::int64_t chunks = std::min<std::int64_t>(max_chunks, static_cast<std::int64_t>(size()) * 4);
  {
    std::lock_guard<std::mutex> lk(mu_);
    job_ = &fn;
    n_ = n;
    chunk_ = (n + chunks - 1) / chunks;
    next_ = 0;
    pending_ = (n + chunk_ - 1) / chunk_;
    error_ = nullptr;
    ++generation_;
  }
  cv_work_.notify_all();
  // The caller works too.
  in_pool_job = true;
  for (;;) {
    std::int64_t b;
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (next_ >= n_) break;
      b = next_;
      next_ += chunk_;
    }
    try {
      fn(b, std::min(n, b + chunk_));
    } catch (...) {
      std::lock_guard<std::mutex> lk(mu_);
      if (!error_) error_ = std::current_exception();
    }
    std::lock_guard<std::mutex> lk(mu_);
    if (--pending_ == 0) cv_done_.notify_all();
  }
  in_pool_job = false;
  std::unique_lock<std::mutex> lk(mu_);
  cv_done_.wait(lk, [&] { return pending_ == 0; });
  job_ = nullptr;
  if (error_) std::rethrow_exception(error_);
}

void ThreadPool::worker_loop() {
  std::uint64_t seen = 0;
  in_pool_job = true;
  for (;;) {
    std::unique_lock<std::mutex> lk(mu_);
    cv_work_.wait(lk, [&] { return stop_ || (generation_ != seen && job_ && next_ < n_); });
    if (stop_) return;
    seen = generation_;
    while (job_ && next_ < n_) {
      const std::int64_t b = next_;
      next_ += chunk_;
      const auto* fn = job_;
      const std::int64_t e = std::min(n_, b + chunk_);
      lk.unlock();
      try {
        (*fn)(b, e);
      } catch (...) {
        lk.lock();
        if (!error_) error_ = std::current_exception();
        lk.unlock();
      }
      lk.lock();
      if (--pending_ == 0) cv_done_.notify_all();
    }
  }
}

}  // namespace bitrank
