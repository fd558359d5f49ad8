// The binary low-rank (BLR) layer (DESIGN §1, seed 000): forward, backward
// and the sign gradients.
//
// A layer of shape m×n is a sum of P paths, each
//     Ŵ_p = diag(h)·S_U·diag(ℓ)·S_Vᵀ·diag(g)
// with S_U [m][r], S_V [n][r] ±1 sign bitmaps (bitmap.hpp layout, r a
// multiple of 32) and scales h[m], ℓ[r], g[n]. Activations are row-major
// [ntok][features]; per-path tensors stack the paths on a leading dimension.
//
//   forward   a = (x⊙g)·S_V [ntok][r]     y = Σ_p h⊙((a⊙ℓ)·S_Uᵀ) [ntok][m]   (y overwritten)
//   infer     the forward's y alone (no tape: nothing saved), for inference
//   backward  b = (dy⊙h)·S_U [ntok][r]   dℓ += Σ_t a⊙b     dx = Σ_p g⊙((b⊙ℓ)·S_Vᵀ)
//             E_U = dyᵀ·(a⊙ℓ) [m][r]      dh_j += Σ_k S_U[j][k]·E_U[j][k]   (= Σ_t dy⊙c,
//             E_V = xᵀ·(b⊙ℓ) [n][r]       dg_i += Σ_k S_V[i][k]·E_V[i][k]    = Σ_t x⊙dx')
//   sign grad G_U = diag(h)·E_U [m][r]     G_V = diag(g)·E_V [n][r]          (overwritten)
//
// with c = (a⊙ℓ)·S_Uᵀ and dx' = (b⊙ℓ)·S_Vᵀ of DESIGN §1: dh and dg are taken
// from the same token sums as the sign gradients, so neither c nor dx' has
// to be kept (the forward saves a alone) or written (y and dx come straight
// out of their GEMMs: see Numerics).
//
// Overwrite/accumulate: y, dx, the saved a, the optional b and G_U, G_V are
// overwritten; the parameter gradients dh, dℓ, dg accumulate. The backward
// can hand out b (G_V needs it).
//
// Numerics: the f64 reference is exact. The f32 backends follow the f16
// GEMM of gemm.hpp, with the outer scales h and g folded into the sign
// planes so that y and dx come straight out of their GEMMs: per path, the
// scaled planes are f16(S_U[j][k]·h_j/s_h) and f16(S_V[i][k]·g_i/s_g), where
// s_h, s_g are powers of two (blr_plane_scale_bits) that bring h and g into
// f16's range, and the GEMM output is multiplied by s_h resp. s_g. Every
// activation operand is staged to f16 as f16(f32(src·col)·scale): x (scale
// 1) and a⊙ℓ for the forward's two GEMMs, dy·grad_scale and b⊙ℓ·grad_scale
// for the backward's two, the same dy·grad_scale with a⊙ℓ for E_U and x with
// b⊙ℓ·grad_scale for E_V; sums are f32 and each GEMM output is multiplied by
// 1/grad_scale where a staged operand carries it. grad_scale is a power of
// two that keeps small gradients out of the f16 subnormals. dh and dg are
// f32 row sums over k of ±E_U, ±E_V with the ±1 signs (fixed order); G_U =
// f32(h·E_U), G_V = f32(g·E_V).
//
// Numerics of blr_infer: the f64 reference is its forward (exact). The CPU
// and CUDA backends, for at most kBlrInferBitTokens (16) tokens, read the
// bitmaps directly in f32 with no f16 rounding. CPU (cpu/blr_infer.hpp), per
// path and token, with x'_i = f32(x_i·g_i) (0 past n) and sums over groups
// of 4 (G = ((±v_0 ± v_1) ± v_2) ± v_3 for the group's 4 values):
//     a_k = (A_0 + A_1) + (A_2 + A_3)  A_q: the G of the x' groups g ≡ q mod 4,
//                                      added in order of g (± from S_V[i][k])
//     c_k = f32(ℓ_k·a_k)
//     s_j = the same over the groups of c (± from S_U[j][k])
//     y_j = Σ_p f32(h_j·s_j)           paths added in order, no fused multiply-add
// the same bits whatever its SIMD width or thread count. CUDA (cuda/blr_infer.cu):
// a_k as chunks of inputs each summed in order of i, the chunk sums added in
// order; s_j as L lane sums (L = 4…32 by the rank's words; lane i walks the
// bits of words i, i+L, … from bit i on) added in a shuffle tree; the same
// bits on every run, not the CPU's. Both: relative error ~1e-6 of ‖y‖ at a
// model's shapes (f32 sums over n and r terms). Above that token count
// blr_infer returns blr_forward's y (f16 operands: 3e-3).
//
// f16 scales (BlrPath::scales16, blr_infer only): a loaded model keeps h, ℓ,
// g as the bitrank file stores them, in f16. blr_infer reads them as their
// exact f32 (f64 on the reference) values, widened once per call, so its
// result is bit for bit the one with f32 scales equal to those f16 values:
// against the f32 scales a model had before it was saved, the only change
// is that rounding of each scale to f16 (relative 2^-11), which the saved
// file has always made. The other ops take T scales only.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "bitrank/ops/bitmap.hpp"
#include "bitrank/ops/check.hpp"
#include "bitrank/tensor.hpp"

