// Distributed compression on the CPU: the thread communicator (fixed-order
// sums, broadcast, barrier, errors on every rank instead of hangs, abort)
// and the block-to-rank partition (exact optimum against brute force).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <future>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "bitrank/dist/communicator.hpp"
#include "bitrank/dist/partition.hpp"
#include "bitrank/error.hpp"
#include "bitrank/rng.hpp"

namespace bitrank::dist {
namespace {

using Comms = std::vector<std::unique_ptr<Communicator>>;

// run_ranks with a time limit: a hang aborts the group (which frees the
// waiting ranks) and fails the test. Rethrows what run_ranks throws.
void run_guarded(const Comms& comms, const std::function<void(Communicator&)>& fn) {
  auto done = std::async(std::launch::async, [&] { run_ranks(comms, fn); });
  if (done.wait_for(std::chrono::seconds(10)) == std::future_status::timeout) {
    ADD_FAILURE() << "the ranks hung for 10 s";
    comms.front()->abort("the test's time limit");
  }
  done.get();
}

// Each rank's input: random values of mixed magnitudes; element 0 is chosen
// so that the sum's bits depend on the order of addition.
std::vector<float> rank_input(int rank, std::size_t n) {
  auto v = rnd(n, 100 + static_cast<std::uint64_t>(rank), 1.0f);
  for (std::size_t i = 0; i < n; ++i) v[i] *= static_cast<float>(1 << (i % 20));
  const float first[] = {1.0f, 1e8f, -1e8f, 0.5f};
  v[0] = first[rank % 4];
  return v;
}

std::vector<float> all_reduce_on_threads(int n, std::size_t len, int run) {
  const auto comms = make_thread_communicators(n);
  std::vector<std::vector<float>> out(static_cast<std::size_t>(n));
  run_guarded(comms, [&](Communicator& c) {
    auto v = rank_input(c.rank(), len);
    // Vary who arrives first from run to run.
    std::this_thread::sleep_for(std::chrono::microseconds(((run + c.rank()) % 3) * 200));
    c.all_reduce_sum(v);
    out[static_cast<std::size_t>(c.rank())] = std::move(v);
  });
  for (int r = 1; r < n; ++r)
    EXPECT_EQ(0, std::memcmp(out[0].data(), out[static_cast<std::size_t>(r)].data(), len * sizeof(float)))
        << "rank " << r << " of " << n << " differs from rank 0 in run " << run;
  return out[0];
}

// 1 … 4 ranks: the sum is rank 0 + rank 1 + … in f32 on every rank, the
// same bits in every run, and close to the f64 sum.
TEST(DistComm, AllReduceSumFixedOrder) {
  const std::size_t len = 1000;
  for (int n = 1; n <= 4; ++n) {
    std::vector<float> fixed(len, 0.0f);
    std::vector<double> exact(len, 0.0), magnitude(len, 0.0);
    for (int r = 0; r < n; ++r) {
      const auto v = rank_input(r, len);
      for (std::size_t i = 0; i < len; ++i) {
        fixed[i] = r == 0 ? v[i] : fixed[i] + v[i];
        exact[i] += v[i];
        magnitude[i] += std::abs(v[i]);
      }
    }
    if (n >= 3) {
      EXPECT_NE(fixed[0], (-1e8f + 1e8f) + 1.0f) << "element 0 must tell the orders apart";
    }
    const auto first = all_reduce_on_threads(n, len, 0);
    for (std::size_t i = 0; i < len; ++i) {
      ASSERT_EQ(std::bit_cast<std::uint32_t>(fixed[i]), std::bit_cast<std::uint32_t>(first[i]))
          << n << " ranks, element " << i << ": " << first[i] << " vs fixed order " << fixed[i];
      ASSERT_LE(std::abs(first[i] - exact[i]), n * 6e-8 * magnitude[i]) << n << " ranks, element " << i;
    }
    for (int run = 1; run < 20; ++run)
      ASSERT_EQ(0, std::memcmp(first.data(), all_reduce_on_threads(n, len, run).data(), len * sizeof(float)))
          << n << " ranks, run " << run;
  }
}

// Every rank ends with the root's bytes, for each root; the root's bytes
// stay. Many collectives back to back, mixed, in one group.
TEST(DistComm, BroadcastFromEachRoot) {
  for (int n : {1, 3, 4}) {
    const auto comms = make_thread_communicators(n);
    std::atomic<int> wrong{0};
    run_guarded(comms, [&](Communicator& c) {
      for (int round = 0; round < 50; ++round) {
        for (int root = 0; root < n; ++root) {
          std::vector<std::byte> buf(37);
          for (std::size_t i = 0; i < buf.size(); ++i)
            buf[i] = static_cast<std::byte>(c.rank() * 40 + static_cast<int>(i) + round);
          c.broadcast(buf, root);
          for (std::size_t i = 0; i < buf.size(); ++i)
            wrong += buf[i] != static_cast<std::byte>(root * 40 + static_cast<int>(i) + round);
          // A rank may change its buffer as soon as the collective returns.
          std::fill(buf.begin(), buf.end(), std::byte{0xee});
          c.barrier();
          std::vector<float> x(64, 1.0f);
          c.all_reduce_sum(x);
          for (float& xi : x) wrong += std::exchange(xi, -1e30f) != static_cast<float>(n);
        }
      }
    });
    EXPECT_EQ(wrong.load(), 0) << n << " ranks";
  }
}

// No rank leaves a barrier before every rank has arrived at it.
TEST(DistComm, BarrierWaitsForEveryRank) {
  const int n = 4, rounds = 100;
  const auto comms = make_thread_communicators(n);
  std::atomic<int> arrived{0}, early{0};
  run_guarded(comms, [&](Communicator& c) {
    for (int round = 0; round < rounds; ++round) {
      if (c.rank() == round % n) std::this_thread::sleep_for(std::chrono::microseconds(300));
      ++arrived;
      c.barrier();
      early += arrived.load() < n * (round + 1);
    }
  });
  EXPECT_EQ(early.load(), 0);
  EXPECT_EQ(arrived.load(), n * rounds);
}

// Runs fn on every rank and returns each rank's error message ("" if none).
std::vector<std::string> errors_on_ranks(int n, const std::function<void(Communicator&)>& fn) {
  const auto comms = make_thread_communicators(n);
  std::vector<std::string> errors(static_cast<std::size_t>(n));
  run_guarded(comms, [&](Communicator& c) {
    try {
      fn(c);
    } catch (const Error& e) {
      errors[static_cast<std::size_t>(c.rank())] = e.what();
    }
  });
  return errors;
}

void expect_on_every_rank(const std::vector<std::string>& errors, const std::vector<std::string>& parts) {
  for (std::size_t r = 0; r < errors.size(); ++r) {
    EXPECT_NE(errors[r].find("rank " + std::to_string(r) + ":"), std::string::npos) << errors[r];
    for (const auto& p : parts) EXPECT_NE(errors[r].find(p), std::string::npos) << "rank " << r << ": " << errors[r];
  }
}

// A mismatch seen on one rank is an error on every rank, naming the ranks
// and sizes, and nobody hangs.
TEST(DistComm, MismatchesFailEveryRank) {
  expect_on_every_rank(errors_on_ranks(3,
                                       [](Communicator& c) {
                                         std::vector<float> v(c.rank() == 1 ? 5 : 4, 1.0f);
                                         c.all_reduce_sum(v);
                                       }),
                       {"all_reduce_sum", "buffer sizes differ", "0: 4, 1: 5, 2: 4"});
  expect_on_every_rank(errors_on_ranks(3,
                                       [](Communicator& c) {
                                         std::vector<std::byte> b(c.rank() == 2 ? 8 : 6);
                                         c.broadcast(b, 0);
                                       }),
                       {"broadcast", "buffer sizes differ", "0: 6, 1: 6, 2: 8"});
  expect_on_every_rank(errors_on_ranks(3,
                                       [](Communicator& c) {
                                         std::vector<std::byte> b(6);
                                         c.broadcast(b, c.rank() == 2 ? 7 : 0);
                                       }),
                       {"rank 2 gave root 7, out of range for 3 ranks"});
  expect_on_every_rank(errors_on_ranks(2,
                                       [](Communicator& c) {
                                         std::vector<std::byte> b(6);
                                         c.broadcast(b, -1);
                                       }),
                       {"rank 0 gave root -1"});
  expect_on_every_rank(errors_on_ranks(3,
                                       [](Communicator& c) {
                                         std::vector<std::byte> b(6);
                                         c.broadcast(b, c.rank() == 1 ? 1 : 0);
                                       }),
                       {"roots differ", "0: 0, 1: 1, 2: 0"});
  expect_on_every_rank(errors_on_ranks(2,
                                       [](Communicator& c) {
                                         float x = 0.0f;
                                         if (c.rank() == 0)
                                           c.barrier();
                                         else
                                           c.all_reduce_sum(std::span<float>(&x, 1));
                                       }),
                       {"different collectives", "0: barrier, 1: all_reduce_sum"});
}

// A rank that throws aborts the group: the others throw naming it, later
// collectives throw too, and run_ranks rethrows the failing rank's error.
TEST(DistComm, AbortReleasesWaitingRanks) {
  const int n = 4;
  const auto comms = make_thread_communicators(n);
  std::mutex mu;
  std::vector<std::string> errors(n);
  std::atomic<int> later_ok{0};
  try {
    run_guarded(comms, [&](Communicator& c) {
      std::vector<float> v(10, 1.0f);
      c.all_reduce_sum(v);  // the group works before the failure
      if (c.rank() == 2) throw std::runtime_error("disk full");
      try {
        c.all_reduce_sum(v);
      } catch (const Error& e) {
        std::lock_guard<std::mutex> lk(mu);
        errors[static_cast<std::size_t>(c.rank())] = e.what();
      }
      try {
        c.barrier();
        ++later_ok;
      } catch (const Error&) {
      }
    });
    ADD_FAILURE() << "run_ranks did not rethrow";
  } catch (const Error& e) {
    ADD_FAILURE() << "run_ranks rethrew an abort error, not the failure: " << e.what();
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "disk full");
  }
  for (int r : {0, 1, 3}) {
    const auto& m = errors[static_cast<std::size_t>(r)];
    EXPECT_NE(m.find("rank " + std::to_string(r) + ": all_reduce_sum"), std::string::npos) << m;
    EXPECT_NE(m.find("rank 2 aborted the group: disk full"), std::string::npos) << m;
  }
  EXPECT_EQ(later_ok.load(), 0);
}

// abort() called directly, not through run_ranks, frees a barrier.
TEST(DistComm, DirectAbortFreesBarrier) {
  const auto errors = errors_on_ranks(3, [](Communicator& c) {
    if (c.rank() == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      c.abort("out of memory");
      return;
    }
    c.barrier();
  });
  for (int r : {0, 2})
    EXPECT_NE(errors[static_cast<std::size_t>(r)].find("rank 1 aborted the group: out of memory"), std::string::npos)
        << errors[static_cast<std::size_t>(r)];
  EXPECT_EQ(errors[1], "");
}

TEST(DistComm, FactoryRanksAndBadCount) {
  const auto comms = make_thread_communicators(3);
  ASSERT_EQ(comms.size(), 3u);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(comms[static_cast<std::size_t>(r)]->rank(), r);
    EXPECT_EQ(comms[static_cast<std::size_t>(r)]->size(), 3);
  }
  EXPECT_THROW(make_thread_communicators(0), Error);
  EXPECT_THROW(make_thread_communicators(-2), Error);
}

