// CPU backend of the BLR layer (contract: include/bitrank/ops/blr.hpp).
//
// Each path runs its four GEMMs (two forward, two backward; two more for the
// sign gradients) through OpenBLAS sgemm on f16 *values* held in f32 (see
// cpu/kernels.hpp). Each call writes the GEMMs' planes f16(±h_j/s_h),
// f16(±g_i/s_g) (blr.hpp's Numerics) straight from the bitmaps, a bit
// choosing the sign of its row's value (so bits rewritten in place by the
// sign optimizer are always seen, and no ±1 plane is kept or compared), so
// that y and dx are the GEMMs' own outputs:
//
//   forward   stage x (once) → GEMM a = x·(g⊙S_V)·s_g → stage a⊙ℓ
//             → GEMM y (=, +=) (a⊙ℓ)·(h⊙S_U)ᵀ·s_h
//   backward  stage dy·gs and x (once)
//             GEMM b = (dy·gs)·(h⊙S_U)·s_h/gs
//             stage b⊙ℓ·gs with dℓ += Σ a⊙b → GEMM dx (=, +=) (b⊙ℓ·gs)·(g⊙S_V)ᵀ·s_g/gs
//             stage a⊙ℓ → GEMM E_U = (dy·gs)ᵀ·(a⊙ℓ)/gs [m][r];  dh += Σ_k S_U⊙E_U  (G_U = h⊙E_U)
//             GEMM E_V = xᵀ·(b⊙ℓ·gs)/gs [n][r];              dg += Σ_k S_V⊙E_V  (G_V = g⊙E_V)
//
// E_U and E_V are the sign gradients before their row scales: the backward
// forms them for dh and dg, blr_backward_sign_grad hands them out as G_U,
// G_V, blr_sign_grad forms them from a and b without touching dh, dg.
// Column sums are f32 partials over row blocks (one block per thread, fixed
// for a given pool size, so results are deterministic), added in block
// order. Staging, the f16 copy of x kept for the backward (BlrSaved::xs)
// and its widening use the F16C conversions where the CPU has them (the
// same bits as round_f16 / to_f16 / to_f32, checked against them), and the
// planes are written 32 signs at a time from a word (kernels.hpp's
// signed_row): the build targets baseline x86-64, where the scalar forms
// of these passes cost the layer ~10 % against its six GEMMs.
// Scratch (planes, staged operands, partials) lives in the ops object and
// only grows: a call in steady state allocates nothing. One ops object
// serves one caller at a time.
//
// blr_infer reads the signs directly for up to kBlrInferBitTokens (16) tokens
// (cpu/blr_infer.cpp, from the paths' sign blocks, made per call where a
// path has none) and runs the forward's GEMMs above; f16 scales
// (BlrPath::scales16) are widened to f32 first, once per call (F16C, exact),
// so both paths and every SIMD level read the same f32 scales.
#include <algorithm>
#include <bit>
#include <cmath>
#include <vector>

#include "bitrank/memory.hpp"
#include "cpu/blr_infer.hpp"
#include "cpu/kernels.hpp"
#include "cpu/ops.hpp"

namespace bitrank::cpu {
namespace {

// ---- grow-only scratch --------------------------------------------------

class Scratch {
 public:
  float* get(index_t n) {
    if (static_cast<std::size_t>(n) > buf_.size()) buf_ = Buffer<float>(host_memory(), static_cast<std::size_t>(n));
    return buf_.data();
  }

 private:
  Buffer<float> buf_;
};

class CpuBlrOps final : public BlrOps<float> {
 public:
  explicit CpuBlrOps(ThreadPool& pool) : pool_(pool) {}
  bool reads_sign_blocks() const override { return true; }

 protected:
  void blr_forward_impl(const BlrLayer<float>& layer, CView<float> x, View<float> y,
                        const BlrSaved<float>& saved) override {
    const index_t m = layer.m, n = layer.n, r = layer.r, ntok = x.dim(0);
    const index_t paths = static_cast<index_t>(layer.paths.size());
    float* xs = act_x_.get(ntok * n);
    float* al = act_r_.get(ntok * r);
    stage_rows(x.data, nullptr, 1.0f, ntok, n, xs);
    if (saved.xs.data) convert_rows(xs, ntok * n, saved.xs.data);
    for (index_t p = 0; p < paths; ++p) {
      const BlrPath<float>& path = layer.paths[static_cast<std::size_t>(p)];
      const ScaledPlanes sp = scaled_planes(layer, p);  // (BlrSaved::planes stays unused on the CPU)
      float* a = saved.a.data + p * ntok * r;
      sgemm(false, false, ntok, r, n, sp.s_g, xs, n, sp.v, r, 0.0f, a, r);  // a = x·(g⊙S_V)
      stage_rows(a, path.l.data, 1.0f, ntok, r, al);
      // y (=, +=) (a⊙ℓ)·(h⊙S_U)ᵀ
      sgemm(false, true, ntok, m, r, sp.s_h, al, r, sp.u, r, p > 0 ? 1.0f : 0.0f, y.data, m);
    }
  }