namespace bitrank {

// The most tokens blr_infer reads the bitmaps for (CPU and CUDA); above, it
// runs blr_forward's GEMMs (cpu/blr_infer.hpp gives the CPU's measurement).
inline constexpr index_t kBlrInferBitTokens = 16;

#if defined(__CUDACC__)
#define BITRANK_HOST_DEVICE __host__ __device__
#else
#define BITRANK_HOST_DEVICE
#endif

// The power of two s that a path's scaled sign plane divides its outer scale
// vector v (h or g) by, as f32 bits, from the bits of max_i |v_i|: s = 2^e
// where max = f·2^e, f ∈ [0.5, 1), so every |v_i|/s < 1 and values down to
// 2^-14 of the largest stay f16 normals; s = 1 where the max is 0 or not
// finite (an Inf or NaN in v then reaches the outputs). Both backends use
// this one rule: their planes are bit-identical.
BITRANK_HOST_DEVICE constexpr std::uint32_t blr_plane_scale_bits(std::uint32_t max_bits) {
  const std::uint32_t e = max_bits >> 23;  // biased exponent (max ≥ 0: no sign bit)
  if (max_bits == 0 || e >= 255) return 0x3f800000u;
  return (e < 253 ? e + 1 : 254) << 23;  // 2^(e − 126), capped at 2^127
}

// One path: signs, scales and (for the backward) their gradients.
template <class T>
struct BlrPath {
  CView<std::uint32_t> sign_u;  // S_U bitmap [m][r/32]
  CView<std::uint32_t> sign_v;  // S_V bitmap [n][r/32]
  CView<T> h;                   // [m]
  CView<T> l;                   // ℓ [r]
  CView<T> g;                   // [n]
  View<T> dh;                   // [m], accumulated by blr_backward (unused by the other ops)
  View<T> dl;                   // [r]
  View<T> dg;                   // [n]
  // blr_infer only: h, ℓ, g in f16, [m + r + n] in that order, in place of
  // h, l and g (which are then empty); see Numerics.
  CView<f16> scales16 = {};
  // blr_infer only, optional: the signs as sign blocks (ops/bitmap.hpp), u
  // [⌈m/16⌉][r/32][16] and vt [r/16][⌈n/32⌉][16], which the CPU's kernel
  // reads. A model on the CPU keeps only these (sign_u and sign_v empty);
  // given bitmaps only, the CPU makes them per call. Other backends read
  // sign_u and sign_v.
  CView<std::uint32_t> sign_u_blocks = {};
  CView<std::uint32_t> sign_vt_blocks = {};
  bool half_scales() const { return scales16.data != nullptr || scales16.rank() > 0; }
  bool sign_blocks() const { return sign_u_blocks.data != nullptr || sign_u_blocks.rank() > 0; }
  // Points the sign blocks at `at`, where make_sign_blocks wrote (or will
  // write) those of an m×n layer of rank r; a null `at` gives null views of
  // the right shapes (a model being measured).
  void point_sign_blocks(const std::uint32_t* at, index_t m, index_t n, index_t r) {
    sign_u_blocks = CView<std::uint32_t>(at, sign_blocks_u_shape(m, r));
    sign_vt_blocks = CView<std::uint32_t>(at ? at + sign_blocks_u_words(m, r) : nullptr, sign_blocks_vt_shape(n, r));
  }
  bool bitmaps() const { return sign_u.data != nullptr || sign_u.rank() > 0 || sign_v.data != nullptr || sign_v.rank() > 0; }
};

// A layer of shape m×n and rank r per path.
template <class T>
struct BlrLayer {
  index_t m = 0, n = 0, r = 0;
  std::span<const BlrPath<T>> paths;
};

// What blr_forward keeps for blr_backward (P = number of paths).
template <class T>
struct BlrSaved {
  View<T> a;  // [P][ntok][r]  (x⊙g)·S_V
  // Optional [ntok][n]: blr_forward writes f16(x) there (round to nearest
  // even: the f32 backends' staging of x) and blr_backward /
  // blr_backward_sign_grad read it instead of staging x again. The f64
  // reference writes it and computes from x.
  View<f16> xs = {};
  // Optional [P][(m + n)·r]: a backend's blr_forward may keep each path's
  // GEMM planes there (the scaled signs of Numerics, in its own layout) for
  // its backward to reuse instead of expanding them again — the CUDA
  // backend does; the CPU backend writes them from the bitmaps each time,
  // which is cheaper there, and the f64 reference ignores it. Either way
  // the backward's results are those of the layer's bitmaps and scales.
  View<f16> planes = {};
};

template <class T>
class BlrOps {
 public:
  virtual ~BlrOps() = default;

