// CUDA causal GQA attention (contract: include/bitrank/ops/attention.hpp).
//
// Exact f32 path, FlashAttention-2 structure on FP32 FMA (no tensor cores).
// Scores are kept in base 2: s₂ = (q·k)·scale·log₂e, P = 2^{s₂ − m₂}, and
// lse = (m₂ + log₂ l)·ln 2 is stored in natural units as the contract says.
// Every output element has exactly one writer and a fixed order of
// summation, so results are deterministic (no atomics).
//
// Tiled kernels, for hd ≤ 256: a block of 256 threads (8 warps); head_dim
// is padded to HDP ∈ {64, 128, 256} with zeros in shared memory (so odd hd
// such as 7 or 37 take the same kernels); every shared tile [rows][HDP] has
// a row stride of HDP + 4 floats, so eight consecutive rows start in eight
// different 4-bank groups and the float4 reads of the score phase are free
// of bank conflicts. Tiles come in by cp.async (16-byte chunks) when
// hd % 4 == 0 and the tensors are 16-byte aligned, else by plain loads.
//
//   attn_fwd   block (window, head, 64 queries); 64-key blocks of K and V
//              up to the diagonal. Score phase: each warp a 16×32 sub-tile,
//              each thread 4 queries × 4 keys (rows tq + 4a, keys tk + 8b),
//              float4 dot products over HDP. Row max and sum by xor shuffles
//              over the 8 lanes of a query, then across the two key halves
//              through shared memory; Pᵀ [key][query] goes to shared memory.
//              PV phase: each warp 8 queries × HDP columns, each thread 8
//              queries × 8 columns (HDP 256; fewer below) in registers, with
//              the query's running max and sum; the next K block loads
//              during PV and the V block during the score phase.
//              Shared: Q, K, V [64][HDP+4], Pᵀ [64][68] — 213 KB at HDP 256.
//   attn_delta one warp per (row, head): delta = Σ dout·out (f64 sum).
//   attn_dkv   block (window, kv head, 32 keys), heaviest (first) key
//              blocks launched first; loops over the group's query heads and
//              the 64-query blocks at or after the keys. Warps 0–3 compute
//              S = Q·Kᵀ → P = 2^{s₂ − lse₂} (masked 0), warps 4–7 dP = dO·Vᵀ
//              → dS = P⊙(dP − delta)·scale; then warps 0–3 accumulate
//              dV += Pᵀ·dO and warps 4–7 dK += dSᵀ·Q (each thread 8 keys ×
//              8 columns in registers). Shared: K, V [32][HDP+4], Q, dO
//              [64][HDP+4], P, dS [64][40] — 216 KB at HDP 256. It also
//              writes each dS tile to a scratch buffer as [32 keys][64
//              queries] (one writer per element) when that fits 1 GiB.
//   attn_dq_ds block (window, head, 64 queries): dQ += dS·K over the key
//              blocks up to the diagonal from those tiles, each thread 8
//              queries × 8 columns; the next dSᵀ tile and K block load
//              during the current one (two stages of [32][68] + [32][HDP+4],
//              84 KB at HDP 256, two blocks per SM).
//   attn_dq    (when the dS tiles would not fit) block (window, head, 64
//              queries), 32-key blocks up to the diagonal: the same S / dP
//              split as attn_dkv, then dQ += dS·K. Shared: Q, dO
//              [64][HDP+4], K, V [32][HDP+4], dSᵀ [32][68] — 204 KB.
//
//   attn_decode (attention_decode) one warp per (query row, head): the
//              generic forward's loop over the keys the row sees; a
//              decoding step is one row, so no tiles.
//
// CudaOptions::attention "recompute" makes the backward use attn_dq (for
// testing).
//
// Measured on one H200 (2026-11-29, wall clock over 10 calls, 24 heads / 4
// kv heads, hd 256): 8 windows of 512 — forward 0.88 ms, backward 2.35 ms
// (3.34 ms with attn_dq); 1 window of 4096 — 5.92 ms and 16.1 ms. PyTorch
// SDPA fp32 forward+backward on the same kind of machine, same session:
// 4.72 ms and 32.4 ms. Each kernel runs at 40–45% of the FP32 FMA peak;
// attn_dkv is about four fifths of the backward and loads its Q / dO tiles
// without overlapping them with compute (no room in shared memory for a
// second stage at hd 256): the first place to look for more speed.
//
// Generic kernels (hd > 256, or a device with less shared memory per block;
// CudaOptions::attention "generic" forces them, for testing): one warp per
// query row (forward, dq) or key row (dk, dv), accumulating in the output
// row itself (each lane its own columns), warp-shuffle dot products.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "cuda/ops.hpp"

