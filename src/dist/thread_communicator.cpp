// The thread communicator: n ranks of one process meet in one shared state.
//
// A collective is one or two rendezvous under one mutex. At the first every
// rank publishes its call (op, buffer, size, root); the last to arrive takes
// a snapshot of all calls, and every rank checks that same snapshot, so a
// mismatch throws on every rank alike and nobody is left waiting.
// all_reduce_sum and broadcast then read the other ranks' buffers directly
// and meet again before writing their own, so that no buffer changes while
// another rank still reads it. Rendezvous count generations: a fast rank may
// enter the next collective while slow ones are still waking from this one.
#include "bitrank/dist/communicator.hpp"

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>

#include "bitrank/error.hpp"

namespace bitrank::dist {
namespace {

enum class Op { all_reduce_sum, broadcast, barrier };

const char* op_name(Op op) {
  switch (op) {
    case Op::all_reduce_sum: return "all_reduce_sum";
    case Op::broadcast: return "broadcast";
    case Op::barrier: return "barrier";
  }
  return "?";
}

struct Call {
  Op op = Op::barrier;
  const void* data = nullptr;
  std::size_t size = 0;  // elements
  int root = 0;
};

class Shared {
 public:
  explicit Shared(int n) : n_(n), calls_(static_cast<std::size_t>(n)) {}

  int size() const { return n_; }

  // Publishes rank's call, waits for every rank's, returns all of them.
  std::vector<Call> exchange(int rank, const Call& call) {
    std::unique_lock<std::mutex> lk(mu_);
    calls_[static_cast<std::size_t>(rank)] = call;
    rendezvous(lk, rank, call.op);
    return snapshot_;
  }

  // Waits for every rank.
  void meet(int rank, Op op) {
    std::unique_lock<std::mutex> lk(mu_);
    rendezvous(lk, rank, op);
  }

  void abort(int rank, const std::string& why) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (aborted_.empty()) aborted_ = format("rank {} aborted the group: {}", rank, why);
    }
    cv_.notify_all();
  }

 private:
  void rendezvous(std::unique_lock<std::mutex>& lk, int rank, Op op) {
    throw_if_aborted(rank, op);
    const std::uint64_t gen = generation_;
    if (++arrived_ == n_) {
      // The snapshot stays put until every rank has read it: the next
      // generation cannot complete without them.
      snapshot_ = calls_;
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    cv_.wait(lk, [&] { return generation_ != gen || !aborted_.empty(); });
    if (generation_ == gen) throw_if_aborted(rank, op);  // completed first: not abandoned
  }

  void throw_if_aborted(int rank, Op op) const {
    if (!aborted_.empty()) fail("rank {}: {} abandoned: {}", rank, op_name(op), aborted_);
  }

  const int n_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Call> calls_, snapshot_;
  int arrived_ = 0;
  std::uint64_t generation_ = 0;
  std::string aborted_;  // empty while the group is healthy
};

// "0: 4, 1: 5, 2: 4": one field of every rank's call.
template <class F>
std::string by_rank(const std::vector<Call>& calls, F field) {
  std::string s;
  for (std::size_t r = 0; r < calls.size(); ++r) s += format("{}{}: {}", r ? ", " : "", r, field(calls[r]));
  return s;
}

// The same checks on every rank, on the same snapshot: all throw or none.
void check_calls(const std::vector<Call>& calls, int rank) {
  const Call& c0 = calls.front();
  const auto differs = [&](auto field) {
    return std::any_of(calls.begin(), calls.end(), [&](const Call& c) { return field(c) != field(c0); });
  };
  if (differs([](const Call& c) { return c.op; }))
    fail("rank {}: ranks called different collectives ({})", rank,
         by_rank(calls, [](const Call& c) { return op_name(c.op); }));
  const char* op = op_name(c0.op);
  if (c0.op == Op::broadcast) {
    const int n = static_cast<int>(calls.size());
    for (std::size_t r = 0; r < calls.size(); ++r)
      if (calls[r].root < 0 || calls[r].root >= n)
        fail("rank {}: broadcast: rank {} gave root {}, out of range for {} ranks", rank, r, calls[r].root, n);
    if (differs([](const Call& c) { return c.root; }))
      fail("rank {}: broadcast: roots differ across ranks ({})", rank,
           by_rank(calls, [](const Call& c) { return c.root; }));
  }
  if (differs([](const Call& c) { return c.size; }))
    fail("rank {}: {}: buffer sizes differ across ranks (rank: elements; {})", rank, op,
         by_rank(calls, [](const Call& c) { return c.size; }));
}

class ThreadCommunicator final : public Communicator {
 public:
  ThreadCommunicator(std::shared_ptr<Shared> shared, int rank) : shared_(std::move(shared)), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return shared_->size(); }

  void all_reduce_sum(std::span<float> data) override {
    const auto calls = exchange({Op::all_reduce_sum, data.data(), data.size(), 0});
    // Rank order, in f32: the same bits on every rank whatever the timing.
    std::vector<float> sum(static_cast<const float*>(calls[0].data),
                           static_cast<const float*>(calls[0].data) + data.size());
    for (std::size_t r = 1; r < calls.size(); ++r) {
      const auto* x = static_cast<const float*>(calls[r].data);
      for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += x[i];
    }
    shared_->meet(rank_, Op::all_reduce_sum);  // nobody reads our buffer any more
    std::copy(sum.begin(), sum.end(), data.begin());
  }

  void broadcast(std::span<std::byte> data, int root) override {
    const auto calls = exchange({Op::broadcast, data.data(), data.size(), root});
    if (rank_ != root && !data.empty()) std::memcpy(data.data(), calls[static_cast<std::size_t>(root)].data, data.size());
    shared_->meet(rank_, Op::broadcast);  // the root's buffer may change after this
  }

  void barrier() override { exchange({Op::barrier, nullptr, 0, 0}); }

  void abort(std::string why) override { shared_->abort(rank_, why); }

 private:
  std::vector<Call> exchange(const Call& call) {
    auto calls = shared_->exchange(rank_, call);
    check_calls(calls, rank_);
    return calls;
  }

  std::shared_ptr<Shared> shared_;
  int rank_;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_thread_communicators(int n) {
  if (n < 1) fail("make_thread_communicators: need at least 1 rank, got {}", n);
  auto shared = std::make_shared<Shared>(n);
  std::vector<std::unique_ptr<Communicator>> comms;
  for (int r = 0; r < n; ++r) comms.push_back(std::make_unique<ThreadCommunicator>(shared, r));
  return comms;
}

void run_ranks(const std::vector<std::unique_ptr<Communicator>>& comms,
               const std::function<void(Communicator&)>& fn) {
  std::mutex mu;
  std::exception_ptr first;
  const auto run = [&](Communicator& comm) {
    try {
      fn(comm);
    } catch (...) {
      const auto e = std::current_exception();
      std::string why = "unknown exception";
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& ex) {
        why = ex.what();
      } catch (...) {
      }
      // Recorded before abort: the errors abort causes come later.
      {
        std::lock_guard<std::mutex> lk(mu);
        if (!first) first = e;
      }
      comm.abort(why);
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(comms.size());
  try {
    for (const auto& c : comms) threads.emplace_back(run, std::ref(*c));
  } catch (...) {
    comms.front()->abort("could not start a thread for every rank");
    for (auto& t : threads) t.join();
    throw;
  }
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

}  // namespace bitrank::dist