  // y[ntok][m] = Σ_p h⊙((a_p⊙ℓ)·S_Uᵀ); saved.a written for every path.
  void blr_forward(const BlrLayer<T>& layer, CView<T> x, View<T> y, const BlrSaved<T>& saved) {
    constexpr std::string_view op = "blr_forward";
    check_layer(op, layer, false);
    const index_t ntok = tokens(op, x, layer.n);
    check::dense(op, "y", y, Shape{ntok, layer.m});
    check_saved(op, layer, ntok, saved);
    blr_forward_impl(layer, x, y, saved);
  }

  // y[ntok][m] = Σ_p h⊙((a_p⊙ℓ)·S_Uᵀ), a_p = (x⊙g)·S_V,p: blr_forward's
  // output with no tape (y overwritten; the scale gradients are not read).
  // Whether this backend's blr_infer reads sign blocks (BlrPath), so that a
  // model keeps them (WeightForm::sign_blocks).
  virtual bool reads_sign_blocks() const { return false; }

  void blr_infer(const BlrLayer<T>& layer, CView<T> x, View<T> y) {
    constexpr std::string_view op = "blr_infer";
    check_layer(op, layer, false, true);
    for (std::size_t p = 0; p < layer.paths.size(); ++p)
      check::require(layer.paths[p].bitmaps() || reads_sign_blocks(), op,
                     "path {} has only sign blocks, which this backend does not read", p);
    const index_t ntok = tokens(op, x, layer.n);
    check::dense(op, "y", y, Shape{ntok, layer.m});
    blr_infer_impl(layer, x, y);
  }

  // Parameter gradients of every path accumulate; dx[ntok][n] is
  // overwritten. `b` ([P][ntok][r]) receives b of every path when given
  // (a default-constructed view: not wanted). `saved` is what blr_forward
  // wrote for the same layer and x.
  void blr_backward(const BlrLayer<T>& layer, CView<T> x, CView<T> dy, const BlrSaved<T>& saved, View<T> dx,
                    float grad_scale, View<T> b = {}) {
    check_backward("blr_backward", layer, x, dy, saved, dx, grad_scale, b, false);
    blr_backward_impl(layer, x, dy, saved, dx, grad_scale, b);
  }

  // Sign gradients of every path: g_u [P][m][r], g_v [P][n][r] (overwritten)
  // from a (saved by blr_forward) and b (from blr_backward).
  void blr_sign_grad(const BlrLayer<T>& layer, CView<T> x, CView<T> dy, CView<T> a, CView<T> b, float grad_scale,
                     View<T> g_u, View<T> g_v) {
    constexpr std::string_view op = "blr_sign_grad";
    check_layer(op, layer, false);
    const index_t ntok = tokens(op, x, layer.n);
    const index_t paths = static_cast<index_t>(layer.paths.size());
    check::dense(op, "dy", dy, Shape{ntok, layer.m});
    check::dense(op, "a", a, Shape{paths, ntok, layer.r});
    check::dense(op, "b", b, Shape{paths, ntok, layer.r});
    check_sign_grads(op, layer, g_u, g_v);
    check_grad_scale(op, grad_scale);
    blr_sign_grad_impl(layer, x, dy, a, b, grad_scale, g_u, g_v);
  }

