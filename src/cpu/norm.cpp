// CPU backend of RMSNorm (contract: include/bitrank/ops/norm.hpp).
//
// Rows run in parallel; the row reductions and the gain gradient's column
// sums accumulate in f64 (eight independent partial sums, so the loop
// vectorises without reassociating), the elementwise parts run in f32.
#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu/kernels.hpp"
#include "cpu/ops.hpp"

namespace bitrank::cpu {
namespace {

// Rows per task so that each task touches at least ~16k elements.
index_t row_grain(index_t d) { return std::max<index_t>(1, 16384 / std::max<index_t>(d, 1)); }

class CpuNormOps final : public NormOps<float> {
 public:
  explicit CpuNormOps(ThreadPool& pool) : pool_(pool) {}

 protected:
  void rmsnorm_forward_impl(CView<float> x, CView<float> w, GainStyle gain, float eps, View<float> y,
                            View<float> inv) override {
    if (gain == GainStyle::zero_centred)
      forward<true>(x, w, eps, y, inv);
    else
      forward<false>(x, w, eps, y, inv);
  }

  void rmsnorm_backward_impl(CView<float> x, CView<float> w, CView<float> inv, CView<float> dy, GainStyle gain,
                             View<float> dx) override {
    if (gain == GainStyle::zero_centred)
      backward<true>(x, w, inv, dy, dx);
    else
      backward<false>(x, w, inv, dy, dx);
  }

  // Each task owns a block of columns and walks every row over it.
  void rmsnorm_gain_grad_impl(CView<float> x, CView<float> inv, CView<float> dy, View<float> dw) override {
    const index_t n = x.dim(0), d = x.dim(1);
    pool_.parallel_for(
        d,
        [&](index_t j0, index_t j1) {
          std::vector<double> acc(static_cast<std::size_t>(j1 - j0), 0.0);
          for (index_t r = 0; r < n; ++r) {
            const float* xr = x.data + r * d + j0;
            const float* dyr = dy.data + r * d + j0;
            const double iv = inv[r];
            for (index_t j = 0; j < j1 - j0; ++j)
              acc[static_cast<std::size_t>(j)] += static_cast<double>(dyr[j]) * static_cast<double>(xr[j]) * iv;
          }
          for (index_t j = j0; j < j1; ++j)
            dw[j] = static_cast<float>(static_cast<double>(dw[j]) + acc[static_cast<std::size_t>(j - j0)]);
        },
        256);
  }

 private:
  template <bool kOnePlus>
  static float gain_of(float w) {
    if constexpr (kOnePlus) return 1.0f + w;
    return w;
  }

  template <bool kOnePlus>
  void forward(CView<float> x, CView<float> w, float eps, View<float> y, View<float> inv) {
    const index_t n = x.dim(0), d = x.dim(1);
    pool_.parallel_for(
        n,
        [&](index_t r0, index_t r1) {
          for (index_t r = r0; r < r1; ++r) {
            const float* xr = x.data + r * d;
            float* yr = y.data + r * d;
            const double ss = sum_f64(d, [&](index_t j) { return static_cast<double>(xr[j]) * xr[j]; });
            const float iv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(d) + eps));
            for (index_t j = 0; j < d; ++j) yr[j] = xr[j] * iv * gain_of<kOnePlus>(w[j]);
            inv[r] = iv;
          }
        },
        row_grain(d));
  }

  template <bool kOnePlus>
  void backward(CView<float> x, CView<float> w, CView<float> inv, CView<float> dy, View<float> dx) {
    const index_t n = x.dim(0), d = x.dim(1);
    pool_.parallel_for(
        n,
        [&](index_t r0, index_t r1) {
          for (index_t r = r0; r < r1; ++r) {
            const float* xr = x.data + r * d;
            const float* dyr = dy.data + r * d;
            float* dxr = dx.data + r * d;
            const double s = sum_f64(d, [&](index_t j) {
              return static_cast<double>(dyr[j]) * gain_of<kOnePlus>(w[j]) * xr[j];
            });
            const double iv = inv[r];
            const float coef = static_cast<float>(s / static_cast<double>(d) * iv * iv * iv);
            const float ivf = inv[r];
            for (index_t j = 0; j < d; ++j) dxr[j] = ivf * gain_of<kOnePlus>(w[j]) * dyr[j] - xr[j] * coef;
          }
        },
        row_grain(d));
  }

  ThreadPool& pool_;
};

}  // namespace

std::unique_ptr<NormOps<float>> make_norm_ops(ThreadPool& pool) { return std::make_unique<CpuNormOps>(pool); }

}  // namespace bitrank::cpu