// ---- partition_blocks ----

using Ranges = std::vector<std::pair<index_t, index_t>>;

std::int64_t largest_cost(const std::vector<std::int64_t>& cost, const Ranges& ranges) {
  std::int64_t worst = 0;
  for (const auto& [b, e] : ranges) {
    std::int64_t s = 0;
    for (index_t i = b; i < e; ++i) s += cost[static_cast<std::size_t>(i)];
    worst = std::max(worst, s);
  }
  return worst;
}

// The least largest cost over every way to cut n blocks into `ranks` runs.
std::int64_t brute_force(const std::vector<std::int64_t>& cost, int ranks, index_t begin = 0) {
  const auto n = static_cast<index_t>(cost.size());
  Ranges one{{begin, n}};
  if (ranks == 1) return largest_cost(cost, one);
  std::int64_t best = std::numeric_limits<std::int64_t>::max();
  for (index_t end = begin; end <= n; ++end) {
    const std::int64_t head = largest_cost(cost, Ranges{{begin, end}});
    best = std::min(best, std::max(head, brute_force(cost, ranks - 1, end)));
  }
  return best;
}

void expect_covers_in_order(const Ranges& ranges, index_t n, int ranks, const std::string& what) {
  ASSERT_EQ(ranges.size(), static_cast<std::size_t>(ranks)) << what;
  index_t at = 0;
  for (std::size_t r = 0; r < ranges.size(); ++r) {
    EXPECT_EQ(ranges[r].first, at) << what << " rank " << r;
    EXPECT_LE(ranges[r].first, ranges[r].second) << what << " rank " << r;
    // While blocks last every rank gets one; the extra ranks come last.
    EXPECT_EQ(ranges[r].second > ranges[r].first, static_cast<index_t>(r) < n) << what << " rank " << r;
    at = ranges[r].second;
  }
  EXPECT_EQ(at, n) << what;
}

