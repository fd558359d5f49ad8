// CUDA backend of the Gated DeltaNet core (contract: include/bitrank/ops/gdn.hpp).
//
// f32 throughout; the tape is the contract's layout in device memory.
// Forward: conv + SiLU (a thread per 4 channels and a tile of rows), the q/k
// l2 norms (a warp per row and k-head), the gates (a thread per row and v-head), the recurrence
// (o before the norm, and kv and the checkpoints when recording), then the
// gated RMSNorm (a warp per row and v-head).
// Backward: the gated RMSNorm backward writes d_z and dO — the latter into
// the v columns of d_qkv, which the recurrence backward reads and
// overwrites with dv; the recurrence writes each v-head's dq̂, dk̂ into the
// tape's dqk scratch and d_a, d_b; a warp per (row, k-head) sums dq̂, dk̂
// over the group and runs the l2-norm backward into the q/k columns; then
// SiLU' and the conv backward, in place, each thread walking its tile's rows
// in ascending tokens (token t's gradient reads rows t..t+K−1; the first K−1
// rows of the next tile are saved beforehand as the halo).
//
// Decoding (gdn_decode, few tokens continuing a carried state): plain
// kernels — the conv + SiLU over conv_state ++ qkv (a thread per element)
// into a scratch buffer, the conv state's shift (a thread per channel),
// then a block per v-head that walks the tokens in order, thread j owning
// column j of the state [k-dim][v-dim] in global memory (coalesced over j),
// q̂ and k̂ in shared memory, block sums for the norms.
//
// Three designs of the core, chosen when the backend is made
// (CudaOptions::gdn_design, backend.hpp): 3 (the default; gdn_chunk.cu) is the chunkwise form
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

// The depthwise causal conv, forward and backward. A thread owns VW
// consecutive channels (VW = 4, one 16-byte access a row, when the channel
// count and the pointers allow it) over a tile of kConvRows rows of one
// window and walks it top to bottom, keeping the rows its taps still need in
// registers; a block is kConvThreads such threads side by side along the
// channels (grid: x = window·tiles + tile, y = channel block). Index
// arithmetic is 32-bit per thread and done once (a 64-bit division per
// element cost the earlier thread-per-element kernels most of their time:
// 390 µs for the forward at 8×512 against a byte floor of ~80). Taps are
// summed in ascending order j = 0..K−1 from +0, skipping those before the
// window's start — the cpu backend's order, which the backward's
// recomputation of the pre-activation repeats exactly.
constexpr int kConvRows = 32;
constexpr int kConvThreads = 128;
constexpr int kMaxConvTaps = 8;

// VW consecutive floats; one 16-byte access when Vec (VW = 4 and p aligned).
template <int VW, bool Vec = VW == 4>
__device__ __forceinline__ void load_vec(const float* p, float (&v)[VW]) {
  if constexpr (Vec) {
    const float4 x = *reinterpret_cast<const float4*>(p);
    v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w;
  } else {
#pragma unroll
    for (int i = 0; i < VW; ++i) v[i] = p[i];
  }
}

template <int VW, bool Vec = VW == 4>
__device__ __forceinline__ void store_vec(float* p, const float (&v)[VW]) {
  if constexpr (Vec) {
    *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
  } else {
#pragma unroll
    for (int i = 0; i < VW; ++i) p[i] = v[i];
  }
}

// Where a conv thread works: its first channel, the window's first row and
// the tile's first position in it, the tile's rows; false for threads past
// the channels.
struct ConvTile {
  int c, p0, rows, tile;
  index_t t0;  // row of position p0
};

template <int VW>
__device__ __forceinline__ bool conv_tile(const Dims& g, ConvTile& ct) {
  const int cg = static_cast<int>(blockIdx.y) * kConvThreads + static_cast<int>(threadIdx.x);
  if (cg * VW >= g.C) return false;
  const int tiles = (g.T + kConvRows - 1) / kConvRows;
  const unsigned win = blockIdx.x / static_cast<unsigned>(tiles);
  ct.tile = static_cast<int>(blockIdx.x - win * static_cast<unsigned>(tiles));
  ct.c = cg * VW;
  ct.p0 = ct.tile * kConvRows;
  ct.rows = min(kConvRows, g.T - ct.p0);
  ct.t0 = static_cast<index_t>(win) * g.T + ct.p0;
  return true;
}

// wt[j][v] = w[(c+v)·K + j].
template <int K, int VW>
__device__ __forceinline__ void load_taps(const float* __restrict__ w, int c, float (&wt)[K][VW]) {
#pragma unroll
  for (int v = 0; v < VW; ++v)
#pragma unroll
    for (int j = 0; j < K; ++j) wt[j][v] = w[static_cast<index_t>(c + v) * K + j];
}