  // Few tokens: the bit-reading kernel, its tables in scratch; more: the
  // forward, its a in the same scratch. f16 scales are widened first
  // (exact), so both read f32 scales.
  void blr_infer_impl(const BlrLayer<float>& given, CView<float> x, View<float> y) override {
    const BlrLayer<float> layer = with_wide_scales(
        given, widened_paths_, [&](index_t count) { return scales_.get(count); },
        [](const f16* src, index_t count, float* dst) { f32_from_f16(src, count, dst); });
    const index_t ntok = x.dim(0), paths = static_cast<index_t>(layer.paths.size());
    if (ntok <= kBlrInferBitTokens) {
      float* tables = infer_.get(blr_infer_scratch(paths, ntok, layer.n, layer.r));
      return blr_infer_bits(with_sign_blocks(layer), x.data, ntok, y.data, tables, simd_, pool_);
    }
    float* a = infer_.get(paths * ntok * layer.r);
    blr_forward_impl(with_bitmaps(layer), x, y, BlrSaved<float>{View<float>(a, Shape{paths, ntok, layer.r})});
  }

  // `layer` with bitmaps on every path: made here, per call, for a path that
  // has only sign blocks (a loaded model's, read by the forward's planes).
  BlrLayer<float> with_bitmaps(const BlrLayer<float>& layer) {
    if (std::all_of(layer.paths.begin(), layer.paths.end(), [](const BlrPath<float>& p) { return p.bitmaps(); }))
      return layer;
    const index_t m = layer.m, n = layer.n, r = layer.r, words = r / 32;
    sign_forms_.resize(static_cast<std::size_t>(static_cast<index_t>(layer.paths.size()) * (m + n) * words));
    std::uint32_t* at = sign_forms_.data();
    formed_paths_.assign(layer.paths.begin(), layer.paths.end());
    for (BlrPath<float>& path : formed_paths_) {
      if (path.bitmaps()) continue;
      sign_bitmap_from_blocks_u(path.sign_u_blocks.data, m, r, at);
      sign_bitmap_from_blocks_vt(path.sign_vt_blocks.data, n, r, at + m * words);
      path.sign_u = CView<std::uint32_t>(at, Shape{m, words});
      path.sign_v = CView<std::uint32_t>(at + m * words, Shape{n, words});
      path.sign_u_blocks = path.sign_vt_blocks = {};
      at += (m + n) * words;
    }
    return BlrLayer<float>{m, n, r, formed_paths_};
  }

  // `layer` with sign blocks on every path: made here, per call, for a path
  // that has none (a loaded model's paths carry them).
  BlrLayer<float> with_sign_blocks(const BlrLayer<float>& layer) {
    if (std::all_of(layer.paths.begin(), layer.paths.end(), [](const BlrPath<float>& p) { return p.sign_blocks(); }))
      return layer;
    const index_t m = layer.m, n = layer.n, r = layer.r;
    const index_t words = sign_blocks_words(m, n, r);
    sign_forms_.resize(static_cast<std::size_t>(static_cast<index_t>(layer.paths.size()) * words));
    std::uint32_t* at = sign_forms_.data();
    formed_paths_.assign(layer.paths.begin(), layer.paths.end());
    for (BlrPath<float>& path : formed_paths_) {
      if (path.sign_blocks()) continue;
      make_sign_blocks(path.sign_u.data, path.sign_v.data, m, n, r, at);
      path.point_sign_blocks(at, m, n, r);
      at += words;
    }
    return BlrLayer<float>{m, n, r, formed_paths_};
  }

  void blr_backward_impl(const BlrLayer<float>& layer, CView<float> x, CView<float> dy, const BlrSaved<float>& saved,
                         View<float> dx, float grad_scale, View<float> b_out) override {
    const Staged st = staging(layer, x, dy, grad_scale, saved.xs);
    for (index_t p = 0; p < static_cast<index_t>(layer.paths.size()); ++p) {
      backward_path(layer, x, saved, dx, grad_scale, b_out, p, st);
      token_sums(layer, saved.a, grad_scale, x.dim(0), p, st, {}, {}, true);
    }
  }

