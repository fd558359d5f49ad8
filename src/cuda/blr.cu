// CUDA backend of the BLR layer (contract: include/bitrank/ops/blr.hpp).
//
// Every GEMM is the cuBLASLt f16 GEMM of gemm_kernels.hpp (f16 operands,
// f32 accumulation, output × 1/grad_scale) on operands staged exactly as the
// CPU backend stages them; the ±1 planes come from the bitmaps. Per path:
//
//   forward   stage x⊙g → GEMM a (plane S_Vᵀ) → stage a⊙ℓ → GEMM c (plane S_U)
//             then one pass y = Σ_p h_p⊙c_p over all paths
//   backward  stage dy⊙h·gs with Σ dy⊙c → dh;  GEMM b (plane S_Uᵀ) / gs
//             stage b⊙ℓ·gs with Σ a⊙b → dℓ;    GEMM dx' (plane S_V) / gs
//             Σ x⊙dx' → dg with dx (= or +=) g⊙dx'  (path 0 writes dx' into dx)
//   sign grad stage dy⊙h·gs, a⊙ℓ → GEMM G_U = (dy⊙h·gs)ᵀ·(a⊙ℓ) / gs
//             stage x⊙g, b⊙ℓ·gs  → GEMM G_V = (x⊙g)ᵀ·(b⊙ℓ·gs) / gs
//             (blr_backward_sign_grad: per path right after the backward,
//             whose staged dy⊙h·gs and b⊙ℓ·gs it reuses)
//             (the token-sum GEMM reads the row-major staged operands as
//             they are: the same f16 values a transposed staging would hold)
//
// Elementwise passes move 4 columns per thread (16-byte loads) wherever
// widths and alignment allow, over grids sized to fill the device.
// Column sums are deterministic: blocks of 128 (or 32) columns × 8 row lanes
// sum a fixed token block each in f64 (a product of two f32 is exact in
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

#include "cuda/col_sum.cuh"
#include "cuda/gemm_kernels.hpp"
#include "cuda/ops.hpp"