  // blr_backward (b required), then blr_sign_grad on that b, in one call:
  // the same results as the two calls (the backward forms E_U and E_V for
  // dh and dg anyway: this call hands them out as G_U, G_V).
  void blr_backward_sign_grad(const BlrLayer<T>& layer, CView<T> x, CView<T> dy, const BlrSaved<T>& saved,
                              View<T> dx, float grad_scale, View<T> b, View<T> g_u, View<T> g_v) {
    constexpr std::string_view op = "blr_backward_sign_grad";
    check_backward(op, layer, x, dy, saved, dx, grad_scale, b, true);
    check_sign_grads(op, layer, g_u, g_v);
    blr_backward_sign_grad_impl(layer, x, dy, saved, dx, grad_scale, b, g_u, g_v);
  }

 protected:
  // blr_infer's f16 scales for a backend: `layer` with each f16-scaled
  // path's scales widened by widen(src, count, dst) into alloc(count of
  // every path) ([P][m + r + n] of T) and read from there as h, l, g; the
  // paths kept in `paths`. `layer` itself when no path has f16 scales.
  template <class Alloc, class Widen>
  static BlrLayer<T> with_wide_scales(const BlrLayer<T>& layer, std::vector<BlrPath<T>>& paths, Alloc&& alloc,
                                      Widen&& widen) {
    if (std::none_of(layer.paths.begin(), layer.paths.end(), [](const BlrPath<T>& p) { return p.half_scales(); }))
      return layer;
    const index_t per_path = layer.m + layer.r + layer.n;
    T* s = alloc(static_cast<index_t>(layer.paths.size()) * per_path);
    paths.assign(layer.paths.begin(), layer.paths.end());
    for (BlrPath<T>& path : paths) {
      if (!path.half_scales()) continue;
      widen(path.scales16.data, per_path, s);
      path.h = CView<T>(s, Shape{layer.m});
      path.l = CView<T>(s + layer.m, Shape{layer.r});
      path.g = CView<T>(s + layer.m + layer.r, Shape{layer.n});
      path.scales16 = {};
      s += per_path;
    }
    return BlrLayer<T>{layer.m, layer.n, layer.r, paths};
  }

  virtual void blr_forward_impl(const BlrLayer<T>& layer, CView<T> x, View<T> y, const BlrSaved<T>& saved) = 0;
  virtual void blr_infer_impl(const BlrLayer<T>& layer, CView<T> x, View<T> y) = 0;
  virtual void blr_backward_impl(const BlrLayer<T>& layer, CView<T> x, CView<T> dy, const BlrSaved<T>& saved,
                                 View<T> dx, float grad_scale, View<T> b) = 0;
  virtual void blr_sign_grad_impl(const BlrLayer<T>& layer, CView<T> x, CView<T> dy, CView<T> a, CView<T> b,
                                  float grad_scale, View<T> g_u, View<T> g_v) = 0;
  virtual void blr_backward_sign_grad_impl(const BlrLayer<T>& layer, CView<T> x, CView<T> dy,
                                           const BlrSaved<T>& saved, View<T> dx, float grad_scale, View<T> b,
                                           View<T> g_u, View<T> g_v) {
    blr_backward_impl(layer, x, dy, saved, dx, grad_scale, b);
    blr_sign_grad_impl(layer, x, dy, saved.a, b, grad_scale, g_u, g_v);
  }

