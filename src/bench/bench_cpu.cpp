// CPU benchmark cases at SmolLM2-135M's shapes (hidden 576, MLP 1536, 512
// tokens): each GEMM-shaped op next to OpenBLAS sgemm calls of the same
// shapes, the others by the bytes they must move; and decode-sized BLR
// inference next to the dense f32 layer of the same shape.
#include <cblas.h>
#include <fmt/format.h>

#include <algorithm>

#include "bench/bench_util.hpp"
#include "cpu/kernels.hpp"

namespace bitrank::bench {
namespace {

std::size_t sz(index_t v) { return static_cast<std::size_t>(v); }

// out[m][n] = a[m][k]·b[n][k]ᵀ in f32.
BenchCase sgemm_case(std::string name, index_t m, index_t n, index_t k) {
  Memory& mem = host_memory();
  auto a = random_buffer<float>(mem, sz(m * k), 1, 1.0f);
  auto b = random_buffer<float>(mem, sz(n * k), 2, 1.0f);
  auto c = random_buffer<float>(mem, sz(m * n), 3, 1.0f);
  return {std::move(name), fmt::format("{}x{}x{}", m, n, k), 2.0 * m * n * k, 0, "",
          [=] { cpu::sgemm(false, true, m, n, k, 1.0f, a->data(), k, b->data(), k, 0.0f, c->data(), n); }};
}

// The sgemm calls of a BLR layer's shapes: per path x·S_V, a·S_Uᵀ, dy·S_U,
// b·S_Vᵀ, and the token sums dyᵀ·a, xᵀ·b (the backward's dh, dg and the
// sign gradients).
void add_blr_anchors(std::vector<BenchCase>& cases, index_t m, index_t n, index_t r, index_t T, index_t P) {
  Memory& mem = host_memory();
  const index_t w = std::max(m, n);
  auto xs = random_buffer<float>(mem, sz(T * w), 20, 1.0f);
  auto ws = random_buffer<float>(mem, sz(w * r), 21, 1.0f);
  auto as = random_buffer<float>(mem, sz(T * r), 22, 1.0f);
  auto os = random_buffer<float>(mem, sz(T * w), 23, 1.0f);
  const std::string shape = fmt::format("m={} n={} r={} T={} P={}", m, n, r, T, P);
  const auto layer_gemms = [=] {
    for (index_t p = 0; p < P; ++p) {
      cpu::sgemm(false, false, T, r, n, 1.0f, xs->data(), n, ws->data(), r, 0.0f, as->data(), r);
      cpu::sgemm(false, true, T, m, r, 1.0f, as->data(), r, ws->data(), r, 0.0f, os->data(), m);
      cpu::sgemm(false, false, T, r, m, 1.0f, xs->data(), m, ws->data(), r, 0.0f, as->data(), r);
      cpu::sgemm(false, true, T, n, r, 1.0f, as->data(), r, ws->data(), r, 0.0f, os->data(), n);
    }
  };
  const auto sign_gemms = [=] {
    for (index_t p = 0; p < P; ++p) {
      cpu::sgemm(true, false, m, r, T, 1.0f, xs->data(), m, as->data(), r, 0.0f, ws->data(), r);
      cpu::sgemm(true, false, n, r, T, 1.0f, xs->data(), n, as->data(), r, 0.0f, ws->data(), r);
    }
  };
  cases.push_back({"sgemm, six BLR GEMMs", shape, blr_fwd_bwd_flops(m, n, r, T, P) + blr_sign_flops(m, n, r, T, P), 0,
                   "", [=] {
                     layer_gemms();
                     sign_gemms();
                   }});
  cases.push_back({"sgemm, BLR sign-grad shapes", shape, blr_sign_flops(m, n, r, T, P), 0, "", sign_gemms});
}

// The dense f32 layer y[T][m] = x[T][n]·Wᵀ: OpenBLAS sgemv at one token, sgemm above.
BenchCase dense_layer_case(std::string name, index_t m, index_t n, index_t T) {
  Memory& mem = host_memory();
  auto w = random_buffer<float>(mem, sz(m * n), 30, 1.0f);
  auto x = random_buffer<float>(mem, sz(T * n), 31, 1.0f);
  auto y = random_buffer<float>(mem, sz(T * m), 32, 1.0f);
  const std::string shape = fmt::format("{}x{} T={} ({:.2f} MB)", m, n, T, 4.0 * m * n / 1e6);
  return {std::move(name), shape, 2.0 * T * m * n, 0, "", [=] {
            if (T == 1)
              cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<blasint>(m), static_cast<blasint>(n), 1.0f, w->data(),
                          static_cast<blasint>(n), x->data(), 1, 0.0f, y->data(), 1);
            else
              cpu::sgemm(false, true, T, m, n, 1.0f, x->data(), n, w->data(), n, 0.0f, y->data(), m);
          }};
}

}  // namespace

