// Design 1 of the GDN recurrence: one block of 256 threads per (window,
// v-head), the state in shared memory (CudaOptions::gdn_design 1; see gdn.cu).
//
// With G = 256 / d row groups, thread (gi, j) = (tid / d, tid % d) owns the
// elements (i, j), i ≡ gi mod G, of column j ("column map"); sums over rows
// leave G partials per column in shared memory, summed by thread j in
// ascending gi. Sums over columns use the "row map": thread (gi, i) sums
// row i over columns ≡ gi mod G, reading the state transposed — its rows
// are padded to an odd stride so both maps are free of bank conflicts.
//
// Forward: S [d][d] in shared memory (64 KiB at d = 128); per step the
// inputs are staged, then decay + kv partials, u, update + o partials, o:
// four barriers. When recording, kv and the checkpoints as in design 2.
//
// Backward: dS and one state buffer [d][d|1] in shared memory (about
// 129 KiB at d = 128, plus kStage staged steps: one block per SM). Per
// segment, last to first: replay elementwise in the column map from the
// checkpoint through the tape's replay slots (each thread rereads only its
// own writes, so no barrier); then the reverse sweep, per step:
//   A (columns) S_t → smem, dS += q̂ dOᵀ, du partials
//   B (thread j) du, u, dkv, dβ terms, dv over dO
//   C (rows)    dq̂ = S_t dO and dS·u partials
//   D (columns) S_{t−1} → smem, dS_pre = dS + k̂ dkvᵀ, dγ partials, dS = γ dS_pre
//   E (rows)    dk̂ partials += γ S_{t−1}·dkv
//   F           dq̂, dk̂ (thread i), dβ, dγ → d_b, d_a (last warp)
// with a barrier after each of A–E.
#include "cuda/check.hpp"
#include "cuda/gdn.cuh"

