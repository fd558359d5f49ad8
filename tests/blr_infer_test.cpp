// The CPU's bit-reading blr_infer kernel at every SIMD level this CPU has
// (scalar and AVX2 forced on an AVX-512 machine): against the f64
// reference, and equal to the bit across levels and thread counts, as
// blr.hpp's Numerics promises. The op itself is in the parity cases
// (tests/parity/blr_cases.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <vector>

#include "bitrank/rng.hpp"
#include "cpu/blr_infer.hpp"
#include "support/backends.hpp"
#include "support/simd_levels.hpp"

namespace bitrank {
namespace {

using cpu::SimdLevel;

// A random layer on the host, its scales as f32 and as f64 (equal values).
struct HostLayer {
  index_t m, n, r, paths;
  std::vector<std::vector<std::uint32_t>> bits_u, bits_v;
  std::vector<std::vector<float>> h, l, g;
  std::vector<std::vector<double>> h64, l64, g64;

  HostLayer(index_t m_, index_t n_, index_t r_, index_t paths_, std::uint64_t seed) : m(m_), n(n_), r(r_), paths(paths_) {
    XorShift bits(seed);
    const auto words = [&](index_t rows) {
      std::vector<std::uint32_t> w(static_cast<std::size_t>(rows * (r / 32)));
      for (auto& v : w) v = static_cast<std::uint32_t>(bits.next_u64() >> 11);
      return w;
    };
    const auto scales = [&](index_t len, std::uint64_t s, float add) {
      auto v = rnd(static_cast<std::size_t>(len), s, 0.5f);
      for (auto& e : v) e = add + std::fabs(e);
      return v;
    };
    for (index_t p = 0; p < paths; ++p) {
      bits_u.push_back(words(m));
      bits_v.push_back(words(n));
      h.push_back(scales(m, seed + 10 + p, 0.02f));
      l.push_back(scales(r, seed + 20 + p, 0.5f));
      g.push_back(scales(n, seed + 30 + p, 0.1f));
      h64.emplace_back(h.back().begin(), h.back().end());
      l64.emplace_back(l.back().begin(), l.back().end());
      g64.emplace_back(g.back().begin(), g.back().end());
    }
  }

  template <class T>
  std::vector<BlrPath<T>> views(const std::vector<std::vector<T>>& hv, const std::vector<std::vector<T>>& lv,
                                const std::vector<std::vector<T>>& gv) const {
    std::vector<BlrPath<T>> out;
    for (std::size_t p = 0; p < bits_u.size(); ++p)
      out.push_back({CView<std::uint32_t>(bits_u[p].data(), Shape{m, r / 32}), CView<std::uint32_t>(bits_v[p].data(), Shape{n, r / 32}),
                     CView<T>(hv[p].data(), Shape{m}), CView<T>(lv[p].data(), Shape{r}), CView<T>(gv[p].data(), Shape{n}),
                     {}, {}, {}});
    return out;
  }
};

// y of the kernel at `level` on a pool of `threads`, y poisoned first.
std::vector<float> run_kernel(const HostLayer& hl, const std::vector<float>& x, index_t ntok, SimdLevel level,
                              unsigned threads) {
  ThreadPool pool(threads);
  const auto paths = hl.views(hl.h, hl.l, hl.g);
  std::vector<float> y(static_cast<std::size_t>(ntok * hl.m), std::numeric_limits<float>::quiet_NaN());
  std::vector<float> c(static_cast<std::size_t>(cpu::blr_infer_scratch(hl.paths, ntok, hl.r)), std::numeric_limits<float>::quiet_NaN());
  cpu::blr_infer_bits(BlrLayer<float>{hl.m, hl.n, hl.r, paths}, x.data(), ntok, y.data(), c.data(), level, pool);
  return y;
}

std::vector<double> run_ref(const HostLayer& hl, const std::vector<float>& x, index_t ntok) {
  const auto paths = hl.views(hl.h64, hl.l64, hl.g64);
  const std::vector<double> x64(x.begin(), x.end());
  std::vector<double> y(static_cast<std::size_t>(ntok * hl.m));
  test::ref_backend().blr().blr_infer(BlrLayer<double>{hl.m, hl.n, hl.r, paths}, CView<double>(x64.data(), Shape{ntok, hl.n}),
                                      View<double>(y.data(), Shape{ntok, hl.m}));
  return y;
}

double rel_err(const std::vector<float>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    num += d * d;
    den += want[i] * want[i];
  }
  return std::isnan(num) ? INFINITY : std::sqrt(num / den);
}

struct InferShape {
  index_t m, n, r, ntok, paths;
};

TEST(BlrInfer, EveryLevelMatchesTheReferenceAndTheOthersToTheBit) {
  // m, n not multiples of 16 (r is a multiple of 32 by the format); ranks
  // of 1–9 words, so every block size and tail of the rank pass runs; all
  // token counts up to 8 and two past it (13, 16: several token groups);
  // 1000x577 and 577x1536 are large enough to thread.
  const InferShape shapes[] = {{75, 53, 32, 1, 1},   {53, 75, 96, 2, 2},    {17, 33, 160, 3, 1}, {129, 211, 224, 4, 2},
                               {31, 47, 288, 5, 2},  {100, 90, 64, 6, 1},   {67, 45, 128, 7, 2}, {129, 211, 192, 8, 2},
                               {1000, 577, 224, 1, 2}, {577, 1536, 192, 8, 2},  {90, 70, 96, 13, 2},   {70, 90, 64, 16, 1}};
  const std::vector<cpu::SimdLevel> levels = test::simd_levels_here("blr_infer");
  std::uint64_t seed = 500;
  for (const InferShape& s : shapes) {
    const HostLayer hl(s.m, s.n, s.r, s.paths, seed += 100);
    const auto x = rnd(static_cast<std::size_t>(s.ntok * s.n), seed + 1, 2.0f);
    const auto want = run_ref(hl, x, s.ntok);
    const auto scalar = run_kernel(hl, x, s.ntok, SimdLevel::scalar, 1);
    for (SimdLevel level : levels)
      for (unsigned threads : {1u, 2u}) {
        const auto got = run_kernel(hl, x, s.ntok, level, threads);
        const double e = rel_err(got, want);
        // f32 sums over n and r terms, no f16 rounding: ~1e-7 per term and
        // ~1e-6 over the sums; a lost term or wrong sign is O(1e-2).
        EXPECT_LE(e, 1e-5) << cpu::simd_level_name(level) << " " << threads << " threads, " << s.m << "x" << s.n
                           << " r" << s.r << " t" << s.ntok << " p" << s.paths;
        EXPECT_EQ(0, std::memcmp(got.data(), scalar.data(), got.size() * sizeof(float)))
            << cpu::simd_level_name(level) << " " << threads << " threads differs from scalar at " << s.m << "x" << s.n
            << " r" << s.r << " t" << s.ntok;
        if (threads == 1 && s.ntok == 8)
          std::printf("  [blr_infer] %-6s %4ldx%-4ld r%-3ld t%ld p%ld rel %.2e\n", cpu::simd_level_name(level),
                      static_cast<long>(s.m), static_cast<long>(s.n), static_cast<long>(s.r), static_cast<long>(s.ntok),
                      static_cast<long>(s.paths), e);
      }
  }
}

}  // namespace
}  // namespace bitrank