// The pre-activation of the row at position p from its K−1 predecessors
// (hist[0] the oldest) and itself (cur); taps reaching before the window's
// start are skipped.
template <int K, int VW>
__device__ __forceinline__ void conv_pre_row(const float (&hist)[K > 1 ? K - 1 : 1][VW], const float (&cur)[VW],
                                             const float (&wt)[K][VW], int p, float (&pre)[VW]) {
#pragma unroll
  for (int v = 0; v < VW; ++v) {
    float acc = 0.0f;
#pragma unroll
    for (int j = 0; j + 1 < K; ++j)
      if (p >= K - 1 - j) acc = fmaf(hist[j][v], wt[j][v], acc);
    pre[v] = fmaf(cur[v], wt[K - 1][v], acc);
  }
}

// Loads the K−1 rows before position p0 (zeros before the window's start).
template <int K, int VW>
__device__ __forceinline__ void load_history(const float* __restrict__ x, const Dims& g, int p0,
                                             float (&hist)[K > 1 ? K - 1 : 1][VW]) {
#pragma unroll
  for (int k = 0; k + 1 < K; ++k) {
    const int back = K - 1 - k;
    if (p0 >= back) {
      load_vec<VW>(x - static_cast<index_t>(back) * g.C, hist[k]);
    } else {
#pragma unroll
      for (int v = 0; v < VW; ++v) hist[k][v] = 0.0f;
    }
  }
}

template <int K, int VW>
__device__ __forceinline__ void push_history(float (&hist)[K > 1 ? K - 1 : 1][VW], const float (&cur)[VW]) {
  if constexpr (K > 1) {
#pragma unroll
    for (int k = 0; k + 2 < K; ++k)
#pragma unroll
      for (int v = 0; v < VW; ++v) hist[k][v] = hist[k + 1][v];
#pragma unroll
    for (int v = 0; v < VW; ++v) hist[K - 2][v] = cur[v];
  }
}

template <int K, int VW>
__global__ void __launch_bounds__(kConvThreads)
    conv_fwd_kernel(Dims g, const float* __restrict__ qkv, const float* __restrict__ w, float* __restrict__ conv_out) {
  ConvTile ct;
  if (!conv_tile<VW>(g, ct)) return;
  float wt[K][VW], hist[K > 1 ? K - 1 : 1][VW];
  load_taps<K, VW>(w, ct.c, wt);
  const float* x = qkv + ct.t0 * g.C + ct.c;
  float* y = conv_out + ct.t0 * g.C + ct.c;
  load_history<K, VW>(x, g, ct.p0, hist);
#pragma unroll 4
  for (int i = 0; i < ct.rows; ++i) {
    float cur[VW], pre[VW];
    load_vec<VW>(x + static_cast<index_t>(i) * g.C, cur);
    conv_pre_row<K, VW>(hist, cur, wt, ct.p0 + i, pre);
#pragma unroll
    for (int v = 0; v < VW; ++v) pre[v] = gdn::siluf_(pre[v]);
    store_vec<VW>(y + static_cast<index_t>(i) * g.C, pre);
    push_history<K, VW>(hist, cur);
  }
}

// The row kernels below run a warp per row of one head (≤ kMaxHeadDim
// values). Lane l holds slot m's VW values, (l + 32m)·VW … (l + 32m)·VW + VW−1:
// VW = 4 where head_dim is a multiple of 4, else 1 (elements l, l+32, …). A
// lane's sums run over its values in that order, then across the warp, so
// the results depend on head_dim only; whether the 4 values move in one
// 16-byte access (Vec) depends on the pointers' alignment too
// (with_row_width).
template <int VW>
constexpr int kRowSlots = gdn::kMaxHeadDim / (32 * VW);

__device__ __forceinline__ int slot_start(int lane, int m, int vw) { return (lane + 32 * m) * vw; }

template <int VW>
__device__ __forceinline__ void zero_vec(float (&v)[VW]) {
#pragma unroll
  for (int i = 0; i < VW; ++i) v[i] = 0.0f;
}

