// The tensor-core tile primitives on their own (tests/support/tile_check.hpp):
// one 3xBF16 product C = A·Bᵀ on mma.sync (tile_mma.cuh) and on wgmma
// (tile_wgmma.cuh: core-matrix and 128-byte-swizzle layouts) against the
// f64 product on the host, the two against
// each other, and their rates side by side. Skipped without a GPU.
//
// Tolerances and why: each operand splits as hi + lo with |x − hi − lo| ≤
// 2⁻¹⁸|x|, and the product drops lo·lo (≤ 2⁻¹⁶ of a term): every term is
// within ~2⁻¹⁶ of exact, in random directions, and the f32 sum of ≤ 128
// terms adds ≤ 128·2⁻²⁴. Relative L2 ≤ 2e-5 against f64 (the GDN ops built
// on these products hold 2e-4). The two paths are held to the same 2e-5
// against each other, not to bitwise equality, since neither instruction
// specifies its order of accumulation within a k step (on the H200 they
// came out bitwise equal: docs/runs/gpu_tile_h200.txt). The rate kernels'
// sums of 512 repeated products agree to 1e-4 (f32 accumulation of 512
// equal terms: ≤ 512·2⁻²⁴ = 3e-5 each way).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <tuple>
#include <utility>
#include <vector>

#include "bitrank/rng.hpp"
#include "support/backends.hpp"
#include "support/parity.hpp"

#ifdef BITRANK_HAS_CUDA
#include "support/tile_check.hpp"
#endif

namespace bitrank {
namespace {

#ifdef BITRANK_HAS_CUDA
// Gaussian rows scaled by 2^e, e spread over [−8, 8]: the split must hold
// across exponents, not only for values near 1.
std::vector<float> operand(int rows, int k, std::uint64_t seed) {
  auto v = gaussian(static_cast<std::size_t>(rows * k), seed);
  for (int r = 0; r < rows; ++r)
    for (int i = 0; i < k; ++i) v[static_cast<std::size_t>(r * k + i)] *= std::ldexp(1.0f, (r * 7 + static_cast<int>(seed)) % 17 - 8);
  return v;
}

std::vector<double> host_product(int n, int k, const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<double> c(static_cast<std::size_t>(64 * n));
  for (int m = 0; m < 64; ++m)
    for (int j = 0; j < n; ++j) {
      double s = 0;
      for (int i = 0; i < k; ++i) s += static_cast<double>(a[m * k + i]) * b[j * k + i];
      c[static_cast<std::size_t>(m * n + j)] = s;
    }
  return c;
}
#endif

TEST(TileCuda, SplitProductsMatchTheHost) {
  if (!test::cuda_available()) GTEST_SKIP() << "no CUDA device visible";
#ifdef BITRANK_HAS_CUDA
  for (const int n : {32, 64, 128})
    for (const int k : {64, 128}) {
      const auto a = operand(64, k, 11 + n + k), b = operand(n, k, 12 + n + k);
      const auto want = host_product(n, k, a, b);
      const auto sync = cuda::tile_split_product(cuda::TilePath::mma_sync, n, k, a, b);
      std::vector<double> sync_d(sync.begin(), sync.end());
      const double e_sync = test::rel_l2(sync, want);
      std::printf("[tile] 64x%dx%d 3xBF16: rel L2 vs f64: mma.sync %.3e\n", n, k, e_sync);
      EXPECT_LE(e_sync, 2e-5) << "mma.sync, n=" << n << " k=" << k;
      // wgmma with each operand K-major or MN-major (read transposed)
      for (const auto& [path, name] : {std::pair{cuda::TilePath::wgmma, "wgmma"},
                                       std::pair{cuda::TilePath::wgmma_mn_a, "wgmma A MN-major"},
                                       std::pair{cuda::TilePath::wgmma_mn_b, "wgmma B MN-major"},
                                       std::pair{cuda::TilePath::wgmma_mn_ab, "wgmma A, B MN-major"},
                                       std::pair{cuda::TilePath::sw128, "sw128 K-major"},
                                       std::pair{cuda::TilePath::sw128_mn_b, "sw128 B MN-major"},
                                       std::pair{cuda::TilePath::sw128_mn_ab, "sw128 A, B MN-major"}}) {
        const auto wg = cuda::tile_split_product(path, n, k, a, b);
        const double e_wg = test::rel_l2(wg, want), e_pair = test::rel_l2(wg, sync_d);
        std::printf("[tile] 64x%dx%d 3xBF16: rel L2 vs f64: %-20s %.3e; vs mma.sync %.3e\n", n, k, name, e_wg,
                    e_pair);
        EXPECT_LE(e_wg, 2e-5) << name << ", n=" << n << " k=" << k;
        EXPECT_LE(e_pair, 2e-5) << name << " vs mma.sync, n=" << n << " k=" << k;
      }
    }
#endif
}

TEST(TileCuda, SplitProductRates) {
  if (!test::cuda_available()) GTEST_SKIP() << "no CUDA device visible";
#ifdef BITRANK_HAS_CUDA
  const int blocks = 2 * cuda::tile_device_sms(), iters = 512;
  cuda::tile_split_product_rate(cuda::TilePath::wgmma, blocks, 8);  // warm-up (module load, clocks)
  const auto sync = cuda::tile_split_product_rate(cuda::TilePath::mma_sync, blocks, iters);
  std::vector<double> sync_d(sync.sums.begin(), sync.sums.end());
  // bf16 mma work: three 64×128×64 products per 3xBF16 product.
  const double flop = 3.0 * 2 * 64 * 128 * 64 * static_cast<double>(iters) * blocks;
  std::printf("[tile] 64x128x64 3xBF16, %d blocks x %d products: mma.sync %.3f ms (%.0f TFLOP/s)\n", blocks, iters,
              sync.seconds * 1e3, flop / sync.seconds * 1e-12);
  for (const auto& [path, wg_n, name] :
       {std::tuple{cuda::TilePath::wgmma, 64, "wgmma K-major n64"}, std::tuple{cuda::TilePath::wgmma_mn_ab, 64, "wgmma MN-major n64"},
        std::tuple{cuda::TilePath::wgmma, 32, "wgmma K-major n32"}, std::tuple{cuda::TilePath::wgmma_mn_ab, 32, "wgmma MN-major n32"},
        std::tuple{cuda::TilePath::wgmma, -64, "wgmma n64 2 chains"},
        std::tuple{cuda::TilePath::sw128, 64, "sw128 K-major n64"}, std::tuple{cuda::TilePath::sw128_mn_ab, 64, "sw128 MN-major n64"}}) {
    const auto wg = cuda::tile_split_product_rate(path, blocks, iters, wg_n);
    const double e = test::rel_l2(wg.sums, sync_d);
    std::printf("[tile] 64x128x64 3xBF16, %d blocks x %d products: %-20s %.3f ms (%.0f TFLOP/s)  /mma.sync time %.2f; "
                "sums agree to %.2e\n",
                blocks, iters, name, wg.seconds * 1e3, flop / wg.seconds * 1e-12, wg.seconds / sync.seconds, e);
    EXPECT_LE(e, 1e-4) << name;
  }
#endif
}

}  // namespace
}  // namespace bitrank
