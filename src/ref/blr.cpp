// f64 reference of the BLR layer (contract: include/bitrank/ops/blr.hpp).
// Exact arithmetic in f64: no f16 staging, so grad_scale changes nothing.
// It follows DESIGN §1 literally (dh = Σ_t dy⊙c, dg = Σ_t x⊙dx', the
// backward recomputing c from the saved a), independently of the E_U / E_V
// sums the f32 backends take dh and dg from.
#include <algorithm>
#include <vector>

#include "ref/ops.hpp"

namespace bitrank::ref {
namespace {

// The ±1 matrix [rows][r] of a sign bitmap.
std::vector<double> signs_of(CView<std::uint32_t> bits, index_t r) {
  const index_t rows = bits.dim(0), words = bits.dim(1);
  std::vector<double> s(static_cast<std::size_t>(rows * r));
  for (index_t i = 0; i < rows; ++i)
    for (index_t k = 0; k < r; ++k) s[static_cast<std::size_t>(i * r + k)] = (bits[i * words + k / 32] >> (k % 32)) & 1u ? 1.0 : -1.0;
  return s;
}

class RefBlrOps final : public BlrOps<double> {
 protected:
  void blr_forward_impl(const BlrLayer<double>& layer, CView<double> x, View<double> y,
                        const BlrSaved<double>& saved) override {
    const index_t m = layer.m, n = layer.n, r = layer.r, ntok = x.dim(0);
    for (index_t i = 0; i < ntok * m; ++i) y[i] = 0;
    if (saved.xs.data)
      for (index_t i = 0; i < ntok * n; ++i) saved.xs.data[i] = to_f16(static_cast<float>(x[i]));
    for (std::size_t p = 0; p < layer.paths.size(); ++p) {
      const BlrPath<double>& path = layer.paths[p];
      const auto su = signs_of(path.sign_u, r), sv = signs_of(path.sign_v, r);
      double* a = saved.a.data + static_cast<index_t>(p) * ntok * r;
      for (index_t t = 0; t < ntok; ++t) {
        double* at = a + t * r;  // a = (x⊙g)·S_V
        for (index_t k = 0; k < r; ++k) at[k] = 0;
        for (index_t j = 0; j < n; ++j) {
          const double xg = x[t * n + j] * path.g[j];
          for (index_t k = 0; k < r; ++k) at[k] += xg * sv[static_cast<std::size_t>(j * r + k)];
        }
        for (index_t i = 0; i < m; ++i) {  // c = (a⊙ℓ)·S_Uᵀ, y += h⊙c
          double s = 0;
          for (index_t k = 0; k < r; ++k) s += at[k] * path.l[k] * su[static_cast<std::size_t>(i * r + k)];
          y[t * m + i] += path.h[i] * s;
        }
      }
    }
  }

  // The forward, its a kept in a local buffer; f16 scales read as their exact values.
  void blr_infer_impl(const BlrLayer<double>& given, CView<double> x, View<double> y) override {
    std::vector<double> scales;
    std::vector<BlrPath<double>> own;
    const BlrLayer<double> layer = with_wide_scales(
        given, own,
        [&](index_t count) {
          scales.resize(static_cast<std::size_t>(count));
          return scales.data();
        },
        [](const f16* src, index_t count, double* dst) {
          for (index_t i = 0; i < count; ++i) dst[i] = to_f32(src[i]);
        });
    const index_t paths = static_cast<index_t>(layer.paths.size()), ntok = x.dim(0);
    std::vector<double> a(static_cast<std::size_t>(paths * ntok * layer.r));
    blr_forward_impl(layer, x, y, BlrSaved<double>{View<double>(a.data(), Shape{paths, ntok, layer.r})});
  }

