// CPU benchmark cases: SmolLM2-135M-sized shapes (hidden 576, 512 tokens),
// each GEMM-shaped op next to OpenBLAS sgemm doing the same FLOPs.
#include <algorithm>
#include <memory>

#include "bitrank/rng.hpp"
#include "cli/bench.hpp"
#include "cpu/kernels.hpp"

namespace bitrank::cli {
namespace {

// A host buffer of random values that lives as long as the case's lambda.
template <class T>
std::shared_ptr<Buffer<T>> random_buffer(std::size_t n, std::uint64_t seed, float scale) {
  auto b = std::make_shared<Buffer<T>>(host_memory(), n);
  auto v = rnd(n, seed, scale);
  if constexpr (std::is_same_v<T, f16>) {
    for (std::size_t i = 0; i < n; ++i) b->data()[i] = to_f16(v[i]);
  } else {
    for (std::size_t i = 0; i < n; ++i) b->data()[i] = static_cast<T>(v[i]);
  }
  return b;
}

// sgemm of out[m][n] = a[m][k]·b[n][k]ᵀ, the anchor of GEMM-shaped work.
BenchCase sgemm_case(std::string name, index_t m, index_t n, index_t k) {
  auto a = random_buffer<float>(static_cast<std::size_t>(m * k), 1, 1.0f);
  auto b = random_buffer<float>(static_cast<std::size_t>(n * k), 2, 1.0f);
  auto c = random_buffer<float>(static_cast<std::size_t>(m * n), 3, 1.0f);
  return {std::move(name), fmt::format("{}x{}x{}", m, n, k), 2.0 * m * n * k, 0, "",
          [=] { cpu::sgemm(false, true, m, n, k, 1.0f, a->data(), k, b->data(), k, 0.0f, c->data(), n); }};
}

// The BLR layer of one SmolLM2-sized projection, with the sgemm calls of the
// same shapes as its anchor: per path the forward's two GEMMs (x·S_V,
// a·S_Uᵀ) and the backward's two (dy·S_U, b·S_Vᵀ); sign gradients add two
// more (dyᵀ·a, xᵀ·b).
void add_blr_cases(std::vector<BenchCase>& cases, Backend<float>& be) {
  const index_t m = 576, n = 576, r = 256, T = 512, P = 2;
  const std::string shape = fmt::format("m=n={} r={} T={} P={}", m, r, T, P);
  const double fwd_bwd_flops = P * 4 * 2.0 * T * r * (m + n) / 2;  // 4 GEMMs, each 2·T·r·(m or n)
  const double sign_flops = P * 2 * 2.0 * T * r * (m + n) / 2;
  {
    auto xs = random_buffer<float>(static_cast<std::size_t>(T * std::max(m, n)), 20, 1.0f);
    auto ws = random_buffer<float>(static_cast<std::size_t>(std::max(m, n) * r), 21, 1.0f);
    auto as = random_buffer<float>(static_cast<std::size_t>(T * r), 22, 1.0f);
    auto os = random_buffer<float>(static_cast<std::size_t>(T * std::max(m, n)), 23, 1.0f);
    auto gs = random_buffer<float>(static_cast<std::size_t>(std::max(m, n) * r), 24, 1.0f);
    auto run4 = [=] {
      for (index_t p = 0; p < P; ++p) {
        cpu::sgemm(false, false, T, r, n, 1.0f, xs->data(), n, ws->data(), r, 0.0f, as->data(), r);  // x·S_V
        cpu::sgemm(false, true, T, m, r, 1.0f, as->data(), r, ws->data(), r, 0.0f, os->data(), m);   // a·S_Uᵀ
        cpu::sgemm(false, false, T, r, m, 1.0f, xs->data(), m, ws->data(), r, 0.0f, as->data(), r);  // dy·S_U
        cpu::sgemm(false, true, T, n, r, 1.0f, as->data(), r, ws->data(), r, 0.0f, os->data(), n);   // b·S_Vᵀ
      }
    };
    cases.push_back({"sgemm, BLR fwd+bwd shapes", shape, fwd_bwd_flops, 0, "", run4});
    cases.push_back({"sgemm, BLR sign-grad shapes", shape, sign_flops, 0, "", [=] {
                       for (index_t p = 0; p < P; ++p) {
                         cpu::sgemm(true, false, m, r, T, 1.0f, xs->data(), m, as->data(), r, 0.0f, gs->data(), r);
                         cpu::sgemm(true, false, n, r, T, 1.0f, xs->data(), n, as->data(), r, 0.0f, gs->data(), r);
                       }
                     }});
  }
  if (!be.blr_ops) return;
  struct State {
    std::vector<Buffer<std::uint32_t>> su, sv;
    std::vector<std::shared_ptr<Buffer<float>>> h, l, g, dh, dl, dg;
    std::vector<BlrPath<float>> paths;
    std::shared_ptr<Buffer<float>> x, y, dy, dx, a, c, b, gu, gv;
  };
  auto st = std::make_shared<State>();
  for (index_t p = 0; p < P; ++p) {
    for (auto [bits, rows] : {std::pair{&st->su, m}, std::pair{&st->sv, n}}) {
      Buffer<std::uint32_t> w(host_memory(), static_cast<std::size_t>(rows * sign_words(r)));
      XorShift rng(static_cast<std::uint64_t>(100 + p * 2 + (rows == n)));
      for (std::size_t i = 0; i < w.size(); ++i) w.data()[i] = static_cast<std::uint32_t>(rng.next_u64());
      bits->push_back(std::move(w));
    }
    st->h.push_back(random_buffer<float>(static_cast<std::size_t>(m), 30 + p, 0.05f));
    st->l.push_back(random_buffer<float>(static_cast<std::size_t>(r), 40 + p, 1.0f));
    st->g.push_back(random_buffer<float>(static_cast<std::size_t>(n), 50 + p, 0.2f));
    st->dh.push_back(random_buffer<float>(static_cast<std::size_t>(m), 60 + p, 1.0f));
    st->dl.push_back(random_buffer<float>(static_cast<std::size_t>(r), 70 + p, 1.0f));
    st->dg.push_back(random_buffer<float>(static_cast<std::size_t>(n), 80 + p, 1.0f));
  }
  for (index_t p = 0; p < P; ++p) {
    const auto i = static_cast<std::size_t>(p);
    st->paths.push_back({st->su[i].view({m, sign_words(r)}), st->sv[i].view({n, sign_words(r)}), st->h[i]->view({m}),
                         st->l[i]->view({r}), st->g[i]->view({n}), st->dh[i]->view({m}), st->dl[i]->view({r}),
                         st->dg[i]->view({n})});
  }
  st->x = random_buffer<float>(static_cast<std::size_t>(T * n), 90, 2.0f);
  st->dy = random_buffer<float>(static_cast<std::size_t>(T * m), 91, 1e-3f);
  st->y = random_buffer<float>(static_cast<std::size_t>(T * m), 92, 1.0f);
  st->dx = random_buffer<float>(static_cast<std::size_t>(T * n), 93, 1.0f);
  st->a = random_buffer<float>(static_cast<std::size_t>(P * T * r), 94, 1.0f);
  st->b = random_buffer<float>(static_cast<std::size_t>(P * T * r), 95, 1.0f);
  st->c = random_buffer<float>(static_cast<std::size_t>(P * T * m), 96, 1.0f);
  st->gu = random_buffer<float>(static_cast<std::size_t>(P * m * r), 97, 1.0f);
  st->gv = random_buffer<float>(static_cast<std::size_t>(P * n * r), 98, 1.0f);
  Backend<float>* bp = &be;
  auto layer = [st, m, n, r] { return BlrLayer<float>{m, n, r, st->paths}; };
  auto saved = [st, P, T, m, r] { return BlrSaved<float>{st->a->view({P, T, r}), st->c->view({P, T, m})}; };
  cases.push_back({"blr fwd+bwd", shape, fwd_bwd_flops, 0, "sgemm, BLR fwd+bwd shapes", [=] {
                     bp->blr().blr_forward(layer(), st->x->view({T, n}), st->y->view({T, m}), saved());
                     bp->blr().blr_backward(layer(), st->x->view({T, n}), st->dy->view({T, m}), saved(),
                                            st->dx->view({T, n}), 1024.0f, st->b->view({P, T, r}));
                   }});
  cases.push_back({"blr sign grads", shape, sign_flops, 0, "sgemm, BLR sign-grad shapes", [=] {
                     bp->blr().blr_sign_grad(layer(), st->x->view({T, n}), st->dy->view({T, m}), st->a->view({P, T, r}),
                                             st->b->view({P, T, r}), 1024.0f, st->gu->view({P, m, r}),
                                             st->gv->view({P, n, r}));
                   }});
}

}  // namespace

std::vector<BenchCase> cpu_bench_cases(Backend<float>& be) {
  std::vector<BenchCase> cases;
  const index_t T = 512, d = 576, r = 256;

  cases.push_back(sgemm_case("sgemm 512x576x576", T, d, d));
  {  // staged f16 GEMM: stage the activation, multiply by an f16 plane
    auto x = random_buffer<float>(static_cast<std::size_t>(T * d), 4, 1.0f);
    auto act = std::make_shared<Buffer<f16>>(host_memory(), static_cast<std::size_t>(pad_rows(T) * d));
    auto plane = random_buffer<f16>(static_cast<std::size_t>(d * d), 5, 1.0f);
    auto out = random_buffer<float>(static_cast<std::size_t>(T * d), 6, 1.0f);
    Backend<float>* b = &be;
    if (be.gemm_ops)
      cases.push_back({"stage+gemm (f16 operands)", fmt::format("{}x{}x{}", T, d, d), 2.0 * T * d * d, 0,
                       "sgemm 512x576x576", [=] {
                         b->gemm().stage(x->view({T, d}), {}, 1.0f, act->view({pad_rows(T), d}));
                         b->gemm().gemm(act->view({pad_rows(T), d}), plane->view({d, d}), 1.0f, out->view({T, d}));
                       }});
  }
  {  // sign bitmap → ±1 planes (memory-bound)
    auto bits = std::make_shared<Buffer<std::uint32_t>>(host_memory(), static_cast<std::size_t>(d * sign_words(r)));
    for (std::size_t i = 0; i < bits->size(); ++i) bits->data()[i] = static_cast<std::uint32_t>(i * 2654435761u);
    auto pl = std::make_shared<Buffer<f16>>(host_memory(), static_cast<std::size_t>(d * r));
    auto pt = std::make_shared<Buffer<f16>>(host_memory(), static_cast<std::size_t>(d * r));
    Backend<float>* b = &be;
    cases.push_back({"expand_signs", fmt::format("{}x{}", d, r), 0, 2.0 * 2 * d * r, "", [=] {
                       b->bitmap().expand_signs(bits->view({d, sign_words(r)}), r, pl->view({d, r}), pt->view({r, d}));
                     }});
  }
  {  // RMSNorm forward + backward + gain gradient over [T][d]
    auto x = random_buffer<float>(static_cast<std::size_t>(T * d), 7, 1.0f);
    auto w = random_buffer<float>(static_cast<std::size_t>(d), 8, 1.0f);
    auto y = random_buffer<float>(static_cast<std::size_t>(T * d), 9, 1.0f);
    auto inv = random_buffer<float>(static_cast<std::size_t>(T), 10, 1.0f);
    auto dw = random_buffer<float>(static_cast<std::size_t>(d), 11, 1.0f);
    Backend<float>* b = &be;
    cases.push_back({"rmsnorm fwd+bwd+dw", fmt::format("{}x{}", T, d), 0, 4.0 * 5 * T * d, "", [=] {
                       auto& n = b->norm();
                       n.rmsnorm_forward(x->view({T, d}), w->view({d}), GainStyle::zero_centred, 1e-6f, y->view({T, d}),
                                         inv->view({T}));
                       n.rmsnorm_backward(x->view({T, d}), w->view({d}), inv->view({T}), y->view({T, d}),
                                          GainStyle::zero_centred, y->view({T, d}));
                       n.rmsnorm_gain_grad(x->view({T, d}), inv->view({T}), y->view({T, d}), dw->view({d}));
                     }});
  }
  {  // SwiGLU forward + backward at the MLP width of SmolLM2-135M (1536)
    const index_t n = T * 1536;
    auto g = random_buffer<float>(static_cast<std::size_t>(n), 12, 3.0f);
    auto u = random_buffer<float>(static_cast<std::size_t>(n), 13, 1.0f);
    auto o = random_buffer<float>(static_cast<std::size_t>(n), 14, 1.0f);
    auto dg = random_buffer<float>(static_cast<std::size_t>(n), 15, 1.0f);
    auto du = random_buffer<float>(static_cast<std::size_t>(n), 16, 1.0f);
    Backend<float>* b = &be;
    cases.push_back({"swiglu fwd+bwd", fmt::format("{}x1536", T), 0, 4.0 * 8 * n, "", [=] {
                       b->act().swiglu_forward(g->view({n}), u->view({n}), o->view({n}));
                       b->act().swiglu_backward(g->view({n}), u->view({n}), o->view({n}), dg->view({n}), du->view({n}));
                     }});
  }
  {  // Adam over the scales of one 576×576 BLR layer's two paths, sized up to 1M entries
    const index_t n = 1 << 20;
    auto w = random_buffer<float>(static_cast<std::size_t>(n), 17, 1.0f);
    auto gr = random_buffer<float>(static_cast<std::size_t>(n), 18, 1e-3f);
    auto m = std::make_shared<Buffer<float>>(host_memory(), static_cast<std::size_t>(n));
    auto v = std::make_shared<Buffer<float>>(host_memory(), static_cast<std::size_t>(n));
    std::fill(m->data(), m->data() + n, 0.0f);
    std::fill(v->data(), v->data() + n, 0.0f);
    Backend<float>* b = &be;
    cases.push_back({"adam", fmt::format("{}", n), 0, 4.0 * 7 * n, "", [=] {
                       AdamOptions opt;
                       opt.step = 3;
                       b->adam().adam_update(w->view({n}), gr->view({n}), m->view({n}), v->view({n}), {}, opt);
                     }});
  }
  add_blr_cases(cases, be);
  return cases;
}

}  // namespace bitrank::cli