  void blr_sign_grad_impl(const BlrLayer<float>& layer, CView<float> x, CView<float> dy, CView<float> a,
                          CView<float> b, float grad_scale, View<float> g_u, View<float> g_v) override {
    const index_t r = layer.r, ntok = x.dim(0);
    const Staged st = staging(layer, x, dy, grad_scale);
    for (index_t p = 0; p < static_cast<index_t>(layer.paths.size()); ++p) {
      stage_rows(b.data + p * ntok * r, layer.paths[static_cast<std::size_t>(p)].l.data, grad_scale, ntok, r, st.small);
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
      backward_path(layer, x, saved, dx, grad_scale, b, p, st);
      token_sums(layer, saved.a, grad_scale, x.dim(0), p, st, g_u, g_v, true);
    }
  }

 private:
  // The staged operands of the backward and the sign gradients, shared by
  // the paths: dys = f16(dy·gs) [ntok][m], xs = f16(x) [ntok][n]; and per
  // path small [ntok][r] (b⊙ℓ·gs) and small2 [ntok][r] (a⊙ℓ for E_U, apart
  // from small so that a staged b⊙ℓ·gs survives it).
  struct Staged {
    float *dys, *xs, *small, *small2;
  };
  // With `xs` (the forward's f16(x), BlrSaved) x is widened from it, not staged.
  Staged staging(const BlrLayer<float>& layer, CView<float> x, CView<float> dy, float grad_scale,
                 CView<f16> xs = {}) {
    const index_t ntok = x.dim(0);
    const Staged st{act_dy_.get(ntok * layer.m), act_x_.get(ntok * layer.n), act_r_.get(ntok * layer.r),
                    act_r2_.get(ntok * layer.r)};
    stage_rows(dy.data, nullptr, grad_scale, ntok, layer.m, st.dys);
    if (xs.data) {
      widen_rows(xs.data, ntok * layer.n, st.xs);
    } else {
      stage_rows(x.data, nullptr, 1.0f, ntok, layer.n, st.xs);
    }
    return st;
  }

  // dst[i] = the f16 of src[i] (src holds f16 values: exact), and back.
  void convert_rows(const float* src, index_t count, f16* dst) {
    pool_.parallel_for(count, [=](index_t i0, index_t i1) { f16_from_f32(src + i0, i1 - i0, dst + i0); }, 16384);
  }
  void widen_rows(const f16* src, index_t count, float* dst) {
    pool_.parallel_for(count, [=](index_t i0, index_t i1) { f32_from_f16(src + i0, i1 - i0, dst + i0); }, 16384);
  }

  // Path p's GEMM planes f16(±h_j/s_h) [m][r] and f16(±g_i/s_g) [n][r] with
  // their powers of two (blr.hpp's Numerics); valid until the next call.
  struct ScaledPlanes {
    const float *u, *v;
    float s_h, s_g;
  };
  // Written from the bitmaps every time, in the backward too: one pass over
  // the plane, which costs less than keeping it in BlrSaved::planes (an f16
  // copy written by the forward and widened by the backward: two passes).
  ScaledPlanes scaled_planes(const BlrLayer<float>& layer, index_t p) {
    const BlrPath<float>& path = layer.paths[static_cast<std::size_t>(p)];
    ScaledPlanes sp{};
    sp.s_h = plane_scale(path.h);
    sp.s_g = plane_scale(path.g);
    sp.u = scale_plane(path.sign_u, layer.r, path.h.data, sp.s_h, plane_u_.get(layer.m * layer.r));
    sp.v = scale_plane(path.sign_v, layer.r, path.g.data, sp.s_g, plane_v_.get(layer.n * layer.r));
    return sp;
  }

  // blr_plane_scale_bits of max_i |v_i| (std::fmax: a NaN is passed over).
  static float plane_scale(CView<float> v) {
    float mx = 0.0f;
    for (index_t i = 0; i < v.numel(); ++i) mx = std::fmax(mx, std::fabs(v.data[i]));
    return std::bit_cast<float>(blr_plane_scale_bits(std::bit_cast<std::uint32_t>(mx)));
  }