std::vector<BenchCase> cpu_bench_cases(Backend<float>& be) {
  std::vector<BenchCase> cases;
  Memory& mem = *be.memory;
  Backend<float>* b = &be;
  const index_t T = 512, d = 576, r = 256, ffn = 1536;

  add_blr_anchors(cases, d, d, r, T, 2);
  for (auto& c : blr_cases(be, d, d, r, T, 2, {"sgemm, BLR sign-grad shapes", "sgemm, six BLR GEMMs"}))
    cases.push_back(std::move(c));

  cases.push_back(sgemm_case("sgemm 512x576x576", T, d, d));
  {  // staged f16 GEMM: stage the activation, multiply by an f16 weight plane
    auto x = random_buffer<float>(mem, sz(T * d), 4, 1.0f);
    auto act = std::make_shared<Buffer<f16>>(mem, sz(pad_rows(T) * d));
    auto plane = random_buffer<f16>(mem, sz(d * d), 5, 1.0f);
    auto out = random_buffer<float>(mem, sz(T * d), 6, 1.0f);
    cases.push_back({"stage+gemm (f16 operands)", fmt::format("{}x{}x{}", T, d, d), 2.0 * T * d * d, 0,
                     "sgemm 512x576x576", [=] {
                       b->gemm().stage(x->view({T, d}), {}, 1.0f, act->view({pad_rows(T), d}));
                       b->gemm().gemm(act->view({pad_rows(T), d}), plane->view({d, d}), 1.0f, out->view({T, d}));
                     }});
  }
  {  // sign bitmap → ±1 planes (memory-bound: two f16 planes written)
    auto bits = random_buffer<std::uint32_t>(mem, sz(d * sign_words(r)), 7, 1.0f);
    auto pl = std::make_shared<Buffer<f16>>(mem, sz(d * r));
    auto pt = std::make_shared<Buffer<f16>>(mem, sz(d * r));
    cases.push_back({"expand_signs", fmt::format("{}x{}", d, r), 0, 2.0 * 2 * d * r, "", [=] {
                       b->bitmap().expand_signs(bits->view({d, sign_words(r)}), r, pl->view({d, r}), pt->view({r, d}));
                     }});
  }
  {  // RMSNorm forward + backward + gain gradient over [T][d]
    auto x = random_buffer<float>(mem, sz(T * d), 8, 1.0f);
    auto w = random_buffer<float>(mem, sz(d), 9, 1.0f);
    auto y = random_buffer<float>(mem, sz(T * d), 10, 1.0f);
    auto inv = random_buffer<float>(mem, sz(T), 11, 1.0f);
    auto dw = random_buffer<float>(mem, sz(d), 12, 1.0f);
    cases.push_back({"rmsnorm fwd+bwd+dw", fmt::format("{}x{}", T, d), 0, 4.0 * 5 * T * d, "", [=] {
                       auto& nrm = b->norm();
                       nrm.rmsnorm_forward(x->view({T, d}), w->view({d}), GainStyle::zero_centred, 1e-6f,
                                           y->view({T, d}), inv->view({T}));
                       nrm.rmsnorm_backward(x->view({T, d}), w->view({d}), inv->view({T}), y->view({T, d}),
                                            GainStyle::zero_centred, y->view({T, d}));
                       nrm.rmsnorm_gain_grad(x->view({T, d}), inv->view({T}), y->view({T, d}), dw->view({d}));
                     }});
  }
  {  // SwiGLU forward + backward at the MLP width
    const index_t n = T * ffn;
    auto g = random_buffer<float>(mem, sz(n), 13, 3.0f);
    auto u = random_buffer<float>(mem, sz(n), 14, 1.0f);
    auto o = random_buffer<float>(mem, sz(n), 15, 1.0f);
    auto dg = random_buffer<float>(mem, sz(n), 16, 1.0f);
    auto du = random_buffer<float>(mem, sz(n), 17, 1.0f);
    cases.push_back({"swiglu fwd+bwd", fmt::format("{}x{}", T, ffn), 0, 4.0 * 8 * n, "", [=] {
                       b->act().swiglu_forward(g->view({n}), u->view({n}), o->view({n}));
                       b->act().swiglu_backward(g->view({n}), u->view({n}), o->view({n}), dg->view({n}), du->view({n}));
                     }});
  }
  {  // Adam over 1M parameters
    const index_t n = 1 << 20;
    auto w = random_buffer<float>(mem, sz(n), 18, 1.0f);
    auto gr = random_buffer<float>(mem, sz(n), 19, 1e-3f);
    auto m1 = filled_buffer<float>(mem, sz(n), 0.0f);
    auto v1 = filled_buffer<float>(mem, sz(n), 0.0f);
    cases.push_back({"adam", fmt::format("{}", n), 0, 4.0 * 7 * n, "", [=] {
                       AdamOptions opt;
                       opt.step = 3;
                       b->adam().adam_update(w->view({n}), gr->view({n}), m1->view({n}), v1->view({n}), {}, opt);
                     }});
  }
  {  // the decode head at one token (SmolLM2's tied 49,152 × 576): in f16, and as Q8_0 blocks where the file holds them
    const index_t V = 49152;
    auto x = random_buffer<float>(mem, sz(d), 40, 1.0f);
    auto w16 = random_buffer<f16>(mem, sz(V * d), 41, 0.05f);
    auto wq = random_buffer<q8_0>(mem, sz(V * d / kQ8Block), 42, 0.05f);
    auto z = random_buffer<float>(mem, sz(V), 43, 1.0f);
    const std::string shape = fmt::format("{}x{} T=1", V, d);
    cases.push_back({"head f16", shape + fmt::format(" ({:.1f} MB)", 2.0 * V * d / 1e6), 2.0 * V * d, 0, "", [=] {
                       b->dense().dense_forward_f16(x->view({1, d}), w16->view({V, d}), z->view({1, V}), false);
                     }});
    cases.push_back({"head q8_0", shape + fmt::format(" ({:.1f} MB)", 34.0 * V * d / kQ8Block / 1e6), 2.0 * V * d, 0,
                     "head f16", [=] {
                       b->dense().dense_forward_q8(x->view({1, d}), wq->view({V, d / kQ8Block}), z->view({1, V}),
                                                   false);
                     }});
  }
  for (const InferShape& s : blr_infer_shapes())
    for (index_t T : {1, 8}) {
      const std::string dense = fmt::format("dense f32 {}x{} T={}", s.m, s.n, T);
      cases.push_back(dense_layer_case(dense, s.m, s.n, T));
      for (auto& c : blr_infer_cases(be, s, 2, T, dense, 1)) cases.push_back(std::move(c));
    }
  if (be.attention_ops) cases.push_back(attention_case(be, 1, T, 9, 3, 64));  // SmolLM2-135M's attention
  if (be.gdn_ops) cases.push_back(gdn_case(be, 1, 256, 4, 12, 128));         // a quarter of Qwen3.5-27B's GDN heads
  cases.push_back(layerwise_step_case(be, 1, 256));
  return cases;
}

}  // namespace bitrank::bench
