// The trainable BLR layer: host round trip, forward against the dense
// expansion of Ŵ, accumulation of every gradient until zero_grad, sign
// latents at init, flip counts against the bitmaps, bad input.
#include "bitrank/train/blr_linear.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "bitrank/rng.hpp"
#include "support/backends.hpp"
#include "support/expect.hpp"
#include "support/student_fixtures.hpp"
#include "support/host_values.hpp"

namespace bitrank {
namespace {

using test::upload;
using test::values;
using test::rel_l2;

using train::BlrLinear;
using train::BlrTape;
using train::BlrWorkspace;

template <class T>
void round_trip(Backend<T>& be) {
  const auto init = test::random_blr(72, 40, 64, 2, 3);
  const BlrLinear<T> layer(be, init, SignOptimizer::factored_adam, 0.25f);
  const auto back = layer.download();
  ASSERT_EQ(back.paths.size(), 2u);
  EXPECT_EQ(back.m, 72);
  EXPECT_EQ(back.n, 40);
  EXPECT_EQ(back.r, 64);
  for (std::size_t p = 0; p < 2; ++p) {
    EXPECT_EQ(back.paths[p].sign_u, init.paths[p].sign_u) << be.name;
    EXPECT_EQ(back.paths[p].sign_v, init.paths[p].sign_v) << be.name;
    EXPECT_EQ(back.paths[p].h, init.paths[p].h) << be.name;
    EXPECT_EQ(back.paths[p].l, init.paths[p].l) << be.name;
    EXPECT_EQ(back.paths[p].g, init.paths[p].g) << be.name;
  }
  // z = τ·s from the bits.
  const auto z = values(be, layer.latent_v());
  const index_t n = 40, r = 64;
  for (index_t p = 0; p < 2; ++p)
    for (index_t j = 0; j < n; ++j)
      for (index_t k = 0; k < r; ++k) {
        const bool plus =
            (init.paths[static_cast<std::size_t>(p)].sign_v[static_cast<std::size_t>(j * 2 + k / 32)] >> (k % 32)) & 1u;
        ASSERT_EQ(z[static_cast<std::size_t>((p * n + j) * r + k)], plus ? 0.25 : -0.25) << be.name;
      }
}

TEST(BlrLinear, UploadDownloadRoundTripAndLatentInit) {
  round_trip(test::ref_backend());
  for (const auto& name : test::available_backends()) round_trip(test::backend(name));
}

// y = x·Ŵᵀ with Ŵ reconstructed on the host in f64 (an independent computation):
// exact on the reference, the BLR tolerance (f16 operands) elsewhere.
template <class T>
double forward_error(Backend<T>& be) {
  const index_t m = 72, n = 40, r = 64, ntok = 9;
  const auto init = test::random_blr(m, n, r, 2, 4);
  BlrLinear<T> layer(be, init, SignOptimizer::sgd, 0.25f);
  const auto xv = rnd(static_cast<std::size_t>(ntok * n), 5, 1.0f);
  auto x = upload(be, xv);
  Buffer<T> y(*be.memory, static_cast<std::size_t>(ntok * m));
  BlrTape<T> tape;
  layer.forward(x.view({ntok, n}), tape, y.view({ntok, m}));
  const auto w = blr::reconstruct(init);
  std::vector<double> want(static_cast<std::size_t>(ntok * m));
  for (index_t t = 0; t < ntok; ++t)
    for (index_t i = 0; i < m; ++i)
      for (index_t j = 0; j < n; ++j) want[t * m + i] += w[i * n + j] * xv[t * n + j];
  return rel_l2(values(be, y.view({ntok * m})), want);
}

TEST(BlrLinear, ForwardIsTheDenseExpansion) {
  const double e_ref = forward_error(test::ref_backend());
  std::printf("  [blr_linear] forward vs dense Ŵ: ref rel %.3e (tol 1e-12)\n", e_ref);
  EXPECT_LE(e_ref, 1e-12);
  for (const auto& name : test::available_backends()) {
    const double e = forward_error(test::backend(name));
    std::printf("  [blr_linear] forward vs dense Ŵ: %s rel %.3e (tol 3e-3)\n", name.c_str(), e);
    EXPECT_LE(e, 3e-3) << name;
  }
}

// Two backwards add up to twice one (to rounding: the reference adds each
// token into dh, so the sums are ordered differently); zero_grad starts
// afresh; a step without a backward since zero_grad leaves the signs alone.
template <class T>
void accumulation(Backend<T>& be) {
  const index_t m = 72, n = 40, r = 64, ntok = 9;
  BlrLinear<T> layer(be, test::random_blr(m, n, r, 2, 6), SignOptimizer::factored_adam, 0.25f);
  auto x = upload(be, rnd(static_cast<std::size_t>(ntok * n), 7, 1.0f));
  auto dy = upload(be, rnd(static_cast<std::size_t>(ntok * m), 8, 1e-2f));
  Buffer<T> y(*be.memory, static_cast<std::size_t>(ntok * m)), dx(*be.memory, static_cast<std::size_t>(ntok * n));
  BlrTape<T> tape;
  BlrWorkspace<T> ws;
  layer.forward(x.view({ntok, n}), tape, y.view({ntok, m}));
  const auto grads = [&] {
    auto v = values(be, layer.scale_grads());
    for (View<T> g : {layer.sign_grad_u(), layer.sign_grad_v()}) {
      const auto s = values(be, View<T>(g.data, Shape{g.numel()}));
      v.insert(v.end(), s.begin(), s.end());
    }
    return v;
  };
  layer.zero_grad();
  EXPECT_EQ(layer.sign_grad_squares(), 0.0);
  layer.backward(x.view({ntok, n}), dy.view({ntok, m}), tape, dx.view({ntok, n}), 1024.0f, ws);
  const auto once = grads();
  const double sq = layer.scale_grad_squares();
  EXPECT_GT(sq, 0.0);
  EXPECT_GT(layer.sign_grad_squares(), 0.0);
  layer.backward(x.view({ntok, n}), dy.view({ntok, m}), tape, dx.view({ntok, n}), 1024.0f, ws);
  auto twice = grads();
  for (auto& v : twice) v /= 2;
  const double tol = std::is_same_v<T, double> ? 1e-14 : 1e-7;
  EXPECT_LE(rel_l2(twice, once), tol) << be.name;
  EXPECT_NEAR(layer.scale_grad_squares(), 4 * sq, 4 * sq * tol) << be.name;
  layer.zero_grad();
  for (double v : values(be, layer.scale_grads())) ASSERT_EQ(v, 0.0) << be.name;
  layer.backward(x.view({ntok, n}), dy.view({ntok, m}), tape, dx.view({ntok, n}), 1024.0f, ws);
  EXPECT_LE(rel_l2(grads(), once), tol) << be.name;

  layer.zero_grad();
  const auto z_before = values(be, layer.latent_u());
  SignOptions signs;
  signs.lr = 0.5f;
  EXPECT_EQ(layer.step(AdamOptions{}, signs), 0) << be.name;
  EXPECT_EQ(values(be, layer.latent_u()), z_before) << be.name;
}

TEST(BlrLinear, GradientsAccumulateUntilZeroGrad) {
  accumulation(test::ref_backend());
  for (const auto& name : test::available_backends()) accumulation(test::backend(name));
}

// The flips a step reports are the bits that changed; the scales moved.
template <class T>
void flip_count(Backend<T>& be, SignOptimizer opt) {
  const index_t m = 72, n = 40, r = 64, ntok = 9;
  BlrLinear<T> layer(be, test::random_blr(m, n, r, 2, 9), opt, 0.05f);
  auto x = upload(be, rnd(static_cast<std::size_t>(ntok * n), 10, 1.0f));
  auto dy = upload(be, rnd(static_cast<std::size_t>(ntok * m), 11, 1.0f));
  Buffer<T> y(*be.memory, static_cast<std::size_t>(ntok * m)), dx(*be.memory, static_cast<std::size_t>(ntok * n));
  BlrTape<T> tape;
  BlrWorkspace<T> ws;
  std::int64_t total = 0;
  for (std::int64_t t = 1; t <= 3; ++t) {
    const auto before = layer.download();
    layer.zero_grad();
    layer.forward(x.view({ntok, n}), tape, y.view({ntok, m}));
    layer.backward(x.view({ntok, n}), dy.view({ntok, m}), tape, dx.view({ntok, n}), 1.0f, ws);
    SignOptions signs;
    signs.optimizer = opt;
    signs.lr = opt == SignOptimizer::sgd ? 0.05f : 0.03f;
    const std::int64_t flips = layer.step(AdamOptions{.lr = 1e-2f, .relative_floor = 1e-3f, .step = t}, signs);
    const auto after = layer.download();
    std::int64_t changed = 0;
    for (std::size_t p = 0; p < 2; ++p) {
      for (std::size_t i = 0; i < before.paths[p].sign_u.size(); ++i)
        changed += std::popcount(before.paths[p].sign_u[i] ^ after.paths[p].sign_u[i]);
      for (std::size_t i = 0; i < before.paths[p].sign_v.size(); ++i)
        changed += std::popcount(before.paths[p].sign_v[i] ^ after.paths[p].sign_v[i]);
      EXPECT_NE(before.paths[p].h, after.paths[p].h) << be.name;
      EXPECT_NE(before.paths[p].l, after.paths[p].l) << be.name;
      EXPECT_NE(before.paths[p].g, after.paths[p].g) << be.name;
    }
    EXPECT_EQ(flips, changed) << be.name << " step " << t;
    total += flips;
  }
  EXPECT_GT(total, 0) << be.name << ": no sign flipped in 3 large steps";
}

TEST(BlrLinear, StepFlipsAreTheChangedBits) {
  for (SignOptimizer opt : {SignOptimizer::sgd, SignOptimizer::factored_adam, SignOptimizer::adam}) {
    flip_count(test::ref_backend(), opt);
    for (const auto& name : test::available_backends()) flip_count(test::backend(name), opt);
  }
}

TEST(BlrLinear, BadInputIsAnError) {
  auto& be = test::cpu_backend();
  auto init = test::random_blr(72, 40, 64, 2, 12);
  BlrLinear<float> layer(be, init, SignOptimizer::factored_adam, 0.25f);
  test::expect_error([&] { layer.upload(test::random_blr(72, 41, 64, 2, 1), 0.25f); },
                     "BlrLinear upload: matrix is 72x41 rank 64 with 2 paths, the layer 72x40 rank 64 with 2 paths");
  auto short_h = init;
  short_h.paths[1].h.pop_back();
  test::expect_error([&] { layer.upload(short_h, 0.25f); }, "BlrLinear upload: path 1 h has 71 values, expected 72");
  auto nan_l = init;
  nan_l.paths[0].l[3] = NAN;
  test::expect_error([&] { layer.upload(nan_l, 0.25f); }, "BlrLinear upload: path 0 l[3] is nan");
  auto rank48 = test::random_blr(8, 8, 64, 1, 1);
  rank48.r = 48;
  test::expect_error([&] { BlrLinear<float>(be, rank48, SignOptimizer::sgd, 0.25f); },
                     "BlrLinear: rank 48 is not a positive multiple of 32");
  test::expect_error([&] { layer.upload(init, -1.0f); }, "sign_init: tau must be ≥ 0");
  SignOptions sgd;
  sgd.optimizer = SignOptimizer::sgd;
  test::expect_error([&] { layer.step(AdamOptions{}, sgd); }, "BlrLinear step: sign optimizer 2 differs");
  test::expect_error([&] { BlrLinear<float>(be, init, SignOptimizer::sgd, 0.25f, kSignMatrixIds - 3); },
                     "BlrLinear: sign ids");
  Buffer<float> x(*be.memory, 9 * 40), y(*be.memory, 9 * 72), dx(*be.memory, 9 * 40);
  BlrTape<float> tape;
  BlrWorkspace<float> ws;
  test::expect_error(
      [&] {
        layer.backward(x.view({9, 40}), y.view({9, 72}), tape, dx.view({9, 40}), 1.0f, ws);
      },
      "BlrLinear backward: the tape holds no forward of 9 tokens");
  test::expect_error(
      [&] {
        layer.forward(x.view({9, 40}), tape, y.view({9, 71}));
      },
      "blr_forward: y has shape [9, 71], expected [9, 72]");
}

}  // namespace
}  // namespace bitrank
