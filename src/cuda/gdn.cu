// CUDA backend of the Gated DeltaNet core (contract: include/bitrank/ops/gdn.hpp).
//
// f32 throughout; the tape is the contract's layout in device memory.
// Forward: conv + SiLU (a thread per element), the q/k l2 norms (a warp per
// row and k-head), the gates (a thread per row and v-head), the recurrence
// (o before the norm, and kv and the checkpoints when recording), then the
// gated RMSNorm (a warp per row and v-head).
// Backward: the gated RMSNorm backward writes d_z and dO — the latter into
// the v columns of d_qkv, which the recurrence backward reads and
// overwrites with dv; the recurrence writes each v-head's dq̂, dk̂ into the
// tape's dqk scratch and d_a, d_b; a warp per (row, k-head) sums dq̂, dk̂
// over the group and runs the l2-norm backward into the q/k columns; then
// SiLU' (elementwise) and the conv backward, in place per (window, channel)
// in ascending tokens (token t's gradient reads rows t..t+K−1, which are
// still unmodified).
//
// Three designs of the core, chosen per call by the environment variable
// BITRANK_GDN_KERNEL: 3 (the default; gdn_chunk.cu) is the chunkwise form
// on the tensor cores, its per-chunk matrices in the tape's record part
// where they fit and otherwise in the device pool; 2 (gdn_rec2.cu) and 1
// (gdn_rec1.cu) run the recurrence token by token — 2 splits the state's
// columns over warps and keeps it in registers, 1 keeps it in shared
// memory, a block per (window, v-head). Those two replay a segment with the
// recorded kv and the forward's explicit roundings (__fmul_rn for the
// decay, __fmaf_rn for the rank-1 update), so replayed states equal the
// forward's bit for bit and the results do not depend on ckpt_every.
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "cuda/gdn.cuh"
#include "cuda/ops.hpp"