namespace bitrank::cuda {
namespace {

constexpr int kThreads = 256;  // 8 warps per block
constexpr int kWarps = kThreads / 32;
constexpr int kBlockQ = 64;    // queries per block (all tiled kernels)
constexpr int kFwdKeys = 64;   // keys per block in the forward
constexpr int kBwdKeys = 32;   // keys per block in the backward kernels
constexpr int kPtStride = kBlockQ + 4;  // Pᵀ / dSᵀ tiles [key][query]
constexpr int kPStride = kBwdKeys + 8;  // P / dS tiles [query][key] of attn_dkv
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
// dS tiles [32 keys][64 queries] kept by attn_dkv for attn_dq_ds; the
// tiles of one (window, head) are its causal (query block, key block)
// pairs, query block by query block. Above this much scratch the dQ pass
// recomputes S and dP instead (attn_dq).
constexpr int kDsTile = kBwdKeys * kBlockQ;
constexpr std::size_t kMaxDsScratchBytes = std::size_t{1} << 30;

// Every query block but the last is whole, so query block qb (64 queries)
// has key blocks (32 keys) 0 .. 2·qb + 1 and its tiles start at qb·(qb + 1).
__host__ __device__ __forceinline__ index_t ds_tile_index(int qb, int kb) {
  return static_cast<index_t>(qb) * (qb + 1) + kb;
}

// Sizes of one call, as the kernels see them.
struct Geo {
  int window;      // T
  int heads, kv_heads, group, hd;
  index_t q_stride, kv_stride;  // heads·hd, kv_heads·hd
  float scale;                  // 1/√hd
  float scale_log2;             // log₂e/√hd
  bool vec;                     // 16-byte loads and stores (hd % 4 == 0, aligned tensors)
};

// Shared-memory geometry of the tiled kernels for a padded head_dim.
template <int HDP>
struct Tile {
  static constexpr int ld = HDP + 4;                     // row stride of [rows][HDP] tiles
  static constexpr int col_lanes = HDP / 4 < 32 ? HDP / 4 : 32;  // lanes across the columns (float4 each)
  static constexpr int col_groups = HDP / (4 * col_lanes);        // float4 column groups per lane
  static constexpr int row_groups = 32 / col_lanes;                // lane groups of a warp down the rows
  static constexpr int rows = 8 / row_groups;                      // rows per lane (a warp owns 8 rows)
  static constexpr std::size_t fwd_bytes =
      sizeof(float) * (static_cast<std::size_t>(kBlockQ + 2 * kFwdKeys) * ld + kFwdKeys * kPtStride + 5 * kBlockQ);
  static constexpr std::size_t dkv_bytes =
      sizeof(float) * (static_cast<std::size_t>(2 * kBwdKeys + 2 * kBlockQ) * ld + 2 * kBlockQ * kPStride +
                       2 * kBlockQ);
  static constexpr std::size_t dq_bytes =
      sizeof(float) * (static_cast<std::size_t>(2 * kBlockQ + 2 * kBwdKeys) * ld + kBwdKeys * kPtStride +
                       2 * kBlockQ);
  static_assert(rows % 4 == 0, "rows of a lane are read as float4");
};

// ---- device helpers -------------------------------------------------------

__device__ __forceinline__ void cp_async16(float* dst, const float* src) {
  const auto d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

// dst[r][c] (row stride HDP + 4) = src[r·ld + c] for r < rows, c < hd; zero
// for the other r < R, c < HDP. All threads of the block take part; with
// `vec` the copies are asynchronous (cp_async_wait_all + __syncthreads
// before use), else plain.
template <int R, int HDP>
__device__ void load_tile(float* dst, const float* src, index_t ld, int rows, int hd, bool vec) {
  constexpr int stride = Tile<HDP>::ld;
  if (vec) {
    constexpr int chunks = HDP / 4;
    for (int i = threadIdx.x; i < R * chunks; i += kThreads) {
      const int r = i / chunks, c = (i % chunks) * 4;
      float* d = dst + r * stride + c;
      if (r < rows && c < hd)
        cp_async16(d, src + r * ld + c);
      else
        *reinterpret_cast<float4*>(d) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
  } else {
    for (int i = threadIdx.x; i < R * HDP; i += kThreads) {
      const int r = i / HDP, c = i % HDP;
      dst[r * stride + c] = r < rows && c < hd ? src[r * ld + c] : 0.0f;
    }
  }
}

__device__ __forceinline__ float4 ld4(const float* p) { return *reinterpret_cast<const float4*>(p); }

// acc[a][b] = Σ_c A[a0 + tq + 4a][c]·B[b0 + tk + 8b][c] over the padded
// head_dim: the 4 × 4 scores of one thread.
template <int HDP>
__device__ __forceinline__ void tile_dots(float (&acc)[4][4], const float* A, int a0, const float* B, int b0, int tq,
                                          int tk) {
  constexpr int ld = Tile<HDP>::ld;
#pragma unroll
  for (int a = 0; a < 4; ++a)
#pragma unroll
    for (int b = 0; b < 4; ++b) acc[a][b] = 0.0f;
  const float* ap = A + (a0 + tq) * ld;
  const float* bp = B + (b0 + tk) * ld;
#pragma unroll 4
  for (int c = 0; c < HDP; c += 4) {
    float4 av[4], bv[4];
#pragma unroll
    for (int a = 0; a < 4; ++a) av[a] = ld4(ap + 4 * a * ld + c);
#pragma unroll
    for (int b = 0; b < 4; ++b) bv[b] = ld4(bp + 8 * b * ld + c);
#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        float s = acc[a][b];
        s = fmaf(av[a].x, bv[b].x, s);
        s = fmaf(av[a].y, bv[b].y, s);
        s = fmaf(av[a].z, bv[b].z, s);
        s = fmaf(av[a].w, bv[b].w, s);
        acc[a][b] = s;
      }
  }
}

// acc[r][g] += Σ_{t < count} coef[t·cs + row0 + r]·M[t][col0 + 4·col_lanes·g .. +3]:
// one thread's rows × columns of a product whose inner index t runs over
// the rows of M (keys or queries).
template <int HDP, int count>
__device__ __forceinline__ void rowcol_acc(float4 (&acc)[Tile<HDP>::rows][Tile<HDP>::col_groups], const float* coef,
                                           int cs, int row0, const float* M, int col0) {
  constexpr int ld = Tile<HDP>::ld, R = Tile<HDP>::rows, G = Tile<HDP>::col_groups, span = 4 * Tile<HDP>::col_lanes;
#pragma unroll 4
  for (int t = 0; t < count; ++t) {
    float p[R];
#pragma unroll
    for (int r = 0; r < R; r += 4) {
      const float4 c4 = ld4(coef + t * cs + row0 + r);
      p[r] = c4.x, p[r + 1] = c4.y, p[r + 2] = c4.z, p[r + 3] = c4.w;
    }
    float4 m[G];
#pragma unroll
    for (int g = 0; g < G; ++g) m[g] = ld4(M + t * ld + col0 + g * span);
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int g = 0; g < G; ++g) {
        acc[r][g].x = fmaf(p[r], m[g].x, acc[r][g].x);
        acc[r][g].y = fmaf(p[r], m[g].y, acc[r][g].y);
        acc[r][g].z = fmaf(p[r], m[g].z, acc[r][g].z);
        acc[r][g].w = fmaf(p[r], m[g].w, acc[r][g].w);
      }
  }
}

// Writes one thread's rows × columns of a [rows][hd] result (row r at
// dst + r·ld), times `mul` per row; rows at or past `valid` are skipped.
template <int HDP>
__device__ __forceinline__ void store_rows(const float4 (&acc)[Tile<HDP>::rows][Tile<HDP>::col_groups],
                                           const float (&mul)[Tile<HDP>::rows], float* dst, index_t ld, int row0,
                                           int valid, int col0, int hd, bool vec) {
  constexpr int R = Tile<HDP>::rows, G = Tile<HDP>::col_groups, span = 4 * Tile<HDP>::col_lanes;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if (row0 + r >= valid) continue;
    float* d = dst + (row0 + r) * ld;
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const int c = col0 + g * span;
      const float4 v = make_float4(acc[r][g].x * mul[r], acc[r][g].y * mul[r], acc[r][g].z * mul[r],
                                   acc[r][g].w * mul[r]);
      if (vec) {
        if (c < hd) *reinterpret_cast<float4*>(d + c) = v;
      } else {
        if (c < hd) d[c] = v.x;
        if (c + 1 < hd) d[c + 1] = v.y;
        if (c + 2 < hd) d[c + 2] = v.z;
        if (c + 3 < hd) d[c + 3] = v.w;
      }
    }
  }
}

// A thread's rows × column groups of a product, zeroed.
template <int HDP>
__device__ __forceinline__ void zero_rows(float4 (&acc)[Tile<HDP>::rows][Tile<HDP>::col_groups]) {
#pragma unroll
  for (int r = 0; r < Tile<HDP>::rows; ++r)
#pragma unroll
    for (int gg = 0; gg < Tile<HDP>::col_groups; ++gg) acc[r][gg] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
}

