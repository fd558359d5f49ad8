// Design 2 of the GDN recurrence: the d×d state's columns split over warps,
// the state in registers (the default; see gdn.cu).
//
// Mapping: 256 threads (8 warps) per block, 32 state columns per block,
// nwg = ceil(d/32) blocks per (window, v-head). Lane = 8·c + rg: warp w
// owns the block's columns 4w..4w+3, c picks one, and the lane holds rows
// rg, rg+8, …, rg+8(R−1) of that column (R rows per lane, 8R ≥ d; rows and
// columns past d are zeros and stay zeros). So
//   column sums over rows (kv = Sᵀk̂, o = Sᵀq̂, du = dSᵀk̂): the lane's R-term
//     partial, then xor shuffles 1, 2, 4 (all 8 lanes of the column get the
//     same sum);
//   row sums over columns (dq̂ = S·dO, dk̂ = dS·u + γS_{t−1}·dkv): the four
//     columns of a warp are merged by halving the rows twice (xor 16, 8), the
//     8 warps and the cluster's nwg blocks through shared memory.
// Columns evolve independently in the forward, so it needs no block-wide
// communication except staging: per-step inputs (q̂, k̂, v, γ, β; in the
// backward also kv and dO) are loaded into shared memory kStage steps at a
// time. The forward writes o before the norm (the norm is a separate
// kernel), and when recording kv and the checkpoints.
//
// Backward: the nwg blocks of a (window, v-head) form a thread-block
// cluster. Per segment, last to first: replay from the checkpoint with the
// recorded kv into the tape's replay slots (the segment's last state stays
// in registers), then the reverse sweep with dS in registers, carried into
// the previous segment, in chunks of kBwdStage steps. Within a chunk the
// warps run without barriers: per step each warp leaves its row partials
// of dq̂, dk̂ and its dβ, dγ partials in shared memory (a slot per step of
// the chunk). After the chunk one cluster barrier, then block r of the
// cluster sums rows [r·⌈8R/nwg⌉, (r+1)·⌈8R/nwg⌉) over the 8 warps of every
// block, for every step of the chunk (four threads per output, one per
// source block, then two shuffles — a fixed order, so the results are
// deterministic), and block 0 also dβ and dγ into d_b and d_a; a second
// cluster barrier before the slots are reused.
//
// Resources at d = 128 (R = 16): forward 114 registers, 23 KB of shared
// memory, 2 blocks per SM; backward capped at 128 registers (the state, dS,
// S_{t−1} and a row-partial array, 16 each; ptxas spills 4 bytes) and
// 77 KB of dynamic shared memory (66 KB of it the chunk's partials), so
// 2 blocks per SM — measured on an H200 about 1.4× faster than 1 block per
// SM at 191 registers with a cluster barrier every step.
#include <cooperative_groups.h>

#include "cuda/check.hpp"
#include "cuda/gdn.cuh"

namespace cg = cooperative_groups;

