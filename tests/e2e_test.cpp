// The end-to-end objective and step: the whole model's gradient (KL + λ·Σ
// MSE) by central differences on the reference, the f32 backends against the
// reference (parity case), and on every f32 backend a short training run
// whose loss drops, a non-finite or overflowing gradient skipping the step
// with everything bit for bit, resume from the state bit for bit; bad input.
// The hybrid family's trainer (the same step over StudentHybridBlock): its
// gradient by central differences on the reference, bad input. (Its
// training and resume run through `bitrank compress`: compress_test.cpp.)
//
// The tiny model: 2 blocks of tiny_block_dims (hidden 64, 2 heads / 1 kv
// head of 32, MLP 96), vocabulary 300 cut into head slices of 128 (two full
// slices and a tail). The tiny hybrid: tests/support/hybrid_fixtures (3 GDN
// blocks and a gated-attention block, hidden 64, vocabulary 300).
#include "bitrank/train/e2e.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "bitrank/rng.hpp"
#include "support/backends.hpp"
#include "support/expect.hpp"
#include "support/gradcheck.hpp"
#include "support/hybrid_fixtures.hpp"
#include "support/parity.hpp"
#include "support/student_fixtures.hpp"

namespace bitrank {
namespace {

using model::kAllLlamaProjs;
using model::llama_proj_name;
using model::LlamaProj;
using train::E2eStudentWeights;
using train::E2eTrainer;

constexpr index_t kVocab = 300, kSlice = 128;

// The teacher's blocks: random BLR matrices expanded (a student can reach
// them exactly).
std::vector<train::StudentBlockWeights> teacher_blocks(std::uint64_t seed) {
  const auto dims = test::tiny_block_dims();
  return {test::random_student(dims, 32, 2, seed), test::random_student(dims, 32, 2, seed + 1)};
}

// A student of two random blocks (unrelated to the teacher's) and a final
// gain in (0.8, 1.2).
E2eStudentWeights random_student(index_t r, index_t paths, std::uint64_t seed) {
  const auto dims = test::tiny_block_dims();
  E2eStudentWeights w{{test::random_student(dims, r, paths, seed), test::random_student(dims, r, paths, seed + 1)}, {}};
  XorShift g(seed * 31 + 7);
  for (index_t j = 0; j < dims.hidden; ++j) w.final_norm.push_back(static_cast<float>(1.0 + 0.2 * g.next_signed()));
  return w;
}

std::vector<std::int32_t> random_tokens(index_t n, std::uint64_t seed) {
  XorShift g(seed);
  std::vector<std::int32_t> t(static_cast<std::size_t>(n));
  for (auto& id : t) id = static_cast<std::int32_t>(g.next_u64() % static_cast<std::uint64_t>(kVocab));
  return t;
}

// L(θ) = KL + 10·Σ MSE as evaluate() computes it; the analytic gradient is
// one forward_backward. Every kind of trained parameter: h, ℓ, g of
// projections of both blocks (both paths), both blocks' norm gains and the
// final gain. The head is untied (the tied head is the training run's).
TEST(E2e, GradCheckOfTheWholeModelOnReference) {
  auto& be = test::ref_backend();
  const auto dims = test::tiny_block_dims();
  model::LlamaModel<double> teacher(be, test::teacher_of(dims, teacher_blocks(1), kVocab, false, 2));
  teacher.vocab_slice = kSlice;
  const index_t window = 6, n = 2 * window;
  E2eTrainer<double> tr(teacher, random_student(32, 2, 3), train::e2e_scaler_options(n));
  const auto tokens = random_tokens(n, 4);
  const auto l0 = tr.forward_backward(tokens, window);
  std::printf("  [e2e] ref loss: KL %.4f + 10/%lld × MSE %.4f (%.4f + %.4f) = %.4f\n", l0.kl,
              static_cast<long long>(window), l0.mse, l0.block_mse[0], l0.block_mse[1], l0.total);
  EXPECT_NEAR(l0.total, l0.kl + 10.0 / static_cast<double>(window) * l0.mse, 1e-12 * l0.total);  // KL + (λ/T)·Σ MSE
  ASSERT_GT(l0.kl, 0.1);
  ASSERT_GT(l0.mse, 0.01);
  EXPECT_EQ(tr.evaluate(tokens, window).total, l0.total);  // the same forward

  const auto check = [&](const std::string& name, View<double> param, View<double> grad) {
    std::vector<double> p(param.data, param.data + param.numel());
    const std::vector<double> g(grad.data, grad.data + grad.numel());
    const auto loss = [&] {
      std::copy(p.begin(), p.end(), param.data);
      return tr.evaluate(tokens, window).total;
    };
    // Steps of 1e-4 of the parameter's RMS, as the block's own check: the
    // loss passes through two blocks, the head's log-sum-exps and 1/n means,
    // rounding at ~1e-15 of L, truncation ~1e-8 of the gradient.
    double rms = 0;
    for (double v : p) rms += v * v;
    rms = std::sqrt(rms / static_cast<double>(p.size()));
    test::grad_check(name, p, g, loss, 1e-5, 6, 1e-4 * rms);
    std::copy(p.begin(), p.end(), param.data);
  };
  check("e2e final_norm", tr.final_norm(), tr.final_norm_grad());
  for (index_t b = 0; b < 2; ++b) {
    auto& block = tr.block(b);
    const std::string base = "e2e block " + std::to_string(b) + " ";
    check(base + "attn_norm", block.attn_norm(), block.attn_norm_grad());
    check(base + "ffn_norm", block.ffn_norm(), block.ffn_norm_grad());
    for (LlamaProj q : kAllLlamaProjs) {
      auto& proj = block.proj(q);
      const index_t m = proj.dims().m, nn = proj.dims().n, r = proj.dims().r, s = proj.dims().scales_per_path();
      const index_t path = (static_cast<index_t>(q) + b) % 2;
      const std::string name = base + llama_proj_name(q) + " p" + std::to_string(path) + " ";
      const View<double> gr = proj.scale_grads();
      // h, ℓ, g in turn over the projections, all three for the last one.
      const int which = static_cast<int>(q) % 3;
      if (which == 0 || q == LlamaProj::down)
        check(name + "h", proj.h(path), View<double>(gr.data + path * s, Shape{m}));
      if (which == 1 || q == LlamaProj::down)
        check(name + "l", proj.l(path), View<double>(gr.data + path * s + m, Shape{r}));
      if (which == 2 || q == LlamaProj::down)
        check(name + "g", proj.g(path), View<double>(gr.data + path * s + m + r, Shape{nn}));
    }
  }
  EXPECT_EQ(tr.evaluate(tokens, window).total, l0.total);  // every parameter restored
}

// A student whose blocks are the teacher's (the teacher holds their
// expanded Ŵ, rounded to f32) and whose final gain is the teacher's has
// the teacher's logits and block outputs up to that rounding: KL and MSE
// ~1e-14, and gradients ~1e-7 of a random student's.
TEST(E2e, StudentEqualToTheTeacherHasNoLoss) {
  auto& be = test::ref_backend();
  const auto dims = test::tiny_block_dims();
  const auto blocks = teacher_blocks(5);
  model::LlamaModel<double> teacher(be, test::teacher_of(dims, blocks, kVocab, true, 6));
  teacher.vocab_slice = kSlice;
  const index_t window = 8, n = 2 * window;
  const auto tokens = random_tokens(n, 7);
  const auto grad_norm = [&](E2eTrainer<double>& tr) {
    double sq = be.reduce().sum_squares(tr.final_norm_grad());
    for (index_t b = 0; b < tr.blocks(); ++b) sq += tr.block(b).grad_squares().adam;
    return std::sqrt(sq);
  };
  E2eTrainer<double> same(teacher, E2eStudentWeights{blocks, {}}, train::e2e_scaler_options(n));
  const auto l = same.forward_backward(tokens, window);
  E2eTrainer<double> other(teacher, random_student(32, 2, 8), train::e2e_scaler_options(n));
  other.forward_backward(tokens, window);
  const double ratio = grad_norm(same) / grad_norm(other);
  std::printf("  [e2e] student = teacher: KL %.3e, MSE %.3e, ‖g‖ %.3e of a random student's (ref; weights via f32)\n",
              l.kl, l.mse, ratio);
  EXPECT_LE(l.kl, 1e-12);
  EXPECT_LE(l.mse, 1e-12);
  EXPECT_LE(ratio, 1e-5);
}

// The f32 backends against the reference: the loss parts and every gradient
// of one forward_backward from the same teacher, student and tokens. The
// blocks' GEMMs run on f16 operands: the BLR tolerance, 3e-3 (DESIGN §4),
// for the losses and the norm gains. The projections' scale and sign
// gradients get 6e-3: the GEMM planes carry h and g as f16 values (blr.hpp's
// Numerics), an error that is the same for every token of an output feature
// and so does not average out over the 51 tokens here; through attention's
// softmax it reaches the k projection's gradients at 4.1e-3 on the cpu
// (2.6e-3 when h and g were applied in f32; ≤ 4.5e-4 in the BLR op's own
// parity cases).
void e2e_parity(test::ParityRun& p, index_t r, index_t paths, index_t window, index_t windows) {
  const auto dims = test::tiny_block_dims();
  const auto weights = test::teacher_of(dims, teacher_blocks(11), kVocab, false, 12);
  model::LlamaModel<double> ref_teacher(p.ref, weights);
  model::LlamaModel<float> be_teacher(p.be, weights);
  ref_teacher.vocab_slice = be_teacher.vocab_slice = kSlice;
  const auto init = random_student(r, paths, 13);
  const index_t n = window * windows;
  E2eTrainer<double> ref(ref_teacher, init, train::e2e_scaler_options(n));
  E2eTrainer<float> be(be_teacher, init, train::e2e_scaler_options(n));
  const auto tokens = random_tokens(n, 14);
  const auto lr = ref.forward_backward(tokens, window);
  const auto lb = be.forward_backward(tokens, window);
  constexpr double tol = 3e-3, proj_tol = 6e-3;
  p.expect_close("kl", lb.kl, lr.kl, tol);
  p.expect_close("mse", lb.mse, lr.mse, tol);
  p.expect_close("total", lb.total, lr.total, tol);
  const auto host = [](const auto& backend, auto view) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(view.data)>>;
    std::vector<T> v(static_cast<std::size_t>(view.numel()));
    backend.memory->download(v.data(), view.data, v.size() * sizeof(T));
    return v;
  };
  p.expect_close("d final_norm", host(p.be, be.final_norm_grad()), host(p.ref, ref.final_norm_grad()), tol);
  for (index_t b = 0; b < 2; ++b) {
    auto& rb = ref.block(b);
    auto& bb = be.block(b);
    const std::string base = "block " + std::to_string(b) + " ";
    p.expect_close(base + "d attn_norm", host(p.be, bb.attn_norm_grad()), host(p.ref, rb.attn_norm_grad()), tol);
    p.expect_close(base + "d ffn_norm", host(p.be, bb.ffn_norm_grad()), host(p.ref, rb.ffn_norm_grad()), tol);
    for (LlamaProj q : kAllLlamaProjs) {
      const std::string name = base + llama_proj_name(q);
      p.expect_close("d(" + name + " scales)", host(p.be, bb.proj(q).scale_grads()),
                     host(p.ref, rb.proj(q).scale_grads()), proj_tol);
      p.expect_close("G_U " + name, host(p.be, bb.proj(q).sign_grad_u()), host(p.ref, rb.proj(q).sign_grad_u()),
                     proj_tol);
      p.expect_close("G_V " + name, host(p.be, bb.proj(q).sign_grad_v()), host(p.ref, rb.proj(q).sign_grad_v()),
                     proj_tol);
    }
  }
}

BR_PARITY_CASE(e2e_tiny_r32_p2_2x6) { e2e_parity(p, 32, 2, 6, 2); }
BR_PARITY_CASE(e2e_tiny_r64_p1_3x17) { e2e_parity(p, 64, 1, 17, 3); }

// Signs of `a` that differ from `b`, over every block.
std::int64_t sign_distance(const std::vector<train::StudentBlockWeights>& a,
                           const std::vector<train::StudentBlockWeights>& b) {
  std::int64_t d = 0;
  for (std::size_t k = 0; k < a.size(); ++k)
    for (std::size_t q = 0; q < a[k].proj.size(); ++q)
      for (std::size_t p = 0; p < a[k].proj[q].paths.size(); ++p) {
        const auto &x = a[k].proj[q].paths[p], &y = b[k].proj[q].paths[p];
        for (std::size_t i = 0; i < x.sign_u.size(); ++i) d += std::popcount(x.sign_u[i] ^ y.sign_u[i]);
        for (std::size_t i = 0; i < x.sign_v.size(); ++i) d += std::popcount(x.sign_v[i] ^ y.sign_v[i]);
      }
  return d;
}

// The teacher's blocks are expanded BLR matrices (rank 32, 2 paths), its
// head tied; the student starts from them with 10% of the signs flipped and
// every scale and gain off by up to ±30%. 60 steps on every f32 backend over
// 4 windows of 16 tokens: the loss must fall 4× and both of its parts must
// fall, without a skipped step.
void training_lowers_the_loss(Backend<float>& be) {
  const auto dims = test::tiny_block_dims();
  const auto blocks = teacher_blocks(21);
  model::LlamaModel<float> teacher(be, test::teacher_of(dims, blocks, kVocab, true, 22));
  teacher.vocab_slice = kSlice;
  E2eStudentWeights init{blocks, {}};
  XorShift g(23);
  for (auto& block : init.blocks) {
    for (auto& m : block.proj)
      for (auto& path : m.paths) {
        for (auto* bits : {&path.sign_u, &path.sign_v})
          for (auto& word : *bits)
            for (int b = 0; b < 32; ++b)
              if (g.next_u64() % 10 == 0) word ^= 1u << b;
        for (auto* v : {&path.h, &path.l, &path.g})
          for (auto& s : *v) s *= static_cast<float>(1.0 + 0.3 * g.next_signed());
      }
    for (auto* v : {&block.attn_norm, &block.ffn_norm})
      for (auto& s : *v) s *= static_cast<float>(1.0 + 0.3 * g.next_signed());
  }
  const index_t window = 16, n = 4 * window;
  train::E2eOptions opt;
  opt.optim.scales.lr = 1e-2f;
  opt.optim.gains.lr = 1e-3f;
  opt.optim.signs.lr = 5e-3f;
  E2eTrainer<float> tr(teacher, init, train::e2e_scaler_options(n), opt);
  const auto tokens = random_tokens(n, 24);
  const int steps = 60;
  train::E2eLoss first, last;
  std::int64_t flips = 0;
  for (int s = 0; s < steps; ++s) {
    const auto rep = tr.step(tokens, window);
    ASSERT_FALSE(rep.step.skipped) << be.name << " step " << s;
    if (s == 0) first = rep.loss;
    last = rep.loss;
    flips += rep.step.flips;
  }
  EXPECT_EQ(tr.state().applied_steps, steps) << be.name;
  const auto final_loss = tr.evaluate(tokens, window);
  std::printf(
      "  [e2e] training, %d steps (%s, 2 blocks, %lld tokens): loss %.4e → %.4e (÷%.1f); KL %.4e → %.4e, MSE %.4e "
      "→ %.4e; after the last update %.4e; %lld flips, signs off the teacher's %lld → %lld\n",
      steps, be.name.c_str(), static_cast<long long>(n), first.total, last.total, first.total / last.total, first.kl,
      last.kl, first.mse, last.mse, final_loss.total, static_cast<long long>(flips),
      static_cast<long long>(sign_distance(init.blocks, blocks)),
      static_cast<long long>(sign_distance(tr.download().blocks, blocks)));
  EXPECT_LE(last.total, first.total / 4) << be.name;
  EXPECT_LT(last.kl, first.kl) << be.name;
  EXPECT_LT(last.mse, first.mse) << be.name;
  EXPECT_LE(final_loss.total, last.total) << be.name;
}

TEST(E2e, TrainingLowersTheLoss) {
  for (const auto& name : test::available_backends()) training_lowers_the_loss(test::backend(name));
}

// A non-finite gradient anywhere — a block's scale, a sign gradient, the
// final gain — or a step whose gradients overflow skips the whole step:
// every block's parameters and optimizer state and the final gain stay bit
// for bit, the scale halves, the step count stays; a clean step updates
// again. On every f32 backend (the poison is uploaded into its memory).
void non_finite_skips_the_whole_step(Backend<float>& be) {
  const auto dims = test::tiny_block_dims();
  model::LlamaModel<float> teacher(be, test::teacher_of(dims, teacher_blocks(31), kVocab, false, 32));
  teacher.vocab_slice = kSlice;
  const index_t window = 5, n = 2 * window;
  train::E2eOptions opt;
  opt.optim.signs.lr = 0.05f;
  E2eTrainer<float> tr(teacher, random_student(32, 2, 33), train::e2e_scaler_options(n), opt);
  const auto tokens = random_tokens(n, 34);
  ASSERT_FALSE(tr.step(tokens, window).step.skipped);  // optimizer state no longer zero
  ASSERT_EQ(tr.state().applied_steps, 1);
  const double scale = tr.state().scaler.scale();

  const auto poisoned_step = [&](auto poison) {
    const auto loss = tr.forward_backward(tokens, window);
    poison();
    const auto before = tr.download_state();
    const auto rep = tr.finish_step(loss);
    EXPECT_TRUE(rep.step.skipped) << be.name;
    EXPECT_EQ(rep.step.flips, 0) << be.name;
    EXPECT_TRUE(tr.download_state() == before)
        << be.name << ": a skipped step changed the student or its optimizer state";
  };
  const auto poke = [&](View<float> v, index_t i, float value) { be.memory->upload(v.data + i, &value, sizeof value); };
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  poisoned_step([&] { poke(tr.block(1).proj(LlamaProj::up).scale_grads(), 5, nan); });
  EXPECT_EQ(tr.state().scaler.scale(), scale / 2) << be.name;
  poisoned_step([&] { poke(tr.block(0).proj(LlamaProj::q).sign_grad_u(), 9, -inf); });
  poisoned_step([&] { poke(tr.final_norm_grad(), 3, inf); });
  poisoned_step([&] { poke(tr.block(0).attn_norm_grad(), 0, nan); });
  EXPECT_EQ(tr.state().scaler.scale(), scale / 16) << be.name;
  EXPECT_EQ(tr.state().applied_steps, 1) << be.name;

  // Through step(): with λ = 1e30 the loss stays finite (f64) but the MSE
  // gradients overflow f32.
  tr.options().mse_weight = 1e30;
  const auto before = tr.download_state();
  const auto rep = tr.step(tokens, window);
  EXPECT_TRUE(std::isfinite(rep.loss.total)) << be.name;
  EXPECT_TRUE(rep.step.skipped) << be.name;
  EXPECT_FALSE(std::isfinite(rep.step.grad_norm) && std::isfinite(rep.step.sign_grad_norm)) << be.name;
  EXPECT_TRUE(tr.download_state() == before) << be.name;
  EXPECT_EQ(tr.state().applied_steps, 1) << be.name;
  EXPECT_EQ(tr.state().scaler.state().skipped_total, 5) << be.name;

  tr.options().mse_weight = 10;
  EXPECT_FALSE(tr.step(tokens, window).step.skipped) << be.name;
  EXPECT_EQ(tr.state().applied_steps, 2) << be.name;
  EXPECT_FALSE(tr.download_state() == before) << be.name;
}

TEST(E2e, NonFiniteGradientSkipsTheWholeStep) {
  for (const auto& name : test::available_backends()) non_finite_skips_the_whole_step(test::backend(name));
}

// Saving the state (the student's bytes and the step state) and loading it
// into a fresh trainer repeats the following steps bit for bit (on the same
// backend: every f32 backend here).
void resume_is_bit_exact(Backend<float>& be) {
  const auto dims = test::tiny_block_dims();
  model::LlamaModel<float> teacher(be, test::teacher_of(dims, teacher_blocks(41), kVocab, true, 42));
  teacher.vocab_slice = kSlice;
  const index_t window = 5, n = 2 * window;
  const auto init = random_student(32, 1, 43);
  const auto tokens = random_tokens(n, 44), tokens2 = random_tokens(n, 45);
  E2eTrainer<float> a(teacher, init, train::e2e_scaler_options(n));
  a.step(tokens, window);
  a.step(tokens2, window);
  const auto saved = a.download_state();
  const train::LayerwiseState state = a.state();
  std::vector<double> want;
  for (int s = 0; s < 3; ++s) want.push_back(a.step(s % 2 ? tokens : tokens2, window).loss.total);

  E2eTrainer<float> b(teacher, init, train::e2e_scaler_options(n));
  b.upload_state(saved);
  b.state() = state;
  EXPECT_TRUE(b.download_state() == saved);
  std::vector<double> got;
  for (int s = 0; s < 3; ++s) got.push_back(b.step(s % 2 ? tokens : tokens2, window).loss.total);
  EXPECT_EQ(got, want) << be.name;
  EXPECT_TRUE(b.download_state() == a.download_state()) << be.name;
  const auto w = b.download();
  EXPECT_EQ(w.final_norm, a.download().final_norm) << be.name;
  EXPECT_EQ(w.blocks[1].proj[6].paths[0].sign_v, a.download().blocks[1].proj[6].paths[0].sign_v) << be.name;
}

TEST(E2e, ResumeFromStateIsBitExact) {
  for (const auto& name : test::available_backends()) resume_is_bit_exact(test::backend(name));
}

TEST(E2e, ScalerOptionsUndoTheMean) {
  EXPECT_EQ(train::e2e_scaler_options(10).init_log2, 3);
  EXPECT_EQ(train::e2e_scaler_options(10).max_log2, 3);
  EXPECT_EQ(train::e2e_scaler_options(8192).init_log2, 13);
  EXPECT_EQ(train::e2e_scaler_options(1).init_log2, 0);
  test::expect_error([] { train::e2e_scaler_options(0); }, "e2e_scaler_options: 0 tokens");
}

TEST(E2e, BadInputIsAnError) {
  auto& be = test::cpu_backend();
  const auto dims = test::tiny_block_dims();
  model::LlamaModel<float> teacher(be, test::teacher_of(dims, teacher_blocks(51), kVocab, true, 52));
  auto w = random_student(32, 1, 53);
  auto wrong = w;
  wrong.blocks.pop_back();
  test::expect_error([&] { E2eTrainer<float>(teacher, wrong, train::e2e_scaler_options(8)); },
                     "E2eTrainer: 1 student blocks for a teacher of 2");
  wrong = w;
  wrong.blocks[1].ffn_norm.pop_back();
  test::expect_error([&] { E2eTrainer<float>(teacher, wrong, train::e2e_scaler_options(8)); },
                     "E2eTrainer: student block 1: StudentLlamaBlock upload: ffn_norm has 63 entries");
  wrong = w;
  wrong.final_norm.pop_back();
  test::expect_error([&] { E2eTrainer<float>(teacher, wrong, train::e2e_scaler_options(8)); },
                     "E2eTrainer: final_norm has 63 entries, expected 64");
  E2eTrainer<float> tr(teacher, w, train::e2e_scaler_options(8));
  const auto tokens = random_tokens(10, 54);
  test::expect_error([&] { tr.step(tokens, 4); }, "e2e step: 10 tokens are not a whole number of windows of 4");
  auto bad = tokens;
  bad[3] = static_cast<std::int32_t>(kVocab);
  test::expect_error([&] { tr.step(bad, 5); }, "e2e step: token 300 at position 3 is outside the vocabulary of 300");
  tr.options().mse_weight = -1;
  test::expect_error([&] { tr.step(tokens, 5); }, "e2e step: mse_weight must be finite and ≥ 0, got -1");
  tr.options().mse_weight = 10;
  tr.options().optim.clip_norm = -1;
  test::expect_error([&] { tr.step(tokens, 5); }, "e2e step: clip_norm must be finite and ≥ 0, got -1");
  const auto state = tr.download_state();
  test::expect_error([&] { tr.upload_state(std::span<const std::byte>(state).first(state.size() - 4)); },
                     "E2eTrainer upload_state");
}

// ---- the hybrid family ----------------------------------------------------------

namespace th = test::tiny_hybrid;
using model::HybridProj;
using train::HybridE2eTrainer;

// A hybrid student unrelated to the teacher: every block by Dual-SVID of
// another random hybrid's (rank r, `paths` paths; its frozen GDN tensors
// too), the final gain (zero-centred: 1 + w) w ∈ (−0.2, 0.2).
train::HybridE2eStudentWeights hybrid_student(index_t r, int paths, std::uint64_t seed) {
  const model::HostWeights other = th::tiny_weights(false, seed);
  train::HybridE2eStudentWeights w;
  for (index_t b = 0; b < th::kLayers; ++b)
    w.blocks.push_back(train::hybrid_student_init(other, b, blr::InitOptions{.rank = r, .paths = paths}));
  XorShift g(seed * 31 + 7);
  for (index_t j = 0; j < th::kD; ++j) w.final_norm.push_back(static_cast<float>(0.2 * g.next_signed()));
  return w;
}

// As the Llama check, through the four hybrid blocks: every trained gain of
// a GDN block (0) and of the attention block (3, its q/k norm gains too),
// h, ℓ, g of projections of both kinds and the final gain. The GDN tape
// checkpoints every 3 rows, so the backward's replays cross segment tails.
TEST(E2e, HybridGradCheckOfTheWholeModelOnReference) {
  auto& be = test::ref_backend();
  model::HybridModel<double> teacher(be, th::tiny_weights(false, 201));
  teacher.vocab_slice = kSlice;
  teacher.gdn_ckpt_every = 3;
  const index_t window = 6, n = 2 * window;
  HybridE2eTrainer<double> tr(teacher, hybrid_student(32, 2, 202), train::e2e_scaler_options(n));
  const auto tokens = th::tiny_tokens(n, 203);
  const auto l0 = tr.forward_backward(tokens, window);
  std::printf("  [e2e] hybrid ref loss: KL %.4f + 10 × MSE %.4f = %.4f\n", l0.kl, l0.mse, l0.total);
  ASSERT_GT(l0.kl, 0.01);
  ASSERT_GT(l0.mse, 0.01);
  EXPECT_EQ(tr.evaluate(tokens, window).total, l0.total);

  double worst = 0;
  const auto check = [&](const std::string& name, View<double> param, View<double> grad) {
    ASSERT_GT(param.numel(), 0) << name;
    std::vector<double> p(param.data, param.data + param.numel());
    const std::vector<double> g(grad.data, grad.data + grad.numel());
    const auto loss = [&] {
      std::copy(p.begin(), p.end(), param.data);
      return tr.evaluate(tokens, window).total;
    };
    // Steps of 1e-4 of the parameter's RMS (at least 1e-2: zero-centred
    // gains ~0.1), 6 entries per vector. Measured worst entry: 7e-7 (the GDN
    // block's second-path ℓ); 3e-4 gives 6.5e-6 (truncation through four
    // blocks and the head), 3e-5 gives 1.7e-6 (rounding). Tolerance 5e-6.
    double rms = 0;
    for (double v : p) rms += v * v;
    rms = std::max(std::sqrt(rms / static_cast<double>(p.size())), 1e-2);
    worst = std::max(worst, test::grad_check(name, p, g, loss, 5e-6, 6, 1e-4 * rms).worst);
    std::copy(p.begin(), p.end(), param.data);
  };
  check("hybrid e2e final_norm", tr.final_norm(), tr.final_norm_grad());
  for (index_t b : {index_t{0}, index_t{3}}) {
    auto& block = tr.block(b);
    ASSERT_EQ(block.full_attention(), b == 3);
    const std::string base = "hybrid e2e block " + std::to_string(b) + " ";
    check(base + "attn_norm", block.attn_norm(), block.attn_norm_grad());
    check(base + "post_norm", block.post_norm(), block.post_norm_grad());
    if (block.full_attention()) {
      check(base + "q_norm", block.q_norm(), block.q_norm_grad());
      check(base + "k_norm", block.k_norm(), block.k_norm_grad());
    }
    int k = 0;
    for (HybridProj q : model::hybrid_block_projs(block.full_attention())) {
      if (!train::hybrid_proj_is_blr(q)) continue;
      auto& proj = block.proj(q);
      const index_t m = proj.dims().m, nn = proj.dims().n, r = proj.dims().r, s = proj.dims().scales_per_path();
      const index_t path = k % 2;
      const std::string name = base + model::hybrid_proj_name(q) + " p" + std::to_string(path) + " ";
      const View<double> gr = proj.scale_grads();
      // h, ℓ, g in turn over the projections.
      if (k % 3 == 0) check(name + "h", proj.h(path), View<double>(gr.data + path * s, Shape{m}));
      if (k % 3 == 1) check(name + "l", proj.l(path), View<double>(gr.data + path * s + m, Shape{r}));
      if (k % 3 == 2) check(name + "g", proj.g(path), View<double>(gr.data + path * s + m + r, Shape{nn}));
      ++k;
    }
  }
  std::printf("  [e2e] hybrid gradient check: worst relative error %.2e\n", worst);
  EXPECT_EQ(tr.evaluate(tokens, window).total, l0.total);  // every parameter restored
}

TEST(E2e, HybridBadInputIsAnError) {
  auto& be = test::cpu_backend();
  model::HybridModel<float> teacher(be, th::tiny_weights(false, 211));
  auto w = hybrid_student(32, 1, 212);
  auto wrong = w;
  wrong.blocks.pop_back();
  test::expect_error([&] { HybridE2eTrainer<float>(teacher, wrong, train::e2e_scaler_options(8)); },
                     "E2eTrainer: 3 student blocks for a teacher of 4");
  wrong = w;
  std::swap(wrong.blocks[2], wrong.blocks[3]);
  test::expect_error([&] { HybridE2eTrainer<float>(teacher, wrong, train::e2e_scaler_options(8)); },
                     "E2eTrainer: student block 2 is a full-attention block, the teacher's a GDN block");
  wrong = w;
  wrong.final_norm.pop_back();
  test::expect_error([&] { HybridE2eTrainer<float>(teacher, wrong, train::e2e_scaler_options(8)); },
                     "E2eTrainer: final_norm has 63 entries, expected 64");
  HybridE2eTrainer<float> tr(teacher, w, train::e2e_scaler_options(8));
  const auto state = tr.download_state();
  test::expect_error([&] { tr.upload_state(std::span<const std::byte>(state).first(state.size() - 4)); },
                     "E2eTrainer upload_state");
}

}  // namespace
}  // namespace bitrank