// ---- forward --------------------------------------------------------------

// Grid: query blocks × windows × heads, the last query blocks (most keys)
// first: blockIdx.x = (nqb − 1 − qb)·(windows·heads) + window·heads + head.
template <int HDP>
__global__ void __launch_bounds__(kThreads, 1)
    attn_fwd_kernel(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v, Geo g,
                    int nqb, int window_heads, float* __restrict__ out, float* __restrict__ lse) {
  using TL = Tile<HDP>;
  constexpr int ld = TL::ld, R = TL::rows, G = TL::col_groups;
  extern __shared__ float4 smem4[];
  float* Qs = reinterpret_cast<float*>(smem4);  // [64][ld]
  float* Ks = Qs + kBlockQ * ld;                // [64][ld]
  float* Vs = Ks + kFwdKeys * ld;               // [64][ld]
  float* Pt = Vs + kFwdKeys * ld;               // [64 keys][kPtStride]: Pᵀ
  float* red_max = Pt + kFwdKeys * kPtStride;   // [2 key halves][64 queries]
  float* red_sum = red_max + 2 * kBlockQ;       // [2][64]
  float* run_max = red_sum + 2 * kBlockQ;       // [64]: running max before this key block

  const int bh = blockIdx.x % window_heads;
  const int qb = nqb - 1 - static_cast<int>(blockIdx.x / window_heads);
  const int b = bh / g.heads, h = bh % g.heads, kvh = h / g.group;
  const int T = g.window, q0 = qb * kBlockQ, qrows = min(kBlockQ, T - q0);
  const float* qbase = q + (static_cast<index_t>(b) * T + q0) * g.q_stride + static_cast<index_t>(h) * g.hd;
  const float* kbase = k + static_cast<index_t>(b) * T * g.kv_stride + static_cast<index_t>(kvh) * g.hd;
  const float* vbase = v + static_cast<index_t>(b) * T * g.kv_stride + static_cast<index_t>(kvh) * g.hd;

  load_tile<kBlockQ, HDP>(Qs, qbase, g.q_stride, qrows, g.hd, g.vec);
  load_tile<kFwdKeys, HDP>(Ks, kbase, g.kv_stride, min(kFwdKeys, T), g.hd, g.vec);
  if (threadIdx.x < kBlockQ) run_max[threadIdx.x] = -INFINITY;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // score phase: queries wq·16 + tq + 4a, keys wk·32 + tk + 8b
  const int tq = lane >> 3, tk = lane & 7, wq = warp >> 1, wk = warp & 1;
  const int sq = wq * 16 + tq, sk = wk * 32 + tk;
  // PV phase: queries row0 + r, columns col0 + 4·col_lanes·g
  const int row0 = warp * 8 + (lane / TL::col_lanes) * R, col0 = (lane % TL::col_lanes) * 4;
  float4 acc[R][G];
  float m_run[R], l_run[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    m_run[r] = -INFINITY;
    l_run[r] = 0.0f;
#pragma unroll
    for (int gg = 0; gg < G; ++gg) acc[r][gg] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  cp_async_wait_all();
  __syncthreads();

  const int nkb = qb + 1;  // kFwdKeys == kBlockQ: key blocks up to the diagonal
  for (int kb = 0; kb < nkb; ++kb) {
    const int k0 = kb * kFwdKeys, krows = min(kFwdKeys, T - k0);
    load_tile<kFwdKeys, HDP>(Vs, vbase + static_cast<index_t>(k0) * g.kv_stride, g.kv_stride, krows, g.hd, g.vec);

    float s[4][4];
    tile_dots<HDP>(s, Qs, wq * 16, Ks, wk * 32, tq, tk);
#pragma unroll
    for (int a = 0; a < 4; ++a) {
      const int qpos = q0 + sq + 4 * a;
      float mx = -INFINITY;
#pragma unroll
      for (int bb = 0; bb < 4; ++bb) {
        const int kpos = k0 + sk + 8 * bb;
        s[a][bb] = kpos <= qpos ? s[a][bb] * g.scale_log2 : -INFINITY;
        mx = fmaxf(mx, s[a][bb]);
      }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
      if (tk == 0) red_max[wk * kBlockQ + sq + 4 * a] = mx;
    }
    __syncthreads();  // (A) block maxima known; K no longer read

#pragma unroll
    for (int a = 0; a < 4; ++a) {
      const int qi = sq + 4 * a;
      const float m_new = fmaxf(run_max[qi], fmaxf(red_max[qi], red_max[kBlockQ + qi]));
      float sum = 0.0f;
#pragma unroll
      for (int bb = 0; bb < 4; ++bb) {
        const float p = exp2f(s[a][bb] - m_new);
        Pt[(sk + 8 * bb) * kPtStride + qi] = p;
        sum += p;
      }
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      sum += __shfl_xor_sync(0xffffffffu, sum, 4);
      if (tk == 0) red_sum[wk * kBlockQ + qi] = sum;
    }
    cp_async_wait_all();
    __syncthreads();  // (B) P, block sums and V ready

    if (kb + 1 < nkb)
      load_tile<kFwdKeys, HDP>(Ks, kbase + static_cast<index_t>(k0 + kFwdKeys) * g.kv_stride, g.kv_stride,
                               min(kFwdKeys, T - k0 - kFwdKeys), g.hd, g.vec);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int qi = row0 + r;
      const float m_new = fmaxf(m_run[r], fmaxf(red_max[qi], red_max[kBlockQ + qi]));
      const float corr = exp2f(m_run[r] - m_new);  // 0 on the first block (m_run = −∞)
      l_run[r] = l_run[r] * corr + (red_sum[qi] + red_sum[kBlockQ + qi]);
      m_run[r] = m_new;
#pragma unroll
      for (int gg = 0; gg < G; ++gg) {
        acc[r][gg].x *= corr;
        acc[r][gg].y *= corr;
        acc[r][gg].z *= corr;
        acc[r][gg].w *= corr;
      }
      // The score phase of the next block reads this after (C).
      if (lane % TL::col_lanes == 0) run_max[qi] = m_new;
    }
    rowcol_acc<HDP, kFwdKeys>(acc, Pt, kPtStride, row0, Vs, col0);
    cp_async_wait_all();
    __syncthreads();  // (C) next K ready; P, V and the block statistics free
  }

  float inv_l[R];
#pragma unroll
  for (int r = 0; r < R; ++r) inv_l[r] = 1.0f / l_run[r];
  store_rows<HDP>(acc, inv_l, out + (static_cast<index_t>(b) * T + q0) * g.q_stride + static_cast<index_t>(h) * g.hd,
                  g.q_stride, row0, qrows, col0, g.hd, g.vec);
  if (lane % TL::col_lanes == 0)
#pragma unroll
    for (int r = 0; r < R; ++r)
      if (row0 + r < qrows)
        lse[(static_cast<index_t>(b) * T + q0 + row0 + r) * g.heads + h] = (m_run[r] + log2f(l_run[r])) * kLn2;
}