  // out[j][k] = ±f16(v_j/s), + where bit k of row j is set: the sign bit of
  // the row's value flipped for a clear bit, which is pm·f16(v_j/s) for the
  // ±1 plane pm exactly (−1·x = −x), without forming pm.
  const float* scale_plane(CView<std::uint32_t> bits, index_t r, const float* v, float s, float* out) {
    const float inv = 1.0f / s;  // a power of two: exact
    const index_t words = bits.dim(1);
    const std::uint32_t* b = bits.data;
    pool_.parallel_for(
        bits.dim(0),
        [=](index_t j0, index_t j1) {
          for (index_t j = j0; j < j1; ++j)
            signed_row(b + j * words, std::bit_cast<std::uint32_t>(round_f16(v[j] * inv)), r, out + j * r);
        },
        row_grain(r));
    return out;
  }

  // Path p of the backward but its token sums: b, dℓ and dx; leaves b⊙ℓ·gs in st.small.
  void backward_path(const BlrLayer<float>& layer, CView<float> x, const BlrSaved<float>& saved, View<float> dx,
                     float grad_scale, View<float> b_out, index_t p, const Staged& st) {
    const index_t m = layer.m, n = layer.n, r = layer.r, ntok = x.dim(0);
    const float inv_scale = 1.0f / grad_scale;
    const BlrPath<float>& path = layer.paths[static_cast<std::size_t>(p)];
    const ScaledPlanes sp = scaled_planes(layer, p);
    const float* a = saved.a.data + p * ntok * r;
    float* b = b_out.data ? b_out.data + p * ntok * r : b_.get(ntok * r);
    sgemm(false, false, ntok, r, m, sp.s_h * inv_scale, st.dys, m, sp.u, r, 0.0f, b, r);  // b = dy·(h⊙S_U)
    // bl = f16(b⊙ℓ·gs), dℓ += Σ_t a⊙b
    stage_and_colsum(b, path.l.data, grad_scale, st.small, a, ntok, r, path.dl.data);
    // dx (=, +=) (b⊙ℓ)·(g⊙S_V)ᵀ
    sgemm(false, true, ntok, n, r, sp.s_g * inv_scale, st.small, r, sp.v, r, p > 0 ? 1.0f : 0.0f, dx.data, n);
  }

  // The token sums of path p, with b⊙ℓ·gs staged in st.small:
  // E_U = (dy·gs)ᵀ·(a⊙ℓ) / gs, E_V = xᵀ·(b⊙ℓ·gs) / gs; with `grads`,
  // dh += Σ_k S_U⊙E_U and dg += Σ_k S_V⊙E_V; G_U = h⊙E_U and G_V = g⊙E_V
  // when g_u, g_v are given (else E_U, E_V go to scratch).
  void token_sums(const BlrLayer<float>& layer, CView<float> a, float grad_scale, index_t ntok, index_t p,
                  const Staged& st, View<float> g_u, View<float> g_v, bool grads) {
    const index_t m = layer.m, n = layer.n, r = layer.r;
    const float inv_scale = 1.0f / grad_scale;
    const BlrPath<float>& path = layer.paths[static_cast<std::size_t>(p)];
    float* eu = g_u.data ? g_u.data + p * m * r : e_u_.get(m * r);
    float* ev = g_v.data ? g_v.data + p * n * r : e_v_.get(n * r);
    stage_rows(a.data + p * ntok * r, path.l.data, 1.0f, ntok, r, st.small2);
    sgemm(true, false, m, r, ntok, inv_scale, st.dys, m, st.small2, r, 0.0f, eu, r);
    signed_row_sums(path.sign_u, eu, r, grads ? path.dh.data : nullptr, g_u.data ? path.h.data : nullptr);
    sgemm(true, false, n, r, ntok, inv_scale, st.xs, n, st.small, r, 0.0f, ev, r);
    signed_row_sums(path.sign_v, ev, r, grads ? path.dg.data : nullptr, g_v.data ? path.g.data : nullptr);
  }

  // Rows per parallel chunk so that a chunk holds ≥ ~16k elements.
  static index_t row_grain(index_t width) { return std::max<index_t>(1, 16384 / std::max<index_t>(width, 1)); }

  // Row blocks for passes that also sum columns: one per thread at most.
  index_t row_blocks(index_t rows, index_t width) const {
    const index_t want = (rows * width + 16383) / 16384;
    return std::clamp<index_t>(want, 1, std::min<index_t>(rows, pool_.size()));
  }


  // dst[t][:] = f16(src[t][:]⊙col·scale), t < rows (contiguous rows of k).
  void stage_rows(const float* src, const float* col, float scale, index_t rows, index_t k, float* dst) {
    stage_rounded(src, k, col, scale, rows, k, dst, k, pool_);
  }