  void blr_backward_impl(const BlrLayer<double>& layer, CView<double> x, CView<double> dy,
                         const BlrSaved<double>& saved, View<double> dx, float, View<double> b_out) override {
    const index_t m = layer.m, n = layer.n, r = layer.r, ntok = x.dim(0);
    for (index_t i = 0; i < ntok * n; ++i) dx[i] = 0;
    std::vector<double> b(static_cast<std::size_t>(r));
    for (std::size_t p = 0; p < layer.paths.size(); ++p) {
      const BlrPath<double>& path = layer.paths[p];
      const auto su = signs_of(path.sign_u, r), sv = signs_of(path.sign_v, r);
      const double* a = saved.a.data + static_cast<index_t>(p) * ntok * r;
      for (index_t t = 0; t < ntok; ++t) {
        for (index_t i = 0; i < m; ++i) {  // c = (a⊙ℓ)·S_Uᵀ, dh += dy⊙c
          double c = 0;
          for (index_t k = 0; k < r; ++k) c += a[t * r + k] * path.l[k] * su[static_cast<std::size_t>(i * r + k)];
          path.dh[i] += dy[t * m + i] * c;
        }
        std::fill(b.begin(), b.end(), 0.0);  // b = (dy⊙h)·S_U
        for (index_t i = 0; i < m; ++i) {
          const double dyh = dy[t * m + i] * path.h[i];
          for (index_t k = 0; k < r; ++k) b[static_cast<std::size_t>(k)] += dyh * su[static_cast<std::size_t>(i * r + k)];
        }
        for (index_t k = 0; k < r; ++k) {
          path.dl[k] += a[t * r + k] * b[static_cast<std::size_t>(k)];
          if (b_out.data) b_out[(static_cast<index_t>(p) * ntok + t) * r + k] = b[static_cast<std::size_t>(k)];
        }
        for (index_t j = 0; j < n; ++j) {  // dx' = (b⊙ℓ)·S_Vᵀ
          double s = 0;
          for (index_t k = 0; k < r; ++k) s += b[static_cast<std::size_t>(k)] * path.l[k] * sv[static_cast<std::size_t>(j * r + k)];
          path.dg[j] += x[t * n + j] * s;
          dx[t * n + j] += path.g[j] * s;
        }
      }
    }
  }

  void blr_sign_grad_impl(const BlrLayer<double>& layer, CView<double> x, CView<double> dy, CView<double> a,
                          CView<double> b, float, View<double> g_u, View<double> g_v) override {
    const index_t m = layer.m, n = layer.n, r = layer.r, ntok = x.dim(0);
    for (std::size_t p = 0; p < layer.paths.size(); ++p) {
      const BlrPath<double>& path = layer.paths[p];
      const index_t pi = static_cast<index_t>(p);
      const double* ap = a.data + pi * ntok * r;
      const double* bp = b.data + pi * ntok * r;
      for (index_t i = 0; i < m; ++i) {  // G_U[i][k] = h_i·ℓ_k·Σ_t dy_ti·a_tk
        double* gu = g_u.data + (pi * m + i) * r;
        for (index_t k = 0; k < r; ++k) gu[k] = 0;
        for (index_t t = 0; t < ntok; ++t)
          for (index_t k = 0; k < r; ++k) gu[k] += dy[t * m + i] * ap[t * r + k];
        for (index_t k = 0; k < r; ++k) gu[k] *= path.h[i] * path.l[k];
      }
      for (index_t j = 0; j < n; ++j) {  // G_V[j][k] = g_j·ℓ_k·Σ_t x_tj·b_tk
        double* gv = g_v.data + (pi * n + j) * r;
        for (index_t k = 0; k < r; ++k) gv[k] = 0;
        for (index_t t = 0; t < ntok; ++t)
          for (index_t k = 0; k < r; ++k) gv[k] += x[t * n + j] * bp[t * r + k];
        for (index_t k = 0; k < r; ++k) gv[k] *= path.g[j] * path.l[k];
      }
    }
  }
};

}  // namespace

std::unique_ptr<BlrOps<double>> make_blr_ops() { return std::make_unique<RefBlrOps>(); }

}  // namespace bitrank::ref