// ---- backward -------------------------------------------------------------

__device__ double warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// delta[row][h] = Σ_c dout·out: one warp per (row, head), f64 sum.
__global__ void attn_delta_kernel(const float* __restrict__ dout, const float* __restrict__ out, index_t units, int hd,
                                  float* __restrict__ delta) {
  const index_t unit = static_cast<index_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (unit >= units) return;
  const float* a = dout + unit * hd;
  const float* o = out + unit * hd;
  double s = 0.0;
  for (int c = lane; c < hd; c += 32) s += static_cast<double>(a[c]) * o[c];
  s = warp_sum(s);
  if (lane == 0) delta[unit] = static_cast<float>(s);
}

// lse₂ = lse·log₂e and delta of the queries q0 .. q0 + 63 of head h into
// shared memory (0 past the window).
__device__ __forceinline__ void load_row_stats(float* lse_s, float* delta_s, const float* lse, const float* delta,
                                               const Geo& g, int b, int h, int q0, int qrows) {
  if (threadIdx.x < kBlockQ) {
    const int i = threadIdx.x;
    const index_t at = (static_cast<index_t>(b) * g.window + q0 + i) * g.heads + h;
    lse_s[i] = i < qrows ? lse[at] * kLog2e : 0.0f;
    delta_s[i] = i < qrows ? delta[at] : 0.0f;
  }
}

// f(a, b, qi, kj) for each of a thread's 4 × 4 scores in the backward
// passes (tile_dots' s[a][b]): query qi = sq + 4a, key kj = tk + 8b of the tile.
template <class F>
__device__ __forceinline__ void for_scores(int sq, int tk, F f) {
#pragma unroll
  for (int a = 0; a < 4; ++a)
#pragma unroll
    for (int b = 0; b < 4; ++b) f(a, b, sq + 4 * a, tk + 8 * b);
}

// P of a score s recomputed from the forward's log-sum-exp (lse2 = lse·log₂e)
// at query position qpos and key position kpos of a window of T: 0 off the
// causal part and past the window.
__device__ __forceinline__ float backward_prob(float s, float scale_log2, float lse2, int qpos, int kpos, int T) {
  return kpos <= qpos && qpos < T ? exp2f(s * scale_log2 - lse2) : 0.0f;
}

// Grid: key blocks × windows × kv heads, the first key blocks (most
// queries) first: blockIdx.x = kb·(windows·kv_heads) + window·kv_heads + kv head.
template <int HDP>
__global__ void __launch_bounds__(kThreads, 1)
    attn_dkv_kernel(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                    const float* __restrict__ dout, const float* __restrict__ lse, const float* __restrict__ delta,
                    Geo g, int window_kv, index_t tiles_per_head, float* __restrict__ dk, float* __restrict__ dv,
                    float* __restrict__ ds_tiles) {
  using TL = Tile<HDP>;
  constexpr int ld = TL::ld, R = TL::rows, G = TL::col_groups;
  extern __shared__ float4 smem4[];
  float* Ks = reinterpret_cast<float*>(smem4);  // [32][ld]
  float* Vs = Ks + kBwdKeys * ld;               // [32][ld]
  float* Qs = Vs + kBwdKeys * ld;               // [64][ld]
  float* dOs = Qs + kBlockQ * ld;               // [64][ld]
  float* Ps = dOs + kBlockQ * ld;               // [64 queries][kPStride]: P
  float* dSs = Ps + kBlockQ * kPStride;         // [64][kPStride]: dS
  float* lse_s = dSs + kBlockQ * kPStride;      // [64]
  float* delta_s = lse_s + kBlockQ;             // [64]

  const int bg = blockIdx.x % window_kv;
  const int kb = static_cast<int>(blockIdx.x / window_kv);
  const int b = bg / g.kv_heads, kvh = bg % g.kv_heads;
  const int T = g.window, k0 = kb * kBwdKeys, krows = min(kBwdKeys, T - k0);
  const index_t kv_off = (static_cast<index_t>(b) * T + k0) * g.kv_stride + static_cast<index_t>(kvh) * g.hd;
  load_tile<kBwdKeys, HDP>(Ks, k + kv_off, g.kv_stride, krows, g.hd, g.vec);
  load_tile<kBwdKeys, HDP>(Vs, v + kv_off, g.kv_stride, krows, g.hd, g.vec);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int half = warp >> 2, w4 = warp & 3;  // half 0: S, P, dV; half 1: dP, dS, dK
  const int tq = lane >> 3, tk = lane & 7;
  const int sq = w4 * 16 + tq;                 // score phase: queries sq + 4a, keys tk + 8b
  const int row0 = w4 * 8 + (lane / TL::col_lanes) * R, col0 = (lane % TL::col_lanes) * 4;  // keys, columns
  float4 acc[R][G];
  zero_rows<HDP>(acc);

  const int nqb = (T + kBlockQ - 1) / kBlockQ;
  for (int hh = 0; hh < g.group; ++hh) {
    const int h = kvh * g.group + hh;
    for (int qb = k0 / kBlockQ; qb < nqb; ++qb) {
      const int q0 = qb * kBlockQ, qrows = min(kBlockQ, T - q0);
      const index_t q_off = (static_cast<index_t>(b) * T + q0) * g.q_stride + static_cast<index_t>(h) * g.hd;
      load_tile<kBlockQ, HDP>(Qs, q + q_off, g.q_stride, qrows, g.hd, g.vec);
      load_tile<kBlockQ, HDP>(dOs, dout + q_off, g.q_stride, qrows, g.hd, g.vec);
      load_row_stats(lse_s, delta_s, lse, delta, g, b, h, q0, qrows);
      cp_async_wait_all();
      __syncthreads();

      float s[4][4];
      tile_dots<HDP>(s, half == 0 ? Qs : dOs, w4 * 16, half == 0 ? Ks : Vs, 0, tq, tk);
      if (half == 0)
        for_scores(sq, tk, [&](int a, int bb, int qi, int kj) {
          Ps[qi * kPStride + kj] = backward_prob(s[a][bb], g.scale_log2, lse_s[qi], q0 + qi, k0 + kj, T);
        });
      __syncthreads();
      if (half == 1) {
        // This (query block, key block) tile of dS, kept for attn_dq_ds when it runs.
        float* tile = ds_tiles == nullptr ? nullptr
                                          : ds_tiles + ((static_cast<index_t>(b) * g.heads + h) * tiles_per_head +
                                                        ds_tile_index(qb, kb)) *
                                                           kDsTile;
        for_scores(sq, tk, [&](int a, int bb, int qi, int kj) {
          const float ds = Ps[qi * kPStride + kj] * (s[a][bb] - delta_s[qi]) * g.scale;
          dSs[qi * kPStride + kj] = ds;
          if (tile != nullptr) tile[kj * kBlockQ + qi] = ds;
        });
      }
      __syncthreads();
      if (half == 0)
        rowcol_acc<HDP, kBlockQ>(acc, Ps, kPStride, row0, dOs, col0);  // dV[j] += Σ_i P[i][j]·dout[i]
      else
        rowcol_acc<HDP, kBlockQ>(acc, dSs, kPStride, row0, Qs, col0);  // dK[j] += Σ_i dS[i][j]·q[i]
      __syncthreads();  // Q, dO, P, dS free for the next query block
    }
  }

  float one[R];
#pragma unroll
  for (int r = 0; r < R; ++r) one[r] = 1.0f;
  store_rows<HDP>(acc, one, (half == 0 ? dv : dk) + kv_off, g.kv_stride, row0, krows, col0, g.hd, g.vec);
}

