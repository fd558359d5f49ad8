// Pieces shared by the CPU and CUDA benchmark cases.
#pragma once

#include <cmath>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "bitrank/backend.hpp"
#include "bitrank/rng.hpp"
#include "bench/bench.hpp"

namespace bitrank::bench {

// A buffer of n random values (uniform in ±scale) in `mem`, alive as long as
// the case's lambda holds it.
template <class T>
std::shared_ptr<Buffer<T>> random_buffer(Memory& mem, std::size_t n, std::uint64_t seed, float scale) {
  auto b = std::make_shared<Buffer<T>>(mem, n);
  const auto v = rnd(n, seed, scale);
  std::vector<T> host(n);
  XorShift bits(seed);
  for (std::size_t i = 0; i < n; ++i) {
    if constexpr (std::is_same_v<T, f16>) {
      host[i] = to_f16(v[i]);
    } else if constexpr (std::is_same_v<T, std::uint32_t>) {
      host[i] = static_cast<std::uint32_t>(bits.next_u64() >> 17);
    } else if constexpr (std::is_same_v<T, q8_0>) {  // d ≈ |scale|/127, q uniform in [−127, 127]
      host[i].d = to_f16(std::fabs(v[i]) / 127.0f + 1e-6f);
      for (std::int8_t& q : host[i].q) q = static_cast<std::int8_t>(static_cast<int>(bits.next_u64() % 255) - 127);
    } else {
      host[i] = static_cast<T>(v[i]);
    }
  }
  b->upload(host);
  return b;
}

// A buffer of n copies of `value` in `mem`.
template <class T>
std::shared_ptr<Buffer<T>> filled_buffer(Memory& mem, std::size_t n, T value) {
  auto b = std::make_shared<Buffer<T>>(mem, n);
  b->upload(std::vector<T>(n, value));
  return b;
}

// FLOPs of the BLR layer's GEMMs: forward + backward (4 per path) and the
// sign gradients (2 per path); each GEMM is 2·T·r·(m or n).
inline double blr_fwd_bwd_flops(index_t m, index_t n, index_t r, index_t T, index_t P) {
  return static_cast<double>(P) * 4.0 * T * r * (m + n);
}
inline double blr_sign_flops(index_t m, index_t n, index_t r, index_t T, index_t P) {
  return static_cast<double>(P) * 2.0 * T * r * (m + n);
}

// Names of the anchor cases that run a BLR layer's GEMMs alone ("" = none).
struct BlrAnchors {
  std::string sign, all;  // the sign-gradient GEMMs; all six (the forward and backward's)
};

// "blr fwd+bwd", "blr sign grads" and "blr fwd+bwd+sign" on `be` at the
// given shape, each naming its anchor.
std::vector<BenchCase> blr_cases(Backend<float>& be, index_t m, index_t n, index_t r, index_t T, index_t P,
                                 const BlrAnchors& anchors);

// The decode-sized BLR layers the inference cases run: SmolLM2-135M's q
// (576×576), up (1536×576) and down (576×1536) at the ranks blr::plan_ranks
// gives its block at 1.0 bpw with 2 paths, and a 7B-class 4096×4096 and
// 11008×4096 at their 1.0 bpw ranks.
struct InferShape {
  index_t m, n, r;
};
std::vector<InferShape> blr_infer_shapes();

// Inference of an m×n BLR layer (P paths) at T tokens on `be`: "blr_infer"
// and "blr_forward (inference)" (inference's path before blr_infer), each
// body `reps` calls (a GPU's microsecond kernels are timed over many), both
// counting the dense layer's 2·T·m·n FLOPs a call, so "vs anchor" is the
// speed ratio to `anchor`, the dense layer of the same shape. The shape
// names the bytes each must read: bits and f32 scales,
// P·((m + n)·r/8 + 4·(m + n + r)), against the dense layer's.
std::vector<BenchCase> blr_infer_cases(Backend<float>& be, const InferShape& s, index_t P, index_t T,
                                       const std::string& anchor, int reps);

// Attention forward + backward over `windows` windows of T tokens (FLOPs
// counted as the causal half of 4·T²·hd per head forward, 2.5× that backward).
BenchCase attention_case(Backend<float>& be, index_t windows, index_t T, index_t heads, index_t kv_heads, index_t hd);

// The GDN layer the benchmark runs: the given heads and windows of T, the
// op's defaults otherwise (conv kernel 4, a checkpoint every 8 steps).
GdnConfig gdn_bench_config(index_t T, index_t k_heads, index_t v_heads, index_t d);

// Gated DeltaNet forward (with tape) + backward; FLOPs counted as 28·d² per
// token and v-head (forward ≈ 7·d², replay + backward ≈ 3× that). Reports
// memory: the buffers it holds, next to the tape gdn_tape_size implies.
BenchCase gdn_case(Backend<float>& be, index_t windows, index_t T, index_t k_heads, index_t v_heads, index_t d);

// One layer-wise training step (train::train_step: forward, loss, backward,
// the scaler's decision, Adam and the sign optimizer) of a student block of
// SmolLM2-135M's dimensions at the ranks blr::plan_ranks gives 1.0 bpw with
// 2 paths, on `windows` windows of T random rows towards a random target.
// Its FLOPs are those of the BLR GEMMs (six per path and projection).
BenchCase layerwise_step_case(Backend<float>& be, index_t windows, index_t T);

}  // namespace bitrank::bench