namespace bitrank::cuda {
namespace {

constexpr int kColTile = kColSumTile;      // columns per column-sum block (col_sum.cuh's layout)
constexpr int kRowLanes = kColSumRowLanes;  // row lanes per column-sum block
constexpr unsigned kThreads = 256;
constexpr int kPathsPerPass = 4;  // paths one y pass reads

// ---- fused row passes with column sums -----------------------------------

enum class RowPass {
  stage,  // dst[t][j] = f16(f32(f32(s[t][j]·col[j])·scale)), s = p or q
  scale,  // out[t][j] (= or +=) col[j]·q[t][j]
};

// Block (32, 8), grid (column tiles of 32·V, token blocks); thread (tx, ty)
// owns columns V·(32·blockIdx.x + tx) … + V − 1 and rows t0 + ty, + 8, ….
// Besides its pass, each block writes partial[blockIdx.y][j] =
// Σ_{t in block} p[t][j]·q[t][j] (f64). No __restrict__ on q and out: the
// scale pass runs in place (out = q).
template <RowPass kPass, int V>
__global__ void rows_colsum_kernel(const float* __restrict__ p, const float* q, bool stage_p,
                                   const float* __restrict__ col, float scale, index_t rows, index_t k,
                                   index_t rows_per_block, __half* __restrict__ dst, float* out, bool accumulate,
                                   double* __restrict__ partial) {
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
      if constexpr (kPass == RowPass::stage) {
        Floats<V> st;
        for (int v = 0; v < V; ++v) st.v[v] = stage_product(stage_p ? pe.v[v] : qe.v[v], c.v[v], scale);
        store_halves<V>(dst + e, st);
      } else {
        Floats<V> o;
        if (accumulate) o = load_floats<V>(out + e);
        for (int v = 0; v < V; ++v) {
          const float x = __fmul_rn(c.v[v], qe.v[v]);
          o.v[v] = accumulate ? __fadd_rn(o.v[v], x) : x;
        }
        store_floats<V>(out + e, o);
      }
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

// ---- y = Σ_p h_p⊙c_p ------------------------------------------------------

struct PathTerms {
  const float* h[kPathsPerPass];
  const float* c[kPathsPerPass];
  int count;
};

// Thread j owns columns V·j … + V − 1; rows t = blockIdx.y, + gridDim.y, ….
// Terms are added in path order (after y itself when accumulating). The
// path loops are unrolled so the terms stay in registers.
template <int V>
__global__ void path_sum_kernel(PathTerms terms, index_t ntok, index_t m, bool accumulate, float* __restrict__ y) {
  const index_t j = (static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x) * V;
  if (j >= m) return;
  Floats<V> h[kPathsPerPass];
#pragma unroll
  for (int q = 0; q < kPathsPerPass; ++q)
    if (q < terms.count) h[q] = load_floats<V>(terms.h[q] + j);
  for (index_t t = blockIdx.y; t < ntok; t += gridDim.y) {
    const index_t e = t * m + j;
    Floats<V> acc;
    if (accumulate) acc = load_floats<V>(y + e);
#pragma unroll
    for (int q = 0; q < kPathsPerPass; ++q) {
      if (q < terms.count) {
        const Floats<V> c = load_floats<V>(terms.c[q] + e);
        for (int v = 0; v < V; ++v) {
          const float term = __fmul_rn(h[q].v[v], c.v[v]);
          acc.v[v] = q == 0 && !accumulate ? term : __fadd_rn(acc.v[v], term);
        }
      }
    }
    store_floats<V>(y + e, acc);
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
  explicit CudaBlrOps(Context& ctx) : ctx_(ctx), gemm_(ctx) {}

 protected:
  void blr_forward_impl(const BlrLayer<float>& layer, CView<float> x, View<float> y,
                        const BlrSaved<float>& saved) override {
    const index_t m = layer.m, n = layer.n, r = layer.r, ntok = x.dim(0);
    const index_t paths = static_cast<index_t>(layer.paths.size());
    const cudaStream_t s = ctx_.stream.get();
    ensure_path_caches(paths);
    __half* xg = half_scratch(act_, ntok * std::max(m, n));
    __half* al = half_scratch(act_r_, ntok * r);
    for (index_t p = 0; p < paths; ++p) {
      const BlrPath<float>& path = layer.paths[static_cast<std::size_t>(p)];
      PlaneCache& pu = planes_u_[static_cast<std::size_t>(p)];
      PlaneCache& pv = planes_v_[static_cast<std::size_t>(p)];
      pu.update(ctx_, path.sign_u, r);
      pv.update(ctx_, path.sign_v, r);
      float* a = saved.a.data + p * ntok * r;
      float* c = saved.c.data + p * ntok * m;
      launch_stage(x.data, n, 0, path.g.data, 1.0f, ntok, ntok, n, xg, s);
      gemm_.run(xg, pv.plane_t(), 1.0f, a, ntok, r, n, r);  // a = (x⊙g)·S_V
      launch_stage(a, r, 0, path.l.data, 1.0f, ntok, ntok, r, al, s);
      gemm_.run(al, pu.plane(), 1.0f, c, ntok, m, r, m);  // c = (a⊙ℓ)·S_Uᵀ
    }
    // y = Σ_p h⊙c, up to kPathsPerPass paths per pass.
    for (index_t p0 = 0; p0 < paths; p0 += kPathsPerPass) {
      PathTerms terms{};
      terms.count = static_cast<int>(std::min<index_t>(kPathsPerPass, paths - p0));
      for (int q = 0; q < terms.count; ++q) {
        terms.h[q] = layer.paths[static_cast<std::size_t>(p0 + q)].h.data;
        terms.c[q] = saved.c.data + (p0 + q) * ntok * m;
      }
      bool wide = vector_width(m, {y.data}) == 4;
      for (int q = 0; q < terms.count; ++q) wide = wide && vector_width(m, {terms.h[q], terms.c[q]}) == 4;
      const unsigned col_blocks = blocks_for(static_cast<std::size_t>(m / (wide ? 4 : 1)), kThreads);
      const dim3 grid(col_blocks, row_steps(ntok, col_blocks));
      if (wide) {
        path_sum_kernel<4><<<grid, kThreads, 0, s>>>(terms, ntok, m, p0 > 0, y.data);
      } else {
        path_sum_kernel<1><<<grid, kThreads, 0, s>>>(terms, ntok, m, p0 > 0, y.data);
      }
      BR_CUDA_LAUNCHED();
    }
  }

  void blr_backward_impl(const BlrLayer<float>& layer, CView<float> x, CView<float> dy, const BlrSaved<float>& saved,
                         View<float> dx, float grad_scale, View<float> b_out) override {
    const Staged st = staging(layer, x.dim(0));
    for (index_t p = 0; p < static_cast<index_t>(layer.paths.size()); ++p)
      backward_path(layer, x, dy, saved, dx, grad_scale, b_out, p, st);
  }

  void blr_sign_grad_impl(const BlrLayer<float>& layer, CView<float> x, CView<float> dy, CView<float> a,
                          CView<float> b, float grad_scale, View<float> g_u, View<float> g_v) override {
    const index_t m = layer.m, r = layer.r, ntok = x.dim(0);
    const cudaStream_t s = ctx_.stream.get();
    const Staged st = staging(layer, ntok);
    for (index_t p = 0; p < static_cast<index_t>(layer.paths.size()); ++p) {
      const BlrPath<float>& path = layer.paths[static_cast<std::size_t>(p)];
      launch_stage(dy.data, m, 0, path.h.data, grad_scale, ntok, ntok, m, st.big, s);
      sign_grad_u(layer, a, grad_scale, p, st, g_u);
      launch_stage(b.data + p * ntok * r, r, 0, path.l.data, grad_scale, ntok, ntok, r, st.small, s);
      sign_grad_v(layer, x, grad_scale, p, st, g_v);
    }
  }

  // Per path: the backward leaves dy⊙h·gs and b⊙ℓ·gs staged, and the sign
  // gradients take them from there (two staging passes fewer per path).
  void blr_backward_sign_grad_impl(const BlrLayer<float>& layer, CView<float> x, CView<float> dy,
                                   const BlrSaved<float>& saved, View<float> dx, float grad_scale, View<float> b,
                                   View<float> g_u, View<float> g_v) override {
    const Staged st = staging(layer, x.dim(0));
    for (index_t p = 0; p < static_cast<index_t>(layer.paths.size()); ++p) {
      backward_path(layer, x, dy, saved, dx, grad_scale, b, p, st);
      sign_grad_u(layer, saved.a, grad_scale, p, st, g_u);
      sign_grad_v(layer, x, grad_scale, p, st, g_v);
    }
  }

 private:
  // Staging scratch of the backward and the sign gradients: big [ntok][max(m, n)]
  // (dy⊙h·gs or x⊙g), small [ntok][r] (b⊙ℓ·gs), small2 [ntok][r] (a⊙ℓ for
  // G_U, apart from small so that a staged b⊙ℓ·gs survives it).
  struct Staged {
    __half *big, *small, *small2;
  };
  Staged staging(const BlrLayer<float>& layer, index_t ntok) {
    return {half_scratch(act_, ntok * std::max(layer.m, layer.n)), half_scratch(act_r_, ntok * layer.r),
            half_scratch(act_r2_, ntok * layer.r)};
  }

  // Path p of the backward; leaves dy⊙h·gs in st.big and b⊙ℓ·gs in st.small.
  void backward_path(const BlrLayer<float>& layer, CView<float> x, CView<float> dy, const BlrSaved<float>& saved,
                     View<float> dx, float grad_scale, View<float> b_out, index_t p, const Staged& st) {
    const index_t m = layer.m, n = layer.n, r = layer.r, ntok = x.dim(0);
    ensure_path_caches(static_cast<index_t>(layer.paths.size()));
    const float inv_scale = 1.0f / grad_scale;
    const BlrPath<float>& path = layer.paths[static_cast<std::size_t>(p)];
    PlaneCache& pu = planes_u_[static_cast<std::size_t>(p)];
    PlaneCache& pv = planes_v_[static_cast<std::size_t>(p)];
    pu.update(ctx_, path.sign_u, r);
    pv.update(ctx_, path.sign_v, r);
    const float* a = saved.a.data + p * ntok * r;
    const float* c = saved.c.data + p * ntok * m;
    float* b = b_out.data ? b_out.data + p * ntok * r : b_.get(ctx_.memory, ntok * r);
    // dyh = f16(dy⊙h·gs), dh += Σ_t dy⊙c
    row_pass<RowPass::stage>(dy.data, c, true, path.h.data, grad_scale, ntok, m, st.big, nullptr, false, path.dh.data);
    gemm_.run(st.big, pu.plane_t(), inv_scale, b, ntok, r, m, r);  // b = (dy⊙h)·S_U
    // bl = f16(b⊙ℓ·gs), dℓ += Σ_t a⊙b
    row_pass<RowPass::stage>(a, b, false, path.l.data, grad_scale, ntok, r, st.small, nullptr, false, path.dl.data);
    // dx' = (b⊙ℓ)·S_Vᵀ; the first path writes it into dx and scales it there
    float* dxp = p == 0 ? dx.data : dxp_.get(ctx_.memory, ntok * n);
    gemm_.run(st.small, pv.plane(), inv_scale, dxp, ntok, n, r, n);
    // dg += Σ_t x⊙dx', dx (= or +=) g⊙dx'
    row_pass<RowPass::scale>(x.data, dxp, false, path.g.data, 1.0f, ntok, n, nullptr, dx.data, p > 0, path.dg.data);
  }

  // G_U of path p = (dy⊙h·gs)ᵀ·(a⊙ℓ) / gs from dy⊙h·gs staged in st.big.
  void sign_grad_u(const BlrLayer<float>& layer, CView<float> a, float grad_scale, index_t p, const Staged& st,
                   View<float> g_u) {
    const index_t m = layer.m, r = layer.r, ntok = a.dim(1);
    launch_stage(a.data + p * ntok * r, r, 0, layer.paths[static_cast<std::size_t>(p)].l.data, 1.0f, ntok, ntok, r,
                 st.small2, ctx_.stream.get());
    gemm_.run_tokens(st.big, st.small2, 1.0f / grad_scale, g_u.data + p * m * r, m, r, ntok, r);
  }

  // G_V of path p = (x⊙g)ᵀ·(b⊙ℓ·gs) / gs from b⊙ℓ·gs staged in st.small
  // (st.big is overwritten: the stream orders it after G_U's GEMM).
  void sign_grad_v(const BlrLayer<float>& layer, CView<float> x, float grad_scale, index_t p, const Staged& st,
                   View<float> g_v) {
    const index_t n = layer.n, r = layer.r, ntok = x.dim(0);
    launch_stage(x.data, n, 0, layer.paths[static_cast<std::size_t>(p)].g.data, 1.0f, ntok, ntok, n, st.big,
                 ctx_.stream.get());
    gemm_.run_tokens(st.big, st.small, 1.0f / grad_scale, g_v.data + p * n * r, n, r, ntok, r);
  }

  void ensure_path_caches(index_t paths) {
    if (planes_u_.size() < static_cast<std::size_t>(paths)) {
      planes_u_.resize(static_cast<std::size_t>(paths));
      planes_v_.resize(static_cast<std::size_t>(paths));
    }
  }

  __half* half_scratch(Scratch<f16>& buf, index_t n) { return reinterpret_cast<__half*>(buf.get(ctx_.memory, n)); }

  // One fused pass over [rows][k] (see rows_colsum_kernel), then
  // sum[j] += Σ_t p[t][j]·q[t][j].
  template <RowPass kPass>
  void row_pass(const float* p, const float* q, bool stage_p, const float* col, float scale, index_t rows, index_t k,
                __half* dst, float* out, bool accumulate, float* sum) {
    const cudaStream_t s = ctx_.stream.get();
    const int v = vector_width(k, {p, q, col, dst, out});
    const index_t tiles = (k + kColTile * v - 1) / (kColTile * v);
    const ColSumChunks ch = col_sum_chunks(rows, tiles);
    const index_t rows_per_block = ch.rows, blocks = ch.chunks;
    double* partial = partial_.get(ctx_.memory, blocks * k);
    const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(blocks)), block(kColTile, kRowLanes);
    if (v == 4) {
      rows_colsum_kernel<kPass, 4><<<grid, block, 0, s>>>(p, q, stage_p, col, scale, rows, k, rows_per_block, dst, out,
                                                          accumulate, partial);
    } else {
      rows_colsum_kernel<kPass, 1><<<grid, block, 0, s>>>(p, q, stage_p, col, scale, rows, k, rows_per_block, dst, out,
                                                          accumulate, partial);
    }
    BR_CUDA_LAUNCHED();
    launch_col_sum_finish(partial, blocks, k, sum, s);
  }

  Context& ctx_;
  LtGemm gemm_;
  std::vector<PlaneCache> planes_u_, planes_v_;  // per path
  Scratch<f16> act_;     // staged [ntok][max(m, n)]: x⊙g or dy⊙h·gs
  Scratch<f16> act_r_;   // staged [ntok][r]: a⊙ℓ or b⊙ℓ·gs
  Scratch<f16> act_r2_;  // staged [ntok][r]: a⊙ℓ for G_U while act_r_ holds b⊙ℓ·gs
  Scratch<float> b_;     // b of one path when the caller does not keep it [ntok][r]
  Scratch<float> dxp_;   // dx' of paths after the first [ntok][n]
  Scratch<double> partial_;  // column-sum partials [blocks][width]
};

}  // namespace

std::unique_ptr<BlrOps<float>> make_blr_ops(Context& ctx) { return std::make_unique<CudaBlrOps>(ctx); }

}  // namespace bitrank::cuda