namespace bitrank::cuda::gdn {
namespace {

constexpr unsigned kFull = 0xffffffffu;
constexpr int kWarps = kRecThreads / 32;
constexpr int kCols = 4 * kWarps;  // state columns per block

__device__ __forceinline__ float sum_column(float x) {  // over the 8 lanes of a column
  x += __shfl_xor_sync(kFull, x, 1);
  x += __shfl_xor_sync(kFull, x, 2);
  x += __shfl_xor_sync(kFull, x, 4);
  return x;
}

__device__ __forceinline__ float sum_warp(float x) {
  for (int m = 1; m < 32; m <<= 1) x += __shfl_xor_sync(kFull, x, m);
  return x;
}

// Per-step inputs of up to S steps, padded to 8R rows and the block's 32 columns.
template <int R, int S>
struct Staged {
  float q[S][8 * R], k[S][8 * R];
  float v[S][kCols], kv[S][kCols], dO[S][kCols];
  float gam[S], bet[S];
};

// Steps per chunk of the backward: its row partials are kept for a whole
// chunk, so the cluster meets once per chunk rather than once per step.
constexpr int kBwdStage = 8;

// The backward's shared memory: the staged chunk, and per step of it each
// warp's partials (dq̂ rows, dk̂ rows, dβ, dγ).
template <int R>
struct BwdShared {
  static constexpr int kPartWords = 2 * 8 * R + 2;
  Staged<R, kBwdStage> st;
  float part[kBwdStage][kWarps][kPartWords];
};

// Loads steps t0..t0+nst−1 of v-head h (k-head kh), column block cb; kv and
// dO only for the backward. Callers put a __syncthreads() on both sides.
template <int R, int S>
__device__ void stage_steps(Staged<R, S>& st, const RecArgs& A, index_t t0, int nst, int kh, int h, int cb,
                            bool backward) {
  constexpr int DP = 8 * R;
  const Dims& g = A.g;
  for (int e = threadIdx.x; e < nst * DP; e += kRecThreads) {
    const int j = e / DP, i = e % DP;
    const index_t r = ((t0 + j) * g.hk + kh) * g.d + i;
    const bool ok = i < g.d;
    st.q[j][i] = ok ? A.tp.q_hat[r] : 0.0f;
    st.k[j][i] = ok ? A.tp.k_hat[r] : 0.0f;
  }
  for (int e = threadIdx.x; e < nst * kCols; e += kRecThreads) {
    const int j = e / kCols, cc = e % kCols, col = cb * kCols + cc;
    const bool ok = col < g.d;
    const index_t t = t0 + j, vcol = t * g.C + g.v_off() + h * g.d + col;
    st.v[j][cc] = ok ? A.tp.conv_out[vcol] : 0.0f;
    if (backward) {
      st.kv[j][cc] = ok ? A.tp.kv[(t * g.hv + h) * g.d + col] : 0.0f;
      st.dO[j][cc] = ok ? A.d_qkv[vcol] : 0.0f;
    }
  }
  for (int j = threadIdx.x; j < nst; j += kRecThreads) {
    st.gam[j] = A.tp.decay[(t0 + j) * g.hv + h];
    st.bet[j] = A.tp.beta[(t0 + j) * g.hv + h];
  }
}

// Sums x (rows rg + 8e of the lane's column) over the warp's 4 columns and
// stores row sums to dst[row]: halve the rows across xor 16, then xor 8,
// so each row is summed by one lane.
template <int R>
__device__ __forceinline__ void merge_columns(const float (&x)[R], int c, int rg, float* dst) {
  const bool c0 = (c & 1) != 0, c1 = (c & 2) != 0;
  if constexpr (R >= 4) {
    constexpr int H = R / 2, Q = R / 4;
    float y[H];
#pragma unroll
    for (int e = 0; e < H; ++e) {
      const float keep = c1 ? x[e + H] : x[e], send = c1 ? x[e] : x[e + H];
      y[e] = keep + __shfl_xor_sync(kFull, send, 16);  // row e + c1·H
    }
#pragma unroll
    for (int e = 0; e < Q; ++e) {
      const float keep = c0 ? y[e + Q] : y[e], send = c0 ? y[e] : y[e + Q];
      const float z = keep + __shfl_xor_sync(kFull, send, 8);  // row e + c0·Q + c1·H
      dst[rg + 8 * (e + (c0 ? Q : 0) + (c1 ? H : 0))] = z;
    }
  } else if constexpr (R == 2) {
    const float y = (c1 ? x[1] : x[0]) + __shfl_xor_sync(kFull, c1 ? x[0] : x[1], 16);  // row c1
    const float z = y + __shfl_xor_sync(kFull, y, 8);
    if (!c0) dst[rg + (c1 ? 8 : 0)] = z;
  } else {
    const float y = x[0] + __shfl_xor_sync(kFull, x[0], 16);
    const float z = y + __shfl_xor_sync(kFull, y, 8);
    if (c == 0) dst[rg] = z;
  }
}

template <int R>
__global__ void __launch_bounds__(kRecThreads, 2) rec2_fwd_kernel(const RecArgs A, int nwg) {
  __shared__ Staged<R, kStage> st;
  const Dims& g = A.g;
  const index_t job = blockIdx.x / nwg;  // w·Hv + h
  const int cb = static_cast<int>(blockIdx.x % nwg);
  const index_t w = job / g.hv;
  const int h = static_cast<int>(job % g.hv), kh = h / g.group;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, c = lane >> 3, rg = lane & 7;
  const int cw = warp * 4 + c, col = cb * kCols + cw;
  const bool col_ok = col < g.d;
  const index_t dd = g.dd();
  float* ckpt = A.tp.ckpt + job * (g.nseg - 1) * dd;

  float s[R];
#pragma unroll
  for (int e = 0; e < R; ++e) s[e] = 0.0f;

  for (int p0 = 0; p0 < g.T; p0 += kStage) {
    const int nst = min(kStage, g.T - p0);
    const index_t t0 = w * g.T + p0;
    __syncthreads();
    stage_steps(st, A, t0, nst, kh, h, cb, false);
    __syncthreads();
    for (int j = 0; j < nst; ++j) {
      const float gam = st.gam[j], bet = st.bet[j];
      // S ← γS; kv = Sᵀk̂.
      float a0 = 0.0f, a1 = 0.0f;
#pragma unroll
      for (int e = 0; e < R; ++e) {
        s[e] = __fmul_rn(s[e], gam);
        if (e & 1)
          a1 = fmaf(s[e], st.k[j][rg + 8 * e], a1);
        else
          a0 = fmaf(s[e], st.k[j][rg + 8 * e], a0);
      }
      const float kv = sum_column(a0 + a1);
      const float u = bet * (st.v[j][cw] - kv);
      // S += k̂uᵀ; o = Sᵀq̂.
      float o0 = 0.0f, o1 = 0.0f;
#pragma unroll
      for (int e = 0; e < R; ++e) {
        s[e] = __fmaf_rn(st.k[j][rg + 8 * e], u, s[e]);
        if (e & 1)
          o1 = fmaf(s[e], st.q[j][rg + 8 * e], o1);
        else
          o0 = fmaf(s[e], st.q[j][rg + 8 * e], o0);
      }
      const float o = sum_column(o0 + o1);
      const index_t th = (t0 + j) * g.hv + h;
      if (rg == 0 && col_ok) {
        A.tp.o_pre[th * g.d + col] = o;
        if (A.record) A.tp.kv[th * g.d + col] = kv;
      }
      const int steps = p0 + j + 1;
      if (A.record && col_ok && steps % g.cs == 0 && steps < g.T) {
        float* dst = ckpt + static_cast<index_t>(steps / g.cs - 1) * dd + col;
#pragma unroll
        for (int e = 0; e < R; ++e)
          if (rg + 8 * e < g.d) dst[static_cast<index_t>(rg + 8 * e) * g.d] = s[e];
      }
    }
  }
}

template <int R>
__global__ void __launch_bounds__(kRecThreads, 2) rec2_bwd_kernel(const RecArgs A, int nwg) {
  constexpr int DP = 8 * R;
  constexpr int PW = BwdShared<R>::kPartWords;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  BwdShared<R>& sh = *reinterpret_cast<BwdShared<R>*>(smem_raw);
  Staged<R, kBwdStage>& st = sh.st;
  cg::cluster_group cluster = cg::this_cluster();

  const Dims& g = A.g;
  const index_t job = blockIdx.x / nwg;
  const int cb = static_cast<int>(cluster.block_rank());  // = blockIdx.x % nwg
  const index_t w = job / g.hv;
  const int h = static_cast<int>(job % g.hv), kh = h / g.group;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, c = lane >> 3, rg = lane & 7;
  const int cw = warp * 4 + c, col = cb * kCols + cw;
  const bool col_ok = col < g.d;
  const index_t dd = g.dd();
  const float ea = expf(A.a_log[h]);
  float* slots = A.tp.replay + job * g.slots * dd;
  const float* ckpt = A.tp.ckpt + job * (g.nseg - 1) * dd;
  const int rpr = (DP + nwg - 1) / nwg;  // output rows per block of the cluster
  const int nps = 2 * rpr + 2;           // outputs per step of a block (the scalars on block 0 only)

  // The lane's elements of a d×d state at `base` (zeros past d).
  auto load_state = [&](const float* base, float (&x)[R]) {
#pragma unroll
    for (int e = 0; e < R; ++e) {
      const int row = rg + 8 * e;
      x[e] = (base && col_ok && row < g.d) ? base[static_cast<index_t>(row) * g.d + col] : 0.0f;
    }
  };

  float s[R], ds[R];
#pragma unroll
  for (int e = 0; e < R; ++e) ds[e] = 0.0f;

  for (int seg = g.nseg - 1; seg >= 0; --seg) {
    const int p0 = seg * g.cs, p1 = min(p0 + g.cs, g.T);
    const float* start = seg > 0 ? ckpt + static_cast<index_t>(seg - 1) * dd : nullptr;

    // Replay: S after step p into slot p − p0, the forward's roundings with its kv.
    load_state(start, s);
    int staged = -1;
    for (int c0 = p0; c0 < p1; c0 += kBwdStage) {
      const int nst = min(kBwdStage, p1 - c0);
      __syncthreads();
      stage_steps(st, A, w * g.T + c0, nst, kh, h, cb, true);
      __syncthreads();
      staged = c0;
      for (int j = 0; j < nst; ++j) {
        const int p = c0 + j;
        const float gam = st.gam[j], u = st.bet[j] * (st.v[j][cw] - st.kv[j][cw]);
#pragma unroll
        for (int e = 0; e < R; ++e) {
          s[e] = __fmul_rn(s[e], gam);
          s[e] = __fmaf_rn(st.k[j][rg + 8 * e], u, s[e]);
        }
        if (p + 1 < p1 && col_ok) {  // the segment's last state stays in s
          float* dst = slots + static_cast<index_t>(p - p0) * dd + col;
#pragma unroll
          for (int e = 0; e < R; ++e)
            if (rg + 8 * e < g.d) dst[static_cast<index_t>(rg + 8 * e) * g.d] = s[e];
        }
      }
    }

    // Reverse sweep, chunks from the last (already staged by the replay).
    const int nchunks = (p1 - p0 + kBwdStage - 1) / kBwdStage;
    for (int ci = nchunks - 1; ci >= 0; --ci) {
      const int c0 = p0 + ci * kBwdStage, nst = min(kBwdStage, p1 - c0);
      if (c0 != staged) {
        __syncthreads();
        stage_steps(st, A, w * g.T + c0, nst, kh, h, cb, true);
        __syncthreads();
        staged = c0;
      }
      // The chunk's steps: each warp on its own, partials into sh.part[j].
      for (int j = nst - 1; j >= 0; --j) {
        const int p = c0 + j;
        const index_t t = w * g.T + p;
        const float gam = st.gam[j], bet = st.bet[j];
        const float dOj = st.dO[j][cw];
        const float diff = st.v[j][cw] - st.kv[j][cw];
        const float u = bet * diff;
        float* pw = &sh.part[j][warp][0];

        // S_{t−1}: the previous slot, the segment's checkpoint, or zero
        // (loaded first, used after the dq̂ sums).
        float sp[R];
        load_state(p > p0 ? slots + static_cast<index_t>(p - 1 - p0) * dd : start, sp);

        // o = S_tᵀq̂: dS += q̂ dOᵀ, dq̂ = S_t dO.
        float x[R];
#pragma unroll
        for (int e = 0; e < R; ++e) {
          ds[e] = fmaf(st.q[j][rg + 8 * e], dOj, ds[e]);
          x[e] = s[e] * dOj;
        }
        merge_columns<R>(x, c, rg, pw);

        // S_t = γS_{t−1} + k̂uᵀ, u = β(v − kv): du = dSᵀk̂, dkv = −β du,
        // dk̂ = dS·u + γS_{t−1}·dkv.
        float a0 = 0.0f, a1 = 0.0f;
#pragma unroll
        for (int e = 0; e < R; ++e) {
          if (e & 1)
            a1 = fmaf(ds[e], st.k[j][rg + 8 * e], a1);
          else
            a0 = fmaf(ds[e], st.k[j][rg + 8 * e], a0);
        }
        const float du = sum_column(a0 + a1);
        const float dkv = -(bet * du);
#pragma unroll
        for (int e = 0; e < R; ++e) x[e] = fmaf(ds[e], u, (gam * sp[e]) * dkv);
        merge_columns<R>(x, c, rg, pw + DP);

        // dS_pre = dS + k̂ dkvᵀ: dγ = ⟨dS_pre, S_{t−1}⟩, dS_{t−1} = γ dS_pre.
        float g0 = 0.0f, g1 = 0.0f;
#pragma unroll
        for (int e = 0; e < R; ++e) {
          const float pre = fmaf(st.k[j][rg + 8 * e], dkv, ds[e]);
          if (e & 1)
            g1 = fmaf(pre, sp[e], g1);
          else
            g0 = fmaf(pre, sp[e], g0);
          ds[e] = gam * pre;
        }
        const float dg = sum_warp(g0 + g1);
        const float db = sum_warp(rg == 0 ? du * diff : 0.0f);  // dβ = Σ_j du_j (v − kv)_j
        if (lane == 0) {
          pw[2 * DP] = db;
          pw[2 * DP + 1] = dg;
        }
        if (rg == 0 && col_ok) A.d_qkv[t * g.C + g.v_off() + h * g.d + col] = bet * du;  // dv over dO
#pragma unroll
        for (int e = 0; e < R; ++e) s[e] = sp[e];
      }

      // The cluster's partials of the chunk: block cb sums rows
      // [cb·rpr, (cb+1)·rpr) of dq̂ and dk̂ of every step, block 0 also dβ, dγ.
      cluster.sync();
      for (int base = 0; base < nst * nps; base += kRecThreads / 4) {
        const int o = base + static_cast<int>(threadIdx.x >> 2), src = static_cast<int>(threadIdx.x & 3);
        const int j = o / nps, k = o % nps;
        int idx = -1;  // word in a warp's partials
        if (o < nst * nps) {
          if (k < rpr) {
            if (cb * rpr + k < g.d) idx = cb * rpr + k;
          } else if (k < 2 * rpr) {
            if (cb * rpr + k - rpr < g.d) idx = DP + cb * rpr + k - rpr;
          } else if (cb == 0) {
            idx = 2 * DP + k - 2 * rpr;
          }
        }
        float v = 0.0f;
        if (idx >= 0 && src < nwg) {
          const float* rp = cluster.map_shared_rank(&sh.part[j][0][0], static_cast<unsigned>(src));
#pragma unroll
          for (int q = 0; q < kWarps; ++q) v += rp[q * PW + idx];
        }
        v += __shfl_xor_sync(kFull, v, 1);
        v += __shfl_xor_sync(kFull, v, 2);
        if (src == 0 && idx >= 0) {
          const index_t th = (w * g.T + c0 + j) * g.hv + h;
          if (idx < DP) {
            A.tp.dq_hat[th * g.d + idx] = v;
          } else if (idx < 2 * DP) {
            A.tp.dk_hat[th * g.d + (idx - DP)] = v;
          } else {
            const float gam = st.gam[j], bet = st.bet[j];
            if (idx == 2 * DP)
              A.d_b[th] = v * bet * (1.0f - bet);
            else
              A.d_a[th] = v * gam * (-ea) * sigmoidf_(A.tp.gate_in[th]);
          }
        }
      }
      cluster.sync();  // every block's partials are read before they are overwritten (or the block leaves)
    }
  }
}

int column_blocks(const Dims& g) { return (g.d + kCols - 1) / kCols; }

template <int R>
void launch_forward(const RecArgs& a, cudaStream_t stream) {
  const int nwg = column_blocks(a.g);
  const auto blocks = static_cast<unsigned>(a.g.nb * a.g.hv * nwg);
  rec2_fwd_kernel<R><<<blocks, kRecThreads, 0, stream>>>(a, nwg);
  BR_CUDA_LAUNCHED();
}

template <int R>
void launch_backward(const RecArgs& a, cudaStream_t stream) {
  const int nwg = column_blocks(a.g);
  const std::size_t smem = sizeof(BwdShared<R>);
  BR_CUDA_CHECK(cudaFuncSetAttribute(rec2_bwd_kernel<R>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(smem)));
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(a.g.nb * a.g.hv * nwg));
  cfg.blockDim = dim3(kRecThreads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = static_cast<unsigned>(nwg);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  BR_CUDA_CHECK(cudaLaunchKernelEx(&cfg, rec2_bwd_kernel<R>, a, nwg));
  BR_CUDA_LAUNCHED();
}

// Rows per lane: the smallest of 1, 2, 4, 8, 16 with 8R ≥ d.
template <template <int> class F>
void by_rows(const RecArgs& a, cudaStream_t stream) {
  if (a.g.d <= 8)
    F<1>::run(a, stream);
  else if (a.g.d <= 16)
    F<2>::run(a, stream);
  else if (a.g.d <= 32)
    F<4>::run(a, stream);
  else if (a.g.d <= 64)
    F<8>::run(a, stream);
  else
    F<16>::run(a, stream);
}

template <int R>
struct Forward {
  static void run(const RecArgs& a, cudaStream_t s) { launch_forward<R>(a, s); }
};
template <int R>
struct Backward {
  static void run(const RecArgs& a, cudaStream_t s) { launch_backward<R>(a, s); }
};

}  // namespace

void rec2_forward(const RecArgs& a, cudaStream_t stream) { by_rows<Forward>(a, stream); }
void rec2_backward(const RecArgs& a, cudaStream_t stream) { by_rows<Backward>(a, stream); }

}  // namespace bitrank::cuda::gdn