namespace bitrank::cuda {
namespace {

using gdn::Dims;
using gdn::RecArgs;
using gdn::Tape;

constexpr unsigned kFull = 0xffffffffu;

__device__ __forceinline__ float warp_sum(float x) {
  for (int m = 16; m >= 1; m >>= 1) x += __shfl_xor_sync(kFull, x, m);
  return x;
}

// Conv pre-activation of row t (position p in its window), channel c; taps
// in ascending order (the forward and the backward's recomputation agree).
__device__ __forceinline__ float conv_pre(const float* __restrict__ qkv, const float* __restrict__ w, const Dims& g,
                                          index_t t, int p, int c) {
  float acc = 0.0f;
  for (int j = 0; j < g.K; ++j) {
    const int back = g.K - 1 - j;
    if (p >= back) acc = fmaf(qkv[(t - back) * g.C + c], w[static_cast<index_t>(c) * g.K + j], acc);
  }
  return acc;
}

__global__ void conv_fwd_kernel(Dims g, const float* __restrict__ qkv, const float* __restrict__ w,
                                float* __restrict__ conv_out) {
  const index_t e = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= g.n * g.C) return;
  const index_t t = e / g.C;
  const int c = static_cast<int>(e % g.C), p = static_cast<int>(t % g.T);
  conv_out[e] = gdn::siluf_(conv_pre(qkv, w, g, t, p, c));
}

// One warp per (row, k-head): Σq² + ε, Σk² + ε, q̂ = q/(√(Σq²+ε)·√d), k̂ = k/√(Σk²+ε).
__global__ void qk_prep_kernel(Dims g, Tape tp, float q_scale) {
  const index_t r = (static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (r >= g.n * g.hk) return;  // whole warps leave together
  const index_t t = r / g.hk;
  const int kh = static_cast<int>(r % g.hk);
  const float* q = tp.conv_out + t * g.C + kh * g.d;
  const float* k = q + g.hk * g.d;
  float sq = 0.0f, sk = 0.0f;
  for (int i = lane; i < g.d; i += 32) {
    sq = fmaf(q[i], q[i], sq);
    sk = fmaf(k[i], k[i], sk);
  }
  sq = warp_sum(sq) + g.l2_eps;
  sk = warp_sum(sk) + g.l2_eps;
  if (lane == 0) {
    tp.q_sumsq[r] = sq;
    tp.k_sumsq[r] = sk;
  }
  const float iq = q_scale / sqrtf(sq), ik = 1.0f / sqrtf(sk);
  for (int i = lane; i < g.d; i += 32) {
    tp.q_hat[r * g.d + i] = q[i] * iq;
    tp.k_hat[r * g.d + i] = k[i] * ik;
  }
}

// One thread per (row, v-head): γ = exp(−e^{a_log}·softplus(a + dt_bias)), β = σ(b).
__global__ void gate_kernel(Dims g, Tape tp, const float* __restrict__ a, const float* __restrict__ b,
                            const float* __restrict__ a_log, const float* __restrict__ dt_bias) {
  const index_t r = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= g.n * g.hv) return;
  const int h = static_cast<int>(r % g.hv);
  const float x = a[r] + dt_bias[h];
  const float sp = fmaxf(x, 0.0f) + log1pf(expf(-fabsf(x)));
  tp.gate_in[r] = x;
  tp.decay[r] = expf(-expf(a_log[h]) * sp);
  tp.beta[r] = gdn::sigmoidf_(b[r]);
}

// Gated RMSNorm, one warp per (row, v-head): out = o·inv·w·silu(z).
__global__ void norm_fwd_kernel(Dims g, Tape tp, const float* __restrict__ z, const float* __restrict__ gain,
                                float* __restrict__ out) {
  const index_t r = (static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (r >= g.n * g.hv) return;
  const float* o = tp.o_pre + r * g.d;
  float ss = 0.0f;
  for (int j = lane; j < g.d; j += 32) ss = fmaf(o[j], o[j], ss);
  ss = warp_sum(ss);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(g.d) + g.norm_eps);
  if (lane == 0) tp.inv_rms[r] = inv;
  for (int j = lane; j < g.d; j += 32) out[r * g.d + j] = o[j] * inv * gain[j] * gdn::siluf_(z[r * g.d + j]);
}

// Its backward, one warp per (row, v-head): d_z, and dO into the v columns of d_qkv.
__global__ void norm_bwd_kernel(Dims g, Tape tp, const float* __restrict__ z, const float* __restrict__ gain,
                                const float* __restrict__ d_out, float* __restrict__ d_z, float* __restrict__ d_qkv) {
  const index_t r = (static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (r >= g.n * g.hv) return;
  const index_t t = r / g.hv;
  const int h = static_cast<int>(r % g.hv);
  const float* o = tp.o_pre + r * g.d;
  const float inv = tp.inv_rms[r];
  float s = 0.0f;  // Σ (w·silu(z)·dy)·o
  for (int j = lane; j < g.d; j += 32) s = fmaf(gain[j] * gdn::siluf_(z[r * g.d + j]) * d_out[r * g.d + j], o[j], s);
  s = warp_sum(s);
  const float coef = s / static_cast<float>(g.d) * inv * inv * inv;
  float* dO = d_qkv + t * g.C + g.v_off() + h * g.d;
  for (int j = lane; j < g.d; j += 32) {
    const float zz = z[r * g.d + j], dy = d_out[r * g.d + j], wj = gain[j];
    d_z[r * g.d + j] = dy * o[j] * inv * wj * gdn::silu_gradf_(zz);
    dO[j] = inv * (wj * gdn::siluf_(zz) * dy) - o[j] * coef;
  }
}

// One warp per (row, k-head): Σ over the group's v-heads of dq̂, dk̂ (in
// ascending head order), then the l2-norm backward into the q/k columns.
__global__ void qk_bwd_kernel(Dims g, Tape tp, float q_scale, float* __restrict__ d_qkv) {
  const index_t r = (static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (r >= g.n * g.hk) return;
  const index_t t = r / g.hk;
  const int kh = static_cast<int>(r % g.hk);
  const float* q = tp.conv_out + t * g.C + kh * g.d;
  const float* k = q + g.hk * g.d;
  constexpr int kPer = gdn::kMaxHeadDim / 32;  // elements per lane
  float dq[kPer], dk[kPer];
  float pq = 0.0f, pk = 0.0f;
#pragma unroll
  for (int m = 0; m < kPer; ++m) {
    const int i = lane + 32 * m;
    dq[m] = 0.0f;
    dk[m] = 0.0f;
    if (i < g.d) {
      for (int h = kh * g.group; h < (kh + 1) * g.group; ++h) {
        dq[m] += tp.dq_hat[(t * g.hv + h) * g.d + i];
        dk[m] += tp.dk_hat[(t * g.hv + h) * g.d + i];
      }
      pq = fmaf(dq[m], q[i], pq);
      pk = fmaf(dk[m], k[i], pk);
    }
  }
  pq = warp_sum(pq);
  pk = warp_sum(pk);
  const float sq = tp.q_sumsq[r], sk = tp.k_sumsq[r];
  const float iq = q_scale / sqrtf(sq), ik = 1.0f / sqrtf(sk);
  const float cq = pq * iq / sq, ck = pk * ik / sk;
  float* gq = d_qkv + t * g.C + kh * g.d;
  float* gk = gq + g.hk * g.d;
#pragma unroll
  for (int m = 0; m < kPer; ++m) {
    const int i = lane + 32 * m;
    if (i < g.d) {
      gq[i] = iq * dq[m] - q[i] * cq;
      gk[i] = ik * dk[m] - k[i] * ck;
    }
  }
}

// Conv backward, in place over d_qkv: d_qkv arrives as the gradient of the
// conv's output (after SiLU) and leaves as that of its input, raw row p
// collecting pre-activation rows p .. p+K−1 through taps K−1 .. 0. One thread
// per (window, segment of kConvSeg rows, channel), so that long windows
// still fill the GPU (a thread per (window, channel) walking the window took
// ~15 ms at 1×32768). A segment reads the first K−1 rows of the next one,
// which that segment's thread overwrites: conv_halo_kernel saves them (as
// pre-activation gradients) before conv_bwd_kernel runs. SiLU's derivative
// is applied on the fly, from the pre-activation recomputed from qkv.
constexpr int kConvSeg = 32;
constexpr int kMaxConvTaps = 8;

__device__ __forceinline__ float d_pre(const float* __restrict__ qkv, const float* __restrict__ w,
                                       const float* d_qkv, const Dims& g, index_t t, int p, int c) {
  return d_qkv[t * g.C + c] * gdn::silu_gradf_(conv_pre(qkv, w, g, t, p, c));
}

// halo[(window·nseg + s)·(K−1) + k][c]: pre-activation gradient of row
// s·kConvSeg + kConvSeg + k of the window, 0 past its end.
__global__ void conv_halo_kernel(Dims g, const float* __restrict__ qkv, const float* __restrict__ w,
                                 const float* __restrict__ d_qkv, float* __restrict__ halo) {
  const int nseg = (g.T + kConvSeg - 1) / kConvSeg;
  const index_t e = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= g.nb * nseg * g.C) return;
  const index_t ws = e / g.C;  // window · nseg + segment
  const int c = static_cast<int>(e % g.C), s = static_cast<int>(ws % nseg);
  const index_t t0 = (ws / nseg) * g.T;
  for (int k = 0; k + 1 < g.K; ++k) {
    const int p = (s + 1) * kConvSeg + k;
    halo[(ws * (g.K - 1) + k) * g.C + c] = p < g.T ? d_pre(qkv, w, d_qkv, g, t0 + p, p, c) : 0.0f;
  }
}

__global__ void conv_bwd_kernel(Dims g, const float* __restrict__ qkv, const float* __restrict__ w,
                                const float* __restrict__ halo, float* d_qkv) {
  const int nseg = (g.T + kConvSeg - 1) / kConvSeg;
  const index_t e = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= g.nb * nseg * g.C) return;
  const index_t ws = e / g.C;
  const int c = static_cast<int>(e % g.C), p0 = static_cast<int>(ws % nseg) * kConvSeg;
  const index_t t0 = (ws / nseg) * g.T + p0;
  const int rows = min(kConvSeg, g.T - p0);
  float v[kConvSeg + kMaxConvTaps - 1];  // the segment's pre-activation gradients, then the halo
#pragma unroll
  for (int i = 0; i < kConvSeg; ++i) v[i] = i < rows ? d_pre(qkv, w, d_qkv, g, t0 + i, p0 + i, c) : 0.0f;
#pragma unroll
  for (int k = 0; k + 1 < kMaxConvTaps; ++k)
    v[kConvSeg + k] = k + 1 < g.K ? halo[(ws * (g.K - 1) + k) * g.C + c] : 0.0f;
  float tap[kMaxConvTaps];  // tap[back] = w[K−1−back]
#pragma unroll
  for (int back = 0; back < kMaxConvTaps; ++back)
    tap[back] = back < g.K ? w[static_cast<index_t>(c) * g.K + g.K - 1 - back] : 0.0f;
#pragma unroll
  for (int i = 0; i < kConvSeg; ++i) {
    if (i >= rows) break;
    float acc = 0.0f;
#pragma unroll
    for (int back = 0; back < kMaxConvTaps; ++back)
      if (back < g.K) acc = fmaf(v[i + back], tap[back], acc);
    d_qkv[(t0 + i) * g.C + c] = acc;
  }
}

Dims make_dims(const GdnConfig& cfg, index_t rows) {
  Dims g{};
  g.n = rows;
  g.nb = rows / cfg.window;
  g.T = static_cast<int>(cfg.window);
  g.hk = static_cast<int>(cfg.k_heads);
  g.hv = static_cast<int>(cfg.v_heads);
  g.group = static_cast<int>(cfg.v_heads / cfg.k_heads);
  g.d = static_cast<int>(cfg.head_dim);
  g.K = static_cast<int>(cfg.conv_kernel);
  g.C = static_cast<int>(cfg.channels());
  g.cs = static_cast<int>(cfg.ckpt_every < cfg.window ? cfg.ckpt_every : cfg.window);
  g.nseg = static_cast<int>(cfg.segments());
  g.slots = static_cast<int>(cfg.replay_steps());
  g.l2_eps = cfg.l2_eps;
  g.norm_eps = cfg.norm_eps;
  return g;
}

Tape make_tape(float* base, const GdnConfig& cfg, const Dims& g) {
  const GdnTapeLayout L = gdn_tape_layout(cfg, g.n);
  Tape tp{};
  tp.conv_out = base + L.conv_out;
  tp.q_hat = base + L.qk_hat;
  tp.k_hat = tp.q_hat + g.n * g.hk * g.d;
  tp.q_sumsq = base + L.qk_sumsq;
  tp.k_sumsq = tp.q_sumsq + g.n * g.hk;
  tp.decay = base + L.gates;
  tp.beta = tp.decay + g.n * g.hv;
  tp.gate_in = tp.beta + g.n * g.hv;
  tp.o_pre = base + L.o_pre;
  tp.inv_rms = base + L.inv_rms;
  tp.kv = base + L.kv;
  tp.ckpt = base + L.ckpt;
  tp.replay = base + L.replay;
  tp.dq_hat = base + L.dqk;
  tp.dk_hat = tp.dq_hat + g.n * g.hv * g.d;
  return tp;
}

// BITRANK_GDN_KERNEL: 1, 2 or 3 (default 3); a backward must run the design
// of the forward that recorded its tape.
int recurrence_design(std::string_view op) {
  const char* env = std::getenv("BITRANK_GDN_KERNEL");
  if (!env || !*env || std::strcmp(env, "3") == 0) return 3;
  if (std::strcmp(env, "1") == 0) return 1;
  if (std::strcmp(env, "2") == 0) return 2;
  fail("{}: BITRANK_GDN_KERNEL must be 1, 2 or 3, got '{}'", op, env);
}

// Design 3's forward part (W, U, S₀, T of every chunk, q̂ and k̂ split) in
// the tape's record part (kv and ckpt, which design 3 does not otherwise
// use), 32-byte aligned for the tensor-core tiles; null where it does not
// fit (short windows; at head_dim 128, ckpt_every above 30 with three
// v-heads a k-head, above 23 with one), and the backward then recomputes it.
float* chunk_record_area(View<float> tape, const GdnConfig& cfg, const Dims& g) {
  const GdnTapeLayout L = gdn_tape_layout(cfg, g.n);
  const auto addr = reinterpret_cast<std::uintptr_t>(tape.data + L.kv);
  float* at = reinterpret_cast<float*>((addr + 31) & ~std::uintptr_t{31});
  const std::size_t need = gdn::chunk_forward_floats(g);
  return at + need <= tape.data + L.replay ? at : nullptr;
}

// The sizes every kernel indexes with 32-bit ints, and the head_dim limit.
void check_supported(std::string_view op, const GdnConfig& cfg, index_t rows) {
  check::require(cfg.head_dim <= gdn::kMaxHeadDim, op, "the cuda backend takes head_dim ≤ {}, got {}",
                 gdn::kMaxHeadDim, cfg.head_dim);
  constexpr index_t kIntMax = 0x7fffffff;
  check::require(cfg.channels() <= kIntMax && cfg.window <= kIntMax && cfg.conv_kernel <= kIntMax, op,
                 "sizes beyond 32 bits (channels {}, window {}, conv_kernel {})", cfg.channels(), cfg.window,
                 cfg.conv_kernel);
  check::require(rows / cfg.window * cfg.v_heads * ((cfg.head_dim + 31) / 32) <= kIntMax, op,
                 "too many (window, v-head) pairs for one launch: {} windows of {} v-heads", rows / cfg.window,
                 cfg.v_heads);
}

class CudaGdnOps final : public GdnOps<float> {
 public:
  explicit CudaGdnOps(Context& ctx) : ctx_(ctx) {}

