#include "cli/bench_util.hpp"

#include <fmt/format.h>

namespace bitrank::cli {

std::vector<BenchCase> blr_cases(Backend<float>& be, index_t m, index_t n, index_t r, index_t T, index_t P,
                                 const std::string& fwd_bwd_anchor, const std::string& sign_anchor) {
  if (!be.blr_ops) return {};
  Memory& mem = *be.memory;
  struct State {
    std::vector<std::shared_ptr<Buffer<std::uint32_t>>> su, sv;
    std::vector<std::shared_ptr<Buffer<float>>> h, l, g, dh, dl, dg;
    std::vector<BlrPath<float>> paths;
    std::shared_ptr<Buffer<float>> x, y, dy, dx, a, c, b, gu, gv;
  };
  auto st = std::make_shared<State>();
  const auto sz = [](index_t v) { return static_cast<std::size_t>(v); };
  for (index_t p = 0; p < P; ++p) {
    const auto s = static_cast<std::uint64_t>(p) * 16;
    st->su.push_back(random_buffer<std::uint32_t>(mem, sz(m * sign_words(r)), 100 + s, 1.0f));
    st->sv.push_back(random_buffer<std::uint32_t>(mem, sz(n * sign_words(r)), 101 + s, 1.0f));
    st->h.push_back(random_buffer<float>(mem, sz(m), 102 + s, 0.05f));
    st->l.push_back(random_buffer<float>(mem, sz(r), 103 + s, 1.0f));
    st->g.push_back(random_buffer<float>(mem, sz(n), 104 + s, 0.2f));
    st->dh.push_back(random_buffer<float>(mem, sz(m), 105 + s, 1.0f));
    st->dl.push_back(random_buffer<float>(mem, sz(r), 106 + s, 1.0f));
    st->dg.push_back(random_buffer<float>(mem, sz(n), 107 + s, 1.0f));
  }
  for (std::size_t p = 0; p < static_cast<std::size_t>(P); ++p)
    st->paths.push_back({st->su[p]->view({m, sign_words(r)}), st->sv[p]->view({n, sign_words(r)}), st->h[p]->view({m}),
                         st->l[p]->view({r}), st->g[p]->view({n}), st->dh[p]->view({m}), st->dl[p]->view({r}),
                         st->dg[p]->view({n})});
  st->x = random_buffer<float>(mem, sz(T * n), 90, 2.0f);
  st->dy = random_buffer<float>(mem, sz(T * m), 91, 1e-3f);
  st->y = random_buffer<float>(mem, sz(T * m), 92, 1.0f);
  st->dx = random_buffer<float>(mem, sz(T * n), 93, 1.0f);
  st->a = random_buffer<float>(mem, sz(P * T * r), 94, 1.0f);
  st->b = random_buffer<float>(mem, sz(P * T * r), 95, 1.0f);
  st->c = random_buffer<float>(mem, sz(P * T * m), 96, 1.0f);
  st->gu = random_buffer<float>(mem, sz(P * m * r), 97, 1.0f);
  st->gv = random_buffer<float>(mem, sz(P * n * r), 98, 1.0f);

  Backend<float>* bp = &be;
  auto layer = [st, m, n, r] { return BlrLayer<float>{m, n, r, st->paths}; };
  auto saved = [st, P, T, m, r] { return BlrSaved<float>{st->a->view({P, T, r}), st->c->view({P, T, m})}; };
  const std::string shape = fmt::format("m={} n={} r={} T={} P={}", m, n, r, T, P);
  std::vector<BenchCase> cases;
  cases.push_back({"blr fwd+bwd", shape, blr_fwd_bwd_flops(m, n, r, T, P), 0, fwd_bwd_anchor, [=] {
                     bp->blr().blr_forward(layer(), st->x->view({T, n}), st->y->view({T, m}), saved());
                     bp->blr().blr_backward(layer(), st->x->view({T, n}), st->dy->view({T, m}), saved(),
                                            st->dx->view({T, n}), 1024.0f, st->b->view({P, T, r}));
                   }});
  cases.push_back({"blr sign grads", shape, blr_sign_flops(m, n, r, T, P), 0, sign_anchor, [=] {
                     bp->blr().blr_sign_grad(layer(), st->x->view({T, n}), st->dy->view({T, m}),
                                             st->a->view({P, T, r}), st->b->view({P, T, r}), 1024.0f,
                                             st->gu->view({P, m, r}), st->gv->view({P, n, r}));
                   }});
  return cases;
}

}  // namespace bitrank::cli
