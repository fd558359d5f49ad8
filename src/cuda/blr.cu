// CUDA backend of the BLR layer (contract: include/bitrank/ops/blr.hpp).
//
// Every GEMM is the cuBLASLt f16 GEMM of gemm_kernels.hpp (f16 operands,
// f32 accumulation, output × 1/grad_scale) on operands staged exactly as the
// CPU backend stages them; the ±1 planes come from the bitmaps. Per path:
//
//   forward   stage x⊙g → GEMM a (plane S_Vᵀ) → stage a⊙ℓ → GEMM y (plane S_U)
//             whose epilogue scales output column j by h_j (y = or += across paths)
//   backward  stage dy⊙h·gs and dy·gs in one pass → GEMM b (plane S_Uᵀ) / gs
//             stage b⊙ℓ·gs with Σ a⊙b → dℓ;  GEMM dx (plane S_V), columns × g/gs
//             stage a⊙ℓ → GEMM E_U = (dy·gs)ᵀ·(a⊙ℓ) / gs;      dh += Σ_k S_U⊙E_U
//             stage x → GEMM E_V = xᵀ·(b⊙ℓ·gs) / gs;            dg += Σ_k S_V⊙E_V
//             (the token-sum GEMMs read the row-major staged operands as
//             they are: the same f16 values a transposed staging would hold)
//   sign grad G_U = h⊙E_U, G_V = g⊙E_V: blr_backward_sign_grad hands the
//             backward's E_U, E_V out scaled; blr_sign_grad forms them from
//             a and b without touching dh, dg
//
// Neither c = (a⊙ℓ)·S_Uᵀ nor dx' = (b⊙ℓ)·S_Vᵀ is ever written: the
// outer scales h and g are the GEMMs' per-column alpha (cuBLASLt's device
// alpha vector; where cuBLASLt offers no algorithm for it, the GEMM goes to
// scratch and the column scale runs as a pass, said once in the log), and
// dh, dg come from the token sums.
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
// The ±1 planes are kept per path and side with a device copy of the bits
// they were expanded from; every call re-checks the bits on the device, tile
// by tile, and re-expands the tiles whose words changed (so bits rewritten
// in place by the sign optimizer are always seen, with no host round trip).
// Scratch (planes, staged operands, partials) lives in the ops object and
// only grows. Everything runs on the context's stream; nothing synchronises.
// One ops object serves one caller at a time.
#include <cuda_fp16.h>

#include <algorithm>
#include <vector>

#include "bitrank/log.hpp"
#include "cuda/col_sum.cuh"
#include "cuda/gemm_kernels.hpp"
#include "cuda/ops.hpp"

