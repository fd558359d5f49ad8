// Sign optimizer: init, the update formulas of one step, hysteresis,
// seeded stochastic flips, deferred mode, and bad options — on the
// reference and on every f32 backend.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <type_traits>
#include <cstdio>
#include <string>
#include <vector>

#include "bitrank/rng.hpp"
#include "support/backends.hpp"
#include "support/expect.hpp"

namespace bitrank {
namespace {

// A sign matrix with all optimizer state in one backend's memory.
template <class T>
struct Matrix {
  index_t rows, r;
  Buffer<std::uint32_t> bits;
  Buffer<T> latent, moment, second, second_row, second_col;

  Matrix(Memory& mem, index_t rows_, index_t r_)
      : rows(rows_), r(r_), bits(mem, static_cast<std::size_t>(rows * sign_words(r))), latent(mem, static_cast<std::size_t>(rows * r)),
        moment(mem, static_cast<std::size_t>(rows * r)), second(mem, static_cast<std::size_t>(rows * r)),
        second_row(mem, static_cast<std::size_t>(rows)), second_col(mem, static_cast<std::size_t>(r)) {}

  SignMatrix<T> view(std::uint32_t id = 0) const {
    return {bits.view({rows, sign_words(r)}), latent.view({rows, r}), moment.view({rows, r}), second.view({rows, r}),
            second_row.view({rows}), second_col.view({r}), id};
  }
  void set_bits(const std::vector<std::uint32_t>& w) { bits.upload(w); }
  void set(Buffer<T>& b, const std::vector<double>& v) {
    std::vector<T> t(v.begin(), v.end());
    b.upload(t);
  }
  void fill(Buffer<T>& b, double value) { set(b, std::vector<double>(b.size(), value)); }
};

template <class T>
std::vector<double> values(const Buffer<T>& b) {
  const auto v = b.download();
  return std::vector<double>(v.begin(), v.end());
}

template <class T>
Buffer<T> tensor(Memory& mem, const std::vector<double>& v) {
  Buffer<T> b(mem, v.size());
  std::vector<T> t(v.begin(), v.end());
  b.upload(t);
  return b;
}

std::vector<double> random(std::size_t n, std::uint64_t seed, float scale, double offset = 0) {
  std::vector<double> v;
  for (float x : rnd(n, seed, scale)) v.push_back(static_cast<double>(x) + offset);
  return v;
}

std::vector<std::uint32_t> random_bits(std::size_t n, std::uint64_t seed) {
  XorShift g(seed);
  std::vector<std::uint32_t> w(n);
  for (auto& x : w) x = static_cast<std::uint32_t>(g.next_u64() >> 13);
  return w;
}

double sign_of(const std::vector<std::uint32_t>& bits, index_t words, index_t i, index_t k) {
  return (bits[static_cast<std::size_t>(i * words + k / 32)] >> (k % 32)) & 1u ? 1.0 : -1.0;
}

SignOptions options(SignOptimizer which, float lr) {
  SignOptions o;
  o.optimizer = which;
  o.lr = lr;
  return o;
}

// Runs f(backend) on the reference and on every f32 backend.
template <class F>
void on_every_backend(F&& f) {
  f(test::ref_backend());
  for (const auto& name : test::available_backends()) f(test::backend(name));
}

template <class T>
T scalar_of(const Backend<T>&);

// ---- init ---------------------------------------------------------------

TEST(Sign, InitSetsLatentFromBitsAndZeroesState) {
  on_every_backend([](auto& be) {
    using T = decltype(scalar_of(be));
    const index_t rows = 5, r = 40, words = sign_words(r);
    Matrix<T> mat(*be.memory, rows, r);
    const auto bits = random_bits(static_cast<std::size_t>(rows * words), 3);
    mat.set_bits(bits);
    for (SignOptimizer which : {SignOptimizer::factored_adam, SignOptimizer::adam, SignOptimizer::sgd}) {
      mat.fill(mat.latent, 9.0);
      mat.fill(mat.moment, 1.0);
      mat.fill(mat.second, 2.0);
      mat.fill(mat.second_row, 3.0);
      mat.fill(mat.second_col, 4.0);
      be.sign().sign_init(mat.view(), options(which, 0.1f), 0.25f);
      const auto z = values(mat.latent);
      int bad = 0;
      for (index_t i = 0; i < rows; ++i)
        for (index_t k = 0; k < r; ++k) bad += z[static_cast<std::size_t>(i * r + k)] != 0.25 * sign_of(bits, words, i, k);
      EXPECT_EQ(bad, 0) << be.name << " latent";
      const auto all = [](const std::vector<double>& v, double x) {
        for (double e : v)
          if (e != x) return false;
        return true;
      };
      // State the optimizer uses is zeroed; the rest is left alone.
      EXPECT_TRUE(all(values(mat.moment), which == SignOptimizer::sgd ? 1.0 : 0.0)) << be.name;
      EXPECT_TRUE(all(values(mat.second), which == SignOptimizer::adam ? 0.0 : 2.0)) << be.name;
      EXPECT_TRUE(all(values(mat.second_row), which == SignOptimizer::factored_adam ? 0.0 : 3.0)) << be.name;
      EXPECT_TRUE(all(values(mat.second_col), which == SignOptimizer::factored_adam ? 0.0 : 4.0)) << be.name;
      EXPECT_EQ(mat.bits.download(), bits) << be.name << ": init must not touch the bits";
    }
  });
}

// ---- one step against the formulas --------------------------------------

// From a zero state, Adam's first step is z − η·G/(|G| + ε) (m̂ = G, v̂ = G²);
// SGD's is z − η·G; both clamped to [−c, c].
TEST(Sign, FirstStepFollowsTheFormulas) {
  on_every_backend([](auto& be) {
    using T = decltype(scalar_of(be));
    const index_t rows = 6, r = 32, words = sign_words(r);
    const double tol = std::is_same_v<T, double> ? 1e-12 : 1e-6;
    const auto g = random(static_cast<std::size_t>(rows * r), 5, 1e-3f);
    auto grad = tensor<T>(*be.memory, g);
    for (SignOptimizer which : {SignOptimizer::adam, SignOptimizer::sgd}) {
      Matrix<T> mat(*be.memory, rows, r);
      const auto bits = random_bits(static_cast<std::size_t>(rows * words), 6);
      mat.set_bits(bits);
      SignOptions opt = options(which, which == SignOptimizer::adam ? 0.5f : 500.0f);
      opt.clamp = 0.6f;
      opt.hysteresis = 10.0f;  // no flips: this test is about z
      be.sign().sign_init(mat.view(), opt, 0.25f);
      auto z0 = values(mat.latent);
      z0[0] = 0.58;  // one entry that the step pushes into the clamp
      z0[1] = -0.58;
      mat.set(mat.latent, z0);
      const double g0 = g[0], g1 = g[1];
      std::vector<double> gg = g;
      gg[0] = -std::fabs(g0) - 1e-4;
      gg[1] = std::fabs(g1) + 1e-4;
      auto grad2 = tensor<T>(*be.memory, gg);
      EXPECT_EQ(be.sign().sign_step(mat.view(), grad2.view({rows, r}), opt, 1), 0);
      const auto z = values(mat.latent);
      double worst = 0;
      for (std::size_t e = 0; e < z.size(); ++e) {
        const double step = which == SignOptimizer::adam ? static_cast<double>(opt.lr) * gg[e] / (std::fabs(gg[e]) + static_cast<double>(opt.eps))
                                                         : static_cast<double>(opt.lr) * gg[e];
        const double c = opt.clamp;
        const double want = std::clamp(z0[e] - step, -c, c);
        // relative to the latent's scale (the result may be near 0)
        worst = std::max(worst, std::fabs(z[e] - want) / std::max(std::fabs(want), std::fabs(z0[e])));
      }
      std::printf("  [sign] %-4s %s first step: worst rel %.2e\n", be.name.c_str(), which == SignOptimizer::adam ? "adam" : "sgd ", worst);
      EXPECT_LE(worst, tol) << be.name;
      EXPECT_EQ(z[0], static_cast<double>(opt.clamp)) << be.name << ": clamp at +c";
      EXPECT_EQ(z[1], -static_cast<double>(opt.clamp)) << be.name << ": clamp at −c";
    }
  });
}

// Three steps with G_t = ±α_t·u_i·w_k (random signs): G² is rank one at
// every step, where the factored second moment is exact — R_i·C_k/mean(R)
// equals Adam's v — so factored Adam and Adam must both follow Adam's
// formula with bias corrections, computed here in f64.
TEST(Sign, AdamAndFactoredStepsFollowTheFormula) {
  on_every_backend([](auto& be) {
    using T = decltype(scalar_of(be));
    const index_t rows = 24, r = 64, words = sign_words(r);
    const std::size_t count = static_cast<std::size_t>(rows * r);
    const double tol = std::is_same_v<T, double> ? 1e-12 : 1e-6;
    const auto u = random(static_cast<std::size_t>(rows), 7, 1.0f), w = random(static_cast<std::size_t>(r), 8, 1e-3f);
    const double alpha[3] = {1.0, 0.25, 3.0};
    std::vector<std::vector<double>> grads;
    for (int t = 0; t < 3; ++t) {
      const auto coin = random(count, 9 + t, 1.0f);
      std::vector<double> g(count);
      for (index_t i = 0; i < rows; ++i)
        for (index_t k = 0; k < r; ++k) {
          const std::size_t e = static_cast<std::size_t>(i * r + k);
          g[e] = static_cast<T>((coin[e] >= 0 ? 1 : -1) * alpha[t] * std::fabs(u[static_cast<std::size_t>(i)] * w[static_cast<std::size_t>(k)]));
        }
      grads.push_back(g);
    }
    const auto bits = random_bits(static_cast<std::size_t>(rows * words), 10);
    SignOptions opt = options(SignOptimizer::adam, 0.05f);
    opt.clamp = 0.3f;  // some latents reach the clamp
    opt.hysteresis = 10.0f;  // no flips: this test is about z
    // Adam in f64
    std::vector<double> z(count), m(count, 0.0), v(count, 0.0);
    for (index_t i = 0; i < rows; ++i)
      for (index_t k = 0; k < r; ++k) z[static_cast<std::size_t>(i * r + k)] = 0.25 * sign_of(bits, words, i, k);
    const double b1 = opt.beta1, b2 = opt.beta2, lr = opt.lr, eps = opt.eps, c = opt.clamp;
    for (int t = 1; t <= 3; ++t)
      for (std::size_t e = 0; e < count; ++e) {
        const double g = grads[static_cast<std::size_t>(t - 1)][e];
        m[e] = b1 * m[e] + (1 - b1) * g;
        v[e] = b2 * v[e] + (1 - b2) * g * g;
        const double m_hat = m[e] / (1 - std::pow(b1, t)), v_hat = v[e] / (1 - std::pow(b2, t));
        z[e] = std::clamp(z[e] - lr * m_hat / (std::sqrt(v_hat) + eps), -c, c);
      }
    for (SignOptimizer which : {SignOptimizer::factored_adam, SignOptimizer::adam}) {
      Matrix<T> mat(*be.memory, rows, r);
      mat.set_bits(bits);
      opt.optimizer = which;
      be.sign().sign_init(mat.view(), opt, 0.25f);
      for (int t = 1; t <= 3; ++t) {
        auto grad = tensor<T>(*be.memory, grads[static_cast<std::size_t>(t - 1)]);
        EXPECT_EQ(be.sign().sign_step(mat.view(), grad.view({rows, r}), opt, t), 0);
      }
      const auto got = values(mat.latent);
      double worst = 0;
      int clamped = 0;
      for (std::size_t e = 0; e < count; ++e) {
        worst = std::max(worst, std::fabs(got[e] - z[e]) / 0.25);  // relative to the latent scale
        clamped += std::fabs(z[e]) == c;
      }
      std::printf("  [sign] %-4s %-13s 3 steps vs Adam's formula: worst %.2e (%d clamped)\n", be.name.c_str(),
                  which == SignOptimizer::adam ? "adam" : "factored_adam", worst, clamped);
      EXPECT_LE(worst, tol) << be.name;
      EXPECT_GT(clamped, 0);
    }
  });
}

// ---- hysteresis -----------------------------------------------------------

// lr = 0: the latents stay, so only the flip rule acts. s·z < −δ flips; the
// band edge itself and anything above does not; z is kept after a flip, so
// a second step flips nothing back.
TEST(Sign, HysteresisFlipsOnlyPastTheBand) {
  on_every_backend([](auto& be) {
    using T = decltype(scalar_of(be));
    const index_t rows = 2, r = 32;
    // row 0 all +1, row 1 all −1; latents chosen in f32 so both backends see the same numbers
    const std::vector<float> zs = {-0.3f, -0.1f, -0.05f, 0.0f, 0.05f, 0.1f, 0.3f, -0.100001f};
    for (float delta : {0.1f, 0.0f}) {
      Matrix<T> mat(*be.memory, rows, r);
      mat.set_bits({0xffffffffu, 0u});
      std::vector<double> z(static_cast<std::size_t>(rows * r));
      for (index_t k = 0; k < r; ++k) {  // the rest agrees with its sign
        z[static_cast<std::size_t>(k)] = 0.2f;
        z[static_cast<std::size_t>(r + k)] = -0.2f;
      }
      for (std::size_t q = 0; q < zs.size(); ++q) {
        z[q] = zs[q];                      // s = +1: s·z = z
        z[static_cast<std::size_t>(r) + q] = -zs[q];  // s = −1: s·z = z as well
      }
      mat.set(mat.latent, z);
      SignOptions opt = options(SignOptimizer::sgd, 0.0f);
      opt.hysteresis = delta;
      auto zero = tensor<T>(*be.memory, std::vector<double>(static_cast<std::size_t>(rows * r), 0.0));
      const std::int64_t flips = be.sign().sign_step(mat.view(), zero.view({rows, r}), opt, 1);
      const auto bits = mat.bits.download();
      std::uint32_t want = 0;
      for (std::size_t q = 0; q < zs.size(); ++q)
        if (static_cast<double>(zs[q]) < -static_cast<double>(delta)) want |= 1u << q;
      EXPECT_EQ(bits[0], ~want) << be.name << " δ " << delta;  // +1 signs that flipped are now 0
      EXPECT_EQ(bits[1], want) << be.name << " δ " << delta;   // −1 signs that flipped are now 1
      EXPECT_EQ(flips, 2 * std::popcount(want)) << be.name;
      EXPECT_EQ(values(mat.latent), z) << be.name << ": latents are kept through a flip";
      EXPECT_EQ(be.sign().sign_step(mat.view(), zero.view({rows, r}), opt, 2), 0) << be.name << ": no flip back";
    }
  });
}

// ---- stochastic flips -----------------------------------------------------

// Every latent inside the band at s·z = −0.3δ: the documented rule decides
// each entry from (seed, step, matrix id, entry); entries past the band
// always flip, entries with s·z ≥ 0 never do.
template <class T>
std::vector<std::uint32_t> stochastic_run(Backend<T>& be, std::uint64_t seed, std::uint32_t id, std::int64_t step,
                                          std::int64_t* flips = nullptr) {
  const index_t rows = 64, r = 128, words = sign_words(r);
  Matrix<T> mat(*be.memory, rows, r);
  mat.set_bits(std::vector<std::uint32_t>(static_cast<std::size_t>(rows * words), 0xffffffffu));
  std::vector<double> z(static_cast<std::size_t>(rows * r), static_cast<double>(-0.3f * 0.5f));
  z[0] = -0.6;  // past the band
  z[1] = 0.0;   // on the positive side
  z[2] = 0.2;
  mat.set(mat.latent, z);
  SignOptions opt = options(SignOptimizer::sgd, 0.0f);
  opt.hysteresis = 0.5f;
  opt.stochastic = true;
  opt.seed = seed;
  auto zero = tensor<T>(*be.memory, std::vector<double>(static_cast<std::size_t>(rows * r), 0.0));
  const std::int64_t n = be.sign().sign_step(mat.view(id), zero.view({rows, r}), opt, step);
  if (flips) *flips = n;
  return mat.bits.download();
}

TEST(Sign, StochasticFlipsAreSeededAndFollowTheRule) {
  const index_t rows = 64, r = 128, words = sign_words(r);
  // The rule, computed here from rng.hpp: flip iff u < −s·z/δ.
  const auto expected = [&](std::uint64_t seed, std::uint32_t id, std::int64_t step) {
    std::vector<std::uint32_t> w(static_cast<std::size_t>(rows * words), 0xffffffffu);
    const std::uint64_t stream = hash_counter(seed, static_cast<std::uint64_t>(step) * kSignMatrixIds + id);
    for (index_t e = 0; e < rows * r; ++e) {
      const float sz = e == 0 ? -0.6f : e == 1 ? 0.0f : e == 2 ? 0.2f : -0.3f * 0.5f;
      const bool flip = sz < -0.5f || (sz < 0 && hash_uniform(stream, static_cast<std::uint64_t>(e)) < -sz / 0.5f);
      if (flip) w[static_cast<std::size_t>(e / 32)] ^= 1u << (e % 32);
    }
    return w;
  };
  on_every_backend([&](auto& be) {
    std::int64_t flips = 0;
    const auto a = stochastic_run(be, 42, 3, 5, &flips);
    EXPECT_EQ(a, stochastic_run(be, 42, 3, 5)) << be.name << ": same seed, same bits";
    EXPECT_NE(a, stochastic_run(be, 43, 3, 5)) << be.name << ": another seed, other bits";
    EXPECT_NE(a, stochastic_run(be, 42, 4, 5)) << be.name << ": another matrix, other bits";
    EXPECT_NE(a, stochastic_run(be, 42, 3, 6)) << be.name << ": another step, other bits";
    EXPECT_EQ(a, expected(42, 3, 5)) << be.name << ": the documented rule";
    EXPECT_EQ(a[0] & 7u, 6u) << be.name << ": past the band flips, s·z ≥ 0 does not";
    // In-band entries flip with probability 0.3 (8189 of them: σ ≈ 0.005).
    const double frac = static_cast<double>(flips - 1) / static_cast<double>(rows * r - 3);
    std::printf("  [sign] %-4s stochastic: %lld flips, in-band fraction %.4f (p = 0.3)\n", be.name.c_str(),
                static_cast<long long>(flips), frac);
    EXPECT_NEAR(frac, 0.3, 0.025) << be.name;
  });
}

// ---- deferred mode --------------------------------------------------------

// Three micro-batch gradients deferred and applied equal one step with
// their sum (summed in the same order and precision), bit for bit; the kept
// gradient is zero afterwards.
TEST(Sign, DeferredModeEqualsSummedGradients) {
  on_every_backend([](auto& be) {
    using T = decltype(scalar_of(be));
    const index_t rows = 48, r = 64, words = sign_words(r);
    const auto bits = random_bits(static_cast<std::size_t>(rows * words), 11);
    std::vector<std::vector<double>> g;
    for (int q = 0; q < 3; ++q) g.push_back(random(static_cast<std::size_t>(rows * r), 20 + q, 1e-3f));
    std::vector<T> sum(static_cast<std::size_t>(rows * r), T(0));
    for (int q = 0; q < 3; ++q)
      for (std::size_t e = 0; e < sum.size(); ++e) sum[e] += static_cast<T>(g[static_cast<std::size_t>(q)][e]);
    for (SignOptimizer which : {SignOptimizer::factored_adam, SignOptimizer::adam, SignOptimizer::sgd}) {
      SignOptions opt = options(which, which == SignOptimizer::sgd ? 300.0f : 0.2f);
      opt.hysteresis = 0.05f;
      Matrix<T> deferred(*be.memory, rows, r), direct(*be.memory, rows, r);
      deferred.set_bits(bits);
      direct.set_bits(bits);
      be.sign().sign_init(deferred.view(), opt, 0.25f);
      be.sign().sign_init(direct.view(), opt, 0.25f);
      auto kept = tensor<T>(*be.memory, std::vector<double>(sum.size(), 0.0));
      std::int64_t flips_deferred = 0, flips_direct = 0;
      for (std::int64_t step = 1; step <= 2; ++step) {
        for (int q = 0; q < 3; ++q) {
          auto gq = tensor<T>(*be.memory, g[static_cast<std::size_t>(q)]);
          be.sign().sign_defer(gq.view({rows, r}), kept.view({rows, r}));
        }
        flips_deferred += be.sign().sign_apply_deferred(deferred.view(), kept.view({rows, r}), opt, step);
        Buffer<T> total(*be.memory, sum.size());
        total.upload(sum);
        flips_direct += be.sign().sign_step(direct.view(), total.view({rows, r}), opt, step);
        EXPECT_EQ(values(kept), std::vector<double>(sum.size(), 0.0)) << be.name << ": kept zeroed after apply";
      }
      EXPECT_GT(flips_direct, 0) << be.name;
      EXPECT_EQ(flips_deferred, flips_direct) << be.name;
      EXPECT_EQ(deferred.bits.download(), direct.bits.download()) << be.name;
      EXPECT_EQ(values(deferred.latent), values(direct.latent)) << be.name;
      if (which != SignOptimizer::sgd) {
        EXPECT_EQ(values(deferred.moment), values(direct.moment)) << be.name;
      }
    }
  });
}

// ---- bad input --------------------------------------------------------------

TEST(Sign, BadOptionsAndShapesAreErrors) {
  auto& ops = test::cpu_backend().sign();
  const index_t rows = 4, r = 32;
  Matrix<float> mat(host_memory(), rows, r);
  mat.set_bits(std::vector<std::uint32_t>(static_cast<std::size_t>(rows), 0x0f0f0f0fu));
  auto grad = tensor<float>(host_memory(), std::vector<double>(static_cast<std::size_t>(rows * r), 1e-3));
  const auto step = [&](const SignOptions& o) { return ops.sign_step(mat.view(), grad.view({rows, r}), o, 1); };
  const SignOptions good = options(SignOptimizer::factored_adam, 0.01f);
  ops.sign_init(mat.view(), good, 0.25f);
  step(good);  // the valid call works
  const auto with = [&](auto change) {
    SignOptions o = good;
    change(o);
    return o;
  };
  test::expect_error([&] { step(with([](SignOptions& o) { o.lr = NAN; })); }, "sign_step: lr must be finite");
  test::expect_error([&] { step(with([](SignOptions& o) { o.lr = INFINITY; })); }, "sign_step: lr must be finite");
  test::expect_error([&] { step(with([](SignOptions& o) { o.eps = 0; })); }, "sign_step: eps must be > 0");
  test::expect_error([&] { step(with([](SignOptions& o) { o.beta1 = 1; })); }, "sign_step: beta1 must be in [0, 1)");
  test::expect_error([&] { step(with([](SignOptions& o) { o.beta2 = -0.1f; })); }, "sign_step: beta2 must be in [0, 1)");
  test::expect_error([&] { step(with([](SignOptions& o) { o.beta2 = NAN; })); }, "sign_step: beta2 must be in [0, 1)");
  test::expect_error([&] { step(with([](SignOptions& o) { o.clamp = 0; })); }, "sign_step: clamp must be > 0");
  test::expect_error([&] { step(with([](SignOptions& o) { o.hysteresis = -0.01f; })); }, "sign_step: hysteresis must be ≥ 0");
  test::expect_error([&] { step(with([](SignOptions& o) { o.hysteresis = INFINITY; })); }, "sign_step: hysteresis must be finite");
  test::expect_error([&] { step(with([](SignOptions& o) { o.optimizer = static_cast<SignOptimizer>(7); })); }, "sign_step: unknown optimizer 7");
  test::expect_error([&] { ops.sign_step(mat.view(), grad.view({rows, r}), good, 0); }, "sign_step: step must be in [1, 2^40), got 0");
  test::expect_error([&] { ops.sign_init(mat.view(), good, NAN); }, "sign_init: tau must be finite");
  test::expect_error([&] { ops.sign_init(mat.view(), good, -1.0f); }, "sign_init: tau must be ≥ 0");
  test::expect_error([&] { ops.sign_step(mat.view(kSignMatrixIds), grad.view({rows, r}), good, 1); }, "sign_step: matrix id 16777216 must be < 16777216");
  // shapes: gradient, bitmap words, missing state for the optimizer
  test::expect_error([&] { ops.sign_step(mat.view(), grad.view({rows, r - 1}), good, 1); }, "sign_step: grad has shape [4, 31], expected [4, 32]");
  {
    SignMatrix<float> m = mat.view();
    Buffer<std::uint32_t> wide(host_memory(), static_cast<std::size_t>(rows * 2));
    m.bits = wide.view({rows, 2});
    test::expect_error([&] { ops.sign_step(m, grad.view({rows, r}), good, 1); }, "sign_step: bits has shape [4, 2], expected [4, 1]");
  }
  {
    SignMatrix<float> m = mat.view();
    m.second_col = View<float>();
    test::expect_error([&] { ops.sign_step(m, grad.view({rows, r}), good, 1); }, "sign_step: second_col has shape [], expected [32]");
    m.second = View<float>();  // factored Adam does not need v ...
    m.second_col = mat.second_col.view({r});
    step(good);
    // ... but plain Adam does
    test::expect_error([&] { ops.sign_step(m, grad.view({rows, r}), options(SignOptimizer::adam, 0.01f), 1); }, "sign_step: second has shape [], expected [4, 32]");
    m.moment = View<float>();  // SGD needs no state at all
    m.second_row = View<float>();
    m.second_col = View<float>();
    ops.sign_step(m, grad.view({rows, r}), options(SignOptimizer::sgd, 0.01f), 1);
  }
  auto kept = tensor<float>(host_memory(), std::vector<double>(static_cast<std::size_t>(rows * r), 0.0));
  test::expect_error([&] { ops.sign_defer(grad.view({rows, r}), kept.view({rows * r})); }, "sign_defer: kept has shape [128], expected [4, 32]");
  test::expect_error([&] { ops.sign_apply_deferred(mat.view(), kept.view({rows, r}), with([](SignOptions& o) { o.eps = -1; }), 1); },
               "sign_apply_deferred: eps must be > 0");
}

}  // namespace
}  // namespace bitrank
