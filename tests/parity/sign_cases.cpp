// Parity cases of the sign optimizer: several steps of each optimizer from
// sign_init, and from an arbitrary state, against the f64 reference. Bitmaps
// and flip counts must match exactly; latents and moments to 1e-6.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <type_traits>
#include <vector>

#include "support/parity.hpp"

namespace bitrank::test {
namespace {

struct MatrixOperands {
  Bits bits;
  Real latent, moment, second, second_row, second_col;
};

template <class T, class R, class B>
auto side(const Operand<R, B>& o) {
  if constexpr (std::is_same_v<T, double>) {
    return o.ref();
  } else {
    return o.be();
  }
}

template <class T>
SignMatrix<T> matrix(const MatrixOperands& o, std::uint32_t id) {
  return {side<T>(o.bits), side<T>(o.latent), side<T>(o.moment), side<T>(o.second), side<T>(o.second_row), side<T>(o.second_col), id};
}

// `steps` steps with fresh gradients of scale `grad_scale`. `from_init`:
// state from sign_init (τ = 0.25); otherwise random latents in (−0.6, 0.6)
// (many immediate flips) and random moments.
void sign_case(ParityRun& p, index_t rows, index_t r, SignOptions opt, int steps, bool from_init, float grad_scale) {
  const index_t words = sign_words(r);
  MatrixOperands o{
      p.input_bits({rows, words}),
      p.input({rows, r}, 0.6f),
      p.input({rows, r}, 0.5f * grad_scale),
      p.input({rows, r}, 0.5f * grad_scale * grad_scale, 0.5f * grad_scale * grad_scale),
      p.input({rows}, 0.5f * grad_scale * grad_scale, 0.5f * grad_scale * grad_scale),
      p.input({r}, 0.5f * grad_scale * grad_scale, 0.5f * grad_scale * grad_scale),
  };
  const std::uint32_t id = 7;
  if (from_init) {
    p.ref.sign().sign_init(matrix<double>(o, id), opt, 0.25f);
    p.be.sign().sign_init(matrix<float>(o, id), opt, 0.25f);
  }
  // A per-row drift makes gradients consistent over steps, so latents travel.
  const auto drift = p.random(static_cast<std::size_t>(rows * r), grad_scale);
  std::int64_t total = 0;
  for (int s = 1; s <= steps; ++s) {
    auto g = p.random(static_cast<std::size_t>(rows * r), grad_scale);
    for (std::size_t e = 0; e < g.size(); ++e) g[e] = 0.5f * g[e] + drift[e];
    auto grad = p.input({rows, r}, g);
    const std::int64_t want = p.ref.sign().sign_step(matrix<double>(o, id), grad.ref(), opt, s);
    const std::int64_t got = p.be.sign().sign_step(matrix<float>(o, id), grad.be(), opt, s);
    total += want;
    std::printf("  [sign] step %d: %lld flips (reference), %lld (%s)\n", s, static_cast<long long>(want), static_cast<long long>(got),
                p.be.name.c_str());
    // exact: the flip rule compares latents far from the band edges
    p.expect_close("flips@" + std::to_string(s), static_cast<double>(got), static_cast<double>(want), 0.0);
  }
  EXPECT_GT(total, 0) << "no sign flipped: the case tests nothing";
  p.expect_equal("bits", o.bits);
  // f32 against f64 arithmetic of a few elementwise steps
  p.expect_close("latent", o.latent, 1e-6);
  if (opt.optimizer != SignOptimizer::sgd) p.expect_close("moment", o.moment, 1e-6);
  if (opt.optimizer == SignOptimizer::adam) p.expect_close("second", o.second, 1e-6);
  if (opt.optimizer == SignOptimizer::factored_adam) {
    p.expect_close("second_row", o.second_row, 1e-6);
    p.expect_close("second_col", o.second_col, 1e-6);
  }
}

SignOptions options(SignOptimizer which, float lr, float hysteresis, bool stochastic) {
  SignOptions o;
  o.optimizer = which;
  o.lr = lr;
  o.hysteresis = hysteresis;
  o.stochastic = stochastic;
  o.seed = 1234;
  return o;
}

}  // namespace

// Gradients of the seed's sign-gradient size (~1e-3); Adam steps move z by ~lr.
BR_PARITY_CASE(sign_factored_384x128_init) {
  sign_case(p, 384, 128, options(SignOptimizer::factored_adam, 0.1f, 0.0f, false), 4, true, 1e-3f);
}
BR_PARITY_CASE(sign_factored_256x128_state_hyst) {
  sign_case(p, 256, 128, options(SignOptimizer::factored_adam, 0.05f, 0.1f, false), 3, false, 1e-3f);
}
BR_PARITY_CASE(sign_factored_37x40_tail_stochastic) {  // rank not a multiple of 32: tail word
  sign_case(p, 37, 40, options(SignOptimizer::factored_adam, 0.05f, 0.2f, true), 3, false, 1e-3f);
}
BR_PARITY_CASE(sign_adam_256x128_init_stochastic) {
  sign_case(p, 256, 128, options(SignOptimizer::adam, 0.1f, 0.1f, true), 4, true, 1e-3f);
}
BR_PARITY_CASE(sign_adam_19x96_state) { sign_case(p, 19, 96, options(SignOptimizer::adam, 0.05f, 0.0f, false), 3, false, 1e-3f); }
BR_PARITY_CASE(sign_sgd_384x128_init) { sign_case(p, 384, 128, options(SignOptimizer::sgd, 100.0f, 0.05f, false), 4, true, 1e-3f); }
BR_PARITY_CASE(sign_sgd_64x64_state_stochastic) {
  sign_case(p, 64, 64, options(SignOptimizer::sgd, 100.0f, 0.1f, true), 3, false, 1e-3f);
}

}  // namespace bitrank::test
