// The student Llama block and the layer-wise step: the forward against the
// dense teacher with the same weights, the backward by central differences
// on the reference (x, every projection's h, ℓ, g, both gains) and the sign
// gradients by their exact identities with the checked scale gradients, the
// backends against the reference (parity case), a short layer-wise training
// run, a non-finite gradient skipping the step, the state round trip.
#include "bitrank/train/student_block.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "bitrank/model/model.hpp"
#include "bitrank/rng.hpp"
#include "bitrank/train/layerwise.hpp"
#include "support/backends.hpp"
#include "support/expect.hpp"
#include "support/gradcheck.hpp"
#include "support/parity.hpp"
#include "support/student_fixtures.hpp"
#include "support/host_values.hpp"

namespace bitrank {
namespace {

using test::upload;
using test::values;
using test::rel_l2;

using model::kAllLlamaProjs;
using model::llama_proj_name;
using model::LlamaProj;
using train::LayerwiseBuffers;
using train::LayerwiseOptions;
using train::LayerwiseState;
using train::StudentLlamaBlock;
using train::StudentTape;

// Unit-variance-ish input rows, exact in f32.
std::vector<float> block_input(index_t rows, index_t hidden, std::uint64_t seed) {
  return rnd(static_cast<std::size_t>(rows * hidden), seed, 1.7f);
}

// The student's forward is the teacher's forward: a dense model holding the
// expanded Ŵ of each projection gives the same output (reference, f64).
TEST(StudentBlock, ForwardIsTheDenseTeacherWithTheSameWeights) {
  auto& be = test::ref_backend();
  const auto dims = test::tiny_block_dims();
  const auto w = test::random_student(dims, 32, 2, 1);
  StudentLlamaBlock<double> student(be, dims, w);
  const model::LlamaModel<double> teacher(be, test::teacher_of(dims, w));
  const index_t window = 5, n = 2 * window, d = dims.hidden;
  auto x = upload(be, block_input(n, d, 2));
  Buffer<double> ys(*be.memory, static_cast<std::size_t>(n * d)), yt(*be.memory, static_cast<std::size_t>(n * d));
  StudentTape<double> tape;
  student.forward(x.view({n, d}), window, tape, ys.view({n, d}));
  model::BlockActivations<double> acts;
  // The teacher's weights went through f32 (HostWeights): compare at f32 precision.
  teacher.block_forward(0, x.view({n, d}), window, acts, yt.view({n, d}));
  const auto a = values(be, CView<double>(ys.view({n * d}))), b = values(be, CView<double>(yt.view({n * d})));
  const double e = rel_l2(a, b);
  std::printf("  [student] forward vs dense teacher (f64, weights via f32): rel %.3e (tol 1e-6)\n", e);
  EXPECT_LE(e, 1e-6);
  // The block does something: y is not x.
  EXPECT_GT(rel_l2(a, values(be, CView<double>(x.view({n * d})))), 0.1);
}

// L(θ) = mean (y(θ) − target)²; the analytic gradient is one backward of
// dy = ∂L/∂y. Every parameter the student trains by Adam, and the input.
TEST(StudentBlock, GradCheckOnReference) {
  auto& be = test::ref_backend();
  const auto dims = test::tiny_block_dims();
  StudentLlamaBlock<double> block(be, dims, test::random_student(dims, 32, 2, 3));
  const index_t window = 5, n = 2 * window, d = dims.hidden;
  auto xb = upload(be, block_input(n, d, 4));
  auto target = upload(be, block_input(n, d, 5));
  Buffer<double> y(*be.memory, static_cast<std::size_t>(n * d)), dy(*be.memory, static_cast<std::size_t>(n * d)),
      dx(*be.memory, static_cast<std::size_t>(n * d));
  StudentTape<double> tape;
  const View<double> x = xb.view({n, d});
  const auto loss = [&] {
    block.forward(x, window, tape, y.view({n, d}));
    return train::layerwise_loss<double>(be, y.view({n, d}), target.view({n, d}), dy.view({n, d}));
  };
  block.zero_grad();
  const double l0 = loss();
  ASSERT_GT(l0, 0.1);
  block.backward(x, tape, dy.view({n, d}), 1.0f, dx.view({n, d}));

  // Each parameter lives in host memory (the reference backend): perturb in place.
  const auto check = [&](const std::string& name, View<double> param, View<double> grad) {
    std::vector<double> p(param.data, param.data + param.numel());
    const std::vector<double> g(grad.data, grad.data + grad.numel());
    const auto perturbed_loss = [&] {
      std::copy(p.begin(), p.end(), param.data);
      return loss();
    };
    // Step 1e-4 of the parameter's RMS (ℓ ~ 1e-2 needs a step its own
    // size). The loss is a mean over N = 640 elements through a deep
    // composite, so its gradients are ~1/N of L: rounding of L (smaller
    // steps) and truncation (larger ones) both leave ~5e-7 on the smallest
    // sampled entries, hence 2e-6 rather than the single ops' 1e-6.
    double rms = 0;
    for (double v : p) rms += v * v;
    rms = std::sqrt(rms / static_cast<double>(p.size()));
    test::grad_check(name, p, g, perturbed_loss, 2e-6, 12, 1e-4 * rms);
    std::copy(p.begin(), p.end(), param.data);
  };
  check("student dx", x, dx.view({n, d}));
  check("student attn_norm", block.attn_norm(), block.attn_norm_grad());
  check("student ffn_norm", block.ffn_norm(), block.ffn_norm_grad());
  for (LlamaProj p : kAllLlamaProjs) {
    auto& proj = block.proj(p);
    const index_t m = proj.dims().m, nn = proj.dims().n, r = proj.dims().r, s = proj.dims().scales_per_path();
    for (index_t path = 0; path < proj.dims().paths; ++path) {
      const std::string base = std::string("student ") + llama_proj_name(p) + " path " + std::to_string(path);
      const View<double> grads = proj.scale_grads();
      check(base + " h", proj.h(path), View<double>(grads.data + path * s, Shape{m}));
      check(base + " l", proj.l(path), View<double>(grads.data + path * s + m, Shape{r}));
      check(base + " g", proj.g(path), View<double>(grads.data + path * s + m + r, Shape{nn}));
    }
  }
  EXPECT_EQ(loss(), l0);  // every parameter restored

  // Sign gradients, by exact identities with the scale gradients checked above.
  double worst = 0;
  for (LlamaProj p : kAllLlamaProjs) worst = std::max(worst, test::sign_grad_identity_error(block.proj(p)));
  std::printf("  [student] sign gradient identities (7 projections × 2 paths): worst rel %.3e (tol 1e-12)\n", worst);
  EXPECT_LE(worst, 1e-12);
}

// The f32 backends against the reference: forward, loss, every gradient,
// from the same weights and input. Every projection's GEMMs run on f16
// operands: the BLR tolerance, 3e-3 (DESIGN §4), for the block as a whole.
void student_block_parity(test::ParityRun& p, index_t r, index_t paths, index_t window, index_t windows) {
  const auto dims = test::tiny_block_dims();
  const auto w = test::random_student(dims, r, paths, 11);
  StudentLlamaBlock<double> ref(p.ref, dims, w);
  StudentLlamaBlock<float> be(p.be, dims, w);
  const index_t n = window * windows, d = dims.hidden;
  auto x = p.input({n, d}, 1.7f);
  auto target = p.input({n, d}, 1.7f);
  auto y = p.output({n, d});
  auto dy = p.output({n, d});
  auto dx = p.output({n, d});
  StudentTape<double> ref_tape;
  StudentTape<float> be_tape;
  const float grad_scale = 256.0f;  // the step's default for these 640 elements: the largest power of two ≤ N/2
  ref.zero_grad();
  ref.forward(x.ref(), window, ref_tape, y.ref());
  const double ref_loss = train::layerwise_loss<double>(p.ref, y.ref(), target.ref(), dy.ref());
  ref.backward(x.ref(), ref_tape, dy.ref(), grad_scale, dx.ref());
  be.zero_grad();
  be.forward(x.be(), window, be_tape, y.be());
  const double be_loss = train::layerwise_loss<float>(p.be, y.be(), target.be(), dy.be());
  be.backward(x.be(), be_tape, dy.be(), grad_scale, dx.be());

  constexpr double tol = 3e-3;
  p.expect_close("y", y, tol);
  p.expect_close("loss", be_loss, ref_loss, tol);
  p.expect_close("dy", dy, tol);
  p.expect_close("dx", dx, tol);
  const auto host = [](const auto& backend, auto view) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(view.data)>>;
    std::vector<T> v(static_cast<std::size_t>(view.numel()));
    backend.memory->download(v.data(), view.data, v.size() * sizeof(T));
    return v;
  };
  p.expect_close("d_attn_norm", host(p.be, be.attn_norm_grad()), host(p.ref, ref.attn_norm_grad()), tol);
  p.expect_close("d_ffn_norm", host(p.be, be.ffn_norm_grad()), host(p.ref, ref.ffn_norm_grad()), tol);
  for (LlamaProj q : kAllLlamaProjs) {
    const std::string name = llama_proj_name(q);
    p.expect_close("d(" + name + " scales)", host(p.be, be.proj(q).scale_grads()),
                   host(p.ref, ref.proj(q).scale_grads()), tol);
    p.expect_close("G_U " + name, host(p.be, be.proj(q).sign_grad_u()), host(p.ref, ref.proj(q).sign_grad_u()), tol);
    p.expect_close("G_V " + name, host(p.be, be.proj(q).sign_grad_v()), host(p.ref, ref.proj(q).sign_grad_v()), tol);
  }
}

BR_PARITY_CASE(student_block_r32_p2_2x5) { student_block_parity(p, 32, 2, 5, 2); }
BR_PARITY_CASE(student_block_r64_p1_3x17) { student_block_parity(p, 64, 1, 17, 3); }

// The last projection enters the loss linearly (y = h + P_down(act), L =
// mean (y − t)²), so L is exactly quadratic in each of its signs and
// flipping one changes L by exactly (DESIGN §5, in the block; N elements)
//   S_U[i][k]: −2s·G_U[i][k] + (4/N)·h_i²ℓ_k²·Σ_t a_tk²
//   S_V[j][k]: −2s·G_V[j][k] + (4/N)·g_j²ℓ_k²·Σ_t act_tj²·Σ_i h_i²
// an entry-by-entry check of the sign gradients the block computes.
TEST(StudentBlock, DownProjectionSignFlipsAreExact) {
  auto& be = test::ref_backend();
  const auto dims = test::tiny_block_dims();
  StudentLlamaBlock<double> block(be, dims, test::random_student(dims, 32, 2, 7));
  const index_t window = 5, n = 2 * window, d = dims.hidden, N = n * d;
  auto x = upload(be, block_input(n, d, 8));
  auto target = upload(be, block_input(n, d, 9));
  Buffer<double> y(*be.memory, static_cast<std::size_t>(N)), dy(*be.memory, static_cast<std::size_t>(N)),
      dx(*be.memory, static_cast<std::size_t>(N));
  StudentTape<double> tape, probe;
  const auto loss = [&](StudentTape<double>& t) {
    block.forward(x.view({n, d}), window, t, y.view({n, d}));
    return train::layerwise_loss<double>(be, y.view({n, d}), target.view({n, d}), dy.view({n, d}));
  };
  block.zero_grad();
  const double l0 = loss(tape);
  block.backward(x.view({n, d}), tape, dy.view({n, d}), 1.0f, dx.view({n, d}));
  auto& down = block.proj(LlamaProj::down);
  const index_t m = down.dims().m, nn = down.dims().n, r = down.dims().r, words = r / 32;
  const double* act = tape.acts.act.data();
  XorShift g(10);
  double worst = 0;
  int checked = 0;
  for (int trial = 0; trial < 24; ++trial) {
    const bool u = trial % 2 == 0;
    const index_t p = (trial / 2) % 2,
                  row = static_cast<index_t>(g.next_u64() % static_cast<std::uint64_t>(u ? m : nn)),
                  k = static_cast<index_t>(g.next_u64() % static_cast<std::uint64_t>(r));
    std::uint32_t* word =
        (u ? down.sign_bits_u() : down.sign_bits_v()).data + (p * (u ? m : nn) + row) * words + k / 32;
    const double sgn = (*word >> (k % 32)) & 1u ? 1.0 : -1.0;
    const double grad = (u ? down.sign_grad_u() : down.sign_grad_v()).data[(p * (u ? m : nn) + row) * r + k];
    const double lk = down.l(p)[k];
    double quad = 0;
    if (u) {
      const double* a = tape.proj[static_cast<std::size_t>(LlamaProj::down)].a.data() + p * n * r;
      double sa = 0;
      for (index_t t = 0; t < n; ++t) sa += a[t * r + k] * a[t * r + k];
      quad = 4.0 / static_cast<double>(N) * down.h(p)[row] * down.h(p)[row] * lk * lk * sa;
    } else {
      double sx = 0, sh = 0;
      for (index_t t = 0; t < n; ++t) sx += act[t * nn + row] * act[t * nn + row];
      for (index_t i = 0; i < m; ++i) sh += down.h(p)[i] * down.h(p)[i];
      quad = 4.0 / static_cast<double>(N) * down.g(p)[row] * down.g(p)[row] * lk * lk * sx * sh;
    }
    const double predicted = -2.0 * sgn * grad + quad;
    *word ^= 1u << (k % 32);
    const double measured = loss(probe) - l0;
    *word ^= 1u << (k % 32);
    worst = std::max(worst, std::fabs(measured - predicted) / std::max(std::fabs(predicted), 1e-3 * l0));
    ++checked;
  }
  EXPECT_EQ(loss(probe), l0);  // every bit restored
  std::printf("  [student] ffn_down sign flips, ΔL measured vs predicted: %d flips, worst rel %.3e (tol 1e-9)\n",
              checked, worst);
  EXPECT_LE(worst, 1e-9);
}

// Bits of `a` that differ from `b`, over every projection's signs.
std::int64_t sign_distance(const train::StudentBlockWeights& a, const train::StudentBlockWeights& b) {
  std::int64_t d = 0;
  for (std::size_t q = 0; q < a.proj.size(); ++q)
    for (std::size_t p = 0; p < a.proj[q].paths.size(); ++p) {
      const auto &x = a.proj[q].paths[p], &y = b.proj[q].paths[p];
      for (std::size_t i = 0; i < x.sign_u.size(); ++i) d += std::popcount(x.sign_u[i] ^ y.sign_u[i]);
      for (std::size_t i = 0; i < x.sign_v.size(); ++i) d += std::popcount(x.sign_v[i] ^ y.sign_v[i]);
    }
  return d;
}

// The teacher: a dense block whose weights are the expansion of random BLR
// matrices (rank 32, 2 paths), so the student can reach it exactly. The
// student starts from a crude init: the teacher's signs with 10% flipped,
// every scale and gain off by up to ±30%. 150 layer-wise steps on the CPU,
// once with everything trained and once with the signs frozen (lr 0): the
// MSE must drop 10× with the signs trained, signs must flip, and the run
// that trains them must end at most 0.6× the loss of the one that does not
// (at this tiny rank the sign optimizer also flips many right signs: see
// the sign distance printed; the flips still pay).
TEST(StudentBlock, LayerwiseTrainingLearnsTheTeacher) {
  auto& be = test::cpu_backend();
  const auto dims = test::tiny_block_dims();
  const auto teacher_w = test::random_student(dims, 32, 2, 21);
  const model::LlamaModel<float> teacher(be, test::teacher_of(dims, teacher_w));

  auto init = teacher_w;
  XorShift g(22);
  for (auto& m : init.proj)
    for (auto& path : m.paths) {
      for (auto* bits : {&path.sign_u, &path.sign_v})
        for (auto& word : *bits)
          for (int b = 0; b < 32; ++b)
            if (g.next_u64() % 10 == 0) word ^= 1u << b;
      for (auto* v : {&path.h, &path.l, &path.g})
        for (auto& s : *v) s *= static_cast<float>(1.0 + 0.3 * g.next_signed());
    }
  for (auto* v : {&init.attn_norm, &init.ffn_norm})
    for (auto& s : *v) s *= static_cast<float>(1.0 + 0.3 * g.next_signed());

  const index_t window = 16, n = 4 * window, d = dims.hidden;
  auto x = upload(be, block_input(n, d, 23));
  Buffer<float> target(*be.memory, static_cast<std::size_t>(n * d));
  model::BlockActivations<float> acts;
  teacher.block_forward(0, x.view({n, d}), window, acts, target.view({n, d}));

  struct Run {
    double first = 0, last = 0;
    std::int64_t flips = 0, distance = 0;
  };
  const int steps = 150;
  const auto train = [&](float sign_lr) {
    StudentLlamaBlock<float> student(be, dims, init);
    LayerwiseOptions opt;
    opt.scales.lr = 1e-2f;
    opt.gains.lr = 1e-3f;
    opt.signs.lr = sign_lr;
    LayerwiseState state(train::layerwise_scaler_options(n * d));
    LayerwiseBuffers<float> buf;
    Run run;
    for (int s = 0; s < steps; ++s) {
      const auto rep = train::train_step(student, x.view({n, d}), target.view({n, d}), window, buf, state, opt);
      EXPECT_FALSE(rep.skipped) << "step " << s;
      if (s == 0) run.first = rep.loss;
      run.last = rep.loss;
      run.flips += rep.flips;
    }
    EXPECT_EQ(state.applied_steps, steps);
    run.distance = sign_distance(student.download(), teacher_w);
    return run;
  };
  const Run full = train(5e-3f), frozen = train(0.0f);
  std::printf(
      "  [student] layer-wise training, %d steps: MSE %.4e → %.4e (÷%.1f), %lld flips, signs off the "
      "teacher's %lld → %lld; signs frozen: → %.4e (÷%.1f)\n",
      steps, full.first, full.last, full.first / full.last, static_cast<long long>(full.flips),
      static_cast<long long>(sign_distance(init, teacher_w)), static_cast<long long>(full.distance), frozen.last,
      frozen.first / frozen.last);
  EXPECT_LE(full.last, full.first / 10);
  EXPECT_GT(full.flips, 0);
  EXPECT_EQ(frozen.flips, 0);
  EXPECT_LE(full.last, 0.6 * frozen.last);
}

// A non-finite gradient skips the step: parameters and optimizer state stay
// bit for bit, the scale halves, the step count stays; the next clean step
// updates again.
TEST(StudentBlock, NonFiniteGradientSkipsTheStep) {
  auto& be = test::cpu_backend();
  const auto dims = test::tiny_block_dims();
  StudentLlamaBlock<float> block(be, dims, test::random_student(dims, 32, 2, 31));
  const index_t window = 5, n = 2 * window, d = dims.hidden;
  auto x = upload(be, block_input(n, d, 32));
  auto target = upload(be, block_input(n, d, 33));
  LayerwiseOptions opt;
  opt.signs.lr = 0.05f;
  LayerwiseState state(train::layerwise_scaler_options(n * d));
  LayerwiseBuffers<float> buf;
  // A clean step first, so the optimizer state is not all zero.
  ASSERT_FALSE(train::train_step(block, x.view({n, d}), target.view({n, d}), window, buf, state, opt).skipped);
  ASSERT_EQ(state.applied_steps, 1);
  const double scale = state.scaler.scale();

  // The gradients of one backward, one entry poisoned, then the update half.
  const auto poisoned_step = [&](auto poison) {
    block.zero_grad();
    block.forward(x.view({n, d}), window, buf.tape, buf.y.view({n, d}));
    const double loss = train::layerwise_loss<float>(be, buf.y.view({n, d}), target.view({n, d}), buf.dy.view({n, d}));
    block.backward(x.view({n, d}), buf.tape, buf.dy.view({n, d}), static_cast<float>(state.scaler.scale()),
                   buf.dx.view({n, d}));
    poison();
    const auto state_before = block.download_state();
    const auto rep = train::finish_step(block, loss, state, opt);
    EXPECT_TRUE(rep.skipped);
    EXPECT_EQ(rep.flips, 0);
    EXPECT_FALSE(std::isfinite(rep.grad_norm) && std::isfinite(rep.sign_grad_norm));
    EXPECT_TRUE(block.download_state() == state_before) << "a skipped step changed the parameters or their state";
  };
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  poisoned_step([&] { block.proj(LlamaProj::up).scale_grads()[17] = nan; });
  EXPECT_EQ(state.scaler.scale(), scale / 2);
  poisoned_step([&] { block.ffn_norm_grad()[3] = inf; });
  poisoned_step([&] { block.proj(LlamaProj::k).sign_grad_v()[5] = -inf; });
  EXPECT_EQ(state.scaler.scale(), scale / 8);
  EXPECT_EQ(state.scaler.state().skipped_total, 3);
  EXPECT_EQ(state.applied_steps, 1);

  // Through train_step: a NaN in the teacher's output.
  std::vector<float> bad = block_input(n, d, 33);
  bad[100] = nan;
  auto bad_target = upload(be, bad);
  const auto state_before = block.download_state();
  const auto rep = train::train_step(block, x.view({n, d}), bad_target.view({n, d}), window, buf, state, opt);
  EXPECT_TRUE(rep.skipped);
  EXPECT_TRUE(std::isnan(rep.loss));
  EXPECT_TRUE(block.download_state() == state_before);
  EXPECT_EQ(state.applied_steps, 1);

  // A clean step updates again.
  const auto clean = train::train_step(block, x.view({n, d}), target.view({n, d}), window, buf, state, opt);
  EXPECT_FALSE(clean.skipped);
  EXPECT_EQ(state.applied_steps, 2);
  EXPECT_FALSE(block.download_state() == state_before);
}

// The layer-wise scale starts at, and never grows past, the largest power
// of two ≤ N/2; the backward runs at the scaler's current scale, which
// grows back after growth_interval clean steps.
TEST(StudentBlock, GradScaleFollowsTheScaler) {
  EXPECT_EQ(train::layerwise_scaler_options(640).init_log2, 8);  // 256 ≤ 320 < 512
  EXPECT_EQ(train::layerwise_scaler_options(640).max_log2, 8);
  EXPECT_EQ(train::layerwise_scaler_options(1024).init_log2, 9);
  EXPECT_EQ(train::layerwise_scaler_options(3).init_log2, 0);
  EXPECT_EQ(train::layerwise_scaler_options(4096 * 5120).init_log2, 23);
  auto& be = test::cpu_backend();
  const auto dims = test::tiny_block_dims();
  StudentLlamaBlock<float> block(be, dims, test::random_student(dims, 32, 1, 41));
  const index_t window = 5, n = 2 * window, d = dims.hidden;
  auto x = upload(be, block_input(n, d, 42));
  auto target = upload(be, block_input(n, d, 43));
  auto so = train::layerwise_scaler_options(n * d);
  so.init_log2 = 6;
  so.growth_interval = 2;
  LayerwiseState state(so);
  LayerwiseOptions opt;
  LayerwiseBuffers<float> buf;
  std::vector<double> seen;
  for (int s = 0; s < 6; ++s) {
    const auto rep = train::train_step(block, x.view({n, d}), target.view({n, d}), window, buf, state, opt);
    ASSERT_FALSE(rep.skipped);
    seen.push_back(rep.grad_scale);
  }
  EXPECT_EQ(seen, (std::vector<double>{64, 64, 128, 128, 256, 256}));
  opt.clip_norm = -1;
  test::expect_error(
      [&] {
        train::train_step(block, x.view({n, d}), target.view({n, d}), window, buf, state, opt);
      },
      "layer-wise step: clip_norm must be finite and ≥ 0, got -1");
}

// download_state / upload_state restore the block bit for bit (a checkpoint).
TEST(StudentBlock, StateRoundTrip) {
  auto& be = test::cpu_backend();
  const auto dims = test::tiny_block_dims();
  const auto w = test::random_student(dims, 32, 2, 51);
  StudentLlamaBlock<float> block(be, dims, w);
  const index_t window = 5, n = 2 * window, d = dims.hidden;
  auto x = upload(be, block_input(n, d, 52));
  auto target = upload(be, block_input(n, d, 53));
  LayerwiseOptions opt;
  LayerwiseState state(train::layerwise_scaler_options(n * d));
  LayerwiseBuffers<float> buf;
  train::train_step(block, x.view({n, d}), target.view({n, d}), window, buf, state, opt);
  const auto saved = block.download_state();
  const auto weights = block.download();
  train::train_step(block, x.view({n, d}), target.view({n, d}), window, buf, state, opt);
  ASSERT_FALSE(block.download_state() == saved);
  block.upload_state(saved);
  EXPECT_TRUE(block.download_state() == saved);
  const auto back = block.download();
  EXPECT_EQ(back.attn_norm, weights.attn_norm);
  EXPECT_EQ(back.proj[3].paths[1].sign_v, weights.proj[3].paths[1].sign_v);
  EXPECT_EQ(back.proj[6].paths[0].l, weights.proj[6].paths[0].l);
  // The initial weights come back from download() before any step.
  StudentLlamaBlock<float> fresh(be, dims, w);
  const auto w0 = fresh.download();
  for (std::size_t q = 0; q < w.proj.size(); ++q)
    for (std::size_t p = 0; p < 2; ++p) {
      EXPECT_EQ(w0.proj[q].paths[p].sign_u, w.proj[q].paths[p].sign_u);
      EXPECT_EQ(w0.proj[q].paths[p].h, w.proj[q].paths[p].h);
    }
  EXPECT_EQ(w0.ffn_norm, w.ffn_norm);
  test::expect_error([&] { block.upload_state(std::span<const std::byte>(saved).first(saved.size() - 1)); },
                     "StudentLlamaBlock upload_state");
}

TEST(StudentBlock, BadInputIsAnError) {
  auto& be = test::cpu_backend();
  const auto dims = test::tiny_block_dims();
  auto w = test::random_student(dims, 32, 1, 61);
  auto wrong = w;
  wrong.proj[static_cast<std::size_t>(LlamaProj::o)] = test::random_blr(64, 32, 32, 1, 1);
  test::expect_error([&] { StudentLlamaBlock<float>(be, dims, wrong); },
                     "StudentLlamaBlock: attn_output is 64x32, the block needs 64x64");
  wrong = w;
  wrong.proj[static_cast<std::size_t>(LlamaProj::up)].paths[0].g.pop_back();
  test::expect_error([&] { StudentLlamaBlock<float>(be, dims, wrong); },
                     "StudentLlamaBlock ffn_up: path 0 g has 63 values, expected 64");
  wrong = w;
  wrong.ffn_norm.pop_back();
  test::expect_error([&] { StudentLlamaBlock<float>(be, dims, wrong); }, "ffn_norm has 63 entries, expected 64");
  StudentLlamaBlock<float> block(be, dims, w);
  const index_t n = 10, d = dims.hidden;
  Buffer<float> x(*be.memory, static_cast<std::size_t>(n * d)), y(*be.memory, static_cast<std::size_t>(n * d));
  StudentTape<float> tape;
  test::expect_error(
      [&] {
        block.forward(x.view({n, d}), 4, tape, y.view({n, d}));
      },
      "10 rows are not a whole number of windows of 4");
  test::expect_error(
      [&] {
        block.backward(x.view({n, d}), tape, y.view({n, d}), 1.0f, y.view({n, d}));
      },
      "the tape holds a forward of 0");
  block.forward(x.view({n, d}), 5, tape, y.view({n, d}));
  test::expect_error(
      [&] {
        block.backward(x.view({n, d}), tape, y.view({n, d - 1}), 1.0f, y.view({n, d}));
      },
      "dy has shape [10, 63]");
  test::expect_error(
      [&] {
        block.backward(x.view({n, d}), tape, y.view({n, d}), 3.0f, y.view({n, d}));
      },
      "grad_scale must be a positive power of two");
}

}  // namespace
}  // namespace bitrank