// One warp per (row, k-head): Σq² + ε, Σk² + ε, q̂ = q/(√(Σq²+ε)·√d), k̂ = k/√(Σk²+ε).
template <int VW, bool Vec>
__global__ void qk_prep_kernel(Dims g, Tape tp, float q_scale) {
  const index_t r = (static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (r >= g.n * g.hk) return;  // whole warps leave together
  const index_t t = r / g.hk;
  const int kh = static_cast<int>(r - t * g.hk);
  const float* q = tp.conv_out + t * g.C + kh * g.d;
  const float* k = q + g.hk * g.d;
  float qv[kRowSlots<VW>][VW], kv[kRowSlots<VW>][VW];
  float sq = 0.0f, sk = 0.0f;
#pragma unroll
  for (int m = 0; m < kRowSlots<VW>; ++m) {
    const int j = slot_start(lane, m, VW);
    if (j < g.d) {
      load_vec<VW, Vec>(q + j, qv[m]);
      load_vec<VW, Vec>(k + j, kv[m]);
#pragma unroll
      for (int v = 0; v < VW; ++v) {
        sq = fmaf(qv[m][v], qv[m][v], sq);
        sk = fmaf(kv[m][v], kv[m][v], sk);
      }
    }
  }
  sq = warp_sum(sq) + g.l2_eps;
  sk = warp_sum(sk) + g.l2_eps;
  if (lane == 0) {
    tp.q_sumsq[r] = sq;
    tp.k_sumsq[r] = sk;
  }
  const float iq = q_scale / sqrtf(sq), ik = 1.0f / sqrtf(sk);
#pragma unroll
  for (int m = 0; m < kRowSlots<VW>; ++m) {
    const int j = slot_start(lane, m, VW);
    if (j < g.d) {
#pragma unroll
      for (int v = 0; v < VW; ++v) {
        qv[m][v] *= iq;
        kv[m][v] *= ik;
      }
      store_vec<VW, Vec>(tp.q_hat + r * g.d + j, qv[m]);
      store_vec<VW, Vec>(tp.k_hat + r * g.d + j, kv[m]);
    }
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

// Gated RMSNorm, one warp per (row, v-head): out = o·inv·w·silu(z); each
// input is read once, into registers.
template <int VW, bool Vec>
__global__ void norm_fwd_kernel(Dims g, Tape tp, const float* __restrict__ z, const float* __restrict__ gain,
                                float* __restrict__ out) {
  const index_t r = (static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (r >= g.n * g.hv) return;
  const float* o = tp.o_pre + r * g.d;
  float ov[kRowSlots<VW>][VW];
  float ss = 0.0f;
#pragma unroll
  for (int m = 0; m < kRowSlots<VW>; ++m) {
    const int j = slot_start(lane, m, VW);
    if (j < g.d) {
      load_vec<VW, Vec>(o + j, ov[m]);
#pragma unroll
      for (int v = 0; v < VW; ++v) ss = fmaf(ov[m][v], ov[m][v], ss);
    }
  }
  ss = warp_sum(ss);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(g.d) + g.norm_eps);
  if (lane == 0) tp.inv_rms[r] = inv;
#pragma unroll
  for (int m = 0; m < kRowSlots<VW>; ++m) {
    const int j = slot_start(lane, m, VW);
    if (j < g.d) {
      float zv[VW], wg[VW], y[VW];
      load_vec<VW, Vec>(z + r * g.d + j, zv);
      load_vec<VW, Vec>(gain + j, wg);
#pragma unroll
      for (int v = 0; v < VW; ++v) y[v] = ov[m][v] * inv * wg[v] * gdn::siluf_(zv[v]);
      store_vec<VW, Vec>(out + r * g.d + j, y);
    }
  }
}

// Its backward, one warp per (row, v-head): d_z, and dO into the v columns of d_qkv.
template <int VW, bool Vec>
__global__ void norm_bwd_kernel(Dims g, Tape tp, const float* __restrict__ z, const float* __restrict__ gain,
                                const float* __restrict__ d_out, float* __restrict__ d_z, float* __restrict__ d_qkv) {
  const index_t r = (static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (r >= g.n * g.hv) return;
  const index_t t = r / g.hv;
  const int h = static_cast<int>(r - t * g.hv);
  const float* o = tp.o_pre + r * g.d;
  const float inv = tp.inv_rms[r];
  constexpr int S = kRowSlots<VW>;
  float ov[S][VW], zv[S][VW], dy[S][VW], wg[S][VW];
  float s = 0.0f;  // Σ (w·silu(z)·dy)·o
#pragma unroll
  for (int m = 0; m < S; ++m) {
    const int j = slot_start(lane, m, VW);
    if (j < g.d) {
      load_vec<VW, Vec>(o + j, ov[m]);
      load_vec<VW, Vec>(z + r * g.d + j, zv[m]);
      load_vec<VW, Vec>(d_out + r * g.d + j, dy[m]);
      load_vec<VW, Vec>(gain + j, wg[m]);
#pragma unroll
      for (int v = 0; v < VW; ++v) s = fmaf(wg[m][v] * gdn::siluf_(zv[m][v]) * dy[m][v], ov[m][v], s);
    }
  }
  s = warp_sum(s);
  const float coef = s / static_cast<float>(g.d) * inv * inv * inv;
  float* dO = d_qkv + t * g.C + g.v_off() + h * g.d;
#pragma unroll
  for (int m = 0; m < S; ++m) {
    const int j = slot_start(lane, m, VW);
    if (j < g.d) {
      float dz[VW], dov[VW];
#pragma unroll
      for (int v = 0; v < VW; ++v) {
        dz[v] = dy[m][v] * ov[m][v] * inv * wg[m][v] * gdn::silu_gradf_(zv[m][v]);
        dov[v] = inv * (wg[m][v] * gdn::siluf_(zv[m][v]) * dy[m][v]) - ov[m][v] * coef;
      }
      store_vec<VW, Vec>(d_z + r * g.d + j, dz);
      store_vec<VW, Vec>(dO + j, dov);
    }
  }
}

// One warp per (row, k-head): Σ over the group's v-heads of dq̂, dk̂ (in
// ascending head order), then the l2-norm backward into the q/k columns.
template <int VW, bool Vec>
__global__ void qk_bwd_kernel(Dims g, Tape tp, float q_scale, float* __restrict__ d_qkv) {
  const index_t r = (static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (r >= g.n * g.hk) return;
  const index_t t = r / g.hk;
  const int kh = static_cast<int>(r - t * g.hk);
  const float* q = tp.conv_out + t * g.C + kh * g.d;
  const float* k = q + g.hk * g.d;
  const float* dqh = tp.dq_hat + (t * g.hv + static_cast<index_t>(kh) * g.group) * g.d;  // the group's first v-head
  const float* dkh = tp.dk_hat + (t * g.hv + static_cast<index_t>(kh) * g.group) * g.d;
  constexpr int S = kRowSlots<VW>;
  float dq[S][VW], dk[S][VW], qv[S][VW], kv[S][VW];
  float pq = 0.0f, pk = 0.0f;
#pragma unroll
  for (int m = 0; m < S; ++m) {
    const int j = slot_start(lane, m, VW);
    zero_vec<VW>(dq[m]);
    zero_vec<VW>(dk[m]);
    if (j < g.d) {
      load_vec<VW, Vec>(q + j, qv[m]);
      load_vec<VW, Vec>(k + j, kv[m]);
#pragma unroll 4
      for (int h = 0; h < g.group; ++h) {
        float a[VW], b[VW];
        load_vec<VW, Vec>(dqh + static_cast<index_t>(h) * g.d + j, a);
        load_vec<VW, Vec>(dkh + static_cast<index_t>(h) * g.d + j, b);
#pragma unroll
        for (int v = 0; v < VW; ++v) {
          dq[m][v] += a[v];
          dk[m][v] += b[v];
        }
      }
#pragma unroll
      for (int v = 0; v < VW; ++v) {
        pq = fmaf(dq[m][v], qv[m][v], pq);
        pk = fmaf(dk[m][v], kv[m][v], pk);
      }
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
  for (int m = 0; m < S; ++m) {
    const int j = slot_start(lane, m, VW);
    if (j < g.d) {
#pragma unroll
      for (int v = 0; v < VW; ++v) {
        dq[m][v] = iq * dq[m][v] - qv[m][v] * cq;
        dk[m][v] = ik * dk[m][v] - kv[m][v] * ck;
      }
      store_vec<VW, Vec>(gq + j, dq[m]);
      store_vec<VW, Vec>(gk + j, dk[m]);
    }
  }
}

// Conv backward, in place over d_qkv: d_qkv arrives as the gradient of the
// conv's output (after SiLU) and leaves as that of its input, raw row p
// collecting pre-activation gradients of rows p .. p+K−1 through taps
// K−1 .. 0 (summed in that order from +0, zeros past the window's end).
// The threads are the forward's (a tile of kConvRows rows, VW channels); a
// tile reads the first K−1 rows of the next one, which that tile's thread
// overwrites: conv_halo_kernel saves them (as pre-activation gradients)
// before conv_bwd_kernel runs. SiLU's derivative is applied on the fly, from
// the pre-activation recomputed from qkv as the forward computed it. A thread
// reads a row before it writes it and writes only rows it has read, so the
// in-place update needs no ordering between threads.

// halo[(window·tiles + s)·(K−1) + k][c]: the pre-activation gradient of the
// row at position (s+1)·kConvRows + k of the window, 0 past its end.
template <int K, int VW>
__global__ void __launch_bounds__(kConvThreads)
    conv_halo_kernel(Dims g, const float* __restrict__ qkv, const float* __restrict__ w,
                     const float* __restrict__ d_qkv, float* __restrict__ halo) {
  ConvTile ct;
  if (!conv_tile<VW>(g, ct)) return;
  float wt[K][VW], hist[K > 1 ? K - 1 : 1][VW];
  load_taps<K, VW>(w, ct.c, wt);
  const int p1 = ct.p0 + kConvRows;  // the next tile's first position
  const index_t t1 = ct.t0 + kConvRows;
  float* out = halo + static_cast<index_t>(blockIdx.x) * (K - 1) * g.C + ct.c;
  if (p1 >= g.T) {
    const float zero[VW] = {};
#pragma unroll
    for (int k = 0; k + 1 < K; ++k) store_vec<VW>(out + static_cast<index_t>(k) * g.C, zero);
    return;
  }
  const float* x = qkv + t1 * g.C + ct.c;
  load_history<K, VW>(x, g, p1, hist);
#pragma unroll
  for (int k = 0; k + 1 < K; ++k) {
    float d[VW];
    if (p1 + k < g.T) {
      float cur[VW], pre[VW];
      load_vec<VW>(x + static_cast<index_t>(k) * g.C, cur);
      load_vec<VW>(d_qkv + (t1 + k) * g.C + ct.c, d);
      conv_pre_row<K, VW>(hist, cur, wt, p1 + k, pre);
#pragma unroll
      for (int v = 0; v < VW; ++v) d[v] *= gdn::silu_gradf_(pre[v]);
      push_history<K, VW>(hist, cur);
    } else {
#pragma unroll
      for (int v = 0; v < VW; ++v) d[v] = 0.0f;
    }
    store_vec<VW>(out + static_cast<index_t>(k) * g.C, d);
  }
}

// Step i computes the pre-activation gradient of the tile's row i (of the
// halo's row i − kConvRows past the tile) and writes the input gradient of
// row i − (K−1), whose K gradients are then known (pend holds the K−1 before).
template <int K, int VW>
__global__ void __launch_bounds__(kConvThreads)
    conv_bwd_kernel(Dims g, const float* __restrict__ qkv, const float* __restrict__ w,
                    const float* __restrict__ halo, float* d_qkv) {
  ConvTile ct;
  if (!conv_tile<VW>(g, ct)) return;
  float wt[K][VW], hist[K > 1 ? K - 1 : 1][VW], pend[K > 1 ? K - 1 : 1][VW] = {};
  load_taps<K, VW>(w, ct.c, wt);
  const float* x = qkv + ct.t0 * g.C + ct.c;
  float* dx = d_qkv + ct.t0 * g.C + ct.c;
  // (no halo under one tap: the buffer is empty, and every step is a row of the tile)
  const float* hl = K > 1 ? halo + static_cast<index_t>(blockIdx.x) * (K - 1) * g.C + ct.c : nullptr;
  load_history<K, VW>(x, g, ct.p0, hist);
  const int steps = ct.rows + K - 1;
#pragma unroll 4
  for (int i = 0; i < steps; ++i) {
    float d[VW];
    if (i < ct.rows) {
      float cur[VW], pre[VW];
      load_vec<VW>(x + static_cast<index_t>(i) * g.C, cur);
      load_vec<VW>(dx + static_cast<index_t>(i) * g.C, d);
      conv_pre_row<K, VW>(hist, cur, wt, ct.p0 + i, pre);
#pragma unroll
      for (int v = 0; v < VW; ++v) d[v] *= gdn::silu_gradf_(pre[v]);
      push_history<K, VW>(hist, cur);
    } else if (i >= kConvRows) {
      load_vec<VW>(hl + static_cast<index_t>(i - kConvRows) * g.C, d);
    } else {  // past a short last tile: past the window's end
#pragma unroll
      for (int v = 0; v < VW; ++v) d[v] = 0.0f;
    }
    if (i >= K - 1) {
      float acc[VW];
#pragma unroll
      for (int v = 0; v < VW; ++v) {
        float a = 0.0f;  // back = 0 .. K−1: rows i−(K−1) .. i, through taps K−1 .. 0
#pragma unroll
        for (int back = 0; back + 1 < K; ++back) a = fmaf(pend[back][v], wt[K - 1 - back][v], a);
        acc[v] = fmaf(d[v], wt[0][v], a);
      }
      store_vec<VW>(dx + static_cast<index_t>(i - (K - 1)) * g.C, acc);
    }
    push_history<K, VW>(pend, d);
  }
}

// True when every pointer allows 16-byte accesses.
bool aligned16(std::initializer_list<const void*> ptrs) {
  for (const void* p : ptrs)
    if (reinterpret_cast<std::uintptr_t>(p) % 16 != 0) return false;
  return true;
}

// Runs f.template operator()<VW>() with VW = 4 when vec4, else 1.
template <class F>
void with_vec_width(bool vec4, F&& f) {
  if (vec4) {
    f.template operator()<4>();
  } else {
    f.template operator()<1>();
  }
}

// Runs f.template operator()<K, VW>() for the call's conv taps and the
// widest channel vector the sizes and pointers allow.
template <class F>
void with_conv_shape(const Dims& g, std::initializer_list<const void*> ptrs, F&& f) {
  with_vec_width(g.C % 4 == 0 && aligned16(ptrs), [&]<int VW>() {
    switch (g.K) {
      case 1: return f.template operator()<1, VW>();
      case 2: return f.template operator()<2, VW>();
      case 3: return f.template operator()<3, VW>();
      case 4: return f.template operator()<4, VW>();
      case 5: return f.template operator()<5, VW>();
      case 6: return f.template operator()<6, VW>();
      case 7: return f.template operator()<7, VW>();
      case 8: return f.template operator()<8, VW>();
      default: fail("gdn: the cuda backend takes conv_kernel ≤ {}, got {}", kMaxConvTaps, g.K);
    }
  });
}

// Runs f.template operator()<VW, Vec>() for the row kernels: VW = 4 when
// head_dim is a multiple of 4 (rows of head_dim values at head_dim-aligned
// offsets: the channel count is a multiple of head_dim), Vec when the
// pointers then allow 16-byte accesses too.
template <class F>
void with_row_width(const Dims& g, std::initializer_list<const void*> ptrs, F&& f) {
  if (g.d % 4 != 0) {
    f.template operator()<1, false>();
  } else if (aligned16(ptrs)) {
    f.template operator()<4, true>();
  } else {
    f.template operator()<4, false>();
  }
}

dim3 conv_grid(const Dims& g, int vw) {
  const int groups = (g.C + vw - 1) / vw;
  const auto tiles = static_cast<std::size_t>(g.nb) * ((g.T + kConvRows - 1) / kConvRows);
  return dim3(static_cast<unsigned>(tiles), blocks_for(static_cast<std::size_t>(groups), kConvThreads));
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

// ---- decoding (gdn_decode) ----------------------------------------------------

// Thread e = t·C + c: cq[t][c] = silu(Σ_j w[c][j]·x[t − K + 1 + j][c]), x the
// rows conv_state [K−1][C] ++ qkv [n][C] (taps ascending, as the cpu's).
__global__ void decode_conv_kernel(const float* __restrict__ qkv, const float* __restrict__ conv_state,
                                   const float* __restrict__ w, index_t n, int C, int K, float* __restrict__ cq) {
  const index_t e = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= n * C) return;
  const index_t t = e / C;
  const int c = static_cast<int>(e % C);
  float acc = 0.0f;
  for (int j = 0; j < K; ++j) {
    const index_t r = t - (K - 1) + j;  // row of the token the tap reads, relative to the first new one
    const float x = r < 0 ? conv_state[(K - 1 + r) * C + c] : qkv[r * C + c];
    acc += x * w[static_cast<index_t>(c) * K + j];
  }
  cq[e] = gdn::siluf_(acc);
}

// Thread c: conv_state rows i = 0..K−2 become rows n + i of conv_state ++ qkv.
// In place: row i reads row n + i > i, which ascending i has not yet written.
__global__ void decode_conv_state_kernel(const float* __restrict__ qkv, float* conv_state, index_t n, int C, int K) {
  const int c = static_cast<int>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  for (int i = 0; i < K - 1; ++i) {
    const index_t m = n + i;
    conv_state[static_cast<index_t>(i) * C + c] = m < K - 1 ? conv_state[m * C + c] : qkv[(m - (K - 1)) * C + c];
  }
}

struct DecodeArgs {
  const float *cq, *z, *a, *b, *a_log, *dt_bias, *gain;  // cq [n][C]: the conv outputs
  float *state, *out;                                    // state [Hv][d][d], out [n][Hv·d]
  index_t n;
  int hk, hv, group, d, C;
  float l2_eps, norm_eps;
};

// Σ v over the block (blockDim.x a multiple of 32), every thread gets it;
// red is 32 floats of shared memory. Fixed order.
__device__ float decode_block_sum(float v, float* red) {
  const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
  const int warps = static_cast<int>(blockDim.x / 32);
  v = warp_sum(v);
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < warps; ++w) total += red[w];
  __syncthreads();  // red is reused by the next call
  return total;
}

// Block h = v-head h; thread j < d owns column j of the state. Per token:
// l2 norms (q̂ with 1/√d), gates, S ← γS, kv = Sᵀk̂, u = β(v − kv),
// S += k̂uᵀ, o = Sᵀq̂, then the gated RMSNorm. Shared: q̂, k̂ [2][d].
__global__ void decode_rec_kernel(DecodeArgs p) {
  extern __shared__ float qk_s[];  // [2][d]
  __shared__ float red[32];
  const int h = static_cast<int>(blockIdx.x), j = static_cast<int>(threadIdx.x), d = p.d, kh = h / p.group;
  const bool own = j < d;
  float* S = p.state + static_cast<index_t>(h) * d * d;
  const float decay_rate = expf(p.a_log[h]), q_scale = 1.0f / sqrtf(static_cast<float>(d));
  for (index_t t = 0; t < p.n; ++t) {
    const float* row = p.cq + t * p.C;
    const float qj = own ? row[kh * d + j] : 0.0f, kj = own ? row[(p.hk + kh) * d + j] : 0.0f;
    const float sq = decode_block_sum(qj * qj, red) + p.l2_eps, sk = decode_block_sum(kj * kj, red) + p.l2_eps;
    if (own) {
      qk_s[j] = qj * (q_scale / sqrtf(sq));
      qk_s[d + j] = kj * (1.0f / sqrtf(sk));
    }
    __syncthreads();
    const index_t th = t * p.hv + h;
    const float x = p.a[th] + p.dt_bias[h];
    const float gam = expf(-decay_rate * (fmaxf(x, 0.0f) + log1pf(expf(-fabsf(x))))), bet = gdn::sigmoidf_(p.b[th]);
    float o = 0.0f;
    if (own) {
      float kv = 0.0f;
      for (int i = 0; i < d; ++i) {
        const float s = S[static_cast<index_t>(i) * d + j] * gam;
        S[static_cast<index_t>(i) * d + j] = s;
        kv += s * qk_s[d + i];
      }
      const float u = bet * (row[2 * p.hk * d + h * d + j] - kv);
      for (int i = 0; i < d; ++i) {
        const float s = S[static_cast<index_t>(i) * d + j] + qk_s[d + i] * u;
        S[static_cast<index_t>(i) * d + j] = s;
        o += s * qk_s[i];
      }
    }
    const float inv = 1.0f / sqrtf(decode_block_sum(o * o, red) / static_cast<float>(d) + p.norm_eps);
    if (own) {
      const index_t e = th * d + j;
      p.out[e] = o * inv * p.gain[j] * gdn::siluf_(p.z[e]);
    }
    // The block sum above synchronised after every thread's last read of qk_s.
  }
}

// The sizes every kernel indexes with 32-bit ints, and the head_dim limit.
void check_supported(std::string_view op, const GdnConfig& cfg, index_t rows) {
  check::require(cfg.head_dim <= gdn::kMaxHeadDim, op, "the cuda backend takes head_dim ≤ {}, got {}",
                 gdn::kMaxHeadDim, cfg.head_dim);
  // The conv kernels keep a row's taps in registers (a template argument).
  check::require(cfg.conv_kernel <= kMaxConvTaps, op, "the cuda backend takes conv_kernel ≤ {}, got {}",
                 kMaxConvTaps, cfg.conv_kernel);
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
    const int design = ctx_.options.gdn_design;  // a backward runs its forward's design: one per backend
    const Dims g = make_dims(cfg, qkv.dim(0));
    const Tape tp = make_tape(tape.data, cfg, g);
    const cudaStream_t s = ctx_.stream.get();
    const float q_scale = 1.0f / sqrtf(static_cast<float>(g.d));

    with_conv_shape(g, {qkv.data, tp.conv_out}, [&]<int K, int VW>() {
      conv_fwd_kernel<K, VW><<<conv_grid(g, VW), kConvThreads, 0, s>>>(g, qkv.data, prm.conv_weight.data,
                                                                       tp.conv_out);
      BR_CUDA_LAUNCHED();
    });
    const unsigned k_rows = blocks_for(static_cast<std::size_t>(g.n * g.hk) * 32, 256);  // a warp per (row, k-head)
    with_row_width(g, {tp.conv_out, tp.q_hat, tp.k_hat}, [&]<int VW, bool Vec>() {
      qk_prep_kernel<VW, Vec><<<k_rows, 256, 0, s>>>(g, tp, q_scale);
      BR_CUDA_LAUNCHED();
    });
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

    with_row_width(g, {tp.o_pre, z.data, prm.norm_gain.data, out.data}, [&]<int VW, bool Vec>() {
      norm_fwd_kernel<VW, Vec><<<blocks_for(static_cast<std::size_t>(g.n * g.hv) * 32, 256), 256, 0, s>>>(
          g, tp, z.data, prm.norm_gain.data, out.data);
      BR_CUDA_LAUNCHED();
    });
  }

  void gdn_decode_impl(const GdnConfig& cfg, const GdnParams<float>& prm, CView<float> qkv, CView<float> z,
                       CView<float> a, CView<float> b, View<float> conv_state, View<float> state,
                       View<float> out) override {
    constexpr std::string_view op = "gdn_decode";
    const index_t n = qkv.dim(0), C = cfg.channels();
    check::require(cfg.head_dim <= 1024, op, "the cuda backend takes head_dim ≤ 1024, got {}", cfg.head_dim);
    check::require(C <= 0x7fffffff && n * C <= 0x7fffffffLL * 256, op,
                   "sizes beyond one launch ({} tokens of {} channels)", n, C);
    const cudaStream_t s = ctx_.stream.get();
    const int Ci = static_cast<int>(C), K = static_cast<int>(cfg.conv_kernel);
    Buffer<float> cq(ctx_.memory, static_cast<std::size_t>(n * C));
    decode_conv_kernel<<<blocks_for(static_cast<std::size_t>(n * C), 256), 256, 0, s>>>(
        qkv.data, conv_state.data, prm.conv_weight.data, n, Ci, K, cq.data());
    BR_CUDA_LAUNCHED();
    decode_conv_state_kernel<<<blocks_for(static_cast<std::size_t>(C), 256), 256, 0, s>>>(qkv.data, conv_state.data,
                                                                                           n, Ci, K);
    BR_CUDA_LAUNCHED();
    DecodeArgs p{};
    p.cq = cq.data();
    p.z = z.data;
    p.a = a.data;
    p.b = b.data;
    p.a_log = prm.a_log.data;
    p.dt_bias = prm.dt_bias.data;
    p.gain = prm.norm_gain.data;
    p.state = state.data;
    p.out = out.data;
    p.n = n;
    p.hk = static_cast<int>(cfg.k_heads);
    p.hv = static_cast<int>(cfg.v_heads);
    p.group = static_cast<int>(cfg.v_heads / cfg.k_heads);
    p.d = static_cast<int>(cfg.head_dim);
    p.C = Ci;
    p.l2_eps = cfg.l2_eps;
    p.norm_eps = cfg.norm_eps;
    const unsigned threads = static_cast<unsigned>((cfg.head_dim + 31) / 32 * 32);
    const std::size_t shared = 2 * static_cast<std::size_t>(cfg.head_dim) * sizeof(float);
    decode_rec_kernel<<<static_cast<unsigned>(cfg.v_heads), threads, shared, s>>>(p);
    BR_CUDA_LAUNCHED();
  }

  void gdn_backward_impl(const GdnConfig& cfg, const GdnParams<float>& prm, CView<float> qkv, CView<float> z,
                         View<float> tape, CView<float> d_out, View<float> d_qkv, View<float> d_z, View<float> d_a,
                         View<float> d_b) override {
    check_supported("gdn_backward", cfg, qkv.dim(0));
    const int design = ctx_.options.gdn_design;
    const Dims g = make_dims(cfg, qkv.dim(0));
    const Tape tp = make_tape(tape.data, cfg, g);
    const cudaStream_t s = ctx_.stream.get();
    const float q_scale = 1.0f / sqrtf(static_cast<float>(g.d));

    with_row_width(g, {tp.o_pre, z.data, prm.norm_gain.data, d_out.data, d_z.data, d_qkv.data}, [&]<int VW, bool Vec>() {
      norm_bwd_kernel<VW, Vec><<<blocks_for(static_cast<std::size_t>(g.n * g.hv) * 32, 256), 256, 0, s>>>(
          g, tp, z.data, prm.norm_gain.data, d_out.data, d_z.data, d_qkv.data);
      BR_CUDA_LAUNCHED();
    });

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
      gdn::chunk_backward(ra, gdn::chunk_workspace(kept ? kept : fwd.data(), bwd.data(), g), !kept, s);
    } else if (design == 1) {
      gdn::rec1_backward(ra, s);
    } else {
      gdn::rec2_backward(ra, s);
    }

    with_row_width(g, {tp.conv_out, tp.dq_hat, tp.dk_hat, d_qkv.data}, [&]<int VW, bool Vec>() {
      qk_bwd_kernel<VW, Vec><<<blocks_for(static_cast<std::size_t>(g.n * g.hk) * 32, 256), 256, 0, s>>>(g, tp, q_scale,
                                                                                                   d_qkv.data);
      BR_CUDA_LAUNCHED();
    });
    with_conv_shape(g, {qkv.data, d_qkv.data}, [&]<int K, int VW>() {
      const dim3 grid = conv_grid(g, VW);
      Buffer<float> halo(ctx_.memory, static_cast<std::size_t>(grid.x) * (K - 1) * g.C);
      if constexpr (K > 1) {
        conv_halo_kernel<K, VW><<<grid, kConvThreads, 0, s>>>(g, qkv.data, prm.conv_weight.data, d_qkv.data,
                                                              halo.data());
        BR_CUDA_LAUNCHED();
      }
      conv_bwd_kernel<K, VW><<<grid, kConvThreads, 0, s>>>(g, qkv.data, prm.conv_weight.data, halo.data(),
                                                           d_qkv.data);
      BR_CUDA_LAUNCHED();
    });
  }

 private:
  Context& ctx_;
};

}  // namespace

std::unique_ptr<GdnOps<float>> make_gdn_ops(Context& ctx) { return std::make_unique<CudaGdnOps>(ctx); }

}  // namespace bitrank::cuda
