// Parity cases of staging (bit-exact on every backend) and the f16 GEMM.
#include <cmath>

#include "support/parity.hpp"

namespace bitrank::test {
namespace {

// Values spread over many binades: f16 normals, subnormals, underflow to
// zero, overflow to inf after scaling, and exact ties of the f16 rounding.
std::vector<float> wide_range(ParityRun& p, std::size_t n) {
  auto v = p.random(n, 1.0f);
  auto e = p.random(n, 1.0f);
  for (std::size_t i = 0; i < n; ++i) v[i] = std::ldexp(v[i], static_cast<int>(e[i] * 26.0f) - 8);
  // A tie: 1 + 2^-11 lies halfway between two f16 neighbours.
  for (std::size_t i = 0; i < n; i += 97) v[i] = (i % 2 ? 1.0f : -3.0f) * (1.0f + std::ldexp(1.0f, -11));
  return v;
}

void stage_case(ParityRun& p, index_t m, index_t k, bool with_col, float scale, bool wide = false) {
  auto src = wide ? p.input({m, k}, wide_range(p, static_cast<std::size_t>(m * k))) : p.input({m, k}, 3.0f);
  auto col = p.input({k}, 2.0f);
  auto dst = p.output_f16({pad_rows(m), k});
  p.ref.gemm().stage(src.ref(), with_col ? col.ref() : CView<double>{}, scale, dst.ref());
  p.be.gemm().stage(src.be(), with_col ? col.be() : CView<float>{}, scale, dst.be());
  p.expect_equal("dst", dst);
}

void stage_cols_case(ParityRun& p, index_t m, index_t width, index_t col0, index_t k, float scale) {
  auto src = p.input({m, width}, 3.0f);
  auto dst = p.output_f16({pad_rows(m), k});
  p.ref.gemm().stage_cols(src.ref(), col0, scale, dst.ref());
  p.be.gemm().stage_cols(src.be(), col0, scale, dst.be());
  p.expect_equal("dst", dst);
}

void stage_transposed_case(ParityRun& p, index_t ntok, index_t k, bool with_col, float scale, bool wide = false) {
  auto src = wide ? p.input({ntok, k}, wide_range(p, static_cast<std::size_t>(ntok * k))) : p.input({ntok, k}, 3.0f);
  auto col = p.input({k}, 2.0f);
  auto dst = p.output_f16({pad_rows(k), pad_tokens(ntok)});
  p.ref.gemm().stage_transposed(src.ref(), with_col ? col.ref() : CView<double>{}, scale, dst.ref());
  p.be.gemm().stage_transposed(src.be(), with_col ? col.be() : CView<float>{}, scale, dst.be());
  p.expect_equal("dst", dst);
}

// Both sides multiply the same f16 numbers (their products are exact in
// f32), so the only difference is f32 against f64 summation of k terms,
// bounded by about 2^-24·√k relative for random signs (1.2e-6 at k = 384);
// measured ≤ 2.3e-7 on these cases. The DESIGN's 3e-3 budgets for the f16
// rounding of the operands, which is not part of this comparison.
constexpr double kGemmTol = 2e-6;

// act [pad_rows(m)][k] f16 ~ a staged activation; plane ±1 signs or f16 weights.
void gemm_case(ParityRun& p, index_t m, index_t n, index_t k, bool sign_plane, float oscale) {
  auto act = p.input_f16({pad_rows(m), k}, 4.0f);
  Half plane = [&] {
    if (!sign_plane) return p.input_f16({n, k}, 0.1f);
    auto v = p.random(static_cast<std::size_t>(n * k), 1.0f);
    std::vector<f16> s(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) s[i] = to_f16(v[i] >= 0 ? 1.0f : -1.0f);
    return p.input_f16({n, k}, s);
  }();
  auto out = p.output({m, n});
  p.ref.gemm().gemm(act.ref(), plane.ref(), oscale, out.ref());
  p.be.gemm().gemm(act.be(), plane.be(), oscale, out.be());
  p.expect_close("out", out, kGemmTol);
}

// GEMM into columns [col0, col0+n) of a wider [m][width] output whose other
// columns hold random values that must survive (they count in the error).
void gemm_slice_case(ParityRun& p, index_t m, index_t n, index_t k, index_t width, index_t col0) {
  auto act = p.input_f16({pad_rows(m), k}, 4.0f);
  auto plane = p.input_f16({n, k}, 1.0f);
  auto out = p.accumulator({m, width}, 50.0f);
  p.ref.gemm().gemm(act.ref(), plane.ref(), 0.25f, View<double>::strided(out.ref().data + col0, m, n, width));
  p.be.gemm().gemm(act.be(), plane.be(), 0.25f, View<float>::strided(out.be().data + col0, m, n, width));
  p.expect_close("out", out, kGemmTol);
}

// Stage then multiply, as the BLR forward does: staging is bit-exact, so the
// GEMM still sees identical operands on both sides.
void stage_gemm_case(ParityRun& p, index_t m, index_t n, index_t k, float scale) {
  auto x = p.input({m, k}, 2.0f);
  auto col = p.input({k}, 0.5f, 1.0f);
  auto plane = p.input_f16({n, k}, 1.0f);
  auto act = p.output_f16({pad_rows(m), k});
  auto out = p.output({m, n});
  p.ref.gemm().stage(x.ref(), col.ref(), scale, act.ref());
  p.be.gemm().stage(x.be(), col.be(), scale, act.be());
  p.ref.gemm().gemm(act.ref(), plane.ref(), 1.0f / scale, out.ref());
  p.be.gemm().gemm(act.be(), plane.be(), 1.0f / scale, out.be());
  p.expect_equal("act", act);
  p.expect_close("out", out, kGemmTol);
}

}  // namespace

// Staging: exact (the contract fixes the f32 arithmetic and the f16 rounding).
BR_PARITY_CASE(stage_70x384_col) { stage_case(p, 70, 384, true, 1.0f); }
BR_PARITY_CASE(stage_70x256_nocol_scale1024) { stage_case(p, 70, 256, false, 1024.0f); }
BR_PARITY_CASE(stage_130x37_col_tail) { stage_case(p, 130, 37, true, 0.5f); }  // two row tiles, odd width
BR_PARITY_CASE(stage_70x200_wide_range) { stage_case(p, 70, 200, false, 1024.0f, true); }  // subnormals, inf, ties
BR_PARITY_CASE(stage_cols_70x1000_slice) { stage_cols_case(p, 70, 1000, 384, 256, 1.0f); }
BR_PARITY_CASE(stage_cols_9x101_odd) { stage_cols_case(p, 9, 101, 13, 37, 4096.0f); }
BR_PARITY_CASE(stage_transposed_70x200_col) { stage_transposed_case(p, 70, 200, true, 1024.0f); }
BR_PARITY_CASE(stage_transposed_70x200_nocol) { stage_transposed_case(p, 70, 200, false, 0.5f); }
BR_PARITY_CASE(stage_transposed_33x129_wide) { stage_transposed_case(p, 33, 129, true, 64.0f, true); }

// GEMM (tolerance kGemmTol: same f16 operands, f32 vs f64 summation).
BR_PARITY_CASE(gemm_70x128x384_signs) { gemm_case(p, 70, 128, 384, true, 1.0f / 1024); }  // a = x·S_V
BR_PARITY_CASE(gemm_70x384x128_signs) { gemm_case(p, 70, 384, 128, true, 1.0f); }         // dx' = b·S_Vᵀ
BR_PARITY_CASE(gemm_70x72x40_odd) { gemm_case(p, 70, 72, 40, false, 0.5f); }
BR_PARITY_CASE(gemm_3x5x7_tiny) { gemm_case(p, 3, 5, 7, false, 1.0f); }
BR_PARITY_CASE(gemm_256x128x96_weights) { gemm_case(p, 256, 128, 96, false, 2.0f); }
BR_PARITY_CASE(gemm_slice_70x128x384_of_600) { gemm_slice_case(p, 70, 128, 384, 600, 256); }
BR_PARITY_CASE(gemm_slice_9x33x40_of_100_odd) { gemm_slice_case(p, 9, 33, 40, 100, 67); }
BR_PARITY_CASE(stage_gemm_70x256x384) { stage_gemm_case(p, 70, 256, 384, 1024.0f); }

}  // namespace bitrank::test
