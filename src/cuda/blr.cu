// CUDA backend of the BLR layer (contract: include/bitrank/ops/blr.hpp).
//
// Every GEMM is the cuBLASLt f16 GEMM of gemm_kernels.hpp (f16 operands,
// f32 accumulation) on operands staged exactly as the CPU backend stages
// them. The outer scales sit in the GEMM planes, expanded from the bitmaps
// on every call as ±f16(h_j/s_h) and ±f16(g_i/s_g) (blr.hpp's Numerics;
// s_h, s_g powers of two computed on the device and given to the GEMMs as
// device alphas), so y and dx come straight out of their GEMMs. Per call:
//
//   forward   stage x → per path: GEMM a = x·(g⊙S_V)·s_g → stage a⊙ℓ
//             → GEMM y (=, +=) (a⊙ℓ)·(h⊙S_U)ᵀ·s_h  (β = 1 across paths)
//   backward  stage dy·gs, and x unless the forward's f16(x) is given
//             (BlrSaved::xs) → per path:
//             GEMM b = (dy·gs)·(h⊙S_U)·s_h/gs
//             stage b⊙ℓ·gs with Σ a⊙b → dℓ;  GEMM dx (=, +=) (b⊙ℓ·gs)·(g⊙S_V)ᵀ·s_g/gs
//             stage a⊙ℓ → GEMM E_U = (dy·gs)ᵀ·(a⊙ℓ) / gs;   dh += Σ_k S_U⊙E_U
//             GEMM E_V = xᵀ·(b⊙ℓ·gs) / gs;                    dg += Σ_k S_V⊙E_V
//             (the token-sum GEMMs read the row-major staged operands as
//             they are: the same f16 values a transposed staging would hold)
//   sign grad G_U = h⊙E_U, G_V = g⊙E_V: blr_backward_sign_grad hands the
//             backward's E_U, E_V out scaled; blr_sign_grad forms them from
//             a and b without touching dh, dg
//
// Neither c = (a⊙ℓ)·S_Uᵀ nor dx' = (b⊙ℓ)·S_Vᵀ is ever written, and dh, dg
// come from the token sums with the signs read from the bitmaps.
//
// Elementwise passes move 4 columns per thread (16-byte loads) wherever
// widths and alignment allow, over grids sized to fill the device. dh and
// dg are row sums of E_U, E_V over the rank (one warp per row, f64 lanes
// added in a fixed order). dℓ's column sums are deterministic: blocks of
// 128 (or 32) columns × 8 row lanes sum a fixed token block each in f64 (a product of two f32 is exact in
// f64), the lanes are added in a fixed order into one partial per (block,
// column), and col_sum.cuh's finishing pass adds the partials in a fixed
// order into the f32 gradient. The partition depends only on the shape.
//
// The planes are expanded by every forward (h, g and the bits, which the
// sign optimizer rewrites in place, are always seen; no host round trip);
// the backward runs b and dx on the forward's planes when they are given
// (BlrSaved::planes, used as stored), else expands the other orientation.
// blr_infer widens f16 scales (BlrPath::scales16) into f32 scratch first,
// exactly, then runs the bit-reading kernels (blr_infer.cu) or the forward.
//
// Scratch (planes, staged operands, partials) lives in the ops object and
// only grows. Everything runs on the context's stream; nothing synchronises.
// One ops object serves one caller at a time.
#include <cuda_fp16.h>

#include <algorithm>
#include <vector>

#include "cuda/blr_infer.hpp"
#include "cuda/col_sum.cuh"
#include "cuda/gemm_kernels.hpp"
#include "cuda/ops.hpp"

