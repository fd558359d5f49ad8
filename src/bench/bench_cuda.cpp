// CUDA benchmark cases at Qwen3.5-27B's shapes (DESIGN §11): the BLR layer
// next to the six cuBLASLt f16 GEMMs it contains, attention and Gated
// DeltaNet (their PyTorch SDPA and FLA anchors run from bench/anchors/);
// one layer-wise training step of a SmolLM2-135M block; and decode-sized
// BLR inference next to cuBLASLt's f16 product with the dense matrix.
#ifdef BITRANK_HAS_CUDA
#include <fmt/format.h>

#include <algorithm>

#include "bench/bench_util.hpp"

namespace bitrank::bench {
namespace {

std::size_t sz(index_t v) { return static_cast<std::size_t>(v); }

// One BLR path's six GEMMs alone, each one cuBLASLt call through the gemm op
// on operands staged beforehand: a = x·S_V, c = a·S_Uᵀ, b = dy·S_U,
// dx' = b·S_Vᵀ, G_U = dyᵀ·a, G_V = xᵀ·b.
BenchCase six_gemms_case(Backend<float>& be, index_t m, index_t n, index_t r, index_t T) {
  Memory& mem = *be.memory;
  const index_t w = std::max(m, n), Tp = pad_tokens(T);
  auto act_w = random_buffer<f16>(mem, sz(pad_rows(T) * w), 300, 1.0f);    // x⊙g or dy⊙h
  auto act_r = random_buffer<f16>(mem, sz(pad_rows(T) * r), 301, 1.0f);    // a⊙ℓ or b⊙ℓ
  auto plane = random_buffer<f16>(mem, sz(w * r), 302, 1.0f);              // S_U, S_V and their transposes
  auto act_t_w = random_buffer<f16>(mem, sz(pad_rows(w) * Tp), 303, 1.0f);  // (dy⊙h)ᵀ or xᵀ
  auto act_t_r = random_buffer<f16>(mem, sz(pad_rows(r) * Tp), 304, 1.0f);  // (a⊙ℓ)ᵀ or bᵀ
  auto out_w = filled_buffer<float>(mem, sz(T * w), 0.0f);
  auto out_r = filled_buffer<float>(mem, sz(std::max(T, w) * r), 0.0f);
  Backend<float>* b = &be;
  return {"cuBLAS f16: six BLR GEMMs", fmt::format("m={} n={} r={} T={} P=1", m, n, r, T),
          blr_fwd_bwd_flops(m, n, r, T, 1) + blr_sign_flops(m, n, r, T, 1), 0, "", [=] {
            auto& g = b->gemm();
            g.gemm(act_w->view({pad_rows(T), n}), plane->view({r, n}), 1.0f, out_r->view({T, r}));   // a
            g.gemm(act_r->view({pad_rows(T), r}), plane->view({m, r}), 1.0f, out_w->view({T, m}));   // c
            g.gemm(act_w->view({pad_rows(T), m}), plane->view({r, m}), 1.0f, out_r->view({T, r}));   // b
            g.gemm(act_r->view({pad_rows(T), r}), plane->view({n, r}), 1.0f, out_w->view({T, n}));   // dx'
            g.gemm(act_t_w->view({pad_rows(m), Tp}), act_t_r->view({r, Tp}), 1.0f, out_r->view({m, r}));  // G_U
            g.gemm(act_t_w->view({pad_rows(n), Tp}), act_t_r->view({r, Tp}), 1.0f, out_r->view({n, r}));  // G_V
          }};
}

// The dense layer y[T][m] = x[T][n]·Wᵀ in f16 through cuBLASLt (the gemm op:
// f16 operands, f32 accumulation), `reps` calls a body: the anchor of the
// decode cases. Its floor is the 2·m·n bytes of W.
BenchCase dense_f16_case(Backend<float>& be, const std::string& name, index_t m, index_t n, index_t T, int reps) {
  Memory& mem = *be.memory;
  auto w = random_buffer<f16>(mem, sz(m * n), 30, 1.0f);
  auto x = random_buffer<f16>(mem, sz(pad_rows(T) * n), 31, 1.0f);
  auto y = filled_buffer<float>(mem, sz(T * m), 0.0f);
  Backend<float>* b = &be;
  return {name, fmt::format("{}x{} T={} ({:.2f} MB)", m, n, T, 2.0 * m * n / 1e6), 2.0 * T * m * n * reps, 0, "", [=] {
            for (int i = 0; i < reps; ++i)
              b->gemm().gemm(x->view({pad_rows(T), n}), w->view({m, n}), 1.0f, y->view({T, m}));
          }};
}

}  // namespace

std::vector<BenchCase> cuda_bench_cases(Backend<float>& be) {
  std::vector<BenchCase> cases;
  const index_t d = 5120, r = 1024, T = 4096;
  cases.push_back(six_gemms_case(be, d, d, r, T));
  for (auto& c : blr_cases(be, d, d, r, T, 1, {"", "cuBLAS f16: six BLR GEMMs"})) cases.push_back(std::move(c));
  if (be.attention_ops) {
    cases.push_back(attention_case(be, 8, 512, 24, 4, 256));
    cases.push_back(attention_case(be, 1, 4096, 24, 4, 256));
  }
  if (be.gdn_ops) {
    cases.push_back(gdn_case(be, 8, 512, 16, 48, 128));
    cases.push_back(gdn_case(be, 1, 32768, 16, 48, 128));
  }
  cases.push_back(layerwise_step_case(be, 8, 512));  // compress's step on cuda
  constexpr int kReps = 100;                          // decode kernels take microseconds: 100 calls a timing
  for (const InferShape& s : blr_infer_shapes())
    for (index_t T : {1, 8}) {
      const std::string dense = fmt::format("dense f16 {}x{} T={}", s.m, s.n, T);
      cases.push_back(dense_f16_case(be, dense, s.m, s.n, T, kReps));
      for (auto& c : blr_infer_cases(be, s, 2, T, dense, kReps)) cases.push_back(std::move(c));
    }
  return cases;
}

}  // namespace bitrank::bench
#endif