TEST(DistPartition, ExactAgainstBruteForce) {
  XorShift g(7);
  int cases = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const auto n = static_cast<std::size_t>(g.next_u64() % 9);
    const int ranks = 1 + static_cast<int>(g.next_u64() % 4);
    const bool sparse = trial % 3 == 0;  // many zero costs
    std::vector<std::int64_t> cost(n);
    for (auto& c : cost) c = sparse && g.next_u64() % 2 ? 0 : static_cast<std::int64_t>(g.next_u64() % 30);
    const auto ranges = partition_blocks(cost, ranks);
    std::string what = "ranks " + std::to_string(ranks) + " costs";
    for (auto c : cost) what += fmt::format(" {}", c);
    expect_covers_in_order(ranges, static_cast<index_t>(n), ranks, what);
    ASSERT_EQ(largest_cost(cost, ranges), brute_force(cost, ranks)) << what;
    ++cases;
  }
  EXPECT_EQ(cases, 3000);
}

TEST(DistPartition, KnownSplits) {
  const std::vector<std::int64_t> cost{1, 2, 3, 4, 5, 6, 7, 8, 9};
  EXPECT_EQ(partition_blocks(cost, 3), (Ranges{{0, 5}, {5, 7}, {7, 9}}));
  EXPECT_EQ(partition_blocks(cost, 1), (Ranges{{0, 9}}));
  // One heavy block: it gets a rank of its own.
  const std::vector<std::int64_t> heavy{1, 1, 100, 1, 1};
  EXPECT_EQ(largest_cost(heavy, partition_blocks(heavy, 3)), 100);
  // All free: still one block per rank.
  const std::vector<std::int64_t> zero(4, 0);
  EXPECT_EQ(partition_blocks(zero, 2), (Ranges{{0, 3}, {3, 4}}));
}

TEST(DistPartition, MoreRanksThanBlocks) {
  const std::vector<std::int64_t> cost{5, 3};
  EXPECT_EQ(partition_blocks(cost, 4), (Ranges{{0, 1}, {1, 2}, {2, 2}, {2, 2}}));
  EXPECT_EQ(partition_blocks(std::span<const std::int64_t>{}, 2), (Ranges{{0, 0}, {0, 0}}));
}

TEST(DistPartition, BadInput) {
  const std::vector<std::int64_t> cost{1, 2};
  EXPECT_THROW(partition_blocks(cost, 0), Error);
  EXPECT_THROW(partition_blocks(cost, -1), Error);
  const std::vector<std::int64_t> negative{1, -2, 3};
  try {
    partition_blocks(negative, 2);
    ADD_FAILURE() << "a negative cost was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("block 1 has negative cost -2"), std::string::npos) << e.what();
  }
  const std::vector<std::int64_t> huge{std::numeric_limits<std::int64_t>::max(), 1};
  EXPECT_THROW(partition_blocks(huge, 2), Error);
}

}  // namespace
}  // namespace bitrank::dist