 protected:
  void gdn_forward_impl(const GdnConfig& cfg, const GdnParams<float>& prm, CView<float> qkv, CView<float> z,
                        CView<float> a, CView<float> b, View<float> out, View<float> tape,
                        bool record_tape) override {
    check_supported("gdn_forward", cfg, qkv.dim(0));
    const int design = recurrence_design("gdn_forward");
    const Dims g = make_dims(cfg, qkv.dim(0));
    const Tape tp = make_tape(tape.data, cfg, g);
    const cudaStream_t s = ctx_.stream.get();
    const float q_scale = 1.0f / sqrtf(static_cast<float>(g.d));

    conv_fwd_kernel<<<blocks_for(static_cast<std::size_t>(g.n * g.C), 256), 256, 0, s>>>(
        g, qkv.data, prm.conv_weight.data, tp.conv_out);
    BR_CUDA_LAUNCHED();
    qk_prep_kernel<<<blocks_for(static_cast<std::size_t>(g.n * g.hk) * 32, 256), 256, 0, s>>>(g, tp, q_scale);
    BR_CUDA_LAUNCHED();
    gate_kernel<<<blocks_for(static_cast<std::size_t>(g.n * g.hv), 256), 256, 0, s>>>(
        g, tp, a.data, b.data, prm.a_log.data, prm.dt_bias.data);
    BR_CUDA_LAUNCHED();

    RecArgs ra{};
    ra.g = g;
    ra.tp = tp;
    ra.a_log = prm.a_log.data;
    ra.record = record_tape;
    if (design == 3) {
      float* kept = record_tape ? chunk_record_area(tape, cfg, g) : nullptr;
      Buffer<float> fwd(ctx_.memory, kept ? 0 : gdn::chunk_forward_floats(g));
      gdn::chunk_forward(ra, gdn::chunk_workspace(kept ? kept : fwd.data(), nullptr, g), s);
    } else if (design == 1) {
      gdn::rec1_forward(ra, s);
    } else {
      gdn::rec2_forward(ra, s);
    }

    norm_fwd_kernel<<<blocks_for(static_cast<std::size_t>(g.n * g.hv) * 32, 256), 256, 0, s>>>(
        g, tp, z.data, prm.norm_gain.data, out.data);
    BR_CUDA_LAUNCHED();
  }

