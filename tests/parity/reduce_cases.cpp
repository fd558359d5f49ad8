// Parity cases of the column reductions and scalings.
#include "support/parity.hpp"

namespace bitrank::test {
namespace {

// 1e-6 (DESIGN §4): the output is stored in f32 (one rounding, 6e-8), and a
// backend that sums the ≤ 70 rows in f32 adds about 2^-24·√70 ≈ 5e-7.
constexpr double kReduceTol = 1e-6;

void col_sum_prod_case(ParityRun& p, index_t rows, index_t cols) {
  auto a = p.input({rows, cols}, 1.0f);
  auto b = p.input({rows, cols}, 0.5f);
  auto out = p.accumulator({cols}, 2.0f);  // accumulates: random start
  p.ref.reduce().col_sum_prod(a.ref(), b.ref(), out.ref());
  p.be.reduce().col_sum_prod(a.be(), b.be(), out.be());
  p.expect_close("out", out, kReduceTol);
}

void scale_cols_case(ParityRun& p, index_t rows, index_t cols, bool accumulate) {
  auto a = p.input({rows, cols}, 2.0f);
  auto col = p.input({cols}, 1.0f);
  auto out = accumulate ? p.accumulator({rows, cols}, 1.0f) : p.output({rows, cols});
  p.ref.reduce().scale_cols(a.ref(), col.ref(), out.ref(), accumulate);
  p.be.reduce().scale_cols(a.be(), col.be(), out.be(), accumulate);
  p.expect_close("out", out, kReduceTol);
}

void sum_squares_case(ParityRun& p, Shape shape) {
  auto a = p.input(shape, 3.0f);
  const double want = p.ref.reduce().sum_squares(a.ref());
  const double got = p.be.reduce().sum_squares(a.be());
  p.expect_close("sum", got, want, kReduceTol);
}

// dy = grad_mul·(y − target) and Σ (y − target)²; `near`: target within 1%
// of y (the trained student near its teacher: y − target cancels).
void squared_error_case(ParityRun& p, Shape shape, bool near) {
  const auto n = static_cast<std::size_t>(shape.numel());
  auto yv = p.random(n, 3.0f);
  auto tv = p.random(n, near ? 0.03f : 2.0f);
  for (std::size_t i = 0; i < n; ++i) tv[i] = near ? yv[i] * (1.0f + tv[i] / 3.0f) : tv[i];
  auto y = p.input(shape, yv);
  auto target = p.input(shape, tv);
  auto dy = p.output(shape);
  const double grad_mul = 2.0 / static_cast<double>(n);  // the mean's gradient: rarely a float
  const double want = p.ref.reduce().squared_error(y.ref(), target.ref(), grad_mul, dy.ref());
  const double got = p.be.reduce().squared_error(y.be(), target.be(), grad_mul, dy.be());
  p.expect_close("sum", got, want, kReduceTol);
  p.expect_close("dy", dy, kReduceTol);
}

}  // namespace

// BLR backward shapes: dh = Σ dy⊙c (m = 256), dℓ = Σ a⊙b (r = 128), dg = Σ x⊙dx' (n = 384).
BR_PARITY_CASE(col_sum_prod_70x256) { col_sum_prod_case(p, 70, 256); }
BR_PARITY_CASE(col_sum_prod_70x128) { col_sum_prod_case(p, 70, 128); }
BR_PARITY_CASE(col_sum_prod_70x384) { col_sum_prod_case(p, 70, 384); }
BR_PARITY_CASE(col_sum_prod_3x1000_tail) { col_sum_prod_case(p, 3, 1000); }  // several column blocks and a tail
BR_PARITY_CASE(col_sum_prod_1x1) { col_sum_prod_case(p, 1, 1); }
BR_PARITY_CASE(scale_cols_70x384_overwrite) { scale_cols_case(p, 70, 384, false); }  // dx = g⊙dx' (first path)
BR_PARITY_CASE(scale_cols_70x256_accumulate) { scale_cols_case(p, 70, 256, true); }  // y += h⊙c (second path)
BR_PARITY_CASE(scale_cols_5x301_odd) { scale_cols_case(p, 5, 301, true); }
BR_PARITY_CASE(sum_squares_70x5120) { sum_squares_case(p, {70, 5120}); }  // several blocks and a tail
BR_PARITY_CASE(sum_squares_37) { sum_squares_case(p, {37}); }
BR_PARITY_CASE(sum_squares_2x19x33) { sum_squares_case(p, {2, 19, 33}); }
BR_PARITY_CASE(squared_error_70x5120) { squared_error_case(p, {70, 5120}, false); }  // several blocks and a tail
BR_PARITY_CASE(squared_error_37x576_near) { squared_error_case(p, {37, 576}, true); }
BR_PARITY_CASE(squared_error_3x7x11) { squared_error_case(p, {3, 7, 11}, false); }

}  // namespace bitrank::test