namespace bitrank::cuda {
namespace {

constexpr int kColTile = kColSumTile;      // columns per column-sum block (col_sum.cuh's layout)
constexpr int kRowLanes = kColSumRowLanes;  // row lanes per column-sum block
constexpr unsigned kThreads = 256;

// ---- staging with column sums -------------------------------------------

// dst[t][j] = f16(f32(f32(q[t][j]·col[j])·scale)).
// Block (32, 8), grid (column tiles of 32·V, token blocks); thread (tx, ty)
// owns columns V·(32·blockIdx.x + tx) … + V − 1 and rows t0 + ty, + 8, ….
// Besides its pass, each block writes partial[blockIdx.y][j] =
// Σ_{t in block} p[t][j]·q[t][j] (f64).
template <int V>
__global__ void stage_colsum_kernel(const float* __restrict__ p, const float* __restrict__ q,
                                    const float* __restrict__ col, float scale, index_t rows, index_t k,
                                    index_t rows_per_block, __half* __restrict__ dst, double* __restrict__ partial) {
  __shared__ double lanes[kRowLanes][kColTile * V];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const index_t j = (static_cast<index_t>(blockIdx.x) * kColTile + tx) * V;
  const index_t t0 = static_cast<index_t>(blockIdx.y) * rows_per_block;
  const index_t t1 = t0 + rows_per_block < rows ? t0 + rows_per_block : rows;
  double sum[V];
  for (int v = 0; v < V; ++v) sum[v] = 0.0;
  if (j < k) {
    const Floats<V> c = load_floats<V>(col + j);
    for (index_t t = t0 + ty; t < t1; t += kRowLanes) {
      const index_t e = t * k + j;
      const Floats<V> pe = load_floats<V>(p + e), qe = load_floats<V>(q + e);
      for (int v = 0; v < V; ++v) sum[v] += static_cast<double>(pe.v[v]) * qe.v[v];
      Floats<V> st;
      for (int v = 0; v < V; ++v) st.v[v] = stage_product(qe.v[v], c.v[v], scale);
      store_halves<V>(dst + e, st);
    }
  }
  for (int v = 0; v < V; ++v) lanes[ty][tx * V + v] = sum[v];
  __syncthreads();
  if (ty == 0 && j < k)
    for (int v = 0; v < V; ++v) {
      double s = 0.0;
      for (int l = 0; l < kRowLanes; ++l) s += lanes[l][tx * V + v];
      partial[static_cast<index_t>(blockIdx.y) * k + j + v] = s;
    }
}

// ---- the GEMM planes' scales ------------------------------------------------

// One block of kScaleThreads: out = {s_g, s_h, s_h·inv_gs, s_g·inv_gs, 1/s_h,
// 1/s_g} with s_h, s_g the powers of two of blr_plane_scale_bits over
// max|h|, max|g| (fmaxf passes a NaN over, as the CPU backend's std::fmax).
// Each thread's loads are independent (no chain through the running max),
// so the pass costs about one memory latency at SmolLM2 to 5120 widths.
constexpr unsigned kScaleThreads = 1024;

__device__ __forceinline__ float max_abs(const float* __restrict__ v, index_t n) {
  constexpr int kIndependent = 4;
  float acc[kIndependent] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (index_t i = threadIdx.x; i < n; i += kIndependent * blockDim.x) {
#pragma unroll
    for (int u = 0; u < kIndependent; ++u) {
      const index_t iu = i + static_cast<index_t>(u) * blockDim.x;
      if (iu < n) acc[u] = fmaxf(acc[u], fabsf(v[iu]));
    }
  }
  return fmaxf(fmaxf(acc[0], acc[1]), fmaxf(acc[2], acc[3]));
}

__global__ void __launch_bounds__(kScaleThreads) plane_scales_kernel(const float* __restrict__ h, index_t m,
                                                                     const float* __restrict__ g, index_t n,
                                                                     float inv_gs, float* __restrict__ out) {
  __shared__ float red[2][kScaleThreads / 32];
  float mh = max_abs(h, m), mg = max_abs(g, n);
  for (int off = 16; off > 0; off /= 2) {
    mh = fmaxf(mh, __shfl_xor_sync(0xffffffffu, mh, off));
    mg = fmaxf(mg, __shfl_xor_sync(0xffffffffu, mg, off));
  }
  if (threadIdx.x % 32 == 0) red[0][threadIdx.x / 32] = mh, red[1][threadIdx.x / 32] = mg;
  __syncthreads();
  if (threadIdx.x != 0) return;
  for (unsigned w = 1; w < blockDim.x / 32; ++w) mh = fmaxf(mh, red[0][w]), mg = fmaxf(mg, red[1][w]);
  const float sh = __uint_as_float(blr_plane_scale_bits(__float_as_uint(mh)));
  const float sg = __uint_as_float(blr_plane_scale_bits(__float_as_uint(mg)));
  out[0] = sg;
  out[1] = sh;
  out[2] = __fmul_rn(sh, inv_gs);
  out[3] = __fmul_rn(sg, inv_gs);
  out[4] = __fdiv_rn(1.0f, sh);
  out[5] = __fdiv_rn(1.0f, sg);
}

// Slots of plane_scales_kernel's output.
enum Scale : int { kSg = 0, kSh = 1, kShOverGs = 2, kSgOverGs = 3, kInvSh = 4, kInvSg = 5, kScaleSlots = 8 };

// ---- dh, dg from the token sums -------------------------------------------

// One warp per row j of e [rows][r]: sum[j] += Σ_k S[j][k]·e[j][k] when sum
// is given, S the ±1 signs of the bitmap [rows][r/32] (lane l takes the V
// consecutive ranks k = V·l + 32·V·i, their bits from one word; in f64, the
// lanes added by a fixed shuffle tree), then e[j][:] ×= scale[j] when scale
// is given. V = 4: 16-byte loads and stores (rows 16-byte aligned).
template <int V>
__global__ void signed_row_sums_kernel(const std::uint32_t* __restrict__ bits, float* __restrict__ e, index_t rows,
                                       index_t r, float* __restrict__ sum, const float* __restrict__ scale) {
  const index_t j = static_cast<index_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (j >= rows) return;
  const std::uint32_t* bj = bits + j * (r / 32);
  float* ej = e + j * r;
  const float f = scale ? scale[j] : 1.0f;
  double s = 0.0;
  for (index_t k = static_cast<index_t>(V) * lane; k < r; k += 32 * V) {
    Floats<V> v = load_floats<V>(ej + k);
    if (sum) {
      const std::uint32_t word = bj[k / 32];
      for (int u = 0; u < V; ++u) {
        const double d = v.v[u];
        s += (word >> ((k + u) % 32)) & 1u ? d : -d;
      }
    }
    if (scale) {
      for (int u = 0; u < V; ++u) v.v[u] = __fmul_rn(v.v[u], f);
      store_floats<V>(ej + k, v);
    }
  }
  if (sum) {
    for (int off = 16; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off);
    if (lane == 0) sum[j] += static_cast<float>(s);
  }
}

// dst[i] = the f32 value of src[i], i < n (blr_infer's f16 scales: exact).
__global__ void widen_f16_kernel(const __half* __restrict__ src, index_t n, float* __restrict__ dst) {
  const index_t stride = static_cast<index_t>(gridDim.x) * blockDim.x;
  for (index_t i = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    dst[i] = __half2float(src[i]);
}

// ---- scratch --------------------------------------------------------------

// A grow-only device buffer.
template <class T>
class Scratch {
 public:
  T* get(Memory& mem, index_t n) {
    if (static_cast<std::size_t>(n) > buf_.size()) buf_ = Buffer<T>(mem, static_cast<std::size_t>(n));
    return buf_.data();
  }

 private:
  Buffer<T> buf_;
};

class CudaBlrOps final : public BlrOps<float> {
 public:
  explicit CudaBlrOps(Context& ctx) : ctx_(ctx), gemm_(ctx), bit_infer_(ctx) {}

 protected:
  void blr_forward_impl(const BlrLayer<float>& layer, CView<float> x, View<float> y,
                        const BlrSaved<float>& saved) override {
    const index_t m = layer.m, n = layer.n, r = layer.r, ntok = x.dim(0);
    const index_t paths = static_cast<index_t>(layer.paths.size());
    const cudaStream_t s = ctx_.stream.get();
    // x staged straight into the caller's saved.xs when given (the backward reads it there)
    __half* xs = saved.xs.data ? reinterpret_cast<__half*>(saved.xs.data) : half_scratch(act_x_, ntok * n);
    __half* al = half_scratch(act_r_, ntok * r);
    launch_stage(x.data, n, 0, nullptr, 1.0f, ntok, ntok, n, xs, s);
    for (index_t p = 0; p < paths; ++p) {
      const BlrPath<float>& path = layer.paths[static_cast<std::size_t>(p)];
      const float* sc = plane_scales(layer, p, 1.0f);
      float* a = saved.a.data + p * ntok * r;
      // the planes go to saved.planes when given (path p: [m][r] of h⊙S_U, then [r][n] of g⊙S_V)
      __half* kept = saved.planes.data ? reinterpret_cast<__half*>(saved.planes.data) + p * (m + n) * r : nullptr;
      const __half* pv_t =
          expand(path.sign_v, r, path.g.data, sc + kInvSg, plane_v_, false, kept ? kept + m * r : nullptr);  // [r][n]
      gemm_.run_device_alpha(xs, pv_t, sc + kSg, false, a, ntok, r, n, r);  // a = x·(g⊙S_V)
      launch_stage(a, r, 0, path.l.data, 1.0f, ntok, ntok, r, al, s);
      const __half* pu = expand(path.sign_u, r, path.h.data, sc + kInvSh, plane_u_, true, kept);  // [m][r]
      gemm_.run_device_alpha(al, pu, sc + kSh, p > 0, y.data, ntok, m, r, m);  // y (=, +=) (a⊙ℓ)·(h⊙S_U)ᵀ
    }
  }

  // Few tokens: the bit-reading kernels (blr_infer.cu); more: the forward, its
  // a kept in scratch. f16 scales are widened into scratch first (exact).
  void blr_infer_impl(const BlrLayer<float>& given, CView<float> x, View<float> y) override {
    const BlrLayer<float> layer = with_wide_scales(
        given, widened_paths_, [&](index_t count) { return wide_scales_.get(ctx_.memory, count); },
        [&](const f16* src, index_t count, float* dst) {
          const unsigned blocks = static_cast<unsigned>(std::min<index_t>((count + kThreads - 1) / kThreads, 1024));
          widen_f16_kernel<<<blocks, kThreads, 0, ctx_.stream.get()>>>(reinterpret_cast<const __half*>(src), count, dst);
          BR_CUDA_LAUNCHED();
        });
    if (BlrBitInfer::takes(layer, x.dim(0))) return bit_infer_.run(layer, x, y);
    const index_t paths = static_cast<index_t>(layer.paths.size()), ntok = x.dim(0);
    float* a = infer_a_.get(ctx_.memory, paths * ntok * layer.r);
    blr_forward_impl(layer, x, y, BlrSaved<float>{View<float>(a, Shape{paths, ntok, layer.r})});
  }

  void blr_backward_impl(const BlrLayer<float>& layer, CView<float> x, CView<float> dy, const BlrSaved<float>& saved,
                         View<float> dx, float grad_scale, View<float> b_out) override {
    const Staged st = staging(layer, x, dy, grad_scale, saved.xs);
    for (index_t p = 0; p < static_cast<index_t>(layer.paths.size()); ++p) {
      backward_path(layer, saved, dx, grad_scale, b_out, x.dim(0), p, st);
      token_sums(layer, saved.a, grad_scale, x.dim(0), p, st, {}, {}, true);
    }
  }

  void blr_sign_grad_impl(const BlrLayer<float>& layer, CView<float> x, CView<float> dy, CView<float> a,
                          CView<float> b, float grad_scale, View<float> g_u, View<float> g_v) override {
    const index_t r = layer.r, ntok = x.dim(0);
    const Staged st = staging(layer, x, dy, grad_scale);
    for (index_t p = 0; p < static_cast<index_t>(layer.paths.size()); ++p) {
      launch_stage(b.data + p * ntok * r, r, 0, layer.paths[static_cast<std::size_t>(p)].l.data, grad_scale, ntok, ntok,
                   r, st.small, ctx_.stream.get());
      token_sums(layer, a, grad_scale, ntok, p, st, g_u, g_v, false);
    }
  }

  // Per path: the backward leaves b⊙ℓ·gs staged and its token sums are the
  // sign gradients' E_U, E_V: handed out here, scaled by h and g.
  void blr_backward_sign_grad_impl(const BlrLayer<float>& layer, CView<float> x, CView<float> dy,
                                   const BlrSaved<float>& saved, View<float> dx, float grad_scale, View<float> b,
                                   View<float> g_u, View<float> g_v) override {
    const Staged st = staging(layer, x, dy, grad_scale, saved.xs);
    for (index_t p = 0; p < static_cast<index_t>(layer.paths.size()); ++p) {
      backward_path(layer, saved, dx, grad_scale, b, x.dim(0), p, st);
      token_sums(layer, saved.a, grad_scale, x.dim(0), p, st, g_u, g_v, true);
    }
  }

 private:
  // The staged operands of the backward and the sign gradients, shared by
  // the paths: dys = f16(dy·gs) [ntok][m], xs = f16(x) [ntok][n]; and per
  // path small [ntok][r] (b⊙ℓ·gs) and small2 [ntok][r] (a⊙ℓ for E_U, apart
  // from small so that a staged b⊙ℓ·gs survives it).
  struct Staged {
    __half* dys;
    const __half* xs;
    __half *small, *small2;
  };
  // With `xs` (the forward's f16(x), BlrSaved) x is not staged again.
  Staged staging(const BlrLayer<float>& layer, CView<float> x, CView<float> dy, float grad_scale,
                 CView<f16> xs = {}) {
    const index_t ntok = x.dim(0);
    const cudaStream_t s = ctx_.stream.get();
    __half* xs_own = xs.data ? nullptr : half_scratch(act_x_, ntok * layer.n);
    const Staged st{half_scratch(act_dy_, ntok * layer.m), xs.data ? reinterpret_cast<const __half*>(xs.data) : xs_own,
                    half_scratch(act_r_, ntok * layer.r), half_scratch(act_r2_, ntok * layer.r)};
    launch_stage(dy.data, layer.m, 0, nullptr, grad_scale, ntok, ntok, layer.m, st.dys, s);
    if (xs_own) launch_stage(x.data, layer.n, 0, nullptr, 1.0f, ntok, ntok, layer.n, xs_own, s);
    return st;
  }

  // Path p of the backward but its token sums: b, dℓ and dx; leaves b⊙ℓ·gs in st.small.
  void backward_path(const BlrLayer<float>& layer, const BlrSaved<float>& saved, View<float> dx, float grad_scale,
                     View<float> b_out, index_t ntok, index_t p, const Staged& st) {
    const index_t m = layer.m, n = layer.n, r = layer.r;
    const BlrPath<float>& path = layer.paths[static_cast<std::size_t>(p)];
    const float* sc = plane_scales(layer, p, 1.0f / grad_scale);
    const float* a = saved.a.data + p * ntok * r;
    float* b = b_out.data ? b_out.data + p * ntok * r : b_.get(ctx_.memory, ntok * r);
    // The forward's planes when saved ([m][r] and [r][n], used as stored), else
    // the other orientation expanded here ([r][m] and [n][r], used transposed).
    const __half* kept =
        saved.planes.data ? reinterpret_cast<const __half*>(saved.planes.data) + p * (m + n) * r : nullptr;
    if (kept) {
      gemm_.run_plain_device_alpha(st.dys, kept, sc + kShOverGs, false, b, ntok, r, m, r);  // b = dy·(h⊙S_U)
    } else {
      const __half* pu_t = expand(path.sign_u, r, path.h.data, sc + kInvSh, plane_u_, false);  // [r][m]
      gemm_.run_device_alpha(st.dys, pu_t, sc + kShOverGs, false, b, ntok, r, m, r);
    }
    // bl = f16(b⊙ℓ·gs), dℓ += Σ_t a⊙b
    stage_colsum(a, b, path.l.data, grad_scale, ntok, r, st.small, path.dl.data);
    // dx (=, +=) (b⊙ℓ·gs)·(g⊙S_V)ᵀ/gs
    if (kept) {
      gemm_.run_plain_device_alpha(st.small, kept + m * r, sc + kSgOverGs, p > 0, dx.data, ntok, n, r, n);
    } else {
      const __half* pv = expand(path.sign_v, r, path.g.data, sc + kInvSg, plane_v_, true);  // [n][r]
      gemm_.run_device_alpha(st.small, pv, sc + kSgOverGs, p > 0, dx.data, ntok, n, r, n);
    }
  }

  // The token sums of path p, with b⊙ℓ·gs staged in st.small:
  // E_U = (dy·gs)ᵀ·(a⊙ℓ) / gs, E_V = xᵀ·(b⊙ℓ·gs) / gs; with `grads`,
  // dh += Σ_k S_U⊙E_U and dg += Σ_k S_V⊙E_V; G_U = h⊙E_U and G_V = g⊙E_V
  // when g_u, g_v are given (else E_U, E_V go to scratch). The signs are
  // read from the bitmaps.
  void token_sums(const BlrLayer<float>& layer, CView<float> a, float grad_scale, index_t ntok, index_t p,
                  const Staged& st, View<float> g_u, View<float> g_v, bool grads) {
    const index_t m = layer.m, n = layer.n, r = layer.r;
    const float inv_scale = 1.0f / grad_scale;
    const BlrPath<float>& path = layer.paths[static_cast<std::size_t>(p)];
    float* eu = g_u.data ? g_u.data + p * m * r : e_u_.get(ctx_.memory, m * r);
    float* ev = g_v.data ? g_v.data + p * n * r : e_v_.get(ctx_.memory, n * r);
    launch_stage(a.data + p * ntok * r, r, 0, path.l.data, 1.0f, ntok, ntok, r, st.small2, ctx_.stream.get());
    gemm_.run_tokens(st.dys, st.small2, inv_scale, eu, m, r, ntok, r);
    signed_row_sums(path.sign_u.data, eu, m, r, grads ? path.dh.data : nullptr, g_u.data ? path.h.data : nullptr);
    gemm_.run_tokens(st.xs, st.small, inv_scale, ev, n, r, ntok, r);
    signed_row_sums(path.sign_v.data, ev, n, r, grads ? path.dg.data : nullptr, g_v.data ? path.g.data : nullptr);
  }

  void signed_row_sums(const std::uint32_t* bits, float* e, index_t rows, index_t r, float* sum, const float* scale) {
    if (!sum && !scale) return;
    constexpr unsigned kWarps = kThreads / 32;
    const unsigned blocks = static_cast<unsigned>((rows + kWarps - 1) / kWarps);
    if (vector_width(r, {e}) == 4) {
      signed_row_sums_kernel<4><<<blocks, kThreads, 0, ctx_.stream.get()>>>(bits, e, rows, r, sum, scale);
    } else {
      signed_row_sums_kernel<1><<<blocks, kThreads, 0, ctx_.stream.get()>>>(bits, e, rows, r, sum, scale);
    }
    BR_CUDA_LAUNCHED();
  }

  // Path p's plane scales (plane_scales_kernel) on the device, inv_gs = 1/gs.
  const float* plane_scales(const BlrLayer<float>& layer, index_t p, float inv_gs) {
    const BlrPath<float>& path = layer.paths[static_cast<std::size_t>(p)];
    float* out = scales_.get(ctx_.memory, kScaleSlots * static_cast<index_t>(layer.paths.size())) + kScaleSlots * p;
    plane_scales_kernel<<<1, kScaleThreads, 0, ctx_.stream.get()>>>(path.h.data, layer.m, path.g.data, layer.n, inv_gs,
                                                                    out);
    BR_CUDA_LAUNCHED();
    return out;
  }

  // The GEMM plane ±f16(v_i·inv) of a bitmap [rows][r/32]: [rows][r], or
  // its transpose [r][rows] when !rows_major, into dst when given, else buf.
  const __half* expand(CView<std::uint32_t> bits, index_t r, const float* v, const float* inv, Scratch<f16>& buf,
                       bool rows_major, __half* dst = nullptr) {
    const index_t rows = bits.dim(0);
    __half* pl = dst ? dst : half_scratch(buf, rows * r);
    launch_expand_signs(bits.data, rows, r, bits.dim(1), v, inv, rows_major ? pl : nullptr, rows_major ? nullptr : pl,
                        ctx_.stream.get());
    return pl;
  }

  __half* half_scratch(Scratch<f16>& buf, index_t n) { return reinterpret_cast<__half*>(buf.get(ctx_.memory, n)); }

  // One staging pass over [rows][k] of q (stage_colsum_kernel), then
  // sum[j] += Σ_t p[t][j]·q[t][j].
  void stage_colsum(const float* p, const float* q, const float* col, float scale, index_t rows,
                    index_t k, __half* dst, float* sum) {
    const cudaStream_t s = ctx_.stream.get();
    const int v = vector_width(k, {p, q, col, dst});
    const index_t tiles = (k + kColTile * v - 1) / (kColTile * v);
    const ColSumChunks ch = col_sum_chunks(rows, tiles);
    const index_t rows_per_block = ch.rows, blocks = ch.chunks;
    double* partial = partial_.get(ctx_.memory, blocks * k);
    const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(blocks)), block(kColTile, kRowLanes);
    if (v == 4) {
      stage_colsum_kernel<4><<<grid, block, 0, s>>>(p, q, col, scale, rows, k, rows_per_block, dst, partial);
    } else {
      stage_colsum_kernel<1><<<grid, block, 0, s>>>(p, q, col, scale, rows, k, rows_per_block, dst, partial);
    }
    BR_CUDA_LAUNCHED();
    launch_col_sum_finish(partial, blocks, k, sum, s);
  }

  Context& ctx_;
  LtGemm gemm_;
  Scratch<f16> plane_u_;  // the path at hand's ±f16(h/s_h) plane, [m][r] or [r][m]
  Scratch<f16> plane_v_;  // ±f16(g/s_g), [n][r] or [r][n]
  Scratch<float> scales_;  // plane_scales_kernel's slots per path
  Scratch<f16> act_x_;    // staged x [ntok][n]
  Scratch<f16> act_dy_;   // staged dy·gs [ntok][m]
  Scratch<f16> act_r_;    // staged [ntok][r]: a⊙ℓ or b⊙ℓ·gs
  Scratch<f16> act_r2_;   // staged [ntok][r]: a⊙ℓ for E_U while act_r_ holds b⊙ℓ·gs
  Scratch<float> b_;      // b of one path when the caller does not keep it [ntok][r]
  BlrBitInfer bit_infer_;
  Scratch<float> infer_a_;  // blr_infer's a [P][ntok][r], which nobody reads
  Scratch<float> wide_scales_;  // blr_infer's widened f16 scales [P][m + r + n]
  std::vector<BlrPath<float>> widened_paths_;  // the paths over wide_scales_
  Scratch<float> e_u_;    // E_U of one path [m][r] when G_U is not wanted
  Scratch<float> e_v_;    // E_V of one path [n][r] when G_V is not wanted
  Scratch<double> partial_;  // column-sum partials [blocks][width]
};

}  // namespace

std::unique_ptr<BlrOps<float>> make_blr_ops(Context& ctx) { return std::make_unique<CudaBlrOps>(ctx); }

}  // namespace bitrank::cuda