  // dst = f16(src⊙col·scale) and sum[j] += Σ_t other[t][j]·src[t][j], all [rows][k].
  void stage_and_colsum(const float* src, const float* col, float scale, float* dst, const float* other, index_t rows,
                        index_t k, float* sum) {
    const index_t blocks = row_blocks(rows, k);
    float* partial = partial_.get(blocks * k);
    struct Job {
      const float *src, *col;
      float scale;
      float* dst;
      const float* other;
      index_t rows, k, blocks;
      float* partial;
    } job{src, col, scale, dst, other, rows, k, blocks, partial};
    pool_.parallel_for(blocks, [&job](index_t b0, index_t b1) {
      const index_t k = job.k;
      for (index_t blk = b0; blk < b1; ++blk) {
        float* acc = job.partial + blk * k;
        std::fill(acc, acc + k, 0.0f);
        const index_t t0 = job.rows * blk / job.blocks, t1 = job.rows * (blk + 1) / job.blocks;
        for (index_t t = t0; t < t1; ++t) {
          const float* st = job.src + t * k;
          stage_row(st, job.col, job.scale, job.dst + t * k, k);
          const float* ot = job.other + t * k;
          for (index_t j = 0; j < k; ++j) acc[j] += ot[j] * st[j];
        }
      }
    });
    add_partials(partial, blocks, k, sum);
  }

  // Per row j of e [rows][r]: sum[j] += Σ_k S[j][k]·e[j][k] (when sum is
  // given; S the ±1 signs of the bitmap, in dot_lanes' order), then
  // e[j][:] ×= scale[j] (when given).
  void signed_row_sums(CView<std::uint32_t> bits, float* e, index_t r, float* sum, const float* scale) {
    if (!sum && !scale) return;
    struct Job {
      CView<std::uint32_t> bits;
      float* e;
      index_t r;
      float* sum;
      const float* scale;
    } job{bits, e, r, sum, scale};
    pool_.parallel_for(
        bits.dim(0),
        [&job](index_t j0, index_t j1) {
          const index_t r = job.r;
          for (index_t j = j0; j < j1; ++j) {
            float* ej = job.e + j * r;
            if (job.sum) job.sum[j] += signed_dot_lanes(job.bits.data + j * job.bits.dim(1), ej, r);
            if (job.scale)
              for (index_t k = 0; k < r; ++k) ej[k] *= job.scale[j];
          }
        },
        row_grain(r));
  }

  static void add_partials(const float* partial, index_t blocks, index_t k, float* sum) {
    for (index_t j = 0; j < k; ++j) {
      float s = 0;
      for (index_t blk = 0; blk < blocks; ++blk) s += partial[blk * k + j];
      sum[j] += s;
    }
  }

  ThreadPool& pool_;
  const SimdLevel simd_ = best_simd_level();  // blr_infer's kernel
  Scratch infer_;    // blr_infer's tables (bit-reading kernel) or a (forward) [P][ntok][r]
  Scratch scales_;   // blr_infer's widened f16 scales [P][m + r + n]
  std::vector<BlrPath<float>> widened_paths_;  // the paths over scales_
  std::vector<BlrPath<float>> formed_paths_;  // the paths over sign_forms_
  std::vector<std::uint32_t> sign_forms_;     // sign blocks or bitmaps made per call (with_sign_blocks, with_bitmaps)
  Scratch plane_u_;  // f16(±h/s_h) [m][r] of the path at hand
  Scratch plane_v_;  // f16(±g/s_g) [n][r]
  Scratch act_x_;    // staged x [ntok][n]
  Scratch act_dy_;   // staged dy·gs [ntok][m]
  Scratch act_r_;    // staged [ntok][r] operand: a⊙ℓ or b⊙ℓ·gs
  Scratch act_r2_;   // staged [ntok][r]: a⊙ℓ for G_U while act_r_ holds b⊙ℓ·gs
  Scratch b_;        // b of one path when the caller does not keep it
  Scratch e_u_;      // E_U of one path [m][r] when G_U is not wanted
  Scratch e_v_;      // E_V of one path [n][r] when G_V is not wanted
  Scratch partial_;  // column-sum partials [blocks][width]
};

}  // namespace

std::unique_ptr<BlrOps<float>> make_blr_ops(ThreadPool& pool) { return std::make_unique<CpuBlrOps>(pool); }

}  // namespace bitrank::cpu
