// Staging and GEMM: exact tests on the reference and every backend, and bad input.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "bitrank/rng.hpp"
#include "support/backends.hpp"
#include "support/expect.hpp"
#include "support/host_values.hpp"

namespace bitrank {
namespace {

using test::upload;

Buffer<f16> f16_filled(Memory& mem, index_t n, std::uint16_t bits) {
  Buffer<f16> b(mem, static_cast<std::size_t>(n));
  std::vector<f16> v(static_cast<std::size_t>(n), f16{bits});
  b.upload(v);
  return b;
}

// Transposed staging is the transpose of staging, bit for bit in f16, with
// padded rows and tokens zero: 70 tokens → 96 padded tokens, k 200 → 256
// rows; with a column factor and scale 1024, and without and scale 0.5.
// Both destinations start poisoned (1.0 in f16) so an unwritten pad shows.
template <class T>
void stage_transposed_matches_stage(Backend<T>& be) {
  const index_t ntok = 70, k = 200, tokens = pad_tokens(ntok), rows = pad_rows(k);
  ASSERT_EQ(tokens, 96);
  ASSERT_EQ(rows, 256);
  auto src = upload(be, rnd(static_cast<std::size_t>(ntok * k), 3, 3.0f));
  auto col = upload(be, rnd(static_cast<std::size_t>(k), 4, 2.0f));
  for (const bool with_col : {true, false}) {
    const float scale = with_col ? 1024.0f : 0.5f;
    const CView<T> factor = with_col ? CView<T>(col.view({k})) : CView<T>{};
    auto staged = f16_filled(*be.memory, pad_rows(ntok) * k, 0x3c00);
    auto transposed = f16_filled(*be.memory, rows * tokens, 0x3c00);
    be.gemm().stage(src.view({ntok, k}), factor, scale, staged.view({pad_rows(ntok), k}));
    be.gemm().stage_transposed(src.view({ntok, k}), factor, scale, transposed.view({rows, tokens}));
    be.synchronize();
    const auto a = staged.download(), t = transposed.download();
    index_t bad = 0, nonzero = 0;
    for (index_t row = 0; row < rows; ++row)
      for (index_t tok = 0; tok < tokens; ++tok) {
        const std::uint16_t want = row < k && tok < ntok ? a[static_cast<std::size_t>(tok * k + row)].bits : 0;
        bad += t[static_cast<std::size_t>(row * tokens + tok)].bits != want;
        nonzero += want != 0;
      }
    for (index_t i = ntok * k; i < pad_rows(ntok) * k; ++i) bad += a[static_cast<std::size_t>(i)].bits != 0;
    std::printf("  [exact] stage_transposed vs stage on %s (col %d, scale %g): %lld mismatches of %lld\n",
                be.name.c_str(), with_col, scale, static_cast<long long>(bad), static_cast<long long>(rows * tokens));
    EXPECT_EQ(bad, 0) << be.name << " with_col " << with_col;
    EXPECT_EQ(nonzero, ntok * k) << be.name;  // random data: no staged value is zero
  }
}

TEST(Gemm, StageTransposedMatchesStage) {
  stage_transposed_matches_stage(test::ref_backend());
  for (const auto& name : test::available_backends()) stage_transposed_matches_stage(test::backend(name));
}

// The staged value is f16(f32(f32(src·col)·scale)), written out here
// independently of any backend.
TEST(Gemm, StageValueIsTheContract) {
  const index_t m = 5, k = 33;
  const auto x = rnd(static_cast<std::size_t>(m * k), 11, 40.0f), c = rnd(static_cast<std::size_t>(k), 12, 3.0f);
  const float scale = 2048.0f;
  auto check = [&](auto& be) {
    auto src = upload(be, x);
    auto col = upload(be, c);
    auto dst = f16_filled(*be.memory, pad_rows(m) * k, 0x7e5a);
    be.gemm().stage(src.view({m, k}), col.view({k}), scale, dst.view({pad_rows(m), k}));
    be.synchronize();
    const auto got = dst.download();
    int bad = 0, inf = 0;
    for (index_t i = 0; i < pad_rows(m) * k; ++i) {
      const auto s = static_cast<std::size_t>(i);
      const std::uint16_t want = i < m * k ? to_f16((x[s] * c[s % k]) * scale).bits : 0;
      bad += got[s].bits != want;
      inf += (want & 0x7fffu) == 0x7c00u;
    }
    EXPECT_EQ(bad, 0) << be.name;
    EXPECT_GT(inf, 0) << "the data should overflow f16 somewhere";
  };
  check(test::ref_backend());
  for (const auto& name : test::available_backends()) check(test::backend(name));
}

// GEMM into a column slice of a wider output: the other columns keep their
// poison bit for bit, the slice equals the same GEMM into its own matrix.
template <class T>
void gemm_slice_keeps_other_columns(Backend<T>& be) {
  const index_t m = 37, n = 40, k = 72, width = 131, col0 = 50;
  const auto av = rnd(static_cast<std::size_t>(pad_rows(m) * k), 21, 3.0f);
  const auto pv = rnd(static_cast<std::size_t>(n * k), 22, 1.0f);
  std::vector<f16> ah(av.size()), ph(pv.size());
  for (std::size_t i = 0; i < av.size(); ++i) ah[i] = to_f16(av[i]);
  for (std::size_t i = 0; i < pv.size(); ++i) ph[i] = to_f16(pv[i]);
  Buffer<f16> act(*be.memory, ah.size()), plane(*be.memory, ph.size());
  act.upload(ah);
  plane.upload(ph);
  const T poison = static_cast<T>(-31337.25);
  Buffer<T> wide(*be.memory, static_cast<std::size_t>(m * width)), own(*be.memory, static_cast<std::size_t>(m * n));
  wide.upload(std::vector<T>(static_cast<std::size_t>(m * width), poison));
  be.gemm().gemm(act.view({pad_rows(m), k}), plane.view({n, k}), 0.5f, View<T>::strided(wide.data() + col0, m, n, width));
  be.gemm().gemm(act.view({pad_rows(m), k}), plane.view({n, k}), 0.5f, own.view({m, n}));
  be.synchronize();
  const auto w = wide.download(), o = own.download();
  index_t touched = 0, differ = 0;
  for (index_t i = 0; i < m; ++i)
    for (index_t j = 0; j < width; ++j) {
      const T v = w[static_cast<std::size_t>(i * width + j)];
      if (j < col0 || j >= col0 + n)
        touched += v != poison;
      else
        differ += v != o[static_cast<std::size_t>(i * n + j - col0)];
    }
  EXPECT_EQ(touched, 0) << be.name << ": columns outside the slice were written";
  EXPECT_EQ(differ, 0) << be.name << ": the slice differs from the same GEMM into its own matrix";
}

TEST(Gemm, SliceKeepsOtherColumns) {
  gemm_slice_keeps_other_columns(test::ref_backend());
  for (const auto& name : test::available_backends()) gemm_slice_keeps_other_columns(test::backend(name));
}

// Small integers times ±1 with a power-of-two oscale: every partial sum is
// exact in f32, so every backend must equal the reference exactly (checks
// the operand layouts, the transposition and oscale with zero tolerance).
TEST(Gemm, ExactOnIntegers) {
  const index_t m = 70, n = 128, k = 384;
  const auto av = rnd(static_cast<std::size_t>(pad_rows(m) * k), 31, 8.0f);
  const auto pv = rnd(static_cast<std::size_t>(n * k), 32, 1.0f);
  std::vector<f16> ah(av.size()), ph(pv.size());
  for (std::size_t i = 0; i < av.size(); ++i) ah[i] = to_f16(static_cast<float>(static_cast<int>(av[i])));
  for (std::size_t i = 0; i < pv.size(); ++i) ph[i] = to_f16(pv[i] >= 0 ? 1.0f : -1.0f);
  auto& ref = test::ref_backend();
  Buffer<f16> ra(host_memory(), ah.size()), rp(host_memory(), ph.size());
  ra.upload(ah);
  rp.upload(ph);
  Buffer<double> want(host_memory(), static_cast<std::size_t>(m * n));
  ref.gemm().gemm(ra.view({pad_rows(m), k}), rp.view({n, k}), 0.125f, want.view({m, n}));
  const auto w = want.download();
  double norm = 0;
  for (double v : w) norm += v * v;
  ASSERT_GT(norm, 0);
  for (const auto& name : test::available_backends()) {
    auto& be = test::backend(name);
    Buffer<f16> a(*be.memory, ah.size()), p(*be.memory, ph.size());
    a.upload(ah);
    p.upload(ph);
    Buffer<float> out(*be.memory, static_cast<std::size_t>(m * n));
    be.gemm().gemm(a.view({pad_rows(m), k}), p.view({n, k}), 0.125f, out.view({m, n}));
    be.synchronize();
    const auto g = out.download();
    index_t bad = 0;
    for (std::size_t i = 0; i < g.size(); ++i) bad += static_cast<double>(g[i]) != w[i];
    EXPECT_EQ(bad, 0) << name;
  }
}

TEST(Gemm, BadInputIsAnError) {
  auto& ops = test::cpu_backend().gemm();
  Buffer<float> src(host_memory(), 70 * 1000), col(host_memory(), 1000), out(host_memory(), 70 * 1000);
  Buffer<f16> dst(host_memory(), 256 * 1000), plane(host_memory(), 1000 * 64);
  // Staging: unpadded destination, wrong column factor, non-finite scale, empty source.
  test::expect_error([&] { ops.stage(src.view({70, 200}), {}, 1.0f, dst.view({70, 200})); },
               "stage: dst has shape [70, 200], expected [128, 200]");
  test::expect_error([&] { ops.stage(src.view({70, 200}), col.view({199}), 1.0f, dst.view({128, 200})); },
               "stage: col has shape [199], expected [200]");
  test::expect_error([&] { ops.stage(src.view({70, 200}), {}, 1.0f / 0.0f, dst.view({128, 200})); }, "stage: scale must be finite");
  test::expect_error([&] { ops.stage(src.view({0, 200}), {}, 1.0f, dst.view({0, 200})); }, "stage: src is empty");
  test::expect_error([&] { ops.stage_cols(src.view({70, 1000}), 900, 1.0f, dst.view({128, 200})); },
               "stage_cols: columns [900, 1100) outside src [70, 1000]");
  test::expect_error([&] { ops.stage_cols(src.view({70, 1000}), 0, 1.0f, dst.view({70, 200})); }, "stage_cols: dst has 70 rows");
  test::expect_error([&] { ops.stage_transposed(src.view({70, 200}), {}, 1.0f, dst.view({256, 70})); },
               "stage_transposed: dst has shape [256, 70], expected [256, 96]");
  // GEMM: inner sizes differ, too few act rows, non-finite oscale, non-unit column stride.
  test::expect_error([&] { ops.gemm(dst.view({128, 64}), plane.view({32, 63}), 1.0f, out.view({70, 32})); },
               "gemm: plane has shape [32, 63], expected [32, 64]");
  test::expect_error([&] { ops.gemm(dst.view({64, 64}), plane.view({32, 64}), 1.0f, out.view({70, 32})); }, "gemm: act [64, 64] has fewer rows");
  test::expect_error([&] { ops.gemm(dst.view({128, 64}), plane.view({32, 64}), 0.0f / 0.0f, out.view({70, 32})); }, "gemm: oscale must be finite");
  auto bad_stride = out.view({70, 32});
  bad_stride.strides[1] = 2;
  test::expect_error([&] { ops.gemm(dst.view({128, 64}), plane.view({32, 64}), 1.0f, bad_stride); }, "gemm: out [70, 32] must have unit column stride");
  test::expect_error([&] { ops.gemm(dst.view({128, 64}), plane.view({32, 64}), 1.0f, View<float>::strided(out.data(), 70, 32, 31)); },
               "row stride ≥ 32");
}

}  // namespace
}  // namespace bitrank