// Grid as attn_fwd: blockIdx.x = (nqb − 1 − qb)·(windows·heads) + window·heads + head.
template <int HDP>
__global__ void __launch_bounds__(kThreads, 1)
    attn_dq_kernel(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                   const float* __restrict__ dout, const float* __restrict__ lse, const float* __restrict__ delta,
                   Geo g, int nqb, int window_heads, float* __restrict__ dq) {
  using TL = Tile<HDP>;
  constexpr int ld = TL::ld, R = TL::rows, G = TL::col_groups;
  extern __shared__ float4 smem4[];
  float* Qs = reinterpret_cast<float*>(smem4);  // [64][ld]
  float* dOs = Qs + kBlockQ * ld;               // [64][ld]
  float* Ks = dOs + kBlockQ * ld;               // [32][ld]
  float* Vs = Ks + kBwdKeys * ld;               // [32][ld]
  float* St = Vs + kBwdKeys * ld;               // [32 keys][kPtStride]: Pᵀ, then dSᵀ
  float* lse_s = St + kBwdKeys * kPtStride;     // [64]
  float* delta_s = lse_s + kBlockQ;             // [64]

  const int bh = blockIdx.x % window_heads;
  const int qb = nqb - 1 - static_cast<int>(blockIdx.x / window_heads);
  const int b = bh / g.heads, h = bh % g.heads, kvh = h / g.group;
  const int T = g.window, q0 = qb * kBlockQ, qrows = min(kBlockQ, T - q0);
  const index_t q_off = (static_cast<index_t>(b) * T + q0) * g.q_stride + static_cast<index_t>(h) * g.hd;
  const float* kbase = k + static_cast<index_t>(b) * T * g.kv_stride + static_cast<index_t>(kvh) * g.hd;
  const float* vbase = v + static_cast<index_t>(b) * T * g.kv_stride + static_cast<index_t>(kvh) * g.hd;
  load_tile<kBlockQ, HDP>(Qs, q + q_off, g.q_stride, qrows, g.hd, g.vec);
  load_tile<kBlockQ, HDP>(dOs, dout + q_off, g.q_stride, qrows, g.hd, g.vec);
  load_row_stats(lse_s, delta_s, lse, delta, g, b, h, q0, qrows);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int half = warp >> 2, w4 = warp & 3;  // half 0: S, P; half 1: dP, dS
  const int tq = lane >> 3, tk = lane & 7;
  const int sq = w4 * 16 + tq;
  const int row0 = warp * 8 + (lane / TL::col_lanes) * R, col0 = (lane % TL::col_lanes) * 4;  // queries, columns
  float4 acc[R][G];
  zero_rows<HDP>(acc);

  const int last = min(q0 + kBlockQ - 1, T - 1);
  const int nkb = last / kBwdKeys + 1;
  for (int kb = 0; kb < nkb; ++kb) {
    const int k0 = kb * kBwdKeys, krows = min(kBwdKeys, T - k0);
    load_tile<kBwdKeys, HDP>(Ks, kbase + static_cast<index_t>(k0) * g.kv_stride, g.kv_stride, krows, g.hd, g.vec);
    load_tile<kBwdKeys, HDP>(Vs, vbase + static_cast<index_t>(k0) * g.kv_stride, g.kv_stride, krows, g.hd, g.vec);
    cp_async_wait_all();
    __syncthreads();

    float s[4][4];
    tile_dots<HDP>(s, half == 0 ? Qs : dOs, w4 * 16, half == 0 ? Ks : Vs, 0, tq, tk);
    if (half == 0)
      for_scores(sq, tk, [&](int a, int bb, int qi, int kj) {
        St[kj * kPtStride + qi] = backward_prob(s[a][bb], g.scale_log2, lse_s[qi], q0 + qi, k0 + kj, T);
      });
    __syncthreads();
    if (half == 1)
      for_scores(sq, tk, [&](int a, int bb, int qi, int kj) {
        float* at = St + kj * kPtStride + qi;
        *at = *at * (s[a][bb] - delta_s[qi]) * g.scale;
      });
    __syncthreads();
    rowcol_acc<HDP, kBwdKeys>(acc, St, kPtStride, row0, Ks, col0);  // dQ[i] += Σ_j dS[i][j]·k[j]
    __syncthreads();  // K, V, dSᵀ free for the next key block
  }

  float one[R];
#pragma unroll
  for (int r = 0; r < R; ++r) one[r] = 1.0f;
  store_rows<HDP>(acc, one, dq + q_off, g.q_stride, row0, qrows, col0, g.hd, g.vec);
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int pending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(pending) : "memory");
}

