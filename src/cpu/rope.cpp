// CPU backend of the q/k norm + RoPE (contract: include/bitrank/ops/rope.hpp).
//
// Threads over rows; one (row, head) at a time with contiguous loops over
// head_dim. The gain gradient is summed per fixed block of rows into its
// own partial vector, and the partials are added in block order, so the
// result is the same for any number of threads.
#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu/kernels.hpp"
#include "cpu/ops.hpp"

namespace bitrank::cpu {
namespace {

constexpr index_t kGainBlocks = 64;  // row blocks of the gain-gradient partials

class CpuRopeOps final : public RopeOps<float> {
 public:
  explicit CpuRopeOps(ThreadPool& pool) : pool_(pool) {}

 protected:
  void rope_forward_impl(CView<float> x, CView<float> table, index_t heads, View<float> y) override {
    rotate(x, table, heads, 1.0f, y);
  }
  void rope_backward_impl(CView<float> dy, CView<float> table, index_t heads, View<float> dx) override {
    rotate(dy, table, heads, -1.0f, dx);  // Rᵀ: the same angle, negated
  }

  void qk_norm_rope_forward_impl(CView<float> x, CView<float> gain, CView<float> table, const QkNormRopeOptions& opt,
                                 View<float> y, View<float> inv_rms) override {
    const index_t n = x.dim(0), heads = opt.heads, hd = gain.dim(0);
    const index_t window = table.dim(0), half = table.dim(1);
    const float eps = opt.eps;
    const std::vector<float> w = effective_gain(gain, opt);
    pool_.parallel_for(
        n,
        [&](index_t r0, index_t r1) {
          std::vector<float> z(static_cast<std::size_t>(hd));
          for (index_t row = r0; row < r1; ++row) {
            const float* rot = table.data + (row % window) * half * 2;
            for (index_t u = 0; u < heads; ++u) {
              const float* xr = x.data + (row * heads + u) * hd;
              float* yr = y.data + (row * heads + u) * hd;
              const float inv = 1.0f / std::sqrt(dot_lanes(xr, xr, hd) / static_cast<float>(hd) + eps);
              for (index_t c = 0; c < hd; ++c) z[c] = xr[c] * inv * w[c];
              for (index_t i = 0; i < half; ++i) {
                const float cs = rot[2 * i], sn = rot[2 * i + 1];
                yr[i] = z[i] * cs - z[i + half] * sn;
                yr[i + half] = z[i] * sn + z[i + half] * cs;
              }
              for (index_t c = 2 * half; c < hd; ++c) yr[c] = z[c];
              inv_rms[row * heads + u] = inv;
            }
          }
        },
        std::max<index_t>(1, 4096 / std::max<index_t>(heads * hd, 1)));
  }

  void qk_norm_rope_backward_impl(CView<float> x, CView<float> gain, CView<float> table, CView<float> inv_rms,
                                  CView<float> dy, const QkNormRopeOptions& opt, View<float> dx,
                                  View<float> dgain) override {
    const index_t n = x.dim(0), heads = opt.heads, hd = gain.dim(0);
    const index_t window = table.dim(0), half = table.dim(1);
    const std::vector<float> w = effective_gain(gain, opt);
    const index_t blocks = std::min(n, kGainBlocks);
    std::vector<float> partial(static_cast<std::size_t>(blocks * hd), 0.0f);
    pool_.parallel_for(blocks, [&](index_t b0, index_t b1) {
      std::vector<float> g(static_cast<std::size_t>(hd)), gw(static_cast<std::size_t>(hd));
      for (index_t blk = b0; blk < b1; ++blk) {
        float* dg = partial.data() + blk * hd;
        for (index_t row = blk * n / blocks; row < (blk + 1) * n / blocks; ++row) {
          const float* rot = table.data + (row % window) * half * 2;
          for (index_t u = 0; u < heads; ++u) {
            const float* xr = x.data + (row * heads + u) * hd;
            const float* dyr = dy.data + (row * heads + u) * hd;
            float* dxr = dx.data + (row * heads + u) * hd;
            for (index_t i = 0; i < half; ++i) {
              const float cs = rot[2 * i], sn = rot[2 * i + 1];
              g[i] = dyr[i] * cs + dyr[i + half] * sn;
              g[i + half] = -dyr[i] * sn + dyr[i + half] * cs;
            }
            for (index_t c = 2 * half; c < hd; ++c) g[c] = dyr[c];
            for (index_t c = 0; c < hd; ++c) gw[c] = g[c] * w[c];
            const float inv = inv_rms[row * heads + u];
            const float coef = dot_lanes(gw.data(), xr, hd) / static_cast<float>(hd) * inv * inv * inv;
            for (index_t c = 0; c < hd; ++c) {
              dxr[c] = inv * gw[c] - xr[c] * coef;
              dg[c] += g[c] * xr[c] * inv;
            }
          }
        }
      }
    });
    for (index_t blk = 0; blk < blocks; ++blk)
      for (index_t c = 0; c < hd; ++c) dgain[c] += partial[static_cast<std::size_t>(blk * hd + c)];
  }

 private:
  // y = R(direction·angle)·x per (row, head), threads over rows.
  void rotate(CView<float> x, CView<float> table, index_t heads, float direction, View<float> y) {
    const index_t n = x.dim(0), hd = x.dim(1) / heads, window = table.dim(0), half = table.dim(1);
    pool_.parallel_for(
        n,
        [&](index_t r0, index_t r1) {
          for (index_t row = r0; row < r1; ++row) {
            const float* rot = table.data + (row % window) * half * 2;
            for (index_t u = 0; u < heads; ++u) {
              const float* xr = x.data + (row * heads + u) * hd;
              float* yr = y.data + (row * heads + u) * hd;
              for (index_t i = 0; i < half; ++i) {
                const float cs = rot[2 * i], sn = direction * rot[2 * i + 1];
                yr[i] = xr[i] * cs - xr[i + half] * sn;
                yr[i + half] = xr[i] * sn + xr[i + half] * cs;
              }
              for (index_t c = 2 * half; c < hd; ++c) yr[c] = xr[c];
            }
          }
        },
        std::max<index_t>(1, 4096 / std::max<index_t>(x.dim(1), 1)));
  }

  static std::vector<float> effective_gain(CView<float> gain, const QkNormRopeOptions& opt) {
    std::vector<float> w(gain.data, gain.data + gain.dim(0));
    if (opt.gain == GainStyle::zero_centred)
      for (auto& v : w) v += 1.0f;
    return w;
  }

  ThreadPool& pool_;
};

}  // namespace

std::unique_ptr<RopeOps<float>> make_rope_ops(ThreadPool& pool) { return std::make_unique<CpuRopeOps>(pool); }

}  // namespace bitrank::cpu