 private:
  // A backward's arguments (b checked when given, or when required).
  static void check_backward(std::string_view op, const BlrLayer<T>& layer, CView<T> x, CView<T> dy,
                             const BlrSaved<T>& saved, View<T> dx, float grad_scale, View<T> b, bool b_required) {
    check_layer(op, layer, true);
    const index_t ntok = tokens(op, x, layer.n);
    check::dense(op, "dy", dy, Shape{ntok, layer.m});
    check_saved(op, layer, ntok, saved);
    check::dense(op, "dx", dx, Shape{ntok, layer.n});
    if (b_required || b.data || b.rank() > 0)
      check::dense(op, "b", b, Shape{static_cast<index_t>(layer.paths.size()), ntok, layer.r});
    check_grad_scale(op, grad_scale);
  }
  static void check_sign_grads(std::string_view op, const BlrLayer<T>& layer, View<T> g_u, View<T> g_v) {
    const index_t paths = static_cast<index_t>(layer.paths.size());
    check::dense(op, "g_u", g_u, Shape{paths, layer.m, layer.r});
    check::dense(op, "g_v", g_v, Shape{paths, layer.n, layer.r});
  }

  // infer: the layer is blr_infer's, which may carry f16 scales and sign blocks.
  static void check_layer(std::string_view op, const BlrLayer<T>& layer, bool grads, bool infer = false) {
    check::positive(op, "layer m", layer.m);
    check::positive(op, "layer n", layer.n);
    check::positive(op, "layer r", layer.r);
    check::require(layer.r % 32 == 0, op, "rank {} is not a multiple of 32", layer.r);
    check::require(!layer.paths.empty(), op, "layer has no paths");
    const index_t words = sign_words(layer.r);
    for (std::size_t p = 0; p < layer.paths.size(); ++p) {
      const BlrPath<T>& path = layer.paths[p];
      const auto name = [p](const char* what) { return ::bitrank::format("path {} {}", p, what); };
      const bool vt_blocks = path.sign_vt_blocks.data != nullptr || path.sign_vt_blocks.rank() > 0;
      if (path.sign_blocks() || vt_blocks) {
        check::require(infer, op, "path {} has sign blocks, which only blr_infer reads", p);
        check::dense(op, name("sign_u_blocks"), path.sign_u_blocks, sign_blocks_u_shape(layer.m, layer.r));
        check::dense(op, name("sign_vt_blocks"), path.sign_vt_blocks, sign_blocks_vt_shape(layer.n, layer.r));
      }
      if (path.bitmaps() || !path.sign_blocks()) {
        check::dense(op, name("sign_u"), path.sign_u, Shape{layer.m, words});
        check::dense(op, name("sign_v"), path.sign_v, Shape{layer.n, words});
      }
      if (path.half_scales()) {
        check::require(infer, op, "path {} has f16 scales, which only blr_infer reads", p);
        check::require(!path.h.data && !path.l.data && !path.g.data, op,
                       "path {} has both f16 scales and h, l, g", p);
        check::dense(op, name("scales16"), path.scales16, Shape{layer.m + layer.r + layer.n});
        continue;
      }
      check::dense(op, name("h"), path.h, Shape{layer.m});
      check::dense(op, name("l"), path.l, Shape{layer.r});
      check::dense(op, name("g"), path.g, Shape{layer.n});
      if (grads) {
        check::dense(op, name("dh"), path.dh, Shape{layer.m});
        check::dense(op, name("dl"), path.dl, Shape{layer.r});
        check::dense(op, name("dg"), path.dg, Shape{layer.n});
      }
    }
  }

  // The token count of x [ntok][n].
  static index_t tokens(std::string_view op, CView<T> x, index_t n) {
    check::rank(op, "x", x, 2);
    check::dense(op, "x", x, Shape{x.dim(0), n});
    return x.dim(0);
  }

  static void check_saved(std::string_view op, const BlrLayer<T>& layer, index_t ntok, const BlrSaved<T>& saved) {
    const index_t paths = static_cast<index_t>(layer.paths.size());
    check::dense(op, "saved a", saved.a, Shape{paths, ntok, layer.r});
    if (saved.xs.data || saved.xs.rank() > 0) check::dense(op, "saved xs", saved.xs, Shape{ntok, layer.n});
    if (saved.planes.data || saved.planes.rank() > 0)
      check::dense(op, "saved planes", saved.planes, Shape{paths, (layer.m + layer.n) * layer.r});
  }

  static void check_grad_scale(std::string_view op, float grad_scale) {
    check::finite(op, "grad_scale", grad_scale);
    int e = 0;
    const bool pow2 = grad_scale > 0 && std::frexp(static_cast<double>(grad_scale), &e) == 0.5;
    check::require(pow2, op, "grad_scale must be a positive power of two, got {}", grad_scale);
  }
};

}  // namespace bitrank