// dQ from the dS tiles of attn_dkv: dQ[i] += Σ_j dS[i][j]·k[j] over the key
// blocks up to the diagonal, the dSᵀ tile and the K block of the next key
// block loading (two stages) while this one is used. Grid as attn_dq.
template <int HDP>
__global__ void __launch_bounds__(kThreads, 2)
    attn_dq_ds_kernel(const float* __restrict__ k, const float* __restrict__ ds_tiles, Geo g, int nqb,
                      int window_heads, index_t tiles_per_head, float* __restrict__ dq) {
  using TL = Tile<HDP>;
  constexpr int ld = TL::ld, R = TL::rows, G = TL::col_groups;
  constexpr int stage = kBwdKeys * kPtStride + kBwdKeys * ld;  // dSᵀ [32][kPtStride], K [32][ld]
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);

  const int bh = blockIdx.x % window_heads;
  const int qb = nqb - 1 - static_cast<int>(blockIdx.x / window_heads);
  const int b = bh / g.heads, h = bh % g.heads, kvh = h / g.group;
  const int T = g.window, q0 = qb * kBlockQ, qrows = min(kBlockQ, T - q0);
  const float* kbase = k + static_cast<index_t>(b) * T * g.kv_stride + static_cast<index_t>(kvh) * g.hd;
  const float* tiles = ds_tiles + (static_cast<index_t>(bh) * tiles_per_head + ds_tile_index(qb, 0)) * kDsTile;
  const int nkb = min(q0 + kBlockQ - 1, T - 1) / kBwdKeys + 1;

  // Stage s of key block kb: the dS tile (always 16-byte aligned) and K.
  auto load_stage = [&](int kb, float* st) {
    const float* src = tiles + static_cast<index_t>(kb) * kDsTile;
    for (int i = threadIdx.x; i < kDsTile / 4; i += kThreads) {
      const int j = i / (kBlockQ / 4), c = (i % (kBlockQ / 4)) * 4;
      cp_async16(st + j * kPtStride + c, src + j * kBlockQ + c);
    }
    const int k0 = kb * kBwdKeys;
    load_tile<kBwdKeys, HDP>(st + kBwdKeys * kPtStride, kbase + static_cast<index_t>(k0) * g.kv_stride, g.kv_stride,
                             min(kBwdKeys, T - k0), g.hd, g.vec);
    cp_async_commit();
  };

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row0 = warp * 8 + (lane / TL::col_lanes) * R, col0 = (lane % TL::col_lanes) * 4;  // queries, columns
  float4 acc[R][G];
  zero_rows<HDP>(acc);

  load_stage(0, smem);
  for (int kb = 0; kb < nkb; ++kb) {
    float* st = smem + (kb & 1) * stage;
    if (kb + 1 < nkb) {
      load_stage(kb + 1, smem + ((kb + 1) & 1) * stage);
      cp_async_wait<1>();  // this block's stage has landed, the next may still be in flight
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    rowcol_acc<HDP, kBwdKeys>(acc, st, kPtStride, row0, st + kBwdKeys * kPtStride, col0);
    __syncthreads();  // this stage is free for key block kb + 2
  }

  float one[R];
#pragma unroll
  for (int r = 0; r < R; ++r) one[r] = 1.0f;
  store_rows<HDP>(acc, one, dq + (static_cast<index_t>(b) * T + q0) * g.q_stride + static_cast<index_t>(h) * g.hd,
                  g.q_stride, row0, qrows, col0, g.hd, g.vec);
}

// ---- generic kernels (any head_dim) ----------------------------------------

