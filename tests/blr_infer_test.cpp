// The CPU's bit-reading blr_infer kernel at every SIMD level this CPU has
// (scalar and AVX2 forced on an AVX-512 machine): against the f64
// reference, and equal to the bit across levels and thread counts, as
// blr.hpp's Numerics promises; the sign blocks it reads (ops/bitmap.hpp)
// against their definition; a layer holding only sign blocks (a model's on
// the CPU) against the same layer's bitmaps. The op itself is in the parity
// cases (tests/parity/blr_cases.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <vector>

#include "bitrank/rng.hpp"
#include "cpu/blr_infer.hpp"
#include "support/backends.hpp"
#include "support/expect.hpp"
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
  auto paths = hl.views(hl.h, hl.l, hl.g);
  const index_t words = sign_blocks_words(hl.m, hl.n, hl.r);
  std::vector<std::uint32_t> blocks(static_cast<std::size_t>(hl.paths * words), 0xdeadbeefu);
  for (index_t p = 0; p < hl.paths; ++p) {
    std::uint32_t* at = blocks.data() + p * words;
    make_sign_blocks(hl.bits_u[p].data(), hl.bits_v[p].data(), hl.m, hl.n, hl.r, at);
    paths[p].point_sign_blocks(at, hl.m, hl.n, hl.r);
  }
  std::vector<float> y(static_cast<std::size_t>(ntok * hl.m), std::numeric_limits<float>::quiet_NaN());
  std::vector<float> tables(static_cast<std::size_t>(cpu::blr_infer_scratch(hl.paths, ntok, hl.n, hl.r)),
                            std::numeric_limits<float>::quiet_NaN());
  cpu::blr_infer_bits(BlrLayer<float>{hl.m, hl.n, hl.r, paths}, x.data(), ntok, y.data(), tables.data(), level, pool);
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

// Every word of both block layouts against the definition in ops/bitmap.hpp,
// and back, at shapes whose m and n are not multiples of 16 and 32.
TEST(SignBlocks, HoldEachSignWhereTheLayoutSaysAndInvertExactly) {
  for (const auto& [rows, r] : {std::pair<index_t, index_t>{75, 64}, {16, 32}, {33, 96}, {577, 192}}) {
    const HostLayer hl(rows, rows + 7, r, 1, static_cast<std::uint64_t>(rows * r));
    const index_t m = hl.m, n = hl.n, words = r / 32, wn = sign_words(n);
    std::vector<std::uint32_t> u(static_cast<std::size_t>(sign_blocks_u_words(m, r)), 0xdeadbeefu);
    std::vector<std::uint32_t> vt(static_cast<std::size_t>(sign_blocks_vt_words(n, r)), 0xdeadbeefu);
    make_sign_blocks_u(hl.bits_u[0].data(), m, r, u.data());
    make_sign_blocks_vt(hl.bits_v[0].data(), n, r, vt.data());
    for (index_t b = 0; b < (m + 15) / 16; ++b)
      for (index_t w = 0; w < words; ++w)
        for (index_t l = 0; l < 16; ++l) {
          const index_t j = 16 * b + l;
          ASSERT_EQ(u[(b * words + w) * 16 + l], j < m ? hl.bits_u[0][j * words + w] : 0u) << "u " << b << " " << w << " " << l;
        }
    for (index_t k = 0; k < r; ++k)
      for (index_t i = 0; i < 32 * wn; ++i) {
        const bool want = i < n && sign_bit(hl.bits_v[0].data() + i * words, k);
        ASSERT_EQ(want, ((vt[(k / 16 * wn + i / 32) * 16 + k % 16] >> (i % 32)) & 1u) != 0) << "vt k " << k << " i " << i;
      }
    std::vector<std::uint32_t> back_u(hl.bits_u[0].size(), 0xdeadbeefu), back_v(hl.bits_v[0].size(), 0xdeadbeefu);
    sign_bitmap_from_blocks_u(u.data(), m, r, back_u.data());
    sign_bitmap_from_blocks_vt(vt.data(), n, r, back_v.data());
    EXPECT_EQ(back_u, hl.bits_u[0]) << m << "x" << n << " r" << r;
    EXPECT_EQ(back_v, hl.bits_v[0]) << m << "x" << n << " r" << r;
  }
}

// blr_infer on the CPU backend over a layer with only sign blocks (as a model
// on the CPU holds it) gives the bitmaps' result to the bit, in the kernel
// (≤ 16 tokens) and in the forward (17: bitmaps formed from the blocks);
// a backend that reads bitmaps refuses such a layer.
TEST(SignBlocks, ALayerOfBlocksAloneGivesTheBitmapsResult) {
  const HostLayer hl(129, 211, 160, 2, 77);
  std::vector<BlrPath<float>> bitmaps = hl.views(hl.h, hl.l, hl.g), blocks = bitmaps;
  const index_t words = sign_blocks_words(hl.m, hl.n, hl.r);
  std::vector<std::uint32_t> store(static_cast<std::size_t>(2 * words));
  for (index_t p = 0; p < 2; ++p) {
    std::uint32_t* at = store.data() + p * words;
    make_sign_blocks(hl.bits_u[p].data(), hl.bits_v[p].data(), hl.m, hl.n, hl.r, at);
    BlrPath<float>& path = blocks[static_cast<std::size_t>(p)];
    path.sign_u = path.sign_v = {};
    path.point_sign_blocks(at, hl.m, hl.n, hl.r);
  }
  Backend<float>& be = test::cpu_backend();
  for (index_t ntok : {1, 16, 17}) {
    const auto x = rnd(static_cast<std::size_t>(ntok * hl.n), 900 + ntok, 2.0f);
    std::vector<float> want(static_cast<std::size_t>(ntok * hl.m)), got(want.size());
    const CView<float> xv(x.data(), Shape{ntok, hl.n});
    be.blr().blr_infer(BlrLayer<float>{hl.m, hl.n, hl.r, bitmaps}, xv, View<float>(want.data(), Shape{ntok, hl.m}));
    be.blr().blr_infer(BlrLayer<float>{hl.m, hl.n, hl.r, blocks}, xv, View<float>(got.data(), Shape{ntok, hl.m}));
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float))) << ntok << " tokens";
  }
  const std::vector<double> x64(static_cast<std::size_t>(hl.n), 1.0);
  std::vector<double> y64(static_cast<std::size_t>(hl.m));
  std::vector<BlrPath<double>> ref_paths = hl.views(hl.h64, hl.l64, hl.g64);
  for (std::size_t p = 0; p < 2; ++p) {
    ref_paths[p].sign_u = ref_paths[p].sign_v = {};
    ref_paths[p].sign_u_blocks = blocks[p].sign_u_blocks;
    ref_paths[p].sign_vt_blocks = blocks[p].sign_vt_blocks;
  }
  test::expect_error(
      [&] {
        test::ref_backend().blr().blr_infer(BlrLayer<double>{hl.m, hl.n, hl.r, ref_paths},
                                            CView<double>(x64.data(), Shape{1, hl.n}),
                                            View<double>(y64.data(), Shape{1, hl.m}));
      },
      "has only sign blocks, which this backend does not read");
}

}  // namespace
}  // namespace bitrank
