#include "bench/bench_util.hpp"

#include <fmt/format.h>

#include <array>

#include "bitrank/blr/accounting.hpp"
#include "bitrank/model/llama_block.hpp"
#include "bitrank/train/layerwise.hpp"
#include "bitrank/train/random_weights.hpp"

namespace bitrank::bench {

std::vector<InferShape> blr_infer_shapes() {
  constexpr int kPaths = 2;
  const model::LlamaBlockDims dims{.hidden = 576, .heads = 9, .kv_heads = 3, .head_dim = 64, .ffn = 1536};
  std::vector<blr::RankPlan> plan;
  for (model::LlamaProj p : model::kAllLlamaProjs)
    plan.push_back({model::llama_proj_name(p), dims.out_features(p), dims.in_features(p), 0});
  plan = blr::plan_ranks(std::move(plan), 1.0, kPaths, 16);
  std::vector<InferShape> shapes;
  for (model::LlamaProj p : {model::LlamaProj::q, model::LlamaProj::up, model::LlamaProj::down}) {
    const blr::RankPlan& e = plan[static_cast<std::size_t>(p)];
    shapes.push_back({e.m, e.n, e.rank});
  }
  for (index_t m : {4096, 11008}) shapes.push_back({m, 4096, blr::rank_for_bpw(m, 4096, 1.0, kPaths, 16)});
  return shapes;
}

std::vector<BenchCase> blr_infer_cases(Backend<float>& be, const InferShape& s, index_t P, index_t T,
                                       const std::string& anchor, int reps) {
  if (!be.blr_ops) return {};
  Memory& mem = *be.memory;
  const index_t m = s.m, n = s.n, r = s.r;
  const auto sz = [](index_t v) { return static_cast<std::size_t>(v); };
  struct State {
    std::vector<std::shared_ptr<Buffer<std::uint32_t>>> bits;
    std::vector<std::shared_ptr<Buffer<float>>> scales;
    std::vector<BlrPath<float>> paths, infer_paths;
    std::shared_ptr<Buffer<float>> x, y, a;
  };
  auto st = std::make_shared<State>();
  for (index_t p = 0; p < P; ++p) {
    const auto seed = static_cast<std::uint64_t>(p) * 8;
    st->bits.push_back(random_buffer<std::uint32_t>(mem, sz(m * sign_words(r)), 40 + seed, 1.0f));
    st->bits.push_back(random_buffer<std::uint32_t>(mem, sz(n * sign_words(r)), 41 + seed, 1.0f));
    st->scales.push_back(random_buffer<float>(mem, sz(m + r + n), 42 + seed, 1.0f));
    const float* sc = st->scales.back()->data();
    st->paths.push_back({st->bits[sz(2 * p)]->view({m, sign_words(r)}), st->bits[sz(2 * p + 1)]->view({n, sign_words(r)}),
                         CView<float>(sc, Shape{m}), CView<float>(sc + m, Shape{r}), CView<float>(sc + m + r, Shape{n}),
                         {}, {}, {}});
  }
  st->x = random_buffer<float>(mem, sz(T * n), 43, 1.0f);
  st->y = random_buffer<float>(mem, sz(T * m), 44, 1.0f);
  st->a = random_buffer<float>(mem, sz(P * T * r), 45, 1.0f);
  const double bytes = static_cast<double>(P) * ((m + n) * r / 8.0 + 4.0 * (m + n + r));
  const std::string shape = fmt::format("m={} n={} r={} P={} T={} ({:.2f} MB)", m, n, r, P, T, bytes / 1e6);
  Backend<float>* b = &be;
  const BlrLayer<float> layer{m, n, r, st->paths};
  // blr_infer's layer as a loaded model holds it: with sign blocks where the backend reads them.
  st->infer_paths = st->paths;
  if (be.blr().reads_sign_blocks())
    for (index_t p = 0; p < P; ++p) {
      BlrPath<float>& path = st->infer_paths[sz(p)];
      std::vector<std::uint32_t> u(sz(m * sign_words(r))), v(sz(n * sign_words(r)));
      mem.download(u.data(), path.sign_u.data, u.size() * sizeof(std::uint32_t));
      mem.download(v.data(), path.sign_v.data, v.size() * sizeof(std::uint32_t));
      std::vector<std::uint32_t> host(sz(sign_blocks_words(m, n, r)));
      make_sign_blocks(u.data(), v.data(), m, n, r, host.data());
      st->bits.push_back(std::make_shared<Buffer<std::uint32_t>>(mem, host.size()));
      std::uint32_t* blocks = st->bits.back()->data();
      mem.upload(blocks, host.data(), host.size() * sizeof(std::uint32_t));
      path.point_sign_blocks(blocks, m, n, r);
    }
  const BlrLayer<float> infer_layer{m, n, r, st->infer_paths};
  const double flops = 2.0 * T * m * n * reps;
  return {{"blr_infer", shape, flops, 0, anchor,
           [=] {
             for (int i = 0; i < reps; ++i) b->blr().blr_infer(infer_layer, st->x->view({T, n}), st->y->view({T, m}));
           }},
          {"blr_forward (inference)", shape, flops, 0, anchor, [=] {
             for (int i = 0; i < reps; ++i)
               b->blr().blr_forward(layer, st->x->view({T, n}), st->y->view({T, m}), {st->a->view({P, T, r})});
           }}};
}

std::vector<BenchCase> blr_cases(Backend<float>& be, index_t m, index_t n, index_t r, index_t T, index_t P,
                                 const BlrAnchors& anchors) {
  if (!be.blr_ops) return {};
  Memory& mem = *be.memory;
  struct State {
    std::vector<std::shared_ptr<Buffer<std::uint32_t>>> su, sv;
    std::vector<std::shared_ptr<Buffer<float>>> h, l, g, dh, dl, dg;
    std::vector<BlrPath<float>> paths;
    std::shared_ptr<Buffer<float>> x, y, dy, dx, a, b, gu, gv;
    std::shared_ptr<Buffer<f16>> xs, planes;  // the forward's staged x and GEMM planes, as the trainer keeps them
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
  st->gu = random_buffer<float>(mem, sz(P * m * r), 97, 1.0f);
  st->gv = random_buffer<float>(mem, sz(P * n * r), 98, 1.0f);
  st->xs = std::make_shared<Buffer<f16>>(mem, sz(T * n));
  st->planes = std::make_shared<Buffer<f16>>(mem, sz(P * (m + n) * r));

  Backend<float>* bp = &be;
  auto layer = [st, m, n, r] { return BlrLayer<float>{m, n, r, st->paths}; };
  auto saved = [st, P, T, r, n, m] {
    return BlrSaved<float>{st->a->view({P, T, r}), st->xs->view({T, n}), st->planes->view({P, (m + n) * r})};
  };
  const std::string shape = fmt::format("m={} n={} r={} T={} P={}", m, n, r, T, P);
  auto forward_backward = [=] {
    bp->blr().blr_forward(layer(), st->x->view({T, n}), st->y->view({T, m}), saved());
    bp->blr().blr_backward(layer(), st->x->view({T, n}), st->dy->view({T, m}), saved(), st->dx->view({T, n}), 1024.0f,
                           st->b->view({P, T, r}));
  };
  auto sign_grads = [=] {
    bp->blr().blr_sign_grad(layer(), st->x->view({T, n}), st->dy->view({T, m}), st->a->view({P, T, r}),
                            st->b->view({P, T, r}), 1024.0f, st->gu->view({P, m, r}), st->gv->view({P, n, r}));
  };
  const double fb = blr_fwd_bwd_flops(m, n, r, T, P), sg = blr_sign_flops(m, n, r, T, P);
  std::vector<BenchCase> cases;
  // The backward forms the token sums E_U, E_V for dh and dg: six GEMMs, as the trainer's call.
  cases.push_back({"blr fwd+bwd", shape, fb + sg, 0, anchors.all, forward_backward});
  cases.push_back({"blr sign grads", shape, sg, 0, anchors.sign, sign_grads});
  // The trainer's sequence: the forward, then the backward and sign gradients in one call.
  cases.push_back({"blr fwd+bwd+sign", shape, fb + sg, 0, anchors.all, [=] {
                     bp->blr().blr_forward(layer(), st->x->view({T, n}), st->y->view({T, m}), saved());
                     bp->blr().blr_backward_sign_grad(layer(), st->x->view({T, n}), st->dy->view({T, m}), saved(),
                                                      st->dx->view({T, n}), 1024.0f, st->b->view({P, T, r}),
                                                      st->gu->view({P, m, r}), st->gv->view({P, n, r}));
                   }});
  return cases;
}

BenchCase attention_case(Backend<float>& be, index_t windows, index_t T, index_t heads, index_t kv_heads, index_t hd) {
  Memory& mem = *be.memory;
  const index_t n = windows * T;
  const auto sz = [](index_t v) { return static_cast<std::size_t>(v); };
  auto q = random_buffer<float>(mem, sz(n * heads * hd), 200, 1.0f);
  auto k = random_buffer<float>(mem, sz(n * kv_heads * hd), 201, 1.0f);
  auto v = random_buffer<float>(mem, sz(n * kv_heads * hd), 202, 1.0f);
  auto dout = random_buffer<float>(mem, sz(n * heads * hd), 203, 1.0f);
  auto out = filled_buffer<float>(mem, sz(n * heads * hd), 0.0f);
  auto dq = filled_buffer<float>(mem, sz(n * heads * hd), 0.0f);
  auto dk = filled_buffer<float>(mem, sz(n * kv_heads * hd), 0.0f);
  auto dv = filled_buffer<float>(mem, sz(n * kv_heads * hd), 0.0f);
  auto lse = filled_buffer<float>(mem, sz(n * heads), 0.0f);
  auto delta = filled_buffer<float>(mem, sz(n * heads), 0.0f);
  const AttentionGeometry geo{T, heads, kv_heads, hd};
  const double fwd = 2.0 * windows * heads * static_cast<double>(T) * T * hd;  // causal half of 4·T²·hd
  Backend<float>* b = &be;
  return {"attention fwd+bwd", fmt::format("{}x{} h={}/{} hd={}", windows, T, heads, kv_heads, hd), 3.5 * fwd, 0, "",
          [=] {
            const Shape qs{n, heads * hd}, ks{n, kv_heads * hd}, ls{n, heads};
            b->attention().attention_forward(q->view(qs), k->view(ks), v->view(ks), geo, out->view(qs), lse->view(ls));
            b->attention().attention_backward(q->view(qs), k->view(ks), v->view(ks), out->view(qs), lse->view(ls),
                                              dout->view(qs), geo, delta->view(ls), dq->view(qs), dk->view(ks),
                                              dv->view(ks));
          }};
}

GdnConfig gdn_bench_config(index_t T, index_t k_heads, index_t v_heads, index_t d) {
  GdnConfig cfg;
  cfg.k_heads = k_heads;
  cfg.v_heads = v_heads;
  cfg.head_dim = d;
  cfg.window = T;
  return cfg;
}

BenchCase gdn_case(Backend<float>& be, index_t windows, index_t T, index_t k_heads, index_t v_heads, index_t d) {
  Memory& mem = *be.memory;
  const std::size_t held_before = mem.current_bytes();
  const GdnConfig cfg = gdn_bench_config(T, k_heads, v_heads, d);
  const index_t n = windows * T, C = cfg.channels(), V = cfg.value_width();
  const auto sz = [](index_t v) { return static_cast<std::size_t>(v); };
  auto conv = random_buffer<float>(mem, sz(C * cfg.conv_kernel), 210, 0.5f);
  auto a_log = random_buffer<float>(mem, sz(v_heads), 211, 0.5f);
  auto dt_bias = random_buffer<float>(mem, sz(v_heads), 212, 0.5f);
  auto gain = random_buffer<float>(mem, sz(d), 213, 1.0f);
  auto qkv = random_buffer<float>(mem, sz(n * C), 214, 1.0f);
  auto z = random_buffer<float>(mem, sz(n * V), 215, 1.0f);
  auto a = random_buffer<float>(mem, sz(n * v_heads), 216, 1.0f);
  auto bb = random_buffer<float>(mem, sz(n * v_heads), 217, 1.0f);
  auto dout = random_buffer<float>(mem, sz(n * V), 218, 1.0f);
  auto out = filled_buffer<float>(mem, sz(n * V), 0.0f);
  const index_t tape_floats = gdn_tape_size(cfg, n);
  auto tape = filled_buffer<float>(mem, sz(tape_floats), 0.0f);
  auto dqkv = filled_buffer<float>(mem, sz(n * C), 0.0f);
  auto dz = filled_buffer<float>(mem, sz(n * V), 0.0f);
  auto da = filled_buffer<float>(mem, sz(n * v_heads), 0.0f);
  auto db = filled_buffer<float>(mem, sz(n * v_heads), 0.0f);
  Backend<float>* b = &be;
  const double flops = 28.0 * static_cast<double>(d) * d * n * v_heads;
  auto body = [=] {
    const GdnParams<float> prm{conv->view({C, cfg.conv_kernel}), a_log->view({v_heads}), dt_bias->view({v_heads}),
                               gain->view({d})};
    const index_t tsize = static_cast<index_t>(tape->size());
    b->gdn().gdn_forward(cfg, prm, qkv->view({n, C}), z->view({n, V}), a->view({n, v_heads}), bb->view({n, v_heads}),
                         out->view({n, V}), tape->view({tsize}));
    b->gdn().gdn_backward(cfg, prm, qkv->view({n, C}), z->view({n, V}), tape->view({tsize}), dout->view({n, V}),
                          dqkv->view({n, C}), dz->view({n, V}), da->view({n, v_heads}), db->view({n, v_heads}));
  };
  const std::string shape = fmt::format("{}x{} hk={} hv={} d={}", windows, T, k_heads, v_heads, d);
  BenchCase c{"gdn fwd+bwd", shape, flops, 0, "", body};
  c.held_bytes = mem.current_bytes() - held_before;
  c.memory_note = fmt::format("tape by design (gdn_tape_size, ckpt every {}): {} floats = {:.3f} GB",
                              cfg.ckpt_every, tape_floats, static_cast<double>(tape_floats) * sizeof(float) / 1e9);
  return c;
}

BenchCase layerwise_step_case(Backend<float>& be, index_t windows, index_t T) {
  using Block = train::StudentLlamaBlock<float>;
  const model::LlamaBlockDims dims{
      .hidden = 576, .heads = 9, .kv_heads = 3, .head_dim = 64, .ffn = 1536, .eps = 1e-5f, .rope_theta = 1e5};
  constexpr int kPaths = 2;
  const index_t n = windows * T;
  std::vector<blr::RankPlan> plan;
  for (model::LlamaProj p : model::kAllLlamaProjs)
    plan.push_back({model::llama_proj_name(p), dims.out_features(p), dims.in_features(p), 0});
  plan = blr::plan_ranks(std::move(plan), 1.0, kPaths, 16);
  std::array<index_t, model::kLlamaProjs> ranks{};
  double flops = 0;
  for (std::size_t i = 0; i < plan.size(); ++i) {
    ranks[i] = plan[i].rank;
    flops += blr_fwd_bwd_flops(plan[i].m, plan[i].n, plan[i].rank, n, kPaths) +
             blr_sign_flops(plan[i].m, plan[i].n, plan[i].rank, n, kPaths);
  }
  std::string rank_list;
  for (index_t r : ranks) {
    if (!rank_list.empty()) rank_list += '/';
    rank_list += std::to_string(r);
  }
  struct State {
    State(Backend<float>& be, const model::LlamaBlockDims& dims, const std::array<index_t, model::kLlamaProjs>& ranks,
          index_t n)
        : block(be, dims, train::random_student(dims, ranks, kPaths, 7)),
          state(train::layerwise_scaler_options(n * dims.hidden)),
          x(random_buffer<float>(*be.memory, static_cast<std::size_t>(n * dims.hidden), 400, 1.7f)),
          target(random_buffer<float>(*be.memory, static_cast<std::size_t>(n * dims.hidden), 401, 1.0f)) {}
    Block block;
    train::LayerwiseBuffersOf<Block> buf;
    train::LayerwiseState state;
    train::LayerwiseOptions opt;
    std::shared_ptr<Buffer<float>> x, target;
  };
  auto st = std::make_shared<State>(be, dims, ranks, n);
  return {"layer-wise step", fmt::format("SmolLM2-135M block, {}x{}, ranks {} (1.0 bpw, P=2)", windows, T, rank_list), flops,
          0, "", [st, n, T, d = dims.hidden] {
            train::train_step(st->block, st->x->view({n, d}), st->target->view({n, d}), T, st->buf, st->state, st->opt);
          }};
}

}  // namespace bitrank::bench
