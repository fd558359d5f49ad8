// Core: f16/bf16 conversions, the xorshift generator, views, memory (zeroing
// and the use counters), the thread pool.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "bitrank/dtype.hpp"
#include "bitrank/memory.hpp"
#include "bitrank/rng.hpp"
#include "bitrank/thread_pool.hpp"
#include "support/backends.hpp"

namespace bitrank {
namespace {

bool is_nan16(std::uint16_t b) { return (b & 0x7c00u) == 0x7c00u && (b & 0x3ffu) != 0; }

// Every f16 → f32 → f16 round-trips (NaNs stay NaN with the same sign).
TEST(Dtype, F16RoundTripAllPatterns) {
  int bad = 0;
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const f16 h{static_cast<std::uint16_t>(b)};
    const float f = to_f32(h);
    const f16 back = to_f16(f);
    if (is_nan16(h.bits)) {
      bad += !(std::isnan(f) && is_nan16(back.bits) && (back.bits & 0x8000u) == (h.bits & 0x8000u));
    } else {
      bad += back.bits != h.bits;
    }
  }
  EXPECT_EQ(bad, 0);
}

// f32 → f16 agrees with the compiler's own conversion (round to nearest even)
// on special values, the subnormal range, boundaries and random patterns.
TEST(Dtype, F16RoundingMatchesCompiler) {
  std::vector<float> v = {0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 65519.996f, 65520.0f, 1e10f, -1e10f,
                          std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                          5.96046448e-8f,   // smallest f16 subnormal
                          2.98023224e-8f,   // half of it: ties to even → 0
                          2.98023254e-8f,   // just above half → smallest subnormal
                          6.09755516e-5f,   // largest subnormal
                          6.10351562e-5f,   // smallest normal
                          1.00048828125f,   // tie between 1 and 1+2^-10 → 1
                          1.00146484375f};  // tie → round up to even
  XorShift g(7);
  for (int i = 0; i < 2000000; ++i) v.push_back(f32_from_bits(static_cast<std::uint32_t>(g.next_u64())));
  // Dense sweep of the f16 subnormal / small-normal exponents.
  for (std::uint32_t b = 0x32000000u; b < 0x39000000u; b += 97) v.push_back(f32_from_bits(b));
  int bad = 0;
  for (float f : v) {
    const f16 ours = to_f16(f);
    const _Float16 theirs = static_cast<_Float16>(f);
    std::uint16_t tb;
    std::memcpy(&tb, &theirs, 2);
    if (std::isnan(f)) {
      bad += !is_nan16(ours.bits);
    } else {
      bad += ours.bits != tb;
    }
  }
  EXPECT_EQ(bad, 0);
}

TEST(Dtype, Bf16) {
  EXPECT_EQ(to_bf16(1.0f).bits, 0x3f80u);
  EXPECT_EQ(to_f32(bf16{0x3f80u}), 1.0f);
  // Ties to even: 1 + 2^-8 is halfway between 1 and 1 + 2^-7 → 1.
  EXPECT_EQ(to_bf16(1.00390625f).bits, 0x3f80u);
  EXPECT_EQ(to_bf16(1.01171875f).bits, 0x3f82u);  // 1 + 3·2^-8 → up to even
  EXPECT_EQ(to_bf16(std::numeric_limits<float>::infinity()).bits, 0x7f80u);
  EXPECT_TRUE(std::isnan(to_f32(to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  // A NaN whose payload sits only in the low bits must not become inf.
  EXPECT_TRUE(std::isnan(to_f32(to_bf16(f32_from_bits(0x7f800001u)))));
  EXPECT_EQ(to_bf16(f32_from_bits(0x00000001u)).bits, 0x0000u);  // tiny subnormal rounds to 0
  EXPECT_EQ(to_bf16(3.4e38f).bits, 0x7f80u);                      // rounds past the largest finite → inf
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const bf16 h{static_cast<std::uint16_t>(b)};
    const float f = to_f32(h);
    if (!std::isnan(f)) {
      ASSERT_EQ(to_bf16(f).bits, h.bits);
    }
  }
}

// The seeds' rnd: values computed independently (Python, exact integer xorshift).
TEST(Rng, MatchesSeedSequence) {
  const auto v = rnd(4, 60, 2.0f);
  EXPECT_EQ(v[0], 1.0115853548049927f);
  EXPECT_EQ(v[1], 1.9033631086349487f);
  EXPECT_EQ(v[2], 0.6385183334350586f);
  EXPECT_EQ(v[3], 1.9986071586608887f);
}

// gaussian: moments of 20000 values within 4 standard errors (mean ±0.028,
// variance ±0.04, P(|x| < 1) = 0.6827 ± 0.013), odd lengths, determinism.
TEST(Rng, GaussianMoments) {
  const std::size_t n = 20000;
  const auto v = gaussian(n, 3);
  double sum = 0, sq = 0;
  std::size_t inside = 0;
  for (float x : v) {
    sum += x;
    sq += double(x) * x;
    inside += std::fabs(x) < 1.0f;
  }
  const double mean = sum / n, var = sq / n - mean * mean;
  EXPECT_NEAR(mean, 0.0, 0.028);
  EXPECT_NEAR(var, 1.0, 0.04);
  EXPECT_NEAR(double(inside) / n, 0.6827, 0.013);
  EXPECT_EQ(gaussian(n, 3), v);
  EXPECT_NE(gaussian(n, 4), v);
  const auto odd = gaussian(7, 3);
  EXPECT_EQ(std::vector<float>(v.begin(), v.begin() + 7), odd);
}

TEST(ThreadPool, CoversRangeOnceAndPropagatesErrors) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> hits(10007);
  pool.parallel_for(static_cast<std::int64_t>(hits.size()), [&](std::int64_t b, std::int64_t e) {
    for (auto i = b; i < e; ++i) hits[static_cast<std::size_t>(i)]++;
  });
  for (auto& h : hits) ASSERT_EQ(h.load(), 1);
  EXPECT_THROW(pool.parallel_for(100, [](std::int64_t b, std::int64_t) {
    if (b == 0) throw Error("boom");
  }), Error);
  // Nested use runs serially instead of deadlocking.
  std::atomic<int> total{0};
  pool.parallel_for(8, [&](std::int64_t b, std::int64_t e) {
    for (auto i = b; i < e; ++i) pool.parallel_for(4, [&](std::int64_t b2, std::int64_t e2) { total += static_cast<int>(e2 - b2); });
  });
  EXPECT_EQ(total.load(), 32);
}

TEST(Tensor, ViewsAndBuffers) {
  Buffer<float> b(host_memory(), 12);
  auto v = b.view(Shape{3, 4});
  EXPECT_TRUE(v.contiguous());
  EXPECT_EQ(v.ld(), 4);
  auto s = View<float>::strided(b.data(), 3, 2, 4);
  EXPECT_FALSE(s.contiguous());
  EXPECT_EQ(Shape({3, 4}).str(), "[3, 4]");
  Buffer<float> moved = std::move(b);
  EXPECT_EQ(b.data(), nullptr);
  EXPECT_EQ(moved.size(), 12u);
}

// Memory::zero clears exactly the bytes asked for, on every backend's memory
// (host memset, cudaMemsetAsync) and through the default (zeros uploaded in
// chunks, here across a chunk boundary).
class UploadOnlyMemory final : public Memory {
 public:
  void* allocate(std::size_t bytes) override { return host_memory().allocate(bytes); }
  void release(void* p) noexcept override { host_memory().release(p); }
  void upload(void* dst, const void* src, std::size_t bytes) override { host_memory().upload(dst, src, bytes); }
  void download(void* dst, const void* src, std::size_t bytes) override { host_memory().download(dst, src, bytes); }
  bool host_accessible() const override { return true; }
};

void expect_zeroes_range(Memory& mem, const std::string& name) {
  const std::size_t n = 70000;  // > the default's 64 KiB chunk in bytes/4
  Buffer<float> b(mem, n);
  b.upload(std::vector<float>(n, 1.5f));
  mem.zero(b.data() + 3, (n - 5) * sizeof(float));
  mem.synchronize();
  const auto v = b.download();
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(v[i], i < 3 || i >= n - 2 ? 1.5f : 0.0f) << name << " at " << i;
  b.zero();
  for (float x : b.download()) ASSERT_EQ(x, 0.0f) << name;
}

TEST(Memory, ZeroClearsExactlyTheRange) {
  expect_zeroes_range(host_memory(), "host");
  UploadOnlyMemory up;
  expect_zeroes_range(up, "default zero");
  for (const auto& name : test::available_backends()) expect_zeroes_range(*test::backend(name).memory, name);
}

// Host memory does not track its use (0); a memory that does (cuda's device
// memory, where a GPU is visible) counts live blocks by size class, keeps the
// peak, and restarts it from the current use on reset_peak().
TEST(Memory, UseCountersTrackLiveBlocksAndThePeak) {
  {
    Buffer<float> b(host_memory(), 1000);
    EXPECT_EQ(host_memory().current_bytes(), 0u);
    EXPECT_EQ(host_memory().peak_bytes(), 0u);
  }
  bool tracked = false;
  for (const auto& name : test::available_backends()) {
    Memory& mem = *test::backend(name).memory;
    if (mem.host_accessible()) continue;
    tracked = true;
    mem.synchronize();
    const std::size_t base = mem.current_bytes();
    EXPECT_GT(base, 0u) << name;  // the backend's own workspace at least
    mem.reset_peak();
    EXPECT_EQ(mem.peak_bytes(), base) << name;
    {
      Buffer<float> big(mem, (3u << 20) / sizeof(float));  // 3 MiB: two 2 MiB pages
      EXPECT_EQ(mem.current_bytes(), base + (4u << 20)) << name;
      {
        Buffer<float> small(mem, 250);  // 1000 bytes: the 1 KiB class
        EXPECT_EQ(mem.current_bytes(), base + (4u << 20) + 1024) << name;
      }
      EXPECT_EQ(mem.current_bytes(), base + (4u << 20)) << name;
    }
    EXPECT_EQ(mem.current_bytes(), base) << name;
    EXPECT_EQ(mem.peak_bytes(), base + (4u << 20) + 1024) << name;
    mem.reset_peak();
    EXPECT_EQ(mem.peak_bytes(), base) << name;
  }
  if (!tracked) GTEST_SKIP() << "no backend with tracked memory here (cuda: no GPU visible or not built)";
}

}  // namespace
}  // namespace bitrank