namespace bitrank::cuda::gdn {
namespace {

constexpr unsigned kFull = 0xffffffffu;
constexpr int kWarps = kRecThreads / 32;

__device__ __forceinline__ float sum_warp(float x) {
  for (int m = 1; m < 32; m <<= 1) x += __shfl_xor_sync(kFull, x, m);
  return x;
}

int row_groups(int d) { return kRecThreads / d; }
int padded_stride(int d) { return d % 2 == 0 ? d + 1 : d; }

std::size_t forward_smem_floats(int d) {
  const auto dd = static_cast<std::size_t>(d);
  return dd * dd + 4 * dd + static_cast<std::size_t>(row_groups(d)) * dd;
}

std::size_t backward_smem_floats(int d) {
  const auto dd = static_cast<std::size_t>(d), G = static_cast<std::size_t>(row_groups(d));
  return 2 * dd * static_cast<std::size_t>(padded_stride(d))  // dS, a state
         + 5 * kStage * dd + 2 * kStage                         // q̂, k̂, v, kv, dO; γ, β
         + 3 * dd                                               // u, dkv, dβ terms
         + 3 * G * dd + kRecThreads;                            // du, dq̂, dk̂ partials; dγ partials
}

__global__ void __launch_bounds__(kRecThreads) rec1_fwd_kernel(const RecArgs A) {
  extern __shared__ float smem[];
  const Dims& g = A.g;
  const int d = g.d, G = kRecThreads / d;
  float* S = smem;          // [d][d]
  float* qv = S + d * d;    // q̂
  float* kvec = qv + d;     // k̂
  float* vv = kvec + d;     // v
  float* uu = vv + d;       // u
  float* red = uu + d;      // [G][d]
  const index_t job = blockIdx.x, w = job / g.hv;
  const int h = static_cast<int>(job % g.hv), kh = h / g.group;
  const int tid = threadIdx.x, gi = tid / d, j = tid % d;
  const bool active = gi < G;
  const index_t dd = g.dd();
  float* ckpt = A.tp.ckpt + job * (g.nseg - 1) * dd;

  for (int e = tid; e < d * d; e += kRecThreads) S[e] = 0.0f;
  for (int p = 0; p < g.T; ++p) {
    const index_t t = w * g.T + p, th = t * g.hv + h;
    if (tid < d) {
      qv[tid] = A.tp.q_hat[(t * g.hk + kh) * d + tid];
      kvec[tid] = A.tp.k_hat[(t * g.hk + kh) * d + tid];
      vv[tid] = A.tp.conv_out[t * g.C + g.v_off() + h * d + tid];
    }
    __syncthreads();
    const float gam = A.tp.decay[th], bet = A.tp.beta[th];
    // S ← γS; kv partials.
    if (active) {
      float acc = 0.0f;
      for (int i = gi; i < d; i += G) {
        const float s = __fmul_rn(S[i * d + j], gam);
        S[i * d + j] = s;
        acc = fmaf(s, kvec[i], acc);
      }
      red[gi * d + j] = acc;
    }
    __syncthreads();
    if (tid < d) {
      float kv = 0.0f;
      for (int q = 0; q < G; ++q) kv += red[q * d + tid];
      uu[tid] = bet * (vv[tid] - kv);
      if (A.record) A.tp.kv[th * d + tid] = kv;
    }
    __syncthreads();
    // S += k̂uᵀ; o partials; the checkpoint after this step.
    const int steps = p + 1;
    const bool keep = A.record && steps % g.cs == 0 && steps < g.T;
    float* dst = keep ? ckpt + static_cast<index_t>(steps / g.cs - 1) * dd : nullptr;
    if (active) {
      float acc = 0.0f;
      const float uj = uu[j];
      for (int i = gi; i < d; i += G) {
        const float s = __fmaf_rn(kvec[i], uj, S[i * d + j]);
        S[i * d + j] = s;
        acc = fmaf(s, qv[i], acc);
        if (keep) dst[static_cast<index_t>(i) * d + j] = s;
      }
      red[gi * d + j] = acc;
    }
    __syncthreads();
    if (tid < d) {
      float o = 0.0f;
      for (int q = 0; q < G; ++q) o += red[q * d + tid];
      A.tp.o_pre[th * d + tid] = o;
    }
  }
}

__global__ void __launch_bounds__(kRecThreads) rec1_bwd_kernel(const RecArgs A) {
  extern __shared__ float smem[];
  const Dims& g = A.g;
  const int d = g.d, G = kRecThreads / d, LD = d % 2 == 0 ? d + 1 : d;
  float* dS = smem;                 // [d][LD]
  float* Sb = dS + d * LD;          // [d][LD]: S_t, then S_{t−1}
  float* q_s = Sb + d * LD;         // [kStage][d]
  float* k_s = q_s + kStage * d;
  float* v_s = k_s + kStage * d;
  float* kv_s = v_s + kStage * d;
  float* do_s = kv_s + kStage * d;
  float* gam_s = do_s + kStage * d;  // [kStage]
  float* bet_s = gam_s + kStage;
  float* uu = bet_s + kStage;       // [d]
  float* dkv = uu + d;
  float* dbt = dkv + d;             // du·(v − kv)
  float* red_du = dbt + d;          // [G][d]
  float* red_dq = red_du + G * d;
  float* red_dk = red_dq + G * d;
  float* red_dg = red_dk + G * d;   // [kRecThreads]

  const index_t job = blockIdx.x, w = job / g.hv;
  const int h = static_cast<int>(job % g.hv), kh = h / g.group;
  const int tid = threadIdx.x, gi = tid / d, j = tid % d, lane = tid & 31, warp = tid >> 5;
  const bool active = gi < G;
  const index_t dd = g.dd();
  const float ea = expf(A.a_log[h]);
  float* slots = A.tp.replay + job * g.slots * dd;
  const float* ckpt = A.tp.ckpt + job * (g.nseg - 1) * dd;

  auto stage = [&](int c0, int nst) {
    for (int e = tid; e < nst * d; e += kRecThreads) {
      const int jj = e / d, i = e % d;
      const index_t t = w * g.T + c0 + jj, vcol = t * g.C + g.v_off() + h * d + i;
      q_s[e] = A.tp.q_hat[(t * g.hk + kh) * d + i];
      k_s[e] = A.tp.k_hat[(t * g.hk + kh) * d + i];
      v_s[e] = A.tp.conv_out[vcol];
      kv_s[e] = A.tp.kv[(t * g.hv + h) * d + i];
      do_s[e] = A.d_qkv[vcol];
    }
    for (int jj = tid; jj < nst; jj += kRecThreads) {
      const index_t th = (w * g.T + c0 + jj) * g.hv + h;
      gam_s[jj] = A.tp.decay[th];
      bet_s[jj] = A.tp.beta[th];
    }
  };

  for (int e = tid; e < d * LD; e += kRecThreads) dS[e] = 0.0f;
  for (int seg = g.nseg - 1; seg >= 0; --seg) {
    const int p0 = seg * g.cs, p1 = min(p0 + g.cs, g.T);
    const float* start = seg > 0 ? ckpt + static_cast<index_t>(seg - 1) * dd : nullptr;
    auto state_before = [&](int p) -> const float* {  // S_{p−1}
      return p > p0 ? slots + static_cast<index_t>(p - 1 - p0) * dd : start;
    };

    // Replay into slots 0..p1−p0−1, elementwise.
    int staged = -1;
    for (int c0 = p0; c0 < p1; c0 += kStage) {
      const int nst = min(kStage, p1 - c0);
      __syncthreads();
      stage(c0, nst);
      __syncthreads();
      staged = c0;
      if (!active) continue;
      for (int jj = 0; jj < nst; ++jj) {
        const int p = c0 + jj;
        const float gam = gam_s[jj], u = bet_s[jj] * (v_s[jj * d + j] - kv_s[jj * d + j]);
        const float* prev = state_before(p);
        float* cur = slots + static_cast<index_t>(p - p0) * dd;
        for (int i = gi; i < d; i += G) {
          float s = prev ? prev[static_cast<index_t>(i) * d + j] : 0.0f;
          s = __fmul_rn(s, gam);
          s = __fmaf_rn(k_s[jj * d + i], u, s);
          cur[static_cast<index_t>(i) * d + j] = s;
        }
      }
    }

    const int nchunks = (p1 - p0 + kStage - 1) / kStage;
    for (int ci = nchunks - 1; ci >= 0; --ci) {
      const int c0 = p0 + ci * kStage, nst = min(kStage, p1 - c0);
      if (c0 != staged) {
        __syncthreads();
        stage(c0, nst);
        __syncthreads();
        staged = c0;
      }
      for (int jj = nst - 1; jj >= 0; --jj) {
        const int p = c0 + jj;
        const index_t t = w * g.T + p, th = t * g.hv + h;
        const float gam = gam_s[jj], bet = bet_s[jj];
        const float* qj = q_s + jj * d;
        const float* kj = k_s + jj * d;
        const float* dOj = do_s + jj * d;

        // A: S_t into smem; dS += q̂ dOᵀ; du partials.
        if (active) {
          const float* cur = slots + static_cast<index_t>(p - p0) * dd;
          const float dOc = dOj[j];
          float acc = 0.0f;
          for (int i = gi; i < d; i += G) {
            Sb[i * LD + j] = cur[static_cast<index_t>(i) * d + j];
            const float e = fmaf(qj[i], dOc, dS[i * LD + j]);
            dS[i * LD + j] = e;
            acc = fmaf(e, kj[i], acc);
          }
          red_du[gi * d + j] = acc;
        }
        __syncthreads();
        // B: per column.
        if (tid < d) {
          float du = 0.0f;
          for (int q = 0; q < G; ++q) du += red_du[q * d + tid];
          const float diff = v_s[jj * d + tid] - kv_s[jj * d + tid];
          uu[tid] = bet * diff;
          dkv[tid] = -(bet * du);
          dbt[tid] = du * diff;
          A.d_qkv[t * g.C + g.v_off() + h * d + tid] = bet * du;  // dv over dO
        }
        __syncthreads();
        // C: row map: dq̂ = S_t dO, dk̂ ← dS·u.
        if (active) {
          const int i = j;
          float a1 = 0.0f, a2 = 0.0f;
          for (int cc = gi; cc < d; cc += G) {
            a1 = fmaf(Sb[i * LD + cc], dOj[cc], a1);
            a2 = fmaf(dS[i * LD + cc], uu[cc], a2);
          }
          red_dq[gi * d + i] = a1;
          red_dk[gi * d + i] = a2;
        }
        __syncthreads();
        // D: S_{t−1} into smem; dS_pre = dS + k̂ dkvᵀ; dγ partials; dS = γ dS_pre.
        float dg = 0.0f;
        if (active) {
          const float* prev = state_before(p);
          const float dkc = dkv[j];
          for (int i = gi; i < d; i += G) {
            const float sp = prev ? prev[static_cast<index_t>(i) * d + j] : 0.0f;
            Sb[i * LD + j] = sp;
            const float e = fmaf(kj[i], dkc, dS[i * LD + j]);
            dg = fmaf(e, sp, dg);
            dS[i * LD + j] = gam * e;
          }
        }
        red_dg[tid] = dg;
        __syncthreads();
        // E: row map: dk̂ += γ S_{t−1}·dkv.
        if (active) {
          const int i = j;
          float a3 = 0.0f;
          for (int cc = gi; cc < d; cc += G) a3 = fmaf(Sb[i * LD + cc], dkv[cc], a3);
          red_dk[gi * d + i] = fmaf(gam, a3, red_dk[gi * d + i]);
        }
        __syncthreads();
        // F: the sums (rows on threads < d ≤ 128, the scalars on the last warp).
        if (tid < d) {
          float dq = 0.0f, dk = 0.0f;
          for (int q = 0; q < G; ++q) {
            dq += red_dq[q * d + tid];
            dk += red_dk[q * d + tid];
          }
          A.tp.dq_hat[th * d + tid] = dq;
          A.tp.dk_hat[th * d + tid] = dk;
        }
        if (warp == kWarps - 1) {
          float db = 0.0f, dgs = 0.0f;
          for (int q = lane; q < d; q += 32) db += dbt[q];
          for (int q = lane; q < kRecThreads; q += 32) dgs += red_dg[q];
          db = sum_warp(db);
          dgs = sum_warp(dgs);
          if (lane == 0) {
            A.d_b[th] = db * bet * (1.0f - bet);
            A.d_a[th] = dgs * gam * (-ea) * sigmoidf_(A.tp.gate_in[th]);
          }
        }
      }
    }
  }
}

}  // namespace

void rec1_forward(const RecArgs& a, cudaStream_t stream) {
  const std::size_t bytes = forward_smem_floats(a.g.d) * sizeof(float);
  BR_CUDA_CHECK(cudaFuncSetAttribute(rec1_fwd_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(bytes)));
  rec1_fwd_kernel<<<static_cast<unsigned>(a.g.nb * a.g.hv), kRecThreads, bytes, stream>>>(a);
  BR_CUDA_LAUNCHED();
}

void rec1_backward(const RecArgs& a, cudaStream_t stream) {
  const std::size_t bytes = backward_smem_floats(a.g.d) * sizeof(float);
  BR_CUDA_CHECK(cudaFuncSetAttribute(rec1_bwd_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(bytes)));
  rec1_bwd_kernel<<<static_cast<unsigned>(a.g.nb * a.g.hv), kRecThreads, bytes, stream>>>(a);
  BR_CUDA_LAUNCHED();
}

}  // namespace bitrank::cuda::gdn
