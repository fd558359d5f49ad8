// A fixed pool of worker threads for the CPU backend.
//
// parallel_for(n, fn) splits [0, n) into contiguous chunks, runs
// fn(begin, end) on the workers and the calling thread, and returns when all
// chunks are done; an exception from any chunk is rethrown in the caller.
// Nested calls from inside a chunk run serially (no deadlock).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace bitrank {

class ThreadPool {
 public:
  explicit ThreadPool(unsigned threads = 0);  // 0: hardware concurrency
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  unsigned size() const { return static_cast<unsigned>(workers_.size()) + 1; }
  // grain: the smallest chunk worth a thread.
  void parallel_for(std::int64_t n, const std::function<void(std::int64_t, std::int64_t)>& fn, std::int64_t grain = 1);

  static ThreadPool& global();

 private:
  void worker_loop();
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_work_, cv_done_;
  const std::function<void(std::int64_t, std::int64_t)>* job_ = nullptr;
  std::int64_t n_ = 0, chunk_ = 0, next_ = 0, pending_ = 0;
  std::uint64_t generation_ = 0;
  std::exception_ptr error_;
  bool stop_ = false;
};

}  // namespace bitrank