  void gdn_backward_impl(const GdnConfig& cfg, const GdnParams<float>& prm, CView<float> qkv, CView<float> z,
                         View<float> tape, CView<float> d_out, View<float> d_qkv, View<float> d_z, View<float> d_a,
                         View<float> d_b) override {
    check_supported("gdn_backward", cfg, qkv.dim(0));
    // The conv backward keeps a row's taps in registers; checked before any work is queued.
    check::require(cfg.conv_kernel <= kMaxConvTaps, "gdn_backward", "the cuda backend takes conv_kernel ≤ {}, got {}",
                   kMaxConvTaps, cfg.conv_kernel);
    const int design = recurrence_design("gdn_backward");
    const Dims g = make_dims(cfg, qkv.dim(0));
    const Tape tp = make_tape(tape.data, cfg, g);
    const cudaStream_t s = ctx_.stream.get();
    const float q_scale = 1.0f / sqrtf(static_cast<float>(g.d));

    norm_bwd_kernel<<<blocks_for(static_cast<std::size_t>(g.n * g.hv) * 32, 256), 256, 0, s>>>(
        g, tp, z.data, prm.norm_gain.data, d_out.data, d_z.data, d_qkv.data);
    BR_CUDA_LAUNCHED();

    RecArgs ra{};
    ra.g = g;
    ra.tp = tp;
    ra.a_log = prm.a_log.data;
    ra.d_qkv = d_qkv.data;
    ra.d_a = d_a.data;
    ra.d_b = d_b.data;
    ra.record = true;
    if (design == 3) {
      float* kept = chunk_record_area(tape, cfg, g);
      Buffer<float> fwd(ctx_.memory, kept ? 0 : gdn::chunk_forward_floats(g));
      Buffer<float> bwd(ctx_.memory, gdn::chunk_backward_floats(g));
      gdn::chunk_backward(ra, gdn::chunk_workspace(kept ? kept : fwd.data(), bwd.data(), g), !kept, s,
                          {ctx_.side.get(), ctx_.fork.get(), ctx_.join.get()});
    } else if (design == 1) {
      gdn::rec1_backward(ra, s);
    } else {
      gdn::rec2_backward(ra, s);
    }

    qk_bwd_kernel<<<blocks_for(static_cast<std::size_t>(g.n * g.hk) * 32, 256), 256, 0, s>>>(g, tp, q_scale,
                                                                                             d_qkv.data);
    BR_CUDA_LAUNCHED();
    const std::size_t segs = static_cast<std::size_t>(g.nb) * ((g.T + kConvSeg - 1) / kConvSeg) * g.C;
    Buffer<float> halo(ctx_.memory, segs * (g.K - 1));
    if (g.K > 1) {
      conv_halo_kernel<<<blocks_for(segs, 256), 256, 0, s>>>(g, qkv.data, prm.conv_weight.data, d_qkv.data,
                                                              halo.data());
      BR_CUDA_LAUNCHED();
    }
    conv_bwd_kernel<<<blocks_for(segs, 128), 128, 0, s>>>(g, qkv.data, prm.conv_weight.data, halo.data(),
                                                           d_qkv.data);
    BR_CUDA_LAUNCHED();
  }

 private:
  Context& ctx_;
};

}  // namespace

std::unique_ptr<GdnOps<float>> make_gdn_ops(Context& ctx) { return std::make_unique<CudaGdnOps>(ctx); }

}  // namespace bitrank::cuda