__device__ float warp_sum_f(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ float warp_dot(const float* a, const float* b, int hd, int lane) {
  float s = 0.0f;
  for (int c = lane; c < hd; c += 32) s = fmaf(a[c], b[c], s);
  return warp_sum_f(s);
}

// One warp per (row, head); the output row accumulates in place.
__global__ void attn_fwd_generic_kernel(const float* __restrict__ q, const float* __restrict__ k,
                                        const float* __restrict__ v, Geo g, index_t units, float* __restrict__ out,
                                        float* __restrict__ lse) {
  const index_t unit = static_cast<index_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (unit >= units) return;
  const index_t row = unit / g.heads;
  const int h = static_cast<int>(unit % g.heads), kvh = h / g.group;
  const index_t b = row / g.window;
  const int i = static_cast<int>(row % g.window);
  const float* qi = q + row * g.q_stride + static_cast<index_t>(h) * g.hd;
  float* oi = out + row * g.q_stride + static_cast<index_t>(h) * g.hd;
  for (int c = lane; c < g.hd; c += 32) oi[c] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  for (int j = 0; j <= i; ++j) {
    const index_t kv_at = (b * g.window + j) * g.kv_stride + static_cast<index_t>(kvh) * g.hd;
    const float s = warp_dot(qi, k + kv_at, g.hd, lane) * g.scale_log2;
    const float m_new = fmaxf(m, s);
    const float corr = exp2f(m - m_new), p = exp2f(s - m_new);
    l = l * corr + p;
    m = m_new;
    const float* vj = v + kv_at;
    for (int c = lane; c < g.hd; c += 32) oi[c] = fmaf(p, vj[c], oi[c] * corr);
  }
  const float inv_l = 1.0f / l;
  for (int c = lane; c < g.hd; c += 32) oi[c] *= inv_l;
  if (lane == 0) lse[unit] = (m + log2f(l)) * kLn2;
}

// attention_decode: one warp per (query row, head) of n queries at positions
// past .. past + n − 1 of one window of g.window keys (k, v [T][kv_stride]);
// the generic forward's online softmax, the output row accumulating in place.
__global__ void attn_decode_kernel(const float* __restrict__ q, const float* __restrict__ k,
                                   const float* __restrict__ v, Geo g, index_t units, int past,
                                   float* __restrict__ out, float* __restrict__ lse) {
  const index_t unit = static_cast<index_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (unit >= units) return;
  const index_t row = unit / g.heads;
  const int h = static_cast<int>(unit % g.heads), kvh = h / g.group;
  const int last = past + static_cast<int>(row);
  const float* qi = q + row * g.q_stride + static_cast<index_t>(h) * g.hd;
  float* oi = out + row * g.q_stride + static_cast<index_t>(h) * g.hd;
  for (int c = lane; c < g.hd; c += 32) oi[c] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  for (int j = 0; j <= last; ++j) {
    const index_t kv_at = static_cast<index_t>(j) * g.kv_stride + static_cast<index_t>(kvh) * g.hd;
    const float s = warp_dot(qi, k + kv_at, g.hd, lane) * g.scale_log2;
    const float m_new = fmaxf(m, s);
    const float corr = exp2f(m - m_new), p = exp2f(s - m_new);
    l = l * corr + p;
    m = m_new;
    const float* vj = v + kv_at;
    for (int c = lane; c < g.hd; c += 32) oi[c] = fmaf(p, vj[c], oi[c] * corr);
  }
  const float inv_l = 1.0f / l;
  for (int c = lane; c < g.hd; c += 32) oi[c] *= inv_l;
  if (lane == 0) lse[unit] = (m + log2f(l)) * kLn2;
}

// One warp per (row, head): dq of the row.
__global__ void attn_dq_generic_kernel(const float* __restrict__ q, const float* __restrict__ k,
                                       const float* __restrict__ v, const float* __restrict__ dout,
                                       const float* __restrict__ lse, const float* __restrict__ delta, Geo g,
                                       index_t units, float* __restrict__ dq) {
  const index_t unit = static_cast<index_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (unit >= units) return;
  const index_t row = unit / g.heads;
  const int h = static_cast<int>(unit % g.heads), kvh = h / g.group;
  const index_t b = row / g.window;
  const int i = static_cast<int>(row % g.window);
  const index_t at = row * g.q_stride + static_cast<index_t>(h) * g.hd;
  const float* qi = q + at;
  const float* doi = dout + at;
  float* dqi = dq + at;
  const float lse2 = lse[unit] * kLog2e, dl = delta[unit];
  for (int c = lane; c < g.hd; c += 32) dqi[c] = 0.0f;
  for (int j = 0; j <= i; ++j) {
    const index_t kv_at = (b * g.window + j) * g.kv_stride + static_cast<index_t>(kvh) * g.hd;
    const float* kj = k + kv_at;
    const float s = warp_dot(qi, kj, g.hd, lane);
    const float dp = warp_dot(doi, v + kv_at, g.hd, lane);
    const float p = exp2f(s * g.scale_log2 - lse2);
    const float ds = p * (dp - dl) * g.scale;
    for (int c = lane; c < g.hd; c += 32) dqi[c] = fmaf(ds, kj[c], dqi[c]);
  }
}

// One warp per (row, kv head): dk and dv of the key row, over the group's
// query heads and the queries at or after the key.
__global__ void attn_dkv_generic_kernel(const float* __restrict__ q, const float* __restrict__ k,
                                        const float* __restrict__ v, const float* __restrict__ dout,
                                        const float* __restrict__ lse, const float* __restrict__ delta, Geo g,
                                        index_t units, float* __restrict__ dk, float* __restrict__ dv) {
  const index_t unit = static_cast<index_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (unit >= units) return;
  const index_t row = unit / g.kv_heads;
  const int kvh = static_cast<int>(unit % g.kv_heads);
  const index_t b = row / g.window;
  const int j = static_cast<int>(row % g.window);
  const index_t kv_at = row * g.kv_stride + static_cast<index_t>(kvh) * g.hd;
  const float* kj = k + kv_at;
  const float* vj = v + kv_at;
  float* dkj = dk + kv_at;
  float* dvj = dv + kv_at;
  for (int c = lane; c < g.hd; c += 32) dkj[c] = dvj[c] = 0.0f;
  for (int h = kvh * g.group; h < (kvh + 1) * g.group; ++h)
    for (int i = j; i < g.window; ++i) {
      const index_t qrow = b * g.window + i;
      const index_t at = qrow * g.q_stride + static_cast<index_t>(h) * g.hd;
      const float* qi = q + at;
      const float* doi = dout + at;
      const float s = warp_dot(qi, kj, g.hd, lane);
      const float dp = warp_dot(doi, vj, g.hd, lane);
      const float p = exp2f(s * g.scale_log2 - lse[qrow * g.heads + h] * kLog2e);
      const float ds = p * (dp - delta[qrow * g.heads + h]) * g.scale;
      for (int c = lane; c < g.hd; c += 32) {
        dkj[c] = fmaf(ds, qi[c], dkj[c]);
        dvj[c] = fmaf(p, doi[c], dvj[c]);
      }
    }
}

// ---- host side -------------------------------------------------------------

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

unsigned grid_of(index_t blocks, const char* op) {
  if (blocks <= 0 || blocks > 0x7fffffff) fail("{}: {} blocks do not fit one CUDA grid", op, blocks);
  return static_cast<unsigned>(blocks);
}

template <class Kernel>
void allow_shared(Kernel kernel, std::size_t bytes) {
  BR_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

class CudaAttentionOps final : public AttentionOps<float> {
 public:
  explicit CudaAttentionOps(Context& ctx) : ctx_(ctx) {
    int optin = 0;
    BR_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, ctx_.device));
    max_shared_ = static_cast<std::size_t>(optin);
    force_generic_ = ctx_.options.attention == "generic";
    force_recompute_ = ctx_.options.attention == "recompute";
  }

 protected:
  void attention_forward_impl(CView<float> q, CView<float> k, CView<float> v, const AttentionGeometry& geo,
                              View<float> out, View<float> lse) override {
    constexpr const char* op = "attention_forward";
    const index_t n = q.dim(0);
    const Geo g = make_geo(op, geo, aligned16(q.data) && aligned16(k.data) && aligned16(v.data) &&
                                        aligned16(out.data));
    const index_t windows = n / geo.window, nqb = (geo.window + kBlockQ - 1) / kBlockQ;
    const index_t window_heads = windows * geo.heads;
    cudaStream_t st = ctx_.stream.get();
    switch (tiled_width(geo.head_dim, kind::fwd)) {
      case 64: return fwd<64>(q, k, v, g, nqb, window_heads, out, lse);
      case 128: return fwd<128>(q, k, v, g, nqb, window_heads, out, lse);
      case 256: return fwd<256>(q, k, v, g, nqb, window_heads, out, lse);
      default: break;
    }
    const index_t units = n * geo.heads;
    attn_fwd_generic_kernel<<<grid_of((units + kWarps - 1) / kWarps, op), kThreads, 0, st>>>(
        q.data, k.data, v.data, g, units, out.data, lse.data);
    BR_CUDA_LAUNCHED();
  }

  void attention_decode_impl(CView<float> q, CView<float> k, CView<float> v, const AttentionGeometry& geo,
                             View<float> out, View<float> lse) override {
    constexpr const char* op = "attention_decode";
    const index_t n = q.dim(0);
    const Geo g = make_geo(op, geo, false);
    const index_t units = n * geo.heads;
    attn_decode_kernel<<<grid_of((units + kWarps - 1) / kWarps, op), kThreads, 0, ctx_.stream.get()>>>(
        q.data, k.data, v.data, g, units, static_cast<int>(geo.window - n), out.data, lse.data);
    BR_CUDA_LAUNCHED();
  }

  void attention_backward_impl(CView<float> q, CView<float> k, CView<float> v, CView<float> out, CView<float> lse,
                               CView<float> dout, const AttentionGeometry& geo, View<float> delta, View<float> dq,
                               View<float> dk, View<float> dv) override {
    constexpr const char* op = "attention_backward";
    const index_t n = q.dim(0);
    const Geo g = make_geo(op, geo, aligned16(q.data) && aligned16(k.data) && aligned16(v.data) &&
                                        aligned16(dout.data) && aligned16(dq.data) && aligned16(dk.data) &&
                                        aligned16(dv.data));
    cudaStream_t st = ctx_.stream.get();
    const index_t units = n * geo.heads;
    attn_delta_kernel<<<grid_of((units + kWarps - 1) / kWarps, op), kThreads, 0, st>>>(dout.data, out.data, units,
                                                                                        g.hd, delta.data);
    BR_CUDA_LAUNCHED();

    const index_t windows = n / geo.window;
    const index_t nqb = (geo.window + kBlockQ - 1) / kBlockQ, nkb = (geo.window + kBwdKeys - 1) / kBwdKeys;
    switch (tiled_width(geo.head_dim, kind::bwd)) {
      case 64: return bwd<64>(q, k, v, lse, dout, g, windows, nqb, nkb, delta, dq, dk, dv);
      case 128: return bwd<128>(q, k, v, lse, dout, g, windows, nqb, nkb, delta, dq, dk, dv);
      case 256: return bwd<256>(q, k, v, lse, dout, g, windows, nqb, nkb, delta, dq, dk, dv);
      default: break;
    }
    const index_t kv_units = n * geo.kv_heads;
    attn_dkv_generic_kernel<<<grid_of((kv_units + kWarps - 1) / kWarps, op), kThreads, 0, st>>>(
        q.data, k.data, v.data, dout.data, lse.data, delta.data, g, kv_units, dk.data, dv.data);
    BR_CUDA_LAUNCHED();
    attn_dq_generic_kernel<<<grid_of((units + kWarps - 1) / kWarps, op), kThreads, 0, st>>>(
        q.data, k.data, v.data, dout.data, lse.data, delta.data, g, units, dq.data);
    BR_CUDA_LAUNCHED();
  }

 private:
  enum class kind { fwd, bwd };

  static Geo make_geo(const char* op, const AttentionGeometry& geo, bool aligned) {
    constexpr index_t int_max = 0x7fffffff;
    if (geo.window > int_max || geo.heads > int_max || geo.head_dim > int_max)
      fail("{}: window {}, heads {}, head_dim {} exceed the CUDA kernels' 32-bit sizes", op, geo.window, geo.heads,
           geo.head_dim);
    Geo g{};
    g.window = static_cast<int>(geo.window);
    g.heads = static_cast<int>(geo.heads);
    g.kv_heads = static_cast<int>(geo.kv_heads);
    g.group = static_cast<int>(geo.heads / geo.kv_heads);
    g.hd = static_cast<int>(geo.head_dim);
    g.q_stride = geo.heads * geo.head_dim;
    g.kv_stride = geo.kv_heads * geo.head_dim;
    const double root = std::sqrt(static_cast<double>(geo.head_dim));
    g.scale = static_cast<float>(1.0 / root);
    g.scale_log2 = static_cast<float>(1.4426950408889634 / root);
    g.vec = aligned && geo.head_dim % 4 == 0;
    return g;
  }

  // The padded width of the tiled kernels for this head_dim, or 0 for the
  // generic kernels (hd > 256, too little shared memory, or forced).
  int tiled_width(index_t hd, kind which) const {
    if (force_generic_ || hd > 256) return 0;
    const int width = hd <= 64 ? 64 : hd <= 128 ? 128 : 256;
    std::size_t need = 0;
    switch (width) {
      case 64: need = which == kind::fwd ? Tile<64>::fwd_bytes : std::max(Tile<64>::dkv_bytes, Tile<64>::dq_bytes); break;
      case 128:
        need = which == kind::fwd ? Tile<128>::fwd_bytes : std::max(Tile<128>::dkv_bytes, Tile<128>::dq_bytes);
        break;
      default:
        need = which == kind::fwd ? Tile<256>::fwd_bytes : std::max(Tile<256>::dkv_bytes, Tile<256>::dq_bytes);
    }
    return need <= max_shared_ ? width : 0;
  }

  template <int HDP>
  void fwd(CView<float> q, CView<float> k, CView<float> v, const Geo& g, index_t nqb, index_t window_heads,
           View<float> out, View<float> lse) {
    const std::size_t bytes = Tile<HDP>::fwd_bytes;
    allow_shared(attn_fwd_kernel<HDP>, bytes);
    attn_fwd_kernel<HDP><<<grid_of(nqb * window_heads, "attention_forward"), kThreads, bytes, ctx_.stream.get()>>>(
        q.data, k.data, v.data, g, static_cast<int>(nqb), static_cast<int>(window_heads), out.data, lse.data);
    BR_CUDA_LAUNCHED();
  }

  template <int HDP>
  void bwd(CView<float> q, CView<float> k, CView<float> v, CView<float> lse, CView<float> dout, const Geo& g,
           index_t windows, index_t nqb, index_t nkb, View<float> delta, View<float> dq, View<float> dk,
           View<float> dv) {
    cudaStream_t st = ctx_.stream.get();
    const index_t window_kv = windows * g.kv_heads, window_heads = windows * g.heads;
    // dS tiles of every (window, head): whole query blocks have 2·qb + 2 key
    // blocks, the last one those up to the window's end.
    const index_t tiles_per_head = (nqb - 1) * nqb + nkb;
    const auto ds_count = static_cast<std::size_t>(window_heads * tiles_per_head * kDsTile);
    const bool keep_ds = !force_recompute_ && ds_count * sizeof(float) <= kMaxDsScratchBytes;
    Buffer<float> ds(ctx_.memory, keep_ds ? ds_count : 0);
    const std::size_t dkv_bytes = Tile<HDP>::dkv_bytes, dq_bytes = Tile<HDP>::dq_bytes;
    allow_shared(attn_dkv_kernel<HDP>, dkv_bytes);
    attn_dkv_kernel<HDP><<<grid_of(nkb * window_kv, "attention_backward"), kThreads, dkv_bytes, st>>>(
        q.data, k.data, v.data, dout.data, lse.data, delta.data, g, static_cast<int>(window_kv), tiles_per_head,
        dk.data, dv.data, keep_ds ? ds.data() : nullptr);
    BR_CUDA_LAUNCHED();
    if (keep_ds) {
      const std::size_t bytes = sizeof(float) * 2 * (kBwdKeys * kPtStride + kBwdKeys * Tile<HDP>::ld);
      allow_shared(attn_dq_ds_kernel<HDP>, bytes);
      attn_dq_ds_kernel<HDP><<<grid_of(nqb * window_heads, "attention_backward"), kThreads, bytes, st>>>(
          k.data, ds.data(), g, static_cast<int>(nqb), static_cast<int>(window_heads), tiles_per_head, dq.data);
      BR_CUDA_LAUNCHED();
      return;
    }
    allow_shared(attn_dq_kernel<HDP>, dq_bytes);
    attn_dq_kernel<HDP><<<grid_of(nqb * window_heads, "attention_backward"), kThreads, dq_bytes, st>>>(
        q.data, k.data, v.data, dout.data, lse.data, delta.data, g, static_cast<int>(nqb),
        static_cast<int>(window_heads), dq.data);
    BR_CUDA_LAUNCHED();
  }

  Context& ctx_;
  std::size_t max_shared_ = 0;
  bool force_generic_ = false;    // CudaOptions::attention "generic"
  bool force_recompute_ = false;  // CudaOptions::attention "recompute": attn_dq, never the dS tiles
};

}  // namespace

std::unique_ptr<AttentionOps<float>> make_attention_ops(Context& ctx) {
  return std::make_unique<CudaAttentionOps>(ctx);
}

}  // namespace bitrank::cuda