namespace bitrank::cuda {
namespace {

constexpr int kColTile = kColSumTile;      // columns per column-sum block (col_sum.cuh's layout)
constexpr int kRowLanes = kColSumRowLanes;  // row lanes per column-sum block
constexpr unsigned kThreads = 256;

// ---- staging with column sums -------------------------------------------

// dst[t][j] = f16(f32(f32(s[t][j]·col[j])·scale)), s = p or q.
// Block (32, 8), grid (column tiles of 32·V, token blocks); thread (tx, ty)
// owns columns V·(32·blockIdx.x + tx) … + V − 1 and rows t0 + ty, + 8, ….
// Besides its pass, each block writes partial[blockIdx.y][j] =
// Σ_{t in block} p[t][j]·q[t][j] (f64).
template <int V>
__global__ void stage_colsum_kernel(const float* __restrict__ p, const float* __restrict__ q, bool stage_p,
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
      for (int v = 0; v < V; ++v) st.v[v] = stage_product(stage_p ? pe.v[v] : qe.v[v], c.v[v], scale);
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

// ---- the two stagings of dy ------------------------------------------------

// dyh[t][j] = f16(f32(f32(dy·h_j)·gs)) (for b) and dys[t][j] = f16(f32(dy·gs))
// (for E_U): launch_stage's values, both from one read of dy. Thread j owns
// columns V·j … + V − 1; rows t = blockIdx.y, + gridDim.y, ….
template <int V>
__global__ void stage_dy_kernel(const float* __restrict__ dy, const float* __restrict__ h, float gs, index_t ntok,
                                index_t m, __half* __restrict__ dyh, __half* __restrict__ dys) {
  const index_t j = (static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x) * V;
  if (j >= m) return;
  const Floats<V> hj = load_floats<V>(h + j);
  for (index_t t = blockIdx.y; t < ntok; t += gridDim.y) {
    const index_t e = t * m + j;
    const Floats<V> d = load_floats<V>(dy + e);
    Floats<V> a, b;
    for (int v = 0; v < V; ++v) {
      a.v[v] = stage_product(d.v[v], hj.v[v], gs);
      b.v[v] = __fmul_rn(d.v[v], gs);
    }
    store_halves<V>(dyh + e, a);
    store_halves<V>(dys + e, b);
  }
}

// out[i] = v[i]·s (s a power of two: exact).
__global__ void scaled_copy_kernel(const float* __restrict__ v, float s, index_t n, float* __restrict__ out) {
  const index_t i = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __fmul_rn(v[i], s);
}

// ---- dh, dg from the token sums -------------------------------------------

// One warp per row j of e [rows][r]: sum[j] += Σ_k S[j][k]·e[j][k] when sum
// is given, S the ±1 signs of the bitmap [rows][r/32] (lane l takes k ≡ l
// mod 32, bit l of each word, in f64; the lanes added by a fixed shuffle
// tree), then e[j][:] ×= scale[j] when scale is given.
__global__ void signed_row_sums_kernel(const std::uint32_t* __restrict__ bits, float* __restrict__ e, index_t rows,
                                       index_t r, float* __restrict__ sum, const float* __restrict__ scale) {
  const index_t j = static_cast<index_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (j >= rows) return;
  const std::uint32_t* bj = bits + j * (r / 32);
  float* ej = e + j * r;
  if (sum) {
    double s = 0.0;
    for (index_t w = 0; w < r / 32; ++w) {
      const double v = ej[32 * w + lane];
      s += (bj[w] >> lane) & 1u ? v : -v;
    }
    for (int off = 16; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off);
    if (lane == 0) sum[j] += static_cast<float>(s);
  }
  if (scale) {
    const float f = scale[j];
    for (index_t k = lane; k < r; k += 32) ej[k] = __fmul_rn(ej[k], f);
  }
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

// The ±1 planes of one bitmap ([rows][r] and [r][rows]) and the bits they
// were expanded from.
class PlaneCache {
 public:
  void update(Context& ctx, CView<std::uint32_t> bits, index_t r) {
    const index_t rows = bits.dim(0), words = bits.dim(1);
    const bool fresh = rows != rows_ || r != r_;
    __half* pl = reinterpret_cast<__half*>(plane_.get(ctx.memory, rows * r));
    __half* pl_t = reinterpret_cast<__half*>(plane_t_.get(ctx.memory, rows * r));
    std::uint32_t* cached = bits_.get(ctx.memory, rows * words);
    launch_expand_signs(bits.data, rows, r, words, pl, pl_t, cached, fresh, ctx.stream.get());
    rows_ = rows;
    r_ = r;
    plane_ptr_ = pl;
    plane_t_ptr_ = pl_t;
  }
  const __half* plane() const { return plane_ptr_; }      // [rows][r]
  const __half* plane_t() const { return plane_t_ptr_; }  // [r][rows]

 private:
  Scratch<f16> plane_, plane_t_;
  Scratch<std::uint32_t> bits_;
  index_t rows_ = -1, r_ = -1;
  const __half* plane_ptr_ = nullptr;
  const __half* plane_t_ptr_ = nullptr;
};

class CudaBlrOps final : public BlrOps<float> {
 public:
  explicit CudaBlrOps(Context& ctx) : ctx_(ctx), gemm_(ctx), reduce_(make_reduce_ops(ctx)) {}

 protected:
  void blr_forward_impl(const BlrLayer<float>& layer, CView<float> x, View<float> y,
                        const BlrSaved<float>& saved) override {
    const index_t m = layer.m, n = layer.n, r = layer.r, ntok = x.dim(0);
    const index_t paths = static_cast<index_t>(layer.paths.size());
    const cudaStream_t s = ctx_.stream.get();
    __half* xg = half_scratch(act_, ntok * std::max(m, n));
    __half* al = half_scratch(act_r_, ntok * r);
    for (index_t p = 0; p < paths; ++p) {
      const BlrPath<float>& path = layer.paths[static_cast<std::size_t>(p)];
      update_planes(layer, p);
      const PlaneCache& pu = planes_u_[static_cast<std::size_t>(p)];
      const PlaneCache& pv = planes_v_[static_cast<std::size_t>(p)];
      float* a = saved.a.data + p * ntok * r;
      launch_stage(x.data, n, 0, path.g.data, 1.0f, ntok, ntok, n, xg, s);
      gemm_.run(xg, pv.plane_t(), 1.0f, a, ntok, r, n, r);  // a = (x⊙g)·S_V
      launch_stage(a, r, 0, path.l.data, 1.0f, ntok, ntok, r, al, s);
      // y (=, +=) h⊙((a⊙ℓ)·S_Uᵀ)
      col_scaled_gemm(al, pu.plane(), path.h, 1.0f, p > 0, y, ntok, m, r);
    }
  }

  void blr_backward_impl(const BlrLayer<float>& layer, CView<float> x, CView<float> dy, const BlrSaved<float>& saved,
                         View<float> dx, float grad_scale, View<float> b_out) override {
    const Staged st = staging(layer, x.dim(0));
    for (index_t p = 0; p < static_cast<index_t>(layer.paths.size()); ++p) {
      backward_path(layer, x, dy, saved, dx, grad_scale, b_out, p, st);
      token_sums(layer, x, dy, saved.a, grad_scale, p, st, {}, {}, true);
    }
  }

  void blr_sign_grad_impl(const BlrLayer<float>& layer, CView<float> x, CView<float> dy, CView<float> a,
                          CView<float> b, float grad_scale, View<float> g_u, View<float> g_v) override {
    const index_t m = layer.m, r = layer.r, ntok = x.dim(0);
    const Staged st = staging(layer, ntok);
    launch_stage(dy.data, m, 0, nullptr, grad_scale, ntok, ntok, m, st.dys, ctx_.stream.get());
    for (index_t p = 0; p < static_cast<index_t>(layer.paths.size()); ++p) {
      launch_stage(b.data + p * ntok * r, r, 0, layer.paths[static_cast<std::size_t>(p)].l.data, grad_scale, ntok, ntok,
                   r, st.small, ctx_.stream.get());
      token_sums(layer, x, dy, a, grad_scale, p, st, g_u, g_v, false);
    }
  }

  // Per path: the backward leaves b⊙ℓ·gs staged and its token sums are the
  // sign gradients' E_U, E_V: handed out here, scaled by h and g.
  void blr_backward_sign_grad_impl(const BlrLayer<float>& layer, CView<float> x, CView<float> dy,
                                   const BlrSaved<float>& saved, View<float> dx, float grad_scale, View<float> b,
                                   View<float> g_u, View<float> g_v) override {
    const Staged st = staging(layer, x.dim(0));
    for (index_t p = 0; p < static_cast<index_t>(layer.paths.size()); ++p) {
      backward_path(layer, x, dy, saved, dx, grad_scale, b, p, st);
      token_sums(layer, x, dy, saved.a, grad_scale, p, st, g_u, g_v, true);
    }
  }

 private:
  // Staging scratch of the backward and the sign gradients: big [ntok][max(m, n)]
  // (dy⊙h·gs, then x), dys [ntok][m] (dy·gs), small [ntok][r] (b⊙ℓ·gs), small2
  // [ntok][r] (a⊙ℓ for E_U, apart from small so that a staged b⊙ℓ·gs survives it).
  struct Staged {
    __half *big, *dys, *small, *small2;
  };
  Staged staging(const BlrLayer<float>& layer, index_t ntok) {
    return {half_scratch(act_, ntok * std::max(layer.m, layer.n)), half_scratch(act_dy_, ntok * layer.m),
            half_scratch(act_r_, ntok * layer.r), half_scratch(act_r2_, ntok * layer.r)};
  }

  // Path p of the backward but its token sums: b, dℓ and dx; leaves dy·gs in
  // st.dys and b⊙ℓ·gs in st.small.
  void backward_path(const BlrLayer<float>& layer, CView<float> x, CView<float> dy, const BlrSaved<float>& saved,
                     View<float> dx, float grad_scale, View<float> b_out, index_t p, const Staged& st) {
    const index_t m = layer.m, n = layer.n, r = layer.r, ntok = x.dim(0);
    const cudaStream_t s = ctx_.stream.get();
    const float inv_scale = 1.0f / grad_scale;
    const BlrPath<float>& path = layer.paths[static_cast<std::size_t>(p)];
    update_planes(layer, p);
    const PlaneCache& pu = planes_u_[static_cast<std::size_t>(p)];
    const PlaneCache& pv = planes_v_[static_cast<std::size_t>(p)];
    const float* a = saved.a.data + p * ntok * r;
    float* b = b_out.data ? b_out.data + p * ntok * r : b_.get(ctx_.memory, ntok * r);
    stage_dy(dy.data, path.h.data, grad_scale, ntok, m, st.big, st.dys);
    gemm_.run(st.big, pu.plane_t(), inv_scale, b, ntok, r, m, r);  // b = (dy⊙h)·S_U
    // bl = f16(b⊙ℓ·gs), dℓ += Σ_t a⊙b
    stage_colsum(a, b, false, path.l.data, grad_scale, ntok, r, st.small, path.dl.data);
    // dx (=, +=) g⊙((b⊙ℓ)·S_Vᵀ), the 1/gs undoing the staging's gs
    col_scaled_gemm(st.small, pv.plane(), path.g, inv_scale, p > 0, dx, ntok, n, r);
  }

  // The token sums of path p, with dy·gs staged in st.dys and b⊙ℓ·gs in st.small:
  // E_U = (dy·gs)ᵀ·(a⊙ℓ) / gs, E_V = xᵀ·(b⊙ℓ·gs) / gs; with `grads`,
  // dh += Σ_k S_U⊙E_U and dg += Σ_k S_V⊙E_V; G_U = h⊙E_U and G_V = g⊙E_V
  // when g_u, g_v are given (else E_U, E_V go to scratch). The signs are
  // read from the bitmaps.
  void token_sums(const BlrLayer<float>& layer, CView<float> x, CView<float> dy, CView<float> a, float grad_scale,
                  index_t p, const Staged& st, View<float> g_u, View<float> g_v, bool grads) {
    const index_t m = layer.m, n = layer.n, r = layer.r, ntok = x.dim(0);
    const cudaStream_t s = ctx_.stream.get();
    const float inv_scale = 1.0f / grad_scale;
    const BlrPath<float>& path = layer.paths[static_cast<std::size_t>(p)];
    float* eu = g_u.data ? g_u.data + p * m * r : e_u_.get(ctx_.memory, m * r);
    float* ev = g_v.data ? g_v.data + p * n * r : e_v_.get(ctx_.memory, n * r);
    launch_stage(a.data + p * ntok * r, r, 0, path.l.data, 1.0f, ntok, ntok, r, st.small2, s);
    gemm_.run_tokens(st.dys, st.small2, inv_scale, eu, m, r, ntok, r);
    signed_row_sums(path.sign_u.data, eu, m, r, grads ? path.dh.data : nullptr, g_u.data ? path.h.data : nullptr);
    launch_stage(x.data, n, 0, nullptr, 1.0f, ntok, ntok, n, st.big, s);
    gemm_.run_tokens(st.big, st.small, inv_scale, ev, n, r, ntok, r);
    signed_row_sums(path.sign_v.data, ev, n, r, grads ? path.dg.data : nullptr, g_v.data ? path.g.data : nullptr);
  }

  void signed_row_sums(const std::uint32_t* bits, float* e, index_t rows, index_t r, float* sum, const float* scale) {
    if (!sum && !scale) return;
    constexpr unsigned kWarps = kThreads / 32;
    signed_row_sums_kernel<<<static_cast<unsigned>((rows + kWarps - 1) / kWarps), kThreads, 0, ctx_.stream.get()>>>(
        bits, e, rows, r, sum, scale);
    BR_CUDA_LAUNCHED();
  }

  // out[ntok][n] (= or +=) (act · planeᵀ)[t][j] · col[j]·oscale (oscale a
  // power of two): col·oscale as the GEMM's alpha vector where cuBLASLt has
  // an algorithm for it, else the GEMM into scratch and the reduce ops'
  // column scale (the same products: scaling by a power of two is exact).
  void col_scaled_gemm(const __half* act, const __half* plane, CView<float> col, float oscale, bool accumulate,
                       View<float> out, index_t ntok, index_t n, index_t k) {
    const float* alpha = col.data;
    if (oscale != 1.0f) {
      float* scaled = col_.get(ctx_.memory, n);
      scaled_copy_kernel<<<blocks_for(static_cast<std::size_t>(n), kThreads), kThreads, 0, ctx_.stream.get()>>>(
          col.data, oscale, n, scaled);
      BR_CUDA_LAUNCHED();
      alpha = scaled;
    }
    if (gemm_.run_col_scaled(act, plane, alpha, accumulate, out.data, ntok, n, k, n)) return;
    if (!told_no_alpha_vector_) {
      BR_LOG_INFO("blr: cuBLASLt offers no alpha-vector epilogue for {}x{}x{}; the column scale runs as a pass", ntok, n,
                  k);
      told_no_alpha_vector_ = true;
    }
    float* tmp = wide_.get(ctx_.memory, ntok * n);
    gemm_.run(act, plane, oscale, tmp, ntok, n, k, n);
    reduce_->scale_cols(CView<float>(tmp, Shape{ntok, n}), col, out, accumulate);
  }

  // stage_dy_kernel over dy [ntok][m].
  void stage_dy(const float* dy, const float* h, float gs, index_t ntok, index_t m, __half* dyh, __half* dys) {
    const cudaStream_t s = ctx_.stream.get();
    const bool wide = vector_width(m, {dy, h, dyh, dys}) == 4;
    const unsigned col_blocks = blocks_for(static_cast<std::size_t>(m / (wide ? 4 : 1)), kThreads);
    const dim3 grid(col_blocks, row_steps(ntok, col_blocks));
    if (wide) {
      stage_dy_kernel<4><<<grid, kThreads, 0, s>>>(dy, h, gs, ntok, m, dyh, dys);
    } else {
      stage_dy_kernel<1><<<grid, kThreads, 0, s>>>(dy, h, gs, ntok, m, dyh, dys);
    }
    BR_CUDA_LAUNCHED();
  }

  // Path p's ±1 planes brought up to its bitmaps (PlaneCache::update).
  void update_planes(const BlrLayer<float>& layer, index_t p) {
    ensure_path_caches(static_cast<index_t>(layer.paths.size()));
    const BlrPath<float>& path = layer.paths[static_cast<std::size_t>(p)];
    planes_u_[static_cast<std::size_t>(p)].update(ctx_, path.sign_u, layer.r);
    planes_v_[static_cast<std::size_t>(p)].update(ctx_, path.sign_v, layer.r);
  }

  void ensure_path_caches(index_t paths) {
    if (planes_u_.size() < static_cast<std::size_t>(paths)) {
      planes_u_.resize(static_cast<std::size_t>(paths));
      planes_v_.resize(static_cast<std::size_t>(paths));
    }
  }

  __half* half_scratch(Scratch<f16>& buf, index_t n) { return reinterpret_cast<__half*>(buf.get(ctx_.memory, n)); }

  // One staging pass over [rows][k] (stage_colsum_kernel), then
  // sum[j] += Σ_t p[t][j]·q[t][j].
  void stage_colsum(const float* p, const float* q, bool stage_p, const float* col, float scale, index_t rows,
                    index_t k, __half* dst, float* sum) {
    const cudaStream_t s = ctx_.stream.get();
    const int v = vector_width(k, {p, q, col, dst});
    const index_t tiles = (k + kColTile * v - 1) / (kColTile * v);
    const ColSumChunks ch = col_sum_chunks(rows, tiles);
    const index_t rows_per_block = ch.rows, blocks = ch.chunks;
    double* partial = partial_.get(ctx_.memory, blocks * k);
    const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(blocks)), block(kColTile, kRowLanes);
    if (v == 4) {
      stage_colsum_kernel<4><<<grid, block, 0, s>>>(p, q, stage_p, col, scale, rows, k, rows_per_block, dst, partial);
    } else {
      stage_colsum_kernel<1><<<grid, block, 0, s>>>(p, q, stage_p, col, scale, rows, k, rows_per_block, dst, partial);
    }
    BR_CUDA_LAUNCHED();
    launch_col_sum_finish(partial, blocks, k, sum, s);
  }

  Context& ctx_;
  LtGemm gemm_;
  std::unique_ptr<ReduceOps<float>> reduce_;  // its scale_cols where the GEMM cannot scale
  bool told_no_alpha_vector_ = false;
  std::vector<PlaneCache> planes_u_, planes_v_;  // per path
  Scratch<f16> act_;     // staged [ntok][max(m, n)]: x⊙g, dy⊙h·gs or x
  Scratch<f16> act_dy_;  // staged [ntok][m]: dy·gs
  Scratch<f16> act_r_;   // staged [ntok][r]: a⊙ℓ or b⊙ℓ·gs
  Scratch<f16> act_r2_;  // staged [ntok][r]: a⊙ℓ for E_U while act_r_ holds b⊙ℓ·gs
  Scratch<float> b_;     // b of one path when the caller does not keep it [ntok][r]
  Scratch<float> col_;   // g/gs of one path [n]
  Scratch<float> wide_;  // the unscaled GEMM output [ntok][n] where the alpha vector is not offered
  Scratch<float> e_u_;   // E_U of one path [m][r] when G_U is not wanted
  Scratch<float> e_v_;   // E_V of one path [n][r] when G_V is not wanted
  Scratch<double> partial_;  // column-sum partials [blocks][width]
};

}  // namespace

std::unique_ptr<BlrOps<float>> make_blr_ops(Context& ctx) { return std::make_unique<CudaBlrOps>(ctx); }

}  // namespace bitrank::cuda
